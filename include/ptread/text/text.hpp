// ptread — UTF-8 checks, JSON string text and prefix tests, shared by the reader, the writers
// and the command line.
//
// Names in checkpoints are Python str values pickled with "surrogatepass", so they may hold
// encoded lone surrogates (ED A0 80 ...). safetensors readers (serde_json) take strict
// UTF-8 only; Python's unpickler takes surrogates too. Both checks live here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ptread {
namespace detail {

// C++20's starts_with / ends_with (memcmp: inlined for literals).
inline bool starts_with(std::string_view s, std::string_view p) noexcept {
  return s.size() >= p.size() && std::memcmp(s.data(), p.data(), p.size()) == 0;
}
inline bool ends_with(std::string_view s, std::string_view p) noexcept {
  return s.size() >= p.size() && std::memcmp(s.data() + s.size() - p.size(), p.data(), p.size()) == 0;
}
inline bool equals(std::string_view s, std::string_view p) noexcept {
  return s.size() == p.size() && std::memcmp(s.data(), p.data(), p.size()) == 0;
}
// The same with ASCII letters compared without case (as miniz, torch's zip reader, compares
// record names).
inline char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
inline bool iequals(std::string_view s, std::string_view p) noexcept {
  if (s.size() != p.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (ascii_lower(s[i]) != ascii_lower(p[i])) return false;
  }
  return true;
}
inline bool istarts_with(std::string_view s, std::string_view p) noexcept {
  return s.size() >= p.size() && iequals(s.substr(0, p.size()), p);
}
inline bool iends_with(std::string_view s, std::string_view p) noexcept {
  return s.size() >= p.size() && iequals(s.substr(s.size() - p.size()), p);
}

// Decodes the UTF-8 sequence at s[i]: its code point and length, or 0 when the bytes there
// are no valid sequence (overlong forms and values past U+10FFFF are invalid; encoded
// surrogates are decoded, and callers decide what they mean).
inline size_t utf8_next(std::string_view s, size_t i, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len = 0;
  uint32_t v = 0, min = 0;
  if ((c & 0xe0) == 0xc0) { len = 2; v = c & 0x1fu; min = 0x80; }
  else if ((c & 0xf0) == 0xe0) { len = 3; v = c & 0x0fu; min = 0x800; }
  else if ((c & 0xf8) == 0xf0) { len = 4; v = c & 0x07u; min = 0x10000; }
  if (len == 0 || i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    v = (v << 6) | (cc & 0x3fu);
  }
  if (v < min || v > 0x10ffff) return 0;
  *cp = v;
  return len;
}

// Appends code point cp (at most U+10FFFF) as UTF-8.
inline void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

inline bool is_surrogate(uint32_t cp) { return cp >= 0xd800 && cp <= 0xdfff; }

// Whether s is UTF-8; encoded surrogates count as valid only when allowed (Python's
// "surrogatepass" decoding, which torch's unpicklers use for str).
inline bool utf8_valid(std::string_view s, bool allow_surrogates = false) {
  for (size_t i = 0; i < s.size();) {
    while (i + 8 <= s.size()) {  // ASCII eight bytes at a time
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = utf8_next(s, i, &cp);
    if (len == 0 || (!allow_surrogates && is_surrogate(cp))) return false;
    i += len;
  }
  return true;
}

// A JSON string. Valid UTF-8 passes through; an encoded lone surrogate becomes its \uDXXX
// escape (so json.loads gives Python's str back); any other invalid byte becomes U+FFFD.
inline void append_json_string(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_next(s, i, &cp);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (cp >= 0x20 && cp != '"' && cp != '\\' && !is_surrogate(cp)) {
      out.append(s.data() + i, len);
    } else if (cp == '"') {
      out += "\\\"";
    } else if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else {  // other control characters and surrogates
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 15];
    }
    i += len;
  }
  out += '"';
}

}  // namespace detail
}  // namespace ptread
