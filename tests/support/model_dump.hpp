// A text of everything a pickle run left in a Model: the object tree with each container
// and object numbered where it is first met (a second reference prints its number, so
// sharing is compared too), tensors with their whole spec, storages, and the tables the
// naming walk filled. Two runs of the same pickle that must agree (TensorRuns on and off,
// tests/unit/tensor_runs.cpp, tests/fuzz/targets.hpp) must give the same text.
#pragma once

#include <ptread/ptread.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace ptread_test {

class ModelDump {
 public:
  explicit ModelDump(const ptread::detail::Model& m, size_t max = size_t{1} << 20) : m_(m), g_(m.graph), max_(max) {}
  // Storages that are views of [base, base + size) are dumped with their place in it.
  ModelDump& source(const void* base, size_t size) {
    base_ = base;
    base_size_ = size;
    return *this;
  }

  std::string tree(uint32_t node) {
    out_.clear();
    ids_.clear();
    value(node, 0);
    return out_;
  }

  // The tree from the root, then the tensor tables.
  std::string all() {
    std::string s = tree(m_.root);
    if (m_.constants_root != ptread::detail::kNoNode) s += "\nconstants: " + tree(m_.constants_root);
    out_.clear();
    out_ += "\nstorages:";
    for (size_t k = 0; k < m_.storage_table.size(); ++k) {
      const uint8_t* data = m_.storage_table.data(k);
      out_ += " " + std::to_string(m_.storage_table.nbytes(k));
      // Where its bytes are: at which byte of the source, when the dump was given it.
      const uintptr_t p = reinterpret_cast<uintptr_t>(data), b = reinterpret_cast<uintptr_t>(base_);
      if (base_ != nullptr && data != nullptr && p >= b && p - b < base_size_) out_ += "@" + std::to_string(p - b);
    }
    out_ += "\nnamed:";
    for (const auto& nt : m_.named()) {
      const ptread::Tensor& t = nt.tensor;
      out_ += "\n  " + nt.name + " " + ptread::dtype_name(t.dtype()) + " [";
      for (int64_t d : t.shape()) out_ += std::to_string(d) + ",";
      out_ += "] [";
      for (int64_t d : t.strides()) out_ += std::to_string(d) + ",";
      out_ += "] +" + std::to_string(t.storage_offset()) + " " + t.device() + (t.requires_grad() ? " grad" : "");
      out_ += " @" + std::to_string(t.storage() ? t.storage()->nbytes() : 0);
    }
    out_ += "\nunsupported:";
    for (const auto& u : m_.named_unsupported) out_ += "\n  " + u.name + ": " + u.reason;
    out_ += "\nquantized:";
    for (const auto& q : m_.named_quantized) out_ += " " + q.name;
    out_ += "\nsparse:";
    for (const auto& q : m_.named_sparse) out_ += " " + q.name;
    out_ += "\nmodules:";
    for (const auto& q : m_.modules) out_ += " " + q.name + "=" + q.class_name;
    return s + out_;
  }

 private:
  void text(uint32_t i) {
    const std::string s = ptread::detail::python_str(g_, i, /*repr=*/true);
    out_ += s;
  }
  void spec(const ptread::detail::TensorSpec& t) {
    out_ += "T(";
    out_ += ptread::dtype_name(t.dtype);
    out_ += " [";
    for (uint32_t d = 0; d < t.rank; ++d) out_ += std::to_string(t.dims[d]) + ",";
    out_ += "] [";
    for (uint32_t d = 0; d < t.rank; ++d) out_ += std::to_string(t.dims[t.rank + d]) + ",";
    out_ += "] +" + std::to_string(t.offset) + " s" + std::to_string(t.storage) + " ";
    if (t.location != ptread::detail::kNoNode) out_ += g_.text(t.location);
    out_ += t.requires_grad ? " grad" : "";
    out_ += t.conj ? " conj" : "";
    out_ += t.neg ? " neg" : "";
    out_ += ")";
  }
  void value(uint32_t i, int depth) {
    using ptread::ValueKind;
    if (out_.size() > max_) return;
    if (depth > 64) {
      out_ += "...";
      return;
    }
    const auto n = g_.at(i);
    switch (n.kind) {
      case ValueKind::tensor:
        if (n.ref < m_.specs.size()) {
          spec(m_.specs[n.ref]);
        } else {
          out_ += "T?";
        }
        return;
      case ValueKind::storage: {
        // ref: the storage; i: its dtype, and the node of its location text << 8
        out_ += "S(s" + std::to_string(n.ref) + " " + ptread::dtype_name(static_cast<ptread::DType>(n.i & 0xff)) + " ";
        text(static_cast<uint32_t>(static_cast<uint64_t>(n.i) >> 8));
        out_ += ")";
        return;
      }
      case ValueKind::unsupported:
        out_ += "U(" + (n.ref < m_.unsupported.size() ? m_.unsupported[n.ref] : std::string("?")) + ")";
        return;
      case ValueKind::quantized: out_ += "Q" + std::to_string(n.ref); return;
      case ValueKind::sparse: out_ += "P" + std::to_string(n.ref); return;
      case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::set:
      case ValueKind::frozenset: case ValueKind::object: break;
      default: text(i); return;
    }
    auto seen = ids_.find(i);
    if (seen != ids_.end()) {
      out_ += "#" + std::to_string(seen->second);
      return;
    }
    const size_t id = ids_.size();
    ids_.emplace(i, id);
    out_ += "#" + std::to_string(id) + "=" + ptread::value_kind_name(n.kind) + "(";
    for (size_t k = 0; k < n.items.size(); ++k) {
      if (k) out_ += ", ";
      if (n.items[k] == ptread::detail::kNoNode) {
        out_ += "-";
      } else {
        value(n.items[k], depth + 1);
      }
    }
    out_ += ")";
  }

  const ptread::detail::Model& m_;
  const void* base_ = nullptr;
  size_t base_size_ = 0;
  const ptread::detail::Graph& g_;
  size_t max_;
  std::string out_;
  std::unordered_map<uint32_t, size_t> ids_;
};

}  // namespace ptread_test
