// Opening a checkpoint and listing its tensors, in-process: median over runs.
//   open_bench FILE [RUNS] [THREADS]
// Prints "ptread.open FILE median_ms min_ms tensors". mmap mode: the directory and the
// pickle are read; no tensor byte is touched. THREADS is Options::threads (default 1; with
// 2 a zip checkpoint's directory is walked beside its pickle). Every open gets its large buffers fresh from
// the kernel, as the first open of a process does (see main).
//   open_bench --set SET [RUNS]
// A sharded set against its shards, side by side: each run opens the set, then each of its
// shards alone. Prints "ptread.set SET median_set_ms median_sum_ms ratio shards": the
// medians of the set's opens and of each run's sum of shard opens. (Opens of 0.1 ms drift by
// a third between processes: only runs interleaved in one process compare them.)
#include <ptread/ptread.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

uint64_t checksum = 0;

// Opens and lists path: its ms, or a negative number on an error (printed).
double open_and_list(const std::string& path, const ptread::Options& options, size_t* count) {
  auto t0 = Clock::now();
  auto ck = ptread::Checkpoint::open(path, options);
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return -1;
  }
  for (const auto& t : ck->tensors()) checksum += t.name.size() + t.tensor.dim();  // the listing
  *count = ck->tensors().size();
  auto t1 = Clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int bench_set(const std::string& set, int runs, const ptread::Options& options) {
  std::vector<std::string> shards;
  {
    auto ck = ptread::Checkpoint::open(set, options);
    if (!ck) {
      std::fprintf(stderr, "%s\n", ck.error().what());
      return 1;
    }
    const size_t slash = ck->path().find_last_of('/');
    const std::string folder = slash == std::string::npos ? std::string() : ck->path().substr(0, slash + 1);
    for (const auto& f : ck->shards()) shards.push_back(folder + f);
  }
  std::vector<double> set_ms, sum_ms;
  size_t count = 0, shard_count = 0;
  for (int r = 0; r < runs; ++r) {
    const double s = open_and_list(set, options, &count);
    double sum = 0;
    for (const auto& f : shards) {
      const double ms = open_and_list(f, options, &shard_count);
      if (ms < 0) return 1;
      sum += ms;
    }
    if (s < 0) return 1;
    set_ms.push_back(s);
    sum_ms.push_back(sum);
  }
  const double a = median(set_ms), b = median(sum_ms);
  std::printf("ptread.set %s %.3f %.3f %.2f %zu\n", set.c_str(), a, b, a / b, shards.size());
  return checksum == 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) == "--set" && argc < 3)) {
    std::fprintf(stderr, "usage: open_bench FILE [RUNS] [THREADS]\n       open_bench --set SET [RUNS]\n");
    return 2;
  }
#if defined(__GLIBC__)
  // Without this glibc raises its mmap threshold when the first open frees its tensor list
  // (16.8 MiB for 100,000 tensors) and serves later opens from heap memory already faulted
  // in: those opens would skip the page zeroing that a fresh process pays. (load_bench
  // does the same.)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
#endif
  ptread::Options options;
  if (std::string(argv[1]) == "--set") return bench_set(argv[2], argc > 3 ? std::atoi(argv[3]) : 200, options);
  const int runs = argc > 2 ? std::atoi(argv[2]) : 20;
  options.threads = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 1;
  std::vector<double> ms;
  size_t count = 0;
  for (int r = 0; r < runs; ++r) {
    const double t = open_and_list(argv[1], options, &count);
    if (t < 0) return 1;
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("ptread.open %s %.3f %.3f %zu\n", argv[1], ms[ms.size() / 2], ms[0], count);
  return checksum == 0 ? 1 : 0;
}
