#!/usr/bin/python3
"""Checks torch.json against torch.load: each file listed there must be read, or refused,
by torch.load(path, map_location="cpu") as it says ("reads_other": read, with data ptread
does not apply and refuses with unsupported_tensor; no tensors are recorded for it). The adversarial files whose
expectations follow torch (read where torch reads, refused where torch refuses) are
listed there by make.py; this keeps those expectations true to torch.

For the files torch reads it also checks torch_tensors.json, what torch.load gives for each
tensor (name, dtype, shape, strides, sha256 of the contiguous bytes, requires_grad; quantized tensors: their
int_repr, scale and zero point; sparse: indices and values, CSR: crow, col and values), which tests/unit/adversarial.cpp
compares with what ptread gives.

usage: check_torch.py           check both files against torch (CTest/Meson test adversarial_torch)
       check_torch.py --write   write torch_tensors.json from torch.load (after make.py)
"""

import hashlib
import json
import os
import sys
import warnings

import numpy
import torch

# A dict key that is an int of over 4300 digits names its tensors by all its digits, as
# Python printed it before 3.11 (DESIGN.md's names are Python's str()).
if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)

HERE = os.path.dirname(os.path.abspath(__file__))
TENSORS = os.path.join(HERE, "torch_tensors.json")

# Files torch reads whose tensors torch.load makes of bytes that are not the file's: no
# expectation can be recorded.
NO_VALUES = {
    "zip_record_marked_directory.pt": "miniz extracts nothing for a directory: torch hands out an uninitialized buffer",
}

DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
    torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
    torch.float64: "F64", torch.complex64: "C64", torch.complex128: "C128", torch.qint8: "QINT8",
    torch.quint8: "QUINT8", torch.qint32: "QINT32",
}


NUMPY_DTYPES = {"b1": "BOOL", "u1": "U8", "i1": "I8", "i2": "I16", "u2": "U16", "i4": "I32", "u4": "U32", "i8": "I64",
                "u8": "U64", "f2": "F16", "f4": "F32", "f8": "F64", "c8": "C64", "c16": "C128"}


def sha256(t):
    c = t.detach().resolve_conj().resolve_neg().contiguous()
    c = c.as_strided((c.numel(),), (1,))  # (contiguous() keeps the stride of a dimension of size 1)
    return hashlib.sha256(c.view(torch.uint8).numpy().tobytes()).hexdigest()


def describe(name, t):
    e = {"name": name, "dtype": DTYPES[t.dtype], "shape": list(t.shape)}
    if t.is_quantized:
        assert t.qscheme() == torch.per_tensor_affine, name
        e.update(kind="quantized", int_repr_sha256=sha256(t.int_repr()), scale=t.q_scale(),
                 zero_point=t.q_zero_point(), strides=list(t.stride()))
    elif t.is_sparse:
        e.update(kind="sparse", indices_sha256=sha256(t._indices()), values_sha256=sha256(t._values()),
                 values_shape=list(t._values().shape))
    elif t.layout == torch.sparse_csr:
        e.update(kind="sparse_csr", crow_indices_sha256=sha256(t.crow_indices()),
                 col_indices_sha256=sha256(t.col_indices()), values_sha256=sha256(t.values()),
                 values_shape=list(t.values().shape))
    else:
        e.update(kind="dense", sha256=sha256(t), requires_grad=t.requires_grad, strides=list(t.stride()))
    return e


def describe_numpy(name, a):
    """a numpy array as ptread lists it: a tensor of its dtype, strides in elements, the bytes
    little-endian"""
    le = numpy.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
    return {"name": name, "dtype": NUMPY_DTYPES[a.dtype.kind + str(a.dtype.itemsize)], "shape": list(a.shape),
            "kind": "dense", "sha256": hashlib.sha256(le.tobytes()).hexdigest(), "requires_grad": False,
            "strides": [x // a.dtype.itemsize for x in a.strides]}


def tensors_of(obj, prefix=""):
    """The tensors of a dict (of dicts) or a module (its state_dict(keep_vars=True)) by DESIGN.md's names,
    in order."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict(keep_vars=True)  # (keep_vars: the parameters themselves, not detached copies)
    out = []
    for k, v in obj.items():
        name = prefix + str(k)
        if isinstance(v, torch.Tensor):
            out.append(describe(name, v))
        elif isinstance(v, dict):
            out += tensors_of(v, name + ".")
        elif isinstance(v, numpy.ndarray) and v.dtype.kind in "biufc":
            out.append(describe_numpy(name, v))  # ptread lists a numpy array of a tensor dtype as a tensor
        elif isinstance(v, (str, bytes, int, float, type(None), type, torch.Size, numpy.generic, torch.dtype)):
            pass  # metadata (a numpy scalar is a Python value to ptread; a dtype an inert global) or a class, no tensor
        elif isinstance(v, torch.storage.TypedStorage):
            pass  # a storage saved on its own: ptread lists no tensor for it
        else:
            raise TypeError(f"{name}: a {type(v).__name__}, not a tensor or dict")
    return out


def load(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(os.path.join(HERE, name), map_location="cpu")


def main():
    with open(os.path.join(HERE, "torch.json")) as f:
        claims = json.load(f)
    got_tensors = {}
    bad = 0
    for name, claim in sorted(claims.items()):
        try:
            obj = load(name)
            got, why = "reads", ""
        except Exception as e:  # noqa: BLE001 - any refusal
            got, why = "refuses", f" ({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''})"
        ok = got == claim or (claim == "reads_other" and got == "reads")
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: torch.load {got}{why}; torch.json says it {claim}")
        if got == "reads" and claim == "reads" and name not in NO_VALUES:
            got_tensors[name] = tensors_of(obj)
    print(f"{len(claims) - bad} of {len(claims)} as torch.json says")
    if "--write" in sys.argv[1:]:
        with open(TENSORS, "w") as f:
            json.dump({"no_values": NO_VALUES, "files": got_tensors}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {TENSORS}: {sum(len(v) for v in got_tensors.values())} tensors of {len(got_tensors)} files")
    else:
        with open(TENSORS) as f:
            recorded = json.load(f)
        for name in sorted(set(got_tensors) | set(recorded["files"])):
            same = got_tensors.get(name) == recorded["files"].get(name)
            bad += not same
            if not same:
                print(f"FAIL {name}: torch_tensors.json does not hold what torch.load gives")
        print(f"torch_tensors.json: {len(recorded['files'])} files as torch.load gives them" if bad == 0 else
              "torch_tensors.json differs from torch.load: rerun with --write and look at the difference")
    return 1 if bad or not claims else 0


if __name__ == "__main__":
    sys.exit(main())
