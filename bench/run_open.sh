#!/usr/bin/env bash
# Opening checkpoints: ptread against torch.load, side by side in one run.
#   bash bench/run_open.sh [BUILD_DIR] [DATA_DIR]
# Needs a Release build (cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build)
# and Debian's python3-torch. Writes the inputs with torch on first use (~1.1 GiB).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
data=${2:-/tmp/ptread-bench}
py=${PTREAD_TORCH_PYTHON:-/usr/bin/python3}
"$py" "$root/bench/make_inputs.py" "$data" >/dev/null

ms_of_command() {  # median wall ms of a command over N runs (its process start included)
  # Bash's own clock ($EPOCHREALTIME, bash 5): timing with $(date) would add the start of a
  # date process (1-3 ms) to every run.
  local n=$1; shift
  local ts=()
  for ((i = 0; i < n; i++)); do
    local t0=${EPOCHREALTIME/[.,]/}
    "$@" >/dev/null
    local t1=${EPOCHREALTIME/[.,]/}
    ts+=($(( t1 - t0 )))
  done
  printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]/1000}'
}

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "torch: $("$py" -c 'import torch; print(torch.__version__)')"
# open: in-process open + listing, one thread (the default) and two (Options::threads = 2:
# the zip directory walked beside the pickle); ls: the CLI, which opens with every hardware
# thread.
printf '%-10s %10s %10s %10s %14s %10s %10s %10s\n' file open_ms open2_ms ls_ms torch_load_ms "x(open)" "x(open2)" "x(ls)"
for f in big.pt many.pt; do
  cat "$data/$f" >/dev/null  # warm page cache for both readers
  read -r _ _ open_ms _ count < <("$build/bench/open_bench" "$data/$f" 20 1)
  read -r _ _ open2_ms _ _ < <("$build/bench/open_bench" "$data/$f" 20 2)
  ls_ms=$(ms_of_command 20 "$build/ptread" ls "$data/$f")
  read -r _ _ torch_ms _ < <("$py" "$root/bench/torch_load.py" "$data/$f" 3)
  x() { awk -v a="$torch_ms" -v b="$1" 'BEGIN{printf "%.0fx", a/b}'; }
  printf '%-10s %10s %10s %10s %14s %10s %10s %10s\n' "$f" "$open_ms" "$open2_ms" "$ls_ms" "$torch_ms" \
    "$(x "$open_ms")" "$(x "$open2_ms")" "$(x "$ls_ms")"
done
