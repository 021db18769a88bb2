// The CUDA kernels of include/ptread/cuda/detail/kernels.cuh run on the CPU under emu.hpp and
// checked against the CPU nn layers on the same weights: every batch-1..8 kernel with and
// without 16-byte loads, the three tile shapes of the tiled kernel, gathers and bags over
// the nn fixtures (all of torch's cases), the index and offset checks, and the conversions.
// This runs on every machine; tests/cuda/*.cu run the same kernels on a GPU, through the API.
#undef _FORTIFY_SOURCE
#include "emu.hpp"

#include <ptread/cuda/detail/kernels.cuh>

#include <catch2/catch.hpp>

#include "../support/cases.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace kd = ptread::cuda::detail;
namespace nn = ptread::nn;
using namespace ptread_test;

const unsigned long long kNone = ~0ull;

// y = x W^T + b through launch_linear; W's rows must be contiguous (as the API makes them).
std::vector<float> emu_linear(const ptread::Tensor& w, const std::vector<float>& bias, const float* x, size_t m,
                              int sm_count, bool* vectorized = nullptr) {
  kd::LinearArgs a;
  a.w = w.data_ptr();
  a.wk = kd::weight_kind(w.dtype());
  a.ldw = static_cast<size_t>(w.strides()[0]);
  a.x = x;
  a.bias = bias.empty() ? nullptr : bias.data();
  a.n = static_cast<size_t>(w.shape()[0]);
  a.k = static_cast<size_t>(w.shape()[1]);
  a.m = m;
  std::vector<float> y(m * a.n, std::numeric_limits<float>::quiet_NaN());
  a.y = y.data();
  if (vectorized) *vectorized = kd::rows_vectorizable(a);
  kd::launch_linear(a, sm_count, nullptr);
  return y;
}

std::vector<float> bias_of(const ptread::Checkpoint& ck, const std::string& prefix) {
  const ptread::Tensor* b = ck.find(prefix + ".bias");
  return b ? b->to_float32().value() : std::vector<float>();
}

kd::TableArgs table_of(const ptread::Tensor& w) {
  kd::TableArgs t;
  t.w = w.data_ptr();
  t.wk = kd::weight_kind(w.dtype());
  t.rows = static_cast<size_t>(w.shape()[0]);
  t.dim = static_cast<size_t>(w.shape()[1]);
  t.rs = static_cast<size_t>(w.strides()[0]);
  t.cs = static_cast<size_t>(w.strides()[1]);
  return t;
}

template <class Index>
unsigned long long emu_check_indices(const std::vector<Index>& idx, size_t rows) {
  unsigned long long flag = kNone;
  kd::launch_check_indices(sizeof(Index) == 8, idx.data(), idx.size(), rows, &flag, nullptr);
  return flag;
}

template <class Index>
unsigned long long emu_check_offsets(const std::vector<Index>& off, size_t n, size_t bags, bool last) {
  unsigned long long flag = kNone;
  kd::launch_check_offsets(sizeof(Index) == 8, off.data(), off.size(), n, bags, last, &flag, nullptr);
  return flag;
}

}  // namespace

TEST_CASE("emulated: Linear kernels equal the CPU layer, every batch kernel and tile", "[cuda_emu]") {
  const ptread::Checkpoint& ck = linear_ck();
  for (const std::string& prefix : linear_prefixes()) {
    auto cpu = nn::Linear::from(ck, prefix);
    REQUIRE(cpu.ok());
    const ptread::Tensor& w = cpu->weight();  // rows contiguous (the CPU layer copied the strided one)
    const auto bias = bias_of(ck, prefix);
    const size_t K = cpu->in_features();
    for (size_t m : linear_batches()) {
      const auto x = test_values(m * K + 4, static_cast<uint32_t>(10 + m));
      // sm_count 1, 4, 6, 1000: with 16-byte loads the 128 x 128, 128 x 64 and 64 x 64 tiles
      // of the double-buffered kernel for the batch of 133 (N = 70), the plain kernel's 32-row
      // tiles at 1000; without (K = 37), the plain kernel's 128-, 64- (sm_count 3) and 32-row
      // tiles.
      for (int sms : {1, 3, 4, 6, 1000}) {
        if (m <= kd::kRowsMaxBatch && sms != 1) continue;
        INFO(prefix << " m=" << m << " sm_count=" << sms);
        bool vec = false;
        const std::vector<float> xs(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(m * K));
        check_linear_close(*cpu, ck, prefix, xs, m, emu_linear(w, bias, xs.data(), m, sms, &vec));
        CHECK(vec == (prefix.rfind("odd_", 0) != 0));  // K = 264 and 24 take 16-byte loads, K = 37 cannot
        if (m <= kd::kRowsMaxBatch && vec) {
          // x one float off 16-byte alignment: the one-element-a-lane kernel, same result.
          std::vector<float> shifted(m * K + 1);
          std::copy(xs.begin(), xs.end(), shifted.begin() + 1);
          bool vec2 = true;
          check_linear_close(*cpu, ck, prefix, xs, m, emu_linear(w, bias, shifted.data() + 1, m, sms, &vec2));
          CHECK_FALSE(vec2);
        }
      }
    }
  }
}

TEST_CASE("emulated: Linear kernels equal torch's F.linear on the nn fixtures", "[cuda_emu]") {
  const Json& cases = nn_json()["linear"];
  REQUIRE(cases.size() >= 10);
  for (size_t c = 0; c < cases.size(); ++c) {
    auto cpu = nn::Linear::from(nn_ck(), cases[c]["prefix"].as_string());
    REQUIRE(cpu.ok());
    const LinearCase k = linear_case(cases[c], cpu->in_features(), cpu->out_features());
    INFO(k.prefix << " m=" << k.m);
    const auto bias = bias_of(nn_ck(), k.prefix);
    check_linear_close(*cpu, nn_ck(), k.prefix, k.x, k.m, emu_linear(cpu->weight(), bias, k.x.data(), k.m, 4));
    check_torch_close(emu_linear(cpu->weight(), bias, k.x.data(), k.m, 1), k.torch);
  }
}

TEST_CASE("emulated: gathers equal the CPU Embedding bit for bit", "[cuda_emu]") {
  const Json& cases = nn_json()["embedding"];
  REQUIRE(cases.size() >= 6);
  for (size_t c = 0; c < cases.size(); ++c) {
    const EmbeddingCase k = embedding_case(cases[c]);
    INFO("case " << c << " " << k.prefix);
    const kd::TableArgs t = table_of(k.weight);
    CHECK(emu_check_indices(k.idx, t.rows) == kNone);
    std::vector<float> got(k.want.size(), -777.0f);
    kd::launch_gather(t, true, k.idx.data(), k.idx.size(), got.data(), nullptr);
    check_bag_close(got, k.want, true);
    const auto idx32 = narrow(k.idx);
    std::vector<float> got32(k.want.size(), -777.0f);
    kd::launch_gather(t, false, idx32.data(), idx32.size(), got32.data(), nullptr);
    check_bag_close(got32, k.want, true);
  }
}

TEST_CASE("emulated: bags equal the CPU EmbeddingBag on every torch case", "[cuda_emu]") {
  const Json& cases = nn_json()["embedding_bag"];
  REQUIRE(cases.size() >= 40);
  for (size_t c = 0; c < cases.size(); ++c) {
    const BagCase k = bag_case(cases[c]);
    INFO("case " << c << " " << k.prefix << " " << ptread::nn::reduce_name(k.mode));
    const kd::TableArgs t = table_of(k.weight);
    kd::BagArgs b;
    b.n = k.idx.size();
    b.num_bags = k.bags;
    b.include_last = k.opt.include_last_offset;
    b.mode = static_cast<int>(k.mode);
    b.padding = k.padding;
    b.psw = k.psw_or_null();
    CHECK(emu_check_offsets(k.offs, k.idx.size(), k.bags, k.opt.include_last_offset) == kNone);
    std::vector<float> got(k.want.size(), -777.0f);
    kd::launch_bag(t, b, true, k.idx.data(), k.offs.data(), got.data(), nullptr);
    check_bag_close(got, k.want, k.mode == nn::Reduce::max);
    check_bag_close(got, k.torch, k.mode == nn::Reduce::max);
    const auto idx32 = narrow(k.idx), offs32 = narrow(k.offs);
    std::vector<float> got32(k.want.size(), -777.0f);
    kd::launch_bag(t, b, false, idx32.data(), offs32.data(), got32.data(), nullptr);
    CHECK(got32 == got);
  }
}

TEST_CASE("emulated: the index and offset checks flag the first bad position", "[cuda_emu]") {
  std::vector<int64_t> idx(1000, 3);
  CHECK(emu_check_indices(idx, 50) == kNone);
  idx[700] = 50;
  idx[900] = -1;
  CHECK(emu_check_indices(idx, 50) == 700);
  idx[20] = -5;
  CHECK(emu_check_indices(idx, 50) == 20);
  std::vector<int32_t> i32(600, 0);
  i32[599] = 1 << 30;
  CHECK(emu_check_indices(i32, 50) == 599);

  // offsets over n = 10 indices
  CHECK(emu_check_offsets(std::vector<int64_t>{0, 3, 3, 10}, 10, 4, false) == kNone);
  CHECK(emu_check_offsets(std::vector<int64_t>{0, 3, 3, 10}, 10, 3, true) == kNone);
  CHECK(emu_check_offsets(std::vector<int64_t>{1, 3}, 10, 2, false) == 0);
  CHECK(emu_check_offsets(std::vector<int64_t>{0, 4, 2, 6}, 10, 4, false) == 2);
  CHECK(emu_check_offsets(std::vector<int64_t>{0, 4, 11}, 10, 3, false) == 2);
  CHECK(emu_check_offsets(std::vector<int64_t>{0, -1}, 10, 2, false) == 1);
  CHECK(emu_check_offsets(std::vector<int64_t>{0, 4, 9}, 10, 2, true) == 2);  // the last must be n
  CHECK(emu_check_offsets(std::vector<int32_t>{0, 4, 9}, 10, 2, true) == 2);
}

TEST_CASE("emulated: conversions equal copy_to", "[cuda_emu]") {
  for (const char* name : {"emb_f16.weight", "emb_bf16.weight", "fc_big_bf16.weight", "fc_f32.weight"}) {
    INFO(name);
    const ptread::Tensor* t = nn_ck().find(name);
    REQUIRE(t != nullptr);
    const auto want = t->to_float32().value();
    std::vector<float> got(want.size(), -777.0f);
    kd::launch_to_f32(kd::weight_kind(t->dtype()), t->data_ptr(), want.size(), got.data(), nullptr);
    check_bag_close(got, want, true);
  }
  for (const char* name : {"emb_strided.weight", "fc_strided.weight"}) {
    INFO(name);
    const ptread::Tensor* t = nn_ck().find(name);
    REQUIRE(t != nullptr);
    REQUIRE_FALSE(t->is_contiguous());
    const auto want = t->to_float32().value();
    const auto rows = static_cast<size_t>(t->shape()[0]), cols = static_cast<size_t>(t->shape()[1]);
    const auto rs = static_cast<size_t>(t->strides()[0]), cs = static_cast<size_t>(t->strides()[1]);
    std::vector<float> got(want.size(), -777.0f);
    kd::launch_strided_to_f32(0, t->data_ptr(), rows, cols, rs, cs, got.data(), nullptr);
    check_bag_close(got, want, true);
    std::vector<float> copied(want.size(), -777.0f);
    kd::launch_strided_copy(4, t->data_ptr(), rows, cols, rs, cs, copied.data(), nullptr);
    check_bag_close(copied, want, true);
  }
  // A strided BF16 view: the 2-byte copy keeps the bits.
  const ptread::Tensor* bf = nn_ck().find("emb_bf16.weight");
  REQUIRE(bf != nullptr);
  std::vector<uint16_t> cols(50), want(50);
  for (size_t r = 0; r < 50; ++r) want[r] = static_cast<const uint16_t*>(bf->data_ptr())[r * 12 + 5];
  kd::launch_strided_copy(2, static_cast<const uint16_t*>(bf->data_ptr()) + 5, 50, 1, 12, 1, cols.data(), nullptr);
  CHECK(cols == want);
}
