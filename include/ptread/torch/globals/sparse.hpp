// ptread — sparse tensors: torch/_utils.py's _rebuild_sparse_tensor and
// _rebuild_sparse_csr_tensor, as typed entries (see ../../quantized.hpp).
#pragma once

#include "../context.hpp"
#include "../sparse_check.hpp"

namespace ptread {
namespace detail {

// _rebuild_sparse_tensor(layout, data): coo (indices, values, size[, is_coalesced]);
// csr/csc/bsr/bsc (compressed_indices, plain_indices, values, size). csr_only: torch 1.13's
// _rebuild_sparse_csr_tensor, which rebuilds sparse_csr only. The parts are checked
// against each other, and the indices against the shape, once the file is read
// (sparse_check.hpp).
inline Result<uint32_t> sparse(TorchContext& cx, Graph& g, const Items& a, bool csr_only) {
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
  } else return cx.unsupported(g, "sparse tensor of layout '" + std::string(layout) + "' is not supported");
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
      return cx.unsupported(g, std::string("sparse tensor whose part ") + std::to_string(k) + " is a " + value_kind_name(g.kind(d[k])) +
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
    if (cx.model.specs[spec.values].rank == 0) {  // torch expands 0-dim values to [1] (stride 0)
      TensorSpec v = cx.model.specs[spec.values];
      int64_t* dims = new_dims(g, 1);
      dims[0] = 1;
      dims[1] = 0;
      v.dims = dims;
      v.rank = 1;
      cx.model.specs.push_back(v);
      spec.values = static_cast<uint32_t>(cx.model.specs.size() - 1);
    }
  } else {
    spec.compressed = g.nodes[d[0]].ref;
    spec.plain = g.nodes[d[1]].ref;
    spec.values = g.nodes[d[2]].ref;
  }
  PTREAD_TRY(size_t rank, cx.dims_count(g, d[parts], "sparse size"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, d[parts], "sparse size", dims));
  for (size_t k = 0; k < rank; ++k) {
    if (dims[k] < 0) return make_error(ErrorCode::bad_tensor_args, "_rebuild_sparse_tensor: a negative size");
  }
  spec.shape = dims;
  spec.rank = static_cast<uint32_t>(rank);
  cx.model.sparse_specs.push_back(spec);
  return g.emit_int(ValueKind::sparse, static_cast<uint32_t>(cx.model.sparse_specs.size() - 1), 0);
}

inline bool is_rebuild_sparse(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && (name == "_rebuild_sparse_tensor" || name == "_rebuild_sparse_csr_tensor");
}
inline Result<uint32_t> rebuild_sparse_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return sparse(cx, g, c.a, g.global_name(c.callable) == "_rebuild_sparse_csr_tensor");
}

}  // namespace detail
}  // namespace ptread
