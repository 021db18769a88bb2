// ptread — a strict JSON reader (RFC 8259) for the headers of safetensors files and the index
// files of sharded sets: a pull parser that walks the text once and keeps nothing but what
// its caller takes, so a header of 100 MB costs its caller's tensors, not a document tree.
//
// Why ours and not a library: the core is one header with no dependency, and these files
// need only objects, arrays, strings and unsigned integers. What it accepts is what
// serde_json (the reference safetensors reader's parser) accepts, and no more:
//   - whitespace is space, tab, CR, LF; nothing but whitespace after the value;
//   - strings: no raw control character, the eight escapes and \uXXXX, surrogates only in
//     pairs (Python's json takes a lone one; serde_json refuses it, and so do we);
//   - numbers as the grammar says (no leading zero, no '+', no NaN); unsigned() takes an
//     integer without fraction or exponent (serde_json's usize), "-0" included;
//   - nesting at most 128 deep (serde_json's recursion limit).
// The text must be valid UTF-8 (checked by the caller, as the reference checks it before
// parsing). Duplicate keys are the caller's to refuse: it knows which object it is reading.
// Every error says what was found and at which byte of the text.
#pragma once

#include "../error.hpp"
#include "text.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ptread {
namespace detail {

enum class JsonType : uint8_t { null, boolean, number, string, array, object, end };

inline const char* json_type_name(JsonType t) noexcept {
  switch (t) {
    case JsonType::null: return "null";
    case JsonType::boolean: return "a boolean";
    case JsonType::number: return "a number";
    case JsonType::string: return "a string";
    case JsonType::array: return "an array";
    case JsonType::object: return "an object";
    case JsonType::end: return "the end of the text";
  }
  return "?";
}

class JsonReader {
 public:
  static constexpr size_t kMaxDepth = 128;
  static constexpr char close_object = '}';

  // what: how errors name the text ("the safetensors header of 'x'"); code: their code.
  JsonReader(std::string_view text, std::string what, ErrorCode code)
      : s_(text), what_(std::move(what)), code_(code) {}

  size_t pos() const noexcept { return i_; }

  // The type of the next value (after whitespace); JsonType::end when none is left, or
  // the next byte starts no value (the read that follows names it).
  JsonType peek() {
    skip_ws();
    if (i_ >= s_.size()) return JsonType::end;
    switch (s_[i_]) {
      case '{': return JsonType::object;
      case '[': return JsonType::array;
      case '"': return JsonType::string;
      case 't': case 'f': return JsonType::boolean;
      case 'n': return JsonType::null;
      default: return (s_[i_] == '-' || (s_[i_] >= '0' && s_[i_] <= '9')) ? JsonType::number : JsonType::end;
    }
  }

  Status begin_object() { return open(JsonType::object); }
  Status begin_array() { return open(JsonType::array); }

  // The next member of the object being read: true with its key read (and the ':'), then
  // the caller reads or skips its value; false at the object's end (consumed).
  Result<bool> next_member(std::string* key) {
    std::string_view v;
    PTREAD_TRY(bool more, next(key, &v));
    if (more && v.data() != key->data()) key->assign(v.data(), v.size());
    return more;
  }
  // next_member, with the key as string_view() gives it (a view of the text, or scratch).
  Result<bool> next(std::string* scratch, std::string_view* key) {
    PTREAD_TRY(bool more, next(close_object));
    if (!more) return false;
    if (peek() != JsonType::string) return found("a string key");
    PTREAD_CHECK(string_view(scratch, key));
    skip_ws();
    if (i_ >= s_.size() || s_[i_] != ':') return found("':' after a key");
    ++i_;
    return true;
  }
  // The next item of the array being read: true when one follows; false at its end.
  Result<bool> next_item() { return next(']'); }

  Status string(std::string* out) {
    std::string_view v;
    PTREAD_CHECK(string_view(out, &v));
    if (v.data() != out->data()) out->assign(v.data(), v.size());
    return {};
  }

  // A string: *v views the text where the string has no escape (most do), else holds
  // scratch, which it is decoded into.
  Status string_view(std::string* scratch, std::string_view* v) {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] != '"') return found("a string");
    ++i_;
    const size_t begin = i_;
    skip_plain();
    if (i_ < s_.size() && s_[i_] == '"') {
      *v = s_.substr(begin, i_ - begin);
      ++i_;
      return {};
    }
    scratch->assign(s_.data() + begin, i_ - begin);
    PTREAD_CHECK(rest_of_string(scratch));
    *v = *scratch;
    return {};
  }

 private:
  static bool plain(char c) noexcept { return c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20; }
  // Past the plain bytes of a string: eight at a time while none is a quote, a backslash or a
  // control character (bytes >= 0x80 pass: UTF-8, checked before). In a word that holds
  // one, the lowest flagged byte is the first such (a borrow flags only bytes above a true
  // one): on little-endian machines its position is read off the flags.
  void skip_plain() {
    constexpr uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (i_ + 8 <= s_.size()) {
      uint64_t w;
      std::memcpy(&w, s_.data() + i_, 8);
      const uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
      const uint64_t hit = (((quote - ones) & ~quote) | ((slash - ones) & ~slash) | ((w - ones * 0x20) & ~w)) & highs;
      if (hit) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && (defined(__GNUC__) || defined(__clang__))
        i_ += static_cast<size_t>(__builtin_ctzll(hit)) >> 3;
        return;
#else
        break;
#endif
      }
      i_ += 8;
    }
    while (i_ < s_.size() && plain(s_[i_])) ++i_;
  }

  // Inside a string, at its first quote, backslash or control character: decodes the rest.
  Status rest_of_string(std::string* out) {
    for (;;) {
      const size_t start = i_;
      while (i_ < s_.size() && plain(s_[i_])) ++i_;
      out->append(s_.data() + start, i_ - start);
      if (i_ >= s_.size()) return fail("a string runs to the end of the text");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return {};
      }
      if (c != '\\') return fail("a control character (0x" + hex2(c) + ") inside a string");
      PTREAD_CHECK(escape(out));
    }
  }

 public:

  // A non-negative integer that fits 64 bits, without fraction or exponent.
  Result<uint64_t> unsigned_integer() {
    skip_ws();
    const size_t start = i_;
    {  // the usual case: a few digits, no leading zero, then no fraction or exponent
      uint64_t v = 0;
      size_t k = i_;
      while (k < s_.size() && k - start < 19 && s_[k] >= '0' && s_[k] <= '9') v = v * 10 + static_cast<uint64_t>(s_[k++] - '0');
      const bool leading_zero = k - start > 1 && s_[start] == '0';
      if (k > start && !leading_zero &&
          (k == s_.size() || (s_[k] != '.' && s_[k] != 'e' && s_[k] != 'E' && (s_[k] < '0' || s_[k] > '9')))) {
        i_ = k;
        return v;
      }
    }
    PTREAD_CHECK(number());
    std::string_view t = s_.substr(start, i_ - start);
    if (t.find_first_of(".eE") != std::string_view::npos) {
      i_ = start;
      return found_text("an unsigned integer", t);
    }
    if (t == "-0") return uint64_t{0};
    if (t[0] == '-') {
      i_ = start;
      return found_text("an unsigned integer", t);
    }
    uint64_t v = 0;
    for (char c : t) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) {
        i_ = start;
        return found_text("an unsigned integer of at most 64 bits", t);
      }
      v = v * 10 + d;
    }
    return v;
  }

  // A number's text, as written (checked by the grammar).
  Result<std::string_view> number_text() {
    skip_ws();
    const size_t start = i_;
    PTREAD_CHECK(number());
    return s_.substr(start, i_ - start);
  }

  Result<bool> boolean() {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == 't') {
      PTREAD_CHECK(literal("true"));
      return true;
    }
    PTREAD_CHECK(literal("false"));
    return false;
  }

  // null, consumed.
  Status null() {
    skip_ws();
    return literal("null");
  }

  // Any value, checked and dropped.
  Status skip() { return skip_value(); }

  // Nothing but whitespace is left.
  Status finish() {
    skip_ws();
    if (i_ != s_.size()) return fail("text after the end of the JSON value (byte 0x" + hex2(s_[i_]) + ")");
    return {};
  }

  Error fail(const std::string& why) const {
    return make_error(code_,
                      what_ + ": invalid JSON: " + why + " at byte " + std::to_string(i_));
  }

 private:
  static std::string hex2(char c) {
    static const char* const digits = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    return std::string{digits[u >> 4], digits[u & 15]};
  }

  Error found(const char* wanted) {
    const JsonType t = peek();
    if (t == JsonType::end && i_ < s_.size()) return fail(std::string("expected ") + wanted + ", found byte 0x" + hex2(s_[i_]));
    return fail(std::string("expected ") + wanted + ", found " + json_type_name(t));
  }
  Error found_text(const char* wanted, std::string_view t) {
    return fail(std::string("expected ") + wanted + ", found " + std::string(t.substr(0, 40)));
  }

  static bool space(char c) noexcept {  // ' ', '\t', '\n', '\r': one compare for other bytes
    constexpr uint64_t kSpaces = (uint64_t{1} << ' ') | (uint64_t{1} << '\t') | (uint64_t{1} << '\n') | (uint64_t{1} << '\r');
    const auto u = static_cast<unsigned char>(c);
    return u <= ' ' && ((kSpaces >> u) & 1) != 0;
  }
  void skip_ws() {
    while (i_ < s_.size() && space(s_[i_])) ++i_;
  }

  Status open(JsonType t) {
    if (peek() != t) return found(json_type_name(t));
    if (first_.size() >= kMaxDepth) return fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    ++i_;
    first_.push_back(1);
    return {};
  }

  Result<bool> next(char close) {
    skip_ws();
    if (i_ >= s_.size()) return fail(std::string("the text ends inside ") + (close == '}' ? "an object" : "an array"));
    if (s_[i_] == close) {
      ++i_;
      first_.pop_back();
      return false;
    }
    if (!first_.back()) {
      if (s_[i_] != ',') return fail(std::string("expected ',' or '") + close + "', found byte 0x" + hex2(s_[i_]));
      ++i_;
      skip_ws();
      if (i_ < s_.size() && s_[i_] == close) return fail(std::string("a ',' before '") + close + "'");
    }
    first_.back() = 0;
    return true;
  }

  Status literal(const char* word) {
    const std::string_view w(word);
    if (s_.substr(i_, w.size()) != w) return fail(std::string("expected ") + word);
    i_ += w.size();
    return {};
  }

  Status number() {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') {
      i_ = start;
      return found("a number");
    }
    if (s_[i_] == '0') {
      ++i_;
      if (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') return fail("a number with a leading zero");
    } else {
      digits();
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digits()) return fail("no digit after a decimal point");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return fail("no digit in an exponent");
    }
    return {};
  }
  bool digits() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }

  Result<uint32_t> hex4() {
    if (s_.size() - i_ < 4) return fail("a \\u escape cut short");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_ + static_cast<size_t>(k)];
      const uint32_t d = (c >= '0' && c <= '9')   ? static_cast<uint32_t>(c - '0')
                         : (c >= 'a' && c <= 'f') ? static_cast<uint32_t>(c - 'a' + 10)
                         : (c >= 'A' && c <= 'F') ? static_cast<uint32_t>(c - 'A' + 10)
                                                  : 16u;
      if (d == 16) return fail("a \\u escape with a non-hex digit");
      v = v * 16 + d;
    }
    i_ += 4;
    return v;
  }

  // At a backslash inside a string: appends what the escape stands for.
  Status escape(std::string* out) {
    ++i_;
    if (i_ >= s_.size()) return fail("a string runs to the end of the text");
    const char c = s_[i_++];
    switch (c) {
      case '"': out->push_back('"'); return {};
      case '\\': out->push_back('\\'); return {};
      case '/': out->push_back('/'); return {};
      case 'b': out->push_back('\b'); return {};
      case 'f': out->push_back('\f'); return {};
      case 'n': out->push_back('\n'); return {};
      case 'r': out->push_back('\r'); return {};
      case 't': out->push_back('\t'); return {};
      case 'u': break;
      default: --i_; return fail("an unknown escape \\" + std::string(1, c));
    }
    PTREAD_TRY(uint32_t cp, hex4());
    if (cp >= 0xdc00 && cp <= 0xdfff) return fail("a lone trailing surrogate \\u" + hex_cp(cp));
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (s_.substr(i_, 2) != "\\u") return fail("a lone leading surrogate \\u" + hex_cp(cp));
      i_ += 2;
      PTREAD_TRY(uint32_t lo, hex4());
      if (lo < 0xdc00 || lo > 0xdfff) return fail("a leading surrogate \\u" + hex_cp(cp) + " not followed by a trailing one");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    append_utf8(out, cp);
    return {};
  }
  static std::string hex_cp(uint32_t cp) {
    char b[8];
    std::snprintf(b, sizeof b, "%04x", static_cast<unsigned>(cp));
    return b;
  }
  Status skip_value() {
    switch (peek()) {
      case JsonType::object: {
        PTREAD_CHECK(begin_object());
        for (;;) {
          PTREAD_TRY(bool more, next_member(&scratch_));
          if (!more) return {};
          PTREAD_CHECK(skip_value());
        }
      }
      case JsonType::array: {
        PTREAD_CHECK(begin_array());
        for (;;) {
          PTREAD_TRY(bool more, next_item());
          if (!more) return {};
          PTREAD_CHECK(skip_value());
        }
      }
      case JsonType::string: return string(&scratch_);
      case JsonType::number: return number();
      case JsonType::null: return literal("null");
      case JsonType::boolean: return s_[i_] == 't' ? literal("true") : literal("false");
      case JsonType::end: break;
    }
    return found("a value");
  }

  std::string_view s_;
  std::string what_;
  ErrorCode code_;
  size_t i_ = 0;
  std::vector<uint8_t> first_;  // per open container: no item read yet
  std::string scratch_;
};

}  // namespace detail
}  // namespace ptread
