// ptread — quantized and sparse tensors as typed entries.
//
// torch.save writes a quantized tensor as _rebuild_qtensor(storage, offset, size, stride,
// quantizer_params, requires_grad, hooks) and a sparse one as _rebuild_sparse_tensor(layout,
// data) (_rebuild_sparse_csr_tensor in torch 1.13). ptread hands out their parts:
//
//   for (const auto& q : ck->quantized()) {        // name, QuantizedTensor
//     q.tensor.int_repr;                            // I8 / U8 / I32, as torch's int_repr()
//     std::vector<float> x(q.tensor.numel());
//     q.tensor.dequantize(x.data(), x.size());      // what torch's dequantize() gives
//   }
//   for (const auto& s : ck->sparse()) ...          // layout, shape, index and value tensors
#pragma once

#include "tensor.hpp"

#include <string>
#include <vector>

namespace ptread {

enum class QScheme { per_tensor_affine, per_channel_affine, per_channel_affine_float_qparams, per_tensor_symmetric, per_channel_symmetric };

inline const char* qscheme_name(QScheme s) noexcept {
  switch (s) {
    case QScheme::per_tensor_affine: return "per_tensor_affine";
    case QScheme::per_channel_affine: return "per_channel_affine";
    case QScheme::per_channel_affine_float_qparams: return "per_channel_affine_float_qparams";
    case QScheme::per_tensor_symmetric: return "per_tensor_symmetric";
    case QScheme::per_channel_symmetric: return "per_channel_symmetric";
  }
  return "?";
}

inline bool qscheme_from_name(std::string_view s, QScheme* out) noexcept {
  for (QScheme q : {QScheme::per_tensor_affine, QScheme::per_channel_affine, QScheme::per_channel_affine_float_qparams,
                    QScheme::per_tensor_symmetric, QScheme::per_channel_symmetric}) {
    if (s == qscheme_name(q)) {
      *out = q;
      return true;
    }
  }
  return false;
}

// A quantized tensor: real value = (q - zero_point) * scale, per tensor or per channel
// along `axis`.
struct QuantizedTensor {
  DType dtype = DType::QINT8;  // QINT8, QUINT8, QINT32, QUINT4X2 or QUINT2X4
  std::vector<int64_t> shape;  // the logical shape
  // The stored integers as torch's int_repr() gives them: I8, U8 or I32 with the tensor's
  // shape and strides; for QUINT4X2/QUINT2X4 the packed bytes (U8, [ceil(numel / 2 or 4)],
  // low bits first).
  Tensor int_repr;
  QScheme qscheme = QScheme::per_tensor_affine;
  double scale = 0;            // per-tensor schemes
  int64_t zero_point = 0;
  Tensor scales;               // per-channel schemes: F64 (F32 for float_qparams), one per channel
  Tensor zero_points;          // per-channel schemes: I64 (F32 for float_qparams)
  int64_t axis = 0;

  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  bool per_channel() const noexcept {
    return qscheme == QScheme::per_channel_affine || qscheme == QScheme::per_channel_affine_float_qparams ||
           qscheme == QScheme::per_channel_symmetric;
  }

  // The real values in row-major order into out[0, n), n == numel(), computed as torch's
  // CPU dequantize() computes them: per tensor in float ((q - zp) * scale, all float), per
  // channel in double then rounded to float; float_qparams in float.
  Status dequantize(float* out, size_t n) const {
    if (n != static_cast<size_t>(numel())) {
      return make_error(ErrorCode::invalid_argument, "dequantize: the output holds " + std::to_string(n) + " floats; the tensor has " +
                                                         std::to_string(numel()) + " elements");
    }
    PTREAD_TRY(Tensor c, int_repr.contiguous());
    const size_t avail = static_cast<size_t>(c.nbytes());
    const uint8_t* raw = avail ? c.storage()->data() + static_cast<size_t>(c.storage_offset()) * c.element_size() : nullptr;
    const unsigned bits = dtype == DType::QUINT4X2 ? 4 : dtype == DType::QUINT2X4 ? 2 : 0;
    if (bits ? avail * (8 / bits) < n : static_cast<size_t>(c.numel()) != n) {
      return make_error(ErrorCode::bad_tensor_args, "dequantize: the integer representation does not hold " + std::to_string(n) + " values");
    }
    auto value = [&](size_t i) -> int64_t {
      if (bits) return (raw[i * bits / 8] >> ((i * bits) % 8)) & ((1u << bits) - 1);
      switch (c.dtype()) {
        case DType::I8: { int8_t v; std::memcpy(&v, raw + i, 1); return v; }
        case DType::U8: return raw[i];
        default: { int32_t v; std::memcpy(&v, raw + 4 * i, 4); return v; }
      }
    };
    if (!bits && c.dtype() != DType::I8 && c.dtype() != DType::U8 && c.dtype() != DType::I32) {
      return make_error(ErrorCode::unsupported_conversion,
                        std::string("dequantize of a ") + dtype_name(c.dtype()) + " integer representation");
    }
    if (!per_channel()) {
      const float s = static_cast<float>(scale), z = static_cast<float>(zero_point);
      for (size_t i = 0; i < n; ++i) out[i] = (static_cast<float>(value(i)) - z) * s;
      return {};
    }
    if (axis < 0 || static_cast<size_t>(axis) >= shape.size()) {
      return make_error(ErrorCode::bad_tensor_args, "dequantize: axis " + std::to_string(axis) + " of a " +
                                                        std::to_string(shape.size()) + "-d tensor");
    }
    const size_t channels = static_cast<size_t>(shape[static_cast<size_t>(axis)]);
    size_t inner = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= static_cast<size_t>(shape[d]);
    if (qscheme == QScheme::per_channel_affine_float_qparams) {
      PTREAD_TRY(std::vector<float> s, scales.to_float32());
      PTREAD_TRY(std::vector<float> z, zero_points.to_float32());
      if (s.size() != channels || z.size() != channels) return qparams_mismatch(channels);
      for (size_t i = 0; i < n; ++i) {
        const size_t ch = (i / inner) % channels;
        out[i] = (static_cast<float>(value(i)) - z[ch]) * s[ch];
      }
      return {};
    }
    std::vector<double> s(static_cast<size_t>(scales.numel()));
    std::vector<int64_t> z(static_cast<size_t>(zero_points.numel()));
    if (s.size() != channels || z.size() != channels) return qparams_mismatch(channels);
    PTREAD_CHECK(scales.copy_to(s.data(), s.size() * sizeof(double), DType::F64));
    PTREAD_CHECK(zero_points.copy_to(z.data(), z.size() * sizeof(int64_t), DType::I64));
    for (size_t i = 0; i < n; ++i) {
      const size_t ch = (i / inner) % channels;
      out[i] = static_cast<float>(static_cast<double>(value(i) - z[ch]) * s[ch]);
    }
    return {};
  }

  Result<std::vector<float>> dequantize() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    PTREAD_CHECK(dequantize(out.data(), out.size()));
    return out;
  }

 private:
  Error qparams_mismatch(size_t channels) const {
    return make_error(ErrorCode::bad_tensor_args, "dequantize: " + std::to_string(scales.numel()) + " scales and " +
                                                      std::to_string(zero_points.numel()) + " zero points for " +
                                                      std::to_string(channels) + " channels");
  }
};

enum class SparseLayout { coo, csr, csc, bsr, bsc };

inline const char* sparse_layout_name(SparseLayout l) noexcept {
  switch (l) {
    case SparseLayout::coo: return "coo";
    case SparseLayout::csr: return "csr";
    case SparseLayout::csc: return "csc";
    case SparseLayout::bsr: return "bsr";
    case SparseLayout::bsc: return "bsc";
  }
  return "?";
}

// A sparse tensor's parts, as torch saved them, checked while opening as torch.load checks
// them (torch/sparse_check.hpp): every index lies inside the shape.
struct SparseTensor {
  SparseLayout layout = SparseLayout::coo;
  std::vector<int64_t> shape;  // the dense shape
  Tensor indices;              // coo: [sparse_dim, nnz], I64
  Tensor compressed_indices;   // csr/bsr: crow_indices; csc/bsc: ccol_indices
  Tensor plain_indices;        // csr/bsr: col_indices; csc/bsc: row_indices
  Tensor values;               // coo: [nnz, dense dims...]; compressed: [nnz, blocks...]
  int coalesced = -1;          // coo: 1 or 0 when the file says (torch >= 2.1), else -1

  DType dtype() const noexcept { return values.dtype(); }
};

struct NamedQuantized {
  std::string name;
  QuantizedTensor tensor;
};

struct NamedSparse {
  std::string name;
  SparseTensor tensor;
};

}  // namespace ptread
