// ptread — what a format reader produces: the object graph, its tensors, and names.
#pragma once

#include "../detail/flat_map.hpp"
#include "../io.hpp"
#include "../pickle.hpp"
#include "../tensor.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>
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

struct ReadOptions {
  LoadMode mode = LoadMode::mmap;
  Limits limits;
};

inline void byteswap_elements(uint8_t* p, size_t nbytes, size_t unit) {
  if (unit <= 1) return;
  for (size_t k = 0; k + unit <= nbytes; k += unit) std::reverse(p + k, p + k + unit);
}

// A tensor as the pickle describes it, already checked against its storage. Tensor
// objects are made from these when names are known (name_tensors), each in its place in
// the tensor list, once.
struct TensorSpec {
  const int64_t* dims = nullptr;     // rank sizes, then rank strides: in the graph's arena
  int64_t offset = 0;
  uint32_t storage = 0;              // Model::storage_table
  uint32_t location = kNoNode;       // the device text node; kNoNode: "cpu"
  uint32_t rank = 0;
  DType dtype = DType::F32;
  bool requires_grad = false;
  bool conj = false;
  bool neg = false;
};

struct Model {
  Format format = Format::zip;
  std::string archive_prefix;
  bool big_endian = false;
  Graph graph;
  uint32_t root = kNoneNode;
  SegmentedVector<TensorSpec> specs;    // graph tensor nodes index this
  std::vector<std::string> unsupported; // graph unsupported nodes index this (the reason)
  // The distinct storages. A graph storage node (a persistent id) holds its index in
  // ref, and in i the dtype it was saved as and the node of its location text.
  std::vector<std::shared_ptr<const Storage>> storage_table;
  std::vector<NamedTensor> named;       // the tensor list, in file order
  std::vector<UnsupportedEntry> named_unsupported;
  std::vector<Tensor> tensors;          // tensors listed under no name
  // Per spec, once named: its first position in `named`, or kUnnamed | its position in
  // `tensors`.
  static constexpr uint32_t kUnnamed = 0x80000000u;
  std::vector<uint32_t> tensor_home;

  // The first tensor named `name`, or nullptr. Its index is built by the first call
  // (opening and listing need none); safe to call from several threads.
  const Tensor* find(std::string_view name) const {
    std::call_once(name_index_once_, [this] {
      const size_t count = named.size() < StringIndex::npos ? named.size() : StringIndex::npos;
      name_index_.insert_all(static_cast<uint32_t>(count), [this](uint32_t i) { return std::string_view(named[i].name); });  // first name wins
    });
    const uint32_t k = name_index_.find(name, [this](uint32_t i) { return std::string_view(named[i].name); });
    return k == StringIndex::npos ? nullptr : &named[k].tensor;
  }

  // The tensor of a graph tensor node (its ref), once the tensors are named.
  const Tensor& tensor(uint32_t ref) const {
    const uint32_t h = tensor_home[ref];
    return (h & kUnnamed) ? tensors[h & ~kUnnamed] : named[h].tensor;
  }

  // Fills a default-constructed Tensor from spec k.
  void make_tensor(uint32_t k, Tensor* t) const;

 private:
  mutable std::once_flag name_index_once_;
  mutable StringIndex name_index_;
};

struct TensorAccess {
  // The spec was checked against its storage (check_view) when it was made.
  static void assign(Tensor* t, const Model& m, const TensorSpec& s) {
    t->storage_ = m.storage_table[s.storage];
    t->dtype_ = s.dtype;
    t->set_dims(s.dims, s.dims + s.rank, s.rank);
    t->offset_ = s.offset;
    int64_t numel = 1;  // no overflow: checked
    for (uint32_t d = 0; d < s.rank; ++d) numel *= s.dims[d];
    t->numel_ = numel;
    if (s.location != kNoNode) t->device_.assign(m.graph.text(s.location));  // else the default, "cpu"
    t->requires_grad_ = s.requires_grad;
    t->conj_ = s.conj;
    t->neg_ = s.neg;
  }
};

inline void Model::make_tensor(uint32_t k, Tensor* t) const { TensorAccess::assign(t, *this, specs[k]); }

}  // namespace detail
}  // namespace ptread
