// ptread — Python's builtins set, frozenset, bytes and bytearray as pickles call them
// (protocols 0-2 write sets and bytes as calls; __builtin__ below protocol 3).
#pragma once

#include "../context.hpp"
#include "codecs.hpp"

#include <string>
#include <vector>

namespace ptread {
namespace detail {

// bytes(...) and bytearray(...) (ptread's bytes both) as Python makes them: of nothing;
// of bytes; of a str with an encoding (and errors), as _codecs.encode; of an int n, n
// zero bytes (within TorchContext::spend's budget); of a list or tuple of ints in
// [0, 256). What Python refuses is an error, and so is what ptread does not read (a set's
// or dict's ints: Python takes them in its hash order).
inline Result<uint32_t> bytes_call(TorchContext& cx, Graph& g, const Items& a, const char* name) {
  auto refuse = [&](const std::string& why) {
    return make_error(ErrorCode::pickle_malformed, std::string(name) + "() " + why);
  };
  if (a.empty()) return g.add_text(ValueKind::bytes, "");
  if (a.size() > 3) return refuse("of " + std::to_string(a.size()) + " arguments (Python takes at most 3)");
  const ValueKind of = g.kind(a[0]);
  if (of == ValueKind::string) {
    if (a.size() == 1) return refuse("of a str without an encoding (Python refuses it)");
    return codecs_encode(cx, g, a);
  }
  if (a.size() > 1) return refuse(std::string("of a ") + value_kind_name(of) + " with an encoding (Python refuses it)");
  if (of == ValueKind::bytes) return g.add_interned_text(ValueKind::bytes, g.text(a[0]));
  if (of == ValueKind::integer || of == ValueKind::boolean) {
    const int64_t n = g.at(a[0]).i;
    if (n < 0) return refuse("of a negative count (Python refuses it)");
    PTREAD_CHECK(cx.spend(static_cast<uint64_t>(n), name));
    return g.add_text(ValueKind::bytes, std::string(static_cast<size_t>(n), '\0'));
  }
  if (of == ValueKind::list || of == ValueKind::tuple) {
    const Items items = g.at(a[0]).items;
    PTREAD_CHECK(cx.spend(items.size(), name));
    std::string out;
    out.reserve(items.size());
    for (const uint32_t v : items) {
      const ValueKind k = g.kind(v);
      if (k != ValueKind::integer && k != ValueKind::boolean) {
        return refuse(std::string("of a ") + value_kind_name(of) + " holding a " + value_kind_name(k) + " (Python takes ints)");
      }
      const int64_t b = g.at(v).i;
      if (b < 0 || b > 255) return refuse("of a byte value " + std::to_string(b) + " (Python takes 0 to 255)");
      out.push_back(static_cast<char>(b));
    }
    return g.add_text(ValueKind::bytes, out);
  }
  return refuse(std::string("of a ") + value_kind_name(of) + " (ptread reads bytes of nothing, bytes, a str with an encoding, an int, a list or tuple of ints)");
}

// set(), set(iterable) and frozenset(...): a list or tuple (what pickle writes), a set, a
// dict's keys, a str's characters or a bytes' bytes.
inline Result<uint32_t> set_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  const bool is_set = g.global_name(c.callable) == "set";
  const ValueKind made = is_set ? ValueKind::set : ValueKind::frozenset;
  const Items& a = c.a;
    if (a.empty()) return g.add_container(made);
    const ValueKind of = g.kind(a[0]);
    if (a.size() == 1 && (of == ValueKind::list || of == ValueKind::tuple || of == ValueKind::set || of == ValueKind::frozenset)) {
      const Items items = g.at(a[0]).items;
      PTREAD_CHECK(cx.spend(items.size(), "set()"));
      return g.add_container(made, items.data(), items.size());
    }
    if (a.size() == 1 && of == ValueKind::dict) {
      const Items kv = g.at(a[0]).items;
      PTREAD_CHECK(cx.spend(kv.size() / 2, "set()"));
      std::vector<uint32_t> keys;
      for (size_t k = 0; k < kv.size(); k += 2) keys.push_back(kv[k]);
      return g.add_container(made, keys.data(), keys.size());
    }
    if (a.size() == 1 && (of == ValueKind::string || of == ValueKind::bytes)) {
      // a str's characters (one-character strs), a bytes' bytes (ints); the set keeps
      // each once (DictKeys, at STOP)
      const std::string_view t = g.text(a[0]);
      PTREAD_CHECK(cx.spend(t.size(), "set()"));
      std::vector<uint32_t> items;
      for (size_t k = 0; k < t.size();) {
        uint32_t cp = 0;
        const size_t n = of == ValueKind::string ? std::max<size_t>(utf8_next(t, k, &cp), 1) : 1;  // (valid UTF-8)
        items.push_back(of == ValueKind::string ? g.add_text(ValueKind::string, t.substr(k, n))
                                                : g.add_int(static_cast<uint8_t>(t[k])));
        k += n;
      }
      return g.add_container(made, items.data(), items.size());
    }
    return make_error(ErrorCode::pickle_malformed, std::string(is_set ? "set" : "frozenset") + "() of " +
                                                       (a.size() == 1 ? std::string("a ") + value_kind_name(of) : std::to_string(a.size()) + " arguments") +
                                                       " (ptread reads set() of lists, tuples, sets, dicts, strs and bytes)");
}

inline bool is_builtins(std::string_view mod, bool py2) { return mod == "builtins" || (py2 && mod == "__builtin__"); }
inline bool is_builtin_set(std::string_view mod, std::string_view name, bool py2) {
  return is_builtins(mod, py2) && name == "set";
}
inline bool is_builtin_frozenset(std::string_view mod, std::string_view name, bool py2) {
  return is_builtins(mod, py2) && name == "frozenset";
}
inline bool is_builtin_bytes(std::string_view mod, std::string_view name, bool py2) {
  return is_builtins(mod, py2) && name == "bytes";
}
inline bool is_builtin_bytearray(std::string_view mod, std::string_view name, bool py2) {
  return is_builtins(mod, py2) && name == "bytearray";
}

// protocols 0-2 pickle b'' as bytes()
inline Result<uint32_t> bytes_class_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return bytes_call(cx, g, c.a, g.global_name(c.callable) == "bytes" ? "bytes" : "bytearray");
}
// set.__new__ and bytearray.__new__ leave them empty (their __init__ fills them).
inline Result<uint32_t> set_new(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  static_cast<void>(c);
  return g.add_container(ValueKind::set);
}
inline Result<uint32_t> bytearray_new(TorchContext& cx, Graph& g, const GlobalCall& c) {
  static_cast<void>(cx);
  static_cast<void>(c);
  return g.add_text(ValueKind::bytes, "");
}

}  // namespace detail
}  // namespace ptread
