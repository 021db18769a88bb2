// ptread — torch's meaning of the globals in a checkpoint pickle.
//
// torch.save pickles each tensor as a call to a rebuild function (torch/_utils.py) whose
// first argument is a persistent id naming a storage:
//   _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
//                      backward_hooks[, metadata])        dtype from the storage class
//   _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
//                      torch >= 2.1 for fp8, uint16/32/64, complex32; UntypedStorage
//   _rebuild_tensor(storage, offset, size, stride)      before 0.4
//   _rebuild_parameter(data, requires_grad, hooks), _rebuild_parameter_with_state(..., state)
//   torch._tensor._rebuild_from_type_v2(func, new_type, args, state) = func(*args)
// Mirrors torch/_utils.py: _rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3; the
// storage is persistent_id.hpp's node, its dtype the storage class's (v3: the argument).
#pragma once

#include "../context.hpp"

#include <string>

namespace ptread {
namespace detail {

enum class RebuildKind { v1, v2, v3 };

inline Result<uint32_t> rebuild_tensor(TorchContext& cx, Graph& g, const Items& a, RebuildKind kind) {
  // _rebuild_tensor(storage, offset, size, stride), _rebuild_tensor_v2(..., requires_grad,
  // backward_hooks, metadata=None), _rebuild_tensor_v3(..., backward_hooks, dtype,
  // metadata=None): Python refuses other counts.
  // torch.jit.load's _rebuild_tensor_v2 reads the first five and ignores the rest: in a
  // zip file such a count waits for the directory (refusal()).
  const size_t min_args = kind == RebuildKind::v1 ? 4 : kind == RebuildKind::v2 ? 6 : 7;
  const size_t max_args = kind == RebuildKind::v1 ? 4 : min_args + 1;
  const bool script_reads = kind == RebuildKind::v2 && !cx.legacy && a.size() >= 5;
  const bool python_reads = a.size() >= min_args && a.size() <= max_args;
  if ((!python_reads && !script_reads) || g.kind(a[0]) != ValueKind::storage || g.kind(a[1]) != ValueKind::integer) {
    return make_error(ErrorCode::bad_tensor_args,
                      "tensor rebuild arguments are malformed (" + std::to_string(a.size()) +
                          " arguments, first is a " + value_kind_name(g.kind(a.empty() ? 0 : a[0])) + ")");
  }
  if (!python_reads) {
    cx.note_zip_refusal(make_error(ErrorCode::bad_tensor_args, "_rebuild_tensor_v2 with " + std::to_string(a.size()) +
                                                                " arguments in a zip file (torch.load takes 6 or 7)"));
  }
  const Node& sn = g.nodes[a[0]];  // ref: the storage; i: dtype, location node << 8
  const uint32_t storage = sn.ref;
  const uint32_t location = static_cast<uint32_t>(static_cast<uint64_t>(sn.i) >> 8);
  DType dtype = static_cast<DType>(sn.i & 0xff);
  size_t meta_index = 6;
  if (kind == RebuildKind::v3) {
    const uint32_t d = a[6];
    if (g.kind(d) != ValueKind::global) return make_error(ErrorCode::bad_tensor_args, "_rebuild_tensor_v3 dtype is not a global");
    Node& dn = g.nodes[d];  // tag3: 0 unknown yet, 0xff no torch dtype, else dtype + 1
    if (dn.tag3 == 0) {
      dn.tag3 = g.global_module(d) == "torch" && dtype_from_torch_name(g.global_name(d), &dtype)
                    ? static_cast<uint8_t>(static_cast<uint8_t>(dtype) + 1)
                    : 0xff;
    }
    if (dn.tag3 == 0xff) {
      return make_error(ErrorCode::unknown_dtype,
                        "unknown dtype '" + std::string(g.global_module(d)) + "." + std::string(g.global_name(d)) + "'");
    }
    dtype = static_cast<DType>(dn.tag3 - 1);
    meta_index = 7;
  }
  PTREAD_TRY(size_t rank, cx.dims_count(g, a[2], "size"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, a[2], "size", dims, true));
  size_t stride_rank = rank;
  const ValueKind stride_kind = g.kind(a[3]);
  if (stride_kind == ValueKind::none ||
      ((stride_kind == ValueKind::tuple || stride_kind == ValueKind::list) && g.count(a[3]) == 0)) {
    // Tensor.set_ takes a stride of None, or an empty one, as the size's contiguous strides
    // (torch 1.13 reads _rebuild_tensor_v2(s, 0, (2, 3), None, ...) with strides (3, 1)).
    PTREAD_CHECK(contiguous_strides(dims, rank));
  } else {
    PTREAD_TRY(stride_rank, cx.dims_count(g, a[3], "stride"));
    PTREAD_CHECK(read_dims(g, a[3], "stride", stride_rank == rank ? dims + rank : nullptr, true));
  }
  TensorSpec t;
  t.offset = g.at(a[1]).i;
  t.dims = dims;
  t.rank = static_cast<uint32_t>(rank);
  t.storage = storage;
  t.location = location;
  t.dtype = dtype;
  if (kind != RebuildKind::v1) {
    PTREAD_TRY(t.requires_grad, requires_grad_arg(g, a[4], dtype, "tensor"));
  }
  if (a.size() > meta_index && g.kind(a[meta_index]) == ValueKind::dict) {
    const uint32_t md = a[meta_index];
    auto flag = [&](const char* k) {
      uint32_t v = g.dict_get(md, k);
      return v != kNoNode && g.kind(v) == ValueKind::boolean && g.at(v).i != 0;
    };
    t.conj = flag("conj");
    t.neg = flag("neg");
    if (PTREAD_UNLIKELY(t.neg && dtype_is_opaque(dtype))) {  // no value to negate: refused, not guessed
      return make_error(ErrorCode::bad_tensor_args,
                        std::string("a ") + dtype_name(dtype) + " tensor with the neg bit (torch negates no such tensor)");
    }
  }
  return cx.add_tensor(g, t, stride_rank);
}

inline bool is_rebuild_tensor_v2(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && name == "_rebuild_tensor_v2";
}
inline bool is_rebuild_tensor_v3(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && name == "_rebuild_tensor_v3";
}
inline bool is_rebuild_tensor_v1(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && name == "_rebuild_tensor";
}

inline Result<uint32_t> rebuild_tensor_v2_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return rebuild_tensor(cx, g, c.a, RebuildKind::v2);
}
inline Result<uint32_t> rebuild_tensor_v3_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return rebuild_tensor(cx, g, c.a, RebuildKind::v3);
}
inline Result<uint32_t> rebuild_tensor_v1_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return rebuild_tensor(cx, g, c.a, RebuildKind::v1);
}

}  // namespace detail
}  // namespace ptread
