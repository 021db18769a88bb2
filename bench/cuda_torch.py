#!/usr/bin/env python3
"""torch 2.x's side of bench/run_cuda.sh, on the same files as cuda_bench.

Usage: cuda_torch.py UPLOAD.pt LINEAR.pt. Prints "name value" lines with cuda_bench's names:
  torch_load.gbps, torch_load.rss_growth_mib   torch.load(UPLOAD.pt, map_location="cuda")
  torch_load_mmap.gbps, ...rss_growth_mib      the same with mmap=True (torch >= 2.1)
      each in a fresh process (best of 3; the growth from the first), after CUDA is
      initialized; GB/s counts the tensors' bytes, as cuda_bench does; growth: VmHWM (reset
      first) minus VmRSS before
  linear.<dtype>.m<M>.torch_ms                 F.linear at N = K = 4096 (cuBLAS): F32 with
      F32 x; BF16 with BF16 x (tensor cores, as torch runs a BF16 model), median of 20
"""
import json
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def load_once(path, mmap):
    """In a fresh process: (seconds, tensor bytes, RSS growth in KiB) of one torch.load."""
    torch.zeros(1, device="cuda")  # the CUDA context first, as cuda_bench does
    torch.cuda.synchronize()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_kib("VmRSS:")
    import time
    t0 = time.perf_counter()
    sd = torch.load(path, map_location="cuda", mmap=mmap, weights_only=True) if mmap else \
        torch.load(path, map_location="cuda", weights_only=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    return seconds, nbytes, status_kib("VmHWM:") - before


def bench_load(path, tag, mmap):
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, __file__, "--load-once", path, "1" if mmap else "0"],
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out))
    best = max(r["bytes"] / r["seconds"] / 1e9 for r in runs)
    print("%s.gbps %.4f" % (tag, best))
    print("%s.rss_growth_mib %.4f" % (tag, runs[0]["growth_kib"] / 1024.0), flush=True)


def median_ms(fn, runs=20):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(runs):
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def bench_linear(path):
    sd = torch.load(path, map_location="cuda", weights_only=True)
    torch.set_grad_enabled(False)
    for dt, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        w, b = sd["fc_%s.weight" % dt], sd["fc_%s.bias" % dt]
        assert w.dtype == dtype
        for m in (1, 8, 64, 4096):
            x = torch.randn(m, w.shape[1], device="cuda").to(dtype)
            print("linear.%s.m%d.torch_ms %.4f" % (dt, m, median_ms(lambda: F.linear(x, w, b))), flush=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--load-once":
        s, n, g = load_once(sys.argv[2], sys.argv[3] == "1")
        print(json.dumps({"seconds": s, "bytes": n, "growth_kib": g}))
        return
    if len(sys.argv) != 3:
        sys.exit("usage: cuda_torch.py UPLOAD.pt LINEAR.pt")
    if not torch.cuda.is_available():
        sys.exit("cuda_torch.py: no CUDA device")
    print("# torch %s, %s, allow_tf32 %s" % (torch.__version__, torch.cuda.get_device_name(0),
                                            torch.backends.cuda.matmul.allow_tf32))
    bench_load(sys.argv[1], "torch_load", False)
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 1):
        bench_load(sys.argv[1], "torch_load_mmap", True)
    bench_linear(sys.argv[2])


if __name__ == "__main__":
    main()
