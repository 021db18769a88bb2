// ptread test support — a minimal, strict JSON reader for test expectations (RFC 8259).
//
//   ptread_test::Json j;  std::string err;
//   if (!ptread_test::parse_json(text, j, &err)) { ... err ... }
//   if (!ptread_test::read_json_file("oracle.json", j, &err)) { ... }
//   j["tensors"]["conv1.bias"]["shape"][0].as_int();
//
// - Never throws (beyond allocation); builds with -fno-exceptions.
// - Recursive descent with container nesting limited to kJsonMaxDepth (512).
// - Numbers keep the literal text (literal()), a double (as_double(), correctly rounded via
//   std::from_chars when the library has it, else std::strtod), and an exact int64_t when the
//   literal has no fraction/exponent and fits (is_int(), as_int()).
// - Strings: all RFC 8259 escapes; \uXXXX (surrogate pairs combined) is written as UTF-8. Raw
//   control characters and lone surrogates are errors; other raw bytes are copied unchanged.
// - Objects keep member order and duplicate keys; find()/operator[] return the first match.
// - Missing members / out-of-range indexes / wrong kinds yield a static null Json (or a zero,
//   false, or empty value from the as_*() accessors) rather than failing.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace ptread_test {

constexpr int kJsonMaxDepth = 512;

namespace json_detail {
class Parser;
}

struct Json {
  enum class Kind : unsigned char { Null, Bool, Number, String, Array, Object };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() = default;

  Kind kind() const noexcept { return kind_; }
  const char* kind_name() const noexcept {
    switch (kind_) {
      case Kind::Null: return "null";
      case Kind::Bool: return "bool";
      case Kind::Number: return "number";
      case Kind::String: return "string";
      case Kind::Array: return "array";
      case Kind::Object: return "object";
    }
    return "?";
  }

  bool is_null() const noexcept { return kind_ == Kind::Null; }
  bool is_bool() const noexcept { return kind_ == Kind::Bool; }
  bool is_number() const noexcept { return kind_ == Kind::Number; }
  bool is_string() const noexcept { return kind_ == Kind::String; }
  bool is_array() const noexcept { return kind_ == Kind::Array; }
  bool is_object() const noexcept { return kind_ == Kind::Object; }
  // A number whose literal is an integer (no '.', no exponent) that fits in int64_t.
  bool is_int() const noexcept { return kind_ == Kind::Number && has_int_; }

  // false unless a bool.
  bool as_bool() const noexcept { return kind_ == Kind::Bool && bool_; }
  // Exact value when is_int(); otherwise a number truncated toward zero if in int64 range; else 0.
  std::int64_t as_int() const noexcept {
    if (kind_ != Kind::Number) return 0;
    if (has_int_) return int_;
    if (num_ >= -9223372036854775808.0 && num_ < 9223372036854775808.0) {
      return static_cast<std::int64_t>(num_);
    }
    return 0;
  }
  // The number's double value (0.0 unless a number).
  double as_double() const noexcept { return kind_ == Kind::Number ? num_ : 0.0; }
  // The decoded string (empty unless a string).
  const std::string& as_string() const noexcept { return kind_ == Kind::String ? str_ : empty_string(); }
  // The number's literal text exactly as written, e.g. "18446744073709551616" (empty unless a number).
  const std::string& literal() const noexcept { return kind_ == Kind::Number ? str_ : empty_string(); }

  // Elements / members (empty unless an array / object).
  const Array& as_array() const noexcept { return kind_ == Kind::Array ? arr_ : empty_array(); }
  const Object& as_object() const noexcept { return kind_ == Kind::Object ? obj_ : empty_object(); }

  // Array element count, object member count, else 0.
  size_t size() const noexcept {
    if (kind_ == Kind::Array) return arr_.size();
    if (kind_ == Kind::Object) return obj_.size();
    return 0;
  }

  // Array element i, or the static null Json when not an array or out of range.
  const Json& operator[](size_t i) const noexcept {
    if (kind_ == Kind::Array && i < arr_.size()) return arr_[i];
    return null_value();
  }

  // First member named key, or nullptr when absent or not an object.
  const Json* find(std::string_view key) const noexcept {
    if (kind_ != Kind::Object) return nullptr;
    for (const Member& m : obj_) {
      if (m.first == key) return &m.second;
    }
    return nullptr;
  }
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }

  // First member named key, or the static null Json when absent or not an object.
  const Json& operator[](std::string_view key) const noexcept {
    const Json* v = find(key);
    return v != nullptr ? *v : null_value();
  }

  static const Json& null_value() noexcept {
    static const Json kNull;
    return kNull;
  }

 private:
  friend class json_detail::Parser;

  static const std::string& empty_string() noexcept {
    static const std::string kEmpty;
    return kEmpty;
  }
  static const Array& empty_array() noexcept {
    static const Array kEmpty;
    return kEmpty;
  }
  static const Object& empty_object() noexcept {
    static const Object kEmpty;
    return kEmpty;
  }

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  bool has_int_ = false;
  std::int64_t int_ = 0;
  double num_ = 0.0;
  std::string str_;  // String: decoded value; Number: literal text
  Array arr_;
  Object obj_;
};

namespace json_detail {

class Parser {
 public:
  explicit Parser(std::string_view text) noexcept : s_(text) {}

  bool run(Json& out, std::string* err) {
    // Tolerate a UTF-8 byte order mark.
    if (s_.size() >= 3 && s_[0] == '\xEF' && s_[1] == '\xBB' && s_[2] == '\xBF') pos_ = 3;
    skip_ws();
    bool ok = parse_value(out, 0);
    if (ok) {
      skip_ws();
      if (pos_ != s_.size()) ok = fail("unexpected trailing characters");
    }
    if (!ok && err != nullptr) *err = message();
    return ok;
  }

 private:
  bool fail(const char* what) {
    if (what_ == nullptr) {
      what_ = what;
      err_pos_ = pos_;
    }
    return false;
  }

  std::string message() const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < err_pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string m = "json: ";
    m += (what_ != nullptr ? what_ : "parse error");
    m += " at line " + std::to_string(line) + ", column " + std::to_string(col) + " (offset " +
         std::to_string(err_pos_) + ")";
    return m;
  }

  bool at_end() const noexcept { return pos_ >= s_.size(); }
  char peek() const noexcept { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void skip_ws() noexcept {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool parse_value(Json& out, int depth) {
    if (at_end()) return fail("unexpected end of input");
    switch (peek()) {
      case 'n':
        out.kind_ = Json::Kind::Null;
        return literal("null");
      case 't':
        out.kind_ = Json::Kind::Bool;
        out.bool_ = true;
        return literal("true");
      case 'f':
        out.kind_ = Json::Kind::Bool;
        out.bool_ = false;
        return literal("false");
      case '"':
        out.kind_ = Json::Kind::String;
        return parse_string(out.str_);
      case '[':
        return parse_array(out, depth);
      case '{':
        return parse_object(out, depth);
      default:
        return parse_number(out);
    }
  }

  bool parse_array(Json& out, int depth) {
    if (depth >= kJsonMaxDepth) return fail("nesting too deep");
    out.kind_ = Json::Kind::Array;
    ++pos_;  // '['
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_ws();
      out.arr_.emplace_back();
      if (!parse_value(out.arr_.back(), depth + 1)) return false;
      skip_ws();
      if (at_end()) return fail("unterminated array");
      const char c = s_[pos_];
      if (c == ',') {
        ++pos_;
      } else if (c == ']') {
        ++pos_;
        return true;
      } else {
        return fail("expected ',' or ']' in array");
      }
    }
  }

  bool parse_object(Json& out, int depth) {
    if (depth >= kJsonMaxDepth) return fail("nesting too deep");
    out.kind_ = Json::Kind::Object;
    ++pos_;  // '{'
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') return fail(at_end() ? "unterminated object" : "expected string key");
      std::string key;
      if (!parse_string(key)) return false;
      skip_ws();
      if (peek() != ':') return fail("expected ':' after object key");
      ++pos_;
      skip_ws();
      out.obj_.emplace_back(std::move(key), Json());
      if (!parse_value(out.obj_.back().second, depth + 1)) return false;
      skip_ws();
      if (at_end()) return fail("unterminated object");
      const char c = s_[pos_];
      if (c == ',') {
        ++pos_;
      } else if (c == '}') {
        ++pos_;
        return true;
      } else {
        return fail("expected ',' or '}' in object");
      }
    }
  }

  static int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads the 4 hex digits after "\u"; pos_ is at the first digit.
  bool parse_hex4(std::uint32_t& cp) {
    if (s_.size() - pos_ < 4) return fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) {
      const int h = hex_value(s_[pos_ + i]);
      if (h < 0) return fail("invalid hex digit in \\u escape");
      v = (v << 4) | static_cast<std::uint32_t>(h);
    }
    pos_ += 4;
    cp = v;
    return true;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80u) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800u) {
      out += static_cast<char>(0xC0u | (cp >> 6));
      out += static_cast<char>(0x80u | (cp & 0x3Fu));
    } else if (cp < 0x10000u) {
      out += static_cast<char>(0xE0u | (cp >> 12));
      out += static_cast<char>(0x80u | ((cp >> 6) & 0x3Fu));
      out += static_cast<char>(0x80u | (cp & 0x3Fu));
    } else {
      out += static_cast<char>(0xF0u | (cp >> 18));
      out += static_cast<char>(0x80u | ((cp >> 12) & 0x3Fu));
      out += static_cast<char>(0x80u | ((cp >> 6) & 0x3Fu));
      out += static_cast<char>(0x80u | (cp & 0x3Fu));
    }
  }

  // pos_ is at the opening quote.
  bool parse_string(std::string& out) {
    ++pos_;
    out.clear();
    for (;;) {
      // Copy the run of plain characters in one go.
      const size_t start = pos_;
      while (pos_ < s_.size()) {
        const char c = s_[pos_];
        if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20u) break;
        ++pos_;
      }
      out.append(s_.data() + start, pos_ - start);
      if (at_end()) return fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c != '\\') return fail("unescaped control character in string");
      ++pos_;
      if (at_end()) return fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!parse_hex4(cp)) return false;
          if (cp >= 0xD800u && cp <= 0xDBFFu) {
            if (s_.size() - pos_ < 2 || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') {
              return fail("high surrogate not followed by a \\u low surrogate");
            }
            pos_ += 2;
            std::uint32_t lo = 0;
            if (!parse_hex4(lo)) return false;
            if (lo < 0xDC00u || lo > 0xDFFFu) return fail("invalid low surrogate");
            cp = 0x10000u + ((cp - 0xD800u) << 10) + (lo - 0xDC00u);
          } else if (cp >= 0xDC00u && cp <= 0xDFFFu) {
            return fail("lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          return fail("invalid escape in string");
      }
    }
  }

  bool is_digit(char c) const noexcept { return c >= '0' && c <= '9'; }

  bool parse_number(Json& out) {
    const size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (is_digit(peek())) ++pos_;
    } else {
      return fail(pos_ == start ? "unexpected character" : "invalid number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!is_digit(peek())) return fail("invalid number: digit expected after '.'");
      while (is_digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) return fail("invalid number: digit expected in exponent");
      while (is_digit(peek())) ++pos_;
    }

    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    out.kind_ = Json::Kind::Number;
    out.str_.assign(first, last);

    out.has_int_ = false;
    if (integral) {
      std::int64_t v = 0;
      const std::from_chars_result r = std::from_chars(first, last, v);
      if (r.ec == std::errc() && r.ptr == last) {
        out.int_ = v;
        out.has_int_ = true;
      }
    }

    bool have_double = false;
#if defined(__cpp_lib_to_chars)
    {
      double d = 0.0;
      const std::from_chars_result r = std::from_chars(first, last, d);
      if (r.ec == std::errc() && r.ptr == last) {
        out.num_ = d;
        have_double = true;
      }
    }
#endif
    if (!have_double) {
      // Overflow/underflow (from_chars reports result_out_of_range) or no floating from_chars:
      // strtod gives +-HUGE_VAL / the nearest subnormal or zero. Assumes the "C" LC_NUMERIC.
      char* end = nullptr;
      out.num_ = std::strtod(out.str_.c_str(), &end);
    }
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
  const char* what_ = nullptr;
  size_t err_pos_ = 0;
};

}  // namespace json_detail

// Parses text as one JSON value (surrounding whitespace allowed). On success stores it in out and
// returns true; on failure leaves out unchanged, writes a message (with line/column) to *err when
// err is non-null, and returns false.
inline bool parse_json(std::string_view text, Json& out, std::string* err) {
  Json tmp;
  json_detail::Parser p(text);
  if (!p.run(tmp, err)) return false;
  out = std::move(tmp);
  return true;
}

// Reads the whole file at path and parses it with parse_json().
inline bool read_json_file(const std::string& path, Json& out, std::string* err) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (err != nullptr) *err = "json: cannot open " + path;
    return false;
  }
  std::string data;
  char buf[65536];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    data.append(buf, n);
    if (n < sizeof buf) break;
  }
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  if (read_error) {
    if (err != nullptr) *err = "json: read error on " + path;
    return false;
  }
  if (!parse_json(data, out, err)) {
    if (err != nullptr) *err = path + ": " + *err;
    return false;
  }
  return true;
}

}  // namespace ptread_test
