#!/usr/bin/env python3
"""`ptread export --quantized int|dequantize|skip` against torch (1.13, Debian's python3-torch).

  check_quantized_torch.py PTREAD_BINARY FIXTURE_DIR WORK_DIR

For every quantized tensor torch.load finds in the fixtures that hold them (per-tensor and
per-channel, QINT8, QUINT8, QINT32, the packed QUINT4X2; a transposed one): `int` writes
torch's int_repr() bytes under the name, q_scale()/q_zero_point() (or the per-channel
q_per_channel_scales()/zero_points(), in torch's dtypes) as NAME.scale and NAME.zero_point,
and the scheme, dtype and axis in the metadata; `dequantize` writes torch's dequantize()
bit for bit; `skip` (and no option) writes none of them and names each on stderr.
"""
import json
import os
import struct
import subprocess
import sys

import torch

from check_common import fail, finish

ptread, fixtures, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I8": torch.int8,
          "U8": torch.uint8}


def read_safetensors(path):
    """{name: tensor}, and the metadata (the format read by its spec, torch.frombuffer)."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + end])
        dt = DTYPES[e["dtype"]]
        t = torch.frombuffer(raw, dtype=dt) if raw else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(e["shape"])
    return out, meta


def same_bits(a, b):
    return a.dtype == b.dtype and list(a.shape) == list(b.shape) and \
        a.reshape(-1).contiguous().view(torch.uint8).tolist() == b.reshape(-1).contiguous().view(torch.uint8).tolist()


def quantized_of(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        return {prefix: obj} if obj.is_quantized else {}
    found = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            found.update(quantized_of(v, f"{prefix}.{k}" if prefix else str(k)))
    return found


checked = 0
for fixture in ("quantized.pt",):
    path = os.path.join(fixtures, fixture)
    quantized = quantized_of(torch.load(path))
    if len(quantized) < 7:
        fail(fixture, "holds", len(quantized), "quantized tensors; expected 7")
    outs = {}
    for mode in ("int", "dequantize", "skip", None):
        out = os.path.join(work, f"{fixture}.{mode}.safetensors")
        r = subprocess.run([ptread, "export", path, out] + (["--quantized", mode] if mode else []), capture_output=True)
        if r.returncode != 0:
            fail(fixture, mode, "exit", r.returncode, r.stderr[:300])
            continue
        outs[mode] = read_safetensors(out)
        for name in quantized:
            named = f"skipped {name}: quantized tensor".encode() in r.stderr
            if named != (mode in ("skip", None)):
                fail(fixture, mode, name, "named on stderr" if named else "not named on stderr")
    if "int" in outs:
        got, meta = outs["int"]
        for name, q in quantized.items():
            checked += 1
            if name not in got or not same_bits(got[name], q.int_repr()):
                fail(fixture, "int", name, "int_repr differs from torch's")
            scheme = str(q.qscheme()).replace("torch.", "")
            if meta.get(name + ".qscheme") != scheme or meta.get(name + ".dtype") != str(q.dtype).replace("torch.", "").upper():
                fail(fixture, "int", name, "metadata", {k: v for k, v in meta.items() if k.startswith(name + ".")})
            if scheme.startswith("per_channel"):
                want_scale, want_zp = q.q_per_channel_scales(), q.q_per_channel_zero_points()
                if meta.get(name + ".axis") != str(q.q_per_channel_axis()):
                    fail(fixture, "int", name, "axis", meta.get(name + ".axis"))
            else:
                want_scale = torch.tensor(q.q_scale(), dtype=torch.float64)
                want_zp = torch.tensor(q.q_zero_point(), dtype=torch.int64)
            if not same_bits(got.get(name + ".scale", torch.zeros(0)), want_scale):
                fail(fixture, "int", name, "scale", got.get(name + ".scale"), "torch", want_scale)
            if not same_bits(got.get(name + ".zero_point", torch.zeros(0)), want_zp):
                fail(fixture, "int", name, "zero_point", got.get(name + ".zero_point"), "torch", want_zp)
    if "dequantize" in outs:
        got, _ = outs["dequantize"]
        for name, q in quantized.items():
            if name not in got or not same_bits(got[name], q.dequantize()):
                fail(fixture, "dequantize", name, "differs from torch's dequantize()")
            if name + ".scale" in got:
                fail(fixture, "dequantize", name, "wrote a scale")
    for mode in ("skip", None):
        if mode in outs and any(name in outs[mode][0] for name in quantized):
            fail(fixture, mode, "wrote a quantized tensor")

r = subprocess.run([ptread, "convert", os.path.join(fixtures, "quantized.pt"), os.path.join(work, "x.pt"),
                    "--quantized", "int"], capture_output=True)
if r.returncode != 2:
    fail("convert --quantized must be a usage error", r.returncode)
r = subprocess.run([ptread, "export", os.path.join(fixtures, "quantized.pt"), os.path.join(work, "x.safetensors"),
                    "--quantized", "float"], capture_output=True)
if r.returncode != 2:
    fail("--quantized float must be a usage error", r.returncode)

finish(f"quantized_torch: {checked} quantized tensors against torch {torch.__version__}")
