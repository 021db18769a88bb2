#!/usr/bin/env python3
"""Writes ptread's adversarial corpus: hostile, truncated and malformed checkpoints.

    python3 tests/data/adversarial/make.py        (standard library only; deterministic)

Each file is a small variation on a valid checkpoint, made to attack one thing: the zip
directory (truncation at every record boundary, entries outside the file or overlapping,
inconsistent ZIP64 records), deflate (bombs, streams longer or shorter than their header),
the pickle VM (memo bombs, 10^6-deep nesting, huge literals and lengths, bad UTF-8,
unknown and unsupported opcodes, stack misuse), tensor arguments (overflowing shapes,
negative sizes, views past their storage, storages shared under two dtypes), the legacy
format (storage counts that lie) and the tar format (members past the end of the file).

Besides the files it writes expected.json ({file: ErrorCode name, or "ok"}: what ptread must
answer in every load mode) and README.md (the table of files). tests/unit/adversarial.cpp
reads both. Files named deflate_* hold deflated records: without zlib (PTREAD_WITH_ZLIB=0)
their expected code is zip_unsupported_compression.

Truncations start from the torch-written fixture tests/fixtures/tensor_root.pt (its records
are found by parsing it, not by fixed offsets); the rest is built here by a writer that lays
out archives as torch's PyTorchStreamWriter does (records under one folder, stored data
64-byte aligned, ZIP64 end records always present) and pickles as torch's protocol 2.
"""

import json
import math
import os
import struct
import sys
import tarfile
import io
import zlib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "fixtures")

ENTRIES = []  # (file name, description, expected code)
TORCH = {}  # file name -> "reads" or "refuses": what torch.load does with it (check_torch.py)


def emit(name, data, expected, what, torch=None):
    assert name not in [e[0] for e in ENTRIES], name
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(bytes(data))
    ENTRIES.append((name, what, expected))
    if torch is not None:
        # "reads_other": torch reads it with data ptread does not apply, which ptread refuses
        assert torch in ("reads", "refuses", "reads_other"), name
        assert (torch == "reads") == (expected == "ok") and (torch != "reads_other" or expected == "unsupported_tensor"), name
        TORCH[name] = torch


# ---------------------------------------------------------------------------------------
# Pickle opcodes (protocol 2, as torch.save writes them)

def p_int(i):
    if 0 <= i < 256:
        return b"K" + bytes([i])
    if 0 <= i < 65536:
        return b"M" + struct.pack("<H", i)
    if -(2 ** 31) <= i < 2 ** 31:
        return b"J" + struct.pack("<i", i)
    n = (i.bit_length() + 8) // 8  # two's complement, room for the sign
    return b"\x8a" + bytes([n]) + i.to_bytes(n, "little", signed=True)


def p_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else s  # bytes: written as they are
    return b"X" + struct.pack("<I", len(b)) + b


def p_global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def p_tuple(items):
    if len(items) == 0:
        return b")"
    if len(items) <= 3:
        return b"".join(items) + bytes([0x84 + len(items)])
    return b"(" + b"".join(items) + b"t"


def p_ints(values):
    return p_tuple([p_int(v) for v in values])


def p_dict(pairs):
    """pairs: [(key opcodes, value opcodes)]"""
    if not pairs:
        return b"}"
    return b"}(" + b"".join(k + v for k, v in pairs) + b"u"


def p_ordered_dict():
    return p_global("collections", "OrderedDict") + b")R"


def pid(cls, key, numel, location="cpu", view=None, tag="storage"):
    items = [p_str(tag), p_global("torch", cls), p_str(key), p_str(location), p_int(numel)]
    if view is not None:
        items.append(view)
    return b"(" + b"".join(items) + b"t"


def rebuild_v2(persistent_id, offset, size, stride, size_ops=None, stride_ops=None, requires_grad=b"\x89"):
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())"""
    return (p_global("torch._utils", "_rebuild_tensor_v2") + b"(" + persistent_id + b"Q" + p_int(offset) +
            (size_ops if size_ops is not None else p_ints(size)) +
            (stride_ops if stride_ops is not None else p_ints(stride)) + requires_grad + p_ordered_dict() + b"tR")


def tensor(key, numel, size=None, stride=None, offset=0, cls="FloatStorage", **kw):
    size = (numel,) if size is None else size
    if stride is None:
        stride, acc = [], 1
        for d in reversed(size):
            stride.insert(0, acc)
            acc *= max(d, 1)
    return rebuild_v2(pid(cls, key, numel), offset, size, stride, **kw)


def pickle(body, proto=2):
    return b"\x80" + bytes([proto]) + body + b"."


def floats(n, start=0.0):
    return struct.pack("<%df" % n, *[start + 0.5 * k for k in range(n)])


# The state dict most files vary: {'w': F32[4] on storage '0', 'b': F32[2] on storage '1'}.
BASE_PKL = pickle(p_dict([(p_str("w"), tensor("0", 4)), (p_str("b"), tensor("1", 2))]))
BASE_DATA = {"0": floats(4, 1.0), "1": floats(2, -1.0)}


# ---------------------------------------------------------------------------------------
# Zip archives laid out like torch's PyTorchStreamWriter

def raw_deflate(data, level=9):
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def zip_build(records, zip64=True, align=64):
    """records: dicts with name, data; optional method (0 stored, 8 deflate), comp (the
    bytes written for a deflated record), zip64_extra (put sizes and offset in a ZIP64
    extra field), unaligned (no padding: data right after the header, plus `unaligned`
    junk bytes before the header). Returns (bytearray, layout) where layout gives the
    offsets of every structure, for patching."""
    out = bytearray()
    lay = {"local": [], "data": [], "cd_entry": [], "cd_extra": []}
    metas = []
    for r in records:
        name = r["name"].encode()
        data = r["data"]
        method = r.get("method", 0)
        comp = r.get("comp", raw_deflate(data) if method == 8 else data)
        crc = zlib.crc32(data) & 0xFFFFFFFF
        out += b"\0" * r.get("unaligned", 0)
        off = len(out)
        head_len = 30 + len(name)
        extra = b""
        if method == 0 and not r.get("unaligned"):
            pad = (-(off + head_len + 4)) % align
            extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(comp), len(data),
                           len(name), len(extra)) + name + extra
        lay["local"].append(off)
        lay["data"].append(len(out))
        out += comp
        metas.append((name, method, crc, len(comp), len(data), off, r.get("zip64_extra", False)))
    cd_off = len(out)
    for name, method, crc, csize, usize, off, z64 in metas:
        extra = b""
        if z64:
            extra = struct.pack("<HHQQQ", 1, 24, usize, csize, off)
            csize = usize = off = 0xFFFFFFFF
        lay["cd_entry"].append(len(out))
        lay["cd_extra"].append(len(out) + 46 + len(name) if z64 else None)
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, method, 0, 0x21, crc, csize, usize,
                           len(name), len(extra), 0, 0, 0, 0, off) + name + extra
    cd_size = len(out) - cd_off
    n = len(records)
    lay["cd"], lay["cd_size"] = cd_off, cd_size
    if zip64:
        lay["eocd64"] = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n, cd_size, cd_off)
        lay["locator"] = len(out)
        out += struct.pack("<IIQI", 0x07064B50, 0, lay["eocd64"], 1)
    lay["eocd"] = len(out)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, cd_size, cd_off, 0)
    return out, lay


def checkpoint(pkl, data=BASE_DATA, prefix="adv", method=0, extra_records=(), **kw):
    recs = [{"name": prefix + "/data.pkl", "data": pkl, "method": method}]
    for k, v in data.items():
        recs.append({"name": prefix + "/data/" + k, "data": v, "method": method})
    recs.append({"name": prefix + "/version", "data": b"3\n", "method": method})
    recs.extend(extra_records)
    return zip_build(recs, **kw)


def ck(pkl, **kw):
    return checkpoint(pkl, **kw)[0]


def u16(b, off, v):
    struct.pack_into("<H", b, off, v)


def u32(b, off, v):
    struct.pack_into("<I", b, off, v)


def u64(b, off, v):
    struct.pack_into("<Q", b, off, v)


# Central directory entry fields: csize @20, usize @24, name_len @28, extra_len @30,
# local header offset @42. Local header: method @8, extra_len @28.
CD_CSIZE, CD_USIZE, CD_METHOD, CD_OFFSET = 20, 24, 10, 42
# ZIP64 end record: entries on disk @24, total @32, cd size @40, cd offset @48.


# ---------------------------------------------------------------------------------------
# Truncations of a checkpoint written by torch

def parse_zip(b):
    """Offsets of a torch-written archive's structures (no assumptions on sizes)."""
    eocd = b.rindex(b"PK\x05\x06")
    loc = eocd - 20
    assert b[loc:loc + 4] == b"PK\x06\x07"
    eocd64 = struct.unpack_from("<Q", b, loc + 8)[0]
    n, cd_size, cd_off = struct.unpack_from("<QQQ", b, eocd64 + 32)
    entries, pos = [], cd_off
    for _ in range(n):
        nl, xl, cl = struct.unpack_from("<HHH", b, pos + 28)
        local = struct.unpack_from("<I", b, pos + 42)[0]
        csize = struct.unpack_from("<I", b, pos + 20)[0]
        name = b[pos + 46:pos + 46 + nl].decode()
        lnl, lxl = struct.unpack_from("<HH", b, local + 26)
        entries.append({"name": name, "cd": pos, "local": local, "data": local + 30 + lnl + lxl, "size": csize})
        pos += 46 + nl + xl + cl
    return {"entries": entries, "cd": cd_off, "eocd64": eocd64, "locator": loc, "eocd": eocd}


def truncations():
    base = open(os.path.join(FIXTURES, "tensor_root.pt"), "rb").read()
    z = parse_zip(base)
    pkl = next(e for e in z["entries"] if e["name"].endswith("/data.pkl"))
    st = next(e for e in z["entries"] if e["name"].endswith("/data/0"))
    second_cd = z["entries"][1]["cd"]
    cuts = [
        ("trunc_magic_only.pt", 4, "only the first local header's signature"),
        ("trunc_in_local_header.pt", 20, "cut inside the first local header"),
        ("trunc_in_data_pkl.pt", pkl["data"] + pkl["size"] // 2, "cut inside data.pkl's bytes"),
        ("trunc_at_storage_header.pt", st["local"], "cut at the local header of data/0 (a record boundary)"),
        ("trunc_in_storage_data.pt", st["data"] + 5, "cut inside data/0's bytes"),
        ("trunc_at_cd.pt", z["cd"], "cut where the central directory starts"),
        ("trunc_in_cd.pt", second_cd + 10, "cut inside the second central directory entry"),
        ("trunc_in_eocd64.pt", z["eocd64"] + 30, "cut inside the ZIP64 end of central directory record"),
        ("trunc_in_locator.pt", z["locator"] + 10, "cut inside the ZIP64 locator"),
        ("trunc_before_eocd.pt", z["eocd"], "cut right before the end of central directory record"),
        ("trunc_in_eocd.pt", len(base) - 5, "the last 5 bytes of the end of central directory record missing"),
    ]
    for name, n, what in cuts:
        emit(name, base[:n], "truncated", "tensor_root.pt (torch 1.13) " + what + " (%d of %d bytes)" % (n, len(base)))
    # The end records survive but 64 bytes in the middle are gone: offsets point past them.
    mid = pkl["data"] + 40
    emit("trunc_middle_removed.pt", base[:mid] + base[mid + 64:], "zip_corrupt",
         "tensor_root.pt with 64 bytes cut out of data.pkl: the intact end records point past the directory")


# ---------------------------------------------------------------------------------------

def zip_files():
    b, lay = checkpoint(BASE_PKL)
    emit("zip_base_ok.pt", b, "ok", "the valid base of the zip files below, as this generator writes it")

    # Entries pointing outside the file or into the directory.
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][1] + CD_OFFSET, len(b) + 1000)
    emit("zip_local_offset_past_eof.pt", b, "zip_record_out_of_bounds",
         "data/0's local header offset lies past the end of the file")
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][1] + CD_OFFSET, lay["cd"] + 4)
    emit("zip_local_offset_in_cd.pt", b, "zip_record_out_of_bounds",
         "data/0's local header offset points into the central directory")
    b, lay = checkpoint(BASE_PKL)
    for f in (CD_CSIZE, CD_USIZE):
        u32(b, lay["cd_entry"][1] + f, 0x7FFF0000)
    emit("zip_size_past_eof.pt", b, "zip_record_out_of_bounds", "data/0 claims 2 GiB (stored) in a small file")
    b, lay = checkpoint(BASE_PKL)
    # data/1 is the last data record: make it run 8 bytes into the central directory.
    grow = lay["cd"] - lay["data"][2] + 8
    for f in (CD_CSIZE, CD_USIZE):
        u32(b, lay["cd_entry"][2] + f, grow)
    emit("zip_size_into_cd.pt", b, "zip_record_out_of_bounds",
         "data/1's stored bytes run 8 bytes into the central directory")
    b, lay = checkpoint(BASE_PKL)
    u16(b, lay["local"][2] + 28, 0xFFFF)
    emit("zip_local_extra_huge.pt", b, "zip_record_out_of_bounds",
         "data/1's local header claims a 65535-byte extra field, pushing its data past the directory")
    b, lay = checkpoint(BASE_PKL)
    b[lay["local"][1]:lay["local"][1] + 4] = b"PK\x09\x09"
    emit("zip_local_bad_signature.pt", b, "zip_corrupt", "data/0's local header has a wrong signature")
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][1] + CD_USIZE, 32)
    emit("zip_stored_size_mismatch.pt", b, "zip_corrupt",
         "data/0 is stored but its compressed (16) and uncompressed (32) sizes differ")
    b, lay = checkpoint(BASE_PKL)
    u16(b, lay["cd_entry"][1] + CD_METHOD, 12)
    emit("zip_method_bzip2.pt", b, "zip_unsupported_compression", "data/0 uses compression method 12 (bzip2)")

    # Overlapping entries (stored): data/1's directory entry points at data/0's local header.
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][2] + CD_OFFSET, lay["local"][1])
    u32(b, lay["cd_entry"][2] + 16, struct.unpack_from("<I", b, lay["cd_entry"][1] + 16)[0])  # crc
    emit("zip_overlap_stored.pt", b, "ok",
         "data/1's directory entry points at data/0's record (overlapping stored entries): in bounds, "
         "read-only, no amplification; torch (miniz) reads it", torch="reads")
    # Stored data not aligned for its dtype (a re-zipped file): valid, must read.
    recs = [{"name": "adv/data.pkl", "data": BASE_PKL}, {"name": "adv/data/0", "data": BASE_DATA["0"], "unaligned": 1},
            {"name": "adv/data/1", "data": BASE_DATA["1"], "unaligned": 3}, {"name": "adv/version", "data": b"3\n"}]
    emit("zip_unaligned_stored.pt", zip_build(recs)[0], "ok",
         "stored storages at odd offsets (no alignment padding, as `zip -0` writes): valid; "
         "tensors must still hand out F32-aligned data")

    # End records.
    b, lay = checkpoint(BASE_PKL, zip64=False)
    u16(b, lay["eocd"] + 8, 0xFFFF)
    u16(b, lay["eocd"] + 10, 0xFFFF)
    emit("zip_eocd_count_65535.pt", b, "zip_corrupt",
         "no ZIP64 records; the end record claims 65535 entries in a 4-entry directory")
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["eocd64"] + 24, 1 << 40)
    u64(b, lay["eocd64"] + 32, 1 << 40)
    emit("zip64_count_huge.pt", b, "zip_corrupt",
         "the ZIP64 end record claims 2^40 entries in a %d-byte directory: they cannot fit, so the file "
         "is corrupt (not a Limits matter: no limit would make it readable)" % lay["cd_size"])
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["eocd64"] + 24, 5)
    u64(b, lay["eocd64"] + 32, 5)
    emit("zip64_count_mismatch.pt", b, "zip_corrupt",
         "the ZIP64 end record counts 5 entries, the directory (and the classic end record) 4")
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["eocd64"] + 48, 1 << 63)
    emit("zip64_cd_offset_huge.pt", b, "zip_corrupt", "the ZIP64 end record puts the directory at byte 2^63")
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["eocd64"] + 40, lay["cd_size"] + 4096)
    emit("zip64_cd_size_past_eocd64.pt", b, "zip_corrupt",
         "the ZIP64 end record's directory size runs past the end of the file")
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["locator"] + 8, 1 << 62)
    emit("zip64_locator_past_eof.pt", b, "zip_corrupt", "the ZIP64 locator points at byte 2^62")

    # Read as torch reads them (miniz 2.1, checked with torch 1.13's torch.load).
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["locator"] + 8, lay["local"][1])
    emit("zip64_locator_to_other_bytes.pt", b, "ok",
         "the ZIP64 locator points at a local header, not at a ZIP64 end record: ignored, the classic "
         "end record's values stand (torch reads it)", torch="reads")
    b, lay = checkpoint(BASE_PKL)
    u64(b, lay["eocd64"] + 40, lay["cd_size"] + 8)
    emit("zip64_cd_size_into_end_records.pt", b, "ok",
         "the ZIP64 end record's directory size reaches 8 bytes into the end records: entries are read "
         "by count, the directory is bounded by the file (torch reads it)", torch="reads")
    b, lay = checkpoint(BASE_PKL)
    u16(b, lay["cd_entry"][1] + 8, 0x0001)
    emit("zip_encrypted_record.pt", b, "zip_unsupported_feature",
         "data/0 is marked encrypted (flag bit 0): no bytes are handed out as its data (torch: "
         "unsupported encryption)", torch="refuses")
    b, lay = checkpoint(BASE_PKL)
    u16(b, lay["cd_entry"][2] + 8, 0x0040)
    emit("zip_strong_encryption.pt", b, "zip_unsupported_feature",
         "data/1 is marked strongly encrypted (flag bit 6) (torch: unsupported encryption)", torch="refuses")
    b, lay = checkpoint(BASE_PKL, extra_records=[{"name": "adv/extra/notes", "data": b"hello"}])
    u16(b, lay["cd_entry"][4] + 8, 0x0001)
    emit("zip_encrypted_unused_record.pt", b, "ok",
         "a record the checkpoint does not use is marked encrypted: never read (torch reads the file)", torch="reads")
    # miniz checks every directory entry on opening, on its 32-bit fields, used or not.
    notes = [{"name": "adv/extra/notes", "data": b"hello"}]
    b, lay = checkpoint(BASE_PKL, extra_records=notes)
    u32(b, lay["cd_entry"][4] + CD_USIZE, 6)
    emit("zip_unused_record_sizes_differ.pt", b, "zip_corrupt",
         "a record the checkpoint does not use is stored with compressed size 5 and uncompressed size 6 "
         "(time field 0, as torch writes): refused on opening, as torch refuses it", torch="refuses")
    b, lay = checkpoint(BASE_PKL, extra_records=notes)
    u32(b, lay["cd_entry"][4] + CD_USIZE, 6)
    u16(b, lay["cd_entry"][4] + 12, 0x6000)
    emit("zip_unused_record_sizes_differ_time_set.pt", b, "ok",
         "the same with the entry's time field set: miniz reads the method and the time as one 32-bit "
         "value, so its check passes, and the record is never read (torch reads the file)", torch="reads")
    b, lay = checkpoint(BASE_PKL, extra_records=notes)
    u32(b, lay["cd_entry"][4] + CD_CSIZE, 0)
    u16(b, lay["cd_entry"][4] + 12, 0x6000)
    emit("zip_unused_record_no_compressed_size.pt", b, "zip_corrupt",
         "an unused record (time field set) claims 5 bytes from a compressed size of 0: refused on "
         "opening, as torch refuses it", torch="refuses")
    b, lay = checkpoint(BASE_PKL, extra_records=notes)
    for f in (CD_CSIZE, CD_USIZE):
        u32(b, lay["cd_entry"][4] + f, 0x7FFF0000)
    emit("zip_unused_record_past_eof.pt", b, "zip_record_out_of_bounds",
         "an unused record claims 2 GiB (stored) in a small file: refused on opening, as torch refuses it",
         torch="refuses")
    recs = [{"name": "adv/data.pkl", "data": BASE_PKL},
            {"name": "adv/data/0", "data": BASE_DATA["0"], "zip64_extra": True},
            {"name": "adv/data/1", "data": BASE_DATA["1"]}, {"name": "adv/version", "data": b"3\n"}]
    b, lay = zip_build(recs)
    x = lay["cd_extra"][1]
    u64(b, x + 4, lay["local"][1])  # the extra's first field is now the offset; the sizes in 32 bits
    for f in (CD_CSIZE, CD_USIZE):
        u32(b, lay["cd_entry"][1] + f, len(BASE_DATA["0"]))
    emit("zip64_offset_in_small_file.pt", b, "zip_record_out_of_bounds",
         "data/0's directory offset is 0xFFFFFFFF with the real one in a ZIP64 extra, its sizes in 32 bits, "
         "in a small file: miniz checks offset + 30 + size against the file's size on the 32-bit fields "
         "(torch refuses it)", torch="refuses")
    b, lay = checkpoint(BASE_PKL)
    u16(b, lay["cd_entry"][3] + 8, 0x2000)
    emit("zip_masked_headers.pt", b, "zip_unsupported_feature",
         "the version record has masked local headers (flag bit 13, central directory encryption): "
         "refused on opening, for any record, as torch refuses it", torch="refuses")
    b, lay = checkpoint(BASE_PKL)
    u16(b, lay["cd_entry"][1] + 34, 2)
    emit("zip_record_on_disk_2.pt", b, "zip_unsupported_feature",
         "data/0 starts on disk 2 of a one-file archive (torch: unsupported multidisk archive)", torch="refuses")
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["locator"] + 16, 3)
    emit("zip64_three_disks.pt", b, "zip_unsupported_feature",
         "the ZIP64 locator counts 3 disks (torch: unsupported multidisk archive)", torch="refuses")
    b, lay = checkpoint(BASE_PKL, zip64=False)
    u16(b, lay["eocd"] + 8, 3)
    emit("zip_eocd_entries_on_disk.pt", b, "zip_unsupported_feature",
         "no ZIP64 records; the end record has 3 of its 4 entries on this disk (torch: unsupported "
         "multidisk archive)", torch="refuses")
    b, lay = checkpoint(BASE_PKL, zip64=False)
    u16(b, lay["eocd"] + 4, 1)
    u16(b, lay["eocd"] + 6, 1)
    for k in range(4):
        u16(b, lay["cd_entry"][k] + 34, 1)
    emit("zip_disks_numbered_from_1.pt", b, "ok",
         "every disk number is 1 (some writers count disks from 1): one disk (torch reads it)", torch="reads")

    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][1] + 38, 0x10)
    emit("zip_record_marked_directory.pt", b, "ok",
         "data/0's external attributes mark it an MS-DOS directory: its bytes are read as stored (miniz "
         "extracts nothing for a directory, and torch hands out its uninitialized buffer as the tensor)",
         torch="reads")
    recs = [{"name": "adv/Data.PKL", "data": BASE_PKL}, {"name": "adv/DATA/0", "data": BASE_DATA["0"]},
            {"name": "adv/Data/1", "data": BASE_DATA["1"]}, {"name": "adv/VERSION", "data": b"3\n"}]
    emit("zip_names_in_other_case.pt", zip_build(recs)[0], "ok",
         "records named Data.PKL, DATA/0, Data/1, VERSION: torch finds records without regard to the "
         "case of ASCII letters (miniz), so this is data.pkl with its storages (torch reads it)", torch="reads")

    # Empty records: an empty record's local header and deflate stream are never read.
    empty_pkl = pickle(p_dict([(p_str("a"), tensor("0", 4)), (p_str("e"), tensor("2", 0, size=(0,)))]))
    data = dict(BASE_DATA, **{"2": b""})
    b, lay = checkpoint(empty_pkl, data=data)
    b[lay["local"][3]:lay["local"][3] + 4] = b"PK\x09\x09"
    emit("zip_empty_record_bad_header.pt", b, "ok",
         "data/2 is empty and its local header signature is wrong: never read (torch reads the file)", torch="reads")
    recs = [{"name": "adv/data.pkl", "data": empty_pkl}, {"name": "adv/data/0", "data": BASE_DATA["0"]},
            {"name": "adv/data/1", "data": BASE_DATA["1"]},
            {"name": "adv/data/2", "data": b"", "method": 8, "comp": b"\xff\xff\xff"},
            {"name": "adv/version", "data": b"3\n"}]
    emit("zip_empty_record_bad_stream.pt", zip_build(recs)[0], "ok",
         "data/2 inflates to no bytes from an invalid deflate stream: empty whatever the stream holds, "
         "with zlib or without (torch reads the file)", torch="reads")

    # 0xFFFFFFFF sizes with no ZIP64 extra field: miniz takes them as they are.
    b, lay = checkpoint(empty_pkl, data=data)
    u32(b, lay["cd_entry"][3] + 24, 0xFFFFFFFF)
    emit("zip_empty_record_usize_ffffffff.pt", b, "ok",
         "empty data/2's uncompressed size is 0xFFFFFFFF with no ZIP64 extra field: the value stands (miniz "
         "skips its size checks for it) and the record, empty for its storage, is never read (torch reads it)",
         torch="reads")
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][1] + 24, 0xFFFFFFFF)
    emit("zip_used_record_usize_ffffffff.pt", b, "zip_corrupt",
         "data/0's uncompressed size is 0xFFFFFFFF with no ZIP64 extra field: a stored record of 16 bytes "
         "that says it holds 4 GiB (torch refuses it)", torch="refuses")
    b, lay = checkpoint(BASE_PKL)
    u32(b, lay["cd_entry"][1] + 20, 0xFFFFFFFF)
    u32(b, lay["cd_entry"][1] + 24, 0xFFFFFFFF)
    emit("zip_used_record_sizes_ffffffff.pt", b, "zip_record_out_of_bounds",
         "data/0's two sizes are 0xFFFFFFFF with no ZIP64 extra field: 4 GiB of stored data in a small file "
         "(torch refuses it)", torch="refuses")

    # ZIP64 extra fields.
    def z64(i, usize=None, csize=None, offset=None, drop_extra=False):
        recs = [{"name": "adv/data.pkl", "data": BASE_PKL},
                {"name": "adv/data/0", "data": BASE_DATA["0"], "zip64_extra": True},
                {"name": "adv/data/1", "data": BASE_DATA["1"]}, {"name": "adv/version", "data": b"3\n"}]
        b, lay = zip_build(recs)
        x = lay["cd_extra"][1]
        if usize is not None:
            u64(b, x + 4, usize)
        if csize is not None:
            u64(b, x + 12, csize)
        if offset is not None:
            u64(b, x + 20, offset)
        if drop_extra:
            b[x:x + 2] = b"\x99\x99"  # an extra field of another kind: no ZIP64 sizes
        return b
    emit("zip64_extra_ok.pt", z64(1), "ok", "data/0's sizes and offset in a ZIP64 extra field (valid)")
    emit("zip64_extra_missing.pt", z64(1, drop_extra=True), "zip_record_out_of_bounds",
         "data/0's directory sizes and offset are 0xFFFFFFFF and it has no ZIP64 extra field: the values "
         "stand, as miniz takes them, and the header offset lies past the file (torch refuses it)", torch="refuses")
    emit("zip64_extra_size_huge.pt", z64(1, usize=1 << 62, csize=1 << 62), "zip_record_out_of_bounds",
         "data/0's ZIP64 extra field claims 2^62 bytes (stored)")
    emit("zip64_extra_sizes_disagree.pt", z64(1, usize=1 << 40), "zip_corrupt",
         "data/0 is stored; its ZIP64 extra says 16 bytes compressed, 2^40 uncompressed")
    emit("zip64_extra_offset_huge.pt", z64(1, offset=1 << 63), "zip_record_out_of_bounds",
         "data/0's ZIP64 extra field puts its local header at byte 2^63")

    recs = [{"name": "adv/data.pkl", "data": BASE_PKL, "zip64_extra": True},
            {"name": "adv/data/0", "data": BASE_DATA["0"]},
            {"name": "adv/data/1", "data": BASE_DATA["1"]}, {"name": "adv/version", "data": b"3\n"}]
    b, lay = zip_build(recs)
    u64(b, lay["cd_extra"][0] + 4, 5 << 30)
    u64(b, lay["cd_extra"][0] + 12, 5 << 30)
    emit("zip_pkl_claims_5gib.pt", b, "zip_record_out_of_bounds",
         "data.pkl (stored) claims 5 GiB in a small file: its record lies past the directory; a limit "
         "error would be misleading (raising Limits::max_pickle_bytes cannot make it readable)")

    emit("zip_empty_archive.pt", struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0, 0, 0, 0, 0), "no_data_pkl",
         "an empty zip archive: only an end of central directory record")
    emit("zip_pkl_truncated_pickle.pt", ck(BASE_PKL[:-20]), "pickle_truncated",
         "a consistent archive whose data.pkl holds only the first bytes of the pickle")


# ---------------------------------------------------------------------------------------

def deflate_files():
    emit("deflate_ok.pt", ck(BASE_PKL, method=8), "ok", "every record deflated (valid)")

    def with_storage0(comp, usize, zip64_extra=False, pkl=BASE_PKL):
        recs = [{"name": "adv/data.pkl", "data": pkl}, {"name": "adv/data/0", "data": b"", "method": 8, "comp": comp},
                {"name": "adv/data/1", "data": BASE_DATA["1"]}, {"name": "adv/version", "data": b"3\n"}]
        if zip64_extra:
            recs[1]["zip64_extra"] = True
        b, lay = zip_build(recs)
        if zip64_extra:
            u64(b, lay["cd_extra"][1] + 4, usize)
        else:
            u32(b, lay["cd_entry"][1] + CD_USIZE, usize)
        return b

    good = raw_deflate(BASE_DATA["0"])
    emit("deflate_claims_2e40.pt", with_storage0(good, 1 << 40, zip64_extra=True), "limit_exceeded",
         "deflated data/0 claims 2^40 bytes (ZIP64) from %d: refused before any allocation" % len(good))
    emit("deflate_claims_1gib.pt", with_storage0(good, 1 << 30), "limit_exceeded",
         "deflated data/0 claims 1 GiB from %d bytes, a ratio deflate cannot reach" % len(good))
    big = raw_deflate(b"\0" * (1 << 20))
    emit("deflate_real_larger.pt", with_storage0(big, 16), "zip_inflate_failed",
         "deflated data/0 inflates to 1 MiB; its header says 16 bytes")
    emit("deflate_real_smaller.pt", with_storage0(good, 64), "zip_inflate_failed",
         "deflated data/0 inflates to 16 bytes; its header says 64")
    emit("deflate_garbage.pt", with_storage0(b"\xff" * 32, 16), "zip_inflate_failed",
         "data/0's deflate stream is invalid")
    noise = b"".join(struct.pack("<I", (k * 2654435761) & 0xFFFFFFFF) for k in range(1024))  # incompressible-ish
    cut = raw_deflate(noise)
    u8 = pickle(p_dict([(p_str("w"), tensor("0", len(noise), cls="ByteStorage"))]))
    emit("deflate_cut_stream.pt", with_storage0(cut[: len(cut) // 2], len(noise), pkl=u8),
         "zip_inflate_failed", "data/0's deflate stream stops half-way")

    # The overlap bomb: 40 directory entries share one deflated record (8 MiB of zeros in
    # about 8 KiB): each passes the per-record ratio check, together they inflate to
    # 320 MiB from a file of ~12 KiB.
    n, size = 40, 8 << 20
    comp = raw_deflate(b"\0" * size)
    pairs = [(p_str("t%d" % k), tensor(str(k), size, cls="ByteStorage")) for k in range(n)]
    pkl = pickle(p_dict(pairs))
    recs = [{"name": "adv/data.pkl", "data": pkl}, {"name": "adv/data/0", "data": b"", "method": 8, "comp": comp}]
    for k in range(1, n):
        recs.append({"name": "adv/data/%d" % k, "data": b"", "method": 8, "comp": b""})
    recs.append({"name": "adv/version", "data": b"3\n"})
    b, lay = zip_build(recs)
    crc = zlib.crc32(b"\0" * size) & 0xFFFFFFFF
    for k in range(n):
        e = lay["cd_entry"][k + 1]
        u32(b, e + 16, crc)
        u32(b, e + CD_CSIZE, len(comp))
        u32(b, e + CD_USIZE, size)
        u32(b, e + CD_OFFSET, lay["local"][1])
    emit("deflate_overlap_bomb.pt", b, "limit_exceeded",
         "%d directory entries share one deflated record (%d bytes inflating to %d MiB): %d MiB of storages "
         "from a %d-byte file, each entry within the per-record ratio; the total must be bounded "
         "(Limits::max_inflate_ratio over the file)" % (n, len(comp), size >> 20, (n * size) >> 20, len(b)))


# ---------------------------------------------------------------------------------------

def pickle_files():
    w = tensor("0", 4)

    def sd(*pairs):
        return pickle(p_dict([(p_str("w"), w)] + list(pairs)))

    # Deep nesting (the VM and every walk must be iterative).
    n = 10 ** 6
    emit("pkl_deep_tuple1.pt", ck(b"\x80\x02K\x00" + b"\x85" * n + b".", data={}), "limit_exceeded",
         "10^6 tuples nested by TUPLE1 (1 byte a level): deeper than Limits::max_nesting_depth")
    n = 10 ** 5
    emit("pkl_deep_list_append.pt", ck(b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".", data={}), "limit_exceeded",
         "10^5 lists nested by EMPTY_LIST ... APPEND chains")
    emit("pkl_deep_mark_tuple.pt", ck(b"\x80\x02" + b"(" * n + b"t" * n + b".", data={}), "limit_exceeded",
         "10^5 nested MARK ... TUPLE")

    # Memo bombs: each level is a list of 10 references to the level below (BINGET).
    def laughs(leaf, levels=9, fan=10):
        body = b"\x80\x02" + leaf + b"q\x00"
        for k in range(levels):
            body += b"0(" + (b"h" + bytes([k])) * fan + b"l" + b"q" + bytes([k + 1])  # POP the level below
        return body
    emit("pkl_memo_bomb_tensors.pt", ck(b"\x80\x02" + p_dict([(p_str("x"), laughs(w)[2:])]) + b"."), "limit_exceeded",
         "a tensor referenced 10^9 times through 9 levels of 10-item lists (BINGET): 10^9 names")
    emit("pkl_memo_bomb_ints.pt", ck(laughs(p_int(7)) + b".", data={}), "limit_exceeded",
         "the same 10^9-path list graph over an int")
    dups = b"]q\x00(h\x00" + b"2" * 50000 + b"e"
    emit("pkl_dup_append.pt", ck(pickle(p_dict([(p_str("w"), w), (p_str("l"), dups)]))), "ok",
         "a list holding 50001 references to itself (BINGET, DUP, APPENDS): cycles are skipped, it reads")
    # Memo keys 4095 apart: each LONG_BINPUT (5 bytes) must not grow the memo by 4096 slots.
    far = b"".join(b"r" + struct.pack("<I", 4095 * (k + 1)) for k in range(2000))
    emit("pkl_memo_sparse_keys.pt", ck(pickle(p_dict([(p_str("w"), w)]) + far)), "ok",
         "2000 LONG_BINPUTs with keys 4095 apart (valid): memory must stay linear in the pickle's size")

    # Huge integers. Python refuses int <-> decimal text beyond 4300 digits (ValueError; so
    # torch.load fails on the first), and ptread's conversions are quadratic in the digits.
    emit("pkl_long_literal_20k.pt", ck(sd((p_str("big"), b"L" + b"7" * 20000 + b"L\n"))), "limit_exceeded",
         "a protocol-0 LONG literal of 20000 digits (Python: 'Exceeds the limit (4300 digits) for integer "
         "string conversion')")
    big = b"\x8b" + struct.pack("<i", 5000) + b"\x5a" * 5000
    emit("pkl_long4_key_5k.pt", ck(pickle(p_dict([(big, w)]))), "ok",
         "a 5000-byte LONG4 integer as the key of a tensor: its name is str() of a 12041-digit int, which "
         "Python >= 3.11 prints only past its limit of 4300 digits (torch reads it)", torch="reads")
    huge = b"\x8b" + struct.pack("<i", 30000) + b"\x5a" * 30000
    emit("pkl_long4_key_30k.pt", ck(pickle(p_dict([(huge, w)]))), "limit_exceeded",
         "a 30000-byte LONG4 integer as the key of a tensor: its name would be 72245 digits, over the 64 KiB "
         "ptread gives one key's text")
    # A dict key that is a DAG of tuples (3 references to the level below, 13 levels, ~600
    # bytes): str() of it, the tensor's name, is 3^13 items long (~5 MB); the same bytes
    # with 10 references and 16 levels would ask for 10^16 bytes.
    body = p_int(1) + b"q\x00"
    for k in range(13):
        body += b"0(" + (b"h" + bytes([k])) * 3 + b"t" + b"q" + bytes([k + 1])
    emit("pkl_key_repr_bomb.pt", ck(pickle(b"}" + body + w + b"s")), "limit_exceeded",
         "a tensor's dict key is a tuple DAG (3 references a level, 13 levels, via BINGET): its str(), the "
         "tensor's name, is ~5 MB from ~600 bytes, and grows exponentially with the levels; names must be bounded")
    emit("pkl_long4_value_ok.pt", ck(sd((p_str("big"), big))), "ok",
         "a 5000-byte LONG4 integer as metadata (valid: binary, no decimal conversion needed)")
    emit("pkl_long4_past_end.pt", ck(sd((p_str("big"), b"\x8b" + struct.pack("<i", 0x7FFFFFFF) + b"\x01" * 8))),
         "pickle_truncated", "LONG4 with a length of 2^31-1 in a short pickle")
    emit("pkl_long4_negative.pt", ck(sd((p_str("big"), b"\x8b" + struct.pack("<i", -5) + b"\x01" * 8))),
         "pickle_malformed", "LONG4 with a negative length")

    # Strings.
    emit("pkl_binunicode_past_end.pt", ck(sd((p_str("s"), b"X" + struct.pack("<I", 0xFFFFFFF0) + b"abc"))),
         "pickle_truncated", "BINUNICODE with a length of 0xFFFFFFF0")
    emit("pkl_binunicode8_huge.pt", ck(sd((p_str("s"), b"\x8d" + struct.pack("<Q", (1 << 63) + 5) + b"abc"))),
         "pickle_truncated", "BINUNICODE8 with a length of 2^63+5 (no overflow in the bounds check)")
    emit("pkl_invalid_utf8_key.pt", ck(pickle(p_dict([(p_str(b"w\xff\xfe"), w)]))), "pickle_malformed",
         "a tensor's key is BINUNICODE with bytes ff fe (not UTF-8: Python's unpickler raises "
         "UnicodeDecodeError, and the name would not be text)")
    emit("pkl_invalid_utf8_value.pt", ck(sd((p_str("s"), b"\x8c\x03a\xc0\xaf"))), "pickle_malformed",
         "a SHORT_BINUNICODE value holding an overlong encoding (c0 af)")
    # torch.Size(...) as torch builds it: a tuple of ints from one iterable
    size = lambda args, op=b"R": p_global("torch", "Size") + args + op
    emit("pkl_torch_size_two_arguments.pt", ck(sd((p_str("s"), size(p_tuple([p_int(2), p_int(3)]))))),
         "pickle_malformed", "torch.Size(2, 3) (torch refuses it: tuple expected at most 1 argument)", torch="refuses")
    emit("pkl_torch_size_of_int.pt", ck(sd((p_str("s"), size(p_tuple([p_int(5)]), b"\x81")))), "pickle_malformed",
         "torch.Size.__new__(torch.Size, 5) by NEWOBJ (torch refuses it: 'int' object is not iterable)", torch="refuses")
    emit("pkl_torch_size_float_item.pt", ck(sd((p_str("s"), size(p_tuple([b"(" + p_int(2) + b"G" + struct.pack(">d", 1.0) + b"l"]))))),
         "pickle_malformed", "torch.Size([2, 1.0]) (torch refuses it: takes an iterable of 'int')", torch="refuses")
    emit("pkl_torch_size_empty_build.pt", ck(sd((p_str("s"), size(b")") + b"(}Ntb"))), "pickle_malformed",
         "torch.Size() given the BUILD state ({}, None): Python's unpickler then wants its __dict__ (torch refuses it)",
         torch="refuses")
    emit("pkl_torch_size_of_bytes.pt", ck(sd((p_str("s"), size(p_tuple([b"C\x02ab"]))))), "ok",
         "torch.Size(b'ab'): the bytes' values, (97, 98) (torch reads it)", torch="reads")
    emit("pkl_torch_size_bool_item.pt", ck(sd((p_str("s"), size(p_tuple([b"(" + b"\x88" + p_int(3) + b"l"]))))), "ok",
         "torch.Size([True, 3]): (1, 3) (torch reads it)", torch="reads")
    emit("pkl_string_trailing_backslash.pt", ck(sd((p_str("s"), b"S'a\\'\n"))), "pickle_malformed",
         "a STRING operand 'a\\' whose last backslash escapes nothing (torch refuses it: Python's escape_decode "
         "raises 'Trailing \\ in string')", torch="refuses")
    emit("pkl_string_escaped_backslash.pt", ck(sd((p_str("s"), b"S'a\\\\'\n"))), "ok",
         "a STRING operand 'a\\\\': an escaped backslash, the text a\\ (torch reads it)", torch="reads")

    # Opcodes.
    emit("pkl_unknown_opcode.pt", ck(sd((p_str("s"), b"\xff"))), "pickle_unknown_opcode", "byte 0xff as an opcode")
    emit("pkl_ext1.pt", ck(sd((p_str("s"), b"\x82\x01"))), "pickle_unsupported_opcode", "EXT1 (the copyreg registry)")
    emit("pkl_next_buffer.pt", ck(pickle(p_dict([(p_str("w"), w), (p_str("s"), b"\x97")]), proto=5)),
         "pickle_unsupported_opcode", "NEXT_BUFFER (protocol 5 out-of-band buffer)")
    emit("pkl_stop_empty_stack.pt", ck(b"\x80\x02."), "pickle_malformed", "STOP on an empty stack")
    emit("pkl_stop_after_mark.pt", ck(b"\x80\x02}(."), "pickle_malformed",
         "STOP right after MARK (a dict below the mark, nothing above it)")
    emit("pkl_no_stop.pt", ck(BASE_PKL[:-1]), "pickle_truncated", "the state dict pickle without its STOP")
    emit("pkl_no_stop_loop.pt", ck(b"\x80\x02" + b"N0" * 5000), "pickle_truncated",
         "5000 NONE/POP pairs and no STOP")
    emit("pkl_proto_9.pt", ck(b"\x80\x09" + BASE_PKL[2:]), "pickle_malformed", "PROTO 9")
    emit("pkl_memo_get_unset.pt", ck(sd((p_str("s"), b"h\x07"))), "pickle_malformed",
         "BINGET of a memo key never stored")
    emit("pkl_append_underflow.pt", ck(b"\x80\x02a."), "pickle_malformed", "APPEND on an empty stack")
    emit("pkl_setitems_no_mark.pt", ck(b"\x80\x02}K\x01K\x02u."), "pickle_malformed", "SETITEMS without a MARK")
    # SETITEM(S) and APPEND(S) on a tensor: Python's unpickler calls tensor[k] = v, and
    # tensor.append, which torch's Tensor has not.
    w0 = tensor("0", 4)
    emit("pkl_setitem_on_tensor.pt", ck(pickle(p_dict([(p_str("t"), w0 + p_int(0) + b"G" + struct.pack(">d", 9.0) + b"s")]))),
         "unsupported_tensor", "SETITEM on a tensor: torch.load reads it with t[0] = 9.0 written into the tensor, "
         "which ptread does not run", torch="reads_other")
    emit("pkl_setitems_on_tensor.pt", ck(pickle(p_dict([(p_str("t"), w0 + b"(" + p_int(1) + p_int(7) + b"u")]))),
         "unsupported_tensor", "SETITEMS (1: 7) on a tensor (torch.load reads it with t[1] = 7)", torch="reads_other")
    emit("pkl_setitems_on_tensor_empty.pt", ck(pickle(p_dict([(p_str("t"), w0 + b"(u")]))), "ok",
         "SETITEMS with no items on a tensor: nothing set (torch reads it)", torch="reads")
    emit("pkl_append_on_tensor.pt", ck(pickle(p_dict([(p_str("t"), w0 + p_int(0) + b"a")]))), "pickle_malformed",
         "APPEND on a tensor (torch refuses it: a Tensor has no append)", torch="refuses")
    emit("pkl_appends_on_tensor_empty.pt", ck(pickle(p_dict([(p_str("t"), w0 + b"(e")]))), "ok",
         "APPENDS with no items on a tensor: Python's unpickler looks nothing up (torch reads it)", torch="reads")


# ---------------------------------------------------------------------------------------

def tensor_files():
    def one(t, data=BASE_DATA):
        return ck(pickle(p_dict([(p_str("t"), t)])), data=data)

    ranks = [1] * 65
    emit("tensor_rank_65.pt", one(tensor("0", 4, size=ranks[:64] + [4], stride=[4] * 64 + [1])), "limit_exceeded",
         "a tensor of 65 dimensions (Limits::max_rank is 64)")
    emit("tensor_numel_overflow.pt", one(tensor("0", 4, size=(1 << 32, 1 << 32, 2), stride=(0, 0, 0))),
         "shape_overflow",
         "size (2^32, 2^32, 2): the element count overflows 64 bits")
    emit("tensor_bytes_overflow.pt", one(tensor("0", 4, size=(1 << 31, 1 << 31), stride=(0, 0))), "shape_overflow",
         "F32 size (2^31, 2^31), strides (0, 0) on a 4-element storage: 2^62 elements fit in 64 bits, "
         "their 2^64 bytes do not (nbytes() and copy_to's size check would wrap to 0)")
    emit("tensor_expand_stride0.pt", one(tensor("0", 4, size=(512, 1024), stride=(0, 0))), "ok",
         "F32 size (512, 1024), strides (0, 0) over one element (an expanded tensor; valid)")
    emit("tensor_expand_huge.pt", one(tensor("0", 4, size=(1 << 24, 1 << 24), stride=(0, 0))), "ok",
         "F32 size (2^24, 2^24), strides (0, 0) over one element: 2^48 elements, 1 PiB when materialized "
         "(valid: torch loads it; copying it out must fail cleanly, never throw or overflow)")
    emit("tensor_negative_size.pt", one(tensor("0", 4, size=(-1, 4), stride=(4, 1))), "bad_tensor_args",
         "size (-1, 4)")
    emit("tensor_negative_stride.pt", one(tensor("0", 4, size=(4,), stride=(-1,), offset=3)), "bad_tensor_args",
         "stride (-1,) from offset 3 (torch refuses it: its storage size check overflows)", torch="refuses")
    emit("tensor_negative_size_empty.pt", one(tensor("0", 4, size=(0, -1), stride=(1, 1))), "bad_tensor_args",
         "size (0, -1): torch 1.13 reads it as a tensor of no elements whose shape is [0, -1]; ptread hands out "
         "no negative size")
    # torch's set_() checks a view with the strides as given (a negative one passes in a
    # dimension of size 1, and in a tensor of no elements), then stores each negative stride
    # as the contiguous one from the next dimension's (c10's set_sizes_and_strides).
    emit("tensor_negative_stride_size1.pt", one(tensor("0", 4, size=(2, 1), stride=(1, -3))), "ok",
         "size (2, 1), strides (1, -3): the -3 places no element; torch reads it with strides (1, 1)", torch="reads")
    emit("tensor_negative_stride_size1_past_storage.pt", one(tensor("0", 4, size=(1, 2), stride=(-1, 2), offset=2)),
         "view_out_of_bounds", "size (1, 2), strides (-1, 2) from offset 2 of a 4-element storage: the second "
         "element is past it (torch refuses it)", torch="refuses")
    emit("tensor_stride_int64_min_empty.pt", one(tensor("0", 4, size=(0,), stride=(-(1 << 63),))), "bad_tensor_args",
         "size (0,), stride (-2^63,): below -2^62, no int torch's SymInt holds (torch refuses it)", torch="refuses")
    emit("tensor_stride_below_symint.pt", one(tensor("0", 4, size=(1,), stride=(-(1 << 62) - 1,))), "bad_tensor_args",
         "size (1,), stride (-2^62 - 1,): the first int below SymInt's range (torch refuses it)", torch="refuses")
    emit("tensor_stride_symint_lowest.pt", one(tensor("0", 4, size=(1,), stride=(-(1 << 62),))), "ok",
         "size (1,), stride (-2^62,): the lowest stride torch holds (torch reads it, stride (1,))", torch="reads")
    emit("tensor_negative_stride_last_size1.pt", one(tensor("0", 4, size=(1,), stride=(-1,), offset=3)), "ok",
         "size (1,), stride (-1,) from offset 3: torch reads it with stride (1,)", torch="reads")
    emit("tensor_negative_stride_empty.pt", one(tensor("0", 4, size=(0, 3), stride=(-5, 1), offset=2)), "ok",
         "size (0, 3), strides (-5, 1): no elements; torch reads it with strides (3, 1)", torch="reads")
    emit("tensor_negative_strides_all_empty.pt", one(tensor("0", 4, size=(1, 0, 2), stride=(-1, -1, -1))), "ok",
         "size (1, 0, 2), strides (-1, -1, -1): torch reads it with strides (2, 2, 1)", torch="reads")
    emit("tensor_negative_stride_empty_wrap.pt", one(tensor("0", 4, size=(0, 3), stride=(-1, 1 << 62))), "ok",
         "size (0, 3), strides (-1, 2^62): torch stores the first as 3 * 2^62, wrapped to -2^62 (torch reads it)",
         torch="reads")
    emit("tensor_negative_offset.pt", one(tensor("0", 4, size=(2,), stride=(1,), offset=-2)), "bad_tensor_args",
         "storage offset -2")
    emit("tensor_view_past_storage.pt", one(tensor("0", 4, size=(4,), stride=(1,), offset=1)), "view_out_of_bounds",
         "4 elements from offset 1 of a 4-element storage (torch refuses it: a record is not resizable)",
         torch="refuses")
    emit("tensor_offset_int64_max.pt", one(tensor("0", 4, size=(2,), stride=(1,), offset=(1 << 63) - 1)),
         "view_out_of_bounds", "storage offset 2^63-1")
    emit("tensor_stride_extent_overflow.pt", one(tensor("0", 4, size=(4,), stride=((1 << 63) - 1,))), "shape_overflow",
         "stride 2^63-1 over 4 elements: the view's extent overflows 64 bits")
    emit("tensor_rank_mismatch.pt", one(tensor("0", 4, size=(2, 2), stride=(1,))), "bad_tensor_args",
         "2 sizes, 1 stride")
    # torch's argument parser checks the type of the first item of set_'s size and stride
    # alone: a bool after it is an int (torch 1.13).
    emit("tensor_size_bool_after_first.pt", one(tensor("0", 4, size_ops=p_tuple([p_int(2), b"\x89"]),
                                                       stride_ops=p_ints((1, 1)))), "ok",
         "size (2, False), stride (1, 1): torch reads the bool as 0, a [2, 0] tensor (torch reads it)", torch="reads")
    emit("tensor_stride_bool_after_first.pt", one(tensor("0", 4, size=(2, 2), stride_ops=p_tuple([p_int(2), b"\x88"]))),
         "ok", "size (2, 2), stride (2, True): torch reads the bool as 1 (torch reads it)", torch="reads")
    # set_ takes a stride of None, or an empty one, as the contiguous strides of the size.
    emit("tensor_stride_none.pt", one(tensor("0", 4, size=(2, 2), stride_ops=b"N")), "ok",
         "size (2, 2), stride None: the contiguous strides (2, 1) (torch reads it)", torch="reads")
    emit("tensor_stride_empty.pt", one(tensor("0", 4, size=(2, 1, 2), stride_ops=b")")), "ok",
         "size (2, 1, 2), stride (): the contiguous strides (2, 2, 1) (torch reads it)", torch="reads")
    emit("tensor_stride_none_past_storage.pt", one(tensor("0", 4, size=(3, 2), stride_ops=b"N")), "view_out_of_bounds",
         "size (3, 2), stride None over 4 elements: 6 contiguous ones do not fit (torch refuses it)", torch="refuses")
    emit("tensor_size_bool_first.pt", one(tensor("0", 4, size_ops=p_tuple([b"\x88", p_int(2)]), stride_ops=p_ints((2, 1)))),
         "bad_tensor_args", "size (True, 2): torch's argument parser wants an int first (torch refuses it)",
         torch="refuses")
    emit("tensor_size_not_int.pt", one(tensor("0", 4, size_ops=p_tuple([p_str("4")]))), "bad_tensor_args",
         "a size that is a string")

    # The rebuild functions called with other argument counts than Python's signatures take
    # (torch.load: TypeError), and Parameter of what is no tensor.
    def call(fn, args, module="torch._utils"):
        return p_global(module, fn) + b"(" + b"".join(args) + b"tR"
    store = pid("FloatStorage", "0", 4)
    v2 = [store + b"Q", p_int(0), p_ints((4,)), p_ints((1,)), b"\x89", p_ordered_dict()]
    emit("rebuild_v2_with_metadata.pt", one(call("_rebuild_tensor_v2", v2 + [p_dict([])])), "ok",
         "_rebuild_tensor_v2 with its seventh argument, metadata {}, as torch 2.x writes it (torch 2.x reads "
         "it; 1.13's takes 6 arguments)")
    emit("rebuild_v2_extra_argument.pt", one(call("_rebuild_tensor_v2", v2 + [p_dict([]), p_int(0)])),
         "bad_tensor_args", "_rebuild_tensor_v2 with 8 arguments, one more than it takes (torch refuses it)",
         torch="refuses")
    # torch 2.x's opaque dtypes (float4_e2m1fn_x2, bits*): read as stored; no negation exists for them
    f4 = [pid("UntypedStorage", "0", 16) + b"Q", p_int(0), p_ints((16,)), p_ints((1,)), b"\x89", p_ordered_dict(),
          p_global("torch", "float4_e2m1fn_x2")]
    emit("rebuild_v3_float4.pt", one(call("_rebuild_tensor_v3", f4)), "ok",
         "_rebuild_tensor_v3 of float4_e2m1fn_x2, as torch >= 2.8 writes it (1.13 has no such dtype)")
    emit("rebuild_v3_float4_neg_bit.pt", one(call("_rebuild_tensor_v3", f4 + [p_dict([(p_str("neg"), b"\x88")])])),
         "bad_tensor_args", "float4_e2m1fn_x2 with the neg bit in its metadata (torch negates no such tensor)")
    emit("rebuild_v3_bits16_neg_bit.pt",
         one(call("_rebuild_tensor_v3", f4[:2] + [p_ints((8,)), p_ints((1,))] + f4[4:6] +
                  [p_global("torch", "bits16"), p_dict([(p_str("neg"), b"\x88")])])),
         "bad_tensor_args", "bits16 with the neg bit in its metadata (torch negates no such tensor)")
    emit("rebuild_v1_extra_argument.pt", one(call("_rebuild_tensor", v2[:4] + [b"\x89"])), "bad_tensor_args",
         "_rebuild_tensor (storage, offset, size, stride) with a fifth argument (torch refuses it)",
         torch="refuses")
    t = tensor("0", 4)
    emit("parameter_ok.pt", one(call("_rebuild_parameter", [t, b"\x88", p_ordered_dict()])), "ok",
         "_rebuild_parameter(tensor, True, OrderedDict()) as torch writes it (torch reads it)", torch="reads")
    emit("parameter_two_arguments.pt", one(call("_rebuild_parameter", [t, b"\x88"])), "bad_tensor_args",
         "_rebuild_parameter without its backward_hooks argument (torch refuses it)", torch="refuses")
    emit("parameter_four_arguments.pt", one(call("_rebuild_parameter", [t, b"\x88", p_ordered_dict(), b"N"])),
         "bad_tensor_args", "_rebuild_parameter with a fourth argument (torch refuses it)", torch="refuses")
    emit("parameter_of_int.pt", one(call("_rebuild_parameter", [p_int(5), b"\x88", p_ordered_dict()])),
         "bad_tensor_args", "_rebuild_parameter(5, True, OrderedDict()): a Parameter of an int (torch refuses it)",
         torch="refuses")
    emit("parameter_of_none.pt", one(call("_rebuild_parameter", [b"N", b"\x88", p_ordered_dict()])), "ok",
         "_rebuild_parameter(None, True, OrderedDict()): Parameter(None) is torch.empty(0), F32 [0] "
         "(torch reads it)", torch="reads")
    qparams = p_tuple([p_global("torch", "per_tensor_affine"), b"G" + struct.pack(">d", 0.5), p_int(3)])
    qt = [pid("QInt8Storage", "0", 16) + b"Q", p_int(0), p_ints((4, 4)), p_ints((4, 1)), qparams, b"\x89",
          p_ordered_dict()]
    emit("qtensor_ok.pt", one(call("_rebuild_qtensor", qt)), "ok",
         "_rebuild_qtensor with its 7 arguments, a QInt8 [4, 4] per-tensor affine (torch reads it)", torch="reads")
    emit("qtensor_eight_arguments.pt", one(call("_rebuild_qtensor", qt + [b"N"])), "bad_tensor_args",
         "_rebuild_qtensor with an eighth argument (torch refuses it)", torch="refuses")
    # The quantizer parameters as _rebuild_qtensor takes them apart (torch 1.13)
    qt_with = lambda params: [pid("QInt8Storage", "0", 16) + b"Q", p_int(0), p_ints((4, 4)), p_ints((4, 1)), params,
                              b"\x89", p_ordered_dict()]
    half = b"G" + struct.pack(">d", 0.5)
    emit("qtensor_per_tensor_symmetric.pt",
         one(call("_rebuild_qtensor", qt_with(p_tuple([p_global("torch", "per_tensor_symmetric"), half, p_int(3)])))),
         "bad_tensor_args", "qscheme torch.per_tensor_symmetric (torch refuses it: Can't deserialize quantized tensor "
         "with qscheme)", torch="refuses")
    emit("qtensor_scale_bool.pt",
         one(call("_rebuild_qtensor", qt_with(p_tuple([p_global("torch", "per_tensor_affine"), b"\x88", p_int(3)])))),
         "ok", "a per-tensor scale of True, which torch's argument parser takes as 1.0 (torch reads it)", torch="reads")
    emit("qtensor_zero_point_bool.pt",
         one(call("_rebuild_qtensor", qt_with(p_tuple([p_global("torch", "per_tensor_affine"), half, b"\x89"])))),
         "bad_tensor_args", "a per-tensor zero point of False (torch refuses it: must be int, not bool)", torch="refuses")
    emit("qtensor_params_list.pt",
         one(call("_rebuild_qtensor", qt_with(b"]" + b"(" + p_global("torch", "per_tensor_affine") + half + p_int(3) + b"e"))),
         "ok", "quantizer parameters in a list, which Python unpacks as a tuple (torch reads it)", torch="reads")
    emit("qtensor_per_tensor_four_items.pt",
         one(call("_rebuild_qtensor", qt_with(p_tuple([p_global("torch", "per_tensor_affine"), half, p_int(3), p_int(0)])))),
         "bad_tensor_args", "per_tensor_affine parameters of 4 items (torch refuses it: too many values to unpack)",
         torch="refuses")
    def per_channel(scheme=b"per_channel_affine", scales=("DoubleStorage", "<4d", (4,)), zps=("LongStorage", "<4q", (4,)),
                    axis=0):
        s_cls, s_fmt, s_shape = scales
        z_cls, z_fmt, z_shape = zps
        sn, zn = math.prod(s_shape), math.prod(z_shape)
        params = p_tuple([p_global("torch", scheme.decode()),
                          rebuild_v2(pid(s_cls, "1", sn), 0, s_shape, tuple(math.prod(s_shape[k + 1:]) for k in range(len(s_shape)))),
                          rebuild_v2(pid(z_cls, "2", zn), 0, z_shape, (1,) * len(z_shape)), p_int(axis)])
        fill = lambda fmt, n: struct.pack(fmt[0] + str(n) + fmt[-1], *([1] * n))
        return one(call("_rebuild_qtensor", qt_with(params)),
                   {"0": bytes(range(16)), "1": fill(s_fmt, sn), "2": fill(z_fmt, zn)})
    emit("qtensor_per_channel_ok.pt", per_channel(), "ok",
         "a QInt8 [4, 4] per_channel_affine along axis 0, F64 scales and I64 zero points, as torch writes it "
         "(torch reads it)")
    emit("qtensor_per_channel_symmetric.pt", per_channel(scheme=b"per_channel_symmetric"), "bad_tensor_args",
         "qscheme torch.per_channel_symmetric (torch refuses it: Can't deserialize)", torch="refuses")
    emit("qtensor_per_channel_int_scales.pt", per_channel(scales=("LongStorage", "<4q", (4,))), "bad_tensor_args",
         "per-channel scales of dtype I64 (torch refuses it: scale tensor must be floating point)", torch="refuses")
    emit("qtensor_per_channel_scales_2d.pt", per_channel(scales=("DoubleStorage", "<4d", (4, 1))), "bad_tensor_args",
         "per-channel scales of shape [4, 1] (torch refuses it: scale tensor must have dimension 1)", torch="refuses")
    emit("qtensor_per_channel_count_mismatch.pt", per_channel(zps=("LongStorage", "<3q", (3,))), "bad_tensor_args",
         "4 per-channel scales and 3 zero points (torch refuses it: the numbers of elements must match)",
         torch="refuses")
    emit("qtensor_per_channel_float_params.pt",
         one(call("_rebuild_qtensor", qt_with(p_tuple([p_global("torch", "per_channel_affine"), half, p_int(3), p_int(0)])))),
         "bad_tensor_args", "per_channel_affine parameters (scale 0.5, zero point 3, axis 0): torch refuses them (scales "
         "must be a Tensor)", torch="refuses")
    lists = p_tuple([p_global("torch", "per_channel_affine"), b"(" + half * 4 + b"l", b"(" + p_int(0) * 4 + b"l", p_int(0)])
    emit("qtensor_per_channel_lists.pt", one(call("_rebuild_qtensor", qt_with(lists))), "ok",
         "per-channel scales and zero points as lists, which torch makes tensors of (torch 1.13 reads it); ptread "
         "opens the file and lists the tensor in unsupported()")
    emit("qtensor_per_channel_axis_past.pt", per_channel(axis=2), "bad_tensor_args",
         "per-channel axis 2 of a 2-d tensor: torch 1.13 checks no axis and reads it; ptread, whose QuantizedTensor "
         "names its channels by the axis, refuses it")
    qt_neg = lambda size: [pid("QInt8Storage", "0", 16) + b"Q", p_int(0), p_ints(size), p_ints((-1,)), qparams,
                           b"\x89", p_ordered_dict()]
    emit("qtensor_negative_stride_empty.pt", one(call("_rebuild_qtensor", qt_neg((0,)))), "ok",
         "_rebuild_qtensor of size (0,), stride (-1,): no elements (torch reads it, stride (1,))", torch="reads")
    emit("qtensor_negative_stride.pt", one(call("_rebuild_qtensor", qt_neg((4,)))), "bad_tensor_args",
         "_rebuild_qtensor of size (4,), stride (-1,) from offset 0: torch 1.13 reads it from the three bytes "
         "before the storage (a quantized set_() checks no size); ptread refuses it as torch refuses a plain one")
    coo = [p_global("torch", "sparse_coo"),
           p_tuple([rebuild_v2(pid("LongStorage", "0", 2), 0, (1, 2), (2, 1)),
                    rebuild_v2(pid("FloatStorage", "1", 2), 0, (2,), (1,)), p_global("torch", "Size") + p_tuple([p_ints((4,))]) + b"R"])]
    coo_data = {"0": struct.pack("<2q", 1, 3), "1": BASE_DATA["1"]}
    emit("sparse_ok.pt", one(call("_rebuild_sparse_tensor", coo), coo_data), "ok",
         "_rebuild_sparse_tensor(torch.sparse_coo, (indices, values, size)) (torch reads it)", torch="reads")
    emit("pid_six_items.pt", one(rebuild_v2(pid("FloatStorage", "0", 4, view=b"N"), 0, (4,), (1,))),
         "bad_tensor_args", "a zip file's persistent id with a sixth item, None, as legacy files write "
         "them (torch refuses it: it unpacks 5)", torch="refuses")
    emit("pid_module_tag.pt", one(b"(" + p_str("module") + p_global("torch.nn", "Linear") + b"tQ"),
         "bad_tensor_args", "a zip file's persistent id ('module', torch.nn.Linear), as legacy files write "
         "them (torch refuses it: 'storage' only)", torch="refuses")
    emit("call_tensor.pt", one(tensor("0", 4) + b")R"), "pickle_malformed",
         "REDUCE with a tensor as the callable (torch refuses it: not callable)", torch="refuses")
    emit("call_storage_type.pt", one(call("FloatStorage", [p_int(4)], module="torch")), "pickle_malformed",
         "torch.FloatStorage(4) by REDUCE in a zip file, whose unpickler reads the global as a StorageType "
         "(torch refuses it: not callable)", torch="refuses")
    emit("call_storage_type_other_module.pt", one(call("HalfStorage", [p_int(4)], module="ptread.anything")),
         "pickle_malformed", "ptread.anything.HalfStorage(4) by REDUCE in a zip file: a StorageType too, "
         "whatever the module (torch refuses it: not callable)", torch="refuses")
    emit("requires_grad_int.pt", one(tensor("0", 4, requires_grad=p_int(1))),
         "bad_tensor_args", "_rebuild_tensor_v2 with requires_grad 1, an int (torch refuses it: "
         "requires_grad must be a bool)", torch="refuses")
    emit("requires_grad_on_int64.pt", one(tensor("0", 2, cls="LongStorage", requires_grad=b"\x88")),
         "bad_tensor_args", "an I64 tensor that requires gradients (torch refuses it: only floating point "
         "and complex tensors can)", torch="refuses")
    emit("parameter_requires_grad_none.pt", one(call("_rebuild_parameter", [t, b"N", p_ordered_dict()])),
         "bad_tensor_args", "_rebuild_parameter(tensor, None, OrderedDict()) (torch refuses it: "
         "require_grad must be bool)", torch="refuses")
    emit("qtensor_requires_grad.pt", one(call("_rebuild_qtensor", qt[:5] + [b"\x88", p_ordered_dict()])),
         "bad_tensor_args", "a QInt8 tensor that requires gradients (torch refuses it)", torch="refuses")
    emit("newobj_function.pt", one(p_global("torch._utils", "_rebuild_tensor_v2") + b"(" + pid("FloatStorage", "0", 4) +
                                   b"Q" + p_int(0) + p_ints((4,)) + p_ints((1,)) + b"\x89" + p_ordered_dict() +
                                   b"t\x81"),
         "pickle_malformed", "NEWOBJ of _rebuild_tensor_v2, a function (torch refuses it: NEWOBJ takes a class)",
         torch="refuses")
    emit("newobj_ordered_dict.pt",
         ck(pickle(p_dict([(p_str("t"), tensor("0", 4)),
                           (p_str("o"), p_global("collections", "OrderedDict") +
                            p_tuple([b"(" + p_tuple([p_str("x"), tensor("1", 2)]) + b"l"]) + b"\x81")]))),
         "ok", "NEWOBJ of OrderedDict with a list of pairs: OrderedDict.__new__ makes it empty (its "
         "__init__ would fill it), so 'o.x' is no tensor (torch reads it)", torch="reads")
    emit("build_on_list.pt", one(b"]" + p_dict([(p_str("a"), p_int(1))]) + b"b"), "pickle_malformed",
         "BUILD of a list with the state {'a': 1} (torch refuses it: a list has no __dict__)", torch="refuses")
    emit("build_on_str_none.pt", ck(pickle(p_dict([(p_str("t"), tensor("0", 4)), (p_str("s"), p_str("x") + b"Nb")]))),
         "ok", "BUILD of a str with the state None: nothing to set (torch reads it)", torch="reads")
    # BUILD on a tensor: torch.load calls Tensor.__setstate__(state). 4 items are set_(*state)
    # and 5 replace .data: the tensor then holds other data, which ptread does not apply
    # (torch reads the file with it: "reads_other"); 3 are (requires_grad, _, hooks).
    def built(state):
        return ck(pickle(p_dict([(p_str("a"), tensor("0", 4)), (p_str("b"), tensor("1", 2) + state + b"b")])))
    emit("build_tensor_set.pt", built(b"(" + pid("FloatStorage", "0", 4) + b"Q" + p_int(1) + p_ints((2,)) + p_ints((1,)) + b"t"),
         "unsupported_tensor", "BUILD of tensor 'b' with (storage '0', 1, (2,), (1,)): Tensor.__setstate__ calls "
         "set_(*state), so torch.load gives 'b' elements 1-2 of 'a' (torch reads it, with other data)",
         torch="reads_other")
    emit("build_tensor_data.pt", built(b"(" + tensor("0", 4) + b"N" + p_ordered_dict() + b"\x89\x89t"),
         "ok", "BUILD of tensor 'b' with 5 items, a torch 0.3 Variable's state: Tensor.__setstate__ sets b.data = "
         "state[0], so 'b' is a tensor of storage '0' (torch reads it)", torch="reads")
    emit("build_tensor_data_requires_grad.pt", built(b"(" + tensor("0", 4) + b"N" + p_ordered_dict() + b"\x88\x89t"),
         "ok", "BUILD of tensor 'b' with 5 items whose requires_grad (the fourth) is True (torch reads it)", torch="reads")
    emit("build_tensor_data_none.pt", built(b"(NN" + p_ordered_dict() + b"\x89\x89t"), "bad_tensor_args",
         "BUILD of tensor 'b' with 5 items whose data is None (torch refuses it: .data takes a tensor)", torch="refuses")
    emit("build_tensor_data_grad_none.pt", built(b"(" + tensor("0", 4) + b"N" + p_ordered_dict() + b"N\x89t"),
         "bad_tensor_args", "BUILD of tensor 'b' with 5 items whose requires_grad (the fourth) is None (torch "
         "refuses it: requires_grad must be a bool)", torch="refuses")
    emit("build_tensor_requires_grad.pt", built(p_tuple([b"\x88", b"N", p_ordered_dict()])), "ok",
         "BUILD of tensor 'b' with (True, None, OrderedDict()): it requires gradients (torch reads it)", torch="reads")
    emit("build_tensor_requires_grad_list.pt", built(b"](\x89NK\x05e"), "ok",
         "BUILD of tensor 'b' with [False, None, 5], a list: any hooks object passes (torch reads it)", torch="reads")
    emit("build_tensor_requires_grad_int.pt", built(p_tuple([p_int(1), b"N", b"N"])), "bad_tensor_args",
         "BUILD of tensor 'b' with (1, None, None) (torch refuses it: requires_grad must be a bool)", torch="refuses")
    emit("build_tensor_none.pt", built(b"N"), "bad_tensor_args",
         "BUILD of tensor 'b' with the state None (torch refuses it: None has no len())", torch="refuses")
    emit("build_tensor_two_items.pt", built(p_tuple([b"N", b"N"])), "bad_tensor_args",
         "BUILD of tensor 'b' with (None, None) (torch refuses it: 3 values to unpack)", torch="refuses")
    emit("build_int_tensor_requires_grad.pt",
         ck(pickle(p_dict([(p_str("b"), tensor("1", 1, cls="LongStorage") + p_tuple([b"\x88", b"N", b"N"]) + b"b")]))),
         "bad_tensor_args", "BUILD of an I64 tensor with (True, None, None) (torch refuses it: only floating point "
         "and complex tensors can require gradients)", torch="refuses")
    # _rebuild_from_type_v2(func, type, args, state): torch sets the state's items on the
    # tensor with setattr(); `data`, `real`, `imag` and `requires_grad` change it.
    def from_type(new_type, state, nargs=4, func=None):
        made = func or (p_global("torch._utils", "_rebuild_tensor_v2"),
                        b"(" + pid("FloatStorage", "1", 2) + b"Q" + p_int(0) + p_ints((2,)) + p_ints((1,)) + b"\x89" +
                        p_ordered_dict() + b"t")
        args = [made[0], new_type if isinstance(new_type, bytes) else p_global(*new_type), made[1], state][:nargs]
        return ck(pickle(p_dict([(p_str("a"), tensor("0", 4)),
                                 (p_str("b"), p_global("torch._tensor", "_rebuild_from_type_v2") + b"(" + b"".join(args) +
                                  b"tR")])))
    param, plain = ("torch.nn.parameter", "Parameter"), ("torch", "Tensor")
    emit("from_type_parameter_data.pt", from_type(param, p_dict([(p_str("data"), tensor("0", 4))])),
         "unsupported_tensor", "_rebuild_from_type_v2 of a Parameter with the state {'data': tensor of storage '0'}: "
         "torch.load gives 'b' the data of 'a' (torch reads it, with other data)", torch="reads_other")
    emit("from_type_parameter_real.pt", from_type(param, p_dict([(p_str("real"), tensor("0", 2))])),
         "unsupported_tensor", "_rebuild_from_type_v2 of a Parameter with the state {'real': a tensor}: setattr() "
         "copies it into 'b' (torch reads it, with other data)", torch="reads_other")
    emit("from_type_parameter_requires_grad.pt", from_type(param, p_dict([(p_str("requires_grad"), b"\x88")])),
         "unsupported_tensor", "_rebuild_from_type_v2 of a Parameter with the state {'requires_grad': True} (torch "
         "reads it, and 'b' requires gradients)", torch="reads_other")
    emit("from_type_tensor_data.pt", from_type(plain, p_dict([(p_str("data"), tensor("0", 4))])),
         "unsupported_tensor", "_rebuild_from_type_v2 of a plain Tensor with the state {'data': tensor of storage "
         "'0'}: torch 1.13 ignores a plain Tensor's state, torch 2.x sets it")
    emit("from_type_parameter_attribute.pt", from_type(param, p_dict([(p_str("note"), p_int(1))])), "ok",
         "_rebuild_from_type_v2 of a Parameter with the state {'note': 1}: an attribute of its own (torch reads it)",
         torch="reads")
    emit("from_type_three_arguments.pt", from_type(plain, b"", nargs=3), "bad_tensor_args",
         "_rebuild_from_type_v2 without its state argument (torch refuses it)", torch="refuses")
    # A Parameter's state torch takes apart itself: (dict_state, slots_state), each with items().
    emit("from_type_parameter_state_three.pt", from_type(param, p_tuple([p_dict([]), b"N", b"N"])), "bad_tensor_args",
         "_rebuild_from_type_v2 of a Parameter with the state ({}, None, None) (torch refuses it: Invalid serialized "
         "state)", torch="refuses")
    emit("from_type_parameter_state_none.pt", from_type(param, b"N"), "bad_tensor_args",
         "_rebuild_from_type_v2 of a Parameter with the state None (torch refuses it: None has no items())",
         torch="refuses")
    emit("from_type_parameter_state_list.pt", from_type(param, b"]"), "bad_tensor_args",
         "_rebuild_from_type_v2 of a Parameter with the state [] (torch refuses it: a list has no items())",
         torch="refuses")
    emit("from_type_parameter_slots_list.pt", from_type(param, p_tuple([p_dict([]), b"]" + p_int(1) + b"a"])),
         "bad_tensor_args", "_rebuild_from_type_v2 of a Parameter with the state ({}, [1]) (torch refuses it: the "
         "slots, true, have no items())", torch="refuses")
    emit("from_type_parameter_slots_empty_list.pt", from_type(param, p_tuple([p_dict([]), b"]"])), "ok",
         "_rebuild_from_type_v2 of a Parameter with the state ({}, []): slots that are false are not looked at "
         "(torch reads it)", torch="reads")
    emit("from_type_tensor_state_three.pt", from_type(plain, p_tuple([p_dict([]), b"N", b"N"])), "ok",
         "_rebuild_from_type_v2 of a plain Tensor with the state ({}, None, None): torch 1.13 ignores a plain "
         "Tensor's state (torch reads it; torch 2.x refuses it)", torch="reads")
    # The type: as_subclass takes a subclass of Tensor, and is a method of tensors.
    emit("from_type_builtin_int.pt", from_type(("builtins", "int"), b"}"), "bad_tensor_args",
         "_rebuild_from_type_v2 of builtins.int (torch refuses it: as_subclass of a class that is no Tensor subclass)",
         torch="refuses")
    emit("from_type_legacy_tensor_type.pt", from_type(("torch", "FloatTensor"), b"}"), "bad_tensor_args",
         "_rebuild_from_type_v2 of torch.FloatTensor, a legacy tensor type (torch refuses it: no Tensor subclass)",
         torch="refuses")
    emit("from_type_variable.pt", from_type(("torch.autograd.variable", "Variable"), b"}"), "bad_tensor_args",
         "_rebuild_from_type_v2 of torch.autograd.Variable (torch refuses it: no Tensor subclass)", torch="refuses")
    emit("from_type_type_int.pt", from_type(p_int(3), b"}"), "bad_tensor_args",
         "_rebuild_from_type_v2 whose type is the int 3 (torch refuses it: as_subclass takes a class)", torch="refuses")
    ordered = (p_global("collections", "OrderedDict"), b")")
    emit("from_type_parameter_of_dict.pt", from_type(param, b"}", func=ordered), "bad_tensor_args",
         "_rebuild_from_type_v2 of a Parameter whose function makes an OrderedDict (torch refuses it: a dict has "
         "no as_subclass)", torch="refuses")
    emit("from_type_ordered_dict.pt", from_type(("collections", "OrderedDict"), p_dict([(p_str("note"), p_int(1))]),
                                                func=ordered), "ok",
         "_rebuild_from_type_v2 of OrderedDict whose function is OrderedDict: the result has the type already "
         "(torch reads it, 'b' an empty OrderedDict)", torch="reads")
    emit("from_type_ordered_dict_state_list.pt", from_type(("collections", "OrderedDict"), b"]", func=ordered),
         "bad_tensor_args", "_rebuild_from_type_v2 of OrderedDict whose function is OrderedDict, with the state [] "
         "(torch refuses it: it sets the state's items itself, and a list has no items())", torch="refuses")
    emit("from_type_function_itself.pt", from_type(("torch._utils", "_rebuild_tensor_v2"), b"}"), "bad_tensor_args",
         "_rebuild_from_type_v2 whose type is its function, _rebuild_tensor_v2 (torch refuses it: the tensor is no "
         "instance of a function, and as_subclass takes a class)", torch="refuses")
    emit("from_type_parameter_int_name.pt", from_type(param, p_dict([(p_int(3), p_int(1))])), "bad_tensor_args",
         "_rebuild_from_type_v2 of a Parameter with the state {3: 1} (torch refuses it: setattr() takes a str)",
         torch="refuses")
    emit("build_storage_tuple.pt", one(pid("FloatStorage", "0", 4) + b"Q" + p_tuple([p_int(1), p_int(2)]) + b"b"),
         "pickle_malformed", "BUILD of a storage with the state (1, 2) (torch refuses it: a TypedStorage has no "
         "__setstate__, and 1 is not a dict)", torch="refuses")
    emit("build_storage_attrs.pt",
         ck(pickle(p_dict([(p_str("t"), tensor("0", 4)),
                           (p_str("s"), pid("FloatStorage", "1", 2) + b"Q" + p_dict([(p_str("x"), p_int(1))]) + b"b")]))),
         "ok", "BUILD of a storage with the state {'x': 1}: an attribute (torch reads it)", torch="reads")
    later = lambda count: ck(pickle(p_dict([(p_str("a"), tensor("0", 4)),
                                            (p_str("b"), rebuild_v2(b"(" + p_str("storage") + p_global("torch", "FloatStorage") +
                                                                    p_str("0") + p_str("cpu") + count + b"t", 1, (2,), (1,)))])))
    emit("zip_later_reference_count_str.pt", later(p_str("x")), "ok",
         "storage '0' referenced again with the element count 'x': torch.load reads a key's count at its "
         "first reference only (torch reads it)", torch="reads")
    emit("zip_later_reference_count_negative.pt", later(p_int(-1)), "ok",
         "storage '0' referenced again with the element count -1, never read (torch reads it)", torch="reads")
    emit("zip_first_reference_count_bool.pt",
         one(rebuild_v2(b"(" + p_str("storage") + p_global("torch", "FloatStorage") + p_str("0") + p_str("cpu") +
                        b"\x88t", 0, (1,), (1,))), "ok",
         "storage '0''s element count is True, which torch multiplies by the element size as 1: one F32 of "
         "the record's 16 bytes (torch reads it)", torch="reads")
    emit("pid_class_is_tensor.pt",
         ck(pickle(p_dict([(p_str("a"), tensor("0", 2, cls="LongStorage") + b"q\x05"),
                           (p_str("b"), rebuild_v2(b"(" + p_str("storage") + b"h\x05" + p_str("1") + p_str("cpu") + p_int(1) +
                                                   b"t", 0, (1,), (1,)))]))), "ok",
         "a persistent id whose storage class is the tensor 'a' (I64), by a memo get: torch.load takes the "
         "class's .dtype, which a tensor has, so 'b' is I64 (torch reads it)", torch="reads")
    emit("sparse_three_arguments.pt", one(call("_rebuild_sparse_tensor", coo + [b"N"]), coo_data), "bad_tensor_args",
         "_rebuild_sparse_tensor with a third argument (torch refuses it)", torch="refuses")

    # A storage key that is an int: torch.load keeps storages in a dict by key, where the
    # int 0 and the string '0' are two keys, two storages of the one record data/0.
    raw_pid = lambda cls, key_op, numel: (b"(" + p_str("storage") + p_global("torch", cls) + key_op + p_str("cpu") +
                                          p_int(numel) + b"t")
    emit("zip_int_key_other_storage.pt",
         ck(pickle(p_dict([(p_str("a"), tensor("0", 4)),
                           (p_str("b"), rebuild_v2(raw_pid("LongStorage", p_int(0), 2), 0, (2,), (1,)))]))), "ok",
         "'a' is FloatStorage '0' of 4, 'b' LongStorage 0 (an int) of 2: another key, so another storage of "
         "record data/0's first 16 bytes, I64 [2] (torch reads it)", torch="reads")
    emit("zip_int_key_alone.pt", one(rebuild_v2(raw_pid("FloatStorage", p_int(0), 4), 0, (4,), (1,))), "ok",
         "a storage key that is the int 0: record data/0 (torch reads it)", torch="reads")
    emit("zip_bytes_key.pt", one(rebuild_v2(raw_pid("FloatStorage", b"C\x010", 4), 0, (4,), (1,))), "bad_tensor_args",
         "a storage key that is bytes, b'0' (torch refuses it: it looks for the record data/b'0')", torch="refuses")

    # Sparse tensors as torch.load checks them: the parts against each other when rebuilt,
    # every index against the shape once the file is read (_validate_loaded_sparse_tensors).
    def coo_file(rows, size, values=None, items=(), layout=None):
        """_rebuild_sparse_tensor(torch.sparse_coo, (indices, values, size, *items)): the I64
        indices [len(rows), n] in record 0, by default F32 values [n] in record 1."""
        n, flat = len(rows[0]), [v for r in rows for v in r]
        if values is None:
            values = rebuild_v2(pid("FloatStorage", "1", 2), 0, (n,), (1,))
        data = p_tuple([rebuild_v2(pid("LongStorage", "0", len(flat)), 0, (len(rows), n), (n, 1)), values,
                        p_global("torch", "Size") + p_tuple([p_ints(size)]) + b"R"] + list(items))
        return one(call("_rebuild_sparse_tensor", [layout or p_global("torch", "sparse_coo"), data]),
                   {"0": struct.pack(f"<{len(flat)}q", *flat), "1": BASE_DATA["1"]})
    # torch 1.13 pickles a layout as torch.serialization._get_layout(str(layout)), which finds
    # the name among torch's layouts exactly
    get_layout = lambda name: call("_get_layout", [p_str(name)], module="torch.serialization")
    emit("sparse_get_layout_ok.pt", coo_file([[1, 3]], (4,), layout=get_layout("torch.sparse_coo")), "ok",
         "_rebuild_sparse_tensor(_get_layout('torch.sparse_coo'), ...) as torch 1.13 writes it (torch reads it)",
         torch="reads")
    emit("sparse_get_layout_unknown.pt", coo_file([[1, 3]], (4,), layout=get_layout("torch.sparse\x1fcoo")),
         "bad_tensor_args", "_get_layout('torch.sparse\\x1fcoo'), no layout of torch's (torch refuses it: KeyError)",
         torch="refuses")
    emit("sparse_get_layout_no_prefix.pt", coo_file([[1, 3]], (4,), layout=get_layout("sparse_coo")),
         "bad_tensor_args", "_get_layout('sparse_coo'), without 'torch.' (torch refuses it: KeyError)", torch="refuses")
    emit("sparse_get_layout_strided.pt", coo_file([[1, 3]], (4,), layout=get_layout("torch.strided")),
         "bad_tensor_args", "_rebuild_sparse_tensor of torch.strided, a layout but no sparse one (torch refuses it)",
         torch="refuses")
    emit("sparse_index_past_size.pt", coo_file([[1, 3]], (3,)), "bad_tensor_args",
         "a COO tensor of size [3] with the index 3 (torch refuses it: size is inconsistent with indices)",
         torch="refuses")
    emit("sparse_negative_index.pt", coo_file([[-1, 2]], (4,)), "bad_tensor_args",
         "a COO tensor with the index -1 (torch refuses it: found negative index)", torch="refuses")
    emit("sparse_nnz_mismatch.pt", coo_file([[1]], (4,), values=rebuild_v2(pid("FloatStorage", "1", 2), 0, (2,), (1,))),
         "bad_tensor_args", "a COO tensor of 1 index and 2 values (torch refuses it: indices and values must "
         "have same nnz)", torch="refuses")
    emit("sparse_dims_mismatch.pt", coo_file([[1, 2]], (4, 4)), "bad_tensor_args",
         "a COO tensor of size [4, 4] with one sparse dimension and values of no dense one (torch refuses it: "
         "number of dimensions must be sparse_dim + dense_dim)", torch="refuses")
    emit("sparse_scalar_values.pt", coo_file([[2]], (4,), values=rebuild_v2(pid("FloatStorage", "1", 2), 1, (), ())), "ok",
         "a COO tensor of one index whose values are a 0-dim tensor: torch expands them to [1] (torch reads "
         "it)", torch="reads")
    emit("sparse_five_items.pt", coo_file([[1, 2]], (4,), items=(b"\x88", b"N")), "bad_tensor_args",
         "_rebuild_sparse_tensor's data of 5 items (torch refuses it: it unpacks 3, or 4 in torch 2.x)",
         torch="refuses")

    def csr_file(crow, col, size, layout="sparse_csr", crow_cls="LongStorage", fn="_rebuild_sparse_csr_tensor",
                 batch=(), values=None):
        """fn(layout, (compressed_indices, plain_indices, values, size)), as torch 1.13 writes a CSR
        tensor: crow (flat; [*batch, n]) in record 0, I64 col in record 2, by default F32 values
        [nnz] of record 1 (4 floats)."""
        fmt = "<%dq" if crow_cls == "LongStorage" else "<%di"
        shape = lambda n: tuple(batch) + (n // max(1, math.prod(batch)),)
        strides = lambda n: tuple(math.prod(shape(n)[k + 1:]) for k in range(len(shape(n))))
        if values is None:
            values = rebuild_v2(pid("FloatStorage", "1", 4), 0, shape(len(col)), strides(len(col)))
        data = p_tuple([rebuild_v2(pid(crow_cls, "0", len(crow)), 0, shape(len(crow)), strides(len(crow))),
                        rebuild_v2(pid("LongStorage", "2", len(col)), 0, shape(len(col)), strides(len(col))),
                        values, p_ints(size)])
        return one(call(fn, [p_global("torch", layout), data]),
                   {"0": struct.pack(fmt % len(crow), *crow), "1": floats(4, -1.0),
                    "2": struct.pack(f"<{len(col)}q", *col)})
    emit("csr_ok.pt", csr_file((0, 1, 2), (2, 0), (2, 3)), "ok",
         "a CSR tensor [2, 3] as torch 1.13 writes it, _rebuild_sparse_csr_tensor (torch reads it)", torch="reads")
    # torch 1.13 checks compressed indices row by row, and none where no value is stored: it
    # reads these, whose compressed indices hold offsets past the values (a consumer that
    # follows them reads out of bounds); ptread holds every sparse tensor to the invariants.
    emit("csr_nnz0_crow_any.pt", csr_file((1, 0, 5), (), (2, 3)), "bad_tensor_args",
         "a CSR tensor [2, 3] with no values and crow (1, 0, 5): torch 1.13 checks no index and reads it; "
         "ptread refuses crow[0] != 0")
    emit("csr_no_rows_crow_any.pt", csr_file((5,), (2, 1), (0, 3)), "bad_tensor_args",
         "a CSR tensor [0, 3] with crow (5,) and 2 values: with no rows torch 1.13 checks only the column range "
         "and reads it; ptread refuses crow[0] != 0")
    emit("csr_no_rows_column_past.pt", csr_file((0,), (3,), (0, 3)), "bad_tensor_args",
         "a CSR tensor [0, 3] with the column 3 (torch refuses it: 0 <= col_indices < ncols)", torch="refuses")
    emit("csr_unsorted_columns.pt", csr_file((0, 2, 2), (2, 0), (2, 3)), "bad_tensor_args",
         "a CSR tensor whose first row lists columns 2 then 0 (torch refuses it: sorted and distinct)",
         torch="refuses")
    emit("csr_repeated_column.pt", csr_file((0, 2, 2), (1, 1), (2, 3)), "bad_tensor_args",
         "a CSR tensor whose first row lists column 1 twice (torch refuses it: sorted and distinct)",
         torch="refuses")
    emit("csr_column_past_size.pt", csr_file((0, 1, 2), (3, 0), (2, 3)), "bad_tensor_args",
         "a CSR tensor of 3 columns with the column index 3 (torch refuses it: 0 <= col_indices < ncols)",
         torch="refuses")
    emit("csr_crow_not_from_zero.pt", csr_file((1, 1, 2), (2, 0), (2, 3)), "bad_tensor_args",
         "a CSR tensor whose crow_indices start at 1 (torch refuses it: crow_indices[..., 0] == 0)",
         torch="refuses")
    emit("csr_rows_mismatch.pt", csr_file((0, 1, 2), (2, 0), (3, 3)), "bad_tensor_args",
         "a CSR tensor of 3 rows with 3 crow_indices (torch refuses it: the number of rows + 1)", torch="refuses")
    emit("csr_mixed_index_dtypes.pt", csr_file((0, 1, 2), (2, 0), (2, 3), crow_cls="IntStorage"), "bad_tensor_args",
         "a CSR tensor of I32 crow_indices and I64 col_indices (torch refuses it: the same dtype)", torch="refuses")
    emit("csr_batched_ok.pt", csr_file((0, 1, 2, 0, 0, 2), (2, 0, 0, 1), (2, 2, 3), batch=(2,)), "ok",
         "a batch of 2 CSR tensors [2, 3] (torch reads it)", torch="reads")
    emit("csr_batched_second_unsorted.pt", csr_file((0, 1, 2, 0, 0, 2), (2, 0, 1, 0), (2, 2, 3), batch=(2,)),
         "bad_tensor_args", "a batch of 2 CSR tensors, the second's row listing columns 1 then 0 (torch "
         "refuses it)", torch="refuses")
    emit("csr_batch_mismatch.pt", csr_file((0, 1, 2, 0, 0, 2), (2, 0, 0, 1), (3, 2, 3), batch=(2,)),
         "bad_tensor_args", "a batch of 2 CSR tensors in a tensor of size [3, 2, 3] (torch refuses it: batch "
         "dimensions)", torch="refuses")
    # torch 2.x's layouts, by _rebuild_sparse_tensor (torch 1.13 rebuilds none of them)
    two = lambda: rebuild_v2(pid("FloatStorage", "1", 4), 0, (1, 2, 2), (4, 2, 1))  # one 2x2 block
    emit("csc_ok.pt", csr_file((0, 1, 1, 2), (1, 0), (2, 3), layout="sparse_csc", fn="_rebuild_sparse_tensor"), "ok",
         "a CSC tensor [2, 3] by _rebuild_sparse_tensor, as torch 2.x writes it")
    emit("csc_row_past_size.pt", csr_file((0, 1, 1, 2), (2, 0), (2, 3), layout="sparse_csc", fn="_rebuild_sparse_tensor"),
         "bad_tensor_args", "a CSC tensor of 2 rows with the row index 2")
    emit("bsr_ok.pt", csr_file((0, 0, 1), (1,), (4, 4), layout="sparse_bsr", fn="_rebuild_sparse_tensor", values=two()),
         "ok", "a BSR tensor [4, 4] of one 2x2 block at block (1, 1), as torch 2.x writes it")
    emit("bsr_block_not_dividing.pt", csr_file((0, 0, 1), (1,), (4, 5), layout="sparse_bsr", fn="_rebuild_sparse_tensor",
                                               values=two()),
         "bad_tensor_args", "a BSR tensor [4, 5] of 2x2 blocks (5 columns are no whole number of blocks)")
    emit("bsc_column_past_size.pt", csr_file((0, 0, 1), (2,), (4, 4), layout="sparse_bsc", fn="_rebuild_sparse_tensor",
                                             values=two()),
         "bad_tensor_args", "a BSC tensor [4, 4] of 2x2 blocks with the block row index 2")
    # An expanded view stands for more indices than the file has bytes: checking them all
    # would take as long as the view is big (a view of 2^40 indices of one stored 8 bytes).
    emit("sparse_indices_expanded.pt",
         one(call("_rebuild_sparse_tensor", [p_global("torch", "sparse_coo"), p_tuple([
             rebuild_v2(pid("LongStorage", "0", 1), 0, (1, 1 << 40), (0, 0)),
             rebuild_v2(pid("FloatStorage", "1", 1), 0, (1 << 40,), (0,)),
             p_global("torch", "Size") + p_tuple([p_ints((4,))]) + b"R"])]),
             {"0": struct.pack("<q", 1), "1": BASE_DATA["1"]}),
         "limit_exceeded", "a COO tensor whose indices are an expanded view of 2^40 elements: more to check "
         "than the file has bytes")
    emit("csr_of_coo_layout.pt", csr_file((0, 1, 2), (2, 0), (2, 3), layout="sparse_coo"), "bad_tensor_args",
         "_rebuild_sparse_csr_tensor(torch.sparse_coo, ...) (torch refuses it: CSR only)", torch="refuses")

    # One storage key referenced under two storage classes.
    two = lambda second: pickle(p_dict([(p_str("a"), tensor("0", 4)), (p_str("b"), second)]))
    # (torch.load keeps the storage of a key's first reference: 'b' is F32 over its 16 bytes.)
    emit("storage_dtype_conflict_larger.pt", ck(two(tensor("0", 4, cls="DoubleStorage"))), "ok",
         "storage '0' (16 bytes) is FloatStorage of 4 for 'a', DoubleStorage of 4 (32 bytes) for 'b': "
         "'b' gets the first reference's storage, F32 [4], as torch.load gives it")
    emit("storage_dtype_conflict_fits.pt", ck(two(tensor("0", 2, cls="DoubleStorage"))), "ok",
         "storage '0' is FloatStorage of 4 for 'a', DoubleStorage of 2 (the same 16 bytes) for 'b': "
         "'b' comes back F32 [2], as torch.load gives it")
    emit("storage_numel_past_record.pt", ck(pickle(p_dict([(p_str("t"), tensor("0", 8, size=(4,)))]))),
         "storage_too_small", "the persistent id says 8 floats; record data/0 holds 16 bytes")
    emit("storage_numel_overflow.pt", one(tensor("0", 1 << 62, size=(4,), cls="DoubleStorage")),
         "shape_overflow", "a DoubleStorage of 2^62 elements: its byte size overflows 64 bits")
    emit("storage_numel_negative.pt", one(rebuild_v2(pid("FloatStorage", "0", -4), 0, (4,), (1,))),
         "bad_tensor_args", "a storage of -4 elements")
    emit("pid_unknown_tag.pt", one(rebuild_v2(pid("FloatStorage", "0", 4, tag="evil"), 0, (4,), (1,))),
         "bad_tensor_args", "persistent id ('evil', ...)")
    emit("pid_not_tuple.pt", ck(pickle(p_dict([(p_str("t"), p_int(5) + b"Q")]))), "bad_tensor_args",
         "a persistent id that is an int")
    emit("pid_unknown_class.pt", ck(pickle(p_dict([(p_str("t"), tensor("0", 4, cls="EvilStorage"))]))),
         "unknown_storage_class", "storage class torch.EvilStorage")
    emit("pid_missing_record.pt", ck(pickle(p_dict([(p_str("t"), tensor("7", 4))]))), "record_missing",
         "storage key '7': no record data/7")
    emit("pid_key_traversal.pt", one(tensor("../../../../etc/passwd", 4)), "record_missing",
         "storage key '../../../../etc/passwd' (a record name, never a path)")


# ---------------------------------------------------------------------------------------
# The legacy format (torch.save before 1.6, or _use_new_zipfile_serialization=False)

LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"."
LEGACY_VERSION = b"\x80\x02M\xe9\x03."
LEGACY_SYSINFO = pickle(p_dict([(p_str("protocol_version"), p_int(1001)), (p_str("little_endian"), b"\x88"),
                                (p_str("type_sizes"), p_dict([(p_str("short"), p_int(2)), (p_str("int"), p_int(4)),
                                                              (p_str("long"), p_int(4))]))]))


def lpid(cls, key, numel, view=b"N"):
    return pid(cls, key, numel, view=view)


def legacy(obj_pkl, keys, storages, counts=None):
    """storages: {key: bytes}; counts: {key: the 8-byte element count written} (default: len/4)."""
    key_list = pickle(b"(" + b"".join(p_str(k) for k in keys) + b"l")
    out = LEGACY_MAGIC + LEGACY_VERSION + LEGACY_SYSINFO + obj_pkl + key_list
    for k in keys:
        data = storages[k]
        n = (counts or {}).get(k, len(data) // 4)
        out += struct.pack("<Q", n) + data
    return out


def legacy_files():
    def obj(t0=None, t1=None):
        t0 = t0 or rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))
        t1 = t1 or rebuild_v2(lpid("FloatStorage", "1", 2), 0, (2,), (1,))
        return pickle(p_dict([(p_str("w"), t0), (p_str("b"), t1)]))
    base = legacy(obj(), ["0", "1"], BASE_DATA)
    emit("legacy_base_ok.pt", base, "ok", "the valid base of the legacy files below")
    emit("legacy_count_mismatch.pt", legacy(obj(), ["0", "1"], BASE_DATA, {"0": 5}), "legacy_corrupt",
         "storage '0': the file's count says 5 elements, the pickle 4")
    emit("legacy_count_huge.pt", legacy(obj(), ["0", "1"], BASE_DATA, {"0": 1 << 62}), "legacy_corrupt",
         "storage '0': the file's count says 2^62 elements, the pickle 4")
    big = 1 << 30
    t0 = rebuild_v2(lpid("FloatStorage", "0", big), 0, (4,), (1,))
    emit("legacy_numel_past_eof.pt", legacy(obj(t0=t0), ["0", "1"], BASE_DATA, {"0": big}), "truncated",
         "storage '0' is 2^30 floats by the pickle and the count alike: 4 GiB past the end of a small file")
    emit("legacy_truncated_data.pt", base[:-5], "truncated", "the legacy base cut inside its last storage")
    lpid_count = lambda count: (b"(" + p_str("storage") + p_global("torch", "FloatStorage") + p_str("0") + p_str("cpu") +
                                count + b"Nt")
    again = pickle(p_dict([(p_str("w"), rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))),
                           (p_str("w2"), rebuild_v2(lpid_count(b"N"), 0, (4,), (1,)))]))
    emit("legacy_later_reference_count_none.pt", legacy(again, ["0"], {"0": BASE_DATA["0"]}), "bad_tensor_args",
         "a legacy file's storage '0' referenced again with the element count None: its pickle multiplies "
         "every count by the element size (torch refuses it)", torch="refuses")
    again = pickle(p_dict([(p_str("w"), rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))),
                           (p_str("w2"), rebuild_v2(lpid_count(p_str("x")), 0, (4,), (1,)))]))
    emit("legacy_later_reference_count_str.pt", legacy(again, ["0"], {"0": BASE_DATA["0"]}), "ok",
         "a legacy file's storage '0' referenced again with the element count 'x', which Python multiplies "
         "(torch reads it)", torch="reads")
    # A legacy storage is torch.UntypedStorage(numel * element size): a tensor's set_() grows
    # it to the view's end, and the file's count must then be the grown size.
    grown = lambda declared, view=(4,): pickle(p_dict([(p_str("w"), rebuild_v2(lpid("FloatStorage", "0", declared), 0, view,
                                                                               (1,)))]))
    emit("legacy_storage_grown_by_view.pt", legacy(grown(2), ["0"], {"0": BASE_DATA["0"]}), "ok",
         "a legacy storage declared of 2 floats, a view of 4 over it and 4 in the file: set_() grows the "
         "storage to 4, which the file fills (torch reads it)", torch="reads")
    emit("legacy_storage_grown_from_zero.pt", legacy(grown(0), ["0"], {"0": BASE_DATA["0"]}), "ok",
         "a legacy storage declared of 0 floats, a view of 4 over it and 4 in the file (torch reads it)",
         torch="reads")
    emit("legacy_storage_grown_count_short.pt", legacy(grown(2), ["0"], {"0": BASE_DATA["0"][:8]}), "legacy_corrupt",
         "a legacy storage declared of 2 floats grown to 4 by a view, and 2 in the file (torch refuses it: "
         "the storage has the wrong byte size)", torch="refuses")
    emit("legacy_storage_grown_count_long.pt", legacy(grown(2, view=(3,)), ["0"], {"0": BASE_DATA["0"]}),
         "legacy_corrupt", "a legacy storage declared of 2 floats grown to 3 by a view, and 4 in the file "
         "(torch refuses it)", torch="refuses")
    emit("legacy_sys_info_int.pt", LEGACY_MAGIC + LEGACY_VERSION + pickle(p_int(7)) + base[len(LEGACY_MAGIC + LEGACY_VERSION +
                                                                                          LEGACY_SYSINFO):],
         "ok", "a legacy file whose sys_info is the int 7, not a dict (torch reads it: it never looks at sys_info)",
         torch="reads")
    qparams = p_tuple([p_global("torch", "per_tensor_affine"), b"G" + struct.pack(">d", 0.5), p_int(3)])
    qview = pickle(p_dict([(p_str("q"), p_global("torch._utils", "_rebuild_qtensor") + b"(" + lpid("QUInt8Storage", "0", 4) +
                            b"Q" + p_int(1) + p_ints((4,)) + p_ints((1,)) + qparams + b"\x89" + p_ordered_dict() + b"tR")]))
    emit("legacy_qtensor_view_past_storage.pt", legacy(qview, ["0"], {"0": bytes(range(4))}, {"0": 4}), "view_out_of_bounds",
         "a legacy QUInt8 tensor of 4 at offset 1 of a storage of 4: _rebuild_qtensor's set_() grows nothing "
         "(torch reads a byte past the storage; ptread refuses it)")
    module = lambda *items: b"(" + p_str("module") + p_global("torch.nn", "Linear") + b"".join(items) + b"tQ"
    emit("legacy_module_pid_two_items.pt",
         legacy(pickle(p_dict([(p_str("w"), rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))),
                               (p_str("m"), module())])), ["0"], {"0": BASE_DATA["0"]}), "bad_tensor_args",
         "a legacy ('module', torch.nn.Linear) without its source items: torch.load calls "
         "_check_container_source with one argument (torch refuses it)", torch="refuses")
    emit("legacy_module_pid_no_source.pt",
         legacy(pickle(p_dict([(p_str("w"), rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))),
                               (p_str("m"), module(b"N", b"N", p_str("x")))])), ["0"], {"0": BASE_DATA["0"]}), "ok",
         "a legacy ('module', torch.nn.Linear, None, None, 'x'): an empty item, so no source check, whatever "
         "the count (torch reads it)", torch="reads")
    # torch 0.2-0.4 whole models: each Parameter a REDUCE of the class with the tensor alone
    # (Parameter.__new__(cls, data=None, requires_grad=True)), then a BUILD of
    # (requires_grad, volatile, backward_hooks): Tensor.__setstate__ takes 3 items as
    # requires_grad, _, _backward_hooks = state.
    def old_param(args=None, state=None, cls="FloatStorage"):
        t = rebuild_v2(lpid(cls, "0", 4), 0, (4,), (1,))
        call = p_global("torch.nn.parameter", "Parameter") + p_tuple([t] + list(args or [])) + b"R"
        if state is not None:
            call += p_tuple(state) + b"b"
        return legacy(pickle(p_dict([(p_str("w"), call)])), ["0"], {"0": BASE_DATA["0"]})
    emit("legacy_parameter_state_true.pt", old_param(state=[b"\x88", b"\x89", b"N"]), "ok",
         "a legacy Parameter(tensor) with BUILD (True, False, None), as torch 0.2-0.4 wrote whole models "
         "(torch reads it: requires_grad True)", torch="reads")
    emit("legacy_parameter_state_false.pt", old_param(state=[b"\x89", b"\x89", b"N"]), "ok",
         "a legacy Parameter(tensor) with BUILD (False, False, None) (torch reads it: requires_grad False)",
         torch="reads")
    emit("legacy_parameter_no_state.pt", old_param(), "ok",
         "a legacy Parameter(tensor) and no BUILD: requires_grad defaults to True (torch reads it)", torch="reads")
    emit("legacy_parameter_false_then_true.pt", old_param(args=[b"\x89"], state=[b"\x88", b"\x89", b"N"]), "ok",
         "a legacy Parameter(tensor, False) with BUILD (True, False, None): the state's requires_grad holds "
         "(torch reads it)", torch="reads")
    emit("legacy_parameter_state_none.pt", old_param(state=[b"N", b"\x89", b"N"]), "bad_tensor_args",
         "a legacy Parameter(tensor) with BUILD (None, False, None) (torch refuses it: requires_grad must be a bool)",
         torch="refuses")
    emit("legacy_parameter_state_two.pt", old_param(state=[b"\x88", b"\x89"]), "bad_tensor_args",
         "a legacy Parameter(tensor) with BUILD (True, False) (torch refuses it: Tensor.__setstate__ unpacks 3)",
         torch="refuses")
    emit("legacy_parameter_int_default.pt", old_param(cls="IntStorage"), "bad_tensor_args",
         "a legacy Parameter(int tensor): requires_grad defaults to True (torch refuses it: only floating "
         "point and complex tensors can require gradients)", torch="refuses")
    emit("legacy_parameter_int_state_false.pt", old_param(cls="IntStorage", state=[b"\x89", b"\x89", b"N"]),
         "bad_tensor_args", "a legacy Parameter(int tensor) with BUILD (False, False, None): the call already "
         "asks gradients of an int tensor (torch refuses it)", torch="refuses")
    emit("legacy_parameter_requires_grad_none.pt", old_param(args=[b"N"]), "bad_tensor_args",
         "a legacy Parameter(tensor, None) (torch refuses it: requires_grad is no bool)", torch="refuses")
    emit("legacy_parameter_three_args.pt", old_param(args=[b"\x88", b"\x89"]), "bad_tensor_args",
         "a legacy Parameter(tensor, True, False) (torch refuses it: Parameter.__new__ takes data and "
         "requires_grad)", torch="refuses")
    t0 = rebuild_v2(pid("FloatStorage", "0", 4), 0, (4,), (1,))
    emit("legacy_pid_five_items.pt", legacy(obj(t0=t0), ["0", "1"], BASE_DATA), "bad_tensor_args",
         "a legacy persistent id of 5 items, without the view item (torch refuses it: it unpacks 6)",
         torch="refuses")
    called = pickle(p_dict([(p_str("w"), rebuild_v2(lpid("FloatStorage", "0", 4), 0, (4,), (1,))),
                            (p_str("s"), p_global("torch", "FloatStorage") + p_tuple([p_int(4)]) + b"R")]))
    emit("legacy_call_storage_class.pt", legacy(called, ["0"], {"0": BASE_DATA["0"]}), "pickle_malformed",
         "torch.FloatStorage(4) by REDUCE in a legacy file, whose unpickler reads the global as a StorageType "
         "as a zip file's does (torch refuses it: not callable)", torch="refuses")
    cut = len(LEGACY_MAGIC + LEGACY_VERSION + LEGACY_SYSINFO) + 40
    emit("legacy_truncated_pickle.pt", base[:cut], "pickle_truncated", "the legacy base cut inside the object pickle")
    emit("legacy_key_not_referenced.pt", legacy(obj(), ["0", "1", "9"], dict(BASE_DATA, **{"9": floats(1)})),
         "legacy_corrupt", "the key list names storage '9', which the pickle never references")
    emit("legacy_key_twice.pt", legacy(obj(), ["0", "0", "1"], BASE_DATA), "legacy_corrupt",
         "the key list names storage '0' twice")
    emit("legacy_key_missing.pt", legacy(obj(), ["0"], BASE_DATA), "record_missing",
         "the key list leaves out storage '1', which the pickle references")
    t1 = rebuild_v2(lpid("FloatStorage", "0", 4, view=p_tuple([p_str("5"), p_int(2), p_int(10)])), 0, (2,), (1,))
    emit("legacy_view_past_root.pt", legacy(obj(t1=t1), ["0"], BASE_DATA), "ok",
         "view metadata ('5', offset 2, size 10) of a 4-element root storage: the view ends with the root "
         "(torch slices it so), and 'b' reads its 2 elements")
    # Storage '0' is 17 bytes of U8, storage '1' 2 doubles right after it, at an odd offset
    # in the file: the F64 tensor's data must still be aligned for double.
    t0 = rebuild_v2(lpid("ByteStorage", "0", 17), 0, (17,), (1,))
    t1 = rebuild_v2(lpid("DoubleStorage", "1", 2), 0, (2,), (1,))
    doubles = struct.pack("<2d", 1.5, -2.25)
    for k in range(8):  # a padding string that puts storage '1' at an odd offset (8n + 1)
        o = pickle(p_dict([(p_str("u8"), t0), (p_str("f64"), t1), (p_str("pad"), p_str("p" * k))]))
        f = legacy(o, ["0", "1"], {"0": bytes(range(1, 18)), "1": doubles}, {"0": 17, "1": 2})
        if (len(f) - 16) % 8 == 1:
            break
    assert (len(f) - 16) % 8 == 1
    emit("legacy_odd_offset_align.pt", f, "ok",
         "storage '1' (2 doubles) lies at an odd file offset, after storage '0' (17 bytes of U8): the "
         "F64 tensor must hand out 8-byte aligned data")


# ---------------------------------------------------------------------------------------
# The tar format of torch 0.1.x (torch/serialization.py, legacy_load)

def tar_archive(members):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return bytearray(bio.getvalue())


def tar_files():
    sys_info = LEGACY_SYSINFO
    # storages: count; per storage (key, location, class), element count, bytes; views list.
    storages = pickle(p_int(1)) + pickle(p_tuple([p_int(0), p_str("cpu"), p_global("torch", "FloatStorage")])) + \
        struct.pack("<Q", 4) + BASE_DATA["0"] + pickle(b"]")

    def tensors(ndim=1, sizes=(4,), strides=(1,), offset=0):
        return pickle(p_int(1)) + pickle(p_tuple([p_int(1), p_int(0), p_global("torch", "FloatTensor")])) + \
            struct.pack("<iI", ndim, 0) + struct.pack("<%dq" % len(sizes), *sizes) + \
            struct.pack("<%dq" % len(strides), *strides) + struct.pack("<q", offset)
    obj = pickle(p_dict([(p_str("w"), p_str("1") + b"Q")]))

    def build(st=storages, te=None, ob=obj, drop=None):
        members = [("sys_info", sys_info), ("storages", st), ("tensors", te or tensors()), ("pickle", ob)]
        return tar_archive([m for m in members if m[0] != drop])
    base = build()
    emit("tar_base_ok.pt", base, "ok", "the valid base of the tar-format files below (torch 0.1.x layout)")
    # The 'pickle' member is last: cut inside its data.
    pos = bytes(base).index(b"pickle\0")
    data_at = pos + 512
    emit("tar_member_past_eof.pt", base[:data_at + 10], "truncated",
         "the tar base cut inside its last member ('pickle'): the member runs past the end of the file")
    b = bytearray(base)
    h = bytes(base).index(b"storages\0")
    b[h + 124:h + 136] = b"77777777777\0"  # 8 GiB
    chk = sum(b[h:h + 148]) + 8 * 32 + sum(b[h + 156:h + 512])
    b[h + 148:h + 156] = ("%06o\0 " % chk).encode()
    emit("tar_member_size_huge.pt", b, "truncated", "the 'storages' member's header claims 8 GiB (checksum valid)")
    b = bytearray(base)
    b[h + 150] ^= 1
    emit("tar_bad_checksum.pt", b, "legacy_corrupt", "the 'storages' member's header checksum is wrong")
    assert storages.count(struct.pack("<Q", 4)) == 1
    st = storages.replace(struct.pack("<Q", 4), struct.pack("<Q", 1 << 40))
    emit("tar_storage_numel_huge.pt", build(st=st), "legacy_corrupt",
         "storage 0 says it holds 2^40 floats, past the end of its member")
    emit("tar_rank_65.pt", build(te=tensors(65, [1] * 64 + [4], [4] * 64 + [1])), "limit_exceeded",
         "tensor 1 has 65 dimensions")
    emit("tar_view_past_storage.pt", build(te=tensors(1, (4,), (1,), 2)), "view_out_of_bounds",
         "tensor 1 reads 4 elements from offset 2 of a 4-element storage (torch 1.13 grows the storage with "
         "uninitialized bytes and reads them)")
    emit("tar_missing_member.pt", build(drop="tensors"), "record_missing", "no 'tensors' member")


def rezip(path, replace, add=()):
    """The zip archive at path written again by Python's zipfile (stored, same order), with
    the records named in replace given other bytes and the (name, bytes) of add after them."""
    with zipfile.ZipFile(path) as z:
        items = [(i.filename, z.read(i)) for i in z.infolist()] + list(add)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as w:
        for name, data in items:
            w.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), replace.get(name, data))
    return out.getvalue()


def torchscript_files():
    src = os.path.join(FIXTURES, "ts_script.pt")
    with zipfile.ZipFile(src) as z:
        pkl = z.read("ts_script/data.pkl")
    first_pid = pkl.index(b"Q")  # the first BINPERSID: ... numel, TUPLE, BINPERSID
    assert pkl[first_pid - 1:first_pid] == b"t", "ts_script.pt's first persistent id is no MARK ... TUPLE"
    six = pkl[:first_pid - 1] + p_int(7) + pkl[first_pid - 1:]
    emit("ts_pid_six_items.pt", rezip(src, {"ts_script/data.pkl": six}), "ok",
         "tests/fixtures/ts_script.pt (torch.jit.save) whose first persistent id has a sixth item, 7: "
         "torch.jit.load reads the first five (torch reads it)", torch="reads")
    import pickletools
    ops = list(pickletools.genops(pkl))
    k = next(i for i, (op, arg, _) in enumerate(ops) if op.name == "GLOBAL" and arg == "collections OrderedDict")
    close = next(pos for op, _, pos in ops[k:] if op.name == "TUPLE")  # the first rebuild's arguments end
    eight = pkl[:close] + p_dict([]) + p_int(7) + pkl[close:]
    emit("ts_rebuild_v2_extra_argument.pt", rezip(src, {"ts_script/data.pkl": eight}), "ok",
         "tests/fixtures/ts_script.pt whose first _rebuild_tensor_v2 has 8 arguments (metadata {} and 7): "
         "torch.jit.load reads the first five (torch reads it)", torch="reads")
    # torch.jit.load's own unpickler wants PROTO 2 and reads a subset of the opcodes.
    k1 = next(pos for op, _, pos in ops if op.name == "BININT1")
    value = pkl[k1 + 1]
    emit("ts_opcode_pop.pt", rezip(src, {"ts_script/data.pkl": pkl[:2] + b"}0" + pkl[2:]}), "pickle_unsupported_opcode",
         "tests/fixtures/ts_script.pt with EMPTY_DICT, POP after its PROTO: torch.jit.load's unpickler has no POP "
         "(torch refuses it: Unknown opcode for unpickling)", torch="refuses")
    emit("ts_opcode_int_text.pt", rezip(src, {"ts_script/data.pkl": pkl[:k1] + b"I%d\n" % value + pkl[k1 + 2:]}),
         "pickle_unsupported_opcode", "tests/fixtures/ts_script.pt with its first BININT1 written as protocol 0's "
         "INT (torch refuses it: Unknown opcode for unpickling)", torch="refuses")
    emit("ts_long1_one_byte.pt", rezip(src, {"ts_script/data.pkl": pkl[:k1] + b"\x8a\x01" + bytes([value]) + pkl[k1 + 2:]}),
         "pickle_unsupported_opcode", "tests/fixtures/ts_script.pt with its first BININT1 written as a LONG1 of one "
         "byte (torch refuses it: Expected length to be 8)", torch="refuses")
    emit("ts_long1_eight_bytes.pt",
         rezip(src, {"ts_script/data.pkl": pkl[:k1] + b"\x8a\x08" + value.to_bytes(8, "little") + pkl[k1 + 2:]}), "ok",
         "tests/fixtures/ts_script.pt with its first BININT1 written as a LONG1 of 8 bytes (torch reads it)",
         torch="reads")
    emit("ts_proto_3.pt", rezip(src, {"ts_script/data.pkl": b"\x80\x03" + pkl[2:]}), "pickle_unsupported_opcode",
         "tests/fixtures/ts_script.pt whose data.pkl starts with PROTO 3 (torch refuses it: Only Pickle protocol 2 "
         "is supported)", torch="refuses")
    for order in (b"big", b"liptle"):
        emit("ts_byteorder_%s.pt" % order.decode(), rezip(src, {}, add=[("ts_script/byteorder", order)]), "ok",
             "tests/fixtures/ts_script.pt with a byteorder record '%s' (its bytes little-endian): torch.jit.load "
             "never reads the record (torch 1.13 and 2.11 give the stored values)" % order.decode(), torch="reads")
    sd = os.path.join(FIXTURES, "proto2.pt")
    with zipfile.ZipFile(sd) as z:
        prefix = z.namelist()[0].split("/")[0]
    emit("zip_byteorder_unknown.pt", rezip(sd, {}, add=[(prefix + "/byteorder", b"liptle")]), "zip_corrupt",
         "a state dict whose byteorder record says 'liptle': refused, as torch >= 2.1 refuses it (Unknown "
         "endianness type); torch 1.13 knows no such record and reads the file")
    emit("zip_byteorder_newline.pt", rezip(sd, {}, add=[(prefix + "/byteorder", b"little\n")]), "zip_corrupt",
         "a state dict whose byteorder record says 'little\\n': torch >= 2.1 compares the record's bytes with b'little' "
         "and b'big' exactly and refuses it; torch 1.13 reads the file")


def numpy_files():
    """numpy arrays and scalars as numpy pickles them (protocol 2: the bytes by
    _codecs.encode), their states varied as ndarray.__setstate__ and scalar() check them."""
    encode = lambda b: p_global("_codecs", "encode") + p_tuple([p_str(b.decode("latin1")), p_str("latin1")]) + b"R"
    dtype = lambda kind, order="<": (p_global("numpy", "dtype") + p_tuple([p_str(kind), b"\x89", b"\x88"]) + b"R" +
                                     p_tuple([p_int(3), p_str(order), b"N", b"N", b"N", p_int(-1), p_int(-1), p_int(0)]) +
                                     b"b")

    def array(state_items):
        return (p_global("numpy.core.multiarray", "_reconstruct") +
                p_tuple([p_global("numpy", "ndarray"), p_tuple([p_int(0)]), encode(b"b")]) + b"R" +
                b"(" + b"".join(state_items) + b"tb")

    def sd(value):
        return ck(pickle(p_dict([(p_str("w"), tensor("0", 4)), (p_str("a"), value)])))
    six = struct.pack("<6f", *[0.5 * k for k in range(6)])
    emit("np_array_ok.pt", sd(array([p_int(1), p_ints((2, 3)), dtype("f4"), b"\x89", encode(six)])), "ok",
         "a numpy float32 array [2, 3] as numpy pickles it (torch reads it)", torch="reads")
    emit("np_array_fortran_int.pt", sd(array([p_int(1), p_ints((2, 3)), dtype("f4"), p_int(1), encode(six)])), "ok",
         "a numpy float32 array [2, 3] whose is_fortran flag is the int 1: Fortran order, as numpy reads it (torch "
         "reads it)", torch="reads")
    emit("np_array_version_0_four_items.pt", sd(array([p_ints((2, 3)), dtype("f4"), b"\x89", encode(six)])), "ok",
         "a numpy array state of numpy's first form, 4 items without the version (torch reads it)", torch="reads")
    emit("np_array_version_2.pt", sd(array([p_int(2), p_ints((2, 3)), dtype("f4"), b"\x89", encode(six)])),
         "bad_tensor_args", "a numpy array state of version 2 (torch refuses it: can't handle version 2 of "
         "numpy.ndarray pickle)", torch="refuses")
    emit("np_array_bytes_long.pt", sd(array([p_int(1), p_ints((2, 2)), dtype("f4"), b"\x89", encode(six)])),
         "bad_tensor_args", "a numpy float32 array [2, 2] given 24 bytes (torch refuses it: buffer size does not "
         "match array size)", torch="refuses")
    emit("np_array_shape_list.pt", sd(array([p_int(1), b"(" + p_int(6) + b"l", dtype("f4"), b"\x89", encode(six)])),
         "bad_tensor_args", "a numpy array whose shape is the list [6], not a tuple (torch refuses it)", torch="refuses")
    emit("np_array_state_three_items.pt", sd(array([p_int(1), p_ints((6,)), dtype("f4")])), "bad_tensor_args",
         "a numpy array state of 3 items (torch refuses it)", torch="refuses")
    scalar = lambda kind, raw, order="<": (p_global("numpy.core.multiarray", "scalar") +
                                           p_tuple([dtype(kind, order), encode(raw)]) + b"R")
    emit("np_scalar_short.pt", sd(scalar("f8", b"\x00" * 7)), "bad_tensor_args",
         "numpy.core.multiarray.scalar of a float64 from 7 bytes (torch refuses it: initialization string is too "
         "small)", torch="refuses")
    emit("np_scalar_long.pt", sd(scalar("i2", b"\x05\x00\x07")), "ok",
         "numpy.core.multiarray.scalar of an int16 from 3 bytes: numpy reads the first two, 5 (torch reads it)",
         torch="reads")
    emit("np_scalar_uint64_past_int64.pt", sd(scalar("u8", b"\xff" * 8)), "ok",
         "numpy.core.multiarray.scalar of the uint64 2^64-1: a Python int past int64 (torch reads it)", torch="reads")


def torch_object_files():
    """torch's module-level objects (dtypes, qschemes, layouts, memory formats) used as
    Python's unpickler would refuse: called, taken as NEWOBJ's class, given a state."""
    def sd(value):
        return ck(pickle(p_dict([(p_str("w"), tensor("0", 4)), (p_str("a"), value)])))
    for name, obj, ops, why in [
            ("call_dtype", "float32", b")R", "TypeError: 'torch.dtype' object is not callable"),
            ("call_dtype_alias", "int", p_int(3) + b"\x85R", "TypeError: 'torch.dtype' object is not callable"),
            ("call_qscheme", "per_tensor_affine", b")R", "TypeError: 'torch.qscheme' object is not callable"),
            ("call_layout", "strided", b")R", "TypeError: 'torch.layout' object is not callable"),
            ("call_memory_format", "channels_last", b")R", "TypeError: 'torch.memory_format' object is not callable"),
            ("newobj_dtype", "float32", b")\x81", "NEWOBJ class argument must be a type, not torch.dtype"),
            ("build_dtype_dict", "float32", b"}" + p_str("a") + p_int(1) + b"sb",
             "'torch.dtype' object has no attribute '__dict__'"),
            ("build_dtype_slots", "float32", b"N}" + p_str("a") + p_int(1) + b"s\x86b",
             "'torch.dtype' object has no attribute 'a'")]:
        emit(f"torch_object_{name}.pt", sd(p_global("torch", obj) + ops), "pickle_malformed",
             f"torch.{obj} {name.split('_')[0]} (torch refuses it: {why})", torch="refuses")
    emit("torch_object_build_dtype_none.pt", sd(p_global("torch", "float32") + b"Nb"), "ok",
         "BUILD of torch.float32 with the state None: nothing to set (torch reads it)", torch="reads")
    emit("torch_object_build_dtype_empty_slots.pt", sd(p_global("torch", "float32") + b"N}\x86b"), "ok",
         "BUILD of torch.float32 with no dict state and no slots (torch reads it)", torch="reads")


def main():
    for f in os.listdir(HERE):
        if f.endswith(".pt"):
            os.remove(os.path.join(HERE, f))
    truncations()
    zip_files()
    deflate_files()
    pickle_files()
    tensor_files()
    legacy_files()
    tar_files()
    torchscript_files()
    numpy_files()
    torch_object_files()
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({n: e for n, _, e in ENTRIES}, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(HERE, "torch.json"), "w") as f:
        json.dump(TORCH, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(HERE, n)) for n, _, _ in ENTRIES)
    lines = [
        "# Adversarial corpus",
        "",
        "Hostile, truncated and malformed checkpoints, written by `make.py` (Python standard library",
        "only; deterministic: with the same zlib, a rerun changes no byte). `expected.json` maps each file to",
        "the `ErrorCode` name ptread must answer in every load mode (mmap, read, memory), or `ok` for",
        "files that look hostile but are valid and must read (every tensor materialized).",
        "`tests/unit/adversarial.cpp` (tag `[adversarial]`) checks them. Files named `deflate_*` hold",
        "deflated records: built without zlib, ptread answers `zip_unsupported_compression` for them.",
        "`torch.json` says, for the files whose description says what torch does, whether torch.load",
        "reads or refuses them (`reads_other`: reads them with data ptread does not apply, BUILD's",
        "`Tensor.__setstate__` or a `_rebuild_from_type_v2` state giving a tensor other data, which ptread refuses with",
        "`unsupported_tensor` rather than hand out what torch would not); `check_torch.py` (CTest",
        "`adversarial_torch`, with torch) checks it against torch 1.13. `torch_tensors.json` holds what",
        "torch.load gives for the tensors of the files it `reads` (dtype, shape, strides, sha256 of the bytes,",
        "requires_grad), which ptread must give bit for bit;",
        "`check_torch.py --write` writes it after a change here, and the same test checks it.",
        "",
        "The `trunc_*` files are prefixes of `tests/fixtures/tensor_root.pt` (written by torch 1.13);",
        "the others are built here the way torch lays out its files.",
        "",
        "%d files, %d bytes in all." % (len(ENTRIES), total),
        "",
        "| file | what it is | expected |",
        "|---|---|---|",
    ]
    for n, what, e in ENTRIES:
        lines.append("| `%s` | %s | `%s` |" % (n, what.replace("|", "\\|"), e))
    with open(os.path.join(HERE, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%d files, %d bytes" % (len(ENTRIES), total))


if __name__ == "__main__":
    sys.exit(main())
