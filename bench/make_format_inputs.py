#!/usr/bin/env python3
"""Writes the safetensors and sharded-set benchmark inputs with numpy, by the format's spec
(no safetensors package), beside make_inputs.py's .pt files:

  many.safetensors   100,000 float32 tensors of 4 elements (the values of many.pt)
  big.safetensors    1 GiB: 16 float32 tensors of 64 MiB each
  shards4/           big.safetensors' tensors in 4 shards of 256 MiB and
                     model.safetensors.index.json, as transformers writes a set
  llama4/            a Llama-7B's 291 tensor names (32 layers) in 4 shards, each tensor
                     64 x 64 (an open reads no tensor byte: only the names count)
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


def write_set(folder, tensors, count):
    """tensors in count shards of about equal size, and the index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        return
    os.makedirs(folder, exist_ok=True)
    weight_map, total, per = {}, 0, -(-len(tensors) // count)
    for k in range(count):
        name = f"model-{k + 1:05d}-of-{count:05d}.safetensors"
        part = tensors[per * k:per * (k + 1)]
        total += write(os.path.join(folder, name), part)
        weight_map.update({t[0]: name for t in part})
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


write_set(os.path.join(out, "shards4"), big_tensors, 4)
small = lambda: np.ones((64, 64), dtype=np.float32)
llama = [("model.embed_tokens.weight", (64, 64), small)]
for layer in range(32):
    for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"):
        llama.append((f"model.layers.{layer}.{part}.weight", (64, 64), small))
llama += [("model.norm.weight", (64, 64), small), ("lm_head.weight", (64, 64), small)]
write_set(os.path.join(out, "llama4"), llama, 4)
print(out)
