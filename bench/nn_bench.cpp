// The nn layers on the CPU, with the baselines run in the same process: memcpy of the same bytes
// (gathers), a read of W's bytes (the weight-streaming bound of batch 1), and raw OpenBLAS
// cblas_sgemm / cblas_sgemv when built with ptread::openblas.
//   nn_bench FILE [--only PREFIX]
// FILE: the checkpoint bench/make_nn_inputs.py writes. Prints "name median_ms" lines (the
// names bench/nn_torch.py prints for torch); run_nn.sh joins them.
#include <ptread/ptread.hpp>
#ifndef PTREAD_BENCH_OPENBLAS  // set to 1 by the build when ptread::openblas is there
#define PTREAD_BENCH_OPENBLAS 0
#endif
#if PTREAD_BENCH_OPENBLAS
#include <ptread/nn/openblas.hpp>
#endif

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
std::string only;
volatile uint64_t sink;

// Ms one call of fn takes.
template <class F>
double call_ms(F&& fn) {
  const auto t0 = clock_type::now();
  fn();
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double median_of(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median ms of fn over at least 5 runs and about 0.3 s (at most 200 runs), after one warm-up.
template <class F>
double median_ms(F&& fn) {
  fn();
  std::vector<double> ms;
  const auto start = clock_type::now();
  while (ms.size() < 5 || (ms.size() < 200 && std::chrono::duration<double>(clock_type::now() - start).count() < 0.3)) {
    ms.push_back(call_ms(fn));
  }
  return median_of(std::move(ms));
}

void report(const std::string& name, double ms) {
  std::printf("%s %.4f\n", name.c_str(), ms);
  std::fflush(stdout);
}
bool want(const std::string& name) { return only.empty() || name.compare(0, only.size(), only) == 0; }

// Reads every byte once: the streaming-read bound. Four streams at once, over four quarters
// of the buffer, as the batch-1 GEMV reads four rows of W at once (one sequential stream
// measured slower than the GEMV itself on the benchmark VM: the hardware prefetchers keep
// more bytes in flight for several streams); wide loads, eight independent chains.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) uint64_t read_all(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  const size_t quarter = bytes / 4 / 128 * 128;
  __m256i acc[8];
  for (auto& a : acc) a = _mm256_setzero_si256();
  for (size_t i = 0; i < quarter; i += 128) {
    for (int s = 0; s < 4; ++s) {
      const unsigned char* q = b + static_cast<size_t>(s) * quarter + i;
      for (int k = 0; k < 4; ++k) {
        __m256i& a = acc[(s & 1) * 4 + k];
        a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * k)));
      }
    }
  }
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_xor_si256(acc[0], acc[k]);
  uint64_t r = static_cast<uint64_t>(_mm256_extract_epi64(acc[0], 0));
  for (size_t i = 4 * quarter; i < bytes; ++i) r ^= b[i];
  return r;
}
#else
uint64_t read_all(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t r = 0;
  for (size_t i = 0; i < bytes; ++i) r ^= b[i];
  return r;
}
#endif

// Median ms of 11 calls of fn, each after 256 MiB of other memory is read (outside the
// timing): the call finds none of its data in the caches, as when other work runs between
// calls (torch's, in bench/nn_pair.py). Repeated calls otherwise find part of a 64 MiB W
// left in the L3.
template <class F>
double median_ms_cold(F&& fn) {
  static const std::vector<unsigned char> other(size_t{256} << 20, 1);
  std::vector<double> ms;
  while (ms.size() < 11) {
    sink = read_all(other.data(), other.size());
    ms.push_back(call_ms(fn));
  }
  return median_of(std::move(ms));
}

// KiB of [p, p + n) mapped with 2 MiB pages, from /proc/self/smaps (the mappings that
// overlap the range, whole: ptread's advice makes a table's whole 2 MiB pages a mapping of
// their own), or -1 where there is no such file.
long huge_kib(const void* p, size_t n) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  const auto a = reinterpret_cast<uintptr_t>(p);
  long kib = 0;
  bool inside = false;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0, v = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = lo < a + n && a < hi;
    } else if (inside && (std::sscanf(line, "FilePmdMapped: %lu", &v) == 1 || std::sscanf(line, "AnonHugePages: %lu", &v) == 1)) {
      kib += static_cast<long>(v);
    }
  }
  std::fclose(f);
  return kib;
}

// After a layer's first call: whether its table was advised for 2 MiB pages, and how much
// of it the process maps with them (the page cache decides: bench/README.md, "Tables in 2
// MiB pages").
template <class Layer>
void report_pages(const std::string& name, const Layer& layer) {
  const ptread::Tensor& w = layer.weight();
  std::fprintf(stderr, "nn_bench: %s: advised for 2 MiB pages: %s; %ld of %zu MiB in 2 MiB pages\n", name.c_str(),
               layer.huge_pages() ? "yes" : "no", huge_kib(w.data_ptr(), w.nbytes()) / 1024,
               static_cast<size_t>(w.nbytes() >> 20));
}

template <class T>
std::vector<T> tensor_values(const ptread::Checkpoint& ck, const char* name) {
  const T* p = ck.find(name)->data<T>().value();
  return std::vector<T>(p, p + ck.find(name)->numel());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: nn_bench FILE [--only PREFIX]\n");
    return 2;
  }
  if (argc > 3 && std::string(argv[2]) == "--only") only = argv[3];
  auto ck = ptread::Checkpoint::open(argv[1]);
  if (!ck) {
    std::fprintf(stderr, "%s\n", ck.error().what());
    return 1;
  }
  namespace nn = ptread::nn;
  std::fprintf(stderr, "nn_bench: kernels %s\n", ptread::detail::nn_isa_name(ptread::detail::nn_isa()));

  const auto idx = tensor_values<int64_t>(*ck, "idx");
  for (size_t d : {size_t{64}, size_t{256}}) {
    const std::string base = "emb.d" + std::to_string(d);
    if (!want(base)) continue;
    std::vector<float> out(idx.size() * d);
    const auto* table = ck->find(base == "emb.d64" ? "emb64.weight" : "emb256.weight");
    report(base + ".memcpy", median_ms([&] { std::memcpy(out.data(), table->data_ptr(), out.size() * 4); }));
    for (unsigned t : {1u, 2u}) {
      nn::EmbeddingOptions opt;
      opt.threads = t;
      auto emb = nn::Embedding::from(*ck, "emb" + std::to_string(d), opt).value();
      report(base + ".ptread.t" + std::to_string(t),
             median_ms([&] { (void)emb.forward(idx.data(), idx.size(), out.data()); }));
      if (t == 1) report_pages(base, emb);
    }
  }

  const auto bidx = tensor_values<int64_t>(*ck, "bag_idx");
  const auto boffs = tensor_values<int64_t>(*ck, "bag_offsets");
  for (size_t d : {size_t{32}, size_t{128}}) {
    for (nn::Reduce r : {nn::Reduce::sum, nn::Reduce::mean, nn::Reduce::max}) {
      const std::string base = "bag.d" + std::to_string(d) + "." + nn::reduce_name(r);
      if (!want(base)) continue;
      std::vector<float> out(boffs.size() * d);
      for (unsigned t : {1u, 2u}) {
        nn::EmbeddingOptions opt;
        opt.threads = t;
        auto bag = nn::EmbeddingBag::from(*ck, "bag" + std::to_string(d), r, opt).value();
        report(base + ".ptread.t" + std::to_string(t), median_ms([&] {
                 (void)bag.forward(bidx.data(), bidx.size(), boffs.data(), boffs.size(), nullptr, out.data());
               }));
        if (t == 1 && r == nn::Reduce::sum) report_pages("bag.d" + std::to_string(d), bag);
      }
    }
  }

  for (int n : {1024, 4096}) {
    const std::string prefix = "fc" + std::to_string(n);
    const std::string base = "linear." + std::to_string(n);
    if (!want(base)) continue;
    const ptread::Tensor* w = ck->find(prefix + ".weight");
    // The bound for one and for two threads (each reads half of W, through the pool the layers use).
    const auto* wb = static_cast<const unsigned char*>(w->data_ptr());
    const size_t wbytes = static_cast<size_t>(w->nbytes());
    auto read_w1 = [&] { sink = read_all(wb, wbytes); };
    auto read_w2 = [&] {
      uint64_t part[2] = {0, 0};
      ptread::detail::parallel_for(2, 2, [&](size_t t) {
        part[t] = read_all(wb + t * (wbytes / 2), t == 0 ? wbytes / 2 : wbytes - wbytes / 2);
      });
      sink = part[0] ^ part[1];
    };
    report(base + ".readw.t1", median_ms(read_w1));
    report(base + ".readw.t2", median_ms(read_w2));
    report(base + ".readw_cold.t1", median_ms_cold(read_w1));
    report(base + ".readw_cold.t2", median_ms_cold(read_w2));
    for (int m : {1, 8, 64, 512}) {
      std::vector<float> x(static_cast<size_t>(m) * static_cast<size_t>(n)), y(x.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
      const std::string mb = base + ".m" + std::to_string(m);
      for (unsigned t : {1u, 2u}) {
        const std::string ts = ".t" + std::to_string(t);
        nn::LinearOptions opt;
        opt.threads = t;
        auto fc = nn::Linear::from(*ck, prefix, opt).value();
        report(mb + ".ptread" + ts, median_ms([&] { (void)fc.forward(x.data(), static_cast<size_t>(m), y.data()); }));
        if (m == 1) {
          report(mb + ".ptread_cold" + ts, median_ms_cold([&] { (void)fc.forward(x.data(), 1, y.data()); }));
        }
#if PTREAD_BENCH_OPENBLAS
        nn::LinearOptions bo;
        bo.backend = nn::openblas_backend(static_cast<int>(t));
        auto fb = nn::Linear::from(*ck, prefix, bo).value();
        report(mb + ".openblas" + ts, median_ms([&] { (void)fb.forward(x.data(), static_cast<size_t>(m), y.data()); }));
        openblas_set_num_threads(static_cast<int>(t));
        const float* W = static_cast<const float*>(w->data_ptr());
        report(mb + ".sgemm" + ts, median_ms([&] {
                 cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, n, 1.0f, x.data(), n, W, n, 0.0f, y.data(), n);
               }));
        if (m == 1) {
          report(mb + ".sgemv" + ts, median_ms([&] {
                   cblas_sgemv(CblasRowMajor, CblasNoTrans, n, n, 1.0f, W, n, x.data(), 1, 0.0f, y.data(), 1);
                 }));
        }
#endif
      }
    }
  }
  return 0;
}
