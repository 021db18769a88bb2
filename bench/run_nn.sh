#!/usr/bin/env bash
# The nn layers against torch 1.13 and raw OpenBLAS, side by side in one run.
#   bash bench/run_nn.sh [BUILD_DIR] [DATA_DIR]
# Needs a Release build with ptread::openblas (libopenblas-dev) and Debian's python3-torch.
# Writes the inputs with torch on first use (~2 GiB in DATA_DIR, default /tmp/ptread-nn-bench).
# Times are medians in ms (warm: every case runs once before it is timed), over
# PTREAD_BENCH_ROUNDS (default 3) rounds, each alternating ptread and torch group by group.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
data=${2:-/tmp/ptread-nn-bench}
py=${PTREAD_TORCH_PYTHON:-/usr/bin/python3}
file=$("$py" "$root/bench/make_nn_inputs.py" "$data")
cat "$file" >/dev/null  # page cache warm for both sides
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "torch: $("$py" -c 'import torch; print(torch.__version__)'), OpenBLAS: $(pkg-config --modversion openblas 2>/dev/null || echo '?')"
# Rounds; in each, group by group (a layer and size), ptread's cases then torch's, so that the
# two sides of a ratio are timed seconds apart, not minutes (a shared or virtual machine
# drifts by up to 2x within minutes). Each figure is the median over the rounds of the
# per-round medians. torch loads the checkpoint again for each group (outside the timing).
rounds=${PTREAD_BENCH_ROUNDS:-3}
groups=(emb.d64 emb.d256 bag.d32 bag.d128 linear.1024 linear.4096)
for ((k = 1; k <= rounds; k++)); do
  for g in "${groups[@]}"; do
    "$build/bench/nn_bench" "$file" --only "$g" >>"$tmp/ptread.$k" 2>>"$tmp/err.$k"
    "$py" "$root/bench/nn_torch.py" "$file" --only "$g" >>"$tmp/torch.$k"
  done
done
sort -u "$tmp/err.$rounds"  # the last round's notes: kernels, the tables' pages
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds"
median() {  # "name ms" lines of every round -> "name median" lines
  awk '{ v[$1] = v[$1] " " $2 } END { for (k in v) { n = split(substr(v[k], 2), a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    print k, n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 } }' "$@"
}
median "$tmp"/ptread.* >"$tmp/ptread.txt"
median "$tmp"/torch.* >"$tmp/torch.txt"

cat "$tmp/ptread.txt" "$tmp/torch.txt" | awk '
{ v[$1] = $2 }
function r(a, b) { return (a in v) && (b in v) && v[b] > 0 ? sprintf("%.2fx", v[a] / v[b]) : "-" }
function ms(a) { return (a in v) ? sprintf("%.3f", v[a]) : "-" }
function mn(a, b) { return !(b in v) || v[a] < v[b] ? a : b }
END {
  print ""
  print "Embedding gather, 16,384 rows of a 1M-row F32 table (x = torch / ptread; memcpy: the same bytes copied, ptread / memcpy time as a share of memcpy speed)"
  printf "%-6s %-3s %10s %10s %14s %9s %14s\n", "D", "thr", "ptread", "torch", "torch(out=)", "x torch", "memcpy speed"
  for (d = 64; d <= 256; d *= 4) for (t = 1; t <= 2; t++) {
    p = "emb.d" d ".ptread.t" t; best = mn("emb.d" d ".torch.t" t, "emb.d" d ".torch_out.t" t)
    printf "%-6s %-3s %10s %10s %14s %9s %13.0f%%\n", d, t, ms(p), ms("emb.d" d ".torch.t" t), ms("emb.d" d ".torch_out.t" t),
      r(best, p), 100 * v["emb.d" d ".memcpy"] / v[p]
  }
  print ""
  print "EmbeddingBag, 4,096 bags of 20 from a 1M-row F32 table (x = torch / ptread)"
  printf "%-6s %-5s %-3s %10s %10s %9s\n", "D", "mode", "thr", "ptread", "torch", "x torch"
  for (d = 32; d <= 128; d *= 4) for (mi = 1; mi <= 3; mi++) for (t = 1; t <= 2; t++) {
    mode = mi == 1 ? "sum" : mi == 2 ? "mean" : "max"
    p = "bag.d" d "." mode ".ptread.t" t; q = "bag.d" d "." mode ".torch.t" t
    printf "%-6s %-5s %-3s %10s %10s %9s\n", d, mode, t, ms(p), ms(q), r(q, p)
  }
  print ""
  print "Linear y = x W^T + b, F32, N = K (x = other / ptread portable; readW: W read once, four streams a thread, with as many threads: the batch-1 bound;"
  print "cold b/p: the same bound over ptread, each of the two timed after 256 MiB of other memory is read, with nothing of W left in the caches)"
  printf "%-5s %-4s %-3s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s %8s\n", "N", "M", "thr", "portable", "openblas", "sgemm", "sgemv", "torch", "readW",
    "x torch", "x sgemm", "bound/p", "ob/sgemm", "ob/port", "cold b/p"
  for (n = 1024; n <= 4096; n *= 4) for (mi = 0; mi < 4; mi++) for (t = 1; t <= 2; t++) {
    m = mi == 0 ? 1 : mi == 1 ? 8 : mi == 2 ? 64 : 512
    b = "linear." n ".m" m; ts = ".t" t
    p = b ".ptread" ts; o = b ".openblas" ts; s = b ".sgemm" ts; g = b ".sgemv" ts; q = b ".torch" ts; w = "linear." n ".readw" ts
    pc = b ".ptread_cold" ts; wc = "linear." n ".readw_cold" ts
    printf "%-5s %-4s %-3s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s %8s\n", n, m, t, ms(p), ms(o), ms(s), (g in v) ? ms(g) : "", ms(q),
      m == 1 ? ms(w) : "", r(q, p), r(s, p), m == 1 ? r(w, p) : "", r(s, o), r(p, o), m == 1 ? r(wc, pc) : ""
  }
}'
echo
echo "Two threads against one, ptread (t1 time / t2 time: >= 1.00x means two threads are no slower)"
awk '{ v[$1] = $2 } END { for (k in v) if (k ~ /\.ptread\.t1$/) { k2 = k; sub(/t1$/, "t2", k2); if (k2 in v) printf "  %-28s %.2fx\n", substr(k, 1, length(k) - 10), v[k] / v[k2] } }' "$tmp/ptread.txt" | sort -V
