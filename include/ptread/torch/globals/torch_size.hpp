// ptread — torch.Size (torch/_C: a tuple subclass), by REDUCE or NEWOBJ.
#pragma once

#include "../context.hpp"

#include <string>
#include <vector>

namespace ptread {
namespace detail {

// torch.Size(), torch.Size(iterable) (by REDUCE or NEWOBJ: Size.__new__ is the same call)
// as torch builds it: a tuple of ints. An iterable whose items ptread cannot take as ints
// without running anything (tensors, objects) or whose order it does not know (a set, a
// dict) keeps the call inert; what torch refuses (more arguments, no iterable, items of
// other types) is refused.
inline Result<uint32_t> torch_size(TorchContext& cx, Graph& g, uint32_t callable, uint32_t args, const Items& a) {
  auto refused = [](const std::string& why) {
    return make_error(ErrorCode::pickle_malformed, "torch.Size() of " + why + " (torch refuses it)");
  };
  if (a.size() > 1) return refused(std::to_string(a.size()) + " arguments");
  if (a.empty()) return g.add_container(ValueKind::tuple);
  const ValueKind of = g.kind(a[0]);
  if (of == ValueKind::bytes) {  // its bytes, as ints
    const std::string_view t = g.text(a[0]);
    PTREAD_CHECK(cx.spend(t.size(), "torch.Size()"));
    std::vector<uint32_t> dims;
    for (const char c : t) dims.push_back(g.add_int(static_cast<uint8_t>(c)));
    return g.add_container(ValueKind::tuple, dims.data(), dims.size());
  }
  if (of == ValueKind::string) {
    if (g.text(a[0]).empty()) return g.add_container(ValueKind::tuple);
    return refused("a str (its items are strs, not ints)");
  }
  if (of == ValueKind::none || of == ValueKind::integer || of == ValueKind::big_integer || of == ValueKind::floating ||
      of == ValueKind::boolean) {
    return refused(std::string(value_kind_name(of)) + ", which is not iterable");
  }
  if (of != ValueKind::tuple && of != ValueKind::list) return g.add_object(callable, args);
  const Items items = g.at(a[0]).items;
  PTREAD_CHECK(cx.spend(items.size(), "torch.Size()"));
  std::vector<uint32_t> dims(items.begin(), items.end());
  for (size_t k = 0; k < dims.size(); ++k) {
    const ValueKind ik = g.kind(dims[k]);
    if (ik == ValueKind::integer) continue;
    if (ik == ValueKind::boolean) {  // an int to torch (__index__)
      dims[k] = g.add_int(g.at(dims[k]).i);
      continue;
    }
    switch (ik) {
      case ValueKind::none: case ValueKind::big_integer: case ValueKind::floating: case ValueKind::string:
      case ValueKind::bytes: case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::set:
      case ValueKind::frozenset:  // (a big integer: no int64 holds it)
        return refused("an iterable whose item " + std::to_string(k) + " is of kind " + value_kind_name(ik) + ", not an int");
      default:
        return g.add_object(callable, args);  // a tensor or an object: its __index__ is torch's to run
    }
  }
  return g.add_container(ValueKind::tuple, dims.data(), dims.size());
}

inline bool is_torch_size(std::string_view mod, std::string_view name, bool) {
  return mod == "torch" && name == "Size";
}
inline Result<uint32_t> torch_size_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return torch_size(cx, g, c.callable, c.args, c.a);
}

}  // namespace detail
}  // namespace ptread
