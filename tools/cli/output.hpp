// ptread (the tool) — exit statuses, and the text helpers every command writes with:
// numbers, shapes, names shown on a terminal (escaped, measured in columns).
#pragma once

#include "ptread/ptread.hpp"
#include "progress.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace ptread_cli {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnsafe = 3;

inline bool write_out(std::FILE* f, const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), f) != s.size()) return false;
  return std::fflush(f) == 0;
}

inline int finish_stdout(const std::string& s) {
  if (!write_out(stdout, s)) {
    std::fprintf(stderr, "ptread: cannot write the output: %s\n", std::strerror(errno));
    return kExitFailed;
  }
  return kExitOk;
}

inline void append_u64(std::string& out, uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
  out += buf;
}

inline void append_i64(std::string& out, int64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  out += buf;
}

// "[4, 3]"; "[]" for a scalar.
inline void append_dims(std::string& out, ptread::Dims dims, const char* sep = ", ") {
  out += '[';
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d) out += sep;
    append_i64(out, dims[d]);
  }
  out += ']';
}

using ptread::detail::append_json_string;
using ptread::detail::is_surrogate;
using ptread::detail::utf8_next;

// Terminal columns of a code point: 0 for combining marks, 2 for East Asian wide and
// emoji, else 1 (a small wcwidth, enough to keep the ls table aligned).
inline size_t cp_columns(uint32_t cp) {
  if ((cp >= 0x300 && cp <= 0x36f) || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0xfe00 && cp <= 0xfe0f)) return 0;
  if ((cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0x303e) || (cp >= 0x3041 && cp <= 0xa4cf) ||
      (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0xfe30 && cp <= 0xfe4f) ||
      (cp >= 0xff00 && cp <= 0xff60) || (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
      (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd)) {
    return 2;
  }
  return 1;
}

// Text for a terminal line: control characters and bytes that are no valid UTF-8 escaped
// as \xNN (as Python's backslashreplace does); the empty name shown as "".
inline std::string display(std::string_view s) {
  if (s.empty()) return "\"\"";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_next(s, i, &cp);
    if (len == 0 || cp < 0x20 || cp == 0x7f || is_surrogate(cp)) {
      const size_t n = len == 0 ? 1 : len;
      for (size_t k = 0; k < n; ++k) {
        char e[8];
        std::snprintf(e, sizeof e, "\\x%02x", static_cast<unsigned char>(s[i + k]));
        out += e;
      }
      i += n;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

// Columns a display()ed string takes on a terminal.
inline size_t columns(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_next(s, i, &cp);
    n += len == 0 ? 1 : cp_columns(cp);
    i += len == 0 ? 1 : len;
  }
  return n;
}

inline void pad_to(std::string& out, size_t have, size_t width) {
  if (have < width) out.append(width - have, ' ');
}

inline std::string tensor_label(const ptread::Tensor& t) {
  std::string s = ptread::dtype_name(t.dtype());
  append_dims(s, t.shape());
  if (t.device() != "cpu") s += " " + t.device();
  return s;
}

}  // namespace ptread_cli
