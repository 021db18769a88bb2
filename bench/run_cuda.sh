#!/usr/bin/env bash
# ptread's CUDA upload and Linear against pinned cudaMemcpy, torch.load(map_location="cuda")
# and cuBLAS (torch.nn.functional.linear), side by side in one run, on a GPU machine.
#   bash bench/run_cuda.sh [BUILD_DIR] [DATA_DIR] [GIB]
# Needs a Release build with CUDA (cmake --build BUILD_DIR --target cuda_bench) and torch 2.x
# with CUDA (PTREAD_TORCH_PYTHON, default python3). Writes the inputs on first use: GIB GiB
# (default 4) plus 96 MiB in DATA_DIR (default /tmp/ptread-cuda-bench).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
data=${2:-/tmp/ptread-cuda-bench}
gib=${3:-4}
py=${PTREAD_TORCH_PYTHON:-python3}
mapfile -t files < <("$py" "$root/bench/make_cuda_inputs.py" "$data" "$gib")
upload=${files[0]} linear=${files[1]}
cat "$upload" "$linear" >/dev/null  # page cache warm for both sides
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$build/bench/cuda_bench" "$upload" "$linear" >"$tmp/ptread.txt"
"$py" "$root/bench/cuda_torch.py" "$upload" "$linear" >"$tmp/torch.txt"
grep '^#' "$tmp/ptread.txt" "$tmp/torch.txt" | sed 's/^[^#]*# /# /'

cat "$tmp/ptread.txt" "$tmp/torch.txt" | grep -v '^#' | awk '
{ v[$1] = $2 }
function f(a, fmt) { return (a in v) ? sprintf(fmt, v[a]) : "-" }
function r(a, b) { return (a in v) && (b in v) && v[b] > 0 ? sprintf("%.2fx", v[a] / v[b]) : "-" }
END {
  print ""
  printf "Upload of %s GiB (GB/s; RSS growth: peak host memory during the load minus before, MiB)\n", f("upload.ring4x16.gib", "%.2f")
  printf "%-22s %8s %12s %10s\n", "", "GB/s", "RSS growth", "ring MiB"
  printf "%-22s %8s %12s %10s\n", "pinned cudaMemcpy", f("pinned_h2d_gbps", "%.2f"), "", ""
  for (k = 1; k <= 2; k++) {
    t = k == 1 ? "ring4x16" : "ring4x64"
    printf "%-22s %8s %12s %10s\n", "ptread " t, f("upload." t ".gbps", "%.2f"), f("upload." t ".rss_growth_mib", "%.0f"), f("upload." t ".ring_mib", "%.0f")
  }
  printf "%-22s %8s %12s\n", "torch.load", f("torch_load.gbps", "%.2f"), f("torch_load.rss_growth_mib", "%.0f")
  printf "%-22s %8s %12s\n", "torch.load(mmap=True)", f("torch_load_mmap.gbps", "%.2f"), f("torch_load_mmap.rss_growth_mib", "%.0f")
  printf "ptread ring4x16 / pinned: %s   / torch.load: %s   / torch.load(mmap): %s   (goals: 0.8x, 3x; growth <= ring + 32 MiB)\n",
    r("upload.ring4x16.gbps", "pinned_h2d_gbps"), r("upload.ring4x16.gbps", "torch_load.gbps"), r("upload.ring4x16.gbps", "torch_load_mmap.gbps")
  print ""
  printf "Linear y = x W^T + b, N = K = 4096, ms (bound: W, x, y at the d2d bandwidth of %s GB/s)\n", f("d2d_gbps", "%.0f")
  printf "%-5s %-5s %10s %10s %10s %10s %12s %10s\n", "dtype", "M", "ptread", "cuBLAS", "bound", "TFLOP/s", "cuBLAS/ptr", "bound/ptr"
  for (d = 1; d <= 2; d++) for (mi = 0; mi < 4; mi++) {
    dt = d == 1 ? "f32" : "bf16"; m = mi == 0 ? 1 : mi == 1 ? 8 : mi == 2 ? 64 : 4096
    b = "linear." dt ".m" m
    printf "%-5s %-5s %10s %10s %10s %10s %12s %10s\n", dt, m, f(b ".ptread_ms", "%.4f"), f(b ".torch_ms", "%.4f"), f(b ".bound_ms", "%.4f"),
      f(b ".ptread_tflops", "%.2f"), r(b ".torch_ms", b ".ptread_ms"), r(b ".bound_ms", b ".ptread_ms")
  }
  print "(goals: M <= 8 bound/ptr >= 0.7 and cuBLAS/ptr >= 1.0; M = 4096 cuBLAS/ptr >= 0.75. BF16 cuBLAS takes BF16 x on tensor"
  print " cores; ptread takes F32 x, as its CPU path does)"
}'
