#!/usr/bin/env python3
"""Median wall time of torch.load(path, map_location='cpu') over N runs, in ms.

Usage: torch_load.py FILE [RUNS]. Prints one line: "torch.load FILE median_ms min_ms".
The interpreter and `import torch` are outside the timed region (generous to torch).
"""
import statistics
import sys
import time

import torch

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
times = []
for _ in range(runs):
    t0 = time.perf_counter()
    obj = torch.load(path, map_location="cpu")
    times.append((time.perf_counter() - t0) * 1e3)
    del obj
print(f"torch.load {path} {statistics.median(times):.3f} {min(times):.3f}")
