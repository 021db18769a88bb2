// ptread — the small rules of Python and torch that torch's handlers all apply: text, truth,
// sizes and strides as Tensor.set_ takes them, requires_grad, BUILD states, a storage's
// location and class.
#pragma once

#include "model.hpp"
#include "../pickle/python_repr.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptread {
namespace detail {

// Whether node i is text: str or bytes (torch.load takes either for persistent ids).
PTREAD_ALWAYS_INLINE bool is_text(const Graph& g, uint32_t i) {
  return g.kind(i) == ValueKind::string || g.kind(i) == ValueKind::bytes;
}
PTREAD_ALWAYS_INLINE Result<std::string_view> text_of(const Graph& g, uint32_t i, const char* what) {
  if (is_text(g, i)) return g.text(i);
  return make_error(ErrorCode::bad_tensor_args, std::string(what) + " is a " + value_kind_name(g.kind(i)) + ", not a string");
}

// Python's bool() of a value, where ptread can know it (objects, classes and tensors are
// taken as true, as most are).
inline bool python_truthy(Graph& g, uint32_t v) {
  switch (g.kind(v)) {
    case ValueKind::none: return false;
    case ValueKind::boolean: case ValueKind::integer: return g.at(v).i != 0;
    case ValueKind::floating: return g.at(v).f != 0;
    case ValueKind::string: case ValueKind::bytes: return !g.text(v).empty();
    case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::set: case ValueKind::frozenset:
      return g.count(v) != 0;
    default: return true;
  }
}

// A BUILD state as Python's default BUILD reads it: (state, slots) when a pair, else the
// state alone (*slots kNoNode).
inline void split_build_state(const Graph& g, uint32_t state, uint32_t* dict_state, uint32_t* slots) {
  *dict_state = state;
  *slots = kNoNode;
  if (g.kind(state) == ValueKind::tuple && g.count(state) == 2) {
    *dict_state = g.at(state).items[0];
    *slots = g.at(state).items[1];
  }
}
// Whether dict node d's keys are all strs (setattr() takes a str).
inline bool str_keys(const Graph& g, uint32_t d) {
  const Items kv = g.at(d).items;
  for (size_t k = 0; k < kv.size(); k += 2) {
    if (g.kind(kv[k]) != ValueKind::string) return false;
  }
  return true;
}

// ... and their values (ints), copied to out when it is given: into the graph's arena,
// as a list could still grow later. With `set_args`, as torch's argument parser takes the
// sizes and strides of Tensor.set_ (the rebuild functions): it checks the first item's
// type alone, so a bool after it is an int, 0 or 1 (torch 1.13 reads (2, False) as
// [2, 0] and refuses (False, 2)).
PTREAD_ALWAYS_INLINE Status read_dims(const Graph& g, uint32_t i, const char* what, int64_t* out,
                                             bool set_args = false) {
  const Items items = g.at(i).items;
  for (size_t k = 0; k < items.size(); ++k) {
    const Node& e = g.nodes[items[k]];
    if (e.kind != ValueKind::integer && !(set_args && k > 0 && e.kind == ValueKind::boolean)) {
      return make_error(ErrorCode::bad_tensor_args, std::string(what) + " holds a " + value_kind_name(e.kind));
    }
    if (out) out[k] = e.i;
  }
  return {};
}
// dims[rank ...]: the contiguous strides of sizes dims[0 ... rank), as torch computes them
// (a size of 0 or less counts as 1).
inline Status contiguous_strides(int64_t* dims, size_t rank) {
  int64_t step = 1;
  for (size_t d = rank; d-- > 0;) {
    dims[rank + d] = step;
    const int64_t n = std::max<int64_t>(dims[d], 1);
    if (d > 0 && step > INT64_MAX / n) {
      return make_error(ErrorCode::shape_overflow, "the contiguous strides of the size overflow 64 bits");
    }
    step *= n;
  }
  return {};
}
// Room for rank sizes and rank strides.
inline int64_t* new_dims(Graph& g, size_t rank) {
  return rank ? static_cast<int64_t*>(g.arena.allocate(2 * rank * sizeof(int64_t), alignof(int64_t))) : nullptr;
}

// A requires_grad argument as torch sets it: a bool, and true only for floating point
// and complex dtypes (torch refuses an int, None ..., and gradients of others).
inline Result<bool> requires_grad_arg(Graph& g, uint32_t v, DType dtype, const char* what) {
  if (g.kind(v) != ValueKind::boolean) {
    return make_error(ErrorCode::bad_tensor_args, std::string(what) + " rebuild: requires_grad is a " +
                                                      value_kind_name(g.kind(v)) + ", not a bool (torch refuses it)");
  }
  const bool on = g.at(v).i != 0;
  if (on && !dtype_is_differentiable(dtype)) {
    return make_error(ErrorCode::bad_tensor_args, std::string(what) + " rebuild: requires_grad on a " +
                                                      dtype_name(dtype) +
                                                      " tensor; only floating point and complex tensors can "
                                                      "require gradients (torch refuses it)");
  }
  return on;
}

// A storage of its own holding a copy of bytes, each swap_unit bytes reversed (a big-endian
// array's elements) when swap_unit > 1.
inline Result<std::shared_ptr<const Storage>> owned_copy(std::string_view bytes, size_t swap_unit) {
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



// The node whose text a storage's tensors report as Tensor::device(): the stored location
// when it is text (str, or bytes from Python 2), else a string of Python's str() of it (at
// most 256 bytes and "..."). torch.load(map_location="cpu") never reads the location, so
// none stops a load (without map_location torch refuses a location that is no string: it
// calls location.startswith).
inline uint32_t storage_location_node(Graph& g, uint32_t loc) {
  const ValueKind k = g.kind(loc);
  if (PTREAD_LIKELY(k == ValueKind::string || k == ValueKind::bytes)) return loc;
  return g.add_text(ValueKind::string, python_str(g, loc, false, 0, 256));
}

// The dtype of storage class `cls` (a global node; cached in its tag2: 0 unknown yet,
// 0xff no storage class, else dtype + 1); false when it is no storage class.
inline bool storage_class_dtype(Graph& g, uint32_t cls, DType* dtype) {
  Node& n = g.nodes[cls];
  if (n.tag2 == 0) {
    n.tag2 = dtype_from_storage_class(g.global_name(cls), dtype) ? static_cast<uint8_t>(static_cast<uint8_t>(*dtype) + 1) : 0xff;
  }
  *dtype = static_cast<DType>(n.tag2 - 1);
  return n.tag2 != 0xff;
}

}  // namespace detail
}  // namespace ptread
