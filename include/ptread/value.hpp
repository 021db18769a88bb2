// ptread — the object tree of a checkpoint (Checkpoint::root()).
//
// A Value is a light handle into the checkpoint's graph: ints, floats, strings, bytes,
// bools, None, lists, tuples, dicts with any key type, sets, globals, generic objects
// (class name, arguments, state) and tensors. Lookups never fail on the spot: a missing
// key gives a Value of kind `missing`, and the typed accessors (as_int() ...) return a
// Result that says what was expected and what was found. A Value is valid while the
// Checkpoint it came from lives.
#pragma once

#include "pickle/python_repr.hpp"
#include "torch/model.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

namespace ptread {

class Value {
 public:
  Value() = default;
  Value(const detail::Model* m, uint32_t node) : m_(m), node_(node) {}

  ValueKind kind() const noexcept { return valid() ? m_->graph.kind(node_) : ValueKind::missing; }
  bool is_missing() const noexcept { return kind() == ValueKind::missing; }
  bool is_none() const noexcept { return kind() == ValueKind::none; }
  bool is_bool() const noexcept { return kind() == ValueKind::boolean; }
  bool is_int() const noexcept { return kind() == ValueKind::integer || kind() == ValueKind::big_integer; }
  bool is_float() const noexcept { return kind() == ValueKind::floating; }
  bool is_string() const noexcept { return kind() == ValueKind::string; }
  bool is_bytes() const noexcept { return kind() == ValueKind::bytes; }
  bool is_list() const noexcept { return kind() == ValueKind::list; }
  bool is_tuple() const noexcept { return kind() == ValueKind::tuple; }
  bool is_dict() const noexcept { return kind() == ValueKind::dict; }
  bool is_object() const noexcept { return kind() == ValueKind::object; }
  bool is_tensor() const noexcept { return kind() == ValueKind::tensor; }
  bool is_storage() const noexcept { return kind() == ValueKind::storage; }
  explicit operator bool() const noexcept { return !is_missing(); }

  Result<bool> as_bool() const {
    if (is_bool()) return node().i != 0;
    return mismatch("bool");
  }
  // int (bools count as ints, as in Python); fails for ints beyond 64 bits.
  Result<int64_t> as_int() const {
    if (kind() == ValueKind::integer || is_bool()) return node().i;
    if (kind() == ValueKind::big_integer) {
      return make_error(ErrorCode::limit_exceeded, "int " + big_int_decimal() + " does not fit in 64 bits");
    }
    return mismatch("int");
  }
  // float (ints convert, as Python's float(x)).
  Result<double> as_float() const {
    if (is_float()) return node().f;
    if (kind() == ValueKind::integer || is_bool()) return static_cast<double>(node().i);
    return mismatch("float");
  }
  Result<std::string_view> as_string() const {
    if (is_string()) return std::string_view(m_->graph.text(node_));
    return mismatch("str");
  }
  Result<std::string_view> as_bytes() const {
    if (is_bytes()) return std::string_view(m_->graph.text(node_));
    return mismatch("bytes");
  }
  Result<const Tensor*> as_tensor() const {
    if (is_tensor()) return &m_->tensor(node().ref);
    return mismatch("tensor");
  }
  // A storage saved on its own, not in a tensor (torch.save(t.storage()), or beside tensors
  // in a dict; torch.load gives a TypedStorage): all of it as a 1-D tensor of its dtype (its
  // class's, the first reference's; U8 for an UntypedStorage), sharing its bytes with the
  // tensors over it. A storage whose bytes lie where its dtype's alignment does not hold
  // (legacy files) is copied.
  Result<Tensor> as_storage() const {
    if (!is_storage()) return mismatch("storage");
    const detail::NodeView n = node();  // ref: the storage; i: dtype, location node << 8
    const DType dtype = static_cast<DType>(n.i & 0xff);
    const uint32_t location = static_cast<uint32_t>(static_cast<uint64_t>(n.i) >> 8);
    std::shared_ptr<const Storage> st = m_->storage_table.shared(n.ref);
    const size_t unit = dtype_size(dtype);
    if (st->data() != nullptr && reinterpret_cast<uintptr_t>(st->data()) % std::min<size_t>(unit, 8) != 0) {
      PTREAD_TRY(auto buf, detail::allocate_aligned(st->nbytes()));
      std::memcpy(buf.get(), st->data(), st->nbytes());
      const uint8_t* p = buf.get();
      st = std::make_shared<const Storage>(p, st->nbytes(), std::move(buf));
    }
    std::string device = "cpu";
    if (location != detail::kNoNode && (m_->graph.kind(location) == ValueKind::string || m_->graph.kind(location) == ValueKind::bytes)) {
      device = m_->graph.text(location);
    }
    const int64_t count = static_cast<int64_t>(st->nbytes() / unit);
    return Tensor::view(std::move(st), dtype, {count}, {1}, 0, std::move(device));
  }
  Result<QuantizedTensor> as_quantized() const {
    if (kind() == ValueKind::quantized) return m_->make_quantized(node().ref);
    return mismatch("quantized tensor");
  }
  Result<SparseTensor> as_sparse() const {
    if (kind() == ValueKind::sparse) return m_->make_sparse(node().ref);
    return mismatch("sparse tensor");
  }
  // Decimal text of any int, however large.
  std::string big_int_decimal() const {
    if (kind() == ValueKind::integer) return std::to_string(node().i);
    if (kind() == ValueKind::big_integer) return detail::big_to_decimal(m_->graph.text(node_));
    return std::string();
  }
  // Why an unsupported entry could not be read.
  std::string unsupported_reason() const {
    return kind() == ValueKind::unsupported ? m_->unsupported[node().ref] : std::string();
  }

  // Items of a list, tuple, set or frozenset; entries of a dict; 0 otherwise.
  size_t size() const noexcept {
    switch (kind()) {
      case ValueKind::list: case ValueKind::tuple: case ValueKind::set: case ValueKind::frozenset:
        return node().items.size();
      case ValueKind::dict: return node().items.size() / 2;
      default: return 0;
    }
  }
  // List, tuple or set item i.
  Value operator[](size_t i) const {
    switch (kind()) {
      case ValueKind::list: case ValueKind::tuple: case ValueKind::set: case ValueKind::frozenset:
        return i < node().items.size() ? Value(m_, node().items[i]) : Value();
      default: return Value();
    }
  }
  Value operator[](int i) const { return i < 0 ? Value() : (*this)[static_cast<size_t>(i)]; }
  // Dict value under a string key, or an object's attribute (its __dict__, then its
  // __slots__), or else, for an object of a dict subclass, its item under that key.
  Value operator[](std::string_view key) const {
    uint32_t attrs = detail::kNoNode, slots = detail::kNoNode;
    if (is_dict()) attrs = node_;
    if (is_object()) detail::object_state(m_->graph, node().items[detail::kObjState], &attrs, &slots);
    for (const uint32_t d : {attrs, slots, is_object() ? node().items[detail::kObjDictItems] : detail::kNoNode}) {
      if (d == detail::kNoNode || m_->graph.kind(d) != ValueKind::dict) continue;
      const auto& it = m_->graph.at(d).items;
      for (size_t k = 0; k + 1 < it.size(); k += 2) {
        if (m_->graph.is_string(it[k], key)) return Value(m_, it[k + 1]);
      }
    }
    return Value();
  }
  Value operator[](const char* key) const { return (*this)[std::string_view(key)]; }
  // Dict value under an int key (optimizer state: state[0]); as in Python, a key equal to
  // it (True for 1, 0.0 for 0) is that key.
  Value at_int_key(int64_t key) const {
    if (!is_dict()) return Value();
    const auto& it = node().items;
    for (size_t k = 0; k + 1 < it.size(); k += 2) {
      const detail::NodeView kn = m_->graph.at(it[k]);
      if (((kn.kind == ValueKind::integer || kn.kind == ValueKind::boolean) && kn.i == key) ||
          (kn.kind == ValueKind::floating && kn.f == static_cast<double>(key) && kn.f >= -0x1p63 && kn.f < 0x1p63 &&
           static_cast<int64_t>(kn.f) == key)) {
        return Value(m_, it[k + 1]);
      }
    }
    return Value();
  }
  // Dict entries by position.
  Value key(size_t i) const { return is_dict() && 2 * i < node().items.size() ? Value(m_, node().items[2 * i]) : Value(); }
  Value value(size_t i) const { return is_dict() && 2 * i + 1 < node().items.size() ? Value(m_, node().items[2 * i + 1]) : Value(); }

  // Objects and globals: "module.Name" (e.g. "argparse.Namespace", "__main__.Net").
  std::string class_name() const {
    if (kind() == ValueKind::global) return detail::python_str(m_->graph, node_);
    if (kind() != ValueKind::object) return std::string();
    const uint32_t cls = node().items[detail::kObjClass];
    return m_->graph.kind(cls) == ValueKind::global ? detail::python_str(m_->graph, cls) : std::string();
  }
  // An object's constructor arguments and its BUILD state (missing when it had none).
  Value args() const { return object_slot(detail::kObjArgs); }
  // Items appended to an object that subclasses list or dict (APPENDS/SETITEMS), or missing.
  Value list_items() const { return object_slot(detail::kObjListItems); }
  Value dict_items() const { return object_slot(detail::kObjDictItems); }
  Value state() const { return object_slot(detail::kObjState); }

  // Python's repr() of scalars and small containers (a lone surrogate in a str as Python
  // escapes it, '\ud800'; other text as it is); "<tensor>" style for the rest.
  std::string repr() const { return valid() ? detail::python_str(m_->graph, node_, true) : "<missing>"; }

  uint32_t id() const noexcept { return node_; }  // equal for the same pickled object

 private:
  bool valid() const noexcept { return m_ != nullptr && node_ != detail::kNoNode; }
  detail::NodeView node() const { return m_->graph.at(node_); }
  Error mismatch(const char* want) const {
    return make_error(is_missing() ? ErrorCode::not_found : ErrorCode::invalid_argument,
                      is_missing() ? std::string("no such value (expected ") + want + ")"
                                   : std::string("expected ") + want + ", found " + value_kind_name(kind()) +
                                         " " + repr().substr(0, 60));
  }
  Value object_slot(uint32_t slot) const {
    if (!is_object()) return Value();
    const uint32_t s = node().items[slot];
    return s == detail::kNoNode ? Value() : Value(m_, s);
  }

  const detail::Model* m_ = nullptr;
  uint32_t node_ = detail::kNoNode;
};

}  // namespace ptread
