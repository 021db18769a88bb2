// Opening a checkpoint and listing its tensors, in-process: median over runs.
//   open_bench FILE [RUNS] [THREADS]
// Prints "ptread.open FILE median_ms min_ms tensors". mmap mode: the directory and the
// pickle are read; no tensor byte is touched. THREADS is Options::threads (default 1; with
// 2 a zip checkpoint's directory is walked beside its pickle). Every open gets its large buffers fresh from
// the kernel, as the first open of a process does (see main).
#include <ptread/ptread.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: open_bench FILE [RUNS] [THREADS]\n");
    return 2;
  }
  const int runs = argc > 2 ? std::atoi(argv[2]) : 20;
  ptread::Options options;
  options.threads = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 1;
#if defined(__GLIBC__)
  // Without this glibc raises its mmap threshold when the first open frees its tensor list
  // (16.8 MiB for 100,000 tensors) and serves later opens from heap memory already faulted
  // in: those opens would skip the page zeroing that a fresh process pays. (load_bench
  // does the same.)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
#endif
  std::vector<double> ms;
  size_t count = 0;
  uint64_t checksum = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto ck = ptread::Checkpoint::open(argv[1], options);
    if (!ck) {
      std::fprintf(stderr, "%s\n", ck.error().what());
      return 1;
    }
    for (const auto& t : ck->tensors()) checksum += t.name.size() + t.tensor.dim();  // the listing
    count = ck->tensors().size();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("ptread.open %s %.3f %.3f %zu\n", argv[1], ms[ms.size() / 2], ms[0], count);
  return checksum == 0 ? 1 : 0;
}
