"""torch 1.13's thread count, set where it takes effect (for nn_torch.py and nn_pair.py).

torch.set_num_threads does not reach the BLAS library that Debian's torch calls for
F.linear (BLAS_INFO=generic: libblas.so.3, OpenBLAS's pthread build), which keeps one thread
per core; the count is also set there, through openblas_set_num_threads in every loaded
library that exports it.
"""
import ctypes

import torch


def blas_thread_setters():
    """openblas_set_num_threads of each loaded library that exports it."""
    setters, seen = [], set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if not path.startswith("/") or path in seen or ".so" not in path:
                continue
            seen.add(path)
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            if hasattr(lib, "openblas_set_num_threads"):
                setters.append(lib.openblas_set_num_threads)
    return setters


def thread_setter():
    """set_threads(n) for torch and its BLAS (call after torch has loaded its libraries)."""
    setters = blas_thread_setters()

    def set_threads(n):
        torch.set_num_threads(n)
        for f in setters:
            f(n)

    return set_threads
