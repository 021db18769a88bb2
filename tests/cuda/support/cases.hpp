// What the CUDA tests (on a GPU, and emulated on the CPU) check the kernels with: weights
// built in the test (sizes that reach the vector loads, the row tails and every tile
// configuration), the nn fixtures torch wrote, and the comparison with the CPU layers.
#pragma once

#include "../../support/nn_fixture.hpp"
#include "state_dict.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ptread_test {

// n deterministic values in [-1, 1).
inline std::vector<float> test_values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0);
  }
  return v;
}

// Linear weights: lin_{f32,f16,bf16} [70, 264] with bias (264 = 33 vectors of 8: the 16-byte
// loads), odd_{f32,f16,bf16} [37, 37] without (one element a lane), strided_f32 [40, 24]
// (a transposed view), bias in F16 for lin_f16 and BF16 for lin_bf16, as torch saves them.
inline const std::vector<uint8_t>& linear_file() {
  static const std::vector<uint8_t> file = [] {
    StateDict sd;
    const char* names[] = {"f32", "f16", "bf16"};
    const ptread::DType types[] = {ptread::DType::F32, ptread::DType::F16, ptread::DType::BF16};
    for (int d = 0; d < 3; ++d) {
      const std::string n = names[d];
      sd.add("lin_" + n + ".weight", types[d], {70, 264}, test_values(70 * 264, 1));
      sd.add("lin_" + n + ".bias", types[d], {70}, test_values(70, 2));
      sd.add("odd_" + n + ".weight", types[d], {37, 37}, test_values(37 * 37, 3));
    }
    sd.storage("st", ptread::DType::F32, [] {
      const auto v = test_values(24 * 40, 4);
      std::vector<uint8_t> b(v.size() * 4);
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    }());
    sd.view("strided_f32.weight", "st", {40, 24}, {1, 40});
    sd.add("strided_f32.bias", ptread::DType::F32, {40}, test_values(40, 5));
    return sd.build();
  }();
  return file;
}

inline const ptread::Checkpoint& linear_ck() {
  static ptread::Result<ptread::Checkpoint> ck =
      ptread::Checkpoint::open_memory(linear_file().data(), linear_file().size());
  if (!ck) FAIL(ck.error().what());
  return *ck;
}

inline std::vector<std::string> linear_prefixes() {
  return {"lin_f32", "lin_f16", "lin_bf16", "odd_f32", "odd_f16", "odd_bf16", "strided_f32"};
}

// Batch sizes: every batch-1..8 kernel, then the tiled one (tails of its 32, 64, 128 tiles).
inline std::vector<size_t> linear_batches() { return {1, 2, 3, 4, 5, 6, 7, 8, 9, 40, 133}; }

// Compares got with the CPU layer's y for x [m x in]: both sum in F32 in different orders,
// so each output may differ by a small multiple of F32 rounding of sum_k |x w| + |b|; one
// term wrong or missing moves it by about 1/K of that, far more.
inline void check_linear_close(const ptread::nn::Linear& cpu, const ptread::Checkpoint& ck, const std::string& prefix,
                               const std::vector<float>& x, size_t m, const std::vector<float>& got) {
  const size_t N = cpu.out_features(), K = cpu.in_features();
  REQUIRE(got.size() == m * N);
  std::vector<float> want(m * N);
  REQUIRE(cpu.forward(x.data(), m, want.data()).ok());
  const auto w = cpu.weight().to_float32().value();
  std::vector<float> b(N, 0.0f);
  if (const ptread::Tensor* bt = ck.find(prefix + ".bias")) b = bt->to_float32().value();
  size_t bad = 0;
  for (size_t i = 0; i < m && bad < 5; ++i) {
    for (size_t n = 0; n < N && bad < 5; ++n) {
      double mag = std::fabs(b[n]);
      for (size_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(x[i * K + k]) * w[n * K + k]);
      const double tol = 4e-5 * mag + 1e-6;
      const double diff = std::fabs(static_cast<double>(got[i * N + n]) - want[i * N + n]);
      if (!(diff <= tol)) {
        ++bad;
        FAIL_CHECK(prefix << " m=" << m << " y[" << i << "][" << n << "] = " << got[i * N + n] << ", CPU "
                          << want[i * N + n] << " (tolerance " << tol << ")");
      }
    }
  }
  CHECK(bad == 0);
}

// The nn fixtures' bag cases: sum and mean to F32 rounding (the GPU fuses multiply-adds),
// max and gathers bit for bit.
inline void check_bag_close(const std::vector<float>& got, const std::vector<float>& want, bool exact) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t k = 0; k < want.size() && bad < 5; ++k) {
    const bool ok = exact ? got[k] == want[k] : std::fabs(got[k] - want[k]) <= 1e-6f + 2e-6f * std::fabs(want[k]);
    if (!ok) {
      ++bad;
      FAIL_CHECK("element " << k << ": " << got[k] << ", want " << want[k]);
    }
  }
  CHECK(bad == 0);
}

inline ptread::nn::Reduce reduce_of(const std::string& mode) {
  return mode == "sum" ? ptread::nn::Reduce::sum : mode == "mean" ? ptread::nn::Reduce::mean : ptread::nn::Reduce::max;
}

// One of gen_nn.py's F.linear cases: the layer's prefix, x [m x in] and torch's y.
struct LinearCase {
  std::string prefix;
  size_t m = 0;
  std::vector<float> x, torch;
};

inline LinearCase linear_case(const Json& e, size_t in_features, size_t out_features) {
  LinearCase c;
  c.prefix = e["prefix"].as_string();
  c.m = static_cast<size_t>(e["m"].as_int());
  c.x = e["x"].is_string() ? formula_x(c.m, in_features) : floats(e["x"]);
  c.torch = linear_out(e, c.m, out_features);
  return c;
}

// got against torch's y: F32 sums in another order.
inline void check_torch_close(const std::vector<float>& got, const std::vector<float>& torch) {
  REQUIRE(got.size() == torch.size());
  for (size_t i = 0; i < torch.size(); ++i) CHECK(std::fabs(got[i] - torch[i]) <= 1e-4f * (1.0f + std::fabs(torch[i])));
}

// One of gen_nn.py's F.embedding cases, with what the CPU layer computes for it.
struct EmbeddingCase {
  std::string prefix;
  ptread::nn::EmbeddingOptions opt;
  std::vector<int64_t> idx;
  std::vector<float> want;  // the CPU layer's output
  ptread::Tensor weight;    // the CPU layer's table
  int64_t padding = -1;     // its normalized padding_idx
};

inline EmbeddingCase embedding_case(const Json& e) {
  EmbeddingCase c;
  c.prefix = e["prefix"].as_string();
  if (!e["padding_idx"].is_null()) c.opt.padding_idx = e["padding_idx"].as_int();
  auto cpu = ptread::nn::Embedding::from(nn_ck(), c.prefix, c.opt);
  REQUIRE(cpu.ok());
  c.idx = ints(e["indices"]);
  c.want.resize(c.idx.size() * cpu->dim());
  REQUIRE(cpu->forward(c.idx.data(), c.idx.size(), c.want.data()).ok());
  c.weight = cpu->weight();
  c.padding = cpu->padding_idx();
  return c;
}

// One of gen_nn.py's F.embedding_bag cases, with what the CPU layer computes for it.
struct BagCase {
  std::string prefix;
  ptread::nn::Reduce mode = ptread::nn::Reduce::sum;
  ptread::nn::EmbeddingOptions opt;
  std::vector<int64_t> idx, offs;
  size_t bags = 0;
  std::vector<float> psw;    // empty: none
  std::vector<float> want;   // the CPU layer's output
  std::vector<float> torch;  // torch's
  ptread::Tensor weight;
  int64_t padding = -1;
  const float* psw_or_null() const { return psw.empty() ? nullptr : psw.data(); }
};

inline BagCase bag_case(const Json& e) {
  BagCase c;
  c.prefix = e["prefix"].as_string();
  c.mode = reduce_of(e["mode"].as_string());
  c.opt.include_last_offset = e["include_last_offset"].as_bool();
  if (!e["padding_idx"].is_null()) c.opt.padding_idx = e["padding_idx"].as_int();
  auto cpu = ptread::nn::EmbeddingBag::from(nn_ck(), c.prefix, c.mode, c.opt);
  REQUIRE(cpu.ok());
  c.idx = ints(e["indices"]);
  c.offs = ints(e["offsets"]);
  c.bags = c.offs.size() - (c.opt.include_last_offset ? 1 : 0);
  if (!e["per_sample_weights"].is_null()) c.psw = floats(e["per_sample_weights"]);
  c.want.resize(c.bags * cpu->dim());
  REQUIRE(cpu->forward(c.idx.data(), c.idx.size(), c.offs.data(), c.bags, c.psw_or_null(), c.want.data()).ok());
  c.torch = floats(e["out"]);
  c.weight = cpu->weight();
  c.padding = cpu->padding_idx();
  return c;
}

}  // namespace ptread_test
