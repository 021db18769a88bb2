// ptread — tensor names (contract, DESIGN.md "Tensor names").
//
// A depth-first walk of the object graph in file order:
//   dict entries: keys joined with '.', non-string keys as Python's str() prints them;
//   list and tuple items: by index;
//   objects carrying module state (`_parameters`, `_buffers`, `_modules` in their state):
//     exactly state_dict() naming — parameters, then persistent buffers (names in
//     `_non_persistent_buffers_set` are left out), then submodules; None entries skipped;
//   other objects: the attributes of their state as dict keys (or their arguments by index
//     when they have no state).
// A tensor reached twice is listed under each name. The walk uses an explicit stack (no
// recursion), skips edges back into the current path (cycles), and is bounded.
#pragma once

#include "../memory/keyed_hash.hpp"
#include "../pickle/python_repr.hpp"
#include "model.hpp"
#include "sparse_check.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <unordered_map>
#include <string>
#include <vector>

namespace ptread {
namespace detail {

class Namer {
 public:
  // source_bytes: the size of the file the model was read from (the names' budget).
  Namer(Model& m, const Limits& limits, uint64_t source_bytes) : m_(m), g_(m.graph), limits_(limits) {
    name_budget_ = std::min<uint64_t>(limits.max_name_bytes, (uint64_t{1} << 26) + 256 * std::min<uint64_t>(source_bytes, uint64_t{1} << 48));
  }

  Status run() {
    on_path_.assign(g_.nodes.size() / 64 + 1, 0);
    m_.tensor_home.assign(m_.specs.size(), kNoNode);
    max_steps_ = uint64_t{16} * g_.nodes.size() + (uint64_t{1} << 20);
    PTREAD_CHECK(visit(m_.root, 0, kKeyNone, 0));
    while (!frames_.empty()) {
      Frame& f = frames_.back();
      if (f.next == f.end) {  // all children named: leave the container
        on_path_[f.node / 64] &= ~(uint64_t{1} << (f.node % 64));
        children_.resize(f.child_base);
        frames_.pop_back();
        continue;
      }
      const uint32_t depth = f.depth + 1;
      const uint32_t k = f.next++;
      switch (f.mode) {
        case kByIndex:
          PTREAD_CHECK(visit(f.items[k], k, kKeyIndex, depth));
          break;
        case kByKey:
          if (f.depth == 0 && list_root_entry(f.items[2 * k], f.items[2 * k + 1])) break;
          PTREAD_CHECK(visit(f.items[2 * k + 1], f.items[2 * k], kKeyNode, depth));
          break;
        default: {
          const Child c = children_[f.child_base + k];
          PTREAD_CHECK(visit(c.node, c.key, c.key_kind, depth));
          break;
        }
      }
    }
    // Tensors no name reaches (in sets, behind cycles) are made too: Value::as_tensor.
    for (size_t k = 0; k < m_.specs.size(); ++k) {
      if (m_.tensor_home[k] != kNoNode) continue;
      m_.tensor_home[k] = Model::kUnnamed | static_cast<uint32_t>(m_.tensors.size());
      m_.tensors.emplace_back();
      m_.make_tensor(static_cast<uint32_t>(k), &m_.tensors.back());
    }
    // Quantized and sparse entries: their parts made from their specs.
    for (size_t k = 0; k < m_.named_quantized.size(); ++k) m_.named_quantized[k].tensor = m_.make_quantized(m_.quantized_of[k]);
    for (size_t k = 0; k < m_.named_sparse.size(); ++k) m_.named_sparse[k].tensor = m_.make_sparse(m_.sparse_of[k]);
    return {};
  }

 private:
  // How an item is named inside its parent: not at all, by index, or by a dict key node.
  enum KeyKind : uint8_t { kKeyNone, kKeyIndex, kKeyNode };
  struct Child {
    uint32_t node;
    uint32_t key;  // the index, or the key node
    KeyKind key_kind;
  };
  // A container being walked: lists and tuples by index, dicts by key, objects through
  // the children collected for them (children_[child_base ...]).
  enum Mode : uint8_t { kByIndex, kByKey, kByChildren };
  struct Frame {
    const uint32_t* items;
    size_t child_base;
    uint32_t node;
    uint32_t next;
    uint32_t end;
    uint32_t depth;
    Mode mode;
  };

  // Visits node i, named `key` inside the container on top of frames_ (at `depth`).
  Status visit(uint32_t i, uint32_t key, KeyKind key_kind, uint32_t depth) {
    if (++steps_ > max_steps_) {
      return make_error(ErrorCode::limit_exceeded,
                        "naming walk exceeded " + std::to_string(max_steps_) +
                            " steps (a graph with heavy sharing?)");
    }
    const NodeView n = g_.at(i);
    switch (n.kind) {
      case ValueKind::tensor: {
        const size_t pos = m_.listed_count();
        if (pos >= limits_.max_tensors) {
          return make_error(ErrorCode::limit_exceeded, "more tensors than Limits::max_tensors");
        }
        std::string_view name;
        PTREAD_CHECK(leaf_name(&name, key, key_kind, depth));
        if (name.size() > UINT32_MAX) {
          return make_error(ErrorCode::limit_exceeded, "a tensor name of " + std::to_string(name.size()) + " bytes (4 GiB at most)");
        }
        list_tensor(name, n.ref, pos);
        return {};
      }
      case ValueKind::unsupported:
        PTREAD_CHECK(enter(key, key_kind, depth));
        if (!spend_names(path_.size())) return names_over_budget();
        m_.named_unsupported.push_back({path_, m_.unsupported[n.ref]});
        return {};
      case ValueKind::quantized:
        PTREAD_CHECK(enter(key, key_kind, depth));
        if (!spend_names(path_.size())) return names_over_budget();
        m_.named_quantized.push_back({path_, QuantizedTensor()});
        m_.quantized_of.push_back(n.ref);
        return {};
      case ValueKind::sparse:
        PTREAD_CHECK(enter(key, key_kind, depth));
        if (!spend_names(path_.size())) return names_over_budget();
        m_.named_sparse.push_back({path_, SparseTensor()});
        m_.sparse_of.push_back(n.ref);
        return {};
      case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::object:
        break;
      default:
        return {};  // scalars, strings, sets, globals: metadata, not tensors
    }
    if ((on_path_[i / 64] >> (i % 64)) & 1) return {};  // a cycle back into the path
    PTREAD_CHECK(enter(key, key_kind, depth));
    if (depth >= limits_.max_nesting_depth) {
      return make_error(ErrorCode::limit_exceeded,
                        "objects nested deeper than Limits::max_nesting_depth at '" + path_ + "'");
    }
    Frame f;
    f.node = i;
    f.next = 0;
    f.depth = depth;
    f.child_base = children_.size();
    if (n.kind == ValueKind::list || n.kind == ValueKind::tuple) {
      f.mode = kByIndex;
      f.items = n.items.data();
      f.end = static_cast<uint32_t>(n.items.size());
    } else if (n.kind == ValueKind::dict) {
      f.mode = kByKey;
      f.items = n.items.data();
      f.end = static_cast<uint32_t>(n.items.size() / 2);
    } else {
      f.mode = kByChildren;
      f.items = nullptr;
      collect_object(n);
      if (name_bytes_ > name_budget_) return names_over_budget();  // a module's name (add_module)
      f.end = static_cast<uint32_t>(children_.size() - f.child_base);
    }
    on_path_[i / 64] |= uint64_t{1} << (i % 64);
    frames_.push_back(f);
    return {};
  }

  // Listed by name and spec (at position pos); the Tensor objects are made later
  // (Model::named).
  PTREAD_ALWAYS_INLINE void list_tensor(std::string_view name, uint32_t spec, size_t pos) {
    m_.listed.push_back({name.data(), static_cast<uint32_t>(name.size()), spec});
    uint32_t& home = m_.tensor_home[spec];
    if (home == kNoNode && pos < Model::kUnnamed) home = static_cast<uint32_t>(pos);
  }
  // An entry of the root dict that is a tensor under a string key (a state dict's), listed
  // as visit() lists it (its name is the key's text, in the arena) without visit()'s
  // general steps: a third of the naming of 100,000 tensors. False, doing nothing, for any
  // other entry and where visit() would stop with an error.
  PTREAD_ALWAYS_INLINE bool list_root_entry(uint32_t key, uint32_t value) {
    if (g_.kind(value) != ValueKind::tensor || g_.kind(key) != ValueKind::string) return false;
    const size_t pos = m_.listed_count();
    const std::string_view name = g_.text(key);
    if (steps_ >= max_steps_ || pos >= limits_.max_tensors || name.size() > UINT32_MAX || !spend_names(name.size())) return false;
    ++steps_;
    list_tensor(name, g_.nodes[value].ref, pos);
    return true;
  }

  // path_ becomes the item's name: its parent's name (the first path_len_[depth - 1]
  // bytes: the walk is depth-first), a dot, its key.
  Status enter(uint32_t key, KeyKind key_kind, uint32_t depth) {
    if (depth == 0) {
      path_.clear();
    } else {
      path_.resize(path_len_[depth - 1]);
      const size_t base = path_.size();
      if (base) path_.push_back('.');
      append_key(key, key_kind);
      if (base && path_.size() == base + 1) path_.resize(base);  // an empty key adds nothing
      if (!spend_names(path_.size() - base)) return names_over_budget();
    }
    if (path_len_.size() <= depth) path_len_.resize(depth + 1);
    path_len_[depth] = path_.size();
    if (!key_error_.empty()) {
      return make_error(ErrorCode::limit_exceeded, "naming '" + path_.substr(0, 200) + "': " + key_error_);
    }
    return {};
  }
  // The name of a leaf (a tensor: nothing is named under it), in the graph's arena: what
  // enter() makes path_, without going through path_ for the usual string key (a key of
  // the root dict is its own name: its text, already in the arena).
  Status leaf_name(std::string_view* out, uint32_t key, KeyKind key_kind, uint32_t depth) {
    Arena& arena = m_.graph.arena;
    if (depth == 0 || key_kind != kKeyNode || g_.kind(key) != ValueKind::string) {
      PTREAD_CHECK(enter(key, key_kind, depth));
      if (!spend_names(path_.size())) return names_over_budget();
      *out = std::string_view(arena.copy(path_.data(), path_.size()), path_.size());
      return {};
    }
    const size_t base = path_len_[depth - 1];
    const std::string_view k = g_.text(key);
    const size_t n = base == 0 ? k.size() : k.empty() ? base : base + 1 + k.size();
    if (!spend_names(n)) return names_over_budget();  // (Model::named() copies it again)
    if (base == 0) {
      *out = k;
      return {};
    }
    char* d = static_cast<char*>(arena.allocate(n, 1));
    std::memcpy(d, path_.data(), base);
    if (!k.empty()) {
      d[base] = '.';
      std::memcpy(d + base + 1, k.data(), k.size());
    }
    *out = std::string_view(d, n);
    return {};
  }
  void append_key(uint32_t key, KeyKind key_kind) {
    char digits[24];
    if (key_kind == kKeyIndex) {
      const auto r = std::to_chars(digits, digits + sizeof digits, key);
      path_.append(digits, static_cast<size_t>(r.ptr - digits));
    } else if (key_kind == kKeyNode) {
      const ValueKind k = g_.kind(key);
      if (k == ValueKind::string) {
        path_ += g_.text(key);
      } else if (k == ValueKind::integer) {
        const auto r = std::to_chars(digits, digits + sizeof digits, g_.at(key).i);
        path_.append(digits, static_cast<size_t>(r.ptr - digits));
      } else if (k == ValueKind::big_integer && big_too_long(g_.text(key))) {
        // Python >= 3.11's str() refuses an int of over 4300 digits, which 3.10 and before
        // (and torch.load in any) take: the key is named by all its digits, within kMaxKeyBytes.
        std::string text;
        if (big_to_decimal_within(g_.text(key), kMaxKeyBytes, &text)) {
          path_ += text;
        } else {
          key_error_ = "a dict key's text is longer than " + std::to_string(kMaxKeyBytes) + " bytes";
        }
      } else {
        std::string text;
        if (python_str_into(g_, key, false, 0, text, kMaxKeyBytes)) {
          path_ += text;
        } else {
          key_error_ = "a dict key's text is longer than " + std::to_string(kMaxKeyBytes) + " bytes";
        }
      }
    }
  }

  void add_indexed(const Items& items) {
    for (size_t k = 0; k < items.size(); ++k) children_.push_back({items[k], static_cast<uint32_t>(k), kKeyIndex});
  }
  void add_pairs(const Items& it) {
    for (size_t k = 0; k + 1 < it.size(); k += 2) children_.push_back({it[k + 1], it[k], kKeyNode});
  }

  // An object's attributes, less those that repeat one of its dict items: the same text as
  // the item's key and the same value. A dict subclass that keeps its items as attributes
  // too (EasyDict and the like) would list each tensor twice under one name; it is named
  // once, as the item (what obj[key] gives). An attribute holding an item's value under
  // another name is a tie, listed under both.
  void add_attributes(const Items& attrs, uint32_t dict_items) {
    if (dict_items == kNoNode || g_.kind(dict_items) != ValueKind::dict) {
      add_pairs(attrs);
      return;
    }
    const Items items = g_.at(dict_items).items;
    std::unordered_multimap<uint32_t, uint32_t> key_of;  // an item's value node -> its key node
    key_of.reserve(items.size() / 2);
    for (size_t k = 0; k + 1 < items.size(); k += 2) key_of.emplace(items[k + 1], items[k]);
    for (size_t k = 0; k + 1 < attrs.size(); k += 2) {
      bool repeated = false;
      if (g_.kind(attrs[k]) == ValueKind::string) {
        const auto range = key_of.equal_range(attrs[k + 1]);
        for (auto i = range.first; i != range.second && !repeated; ++i) repeated = g_.is_string(i->second, g_.text(attrs[k]));
      }
      if (!repeated) children_.push_back({attrs[k + 1], attrs[k], kKeyNode});
    }
  }

  void add_dict(uint32_t d, uint32_t skip_set = kNoNode) {
    if (d == kNoNode || g_.kind(d) != ValueKind::dict) return;
    const Items it = g_.at(d).items;
    for (size_t k = 0; k + 1 < it.size(); k += 2) {
      if (g_.kind(it[k + 1]) == ValueKind::none) continue;
      if (skip_set != kNoNode && in_set(skip_set, it[k])) continue;
      children_.push_back({it[k + 1], it[k], kKeyNode});
    }
  }

  bool in_set(uint32_t set, uint32_t key) const {
    if (g_.kind(set) != ValueKind::set && g_.kind(set) != ValueKind::frozenset) return false;
    if (g_.kind(key) != ValueKind::string) return false;
    for (uint32_t e : g_.at(set).items) {
      if (g_.is_string(e, g_.text(key))) return true;
    }
    return false;
  }

  // An object's children, named as state_dict() names module state; other objects' by
  // attribute name (__dict__, then __slots__).
  void collect_object(const NodeView& n) {
    uint32_t state = kNoNode, slots = kNoNode;
    object_state(g_, n.items[kObjState], &state, &slots);
    const uint32_t cls = n.items[kObjClass];
    if (state != kNoNode && g_.kind(state) == ValueKind::dict) {
      const uint32_t params = g_.dict_get(state, "_parameters");
      const uint32_t modules = g_.dict_get(state, "_modules");
      const bool script = torchscript_module(cls);
      if (params != kNoNode || modules != kNoNode || script) add_module(cls);
      const ScriptClass* sc = script ? script_class(cls) : nullptr;
      if (sc != nullptr) {
        // state_dict() of a TorchScript module: parameters, buffers, then submodules, each
        // in attribute order.
        const Items it = g_.at(state).items;
        for (const auto* names : {&sc->parameters, &sc->buffers}) {
          for (size_t k = 0; k + 1 < it.size(); k += 2) {
            if (g_.kind(it[k + 1]) != ValueKind::none && g_.kind(it[k]) == ValueKind::string &&
                std::find(names->begin(), names->end(), g_.text(it[k])) != names->end()) {
              children_.push_back({it[k + 1], it[k], kKeyNode});
            }
          }
        }
        for (size_t k = 0; k + 1 < it.size(); k += 2) {
          const uint32_t v = it[k + 1];
          if (g_.kind(v) == ValueKind::object && torchscript_module(g_.at(v).items[kObjClass])) {
            children_.push_back({v, it[k], kKeyNode});
          }
        }
        return;
      }
      if (params != kNoNode || modules != kNoNode) {
        add_dict(params);
        add_dict(g_.dict_get(state, "_buffers"), g_.dict_get(state, "_non_persistent_buffers_set"));
        add_dict(modules);
        return;
      }
      add_attributes(g_.at(state).items, n.items[kObjDictItems]);
    } else if (state != kNoNode) {
      children_.push_back({state, 0, kKeyNone});
    } else if (slots == kNoNode && n.items[kObjArgs] != kNoNode) {
      add_indexed(g_.at(n.items[kObjArgs]).items);
    }
    if (slots != kNoNode) add_attributes(g_.at(slots).items, n.items[kObjDictItems]);
    if (n.items[kObjListItems] != kNoNode) add_indexed(g_.at(n.items[kObjListItems]).items);
    if (n.items[kObjDictItems] != kNoNode) add_pairs(g_.at(n.items[kObjDictItems]).items);
  }

  // A TorchScript module's class: __torch__.<qualified name>, not a custom C++ class.
  bool torchscript_module(uint32_t cls) const {
    if (g_.kind(cls) != ValueKind::global) return false;
    const std::string_view mod = g_.global_module(cls);
    return (mod == "__torch__" || starts_with(mod, "__torch__.")) && !starts_with(mod, "__torch__.torch.classes");
  }
  // The code/ description of a TorchScript class, when the archive has one.
  const ScriptClass* script_class(uint32_t cls) {
    if (m_.script_classes.empty()) return nullptr;
    if (script_index_.empty()) {
      for (const auto& c : m_.script_classes) script_index_.emplace(c.qualified_name, &c);
    }
    std::string q(g_.global_module(cls));
    q += '.';
    q += g_.global_name(cls);
    auto f = script_index_.find(q);
    return f == script_index_.end() ? nullptr : f->second;
  }
  void add_module(uint32_t cls) {
    std::string name;
    if (g_.kind(cls) == ValueKind::global) {
      name.assign(g_.global_module(cls));
      name += '.';
      name += g_.global_name(cls);
    }
    spend_names(path_.size());  // visit() checks the budget after
    m_.modules.push_back({path_, std::move(name)});
  }

  Model& m_;
  const Graph& g_;
  const Limits& limits_;
  std::vector<Frame> frames_;      // the containers on the path, innermost last
  std::vector<Child> children_;    // the children of the objects on the path
  PoolVector<uint64_t> on_path_{&m_.pool};  // a bit per graph node: a container on the path (in the model's pool, as tensor_home)
  std::string path_;               // the name of the item being visited
  std::vector<size_t> path_len_;   // path_len_[d]: length of the name of the last item visited at depth d
  std::unordered_map<std::string, const ScriptClass*, KeyedHash> script_index_;
  static constexpr size_t kMaxKeyBytes = size_t{1} << 16;  // the text of one non-string key
  std::string key_error_;
  uint64_t steps_ = 0;
  uint64_t max_steps_ = 0;
  // The bytes of names made (each key added to a path, each name kept): a key repeated
  // through the memo at every level of a deep nesting would make every tensor's name huge
  // (an 84 KB file: 5 GB and 22 s). Names of real files take a few bytes of the file's
  // each; a budget of 64 MiB + 256 bytes a byte of the file, and Limits::max_name_bytes.
  uint64_t name_bytes_ = 0;
  uint64_t name_budget_ = 0;
  bool spend_names(uint64_t n) noexcept {
    name_bytes_ += n;
    return name_bytes_ <= name_budget_;
  }
  Error names_over_budget() const {
    return make_error(ErrorCode::limit_exceeded,
                      "the names of the tensors and modules would take over " + std::to_string(name_budget_) +
                          " bytes (64 MiB + 256 a byte of the file, at most Limits::max_name_bytes) at '" +
                          path_.substr(0, 200) + "'");
  }
};

// source_bytes: the size of the file the model was read from.
// Every sparse tensor the pickle made is checked (sparse_check.hpp), named or not, as
// torch.load checks every one it rebuilt.
inline Status name_tensors(Model& m, const Limits& limits, uint64_t source_bytes) {
  uint64_t budget = source_bytes;  // index elements to read: only expanded views reach it
  for (size_t k = 0; k < m.sparse_specs.size(); ++k) PTREAD_CHECK(check_sparse(m.make_sparse(static_cast<uint32_t>(k)), &budget));
  return Namer(m, limits, source_bytes).run();
}

}  // namespace detail
}  // namespace ptread
