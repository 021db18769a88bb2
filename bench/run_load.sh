#!/usr/bin/env bash
# Loading at the machine's limits: ptread against torch.load and in-process baselines (memcpy
# into fresh and into touched memory, pread), side by side in one run.
#   bash bench/run_load.sh [BUILD_DIR] [DATA_DIR]
# Needs a Release build (cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build
# --target load_bench) and Debian's python3-torch. Writes the inputs with torch on first use
# (~6.1 GiB in DATA_DIR, default /tmp/ptread-load-bench). Every measurement runs in a fresh
# process; the page cache is warm for all of them (the files are read once first).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
data=${2:-/tmp/ptread-load-bench}
py=${PTREAD_TORCH_PYTHON:-/usr/bin/python3}
bench=$build/bench/load_bench
"$py" "$root/bench/make_load_inputs.py" "$data" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "torch: $("$py" -c 'import torch; print(torch.__version__)'), transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?')"
for f in big2g.pt big2g_legacy.pt big2g_legacy_odd.pt many10k.pt many100k.pt; do cat "$data/$f" >/dev/null; done

run() {  # PREFIX COMMAND...: the command's "key value" lines, keys prefixed
  local prefix=$1; shift
  "$@" | sed "s/^/$prefix./" >>"$tmp/all.txt"
}
run big "$bench" open "$data/big2g.pt" 20
run big "$bench" read "$data/big2g.pt" 1 5
run big "$bench" read "$data/big2g.pt" 2 5
run big "$bench" clone "$data/big2g.pt" 5
run big "$bench" floor "$data/big2g.pt" 5
run big "$py" "$root/bench/torch_load_mem.py" "$data/big2g.pt" 3
run legacy "$bench" open "$data/big2g_legacy.pt" 20
run legacy "$py" "$root/bench/torch_load_mem.py" "$data/big2g_legacy.pt" 3
run odd "$bench" open "$data/big2g_legacy_odd.pt" 5
run odd "$bench" read "$data/big2g_legacy_odd.pt" 2 5
run m10k "$bench" open "$data/many10k.pt" 20
run m10k "$py" "$root/bench/torch_load_mem.py" "$data/many10k.pt" 5
run m100k "$bench" open "$data/many100k.pt" 10
run m100k "$py" "$root/bench/torch_load_mem.py" "$data/many100k.pt" 3
run conv "$bench" convert 256 9
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -n ${PTREAD_BENCH_RAW:-} ]] && cp "$tmp/all.txt" "$PTREAD_BENCH_RAW"

awk '
{ v[$1] = $2 }
function f(k, d) { return (k in v) ? sprintf("%." d "f", v[k]) : "-" }
function x(a, b) { return (a in v) && (b in v) && v[b] > 0 ? sprintf("%.2fx", v[a] / v[b]) : "-" }
function pct(a, b) { return (a in v) && (b in v) && v[b] > 0 ? sprintf("%.3f%%", 100 * v[a] / v[b]) : "-" }
function goal(ok) { return ok ? "met" : "NOT met" }
END {
  mib = v["big.open.tensor_mib"]
  print ""
  print "1. Open and list big2g.pt (2 GiB, 64 tensors, mmap): medians, ms"
  printf "   ptread %s | memcpy of its bytes into fresh memory %s, into touched memory %s | torch.load %s\n",
    f("big.open.ms", 3), f("big.floor.memcpy_fresh.ms", 1), f("big.floor.memcpy_touched.ms", 1), f("big.torch.ms", 1)
  printf "   open / memcpy (fresh): %s, (touched): %s [goal <= 2%%: %s]; x torch %s [goal >= 300x: %s]\n",
    pct("big.open.ms", "big.floor.memcpy_fresh.ms"), pct("big.open.ms", "big.floor.memcpy_touched.ms"),
    goal(v["big.open.ms"] <= 0.02 * v["big.floor.memcpy_touched.ms"]),
    x("big.torch.ms", "big.open.ms"), goal(v["big.torch.ms"] >= 300 * v["big.open.ms"])
  printf "   RSS growth while open: anon %s MiB [goal <= 16: %s], file-backed %s MiB\n",
    f("big.open.anon_mib", 1), goal(v["big.open.anon_mib"] <= 16), f("big.open.file_mib", 1)
  print ""
  print "2. Materialize every tensor of big2g.pt into owned buffers: medians, ms"
  printf "   read mode, 1 thread %s, 2 threads %s | clone() from mmap %s\n", f("big.read.t1.ms", 1), f("big.read.t2.ms", 1), f("big.clone.ms", 1)
  printf "   floors: memcpy into fresh memory %s (huge pages: %s), into touched memory %s; pread into fresh %s, into touched %s | torch.load %s\n",
    f("big.floor.memcpy_fresh.ms", 1), f("big.floor.memcpy_fresh_thp.ms", 1), f("big.floor.memcpy_touched.ms", 1),
    f("big.floor.pread_fresh.ms", 1), f("big.floor.pread_touched.ms", 1), f("big.torch.ms", 1)
  best = v["big.read.t2.ms"] < v["big.read.t1.ms"] ? "big.read.t2.ms" : "big.read.t1.ms"
  printf "   read (best of 1, 2 threads) / memcpy-fresh floor: %s [goal <= 1.2x: %s]; / memcpy-touched: %s; x torch %s [goal >= 1.5x: %s]\n",
    x(best, "big.floor.memcpy_fresh.ms"), goal(v[best] <= 1.2 * v["big.floor.memcpy_fresh.ms"]),
    x(best, "big.floor.memcpy_touched.ms") ", / memcpy-fresh (huge pages): " x(best, "big.floor.memcpy_fresh_thp.ms"), x("big.torch.ms", best), goal(v["big.torch.ms"] >= 1.5 * v[best])
  printf "   peak RSS growth: read mode %s MiB (%s of the tensor bytes; goal <= 1.02x + 32 MiB: %s), torch.load %s MiB (%s)\n",
    f("big.read.t1.peak_mib", 0), sprintf("%.3fx", v["big.read.t1.peak_mib"] / mib),
    goal(v["big.read.t1.peak_mib"] <= 1.02 * mib + 32 && v["big.read.t2.peak_mib"] <= 1.02 * mib + 32),
    f("big.torch.peak_mib", 0), sprintf("%.3fx", v["big.torch.peak_mib"] / mib)
  print ""
  print "3. Many small tensors: open and list (ptread, in-process) against torch.load, medians"
  for (i = 1; i <= 2; i++) {
    k = i == 1 ? "m10k" : "m100k"
    n = v[k ".open.tensors"]
    printf "   %7d tensors: ptread %s ms (%s us a tensor [goal about 1]), torch.load %s ms, x torch %s [goal >= 20x: %s]\n",
      n, f(k ".open.ms", 2), sprintf("%.2f", 1000 * v[k ".open.ms"] / n), f(k ".torch.ms", 1),
      x(k ".torch.ms", k ".open.ms"), goal(v[k ".torch.ms"] >= 20 * v[k ".open.ms"])
  }
  print ""
  print "4. F16 / BF16 -> F32 (copy_to), 256 MiB of F32 output, into touched memory: medians, ms (" v["conv.convert.isa"] ")"
  printf "   memcpy of 256 MiB %s | F16 %s (portable C++: %s) | BF16 %s (portable: %s)\n", f("conv.convert.memcpy.ms", 1),
    f("conv.convert.F16.best.ms", 1), f("conv.convert.F16.generic.ms", 1), f("conv.convert.BF16.best.ms", 1), f("conv.convert.BF16.generic.ms", 1)
  printf "   speed as a share of memcpy speed: F16 %s, BF16 %s [goal >= 0.8x: %s]\n",
    x("conv.convert.memcpy.ms", "conv.convert.F16.best.ms"), x("conv.convert.memcpy.ms", "conv.convert.BF16.best.ms"),
    goal(v["conv.convert.memcpy.ms"] >= 0.8 * v["conv.convert.F16.best.ms"] && v["conv.convert.memcpy.ms"] >= 0.8 * v["conv.convert.BF16.best.ms"])
  print ""
  print "5. Legacy format, 2 GiB, 64 tensors (mmap)"
  printf "   storages aligned: open %s ms (zip: %s ms), anon RSS growth %s MiB (zero-copy) [goal: %s]; torch.load %s ms, x torch %s\n",
    f("legacy.open.ms", 3), f("big.open.ms", 3), f("legacy.open.anon_mib", 1),
    goal(v["legacy.open.anon_mib"] <= 16 && v["legacy.open.ms"] <= 2 * v["big.open.ms"] + 0.1), f("legacy.torch.ms", 1), x("legacy.torch.ms", "legacy.open.ms")
  printf "   storages at odd addresses (copied on open): open %s ms (1 thread), read mode with 2 threads %s ms, anon growth %s MiB\n",
    f("odd.open.ms", 1), f("odd.read.t2.ms", 1), f("odd.open.anon_mib", 0)
  print ""
  printf "6. Two threads against one (read mode, big2g.pt): %s of the one-thread time [goal: never slower: %s]\n",
    x("big.read.t2.ms", "big.read.t1.ms"), goal(v["big.read.t2.ms"] <= 1.05 * v["big.read.t1.ms"])
}' "$tmp/all.txt"
