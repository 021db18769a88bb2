// ptread — the torch globals that are objects, not classes or functions: dtypes
// (torch.float32), qschemes, layouts and memory formats. Python calls none of them, takes
// none as NEWOBJ's class, and sets no state on any (torch.load refuses each).
#pragma once

#include "../context.hpp"
#include "../build.hpp"

#include <string>

namespace ptread {
namespace detail {

inline const char* torch_instance_type(std::string_view name) noexcept {
  DType d;
  if (dtype_from_torch_name(name, &d)) return "torch.dtype";
  for (const char* q : {"per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
                        "per_channel_affine_float_qparams"}) {
    if (name == q) return "torch.qscheme";
  }
  for (const char* l : {"strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn"}) {
    if (name == l) return "torch.layout";
  }
  for (const char* f : {"contiguous_format", "channels_last", "channels_last_3d", "preserve_format"}) {
    if (name == f) return "torch.memory_format";
  }
  return nullptr;
}

inline bool is_torch_object(std::string_view mod, std::string_view name, bool) {
  return mod == "torch" && torch_instance_type(name) != nullptr;
}
inline Result<uint32_t> torch_object_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  static_cast<void>(c.a);
  return make_error(ErrorCode::pickle_malformed, "'torch." + std::string(g.global_name(c.callable)) + "', a " +
                                                     torch_instance_type(g.global_name(c.callable)) +
                                                     ", called (it is no callable: torch.load refuses it)");
}
inline Result<uint32_t> torch_object_new(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  return make_error(ErrorCode::pickle_malformed, "NEWOBJ of 'torch." + std::string(g.global_name(c.callable)) + "', a " +
                                                     torch_instance_type(g.global_name(c.callable)) +
                                                     " (Python's unpickler takes only a class)");
}
// BUILD on one: as on a C function, no __dict__ and no attribute to set.
inline Status torch_object_build(TorchContext& cx, Graph& g, uint32_t glob, uint32_t state) {
  static_cast<void>(cx);
  const std::string target = "the global '" + std::string(g.global_module(glob)) + "." + std::string(g.global_name(glob)) + "'";
  uint32_t dict_state = kNoNode, slots = kNoNode;
  split_build_state(g, state, &dict_state, &slots);
  const std::string type = std::string("a ") + torch_instance_type(g.global_name(glob));
  if (g.kind(dict_state) == ValueKind::dict) return build_refused(target, "a state that is a dict", (type + " has no __dict__").c_str());
  if (slots != kNoNode && g.count(slots) != 0) return build_refused(target, "slots to set", (type + " has no attributes to set").c_str());
  return {};
}

}  // namespace detail
}  // namespace ptread
