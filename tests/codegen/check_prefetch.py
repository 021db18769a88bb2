#!/usr/bin/env python3
"""Checks that the compiler keeps the embedding layers' prefetches (see prefetch.cpp).

Usage: check_prefetch.py SOURCE INCLUDE_DIR CXX...   (the compiler command, as many words as it has)
Compiles SOURCE to assembly at -O2 and -O3 for each case: Embedding::forward (1) and
EmbeddingBag::forward (2) must contain a prefetch instruction, the control (0) none.
Exits 77 (skipped) on targets other than x86-64 and AArch64, whose prefetch instructions it
does not know.
"""
import re
import subprocess
import sys

source, include, cxx = sys.argv[1], sys.argv[2], sys.argv[3:]
machine = subprocess.run([*cxx, "-dumpmachine"], capture_output=True, text=True, check=True).stdout
if machine.startswith("x86_64"):
    pattern = re.compile(r"^\s*prefetch\w*\s", re.M)
elif machine.startswith("aarch64"):
    pattern = re.compile(r"^\s*prfm\s", re.M)
else:
    print("check_prefetch: no prefetch pattern for %s; skipped" % machine.strip())
    sys.exit(77)

failures = 0
for opt in ("-O2", "-O3"):
    for case, want in ((0, False), (1, True), (2, True)):
        cmd = [*cxx, "-std=c++17", opt, "-S", "-o", "-", "-I", include,
               "-DPTREAD_CODEGEN_CASE=%d" % case, source]
        asm = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        found = len(pattern.findall(asm))
        ok = (found > 0) == want
        failures += not ok
        print("%s case %d: %d prefetch instructions (%s) %s" %
              (opt, case, found, "want some" if want else "want none", "ok" if ok else "FAILED"))
sys.exit(1 if failures else 0)
