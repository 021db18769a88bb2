#!/usr/bin/env python3
"""torch 1.13's side of bench/run_nn.sh: the same operations on the same checkpoint.

Usage: nn_torch.py FILE [RUNS]. Prints "name median_ms" lines with the names nn_bench uses.
torch.load and the first (warm-up) call of each case are outside the timed region.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
sd = torch.load(path, map_location="cpu")


def median_ms(fn, n=runs):
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


torch.set_grad_enabled(False)
for threads in (1, 2):
    torch.set_num_threads(threads)
    t = "t%d" % threads
    idx = sd["idx"]
    for d in (64, 256):
        w = sd["emb%d.weight" % d]
        print("emb.d%d.torch.%s %.4f" % (d, t, median_ms(lambda: F.embedding(idx, w))), flush=True)
        out = torch.empty(idx.numel(), d)
        print("emb.d%d.torch_out.%s %.4f" % (d, t, median_ms(lambda: torch.index_select(w, 0, idx, out=out))),
              flush=True)
    bidx, boffs = sd["bag_idx"], sd["bag_offsets"]
    for d in (32, 128):
        w = sd["bag%d.weight" % d]
        for mode in ("sum", "mean", "max"):
            print("bag.d%d.%s.torch.%s %.4f" % (d, mode, t,
                  median_ms(lambda: F.embedding_bag(bidx, w, boffs, mode=mode))), flush=True)
    for n in (1024, 4096):
        w, b = sd["fc%d.weight" % n], sd["fc%d.bias" % n]
        for m in (1, 8, 64, 512):
            x = torch.randn(m, n)
            reps = runs if n * n * m < 4096 * 4096 * 64 else 5
            print("linear.%d.m%d.torch.%s %.4f" % (n, m, t, median_ms(lambda: F.linear(x, w, b), reps)), flush=True)
