#!/usr/bin/env python3
"""torch 1.13's side of bench/run_nn.sh: the same operations on the same checkpoint.

Usage: nn_torch.py FILE [RUNS] [--only PREFIX]. Prints "name median_ms" lines with the names
nn_bench uses (with --only, the cases whose names start with PREFIX). torch.load and the
first (warm-up) call of each case are outside the timed region.

Threads: torch.set_num_threads does not reach the BLAS library that Debian's torch calls for
F.linear (BLAS_INFO=generic: libblas.so.3, OpenBLAS's pthread build), which keeps one thread
per core. Each thread count is therefore also set there, through openblas_set_num_threads
in every loaded library that exports it; without that, torch's "one thread" Linear ran on
two (4096 x 4096, M=512: 101 ms wall for 186 ms of CPU time; 169 ms on one thread).
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch_threads import thread_setter

args = sys.argv[1:]
only = ""
if "--only" in args:
    k = args.index("--only")
    only = args[k + 1]
    del args[k:k + 2]
path = args[0]
runs = int(args[1]) if len(args) > 1 else 7
sd = torch.load(path, map_location="cpu")


set_threads = thread_setter()


def median_ms(fn, n=runs):
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def case(name, fn, n=runs):
    """Times fn and prints it under name, when name is wanted (--only)."""
    if name.startswith(only):
        print("%s %.4f" % (name, median_ms(fn, n)), flush=True)


torch.set_grad_enabled(False)
for threads in (1, 2):
    set_threads(threads)
    t = "t%d" % threads
    idx = sd["idx"]
    for d in (64, 256):
        w = sd["emb%d.weight" % d]
        case("emb.d%d.torch.%s" % (d, t), lambda: F.embedding(idx, w))
        out = torch.empty(idx.numel(), d)
        case("emb.d%d.torch_out.%s" % (d, t), lambda: torch.index_select(w, 0, idx, out=out))
    bidx, boffs = sd["bag_idx"], sd["bag_offsets"]
    for d in (32, 128):
        w = sd["bag%d.weight" % d]
        for mode in ("sum", "mean", "max"):
            case("bag.d%d.%s.torch.%s" % (d, mode, t), lambda: F.embedding_bag(bidx, w, boffs, mode=mode))
    for n in (1024, 4096):
        w, b = sd["fc%d.weight" % n], sd["fc%d.bias" % n]
        for m in (1, 8, 64, 512):
            x = torch.randn(m, n)
            reps = runs if n * n * m < 4096 * 4096 * 64 else 5
            case("linear.%d.m%d.torch.%s" % (n, m, t), lambda: F.linear(x, w, b), reps)
