// ptread — what a checkpoint's pickles would make torch.load import and call.
//
//   auto ck = ptread::Checkpoint::open(path);
//   ptread::AuditReport r = ptread::audit(*ck);
//   for (const auto& g : r.globals) ... g.module, g.name, g.count, g.allowed
//   r.refused();   // how many globals torch.load(weights_only=True) would refuse
//
// ptread itself never imports or calls anything; this says what torch would. Every global a
// pickle names (GLOBAL, STACK_GLOBAL, INST) is listed with how many times it is named, and
// marked allowed when the newest torch's weights_only unpickler accepts it
// (torch/_weights_only_unpickler.py, _get_allowed_globals: tensor rebuild functions,
// storage and tensor classes, dtypes, qschemes, OrderedDict, Counter, torch.Size,
// torch.device, _codecs.encode, set, bytearray, complex ...). A refused global is one that
// torch.load(weights_only=False) imports and may call: whole pickled models (__main__.Net),
// numpy arrays, and anything a malicious file names (os.system, builtins.eval).
#pragma once

#include "checkpoint.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace ptread {

struct GlobalUse {
  std::string module;
  std::string name;
  size_t count = 0;      // how many times the pickles name it
  bool allowed = false;  // torch.load(weights_only=True) accepts it
};

struct AuditReport {
  std::string format;             // "zip", "legacy", "tar", "torchscript"
  std::vector<GlobalUse> globals; // sorted by module, then name
  size_t refused() const noexcept {
    size_t n = 0;
    for (const auto& g : globals) n += g.allowed ? 0 : 1;
    return n;
  }
};

namespace detail {

inline bool weights_only_allowed(std::string_view mod, std::string_view name) {
  // Python 2 spellings, as pickle's NAME_MAPPING maps them.
  if (mod == "__builtin__") mod = "builtins";
  if (mod == "copy_reg") mod = "copyreg";
  auto one_of = [](std::string_view s, std::initializer_list<const char*> list) {
    for (const char* x : list) {
      if (s == x) return true;
    }
    return false;
  };
  if (mod == "collections") return one_of(name, {"OrderedDict", "Counter"});
  if (mod == "builtins") return one_of(name, {"set", "bytearray", "complex"});
  if (mod == "_codecs") return name == "encode";
  if (mod == "torch.nn.parameter") return name == "Parameter";
  if (mod == "torch.serialization") return name == "_get_layout";
  if (mod == "torch._tensor") return name == "_rebuild_from_type_v2";
  if (mod == "torch._utils") {
    return one_of(name, {"_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_tensor",
                         "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_sparse_tensor", "_rebuild_sparse_csr_tensor",
                         "_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass", "_rebuild_nested_tensor",
                         "_rebuild_device_tensor_from_numpy", "_rebuild_device_tensor_from_cpu_tensor"});
  }
  if (mod == "torch.storage") return one_of(name, {"TypedStorage", "UntypedStorage"});
  static const char* const kinds[] = {"Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool"};
  auto typed = [&](std::string_view n, std::string_view suffix) {
    if (n.size() <= suffix.size() || !ends_with(n, suffix)) return false;
    const std::string_view k = n.substr(0, n.size() - suffix.size());
    for (const char* x : kinds) {
      if (k == x) return true;
    }
    return false;
  };
  if (mod == "torch" || mod == "torch.cuda") {
    DType d;
    if (name.size() > 7 && ends_with(name, "Storage")) {
      return name == "UntypedStorage" || name == "TypedStorage" || dtype_from_storage_class(name, &d);
    }
    if (typed(name, "Tensor")) return true;
  }
  if (mod == "torch.sparse" || mod == "torch.cuda.sparse") return typed(name, "Tensor") && name != "BoolTensor";
  if (mod == "torch") {
    DType d;
    if (dtype_from_torch_name(name, &d)) return true;
    if (one_of(name, {"Size", "Tensor", "device", "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                      "per_channel_symmetric", "per_channel_affine_float_qparams", "uint1", "uint2", "uint3", "uint4",
                      "uint5", "uint6", "uint7", "int1", "int2", "int3", "int4", "int5", "int6", "int7"})) {
      return true;
    }
  }
  return false;
}

struct AuditAccess {
  static const Model& model(const Checkpoint& ck) { return *ck.model_; }
};

}  // namespace detail

// The globals of a checkpoint's pickles (data.pkl and, for TorchScript, constants.pkl; all
// pickles of a legacy or tar file), as torch.load would meet them.
inline AuditReport audit(const Checkpoint& ck) {
  const detail::Model& m = detail::AuditAccess::model(ck);
  const detail::Graph& g = m.graph;
  std::map<std::pair<std::string_view, std::string_view>, size_t> counts;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (g.nodes[k].kind != ValueKind::global) continue;
    ++counts[{g.global_module(static_cast<uint32_t>(k)), g.global_name(static_cast<uint32_t>(k))}];
  }
  AuditReport r;
  r.format = ck.format_name();
  for (const auto& c : counts) {
    GlobalUse u;
    u.module.assign(c.first.first);
    u.name.assign(c.first.second);
    u.count = c.second;
    // TorchScript archives go to torch.jit.load, whose own unpickler resolves __torch__
    // classes to compiled TorchScript types: no Python is imported for them.
    u.allowed = detail::weights_only_allowed(c.first.first, c.first.second) ||
                (ck.format() == Format::torchscript &&
                 (c.first.first == "__torch__" || detail::starts_with(c.first.first, "__torch__.") ||
                  c.first.first == "torch.jit._pickle"));
    r.globals.push_back(std::move(u));
  }
  return r;
}

}  // namespace ptread
