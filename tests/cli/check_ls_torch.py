#!/usr/bin/env python3
"""`ptread ls` rows against torch.load, on a checkpoint torch writes here (real torch).

  check_ls_torch.py PTREAD_BINARY WORK_DIR

The tool formats each distinct (dtype, shape, device) once and copies it to the rows that
repeat it, from a cache of 256 slots: this file has more distinct ones than that (slots
are shared, so a row whose slot holds another tail must be formatted anew), each twice and
far apart, shapes of up to 10 dimensions (more than the cache keeps), dtypes that share a
shape, and storages tagged "mps" and "cuda:1" right after a "cpu" one of the same dtype
and shape. Every row, column by column, must be what torch.load gives: name, dtype, shape,
the location the storage was saved with, and numel * element size. (Mutations that drop
the dtype, the shape or the device from the cache's comparison each fail here.)
"""
import os
import subprocess
import sys

import torch
import torch.serialization as serialization

from ls_table import ls_row

ptread, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
NAMES = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
         torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
         torch.float64: "F64", torch.complex64: "C64"}
dtypes = list(NAMES)

torch.manual_seed(7)
sd = {}
for i in range(1400):
    k = i % 700  # each (dtype, shape) twice, 700 entries apart
    if k % 50 == 49:
        shape = [1] * 8 + [k % 3 + 1, 2]  # rank 10
    elif k % 2:
        shape = [k % 17 + 1, k % 5 + 1]
    else:
        shape = [k % 700 + 1]
    dtype = dtypes[k % len(dtypes)]
    sd[f"t{i:04d}_{'x' * (i % 7)}"] = torch.zeros(shape).to(dtype)
# The same dtype and shape as t0000 and t0700, saved with other locations ("mps": as long
# as "cpu").
LOCATIONS = ["mps", "cuda:1"]
sd["cpu_twin"] = torch.zeros(sd["t0000_"].shape).to(sd["t0000_"].dtype)  # the row before gpu0
for i in range(4):
    sd[f"gpu{i}"] = torch.zeros(sd["t0000_"].shape).to(sd["t0000_"].dtype)
sd["last_" + "z" * 40] = torch.zeros(3, 1, 2)  # the widest name: every row is padded to it


def check(file_name, tensors, location):
    """Saves a dict of tensors with these storage locations (data_ptr -> tag), lists it, compares every row
    with torch.load's tensors; returns the failures."""
    path = os.path.join(work, file_name)
    tag = serialization.location_tag
    serialization.location_tag = lambda storage: location.get(storage.data_ptr()) or tag(storage)
    try:
        torch.save(tensors, path)
    finally:
        serialization.location_tag = tag
    loaded = torch.load(path, map_location="cpu")
    want = []
    for name, t in loaded.items():
        device = location.get(tensors[name].storage().data_ptr(), "cpu")
        want.append([name, NAMES[t.dtype], "[" + ", ".join(str(d) for d in t.shape) + "]", device,
                     str(t.numel() * t.element_size())])
    r = subprocess.run([ptread, "ls", path], capture_output=True)
    if r.returncode != 0:
        print("FAIL ls exit", r.returncode, r.stderr.decode()[:300])
        return 1
    failures = 0
    lines = r.stdout.decode().split("\n")
    rows = lines[1:1 + len(want)]
    total = sum(int(w[4]) for w in want)
    if len(rows) != len(want) or not lines[1 + len(want)].startswith(f"{len(want)} tensors, {total} bytes"):
        print("FAIL row count or total", len(rows), "!=", len(want), repr(lines[1 + len(want)][:60]))
        failures += 1
    for line, w in zip(rows, want):
        if ls_row(lines[0], line) != w:
            print("FAIL row", repr(line), "!=", w)
            failures += 1
    print(f"ls rows against torch.load ({file_name}): {len(want)} rows, {failures} failures")
    return failures


failures = check("ls_rows.pt", sd, {sd[f"gpu{i}"].storage().data_ptr(): LOCATIONS[i % 2] for i in range(4)})

# 40,000 tensors: a table the tool measures in parts on threads of their own (32,768 rows
# or more, with two hardware threads or more), each keeping its own tails. The widest
# name (not ASCII: measured in columns; one column a character, as ls_row reads them),
# dtype, shape, device and byte count are all in the second half, and the rows of the
# first half repeat tails the second formats again: every row must still be padded to the
# widths of the whole table.
big = {}
for i in range(40000):
    big[f"p{i:05d}"] = torch.zeros(i % 3 + 1)
big["p30000"] = torch.zeros(2, dtype=torch.bfloat16)
big["p30001"] = torch.zeros(1).expand(123456, 654321)  # stride 0: numel * 4 bytes, one stored
big["p30002_" + "\u00e4" * 30] = torch.zeros(2)
big["p39999_" + "y" * 20] = torch.zeros(1, 2, 3, 4, 5, 6)
big["p35000"] = torch.zeros(3)
failures += check("ls_parts.pt", big, {big["p35000"].storage().data_ptr(): "cuda:1"})
sys.exit(1 if failures else 0)
