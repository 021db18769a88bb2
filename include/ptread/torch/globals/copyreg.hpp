// ptread — copyreg._reconstructor(cls, base, state) (Lib/copyreg.py; copy_reg below
// protocol 3), which protocols 0-1 write for objects: an object of cls, its state set by BUILD.
#pragma once

#include "../context.hpp"

namespace ptread {
namespace detail {

inline bool is_copyreg_reconstructor(std::string_view mod, std::string_view name, bool py2) {
  return (mod == "copyreg" || (py2 && mod == "copy_reg")) && name == "_reconstructor";
}
inline Result<uint32_t> copyreg_reconstructor_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  return c.a.empty() ? kNoNode : g.add_object(c.a[0], g.add_container(ValueKind::tuple));
}

}  // namespace detail
}  // namespace ptread
