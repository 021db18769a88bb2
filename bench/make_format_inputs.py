#!/usr/bin/env python3
"""Writes the safetensors and sharded-set benchmark inputs with numpy, by the format's spec
(no safetensors package), beside make_inputs.py's .pt files:

  many.safetensors   100,000 float32 tensors of 4 elements (the values of many.pt)
  big.safetensors    1 GiB: 16 float32 tensors of 64 MiB each
  shards4/           big.safetensors' tensors in 4 shards of 256 MiB and
                     model.safetensors.index.json, as transformers writes a set
Usage: make_format_inputs.py OUT_DIR   (existing files are kept)
"""
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ptread-bench"
os.makedirs(out, exist_ok=True)


def write(path, tensors):
    """tensors: [(name, shape, make)] with make() giving the float32 array; streamed."""
    header, at = {}, 0
    for name, shape, _ in tensors:
        n = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, make in tensors:
            f.write(make().astype("<f4").tobytes())
    os.replace(path + ".tmp", path)
    return at


many = os.path.join(out, "many.safetensors")
if not os.path.exists(many):
    write(many, [(f"t{i:06d}", (4,), lambda i=i: np.full(4, float(i))) for i in range(100_000)])
rng = np.random.default_rng(0)
big_tensors = [(f"layer{i}.weight", (4096, 4096), lambda: rng.standard_normal((4096, 4096), dtype=np.float32))
               for i in range(16)]
big = os.path.join(out, "big.safetensors")
if not os.path.exists(big):
    write(big, big_tensors)
shards = os.path.join(out, "shards4")
index = os.path.join(shards, "model.safetensors.index.json")
if not os.path.exists(index):
    os.makedirs(shards, exist_ok=True)
    weight_map, total = {}, 0
    for k in range(4):
        name = f"model-{k + 1:05d}-of-00004.safetensors"
        part = big_tensors[4 * k:4 * k + 4]
        total += write(os.path.join(shards, name), part)
        weight_map.update({t[0]: name for t in part})
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
print(out)
