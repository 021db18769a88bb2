// ptread — collections.OrderedDict, defaultdict and Counter (Lib/collections/__init__.py),
// called or made by NEWOBJ (empty: their items are set after, by SETITEMS).
#pragma once

#include "../context.hpp"

#include <string>

namespace ptread {
namespace detail {

// Dict node d as made by callable (a class of collections): tagged kAttrsTag when its
// instances take attributes (OrderedDict, Counter; a defaultdict has no __dict__).
inline uint32_t attrs_dict(Graph& g, uint32_t callable, uint32_t d) {
  if (g.global_name(callable) != "defaultdict") g.nodes[d].tag = kAttrsTag;
  return d;
}

// collections.OrderedDict(x), Counter(x) and defaultdict(factory, x), as Python makes
// them. Their __reduce__ give Counter(dict), defaultdict(factory) and OrderedDict() with
// the items set after, and protocols 0-1 OrderedDict([(k, v), ...]); x may be a dict,
// or for OrderedDict and defaultdict a list or tuple of pairs (Counter would count a
// list's items: refused), and Counter(None) is empty. What Python refuses (more
// arguments, an x of another kind, a factory that is no class, function or object) is
// an error, never a dict made of part of the arguments.
inline Result<uint32_t> dict_call(TorchContext& cx, Graph& g, uint32_t callable, const Items& a) {
  const std::string_view name = g.global_name(callable);
  const bool factory = name == "defaultdict", counter = name == "Counter";
  auto refuse = [&](const std::string& why) {
    return make_error(ErrorCode::pickle_malformed, "collections." + std::string(name) + "() " + why);
  };
  if (factory && !a.empty()) {
    const ValueKind f = g.kind(a[0]);
    if (f != ValueKind::none && f != ValueKind::global && f != ValueKind::object) {
      return refuse(std::string("with a default factory that is a ") + value_kind_name(f) + ", which cannot be called");
    }
  }
  const size_t at = factory ? 1 : 0;  // the argument with the items
  if (a.size() > at + 1) {
    return refuse("of " + std::to_string(a.size()) + " arguments (Python takes at most " + std::to_string(at + 1) + ")");
  }
  const uint32_t d = attrs_dict(g, callable, g.add_container(ValueKind::dict));
  if (a.size() <= at) return d;  // (defaultdict() has no factory either)
  const uint32_t x = a[at];
  const ValueKind k = g.kind(x);
  if (k == ValueKind::dict) {
    const Items kv = g.at(x).items;
    PTREAD_CHECK(cx.spend(kv.size(), "collections' dicts"));
    g.append(d, kv.data(), kv.size());
    return d;
  }
  if (counter && k == ValueKind::none) return d;
  if (!counter && (k == ValueKind::list || k == ValueKind::tuple)) {
    const Items pairs = g.at(x).items;
    PTREAD_CHECK(cx.spend(2 * pairs.size(), "collections' dicts"));
    for (uint32_t pair : pairs) {
      const NodeView pn = g.at(pair);
      if ((pn.kind != ValueKind::tuple && pn.kind != ValueKind::list) || pn.items.size() != 2) {
        return refuse("item is not a pair");
      }
      const uint32_t kv[2] = {pn.items[0], pn.items[1]};
      g.append(d, kv, 2);
    }
    return d;
  }
  return refuse(std::string("of a ") + value_kind_name(k) + " (ptread reads a dict" +
                (counter ? std::string(" or None)") : std::string(", or a list or tuple of pairs)")));
}

inline bool is_ordered_dict(std::string_view mod, std::string_view name, bool) {
  return mod == "collections" && name == "OrderedDict";
}
inline bool is_dict_like(std::string_view mod, std::string_view name, bool) {
  return mod == "collections" && (name == "defaultdict" || name == "Counter");
}
inline Result<uint32_t> dict_class_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return dict_call(cx, g, c.callable, c.a);
}
// cls.__new__(cls): an empty dict, its items set after.
inline Result<uint32_t> dict_class_new(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  return attrs_dict(g, c.callable, g.add_container(ValueKind::dict));
}

}  // namespace detail
}  // namespace ptread
