#!/usr/bin/env python3
"""Writes the benchmark checkpoints with real torch (Debian's /usr/bin/python3, torch 1.13).

  big.pt   1 GiB: 16 float32 tensors of 64 MiB each
  many.pt  100,000 float32 tensors of 4 elements
Usage: make_inputs.py OUT_DIR   (existing files are kept)
"""
import os
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ptread-bench"
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)

big = os.path.join(out, "big.pt")
if not os.path.exists(big):
    torch.save({f"layer{i}.weight": torch.randn(4096, 4096) for i in range(16)}, big)
many = os.path.join(out, "many.pt")
if not os.path.exists(many):
    torch.save({f"t{i:06d}": torch.full((4,), float(i)) for i in range(100_000)}, many)
print(out)
