// ptread — element types.
//
// Names follow safetensors (contract, see DESIGN.md). torch names its dtypes three ways in
// files: Python storage classes (`torch.FloatStorage`, `torch.cuda.HalfStorage`), C++
// storage names written by LibTorch (`Float8_e4m3fnStorage`, `UInt16Storage`), and dtype
// globals (`torch.float8_e4m3fn`, `torch.uint16`) used by `_rebuild_tensor_v3`. All three
// map here; anything else is an error that names it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

namespace ptread {

enum class DType : uint8_t {
  BOOL, U8, I8, I16, U16, I32, U32, I64, U64,
  F16, BF16, F32, F64, C32, C64, C128,
  F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0,
  QINT8, QUINT8, QINT32, QUINT4X2, QUINT2X4,
  // torch 2.x's opaque types: two FP4 (E2M1) values a byte, and raw bits. Read and written as
  // stored; no conversion is defined (torch defines none either).
  F4_E2M1FN_X2, BITS8, BITS16, BITS1X8, BITS2X4, BITS4X2,
};
inline constexpr int kDTypeCount = 32;

inline const char* dtype_name(DType t) noexcept {
  static const char* const names[kDTypeCount] = {
      "BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64",
      "F16", "BF16", "F32", "F64", "C32", "C64", "C128",
      "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0",
      "QINT8", "QUINT8", "QINT32", "QUINT4X2", "QUINT2X4",
      "F4_E2M1FN_X2", "BITS8", "BITS16", "BITS1X8", "BITS2X4", "BITS4X2"};
  auto i = static_cast<unsigned>(t);
  return i < static_cast<unsigned>(kDTypeCount) ? names[i] : "?";
}

// Bytes per element (QUINT4X2, QUINT2X4, F4_E2M1FN_X2 and the BITS*X* types pack several
// values into one byte, as torch does).
inline size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::BOOL: case DType::U8: case DType::I8:
    case DType::F8_E4M3: case DType::F8_E5M2: case DType::F8_E4M3FNUZ: case DType::F8_E5M2FNUZ:
    case DType::F8_E8M0: case DType::QINT8: case DType::QUINT8: case DType::QUINT4X2:
    case DType::QUINT2X4: case DType::F4_E2M1FN_X2: case DType::BITS8: case DType::BITS1X8: case DType::BITS2X4:
    case DType::BITS4X2:
      return 1;
    case DType::I16: case DType::U16: case DType::F16: case DType::BF16: case DType::BITS16:
      return 2;
    case DType::I32: case DType::U32: case DType::F32: case DType::C32: case DType::QINT32:
      return 4;
    case DType::I64: case DType::U64: case DType::F64: case DType::C64:
      return 8;
    case DType::C128:
      return 16;
  }
  return 1;
}

inline bool dtype_is_complex(DType t) noexcept {
  return t == DType::C32 || t == DType::C64 || t == DType::C128;
}
inline bool dtype_is_quantized(DType t) noexcept {
  return t >= DType::QINT8 && t <= DType::QUINT2X4;
}
// Stored bits no conversion reads: F4_E2M1FN_X2 and the BITS types.
inline bool dtype_is_opaque(DType t) noexcept {
  return t >= DType::F4_E2M1FN_X2 && t <= DType::BITS4X2;
}
// Floating point and complex dtypes: those torch lets require gradients.
inline bool dtype_is_differentiable(DType t) noexcept {
  switch (t) {
    case DType::F16: case DType::BF16: case DType::F32: case DType::F64: case DType::C32: case DType::C64:
    case DType::C128: case DType::F8_E4M3: case DType::F8_E5M2: case DType::F8_E4M3FNUZ: case DType::F8_E5M2FNUZ:
    case DType::F8_E8M0: case DType::F4_E2M1FN_X2:  // (torch 2.x's is_floating_point includes float4_e2m1fn_x2)
      return true;
    default:
      return false;
  }
}
// Size of the scalar that byte order applies to (half of a complex element).
inline size_t dtype_swap_unit(DType t) noexcept {
  return dtype_is_complex(t) ? dtype_size(t) / 2 : dtype_size(t);
}

inline bool dtype_from_name(std::string_view s, DType* out) noexcept {
  for (int i = 0; i < kDTypeCount; ++i) {
    if (s == dtype_name(static_cast<DType>(i))) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

namespace detail {

struct NameToDType {
  const char* name;
  DType dtype;
};

// Storage class names, Python and LibTorch spellings, without the trailing "Storage".
inline bool dtype_from_storage_class(std::string_view cls, DType* out) noexcept {
  static const NameToDType table[] = {
      {"Double", DType::F64}, {"Float", DType::F32}, {"Half", DType::F16},
      {"BFloat16", DType::BF16}, {"Long", DType::I64}, {"Int", DType::I32},
      {"Short", DType::I16}, {"Char", DType::I8}, {"Byte", DType::U8}, {"Bool", DType::BOOL},
      {"ComplexHalf", DType::C32}, {"ComplexFloat", DType::C64}, {"ComplexDouble", DType::C128},
      {"QInt8", DType::QINT8}, {"QUInt8", DType::QUINT8}, {"QInt32", DType::QINT32},
      {"QUInt4x2", DType::QUINT4X2}, {"QUInt2x4", DType::QUINT2X4},
      {"UInt16", DType::U16}, {"UInt32", DType::U32}, {"UInt64", DType::U64},
      {"Float8_e4m3fn", DType::F8_E4M3}, {"Float8_e5m2", DType::F8_E5M2},
      {"Float8_e4m3fnuz", DType::F8_E4M3FNUZ}, {"Float8_e5m2fnuz", DType::F8_E5M2FNUZ},
      {"Float8_e8m0fnu", DType::F8_E8M0}, {"Float4_e2m1fn_x2", DType::F4_E2M1FN_X2},
      {"Bits8", DType::BITS8}, {"Bits16", DType::BITS16}, {"Bits1x8", DType::BITS1X8},
      {"Bits2x4", DType::BITS2X4}, {"Bits4x2", DType::BITS4X2},
      // An untyped storage holds bytes; _rebuild_tensor_v3 names the dtype.
      {"Untyped", DType::U8},
  };
  constexpr std::string_view suffix = "Storage";
  if (cls.size() <= suffix.size() || cls.substr(cls.size() - suffix.size()) != suffix) return false;
  cls.remove_suffix(suffix.size());
  for (const auto& e : table) {
    if (cls == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

// dtype globals (`torch.float32`), primary names and aliases.
inline bool dtype_from_torch_name(std::string_view n, DType* out) noexcept {
  static const NameToDType table[] = {
      {"bool", DType::BOOL}, {"uint8", DType::U8}, {"int8", DType::I8},
      {"int16", DType::I16}, {"short", DType::I16}, {"uint16", DType::U16},
      {"int32", DType::I32}, {"int", DType::I32}, {"uint32", DType::U32},
      {"int64", DType::I64}, {"long", DType::I64}, {"uint64", DType::U64},
      {"float16", DType::F16}, {"half", DType::F16}, {"bfloat16", DType::BF16},
      {"float32", DType::F32}, {"float", DType::F32}, {"float64", DType::F64},
      {"double", DType::F64}, {"complex32", DType::C32}, {"chalf", DType::C32},
      {"complex64", DType::C64}, {"cfloat", DType::C64}, {"complex128", DType::C128},
      {"cdouble", DType::C128}, {"float8_e4m3fn", DType::F8_E4M3},
      {"float8_e5m2", DType::F8_E5M2}, {"float8_e4m3fnuz", DType::F8_E4M3FNUZ},
      {"float8_e5m2fnuz", DType::F8_E5M2FNUZ}, {"float8_e8m0fnu", DType::F8_E8M0},
      {"qint8", DType::QINT8}, {"quint8", DType::QUINT8}, {"qint32", DType::QINT32},
      {"quint4x2", DType::QUINT4X2}, {"quint2x4", DType::QUINT2X4},
      {"float4_e2m1fn_x2", DType::F4_E2M1FN_X2}, {"bits8", DType::BITS8}, {"bits16", DType::BITS16},
      {"bits1x8", DType::BITS1X8}, {"bits2x4", DType::BITS2X4}, {"bits4x2", DType::BITS4X2},
  };
  for (const auto& e : table) {
    if (n == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

// ---- scalar conversions to float (exact: every value of these types is a float) ----

inline float bits_to_float(uint32_t bits) noexcept {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bf16_to_float(uint16_t h) noexcept { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline float f16_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in float
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  // NaNs come out quiet, payload kept, as torch's conversion (and F16C's) gives them.
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest even, as torch's c10::Half(float) and c10::BFloat16(float) do.
inline uint16_t float_to_f16(float f) noexcept {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {  // subnormal half or zero
    const float a = bits_to_float(ax);
    // adding 0.5 (2^-1) pushes the bits so the hardware rounds at 2^-24 (nearest even)
    const uint32_t r = float_to_bits(a + 0.5f) - float_to_bits(0.5f);
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t mant_odd = (ax >> 13) & 1u;
  const uint32_t v = ax + 0xc8000fffu + mant_odd;  // rebias (-112 << 23) and round
  return static_cast<uint16_t>(sign | (v >> 13));
}

// NaN has no single spelling in torch: its vectorized float/double -> bfloat16 kernels
// (ATen's cvtfp32_bf16) write 0xffff, while its scalar path (c10::BFloat16, used for
// half -> bfloat16) writes 0x7fc0. Callers pass the one torch's CPU path writes.
inline uint16_t float_to_bf16(float f, uint16_t nan_bits = 0xffffu) noexcept {
  uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return nan_bits;
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// 8-bit floats (OCP FP8 and the AMD "fnuz" variants, and the E8M0 scale type).
inline float fp8_to_float(uint8_t b, DType t) noexcept {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (t == DType::F8_E8M0) return b == 0xff ? nan : std::ldexp(1.0f, static_cast<int>(b) - 127);
  if (t == DType::F8_E5M2) return f16_to_float(static_cast<uint16_t>(b << 8));
  int mbits, bias;
  switch (t) {
    case DType::F8_E4M3: mbits = 3; bias = 7; break;
    case DType::F8_E4M3FNUZ: mbits = 3; bias = 8; break;
    default: mbits = 2; bias = 16; break;  // F8_E5M2FNUZ
  }
  const bool fnuz = t != DType::F8_E4M3;
  if (fnuz && b == 0x80) return nan;
  if (!fnuz && (b & 0x7f) == 0x7f) return nan;
  const int exp = (b & 0x7f) >> mbits;
  const int mant = b & ((1 << mbits) - 1);
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), 1 - bias - mbits)
                     : std::ldexp(static_cast<float>(mant | (1 << mbits)), exp - bias - mbits);
  return (b & 0x80) ? -v : v;
}

}  // namespace detail
}  // namespace ptread
