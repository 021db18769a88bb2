#!/usr/bin/env python3
"""A Python user's way to open a safetensors file without the safetensors package: read the
header with json.loads, then one numpy.memmap view per tensor (no byte of data read).
Median wall time over N runs, in ms.

Usage: numpy_safetensors.py FILE [RUNS]. Prints "numpy.memmap FILE median_ms min_ms tensors".
The interpreter and `import numpy` are outside the timed region.
"""
import json
import statistics
import struct
import sys
import time

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def open_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = data[b:e].view(DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
times, count = [], 0
for _ in range(runs):
    t0 = time.perf_counter()
    tensors = open_safetensors(path)
    times.append((time.perf_counter() - t0) * 1e3)
    count = len(tensors)
    del tensors
print(f"numpy.memmap {path} {statistics.median(times):.3f} {min(times):.3f} {count}")
