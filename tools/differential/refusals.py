#!/usr/bin/python3
"""Every refusal of ptread's that claims what torch (or Python, or numpy) does, and the files
on which torch 1.13 was seen refusing the same bytes.

usage: refusals.py --ptread BINARY [--targeted FILE.jsonl ...] [--markdown]

A refusal that says "torch refuses it" is a promise: a file torch reads is never refused. This
finds each such message in the library's source (a string that names torch, Python or numpy
and says it refuses, takes, wants ...), maps it to the fragment of the message ptread prints
(CLAIMS below: a message in the source that no claim covers fails the run, so a new refusal
must be listed here), and looks for evidence:
  - targeted.py --refusals FILE: random files both torch.load and ptread refused, with both
    messages;
  - the adversarial corpus (tests/data/adversarial): the files torch.json says torch refuses,
    which check_torch.py (CTest adversarial_torch) checks against torch; their ptread message
    is read here with BINARY.
Prints a table (code path, what ptread says, torch's message on the same bytes, where) and exits
1 when a claim has no file torch refuses. Python standard library only (torch is asked by
targeted.py and check_torch.py, not here).
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INCLUDE = os.path.join(ROOT, "include", "ptread")
ADVERSARIAL = os.path.join(ROOT, "tests", "data", "adversarial")

# A string literal that claims what torch, Python or numpy does.
CLAIM_RE = re.compile(r'"[^"]*(torch|Python|numpy)[^"]*(refuse|takes|reads |wants|holds none|negates no|rebuilds only|'
                      r'cannot be")')

# (source file under include/ptread, fragment of the message ptread prints[, what torch does,
# the literal that stands in the source where the message is put together]). The fragment is
# what the evidence is matched by. What torch does: "refuses" (the default: torch 1.13 refuses
# the same bytes, which the evidence must show), "torch2" (torch >= 2.1 refuses it, 1.13 reads
# it with other values), "reads_other" (torch reads it with values ptread cannot know to be
# torch's: ptread refuses rather than guess).
CLAIMS = [
    ("containers/zip_checkpoint.hpp", "(torch reads b'little' or b'big', exactly)", "torch2"),
    ("containers/zip_checkpoint.hpp", "torch.jit.load's unpickler, which reads it, refuses it"),
    ("containers/legacy.hpp", "which torch.load reads otherwise by the file object it reads from", "reads_other"),
    ("zip.hpp", "neither torch nor ptread reads it"),
    ("tensor.hpp", "(torch holds none)"),
    ("pickle/vm_base.hpp", "text that is not UTF-8 (Python's unpickler refuses it)"),
    ("pickle/vm_base.hpp", "a global with an empty module or name (Python's unpickler refuses it)"),
    ("pickle/vm_base.hpp", "(Python refuses int literals over 4300 digits)"),
    ("pickle/vm_base.hpp", "(Python's list takes ints)"),
    ("pickle/vm_base.hpp", "called as a class or function (Python's unpickler refuses it)"),
    ("pickle.hpp", "INST names that are not ASCII (Python's unpickler refuses them)"),
    ("torch/persistent_id.hpp", "has an element count that is a"),
    ("torch/persistent_id.hpp", "items in a zip file; torch.load takes 5"),
    ("torch/hooks.hpp", "with 6 items in a zip file; torch.load takes 5"),
    ("torch/sparse_check.hpp", "(torch.load refuses it)"),
    ("torch/build.hpp", "(Python's unpickler refuses it: state is not a dictionary)"),
    ("torch/build.hpp", "(Python's unpickler refuses it: slot state is not a dictionary)"),
    ("torch/build.hpp", "with a slot named by other than a str (Python's setattr() takes a str)"),
    ("torch/build.hpp", "has no attributes to set)"),
    ("torch/build.hpp", "BUILD of the global", "refuses", "the global '"),
    ("torch/build.hpp", "(Python's unpickler refuses it: a builtin class takes no attributes)"),
    ("torch/build.hpp", "BUILD of a tensor with", "refuses", "BUILD of a "),
    ("torch/context.hpp", "NEWOBJ of the function"),
    ("torch/python.hpp", ", not a bool (torch refuses it)"),
    ("torch/python.hpp", "require gradients (torch refuses it)"),
    ("torch/globals/parameter.hpp", "(torch refuses it: it takes an integer)"),
    ("torch/globals/parameter.hpp", "(torch refuses it: the data must be a tensor)"),
    ("torch/globals/quantized.hpp", "or an axis that is not an int (torch refuses them)"),
    ("torch/globals/quantized.hpp", "(torch wants floating point)"),
    ("torch/globals/torch_size.hpp", "torch.Size() of"),
    ("torch/globals/rebuild_tensor.hpp", "arguments in a zip file (torch.load takes 6 or 7)"),
    ("torch/globals/rebuild_tensor.hpp", "(torch negates no such tensor)"),
    ("torch/globals/from_type.hpp", "_rebuild_from_type_v2 of a"),
    ("torch/globals/from_type.hpp", "(torch refuses it in as_subclass)"),
    ("torch/globals/from_type.hpp", "(torch refuses it: as_subclass takes a class)"),
    ("torch/globals/from_type.hpp", "(torch refuses it: as_subclass is a method of tensors)"),
    ("torch/globals/from_type.hpp", "args a tuple (torch refuses anything else)"),
    ("torch/globals/sparse.hpp", "(torch rebuilds only sparse_csr tensors with it)"),
    ("torch/globals/torch_objects.hpp", "(it is no callable: torch.load refuses it)"),
    ("torch/globals/torch_objects.hpp", "NEWOBJ of 'torch."),
    ("torch/globals/numpy.hpp", "(numpy refuses it)"),
    ("torch/globals/numpy.hpp", "(numpy refuses it: initialization string is too small)"),
    ("torch/globals/collections.hpp", "arguments (Python takes at most"),
    ("torch/globals/storage_type.hpp", "torch.load reads it as a StorageType, which cannot be"),
    ("torch/globals/codecs.hpp", "arguments (Python takes 1 to 3)"),
    ("torch/globals/builtins.hpp", "arguments (Python takes at most 3)"),
    ("torch/globals/builtins.hpp", "of a str without an encoding (Python refuses it)"),
    ("torch/globals/builtins.hpp", "with an encoding (Python refuses it)"),
    ("torch/globals/builtins.hpp", "of a negative count (Python refuses it)"),
    ("torch/globals/builtins.hpp", "(Python takes ints)"),
    ("torch/globals/builtins.hpp", "(Python takes 0 to 255)"),
]
# Claims that are no refusal of a file (a check of the caller's arguments).
NOT_FILES = {"nn/embedding.hpp"}


def claims():
    """CLAIMS as (file, fragment, kind, literal)."""
    out = []
    for c in CLAIMS:
        kind = c[2] if len(c) > 2 else "refuses"
        out.append((c[0], c[1], kind, c[3] if len(c) > 3 else c[1]))
    return out


def source_claims():
    """(file, line number, text) of every claiming string literal in the library's headers."""
    out = []
    for d, _, files in os.walk(INCLUDE):
        for f in sorted(files):
            if not f.endswith(".hpp"):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, INCLUDE).replace(os.sep, "/")
            if rel in NOT_FILES:
                continue
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                if line.lstrip().startswith("//"):
                    continue
                if CLAIM_RE.search(line):
                    out.append((rel, n, line.strip()))
    return out


def literal_text(line):
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', line))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptread", required=True)
    ap.add_argument("--targeted", nargs="*", default=[], help="targeted.py --refusals files")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    problems = []

    # 1. Every claim in the source is listed, every listed fragment still stands in its file.
    texts = {}
    for rel, _n, _line in source_claims():
        texts.setdefault(rel, open(os.path.join(INCLUDE, rel), encoding="utf-8").read())
    for rel, n, line in source_claims():
        lit = literal_text(line)
        if not any(c[0] == rel and (c[3] in lit or lit in c[3] or c[3] in texts[rel]) for c in claims()):
            problems.append(f"include/ptread/{rel}:{n}: a claim no entry of CLAIMS covers: {line[:120]}")
    for rel, frag, _kind, lit in claims():
        path = os.path.join(INCLUDE, rel)
        body = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if lit not in body:
            problems.append(f"CLAIMS: '{lit}' stands no longer in include/ptread/{rel}")

    # 2. Evidence: files torch refused where ptread's message has the claim's fragment.
    seen = collections.defaultdict(list)  # fragment -> [(where, torch's message)]
    for path in args.targeted:
        for line in open(path, encoding="utf-8"):
            r = json.loads(line)
            for rel, frag, _kind, _lit in claims():
                if frag in r["ptread"]:
                    seen[frag].append((f"targeted {r['family']} seed {r['seed']} #{r['n']}", r["torch"]))
    torch_json = json.load(open(os.path.join(ADVERSARIAL, "torch.json"), encoding="utf-8"))
    for name, verdict in sorted(torch_json.items()):
        if verdict != "refuses":
            continue
        p = subprocess.run([args.ptread, "ls", os.path.join(ADVERSARIAL, name)], capture_output=True, text=True)
        if p.returncode == 0:
            problems.append(f"adversarial {name}: torch refuses it, ptread reads it")
            continue
        for rel, frag, _kind, _lit in claims():
            if frag in p.stderr:
                seen[frag].append((f"adversarial {name}", "refused (torch.json, check_torch.py)"))

    rows = []
    for rel, frag, kind, _lit in claims():
        ev = seen.get(frag, [])
        torch_msgs = collections.Counter(m for _, m in ev)
        where = collections.Counter(w.split(" #")[0].split(" seed ")[0] if w.startswith("targeted") else "adversarial"
                                    for w, _ in ev)
        note = {"torch2": "torch >= 2.1 refuses it; 1.13 reads it", "reads_other": "torch reads it otherwise",
                "names": "torch reads it; the tensor's name is what fails"}.get(kind, "")
        rows.append((rel, frag, len(ev), ", ".join(f"{k} {v}" for k, v in sorted(where.items())) or note,
                     torch_msgs.most_common(1)[0][0] if torch_msgs else note))
        if not ev and kind == "refuses":
            problems.append(f"no file torch refuses shows: include/ptread/{rel}: '{frag}'")
    if args.markdown:
        print("| code path | ptread says | files torch refused too | torch's message (one) |")
        print("|---|---|---|---|")
        for rel, frag, n, where, msg in rows:
            print(f"| `{rel}` | {frag.replace('|', '/')} | {n}: {where} | {msg[:90].replace('|', '/')} |")
    else:
        for rel, frag, n, where, msg in rows:
            print(f"{n:5}  {rel:34} {frag[:60]:60}  {where}  | {msg[:70]}")
    for p in problems:
        print("PROBLEM", p)
    print(f"refusals: {len(CLAIMS)} claims, {sum(1 for r in rows if r[2])} with a file torch refuses, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
