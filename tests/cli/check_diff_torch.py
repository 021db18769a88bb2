#!/usr/bin/env python3
"""`ptread diff A B` against torch (1.13, Debian's python3-torch).

  check_diff_torch.py PTREAD_BINARY WORK_DIR

torch writes a checkpoint A and variants B (the same tensors; values nudged at random
places, NaN, -0.0, a dtype and a shape changed, names removed and added, views). Without
tolerances the changed tensors must be those whose bytes differ, with torch's count of
differing elements, the first one's index, and max |a - b| and |a - b| / |b| over them where
each is a number (in float64, as torch computes them on .double()); with --atol/--rtol (and --equal-nan) those
torch.isclose finds not close. Exit 0 for the same, 1 for different, 2 for trouble; a
checkpoint and its own safetensors export are the same.
"""
import json
import math
import os
import subprocess
import sys

import torch

from check_common import fail, finish

ptread, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)


def run(*args):
    return subprocess.run([ptread, *args], capture_output=True)


g = torch.Generator().manual_seed(11)
a = {
    "w": torch.randn(64, 33, generator=g),
    "w64": torch.randn(1000, generator=g, dtype=torch.float64),
    "half": torch.randn(300, generator=g).half(),
    "bf16": torch.randn(300, generator=g).bfloat16(),
    "ints": torch.randint(-1000, 1000, (500,), generator=g),
    "bytes": torch.randint(0, 255, (100,), generator=g, dtype=torch.uint8),
    "nan": torch.tensor([1.0, float("nan"), 3.0, 0.0]),
    "big": torch.randn(300_000, generator=g),
    "view": torch.randn(40, 30, generator=g).t(),
    "same_dtype_shape": torch.ones(3, 3),
    "gone": torch.zeros(2),
    "reshaped": torch.zeros(6),
    "retyped": torch.zeros(4),
}
b = {k: v.clone() for k, v in a.items()}
del b["gone"]
b["new"] = torch.ones(1)
b["reshaped"] = torch.zeros(2, 3)
b["retyped"] = torch.zeros(4, dtype=torch.float64)
b["w"][3, 7] += 1e-6
b["w"][10, 0] = -b["w"][10, 0]
b["w64"][500:510] *= 1 + 1e-9
b["half"][7] = b["half"][7] + 0.5
b["bf16"][0] = 0.0
b["ints"][123] += 1
b["nan"][3] = -0.0  # 0.0 -> -0.0: other bits, equal values
b["big"][299_999] += 1.0
b["view"] = b["view"].contiguous()  # the same values, stored otherwise
b["view"][5, 6] = 123.0
pa, pb = os.path.join(work, "a.pt"), os.path.join(work, "b.pt")
torch.save(a, pa)
torch.save(b, pb)
common = [k for k in a if k in b]


def flat_index(i, shape):
    out = []
    for d in reversed(shape):
        out.append(i % d)
        i //= d
    return list(reversed(out))


def expected(rtol=None, atol=None, equal_nan=False):
    """{name: (mismatched, first index, max_abs, max_rel)} of the changed tensors."""
    out = {}
    for k in common:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            out[k] = None
            continue
        xc, yc = x.contiguous().reshape(-1), y.contiguous().reshape(-1)
        if rtol is None and atol is None:
            bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
            bad = xc.view(bits) != yc.view(bits)
        else:
            bad = ~torch.isclose(xc, yc, rtol=1e-05 if rtol is None else rtol, atol=1e-08 if atol is None else atol,
                                 equal_nan=equal_nan)
        n = int(bad.sum())
        if n == 0:
            continue
        diff = (xc.double() - yc.double()).abs()[bad]
        rel = diff / yc.double().abs()[bad]
        keep, keep_rel = ~torch.isnan(diff), ~torch.isnan(rel)
        first = int(bad.nonzero()[0])
        out[k] = (n, flat_index(first, list(x.shape)), float(diff[keep].max()) if keep.any() else None,
                  float(rel[keep_rel].max()) if keep_rel.any() else None)
    return out


def check(label, args, want):
    r = run("diff", "--json", *args, pa, pb)
    if r.returncode != (1 if want or set(a) != set(b) else 0):
        fail(label, "exit", r.returncode, r.stderr[:200])
        return
    got = json.loads(r.stdout)
    if got["only_in_a"] != ["gone"] or got["only_in_b"] != ["new"]:
        fail(label, "only_in", got["only_in_a"], got["only_in_b"])
    changed = {c["name"]: c for c in got["changed"]}
    if list(changed) != [k for k in common if k in want]:
        fail(label, "changed", list(changed), "want", [k for k in common if k in want])
    if got["same"] != len(common) - len(want):
        fail(label, "same", got["same"])
    for k, w in want.items():
        c = changed.get(k)
        if c is None:
            continue
        if c["a"] != {"dtype": {torch.float32: "F32", torch.float64: "F64"}.get(a[k].dtype, c["a"]["dtype"]),
                      "shape": list(a[k].shape)} or c["b"]["shape"] != list(b[k].shape):
            fail(label, k, "a/b", c["a"], c["b"])
        if w is None:
            if c["mismatched"] is not None or c["max_abs_diff"] is not None:
                fail(label, k, "values compared across dtype/shape", c)
            continue
        n, first, mabs, mrel = w
        got_rel = math.inf if c["max_rel_diff"] == "inf" else c["max_rel_diff"]
        if c["mismatched"] != n or c["first_mismatch"] != first or c["numel"] != a[k].numel() or \
                c["max_abs_diff"] != mabs or got_rel != mrel:
            fail(label, k, "got", c["mismatched"], c["first_mismatch"], c["max_abs_diff"], c["max_rel_diff"],
                 "torch", n, first, mabs, mrel)


check("bit for bit", [], expected())
check("--atol 1e-5", ["--atol", "1e-5"], expected(atol=1e-5))
check("--rtol 1e-3 --atol 0", ["--rtol", "1e-3", "--atol", "0"], expected(rtol=1e-3, atol=0.0))
check("--atol 2 --equal-nan", ["--atol=2", "--equal-nan"], expected(atol=2.0, equal_nan=True))
check("--rtol 0.5", ["--rtol", "0.5"], expected(rtol=0.5))

# The same file, and a file against its own safetensors export: exit 0.
r = run("diff", pa, pa)
if r.returncode != 0 or b"0 changed, 0 only in A, 0 only in B" not in r.stdout:
    fail("a file against itself", r.returncode, r.stdout[-200:])
st = os.path.join(work, "a.safetensors")
if run("export", pa, st).returncode != 0 or run("diff", pa, st).returncode != 0:
    fail("a file against its safetensors export")
# Filters; trouble and usage: exit 2.
r = run("diff", "--json", "--only", "w*", pa, pb)
got = json.loads(r.stdout) if r.returncode in (0, 1) else None
if got is None or [c["name"] for c in got["changed"]] != ["w", "w64"] or got["same"] != 0:
    fail("diff --only", r.returncode, got)
for args in ((pa, os.path.join(work, "missing.pt")), (os.path.join(work, "missing.pt"), pa), (pa,),
             ("--atol", "x", pa, pb), ("--equal-nan", pa, pb), ("--rtol", "-1", pa, pb)):
    r = run("diff", *args)
    if r.returncode != 2:
        fail("diff", args, "exit", r.returncode)
r = run("ls", "--atol", "1", pa)
if r.returncode != 2:
    fail("ls --atol must be a usage error", r.returncode)

finish(f"diff_torch: {len(common)} tensors in 5 comparisons against torch {torch.__version__}")
