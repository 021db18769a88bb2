// ptread — quantized and sparse tensors in checkpoints (TorchHooks' rebuilds for
// torch._utils._rebuild_qtensor, _rebuild_sparse_tensor, _rebuild_sparse_csr_tensor): typed
// entries, see quantized.hpp for what users get.
#pragma once

#include "torch_pickle.hpp"

namespace ptread {
namespace detail {

// _rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad, hooks)
// with quantizer_params (qscheme, scale, zero_point) or (qscheme, scales, zero_points,
// axis); qscheme is a torch global (torch.per_tensor_affine ...).
inline Result<uint32_t> TorchHooks::qtensor(Graph& g, const Items& a) {
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
    PTREAD_TRY(spec.int_repr, packed_qtensor(g, a, &spec));
  } else {
    PTREAD_TRY(uint32_t t, rebuild(g, Items{a.ptr, 4}, RebuildKind::v1));  // (storage, offset, size, stride)
    spec.int_repr = g.nodes[t].ref;
    TensorSpec& ts = m_.specs[spec.int_repr];
    spec.dtype = ts.dtype;
    spec.shape = ts.dims;
    spec.rank = ts.rank;
    // int_repr() as torch gives it: the plain integer dtype.
    if (ts.dtype == DType::QINT8) ts.dtype = DType::I8;
    else if (ts.dtype == DType::QUINT8) ts.dtype = DType::U8;
    else if (ts.dtype == DType::QINT32) ts.dtype = DType::I32;
    else return unsupported(g, std::string("quantized tensor of dtype ") + dtype_name(ts.dtype) + " is not supported");
  }
  PTREAD_TRY(m_.specs[spec.int_repr].requires_grad, requires_grad_arg(g, a[5], spec.dtype, "quantized tensor"));
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
      return unsupported(g, "quantized tensor whose per-channel parameters are lists is not supported");
    }
    if (g.kind(q[1]) != ValueKind::tensor || g.kind(q[2]) != ValueKind::tensor || g.kind(q[3]) != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: per-channel scales and zero points that are not "
                                                    "tensors, or an axis that is not an int (torch refuses them)");
    }
    spec.scales = g.nodes[q[1]].ref;
    spec.zero_points = g.nodes[q[2]].ref;
    spec.axis = g.at(q[3]).i;
    // as _empty_per_channel_affine_quantized checks them
    const TensorSpec& st = m_.specs[spec.scales];
    const TensorSpec& zt = m_.specs[spec.zero_points];
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
  m_.qspecs.push_back(spec);
  return g.emit_int(ValueKind::quantized, static_cast<uint32_t>(m_.qspecs.size() - 1), 0);
}

// A quantized tensor of packed sub-byte elements (QUINT4X2: two per byte, low nibble
// first; QUINT2X4: four): int_repr() is the packed bytes, as torch gives it. Only the
// contiguous layout torch produces is read.
inline Result<uint32_t> TorchHooks::packed_qtensor(Graph& g, const Items& a, QuantSpec* spec) {
  if (g.kind(a[1]) != ValueKind::integer) return make_error(ErrorCode::bad_tensor_args, "_rebuild_qtensor: bad offset");
  const Node& sn = g.nodes[a[0]];
  spec->dtype = static_cast<DType>(sn.i & 0xff);
  PTREAD_TRY(size_t rank, dims_count(g, a[2], "size"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, a[2], "size", dims));
  PTREAD_TRY(size_t stride_rank, dims_count(g, a[3], "stride"));
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
  if (m_.storage_table.nbytes(storage) < nbytes) {
    return make_error(ErrorCode::view_out_of_bounds, "_rebuild_qtensor: " + std::to_string(numel) + " packed elements of " +
                                                         dtype_name(spec->dtype) + " need " + std::to_string(nbytes) +
                                                         " bytes; the storage holds " +
                                                         std::to_string(m_.storage_table.nbytes(storage)));
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
  m_.specs.push_back(t);
  return static_cast<uint32_t>(m_.specs.size() - 1);
}

// _rebuild_sparse_tensor(layout, data): coo (indices, values, size[, is_coalesced]);
// csr/csc/bsr/bsc (compressed_indices, plain_indices, values, size). csr_only: torch 1.13's
// _rebuild_sparse_csr_tensor, which rebuilds sparse_csr only. The parts are checked
// against each other, and the indices against the shape, once the file is read
// (sparse_check.hpp).
inline Result<uint32_t> TorchHooks::sparse(Graph& g, const Items& a, bool csr_only) {
  if (a.size() != 2 || g.kind(a[1]) != ValueKind::tuple) {  // Python refuses other counts
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_tensor takes (layout, data)");
  }
  // The layout: a torch global (torch.sparse_coo), or torch.serialization._get_layout(
  // 'torch.sparse_coo') as torch >= 1.13 pickles it.
  std::string_view layout;
  bool by_name = false;  // _get_layout(name), which finds str(layout) of torch's layouts, or fails
  if (g.kind(a[0]) == ValueKind::global) {
    layout = g.global_name(a[0]);
  } else if (g.kind(a[0]) == ValueKind::object) {
    const NodeView o = g.at(a[0]);
    const uint32_t cls = o.items[kObjClass], args = o.items[kObjArgs];
    if (g.kind(cls) == ValueKind::global && g.global_name(cls) == "_get_layout" && args != kNoNode &&
        g.count(args) == 1 && g.kind(g.at(args).items[0]) == ValueKind::string) {
      layout = g.text(g.at(args).items[0]);
      by_name = true;
      if (!starts_with(layout, "torch.")) {
        return make_error(ErrorCode::bad_tensor_args, "_get_layout('" + std::string(layout) + "'): no torch layout is named so");
      }
      layout.remove_prefix(6);
    }
  }
  if (layout.empty()) return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_tensor: the layout is not a torch layout");
  SparseSpec spec;
  if (layout == "sparse_coo") spec.layout = SparseLayout::coo;
  else if (layout == "sparse_csr") spec.layout = SparseLayout::csr;
  else if (layout == "sparse_csc") spec.layout = SparseLayout::csc;
  else if (layout == "sparse_bsr") spec.layout = SparseLayout::bsr;
  else if (layout == "sparse_bsc") spec.layout = SparseLayout::bsc;
  else if (by_name) {  // (torch.strided, torch._mkldnn ... are no sparse layouts; another name is none of torch's)
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_tensor of layout 'torch." + std::string(layout) +
                                                      "', which is no sparse layout torch has");
  } else return unsupported(g, "sparse tensor of layout '" + std::string(layout) + "' is not supported");
  if (csr_only && spec.layout != SparseLayout::csr) {
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_csr_tensor of layout '" + std::string(layout) +
                                                      "' (torch rebuilds only sparse_csr tensors with it)");
  }
  const Items d = g.at(a[1]).items;
  const bool coo = spec.layout == SparseLayout::coo;
  const size_t parts = coo ? 2 : 3;
  // Python unpacks (indices, values, size[, is_coalesced]) or (compressed, plain, values, size)
  if (coo ? d.size() != 3 && d.size() != 4 : d.size() != 4) {
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_tensor: data of " + std::to_string(d.size()) + " items; torch unpacks " +
                                                      (coo ? "3 (indices, values, size) or 4 (and is_coalesced)" : "4"));
  }
  for (size_t k = 0; k < parts; ++k) {
    if (g.kind(d[k]) != ValueKind::tensor) {
      return unsupported(g, std::string("sparse tensor whose part ") + std::to_string(k) + " is a " + value_kind_name(g.kind(d[k])) +
                                " is not supported");
    }
  }
  if (coo) {
    spec.indices = g.nodes[d[0]].ref;
    spec.values = g.nodes[d[1]].ref;
    if (d.size() > 3) {  // torch 2.x's is_coalesced: a bool, or None (unknown)
      if (g.kind(d[3]) == ValueKind::boolean) {
        spec.coalesced = g.at(d[3]).i != 0 ? 1 : 0;
      } else if (g.kind(d[3]) != ValueKind::none) {
        return make_error(ErrorCode::bad_tensor_args, std::string("_rebuild_sparse_tensor: is_coalesced is a ") +
                                                          value_kind_name(g.kind(d[3])) + ", not a bool");
      }
    }
    if (m_.specs[spec.values].rank == 0) {  // torch expands 0-dim values to [1] (stride 0)
      TensorSpec v = m_.specs[spec.values];
      int64_t* dims = new_dims(g, 1);
      dims[0] = 1;
      dims[1] = 0;
      v.dims = dims;
      v.rank = 1;
      m_.specs.push_back(v);
      spec.values = static_cast<uint32_t>(m_.specs.size() - 1);
    }
  } else {
    spec.compressed = g.nodes[d[0]].ref;
    spec.plain = g.nodes[d[1]].ref;
    spec.values = g.nodes[d[2]].ref;
  }
  PTREAD_TRY(size_t rank, dims_count(g, d[parts], "sparse size"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, d[parts], "sparse size", dims));
  for (size_t k = 0; k < rank; ++k) {
    if (dims[k] < 0) return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_tensor: a negative size");
  }
  spec.shape = dims;
  spec.rank = static_cast<uint32_t>(rank);
  m_.sparse_specs.push_back(spec);
  return g.emit_int(ValueKind::sparse, static_cast<uint32_t>(m_.sparse_specs.size() - 1), 0);
}
}  // namespace detail
}  // namespace ptread
