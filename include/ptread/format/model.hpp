// ptread — what a format reader produces: the object graph, its tensors, and names.
#pragma once

#include "../pickle.hpp"
#include "../tensor.hpp"

#include <string>
#include <vector>

namespace ptread {

enum class Format { zip, legacy, tar, torchscript };

inline const char* format_name(Format f) noexcept {
  switch (f) {
    case Format::zip: return "zip";
    case Format::legacy: return "legacy";
    case Format::tar: return "tar";
    case Format::torchscript: return "torchscript";
  }
  return "?";
}

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// A tensor-like entry ptread lists but cannot hand out (quantized, sparse, nested ...).
struct UnsupportedEntry {
  std::string name;
  std::string reason;
};

namespace detail {

// A storage as the pickle references it: the shared bytes and the dtype they were saved as.
struct StorageRef {
  std::shared_ptr<const Storage> storage;
  DType dtype = DType::U8;
  std::string location;
};

struct Model {
  Format format = Format::zip;
  std::string archive_prefix;
  bool big_endian = false;
  Graph graph;
  uint32_t root = kNoneNode;
  std::vector<Tensor> tensors;          // graph tensor nodes index this
  std::vector<std::string> unsupported; // graph unsupported nodes index this (the reason)
  std::vector<StorageRef> storages;     // graph storage nodes index this
  std::vector<NamedTensor> named;       // the tensor list, in file order
  std::vector<UnsupportedEntry> named_unsupported;
};

}  // namespace detail
}  // namespace ptread
