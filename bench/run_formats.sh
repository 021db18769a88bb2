#!/usr/bin/env bash
# Opening safetensors files and sharded sets, side by side in one run:
#   - many.safetensors (100,000 tensors): ptread against a Python user's way without the
#     safetensors package (json.loads of the header + numpy.memmap views), and against
#     ptread's own .pt path on many.pt (the same tensors);
#   - big.safetensors (1 GiB, 16 tensors): ptread's open + listing;
#   - shards4/ (big's tensors in 4 shards) and llama4/ (a Llama-7B's 291 tensor names in 4
#     shards): each set against the sum of its shards' opens, interleaved in one process
#     (median of 2,000 each).
#   bash bench/run_formats.sh [BUILD_DIR] [DATA_DIR]
# Needs a Release build and numpy; writes the inputs on first use (~2.1 GiB, and many.pt
# with torch by make_inputs.py).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
data=${2:-/tmp/ptread-bench}
py=${PTREAD_TORCH_PYTHON:-/usr/bin/python3}
"$py" "$root/bench/make_inputs.py" "$data" >/dev/null
"$py" "$root/bench/make_format_inputs.py" "$data" >/dev/null
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
open_ms() {  # median ms of N (default 20) in-process opens + listings (bench/open_bench.cpp)
  cat "$1"/* "$1" >/dev/null 2>&1 || true  # warm page cache
  "$build/bench/open_bench" "$1" "${2:-20}" 1 | awk '{print $3}'
}
st=$(open_ms "$data/many.safetensors")
pt=$(open_ms "$data/many.pt")
np_many=$("$py" "$root/bench/numpy_safetensors.py" "$data/many.safetensors" 5 | awk '{print $3}')
big=$(open_ms "$data/big.safetensors")
np_big=$("$py" "$root/bench/numpy_safetensors.py" "$data/big.safetensors" 5 | awk '{print $3}')
# The set and its shards: 0.1 ms opens, which drift by a third between processes, so one
# process opens the set and then each shard alone, 2,000 times (open_bench --set).
cat "$data"/shards4/* >/dev/null
read -r _ _ set_ms sum _ _ < <("$build/bench/open_bench" --set "$data/shards4" 2000)
cat "$data"/llama4/* >/dev/null
read -r _ _ llama_ms llama_sum _ _ < <("$build/bench/open_bench" --set "$data/llama4" 2000)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
# Each row: ptread's open + listing (median ms), its baseline in the same run, baseline/ptread.
printf '%-34s %12s %-34s %12s %10s\n' "ptread (median ms of 20)" ms baseline ms ratio
printf '%-34s %12s %-34s %12s %10s\n' "many.safetensors (100,000 tensors)" "$st" "json.loads + numpy.memmap" "$np_many" "$(ratio "$np_many" "$st")"
printf '%-34s %12s %-34s %12s %10s\n' "many.safetensors (100,000 tensors)" "$st" "ptread on many.pt (same tensors)" "$pt" "$(ratio "$pt" "$st")"
printf '%-34s %12s %-34s %12s %10s\n' "big.safetensors (1 GiB, 16)" "$big" "json.loads + numpy.memmap" "$np_big" "$(ratio "$np_big" "$big")"
# (the set's row: set / sum, the issue's bound being 1.2)
printf '%-34s %12s %-34s %12s %10s\n' "shards4/ (the 1 GiB in 4 shards)" "$set_ms" "its 4 shards' opens, summed" "$sum" "set/sum $(ratio "$set_ms" "$sum")"
printf '%-34s %12s %-34s %12s %10s\n' "llama4/ (291 tensors in 4 shards)" "$llama_ms" "its 4 shards' opens, summed" "$llama_sum" "set/sum $(ratio "$llama_ms" "$llama_sum")"
