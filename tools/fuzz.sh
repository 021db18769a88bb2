#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined) and runs each
# for a bounded time on a seed corpus made from the test fixtures and the adversarial corpus.
#   bash tools/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
# A finding (crash, leak, timeout, out of memory) fails the script; its input is copied to
# tests/data/fuzz/<target>-<name>, which the unit suite replays ("[fuzz-findings]").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
secs=${1:-60}
out=${PTREAD_FUZZ_BUILD:-$root/build-test/fuzz}
mkdir -p "$out"
cxx=${CXX_FUZZ:-clang++}
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -DPTREAD_WITH_ZLIB=1 -Iinclude)

# Seeds: the small fixtures (whole files), and their pickles (for the VM target).
seeds=$out/seeds
rm -rf "$seeds"; mkdir -p "$seeds/checkpoint" "$seeds/zip" "$seeds/pickle" "$seeds/safetensors"
find tests/fixtures -maxdepth 1 -type f \( -name '*.pt' -o -name '*.ptl' -o -name '*.pth' \) -size -64k \
  -exec cp {} "$seeds/checkpoint/" \;
# ... and the crafted files of the adversarial corpus (every rebuild call, sparse layout,
# legacy and zip corner torch reads or refuses), prefixed so no name collides.
for f in tests/data/adversarial/*.pt; do
  if [[ $(stat -c %s "$f") -lt 65536 ]]; then cp "$f" "$seeds/checkpoint/adv_$(basename "$f")"; fi
done
cp "$seeds"/checkpoint/* "$seeds/zip/"
# bare pickles (pickle.dump, nested archives) and sharded sets' shards, as whole files
for f in tests/fixtures/bare/*.pkl tests/fixtures/bare/*.pt tests/fixtures/sharded/*/*.bin; do
  if [[ -f $f && $(stat -c %s "$f") -lt 65536 ]]; then cp "$f" "$seeds/checkpoint/bare_$(basename "$f")"; fi
done
# safetensors: the fixtures and the small real files whole (for both targets), and their
# headers alone (for the header target).
for f in tests/fixtures/safetensors/*.safetensors ../shared/corpus/safetensors/files/*.safetensors; do
  if [[ -f $f && $(stat -c %s "$f") -lt 65536 ]]; then
    cp "$f" "$seeds/safetensors/"
    cp "$f" "$seeds/checkpoint/st_$(basename "$f")"
  fi
done
python3 - "$seeds/safetensors" <<'PY'
import os, struct, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    data = open(os.path.join(d, f), "rb").read()
    if len(data) >= 8:
        n = struct.unpack("<Q", data[:8])[0]
        if n <= len(data) - 8:
            open(os.path.join(d, "header_" + f), "wb").write(data[8:8 + n])
PY
python3 - "$seeds/checkpoint" "$seeds/pickle" <<'PY'
import os, sys, zipfile, zlib
src, dst = sys.argv[1], sys.argv[2]
for f in sorted(os.listdir(src)):
    p = os.path.join(src, f)
    try:
        if zipfile.is_zipfile(p):
            with zipfile.ZipFile(p) as z:
                for n in z.namelist():
                    if n.endswith(".pkl"):
                        data = z.read(n)
                        with open(os.path.join(dst, f + "-" + n.replace("/", "_")), "wb") as o:
                            o.write(data)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, zlib.error):
        pass  # (a damaged archive of the adversarial corpus: a seed for the other targets)
PY

# One job per target (build, then fuzz), as many at a time as there are cores
# (tools/jobs.sh): each fuzzer runs its full time on a core of its own, and CI waits for two
# targets' builds and runs instead of three. Reports are printed in order at the end.
fuzz_target() {  # target: fails on a build error or a finding
  local target=$1
  echo "== fuzz_$target: building"
  "$cxx" "${flags[@]}" "tests/fuzz/fuzz_$target.cpp" -lz -o "$out/fuzz_$target"
  local work=$out/corpus_$target
  mkdir -p "$work" "$out/artifacts"
  echo "== fuzz_$target: ${secs}s"
  if ! "$out/fuzz_$target" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
      -dict=tests/fuzz/ptread.dict -artifact_prefix="$out/artifacts/fuzz_$target-" -print_final_stats=1 \
      "$work" "$seeds/$target" 2>"$out/fuzz_$target.log"; then
    tail -40 "$out/fuzz_$target.log"
    mkdir -p tests/data/fuzz
    for a in "$out"/artifacts/fuzz_"$target"-*; do
      [[ -f $a ]] && cp "$a" "tests/data/fuzz/$(basename "$a")" && echo "finding saved: tests/data/fuzz/$(basename "$a")"
    done
    return 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/fuzz_$target.log" || true
}

# shellcheck source=tools/jobs.sh
source "$root/tools/jobs.sh"
jobs_init "$out/jobs"
for target in zip pickle checkpoint safetensors; do
  jobs_start "fuzz_$target" fuzz_target "$target"
done
jobs_finish
