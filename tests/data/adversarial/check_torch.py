#!/usr/bin/python3
"""Checks torch.json against torch.load: each file listed there must be read, or refused,
by torch.load(path, map_location="cpu") as it says. The adversarial files whose
expectations follow torch (read where torch reads, refused where torch refuses) are
listed there by make.py; this keeps those expectations true to torch.

usage: check_torch.py   (needs torch; CTest/Meson test adversarial_torch)
"""

import json
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    with open(os.path.join(HERE, "torch.json")) as f:
        claims = json.load(f)
    bad = 0
    for name, claim in sorted(claims.items()):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.load(os.path.join(HERE, name), map_location="cpu")
            got, why = "reads", ""
        except Exception as e:  # noqa: BLE001 - any refusal
            got, why = "refuses", f" ({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''})"
        ok = got == claim
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: torch.load {got}{why}; torch.json says it {claim}")
    print(f"{len(claims) - bad} of {len(claims)} as torch.json says")
    return 1 if bad or not claims else 0


if __name__ == "__main__":
    sys.exit(main())
