#!/usr/bin/python3
"""ptread against torch.load on random files aimed at one rule each.

usage: targeted.py [--seed N] [--count N] [--ptread BINARY] [--keep DIR] [--verbose] [FAMILY ...]

checkpoints.py damages real checkpoints at random; this writes small files from scratch
with the adversarial corpus's writer (tests/data/adversarial/make.py), each family varying
the arguments of one rule at random, and compares torch.load(map_location="cpu") with the
`ptread` command (`ls --json`, `tree` or `export`):
  views       _rebuild_tensor_v2 sizes, strides, offsets (negative, huge, SymInt's bounds):
              verdict, shape and strides
  legacy      a legacy file's declared storage size, view and element count (storages grown
              by set_): verdict, shape and strides
  tar         a tar file's (torch 0.1) views: verdict, shape and strides
  coo, csr    sparse parts (indices, values, sizes; CSR, CSC, BSR, BSC): verdict and shape
  csrbatch    compressed layouts with batch and dense dimensions: verdict and shape
  qparams     _rebuild_qtensor's quantizer parameters (qschemes, scales, zero points,
              axis): verdict
  rebuild     _rebuild_tensor, _rebuild_tensor_v2 and _rebuild_parameter with odd flags,
              _rebuild_tensor_v3 with conj and neg bits: verdict and bytes
  opcodes     random programs of protocol 2 and 4 opcodes as a value beside a tensor: verdict
  text        protocol 0 INT, LONG, FLOAT, STRING, UNICODE operands spelled oddly: verdict
              and repr; text Python's unpickler refuses (not UTF-8, empty or non-ASCII global
              names, ints of over 4300 digits, a list indexed by other than an int): verdict
  memo        text PUT and GET keys, BINPUT, LONG_BINPUT: verdict and repr
  builtins    OrderedDict, set, frozenset, bytes, bytearray, torch.Size, _codecs.encode,
              Counter, defaultdict called with random arguments, BUILD states on them and on
              the classes themselves: verdict
  dictkeys    dict keys Python merges or keeps apart (1, True, 1.0; -0.0 and 0; 2**70 and
              its float; NaN; tuples, frozensets): verdict and keys
  headers     legacy magic, protocol version, sys_info, storage key lists, count order:
              verdict and bytes
  numpy       numpy arrays as numpy pickles them, dtype, byte order, shape, Fortran order
              and byte count varied: verdict, shape and bytes
  npscalar    numpy scalars (numpy.core.multiarray.scalar) of each numeric dtype and byte
              order, their bytes varied: verdict and value
  byteorder   zip byteorder and version records, archive folders: verdict and bytes
  fromtype    _rebuild_from_type_v2's function, type, arguments and state: verdict and bytes
  torchobj    torch's objects (dtypes, qschemes, layouts, memory formats) and torch.Size
              plain, called, as NEWOBJ's class, given BUILD states: verdict
  param       torch.nn.parameter.Parameter and torch.autograd.variable.Variable called or
              made by NEWOBJ as torch 0.1-0.4's whole models pickle them, then a BUILD state
              (Tensor.__setstate__), in legacy and zip files: verdict and bytes
(all families when none is named). Differences that are understood (docs/formats.md; each
one below, KNOWN) are counted apart and printed with --verbose only. Prints each other
difference and, per family, a count of each kind: same, both_err, DIFF (both read, other
values), WE_REJECT (torch reads, ptread refuses), WE_ACCEPT (torch refuses, ptread reads),
known. Not part of the test suite (files it finds worth keeping go to the adversarial corpus
with torch's verdict); a tool for looking for new disagreements. Needs torch (Debian's
python3-torch: torch 1.13, whose rules these are; torch 2.x's are noted where they differ).
"""

import argparse
import hashlib
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import warnings
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "data", "adversarial"))
import make as M  # noqa: E402
from make import (ck, legacy, lpid, p_dict, p_global, p_int, p_ints, p_ordered_dict, p_str, p_tuple, pickle,  # noqa: E402
                  pid, rebuild_v2, tar_archive, tensor, zip_build, floats, LEGACY_MAGIC, LEGACY_SYSINFO,
                  LEGACY_VERSION)

import torch  # noqa: E402

warnings.filterwarnings("ignore")
W = tensor("0", 4)


def call(fn, args, module="torch._utils"):
    return p_global(module, fn) + p_tuple(args) + b"R"


def contiguous(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.insert(0, acc)
        acc *= max(d, 1)
    return tuple(st)


def one(t, data=M.BASE_DATA):
    return ck(pickle(p_dict([(p_str("t"), t)])), data=data)


def beside(value_ops, proto=2):
    """{'t': a tensor, 'm': the value the ops push}"""
    return ck(b"\x80" + bytes([proto]) + b"}(" + p_str("t") + W + p_str("m") + value_ops + b"u.")


def f64(x):
    return b"G" + struct.pack(">d", x)


# ---------------------------------------------------------------------------------------
# Families: each returns (file bytes, what to compare, a description)

def fam_views(r):
    rank = r.randint(0, 3)
    pick = lambda: r.choice([0, 1, 2, 3, 4, -1, -2, -5, 1 << 62, (1 << 63) - 1, -(1 << 63), -(1 << 62), -(1 << 62) - 1,
                             1 << 31, 7]) if r.random() < 0.5 else r.randint(-3, 5)
    size = [r.choice([0, 1, 1, 2, 3, -1, 4]) for _ in range(rank)]
    stride = [pick() for _ in range(rank)]
    off = r.choice([0, 0, 1, 3, 4, 5, -1, 1 << 62])
    numel = r.choice([4, 4, 0, 1])
    data = {"0": floats(numel, 1.0), "1": M.BASE_DATA["1"]}
    return one(tensor("0", numel, size=tuple(size), stride=tuple(stride), offset=off), data), "strides", (size, stride, off)


def fam_legacy(r):
    rank = r.randint(0, 3)
    size = [r.choice([0, 1, 1, 2, 3, 4]) for _ in range(rank)]
    stride = [r.choice([0, 1, 2, 3, -1, 5, 1 << 62]) if r.random() < 0.4 else r.randint(0, 4) for _ in range(rank)]
    off = r.choice([0, 0, 1, 3, 4, 6, -1])
    decl = r.choice([0, 2, 4, 6])
    cnt = r.choice([decl, decl, 4, 6, 8, 2])
    t = rebuild_v2(lpid("FloatStorage", "0", decl), off, tuple(size), tuple(stride))
    blob = legacy(pickle(p_dict([(p_str("t"), t)])), ["0"], {"0": floats(cnt, 1.0)}, {"0": cnt})
    return blob, "strides", (size, stride, off, decl, cnt)


def fam_tar(r):
    rank = r.randint(0, 3)
    size = [r.choice([0, 1, 1, 2, 3, 4]) for _ in range(rank)]
    stride = [r.choice([0, 1, 2, 3, -1, 5]) if r.random() < 0.4 else r.randint(0, 4) for _ in range(rank)]
    off = r.choice([0, 0, 1, 3, 4, 6, -1])
    st = pickle(p_int(1)) + pickle(p_tuple([p_int(0), p_str("cpu"), p_global("torch", "FloatStorage")])) + \
        struct.pack("<Q", 4) + M.BASE_DATA["0"] + pickle(b"]")
    te = pickle(p_int(1)) + pickle(p_tuple([p_int(1), p_int(0), p_global("torch", "FloatTensor")])) + \
        struct.pack("<iI", rank, 0) + struct.pack("<%dq" % rank, *size) + struct.pack("<%dq" % rank, *stride) + \
        struct.pack("<q", off)
    ob = pickle(p_dict([(p_str("t"), p_str("1") + b"Q")]))
    blob = tar_archive([("sys_info", LEGACY_SYSINFO), ("storages", st), ("tensors", te), ("pickle", ob)])
    return blob, "strides", (size, stride, off)


def fam_coo(r):
    sd, nnz, dd = r.randint(0, 2), r.randint(0, 3), r.randint(0, 1)
    size = [r.randint(0, 4) for _ in range(sd + dd)]
    if r.random() < 0.2:
        size.append(r.randint(1, 3))
    idx = [r.randint(-1, 4) for _ in range(sd * nnz)]
    ishape = (sd, nnz) if r.random() < 0.9 else (sd * nnz,)
    vshape = [nnz] + size[sd:sd + dd] if r.random() < 0.85 else \
        [r.randint(0, 3)] + [r.randint(1, 3)] * r.randint(0, 2)
    vn = math.prod(vshape)
    it = rebuild_v2(pid("LongStorage", "0", len(idx)), 0, ishape, contiguous(ishape))
    vt = rebuild_v2(pid("FloatStorage", "1", max(vn, 1)), 0, tuple(vshape), contiguous(vshape))
    data = p_tuple([it, vt, p_global("torch", "Size") + p_tuple([p_ints(tuple(size))]) + b"R"])
    blob = one(call("_rebuild_sparse_tensor", [p_global("torch", "sparse_coo"), data]),
               {"0": struct.pack(f"<{len(idx)}q", *idx), "1": floats(max(vn, 1))})
    return blob, "sparse", (size, ishape, idx, vshape)


def fam_csr(r):
    layout = r.choice(["sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc"])
    rows, cols = r.randint(0, 4), r.randint(0, 4)
    nc = rows if layout in ("sparse_csr", "sparse_bsr") else cols
    blk = (r.randint(1, 2), r.randint(1, 2)) if layout in ("sparse_bsr", "sparse_bsc") else ()
    ncomp = nc // (blk[0] if blk and layout == "sparse_bsr" else blk[1] if blk else 1) if nc else 0
    nnz = r.randint(0, 3)
    crow = sorted(r.randint(0, nnz) for _ in range(ncomp + 1))
    if r.random() < 0.7:
        crow[0], crow[-1] = 0, nnz
    if r.random() < 0.1:
        crow = [r.randint(-1, 4) for _ in range(ncomp + 1)]
    col = [r.randint(-1, 4) for _ in range(nnz)]
    vshape = [nnz if r.random() < 0.85 else r.randint(0, 3)] + list(blk)
    vn = math.prod(vshape)
    data = p_tuple([rebuild_v2(pid("LongStorage", "0", len(crow)), 0, (len(crow),), (1,)),
                    rebuild_v2(pid("LongStorage", "2", max(len(col), 1)), 0, (len(col),), (1,)),
                    rebuild_v2(pid("FloatStorage", "1", max(vn, 1)), 0, tuple(vshape), contiguous(vshape)),
                    p_ints((rows, cols))])
    blob = one(call("_rebuild_sparse_csr_tensor", [p_global("torch", layout), data]),
               {"0": struct.pack(f"<{len(crow)}q", *crow), "1": floats(max(vn, 1)),
                "2": struct.pack(f"<{len(col)}q", *col) if col else b"\0" * 8})
    return blob, "sparse", (layout, (rows, cols), crow, col, vshape)


def fam_csrbatch(r):
    """CSR (and CSC, BSR, BSC, which torch 1.13 does not load) with batch and dense dimensions:
    each batch's indices varied"""
    layout = "sparse_csr" if r.random() < 0.85 else r.choice(["sparse_csc", "sparse_bsr", "sparse_bsc"])
    batch = [r.randint(0, 2) for _ in range(r.choice([1, 1, 2]))]
    dense = [r.randint(1, 2) for _ in range(r.choice([0, 0, 1]))]
    rows, cols = r.randint(0, 3), r.randint(0, 3)
    blocked = layout in ("sparse_bsr", "sparse_bsc")
    blk = (r.randint(1, 2), r.randint(1, 2)) if blocked else ()
    by_rows = layout in ("sparse_csr", "sparse_bsr")
    nc = rows if by_rows else cols
    ncomp = nc // (blk[0] if by_rows else blk[1]) if blk else nc
    nnz = r.randint(0, 3)
    nb = math.prod(batch)
    crow, col = [], []
    for _ in range(nb):
        c = sorted(r.randint(0, nnz) for _ in range(ncomp + 1))
        if r.random() < 0.8:
            c[0], c[-1] = 0, nnz
        crow += c
        col += [r.randint(-1, 3) if r.random() < 0.1 else r.randint(0, 2) for _ in range(nnz)]
    cshape = tuple(batch) + (ncomp + 1,)
    pshape = tuple(batch) + (nnz,)
    if r.random() < 0.1:
        pshape = tuple(batch[:-1]) + (nnz,) if batch else pshape
    vshape = list(batch) + [nnz] + list(blk) + dense
    if r.random() < 0.1:
        vshape = vshape[1:]
    size = tuple(batch) + (rows, cols) + tuple(dense)
    if r.random() < 0.1:
        size = tuple(batch[:-1]) + (rows, cols) + tuple(dense)
    vn = math.prod(vshape)
    np_ = max(math.prod(pshape), 1)
    col = (col + [0] * np_)[:np_]
    nc_ = max(math.prod(cshape), 1)
    crow = (crow + [0] * nc_)[:nc_]
    data = p_tuple([rebuild_v2(pid("LongStorage", "0", nc_), 0, cshape, contiguous(cshape)),
                    rebuild_v2(pid("LongStorage", "2", np_), 0, pshape, contiguous(pshape)),
                    rebuild_v2(pid("FloatStorage", "1", max(vn, 1)), 0, tuple(vshape), contiguous(vshape)),
                    p_ints(size)])
    blob = one(call("_rebuild_sparse_csr_tensor", [p_global("torch", layout), data]),
               {"0": struct.pack(f"<{nc_}q", *crow), "1": floats(max(vn, 1)), "2": struct.pack(f"<{np_}q", *col)})
    return blob, "sparse", (layout, size, cshape, crow, pshape, col, vshape)


def fam_qparams(r):
    cls, fmt = r.choice([("QInt8Storage", "b"), ("QUInt8Storage", "B"), ("QInt32Storage", "i")])
    shape = [r.randint(0, 3) for _ in range(r.randint(0, 3))]
    n = math.prod(shape)
    data = {"0": struct.pack(f"<{max(n, 1)}{fmt}", *([1] * max(n, 1)))}
    scheme = r.choice(["per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
                       "per_channel_affine_float_qparams"])
    if r.random() < 0.5:
        scale = r.choice([f64(0.5), p_int(2), b"\x88", b"N", p_str("x"), f64(float("nan")), f64(-1.0)])
        zp = r.choice([p_int(3), p_int(-200), p_int(1 << 40), b"\x89", f64(1.0), b"N"])
        items = [p_global("torch", scheme), scale, zp] + ([p_int(0)] if r.random() < 0.1 else [])
        qp = p_tuple(items) if r.random() < 0.9 else b"(" + b"".join(items) + b"l"
    else:
        nc = r.choice([shape[0] if shape else 1, 2, 3, 0, 1])
        s_cls, s_fmt = r.choice([("DoubleStorage", "d"), ("FloatStorage", "f"), ("LongStorage", "q")])
        z_cls, z_fmt = r.choice([("LongStorage", "q"), ("FloatStorage", "f"), ("IntStorage", "i")])
        z_n = nc if r.random() < 0.9 else nc + 1
        sshape = (nc,) if r.random() < 0.85 else (nc, 1)
        data["1"] = struct.pack(f"<{max(nc, 1)}{s_fmt}", *([1] * max(nc, 1)))
        data["2"] = struct.pack(f"<{max(z_n, 1)}{z_fmt}", *([0] * max(z_n, 1)))
        axis = r.choice([0, 0, 1, -1, 2, 5])
        qp = p_tuple([p_global("torch", scheme),
                      rebuild_v2(pid(s_cls, "1", max(nc, 1)), 0, sshape, contiguous(sshape)),
                      rebuild_v2(pid(z_cls, "2", max(z_n, 1)), 0, (z_n,), (1,)),
                      p_int(axis) if axis >= 0 else b"J" + struct.pack("<i", axis)])
    qt = [pid(cls, "0", max(n, 1)) + b"Q", p_int(0), p_ints(tuple(shape)), p_ints(contiguous(shape)), qp, b"\x89",
          p_ordered_dict()]
    return one(call("_rebuild_qtensor", qt), data), "verdict", (scheme, shape)


def fam_rebuild(r):
    cls, size = r.choice([("FloatStorage", 4), ("ComplexFloatStorage", 8), ("LongStorage", 8), ("BoolStorage", 1)])
    data = {"0": bytes(range(64))[:4 * size], "1": M.BASE_DATA["1"]}
    st = pid(cls, "0", 4) + b"Q"
    kind = r.choice(["v1", "v2", "param", "v3neg"])
    rg = r.choice([b"\x88", b"\x89", b"\x89", p_int(1), b"N"])
    if kind == "v1":
        t = call("_rebuild_tensor", [st, p_int(0), p_ints((4,)), p_ints((1,))])
    elif kind == "v2":
        t = call("_rebuild_tensor_v2", [st, p_int(0), p_ints((4,)), p_ints((1,)), rg, p_ordered_dict()])
    elif kind == "v3neg":  # (torch >= 2.1's dtype and rebuild: torch 1.13 refuses them for that alone)
        meta = p_dict([(p_str(r.choice(["neg", "conj"])), r.choice([b"\x88", b"\x89"]))])
        t = call("_rebuild_tensor_v3", [st, p_int(0), p_ints((4,)), p_ints((1,)), b"\x89", p_ordered_dict(),
                                        p_global("torch", r.choice(["bits8", "float32"])), meta])
    else:
        inner = call("_rebuild_tensor_v2", [st, p_int(0), p_ints((4,)), p_ints((1,)), b"\x89", p_ordered_dict()])
        t = call("_rebuild_parameter", [inner, rg, p_ordered_dict()])
    return one(t, data), "bytes", (kind, cls, rg)


def fam_opcodes(r):
    proto = r.choice([2, 4])

    def atom():
        return r.choice([p_int(r.choice([0, 1, 255, 256, 70000, -5, 1 << 40])), p_str(r.choice(["a", "", "key"])),
                         b"N", b"\x88", b"\x89", f64(r.choice([0.5, float("nan"), -0.0])), b"C\x02ab", W,
                         b"\x8a\x02\x01\x02", p_int(r.randint(0, 9))])
    ops = [b"]", b"}", b")", b"(", b"t", b"l", b"d", b"a", b"e", b"s", b"u", b"\x85", b"\x86", b"\x87", b"2", b"0",
           b"1"] + ([b"\x94", b"\x8f", b"\x90", b"\x91"] if proto >= 4 else [])
    body, memo = b"", 0
    for _ in range(r.randint(1, 12)):
        x = r.random()
        if x < 0.4:
            body += atom()
        elif x < 0.8:
            body += r.choice(ops)
        elif x < 0.9:
            body += b"q" + bytes([memo])
            memo += 1
        else:
            body += b"h" + bytes([r.randint(0, memo)])
    return beside(body, proto), "verdict", body


def fam_text(r):
    ints = ["0", "1", "01", "00", "-0", "+5", " 5", "5 ", "1_000", "0x10", "010", "9" * 25, "-" + "9" * 20, "1e3",
            "", "abc", "5L", "\u0663", "1__0", "_1", "0_0"]
    flts = ["1.5", "nan", "inf", "-inf", "1e308", "1e309", "1_0.5", " 1.5", "1.5 ", "1.", ".5", "+.5e-3", "NaN",
            "infinity", "1,5", "", "1e"]
    strs = ["'a'", "\"a\"", "'a\\x41'", "'\\n'", "'a", "a'", "'\\101'", "''", "'\\q'", "'a'b'", "'\\'", "'a\\\\'"]
    unis = ["abc", "a\\u0041", "a\\x41", "\\U0001F600", "\\u00", "a\\nb", "", "\\uD800", "caf\\xe9"]

    def atom():
        x = r.random()
        if x < 0.3:
            return b"I" + r.choice(ints).encode() + b"\n"
        if x < 0.45:
            return b"L" + r.choice(ints).encode() + r.choice([b"L", b""]) + b"\n"
        if x < 0.65:
            return b"F" + r.choice(flts).encode() + b"\n"
        if x < 0.8:
            return b"S" + r.choice(strs).encode() + b"\n"
        return b"V" + r.choice(unis).encode() + b"\n"
    odd = [b"I" + b"9" * 4301 + b"\n", b"L" + b"9" * r.choice([4300, 4301]) + b"\n", b"X\x02\x00\x00\x00\xff\xfe",
           b"X\x03\x00\x00\x00a\xc3(", b"\x8c\x02\xed\xa0", b"c\nSize\n", b"ctorch\n\n", b"(itorch\xc3\xa9\nSize\n",
           b"(itorch\nSiz\xc3\xa9\n", b"(i\nSize\n", b"]K\x05a(" + p_str("a") + b"K\x02u", b"]K\x05a(\x88K\x02u"]
    if r.random() < 0.25:
        body = r.choice(odd)
        return beside(body, 4 if body.startswith(b"\x8c") else 2), "verdict", body
    body = b"(" + b"".join(atom() for _ in range(r.randint(1, 4))) + b"t"
    return beside(body), "repr", body


def fam_memo(r):
    keys = ["0", "1", "01", " 1", "1 ", "+1", "-1", "1_0", "10", "0x1", "", "a", "99999999999999999999", "-0", "1.0"]
    body = b"("
    for _ in range(r.randint(1, 5)):
        x = r.random()
        if x < 0.3:
            body += p_int(r.randint(0, 9))
        elif x < 0.55:
            body += b"p" + r.choice(keys).encode() + b"\n"
        elif x < 0.8:
            body += b"g" + r.choice(keys).encode() + b"\n"
        elif x < 0.87:
            body += b"r" + struct.pack("<I", r.choice([0, 1, 10]))
        elif x < 0.94:
            body += b"j" + struct.pack("<I", r.choice([0, 1, 10, 0xFFFFFFFF]))
        else:
            body += b"q" + bytes([r.choice([0, 1, 10])])
    return beside(body + b"t"), "repr", body


def fam_builtins(r):
    fns = [("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytes"),
           ("builtins", "bytearray"), ("torch", "Size"), ("_codecs", "encode"), ("collections", "Counter"),
           ("collections", "defaultdict")]

    def atom(depth=0):
        x = r.random()
        if depth < 2 and 0.5 <= x < 0.65:
            return b"(" + b"".join(atom(depth + 1) for _ in range(r.randint(0, 3))) + b"l"
        if depth < 2 and 0.65 <= x < 0.8:
            return b"(" + b"".join(atom(depth + 1) for _ in range(r.randint(0, 3))) + b"t"
        if depth < 2 and 0.8 <= x < 0.9:
            return b"(" + b"".join(atom(depth + 1) + atom(depth + 1) for _ in range(r.randint(0, 2))) + b"d"
        return r.choice([p_int(r.choice([0, 1, 3, 255, 256, -1, -5, 300])),
                         p_str(r.choice(["a", "ab", "\u00e9", "latin1", ""])), b"N", b"\x88", b"\x89", b"C\x02ab", f64(2.0)])
    mod, name = r.choice(fns)
    states = [b"N", b"}", b"(}Nt", p_str("x"), b"(N}K\x01K\x02st", b"(N}" + p_str("a") + b"K\x02st", b"}" + p_str("a") + b"K\x01s"]
    if r.random() < 0.1:  # BUILD on the class itself
        return beside(p_global(mod, name) + r.choice(states) + b"b"), "verdict", (name, "class BUILD")
    if r.random() < 0.1:  # counts and byte values at Python's bounds, slots named by other than a str
        v = r.choice([p_global("builtins", r.choice(["bytes", "bytearray"])) + p_tuple([p_int(r.choice([-1, -7, 0, 2]))]) + b"R",
                      p_global("builtins", r.choice(["bytes", "bytearray"])) + p_tuple([b"(" + p_int(1) + p_int(
                          r.choice([255, 256, -1, 300])) + r.choice([b"l", b"t"])]) + b"R",
                      p_global("collections", r.choice(["OrderedDict", "Counter"])) + b")R" +
                      r.choice([b"(N}K\x01K\x02st", b"(N}" + p_str("a") + b"K\x02st", b"(N}\x88K\x02st"]) + b"b"])
        return beside(v), "verdict", (name, v)
    args = b"(" + b"".join(atom() for _ in range(r.randint(0, 4))) + b"t"
    v = p_global(mod, name) + args + (b"R" if r.random() < 0.75 else b"\x81")
    if r.random() < 0.2:
        v += r.choice(states) + b"b"
    if r.random() < 0.15:
        v += b"(" + atom() + atom() + b"u"
    if r.random() < 0.1:
        v += b"(" + atom() + b"e"
    return beside(v), "verdict", (name, v)


def fam_dictkeys(r):
    def key(depth=0):
        x = r.random()
        if depth < 2 and x < 0.15:
            return b"(" + b"".join(key(depth + 1) for _ in range(r.randint(0, 2))) + b"t"
        if depth < 2 and x < 0.22:
            return p_global("builtins", "frozenset") + b"((" + b"".join(key(depth + 1) for _ in range(r.randint(0, 2))) + \
                b"ltR"
        return r.choice([p_int(1), p_int(0), b"\x88", b"\x89", f64(1.0), f64(-0.0), f64(0.0), f64(float("nan")),
                         p_str("a"), b"C\x01a", b"\x8a\x09" + (2 ** 70).to_bytes(9, "little", signed=True),
                         f64(float(2 ** 70)), b"\x8a\x08" + (2 ** 63).to_bytes(8, "little"), f64(2.0 ** 63), b"N",
                         p_int(2), f64(2.0)])
    body = b"}(" + b"".join(key() + p_int(i) for i in range(r.randint(1, 5))) + b"u"
    return beside(body), "dict", body


def fam_headers(r):
    items = []
    if r.random() < 0.9:
        items.append((p_str("protocol_version"), p_int(r.choice([1001, 1000, 1002, 0]))))
    if r.random() < 0.9:
        items.append((p_str("little_endian"), r.choice([b"\x88", b"\x89", p_int(1), b"N"])))
    if r.random() < 0.9:
        items.append((p_str("type_sizes"), p_dict([(p_str("short"), p_int(2)), (p_str("int"), p_int(4)),
                                                   (p_str("long"), p_int(r.choice([4, 8, 2])))])))
    magic = r.choice([LEGACY_MAGIC] * 6 + [b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6D).to_bytes(10, "little") + b".",
                                           b"\x80\x02K\x05."])
    ver = r.choice([LEGACY_VERSION] * 5 + [b"\x80\x02M\xe8\x03.", b"\x80\x02M\xea\x03.", b"\x80\x02K\x00."])
    obj = pickle(p_dict([(p_str("t"), rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))),
                         (p_str("b"), rebuild_v2(lpid("FloatStorage", "1", 2), 0, (2,), (1,)))]))
    keys = r.choice([["0", "1"], ["1", "0"], ["0"], ["0", "1", "0"], ["0", "1", "2"], []])
    out = magic + ver + pickle(p_dict(items)) + obj + pickle(b"(" + b"".join(p_str(x) for x in keys) + b"l")
    big = r.random() < 0.15
    for x in keys:
        data = M.BASE_DATA.get(x, b"\0" * 8)
        n = len(data) // 4 + (r.choice([-1, 1]) if r.random() < 0.1 else 0)
        out += struct.pack(">Q" if big else "<Q", n) + data
    return out + (b"junk" if r.random() < 0.1 else b""), "bytes", (keys, big)


def fam_byteorder(r):
    cls, size = r.choice([("FloatStorage", 4), ("DoubleStorage", 8), ("IntStorage", 4), ("ByteStorage", 1),
                          ("HalfStorage", 2)])
    prefix = r.choice(["adv", "archive", "a/b", "x y", "", "adv/"])
    p = prefix + "/" if prefix else ""
    recs = [{"name": p + "data.pkl", "data": pickle(p_dict([(p_str("t"), tensor("0", 4, cls=cls))]))},
            {"name": p + "data/0", "data": bytes(range(1, 4 * size + 1))}]
    ver = r.choice([b"3\n", b"3", b"2\n", b"10\n", b"11\n", b"x\n", b"", None])
    if ver is not None:
        recs.append({"name": p + "version", "data": ver})
    order = r.choice([None, b"little", b"big", b"LITTLE", b"", b"little\n", b"middle"])
    if order is not None:
        recs.append({"name": p + "byteorder", "data": order})
    return zip_build(recs)[0], "bytes", (prefix, ver, order)


def fam_numpy(r):
    """a numpy array pickled as numpy pickles it (_reconstruct, then BUILD with (version, shape,
    dtype, is_fortran, raw bytes)), its dtype, order, shape and bytes varied"""
    # (no object dtype: numpy's __setstate__ of an object array from bytes crashes the interpreter)
    kind = r.choice(["f4", "f8", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1", "c8", "c16", "U2", "S3",
                     "M8", "V4", "f3"])
    order = r.choice(["<", "<", ">", "|", "="])
    shape = [r.randint(0, 3) for _ in range(r.randint(0, 3))]
    fortran = r.random() < 0.25
    width = {"b1": 1, "U2": 8, "S3": 3, "M8": 8, "V4": 4, "c16": 16, "f3": 3}.get(kind, None) or int(kind[1:])
    n = math.prod(shape) * width + r.choice([0, 0, 0, 0, -1, width, 1])
    raw = bytes(r.randrange(256) if kind != "b1" else r.randrange(2) for _ in range(max(n, 0)))
    encode = lambda b: p_global("_codecs", "encode") + p_tuple([p_str(b.decode("latin1")), p_str("latin1")]) + b"R"
    dtype = p_global("numpy", "dtype") + p_tuple([p_str(kind), b"\x89", b"\x88"]) + b"R" + \
        p_tuple([p_int(r.choice([3, 3, 3, 4])), p_str(order), b"N", b"N", b"N", p_int(-1), p_int(-1), p_int(0)]) + b"b"
    state = p_tuple([p_int(r.choice([1, 1, 1, 2])), p_ints(tuple(shape)), dtype, b"\x88" if fortran else b"\x89", encode(raw)])
    arr = p_global("numpy.core.multiarray", "_reconstruct") + \
        p_tuple([p_global("numpy", "ndarray"), p_tuple([p_int(0)]), encode(b"b")]) + b"R" + state + b"b"
    return beside(arr), "numpy", (order + kind, shape, fortran, n)


def fam_npscalar(r):
    """numpy.core.multiarray.scalar(dtype, raw bytes), as numpy pickles np.float32(1.5)"""
    kind = r.choice(["f4", "f8", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"])
    order = r.choice(["<", "<", ">", "|", "="])
    width = 1 if kind == "b1" else int(kind[1:])
    n = width + r.choice([0, 0, 0, 0, -1, 1])
    raw = bytes(r.randrange(256) if kind != "b1" else r.randrange(2) for _ in range(max(n, 0)))
    if kind[0] == "f" and r.random() < 0.3:  # NaN, infinities, -0.0 spelled in the type's bytes
        import numpy as np
        raw = np.array([r.choice([float("nan"), float("inf"), -0.0, 1e-40])], dtype=order.replace("|", "<") + kind).tobytes()
    encode = lambda b: p_global("_codecs", "encode") + p_tuple([p_str(b.decode("latin1")), p_str("latin1")]) + b"R"
    dtype = p_global("numpy", "dtype") + p_tuple([p_str(kind), b"\x89", b"\x88"]) + b"R" + \
        p_tuple([p_int(3), p_str(order), b"N", b"N", b"N", p_int(-1), p_int(-1), p_int(0)]) + b"b"
    return beside(p_global("numpy.core.multiarray", "scalar") + p_tuple([dtype, encode(raw)]) + b"R"), "scalar", \
        (order + kind, raw)


def fam_fromtype(r):
    """torch._tensor._rebuild_from_type_v2(func, new_type, args, state), as torch saves a tensor
    with attributes or a subclass: the type, the function, its arguments and the state varied"""
    inner = [pid("FloatStorage", "0", 4) + b"Q", p_int(0), p_ints((4,)), p_ints((1,)), b"\x89", p_ordered_dict()]
    func, args = r.choice([
        (p_global("torch._utils", "_rebuild_tensor_v2"), p_tuple(inner)),
        (p_global("torch._utils", "_rebuild_tensor_v2"), p_tuple(inner[:4])),
        (p_global("torch._utils", "_rebuild_parameter"), p_tuple([rebuild_v2(pid("FloatStorage", "0", 4), 0, (4,), (1,)),
                                                                 r.choice([b"\x88", b"\x89"]), p_ordered_dict()])),
        (p_global("collections", "OrderedDict"), b")"),
        (p_global("torch._utils", "_rebuild_tensor_v2"), b"]"),
    ])
    new_type = r.choice([("torch._tensor", "Tensor"), ("torch", "Tensor"), ("torch.nn.parameter", "Parameter"),
                         ("torch.nn.parameter", "Parameter"), ("torch.nn.parameter", "Buffer"),
                         ("collections", "OrderedDict"), ("torch", "FloatTensor"), ("builtins", "int"),
                         ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter")])

    def attrs():
        names = ["foo", "_x", "data", "grad", "requires_grad", "shape", "dtype", "real", "names", "is_leaf",
                 "_backward_hooks", "retains_grad"]
        values = [p_int(1), b"N", b"\x88", b"\x89", p_str("a"), W, b"}", b")"]
        pairs = []
        for _ in range(r.randint(0, 2)):
            key = p_str(r.choice(names)) if r.random() < 0.9 else p_int(3)
            pairs.append((key, r.choice(values)))
        return p_dict(pairs)
    state = r.choice([b"N", b"}", attrs(), attrs(), p_ordered_dict(), p_tuple([attrs(), b"N"]),
                      p_tuple([attrs(), attrs()]), p_tuple([b"N", attrs()]), p_tuple([attrs()]),
                      p_tuple([attrs(), b"N", b"N"]), p_int(5), b"]", p_str("x"), p_tuple([b"}", p_int(0)])])
    t = p_global("torch._tensor", "_rebuild_from_type_v2") + p_tuple([func, p_global(*new_type), args, state]) + b"R"
    return one(t), "bytes", (new_type, func, args, state)


def fam_torchobj(r):
    # (objects, not classes: ptread keeps torch's classes inert, calls and all, but for Size)
    names = ["float32", "int", "bool", "bfloat16", "complex64", "qint8", "uint16", "float8_e4m3fn",
             "per_tensor_affine", "per_channel_symmetric", "strided", "sparse_csr", "_mkldnn", "channels_last",
             "preserve_format", "Size"]
    obj = p_global("torch", r.choice(names))
    args = [p_int(r.randint(0, 3)), p_str("cpu"), b"N", p_ints((2, 3))]
    a = p_tuple(r.sample(args, r.randint(0, 2)))
    states = [b"N", b"}", b"}" + p_str("a") + p_int(1) + b"s", b"N}\x86", b"N}" + p_str("a") + p_int(1) + b"s\x86",
              p_int(3), b"]"]
    op = r.choice(["plain", "call", "newobj", "build", "call_build"])
    body = (obj if op == "plain" else obj + a + b"R" if op == "call" else obj + a + b"\x81" if op == "newobj"
            else obj + r.choice(states) + b"b" if op == "build" else obj + a + b"R" + r.choice(states) + b"b")
    return beside(body), "verdict", body


def fam_param(r):
    """Parameter(data, requires_grad) / Variable(data, ...) by REDUCE or NEWOBJ, then perhaps a
    BUILD of (requires_grad, volatile, backward_hooks) and other states: the class, the
    arguments, the dtype, the state and the container varied"""
    cls = r.choice([("torch.nn.parameter", "Parameter")] * 3 + [("torch.autograd.variable", "Variable")])
    storage, data = r.choice([("FloatStorage", bytes(range(16))), ("FloatStorage", bytes(range(16))),
                              ("IntStorage", bytes(range(16))), ("DoubleStorage", bytes(range(32)))])
    old = r.random() < 0.5  # a legacy file, as torch 0.2-0.4 wrote them; else a zip file
    t = rebuild_v2((lpid if old else pid)(storage, "0", 4), 0, (4,), (1,))
    flag = lambda: r.choice([b"\x88", b"\x89", b"N", p_int(1), p_int(0), p_str("x")])
    args = r.choice([[t], [t], [t, flag()], [t, flag()], [t, b"\x88", b"\x89"], [], [b"N"], [p_int(3)]])
    body = p_global(*cls) + p_tuple(args) + r.choice([b"R", b"R", b"\x81"])
    states = [None, None, [b"\x88", b"\x89", b"N"], [b"\x89", b"\x89", b"N"], [flag(), b"\x89", b"N"],
              [flag(), flag(), p_ordered_dict()], [b"\x88", b"\x89"], [b"\x88"], [t, b"N", b"N", b"\x88", b"\x89"],
              b"N", b"}", b"]", p_int(2), p_str("abc"), b"(\x88\x89Nl"]
    state = r.choice(states)
    if state is not None:
        body += (p_tuple(state) if isinstance(state, list) else state) + b"b"
    obj = pickle(p_dict([(p_str("t"), body)]))
    f = legacy(obj, ["0"], {"0": data}, {"0": 4}) if old else ck(obj, data={"0": data})
    return f, "bytes", (cls, storage, old, args, state)


FAMILIES = {"views": fam_views, "legacy": fam_legacy, "tar": fam_tar, "coo": fam_coo, "csr": fam_csr, "csrbatch": fam_csrbatch,
            "qparams": fam_qparams, "rebuild": fam_rebuild, "opcodes": fam_opcodes, "text": fam_text,
            "memo": fam_memo, "builtins": fam_builtins, "dictkeys": fam_dictkeys, "headers": fam_headers,
            "byteorder": fam_byteorder, "numpy": fam_numpy, "npscalar": fam_npscalar,
            "fromtype": fam_fromtype, "torchobj": fam_torchobj, "param": fam_param}


# ---------------------------------------------------------------------------------------
# What each side gives

def sha(b):
    return hashlib.sha256(b).hexdigest()[:16]


def torch_side(path, what):
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any refusal
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    t = obj.get("t") if isinstance(obj, dict) else None
    if what == "strides":
        return True, (list(t.shape), list(t.stride()))
    if what == "sparse":
        return True, list(t.shape)
    if what == "bytes":
        ts = [obj[k] for k in ("t", "b") if isinstance(obj.get(k), torch.Tensor)]
        return True, sha(b"".join(x.detach().resolve_conj().resolve_neg().contiguous().view(torch.uint8).numpy().tobytes()
                                  for x in ts))
    if what == "numpy":
        import numpy as np
        a = obj["m"]
        if not isinstance(a, np.ndarray):
            return True, ("not an array", type(a).__name__)
        if a.dtype.kind not in "biufc":
            return True, ("no tensor dtype",)
        le = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
        return True, (list(a.shape), sha(le.tobytes()))
    if what == "scalar":  # a numpy scalar as ptread's tree prints the Python value it becomes
        v = obj["m"]
        kind = getattr(getattr(v, "dtype", None), "kind", "")
        return True, repr(bool(v)) if kind == "b" else repr(int(v)) if kind in "iu" else repr(float(v))
    if what == "repr":
        return True, repr(obj["m"])
    if what == "dict":
        d = obj["m"]
        lines = [f"m: dict ({len(d)} item{'' if len(d) == 1 else 's'})"]
        lines += [f"  {k if isinstance(k, str) else repr(k)}: {v!r}" for k, v in d.items()]
        return True, [x if "frozenset" not in x else "FS" for x in lines]  # (set order: Python's hashes)
    return True, None


def ptread_side(binary, path, what, tmp):
    if what in ("strides", "sparse"):
        p = subprocess.run([binary, "ls", "--json", path], capture_output=True, text=True)
        if p.returncode != 0:
            return False, p.stderr.strip()[:600]
        j = json.loads(p.stdout)
        if what == "sparse":
            return True, j["sparse"][0]["shape"] if j["sparse"] else None
        e = j["tensors"][0] if j["tensors"] else j["quantized"][0]
        return True, (e["shape"], e.get("strides"))
    if what == "numpy":
        p = subprocess.run([binary, "ls", "--json", path], capture_output=True, text=True)
        if p.returncode != 0:
            return False, p.stderr.strip()[:600]
        j = json.loads(p.stdout)
        m = [e for e in j["tensors"] if e["name"] == "m"]
        if not m:
            return True, ("no tensor dtype",)
        out = os.path.join(tmp, "out.safetensors")
        p = subprocess.run([binary, "export", path, out], capture_output=True, text=True)
        b = open(out, "rb").read() if p.returncode == 0 else b""
        n = struct.unpack("<Q", b[:8])[0] if b else 0
        h = json.loads(b[8:8 + n]) if b else {}
        if "m" not in h:  # (a dtype safetensors cannot hold, C128: its shape alone is compared)
            return True, (m[0]["shape"], None)
        s_, e_ = h["m"]["data_offsets"]
        return True, (m[0]["shape"], sha(b[8 + n + s_:8 + n + e_]))
    if what == "bytes":
        out = os.path.join(tmp, "out.safetensors")
        p = subprocess.run([binary, "export", path, out], capture_output=True, text=True)
        if p.returncode != 0:
            return False, p.stderr.strip()[:600]
        b = open(out, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        parts = []
        for k in ("t", "b"):
            if k in h:
                s, e = h[k]["data_offsets"]
                parts.append(b[8 + n + s:8 + n + e])
        return True, sha(b"".join(parts))
    p = subprocess.run([binary, "tree", path], capture_output=True, text=True)
    if p.returncode != 0:
        return False, p.stderr.strip()[:600]
    lines = p.stdout.splitlines()
    at = [i for i, x in enumerate(lines) if x.startswith("m")]
    if what in ("repr", "scalar"):
        return True, lines[at[0]][3:] if at else None
    if what == "dict":
        return True, [x if "frozenset" not in x else "FS" for x in lines[at[0]:]] if at else None
    return True, None


# Disagreements understood (docs/formats.md): (family, kind, a test of the two sides' texts)
KNOWN = [
    ("views", "WE_REJECT", "negative size", "torch 1.13 keeps a negative size in an empty tensor's shape"),
    ("views", "DIFF", "None", "a stride settled to -2^63 (an empty tensor's), which torch's stride() shows as None"),
    ("qparams", "WE_REJECT", "_rebuild_qtensor: axis", "torch 1.13 checks no per-channel axis"),
    ("tar", "WE_REJECT", "view reaches", "torch grows a tar storage with uninitialized bytes"),
    ("csr", "WE_REJECT", "is not satisfied", "torch 1.13 checks no compressed index without values or rows"),
    ("csrbatch", "WE_REJECT", "is not satisfied", "torch 1.13 checks no compressed index without values or rows"),
    ("csrbatch", "WE_ACCEPT", "must be equal to nnz (=0)", "torch 1.13 takes nnz as 0 when the values have no "
     "elements (an empty batch dimension); 2.x takes values.shape[batch], as ptread does"),
    ("headers", "WE_REJECT", "E205", "torch hands out a storage the key list leaves out uninitialized"),
    ("headers", "WE_REJECT", "listed twice", "torch fills a storage listed twice again"),
    ("headers", "WE_ACCEPT", "wrong byte size", "ptread takes counts from big-endian hosts (pytorch#26383)"),
    ("byteorder", "WE_ACCEPT", "version", "torch requires a version record it parses, in the first record's folder"),
    ("byteorder", "WE_ACCEPT", "Couldn't parse the version", "torch requires a version record it parses"),
    ("byteorder", "WE_ACCEPT", "maximum supported version", "torch 1.13 reads versions up to 10"),
    ("byteorder", "WE_ACCEPT", "not in a subdirectory", "torch wants the records in a folder; ptread takes the zip's root"),
    ("byteorder", "DIFF", "b'big'", "torch 1.13 ignores the byteorder record (>= 2.1 reads it, as ptread does)"),
    ("byteorder", "WE_REJECT", "byte order", "torch 1.13 ignores the byteorder record (>= 2.1 refuses these)"),
    ("builtins", "WE_REJECT", "Counter() of", "ptread does not count a Counter's iterable"),
    ("builtins", "WE_REJECT", "OrderedDict() of a str", "OrderedDict('') is empty in Python"),
    ("builtins", "WE_REJECT", "defaultdict() of a str", "defaultdict(f, '') is empty in Python"),
    ("builtins", "WE_REJECT", "is not a pair", "Python unpacks any iterable of two items as a pair (b'ab', 'ab')"),
    ("builtins", "WE_REJECT", "of a dict", "bytes()/bytearray() of a dict's int keys"),
    ("builtins", "WE_REJECT", "cannot add items to a bytes", "bytearray.extend by APPENDS"),
    ("builtins", "WE_ACCEPT", "torch.Size", "torch.Size of a set or dict stays inert"),
    ("memo", "WE_ACCEPT", "MemoryError", "Python sizes its memo array by a LONG_BINPUT key"),
    ("numpy", "WE_ACCEPT", "no tensor dtype", "ptread lists arrays of other dtypes unsupported, their state unchecked"),
    ("fromtype", "WE_ACCEPT", "Can't get attribute 'Buffer'", "torch.nn.parameter.Buffer is a class of torch >= 2.5"),
    ("fromtype", "WE_REJECT", "E406", "a state setting data, real, imag or requires_grad: torch 1.13 ignores a plain "
     "Tensor's state (2.x sets it), ptread applies none and refuses these"),
    ("fromtype", "WE_ACCEPT", "not writable", "ptread sets no other attribute of a Parameter's state"),
    ("fromtype", "WE_ACCEPT", "names must", "ptread sets no other attribute of a Parameter's state"),
    ("fromtype", "WE_ACCEPT", "Number of names", "ptread sets no other attribute of a Parameter's state"),
    ("fromtype", "WE_ACCEPT", "assigned grad", "ptread sets no other attribute of a Parameter's state"),
    ("torchobj", "WE_ACCEPT", "Can't get attribute", "a dtype of torch 2.x (uint16, float8_e4m3fn), absent in 1.13"),
    ("rebuild", "WE_ACCEPT", "_rebuild_tensor_v3", "torch >= 2.1's rebuild function, absent in 1.13"),
]


def known(family, kind, torch_text, ptread_text, desc):
    """needle: in either side's text, or in the file's description"""
    seen = str(torch_text) + "\n" + str(ptread_text) + "\n" + repr(desc)
    return any(f == family and k == kind and needle in seen for f, k, needle, _why in KNOWN)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("families", nargs="*", metavar="FAMILY")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200, help="files a family")
    ap.add_argument("--ptread", default=os.path.join(ROOT, "build", "ptread"))
    ap.add_argument("--keep", help="keep each disagreeing file here")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--refusals", help="append each file both refuse, with both messages, to this JSON-lines file "
                    "(tools/differential/refusals.py reads it)")
    args = ap.parse_args()
    families = args.families or sorted(FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"no family {', '.join(unknown)} (families: {', '.join(sorted(FAMILIES))})")
    total = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.pt")
        for fam in families:
            r = random.Random(f"{args.seed}:{fam}")
            counts = Counter()
            for n in range(args.count):
                blob, what, desc = FAMILIES[fam](r)
                with open(path, "wb") as f:
                    f.write(bytes(blob))
                t_ok, t_val = torch_side(path, what)
                p_ok, p_val = ptread_side(args.ptread, path, what, tmp)
                if t_ok and p_ok:
                    if what == "numpy" and isinstance(p_val, tuple) and len(p_val) == 2 and p_val[1] is None:
                        t_val = (t_val[0], None)
                    kind = "same" if t_val == p_val or what == "verdict" else "DIFF"
                elif not t_ok and not p_ok:
                    kind = "both_err"
                else:
                    kind = "WE_REJECT" if t_ok else "WE_ACCEPT"
                if kind == "both_err" and args.refusals:
                    with open(args.refusals, "a", encoding="utf-8") as out:
                        out.write(json.dumps({"family": fam, "seed": args.seed, "n": n, "torch": str(t_val),
                                              "ptread": str(p_val)}) + "\n")
                if kind in ("same", "both_err"):
                    counts[kind] += 1
                    continue
                if known(fam, kind, t_val, p_val, desc):
                    counts["known"] += 1
                    if not args.verbose:
                        continue
                else:
                    counts[kind] += 1
                    if args.keep:
                        os.makedirs(args.keep, exist_ok=True)
                        with open(os.path.join(args.keep, f"{fam}_{n}.pt"), "wb") as f:
                            f.write(bytes(blob))
                print(f"{fam} #{n} {kind}: {desc!r:.160}\n  torch:  {t_val!s:.200}\n  ptread: {p_val!s:.200}")
            print(f"{fam}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
            total.update(counts)
    print("all: " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    return 1 if any(total[k] for k in ("DIFF", "WE_REJECT", "WE_ACCEPT")) else 0


if __name__ == "__main__":
    sys.exit(main())
