// Tensor views: bounds checks, typed access, strided copies, math bits, conversions.
// Values that torch defines are taken from torch-written fixtures elsewhere (fixtures.cpp);
// these cases pin down the checks a hostile or unusual file must hit.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <cmath>
#include <complex>
#include <cstring>

namespace {

std::shared_ptr<const ptread::Storage> storage_of(const std::vector<float>& v) {
  auto owner = std::make_shared<std::vector<float>>(v);
  const auto* p = reinterpret_cast<const uint8_t*>(owner->data());
  return std::make_shared<const ptread::Storage>(p, owner->size() * sizeof(float), owner);
}

}  // namespace

TEST_CASE("views are checked against their storage", "[tensor]") {
  auto st = storage_of({0, 1, 2, 3, 4, 5});
  using ptread::DType;
  using ptread::ErrorCode;
  CHECK(ptread::Tensor::view(st, DType::F32, {2, 3}, {3, 1}, 0).ok());
  CHECK(ptread::Tensor::view(st, DType::F32, {3}, {2}, 1).ok());          // last element 5
  CHECK(ptread::Tensor::view(st, DType::F32, {4}, {2}, 0).code() == ErrorCode::view_out_of_bounds);
  CHECK(ptread::Tensor::view(st, DType::F32, {6}, {1}, 1).code() == ErrorCode::view_out_of_bounds);
  CHECK(ptread::Tensor::view(st, DType::F64, {4}, {1}, 0).code() == ErrorCode::view_out_of_bounds);
  CHECK(ptread::Tensor::view(st, DType::F32, {2}, {1, 1}, 0).code() == ErrorCode::bad_tensor_args);
  CHECK(ptread::Tensor::view(st, DType::F32, {-1}, {1}, 0).code() == ErrorCode::bad_tensor_args);
  CHECK(ptread::Tensor::view(st, DType::F32, {2}, {-1}, 1).code() == ErrorCode::bad_tensor_args);
  CHECK(ptread::Tensor::view(st, DType::F32, {2}, {1}, -1).code() == ErrorCode::bad_tensor_args);
  // element counts and extents that overflow 64 bits
  CHECK(ptread::Tensor::view(st, DType::F32, {int64_t{1} << 40, int64_t{1} << 40}, {1, 1}, 0).code() ==
        ErrorCode::shape_overflow);
  CHECK(ptread::Tensor::view(st, DType::F32, {2}, {int64_t{1} << 62}, 0).code() == ErrorCode::view_out_of_bounds);
  CHECK(ptread::Tensor::view(st, DType::F32, {4}, {INT64_MAX}, 0).code() == ErrorCode::shape_overflow);
  // empty tensors and stride 0 need no bytes beyond what they touch
  CHECK(ptread::Tensor::view(st, DType::F32, {0, 5}, {5, 1}, 6).ok());
  auto expanded = ptread::Tensor::view(st, DType::F32, {1000000}, {0}, 5);
  REQUIRE(expanded.ok());
  CHECK(expanded->numel() == 1000000);
  CHECK(ptread::Tensor::view(st, DType::F32, {}, {}, 5).ok());  // scalar at the last element
  CHECK(ptread::Tensor::view(st, DType::F32, {}, {}, 6).code() == ErrorCode::view_out_of_bounds);
}

TEST_CASE("negative strides: taken where torch's set_() takes them, stored as torch stores them", "[tensor]") {
  // (torch 1.13: _rebuild_tensor_v2 of these sizes and strides; the adversarial files
  // tensor_negative_stride_* hold torch's strides for the same cases)
  auto st = storage_of({0, 1, 2, 3, 4, 5});
  using ptread::DType;
  using ptread::ErrorCode;
  using V = std::vector<int64_t>;
  auto strides_of = [&](V shape, V strides, int64_t offset) {
    auto t = ptread::Tensor::view(st, DType::F32, shape, strides, offset);
    INFO((t.ok() ? std::string() : t.error().str()));
    REQUIRE(t.ok());
    return V(t->strides());
  };
  CHECK(strides_of({2, 1}, {1, -3}, 0) == V{1, 1});
  CHECK(strides_of({1}, {-1}, 5) == V{1});
  CHECK(strides_of({0, 3}, {-5, 1}, 2) == V{3, 1});
  CHECK(strides_of({1, 0, 2}, {-1, -1, -1}, 0) == V{2, 2, 1});
  CHECK(strides_of({0, 3}, {-1, int64_t{1} << 62}, 0) == V{-(int64_t{1} << 62), int64_t{1} << 62});  // wrapped
  CHECK(strides_of({3, 1, 2}, {2, -7, 1}, 0) == V{2, 2, 1});
  // a size-1 dimension's negative stride places no element: the view is checked without it
  auto t = ptread::Tensor::view(st, DType::F32, {1, 2}, {-1, 3}, 2);
  REQUIRE(t.ok());
  CHECK(t->to_float32().value() == std::vector<float>{2, 5});
  CHECK(ptread::Tensor::view(st, DType::F32, {1, 2}, {-1, 3}, 3).code() == ErrorCode::view_out_of_bounds);
  // more than one element along a negative stride: torch's size check overflows
  CHECK(ptread::Tensor::view(st, DType::F32, {2}, {-1}, 5).code() == ErrorCode::bad_tensor_args);
  CHECK(ptread::Tensor::view(st, DType::F32, {1, 2}, {1, -1}, 5).code() == ErrorCode::bad_tensor_args);
  // strides below -2^62 are refused, as torch refuses them (a SymInt cannot hold them)
  CHECK(strides_of({1}, {-(int64_t{1} << 62)}, 0) == V{1});
  CHECK(ptread::Tensor::view(st, DType::F32, {1}, {-(int64_t{1} << 62) - 1}, 0).code() == ErrorCode::bad_tensor_args);
  CHECK(ptread::Tensor::view(st, DType::F32, {0}, {INT64_MIN}, 0).code() == ErrorCode::bad_tensor_args);
  // a negative size stays an error, with no elements too (torch 1.13 keeps it in the shape)
  CHECK(ptread::Tensor::view(st, DType::F32, {0, -1}, {1, 1}, 0).code() == ErrorCode::bad_tensor_args);
}

TEST_CASE("data<T> checks dtype, contiguity and math bits", "[tensor]") {
  auto st = storage_of({0, 1, 2, 3, 4, 5});
  auto t = ptread::Tensor::view(st, ptread::DType::F32, {2, 3}, {3, 1}, 0).value();
  auto p = t.data<float>();
  REQUIRE(p.ok());
  CHECK((*p)[4] == 4.0f);
  CHECK(t.data<double>().code() == ptread::ErrorCode::dtype_mismatch);
  CHECK(t.data<int32_t>().code() == ptread::ErrorCode::dtype_mismatch);
  auto tr = ptread::Tensor::view(st, ptread::DType::F32, {3, 2}, {1, 3}, 0).value();
  CHECK_FALSE(tr.is_contiguous());
  CHECK(tr.data<float>().code() == ptread::ErrorCode::not_contiguous);
  auto neg = t;
  neg.set_math_bits(false, true);
  CHECK(neg.data<float>().code() == ptread::ErrorCode::not_contiguous);
  // size-1 dimensions do not break contiguity
  CHECK(ptread::Tensor::view(st, ptread::DType::F32, {1, 3, 1}, {99, 1, 7}, 0).value().is_contiguous());
}

TEST_CASE("copy_to walks any strides in C order", "[tensor]") {
  auto st = storage_of({0, 1, 2, 3, 4, 5});
  auto tr = ptread::Tensor::view(st, ptread::DType::F32, {3, 2}, {1, 3}, 0).value();  // transpose
  std::vector<float> out(6);
  REQUIRE(tr.copy_to(out.data(), out.size() * 4).ok());
  CHECK(out == std::vector<float>{0, 3, 1, 4, 2, 5});
  auto ex = ptread::Tensor::view(st, ptread::DType::F32, {2, 3}, {0, 2}, 1).value();  // expand rows
  REQUIRE(ex.copy_to(out.data(), out.size() * 4).ok());
  CHECK(out == std::vector<float>{1, 3, 5, 1, 3, 5});
  CHECK(ex.copy_to(out.data(), 5 * 4).code() == ptread::ErrorCode::invalid_argument);
  auto c = ex.contiguous();
  REQUIRE(c.ok());
  CHECK(c->is_contiguous());
  CHECK(c->storage() != ex.storage());
  auto same = ptread::Tensor::view(st, ptread::DType::F32, {6}, {1}, 0).value();
  CHECK(same.contiguous()->storage() == same.storage());  // no copy when not needed
  CHECK(same.copy_to(out.data(), 24, ptread::DType::I32).code() == ptread::ErrorCode::unsupported_conversion);
}

TEST_CASE("neg and conj bits are applied when values are materialized", "[tensor]") {
  std::vector<float> raw = {1.0f, 2.0f, -3.0f, 0.0f};  // two complex64: 1+2i, -3+0i
  auto st = storage_of(raw);
  auto z = ptread::Tensor::view(st, ptread::DType::C64, {2}, {1}, 0).value();
  std::vector<std::complex<float>> out(2);
  auto conj = z;
  conj.set_math_bits(true, false);
  REQUIRE(conj.copy_to(out.data(), 16).ok());
  CHECK(out[0] == std::complex<float>(1.0f, -2.0f));
  CHECK(out[1].real() == -3.0f);
  CHECK(std::signbit(out[1].imag()));  // conj of +0 is -0, as torch's resolve_conj gives
  auto neg = z;
  neg.set_math_bits(false, true);
  REQUIRE(neg.copy_to(out.data(), 16).ok());
  CHECK(out[0] == std::complex<float>(-1.0f, -2.0f));
  CHECK(out[1].real() == 3.0f);
  auto i64 = ptread::Tensor::view(std::make_shared<const ptread::Storage>(
                                      reinterpret_cast<const uint8_t*>("\x05\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x80"), 16, nullptr),
                                  ptread::DType::I64, {2}, {1}, 0)
                 .value();
  i64.set_math_bits(false, true);
  std::vector<int64_t> iv(2);
  REQUIRE(i64.copy_to(iv.data(), 16).ok());
  CHECK(iv[0] == -5);
  CHECK(iv[1] == INT64_MIN);  // wraps, as torch's neg does
}

TEST_CASE("half, bfloat16 and fp8 decode to float exactly", "[dtype]") {
  using ptread::detail::f16_to_float;
  using ptread::detail::bf16_to_float;
  using ptread::detail::fp8_to_float;
  using ptread::DType;
  // Every half round-trips through float and back (float_to_f16 is the inverse on them).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(ptread::detail::float_to_f16(f) == h);
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(ptread::detail::float_to_bf16(f) == h);
  }
  // E5M2 is the top byte of a half.
  for (uint32_t b = 0; b < 256; ++b) {
    const float a = fp8_to_float(static_cast<uint8_t>(b), DType::F8_E5M2);
    const float h = f16_to_float(static_cast<uint16_t>(b << 8));
    CHECK((std::isnan(a) ? std::isnan(h) : a == h));
  }
  // OCP FP8 E4M3FN: no infinities, max 448, NaN only at S.1111.111.
  CHECK(fp8_to_float(0x7e, DType::F8_E4M3) == 448.0f);
  CHECK(std::isnan(fp8_to_float(0x7f, DType::F8_E4M3)));
  CHECK(fp8_to_float(0x01, DType::F8_E4M3) == std::ldexp(1.0f, -9));
  CHECK(fp8_to_float(0x38, DType::F8_E4M3) == 1.0f);
  // FNUZ: 0x80 is the only NaN; bias 8 (E4M3) and 16 (E5M2).
  CHECK(std::isnan(fp8_to_float(0x80, DType::F8_E4M3FNUZ)));
  CHECK(fp8_to_float(0x7f, DType::F8_E4M3FNUZ) == 240.0f);
  CHECK(fp8_to_float(0x40, DType::F8_E4M3FNUZ) == 1.0f);
  CHECK(fp8_to_float(0x40, DType::F8_E5M2FNUZ) == 1.0f);
  CHECK(fp8_to_float(0x7f, DType::F8_E5M2FNUZ) == 57344.0f);
  // E8M0: a power of two.
  CHECK(fp8_to_float(127, DType::F8_E8M0) == 1.0f);
  CHECK(fp8_to_float(0, DType::F8_E8M0) == std::ldexp(1.0f, -127));
  CHECK(std::isnan(fp8_to_float(255, DType::F8_E8M0)));
}

TEST_CASE("dtype names and storage classes", "[dtype]") {
  ptread::DType t = ptread::DType::U8;
  for (int i = 0; i < ptread::kDTypeCount; ++i) {
    auto d = static_cast<ptread::DType>(i);
    REQUIRE(ptread::dtype_from_name(ptread::dtype_name(d), &t));
    CHECK(t == d);
  }
  CHECK_FALSE(ptread::dtype_from_name("F7", &t));
  using ptread::detail::dtype_from_storage_class;
  CHECK((dtype_from_storage_class("FloatStorage", &t) && t == ptread::DType::F32));
  CHECK((dtype_from_storage_class("Float8_e4m3fnStorage", &t) && t == ptread::DType::F8_E4M3));
  CHECK((dtype_from_storage_class("UInt16Storage", &t) && t == ptread::DType::U16));
  CHECK((dtype_from_storage_class("ComplexHalfStorage", &t) && t == ptread::DType::C32));
  CHECK(!dtype_from_storage_class("Float", &t));
  CHECK(!dtype_from_storage_class("Storage", &t));
  CHECK((dtype_from_storage_class("Bits16Storage", &t) && t == ptread::DType::BITS16));
  CHECK(!dtype_from_storage_class("Float6_e3m2fnStorage", &t));
  using ptread::detail::dtype_from_torch_name;
  CHECK((dtype_from_torch_name("float8_e5m2fnuz", &t) && t == ptread::DType::F8_E5M2FNUZ));
  CHECK((dtype_from_torch_name("cfloat", &t) && t == ptread::DType::C64));
  CHECK((dtype_from_torch_name("float4_e2m1fn_x2", &t) && t == ptread::DType::F4_E2M1FN_X2));
  CHECK((dtype_from_torch_name("bits2x4", &t) && t == ptread::DType::BITS2X4));
  CHECK(!dtype_from_torch_name("uint4", &t));  // torch names it but saves no such tensor
}

TEST_CASE("opaque dtypes give their bytes and refuse every conversion", "[dtype][tensor]") {
  // F4_E2M1FN_X2 (two FP4 values a byte) and the BITS types: torch defines no conversion of
  // them, so neither does copy_to; data<uint8_t>() (data<uint16_t>() for BITS16) gives the bytes.
  auto st = storage_of({1.5f, -2.0f, 0.25f, 3.0f});
  using ptread::DType;
  for (DType d : {DType::F4_E2M1FN_X2, DType::BITS8, DType::BITS16, DType::BITS1X8, DType::BITS2X4, DType::BITS4X2}) {
    INFO(ptread::dtype_name(d));
    CHECK(ptread::dtype_is_opaque(d));
    const int64_t n = static_cast<int64_t>(16 / ptread::dtype_size(d));
    auto t = ptread::Tensor::view(st, d, {n}, {1}, 0);
    REQUIRE(t.ok());
    for (DType to : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::C64, DType::U8, DType::I64}) {
      std::vector<uint8_t> out(16 * 16);
      CHECK(t->copy_to(out.data(), out.size(), to).code() != ptread::ErrorCode::ok);
    }
    CHECK(t->to_float32().code() != ptread::ErrorCode::ok);
    std::vector<uint8_t> same(16);
    REQUIRE(t->copy_to(same.data(), same.size(), d).ok());  // as stored
    CHECK(std::memcmp(same.data(), st->data(), 16) == 0);
    if (d == DType::BITS16) {
      CHECK(t->data<uint16_t>().ok());
      CHECK(t->data<uint8_t>().code() == ptread::ErrorCode::dtype_mismatch);
    } else {
      auto p = t->data<uint8_t>();
      REQUIRE(p.ok());
      CHECK((*p)[3] == st->data()[3]);
    }
  }
  for (DType d : {DType::F8_E4M3, DType::U16, DType::QUINT4X2, DType::F32}) CHECK_FALSE(ptread::dtype_is_opaque(d));
}

TEST_CASE("shape and strides of any rank survive copies, moves and clones", "[tensor]") {
  // Up to four dimensions live inside the Tensor, more on the heap: both kinds, copied,
  // assigned and moved into each other, keep their own sizes and strides.
  auto st = storage_of({0, 1, 2, 3, 4, 5});
  using V = std::vector<int64_t>;
  const V shape6 = {1, 2, 1, 3, 1, 1}, strides6 = {6, 3, 3, 1, 1, 1};
  auto big = ptread::Tensor::view(st, ptread::DType::F32, shape6, strides6, 0).value();
  auto small = ptread::Tensor::view(st, ptread::DType::F32, {3, 2}, {1, 3}, 0).value();
  CHECK(big.dim() == 6);
  CHECK(big.shape() == shape6);
  CHECK(big.strides() == strides6);
  CHECK(shape6 == big.shape());
  CHECK(big.shape() != small.shape());
  CHECK(big.is_contiguous());
  CHECK(big.shape().size() == 6);
  CHECK(big.shape().back() == 1);
  CHECK(small.shape().front() == 3);
  const V as_vector = small.strides();
  CHECK(as_vector == V{1, 3});
  int64_t sum = 0;
  for (int64_t d : big.shape()) sum += d;
  CHECK(sum == 9);

  ptread::Tensor copy = big;
  CHECK(copy.shape() == shape6);
  CHECK(copy.shape().data() != big.shape().data());
  ptread::Tensor assigned = small;
  assigned = big;  // inline to heap
  CHECK(assigned.strides() == strides6);
  assigned = small;  // heap to inline
  CHECK(assigned.shape() == V{3, 2});
  CHECK(assigned.strides() == V{1, 3});
  ptread::Tensor moved = std::move(copy);
  CHECK(moved.shape() == shape6);
  CHECK(moved.strides() == strides6);
  ptread::Tensor moved_into = small;
  moved_into = std::move(moved);
  CHECK(moved_into.shape() == shape6);
  moved_into = ptread::Tensor(small);
  CHECK(moved_into.shape() == V{3, 2});
  CHECK(big.shape() == shape6);  // the source of every copy is unchanged

  auto c = big.clone();
  REQUIRE(c.ok());
  CHECK(c->shape() == shape6);
  CHECK(c->strides() == ptread::Tensor::contiguous_strides(shape6));
  auto ct = small.contiguous();
  REQUIRE(ct.ok());
  CHECK(ct->strides() == V{2, 1});
  CHECK(ct->to_float32().value() == std::vector<float>{0, 3, 1, 4, 2, 5});
  std::vector<ptread::Tensor> many(40, big);
  many.resize(100, small);  // vector growth moves both kinds
  CHECK(many[39].shape() == shape6);
  CHECK(many[99].strides() == V{1, 3});
}
