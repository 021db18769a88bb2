// ptread — Python's str() and repr() of pickled values, for tensor names and the tree view.
#pragma once

#include "../pickle.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace ptread {
namespace detail {

// The p-digit decimal next to `e` ("%.*e" text of p = prec digits, no sign) one unit in its
// last digit up or down, in the same layout (9.99e+05 up is 1.00e+06, 1.00e+06 down 9.99e+05).
inline std::string step_last_digit(const char* e, bool up) {
  std::string digits;
  const char* p = e;
  for (; *p != 'e'; ++p) {
    if (*p != '.') digits.push_back(*p);
  }
  int exp10 = std::atoi(p + 1);
  size_t k = digits.size();
  if (up) {
    while (k > 0 && digits[k - 1] == '9') digits[--k] = '0';
    if (k == 0) {
      digits[0] = '1';  // all nines: 10.0..0, that is 1.0..0 times ten
      ++exp10;
    } else {
      ++digits[k - 1];
    }
  } else {
    while (k > 0 && digits[k - 1] == '0') digits[--k] = '9';
    if (k == 1 && digits[0] == '1') {
      digits[0] = '9';  // 1.0..0 down: 0.99..9, that is 9.9..9 over ten
      --exp10;
    } else if (k > 0) {
      --digits[k - 1];
    }
  }
  std::string out(1, digits[0]);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char x[24];
  std::snprintf(x, sizeof x, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  return out + x;
}

// repr(float): the shortest digits that read back as v, of those the nearest to v (as
// Python's repr, David Gay's shortest mode, picks them), fixed notation for
// 1e-4 <= |v| < 1e16. "%.*e" gives the p-digit decimal nearest v; where that does not
// read back, the next p-digit one toward v may (a power of two, whose doubles below lie
// twice as close as those above: 2**-24 is 5.960464477539063e-08, not ...062e-08).
// The double nearest the decimal text s ("%.*e" output). std::from_chars, not strtod: the
// C library's strtod is not correctly rounded everywhere (MinGW-w64's reads
// 3.839223843572815e-239 as 2**-792, one ulp above the nearest double).
inline double nearest_double(const std::string& s) {
  double v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

inline std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  const double a = std::fabs(v);
  char buf[40];
  std::string s;
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, a);
    const double back = nearest_double(buf);
    if (back == a) {
      s = buf;
      break;
    }
    if (a != 0) {
      const std::string next = step_last_digit(buf, back < a);
      if (nearest_double(next) == a) {
        s = next;
        break;
      }
    }
  }
  if (s.empty()) s = buf;  // (never: 17 digits always read back)
  const std::string sign = std::signbit(v) ? "-" : "";  // (s is of |v|)
  const size_t epos = s.find('e');
  const int exp10 = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t k = 0; k < epos; ++k) {
    if (s[k] != '.') digits.push_back(s[k]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;
  const int nd = static_cast<int>(digits.size());
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out = digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out = digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    char e[24];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += e;
  }
  return sign + out;
}

inline std::string python_quote(std::string_view s, bool bytes) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out = bytes ? "b" : "";
  out.push_back(q);
  for (size_t k = 0; k < s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    const auto c1 = k + 2 < s.size() ? static_cast<unsigned char>(s[k + 1]) : 0u;
    const auto c2 = k + 2 < s.size() ? static_cast<unsigned char>(s[k + 2]) : 0u;
    if (!bytes && c == 0xed && (c1 & 0xe0u) == 0xa0u && (c2 & 0xc0u) == 0x80u) {
      // A lone surrogate (a str the pickle holds as 'surrogatepass' UTF-8): Python's repr
      // escapes it, as every character that is not printable.
      char e[8];
      std::snprintf(e, sizeof e, "\\u%04x", 0xd000u | (c1 & 0x3fu) << 6 | (c2 & 0x3fu));
      out += e;
      k += 2;
    } else if (c == '\\' || c == static_cast<unsigned char>(q)) {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {
      char e[8];
      std::snprintf(e, sizeof e, "\\x%02x", c);
      out += e;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(q);
  return out;
}

// str(value) for scalars and tuples, as Python prints a dict key; `repr` quotes strings.
// Appends to out; false once out would pass `max` bytes (a graph of shared tuples can
// spell an exponentially long text), with out cut there.
inline bool python_str_into(const Graph& g, uint32_t i, bool repr, int depth, std::string& out, size_t max) {
  if (out.size() > max) return false;
  const NodeView n = g.at(i);
  switch (n.kind) {
    case ValueKind::none: out += "None"; break;
    case ValueKind::boolean: out += n.i ? "True" : "False"; break;
    case ValueKind::integer: out += std::to_string(n.i); break;
    case ValueKind::big_integer: out += big_to_decimal(g.text(i)); break;
    case ValueKind::floating: out += python_float_repr(n.f); break;
    case ValueKind::string:
      if (repr) out += python_quote(g.text(i), false);
      else out += g.text(i);
      break;
    case ValueKind::bytes: out += python_quote(g.text(i), true); break;
    case ValueKind::global:
      out += g.global_module(i);
      out += '.';
      out += g.global_name(i);
      break;
    case ValueKind::dict: {
      if (depth > 16) {
        out += "...";
        break;
      }
      out += "{";
      for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
        if (k) out += ", ";
        if (!python_str_into(g, n.items[k], true, depth + 1, out, max)) return false;
        out += ": ";
        if (!python_str_into(g, n.items[k + 1], true, depth + 1, out, max)) return false;
      }
      out += "}";
      break;
    }
    case ValueKind::tuple: case ValueKind::list: case ValueKind::set: case ValueKind::frozenset: {
      if (depth > 16) {
        out += "...";
        break;
      }
      if (n.items.empty() && n.kind == ValueKind::set) {
        out += "set()";
        break;
      }
      if (n.items.empty() && n.kind == ValueKind::frozenset) {
        out += "frozenset()";
        break;
      }
      const char* open = n.kind == ValueKind::tuple ? "(" : n.kind == ValueKind::list ? "[" : "{";
      const char* close = n.kind == ValueKind::tuple ? ")" : n.kind == ValueKind::list ? "]" : "}";
      out += n.kind == ValueKind::frozenset ? "frozenset({" : open;
      for (size_t k = 0; k < n.items.size(); ++k) {
        if (k) out += ", ";
        if (!python_str_into(g, n.items[k], true, depth + 1, out, max)) return false;
      }
      if (n.kind == ValueKind::tuple && n.items.size() == 1) out += ",";
      out += n.kind == ValueKind::frozenset ? "})" : close;
      break;
    }
    case ValueKind::object: {
      const uint32_t cls = n.items[kObjClass];
      out += "<";
      if (g.kind(cls) == ValueKind::global) {
        if (!python_str_into(g, cls, false, depth + 1, out, max)) return false;
      } else {
        out += "object";
      }
      out += " object>";
      break;
    }
    default:
      out += "<";
      out += value_kind_name(n.kind);
      out += ">";
  }
  return out.size() <= max;
}

// The text of python_str_into, cut with "..." past `max` bytes (1 MiB by default).
inline std::string python_str(const Graph& g, uint32_t i, bool repr = false, int depth = 0, size_t max = size_t{1} << 20) {
  std::string out;
  if (!python_str_into(g, i, repr, depth, out, max)) {
    out.resize(max);
    out += "...";
  }
  return out;
}

}  // namespace detail
}  // namespace ptread
