#!/usr/bin/env python3
"""Writes examples/model.pt: a small training checkpoint as a GPU job saves it.

Run with Debian's torch: /usr/bin/python3 examples/make_example.py
The storages are tagged "cuda:0" (torch.serialization.location_tag is patched, so the file
is byte for byte what torch.save writes from CUDA tensors on a GPU machine).
"""
import argparse
import os

import torch
import torch.serialization as ser

torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
    torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
net(torch.randn(2, 3, 8, 8)).sum().backward()
opt.step()

ckpt = {
    "epoch": 12,
    "arch": "tiny-cnn",
    "args": argparse.Namespace(lr=1e-3, batch_size=64, augment=True),
    "model_state_dict": net.state_dict(),
    "optimizer_state_dict": opt.state_dict(),
    "best_acc": 0.8125,
}
original = ser.location_tag
ser.location_tag = lambda storage: "cuda:0"
try:
    torch.save(ckpt, os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.pt"))
finally:
    ser.location_tag = original
