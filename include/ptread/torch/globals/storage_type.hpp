// ptread — the storage classes as globals (FloatStorage ... in any module): torch.load's
// unpickler turns them into StorageType objects (torch/serialization.py, find_class), which
// cannot be called. (As persistent ids' storage classes they are read by persistent_id.hpp.)
#pragma once

#include "../context.hpp"

#include <string_view>

namespace ptread {
namespace detail {

// The storage classes torch.load's unpickler turns into StorageType objects, whatever their
// module (torch.serialization's find_class: the names of
// torch.storage._dtype_to_storage_type_map, the same in torch 1.13 and 2.x).
inline bool is_pickle_storage_type(std::string_view name) noexcept {
  static const std::string_view names[] = {
      "DoubleStorage", "FloatStorage", "HalfStorage", "LongStorage", "IntStorage", "ShortStorage",
      "CharStorage", "ByteStorage", "BoolStorage", "BFloat16Storage", "ComplexDoubleStorage",
      "ComplexFloatStorage", "QInt8Storage", "QInt32Storage", "QUInt8Storage", "QUInt4x2Storage",
      "QUInt2x4Storage"};
  for (std::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

inline bool is_storage_type_global(std::string_view mod, std::string_view name, bool) {
  return static_cast<void>(mod), is_pickle_storage_type(name);
}

// Called: refused in legacy and tar files; in a zip file the refusal waits for the directory
// (torch.jit.load's unpickler finds other things there), and the call stays inert.
inline Result<uint32_t> storage_type_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(c.a);
  Error e = make_error(ErrorCode::pickle_malformed, "the storage class '" + std::string(g.global_module(c.callable)) + "." +
                                                       std::string(g.global_name(c.callable)) +
                                                       "' called; torch.load reads it as a StorageType, which cannot be");
  if (cx.model.format == Format::legacy || cx.model.format == Format::tar) return e;
  cx.note_zip_refusal(std::move(e));
  return kNoNode;
}

}  // namespace detail
}  // namespace ptread
