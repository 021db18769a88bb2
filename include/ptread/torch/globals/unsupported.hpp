// ptread — torch/_utils.py's rebuilds of tensors ptread cannot hand out (nested, meta, wrapper
// subclasses, device tensors from numpy or XLA): "unsupported" entries naming them, never a
// guess; and _rebuild_device_tensor_from_cpu_tensor, whose CPU tensor is read as it is.
#pragma once

#include "../context.hpp"

#include <string>

namespace ptread {
namespace detail {

inline const char* unsupported_rebuild(std::string_view name) {
  if (name == "_rebuild_nested_tensor") return "nested tensor";
  if (name == "_rebuild_meta_tensor_no_storage") return "meta tensor without data";
  if (name == "_rebuild_wrapper_subclass") return "wrapper-subclass tensor without data";
  if (name == "_rebuild_device_tensor_from_numpy" || name == "_rebuild_xla_tensor") return "device tensor from numpy";
  if (name == "_rebuild_device_tensor_from_cpu_tensor") return "device tensor";
  return nullptr;
}

// A torch._utils rebuild function ptread cannot hand out a tensor for.
inline uint32_t unsupported_call(TorchContext& cx, Graph& g, uint32_t fn) {
  const std::string_view name = g.global_name(fn);
  return cx.unsupported(g, std::string(unsupported_rebuild(name)) + " (torch._utils." + std::string(name) + ") is not supported");
}

inline bool is_rebuild_device_from_cpu(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && name == "_rebuild_device_tensor_from_cpu_tensor";
}
inline Result<uint32_t> rebuild_device_from_cpu_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  if (!c.a.empty() && g.kind(c.a[0]) == ValueKind::tensor) return c.a[0];
  return unsupported_call(cx, g, c.callable);
}

inline bool is_unsupported_rebuild(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && unsupported_rebuild(name) != nullptr;
}
inline Result<uint32_t> unsupported_rebuild_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return unsupported_call(cx, g, c.callable);
}

}  // namespace detail
}  // namespace ptread
