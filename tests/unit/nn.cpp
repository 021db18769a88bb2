// nn layers against torch: F.embedding, F.embedding_bag and F.linear outputs that torch 1.13
// computed on the weights of tests/fixtures/nn/nn.pt (written by tests/fixtures/gen_nn.py),
// for every kernel level the CPU has (generic, AVX2, AVX-512) and one and two threads.
#include <catch2/catch.hpp>

#include "support/nn_fixture.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#ifdef PTREAD_TEST_OPENBLAS
#include <ptread/nn/openblas.hpp>
#endif

namespace {

using ptread_test::Json;
namespace nn = ptread::nn;
using ptread::detail::NnIsa;

using ptread_test::floats;
using ptread_test::formula_x;
using ptread_test::ints;
using ptread_test::narrow;
using ptread_test::nn_ck;
using ptread_test::nn_dir;
using ptread_test::nn_json;

using ptread_test::isa_levels;
using ptread_test::IsaRestore;

int64_t opt_int(const Json& j) { return j.as_int(); }

}  // namespace

TEST_CASE("Embedding equals F.embedding", "[nn]") {
  const Json& cases = nn_json()["embedding"];
  REQUIRE(cases.size() >= 6);
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (unsigned threads : {1u, 2u}) {
      for (size_t c = 0; c < cases.size(); ++c) {
        const Json& e = cases[c];
        INFO("isa " << ptread::detail::nn_isa_name(isa) << " threads " << threads << " " << e["prefix"].as_string());
        nn::EmbeddingOptions opt;
        opt.threads = threads;
        if (!e["padding_idx"].is_null()) opt.padding_idx = opt_int(e["padding_idx"]);
        auto emb = nn::Embedding::from(nn_ck(), e["prefix"].as_string(), opt);
        REQUIRE(emb.ok());
        const auto idx = ints(e["indices"]);
        const auto want = floats(e["out"]);
        REQUIRE(want.size() == idx.size() * emb->dim());
        std::vector<float> out(want.size(), -777.0f);
        REQUIRE(emb->forward(idx.data(), idx.size(), out.data()).ok());
        CHECK(out == want);  // a gather: bit for bit
        std::vector<float> out32(want.size(), -777.0f);
        const auto idx32 = narrow(idx);
        REQUIRE(emb->forward(idx32.data(), idx32.size(), out32.data()).ok());
        CHECK(out32 == want);
      }
    }
  }
  auto emb = nn::Embedding::from(nn_ck(), "emb_f32");
  REQUIRE(emb.ok());
  CHECK(emb->num_embeddings() == 50);
  CHECK(emb->dim() == 12);
  CHECK_FALSE(emb->weight().storage() == nullptr);
}

TEST_CASE("Embedding reads rows in place, and threads split a large batch", "[nn]") {
  auto emb = nn::Embedding::from(nn_ck(), "emb_f32");
  REQUIRE(emb.ok());
  const ptread::Tensor* w = nn_ck().find("emb_f32.weight");
  REQUIRE(w != nullptr);
  CHECK(emb->weight().data_ptr() == w->data_ptr());  // no copy of the table
  const auto rows = w->to_float32().value();
  std::vector<int64_t> idx(50000);  // 600,000 elements: over kMinSplitFloats, so the threads split it
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>((i * 37) % 50);
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (unsigned threads : {1u, 2u, 3u}) {
      nn::EmbeddingOptions opt;
      opt.threads = threads;
      auto e = nn::Embedding::from(nn_ck(), "emb_bf16", opt);
      REQUIRE(e.ok());
      std::vector<float> out(idx.size() * 12);
      REQUIRE(e->forward(idx.data(), idx.size(), out.data()).ok());
      const auto bf = nn_ck().find("emb_bf16.weight")->to_float32().value();  // torch's own widening
      bool same = true;
      for (size_t i = 0; i < idx.size() && same; ++i) {
        for (size_t c = 0; c < 12; ++c) same = same && out[i * 12 + c] == bf[static_cast<size_t>(idx[i]) * 12 + c];
      }
      CHECK(same);
      // EmbeddingBag over the same indices, 5,000 bags of 10: split too; each bag is reduced
      // by one thread in the same order, so the bits equal one thread's (and max the rows').
      std::vector<int64_t> offsets(5000);
      for (size_t b = 0; b < offsets.size(); ++b) offsets[b] = static_cast<int64_t>(b * 10);
      for (nn::Reduce r : {nn::Reduce::sum, nn::Reduce::mean, nn::Reduce::max}) {
        nn::EmbeddingOptions one;
        one.threads = 1;
        auto b1 = nn::EmbeddingBag::from(nn_ck(), "emb_bf16", r, one);
        auto bt = nn::EmbeddingBag::from(nn_ck(), "emb_bf16", r, opt);
        REQUIRE(b1.ok());
        REQUIRE(bt.ok());
        std::vector<float> want(offsets.size() * 12, -1.0f), got(offsets.size() * 12, -2.0f);
        REQUIRE(b1->forward(idx.data(), idx.size(), offsets.data(), offsets.size(), nullptr, want.data()).ok());
        REQUIRE(bt->forward(idx.data(), idx.size(), offsets.data(), offsets.size(), nullptr, got.data()).ok());
        CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
        if (r == nn::Reduce::max) {
          float m = bf[static_cast<size_t>(idx[49990]) * 12 + 3];
          for (size_t i = 49991; i < 50000; ++i) m = std::max(m, bf[static_cast<size_t>(idx[i]) * 12 + 3]);
          CHECK(got[4999 * 12 + 3] == m);  // the last bag, column 3
        }
      }
    }
  }
  (void)rows;
}

// EmbeddingBag reduces a bag a pass over its indices per 256 output bytes (bag(), sums in
// registers); the bags above check it against torch. Here, at every width from 1 to 80 (every
// pass width of every vector width, and the tails), it must give exactly what axpy/vmax give
// row after row (which the gathers and bags were checked against before): the same arithmetic
// in the same order, NaNs (but not their payloads) and signed zeros included, padding entries
// left out (in the middle of a bag or first: max then starts at the next row), int64 and int32
// indices.
// Bit for bit, except that a NaN's payload may differ (which NaN operand an FMA passes on
// depends on the form of the instruction the compiler picked; torch's kernels differ too).
static bool nn_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
    } else if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

#if PTREAD_NN_X86 && (defined(__GNUC__) || defined(__clang__))
// The CPU's own fused multiply-add: rounded once, by definition.
__attribute__((target("fma"))) float hardware_fma(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

TEST_CASE("nn_fma rounds c + a * b once, as the CPU's FMA instruction", "[nn]") {
  // The generic kernels' fused sums (torch's, fbgemm's) go through nn_fma; a C library whose
  // fmaf rounds twice (MinGW-w64's) would give other bits than torch.
  if (ptread::detail::nn_detect_isa() < ptread::detail::NnIsa::avx2) {
    WARN("this CPU has no FMA instruction to compare nn_fma with");
    return;
  }
  uint64_t state = 0x9e3779b97f4a7c15ull;
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const auto any_float = [&next] {  // every bit pattern but NaN: signs, subnormals, infinities
    for (;;) {
      const auto bits = static_cast<uint32_t>(next());
      float f;
      std::memcpy(&f, &bits, sizeof f);
      if (!std::isnan(f)) return f;
    }
  };
  const auto near_one = [&next] {  // products and sums that round: the kernels' common case
    return static_cast<float>(static_cast<int64_t>(next() % 2000001) - 1000000) / 131072.0f;
  };
  size_t differ = 0, compared = 0;
  for (int k = 0; k < 2000000; ++k) {
    const bool wide = k % 4 == 0;
    const float a = wide ? any_float() : (k % 3 == 0 ? 1.0f : near_one());
    const float b = wide ? any_float() : near_one();
    const float c = wide ? any_float() : near_one();
    const float want = hardware_fma(a, b, c), got = ptread::detail::nn_fma(a, b, c);
    ++compared;
    if (std::isnan(want) ? !std::isnan(got) : std::memcmp(&want, &got, sizeof want) != 0) {
      if (++differ <= 5) UNSCOPED_INFO(a << " * " << b << " + " << c << ": " << got << ", the CPU " << want);
    }
  }
  CHECK(compared == 2000000);
  CHECK(differ == 0);
}
#endif

TEST_CASE("bag equals axpy and vmax row by row, bit for bit", "[nn]") {
  using ptread::DType;
  IsaRestore restore;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  // Every width to 80, then widths around the 16-register passes of F32 sums without weights
  // (AVX2: 128 floats a pass) and what follows them.
  constexpr size_t kRows = 40, kMaxDim = 264;
  std::vector<size_t> dims;
  for (size_t d = 1; d <= 80; ++d) dims.push_back(d);
  for (size_t d : std::initializer_list<size_t>{127, 128, 129, 136, 159, 191, 200, 256, 264}) dims.push_back(d);
  std::vector<float> f32(kRows * kMaxDim);
  std::vector<uint16_t> half(kRows * kMaxDim);
  for (size_t i = 0; i < f32.size(); ++i) {
    const uint64_t r = next();
    f32[i] = static_cast<float>(static_cast<int64_t>(r % 2001) - 1000) / 64.0f;
    if (r % 97 == 0) f32[i] = std::nanf("");
    if (r % 89 == 0) f32[i] = -0.0f;
    half[i] = static_cast<uint16_t>(r >> 20);  // every pattern: NaNs, infinities, subnormals
  }
  std::vector<float> psw(kRows);
  for (auto& w : psw) w = static_cast<float>(static_cast<int64_t>(next() % 17) - 8) * 0.375f;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      const ptread::detail::NnKernels k = ptread::detail::nn_kernels(dt);
      const size_t esize = dt == DType::F32 ? 4 : 2;
      const auto* base = dt == DType::F32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(half.data());
      for (size_t dim : dims) {
        const size_t row_bytes = dim * esize;
        for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{33}}) {
          // The bag's indices, then the next bags' (which the kernels only prefetch).
          std::vector<int64_t> idx(count + 20);
          for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>((i * 7 + dim) % kRows);
          const std::vector<int32_t> idx32(idx.begin(), idx.end());
          // No padding, padding in the middle, padding first (max starts at the next row).
          for (int64_t padding : {int64_t{-1}, count ? idx[count / 2] : int64_t{0}, count ? idx[0] : int64_t{1}}) {
            for (int mode = 0; mode < 3; ++mode) {  // sum, sum with weights, max
              const bool max_op = mode == 2;
              const float* w = mode == 1 ? psw.data() : nullptr;
              INFO("isa " << ptread::detail::nn_isa_name(isa) << " dtype " << ptread::dtype_name(dt) << " dim " << dim
                          << " rows " << count << " padding " << padding << " mode " << mode);
              std::vector<float> want(dim, 0.0f);
              size_t kept = 0;
              for (size_t i = 0; i < count; ++i) {
                if (idx[i] == padding) continue;
                const void* row = static_cast<const uint8_t*>(base) + static_cast<size_t>(idx[i]) * row_bytes;
                if (max_op && kept == 0) {
                  k.widen(row, want.data(), dim);
                } else if (max_op) {
                  k.vmax(want.data(), row, dim);
                } else {
                  k.axpy(want.data(), row, dim, w ? w[i] : 1.0f, padding < 0);
                }
                ++kept;
              }
              std::vector<float> got(dim, -777.0f), got32(dim, -777.0f);
              CHECK(k.bag64(got.data(), base, row_bytes, idx.data(), count, idx.size(), w, padding, dim, max_op) == kept);
              CHECK(k.bag32(got32.data(), base, row_bytes, idx32.data(), count, idx.size(), w, padding, dim, max_op) ==
                    kept);
              CHECK(nn_same_bits(got, want));
              CHECK(nn_same_bits(got32, want));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("EmbeddingBag equals F.embedding_bag", "[nn]") {
  const Json& cases = nn_json()["embedding_bag"];
  REQUIRE(cases.size() >= 40);
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (unsigned threads : {1u, 2u}) {
      for (size_t c = 0; c < cases.size(); ++c) {
        const Json& e = cases[c];
        const std::string mode = e["mode"].as_string();
        const nn::Reduce r = mode == "sum" ? nn::Reduce::sum : mode == "mean" ? nn::Reduce::mean : nn::Reduce::max;
        nn::EmbeddingOptions opt;
        opt.threads = threads;
        opt.include_last_offset = e["include_last_offset"].as_bool();
        if (!e["padding_idx"].is_null()) opt.padding_idx = opt_int(e["padding_idx"]);
        INFO("isa " << ptread::detail::nn_isa_name(isa) << " threads " << threads << " case " << c << " "
                    << e["prefix"].as_string() << " " << mode << " padding "
                    << (opt.padding_idx ? std::to_string(*opt.padding_idx) : "none") << " ilo "
                    << opt.include_last_offset << " psw " << !e["per_sample_weights"].is_null());
        auto bag = nn::EmbeddingBag::from(nn_ck(), e["prefix"].as_string(), r, opt);
        REQUIRE(bag.ok());
        const auto idx = ints(e["indices"]);
        const auto offs = ints(e["offsets"]);
        const size_t bags = offs.size() - (opt.include_last_offset ? 1 : 0);
        const auto want = floats(e["out"]);
        REQUIRE(want.size() == bags * bag->dim());
        std::vector<float> psw;
        if (!e["per_sample_weights"].is_null()) psw = floats(e["per_sample_weights"]);
        std::vector<float> out(want.size(), -777.0f);
        REQUIRE(bag->forward(idx.data(), idx.size(), offs.data(), bags, psw.empty() ? nullptr : psw.data(),
                             out.data()).ok());
        // Bit for bit, every reduction: the same sums in the same order, rounded as torch
        // rounds them (fused with fbgemm, product then sum in its padding_idx loop). Sums
        // whose terms cancel are where a tolerance would not do.
        for (size_t k = 0; k < want.size(); ++k) {
          INFO("element " << k << ": " << out[k] << " against torch's " << want[k]);
          CHECK(out[k] == want[k]);
        }
        const auto idx32 = narrow(idx), offs32 = narrow(offs);
        std::vector<float> out32(want.size(), -777.0f);
        REQUIRE(bag->forward(idx32.data(), idx32.size(), offs32.data(), bags, psw.empty() ? nullptr : psw.data(),
                             out32.data()).ok());
        CHECK(out32 == out);
      }
    }
  }
}

namespace {

// y [m x N] against torch's want, within a tolerance from the sum of |x_k w_k| (what any
// summation order can differ by); w [N x K] as torch widens it.
void check_close(const std::vector<float>& y, const std::vector<float>& want, const std::vector<float>& x,
                 const std::vector<float>& w, const std::vector<float>& bias, size_t m, size_t N, size_t K) {
  size_t bad = 0;
  for (size_t i = 0; i < m; ++i) {
    for (size_t o = 0; o < N; ++o) {
      double mag = std::fabs(bias[o]);
      for (size_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(x[i * K + k]) * w[o * K + k]);
      const double err = std::fabs(static_cast<double>(y[i * N + o]) - want[i * N + o]);
      if (err > 2e-6 * mag + 1e-7) {
        if (bad++ < 5) FAIL_CHECK("y[" << i << "][" << o << "] = " << y[i * N + o] << ", torch " << want[i * N + o]);
      }
    }
  }
  CHECK(bad == 0);
}

// Checks every Linear case of expected.json; returns how many have enough rows of x for the
// packed product (compute/gemm.hpp).
template <class MakeLinear>
size_t check_linear_cases(MakeLinear make, const char* what) {
  const Json& cases = nn_json()["linear"];
  REQUIRE(cases.size() >= 30);
  size_t packed = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Json& e = cases[c];
    const std::string prefix = e["prefix"].as_string();
    const auto m = static_cast<size_t>(e["m"].as_int());
    INFO(what << " case " << c << " " << prefix << " m " << m);
    auto fc = make(prefix);
    REQUIRE(fc.ok());
    const size_t K = fc->in_features(), N = fc->out_features();
    if (m >= ptread::detail::kGemmMinRows) ++packed;
    const auto x = e["x"].is_string() ? formula_x(m, K) : floats(e["x"]);
    REQUIRE(x.size() == m * K);
    const std::vector<float> want = ptread_test::linear_out(e, m, N);
    REQUIRE(want.size() == m * N);
    std::vector<float> y(m * N, -777.0f);
    REQUIRE(fc->forward(x.data(), m, y.data()).ok());
    const auto w = fc->weight().to_float32().value();
    const ptread::Tensor* b = nn_ck().find(prefix + ".bias");
    const std::vector<float> bias = b ? b->to_float32().value() : std::vector<float>(N, 0.0f);
    check_close(y, want, x, w, bias, m, N, K);
  }
  return packed;
}

}  // namespace

TEST_CASE("Linear (portable) equals F.linear", "[nn]") {
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (unsigned threads : {1u, 2u, 3u}) {
      const std::string what = std::string("portable ") + ptread::detail::nn_isa_name(isa) + " threads " +
                               std::to_string(threads);
      const size_t packed = check_linear_cases(
          [&](const std::string& prefix) {
            nn::LinearOptions opt;
            opt.threads = threads;
            return nn::Linear::from(nn_ck(), prefix, opt);
          },
          what.c_str());
      // The packed product runs at every x86 level but the generic one, on the cases with
      // enough rows (fc_big's 133, fc_wide's and fc_mid's 43), for each weight dtype.
      CHECK(packed >= 6);
      for (ptread::DType dt : {ptread::DType::F32, ptread::DType::F16, ptread::DType::BF16}) {
        CHECK((ptread::detail::nn_gemm(dt).run != nullptr) == (PTREAD_NN_X86 && isa != NnIsa::generic));
      }
    }
  }
  auto fc = nn::Linear::from(nn_ck(), "fc_f16");
  REQUIRE(fc.ok());
  CHECK(fc->in_features() == 37);
  CHECK(fc->out_features() == 24);
  CHECK(fc->has_bias());
  CHECK(std::string(fc->backend_name()) == "portable");
  CHECK(fc->weight().data_ptr() == nn_ck().find("fc_f16.weight")->data_ptr());  // read in place
  auto nb = nn::Linear::from(nn_ck(), "fc_nobias");
  REQUIRE(nb.ok());
  CHECK_FALSE(nb->has_bias());
}

TEST_CASE("Linear's tiles split across threads give the bits of one thread", "[nn]") {
  // A 2048 x 1024 F32 weight (8 MiB): at M = 1 and 2 the call is small (under 8M
  // multiply-adds and 16 MiB of W: split only when a worker is awake or calls come back to
  // back, as these do), at M = 4 and 24 its output features are split into tasks (the
  // dot-product tiles: under kGemmMinRows rows). Each output is summed by one thread in the
  // same order either way, so the bits must not change.
  const size_t N = 2048, K = 1024;
  auto bytes = std::make_shared<std::vector<float>>(N * K);
  for (size_t k = 0; k < bytes->size(); ++k) (*bytes)[k] = static_cast<float>(static_cast<int>(k % 97) - 48) / 64.0f;
  auto storage = std::make_shared<const ptread::Storage>(reinterpret_cast<const uint8_t*>(bytes->data()),
                                                         bytes->size() * sizeof(float), bytes);
  const std::vector<int64_t> shape{static_cast<int64_t>(N), static_cast<int64_t>(K)}, strides{static_cast<int64_t>(K), 1};
  auto wt = ptread::Tensor::view(storage, ptread::DType::F32, shape, strides, 0);
  REQUIRE(wt.ok());
  std::vector<ptread::NamedTensor> items;
  items.push_back({"fc.weight", *wt});
  const ptread_test::TempFile file("nn_split.pt");
  REQUIRE(ptread::save_pt(file.path, items).ok());
  auto ck = ptread::Checkpoint::open(file.path, ptread::Options{});
  REQUIRE(ck.ok());
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (size_t m : {size_t{1}, size_t{2}, size_t{4}, size_t{24}}) {
      INFO("isa " << ptread::detail::nn_isa_name(isa) << " m " << m);
      std::vector<float> x(m * K);
      for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(static_cast<int>(k % 31) - 15) / 16.0f;
      std::vector<float> one(m * N, -1.0f), two(m * N, -2.0f), three(m * N, -3.0f);
      nn::LinearOptions o1, o2, o3;
      o1.threads = 1;
      o2.threads = 2;
      o3.threads = 3;
      REQUIRE(nn::Linear::from(*ck, "fc", o1)->forward(x.data(), m, one.data()).ok());
      REQUIRE(nn::Linear::from(*ck, "fc", o2)->forward(x.data(), m, two.data()).ok());
      REQUIRE(nn::Linear::from(*ck, "fc", o3)->forward(x.data(), m, three.data()).ok());
      CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
      // And one value, in double: every product and partial sum is a multiple of 2^-10 under
      // 2^10 in magnitude, exact in float in any order.
      double want = 0;
      for (size_t k = 0; k < K; ++k) want += static_cast<double>(x[k]) * static_cast<double>((*bytes)[5 * K + k]);
      CHECK(static_cast<double>(one[5]) == want);
    }
  }
}

namespace {

// Whether this system maps memory with 2 MiB pages on request: Linux's madvise(MADV_HUGEPAGE)
// taken on fresh anonymous memory.
bool huge_pages_offered() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const size_t len = size_t{8} << 20;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const auto range = ptread::detail::whole_huge_pages(p, len);
  const bool ok = ::madvise(reinterpret_cast<void*>(range.first), range.second - range.first, MADV_HUGEPAGE) == 0;
  ::munmap(p, len);
  return ok;
#else
  return false;
#endif
}

}  // namespace

TEST_CASE("Embedding and EmbeddingBag ask for 2 MiB pages on a mapped table", "[nn]") {
  using ptread::detail::whole_huge_pages;
  const uintptr_t M2 = uintptr_t{2} << 20;
  // The whole 2 MiB pages inside a range.
  CHECK(whole_huge_pages(reinterpret_cast<const void*>(4 * M2), 2 * M2) == std::make_pair(4 * M2, 6 * M2));
  CHECK(whole_huge_pages(reinterpret_cast<const void*>(4 * M2 + 64), 2 * M2) == std::make_pair(5 * M2, 6 * M2));
  CHECK(whole_huge_pages(reinterpret_cast<const void*>(4 * M2 + 64), 3 * M2) == std::make_pair(5 * M2, 7 * M2));
  CHECK(whole_huge_pages(reinterpret_cast<const void*>(4 * M2 + 64), 2 * M2 - 128) == std::make_pair(uintptr_t{0}, uintptr_t{0}));
  CHECK(whole_huge_pages(reinterpret_cast<const void*>(4 * M2), M2 - 1) == std::make_pair(uintptr_t{0}, uintptr_t{0}));
  CHECK(whole_huge_pages(reinterpret_cast<const void*>(UINTPTR_MAX - M2), 4 * M2) == std::make_pair(uintptr_t{0}, uintptr_t{0}));
  // Tables up to half the memory; none when the memory is unknown.
  CHECK(nn::detail::huge_table(8ull << 30, 16ull << 30));
  CHECK_FALSE(nn::detail::huge_table((8ull << 30) + 1, 16ull << 30));
  CHECK_FALSE(nn::detail::huge_table(1, 0));

  // A 4096 x 1024 F32 table (16 MiB): whole 2 MiB pages lie inside it wherever it lands.
  const size_t rows = 4096, dim = 1024;
  auto bytes = std::make_shared<std::vector<float>>(rows * dim);
  for (size_t k = 0; k < bytes->size(); ++k) (*bytes)[k] = static_cast<float>(k % 1021);
  auto storage = std::make_shared<const ptread::Storage>(reinterpret_cast<const uint8_t*>(bytes->data()),
                                                         bytes->size() * sizeof(float), bytes);
  auto wt = ptread::Tensor::view(storage, ptread::DType::F32,
                                 std::vector<int64_t>{static_cast<int64_t>(rows), static_cast<int64_t>(dim)},
                                 std::vector<int64_t>{static_cast<int64_t>(dim), 1}, 0);
  REQUIRE(wt.ok());
  std::vector<ptread::NamedTensor> items;
  items.push_back({"emb.weight", *wt});
  const ptread_test::TempFile file("nn_huge.pt");
  REQUIRE(ptread::save_pt(file.path, items).ok());
  const bool offered = huge_pages_offered();
  const int64_t idx[] = {4095, 0, 1234};
  const int64_t offsets[] = {0};

  SECTION("mmap mode: advised where the system offers it, the rows unchanged") {
    auto ck = ptread::Checkpoint::open(file.path);
    REQUIRE(ck.ok());
    auto emb = nn::Embedding::from(*ck, "emb");
    REQUIRE(emb.ok());
    CHECK(emb->huge_pages() == offered);
    auto bag = nn::EmbeddingBag::from(*ck, "emb", nn::Reduce::max);
    REQUIRE(bag.ok());
    CHECK(bag->huge_pages() == offered);
    const auto* table = static_cast<const float*>(emb->weight().data_ptr());
    const auto inside = whole_huge_pages(table, rows * dim * sizeof(float));
    REQUIRE(inside.first != inside.second);
#if defined(__linux__)
    // The kernel marks the mapping of the whole pages inside the table ("hg": VM_HUGEPAGE;
    // "rr": VM_RAND_READ, MADV_RANDOM).
    const std::string flags = ptread_test::vm_flags(reinterpret_cast<const void*>(inside.first));
    CHECK((flags.find(" hg ") != std::string::npos) == offered);
    CHECK((flags.find(" rr ") != std::string::npos) == offered);
#endif
    std::vector<float> out(3 * dim), pooled(dim);
    REQUIRE(emb->forward(idx, 3, out.data()).ok());
    REQUIRE(bag->forward(idx, 3, offsets, 1, nullptr, pooled.data()).ok());
    for (size_t i = 0; i < 3; ++i) {
      CHECK(std::memcmp(out.data() + i * dim, bytes->data() + static_cast<size_t>(idx[i]) * dim, dim * sizeof(float)) == 0);
    }
    for (size_t c = 0; c < dim; ++c) {
      float want = (*bytes)[c];
      for (int64_t r : idx) want = std::max(want, (*bytes)[static_cast<size_t>(r) * dim + c]);
      CHECK(pooled[c] == want);
    }
  }
  SECTION("mmap mode with huge_pages = false: never advised") {
    auto ck = ptread::Checkpoint::open(file.path);
    REQUIRE(ck.ok());
    nn::EmbeddingOptions o;
    o.huge_pages = false;
    auto emb = nn::Embedding::from(*ck, "emb", o);
    REQUIRE(emb.ok());
    CHECK_FALSE(emb->huge_pages());
    CHECK_FALSE(nn::EmbeddingBag::from(*ck, "emb", nn::Reduce::sum, o)->huge_pages());
#if defined(__linux__)
    const auto inside = whole_huge_pages(emb->weight().data_ptr(), rows * dim * sizeof(float));
    const std::string flags = ptread_test::vm_flags(reinterpret_cast<const void*>(inside.first));
    CHECK_FALSE(flags.empty());
    CHECK(flags.find(" hg ") == std::string::npos);
    CHECK(flags.find(" rr ") == std::string::npos);
#endif
  }
  SECTION("read mode and the caller's memory: not advised") {
    ptread::Options ro;
    ro.mode = ptread::LoadMode::read;
    auto ck = ptread::Checkpoint::open(file.path, ro);
    REQUIRE(ck.ok());
    CHECK_FALSE(nn::Embedding::from(*ck, "emb")->huge_pages());
    std::vector<uint8_t> image = ptread_test::read_file(file.path);
    auto mem = ptread::Checkpoint::open_memory(image.data(), image.size());
    REQUIRE(mem.ok());
    CHECK_FALSE(nn::EmbeddingBag::from(*mem, "emb", nn::Reduce::mean)->huge_pages());
  }
}

TEST_CASE("set_spin_wait sets how long the layers' workers poll, within [0, 1 s]", "[nn]") {
  const auto before = nn::spin_wait();
  CHECK(before == std::chrono::microseconds(500));  // the default
  nn::set_spin_wait(std::chrono::microseconds(0));
  CHECK(nn::spin_wait().count() == 0);
  nn::set_spin_wait(std::chrono::microseconds(-5));
  CHECK(nn::spin_wait().count() == 0);
  nn::set_spin_wait(std::chrono::seconds(30));
  CHECK(nn::spin_wait() == std::chrono::seconds(1));
  nn::set_spin_wait(std::chrono::microseconds(750));
  CHECK(nn::spin_wait().count() == 750);
  nn::set_spin_wait(before);
}

TEST_CASE("Linear's packed product over several blocks of W rows equals F.linear", "[nn]") {
  // detail::nn_gemm itself, on all 520 rows of fc_wide_f32 at once: more than one block of
  // kGemmNc rows, which Linear never hands one task (its tasks are a block at most).
  IsaRestore restore;
  const ptread::Tensor* wt = nn_ck().find("fc_wide_f32.weight");
  const ptread::Tensor* bt = nn_ck().find("fc_wide_f32.bias");
  const ptread::Tensor* out = ptread_test::nn_outputs().find("fc_wide_f32.m43");
  REQUIRE(wt != nullptr);
  REQUIRE(bt != nullptr);
  REQUIRE(out != nullptr);
  const size_t N = 520, K = 40, m = 43;
  REQUIRE(wt->shape() == std::vector<int64_t>{520, 40});
  REQUIRE(N > ptread::detail::kGemmNc);
  REQUIRE(m > ptread::detail::kGemmMc);
  const auto w = wt->to_float32().value(), bias = bt->to_float32().value(), want = out->to_float32().value();
  const auto x = formula_x(m, K);
  size_t levels = 0;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    const ptread::detail::NnGemm gemm = ptread::detail::nn_gemm(ptread::DType::F32);
    if (isa == NnIsa::generic) {  // no packed product there: Linear keeps its tiles
      CHECK(gemm.run == nullptr);
      continue;
    }
    INFO("isa " << ptread::detail::nn_isa_name(isa));
    REQUIRE(gemm.run != nullptr);
    ++levels;
    std::vector<float> y(m * N), scratch(ptread::detail::kGemmScratchFloats);
    for (size_t i = 0; i < m; ++i) std::copy(bias.begin(), bias.end(), y.begin() + static_cast<std::ptrdiff_t>(i * N));
    gemm.run(x.data(), m, K, wt->data_ptr(), K, y.data(), N, N, scratch.data());
    check_close(y, want, x, w, bias, m, N, K);
  }
  CHECK(levels == (PTREAD_NN_X86 ? isa_levels().size() - 1 : 0));
}

#ifdef PTREAD_TEST_OPENBLAS
TEST_CASE("Linear (OpenBLAS) equals F.linear", "[nn][openblas]") {
  for (int threads : {0, 1, 2}) {
    check_linear_cases(
        [&](const std::string& prefix) {
          nn::LinearOptions opt;
          opt.backend = nn::openblas_backend(threads);
          return nn::Linear::from(nn_ck(), prefix, opt);
        },
        "openblas");
  }
  nn::LinearOptions opt;
  opt.backend = nn::openblas_backend();
  auto fc = nn::Linear::from(nn_ck(), "fc_f32", opt);
  REQUIRE(fc.ok());
  CHECK(std::string(fc->backend_name()) == "openblas");
  std::vector<float> x(37, 0.5f), y(24);
  CHECK(fc->forward(nullptr, 1, y.data()).code() == ptread::ErrorCode::invalid_argument);
  CHECK(fc->forward(x.data(), 0, nullptr).ok());
}
#endif

TEST_CASE("nn layers reject bad weights and names", "[nn]") {
  using ptread::ErrorCode;
  const auto& ck = nn_ck();
  CHECK(nn::Linear::from(ck, "nothere").code() == ErrorCode::not_found);
  CHECK(nn::Embedding::from(ck, "model").code() == ErrorCode::not_found);
  CHECK(nn::Embedding::from(ck, "bad_rank").code() == ErrorCode::invalid_argument);
  CHECK(nn::Linear::from(ck, "bad_int").code() == ErrorCode::dtype_mismatch);
  CHECK(nn::EmbeddingBag::from(ck, "bad_int", nn::Reduce::sum).code() == ErrorCode::dtype_mismatch);
  auto bias = nn::Linear::from(ck, "bad_bias");
  REQUIRE(bias.code() == ErrorCode::invalid_argument);
  CHECK(bias.error().str().find("bad_bias.bias") != std::string::npos);
  nn::EmbeddingOptions pad;
  pad.padding_idx = 50;
  CHECK(nn::Embedding::from(ck, "emb_f32", pad).code() == ErrorCode::invalid_argument);
  pad.padding_idx = -51;
  CHECK(nn::EmbeddingBag::from(ck, "emb_f32", nn::Reduce::mean, pad).code() == ErrorCode::invalid_argument);
  pad.padding_idx = -50;
  auto ok = nn::Embedding::from(ck, "emb_f32", pad);
  REQUIRE(ok.ok());
  CHECK(ok->padding_idx() == 0);
}

// The index check the layers run before reading reads blocks of 16 (32 int32 indices with
// AVX2) and looks inside a block only when it holds a bad index: at every level, for every
// position of one bad index in arrays of every length up to 70 (blocks, tails), and for
// each kind of bad value, it must name the first bad position, as a test per index does.
TEST_CASE("the index check finds the first index outside the table", "[nn]") {
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    ptread::detail::nn_set_isa(isa);
    for (uint64_t num : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, uint64_t{0x7fffffff}, uint64_t{0x80000000},
                         uint64_t{1} << 40}) {
      const int64_t bads[] = {-1, INT64_MIN, static_cast<int64_t>(num), static_cast<int64_t>(num) + 5, INT64_MAX};
      for (size_t n = 0; n <= 70; ++n) {
        for (size_t at = 0; at <= n; ++at) {  // at == n: no bad index (when num > 0)
          for (int64_t bad : bads) {
            std::vector<int64_t> idx(n);
            for (size_t i = 0; i < n; ++i) idx[i] = num == 0 ? 0 : static_cast<int64_t>((i * 7919) % num);
            if (at < n) idx[at] = bad;
            std::vector<int32_t> idx32(n);
            for (size_t i = 0; i < n; ++i) idx32[i] = static_cast<int32_t>(idx[i]);  // wraps the large ones
            auto first_bad = [num](const auto& v) {
              for (size_t i = 0; i < v.size(); ++i) {
                const auto x = static_cast<int64_t>(v[i]);
                if (x < 0 || static_cast<uint64_t>(x) >= num) return i;
              }
              return v.size();
            };
            INFO("isa " << ptread::detail::nn_isa_name(isa) << " num " << num << " n " << n << " at " << at << " bad "
                        << bad);
            CHECK(ptread::detail::nn_first_bad_index(idx.data(), n, num) == first_bad(idx));
            CHECK(ptread::detail::nn_first_bad_index(idx32.data(), n, num) == first_bad(idx32));
          }
        }
      }
    }
  }
}

TEST_CASE("nn layers reject bad indices and offsets before reading", "[nn]") {
  using ptread::ErrorCode;
  const auto& ck = nn_ck();
  auto emb = nn::Embedding::from(ck, "emb_f16").value();
  std::vector<float> out(4 * 12, -777.0f);
  const std::vector<float> untouched = out;
  const int64_t past[] = {0, 50, 1, 2};
  auto st = emb.forward(past, 4, out.data());
  CHECK(st.code() == ErrorCode::invalid_argument);
  CHECK(st.error().str().find("index 50 at position 1") != std::string::npos);
  const int64_t neg[] = {0, -1};
  CHECK(emb.forward(neg, 2, out.data()).code() == ErrorCode::invalid_argument);
  const int32_t neg32[] = {3, -2147483647 - 1};
  CHECK(emb.forward(neg32, 2, out.data()).code() == ErrorCode::invalid_argument);
  const int64_t huge[] = {INT64_MAX};
  CHECK(emb.forward(huge, 1, out.data()).code() == ErrorCode::invalid_argument);
  CHECK(out == untouched);
  CHECK(emb.forward(static_cast<const int64_t*>(nullptr), 3, out.data()).code() == ErrorCode::invalid_argument);
  CHECK(emb.forward(past, 1, nullptr).code() == ErrorCode::invalid_argument);
  CHECK(emb.forward(static_cast<const int64_t*>(nullptr), 0, nullptr).ok());

  const int64_t idx[] = {1, 2, 3, 4, 5};
  const float psw[] = {1, 1, 1, 1, 1};
  auto check_bag = [&](nn::Reduce r, bool ilo, std::vector<int64_t> offs, size_t bags, const float* w,
                       const char* needle) {
    nn::EmbeddingOptions opt;
    opt.include_last_offset = ilo;
    auto bag = nn::EmbeddingBag::from(ck, "emb_f32", r, opt).value();
    std::vector<float> o(bags * 12 + 1, -777.0f);
    const std::vector<float> before = o;
    auto s = bag.forward(idx, 5, offs.data(), bags, w, o.data());
    INFO(needle);
    REQUIRE(s.code() == ErrorCode::invalid_argument);
    CHECK(s.error().str().find(needle) != std::string::npos);
    CHECK(o == before);
  };
  check_bag(nn::Reduce::sum, false, {1, 3}, 2, nullptr, "offsets[0] is 1");
  check_bag(nn::Reduce::sum, false, {0, 3, 2}, 3, nullptr, "offsets decrease at 2");
  check_bag(nn::Reduce::sum, false, {0, 6}, 2, nullptr, "past the 5 indices");
  check_bag(nn::Reduce::sum, true, {0, 2, 6}, 2, nullptr, "past the 5 indices");
  check_bag(nn::Reduce::sum, true, {0, 2, 4}, 2, nullptr, "ends the last bag at 4");
  check_bag(nn::Reduce::mean, false, {0, 2}, 2, psw, "only supported for Reduce::sum");
  check_bag(nn::Reduce::max, false, {0, 2}, 2, psw, "only supported for Reduce::sum");
  const int64_t bad_idx[] = {1, 2, 3, 4, 99};
  auto bag = nn::EmbeddingBag::from(ck, "emb_f32", nn::Reduce::sum).value();
  const int64_t offs[] = {0, 2};
  std::vector<float> o(2 * 12);
  CHECK(bag.forward(bad_idx, 5, offs, 2, nullptr, o.data()).code() == ErrorCode::invalid_argument);
  CHECK(bag.forward(idx, 5, static_cast<const int64_t*>(nullptr), 2, nullptr, o.data()).code() ==
        ErrorCode::invalid_argument);
  CHECK(bag.forward(idx, 5, offs, 0, nullptr, nullptr).ok());  // no bags: nothing to write

  auto fc = nn::Linear::from(ck, "fc_f32").value();
  std::vector<float> x(37), y(24);
  CHECK(fc.forward(nullptr, 1, y.data()).code() == ErrorCode::invalid_argument);
  CHECK(fc.forward(x.data(), 1, nullptr).code() == ErrorCode::invalid_argument);
  CHECK(fc.forward(x.data(), SIZE_MAX / 2, y.data()).code() == ErrorCode::invalid_argument);
  CHECK(fc.forward(nullptr, 0, nullptr).ok());
}

TEST_CASE("nn layers keep the mapping alive past the Checkpoint", "[nn]") {
  ptread::Result<nn::Embedding> emb = ptread::Error();
  {
    auto ck = ptread::Checkpoint::open(nn_dir() + "/nn.pt");
    REQUIRE(ck.ok());
    emb = nn::Embedding::from(*ck, "model.emb");
  }
  REQUIRE(emb.ok());
  const auto& e = nn_json()["embedding"];
  for (size_t c = 0; c < e.size(); ++c) {
    if (e[c]["prefix"].as_string() != "model.emb") continue;
    const auto idx = ints(e[c]["indices"]);
    std::vector<float> out(idx.size() * emb->dim());
    REQUIRE(emb->forward(idx.data(), idx.size(), out.data()).ok());
    CHECK(out == floats(e[c]["out"]));
  }
}
