#!/usr/bin/env python3
"""ptread's writers, read back by real torch (Debian's /usr/bin/python3, torch 1.13).

  check_writers.py PTREAD_BINARY PTREAD_TESTS_BINARY FIXTURE_DIR WORK_DIR

Sources are written by torch here (seeded) or taken from FIXTURE_DIR: every dtype torch
1.13 can save with special values, views, ties, empty and 0-dim tensors, unicode names,
1500 entries, a whole pickled model saved with CUDA location tags, a legacy-format file,
TorchScript and tar files. Each is turned into a state dict by `ptread convert` (and by
save_pt with every ZIP64 field forced, through the hidden `[.save_zip64]` unit test) and
loaded with torch.load(out, weights_only=True). Against torch's own view of the source:
names in order, dtypes, shapes, strides, offsets, values bit for bit, which tensors share a
storage; data.pkl must equal what torch.save writes for the loaded dict, byte for byte;
Python's zipfile must find every CRC right and every data record 64-byte aligned.
--dtype F16/BF16 must equal torch's .half()/.bfloat16() bit for bit with ties kept;
--prefix/--strip-prefix select and rename; `ptread export` is read back with json and
torch.frombuffer.
"""
import argparse
import collections
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

import numpy as np
import torch

ptread, ptread_tests, fixtures, work = sys.argv[1:5]
failures = []
checked = 0


def fail(*what):
    failures.append(" ".join(str(w) for w in what))
    print("FAIL", *what)


def path(name):
    return os.path.join(work, name)


def run(*args, env=None):
    return subprocess.run([ptread, *args], capture_output=True, env=env)


def convert(src, out, *options):
    if os.path.exists(out):
        os.remove(out)
    r = run("convert", src, out, *options)
    if r.returncode != 0:
        fail("convert", os.path.basename(src), *options, "exit", r.returncode, r.stderr.decode()[:300])
        return None
    return r


def raw_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def flatten(obj, prefix=""):
    """(name, tensor) as ptread names them (DESIGN.md), for the objects used here."""
    out = []
    join = (lambda k: f"{prefix}.{k}") if prefix else str
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, np.ndarray):  # numpy arrays are tensors (in native byte order)
        if obj.dtype.kind in "biufc":  # (strings, dates, records, objects: unsupported entries)
            out.append((prefix, torch.from_numpy(obj.astype(obj.dtype.newbyteorder("="), order="K"))))
    elif isinstance(obj, argparse.Namespace):
        out += flatten(vars(obj), prefix)
    elif isinstance(obj, (torch.nn.Module, torch.jit.ScriptModule)):
        out += [(join(k), v) for k, v in obj.state_dict().items()]
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += flatten(v, join(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += flatten(v, join(i))
    return out


def sharing(tensors):
    """Which tensors share a storage, as a partition of their indices (empty storages aside)."""
    groups = collections.defaultdict(list)
    for i, t in enumerate(tensors):
        s = t.storage()
        if s.nbytes() > 0:
            groups[s.data_ptr()].append(i)
    return sorted(groups.values())


def check_zip_layout(label, out):
    with zipfile.ZipFile(out) as z:
        bad = z.testzip()  # reads every record and checks its CRC-32
        if bad is not None:
            fail(label, "CRC-32 wrong for", bad)
        data = open(out, "rb").read()
        names = z.namelist()
        prefix = names[0].split("/")[0]
        if names[0] != prefix + "/data.pkl" or names[-1] != prefix + "/version" or z.read(names[-1]) != b"3\n":
            fail(label, "records", names[:2], names[-1:])
        if z.read(prefix + "/byteorder") != b"little":
            fail(label, "byteorder record")
        for info in z.infolist():
            if "/data/" in info.filename:
                o = info.header_offset
                start = o + 30 + struct.unpack("<H", data[o + 26:o + 28])[0] + struct.unpack("<H", data[o + 28:o + 30])[0]
                if start % 64:
                    fail(label, info.filename, "data at byte", start, "is not 64-byte aligned")
        return z.read(names[0])


def check_state_dict(label, out, want, convert_to=None):
    """out: the file ptread wrote; want: [(name, tensor)] torch's view of the source."""
    global checked
    checked += 1
    try:
        got = torch.load(out, weights_only=True)
    except Exception as e:  # noqa: BLE001 - report what torch says
        fail(label, "torch.load(weights_only=True) failed:", repr(e)[:300])
        return
    if type(got) is not collections.OrderedDict:
        fail(label, "loads as", type(got))
    if list(got.keys()) != [n for n, _ in want]:
        fail(label, "names", list(got.keys())[:5], "!=", [n for n, _ in want][:5])
        return
    for (name, w), g in zip(want, got.values()):
        expect = w
        if convert_to is not None and w.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            expect = w.to(convert_to)
        if g.dtype != expect.dtype or g.shape != w.shape or g.stride() != w.stride() or \
                g.storage_offset() != w.storage_offset():
            fail(label, name, "dtype/shape/stride/offset", g.dtype, tuple(g.shape), g.stride(), g.storage_offset(),
                 "!=", expect.dtype, tuple(w.shape), w.stride(), w.storage_offset())
            continue
        if g.requires_grad or g.device.type != "cpu":
            fail(label, name, "requires_grad", g.requires_grad, "device", g.device)
        if raw_bytes(g) != raw_bytes(expect):
            fail(label, name, "values differ")
    if sharing(list(got.values())) != sharing([t for _, t in want]):
        fail(label, "storage sharing differs")
    try:
        pickle = check_zip_layout(label, out)
    except (zipfile.BadZipFile, OSError, KeyError) as e:  # a CRC error, a missing record ...
        fail(label, "zip layout:", repr(e)[:200])
        return
    buf = io.BytesIO()
    torch.save(collections.OrderedDict((k, v.detach()) for k, v in got.items()), buf)
    if zipfile.ZipFile(io.BytesIO(buf.getvalue())).read("archive/data.pkl") != pickle:
        fail(label, "data.pkl differs from what torch.save writes for the same dict")


# ---- sources written by torch ----

rng = np.random.Generator(np.random.PCG64(int(os.environ.get("PTREAD_WRITERS_SEED", "7"))))


def randn(*shape, dtype=torch.float32):
    return torch.from_numpy(rng.standard_normal(shape) * 3.0).to(dtype)


def specials(dtype):
    fi = torch.finfo(dtype)
    return [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, fi.tiny * fi.eps, fi.tiny, fi.max, fi.min,
            65504.0, 65520.0, 1e-8, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 3.0e38, -1.5]


def float_tensor(dtype, n=48):
    vals = specials(torch.float64) + list(rng.standard_normal(n) * 1000.0)
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def all_dtypes():
    d = collections.OrderedDict()
    d["bool"] = torch.from_numpy(rng.integers(0, 2, 17).astype(bool))
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        ii = torch.iinfo(dt)
        d[str(dt)[6:]] = torch.tensor([ii.min, ii.max, 0, 1] + [int(x) for x in rng.integers(ii.min, ii.max, 12)], dtype=dt)
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        base = float_tensor(dt).reshape(4, -1)
        name = str(dt)[6:]
        d[name] = base
        d[name + ".t"] = base.t()                  # shares the storage, transposed
        d[name + ".cols"] = base[1:, 2::3]         # offset and strides
        d[name + ".expand"] = base[2:3].expand(5, -1)  # stride 0
    for dt in (torch.complex64, torch.complex128):
        d[str(dt)[6:]] = torch.complex(float_tensor(torch.float64, 8), float_tensor(torch.float64, 8)).to(dt)
    tied = randn(3, 2)
    d["tied.a"] = tied
    d["tied.b"] = tied
    d["scalar"] = torch.tensor(2.5)
    d["scalar_int"] = torch.tensor(-7)
    d["empty"] = torch.empty(0)
    d["empty_2d"] = torch.empty(3, 0, dtype=torch.float16)
    d["ünïcödé.权重.🙂"] = randn(2)
    d[""] = randn(1)
    d["slice_of_big"] = randn(100000)[70000:70002]  # a small view of a large storage
    return d


def many():
    return collections.OrderedDict((f"layer{i}.w", randn(2) if i % 7 else torch.arange(i)) for i in range(1500))


MODELS = '''
import torch
class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 4)
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
        self.head = torch.nn.Linear(4, 11, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("steps", torch.tensor(3))
        self.register_buffer("cache", torch.zeros(2), persistent=False)
'''


def models_module():
    import types
    mod = types.ModuleType("writer_models")
    exec(compile(MODELS, "writer_models.py", "exec"), mod.__dict__)  # noqa: S102 - our own source
    sys.modules["writer_models"] = mod
    return mod


def save_from_cuda(obj, out, **kw):
    """torch.save as a GPU writes it: every storage tagged cuda:0."""
    orig = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(obj, out, **kw)
    finally:
        torch.serialization.location_tag = orig


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
torch.manual_seed(0)

src = path("all_dtypes.pt")
torch.save(all_dtypes(), src)
want = flatten(torch.load(src))
if convert(src, path("all_dtypes.out.pt")):
    check_state_dict("all_dtypes", path("all_dtypes.out.pt"), want)
for flag, dt in (("F16", torch.float16), ("BF16", torch.bfloat16), ("F32", torch.float32)):
    out = path(f"all_dtypes.{flag}.pt")
    if convert(src, out, "--dtype", flag):
        check_state_dict(f"all_dtypes --dtype {flag}", out, want, convert_to=dt)

# save_pt with every ZIP64 field forced (what files of 4 GiB and more need), via ptread_tests
out = path("all_dtypes.zip64.pt")
r = subprocess.run([ptread_tests, "[.save_zip64]"], capture_output=True,
                   env=dict(os.environ, PTREAD_SAVE_SRC=src, PTREAD_SAVE_OUT=out))
if r.returncode != 0 or not os.path.exists(out):
    fail("save_zip64 test program exit", r.returncode, r.stdout.decode()[-500:])
else:
    check_state_dict("all_dtypes zip64", out, want)
    with zipfile.ZipFile(out) as z:
        data = open(out, "rb").read()
        for info in z.infolist():
            o = info.header_offset
            if struct.unpack("<I", data[o + 22:o + 26])[0] != 0xFFFFFFFF:
                fail("zip64", info.filename, "local header has no ZIP64 sizes")
    if b"PK\x06\x06" not in data[-200:] or struct.unpack("<I", data[-6:-2])[0] != 0xFFFFFFFF:
        fail("zip64 end records")

src = path("many.pt")
torch.save(many(), src)
if convert(src, path("many.out.pt")):
    check_state_dict("1500 entries", path("many.out.pt"), flatten(torch.load(src)))

# a whole pickled model saved from CUDA: a plain CPU state dict comes out
models = models_module()
model = models.TiedLM()
src = path("cuda_model.pt")
save_from_cuda(model, src)
try:
    torch.load(src, weights_only=True)
    fail("cuda_model.pt: torch.load(weights_only=True) of the source should refuse the model class")
except Exception:  # noqa: BLE001 - expected: the unpickler refuses writer_models.TiedLM
    pass
loaded = torch.load(src, map_location="cpu")
if convert(src, path("cuda_model.out.pt")):
    want = list(loaded.state_dict().items())
    check_state_dict("whole model from cuda", path("cuda_model.out.pt"), want)
    got = torch.load(path("cuda_model.out.pt"), weights_only=True)
    if "cache" in got or got["head.weight"].data_ptr() != got["emb.weight"].data_ptr():
        fail("whole model: non-persistent buffer written or tied weights untied")
    fresh = models.TiedLM()
    fresh.load_state_dict(got)
    if not all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), loaded.state_dict().values())):
        fail("whole model: load_state_dict of the converted file gives other values")
# --dtype keeps ties; ints untouched
if convert(src, path("cuda_model.bf16.pt"), "--dtype", "BF16"):
    check_state_dict("whole model --dtype BF16", path("cuda_model.bf16.pt"), list(loaded.state_dict().items()),
                     convert_to=torch.bfloat16)

# legacy format (torch <= 1.5 and _use_new_zipfile_serialization=False), from CUDA
src = path("legacy.pt")
legacy = all_dtypes()
save_from_cuda(legacy, src, _use_new_zipfile_serialization=False)
if convert(src, path("legacy.out.pt")):
    check_state_dict("legacy from cuda", path("legacy.out.pt"), flatten(torch.load(src, map_location="cpu")))

# fixtures: a training checkpoint (prefix, strip-prefix), TorchScript, tar, views, legacy model
src = os.path.join(fixtures, "train.pt")
train = torch.load(src)
if convert(src, path("train.out.pt")):
    check_state_dict("train.pt", path("train.out.pt"), flatten(train))
out = path("train.model.pt")
if convert(src, out, "--prefix", "model_state_dict", "--strip-prefix", "model_state_dict"):
    check_state_dict("train.pt --prefix --strip-prefix", out, flatten(train["model_state_dict"]))
out = path("train.prefix.pt")
if convert(src, out, "--prefix", "model_state_dict"):
    check_state_dict("train.pt --prefix", out, flatten(train["model_state_dict"], "model_state_dict"))
out = path("train.strip.pt")
if convert(src, out, "--strip-prefix", "optimizer_state_dict"):
    want = [(n[len("optimizer_state_dict."):] if n.startswith("optimizer_state_dict.") else n, t) for n, t in flatten(train)]
    check_state_dict("train.pt --strip-prefix", out, want)
sys.path.insert(0, fixtures)
import generate  # noqa: E402 - the fixtures' model classes (fixture_models), for torch.load

generate.fixture_models()
for name in ("views.pt", "legacy_views.pt", "legacy_model.pt", "model_zip.pt", "lstm.pt", "tar_sd.pt", "tar_model.pt",
             "cuda.pt", "meta.pt"):
    src = os.path.join(fixtures, name)
    if convert(src, path(name + ".out.pt")):
        check_state_dict(name, path(name + ".out.pt"), flatten(torch.load(src, map_location="cpu")))
src = os.path.join(fixtures, "ts_script.pt")
if convert(src, path("ts_script.out.pt")):
    check_state_dict("ts_script.pt", path("ts_script.out.pt"), list(torch.jit.load(src).state_dict().items()))

# a name collision after --strip-prefix is an error and writes nothing
src = path("collide.pt")
torch.save({"a.x": randn(1), "x": randn(1)}, src)
r = run("convert", src, path("collide.out.pt"), "--strip-prefix", "a")
if r.returncode != 1 or os.path.exists(path("collide.out.pt")) or b"a.x" not in r.stderr:
    fail("collision after --strip-prefix: exit", r.returncode, r.stderr.decode()[:200])

# ---- safetensors: ptread export read back with json + torch.frombuffer ----
ST_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
             "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
             "F64": torch.float64, "C64": torch.complex64}
src = path("all_dtypes.pt")
out = path("all_dtypes.safetensors")
r = run("export", src, out)
if r.returncode != 0:
    fail("export exit", r.returncode, r.stderr.decode()[:300])
else:
    checked += 1
    data = open(out, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    if header.pop("__metadata__", None) != {"format": "pt"}:
        fail("safetensors __metadata__")
    body = data[8 + n:]
    for name, t in flatten(torch.load(src)):
        if t.dtype == torch.complex128:
            if name.encode() not in r.stderr:
                fail("safetensors", name, "C128 skipped without a message")
            continue
        e = header.get(name)
        if e is None:
            fail("safetensors", name, "missing")
            continue
        b, end = e["data_offsets"]
        dt = ST_DTYPES[e["dtype"]]
        got = torch.frombuffer(bytearray(body[b:end]), dtype=dt) if end > b else torch.empty(0, dtype=dt)
        got = got.reshape(e["shape"])
        if dt != t.dtype or list(got.shape) != list(t.shape) or raw_bytes(got) != raw_bytes(t):
            fail("safetensors", name, "differs from torch.load of the source")

# ---- sharded sets: convert/export --max-shard-size, in transformers' layout ----
# convert: every shard read by torch.load(weights_only=True), together the source, every name
# in the index once, in the shard it names; tied tensors in one shard, still tied.
src = path("sharded_src.pt")
emb = randn(16, 8)
sd = collections.OrderedDict([("emb.weight", emb), ("a.weight", randn(8, 8)), ("a.bias", randn(8).half()),
                              ("b.weight", randn(32, 8)), ("b.ids", torch.arange(5)), ("head.weight", emb)])
torch.save(sd, src)
for tool, stem, ext, size in (("convert", "pytorch_model", ".bin", "600B"), ("export", "model", ".safetensors", "1KB")):
    out = path(f"sharded_{tool}")
    shutil.rmtree(out, ignore_errors=True)
    r = run(tool, src, out, "--max-shard-size", size)
    if r.returncode != 0:
        fail(tool, "--max-shard-size exit", r.returncode, r.stderr.decode()[:300])
        continue
    checked += 1
    index = json.load(open(os.path.join(out, f"{stem}{ext}.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 3 or shards[0] != f"{stem}-00001-of-{len(shards):05d}{ext}":
        fail(tool, "shard names", shards)
    got = {}
    for shard in shards:
        f = os.path.join(out, shard)
        if ext == ".bin":
            part = torch.load(f, weights_only=True)
        else:
            data = open(f, "rb").read()
            n = struct.unpack("<Q", data[:8])[0]
            header = json.loads(data[8:8 + n])
            header.pop("__metadata__", None)
            part = {k: torch.frombuffer(bytearray(data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]),
                                        dtype=ST_DTYPES[e["dtype"]]).reshape(e["shape"]) for k, e in header.items()}
        if os.path.getsize(f) > 4096 and len(part) > 1:
            fail(tool, shard, "is over the shard size with more than one tensor")
        for k, v in part.items():
            if index["weight_map"].get(k) != shard or k in got:
                fail(tool, k, "in", shard, "but the index says", index["weight_map"].get(k))
            got[k] = v
    if sorted(got) != sorted(sd) or index["metadata"]["total_size"] != sum(t.numel() * t.element_size() for t in sd.values()):
        fail(tool, "names or total_size", sorted(got), index["metadata"])
    for k, t in sd.items():
        if k in got and (got[k].dtype != t.dtype or raw_bytes(got[k]) != raw_bytes(t)):
            fail(tool, k, "differs from the source")
    if ext == ".bin" and index["weight_map"]["emb.weight"] != index["weight_map"]["head.weight"]:
        fail(tool, "tied tensors split across shards")

print(f"writers: {checked} files read back by torch {torch.__version__}, {len(failures)} failures")
sys.exit(1 if failures else 0)
