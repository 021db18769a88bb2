#!/usr/bin/python3
"""ptread's pickle VM against Python's unpickler, on random pickles made worse at random.

usage: differential.py [--seed N] [--count N] [--mode mutate|opcodes|frames] [--vm BINARY]

Builds pickle_vm.cpp (beside this script) with g++ unless --vm names a built one, makes
--count random pickles (tests/fixtures/gen_random_pickles.py's trees), and then
  mutate  flips, inserts, deletes, cuts and splices a few bytes of each;
  opcodes deletes, repeats, swaps or replaces a few of each one's opcodes, or inserts
          opcodes that act on what lies below them (BUILD, SETITEM, APPEND, REDUCE,
          NEWOBJ, POP, DUP, MARK ...): what a byte flip rarely reaches;
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
              UnicodeDecodeError of a Python 2 str: ptread reads its bytes,
              docs/formats.md)
Not part of the test suite (tests/fresh_pickles.sh runs the kinds that agree exactly);
a tool for looking for new disagreements. Standard library only.
"""

import argparse
import io
import os
import pickle
import pickletools
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


# Opcodes (with their operands) that act on the values below them, for mutated_opcodes().
ACTING = [b"b", b"s", b"u", b"a", b"e", b"\x90", b"0", b"1", b"2", b"(", b"R", b"\x81", b"\x92", b"o", b"l", b"d", b"t",
          b"\x85", b"\x86", b"\x87", b"\x8f", b"\x91", b"\x94", b"N", b"}", b"]", b")", b"\x88", b"\x89", b"K\x00",
          b"K\x01", b"X\x01\x00\x00\x00a", b"C\x01a", b"h\x00", b"h\x01", b"q\x00"]


def mutated_opcodes(rng, data):
    """data with a few opcodes deleted, repeated, swapped, replaced or inserted (the STOP
    stays last); data itself where pickletools cannot split it."""
    try:
        starts = [pos for _, _, pos in pickletools.genops(data)] + [len(data)]
    except Exception:  # noqa: BLE001 - a pickle the generator wrote is always valid
        return data
    parts = [data[starts[i]:starts[i + 1]] for i in range(len(starts) - 1)]
    body, stop = parts[:-1], parts[-1]
    if len(body) < 2:
        return data
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(1, len(body))
        k = rng.randrange(6)
        if k == 0 and len(body) > 2:
            del body[i]
        elif k == 1:
            body.insert(i, body[rng.randrange(len(body))])
        elif k == 2 and i + 1 < len(body):
            body[i], body[i + 1] = body[i + 1], body[i]
        elif k == 3:
            body.insert(i, rng.choice(ACTING))
        elif k == 4:
            body[i] = rng.choice(ACTING)
        else:
            body[i:i] = [rng.choice(ACTING), rng.choice(ACTING)]
    return b"".join(body) + stop


def build_vm():
    out = os.path.join(tempfile.mkdtemp(prefix="ptread-differential-"), "pickle_vm")
    subprocess.run(["g++", "-std=c++17", "-O1", "-I", os.path.join(ROOT, "include"), os.path.join(HERE, "pickle_vm.cpp"),
                    "-o", out, "-pthread"], check=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--mode", choices=("mutate", "opcodes", "frames"), default="mutate")
    ap.add_argument("--vm", help="a built pickle_vm.cpp")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    inputs = []
    while len(inputs) < args.count:
        obj, _ = g.Maker(rng).value(0)
        if args.mode == "frames":
            inputs.append(g.reframed(rng, g.dumps(obj, 4)))
        elif args.mode == "opcodes":
            data = g.dumps(obj, rng.randrange(6))
            if len(data) <= 3000:
                inputs.append(mutated_opcodes(rng, data))
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
