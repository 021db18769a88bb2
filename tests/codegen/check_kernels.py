#!/usr/bin/env python3
"""Checks the code the compiler writes for the nn layers' kernels (see kernels.cpp).

Usage: check_kernels.py SOURCE INCLUDE_DIR CXX...   (the compiler command, as many words as it has)
Compiles SOURCE to assembly at -O2 and -O3, twice: with the layers called (case 1), where
- the functions of Embedding::forward's gather and each build of EmbeddingBag's bag kernel
  (generic, and AVX2 and AVX-512 on x86-64) must each contain a prefetch instruction;
- on x86-64, there must be AVX2 and AVX-512 builds of Linear's micro-kernel, and each
  micro<MB, NB, ...> must hold at least MB x NB packed FMA instructions (one per
  accumulator: its loops over the rows of x and of W unrolled; rolled, it holds one or NB);
and the control (case 0), which must contain no prefetch and no micro-kernel. Functions are
told apart by their symbols, demangled with c++filt. Exits 77 (skipped) on targets other
than x86-64 and AArch64, whose prefetch instructions it does not know.
"""
import re
import subprocess
import sys

source, include, cxx = sys.argv[1], sys.argv[2], sys.argv[3:]
machine = subprocess.run([*cxx, "-dumpmachine"], capture_output=True, text=True, check=True).stdout
if machine.startswith("x86_64"):
    prefetch = re.compile(r"^\s*prefetch\w*\s", re.M)
    kernels = ["nn_generic", "nn_avx2", "nn_avx512"]
elif machine.startswith("aarch64"):
    prefetch = re.compile(r"^\s*prfm\s", re.M)
    kernels = ["nn_generic"]
else:
    print("check_kernels: no prefetch pattern for %s; skipped" % machine.strip())
    sys.exit(77)

# Linear's micro-kernels (x86-64 only) and the packed FMAs in them.
MICRO = re.compile(r"ptread::detail::(nn_avx2|nn_avx512)::micro<(\d+), (\d+),")
FMA = re.compile(r"^\s*vfn?madd\d+ps\s", re.M)

# Where prefetches must be, as patterns on demangled function names.
WANTED = [("Embedding gather", re.compile(r"ptread::nn::Embedding::forward_impl"))] + [
    ("EmbeddingBag kernel " + k, re.compile(r"ptread::detail::%s::bag" % k)) for k in kernels]


def functions(asm):
    """{demangled name: body} for the functions the assembly defines."""
    names = set(re.findall(r"^\s*\.type\s+([^,\s]+),\s*[@%]function", asm, re.M))
    bodies, current = {}, None
    for line in asm.splitlines():
        label = re.match(r"^([^\s:]+):", line)  # clang follows a label with a comment
        if label and label.group(1) in names:
            current = label.group(1)
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    mangled = sorted(bodies)
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    if len(demangled) != len(mangled):
        raise SystemExit("check_kernels: c++filt returned %d names for %d" % (len(demangled), len(mangled)))
    return {d: "\n".join(bodies[m]) + "\n" for m, d in zip(mangled, demangled)}


failures = 0
for opt in ("-O2", "-O3"):
    for case in (0, 1):
        cmd = [*cxx, "-std=c++17", opt, "-S", "-o", "-", "-I", include, "-DPTREAD_CODEGEN_CASE=%d" % case, source]
        funcs = functions(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        counts = {name: len(prefetch.findall(body)) for name, body in funcs.items()}
        micro = {name: MICRO.search(name) for name in funcs}
        micro = {name: m for name, m in micro.items() if m}
        if case == 0:
            total = sum(counts.values())
            ok = total == 0 and not micro
            failures += not ok
            print("%s control: %d prefetch instructions, %d micro-kernels (want none) %s" %
                  (opt, total, len(micro), "ok" if ok else "FAILED"))
            continue
        if machine.startswith("x86_64"):
            isas = {m.group(1) for m in micro.values()}
            short = [name for name, m in micro.items()
                     if len(FMA.findall(funcs[name])) < int(m.group(2)) * int(m.group(3))]
            ok = isas == {"nn_avx2", "nn_avx512"} and not short
            failures += not ok
            print("%s Linear micro-kernels (%s): %d of %d with at least MB x NB packed FMAs %s" %
                  (opt, ", ".join(sorted(isas)) or "none", len(micro) - len(short), len(micro),
                   "ok" if ok else "FAILED"))
            for name in sorted(short):
                print("  rolled: %s (%d packed FMAs)" % (name[:110], len(FMA.findall(funcs[name]))))
        for what, pattern in WANTED:
            matched = [name for name in funcs if pattern.search(name)]
            found = sum(counts[name] for name in matched)
            ok = found > 0
            failures += not ok
            print("%s %s: %d prefetch instructions in %d functions (want some) %s" %
                  (opt, what, found, len(matched), "ok" if ok else "FAILED"))
sys.exit(1 if failures else 0)
