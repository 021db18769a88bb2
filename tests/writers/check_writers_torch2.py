#!/usr/bin/env python3
"""ptread's writers, read back by torch 2.x (on the GPU machine: Debian's torch 1.13 cannot
read the dtypes only 2.x saves, so tests/writers/check_writers.py leaves them out).

  check_writers_torch2.py PTREAD_BINARY WORK_DIR SOURCE...

Each SOURCE (files torch 2.x wrote: tests/fixtures/torch2/, tests/fixtures/cuda/) is turned
into a state dict by `ptread convert` and loaded with torch.load(out, weights_only=True).
Against torch's own view of the source (torch.load, or torch.jit.load for TorchScript; its
plain tensors named as ptread names them): names in order, dtypes, shapes, values bit for
bit (conj/neg resolved), and for tensors without those bits strides, offsets and which
share a storage. Prints one line a file and exits 1 on any difference.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import gen_torch2  # noqa: E402,F401  (torch 2.x: full torch.load; generate.py names 2.x dtypes)
import generate  # noqa: E402
import torch  # noqa: E402

ptread, work = sys.argv[1:3]
sources = sys.argv[3:]
failures = []


def fail(*what):
    failures.append(" ".join(str(w) for w in what))
    print("FAIL", *what)


def plain_tensors(src):
    if generate.file_format(src) == "torchscript":
        obj = generate.load_torchscript(src)
    else:
        obj = torch.load(src, map_location="cpu", weights_only=False)
    out = []
    for name, t in generate.walk_tensors(obj):
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_nested and not t.is_quantized:
            out.append((name, t))
    return out


os.makedirs(work, exist_ok=True)
for src in sources:
    base = os.path.basename(src)
    out = os.path.join(work, "w_" + base)
    r = subprocess.run([ptread, "convert", src, out], capture_output=True)
    if r.returncode != 0:
        fail(base, "convert exit", r.returncode, r.stderr.decode()[:300])
        continue
    try:
        got = list(torch.load(out, weights_only=True).items())
    except Exception as e:  # noqa: BLE001 - the finding itself
        fail(base, "torch.load(weights_only=True) refuses ptread's file:", type(e).__name__, str(e)[:300])
        continue
    want = plain_tensors(src)
    if [n for n, _ in got] != [n for n, _ in want]:
        fail(base, "names", [n for n, _ in got][:8], "!=", [n for n, _ in want][:8])
        continue
    groups_got, groups_want = {}, {}
    for (name, g), (_, w) in zip(got, want):
        same_values = generate.tensor_sha256(g) == generate.tensor_sha256(w)
        if g.dtype != w.dtype or list(g.shape) != list(w.shape) or not same_values:
            fail(base, name, "dtype/shape/values", g.dtype, list(g.shape), "!=", w.dtype, list(w.shape))
            continue
        if w.is_conj() or w.is_neg():
            continue  # written as its own record with the bit applied
        if list(g.stride()) != list(w.stride()) or g.storage_offset() != w.storage_offset():
            fail(base, name, "strides/offset", list(g.stride()), g.storage_offset(), "!=", list(w.stride()),
                 w.storage_offset())
        if w.numel():
            a = groups_got.setdefault(generate.untyped_storage_of(g).data_ptr(), name)
            b = groups_want.setdefault(generate.untyped_storage_of(w).data_ptr(), name)
            if a != b:
                fail(base, name, "storage sharing: shares with", a, "here, with", b, "in the source")
    print("ok" if not any(f.startswith(base + " ") for f in failures) else "differs", base, len(got), "tensors,",
          sorted({str(t.dtype).replace("torch.", "") for _, t in got}))

print("%d of %d files read back as torch 2.x reads the source (torch %s)" % (
    len(sources) - len({f.split()[0] for f in failures}), len(sources), torch.__version__))
sys.exit(1 if failures else 0)
