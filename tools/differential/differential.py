#!/usr/bin/python3
"""ptread's pickle VM against Python's unpickler, on random pickles made worse at random.

usage: differential.py [--seed N] [--count N] [--mode mutate|frames] [--vm BINARY]

Builds pickle_vm.cpp (beside this script) with g++ unless --vm names a built one, makes
--count random pickles (tests/fixtures/gen_random_pickles.py's trees), and then
  mutate  flips, inserts, deletes, cuts and splices a few bytes of each;
  frames  frames each protocol 4 pickle again at random (tests/fixtures/gen_random_pickles.py).
Python's verdict is the unpickling torch.load does of a zip checkpoint's data.pkl
(pickle.Unpickler on a BytesIO: a read crossing a frame's end is read from after the
frame), with globals limited to set, frozenset, bytearray, bytes and _codecs.encode (a
random byte must not import a module). Prints each disagreement and a count of each kind:
  same        both read it, with the same repr (each set's items sorted by their text:
              gen_random_pickles.py's canon(), ptread's canon_repr())
  both_err    both refuse it
  unspelled   both read it, Python's value holds a character ptread's repr printer
              passes through where repr() escapes it (gen_random_pickles.py's spelled())
  DIFF        both read it, other reprs
  WE_REJECT   Python reads it, ptread refuses it
  WE_ACCEPT   Python refuses it, ptread reads it ("global ... refused": a global Python
              was not allowed to import, or a ModuleNotFoundError, one it cannot import
              (__builtin__ after a PROTO of 3 or more), which ptread keeps as an inert object; a
              UnicodeDecodeError of a Python 2 str: ptread reads its bytes, README
              "Formats")
Not part of the test suite (tests/fresh_pickles.sh runs the kinds that agree exactly);
a tool for looking for new disagreements. Standard library only.
"""

import argparse
import io
import os
import pickle
import random
import subprocess
import sys
import tempfile
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import gen_random_pickles as g  # noqa: E402

ALLOWED = {("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "bytes"),
           ("_codecs", "encode")}


class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in ALLOWED or (module == "__builtin__" and ("builtins", name) in ALLOWED):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def python_verdict(data):
    """("OK", canon text or None where it is not spellable) when torch.load's unpickling (a
    BytesIO) reads data, else ("ERR", why)."""
    try:
        value = Restricted(io.BytesIO(data), encoding="utf-8").load()  # torch.load's encoding
        shown = g.canon(value) if g.spellable(value) else None
    except (RecursionError, MemoryError):
        return "SKIP", None
    except Exception as e:  # noqa: BLE001 - any refusal
        return "ERR", f"{type(e).__name__}: {e}"[:150]
    return "OK", shown


def mutated(rng, data):
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if not b:
            break
        i = rng.randrange(len(b))
        k = rng.randrange(6)
        if k == 0:
            b[i] = rng.randrange(256)
        elif k == 1:
            b[i] ^= 1 << rng.randrange(8)
        elif k == 2:
            del b[i]
        elif k == 3:
            b.insert(i, rng.randrange(256))
        elif k == 4:
            b = b[:i]
        else:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randrange(1, 8)]
    return bytes(b)


def build_vm():
    out = os.path.join(tempfile.mkdtemp(prefix="ptread-differential-"), "pickle_vm")
    subprocess.run(["g++", "-std=c++17", "-O1", "-I", os.path.join(ROOT, "include"), os.path.join(HERE, "pickle_vm.cpp"),
                    "-o", out, "-pthread"], check=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--mode", choices=("mutate", "frames"), default="mutate")
    ap.add_argument("--vm", help="a built pickle_vm.cpp")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    inputs = []
    while len(inputs) < args.count:
        obj, _ = g.Maker(rng).value(0)
        if args.mode == "frames":
            inputs.append(g.reframed(rng, g.dumps(obj, 4)))
        else:
            data = g.dumps(obj, rng.randrange(6))
            if len(data) <= 4000:
                inputs.append(mutated(rng, data))
    vm = args.vm or build_vm()
    run = subprocess.run([vm], input=("\n".join(x.hex() for x in inputs) + "\n").encode(), capture_output=True, check=True)
    lines = run.stdout.decode("ascii").splitlines()
    assert len(lines) == len(inputs), (len(lines), len(inputs))
    kinds = Counter()
    for data, line in zip(inputs, lines):
        verdict, shown = python_verdict(data)
        ours, _, rest = line.partition(" ")
        if verdict == "SKIP":
            kinds["skip"] += 1
        elif verdict == "OK" and ours == "OK" and shown is None:
            kinds["unspelled"] += 1
        elif verdict == "OK" and ours == "OK":
            mine = bytes.fromhex(rest).decode("utf-8", "backslashreplace")
            kind = "same" if mine == shown else "DIFF"
            kinds[kind] += 1
            if kind == "DIFF":
                print(f"DIFF {data.hex()}\n  python: {shown[:200]}\n  ptread: {mine[:200]}")
        elif verdict == "ERR" and ours == "ERR":
            kinds["both_err"] += 1
        else:
            kind = "WE_REJECT" if verdict == "OK" else "WE_ACCEPT"
            kinds[kind] += 1
            print(f"{kind} {data.hex()}\n  python: {(shown or '')[:200]}\n  ptread: {line[:200]}")
    print(dict(kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
