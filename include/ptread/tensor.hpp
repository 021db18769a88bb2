// ptread — storages and tensors.
//
// A Tensor is a view, shaped like DLPack: dtype, shape, strides in elements, an element
// offset, and a shared Storage (the bytes and whatever keeps them alive: a file mapping,
// an owned buffer, or the caller's memory). Tensors that shared a storage in the file
// share one Storage here, so tied weights and views stay tied. Every view is checked to
// lie inside its storage when it is made.
//
// The stored bytes are what torch wrote. Two torch "math bits" change what they mean:
// conj (complex) and neg. data<T>() refuses such tensors; copy_to(), to_float32(),
// contiguous() and clone() apply them, so what they produce equals torch's resolved values.
#pragma once

#include "memory/arena.hpp"
#include "compute/kernels.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "io.hpp"
#include "limits.hpp"

#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ptread {

class Storage {
 public:
  Storage(const uint8_t* data, size_t nbytes, std::shared_ptr<const void> owner)
      : data_(data), nbytes_(nbytes), owner_(std::move(owner)) {}
  const uint8_t* data() const noexcept { return data_; }
  size_t nbytes() const noexcept { return nbytes_; }

 private:
  const uint8_t* data_;
  size_t nbytes_;
  std::shared_ptr<const void> owner_;
};

namespace detail {
template <class T> struct DTypeOf { static bool matches(DType) { return false; } };
#define PTREAD_DTYPE_OF(T, cond) \
  template <> struct DTypeOf<T> { static bool matches(DType d) { return cond; } };
PTREAD_DTYPE_OF(bool, d == DType::BOOL)
PTREAD_DTYPE_OF(float, d == DType::F32)
PTREAD_DTYPE_OF(double, d == DType::F64)
PTREAD_DTYPE_OF(int8_t, d == DType::I8 || d == DType::QINT8)
PTREAD_DTYPE_OF(uint8_t, d == DType::U8 || d == DType::BOOL || d == DType::QUINT8 ||
                             d == DType::QUINT4X2 || d == DType::QUINT2X4 ||
                             (d >= DType::F8_E4M3 && d <= DType::F8_E8M0) ||
                             (dtype_is_opaque(d) && d != DType::BITS16))
PTREAD_DTYPE_OF(int16_t, d == DType::I16)
PTREAD_DTYPE_OF(uint16_t, d == DType::U16 || d == DType::F16 || d == DType::BF16 || d == DType::BITS16)
PTREAD_DTYPE_OF(int32_t, d == DType::I32 || d == DType::QINT32)
PTREAD_DTYPE_OF(uint32_t, d == DType::U32)
PTREAD_DTYPE_OF(int64_t, d == DType::I64)
PTREAD_DTYPE_OF(uint64_t, d == DType::U64)
PTREAD_DTYPE_OF(std::complex<float>, d == DType::C64)
PTREAD_DTYPE_OF(std::complex<double>, d == DType::C128)
#undef PTREAD_DTYPE_OF

// One scalar on its way between dtypes: integers stay integers so int64 -> F32 rounds once.
struct Scalar {
  enum Kind { kInt, kUInt, kFloat } kind;
  int64_t i;
  uint64_t u;
  double f;
};

inline Scalar load_scalar(const uint8_t* p, DType t) {
  auto ld = [p](auto v) { std::memcpy(&v, p, sizeof v); return v; };
  switch (t) {
    case DType::BOOL: return {Scalar::kInt, p[0] != 0, 0, 0};
    case DType::U8: case DType::QUINT8: return {Scalar::kInt, p[0], 0, 0};
    case DType::I8: case DType::QINT8: return {Scalar::kInt, ld(int8_t{}), 0, 0};
    case DType::I16: return {Scalar::kInt, ld(int16_t{}), 0, 0};
    case DType::U16: return {Scalar::kInt, ld(uint16_t{}), 0, 0};
    case DType::I32: case DType::QINT32: return {Scalar::kInt, ld(int32_t{}), 0, 0};
    case DType::U32: return {Scalar::kInt, ld(uint32_t{}), 0, 0};
    case DType::I64: return {Scalar::kInt, ld(int64_t{}), 0, 0};
    case DType::U64: return {Scalar::kUInt, 0, ld(uint64_t{}), 0};
    case DType::F16: return {Scalar::kFloat, 0, 0, f16_to_float(ld(uint16_t{}))};
    case DType::BF16: return {Scalar::kFloat, 0, 0, bf16_to_float(ld(uint16_t{}))};
    case DType::F32: return {Scalar::kFloat, 0, 0, ld(float{})};
    case DType::F64: return {Scalar::kFloat, 0, 0, ld(double{})};
    default: return {Scalar::kFloat, 0, 0, fp8_to_float(p[0], t)};
  }
}

template <class F>
inline F scalar_as(const Scalar& s) {
  switch (s.kind) {
    case Scalar::kInt: return static_cast<F>(s.i);
    case Scalar::kUInt: return static_cast<F>(s.u);
    default: return static_cast<F>(s.f);
  }
}

inline bool is_real_numeric(DType t) {
  return !dtype_is_complex(t) && t != DType::QUINT4X2 && t != DType::QUINT2X4 && !dtype_is_opaque(t);
}

// Whether copy_to can convert from `from` to `to`.
inline bool conversion_defined(DType from, DType to) {
  if (from == to) return true;
  const bool float_dst = to == DType::F16 || to == DType::BF16 || to == DType::F32 || to == DType::F64;
  if (float_dst) return is_real_numeric(from);
  if (dtype_is_complex(to)) return dtype_is_complex(from);
  return false;
}

// Flips the meaning of one stored element in place: negation and/or conjugation.
inline void apply_math_bits(uint8_t* e, DType t, bool conj, bool neg) {
  const size_t n = dtype_size(t);
  auto flip_sign = [](uint8_t* x, size_t w) { x[w - 1] ^= 0x80; };  // little-endian IEEE
  if (dtype_is_complex(t)) {
    const size_t half = n / 2;
    if (neg) flip_sign(e, half);
    if (neg != conj) flip_sign(e + half, half);
    return;
  }
  if (!neg) return;
  switch (t) {
    case DType::F16: case DType::BF16: case DType::F32: case DType::F64:
    case DType::F8_E4M3: case DType::F8_E5M2:
      flip_sign(e, n);
      return;
    case DType::F8_E4M3FNUZ: case DType::F8_E5M2FNUZ:  // 0x80 is NaN, not -0
      if ((e[0] & 0x7f) != 0) flip_sign(e, n);
      return;
    case DType::F8_E8M0:  // no sign bit: torch cannot negate it either
      return;
    default: {  // integers: two's complement negation, wrapping as torch does
      unsigned carry = 1;
      for (size_t k = 0; k < n; ++k) {
        unsigned v = static_cast<unsigned>(static_cast<uint8_t>(~e[k])) + carry;
        e[k] = static_cast<uint8_t>(v);
        carry = v >> 8;
      }
    }
  }
}

// Writes one element of dtype `to` from the element at p of dtype `from`.
inline void convert_element(const uint8_t* p, DType from, uint8_t* out, DType to) {
  if (dtype_is_complex(to)) {
    const size_t hf = dtype_size(from) / 2, ht = dtype_size(to) / 2;
    const DType part_from = hf == 2 ? DType::F16 : hf == 4 ? DType::F32 : DType::F64;
    const DType part_to = ht == 2 ? DType::F16 : ht == 4 ? DType::F32 : DType::F64;
    convert_element(p, part_from, out, part_to);
    convert_element(p + hf, part_from, out + ht, part_to);
    return;
  }
  const Scalar s = load_scalar(p, from);
  switch (to) {
    case DType::F32: { float v = scalar_as<float>(s); std::memcpy(out, &v, 4); return; }
    case DType::F64: { double v = scalar_as<double>(s); std::memcpy(out, &v, 8); return; }
    case DType::F16: { uint16_t v = float_to_f16(scalar_as<float>(s)); std::memcpy(out, &v, 2); return; }
    case DType::BF16: {
      const uint16_t nan_bits = from == DType::F16 ? 0x7fc0u : 0xffffu;  // as torch's CPU copy
      uint16_t v = float_to_bf16(scalar_as<float>(s), nan_bits);
      std::memcpy(out, &v, 2);
      return;
    }
    default: return;  // excluded by conversion_defined
  }
}

// torch's Tensor.set_() stores a negative stride (which its size check lets through only in a
// dimension of size 1 or in a tensor with no elements, where no element's place depends on
// it) as the stride a contiguous layout would give it from the next dimension's: 1 in the
// last, else max(next size, 1) * next stride, wrapping as torch's int64 product does
// (c10::TensorImpl::set_sizes_and_strides). torch 1.13 reads size (0, 3) with strides
// (-5, 1) as strides (3, 1), size (2, 1) with (1, -3) as (1, 1).
inline void settle_negative_strides(const int64_t* shape, size_t rank, int64_t* strides) noexcept {
  for (size_t d = rank; d-- > 0;) {
    if (strides[d] >= 0) continue;
    if (d + 1 == rank) {
      strides[d] = 1;
    } else {
      const uint64_t next = static_cast<uint64_t>(shape[d + 1] > 1 ? shape[d + 1] : 1);
      strides[d] = static_cast<int64_t>(next * static_cast<uint64_t>(strides[d + 1]));
    }
  }
}

// check_view's answer for the views it does not pass at once: the error saying what is wrong,
// or (a negative stride where torch takes one) success, with the strides settled.
inline Status check_view_slow(const int64_t* shape, size_t rank, int64_t* strides, size_t stride_rank,
                              int64_t offset, DType dtype, uint64_t have, int64_t* numel_out) {
  if (stride_rank != rank) {
    return make_error(ErrorCode::bad_tensor_args,
                      "shape has " + std::to_string(rank) + " dimensions but strides have " +
                          std::to_string(stride_rank));
  }
  if (offset < 0) return make_error(ErrorCode::bad_tensor_args, "negative storage offset " + std::to_string(offset));
  uint64_t numel = 1, last = 0;  // last: index of the farthest element
  bool negative_stride = false;
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] < 0) return make_error(ErrorCode::bad_tensor_args, "negative size in dimension " + std::to_string(d));
    if (strides[d] < -(int64_t{1} << 62)) {  // torch: "cannot be represented as a SymInt"
      return make_error(ErrorCode::bad_tensor_args, "stride " + std::to_string(strides[d]) + " in dimension " +
                                                        std::to_string(d) + " is below -2^62 (torch holds none)");
    }
    negative_stride |= strides[d] < 0;
    if (mul_overflow(numel, static_cast<uint64_t>(shape[d]), &numel)) {
      return make_error(ErrorCode::shape_overflow, "element count overflows 64 bits");
    }
  }
  uint64_t total_bytes;
  if (numel > (uint64_t{1} << 62) || mul_overflow(numel, dtype_size(dtype), &total_bytes) ||
      total_bytes > (uint64_t{1} << 62)) {
    return make_error(ErrorCode::shape_overflow, "the tensor's " + std::to_string(numel) + " elements of " + dtype_name(dtype) +
                                                     " are more bytes than 64 bits count (2^62)");
  }
  *numel_out = static_cast<int64_t>(numel);
  if (numel == 0) {  // no element to place: any strides (torch's size check returns at a size of 0)
    if (negative_stride) settle_negative_strides(shape, rank, strides);
    return {};
  }
  for (size_t d = 0; d < rank; ++d) {
    if (strides[d] < 0 && shape[d] > 1) {  // torch: "Storage size calculation overflowed"
      return make_error(ErrorCode::bad_tensor_args, "negative stride " + std::to_string(strides[d]) + " in dimension " +
                                                        std::to_string(d) + " of size " + std::to_string(shape[d]));
    }
    if (strides[d] < 0) continue;  // size 1: the stride places no element
    uint64_t span;
    if (mul_overflow(static_cast<uint64_t>(shape[d] - 1), static_cast<uint64_t>(strides[d]), &span) ||
        add_overflow(last, span, &last)) {
      return make_error(ErrorCode::shape_overflow, "view extent overflows 64 bits");
    }
  }
  uint64_t end_elem, end_byte;
  const size_t esize = dtype_size(dtype);
  if (add_overflow(last, static_cast<uint64_t>(offset) + 1, &end_elem) ||
      mul_overflow(end_elem, esize, &end_byte) || end_byte > have) {
    return make_error(ErrorCode::view_out_of_bounds,
                      "view reaches element " + std::to_string(last) + " past offset " +
                          std::to_string(offset) + " of a storage holding " +
                          std::to_string(have / esize) + " elements of " + dtype_name(dtype));
  }
  if (negative_stride) settle_negative_strides(shape, rank, strides);
  return {};
}

// Whether a view (shape, strides in elements, element offset) of a storage holding
// `have` bytes of `dtype` lies inside it, as torch's set_() checks it; *numel receives the
// element count. Negative strides torch takes are settled in place as torch stores them.
PTREAD_ALWAYS_INLINE Status check_view(const int64_t* shape, size_t rank, int64_t* strides, size_t stride_rank,
                                       int64_t offset, DType dtype, uint64_t have, int64_t* numel_out) {
  // The common case, inline; anything unusual goes to check_view_slow, which says what.
  if (stride_rank == rank && offset >= 0) {
    uint64_t numel = 1, last = 0;
    bool ok = true;
    for (size_t d = 0; d < rank && ok; ++d) {
      ok = shape[d] >= 0 && strides[d] >= 0 && !mul_overflow(numel, static_cast<uint64_t>(shape[d]), &numel);
    }
    // numel * element size (at most 16) stays below 2^62: nbytes() cannot overflow.
    if (ok && numel <= (uint64_t{1} << 58)) {
      if (numel == 0) {
        *numel_out = 0;
        return {};
      }
      for (size_t d = 0; d < rank && ok; ++d) {
        uint64_t span;
        ok = !mul_overflow(static_cast<uint64_t>(shape[d] - 1), static_cast<uint64_t>(strides[d]), &span) &&
             !add_overflow(last, span, &last);
      }
      uint64_t end_elem, end_byte;
      if (ok && !add_overflow(last, static_cast<uint64_t>(offset) + 1, &end_elem) &&
          !mul_overflow(end_elem, dtype_size(dtype), &end_byte) && end_byte <= have) {
        *numel_out = static_cast<int64_t>(numel);
        return {};
      }
    }
  }
  return check_view_slow(shape, rank, strides, stride_rank, offset, dtype, have, numel_out);
}


struct TensorAccess;  // the format readers' way to fill a Tensor they already checked

}  // namespace detail

// A tensor's sizes or strides, as Tensor::shape() and strides() show them: a read-only
// view into the tensor (valid while it lives), used like the std::vector<int64_t> it
// converts to: size(), [i], begin()/end(), data(), ==.
class Dims {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using const_iterator = const int64_t*;
  using iterator = const int64_t*;

  constexpr Dims() noexcept = default;
  constexpr Dims(const int64_t* data, size_t size) noexcept : data_(data), size_(size) {}
  Dims(const std::vector<int64_t>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT: implicit, as a view

  const int64_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const int64_t& operator[](size_t i) const noexcept { return data_[i]; }
  const int64_t& front() const noexcept { return data_[0]; }
  const int64_t& back() const noexcept { return data_[size_ - 1]; }
  const int64_t* begin() const noexcept { return data_; }
  const int64_t* end() const noexcept { return data_ + size_; }

  std::vector<int64_t> to_vector() const { return std::vector<int64_t>(data_, data_ + size_); }
  operator std::vector<int64_t>() const { return to_vector(); }  // NOLINT: implicit, for code written for vectors

  friend bool operator==(Dims a, Dims b) noexcept {
    if (a.size_ != b.size_) return false;
    for (size_t k = 0; k < a.size_; ++k) {
      if (a.data_[k] != b.data_[k]) return false;
    }
    return true;
  }
  friend bool operator!=(Dims a, Dims b) noexcept { return !(a == b); }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

class Tensor {
 public:
  Tensor() noexcept : inline_dims_{} {}
  Tensor(const Tensor& o)
      : storage_(o.storage_), offset_(o.offset_), numel_(o.numel_), inline_dims_{}, dtype_(o.dtype_),
        requires_grad_(o.requires_grad_), conj_(o.conj_), neg_(o.neg_), device_(o.device_) {
    set_dims(o.dims_data(), o.dims_data() + o.rank_, o.rank_);
  }
  Tensor(Tensor&& o) noexcept
      : storage_(std::move(o.storage_)), offset_(o.offset_), numel_(o.numel_), inline_dims_{}, rank_(o.rank_),
        dtype_(o.dtype_), requires_grad_(o.requires_grad_), conj_(o.conj_), neg_(o.neg_), device_(std::move(o.device_)) {
    take_dims(o);
  }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      set_dims(o.dims_data(), o.dims_data() + o.rank_, o.rank_);
      copy_fields(o);
      device_ = o.device_;
    }
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      free_dims();
      rank_ = o.rank_;
      take_dims(o);
      copy_fields(o);
      device_ = std::move(o.device_);
    }
    return *this;
  }
  ~Tensor() { free_dims(); }

  // A checked view: fails unless every element lies inside the storage. A negative stride
  // is taken where torch's set_() takes one (in a dimension of size 1, or in a tensor with
  // no elements) and stored as torch stores it (settle_negative_strides).
  static Result<Tensor> view(std::shared_ptr<const Storage> storage, DType dtype,
                             const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                             int64_t storage_offset, std::string device = "cpu") {
    Tensor t;
    if (strides.size() != shape.size()) {  // (check_view says so)
      PTREAD_CHECK(detail::check_view(shape.data(), shape.size(), nullptr, strides.size(), 0, dtype, 0, &t.numel_));
    }
    t.set_dims(shape.data(), strides.data(), shape.size());
    PTREAD_CHECK(detail::check_view(t.dims_data(), shape.size(), t.dims_data() + shape.size(), strides.size(),
                                    storage_offset, dtype, storage ? storage->nbytes() : 0, &t.numel_));
    t.storage_ = std::move(storage);
    t.dtype_ = dtype;
    t.offset_ = storage_offset;
    t.device_ = std::move(device);
    return t;
  }

  DType dtype() const noexcept { return dtype_; }
  // Sizes and strides (in elements): views into this tensor.
  Dims shape() const noexcept { return Dims(dims_data(), rank_); }
  Dims strides() const noexcept { return Dims(dims_data() + rank_, rank_); }
  int64_t storage_offset() const noexcept { return offset_; }
  size_t dim() const noexcept { return rank_; }
  int64_t numel() const noexcept { return numel_; }
  size_t element_size() const noexcept { return dtype_size(dtype_); }
  // Bytes of the tensor's elements (numel * element size), not of its storage.
  uint64_t nbytes() const noexcept { return static_cast<uint64_t>(numel_) * element_size(); }
  // Where torch saved it from ("cpu", "cuda:0", "mps" ...). The bytes are always host memory.
  const std::string& device() const noexcept { return device_; }
  bool requires_grad() const noexcept { return requires_grad_; }
  bool is_conj() const noexcept { return conj_; }
  bool is_neg() const noexcept { return neg_; }
  const std::shared_ptr<const Storage>& storage() const noexcept { return storage_; }

  bool is_contiguous() const noexcept {
    const int64_t* shape = dims_data();
    const int64_t* strides = shape + rank_;
    int64_t expected = 1;
    for (size_t d = rank_; d-- > 0;) {
      if (shape[d] == 1) continue;
      if (strides[d] != expected) return numel_ == 0;
      expected *= shape[d];
    }
    return true;
  }

  // Address of element [0, 0, ...] (raw stored bytes; strided; math bits not applied).
  const void* data_ptr() const noexcept {
    if (!storage_) return nullptr;
    return storage_->data() + static_cast<size_t>(offset_) * element_size();
  }

  // Typed pointer to the elements of a contiguous tensor whose stored bytes are its values.
  template <class T>
  Result<const T*> data() const {
    if (!detail::DTypeOf<T>::matches(dtype_)) {
      return make_error(ErrorCode::dtype_mismatch,
                        std::string("data<T>() with a T that does not match dtype ") + dtype_name(dtype_));
    }
    if (!is_contiguous()) {
      return make_error(ErrorCode::not_contiguous,
                        "data<T>() of a non-contiguous tensor; use contiguous() or copy_to()");
    }
    if (conj_ || neg_) {
      return make_error(ErrorCode::not_contiguous,
                        "data<T>() of a tensor with the conj/neg bit set; use contiguous() or copy_to()");
    }
    return static_cast<const T*>(data_ptr());
  }

  // Copies the logical values, C-contiguous, into dst (dst_bytes >= numel * size of dtype).
  Status copy_to(void* dst, size_t dst_bytes, DType dtype) const {
    if (!detail::conversion_defined(dtype_, dtype)) {
      return make_error(ErrorCode::unsupported_conversion,
                        std::string("no conversion from ") + dtype_name(dtype_) + " to " + dtype_name(dtype));
    }
    const uint64_t need = static_cast<uint64_t>(numel_) * dtype_size(dtype);
    if (dst_bytes < need) {
      return make_error(ErrorCode::invalid_argument,
                        "copy_to: destination holds " + std::to_string(dst_bytes) + " bytes, " +
                            std::to_string(need) + " needed");
    }
    if (numel_ == 0) return {};
    auto* out = static_cast<uint8_t*>(dst);
    const size_t es = element_size(), os = dtype_size(dtype);
    const auto* base = static_cast<const uint8_t*>(data_ptr());
    const bool same = dtype == dtype_;
    if (same && is_contiguous() && !conj_ && !neg_) {
      std::memcpy(out, base, static_cast<size_t>(nbytes()));
      return {};
    }
    // F16/BF16 -> F32 runs go through the vector kernels (F16C, AVX-512 where the CPU has
    // them): bit for bit what the element-wise conversion gives, at memory speed.
    const bool widen = dtype == DType::F32 && (dtype_ == DType::F16 || dtype_ == DType::BF16) && !conj_ &&
                       !neg_ && reinterpret_cast<uintptr_t>(out) % alignof(float) == 0 &&
                       reinterpret_cast<uintptr_t>(base) % 2 == 0;
    const auto widen_run = widen ? detail::nn_kernels(dtype_).widen : nullptr;
    if (widen && is_contiguous()) {
      widen_run(base, reinterpret_cast<float*>(out), static_cast<size_t>(numel_));
      return {};
    }
    // Walk the elements in C order: an odometer over all dimensions but the last.
    const size_t nd = rank_;
    const int64_t* shape_ = dims_data();
    const int64_t* strides_ = shape_ + rank_;
    const int64_t inner = nd ? shape_[nd - 1] : 1;
    const int64_t inner_stride = nd ? strides_[nd - 1] : 1;
    std::vector<int64_t> idx(nd ? nd - 1 : 0, 0);
    const int64_t rows = numel_ / inner;
    uint8_t tmp[16];
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off = 0;
      for (size_t d = 0; d + 1 < nd; ++d) off += idx[d] * strides_[d];
      const uint8_t* src = base + static_cast<size_t>(off) * es;
      if (same && !conj_ && !neg_ && inner_stride == 1) {
        std::memcpy(out, src, static_cast<size_t>(inner) * es);
        out += static_cast<size_t>(inner) * es;
      } else if (widen && inner_stride == 1) {
        widen_run(src, reinterpret_cast<float*>(out), static_cast<size_t>(inner));
        out += static_cast<size_t>(inner) * os;
      } else {
        for (int64_t k = 0; k < inner; ++k) {
          const uint8_t* e = src + static_cast<size_t>(k * inner_stride) * es;
          if (conj_ || neg_) {
            std::memcpy(tmp, e, es);
            detail::apply_math_bits(tmp, dtype_, conj_, neg_);
            e = tmp;
          }
          if (same) {
            std::memcpy(out, e, es);
          } else {
            detail::convert_element(e, dtype_, out, dtype);
          }
          out += os;
        }
      }
      for (size_t d = nd >= 2 ? nd - 1 : 0; d-- > 0;) {
        if (++idx[d] < shape_[d]) break;
        idx[d] = 0;
      }
    }
    return {};
  }
  Status copy_to(void* dst, size_t dst_bytes) const { return copy_to(dst, dst_bytes, dtype_); }

  // The values as float (from any real dtype; F64 and 64-bit integers round).
  Result<std::vector<float>> to_float32() const {
    // A stride-0 view can stand for more elements than memory holds: ask the allocator
    // first, so that a refusal is an error, not an exception (or an abort without them).
    const uint64_t bytes = static_cast<uint64_t>(numel_) * sizeof(float);
    void* probe = bytes < (uint64_t{1} << 62) ? std::malloc(static_cast<size_t>(bytes) + 1) : nullptr;
    if (probe == nullptr) {
      return make_error(ErrorCode::limit_exceeded, "to_float32: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    std::free(probe);
    std::vector<float> out(static_cast<size_t>(numel_));
    PTREAD_CHECK(copy_to(out.data(), out.size() * sizeof(float), DType::F32));
    return out;
  }

  // An owned, C-contiguous copy with the math bits applied (and, optionally, converted).
  Result<Tensor> clone(DType dtype) const {
    const uint64_t n = static_cast<uint64_t>(numel_) * dtype_size(dtype);
    PTREAD_TRY(auto buf, detail::allocate_aligned(static_cast<size_t>(n)));
    PTREAD_CHECK(copy_to(buf.get(), static_cast<size_t>(n), dtype));
    const uint8_t* p = buf.get();
    auto st = std::make_shared<const Storage>(p, static_cast<size_t>(n), std::move(buf));
    Tensor t = *this;
    t.storage_ = std::move(st);
    t.dtype_ = dtype;
    t.offset_ = 0;
    t.conj_ = t.neg_ = false;
    int64_t* strides = t.dims_data() + t.rank_;
    int64_t acc = 1;
    for (size_t d = t.rank_; d-- > 0;) {
      strides[d] = acc;
      acc *= t.dims_data()[d] > 0 ? t.dims_data()[d] : 1;
    }
    return t;
  }
  Result<Tensor> clone() const { return clone(dtype_); }

  // This tensor when its stored bytes already are its C-contiguous values, else clone().
  Result<Tensor> contiguous() const {
    if (is_contiguous() && !conj_ && !neg_) return *this;
    return clone();
  }

  static std::vector<int64_t> contiguous_strides(Dims shape) {
    std::vector<int64_t> s(shape.size());
    int64_t acc = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      s[d] = acc;
      acc *= shape[d] > 0 ? shape[d] : 1;
    }
    return s;
  }
  static std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
    return contiguous_strides(Dims(shape));
  }

  // Set by the format readers.
  friend struct detail::TensorAccess;
  void set_requires_grad(bool v) noexcept { requires_grad_ = v; }
  void set_math_bits(bool conj, bool neg) noexcept { conj_ = conj; neg_ = neg; }

 private:
  // Sizes and strides of up to kInlineRank dimensions live in the tensor itself; more on
  // the heap. (Opening 100,000 small tensors then allocates nothing per tensor.)
  static constexpr size_t kInlineRank = 4;

  const int64_t* dims_data() const noexcept { return rank_ <= kInlineRank ? inline_dims_ : heap_dims_; }
  int64_t* dims_data() noexcept { return rank_ <= kInlineRank ? inline_dims_ : heap_dims_; }
  // Sizes and strides become copies of rank values at shape and at strides.
  void set_dims(const int64_t* shape, const int64_t* strides, size_t rank) {
    int64_t* heap = nullptr;
    if (rank > kInlineRank) {
      heap = new int64_t[2 * rank];  // before anything changes: throws (or aborts) as a vector would
      std::memcpy(heap, shape, rank * sizeof(int64_t));
      std::memcpy(heap + rank, strides, rank * sizeof(int64_t));
    }
    free_dims();
    rank_ = static_cast<uint32_t>(rank);
    if (heap) {
      heap_dims_ = heap;
    } else {
      for (size_t d = 0; d < rank; ++d) {  // a short loop, inline: no memcpy call per tensor
        inline_dims_[d] = shape[d];
        inline_dims_[rank + d] = strides[d];
      }
    }
  }
  // This tensor (its rank_ already o.rank_, its dims free) takes o's dims; o is left with none.
  void take_dims(Tensor& o) noexcept {
    if (rank_ > kInlineRank) {
      heap_dims_ = o.heap_dims_;
    } else if (rank_) {
      std::memcpy(inline_dims_, o.inline_dims_, 2 * rank_ * sizeof(int64_t));
    }
    o.rank_ = 0;
  }
  void free_dims() noexcept {
    if (rank_ > kInlineRank) delete[] heap_dims_;
    rank_ = 0;
  }
  void copy_fields(const Tensor& o) {
    storage_ = o.storage_;
    offset_ = o.offset_;
    numel_ = o.numel_;
    dtype_ = o.dtype_;
    requires_grad_ = o.requires_grad_;
    conj_ = o.conj_;
    neg_ = o.neg_;
  }

  std::shared_ptr<const Storage> storage_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  union {
    int64_t inline_dims_[2 * kInlineRank];  // rank_ <= kInlineRank: sizes, then strides
    int64_t* heap_dims_;                    // else: 2 * rank_ values, owned
  };
  uint32_t rank_ = 0;
  DType dtype_ = DType::F32;
  bool requires_grad_ = false;
  bool conj_ = false;
  bool neg_ = false;
  std::string device_ = "cpu";
};

}  // namespace ptread
