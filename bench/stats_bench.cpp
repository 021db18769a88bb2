// `ptread stats` against reading the same bytes once at memcpy speed, in one process.
//   stats_bench FILE [RUNS]
// Per run: every tensor's bytes copied by memcpy (one thread) into a buffer reused from run
// to run (the baseline), then compute_stats (tools/cli/stats.hpp) on one and on two
// threads. Prints the medians in ms and the ratios baseline / stats (1.0: as fast as
// memcpy). The file is mapped and read once before timing: its pages are in memory.
#include <ptread/ptread.hpp>

#include "cli/stats.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stats_bench FILE [RUNS]\n");
    return 2;
  }
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  auto ck = ptread::Checkpoint::open(argv[1]);
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return 1;
  }
  std::vector<const ptread::NamedTensor*> tensors;
  size_t largest = 0;
  uint64_t bytes = 0, check = 0;
  for (const auto& nt : ck->tensors()) {
    tensors.push_back(&nt);
    largest = std::max(largest, static_cast<size_t>(nt.tensor.nbytes()));
    bytes += nt.tensor.nbytes();
  }
  std::unique_ptr<char[]> buf(new char[largest + 1]);
  auto copy_all = [&] {
    for (const auto* nt : tensors) {
      std::memcpy(buf.get(), nt->tensor.data_ptr(), static_cast<size_t>(nt->tensor.nbytes()));
      check += static_cast<unsigned char>(buf[0]);
    }
  };
  copy_all();  // pages mapped, buffer faulted in
  using Clock = std::chrono::steady_clock;
  auto ms_of = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::vector<double> copy_ms, one_ms, two_ms;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    copy_all();
    auto t1 = Clock::now();
    auto s1 = ptread_cli::compute_stats(tensors, 1, [](uint64_t, uint64_t) {});
    auto t2 = Clock::now();
    auto s2 = ptread_cli::compute_stats(tensors, 2, [](uint64_t, uint64_t) {});
    auto t3 = Clock::now();
    check += s1.size() + s2.size();
    copy_ms.push_back(ms_of(t0, t1));
    one_ms.push_back(ms_of(t1, t2));
    two_ms.push_back(ms_of(t2, t3));
  }
  const double c = median(copy_ms), a = median(one_ms), b = median(two_ms);
  std::printf("stats %s %.1f MiB: memcpy %.1f ms, stats 1 thread %.1f ms (%.2fx memcpy), 2 threads %.1f ms (%.2fx)\n",
              argv[1], static_cast<double>(bytes) / (1 << 20), c, a, c / a, b, c / b);
  return check == 0 ? 1 : 0;
}
