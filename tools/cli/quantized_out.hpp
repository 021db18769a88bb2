// ptread (the tool) — `export --quantized int|dequantize|skip`: quantized tensors as plain ones.
//
//   int         the integer representation under the tensor's name (I8, U8 or I32 as torch's
//               int_repr() gives it; QUINT4X2 and QUINT2X4 as their packed bytes, U8), with
//               NAME.scale and NAME.zero_point (scalars F64 and I64 for per-tensor schemes; the
//               per-channel vectors as stored: F64 and I64, F32 and F32 for float_qparams),
//               and NAME.qscheme, NAME.dtype and (per channel) NAME.axis in the metadata
//   dequantize  F32 values, as torch's dequantize() gives them, bit for bit
//   skip        nothing (named on stderr), the default
#pragma once

#include "output.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ptread_cli {

enum class QuantizedOut { skip, int_repr, dequantize };

// A tensor owning a copy of n bytes.
inline ptread::Result<ptread::Tensor> owned_tensor(ptread::DType dtype, const std::vector<int64_t>& shape, const void* data,
                                                   size_t n) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(n);
  if (n) std::memcpy(bytes->data(), data, n);
  const uint8_t* p = bytes->data();
  auto storage = std::make_shared<const ptread::Storage>(p, n, std::move(bytes));
  return ptread::Tensor::view(std::move(storage), dtype, shape, ptread::Tensor::contiguous_strides(shape), 0);
}

// The plain tensors (and metadata entries) standing for quantized tensor q in mode `how`.
inline ptread::Status quantized_as_plain(const ptread::NamedQuantized& q, QuantizedOut how,
                                         std::vector<ptread::NamedTensor>* tensors,
                                         std::vector<std::pair<std::string, std::string>>* metadata) {
  const ptread::QuantizedTensor& t = q.tensor;
  if (how == QuantizedOut::dequantize) {
    PTREAD_TRY(std::vector<float> values, t.dequantize());
    PTREAD_TRY(ptread::Tensor f, owned_tensor(ptread::DType::F32, t.shape, values.data(), values.size() * sizeof(float)));
    tensors->push_back({q.name, std::move(f)});
    return {};
  }
  tensors->push_back({q.name, t.int_repr});
  if (t.per_channel()) {
    tensors->push_back({q.name + ".scale", t.scales});
    tensors->push_back({q.name + ".zero_point", t.zero_points});
    metadata->emplace_back(q.name + ".axis", std::to_string(t.axis));
  } else {
    PTREAD_TRY(ptread::Tensor scale, owned_tensor(ptread::DType::F64, {}, &t.scale, sizeof t.scale));
    PTREAD_TRY(ptread::Tensor zero_point, owned_tensor(ptread::DType::I64, {}, &t.zero_point, sizeof t.zero_point));
    tensors->push_back({q.name + ".scale", std::move(scale)});
    tensors->push_back({q.name + ".zero_point", std::move(zero_point)});
  }
  metadata->emplace_back(q.name + ".qscheme", ptread::qscheme_name(t.qscheme));
  metadata->emplace_back(q.name + ".dtype", ptread::dtype_name(t.dtype));
  return {};
}

}  // namespace ptread_cli
