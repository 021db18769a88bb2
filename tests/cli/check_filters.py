#!/usr/bin/env python3
"""`ptread ls/export/convert --only/--exclude` and `ls --sort`, against Python (standard library).

  check_filters.py PTREAD_BINARY FIXTURE_DIR [SEED]

A pattern must keep exactly the names Python's fnmatch.fnmatchcase matches: random patterns
(stars, question marks, sets, ranges, negations, unclosed brackets, backslashes, non-ASCII
characters) against a safetensors file of names made to meet them. --sort name is Python's
sorted() of the names (code point order), --sort size largest first with ties in file order.
export and convert write just the kept tensors; a filter that keeps none exits 1 and writes
nothing; filters on other commands are usage errors (2).
"""
import fnmatch
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

ptread, fixtures = sys.argv[1], sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20261207  # fixed: the same cases every run
rng = random.Random(seed)
failures = []


def fail(*what):
    failures.append(" ".join(str(w) for w in what))
    print("FAIL", *what, f"(seed {seed})")


def run(*args):
    return subprocess.run([ptread, *args], capture_output=True)


def write_safetensors(path, tensors):
    """tensors: [(name, numel)] of U8 zeros, in this order in the header and the data."""
    header, at = {}, 0
    for name, numel in tensors:
        header[name] = {"dtype": "U8", "shape": [numel], "data_offsets": [at, at + numel]}
        at += numel
    h = json.dumps(header, ensure_ascii=False).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(at))


def listed(*args):
    r = run("ls", "--json", *args)
    if r.returncode != 0:
        return None, r
    return [t["name"] for t in json.loads(r.stdout)["tensors"]], r


PIECES = ["a", "b", "c", "x", ".", "_", "0", "1", "9", "-", "é", "ß", "日", "[", "]", "!", "\\", "^", "/", " "]
PATTERN_PIECES = PIECES + ["*", "*", "?", "[a-c]", "[!a]", "[0-9]", "[]]", "[!]x]", "[c-a]", "[a-]", "[-a]", "[é-日]",
                           "[!", "[", "**", "[\\]", "[^a]"]

with tempfile.TemporaryDirectory() as tmp:
    # Names: layer-like ones and random strings of the pieces, each unique.
    names = []
    for layer in range(3):
        for part in ("weight", "bias"):
            names.append(f"encoder.{layer}.{part}")
            names.append(f"decoder.layers.{layer}.attn.{part}")
    while len(names) < 160:
        n = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))
        if n not in names:
            names.append(n)
    sizes = [rng.choice([1, 2, 3, 4, 8]) for _ in names]
    st = os.path.join(tmp, "names.safetensors")
    write_safetensors(st, list(zip(names, sizes)))

    got, r = listed(st)
    if got != names:
        fail("ls --json of the test file", r.returncode, r.stderr[:200])

    patterns = ["*", "", "encoder.*", "*.weight", "*.[0-1].*", "decoder.layers.?.attn.bias", "*[!a-z]*"]
    while len(patterns) < 150:
        patterns.append("".join(rng.choice(PATTERN_PIECES) for _ in range(rng.randint(1, 6))))
    for p in patterns:
        want = [n for n in names if fnmatch.fnmatchcase(n, p)]
        got, r = listed("--only", p, st)
        if got != want:
            fail("--only", repr(p), "gave", got, "want", want, r.stderr[:200])
        want = [n for n in names if not fnmatch.fnmatchcase(n, p)]
        got, r = listed(f"--exclude={p}", st)
        if got != want:
            fail("--exclude", repr(p), "gave", got, "want", want)
    # Repeated: --only is any of them, --exclude none of them, both together.
    for _ in range(30):
        only = [rng.choice(patterns) for _ in range(rng.randint(1, 3))]
        exclude = [rng.choice(patterns) for _ in range(rng.randint(0, 2))]
        want = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in only) and
                not any(fnmatch.fnmatchcase(n, p) for p in exclude)]
        args = [a for p in only for a in ("--only", p)] + [a for p in exclude for a in ("--exclude", p)]
        got, r = listed(*args, st)
        if got != want:
            fail("repeated", args, "gave", got, "want", want)

    # --sort: name (code point order), size (largest first, ties as stored), file.
    got, _ = listed("--sort", "name", st)
    if got != sorted(names):
        fail("--sort name", got[:5])
    got, _ = listed("--sort", "size", st)
    want = [n for _, _, n in sorted((-s, k, n) for k, (n, s) in enumerate(zip(names, sizes)))]
    if got != want:
        fail("--sort size", got[:5], "want", want[:5])
    got, _ = listed("--sort=file", "--only", "encoder.*", st)
    if got != [n for n in names if n.startswith("encoder.")]:
        fail("--sort file with --only", got)
    # The table: the same rows, and the count and bytes of the rows shown.
    r = run("ls", "--sort", "size", "--only", "encoder.*", st)
    rows = r.stdout.decode().split("\n")
    kept = [(n, s) for n, s in zip(names, sizes) if n.startswith("encoder.")]
    kept = [n for _, _, n in sorted((-s, k, n) for k, (n, s) in enumerate(kept))]
    if r.returncode != 0 or [line.split()[0] for line in rows[1:1 + len(kept)]] != kept:
        fail("ls table --sort size --only", r.returncode, rows[:4])
    total = sum(s for n, s in zip(names, sizes) if n.startswith("encoder."))
    if f"{len(kept)} tensors, {total} bytes" not in r.stdout.decode():
        fail("ls table footer", rows[-2:])

    # export and convert write what the filter keeps.
    out = os.path.join(tmp, "out.safetensors")
    r = run("export", "--only", "*.weight", "--exclude", "decoder.*", st, out)
    want = [n for n in names if fnmatch.fnmatchcase(n, "*.weight") and not n.startswith("decoder.")]
    got, _ = listed(out) if r.returncode == 0 else (None, r)
    if got is None or sorted(got) != sorted(want):
        fail("export --only --exclude", r.returncode, got, want, r.stderr[:200])
    pt = os.path.join(tmp, "out.pt")
    r = run("convert", "--only", "*.bias", "--prefix", "encoder", st, pt)
    got, _ = listed(pt) if r.returncode == 0 else (None, r)
    if got is None or sorted(got) != sorted(n for n in names if n.startswith("encoder.") and n.endswith(".bias")):
        fail("convert --only --prefix", r.returncode, got, r.stderr[:200])
    for cmd, target in (("export", os.path.join(tmp, "none.safetensors")), ("convert", os.path.join(tmp, "none.pt"))):
        r = run(cmd, "--only", "no such tensor", st, target)
        if r.returncode != 1 or os.path.exists(target) or b"nothing written" not in r.stderr:
            fail(cmd, "keeping nothing must exit 1 and write nothing", r.returncode, r.stderr[:200])
    r = run("ls", "--only", "no such tensor", st)
    if r.returncode != 0 or b"0 tensors, 0 bytes" not in r.stdout:
        fail("ls keeping nothing lists nothing and exits 0", r.returncode, r.stdout[-100:])

    # Quantized and sparse entries are filtered by name like tensors.
    for name, kind in (("quantized.pt", "quantized"), ("sparse.pt", "sparse")):
        path = os.path.join(fixtures, name)
        r = run("ls", "--json", path)
        all_entries = [q["name"] for q in json.loads(r.stdout)[kind]] if r.returncode == 0 else []
        if not all_entries:
            fail(name, "has no", kind, "entries")
            continue
        first = all_entries[0]
        r = run("ls", "--json", "--only", first, path)
        got = [q["name"] for q in json.loads(r.stdout)[kind]] if r.returncode == 0 else None
        if got != [first]:
            fail(name, "--only", first, "kept", got)
        r = run("ls", "--json", "--exclude", first, path)
        got = [q["name"] for q in json.loads(r.stdout)[kind]] if r.returncode == 0 else None
        if got != all_entries[1:]:
            fail(name, "--exclude", first, "kept", got)

    # Usage errors: exit 2.
    for args in (("tree", "--only", "x", st), ("audit", "--exclude", "x", st), ("ls", "--sort", "bytes", st),
                 ("export", "--sort", "name", st, out), ("ls", "--only")):
        r = run(*args)
        if r.returncode != 2:
            fail("usage", args, "exit", r.returncode)

print(f"cli_filters: {len(patterns)} patterns against fnmatch, {len(failures)} failures (seed {seed})")
sys.exit(1 if failures else 0)
