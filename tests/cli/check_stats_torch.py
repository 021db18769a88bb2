#!/usr/bin/env python3
"""`ptread stats --json` against torch (1.13, Debian's python3-torch).

  check_stats_torch.py PTREAD_BINARY WORK_DIR

torch writes a checkpoint of every dtype stats reads, special values (NaN, +-Inf, -0.0, the
extremes of each integer type, tiny and huge floats), empty, scalar and one-element tensors,
views with strides, and tensors of millions of elements (several pieces read by threads);
each tensor's min, max, mean and std must be torch's on t.double() (min and max of integer
tensors exactly; the sums run in another order, so the mean within 1e-12 of the mean of |x|,
a float64 sum's error bound, and std within 1e-9 relative), its NaN, +Inf, -Inf and zero
counts torch's counts. Complex tensors have no values.
Also: NAME arguments, --only, a missing NAME (exit 1), the table's rows.
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


g = torch.Generator().manual_seed(7)
big = torch.randn(5_000_003, generator=g) * 3 + 1000  # a large mean: the variance's cancellation
special = torch.tensor([0.0, -0.0, 1e-45, 3e38, -3e38, 1.5, float("nan"), float("inf"), float("-inf")])
ints = {dt: torch.tensor([torch.iinfo(dt).min, torch.iinfo(dt).max, 0, -1 if torch.iinfo(dt).min < 0 else 1, 7], dtype=dt)
        for dt in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)}
tensors = {
    "big": big,
    "big_f64": big.double() * 1e-3,
    "randn": torch.randn(64, 33, generator=g),
    "half": (torch.randn(1000, generator=g) * 100).half(),
    "bf16": (torch.randn(1000, generator=g) * 1e10).bfloat16(),
    "special": special,
    "special_f64": special.double(),
    "special_f16": torch.tensor([0.0, -0.0, 6e-8, 65504.0, float("inf"), float("-inf")]).half(),
    "inf_only": torch.tensor([1.0, float("inf"), 2.0]),
    "infs": torch.tensor([float("inf"), float("-inf")]),
    "nan_only": torch.tensor([float("nan")] * 3),
    "zeros": torch.zeros(5000),
    "one": torch.tensor([3.25]),
    "scalar": torch.tensor(2.5),
    "empty": torch.zeros(0, 3),
    "transposed": torch.randn(300, 200, generator=g).t(),
    "strided": torch.arange(0, 10_000, dtype=torch.float32)[::7],
    "bool": torch.tensor([True, False, True, True]),
    "bool_false": torch.tensor([False, False]),
    "complex": torch.randn(4, dtype=torch.complex64, generator=g),
    "int64_big": torch.tensor([2**62 + 1, -(2**62) - 3, 5], dtype=torch.int64),
    "int32_many": torch.randint(-(2**31), 2**31 - 1, (3_000_000,), dtype=torch.int32, generator=g),
}
for dt, t in ints.items():
    tensors["int_" + str(dt).split(".")[1]] = t
path = os.path.join(work, "stats.pt")
torch.save(tensors, path)


def torch_stats(t):
    """torch's view: None where torch has no value."""
    if t.is_complex():
        return None
    d = t.double()
    out = {"nan": int(torch.isnan(d).sum()), "posinf": int((d == math.inf).sum()),
           "neginf": int((d == -math.inf).sum()), "zeros": int((d == 0).sum())}
    if t.numel():
        if t.dtype.is_floating_point:
            out["min"], out["max"] = d.min().item(), d.max().item()
        elif t.dtype == torch.bool:
            out["min"], out["max"] = bool(t.min()), bool(t.max())
        else:
            out["min"], out["max"] = int(t.min()), int(t.max())
    else:
        out["min"] = out["max"] = None
    out["mean"] = d.mean().item()
    out["std"] = d.std().item() if t.numel() > 1 else math.nan  # (torch warns for one element)
    return out


def as_number(v):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, v) if isinstance(v, str) else v


def close(a, b, rtol, atol=0.0):
    if isinstance(a, float) and isinstance(b, float) and (math.isnan(a) or math.isnan(b)):
        return math.isnan(a) and math.isnan(b)
    if isinstance(a, float) and isinstance(b, float) and (math.isinf(a) or math.isinf(b)):
        return a == b
    return a == b if rtol == 0 else math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


r = subprocess.run([ptread, "stats", "--json", path], capture_output=True)
if r.returncode != 0:
    fail("stats --json exit", r.returncode, r.stderr[:300])
    got = {}
else:
    got = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    if list(got) != list(tensors):
        fail("names / order", list(got))
for name, t in tensors.items():
    g_ = got.get(name)
    if g_ is None:
        fail(name, "missing")
        continue
    if g_["dtype"] != {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
                       torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64"}[t.dtype] or g_["shape"] != list(t.shape):
        fail(name, "dtype/shape", g_["dtype"], g_["shape"])
    want = torch_stats(t)
    if want is None:
        if any(g_[k] is not None for k in ("min", "max", "mean", "std", "nan", "posinf", "neginf", "zeros")):
            fail(name, "complex: values given", g_)
        continue
    for key in ("nan", "posinf", "neginf", "zeros"):
        if g_[key] != want[key]:
            fail(name, key, g_[key], "torch", want[key])
    scale = float(t.double().abs().mean()) if t.numel() else 0.0
    if math.isnan(scale) or math.isinf(scale):
        scale = 0.0
    for key, rtol, atol in (("min", 0, 0), ("max", 0, 0), ("mean", 1e-12, 1e-12 * scale), ("std", 1e-9, 0)):
        a, b = as_number(g_[key]), want[key]
        if a is None or b is None:
            if a is not b:
                fail(name, key, a, "torch", b)
        elif type(a) is not type(b) and not (isinstance(a, float) and isinstance(b, float)):
            fail(name, key, repr(a), "is not of torch's type", repr(b))
        elif not close(float(a) if isinstance(a, bool) else a, float(b) if isinstance(b, bool) else b, rtol, atol):
            fail(name, key, a, "torch", b)

# NAME arguments and --only select; a missing NAME exits 1; the table lists the same rows.
r = subprocess.run([ptread, "stats", "--json", path, "one", "special"], capture_output=True)
names = [t["name"] for t in json.loads(r.stdout)["tensors"]] if r.returncode == 0 else None
if names != ["special", "one"]:
    fail("stats FILE NAME NAME", names)
r = subprocess.run([ptread, "stats", "--json", "--only", "int_*", path], capture_output=True)
names = [t["name"] for t in json.loads(r.stdout)["tensors"]] if r.returncode == 0 else None
if names != [n for n in tensors if n.startswith("int_")]:
    fail("stats --only", names)
r = subprocess.run([ptread, "stats", path, "no_such_tensor"], capture_output=True)
if r.returncode != 1 or b"no_such_tensor" not in r.stderr:
    fail("stats of a missing name", r.returncode, r.stderr[:200])
r = subprocess.run([ptread, "stats", path], capture_output=True)
lines = r.stdout.decode().split("\n")
if r.returncode != 0 or lines[0].split() != ["NAME", "DTYPE", "SHAPE", "MIN", "MAX", "MEAN", "STD", "NAN", "+INF", "-INF",
                                             "ZEROS"] or [l.split()[0] for l in lines[1:len(tensors) + 1]] != list(tensors):
    fail("stats table", r.returncode, lines[:3])

finish(f"stats_torch: {len(tensors)} tensors against torch {torch.__version__}")
