// ptread — numpy objects in checkpoints, as torch.load's unpickler builds them (no numpy
// code runs): numpy.core.multiarray._reconstruct(numpy.ndarray, ...) + BUILD state
// (version, shape, dtype, fortran_order, raw bytes) becomes a tensor; scalar(dtype, bytes)
// a plain int, float or bool; numpy.dtype('f8', ...) + BUILD state gives the element type
// and byte order. numpy._core.multiarray (numpy >= 2) is the same.
#pragma once

#include "torch_pickle.hpp"

namespace ptread {
namespace detail {

inline Result<TorchHooks::NumpyType> TorchHooks::numpy_dtype(const Graph& g, uint32_t d) {
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

inline Result<std::shared_ptr<const Storage>> TorchHooks::owned_copy(std::string_view bytes, size_t swap_unit) {
  PTREAD_TRY(auto buf, allocate_aligned(bytes.size()));
  if (!bytes.empty()) std::memcpy(buf.get(), bytes.data(), bytes.size());
  if (swap_unit > 1) {
    for (size_t k = 0; k + swap_unit <= bytes.size(); k += swap_unit) {
      std::reverse(buf.get() + k, buf.get() + k + swap_unit);
    }
  }
  const uint8_t* p = buf.get();
  return std::make_shared<const Storage>(p, bytes.size(), std::move(buf));
}

// ndarray BUILD state: (version, shape, dtype, is_fortran, raw bytes). The object node
// becomes a tensor node in place, so every reference to it sees the tensor.
inline Status TorchHooks::numpy_array(Graph& g, uint32_t obj, uint32_t state) {
  const NodeView s = g.at(state);
  if (s.kind != ValueKind::tuple || s.items.size() != 5) return {};
  const Items it = s.items;
  if (g.kind(it[4]) != ValueKind::bytes && g.kind(it[4]) != ValueKind::string) {
    const uint32_t u = unsupported(g, "numpy array of Python objects");
    g.set_leaf(obj, ValueKind::unsupported, g.nodes[u].ref);
    return {};
  }
  auto typed = numpy_dtype(g, it[2]);
  if (!typed && typed.error().code() == ErrorCode::unknown_dtype) {
    // Strings, dates, records ... (numpy.dtype('<U3'), 'M8', 'V12'): listed, not read.
    const uint32_t u = unsupported(g, typed.error().message());
    g.set_leaf(obj, ValueKind::unsupported, g.nodes[u].ref);
    return {};
  }
  PTREAD_TRY(NumpyType nt, std::move(typed));
  PTREAD_TRY(size_t rank, dims_count(g, it[1], "numpy shape"));
  int64_t* dims = new_dims(g, rank);
  PTREAD_CHECK(read_dims(g, it[1], "numpy shape", dims));
  int64_t* strides = dims + rank;
  int64_t acc = 1;
  if (g.kind(it[3]) == ValueKind::boolean && g.at(it[3]).i != 0) {  // Fortran order
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
  std::string raw(g.text(it[4]));
  if (g.kind(it[4]) == ValueKind::string) {  // protocol 2 from Python 2: latin-1 text
    PTREAD_TRY(raw, utf8_to_latin1(raw));
  }
  PTREAD_TRY(auto storage, owned_copy(raw, nt.big_endian ? dtype_swap_unit(nt.dtype) : 1));
  int64_t numel = 0;
  PTREAD_CHECK(check_view(dims, rank, strides, rank, 0, nt.dtype, storage->nbytes(), &numel));
  TensorSpec spec;
  spec.dims = dims;
  spec.rank = static_cast<uint32_t>(rank);
  spec.dtype = nt.dtype;
  spec.storage = m_.storage_table.add(std::move(storage));  // found by no key
  m_.specs.push_back(spec);
  g.set_leaf(obj, ValueKind::tensor, static_cast<uint32_t>(m_.specs.size() - 1));
  return {};
}

// numpy.core.multiarray.scalar(dtype, raw bytes): a plain int, float or bool value.
inline Result<uint32_t> TorchHooks::numpy_scalar(Graph& g, uint32_t callable, uint32_t args, const Items& a) {
  auto nt = numpy_dtype(g, a[0]);
  if (!nt || (g.kind(a[1]) != ValueKind::bytes && g.kind(a[1]) != ValueKind::string)) return g.add_object(callable, args);
  std::string raw(g.text(a[1]));
  if (g.kind(a[1]) == ValueKind::string) {
    PTREAD_TRY(raw, utf8_to_latin1(raw));
  }
  const DType t = nt->dtype;
  if (raw.size() != dtype_size(t) || dtype_is_complex(t)) return g.add_object(callable, args);
  if (nt->big_endian) std::reverse(raw.begin(), raw.end());
  const Scalar v = load_scalar(reinterpret_cast<const uint8_t*>(raw.data()), t);
  if (t == DType::BOOL) return v.i ? kTrueNode : kFalseNode;
  if (v.kind == Scalar::kFloat) return g.add_float(v.f);
  if (v.kind == Scalar::kUInt) {
    if (v.u > static_cast<uint64_t>(INT64_MAX)) return g.add_object(callable, args);
    return g.add_int(static_cast<int64_t>(v.u));
  }
  return g.add_int(v.i);
}
}  // namespace detail
}  // namespace ptread
