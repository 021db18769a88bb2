#!/usr/bin/env python3
"""torch.load(path, map_location="cpu") in this process: median time over RUNS, and memory.

Usage: torch_load_mem.py FILE [RUNS]. Prints "key value" lines like load_bench:
  torch.ms, torch.min_ms      median and fastest load (interpreter start and `import torch`
                              outside the timed region: generous to torch)
  torch.anon_mib, torch.file_mib   RssAnon / RssFile growth while the result of the first
                              load is held (/proc/self/status)
  torch.peak_mib              VmHWM growth over the first load (peak reset before it)
"""
import statistics
import sys
import time

import torch


def status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
times = []
for r in range(runs):
    reset_peak()
    anon, fil = status_mib("RssAnon"), status_mib("RssFile")
    t0 = time.perf_counter()
    obj = torch.load(path, map_location="cpu")
    times.append((time.perf_counter() - t0) * 1e3)
    if r == 0:
        print(f"torch.anon_mib {status_mib('RssAnon') - anon:.1f}")
        print(f"torch.file_mib {status_mib('RssFile') - fil:.1f}")
        print(f"torch.peak_mib {status_mib('VmHWM') - anon - fil:.1f}")
    del obj
print(f"torch.ms {statistics.median(times):.3f}")
print(f"torch.min_ms {min(times):.3f}")
