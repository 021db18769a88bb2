// ptread — an inert pickle VM (protocols 0 to 5).
//
// It builds a graph of values and never calls anything: GLOBAL/STACK_GLOBAL make a "global"
// node naming a class; REDUCE, NEWOBJ, INST, OBJ and BUILD go to PickleHooks, which the
// format layer implements (it knows torch's rebuild functions) and which fall back to
// generic "object" nodes recording the class, the arguments and the state. Persistent ids
// (torch's storage references) go to the hooks too.
//
// Opcodes (Lib/pickletools.py is the reference): protocol 0/1 text opcodes (INT, LONG,
// FLOAT, STRING, UNICODE, GET, PUT, DICT, LIST, TUPLE, INST, OBJ, PERSID ...), protocol 2
// (PROTO, NEWOBJ, TUPLE1-3, NEWTRUE/NEWFALSE, LONG1, LONG4), 3 (BINBYTES, SHORT_BINBYTES),
// 4 (FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE, BINUNICODE8, BINBYTES8, EMPTY_SET,
// ADDITEMS, FROZENSET, NEWOBJ_EX), 5 (BYTEARRAY8). EXT1/2/4 (the copyreg extension
// registry) and NEXT_BUFFER/READONLY_BUFFER (out-of-band buffers) cannot occur in a file
// written by torch.save and are errors naming them.
//
// Memory is linear in the pickle's size: each opcode makes at most one node, and container
// items are bounded by the values on the stack, all checked against Limits.
#pragma once

#include "error.hpp"
#include "limits.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ptread {

enum class ValueKind : uint8_t {
  none, boolean, integer, big_integer, floating, string, bytes,
  list, tuple, dict, set, frozenset,
  global,       // a class or function named by GLOBAL: module and name
  object,       // an instance of a class ptread does not interpret: class, args, state
  tensor,       // a tensor (index into the checkpoint's tensor table)
  unsupported,  // a tensor-like entry ptread cannot read (quantized, sparse ...), with a reason
  storage,      // a persistent-id storage reference (internal; never left in a finished tree)
  missing,      // the result of looking up something absent
};

inline const char* value_kind_name(ValueKind k) noexcept {
  switch (k) {
    case ValueKind::none: return "None";
    case ValueKind::boolean: return "bool";
    case ValueKind::integer: return "int";
    case ValueKind::big_integer: return "int";
    case ValueKind::floating: return "float";
    case ValueKind::string: return "str";
    case ValueKind::bytes: return "bytes";
    case ValueKind::list: return "list";
    case ValueKind::tuple: return "tuple";
    case ValueKind::dict: return "dict";
    case ValueKind::set: return "set";
    case ValueKind::frozenset: return "frozenset";
    case ValueKind::global: return "global";
    case ValueKind::object: return "object";
    case ValueKind::tensor: return "tensor";
    case ValueKind::unsupported: return "unsupported";
    case ValueKind::storage: return "storage";
    case ValueKind::missing: return "missing";
  }
  return "?";
}

namespace detail {

inline constexpr uint32_t kNoNode = 0xffffffffu;
inline constexpr uint32_t kNoneNode = 0, kTrueNode = 1, kFalseNode = 2;

// Object nodes keep these in items[]; kNoNode when absent.
enum ObjectSlot : uint32_t { kObjClass = 0, kObjArgs = 1, kObjState = 2, kObjListItems = 3, kObjDictItems = 4 };

struct Node {
  ValueKind kind = ValueKind::none;
  uint32_t ref = 0;  // string/bytes/big_integer/global module: strings[]; tensor/storage: table index
  int64_t i = 0;     // integer, boolean; global: name in strings[]; storage: DType
  double f = 0;      // floating
  std::vector<uint32_t> items;  // list/tuple/set: values; dict: key, value, ...; object: slots
};

// Nodes and strings live in deques: references stay valid while the graph grows.
struct Graph {
  std::deque<Node> nodes;
  std::deque<std::string> strings;

  Graph() {
    nodes.resize(3);
    nodes[kTrueNode].kind = nodes[kFalseNode].kind = ValueKind::boolean;
    nodes[kTrueNode].i = 1;
  }
  uint32_t add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<uint32_t>(nodes.size() - 1);
  }
  uint32_t add_int(int64_t v) {
    Node n;
    n.kind = ValueKind::integer;
    n.i = v;
    return add(std::move(n));
  }
  uint32_t add_float(double v) {
    Node n;
    n.kind = ValueKind::floating;
    n.f = v;
    return add(std::move(n));
  }
  uint32_t add_text(ValueKind kind, std::string s) {
    strings.push_back(std::move(s));
    Node n;
    n.kind = kind;
    n.ref = static_cast<uint32_t>(strings.size() - 1);
    return add(std::move(n));
  }
  uint32_t add_container(ValueKind kind, std::vector<uint32_t> items = {}) {
    Node n;
    n.kind = kind;
    n.items = std::move(items);
    return add(std::move(n));
  }
  uint32_t add_global(std::string module, std::string name) {
    strings.push_back(std::move(module));
    strings.push_back(std::move(name));
    Node n;
    n.kind = ValueKind::global;
    n.ref = static_cast<uint32_t>(strings.size() - 2);
    n.i = static_cast<int64_t>(strings.size() - 1);
    return add(std::move(n));
  }
  uint32_t add_object(uint32_t cls, uint32_t args) {
    Node n;
    n.kind = ValueKind::object;
    n.items = {cls, args, kNoNode, kNoNode, kNoNode};
    return add(std::move(n));
  }

  const Node& at(uint32_t i) const { return nodes[i]; }
  ValueKind kind(uint32_t i) const { return nodes[i].kind; }
  const std::string& text(uint32_t i) const { return strings[nodes[i].ref]; }
  const std::string& global_module(uint32_t i) const { return strings[nodes[i].ref]; }
  const std::string& global_name(uint32_t i) const { return strings[static_cast<size_t>(nodes[i].i)]; }
  bool is_global(uint32_t i, std::string_view module, std::string_view name) const {
    return nodes[i].kind == ValueKind::global && global_module(i) == module && global_name(i) == name;
  }
  bool is_string(uint32_t i, std::string_view s) const {
    return nodes[i].kind == ValueKind::string && text(i) == s;
  }
  // For dicts: the value under a string key, or kNoNode.
  uint32_t dict_get(uint32_t d, std::string_view key) const {
    const auto& it = nodes[d].items;
    for (size_t k = 0; k + 1 < it.size(); k += 2) {
      if (is_string(it[k], key)) return it[k + 1];
    }
    return kNoNode;
  }
};

// ---- big integers (two's complement, little-endian bytes, as LONG1/LONG4 store them) ----

inline bool fits_int64(const uint8_t* p, size_t n, int64_t* out) {
  if (n == 0) {
    *out = 0;
    return true;
  }
  const bool neg = (p[n - 1] & 0x80) != 0;
  for (size_t k = 8; k < n; ++k) {
    if (p[k] != (neg ? 0xff : 0x00)) return false;
  }
  if (n > 8 && ((p[7] & 0x80) != 0) != neg) return false;
  uint64_t v = neg ? ~uint64_t{0} : 0;
  for (size_t k = 0; k < n && k < 8; ++k) {
    v &= ~(uint64_t{0xff} << (8 * k));
    v |= static_cast<uint64_t>(p[k]) << (8 * k);
  }
  std::memcpy(out, &v, sizeof v);
  return true;
}

// Decimal text of a two's complement little-endian integer.
inline std::string big_to_decimal(std::string_view le) {
  std::vector<uint8_t> mag(le.begin(), le.end());
  const bool neg = !mag.empty() && (mag.back() & 0x80);
  if (neg) {  // magnitude = two's complement negation
    unsigned carry = 1;
    for (auto& b : mag) {
      unsigned v = static_cast<unsigned>(static_cast<uint8_t>(~b)) + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
  }
  std::string digits;
  bool nonzero = true;
  while (nonzero) {
    unsigned rem = 0;
    nonzero = false;
    for (size_t k = mag.size(); k-- > 0;) {
      unsigned cur = (rem << 8) | mag[k];
      mag[k] = static_cast<uint8_t>(cur / 10);
      rem = cur % 10;
      if (mag[k]) nonzero = true;
    }
    digits.push_back(static_cast<char>('0' + rem));
  }
  if (neg) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

// Two's complement little-endian bytes of a decimal text ("-123").
inline bool decimal_to_big(std::string_view s, std::string* out) {
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return false;
  std::vector<uint8_t> mag(1, 0);
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    unsigned carry = static_cast<unsigned>(c - '0');
    for (auto& b : mag) {
      unsigned v = b * 10u + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
    if (carry) mag.push_back(static_cast<uint8_t>(carry));
  }
  mag.push_back(0);  // room for the sign bit
  if (neg) {
    unsigned carry = 1;
    for (auto& b : mag) {
      unsigned v = static_cast<unsigned>(static_cast<uint8_t>(~b)) + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
  }
  out->assign(mag.begin(), mag.end());
  return true;
}

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

// What the VM cannot decide by itself.
class PickleHooks {
 public:
  virtual ~PickleHooks() = default;
  // BINPERSID / PERSID: returns the node standing for the persistent object.
  virtual Result<uint32_t> persistent_load(Graph& g, uint32_t pid) = 0;
  // REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ: callable(*args). Never runs anything.
  virtual Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) = 0;
  // BUILD: obj.__setstate__(state) or obj.__dict__.update(state).
  virtual Status build(Graph& g, uint32_t obj, uint32_t state) = 0;
};

inline const char* opcode_name(uint8_t op) {
  switch (op) {
    case '(': return "MARK"; case '.': return "STOP"; case '0': return "POP";
    case '1': return "POP_MARK"; case '2': return "DUP"; case 'F': return "FLOAT";
    case 'I': return "INT"; case 'J': return "BININT"; case 'K': return "BININT1";
    case 'L': return "LONG"; case 'M': return "BININT2"; case 'N': return "NONE";
    case 'P': return "PERSID"; case 'Q': return "BINPERSID"; case 'R': return "REDUCE";
    case 'S': return "STRING"; case 'T': return "BINSTRING"; case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE"; case 'X': return "BINUNICODE"; case 'a': return "APPEND";
    case 'b': return "BUILD"; case 'c': return "GLOBAL"; case 'd': return "DICT";
    case '}': return "EMPTY_DICT"; case 'e': return "APPENDS"; case 'g': return "GET";
    case 'h': return "BINGET"; case 'i': return "INST"; case 'j': return "LONG_BINGET";
    case 'l': return "LIST"; case ']': return "EMPTY_LIST"; case 'o': return "OBJ";
    case 'p': return "PUT"; case 'q': return "BINPUT"; case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM"; case 't': return "TUPLE"; case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS"; case 'G': return "BINFLOAT"; case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ"; case 0x82: return "EXT1"; case 0x83: return "EXT2";
    case 0x84: return "EXT4"; case 0x85: return "TUPLE1"; case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3"; case 0x88: return "NEWTRUE"; case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1"; case 0x8b: return "LONG4"; case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES"; case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8"; case 0x8e: return "BINBYTES8"; case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS"; case 0x91: return "FROZENSET"; case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL"; case 0x94: return "MEMOIZE"; case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8"; case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

class PickleVM {
 public:
  PickleVM(Graph& g, PickleHooks& hooks, const Limits& limits, std::string where)
      : g_(g), hooks_(hooks), limits_(limits), where_(std::move(where)) {}

  // Runs the pickle in [data, data + n) up to STOP; returns the root node and, through
  // *consumed, how many bytes the pickle took (several pickles can follow each other).
  Result<uint32_t> run(const uint8_t* data, size_t n, size_t* consumed = nullptr) {
    p_ = data;
    end_ = data + n;
    begin_ = data;
    stack_.clear();
    marks_.clear();
    while (true) {
      if (p_ >= end_) {
        return make_error(ErrorCode::pickle_truncated, "pickle: the pickle ends before STOP, at byte " +
                                                           std::to_string(p_ - begin_) + " of '" + where_ + "'");
      }
      op_pos_ = static_cast<size_t>(p_ - begin_);
      op_ = *p_++;
      if (op_ == '.') {
        // Python's STOP returns the top value, whatever lies below it.
        if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
          return error(ErrorCode::pickle_malformed, "STOP with an empty stack");
        }
        if (consumed) *consumed = static_cast<size_t>(p_ - begin_);
        return stack_.back();
      }
      Status st = step();
      if (!st) return std::move(st).error();
    }
  }

 private:
  Error error(ErrorCode code, const std::string& what) const {
    const char* name = opcode_name(op_);
    char opbuf[48];
    if (name) {
      std::snprintf(opbuf, sizeof opbuf, "%s (0x%02x)", name, op_);
    } else {
      std::snprintf(opbuf, sizeof opbuf, "0x%02x", op_);
    }
    return make_error(code, "pickle: " + what + " at opcode " + opbuf + ", byte " +
                                std::to_string(op_pos_) + " of '" + where_ + "'");
  }
  Status fail(ErrorCode code, const std::string& what) const { return error(code, what); }

  // ---- reading operands ----
  bool need(size_t k) const { return static_cast<size_t>(end_ - p_) >= k; }
  Status truncated() const { return fail(ErrorCode::pickle_truncated, "operand runs past the end"); }
  Result<std::string_view> take(uint64_t k) {
    if (static_cast<uint64_t>(end_ - p_) < k) return error(ErrorCode::pickle_truncated, "operand runs past the end");
    std::string_view s(reinterpret_cast<const char*>(p_), static_cast<size_t>(k));
    p_ += k;
    return s;
  }
  Result<std::string_view> line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (!nl) return error(ErrorCode::pickle_truncated, "no newline after a text operand");
    std::string_view s(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    return s;
  }

  // ---- stack ----
  Status push(uint32_t v) {
    if (stack_.size() >= limits_.max_stack_depth) {
      return fail(ErrorCode::limit_exceeded, "stack deeper than Limits::max_stack_depth");
    }
    stack_.push_back(v);
    return {};
  }
  Result<uint32_t> pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      return error(ErrorCode::pickle_malformed, "stack underflow");
    }
    uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Result<uint32_t> top() const {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
      return error(ErrorCode::pickle_malformed, "stack underflow");
    }
    return stack_.back();
  }
  Result<std::vector<uint32_t>> pop_mark() {
    if (marks_.empty()) return error(ErrorCode::pickle_malformed, "no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    if (stack_.size() - m > limits_.max_container_items) {
      return error(ErrorCode::limit_exceeded, "more items than Limits::max_container_items");
    }
    std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  // ---- memo ----
  Status memo_put(uint64_t key, uint32_t v) {
    if (key < memo_.size()) {
      if (memo_[static_cast<size_t>(key)] == kNoNode) ++memo_count_;
      memo_[static_cast<size_t>(key)] = v;
    } else if (key < memo_.size() + 4096) {
      memo_.resize(static_cast<size_t>(key) + 1, kNoNode);
      memo_[static_cast<size_t>(key)] = v;
      ++memo_count_;
    } else {
      auto r = memo_far_.emplace(key, v);
      if (r.second) ++memo_count_; else r.first->second = v;
    }
    if (memo_count_ > limits_.max_memo_entries) {
      return fail(ErrorCode::limit_exceeded, "more memo entries than Limits::max_memo_entries");
    }
    return {};
  }
  Status memo_get(uint64_t key) {
    uint32_t v = kNoNode;
    if (key < memo_.size()) {
      v = memo_[static_cast<size_t>(key)];
    } else {
      auto it = memo_far_.find(key);
      if (it != memo_far_.end()) v = it->second;
    }
    if (v == kNoNode) return fail(ErrorCode::pickle_malformed, "memo key " + std::to_string(key) + " was never stored");
    return push(v);
  }

  // ---- helpers for values ----
  Status push_long(std::string_view le) {
    int64_t v;
    if (fits_int64(reinterpret_cast<const uint8_t*>(le.data()), le.size(), &v)) return push(g_.add_int(v));
    return push(g_.add_text(ValueKind::big_integer, std::string(le)));
  }
  Status push_decimal(std::string_view s) {
    int64_t v = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return push(g_.add_int(v));
    std::string big;
    if (!decimal_to_big(s, &big)) return fail(ErrorCode::pickle_malformed, "bad integer text '" + std::string(s.substr(0, 40)) + "'");
    return push_long(big);
  }
  Status append_items(uint32_t target, const std::vector<uint32_t>& items, bool pairs) {
    Node* t = &g_.nodes[target];
    if (pairs && items.size() % 2 != 0) return fail(ErrorCode::pickle_malformed, "odd number of items for a dict");
    if (t->kind == ValueKind::object) {
      // list.append / dict.__setitem__ on an instance of a subclass: keep the items.
      const uint32_t slot = pairs ? kObjDictItems : kObjListItems;
      if (t->items[slot] == kNoNode) {
        uint32_t c = g_.add_container(pairs ? ValueKind::dict : ValueKind::list);
        t = &g_.nodes[target];
        t->items[slot] = c;
      }
      target = t->items[slot];
      t = &g_.nodes[target];
    }
    const ValueKind want = pairs ? ValueKind::dict : ValueKind::list;
    if (t->kind != want && !(!pairs && t->kind == ValueKind::set && op_ == 0x90)) {
      return fail(ErrorCode::pickle_malformed, std::string("cannot add items to a ") + value_kind_name(t->kind));
    }
    if (t->items.size() + items.size() > limits_.max_container_items * (pairs ? 2 : 1)) {
      return fail(ErrorCode::limit_exceeded, "more items than Limits::max_container_items");
    }
    t->items.insert(t->items.end(), items.begin(), items.end());
    return {};
  }
  Status call(uint32_t callable, uint32_t args) {
    auto r = hooks_.call(g_, callable, args);
    if (!r) return with_where(std::move(r).error());
    return push(*r);
  }
  Error with_where(Error e) const {
    if (e.message().find(where_) == std::string::npos) {
      e.add_context("(opcode " + std::string(opcode_name(op_) ? opcode_name(op_) : "?") +
                    " at byte " + std::to_string(op_pos_) + " of '" + where_ + "')");
    }
    return e;
  }
  Result<std::string> python_string_literal(std::string_view s);
  Result<std::string> raw_unicode_escape(std::string_view s);

  Status step();

  Graph& g_;
  PickleHooks& hooks_;
  const Limits& limits_;
  std::string where_;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  const uint8_t* begin_ = nullptr;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::vector<uint32_t> memo_;
  std::unordered_map<uint64_t, uint32_t> memo_far_;
  size_t memo_count_ = 0;
};

// STRING operand: a Python repr, 'text' or "text", with backslash escapes.
inline Result<std::string> PickleVM::python_string_literal(std::string_view s) {
  if (s.size() < 2 || (s[0] != '\'' && s[0] != '"') || s.back() != s[0]) {
    return error(ErrorCode::pickle_malformed, "STRING operand is not quoted");
  }
  s = s.substr(1, s.size() - 2);
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (c != '\\' || k + 1 == s.size()) {
      out.push_back(c);
      continue;
    }
    char e = s[++k];
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': {
        unsigned v = 0;
        if (k + 2 >= s.size() + 0 && k + 2 > s.size() - 1 + 1) return error(ErrorCode::pickle_malformed, "bad \\x escape");
        auto r = std::from_chars(s.data() + k + 1, s.data() + std::min(s.size(), k + 3), v, 16);
        if (r.ptr != s.data() + k + 3) return error(ErrorCode::pickle_malformed, "bad \\x escape");
        out.push_back(static_cast<char>(v));
        k += 2;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          unsigned v = 0;
          size_t d = 0;
          while (d < 3 && k + d < s.size() && s[k + d] >= '0' && s[k + d] <= '7') {
            v = v * 8 + static_cast<unsigned>(s[k + d] - '0');
            ++d;
          }
          out.push_back(static_cast<char>(v & 0xff));
          k += d - 1;
        } else if (e == '\\' || e == '\'' || e == '"') {
          out.push_back(e);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

// UNICODE operand: raw-unicode-escape (\uXXXX, \UXXXXXXXX; other bytes are Latin-1).
inline Result<std::string> PickleVM::raw_unicode_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    const auto c = static_cast<uint8_t>(s[k]);
    if (c == '\\' && k + 1 < s.size() && (s[k + 1] == 'u' || s[k + 1] == 'U')) {
      const size_t len = s[k + 1] == 'u' ? 4 : 8;
      uint32_t cp = 0;
      if (k + 2 + len > s.size()) return error(ErrorCode::pickle_malformed, "bad \\u escape");
      auto r = std::from_chars(s.data() + k + 2, s.data() + k + 2 + len, cp, 16);
      if (r.ptr != s.data() + k + 2 + len || cp > 0x10ffff) return error(ErrorCode::pickle_malformed, "bad \\u escape");
      append_utf8(&out, cp);
      k += 1 + len;
    } else {
      append_utf8(&out, c);
    }
  }
  return out;
}

inline Status PickleVM::step() {
  switch (op_) {
    case 0x80: {  // PROTO
      if (!need(1)) return truncated();
      const uint8_t v = *p_++;
      if (v > 5) return fail(ErrorCode::pickle_malformed, "unsupported pickle protocol " + std::to_string(v));
      return {};
    }
    case 0x95:  // FRAME: the whole pickle is in memory; the frame length is only a hint
      if (!need(8)) return truncated();
      p_ += 8;
      return {};
    case '(': marks_.push_back(stack_.size()); return {};
    case '0': { PTREAD_TRY(uint32_t v, pop()); (void)v; return {}; }
    case '1': { PTREAD_TRY(auto items, pop_mark()); (void)items; return {}; }
    case '2': { PTREAD_TRY(uint32_t v, top()); return push(v); }
    case 'N': return push(kNoneNode);
    case 0x88: return push(kTrueNode);
    case 0x89: return push(kFalseNode);
    case 'J': {
      if (!need(4)) return truncated();
      int32_t v;
      uint32_t u = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
                   (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
      std::memcpy(&v, &u, 4);
      p_ += 4;
      return push(g_.add_int(v));
    }
    case 'K': if (!need(1)) return truncated(); return push(g_.add_int(*p_++));
    case 'M': {
      if (!need(2)) return truncated();
      int v = p_[0] | (p_[1] << 8);
      p_ += 2;
      return push(g_.add_int(v));
    }
    case 0x8a: {  // LONG1
      if (!need(1)) return truncated();
      const uint8_t n = *p_++;
      PTREAD_TRY(auto s, take(n));
      return push_long(s);
    }
    case 0x8b: {  // LONG4
      if (!need(4)) return truncated();
      int32_t n;
      std::memcpy(&n, p_, 4);
      p_ += 4;
      if (n < 0) return fail(ErrorCode::pickle_malformed, "negative LONG4 length");
      PTREAD_TRY(auto s, take(static_cast<uint64_t>(n)));
      return push_long(s);
    }
    case 'I': {  // INT: "01"/"00" are True/False in protocol 0
      PTREAD_TRY(auto s, line());
      if (s == "01") return push(kTrueNode);
      if (s == "00") return push(kFalseNode);
      return push_decimal(s);
    }
    case 'L': {
      PTREAD_TRY(auto s, line());
      if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
      return push_decimal(s);
    }
    case 'F': {
      PTREAD_TRY(auto s, line());
      double v = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
        // from_chars has no "inf"/"nan" spellings of repr(); handle them.
        if (s == "inf") v = HUGE_VAL; else if (s == "-inf") v = -HUGE_VAL;
        else if (s == "nan") v = std::numeric_limits<double>::quiet_NaN();
        else return fail(ErrorCode::pickle_malformed, "bad FLOAT text '" + std::string(s.substr(0, 40)) + "'");
      }
      return push(g_.add_float(v));
    }
    case 'G': {  // BINFLOAT: big-endian double
      if (!need(8)) return truncated();
      uint64_t u = 0;
      for (int k = 0; k < 8; ++k) u = (u << 8) | p_[k];
      p_ += 8;
      double v;
      std::memcpy(&v, &u, 8);
      return push(g_.add_float(v));
    }
    case 'S': {
      PTREAD_TRY(auto s, line());
      PTREAD_TRY(auto str, python_string_literal(s));
      return push(g_.add_text(ValueKind::string, std::move(str)));
    }
    case 'T': case 'X': case 'B': {  // 4-byte length: BINSTRING, BINUNICODE, BINBYTES
      if (!need(4)) return truncated();
      uint32_t n = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
                   (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
      p_ += 4;
      if (op_ == 'T' && n > 0x7fffffffu) return fail(ErrorCode::pickle_malformed, "negative BINSTRING length");
      PTREAD_TRY(auto s, take(n));
      return push(g_.add_text(op_ == 'B' ? ValueKind::bytes : ValueKind::string, std::string(s)));
    }
    case 'U': case 'C': case 0x8c: {  // 1-byte length: SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE
      if (!need(1)) return truncated();
      const uint8_t n = *p_++;
      PTREAD_TRY(auto s, take(n));
      return push(g_.add_text(op_ == 'C' ? ValueKind::bytes : ValueKind::string, std::string(s)));
    }
    case 0x8d: case 0x8e: case 0x96: {  // 8-byte length: BINUNICODE8, BINBYTES8, BYTEARRAY8
      if (!need(8)) return truncated();
      uint64_t n = 0;
      for (int k = 7; k >= 0; --k) n = (n << 8) | p_[k];
      p_ += 8;
      PTREAD_TRY(auto s, take(n));
      return push(g_.add_text(op_ == 0x8d ? ValueKind::string : ValueKind::bytes, std::string(s)));
    }
    case 'V': {
      PTREAD_TRY(auto s, line());
      PTREAD_TRY(auto str, raw_unicode_escape(s));
      return push(g_.add_text(ValueKind::string, std::move(str)));
    }
    case ')': return push(g_.add_container(ValueKind::tuple));
    case ']': return push(g_.add_container(ValueKind::list));
    case '}': return push(g_.add_container(ValueKind::dict));
    case 0x8f: return push(g_.add_container(ValueKind::set));
    case 't': { PTREAD_TRY(auto items, pop_mark()); return push(g_.add_container(ValueKind::tuple, std::move(items))); }
    case 'l': { PTREAD_TRY(auto items, pop_mark()); return push(g_.add_container(ValueKind::list, std::move(items))); }
    case 0x91: { PTREAD_TRY(auto items, pop_mark()); return push(g_.add_container(ValueKind::frozenset, std::move(items))); }
    case 'd': {
      PTREAD_TRY(auto items, pop_mark());
      if (items.size() % 2) return fail(ErrorCode::pickle_malformed, "odd number of items for DICT");
      return push(g_.add_container(ValueKind::dict, std::move(items)));
    }
    case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
      const size_t n = static_cast<size_t>(op_ - 0x84);
      std::vector<uint32_t> items(n);
      for (size_t k = n; k-- > 0;) { PTREAD_TRY(items[k], pop()); }
      return push(g_.add_container(ValueKind::tuple, std::move(items)));
    }
    case 'a': {
      PTREAD_TRY(uint32_t v, pop());
      PTREAD_TRY(uint32_t target, top());
      return append_items(target, {v}, false);
    }
    case 'e': case 0x90: {  // APPENDS, ADDITEMS
      PTREAD_TRY(auto items, pop_mark());
      PTREAD_TRY(uint32_t target, top());
      if (op_ == 0x90 && g_.kind(target) != ValueKind::set) return fail(ErrorCode::pickle_malformed, "ADDITEMS on a non-set");
      return append_items(target, items, false);
    }
    case 's': {
      PTREAD_TRY(uint32_t v, pop());
      PTREAD_TRY(uint32_t k, pop());
      PTREAD_TRY(uint32_t target, top());
      return append_items(target, {k, v}, true);
    }
    case 'u': {
      PTREAD_TRY(auto items, pop_mark());
      PTREAD_TRY(uint32_t target, top());
      return append_items(target, items, true);
    }
    case 'p': {
      PTREAD_TRY(auto s, line());
      uint64_t key = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), key);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return fail(ErrorCode::pickle_malformed, "bad PUT key");
      PTREAD_TRY(uint32_t v, top());
      return memo_put(key, v);
    }
    case 'q': { if (!need(1)) return truncated(); const uint8_t k = *p_++; PTREAD_TRY(uint32_t v, top()); return memo_put(k, v); }
    case 'r': {
      if (!need(4)) return truncated();
      uint32_t k = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
                   (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
      p_ += 4;
      PTREAD_TRY(uint32_t v, top());
      return memo_put(k, v);
    }
    case 0x94: { PTREAD_TRY(uint32_t v, top()); return memo_put(memo_count_, v); }
    case 'g': {
      PTREAD_TRY(auto s, line());
      uint64_t key = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), key);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return fail(ErrorCode::pickle_malformed, "bad GET key");
      return memo_get(key);
    }
    case 'h': { if (!need(1)) return truncated(); return memo_get(*p_++); }
    case 'j': {
      if (!need(4)) return truncated();
      uint32_t k = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
                   (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
      p_ += 4;
      return memo_get(k);
    }
    case 'c': {
      PTREAD_TRY(auto module, line());
      PTREAD_TRY(auto name, line());
      return push(g_.add_global(std::string(module), std::string(name)));
    }
    case 0x93: {  // STACK_GLOBAL
      PTREAD_TRY(uint32_t name, pop());
      PTREAD_TRY(uint32_t module, pop());
      if (g_.kind(name) != ValueKind::string || g_.kind(module) != ValueKind::string) {
        return fail(ErrorCode::pickle_malformed, "STACK_GLOBAL needs two strings");
      }
      return push(g_.add_global(g_.text(module), g_.text(name)));
    }
    case 'R': case 0x81: {  // REDUCE, NEWOBJ
      PTREAD_TRY(uint32_t args, pop());
      PTREAD_TRY(uint32_t callable, pop());
      if (g_.kind(args) != ValueKind::tuple) return fail(ErrorCode::pickle_malformed, "arguments are not a tuple");
      return call(callable, args);
    }
    case 0x92: {  // NEWOBJ_EX: cls, args, kwargs (keyword arguments to __new__ are dropped)
      PTREAD_TRY(uint32_t kwargs, pop());
      (void)kwargs;
      PTREAD_TRY(uint32_t args, pop());
      PTREAD_TRY(uint32_t cls, pop());
      if (g_.kind(args) != ValueKind::tuple) return fail(ErrorCode::pickle_malformed, "arguments are not a tuple");
      return call(cls, args);
    }
    case 'i': {  // INST module\nname\n, args from MARK
      PTREAD_TRY(auto module, line());
      PTREAD_TRY(auto name, line());
      PTREAD_TRY(auto items, pop_mark());
      uint32_t cls = g_.add_global(std::string(module), std::string(name));
      uint32_t args = g_.add_container(ValueKind::tuple, std::move(items));
      return call(cls, args);
    }
    case 'o': {  // OBJ: MARK cls args...
      PTREAD_TRY(auto items, pop_mark());
      if (items.empty()) return fail(ErrorCode::pickle_malformed, "OBJ without a class");
      uint32_t cls = items[0];
      items.erase(items.begin());
      uint32_t args = g_.add_container(ValueKind::tuple, std::move(items));
      return call(cls, args);
    }
    case 'b': {
      PTREAD_TRY(uint32_t state, pop());
      PTREAD_TRY(uint32_t obj, top());
      Status st = hooks_.build(g_, obj, state);
      if (!st) return with_where(std::move(st).error());
      return {};
    }
    case 'Q': case 'P': {
      uint32_t pid;
      if (op_ == 'Q') {
        PTREAD_TRY(pid, pop());
      } else {
        PTREAD_TRY(auto s, line());
        pid = g_.add_text(ValueKind::string, std::string(s));
      }
      auto r = hooks_.persistent_load(g_, pid);
      if (!r) return with_where(std::move(r).error());
      return push(*r);
    }
    case 0x82: case 0x83: case 0x84:
      return fail(ErrorCode::pickle_unsupported_opcode,
                  "the copyreg extension registry is never used by torch.save");
    case 0x97: case 0x98:
      return fail(ErrorCode::pickle_unsupported_opcode,
                  "out-of-band buffers (protocol 5) are never used by torch.save");
    default:
      return fail(ErrorCode::pickle_unknown_opcode, "unknown opcode");
  }
}

}  // namespace detail
}  // namespace ptread
