#!/usr/bin/env python3
"""Writes the inputs of bench/run_cuda.sh (any torch; no GPU needed).

usage: make_cuda_inputs.py DIR [GIB]
  DIR/upload.pt   GIB GiB (default 4) of tensors, half F32 and half BF16, 64 MiB to 256 MiB
                  each, as a large model's state dict holds them
  DIR/linear.pt   fc_f32 and fc_bf16: weight [4096, 4096] and bias [4096]
Existing files of the right size are kept. Prints the two paths.
"""
import os
import sys

import torch


def main():
    out = sys.argv[1]
    gib = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    os.makedirs(out, exist_ok=True)
    upload, linear = os.path.join(out, "upload.pt"), os.path.join(out, "linear.pt")
    g = torch.Generator().manual_seed(0)
    want = int(gib * (1 << 30))
    if not os.path.exists(upload) or abs(os.path.getsize(upload) - want) > (64 << 20):
        sd, total, k = {}, 0, 0
        while total < want:
            rows = (4096, 8192, 16384)[k % 3]  # 64, 128, 256 MiB in F32
            dt = torch.float32 if k % 2 == 0 else torch.bfloat16
            t = torch.empty(rows, 4096, dtype=dt)
            t.uniform_(-1, 1, generator=g)
            sd["layers.%d.weight" % k] = t
            total += t.numel() * t.element_size()
            k += 1
        torch.save(sd, upload)
    if not os.path.exists(linear):
        sd = {}
        for dt, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            sd["fc_%s.weight" % dt] = (torch.randn(4096, 4096, generator=g) / 64).to(dtype)
            sd["fc_%s.bias" % dt] = torch.randn(4096, generator=g).to(dtype)
        torch.save(sd, linear)
    print(upload)
    print(linear)


if __name__ == "__main__":
    main()
