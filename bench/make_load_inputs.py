#!/usr/bin/env python3
"""Writes the loader benchmark's checkpoints with real torch (Debian's /usr/bin/python3).

  big2g.pt        2 GiB: 64 float32 tensors of 32 MiB (zip format)
  big2g_legacy.pt the same tensors in the legacy format (_use_new_zipfile_serialization=False),
                  with a "_pad" string entry sized so that the storages start 64-byte aligned
  big2g_legacy_odd.pt  the same, as torch lays it out without the pad: this one's storages
                  start at an odd address (3 mod 4), which no float32 view may use
  many10k.pt      10,000 float32 tensors of 4 elements
  many100k.pt     100,000 float32 tensors of 4 elements
Usage: make_load_inputs.py OUT_DIR   (existing files are kept). Prints OUT_DIR.
"""
import os
import pickle
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ptread-load-bench"
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)


def big():
    return {f"layers.{i}.weight": torch.randn(2048, 4096) for i in range(64)}


path = os.path.join(out, "big2g.pt")
if not os.path.exists(path):
    torch.save(big(), path)


def legacy_data_offset(path):
    """Byte offset of the first storage's data in a legacy file (after its 8-byte count)."""

    class Skim(pickle.Unpickler):
        def persistent_load(self, pid):
            return None

        def find_class(self, module, name):
            return lambda *a, **k: None

    with open(path, "rb") as f:
        for _ in range(5):  # magic, protocol, sys_info, the object, the storage keys
            Skim(f).load()
        return f.tell() + 8


path = os.path.join(out, "big2g_legacy.pt")
if not os.path.exists(path):
    d, pad = big(), 0
    for _ in range(4):  # the storage keys are pointers: the pickle's length moves a little
        d["_pad"] = "x" * pad
        torch.save(d, path, _use_new_zipfile_serialization=False)
        miss = legacy_data_offset(path) % 64
        if miss == 0:
            break
        pad = (pad + 64 - miss) % 64
    else:
        sys.exit("could not align the legacy file's storages")
path = os.path.join(out, "big2g_legacy_odd.pt")
if not os.path.exists(path):
    for _ in range(8):
        torch.save(big(), path, _use_new_zipfile_serialization=False)
        if legacy_data_offset(path) % 4 != 0:
            break
for n, name in ((10_000, "many10k.pt"), (100_000, "many100k.pt")):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        torch.save({f"t{i:06d}": torch.full((4,), float(i)) for i in range(n)}, path)
print(out)
