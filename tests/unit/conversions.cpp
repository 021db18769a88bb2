// dtype conversions of copy_to() against what torch computes on the same values
// (fixtures/conv, written by gen_conversions.py): every F16 and BF16 bit pattern widened to
// F32 at every instruction-set level of the vector kernels, contiguous and by rows of a view;
// float32 probe values narrowed to F16 and BF16.
#include "support/helpers.hpp"

#include <cstring>

using ptread::DType;
using ptread::detail::NnIsa;
using ptread_test::IsaRestore;
using ptread_test::isa_levels;
using ptread_test::Json;

namespace {

const std::string& conv_dir() {
  static const std::string d = std::string(PTREAD_TEST_FIXTURES) + "/conv";
  return d;
}

const Json& conv_json() { return ptread_test::cached_json(conv_dir() + "/conversions.json"); }

std::string converted_sha(const ptread::Tensor& t, DType to) {
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * ptread::dtype_size(to));
  auto st = t.copy_to(out.data(), out.size(), to);
  if (!st) FAIL(st.error().what());
  return ptread_test::sha256_hex(out.data(), out.size());
}

}  // namespace

TEST_CASE("F16 and BF16 widen to F32 as torch's .float() does, at every kernel level", "[dtype][conversions]") {
  auto ck = ptread::Checkpoint::open(conv_dir() + "/conversions.pt");
  REQUIRE(ck);
  const ptread::Tensor* f16 = ck->find("f16_all");
  const ptread::Tensor* bf16 = ck->find("bf16_all");
  REQUIRE(f16 != nullptr);
  REQUIRE(bf16 != nullptr);
  REQUIRE(f16->dtype() == DType::F16);
  REQUIRE(f16->numel() == 65536);
  IsaRestore restore;
  for (NnIsa isa : isa_levels()) {
    INFO("kernel level " << ptread::detail::nn_isa_name(ptread::detail::nn_set_isa(isa)));
    CHECK(converted_sha(*f16, DType::F32) == conv_json()["f16_all_to_F32"].as_string());
    CHECK(converted_sha(*bf16, DType::F32) == conv_json()["bf16_all_to_F32"].as_string());

    // The same values by rows of a view ([256, 200] of rows 256 apart: runs of 200), and
    // with an odd element offset (the runs start off the vector alignment).
    for (const ptread::Tensor* t : {f16, bf16}) {
      std::vector<float> whole(65536);
      REQUIRE(t->copy_to(whole.data(), whole.size() * 4, DType::F32));
      for (int64_t offset : {int64_t{0}, int64_t{3}}) {
        auto v = ptread::Tensor::view(t->storage(), t->dtype(), {255, 200}, {256, 1}, offset);
        REQUIRE(v);
        std::vector<float> rows(255 * 200);
        REQUIRE(v->copy_to(rows.data(), rows.size() * 4, DType::F32));
        bool same = true;
        for (size_t r = 0; r < 255; ++r) {
          same = same && std::memcmp(&rows[r * 200], &whole[r * 256 + static_cast<size_t>(offset)], 200 * 4) == 0;
        }
        CHECK(same);
      }
    }
  }
}

TEST_CASE("F32 narrows to F16 and BF16 as torch's .half() and .bfloat16() do", "[dtype][conversions]") {
  auto ck = ptread::Checkpoint::open(conv_dir() + "/conversions.pt");
  REQUIRE(ck);
  const ptread::Tensor* probe = ck->find("f32_probe");
  REQUIRE(probe != nullptr);
  REQUIRE(probe->numel() == conv_json()["f32_probe_numel"].as_int());
  CHECK(converted_sha(*probe, DType::F16) == conv_json()["f32_probe_to_F16"].as_string());
  CHECK(converted_sha(*probe, DType::BF16) == conv_json()["f32_probe_to_BF16"].as_string());
}
