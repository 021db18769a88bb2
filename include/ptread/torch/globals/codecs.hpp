// ptread — _codecs.encode(obj, encoding, errors), which protocols 0-2 write for bytes
// (latin-1 text encoded 'latin1'), with Python's codec lookup for the codecs ptread reads.
#pragma once

#include "../context.hpp"

#include <algorithm>
#include <iterator>
#include <string>

namespace ptread {
namespace detail {

// The codec Python's codecs.lookup() finds for an encoding name, of those ptread
// encodes with: the name normalized as CPython does (_Py_normalize_encoding: ASCII
// letters lowercased, letters, digits and '.' kept, any other run of bytes one '_'
// between them), then looked up in encodings.aliases (Python 3.11), again with '.' as
// '_', else taken as the name of a module of the encodings package.
enum class Codec { latin1, utf8, ascii, other };
inline Codec python_codec(std::string_view name) {
  std::string norm;
  bool punct = false;
  for (char c : name) {
    const char l = ascii_lower(c);
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.') {
      if (punct && !norm.empty()) norm.push_back('_');
      norm.push_back(l);
      punct = false;
    } else {
      punct = true;
    }
  }
  static const char* const kLatin1[] = {"8859", "cp819", "csisolatin1", "ibm819", "iso8859", "iso8859_1", "iso_8859_1",
                                        "iso_8859_1_1987", "iso_ir_100", "l1", "latin", "latin1"};
  static const char* const kUtf8[] = {"cp65001", "u8", "utf", "utf8", "utf8_ucs2", "utf8_ucs4"};
  static const char* const kAscii[] = {"646", "ansi_x3.4_1968", "ansi_x3.4_1986", "ansi_x3_4_1968", "cp367", "csascii",
                                       "ibm367", "iso646_us", "iso_646.irv_1991", "iso_ir_6", "us", "us_ascii"};
  auto alias = [](std::string_view n) {
    auto in = [n](const auto& names) {
      return std::any_of(std::begin(names), std::end(names), [n](const char* k) { return n == k; });
    };
    return in(kLatin1) ? Codec::latin1 : in(kUtf8) ? Codec::utf8 : in(kAscii) ? Codec::ascii : Codec::other;
  };
  Codec c = alias(norm);
  if (c != Codec::other) return c;
  std::string underscored = norm;
  std::replace(underscored.begin(), underscored.end(), '.', '_');
  c = alias(underscored);
  if (c != Codec::other) return c;
  // Modules: latin_1, iso8859_1 (its table is latin-1's), charmap (latin-1 without a
  // mapping), utf_8, ascii. (A name with a '.' names no module.)
  if (norm == "latin_1" || norm == "iso8859_1" || norm == "charmap") return Codec::latin1;
  if (norm == "utf_8") return Codec::utf8;
  if (norm == "ascii") return Codec::ascii;
  return Codec::other;
}

inline Result<std::string> utf8_to_latin1(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    const auto c = static_cast<uint8_t>(s[k]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c & 0xe0) == 0xc0 && k + 1 < s.size() && c <= 0xc3) {
      out.push_back(static_cast<char>(((c & 0x1f) << 6) | (static_cast<uint8_t>(s[k + 1]) & 0x3f)));
      ++k;
    } else {
      return make_error(ErrorCode::pickle_malformed, "_codecs.encode text is not latin-1");
    }
  }
  return out;
}

// _codecs.encode(obj, encoding='utf-8', errors='strict') as Python calls it, for the
// codecs ptread reads, as Python's codecs spell them (python_codec): latin-1, UTF-8 (the
// default) or ASCII (text codecs: obj must be a str). What Python refuses (other
// counts, an encoding or errors that is no str, obj of another type, text the codec
// cannot encode) is an error, and so is a codec ptread does not read.
inline Result<uint32_t> codecs_encode(TorchContext& cx, Graph& g, const Items& a) {
  if (a.empty() || a.size() > 3) {
    return make_error(ErrorCode::pickle_malformed, "_codecs.encode of " + std::to_string(a.size()) +
                                                       " arguments (Python takes 1 to 3)");
  }
  Codec codec = Codec::utf8;
  if (a.size() >= 2) {
    if (g.kind(a[1]) != ValueKind::string) return make_error(ErrorCode::pickle_malformed, "_codecs.encode with an encoding that is no string");
    codec = python_codec(g.text(a[1]));
  }
  if (a.size() == 3 && g.kind(a[2]) != ValueKind::string) {
    return make_error(ErrorCode::pickle_malformed, "_codecs.encode with errors that are no string");
  }
  for (size_t k = 1; k < a.size(); ++k) {  // (Python's C strings)
    if (g.text(a[k]).find('\0') != std::string_view::npos) {
      return make_error(ErrorCode::pickle_malformed, "_codecs.encode with a NUL in its encoding or errors (Python: embedded null character)");
    }
  }
  const bool known = codec == Codec::latin1 || codec == Codec::utf8 || codec == Codec::ascii;
  if (known && g.kind(a[0]) != ValueKind::string) {
    return make_error(ErrorCode::pickle_malformed, std::string("_codecs.encode of a ") + value_kind_name(g.kind(a[0])) +
                                                       " (a text codec encodes a str)");
  }
  const std::string_view text = known ? g.text(a[0]) : std::string_view();
  PTREAD_CHECK(cx.spend(text.size(), "_codecs.encode()"));
  if (codec == Codec::latin1) {
    PTREAD_TRY(std::string raw, utf8_to_latin1(text));
    return g.add_text(ValueKind::bytes, raw);
  }
  const bool utf8 = codec == Codec::utf8;
  const bool ascii = codec == Codec::ascii;
  if (utf8 || ascii) {
    for (char c : text) {
      if (ascii && static_cast<unsigned char>(c) >= 0x80) return make_error(ErrorCode::pickle_malformed, "_codecs.encode text is not ASCII");
    }
    if (!utf8_valid(text)) return make_error(ErrorCode::pickle_malformed, "_codecs.encode of text with a lone surrogate");
    return g.add_text(ValueKind::bytes, text);
  }
  return make_error(ErrorCode::pickle_malformed, "_codecs.encode to '" + std::string(g.text(a[1]).substr(0, 40)) +
                                                     "' (ptread reads latin-1, UTF-8 and ASCII)");
}

inline bool is_codecs_encode(std::string_view mod, std::string_view name, bool) {
  return mod == "_codecs" && name == "encode";
}
// protocols 0-2 write bytes as _codecs.encode(latin-1 text, 'latin1')
inline Result<uint32_t> codecs_encode_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  return codecs_encode(cx, g, c.a);
}

}  // namespace detail
}  // namespace ptread
