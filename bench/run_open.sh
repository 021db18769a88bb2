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

# Median wall ms of a command over n runs (its process start included), each run after `gap`
# seconds of idle (0: back to back). On VMs whose host takes back freed memory
# (virtio-balloon free page reporting), memory the kernel hands out after a few idle seconds
# costs much more to fault in than memory another process freed just before.
ms_of_command() {
  # Bash's own clock ($EPOCHREALTIME, bash 5): timing with $(date) would add the start of a
  # date process (1-3 ms) to every run.
  local n=$1 gap=$2; shift 2
  local ts=()
  for ((i = 0; i < n; i++)); do
    [ "$gap" = 0 ] || sleep "$gap"
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
# thread, 20 runs back to back; ls_cold: 5 runs, each after 3 s of idle.
printf '%-10s %10s %10s %10s %11s %14s %10s %10s %10s %11s\n' file open_ms open2_ms ls_ms ls_cold_ms torch_load_ms \
  "x(open)" "x(open2)" "x(ls)" "x(ls_cold)"
for f in big.pt many.pt; do
  cat "$data/$f" >/dev/null  # warm page cache for both readers
  read -r _ _ open_ms _ count < <("$build/bench/open_bench" "$data/$f" 20 1)
  read -r _ _ open2_ms _ _ < <("$build/bench/open_bench" "$data/$f" 20 2)
  ls_ms=$(ms_of_command 20 0 "$build/ptread" ls "$data/$f")
  ls_cold_ms=$(ms_of_command 5 3 "$build/ptread" ls "$data/$f")
  read -r _ _ torch_ms _ < <("$py" "$root/bench/torch_load.py" "$data/$f" 3)
  x() { awk -v a="$torch_ms" -v b="$1" 'BEGIN{printf "%.0fx", a/b}'; }
  printf '%-10s %10s %10s %10s %11s %14s %10s %10s %10s %11s\n' "$f" "$open_ms" "$open2_ms" "$ls_ms" "$ls_cold_ms" \
    "$torch_ms" "$(x "$open_ms")" "$(x "$open2_ms")" "$(x "$ls_ms")" "$(x "$ls_cold_ms")"
done
