#!/usr/bin/env python3
"""Writes the nn benchmark checkpoint with real torch (Debian's /usr/bin/python3, torch 1.13).

  OUT/nn_bench.pt (about 2 GiB):
    emb64.weight, emb256.weight    [1,000,000 x 64], [1,000,000 x 256] F32 (gather)
    bag32.weight, bag128.weight    [1,000,000 x 32], [1,000,000 x 128] F32 (EmbeddingBag)
    fc1024.weight/.bias, fc4096.weight/.bias   [N x N] F32 and [N]
    idx        16,384 row indices, uniform over the 1M rows (gather)
    bag_idx    81,920 row indices; bag_offsets: 4,096 bags of 20
Usage: make_nn_inputs.py OUT_DIR   (an existing file is kept)
"""
import os
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ptread-nn-bench"
os.makedirs(out, exist_ok=True)
path = os.path.join(out, "nn_bench.pt")
if not os.path.exists(path):
    g = torch.Generator().manual_seed(0)
    rows = 1_000_000
    sd = {}
    for d in (64, 256):
        sd["emb%d.weight" % d] = torch.randn(rows, d, generator=g)
    for d in (32, 128):
        sd["bag%d.weight" % d] = torch.randn(rows, d, generator=g)
    for n in (1024, 4096):
        sd["fc%d.weight" % n] = torch.randn(n, n, generator=g) / n ** 0.5
        sd["fc%d.bias" % n] = torch.randn(n, generator=g)
    sd["idx"] = torch.randint(0, rows, (16384,), generator=g)
    sd["bag_idx"] = torch.randint(0, rows, (4096 * 20,), generator=g)
    sd["bag_offsets"] = torch.arange(0, 4096 * 20, 20)
    torch.save(sd, path + ".tmp")
    os.replace(path + ".tmp", path)
print(path)
