// ptread — the numbers of protocol 0's text opcodes (INT, LONG, FLOAT, and GET and PUT keys), read as
// CPython's unpickler (_pickle.c, which torch.load uses) reads them. Python 2 and protocol 0 write
// plain decimals ("I42", "L42L", "F0.5"), but the unpickler takes more, and a reader that
// took those texts otherwise would give other numbers than torch.load does ("I010" is 8:
// strtol with base 0 reads C octal):
//   INT    C's strtol(s, base 0) on a 64-bit long when it takes the whole line (leading
//          whitespace, a sign, 0x hex, 0 octal); a line of two characters that reads 0 or 1
//          is False or True ("00", "01", "+0", " 1"). Otherwise Python's int(s, 0).
//   LONG   one trailing 'L' dropped, then Python's int(s, 0): whitespace around, a sign,
//          0x / 0o / 0b prefixes, single underscores between digits, no leading zeros
//          but for zero, at most 4300 decimal digits.
//   GET, PUT  Python's int(s, 10): whitespace, a sign, underscores, leading zeros.
//   FLOAT  Python's float parser (PyOS_string_to_double): a sign, digits with a point and
//          an exponent, or inf / infinity / nan in any case; no whitespace; a value too
//          large is an error, one too small is 0.
// C functions see the line up to its first NUL byte ("I5\0x" is 5), as CPython does.
#pragma once

#include "../text/text.hpp"
#include "value_graph.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace ptread {
namespace detail {

// C's isspace and Python's Py_ISSPACE, in ASCII (the same six bytes).
inline bool c_space(char c) noexcept { return c == ' ' || (c >= '\t' && c <= '\r'); }

// The text C string functions see: up to the first NUL.
inline std::string_view c_string(std::string_view s) noexcept {
  const size_t z = s.find('\0');
  return z == std::string_view::npos ? s : s.substr(0, z);
}

// A digit's value in bases up to 36, or 37 (CPython's _PyLong_DigitValue).
inline unsigned digit_value(char c) noexcept {
  if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
  if (c >= 'a' && c <= 'z') return static_cast<unsigned>(c - 'a') + 10;
  if (c >= 'A' && c <= 'Z') return static_cast<unsigned>(c - 'A') + 10;
  return 37;
}

// C's strtol(s, &end, 0) with a 64-bit long: true, with *out, when it converts without
// overflow and stops at the end of s (nothing converted counts only for an empty s, as end
// then points at the NUL that ends the string).
inline bool c_strtol_base0(std::string_view s, int64_t* out) noexcept {
  size_t k = 0;
  while (k < s.size() && c_space(s[k])) ++k;
  bool neg = false;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  unsigned base = 10;
  if (k < s.size() && s[k] == '0') {
    if (k + 2 < s.size() && (s[k + 1] == 'x' || s[k + 1] == 'X') && digit_value(s[k + 2]) < 16) {
      base = 16;
      k += 2;
    } else {
      base = 8;
    }
  }
  const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  uint64_t v = 0;
  const size_t first = k;
  for (; k < s.size() && digit_value(s[k]) < base; ++k) {
    const unsigned d = digit_value(s[k]);
    if (v > (limit - d) / base) return false;  // ERANGE
    v = v * base + d;
  }
  if (k == first) {  // no conversion: end is s itself
    *out = 0;
    return s.empty();
  }
  if (k != s.size()) return false;
  *out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

enum class IntText { ok, bad, too_many_digits };

// Python's int(s, base) for base 0 or 10 (PyLong_FromString; s as C sees it): *le gets
// the value's two's complement little-endian bytes. Base 10 takes no prefix and leading
// zeros.
inline IntText python_int(std::string_view s, unsigned base0_or_10, std::string* le) {
  size_t k = 0;
  while (k < s.size() && c_space(s[k])) ++k;
  bool neg = false;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  auto at = [&](size_t i) { return i < s.size() ? s[i] : '\0'; };
  unsigned base = 10;
  bool zero_only = false;  // a leading 0 without a prefix ("00" is 0, "010" no int)
  if (base0_or_10 == 0 && at(k) == '0') {
    const char p = at(k + 1);
    if (p == 'x' || p == 'X') base = 16;
    else if (p == 'o' || p == 'O') base = 8;
    else if (p == 'b' || p == 'B') base = 2;
    else zero_only = true;
    if (base != 10) {
      k += 2;
      if (at(k) == '_') ++k;  // one underscore after the prefix
    }
  }
  if (at(k) == '_') return IntText::bad;
  std::vector<uint8_t> digits;  // their values, most significant first
  char prev = '\0';
  for (; k < s.size() && (digit_value(s[k]) < base || s[k] == '_'); prev = s[k], ++k) {
    if (s[k] == '_') {
      if (prev == '_') return IntText::bad;
      continue;
    }
    if (base == 10 && digits.size() >= kMaxIntDigits) return IntText::too_many_digits;
    digits.push_back(static_cast<uint8_t>(digit_value(s[k])));
  }
  if (prev == '_' || digits.empty()) return IntText::bad;
  while (k < s.size() && c_space(s[k])) ++k;
  if (k != s.size()) return IntText::bad;
  if (zero_only && std::any_of(digits.begin(), digits.end(), [](uint8_t d) { return d != 0; })) return IntText::bad;
  std::vector<uint8_t> mag(1, 0);  // the magnitude, little-endian bytes
  if (base == 10) {  // mag = mag * 10 + digit: quadratic, as Python's, within 4300 digits
    for (uint8_t d : digits) {
      unsigned carry = d;
      for (auto& b : mag) {
        const unsigned v = b * 10u + carry;
        b = static_cast<uint8_t>(v);
        carry = v >> 8;
      }
      if (carry) mag.push_back(static_cast<uint8_t>(carry));
    }
  } else {  // 1, 3 or 4 bits a digit, from the least significant: linear in any length
    const unsigned bits = base == 2 ? 1 : base == 8 ? 3 : 4;
    mag.assign((digits.size() * bits + 7) / 8 + 1, 0);
    size_t bit = 0;
    for (size_t i = digits.size(); i-- > 0; bit += bits) {
      for (unsigned b = 0; b < bits; ++b) {
        if (digits[i] >> b & 1u) mag[(bit + b) / 8] = static_cast<uint8_t>(mag[(bit + b) / 8] | 1u << ((bit + b) % 8));
      }
    }
  }
  mag.push_back(0);  // room for the sign bit
  if (neg) negate_le(mag.data(), mag.size());
  le->assign(mag.begin(), mag.end());
  return IntText::ok;
}

enum class FloatText { ok, bad, too_large };

// Python's float of FLOAT text s (as C sees it): PyOS_string_to_double, which must stop
// at its end.
inline FloatText python_float_text(std::string_view s, double* out) {
  size_t k = 0;
  const bool neg = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) k = 1;
  std::string_view body = s.substr(k);  // (from_chars takes no '+')
  if (iequals(body, "inf") || iequals(body, "infinity")) {
    *out = neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return FloatText::ok;
  }
  if (iequals(body, "nan")) {
    *out = neg ? -std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::quiet_NaN();
    return FloatText::ok;
  }
  // digits [. digits] [e [sign] digits], at least one digit before the exponent.
  size_t i = 0, mantissa_digits = 0;
  int64_t first_nonzero = std::numeric_limits<int64_t>::min();  // its power of ten, before the exponent
  size_t int_digits = 0;
  for (; i < body.size() && body[i] >= '0' && body[i] <= '9'; ++i) ++int_digits;
  for (size_t j = 0; j < int_digits; ++j) {
    if (body[j] != '0') {
      first_nonzero = static_cast<int64_t>(int_digits - j) - 1;
      break;
    }
  }
  mantissa_digits = int_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    for (int64_t place = -1; i < body.size() && body[i] >= '0' && body[i] <= '9'; ++i, --place) {
      ++mantissa_digits;
      if (body[i] != '0' && first_nonzero == std::numeric_limits<int64_t>::min()) first_nonzero = place;
    }
  }
  if (mantissa_digits == 0) return FloatText::bad;
  int64_t exponent = 0;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    size_t e = i + 1;
    bool eneg = false;
    if (e < body.size() && (body[e] == '+' || body[e] == '-')) eneg = body[e++] == '-';
    if (e == body.size() || body[e] < '0' || body[e] > '9') return FloatText::bad;  // the text stops before 'e'
    for (; e < body.size() && body[e] >= '0' && body[e] <= '9'; ++e) {
      if (exponent < 1000000000) exponent = exponent * 10 + (body[e] - '0');
    }
    if (eneg) exponent = -exponent;
    i = e;
  }
  if (i != body.size()) return FloatText::bad;
  double v = 0;
  const auto r = std::from_chars(body.data(), body.data() + body.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    // Too large (an error in Python) or too small (0, with its sign).
    const bool zero_digits = first_nonzero == std::numeric_limits<int64_t>::min();
    if (!zero_digits && first_nonzero + exponent >= 0) return FloatText::too_large;
    v = 0;
  } else if (r.ec != std::errc() || r.ptr != body.data() + body.size()) {
    return FloatText::bad;
  }
  *out = neg ? -v : v;
  return FloatText::ok;
}

}  // namespace detail
}  // namespace ptread
