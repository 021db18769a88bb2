#!/usr/bin/env python3
"""The `ptread` tool against the torch-written fixtures (standard library only).

  check_cli.py PTREAD_BINARY FIXTURE_DIR

ls --json must list what torch.load sees (expected.json: names in order, dtype, shape,
strides, device, nbytes); export must write a valid safetensors file whose tensors hash to
torch's values; broken files exit 1 with their error code on stderr; usage errors exit 2;
audit exits 0 or 3 and lists the refused globals.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ptread, fixtures = sys.argv[1], sys.argv[2]
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
CODES = {"empty_file": 101, "git_lfs_pointer": 102, "html_page": 103, "safetensors_file": 104,
         "unknown_format": 105, "truncated": 106, "no_data_pkl": 204, "record_missing": 205,
         "unknown_storage_class": 400, "unknown_dtype": 401, "view_out_of_bounds": 403}
failures = []


def fail(*what):
    failures.append(" ".join(str(w) for w in what))
    print("FAIL", *what)


def run(*args):
    return subprocess.run([ptread, *args], capture_output=True)


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
    header = json.loads(data[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    body = data[8 + n:]
    pos = 0
    for begin, end, name in sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items()):
        assert begin == pos, f"{name}: gap or overlap"
        numel = 1
        for d in header[name]["shape"]:
            numel *= d
        assert end - begin == numel * SIZES[header[name]["dtype"]], name
        pos = end
    assert pos == len(body), "data section has trailing bytes"
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


expected = json.load(open(os.path.join(fixtures, "expected.json")))
HAVE_ZLIB = b"PTREAD_WITH_ZLIB" not in run("ls", os.path.join(fixtures, "deflate.pt")).stderr
deflate_ok = True
with tempfile.TemporaryDirectory() as tmp:
    for name, e in expected["files"].items():
        path = os.path.join(fixtures, name)
        r = run("ls", "--json", path)
        if r.returncode != 0:
            # a build without zlib names the option instead of reading deflated records
            if name == "deflate.pt" and b"PTREAD_WITH_ZLIB" in r.stderr:
                deflate_ok = False
                continue
            fail(name, "ls --json exit", r.returncode, r.stderr.decode()[:200])
            continue
        listing = json.loads(r.stdout)
        if listing["format"] != e["format"]:
            fail(name, "format", listing["format"])
        got = listing["tensors"]
        if not HAVE_ZLIB and e["format"] == "torchscript":
            # without zlib, code/ is unreadable: plain tensor attributes are listed too
            want = [t["name"] for t in e["tensors"]]
            kept, k = [], 0
            for t in got:
                if k < len(want) and t["name"] == want[k]:
                    kept.append(t)
                    k += 1
            got = kept
        if [t["name"] for t in got] != [t["name"] for t in e["tensors"]]:
            fail(name, "names differ")
            continue
        for g, x in zip(got, e["tensors"]):
            for key in ("dtype", "shape", "strides", "device"):
                if g[key] != x[key]:
                    fail(name, g["name"], key, g[key], "!=", x[key])
            numel = 1
            for d in x["shape"]:
                numel *= d
            elsize = {"C64": 8, "C128": 16}.get(x["dtype"], SIZES.get(x["dtype"], 0))
            if g["nbytes"] != numel * elsize:
                fail(name, g["name"], "nbytes", g["nbytes"])
        if run("ls", path).returncode != 0 or run("tree", path).returncode != 0:
            fail(name, "ls/tree exit status")
        out = os.path.join(tmp, name + ".safetensors")
        r = run("export", path, out)
        if r.returncode != 0:
            fail(name, "export exit", r.returncode, r.stderr.decode()[:200])
            continue
        st = read_safetensors(out)
        for x in e["tensors"]:
            if x["dtype"] == "C128":  # safetensors has no complex128: named on stderr
                if x["name"].encode() not in r.stderr:
                    fail(name, x["name"], "skipped without a message")
                continue
            if x["name"] not in st:
                fail(name, x["name"], "missing from export")
                continue
            dtype, shape, raw = st[x["name"]]
            if dtype != x["dtype"] or shape != x["shape"] or hashlib.sha256(raw).hexdigest() != x["sha256"]:
                fail(name, x["name"], "exported values differ from torch")

    for name, e in expected["errors"].items():
        r = run("ls", os.path.join(fixtures, name))
        tag = f"[ptread.E{CODES[e['expect']]:03d}]".encode()
        if r.returncode != 1 or tag not in r.stderr:
            fail(name, "exit", r.returncode, "stderr", r.stderr.decode()[:200])
        if os.path.exists(os.path.join(tmp, "x.safetensors")):
            fail(name, "export left a file")
        r = run("export", os.path.join(fixtures, name), os.path.join(tmp, "x.safetensors"))
        if r.returncode != 1 or os.path.exists(os.path.join(tmp, "x.safetensors")):
            fail(name, "export of a broken file must exit 1 and write nothing")

# ls --json lists quantized and sparse entries (names as torch.load gives them) and, for whole
# models and TorchScript, each module with its class; tree starts with the format.
for name in ("quantized.pt", "sparse.pt"):
    r = run("ls", "--json", os.path.join(fixtures, name))
    kind = name[:-3]
    got = [q["name"] for q in json.loads(r.stdout)[kind]] if r.returncode == 0 else None
    if got != [q["name"] for q in expected["files"][name][kind]]:
        fail("ls --json", name, kind, got)
r = run("ls", "--json", os.path.join(fixtures, "legacy_model.pt"))
modules = {m["name"]: m["class"] for m in json.loads(r.stdout)["modules"]} if r.returncode == 0 else {}
if modules.get("") != "fixture_models.Net" or modules.get("conv1") != "torch.nn.modules.conv.Conv2d":
    fail("ls --json legacy_model.pt modules", modules)
if b"fixture_models.Net" not in run("ls", os.path.join(fixtures, "legacy_model.pt")).stdout:
    fail("ls legacy_model.pt shows no module classes")
for name, fmt in [("legacy_model.pt", "legacy"), ("ts_script.pt", "torchscript"), ("tar_sd.pt", "tar"), ("proto2.pt", "zip")]:
    first = run("tree", os.path.join(fixtures, name)).stdout.split(b"\n")[0]
    if first != f"# format: {fmt}".encode():
        fail("tree", name, "first line", first)

# audit: exit 0 when torch.load(weights_only=True) accepts every global, 3 when not, 1 when
# unreadable; --json lists each global with its count.
for name, status, refused in [("proto2.pt", 0, []), ("legacy_model.pt", 3, ["fixture_models.Net"]),
                              ("meta.pt", 3, ["argparse.Namespace"]), ("ts_trace.pt", 0, [])]:
    r = run("audit", "--json", os.path.join(fixtures, name))
    if r.returncode != status:
        fail("audit", name, "exit", r.returncode, "expected", status)
        continue
    report = json.loads(r.stdout)
    got = {g["module"] + "." + g["name"] for g in report["globals"] if g["weights_only"] == "refused"}
    if report["refused"] != len(got) or any(x not in got for x in refused) or (not refused and got):
        fail("audit", name, "refused", sorted(got))
    if run("audit", os.path.join(fixtures, name)).returncode != status:
        fail("audit", name, "table form exit differs")
if run("audit", os.path.join(fixtures, "err_truncated.pt")).returncode != 1:
    fail("audit of an unreadable file must exit 1")

for args, status in [((), 2), (("frobnicate", "x"), 2), (("ls",), 2), (("--help",), 0), (("--version",), 0),
                     (("ls", "--bogus", os.path.join(fixtures, "cuda.pt")), 2),
                     (("ls", os.path.join(fixtures, "no_such_file.pt")), 1)]:
    r = run(*args)
    if r.returncode != status:
        fail("ptread", *args, "exit", r.returncode, "expected", status)

checked = len(expected["files"]) + len(expected["errors"])
print(f"cli: {checked} files checked, {len(failures)} failures"
      f"{'' if deflate_ok else ' (deflate.pt: no zlib in this build)'}")
sys.exit(1 if failures else 0)
