#!/usr/bin/python3
"""ptread's Checkpoint::open against torch.load, on real checkpoints made worse at random.

usage: checkpoints.py [--seed N] [--count N] [--mode mmap|read] [--keep DIR] [--dump BINARY]
                      [--pickle-share F] [--acting] [--verbose]

Writes a few checkpoints with torch (zip format with views, shared storage and eight dtypes;
nested training state; pickle protocol 4; the same records deflated; the legacy format;
quantized and sparse tensors, zip and legacy (compared part by part); a
whole pickled model, zip and legacy; the same model scripted and traced, torch.jit.save),
then --count mutated copies: zip fields set to telling values (sizes, offsets, counts,
name lengths, methods, flags, signatures, in local headers, the central directory and the
(ZIP64) end records), bytes flipped, set, inserted or deleted anywhere or in a record's
data, cuts; and, for --pickle-share of the copies (0.3), the pickle of the objects (data.pkl,
or a legacy file's object pickle) changed opcode by opcode instead (deleted, repeated,
swapped, replaced by another of its opcodes, an int or memo index set to a telling value;
with --acting also opcodes inserted that act on the values below them, BUILD, SETITEM,
REDUCE, NEWOBJ, tuples ...; a zip archive written again by Python's zipfile). Each
copy is read by torch.load(map_location="cpu") (in a worker process with its address
space limited, 20 s a file) and by checkpoint_dump.cpp (built beside this
script with g++ unless --dump names a built one); a copy's tensors, named as DESIGN.md
names them (a module, TorchScript or not, by its state_dict()), are compared by dtype,
shape and the CRC-32 of their contiguous bytes.
Prints each disagreement and a count of each kind:
  same        both read it, the same tensors with the same bytes
  both_err    both refuse it
  DIFF        both read it, other tensors or bytes
  WE_REJECT   torch.load reads it, ptread refuses it
  WE_ACCEPT   torch.load refuses it, ptread reads it
  opaque      torch.load returned something this script does not name, or a tensor over
              1 GiB (skipped)
Disagreements already understood are counted apart, "KIND (why)", and printed only with
--verbose: torch reading bytes that are not the tensor's (a record shorter than its storage,
a failed inflate, data past a record, a storage left uninitialized, a byte count that wraps,
a record marked as a directory), torch requiring the version record and every record in
the first one's folder, globals torch cannot import (ptread keeps them inert), and in
TorchScript archives the code/ torch.jit.load compiles and the debug records it reads
(ptread reads code/ only as text, for its parameter and buffer lines), the types its
unpickler asserts, and the views it makes without checking them against their storage;
torch 1.13's _rebuild_tensor_v2 without the metadata argument 2.x takes; torch reading a
quantized tensor's view past its storage (_rebuild_qtensor sets it unchecked); torch
crashing on a damaged TorchScript archive; Python's memo
array for a far index; a module called while unpickling; keys that are classes, functions
or tensors, which torch names by their str().
--keep DIR copies each disagreement there. Not part of the test suite: a tool for looking
for disagreements. Needs torch (Debian's python3-torch).
"""

import argparse
import io
import json
import os
import pickletools
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

DTYPES = None  # torch dtype -> ptread's name, filled in the worker


def make_bases(d):
    import torch
    torch.manual_seed(7)
    w = torch.randn(4, 3)
    shared = torch.arange(12, dtype=torch.float32)
    sd = {
        "w": w, "w_t": w.t(), "row": w[1], "tied": w,
        "b": torch.arange(5, dtype=torch.int64), "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "h": torch.randn(3).half(), "bf": torch.randn(2, 2).bfloat16(),
        "c": torch.view_as_complex(torch.randn(2, 2)), "mask": torch.tensor([True, False, True]),
        "d": torch.randn(2).double(), "s": torch.tensor(2.5), "e": torch.zeros(0, 3),
        "v1": shared[2:6], "v2": shared.view(3, 4)[:, 1], "x": torch.ones(3).expand(2, 3),
    }
    paths = []

    def save(name, obj, **kw):
        p = os.path.join(d, name)
        torch.save(obj, p, **kw)
        paths.append(p)
        return p

    zsd = save("zip_sd.pt", sd)
    save("zip_train.pt", {"model": {"fc.weight": torch.randn(2, 3), "fc.bias": torch.zeros(2)},
                          "opt": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 3)}},
                                  "param_groups": [{"lr": 0.1, "params": [0, 1]}]},
                          "epoch": 3, "layers": [torch.ones(2), (torch.zeros(1), torch.eye(2))]})
    save("zip_proto4.pt", sd, pickle_protocol=4)
    save("legacy_sd.pt", sd, _use_new_zipfile_serialization=False)
    # Whole modules: pickled (state_dict() naming) and TorchScript (torch.load hands
    # torch.jit.load an archive), scripted and traced.
    torch.manual_seed(8)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                                torch.nn.Linear(4, 2))
    model.eval()
    save("whole_model.pt", model)
    save("whole_model_legacy.pt", model, _use_new_zipfile_serialization=False)
    for name, sm in (("ts_script.pt", torch.jit.script(model)), ("ts_trace.pt", torch.jit.trace(model, torch.randn(2, 3)))):
        p = os.path.join(d, name)
        torch.jit.save(sm, p)
        paths.append(p)
    # Quantized (per tensor and per channel, 8-, 32- and 4-bit) and sparse (COO, coalesced
    # or not, and CSR) tensors: ptread's quantized() and sparse() entries.
    torch.manual_seed(9)
    dense = torch.randn(4, 6)
    dense[dense.abs() < 0.8] = 0
    qs = {
        "q8": torch.quantize_per_tensor(torch.randn(3, 4), 0.05, 3, torch.qint8),
        "qu8": torch.quantize_per_tensor(torch.rand(5), 0.01, 7, torch.quint8),
        "q32": torch.quantize_per_tensor(torch.randn(2, 2), 0.001, 0, torch.qint32),
        "q4": torch.quantize_per_tensor(torch.rand(5), 0.1, 1, torch.quint4x2),
        "qc": torch.quantize_per_channel(torch.randn(3, 4), torch.tensor([0.1, 0.02, 0.3], dtype=torch.float64),
                                         torch.tensor([0, 1, -2]), 0, torch.qint8),
        "coo": dense.to_sparse(), "coo_raw": torch.sparse_coo_tensor(torch.tensor([[2, 0, 2], [1, 3, 1]]),
                                                                     torch.tensor([1.5, -2.0, 4.0]), (3, 4)),
        "csr": dense.to_sparse_csr(), "w": torch.randn(2, 2),
    }
    save("zip_qs.pt", qs)
    save("legacy_qs.pt", qs, _use_new_zipfile_serialization=False)
    deflated = os.path.join(d, "zip_deflated.pt")
    with zipfile.ZipFile(zsd) as src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():  # a fixed time: the same bytes every run
            dst.writestr(zipfile.ZipInfo(info.filename, (2020, 1, 1, 0, 0, 0)), src.read(info.filename),
                         zipfile.ZIP_DEFLATED)
    paths.append(deflated)
    return paths


# ---- mutations -------------------------------------------------------------------------

SPANS = []  # (start, end, record name) of each local record and directory entry: zip_fields


def where(i):
    """"[record]" when byte i lies in one record's header, data or directory entry."""
    names = {r for a, b, r in SPANS if a <= i < b}
    return f"[{names.pop()}]" if len(names) == 1 else ""


def zip_fields(data):
    """(offset, width, what) of each field worth setting, found by walking the records."""
    fields = []
    SPANS.clear()
    eocd = data.rfind(b"PK\x05\x06")
    if eocd < 0:
        return fields, []
    for off, w, what in ((4, 2, "disk"), (6, 2, "cd_disk"), (8, 2, "entries_here"), (10, 2, "entries"),
                         (12, 4, "cd_size"), (16, 4, "cd_offset"), (20, 2, "comment_len")):
        fields.append((eocd + off, w, "eocd." + what))
    loc = data.rfind(b"PK\x06\x07", 0, eocd)
    if loc >= 0:
        fields += [(loc + 4, 4, "loc64.disk"), (loc + 8, 8, "loc64.eocd64_offset"), (loc + 16, 4, "loc64.disks")]
        z = data.rfind(b"PK\x06\x06", 0, loc)
        if z >= 0:
            for off, w, what in ((4, 8, "record_size"), (16, 4, "disk"), (20, 4, "cd_disk"),
                                 (24, 8, "entries_here"), (32, 8, "entries"), (40, 8, "cd_size"),
                                 (48, 8, "cd_offset")):
                fields.append((z + off, w, "eocd64." + what))
    records = []
    p = data.find(b"PK\x01\x02")
    while 0 <= p < eocd:
        if p + 46 > len(data):
            break
        n, e, c = struct.unpack_from("<HHH", data, p + 28)
        lho = struct.unpack_from("<I", data, p + 42)[0]
        rec = data[p + 46:p + 46 + n].decode("latin-1").split("/", 1)[-1]  # the record, for the report
        SPANS.append((p, p + 46 + n + e + c, rec))
        for off, w, what in ((0, 4, "sig"), (8, 2, "flags"), (10, 2, "method"), (16, 4, "crc"), (20, 4, "csize"),
                             (24, 4, "usize"), (28, 2, "name_len"), (30, 2, "extra_len"), (32, 2, "comment_len"),
                             (34, 2, "disk"), (42, 4, "local_offset")):
            fields.append((p + off, w, f"cd[{rec}]." + what))
        extra = p + 46 + n
        q = extra
        while q + 4 <= extra + e and q + 4 <= len(data):
            hid, hlen = struct.unpack_from("<HH", data, q)
            fields.append((q + 2, 2, f"cd[{rec}].extra_len_field"))
            if hid == 1:
                for k in range(hlen // 8):
                    fields.append((q + 4 + 8 * k, 8, f"cd[{rec}].zip64_field"))
            q += 4 + hlen
        if p + 46 + n <= len(data):
            fields.append((p + 46 + rng_index(n), 1, f"cd[{rec}].name_byte"))
        if lho + 30 <= len(data) and data[lho:lho + 4] == b"PK\x03\x04":
            ln, le = struct.unpack_from("<HH", data, lho + 26)
            for off, w, what in ((0, 4, "sig"), (6, 2, "flags"), (8, 2, "method"), (14, 4, "crc"), (18, 4, "csize"),
                                 (22, 4, "usize"), (26, 2, "name_len"), (28, 2, "extra_len")):
                fields.append((lho + off, w, f"local[{rec}]." + what))
            start = lho + 30 + ln + le
            SPANS.append((lho, start + struct.unpack_from("<I", data, p + 20)[0], rec))
            csize = struct.unpack_from("<I", data, p + 20)[0]
            if csize == 0xFFFFFFFF:
                csize = 0
            records.append((start, min(csize, max(0, len(data) - start)), rec))
        p = data.find(b"PK\x01\x02", p + 46 + n + e + c)
    return fields, records


_RNG = random.Random(0)


def rng_index(n):
    return _RNG.randrange(n) if n > 0 else 0


def telling(rng, width, old):
    top = (1 << (8 * width)) - 1
    return rng.choice([0, 1, top, top - 1, old + 1, old - 1, old + rng.randrange(1, 64), old - rng.randrange(1, 64),
                       old * 2, old // 2, rng.randrange(top + 1), 0x7FFFFFFF & top, 64, 0xFFFF & top]) & top


def mutate(rng, data, zip_like):
    b = bytearray(data)
    what = []
    SPANS.clear()
    fields, records = zip_fields(data) if zip_like else ([], [])
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        k = rng.randrange(10)
        if k < 5 and fields:
            off, w, name = rng.choice(fields)
            if off + w > len(b):
                continue
            old = int.from_bytes(b[off:off + w], "little")
            new = telling(rng, w, old)
            b[off:off + w] = new.to_bytes(w, "little")
            what.append(f"{name}@{off}:{old}->{new}")
        elif k == 5 and records:
            start, size, rec = rng.choice(records)
            if size:
                i = start + rng.randrange(size)
                if i < len(b):
                    b[i] ^= 1 << rng.randrange(8)
                    what.append(f"record_byte[{rec}]@{i}")
        elif k == 6:
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
            what.append(f"set{where(i)}@{i}")
        elif k == 7:
            i = rng.randrange(len(b))
            n = rng.choice((1, 1, 2, 4, 8, 64))
            if rng.random() < 0.5:
                del b[i:i + n]
                what.append(f"del{n}@{i}")
            else:
                b[i:i] = bytes(rng.randrange(256) for _ in range(n))
                what.append(f"ins{n}@{i}")
        elif k == 8:
            i = rng.randrange(len(b))
            b = b[:i] if rng.random() < 0.7 else b[:len(b) - rng.randrange(1, 120)]
            what.append(f"cut@{len(b)}")
        else:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
            what.append(f"flip{where(i)}@{i}")
    return bytes(b), " ".join(what)


def pickle_ops(pkl):
    """(start, end, opcode, arg) of each opcode of a pickle, or [] when it does not parse."""
    try:
        ops = list(pickletools.genops(pkl))
    except Exception:  # noqa: BLE001 - a pickle damaged before
        return []
    out = []
    for k, (op, arg, pos) in enumerate(ops):
        end = ops[k + 1][2] if k + 1 < len(ops) else len(pkl)
        out.append((pos, end, op, arg))
    return out


def encode_int_op(name, value):
    """The opcode bytes of an int argument re-encoded, for the opcodes that carry one."""
    if name == "BININT1" and 0 <= value < 256:
        return b"K" + bytes([value])
    if name == "BININT2" and 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    if name in ("BININT1", "BININT2", "BININT") and -(1 << 31) <= value < (1 << 31):
        return b"J" + struct.pack("<i", value)
    if name in ("BINGET", "BINPUT") and 0 <= value < 256:
        return (b"h" if name == "BINGET" else b"q") + bytes([value])
    if name in ("BINGET", "BINPUT", "LONG_BINGET", "LONG_BINPUT") and 0 <= value < (1 << 32):
        return (b"j" if "GET" in name else b"r") + struct.pack("<I", value)
    n = (value.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + value.to_bytes(n, "little", signed=True)  # LONG1


# Opcodes that act on the values below them (with --acting: inserted before an opcode of
# the pickle), and values for them to act with: BUILD on a tensor or storage, SETITEM,
# APPEND, REDUCE and NEWOBJ of what lies there, tuples of it.
ACTING = [b"b", b"s", b"u", b"a", b"e", b"0", b"1", b"2", b"(", b"R", b"\x81", b"t", b"\x85", b"\x86", b"\x87", b"N",
          b"}", b"]", b")", b"\x88", b"\x89", b"K\x00", b"K\x01", b"K\x02", b"h\x00", b"h\x01", b"h\x02", b"h\x07"]


def mutate_ops(rng, pkl, acting=False):
    """pkl with one to three of its opcodes changed (deleted, repeated, swapped, replaced by
    another of the pickle's, an int or memo index set to a telling value; with `acting`, also
    one to three of ACTING inserted), and what was done."""
    what = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        ops = [o for o in pickle_ops(pkl) if o[2].name not in ("PROTO", "STOP", "FRAME")]
        if not ops:
            break
        a, b, op, arg = rng.choice(ops)
        kind = rng.randrange(6 if acting else 5)
        if kind == 5:
            ins = b"".join(rng.choice(ACTING) for _ in range(rng.choice((1, 1, 2, 3))))
            pkl = pkl[:a] + ins + pkl[a:]
            what.append(f"op_insert[{ins!r}]@{a}")
            continue
        if kind == 0:
            pkl = pkl[:a] + pkl[b:]
            what.append(f"op_del[{op.name}]@{a}")
        elif kind == 1:
            pkl = pkl[:b] + pkl[a:b] + pkl[b:]
            what.append(f"op_dup[{op.name}]@{a}")
        elif kind == 2:
            c, d, op2, _ = rng.choice(ops)
            pkl = pkl[:a] + pkl[c:d] + pkl[b:]
            what.append(f"op_set[{op.name}->{op2.name}]@{a}")
        elif kind == 3 and isinstance(arg, int) and not isinstance(arg, bool):
            new = rng.choice([0, 1, -1, arg + 1, arg - 1, arg * 2, arg // 2, 1 << 31, (1 << 63) - 1, 1 << 64,
                              rng.randrange(-300, 300)])
            if new < 0 and op.name in ("BINGET", "BINPUT", "LONG_BINGET", "LONG_BINPUT"):
                new = -new
            pkl = pkl[:a] + encode_int_op(op.name, new) + pkl[b:]
            what.append(f"op_int[{op.name}]@{a}:{arg}->{new}")
        else:
            c, d, op2, _ = rng.choice(ops)
            if (c, d) == (a, b):
                continue
            (a, b, op, c, d, op2) = (a, b, op, c, d, op2) if a < c else (c, d, op2, a, b, op)
            pkl = pkl[:a] + pkl[c:d] + pkl[b:c] + pkl[a:b] + pkl[d:]
            what.append(f"op_swap[{op.name},{op2.name}]@{a},{c}")
    return pkl, " ".join(what)


def mutate_pickle(rng, data, acting=False):
    """A torch.save archive with its data.pkl changed by mutate_ops, written again with
    Python's zipfile (stored): damage the pickle VM and the rebuild calls meet with their
    structure intact around it. None when data is no archive with a data.pkl."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            blobs = [z.read(i) for i in infos]
    except Exception:  # noqa: BLE001
        return None, ""
    k = next((i for i, info in enumerate(infos) if info.filename.endswith("data.pkl")), None)
    if k is None:
        return None, ""
    blobs[k], what = mutate_ops(rng, blobs[k], acting)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info, blob in zip(infos, blobs):
            z.writestr(zipfile.ZipInfo(info.filename, (2020, 1, 1, 0, 0, 0)), blob)
    return out.getvalue(), what


def mutate_legacy_pickle(rng, data, acting=False):
    """A legacy file (magic, protocol, sys_info, object and key-list pickles, then the
    storages) with its object pickle changed by mutate_ops. None when the pickles do not parse."""
    f = io.BytesIO(data)
    bounds = []
    try:
        for _ in range(4):
            start = f.tell()
            for _op in pickletools.genops(f):
                pass
            bounds.append((start, f.tell()))
    except Exception:  # noqa: BLE001
        return None, ""
    a, b = bounds[3]
    pkl, what = mutate_ops(rng, data[a:b], acting)
    return data[:a] + pkl + data[b:], what


# ---- torch's side ------------------------------------------------------------------------

def worker():
    """Reads paths from stdin; prints one JSON line each: torch.load's verdict and tensors."""
    import resource
    import signal
    resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))
    import warnings
    warnings.simplefilter("ignore")  # TorchScript dispatch, changed module sources
    import torch
    import zlib
    names = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
             torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
             torch.float64: "F64", torch.complex64: "C64", torch.complex128: "C128"}

    def alarm(*_):
        raise TimeoutError("over 20 s")
    signal.signal(signal.SIGALRM, alarm)

    def clean(name):
        raw = name.encode("utf-8", "surrogatepass")[:200]
        return "".join(chr(c) if 0x20 <= c < 0x7F else "?" for c in raw)

    # Quantized and sparse tensors, as checkpoint_dump prints ptread's quantized() and sparse()
    # entries after the tensors (each list in file order): their parts, each as a plain tensor.
    qnames = {torch.qint8: "QINT8", torch.quint8: "QUINT8", torch.qint32: "QINT32", torch.quint4x2: "QUINT4X2"}
    if hasattr(torch, "quint2x4"):
        qnames[torch.quint2x4] = "QUINT2X4"
    sparse_parts = {torch.sparse_coo: ("coo", lambda t: (t._indices(), t._values())),
                    torch.sparse_csr: ("csr", lambda t: (t.crow_indices(), t.col_indices(), t.values()))}
    for layout, name, parts in (("sparse_csc", "csc", ("ccol_indices", "row_indices")),
                                ("sparse_bsr", "bsr", ("crow_indices", "col_indices")),
                                ("sparse_bsc", "bsc", ("ccol_indices", "row_indices"))):
        if hasattr(torch, layout):
            sparse_parts[getattr(torch, layout)] = (name, lambda t, p=parts: (getattr(t, p[0])(), getattr(t, p[1])(),
                                                                              t.values()))

    def part(o):
        """dtype, shape, byte count and CRC-32 of a plain tensor's contiguous bytes."""
        if o.dtype not in names or o.numel() * o.element_size() > (1 << 30):
            raise OverflowError("opaque part")
        # (contiguous() keeps the stride of a dimension of size 1, which view(uint8)
        # refuses unless it is 1: the same elements as stride 1; a copy would turn a
        # bool's stored byte 0x37 into 1)
        t = o.resolve_conj().resolve_neg().contiguous()
        t = t.as_strided((t.numel(),), (1,))
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return f"{names[o.dtype]} [{','.join(str(s) for s in o.shape)}] {len(raw)} {zlib.crc32(raw):08x}"

    def quantized_or_sparse(o, prefix):
        try:
            if o.is_quantized:
                scheme = str(o.qscheme()).replace("torch.", "")
                line = f"Q {clean(prefix)} {qnames[o.dtype]} [{','.join(str(s) for s in o.shape)}] {scheme}"
                line += f" int_repr {part(o.int_repr())}"
                if "per_channel" in scheme:
                    line += (f" axis {o.q_per_channel_axis()} scales {part(o.q_per_channel_scales())}"
                             f" zero_points {part(o.q_per_channel_zero_points())}")
                else:
                    line += f" scale {struct.pack('<d', o.q_scale()).hex()} zero_point {o.q_zero_point()}"
            else:
                layout, parts = sparse_parts[o.layout]
                line = f"S {clean(prefix)} {layout} [{','.join(str(s) for s in o.shape)}]"
                for p in parts(o):
                    line += f" {part(p)}"
        except (OverflowError, KeyError, RuntimeError):
            opaque.append(1)
            return
        typed.append(line)

    for line in sys.stdin:
        path = line.rstrip("\n")
        signal.alarm(20)
        try:
            # (a load that failed after a sparse tensor leaves it in this list, and the next
            # load would validate it: each file is read as by a fresh process)
            torch._utils._sparse_tensors_to_validate.clear()
            obj = torch.load(path, map_location="cpu")
            out, typed, opaque, on_path = [], [], [], set()

            def walk(o, prefix):
                if isinstance(o, torch.Tensor):
                    if prefix is not None and (o.is_quantized or o.layout in sparse_parts):
                        quantized_or_sparse(o, prefix)
                        return
                    if (prefix is None or o.dtype not in names or o.layout != torch.strided or
                            o.numel() * o.element_size() > (1 << 30)):  # (checkpoint_dump's bound)
                        opaque.append(1)
                        return
                    # (contiguous() keeps the stride of a dimension of size 1, which
                    # view(uint8) refuses unless it is 1: the same elements as stride 1;
                    # a copy would turn a bool's stored byte 0x37 into 1)
                    out.append(f"T {clean(prefix)} {part(o)}")
                elif isinstance(o, torch.nn.Module):  # (a ScriptModule too)
                    try:
                        sd = o.state_dict()
                    except Exception:  # noqa: BLE001 - a module damaged past state_dict()
                        opaque.append(1)
                        return
                    walk(sd, prefix)
                elif isinstance(o, (dict, list, tuple)):
                    if id(o) in on_path:  # a cycle (a damaged memo): named once, as ptread names it
                        return
                    on_path.add(id(o))
                    items = o.items() if isinstance(o, dict) else enumerate(o)
                    for k, v in items:
                        walk(v, str(k) if prefix in (None, "") else f"{prefix}.{k}")
                    on_path.discard(id(o))
                elif isinstance(o, (int, float, str, bytes, bool, type(None))):
                    return
                else:
                    opaque.append(1)
            walk(obj, None if isinstance(obj, torch.Tensor) else "")
            res = {"v": "OPAQUE"} if opaque else {"v": "OK", "t": out + sorted(typed, key=lambda x: x[0])}
        except BaseException as e:  # noqa: BLE001 - any refusal
            res = {"v": "ERR", "why": f"{type(e).__name__}: {e}"[:200]}
        finally:
            signal.alarm(0)
        print(json.dumps(res), flush=True)


def torch_verdicts(paths):
    results = []
    todo = list(paths)
    while todo:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate("\n".join(todo) + "\n")
        got = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        results += got
        todo = todo[len(got):]
        if todo:  # the worker died on todo[0]
            results.append({"v": "ERR", "why": f"torch.load's process died ({proc.returncode})"})
            todo = todo[1:]
    return results


def ptread_verdicts(dump, mode, paths):
    out = subprocess.run([dump, mode], input="\n".join(paths) + "\n", capture_output=True, text=True,
                         errors="replace", check=True).stdout.splitlines()
    results, i = [], 0
    while i < len(out):
        head = out[i]
        i += 1
        if head.startswith("ERR"):
            results.append({"v": "ERR", "why": head[4:]})
        elif head == "OPAQUE":
            results.append({"v": "OPAQUE"})
        else:
            n = int(head.split()[1])
            results.append({"v": "OK", "t": out[i:i + n]})
            i += n
    return results


# Disagreements understood (docs/formats.md: the zip container): counted apart, printed
# with --verbose.
KNOWN_REJECT = {
    # torch makes a storage of the size data.pkl declares over a record holding fewer bytes
    # (its tensors then read past the record's buffer)
    "storage_too_small": "torch over-reads a short record",
    # torch ignores miniz's inflate status: a record that does not inflate (or not to its
    # size) gives whatever the buffer held
    "zip_inflate_failed": "torch ignores a failed inflate",
    # miniz bounds a record by the file's end, not the directory's start: torch reads
    # directory bytes as tensor data
    "zip_record_out_of_bounds": "torch reads past a record",
    # a legacy pickle naming a storage key the file does not hold: torch makes it
    # uninitialized (torch.UntypedStorage(nbytes)) and reads nothing into it
    "record_missing": "torch leaves a storage uninitialized",
}


def known(kind, t, o, how, base, base_path):
    if kind == "WE_REJECT":
        m = re.search(r"holds (\d+) elements in the file; the pickle says (\d+)", o["why"])
        if m and (int(m.group(1)) - int(m.group(2))) % (1 << 60) == 0:
            # torch compares element size x count in 64 bits: a count off by a multiple
            # of 2^64 / element size passes there
            return "torch's storage byte count wraps"
        if re.search(r"stored record '[^']*' has compressed size \d+ but uncompressed size \d+ \(", o["why"]):
            # the entry's time field is set (else miniz refuses the archive on opening):
            # torch reads the uncompressed size from the record's data start
            return "torch reads a stored record's uncompressed size"
        if os.path.basename(base_path).startswith("ts_") and "odd number of items for a dict" in o["why"]:
            # torch 1.13's jit unpickler pairs SETITEMS's items past the end of its stack
            # (torch 2.x checks the count and refuses, as ptread)
            return "torch.jit.load 1.13 reads past its stack"
        if os.path.basename(base_path).startswith("ts_") and (
                o["why"].startswith("shape_overflow") or "holds a global" in o["why"] or
                "arguments are not a tuple" in o["why"] or "storage class is a int" in o["why"] or
                "unknown storage class '__torch__" in o["why"] or "a int called" in o["why"] or
                "negative size or stride" in o["why"] or "called as a class or function" in o["why"]):
            # torch.jit.load's unpickler sets sizes and strides unchecked (an extent past 64
            # bits, or negative), reads a global as the int of its own table (a storage class
            # or a callable may be any int, or any class), and lets the global take what it
            # needs of the stack for REDUCE's and NEWOBJ's arguments
            return "torch.jit.load's unpickler checks less"
        if os.path.basename(base_path).startswith("ts_") and o["why"].startswith("view_out_of_bounds"):
            # torch.jit.load's unpickler sets a tensor's offset, sizes and strides without
            # checking them against its storage (it reads memory past it)
            return "torch.jit.load reads a view past its storage"
        if ((o["why"].startswith("view_out_of_bounds") and re.search(r"elements of QU?INT", o["why"])) or
                re.search(r"_rebuild_qtensor: a non-contiguous QUINT\dX\d tensor", o["why"])):
            # _rebuild_qtensor sets a quantized tensor's offset, sizes and strides unchecked
            # (torch reads memory past its storage)
            return "torch reads a quantized view past its storage"
        return KNOWN_REJECT.get(o["why"].split(" ", 1)[0])
    if (kind == "DIFF" and len(t["t"]) == len(o["t"]) and
            all(a == b or ((" at 0x" in a or "<class '" in a or "<tensor>" in b) and a.split()[-4:] == b.split()[-4:])
                for a, b in zip(t["t"], o["t"]))):
        # a name made of a key that is a function or class (Python's str() of it says which,
        # and holds a function's address; ptread, which imports nothing, names it
        # module.name) or a tensor (str() prints its values; ptread <tensor>)
        return "torch names a key by str() of a class, function or tensor"
    if (kind == "DIFF" and base["v"] == "OK" and len(t["t"]) == len(o["t"]) == len(base["t"]) and
            all(a == b or b == c for a, b, c in zip(t["t"], o["t"], base["t"]))):
        # where the two differ, ptread reads what torch.load read from the undamaged file:
        # torch read other bytes (a record whose external attributes say "directory": miniz
        # extracts nothing and torch keeps the uninitialized buffer)
        return "ptread reads the undamaged values, torch other bytes"
    if kind == "WE_ACCEPT":
        why = t["why"]
        # torch 1.13's _rebuild_tensor_v2 has no metadata argument, torch 2.x's has (ptread
        # reads it as 2.x does)
        if "_rebuild_tensor_v2() takes 6 positional arguments but 7 were given" in why:
            return "torch 1.13 takes no metadata argument"
        # BUILD on a global: a class's __dict__ is read-only, a function's is not; ptread
        # cannot tell them apart without importing the global and keeps both inert
        if "'mappingproxy' object does not support item assignment" in why:
            return "torch's class takes no BUILD state (ptread imports nothing)"
        # torch crashed (a damaged TorchScript archive: a segmentation fault in torch.jit.load):
        # nothing to compare with
        if why.startswith("torch.load's process died (-11)"):
            return "torch crashes"
        # Python's unpickler keeps its memo in an array as long as the largest index put:
        # a far index is more memory than the worker's limit (ptread's memo is sparse there)
        if why.startswith("MemoryError"):
            return "Python's memo array is too big"
        # a module called by REDUCE runs its forward(), a module class its __init__ (ptread
        # runs nothing: an inert object)
        if (re.search(r"object has no attribute '_(backward|forward|forward_pre)_hooks'", why) or
                "is not a Module subclass" in why or re.search(r"cannot assign '[^']*' as (buffer|parameter|child module)", why)):
            return "torch runs a module's code while unpickling"
        # torch requires a version record it can parse (ptread does not read it)
        parts = how.split(": ", 1)[1].split()
        if "version" in why or why == "RuntimeError: " or all("[version]" in m for m in parts):
            return "torch needs the version record"
        # torch requires every record under the first record's folder, exactly (ptread
        # takes the folder of data.pkl, and names without case)
        if "file in archive is not in a subdirectory" in why:
            return "torch needs every record in the first one's folder"
        # a global torch cannot import: ptread keeps the call as an inert object
        if why.startswith(("AttributeError: Can't get attribute", "ModuleNotFoundError")):
            return "torch imports a global ptread keeps inert"
        if os.path.basename(base_path).startswith("ts_"):
            # TorchScript: torch.jit.load resolves each object's class from the code it
            # compiles (ptread keeps the objects inert and reads only the parameter and
            # buffer lines of code/)
            if ("Unknown type name" in why or "cannot be used in a type expression" in why or
                    "expected a valid token" in why):
                return "torch.jit.load resolves a class ptread keeps inert"
            # its unpickler takes each value as the type it expects (a location as a
            # device string ...), where ptread keeps what torch.load would
            if ("INTERNAL ASSERT FAILED" in why or "Unpickler expected 1 element" in why or
                    "device type at start of device string" in why or "Invalid device string" in why or
                    "not in the map" in why or
                    "Can't hash IValues" in why or "access to globals_" in why or "Expected length to be" in why or
                    # (torch.load's set_ takes no strides as contiguous ones; torch.jit.load's wants one a size)
                    "dimensionality of sizes" in why or "Expected PROTO opcode" in why):
                return "torch.jit.load's unpickler checks what torch.load's does not"
            # ... and compiles code/ and reads the debug records, which ptread never reads
            # (a message naming a damaged record reaches Python as bytes it cannot decode)
            if ("code/" in why or ".debug_pkl" in why or "import_source.cpp" in why or
                    (why.startswith("RuntimeError: expected") and "\n  File " in why) or
                    why.startswith("UnicodeDecodeError") or all("[code/" in m for m in parts)):
                return "torch.jit.load compiles code/ and reads debug records"
    return None


def main():
    if sys.argv[1:] == ["--worker"]:
        return worker()
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--mode", default="mmap", choices=("mmap", "read"))
    ap.add_argument("--keep")
    ap.add_argument("--dump")
    ap.add_argument("--verbose", action="store_true", help="print the known disagreements too")
    ap.add_argument("--pickle-share", type=float, default=0.3,
                    help="the share of zip-based copies whose data.pkl is changed opcode by opcode")
    ap.add_argument("--acting", action="store_true",
                    help="pickle changes also insert opcodes that act on the values below them (BUILD, SETITEM, REDUCE ...)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ptread-ckdiff-")
    try:
        dump = args.dump
        if not dump:
            dump = os.path.join(tmp, "checkpoint_dump")
            subprocess.run(["g++", "-std=c++17", "-O1", "-DPTREAD_WITH_ZLIB=1", "-I" + os.path.join(ROOT, "include"),
                            os.path.join(HERE, "checkpoint_dump.cpp"), "-o", dump, "-lz", "-pthread"], check=True)
        bases = make_bases(tmp)
        paths, hows, base_of = [], [], {}
        for n in range(args.count):
            # One generator a case: a case is the same whatever the others drew (legacy
            # files name storages by address, so their sizes vary from run to run).
            rng = random.Random(f"{args.seed}:{n}")
            _RNG.seed(f"{args.seed}:{n}:names")
            base = rng.choice(bases)
            data = open(base, "rb").read()
            zip_like = "legacy" not in os.path.basename(base)
            m = None
            if rng.random() < args.pickle_share:
                m, how = (mutate_pickle(rng, data, args.acting) if zip_like else
                          mutate_legacy_pickle(rng, data, args.acting))
            if m is None:
                m, how = mutate(rng, data, zip_like)
            p = os.path.join(tmp, f"m{n}.pt")
            with open(p, "wb") as f:
                f.write(m)
            paths.append(p)
            base_of[p] = base
            hows.append(os.path.basename(base) + ": " + how)
        theirs = torch_verdicts(paths)
        base_verdicts = torch_verdicts(bases)
        ours = ptread_verdicts(dump, args.mode, paths)
        for b, t, o in zip(bases, base_verdicts, ptread_verdicts(dump, args.mode, bases)):
            if t != o:  # the undamaged files must read the same, or nothing below means much
                print(f"BASE {os.path.basename(b)} reads otherwise:\n    torch  {t}\n    ptread {o}")
                return 1
        counts = Counter()
        for p, how, t, o in zip(paths, hows, theirs, ours):
            if t["v"] == "OPAQUE" or o["v"] == "OPAQUE":
                kind = "opaque"
            elif t["v"] == "ERR":
                kind = "both_err" if o["v"] == "ERR" else "WE_ACCEPT"
            elif o["v"] == "ERR":
                kind = "WE_REJECT"
            else:
                kind = "same" if t["t"] == o["t"] else "DIFF"
            counts[kind] += 1
            if kind in ("same", "both_err", "opaque"):
                continue
            reason = known(kind, t, o, how, base_verdicts[bases.index(base_of[p])], base_of[p])
            if reason:
                counts[f"{kind} ({reason})"] += 1
                counts[kind] -= 1
                if not args.verbose:
                    continue
            print(f"{kind} {os.path.basename(p)} [{how}]")
            if kind == "DIFF":
                for a, b in zip(t["t"], o["t"]):
                    if a != b:
                        print(f"    torch  {a}\n    ptread {b}")
                        break
                if len(t["t"]) != len(o["t"]):
                    print(f"    torch {len(t['t'])} tensors, ptread {len(o['t'])}")
            else:
                print(f"    torch:  {t.get('why', 'read')}\n    ptread: {o.get('why', 'read')}")
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                shutil.copy(p, os.path.join(args.keep, f"{kind}_{args.seed}_{os.path.basename(p)}"))
        print("\n".join(f"{v:6d} {k}" for k, v in sorted(counts.items()) if v))
        return 1 if any(counts[k] for k in ("DIFF", "WE_REJECT", "WE_ACCEPT")) else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
