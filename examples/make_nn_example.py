#!/usr/bin/env python3
"""Writes examples/nn_model.pt: an embedding model as a GPU job saves it, with torch's outputs.

Run with Debian's torch: /usr/bin/python3 examples/make_nn_example.py
model_state_dict holds emb.weight (a [1000, 16] F16 table: trained in mixed precision) and
fc.weight [4, 16], fc.bias [4] (F32). reference holds a batch of ids and what torch computes
for it: F.linear(F.embedding(ids, emb.weight.float()), fc.weight, fc.bias), on the tensors
torch.load gives back. The storages are tagged "cuda:0" (torch.serialization.location_tag is
patched, so the file is byte for byte what torch.save writes from CUDA tensors on a GPU
machine).
"""
import os

import torch
import torch.nn.functional as F
import torch.serialization as ser

torch.manual_seed(0)


class Recommender(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 16)
        self.fc = torch.nn.Linear(16, 4)


model = Recommender()
model.emb.half()
ids = torch.tensor([3, 141, 592, 653, 999, 0, 141])
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_model.pt")
original = ser.location_tag
ser.location_tag = lambda storage: "cuda:0"
try:
    torch.save({"model_state_dict": model.state_dict(), "reference": {"ids": ids}}, path)
finally:
    ser.location_tag = original

# torch's outputs, from what torch.load returns, stored beside the ids.
ck = torch.load(path, map_location="cpu")
sd = ck["model_state_dict"]
out = F.linear(F.embedding(ck["reference"]["ids"], sd["emb.weight"].float()), sd["fc.weight"], sd["fc.bias"])
ck["reference"]["torch_output"] = out
ser.location_tag = lambda storage: "cuda:0"
try:
    torch.save(ck, path)
finally:
    ser.location_tag = original
print(path, out.shape)
