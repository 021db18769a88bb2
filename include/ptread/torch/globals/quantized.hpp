// ptread — quantized tensors: torch/_utils.py's _rebuild_qtensor, as typed entries (see
// ../../quantized.hpp for what users get).
#pragma once

#include "../context.hpp"
#include "rebuild_tensor.hpp"
#include "unsupported.hpp"

namespace ptread {
namespace detail {

// A quantized tensor of packed sub-byte elements (QUINT4X2: two per byte, low nibble
// first; QUINT2X4: four): int_repr() is the packed bytes, as torch gives it. Only the
// contiguous layout torch produces is read.
inline Result<uint32_t> packed_qtensor(TorchContext& cx, Graph& g, const Items& a, QuantSpec* spec) {
  if (g.kind(a[1]) != ValueKind::integer) return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: bad offset");
  const Node& sn = g.nodes[a[0]];
  spec->dtype = static_cast<DType>(sn.i & 0xff);
  PTREAD_TRY(size_t rank, cx.dims_count(g, a[2], "size"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, a[2], "size", dims));
  PTREAD_TRY(size_t stride_rank, cx.dims_count(g, a[3], "stride"));
  PTREAD_CHECK(read_dims(g, a[3], "stride", stride_rank == rank ? dims + rank : nullptr));
  uint64_t numel = 1, expect = 1;
  bool contiguous = stride_rank == rank && g.at(a[1]).i == 0;
  for (size_t d = rank; d-- > 0;) {
    if (dims[d] < 0 || mul_overflow(numel, static_cast<uint64_t>(dims[d]), &numel)) {
      return make_error(ErrorCode::shape_overflow, "_rebuild_qtensor: bad size");
    }
    if (contiguous && dims[d] != 1 && dims[rank + d] != static_cast<int64_t>(expect)) contiguous = false;
    expect *= static_cast<uint64_t>(dims[d]);
  }
  if (!contiguous) {
    return make_error(ErrorCode::bad_tensor_args,
                      std::string("_rebuild_qtensor: a non-contiguous ") + dtype_name(spec->dtype) + " tensor");
  }
  const uint64_t per_byte = spec->dtype == DType::QUINT4X2 ? 2 : 4;
  const uint64_t nbytes = (numel + per_byte - 1) / per_byte;
  const uint32_t storage = sn.ref;
  if (cx.model.storage_table.nbytes(storage) < nbytes) {
    return make_error(ErrorCode::view_out_of_bounds, "_rebuild_qtensor: " + std::to_string(numel) + " packed elements of " +
                                                         dtype_name(spec->dtype) + " need " + std::to_string(nbytes) +
                                                         " bytes; the storage holds " +
                                                         std::to_string(cx.model.storage_table.nbytes(storage)));
  }
  spec->shape = dims;
  spec->rank = static_cast<uint32_t>(rank);
  int64_t* packed = new_dims(g, 1);
  packed[0] = static_cast<int64_t>(nbytes);
  packed[1] = 1;
  TensorSpec t;
  t.dims = packed;
  t.rank = 1;
  t.storage = storage;
  t.location = static_cast<uint32_t>(static_cast<uint64_t>(sn.i) >> 8);
  t.dtype = DType::U8;
  cx.model.specs.push_back(t);
  return static_cast<uint32_t>(cx.model.specs.size() - 1);
}

// _rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad, hooks)
// with quantizer_params (qscheme, scale, zero_point) or (qscheme, scales, zero_points,
// axis); qscheme is a torch global (torch.per_tensor_affine ...).
inline Result<uint32_t> qtensor(TorchContext& cx, Graph& g, const Items& a) {
  if (a.size() != 7) {
    return make_error(ErrorCode::bad_tensor_args,
                      "_rebuild_qtensor takes 7 arguments, not " + std::to_string(a.size()));  // as Python
  }
  const NodeView qp = g.at(a[4]);
  if ((qp.kind != ValueKind::tuple && qp.kind != ValueKind::list) || qp.items.size() < 3 ||
      g.kind(qp.items[0]) != ValueKind::global) {
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: quantizer parameters are not (qscheme, ...)");
  }
  const Items q = qp.items;
  QuantSpec spec;
  if (g.kind(a[0]) == ValueKind::storage && (static_cast<DType>(g.nodes[a[0]].i & 0xff) == DType::QUINT4X2 ||
                                             static_cast<DType>(g.nodes[a[0]].i & 0xff) == DType::QUINT2X4)) {
    PTREAD_TRY(spec.int_repr, packed_qtensor(cx, g, a, &spec));
  } else {
    PTREAD_TRY(uint32_t t, rebuild_tensor(cx, g, Items{a.ptr, 4}, RebuildKind::v1));  // (storage, offset, size, stride)
    spec.int_repr = g.nodes[t].ref;
    TensorSpec& ts = cx.model.specs[spec.int_repr];
    spec.dtype = ts.dtype;
    spec.shape = ts.dims;
    spec.rank = ts.rank;
    // int_repr() as torch gives it: the plain integer dtype.
    if (ts.dtype == DType::QINT8) ts.dtype = DType::I8;
    else if (ts.dtype == DType::QUINT8) ts.dtype = DType::U8;
    else if (ts.dtype == DType::QINT32) ts.dtype = DType::I32;
    else return cx.unsupported(g, std::string("quantized tensor of dtype ") + dtype_name(ts.dtype) + " is not supported");
  }
  PTREAD_TRY(cx.model.specs[spec.int_repr].requires_grad, requires_grad_arg(g, a[5], spec.dtype, "quantized tensor"));
  // torch.load rebuilds three qschemes: per_tensor_affine from (qscheme, scale, zero_point),
  // per_channel_affine and per_channel_affine_float_qparams from (qscheme, scales,
  // zero_points, axis); any other it refuses ("Can't deserialize quantized tensor"), as it
  // refuses other item counts (Python's unpacking).
  const std::string_view scheme = g.global_name(q[0]);
  if (!qscheme_from_name(scheme, &spec.qscheme) || spec.qscheme == QScheme::per_tensor_symmetric ||
      spec.qscheme == QScheme::per_channel_symmetric) {
    return make_error(ErrorCode::bad_tensor_args,
                      "_rebuild_qtensor: qscheme '" + std::string(scheme) + "' (torch.load rebuilds per_tensor_affine, "
                      "per_channel_affine and per_channel_affine_float_qparams)");
  }
  const size_t want = spec.qscheme == QScheme::per_tensor_affine ? 3 : 4;
  if (q.size() != want) {
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: " + std::string(scheme) + " parameters of " +
                                                      std::to_string(q.size()) + " items, not " + std::to_string(want));
  }
  if (want == 3) {
    // torch's argument parser: the scale a float, int or bool; the zero point an int
    const ValueKind sk = g.kind(q[1]);
    if (sk == ValueKind::floating) spec.scale = g.at(q[1]).f;
    else if (sk == ValueKind::integer || sk == ValueKind::boolean) spec.scale = static_cast<double>(g.at(q[1]).i);
    else return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: the per-tensor scale is not a number");
    if (g.kind(q[2]) != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: the per-tensor zero point is not an int");
    }
    spec.zero_point = g.at(q[2]).i;
  } else {
    if (g.kind(q[1]) == ValueKind::list && g.kind(q[2]) == ValueKind::list) {  // torch makes tensors of two lists
      return cx.unsupported(g, "quantized tensor whose per-channel parameters are lists is not supported");
    }
    if (g.kind(q[1]) != ValueKind::tensor || g.kind(q[2]) != ValueKind::tensor || g.kind(q[3]) != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: per-channel scales and zero points that are not "
                                                    "tensors, or an axis that is not an int (torch refuses them)");
    }
    spec.scales = g.nodes[q[1]].ref;
    spec.zero_points = g.nodes[q[2]].ref;
    spec.axis = g.at(q[3]).i;
    // as _empty_per_channel_affine_quantized checks them
    const TensorSpec& st = cx.model.specs[spec.scales];
    const TensorSpec& zt = cx.model.specs[spec.zero_points];
    if (!dtype_is_differentiable(st.dtype) || dtype_is_complex(st.dtype) || dtype_is_opaque(st.dtype)) {
      return make_error(ErrorCode::bad_tensor_args, std::string("_rebuild_qtensor: scales of dtype ") + dtype_name(st.dtype) +
                                                        " (torch wants floating point)");
    }
    if (st.rank != 1 || zt.rank != 1) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: scales and zero points must have one dimension");
    }
    if (st.dims[0] != zt.dims[0]) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: " + std::to_string(st.dims[0]) + " scales and " +
                                                        std::to_string(zt.dims[0]) + " zero points");
    }
    // torch 1.13 takes any axis here; ptread, whose QuantizedTensor names a channel by it, one of the tensor's
    if (spec.axis < 0 || static_cast<uint64_t>(spec.axis) >= spec.rank) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: axis " + std::to_string(spec.axis) + " of a " +
                                                        std::to_string(spec.rank) + "-d tensor");
    }
    // torch writes per_channel_affine for float_qparams too: the zero points' dtype tells.
    if (zt.dtype == DType::F32 || zt.dtype == DType::F64 || zt.dtype == DType::F16) {
      spec.qscheme = QScheme::per_channel_affine_float_qparams;
    }
  }
  cx.model.qspecs.push_back(spec);
  return g.emit_int(ValueKind::quantized, static_cast<uint32_t>(cx.model.qspecs.size() - 1), 0);
}

inline bool is_rebuild_qtensor(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && name == "_rebuild_qtensor";
}
inline Result<uint32_t> rebuild_qtensor_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return qtensor(cx, g, c.a);
}

}  // namespace detail
}  // namespace ptread
