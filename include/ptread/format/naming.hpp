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

#include "../detail/python_repr.hpp"
#include "model.hpp"

namespace ptread {
namespace detail {

class Namer {
 public:
  Namer(Model& m, const Limits& limits) : m_(m), g_(m.graph), limits_(limits) {}

  Status run() {
    on_path_.assign(g_.nodes.size(), 0);
    const uint64_t max_steps = uint64_t{16} * g_.nodes.size() + (uint64_t{1} << 20);
    work_.push_back({m_.root, std::string(), false, 0});
    uint64_t steps = 0;
    while (!work_.empty()) {
      Item item = std::move(work_.back());
      work_.pop_back();
      if (item.exit) {
        on_path_[item.node] = 0;
        continue;
      }
      if (++steps > max_steps) {
        return make_error(ErrorCode::limit_exceeded,
                          "naming walk exceeded " + std::to_string(max_steps) +
                              " steps (a graph with heavy sharing?)");
      }
      PTREAD_CHECK(visit(item));
    }
    return {};
  }

 private:
  struct Item {
    uint32_t node;
    std::string path;
    bool exit;
    size_t depth;
  };
  struct Child {
    uint32_t node;
    std::string name;
  };

  static std::string join(const std::string& path, const std::string& key) {
    if (key.empty()) return path;
    return path.empty() ? key : path + "." + key;
  }

  Status visit(const Item& item) {
    const uint32_t i = item.node;
    const Node& n = g_.at(i);
    switch (n.kind) {
      case ValueKind::tensor:
        if (m_.named.size() >= limits_.max_tensors) {
          return make_error(ErrorCode::limit_exceeded, "more tensors than Limits::max_tensors");
        }
        m_.named.push_back({item.path, m_.tensors[n.ref]});
        return {};
      case ValueKind::unsupported:
        m_.named_unsupported.push_back({item.path, m_.unsupported[n.ref]});
        return {};
      case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::object:
        break;
      default:
        return {};  // scalars, strings, sets, globals: metadata, not tensors
    }
    if (on_path_[i]) return {};  // a cycle back into the path
    if (item.depth >= limits_.max_nesting_depth) {
      return make_error(ErrorCode::limit_exceeded,
                        "objects nested deeper than Limits::max_nesting_depth at '" + item.path + "'");
    }
    children_.clear();
    collect(i, &children_);
    on_path_[i] = 1;
    work_.push_back({i, std::string(), true, item.depth});
    for (size_t k = children_.size(); k-- > 0;) {
      work_.push_back({children_[k].node, join(item.path, children_[k].name), false, item.depth + 1});
    }
    return {};
  }

  void add_dict(uint32_t d, std::vector<Child>* out, uint32_t skip_set = kNoNode) {
    if (d == kNoNode || g_.kind(d) != ValueKind::dict) return;
    const auto& it = g_.at(d).items;
    for (size_t k = 0; k + 1 < it.size(); k += 2) {
      if (g_.kind(it[k + 1]) == ValueKind::none) continue;
      if (skip_set != kNoNode && in_set(skip_set, it[k])) continue;
      out->push_back({it[k + 1], python_str(g_, it[k])});
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

  void collect(uint32_t i, std::vector<Child>* out) {
    const Node& n = g_.at(i);
    if (n.kind == ValueKind::list || n.kind == ValueKind::tuple) {
      for (size_t k = 0; k < n.items.size(); ++k) out->push_back({n.items[k], std::to_string(k)});
      return;
    }
    if (n.kind == ValueKind::dict) {
      const auto& it = n.items;
      for (size_t k = 0; k + 1 < it.size(); k += 2) out->push_back({it[k + 1], python_str(g_, it[k])});
      return;
    }
    // object
    uint32_t state = n.items[kObjState];
    if (state != kNoNode && g_.kind(state) == ValueKind::tuple && g_.at(state).items.size() == 2 &&
        g_.kind(g_.at(state).items[0]) == ValueKind::dict) {
      state = g_.at(state).items[0];  // (dict state, slot state)
    }
    if (state != kNoNode && g_.kind(state) == ValueKind::dict) {
      const uint32_t params = g_.dict_get(state, "_parameters");
      const uint32_t modules = g_.dict_get(state, "_modules");
      if (params != kNoNode || modules != kNoNode) {
        add_dict(params, out);
        add_dict(g_.dict_get(state, "_buffers"), out, g_.dict_get(state, "_non_persistent_buffers_set"));
        add_dict(modules, out);
        return;
      }
      const auto& it = g_.at(state).items;
      for (size_t k = 0; k + 1 < it.size(); k += 2) out->push_back({it[k + 1], python_str(g_, it[k])});
    } else if (state != kNoNode) {
      out->push_back({state, std::string()});
    } else if (n.items[kObjArgs] != kNoNode) {
      const auto& a = g_.at(n.items[kObjArgs]).items;
      for (size_t k = 0; k < a.size(); ++k) out->push_back({a[k], std::to_string(k)});
    }
    if (n.items[kObjListItems] != kNoNode) {
      const auto& a = g_.at(n.items[kObjListItems]).items;
      for (size_t k = 0; k < a.size(); ++k) out->push_back({a[k], std::to_string(k)});
    }
    if (n.items[kObjDictItems] != kNoNode) {
      const auto& it = g_.at(n.items[kObjDictItems]).items;
      for (size_t k = 0; k + 1 < it.size(); k += 2) out->push_back({it[k + 1], python_str(g_, it[k])});
    }
  }

  Model& m_;
  const Graph& g_;
  const Limits& limits_;
  std::vector<Item> work_;
  std::vector<Child> children_;
  std::vector<uint8_t> on_path_;
};

inline Status name_tensors(Model& m, const Limits& limits) { return Namer(m, limits).run(); }

}  // namespace detail
}  // namespace ptread
