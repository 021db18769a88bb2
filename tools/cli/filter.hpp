// ptread (the tool) — --only and --exclude: shell patterns on tensor names.
//
// A pattern matches a whole name as Python's fnmatch.fnmatchcase matches it (what a PyTorch
// user would test a pattern with): '*' any run of characters (dots and slashes included),
// '?' one character, '[abc]' '[a-z]' one of a set, '[!abc]' one not in it; a '[' without a
// closing ']' and a backslash are plain characters; case counts. Characters are Unicode code
// points (a name's UTF-8 decoded; a byte that is not UTF-8 stands for itself). Matching
// takes at most (name length x pattern length) steps, whatever the pattern.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ptread_cli {

// The code points of UTF-8 text; a byte that starts no valid sequence becomes 0x110000 + byte
// (no code point: it equals only the same byte).
inline std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1fu) : n == 3 ? (b & 0x0fu) : (b & 0x07u);
    for (size_t k = 1; n > 1 && k < n; ++k) {
      const unsigned c = i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u;
      if ((c & 0xc0) != 0x80) {
        n = 0;
        break;
      }
      cp = (cp << 6) | (c & 0x3fu);
    }
    if (n == 0) {
      out.push_back(0x110000u + b);
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

class Glob {
 public:
  explicit Glob(std::string_view pattern) : text_(pattern) {
    const std::vector<uint32_t> p = code_points(pattern);
    for (size_t i = 0; i < p.size();) {
      Token t;
      if (p[i] == '*') {
        t.kind = Token::kStar;
        ++i;
        if (!tokens_.empty() && tokens_.back().kind == Token::kStar) continue;  // ** is *
      } else if (p[i] == '?') {
        t.kind = Token::kAny;
        ++i;
      } else if (p[i] == '[' && parse_set(p, i + 1, &t, &i)) {
        t.kind = Token::kSet;
      } else {
        t.kind = Token::kChar;
        t.c = p[i++];
      }
      tokens_.push_back(std::move(t));
    }
  }

  const std::string& text() const { return text_; }

  bool match(std::string_view name) const {
    const std::vector<uint32_t> s = code_points(name);
    // One star remembered: on a mismatch the last star takes one more character. (Earlier
    // stars never need to: what the last one can skip covers what they could.)
    size_t p = 0, n = 0, star = kNoStar, mark = 0;
    while (n < s.size()) {
      if (p < tokens_.size() && tokens_[p].kind == Token::kStar) {
        star = p++;
        mark = n;
      } else if (p < tokens_.size() && tokens_[p].matches(s[n])) {
        ++p;
        ++n;
      } else if (star != kNoStar) {
        p = star + 1;
        n = ++mark;
      } else {
        return false;
      }
    }
    while (p < tokens_.size() && tokens_[p].kind == Token::kStar) ++p;
    return p == tokens_.size();
  }

 private:
  static constexpr size_t kNoStar = static_cast<size_t>(-1);
  struct Token {
    enum Kind { kChar, kAny, kStar, kSet } kind = kChar;
    uint32_t c = 0;
    bool negate = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // [first, last]
    bool matches(uint32_t x) const {
      if (kind == kChar) return x == c;
      if (kind == kAny) return true;
      bool in = false;
      for (const auto& r : ranges) in = in || (r.first <= x && x <= r.second);
      return in != negate;
    }
  };

  // A set from p[i] (after its '['), as fnmatch reads one: '!' first negates; a ']' first
  // (after any '!') is a member; it ends at the next ']' (none: no set, the '[' is a
  // character). 'a-z' is a range; a range from high to low holds nothing; '-' first or
  // last is a member.
  static bool parse_set(const std::vector<uint32_t>& p, size_t i, Token* t, size_t* next) {
    size_t j = i;
    if (j < p.size() && p[j] == '!') ++j;
    if (j < p.size() && p[j] == ']') ++j;
    while (j < p.size() && p[j] != ']') ++j;
    if (j >= p.size()) return false;
    size_t k = i;
    if (p[k] == '!') {
      t->negate = true;
      ++k;
    }
    while (k < j) {
      if (k + 2 < j && p[k + 1] == '-') {
        if (p[k] <= p[k + 2]) t->ranges.emplace_back(p[k], p[k + 2]);
        k += 3;
      } else {
        t->ranges.emplace_back(p[k], p[k]);
        ++k;
      }
    }
    *next = j + 1;
    return true;
  }

  std::string text_;
  std::vector<Token> tokens_;
};

// --only (any of them; all names when none) and --exclude (none of them).
struct NameFilter {
  std::vector<Glob> only, exclude;
  bool empty() const { return only.empty() && exclude.empty(); }
  bool keep(std::string_view name) const {
    bool in = only.empty();
    for (const auto& g : only) in = in || g.match(name);
    if (!in) return false;
    for (const auto& g : exclude) {
      if (g.match(name)) return false;
    }
    return true;
  }
};

}  // namespace ptread_cli
