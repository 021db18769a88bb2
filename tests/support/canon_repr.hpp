// ptread tests — repr() of a pickled value with each set's items in a canonical order.
#pragma once

#include <ptread/ptread.hpp>
#include <ptread/detail/python_repr.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace ptread_test {

// repr() with each set's items sorted by their own text, as gen_random_pickles.py's canon()
// prints a value: Python's set iterates in the order of its items' hashes, the printer in
// the pickle's, and a framed pickle read as torch.load reads it can put any items in a set.
inline std::string canon_repr(const ptread::detail::Graph& g, uint32_t i) {
  using ptread::ValueKind;
  const ptread::detail::NodeView n = g.at(i);
  std::string out;
  switch (n.kind) {
    case ValueKind::set: case ValueKind::frozenset: {
      if (n.items.empty()) return ptread::detail::python_str(g, i, /*repr=*/true);
      std::vector<std::string> items;
      for (size_t k = 0; k < n.items.size(); ++k) items.push_back(canon_repr(g, n.items[k]));
      std::sort(items.begin(), items.end());  // bytes of UTF-8: Python's code point order
      out = n.kind == ValueKind::frozenset ? "frozenset({" : "{";
      for (size_t k = 0; k < items.size(); ++k) out += (k ? ", " : "") + items[k];
      return out + (n.kind == ValueKind::frozenset ? "})" : "}");
    }
    case ValueKind::tuple: case ValueKind::list:
      out = n.kind == ValueKind::tuple ? "(" : "[";
      for (size_t k = 0; k < n.items.size(); ++k) out += (k ? ", " : "") + canon_repr(g, n.items[k]);
      if (n.kind == ValueKind::tuple && n.items.size() == 1) out += ",";
      return out + (n.kind == ValueKind::tuple ? ")" : "]");
    case ValueKind::dict:
      out = "{";
      for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
        out += (k ? ", " : "") + canon_repr(g, n.items[k]) + ": " + canon_repr(g, n.items[k + 1]);
      }
      return out + "}";
    default:
      return ptread::detail::python_str(g, i, /*repr=*/true);
  }
}

}  // namespace ptread_test
