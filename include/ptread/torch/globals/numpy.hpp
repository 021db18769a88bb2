// ptread — numpy objects in checkpoints, as torch.load's unpickler builds them (no numpy
// code runs): numpy.core.multiarray._reconstruct(numpy.ndarray, ...) + BUILD state
// (version, shape, dtype, fortran_order, raw bytes) becomes a tensor; scalar(dtype, bytes)
// a plain int, float or bool; numpy.dtype('f8', ...) + BUILD state gives the element type
// and byte order. numpy._core.multiarray (numpy >= 2) is the same.
//
// Mirrors numpy/core/multiarray: _reconstruct, scalar, ndarray.__setstate__.
#pragma once

#include "../context.hpp"
#include "codecs.hpp"

#include <algorithm>
#include <string>

namespace ptread {
namespace detail {

// ---- numpy (numpy.core.multiarray before numpy 2, numpy._core.multiarray since) ----
inline bool is_numpy_module(std::string_view mod) {
  return mod == "numpy.core.multiarray" || mod == "numpy._core.multiarray";
}
inline bool is_numpy(const Graph& g, uint32_t cls, const char* name) {
  return g.kind(cls) == ValueKind::global && g.global_module(cls) == "numpy" && g.global_name(cls) == name;
}

// A numpy.dtype object: numpy.dtype('f8', False, True) with BUILD state (3, '<', ...).
struct NumpyType {
  DType dtype;
  bool big_endian;
};

inline Result<NumpyType> numpy_dtype(const Graph& g, uint32_t d) {
  const NodeView n = g.at(d);
  if (n.kind != ValueKind::object || !is_numpy(g, n.items[kObjClass], "dtype")) {
    return make_error(ErrorCode::bad_tensor_args, "numpy data without a numpy.dtype");
  }
  const Items& args = g.at(n.items[kObjArgs]).items;
  if (args.empty() || g.kind(args[0]) != ValueKind::string) {
    return make_error(ErrorCode::bad_tensor_args, "numpy.dtype without a type code");
  }
  static const struct { const char* code; DType t; } codes[] = {
      {"b1", DType::BOOL}, {"u1", DType::U8}, {"i1", DType::I8}, {"i2", DType::I16},
      {"u2", DType::U16}, {"i4", DType::I32}, {"u4", DType::U32}, {"i8", DType::I64},
      {"u8", DType::U64}, {"f2", DType::F16}, {"f4", DType::F32}, {"f8", DType::F64},
      {"c8", DType::C64}, {"c16", DType::C128}};
  const std::string_view code = g.text(args[0]);
  NumpyType out{DType::U8, false};
  bool known = false;
  for (const auto& c : codes) {
    if (code == c.code) {
      out.dtype = c.t;
      known = true;
    }
  }
  if (!known) return make_error(ErrorCode::unknown_dtype, "numpy array of dtype '" + std::string(code) + "': no tensor equivalent");
  const uint32_t st = n.items[kObjState];
  if (st != kNoNode && g.kind(st) == ValueKind::tuple && g.at(st).items.size() > 1) {
    const uint32_t order = g.at(st).items[1];
    out.big_endian = g.is_string(order, ">");
  }
  return out;
}

// ndarray BUILD state: (version, shape, dtype, is_fortran, raw bytes), or numpy's first
// form without the version, as ndarray.__setstate__ takes them: version 0 or 1, the shape a
// tuple, is_fortran an int or bool, the raw bytes exactly the array's (numpy refuses
// anything else: "can't handle version", "buffer size does not match array size"). The
// object node becomes a tensor node in place, so every reference to it sees the tensor.
inline Status numpy_array(TorchContext& cx, Graph& g, uint32_t obj, uint32_t state) {
  const NodeView s = g.at(state);
  auto refused = [](const std::string& why) {
    return make_error(ErrorCode::bad_tensor_args, "numpy.ndarray state: " + why + " (numpy refuses it)");
  };
  if (s.kind != ValueKind::tuple || (s.items.size() != 5 && s.items.size() != 4)) {
    return refused("not a tuple of 5 items (version, shape, dtype, is_fortran, bytes) or of 4");
  }
  const bool versioned = s.items.size() == 5;
  const Items it{s.items.ptr + (versioned ? 1 : 0), 4};  // shape, dtype, is_fortran, bytes
  if (versioned) {
    const ValueKind vk = g.kind(s.items[0]);
    if (vk != ValueKind::integer && vk != ValueKind::boolean) return refused("a version that is not an int");
    const int64_t version = g.at(s.items[0]).i;
    if (version != 0 && version != 1) return refused("version " + std::to_string(version));
  }
  if (g.kind(it[0]) != ValueKind::tuple) return refused("a shape that is not a tuple");
  if (g.kind(it[2]) != ValueKind::integer && g.kind(it[2]) != ValueKind::boolean) {
    return refused("an is_fortran flag that is not an int");
  }
  if (g.kind(it[3]) != ValueKind::bytes && g.kind(it[3]) != ValueKind::string) {
    const uint32_t u = cx.unsupported(g, "numpy array of Python objects");
    g.set_leaf(obj, ValueKind::unsupported, g.nodes[u].ref);
    return {};
  }
  auto typed = numpy_dtype(g, it[1]);
  if (!typed && typed.error().code() == ErrorCode::unknown_dtype) {
    // Strings, dates, records ... (numpy.dtype('<U3'), 'M8', 'V12'): listed, not read.
    const uint32_t u = cx.unsupported(g, typed.error().message());
    g.set_leaf(obj, ValueKind::unsupported, g.nodes[u].ref);
    return {};
  }
  PTREAD_TRY(NumpyType nt, std::move(typed));
  PTREAD_TRY(size_t rank, cx.dims_count(g, it[0], "numpy shape"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, it[0], "numpy shape", dims));
  int64_t* strides = dims + rank;
  int64_t acc = 1;
  if (g.at(it[2]).i != 0) {  // Fortran order
    for (size_t d = 0; d < rank; ++d) {
      strides[d] = acc;
      acc *= dims[d] > 0 ? dims[d] : 1;
    }
  } else {
    for (size_t d = rank; d-- > 0;) {
      strides[d] = acc;
      acc *= dims[d] > 0 ? dims[d] : 1;
    }
  }
  std::string raw(g.text(it[3]));
  if (g.kind(it[3]) == ValueKind::string) {  // protocol 2 from Python 2: latin-1 text
    PTREAD_TRY(raw, utf8_to_latin1(raw));
  }
  PTREAD_TRY(auto storage, owned_copy(raw, nt.big_endian ? dtype_swap_unit(nt.dtype) : 1));
  int64_t numel = 0;
  PTREAD_CHECK(check_view(dims, rank, strides, rank, 0, nt.dtype, storage->nbytes(), &numel));
  if (static_cast<uint64_t>(numel) * dtype_size(nt.dtype) != raw.size()) {  // (check_view bounds the product)
    return refused(std::to_string(raw.size()) + " bytes for " + std::to_string(numel) + " elements of " +
                   dtype_name(nt.dtype));
  }
  TensorSpec spec;
  spec.dims = dims;
  spec.rank = static_cast<uint32_t>(rank);
  spec.dtype = nt.dtype;
  spec.storage = cx.model.storage_table.add(std::move(storage));  // found by no key
  cx.model.specs.push_back(spec);
  g.set_leaf(obj, ValueKind::tensor, static_cast<uint32_t>(cx.model.specs.size() - 1));
  return {};
}

// numpy.core.multiarray.scalar(dtype, raw bytes): a plain int, float or bool value, of the
// first bytes as numpy reads them (fewer than the dtype's are refused, as numpy refuses
// them: "initialization string is too small"; more are ignored, as numpy ignores them).
inline Result<uint32_t> numpy_scalar(Graph& g, uint32_t callable, uint32_t args, const Items& a) {
  auto nt = numpy_dtype(g, a[0]);
  if (!nt || (g.kind(a[1]) != ValueKind::bytes && g.kind(a[1]) != ValueKind::string)) return g.add_object(callable, args);
  std::string raw(g.text(a[1]));
  if (g.kind(a[1]) == ValueKind::string) {
    PTREAD_TRY(raw, utf8_to_latin1(raw));
  }
  const DType t = nt->dtype;
  if (dtype_is_complex(t)) return g.add_object(callable, args);  // (no complex value: kept inert)
  if (raw.size() < dtype_size(t)) {
    return make_error(ErrorCode::bad_tensor_args, "numpy scalar of " + std::to_string(raw.size()) + " bytes for a " +
                                                      dtype_name(t) + " (numpy refuses it: initialization string is too small)");
  }
  raw.resize(dtype_size(t));
  if (nt->big_endian) std::reverse(raw.begin(), raw.end());
  const Scalar v = load_scalar(reinterpret_cast<const uint8_t*>(raw.data()), t);
  if (t == DType::BOOL) return v.i ? kTrueNode : kFalseNode;
  if (v.kind == Scalar::kFloat) return g.add_float(v.f);
  if (v.kind == Scalar::kUInt) {
    if (v.u > static_cast<uint64_t>(INT64_MAX)) {  // a Python int past int64: LONG's little-endian two's complement
      char le[9] = {};
      for (int k = 0; k < 8; ++k) le[k] = static_cast<char>((v.u >> (8 * k)) & 0xff);
      return g.add_text(ValueKind::big_integer, std::string_view(le, 9));
    }
    return g.add_int(static_cast<int64_t>(v.u));
  }
  return g.add_int(v.i);
}

inline bool is_numpy_reconstruct(std::string_view mod, std::string_view name, bool) {
  return is_numpy_module(mod) && name == "_reconstruct";
}
// numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b'), then BUILD (numpy_array)
inline Result<uint32_t> numpy_reconstruct_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  return c.a.empty() ? kNoNode : g.add_object(c.a[0], c.args);
}
inline bool is_numpy_scalar(std::string_view mod, std::string_view name, bool) {
  return is_numpy_module(mod) && name == "scalar";
}
inline Result<uint32_t> numpy_scalar_call(TorchContext& /*cx*/, Graph& g, const GlobalCall& c) {
  return c.a.size() == 2 ? numpy_scalar(g, c.callable, c.args, c.a) : kNoNode;
}
inline bool is_numpy_ndarray(std::string_view mod, std::string_view name, bool) {
  return mod == "numpy" && name == "ndarray";
}

}  // namespace detail
}  // namespace ptread
