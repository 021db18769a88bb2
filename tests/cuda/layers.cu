// cuda::Linear, cuda::Embedding, cuda::EmbeddingBag and the split helpers on a GPU, each
// against the CPU nn layer on the same weights (and torch's outputs on the nn fixtures), and
// the errors: the same messages as the CPU layers, out left untouched.
#include <ptread/cuda.cuh>

#include <catch2/catch.hpp>

#include "support/cases.hpp"
#include "support/device.hpp"

#include <string>
#include <vector>

namespace {

using namespace ptread_test;
namespace pc = ptread::cuda;
namespace nn = ptread::nn;

std::vector<float> run(const pc::Linear& fc, const std::vector<float>& x, size_t m) {
  auto dx = to_device(x);
  auto dy = device_floats(m * fc.out_features(), -777.0f);
  REQUIRE(fc.forward(static_cast<const float*>(dx.data()), m, static_cast<float*>(dy.data())).ok());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return from_device<float>(dy.data(), m * fc.out_features());
}

// A Linear big enough for the 128- and 64-row tiles on a GPU of ~100+ SMs (the emulated
// tests cover every tile on any machine).
const std::vector<uint8_t>& big_linear_file() {
  static const std::vector<uint8_t> file = [] {
    StateDict sd;
    sd.add("big_f32.weight", ptread::DType::F32, {1536, 256}, test_values(1536 * 256, 30));
    sd.add("big_f32.bias", ptread::DType::F32, {1536}, test_values(1536, 31));
    sd.add("big_bf16.weight", ptread::DType::BF16, {1536, 256}, test_values(1536 * 256, 30));
    return sd.build();
  }();
  return file;
}

}  // namespace

TEST_CASE("cuda::Linear equals the CPU Linear, every batch kernel, from a checkpoint and from an upload", "[cuda][linear]") {
  const ptread::Checkpoint& ck = linear_ck();
  pc::UploadOptions conv;
  conv.convert_to_f32 = true;
  auto as_stored = pc::upload(ck);
  auto widened = pc::upload(ck, conv);
  REQUIRE(as_stored.ok());
  REQUIRE(widened.ok());
  for (const std::string& prefix : linear_prefixes()) {
    auto cpu = nn::Linear::from(ck, prefix);
    REQUIRE(cpu.ok());
    auto a = pc::Linear::from(ck, prefix);
    auto b = pc::Linear::from(*as_stored, prefix);  // strided_f32: the device copy of a strided weight
    auto c = pc::Linear::from(*widened, prefix);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(c.ok());
    CHECK(a->dtype() == cpu->weight().dtype());
    CHECK(c->dtype() == ptread::DType::F32);
    CHECK(a->has_bias() == (ck.find(prefix + ".bias") != nullptr));
    for (size_t m : linear_batches()) {
      INFO(prefix << " m=" << m);
      const auto x = test_values(m * cpu->in_features(), static_cast<uint32_t>(40 + m));
      check_linear_close(*cpu, ck, prefix, x, m, run(*a, x, m));
      check_linear_close(*cpu, ck, prefix, x, m, run(*b, x, m));
      check_linear_close(*cpu, ck, prefix, x, m, run(*c, x, m));
    }
  }
}

TEST_CASE("cuda::Linear equals torch's F.linear on the nn fixtures, and the large tiles the CPU", "[cuda][linear]") {
  const Json& cases = nn_json()["linear"];
  for (size_t c = 0; c < cases.size(); ++c) {
    auto fc = pc::Linear::from(nn_ck(), cases[c]["prefix"].as_string());
    REQUIRE(fc.ok());
    const LinearCase k = linear_case(cases[c], fc->in_features(), fc->out_features());
    INFO(k.prefix << " m=" << k.m);
    check_torch_close(run(*fc, k.x, k.m), k.torch);
  }
  if (PTREAD_CUDA_EMULATE) return;  // (emulated, these take long; kernels_emulated.cpp covers every tile)
  auto ck = ptread::Checkpoint::open_memory(big_linear_file().data(), big_linear_file().size());
  REQUIRE(ck.ok());
  for (const char* prefix : {"big_f32", "big_bf16"}) {
    auto cpu = nn::Linear::from(*ck, prefix);
    auto fc = pc::Linear::from(*ck, prefix);
    REQUIRE(cpu.ok());
    REQUIRE(fc.ok());
    for (size_t m : {size_t{700}, size_t{1536}}) {
      INFO(prefix << " m=" << m);
      const auto x = test_values(m * 256, static_cast<uint32_t>(m));
      check_linear_close(*cpu, *ck, prefix, x, m, run(*fc, x, m));
    }
  }
}

TEST_CASE("cuda::Linear errors are the CPU layer's", "[cuda][linear]") {
  for (const char* prefix : {"bad_rank", "bad_int", "missing"}) {
    INFO(prefix);
    auto cpu = nn::Linear::from(nn_ck(), prefix);
    auto dev = pc::Linear::from(nn_ck(), prefix);
    REQUIRE_FALSE(cpu.ok());
    REQUIRE_FALSE(dev.ok());
    CHECK(dev.error().str() == cpu.error().str());
  }
  auto fc = pc::Linear::from(nn_ck(), "fc_f32");
  REQUIRE(fc.ok());
  CHECK(fc->forward(nullptr, 1, nullptr).code() == ptread::ErrorCode::invalid_argument);
  CHECK(fc->forward(nullptr, 0, nullptr).ok());
}

TEST_CASE("cuda::Embedding and EmbeddingBag equal the CPU layers on every torch case", "[cuda][embedding]") {
  const Json& ecases = nn_json()["embedding"];
  for (size_t c = 0; c < ecases.size(); ++c) {
    const EmbeddingCase k = embedding_case(ecases[c]);
    INFO("embedding case " << c << " " << k.prefix);
    auto dev = pc::Embedding::from(nn_ck(), k.prefix, k.opt);
    REQUIRE(dev.ok());
    CHECK(dev->padding_idx() == k.padding);
    auto di = to_device(k.idx);
    auto di32 = to_device(narrow(k.idx));
    auto out = device_floats(k.want.size(), -777.0f);
    REQUIRE(dev->forward(static_cast<const int64_t*>(di.data()), k.idx.size(), static_cast<float*>(out.data())).ok());
    check_bag_close(from_device<float>(out.data(), k.want.size()), k.want, true);
    auto out32 = device_floats(k.want.size(), -777.0f);
    REQUIRE(dev->forward(static_cast<const int32_t*>(di32.data()), k.idx.size(), static_cast<float*>(out32.data())).ok());
    check_bag_close(from_device<float>(out32.data(), k.want.size()), k.want, true);
  }
  const Json& bcases = nn_json()["embedding_bag"];
  for (size_t c = 0; c < bcases.size(); ++c) {
    const BagCase k = bag_case(bcases[c]);
    INFO("bag case " << c << " " << k.prefix << " " << nn::reduce_name(k.mode));
    auto dev = pc::EmbeddingBag::from(nn_ck(), k.prefix, k.mode, k.opt);
    REQUIRE(dev.ok());
    auto di = to_device(k.idx);
    auto doff = to_device(k.offs);
    auto dpsw = to_device(k.psw);
    const float* psw = k.psw.empty() ? nullptr : static_cast<const float*>(dpsw.data());
    auto out = device_floats(k.want.size(), -777.0f);
    REQUIRE(dev->forward(static_cast<const int64_t*>(di.data()), k.idx.size(), static_cast<const int64_t*>(doff.data()),
                         k.bags, psw, static_cast<float*>(out.data()))
                .ok());
    const auto got = from_device<float>(out.data(), k.want.size());
    check_bag_close(got, k.want, k.mode == nn::Reduce::max);
    check_bag_close(got, k.torch, k.mode == nn::Reduce::max);
    auto di32 = to_device(narrow(k.idx));
    auto doff32 = to_device(narrow(k.offs));
    auto out32 = device_floats(k.want.size(), -777.0f);
    REQUIRE(dev->forward(static_cast<const int32_t*>(di32.data()), k.idx.size(),
                         static_cast<const int32_t*>(doff32.data()), k.bags, psw, static_cast<float*>(out32.data()))
                .ok());
    CHECK(from_device<float>(out32.data(), k.want.size()) == got);
  }
}

TEST_CASE("cuda::EmbeddingBag and Embedding refuse what the CPU layers refuse, with their messages", "[cuda][embedding]") {
  nn::EmbeddingOptions last;
  last.include_last_offset = true;
  auto cpu = nn::EmbeddingBag::from(nn_ck(), "emb_f32", nn::Reduce::sum);
  auto dev = pc::EmbeddingBag::from(nn_ck(), "emb_f32", nn::Reduce::sum);
  auto cpu_last = nn::EmbeddingBag::from(nn_ck(), "emb_f32", nn::Reduce::sum, last);
  auto dev_last = pc::EmbeddingBag::from(nn_ck(), "emb_f32", nn::Reduce::sum, last);
  REQUIRE(cpu.ok());
  REQUIRE(dev.ok());
  REQUIRE(cpu_last.ok());
  REQUIRE(dev_last.ok());
  struct Case {
    std::vector<int64_t> idx, offs;
    bool last;
  };
  const std::vector<Case> cases = {
      {{1, 2, 3, 50}, {0, 2}, false},          // index past the table
      {{1, -2, 3, 4}, {0, 2}, false},          // negative index
      {{1, 2, 3, 4}, {1, 2}, false},           // offsets[0] != 0
      {{1, 2, 3, 4}, {0, 3, 2}, false},        // decreasing
      {{1, 2, 3, 4}, {0, 2, 5}, false},        // past n
      {{1, 2, 3, 4}, {0, 2, 3}, true},         // the last offset must be n
      {{1, 2, 99, 4}, {0, 3, 2}, false},       // both: the offsets are reported first
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    INFO("case " << c);
    const size_t bags = k.offs.size() - (k.last ? 1 : 0);
    std::vector<float> host_out(bags * 12);
    const auto want = (k.last ? *cpu_last : *cpu).forward(k.idx.data(), k.idx.size(), k.offs.data(), bags, nullptr,
                                                          host_out.data());
    REQUIRE_FALSE(want.ok());
    auto di = to_device(k.idx);
    auto doff = to_device(k.offs);
    auto out = device_floats(bags * 12, -777.0f);
    const auto got = (k.last ? *dev_last : *dev).forward(static_cast<const int64_t*>(di.data()), k.idx.size(),
                                                         static_cast<const int64_t*>(doff.data()), bags, nullptr,
                                                         static_cast<float*>(out.data()));
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().str() == want.error().str());
    CHECK(from_device<float>(out.data(), bags * 12) == std::vector<float>(bags * 12, -777.0f));  // untouched
  }
  auto mean = pc::EmbeddingBag::from(nn_ck(), "emb_f32", nn::Reduce::mean);
  REQUIRE(mean.ok());
  auto psw = device_floats(4, 1.0f);
  CHECK(mean->forward(static_cast<const int64_t*>(nullptr), 0, static_cast<const int64_t*>(nullptr), 0,
                      static_cast<const float*>(psw.data()), nullptr)
            .code() == ptread::ErrorCode::invalid_argument);

  auto emb = pc::Embedding::from(nn_ck(), "emb_bf16");
  auto emb_cpu = nn::Embedding::from(nn_ck(), "emb_bf16");
  REQUIRE(emb.ok());
  REQUIRE(emb_cpu.ok());
  const std::vector<int32_t> bad = {0, 49, 50, 7};
  std::vector<float> host_out(4 * 12);
  const auto want = emb_cpu->forward(bad.data(), bad.size(), host_out.data());
  auto di = to_device(bad);
  auto out = device_floats(4 * 12, -777.0f);
  const auto got = emb->forward(static_cast<const int32_t*>(di.data()), bad.size(), static_cast<float*>(out.data()));
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().str() == want.error().str());
  CHECK(from_device<float>(out.data(), 4 * 12) == std::vector<float>(4 * 12, -777.0f));

  for (const char* prefix : {"bad_rank", "bad_int", "missing"}) {
    auto c = nn::Embedding::from(nn_ck(), prefix);
    auto d = pc::Embedding::from(nn_ck(), prefix);
    REQUIRE_FALSE(c.ok());
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().str() == c.error().str());
  }
}

TEST_CASE("split: rows gathered on the CPU, shipped through pinned memory, a Linear on the GPU", "[cuda][split]") {
  auto emb = nn::Embedding::from(nn_ck(), "emb_f16");  // the table stays in host memory
  auto bag = nn::EmbeddingBag::from(nn_ck(), "emb_f16", nn::Reduce::mean);
  REQUIRE(emb.ok());
  REQUIRE(bag.ok());
  StateDict sd;  // a head for the table's 12-wide rows
  sd.add("fc.weight", ptread::DType::BF16, {5, 12}, test_values(60, 50));
  sd.add("fc.bias", ptread::DType::F32, {5}, test_values(5, 51));
  const auto file = sd.build();
  auto ck = ptread::Checkpoint::open_memory(file.data(), file.size());
  REQUIRE(ck.ok());
  auto cpu_head = nn::Linear::from(*ck, "fc");
  auto head = pc::Linear::from(*ck, "fc");
  REQUIRE(cpu_head.ok());
  REQUIRE(head.ok());
  auto staging = pc::HostStaging::create(64 * 12);
  REQUIRE(staging.ok());
  auto stream = pc::Stream::create();
  REQUIRE(stream.ok());
  for (int batch = 0; batch < 5; ++batch) {  // staging buffers reused in turn
    INFO("batch " << batch);
    std::vector<int64_t> ids;
    for (int i = 0; i < 10 + batch * 11; ++i) ids.push_back((i * 17 + batch * 5) % 50);
    auto rows = pc::embedding_to_device(*emb, ids.data(), ids.size(), *staging, stream->get());
    REQUIRE(rows.ok());
    auto y = device_floats(ids.size() * 5, -777.0f);
    REQUIRE(head->forward(*rows, ids.size(), static_cast<float*>(y.data()), stream->get()).ok());
    REQUIRE(stream->synchronize().ok());
    std::vector<float> h(ids.size() * 12), want(ids.size() * 5);
    REQUIRE(emb->forward(ids.data(), ids.size(), h.data()).ok());
    CHECK(from_device<float>(*rows, h.size()) == h);
    check_linear_close(*cpu_head, *ck, "fc", h, ids.size(), from_device<float>(y.data(), ids.size() * 5));

    const std::vector<int64_t> offs = {0, 3, 3, 7};
    auto pooled = pc::embedding_bag_to_device(*bag, ids.data(), ids.size(), offs.data(), offs.size(), nullptr, *staging,
                                              stream->get());
    REQUIRE(pooled.ok());
    REQUIRE(stream->synchronize().ok());
    std::vector<float> hb(offs.size() * 12);
    REQUIRE(bag->forward(ids.data(), ids.size(), offs.data(), offs.size(), nullptr, hb.data()).ok());
    CHECK(from_device<float>(*pooled, hb.size()) == hb);
  }
  CHECK(pc::embedding_to_device(*emb, std::vector<int64_t>(65, 1).data(), 65, *staging).code() ==
        ptread::ErrorCode::invalid_argument);  // more rows than the staging holds
}
