#!/usr/bin/env python3
"""The `ptread` tool against the torch-written fixtures (standard library only).

  check_cli.py PTREAD_BINARY FIXTURE_DIR

ls --json must list what torch.load sees (expected.json: names in order, dtype, shape,
strides, device, nbytes); export must write a valid safetensors file whose tensors hash to
torch's values; broken files exit 1 with their error code on stderr; usage errors exit 2;
audit exits 0 or 3 and lists the refused globals; export and convert show a progress line
when stderr is a terminal (a pty here) and the data is large, and nothing otherwise.
(tests/writers/check_writers.py reads what convert writes with torch.)
"""
import hashlib
import json
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile
import zipfile

from ls_table import ls_row

ptread, fixtures = sys.argv[1], sys.argv[2]
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
CODES = {"empty_file": 101, "git_lfs_pointer": 102, "html_page": 103, "safetensors_file": 104,
         "unknown_format": 105, "truncated": 106, "no_data_pkl": 204, "record_missing": 205,
         "legacy_corrupt": 206, "pickle_malformed": 303, "unknown_storage_class": 400, "unknown_dtype": 401,
         "view_out_of_bounds": 403}
failures = []


def nbytes_of(x):
    """numel * element size of a tensor in expected.json."""
    numel = 1
    for d in x["shape"]:
        numel *= d
    return numel * {"C64": 8, "C128": 16}.get(x["dtype"], SIZES.get(x["dtype"], 0))


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
            if g["nbytes"] != nbytes_of(x):
                fail(name, g["name"], "nbytes", g["nbytes"])
        r = run("ls", path)
        if r.returncode != 0 or run("tree", path).returncode != 0:
            fail(name, "ls/tree exit status")
        elif [t["name"] for t in listing["tensors"]] == [t["name"] for t in e["tensors"]] and \
                all(t["name"].isascii() and t["name"].isprintable() and t["name"] for t in got):
            # The table's rows, column by column (the header's offsets), are what torch sees
            # (when the tool lists just torch's tensors: not TorchScript without zlib).
            lines = r.stdout.decode().split("\n")
            for line, x in zip(lines[1:], e["tensors"]):
                want = [x["name"], x["dtype"], "[" + ", ".join(map(str, x["shape"])) + "]", x["device"], str(nbytes_of(x))]
                if ls_row(lines[0], line) != want:
                    fail(name, "ls row", repr(line), "!=", want)
        out = os.path.join(tmp, name + ".safetensors")
        r = run("export", path, out)
        if r.returncode != 0:
            fail(name, "export exit", r.returncode, r.stderr.decode()[:200])
            continue
        st = read_safetensors(out)
        seen = set()
        for x in e["tensors"]:
            if x["name"] in seen:  # a name repeated (dict_keys.pt: two NaN keys): the first is written
                if b"skipped " + x["name"].encode() + b": an earlier tensor has the same name" not in r.stderr:
                    fail(name, x["name"], "repeated name skipped without a message")
                continue
            seen.add(x["name"])
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
        r = run("convert", os.path.join(fixtures, name), os.path.join(tmp, "x.pt"))
        if r.returncode != 1 or tag not in r.stderr or any(f.startswith("x.pt") for f in os.listdir(tmp)):
            fail(name, "convert of a broken file must exit 1 and write nothing")

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
# Storages saved on their own: tree shows each with the dtype and size torch.load gives it.
for name in ("storages.pt", "legacy_storages.pt"):
    lines = run("tree", os.path.join(fixtures, name)).stdout.decode().split("\n")
    for s in expected["files"][name]["scalars"]:
        if s["type"] == "storage":
            want = f"{s['path'][0]}: storage {s['dtype']}[{s['size']}]"
            if want not in lines:
                fail("tree", name, "no line", repr(want))

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

cuda_pt = os.path.join(fixtures, "cuda.pt")
for args, status in [((), 2), (("frobnicate", "x"), 2), (("ls",), 2), (("--help",), 0), (("--version",), 0),
                     (("ls", "--bogus", cuda_pt), 2),
                     (("ls", os.path.join(fixtures, "no_such_file.pt")), 1),
                     (("convert", cuda_pt), 2), (("convert", cuda_pt, "/nonexistent-dir/x.pt", "--dtype", "I8"), 2),
                     (("convert", cuda_pt, "/nonexistent-dir/x.pt", "--dtype"), 2),
                     (("ls", cuda_pt, "--prefix", "x"), 2), (("export", cuda_pt, "x", "--dtype", "F16"), 2),
                     (("convert", cuda_pt, "/nonexistent-dir/x.pt"), 1),
                     (("convert", cuda_pt, "/nonexistent-dir/x.pt", "--prefix", "nothing"), 1)]:
    r = run(*args)
    if r.returncode != status:
        fail("ptread", *args, "exit", r.returncode, "expected", status)


# ---- progress line: on a terminal and from 64 MiB (or PTREAD_PROGRESS_MIN_BYTES) on ----

def run_tty(*args, env=None):
    """Runs ptread with stderr on a pseudo-terminal; returns (exit status, what it wrote there)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([ptread, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                             env=env)
    finally:
        os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child has closed the terminal
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    return p.wait(), err


def big_checkpoint(path, numel):
    """A zip checkpoint {"w": float32 zeros[numel]}, written as torch.save writes it."""
    n = struct.pack("<i", numel)
    pkl = (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storage"
           b"q\x03ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06J" + n +
           b"tq\x07QK\x00J" + n + b"\x85q\x08K\x01\x85q\x09\x89ccollections\nOrderedDict\nq\x0a)Rq\x0btq\x0cRq\x0ds.")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("big/data.pkl", pkl)
        z.writestr("big/data/0", bytes(numel * 4))
        z.writestr("big/version", b"3\n")


def rewrites_line(err):
    """A carriage return that is not the terminal's own "\r\n" for a newline."""
    return re.search(rb"\r(?!\n)", err) is not None


def has_progress(err):
    return rewrites_line(err) and b"MiB/s" in err and b"done" in err


env_default = {k: v for k, v in os.environ.items() if k != "PTREAD_PROGRESS_MIN_BYTES"}
with tempfile.TemporaryDirectory() as tmp:
    big = os.path.join(tmp, "big.pt")
    big_checkpoint(big, (64 << 20) // 4 + 1)  # just over 64 MiB of data
    status, err = run_tty("convert", big, os.path.join(tmp, "big.out.pt"), env=env_default)
    if status != 0 or not has_progress(err):
        fail("convert of 64 MiB with stderr on a terminal: no progress line", status, err[-200:])
    r = subprocess.run([ptread, "convert", big, os.path.join(tmp, "big2.out.pt")], capture_output=True, env=env_default)
    if r.returncode != 0 or r.stderr:
        fail("convert of 64 MiB with stderr piped must be quiet", r.returncode, r.stderr[-200:])
    status, err = run_tty("export", big, os.path.join(tmp, "big.safetensors"), env=env_default)
    if status != 0 or not has_progress(err):
        fail("export of 64 MiB with stderr on a terminal: no progress line", status, err[-200:])
    small = os.path.join(fixtures, "dtypes.pt")
    status, err = run_tty("export", small, os.path.join(tmp, "small.safetensors"), env=env_default)
    if status != 0 or rewrites_line(err):
        fail("export of a small file on a terminal must be quiet", status, err[-200:])
    status, err = run_tty("convert", small, os.path.join(tmp, "small.pt"), env=dict(env_default, PTREAD_PROGRESS_MIN_BYTES="1"))
    if status != 0 or not has_progress(err):
        fail("PTREAD_PROGRESS_MIN_BYTES=1: no progress line for a small file", status, err[-200:])

# The corpus files torch refuses (../shared/corpus/refused, beside the checkout; skipped where
# absent): ls exits 1 with the error code and the reason on stderr, as for any broken file.
corpus = os.environ.get("PTREAD_TEST_CORPUS") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                                   "shared", "corpus")
refused = os.path.join(corpus, "refused")
REFUSED_REASON = {"tar": (205, b"the tar archive has no 'tensors' member"), "other": (105, b"not a PyTorch checkpoint")}
refused_checked = 0
if os.path.exists(os.path.join(refused, "SOURCES.tsv")):
    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(refused, "SOURCES.tsv"), encoding="utf-8")][1:]
    for cols in rows:
        name, container = cols[0], cols[6]
        code, reason = REFUSED_REASON[container]
        r = run("ls", os.path.join(refused, "files", name))
        if r.returncode != 1 or f"[ptread.E{code:03d}]".encode() not in r.stderr or reason not in r.stderr:
            fail("corpus/refused", name, "exit", r.returncode, "stderr", r.stderr.decode()[:200])
        refused_checked += 1
    if refused_checked < 7:
        fail("corpus/refused: expected at least 7 files, found", refused_checked)
else:
    print("cli: no corpus at", corpus, "(refused files not checked)")

checked = len(expected["files"]) + len(expected["errors"]) + refused_checked
print(f"cli: {checked} files checked, {len(failures)} failures"
      f"{'' if deflate_ok else ' (deflate.pt: no zlib in this build)'}")
sys.exit(1 if failures else 0)
