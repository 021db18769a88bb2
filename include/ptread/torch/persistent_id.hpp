// ptread — torch.load's persistent_load (torch/serialization.py): ('storage', class, key,
// location, numel[, view_metadata]) names a storage (storages.hpp), a legacy file's
// ('module', class, source file, source) a class.
#pragma once

#include "context.hpp"

#include <string>

namespace ptread {
namespace detail {

// A legacy file's ('module', class, source file, source): the class. torch.load checks the
// saved source against the class's (a warning when they differ) by calling
// _check_container_source(class, file, source) unless an item after the class is
// empty (falsy), so other counts are refused then.
inline Result<uint32_t> module_pid(Graph& g, const Items& it) {
  bool all_set = true;
  for (size_t k = 2; k < it.size(); ++k) all_set = all_set && python_truthy(g, it[k]);
  if (all_set && it.size() != 4) {
    return make_error(ErrorCode::bad_tensor_args, "persistent id ('module', ...) with " + std::to_string(it.size()) +
                                                      " items; torch.load passes the 3 after the tag to "
                                                      "_check_container_source, which takes 3");
  }
  return it[1];
}

// ('storage', class, key, location, numel[, view_metadata]): a storage node.
inline Result<uint32_t> storage_pid(TorchContext& cx, Graph& g, const Items& it) {
  DType dtype;
  const ValueKind ck = g.kind(it[1]);
  if (ck == ValueKind::tensor || ck == ValueKind::storage) {
    // torch.load takes the class's .dtype, which a tensor and a storage have too (a crafted
    // file's; torch.jit.load wants a dtype there and refuses them).
    dtype = ck == ValueKind::tensor ? cx.model.specs[g.at(it[1]).ref].dtype : static_cast<DType>(g.nodes[it[1]].i & 0xff);
    cx.note_refusal(Format::torchscript, make_error(ErrorCode::unknown_storage_class,
                                                 std::string("a ") + value_kind_name(ck) +
                                                     " as a persistent id's storage class in a TorchScript archive"));
  } else if (ck == ValueKind::global) {
    if (!storage_class_dtype(g, it[1], &dtype)) {
      std::string full(g.global_module(it[1]));
      full += '.';
      full += g.global_name(it[1]);
      return make_error(ErrorCode::unknown_storage_class, "unknown storage class '" + full + "'");
    }
  } else {
    PTREAD_TRY(std::string_view cls, text_of(g, it[1], "storage class"));
    if (!dtype_from_storage_class(cls, &dtype)) {
      return make_error(ErrorCode::unknown_storage_class, "unknown storage class '" + std::string(cls) + "'");
    }
  }
  std::string_view key;
  char digits[24];
  PTREAD_TRY(const bool int_key, TorchStorages::storage_key(g, it[2], digits, &key));
  const uint32_t location = storage_location_node(g, it[3]);
  // The element count: torch.load multiplies it by the element size at a key's first
  // reference (a bool counts 0 or 1) and never reads a later one's; a legacy file's pickle
  // multiplies every one, so there it must be something Python multiplies by an int.
  const ValueKind nk = g.kind(it[4]);
  const int64_t count = nk == ValueKind::integer || nk == ValueKind::boolean ? g.at(it[4]).i : -1;
  if (cx.legacy && nk != ValueKind::integer && nk != ValueKind::big_integer && nk != ValueKind::boolean &&
      nk != ValueKind::floating && nk != ValueKind::string && nk != ValueKind::bytes && nk != ValueKind::list &&
      nk != ValueKind::tuple) {
    return make_error(ErrorCode::bad_tensor_args, "storage '" + std::string(key) + "' has an element count that is a " +
                                                      value_kind_name(nk) + " (torch refuses it)");
  }
  DType stored = dtype;  // the storage's: its first reference's
  PTREAD_TRY(uint32_t index, cx.storages.find_or_load(g, key, !int_key, static_cast<uint64_t>(count), count >= 0, dtype, &stored, int_key));
  if (cx.legacy && g.kind(it[5]) != ValueKind::none) {  // (a legacy id has 6 items; others' sixth is unread)
    if (cx.storages.placeholders()) {
      return make_error(ErrorCode::unsupported_format, "storage view metadata with placeholder storages");
    }
    // A view is of this reference's dtype (its offset and size count its elements), and
    // again the first reference of its own key makes it.
    PTREAD_TRY(index, cx.storages.storage_view(g, it[5], index, dtype));
    stored = cx.storages.storage_dtype(index);
  }
  return g.emit_int(ValueKind::storage, index, static_cast<int64_t>((uint64_t{location} << 8) | static_cast<uint8_t>(stored)));
}

inline Result<uint32_t> persistent_load(TorchContext& cx, Graph& g, uint32_t pid) {
  const NodeView n = g.at(pid);
  if (n.kind != ValueKind::tuple || n.items.empty()) {
    return make_error(ErrorCode::bad_tensor_args, "persistent id is not a tuple");
  }
  const Items it = n.items;  // a tuple: its items never move
  PTREAD_TRY(std::string_view tag, text_of(g, it[0], "persistent id tag"));
  if (tag == "module" && it.size() >= 2 && cx.legacy) return module_pid(g, it);  // legacy full-model files
  // torch.load unpacks ('storage', class, key, location, numel) in a zip file and
  // ('storage', class, root key, location, numel, view) in a legacy one, and refuses
  // other counts; torch.jit.load reads the first five items of a TorchScript archive's.
  // Zip and TorchScript are told apart by the directory, which the pickle may be read
  // before: a zip file's refusal waits for it (refusal()).
  if (!equals(tag, "storage") || it.size() < 5 || (cx.legacy && it.size() != 6)) {
    return make_error(ErrorCode::bad_tensor_args,
                      "unknown persistent id ('" + std::string(tag) + "' with " + std::to_string(it.size()) +
                          " items); expected ('storage', class, key, location, numel" +
                          (cx.legacy ? ", view)" : ")"));
  }
  if (it.size() != 5 && !cx.legacy) {
    cx.note_zip_refusal(make_error(ErrorCode::bad_tensor_args, "persistent id ('storage', ...) with " +
                                                                std::to_string(it.size()) +
                                                                " items in a zip file; torch.load takes 5"));
  }
  return storage_pid(cx, g, it);
}

}  // namespace detail
}  // namespace ptread
