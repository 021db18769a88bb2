// ptread tests — repr() of a pickled value with each set's items in a canonical order.
#pragma once

#include <ptread/ptread.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace ptread_test {

// repr() with each set's items sorted by their own text, as gen_random_pickles.py's canon()
// prints a value: Python's set iterates in the order of its items' hashes, the printer in
// the pickle's, and a framed pickle read as torch.load reads it can put any items in a set.
// A list or dict inside itself prints as repr() prints it ("[...]", "{...}"); past
// kMaxCanonDepth levels (where Python's canon() runs out of stack), and once kCanonBudget
// bytes are printed (a graph of shared tuples spells an exponentially long text), "...".
constexpr int kMaxCanonDepth = 400;
constexpr size_t kCanonBudget = size_t{1} << 24;

struct CanonState {
  std::vector<uint32_t> busy;  // the lists and dicts being printed
  size_t printed = 0;
};

inline std::string canon_repr(const ptread::detail::Graph& g, uint32_t i, CanonState& st, int depth) {
  using ptread::ValueKind;
  const ptread::detail::NodeView n = g.at(i);
  if (depth > kMaxCanonDepth || st.printed > kCanonBudget) return "...";
  std::vector<uint32_t>& busy = st.busy;
  const bool nests = n.kind == ValueKind::list || n.kind == ValueKind::dict;
  if (nests && std::find(busy.begin(), busy.end(), i) != busy.end()) return n.kind == ValueKind::list ? "[...]" : "{...}";
  if (nests) busy.push_back(i);
  std::string out;
  switch (n.kind) {
    case ValueKind::set: case ValueKind::frozenset: {
      if (n.items.empty()) return ptread::detail::python_str(g, i, /*repr=*/true);
      std::vector<std::string> items;
      for (size_t k = 0; k < n.items.size(); ++k) items.push_back(canon_repr(g, n.items[k], st, depth + 1));
      std::sort(items.begin(), items.end());  // bytes of UTF-8: Python's code point order
      out = n.kind == ValueKind::frozenset ? "frozenset({" : "{";
      for (size_t k = 0; k < items.size(); ++k) out += (k ? ", " : "") + items[k];
      out += n.kind == ValueKind::frozenset ? "})" : "}";
      return out;
    }
    case ValueKind::tuple: case ValueKind::list:
      out = n.kind == ValueKind::tuple ? "(" : "[";
      for (size_t k = 0; k < n.items.size(); ++k) out += (k ? ", " : "") + canon_repr(g, n.items[k], st, depth + 1);
      if (n.kind == ValueKind::tuple && n.items.size() == 1) out += ",";
      out += n.kind == ValueKind::tuple ? ")" : "]";
      break;
    case ValueKind::dict:
      out = "{";
      for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
        out += (k ? ", " : "") + canon_repr(g, n.items[k], st, depth + 1) + ": " +
               canon_repr(g, n.items[k + 1], st, depth + 1);
      }
      out += "}";
      break;
    default:
      out = ptread::detail::python_str(g, i, /*repr=*/true);
      st.printed += out.size();  // the leaves' texts: the budget
      return out;
  }
  if (nests) busy.pop_back();
  return out;
}

inline std::string canon_repr(const ptread::detail::Graph& g, uint32_t i) {
  CanonState st;
  return canon_repr(g, i, st, 0);
}

}  // namespace ptread_test
