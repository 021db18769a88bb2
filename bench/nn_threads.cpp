// The nn layers on one thread against two, call by call: issue 4's "two threads never slower
// than one", measured so that a slow minute of a shared machine falls on both sides.
//   nn_threads FILE [PAIRS] [GAP_US] [--only PREFIX]
// FILE: the checkpoint bench/make_nn_inputs.py writes. Each case makes the layer twice
// (threads = 1 and 2), checks that both give the same bits, then runs PAIRS pairs (default
// 201): one call of each, which goes first alternating, each after GAP_US microseconds of
// sleep (default 500: the pool's worker asleep before every call, as between the calls of a
// program doing other work; 0: back to back). Prints per case the median of each side, the
// ratio of the medians (t1 / t2: above 1, two threads are faster) and the median and
// quartiles of the per-pair ratios.
#include <ptread/ptread.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
namespace nn = ptread::nn;

int pairs = 201;
int gap_us = 500;
std::string only;

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// run(threads_index, out) runs the layer made with 1 (index 0) or 2 (index 1) threads.
template <class Run>
void pair_case(const std::string& name, size_t out_floats, Run&& run) {
  if (!only.empty() && name.compare(0, only.size(), only) != 0) return;
  std::vector<float> out[2] = {std::vector<float>(out_floats), std::vector<float>(out_floats, 1.0f)};
  run(0, out[0].data());
  run(1, out[1].data());
  if (std::memcmp(out[0].data(), out[1].data(), out_floats * sizeof(float)) != 0) {
    std::fprintf(stderr, "nn_threads: %s: two threads gave other bits than one\n", name.c_str());
    std::exit(1);
  }
  std::vector<double> us[2], ratio;
  for (int p = 0; p < pairs; ++p) {
    double t[2];
    for (int s = 0; s < 2; ++s) {
      const int side = p % 2 == 0 ? s : 1 - s;
      if (gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
      const auto t0 = clock_type::now();
      run(side, out[side].data());
      t[side] = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
      us[side].push_back(t[side]);
    }
    ratio.push_back(t[0] / t[1]);
  }
  const double m1 = quantile(us[0], 0.5), m2 = quantile(us[1], 0.5);
  std::printf("%-24s %10.1f %10.1f %8.2fx %8.2fx  [%.2f, %.2f]\n", name.c_str(), m1, m2, m1 / m2, quantile(ratio, 0.5),
              quantile(ratio, 0.25), quantile(ratio, 0.75));
  std::fflush(stdout);
}

template <class T>
std::vector<T> values(const ptread::Checkpoint& ck, const char* name) {
  const T* p = ck.find(name)->data<T>().value();
  return std::vector<T>(p, p + ck.find(name)->numel());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t k = 0; k + 1 < args.size(); ++k) {
    if (args[k] == "--only") {
      only = args[k + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(k), args.begin() + static_cast<std::ptrdiff_t>(k) + 2);
      break;
    }
  }
  if (args.empty()) {
    std::fprintf(stderr, "usage: nn_threads FILE [PAIRS] [GAP_US] [--only PREFIX]\n");
    return 2;
  }
  if (args.size() > 1) pairs = std::max(1, std::atoi(args[1].c_str()));
  if (args.size() > 2) gap_us = std::max(0, std::atoi(args[2].c_str()));
  auto ck = ptread::Checkpoint::open(args[0]);
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return 1;
  }
  std::printf("kernels %s; %d pairs a case, %d us of sleep before each call\n",
              ptread::detail::nn_isa_name(ptread::detail::nn_isa()), pairs, gap_us);
  std::printf("%-24s %10s %10s %9s %9s  %s\n", "case (us)", "1 thread", "2 threads", "x(med)", "x(pairs)",
              "[quartiles of the pair ratios]");

  const auto idx = values<int64_t>(*ck, "idx");
  for (int d : {64, 256}) {
    const std::string prefix = "emb" + std::to_string(d);
    nn::Embedding e[2];
    for (unsigned t : {1u, 2u}) {
      nn::EmbeddingOptions o;
      o.threads = t;
      e[t - 1] = nn::Embedding::from(*ck, prefix, o).value();
    }
    pair_case("emb.d" + std::to_string(d), idx.size() * static_cast<size_t>(d),
              [&](int s, float* out) { (void)e[s].forward(idx.data(), idx.size(), out); });
  }

  const auto bidx = values<int64_t>(*ck, "bag_idx");
  const auto boffs = values<int64_t>(*ck, "bag_offsets");
  for (int d : {32, 128}) {
    for (nn::Reduce r : {nn::Reduce::sum, nn::Reduce::mean, nn::Reduce::max}) {
      nn::EmbeddingBag b[2];
      for (unsigned t : {1u, 2u}) {
        nn::EmbeddingOptions o;
        o.threads = t;
        b[t - 1] = nn::EmbeddingBag::from(*ck, "bag" + std::to_string(d), r, o).value();
      }
      pair_case("bag.d" + std::to_string(d) + "." + nn::reduce_name(r), boffs.size() * static_cast<size_t>(d),
                [&](int s, float* out) {
                  (void)b[s].forward(bidx.data(), bidx.size(), boffs.data(), boffs.size(), nullptr, out);
                });
    }
  }

  for (int n : {1024, 4096}) {
    const std::string prefix = "fc" + std::to_string(n);
    nn::Linear l[2];
    for (unsigned t : {1u, 2u}) {
      nn::LinearOptions o;
      o.threads = t;
      l[t - 1] = nn::Linear::from(*ck, prefix, o).value();
    }
    for (size_t m : {size_t{1}, size_t{8}, size_t{64}}) {
      std::vector<float> x(m * static_cast<size_t>(n));
      for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(static_cast<int>(k % 17) - 8) / 8.0f;
      pair_case("linear." + std::to_string(n) + ".m" + std::to_string(m), m * static_cast<size_t>(n),
                [&](int s, float* out) { (void)l[s].forward(x.data(), m, out); });
    }
  }
  return 0;
}
