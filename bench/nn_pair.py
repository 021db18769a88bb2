#!/usr/bin/env python3
"""torch and ptread in one process, call by call: the nn layers' ratios on a noisy machine.

Usage: nn_pair.py LIB FILE [PAIRS] [--only PREFIX] [--gap MS] [--isa generic|avx2|avx512] [--spin US]
                  [--mode mmap|read] [--cold]
  LIB   the nn_pair module (BUILD/bench/libnn_pair.so, from bench/nn_pair.cpp)
  FILE  the checkpoint bench/make_nn_inputs.py writes
  PAIRS calls of each side per case (default 101)
  --mode ptread's load mode (default mmap: the tables are read from the mapped file; read:
        from buffers ptread reads them into, advised for 2 MiB pages)
  --cold the file's pages dropped from the page cache first (posix_fadvise DONTNEED), so that
        ptread's mapping reads the tables from the disk as a process serving a checkpoint
        that is not cached does (the layers ask for 2 MiB pages before the tables are read).
        Without it the pages are those the file's writer left in the cache (a file just
        written by torch.save: mostly 4 KiB pages), which no reader can change.
        Printed before the cases: how much of each table is mapped with 2 MiB pages, for
        ptread and for torch (/proc/self/smaps: the mappings the table lies in; a mapping
        can hold more than the table, as the file's whole mapping does where no table was
        advised).
  --isa ptread's kernel level (default: the best the CPU has; never above it), to measure
        a lower level's kernels on a machine that has a higher one
  --spin how long ptread's workers poll for the next call after one (nn::set_spin_wait);
        default 0 while OMP_WAIT_POLICY is PASSIVE (as torch's threads then sleep at once,
        ptread's do too: a worker polling after ptread's call takes the CPU torch's next
        call needs, as torch's did ptread's), else ptread's own default (500 us)

run_nn.sh times ptread and torch in separate processes, group by group; on a shared or
virtual machine a process can land in a slow minute and the other in a fast one (the same
call was measured 3x apart in processes seconds apart). Here torch.load and ptread open the
same file in this process, and each case calls the two in turns: a pair is one call of each
(which goes first alternates from pair to pair), with GAP ms of sleep before every call
(default 0: back to back). OMP_WAIT_POLICY is PASSIVE unless set: torch's OpenMP threads
otherwise spin for milliseconds after each call, on the core that ptread's next two-thread
call needs (emb.d64.t2 measured 0.69x torch so, 1.36x with PASSIVE; torch's own two-thread
calls were faster with it too); PASSIVE makes them sleep between calls, as ptread's do.
OPENBLAS_THREAD_TIMEOUT is 4 unless set, for the same reason: torch's F.linear runs on
OpenBLAS's own threads (libblas.so.3), which spin for 2^28 cycles (about 0.1 s) after each
call unless told otherwise; 4 makes them sleep after 2^4. With the spin, ptread's
two-thread Linear 1024, M = 64 took 1.83-2.36 ms beside torch's 0.99-1.41; without, 1.11-1.16
beside 1.17-1.21 (torch's own calls no slower). Printed per case: each
side's median ms, the ratio of the medians (torch / ptread: above 1, ptread is faster), and
the median and quartiles of the per-pair ratios. ptread's outputs are compared with
torch's first: equal for gathers and max, within float rounding for sums, means and Linear.
"""
import ctypes
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads libgomp (see above)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # before torch loads OpenBLAS (see above)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_threads import thread_setter  # noqa: E402

args = sys.argv[1:]


def option(name, default):
    """The value after `name` in args (both taken out of args), or default."""
    if name not in args:
        return default
    k = args.index(name)
    value = args[k + 1]
    del args[k:k + 2]
    return value


ISAS = ("generic", "avx2", "avx512")
only = option("--only", "")
gap_ms = float(option("--gap", 0.0))
isa = option("--isa", None)
isa = None if isa is None else ISAS.index(isa)
spin = option("--spin", None)
load_mode = option("--mode", "mmap")
if load_mode not in ("mmap", "read"):
    sys.exit("nn_pair: --mode is mmap or read")
cold = "--cold" in args
if cold:
    args.remove("--cold")
lib_path, path = args[0], args[1]
pairs = int(args[2]) if len(args) > 2 else 101

lib = ctypes.CDLL(lib_path)
P, S, I, U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
lib.ptread_pair_open.restype = P
lib.ptread_pair_open.argtypes = [ctypes.c_char_p, I]
lib.ptread_pair_data.restype = P
lib.ptread_pair_data.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(S)]
lib.ptread_pair_touch.restype = U
lib.ptread_pair_touch.argtypes = [P, ctypes.c_char_p]
lib.ptread_pair_huge.argtypes = [P]
lib.ptread_pair_kernels.restype = ctypes.c_char_p
lib.ptread_pair_set_isa.argtypes = [ctypes.c_int]
if isa is not None:
    lib.ptread_pair_set_isa(isa)
lib.ptread_pair_set_spin.argtypes = [ctypes.c_uint]
lib.ptread_pair_spin.restype = ctypes.c_uint
if spin is not None or os.environ["OMP_WAIT_POLICY"].upper() == "PASSIVE":
    lib.ptread_pair_set_spin(int(spin or 0))
for f, extra in (("embedding", []), ("bag", [I]), ("linear", [])):
    getattr(lib, "ptread_pair_" + f).restype = P
    getattr(lib, "ptread_pair_" + f).argtypes = [P, ctypes.c_char_p] + extra + [U]
lib.ptread_pair_embedding_forward.argtypes = [P, P, S, P]
lib.ptread_pair_bag_forward.argtypes = [P, P, S, P, S, P]
lib.ptread_pair_linear_forward.argtypes = [P, P, S, P]
lib.ptread_pair_free.argtypes = [P]
lib.ptread_pair_close.argtypes = [P]


def check(rc):
    if rc != 0:
        sys.exit("nn_pair: a ptread call failed (message above)")


def quartiles(v):
    v = sorted(v)
    return v[len(v) // 4], statistics.median(v), v[(3 * len(v)) // 4]


def case(name, torch_fn, ptread_fn, ptread_out, exact):
    """Checks ptread's output against torch's, then times the two in turns."""
    if not name.startswith(only):
        return
    want = torch_fn()
    check(ptread_fn())
    if exact:
        ok = torch.equal(want, ptread_out)
    else:
        ok = torch.allclose(want, ptread_out, rtol=1e-4, atol=1e-5)
    if not ok:
        sys.exit("nn_pair: %s: ptread's output differs from torch's (max |diff| %g)" %
                 (name, (want - ptread_out).abs().max().item()))
    tt, tp = [], []
    for k in range(pairs):
        for side in ((0, 1) if k % 2 == 0 else (1, 0)):
            if gap_ms > 0:
                time.sleep(gap_ms / 1e3)
            t0 = time.perf_counter()
            if side == 0:
                torch_fn()
            else:
                check(ptread_fn())
            ms = (time.perf_counter() - t0) * 1e3
            (tt if side == 0 else tp).append(ms)
    mt, mp = statistics.median(tt), statistics.median(tp)
    q1, q2, q3 = quartiles([a / b for a, b in zip(tt, tp)])
    print("%-26s %9.3f %9.3f %8.2fx %8.2fx  [%.2f, %.2f]" % (name, mp, mt, mt / mp, q2, q1, q3), flush=True)


def huge_pages(address, nbytes):
    """The mappings overlapping [address, address + nbytes) (/proc/self/smaps): their size,
    resident and 2 MiB-paged KiB, summed."""
    size = rss = huge = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo < address + nbytes and address < hi
                if inside:
                    size += (hi - lo) // 1024
            elif inside and head in ("Rss:", "AnonHugePages:", "FilePmdMapped:"):
                kb = int(line.split()[1])
                if head == "Rss:":
                    rss += kb
                else:
                    huge += kb
    return size, rss, huge


torch.set_grad_enabled(False)
TABLES = ("emb64", "emb256", "bag32", "bag128")
if cold:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
ck = lib.ptread_pair_open(path.encode(), 1 if load_mode == "read" else 0)
if not ck:
    sys.exit("nn_pair: cannot open %s" % path)
# Each table's layer made (mmap mode: it asks for 2 MiB pages) and its pages faulted in by
# ptread, before torch reads the file.
advised = {}
for name in TABLES:
    e = lib.ptread_pair_embedding(ck, name.encode(), 1)
    if not e:
        sys.exit("nn_pair: cannot make a layer (message above)")
    advised[name] = lib.ptread_pair_huge(e)
    lib.ptread_pair_touch(ck, (name + ".weight").encode())
    lib.ptread_pair_free(e)
sd = torch.load(path, map_location="cpu")
set_threads = thread_setter()
print("ptread: %s mode%s; the tables' pages (/proc/self/smaps: the mappings the table lies in, "
      "MiB; 2M: mapped with 2 MiB pages):" % (load_mode, ", the file dropped from the page cache first" if cold else ""))
for name in TABLES:
    nbytes = S(0)
    addr = lib.ptread_pair_data(ck, (name + ".weight").encode(), ctypes.byref(nbytes))
    p = huge_pages(addr, nbytes.value)
    t = huge_pages(sd[name + ".weight"].data_ptr(), nbytes.value)
    print("  %-7s %4d MiB  ptread: advised %-3s mapping %5d, resident %5d, 2M %5d   "
          "torch: mapping %5d, resident %5d, 2M %5d" % (
              name, nbytes.value >> 20, "yes" if advised[name] else "no",
              p[0] >> 10, p[1] >> 10, p[2] >> 10, t[0] >> 10, t[1] >> 10, t[2] >> 10))
print("kernels: %s; %d pairs a case, %.1f ms of sleep before each call; OMP_WAIT_POLICY=%s, "
      "OPENBLAS_THREAD_TIMEOUT=%s, ptread's workers poll %d us" % (
          lib.ptread_pair_kernels().decode(), pairs, gap_ms, os.environ["OMP_WAIT_POLICY"],
          os.environ["OPENBLAS_THREAD_TIMEOUT"], lib.ptread_pair_spin()))
print("%-26s %9s %9s %9s %9s  %s" % ("case", "ptread", "torch", "x(med)", "x(pairs)", "[quartiles of the pair ratios]"))


def layer(ptr):
    if not ptr:
        sys.exit("nn_pair: cannot make a layer (message above)")
    return ptr


def ptr(t):
    return ctypes.c_void_p(t.data_ptr())


idx = sd["idx"]
bidx, boffs = sd["bag_idx"], sd["bag_offsets"]
for threads in (1, 2):
    set_threads(threads)
    t = "t%d" % threads
    for d in (64, 256):
        w = sd["emb%d.weight" % d]
        out = torch.empty(idx.numel(), d)
        emb = layer(lib.ptread_pair_embedding(ck, b"emb%d" % d, threads))
        # torch's faster form: index_select into a ready buffer (F.embedding allocates its output)
        tout = torch.empty(idx.numel(), d)
        case("emb.d%d.%s" % (d, t), lambda: torch.index_select(w, 0, idx, out=tout),
             lambda: lib.ptread_pair_embedding_forward(emb, ptr(idx), idx.numel(), ptr(out)), out, True)
        lib.ptread_pair_free(emb)
    for d in (32, 128):
        w = sd["bag%d.weight" % d]
        for mi, mode in enumerate(("sum", "mean", "max")):
            out = torch.empty(boffs.numel(), d)
            bag = layer(lib.ptread_pair_bag(ck, b"bag%d" % d, mi, threads))
            case("bag.d%d.%s.%s" % (d, mode, t), lambda: F.embedding_bag(bidx, w, boffs, mode=mode),
                 lambda: lib.ptread_pair_bag_forward(bag, ptr(bidx), bidx.numel(), ptr(boffs), boffs.numel(), ptr(out)),
                 out, mode == "max")
            lib.ptread_pair_free(bag)
    for n in (1024, 4096):
        w, b = sd["fc%d.weight" % n], sd["fc%d.bias" % n]
        fc = layer(lib.ptread_pair_linear(ck, b"fc%d" % n, threads))
        for m in (1, 8, 64):
            x = torch.randn(m, n)
            y = torch.empty(m, n)
            case("linear.%d.m%d.%s" % (n, m, t), lambda: F.linear(x, w, b),
                 lambda: lib.ptread_pair_linear_forward(fc, ptr(x), m, ptr(y)), y, False)
        lib.ptread_pair_free(fc)
lib.ptread_pair_close(ck)
