// ptread — the pickle VM's state and its plain parts: errors with where they happened, the
// operand reader, the stack and MARKs, the values containers are made of, Python's STRING
// and UNICODE escapes. TensorRunVM (tensor_runs.hpp) adds the memo and torch's tensor runs,
// PickleVM (../pickle.hpp) the opcode dispatch.
#pragma once

#include "dict_keys.hpp"
#include "interface.hpp"
#include "number_text.hpp"
#include "unframe.hpp"
#include "value_graph.hpp"
#include "../memory/keyed_hash.hpp"
#include "../error.hpp"
#include "../limits.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ptread {
namespace detail {

class PickleVMBase {
 protected:
  PickleVMBase(Graph& g, PickleHooks& hooks, const Limits& limits, std::string where)
      : g_(g), hooks_(hooks), limits_(limits), where_(std::move(where)), max_stack_(limits.max_stack_depth) {}

  // After the opcode at op_ptr_ ended past the end of the frame it began in: notes whether
  // one of Python's reads of it crossed the frame's end. No frame is read from here.
  PTREAD_NOINLINE void left_frame() {
    const bool began_inside = op_ptr_ < frame_end_;
    if (began_inside && !read_boundary(op_ptr_, static_cast<size_t>(frame_end_ - op_ptr_))) note_crossing();
  }
  // Whether Python's _pickle reads of the opcode at o (which ends past o + at) break at
  // o + at: the opcode byte is one read, a length field another, then the payload (the
  // bytes of BINBYTES and the like are read past a frame's end as they are; any other read
  // that does not fit in the frame drops the frame's rest), a text line another.
  bool read_boundary(const uint8_t* o, size_t at) const {
    if (at == 1) return true;
    size_t length_field = 0;
    bool bytes_payload = false;
    switch (*o) {
      case 'h': return at >= 2;  // BINGET, LONG_BINGET (a tensor run after them stays in one frame)
      case 'j': return at >= 5;
      case 0x8a: case 'U': case 0x8c: length_field = 1; break;  // LONG1, SHORT_BINSTRING, SHORT_BINUNICODE
      case 'C': length_field = 1; bytes_payload = true; break;  // SHORT_BINBYTES
      case 0x8b: case 'T': case 'X': length_field = 4; break;  // LONG4, BINSTRING, BINUNICODE
      case 'B': length_field = 4; bytes_payload = true; break;  // BINBYTES
      case 0x8d: length_field = 8; break;  // BINUNICODE8
      case 0x8e: case 0x96: length_field = 8; bytes_payload = true; break;  // BINBYTES8, BYTEARRAY8
      case 'c': case 'i': {  // GLOBAL, INST: two lines
        const void* nl = std::memchr(o + 1, '\n', at - 1);
        return nl != nullptr && static_cast<const uint8_t*>(nl) + 1 == o + at;
      }
      default: return false;
    }
    return at == 1 + length_field || (bytes_payload && at > 1 + length_field);
  }
  // Notes a read that crossed a frame's end (torch_reads_otherwise()).
  void note_crossing() { crossed_ = true; }
  // The error run() returns (err_), noting that torch.load may read the pickle otherwise
  // when a FRAME was read before it (torch_reads_otherwise()).
  PTREAD_NOINLINE Error failed_run() {
    if (frame_end_ != begin_) crossed_ = true;
    return std::move(err_);
  }
  // Items in one container, whatever the limits say: item counts are 32-bit.
  static constexpr size_t kMaxItems = size_t{1} << 30;

  // The opcode being run, and where.
  uint8_t op() const { return *op_ptr_; }
  size_t op_pos() const { return input_pos(op_ptr_); }
  // The offset in the input of the byte at p: where an unframed pickle's byte came from.
  size_t input_pos(const uint8_t* p) const {
    const auto at = static_cast<size_t>(p - begin_);
    return unframed_ != nullptr ? unframed_->input_offset(at) : at;
  }
  // valid_pickle_utf8(p, len), with short ASCII text (most names and keys) checked inline:
  // eight bytes loaded at once when the pickle has them (end: its end).
  PTREAD_ALWAYS_INLINE static bool pickle_text_ok(const uint8_t* p, size_t len, const uint8_t* end) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (len <= 8 && end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t mask = len == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * len)) - 1;
      if ((w & mask & 0x8080808080808080ull) == 0) return true;
    }
#endif
    return valid_pickle_utf8(p, len);
  }
  PTREAD_NOINLINE Error error(ErrorCode code, const std::string& what) const {
    const char* name = opcode_name(op());
    char opbuf[48];
    if (name) {
      std::snprintf(opbuf, sizeof opbuf, "%s (0x%02x)", name, op());
    } else {
      std::snprintf(opbuf, sizeof opbuf, "0x%02x", op());
    }
    return make_error(code, "pickle: " + what + " at opcode " + opbuf + ", byte " +
                                std::to_string(op_pos()) + " of '" + where_ + "'");
  }
  // Records the error for run() and returns false: step() and its helpers return true
  // on success.
  PTREAD_NOINLINE bool fail(ErrorCode code, const std::string& what) {
    err_ = error(code, what);
    return false;
  }
  PTREAD_NOINLINE bool fail(Error e) {
    err_ = std::move(e);
    return false;
  }

  // ---- reading operands ----
  PTREAD_ALWAYS_INLINE bool need(size_t k) const { return static_cast<size_t>(end_ - p_) >= k; }
  PTREAD_NOINLINE bool truncated() { return fail(ErrorCode::pickle_truncated, "operand runs past the end"); }
  PTREAD_NOINLINE bool frame_past_end(uint64_t n) {
    return fail(ErrorCode::pickle_truncated, "a FRAME of " + std::to_string(n) + " bytes runs past the end");
  }
  static bool ascii(std::string_view s) noexcept {
    for (char c : s) {
      if (static_cast<unsigned char>(c) >= 0x80) return false;
    }
    return true;
  }
  PTREAD_NOINLINE bool bad_utf8() {
    return fail(ErrorCode::pickle_malformed, "text that is not UTF-8 (Python's unpickler refuses it)");
  }
  // Global node id as Python's find_class() reads its names: after a PROTO of 3 or more,
  // Python 2 module names are not mapped to Python 3's (kGlobalNamesAsIs).
  uint32_t names_as_read(uint32_t id) {
    if (proto_ >= 3) g_.nodes[id].ref = kGlobalNamesAsIs;
    return id;
  }
  // GLOBAL and INST read each line as Python's unpickler does, which refuses an empty one
  // (its "pickle data was truncated"); STACK_GLOBAL's empty module or name no import finds.
  PTREAD_NOINLINE bool empty_global_name() {
    return fail(ErrorCode::pickle_malformed, "a global with an empty module or name (Python's unpickler refuses it)");
  }
  // The node kind of the operand of `op` (STRING, BINSTRING, SHORT_BINSTRING, BINBYTES,
  // SHORT_BINBYTES): bytes are bytes; Python 2 str is text when it decodes as UTF-8 as
  // torch.load decodes it (encoding 'utf-8', errors 'strict': no encoded surrogates), else
  // the bytes it is (where torch.load, without encoding='latin1' or 'bytes', refuses it).
  static ValueKind text_kind(uint8_t op, std::string_view s) {
    if (op == 'B' || op == 'C') return ValueKind::bytes;
    return utf8_valid(s) ? ValueKind::string : ValueKind::bytes;
  }
  PTREAD_ALWAYS_INLINE bool take(uint64_t k, std::string_view* out) {
    if (static_cast<uint64_t>(end_ - p_) < k) return truncated();
    *out = std::string_view(reinterpret_cast<const char*>(p_), static_cast<size_t>(k));
    p_ += k;
    return true;
  }
  // A text operand, without its newline (and a '\r' before it, but for the numbers:
  // pickle/number_text.hpp reads them as CPython does, '\r' included).
  bool line(std::string_view* out, bool strip_cr = true) {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (!nl) return fail(ErrorCode::pickle_truncated, "no newline after a text operand");
    std::string_view s(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    if (strip_cr && !s.empty() && s.back() == '\r') s.remove_suffix(1);
    *out = s;
    return true;
  }
  PTREAD_ALWAYS_INLINE uint32_t u32() {  // 4 bytes little-endian; need(4) checked by the caller
    const uint32_t u = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
                       (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
    p_ += 4;
    return u;
  }

  // ---- stack ----
  PTREAD_ALWAYS_INLINE bool push(uint32_t v) {
    if (PTREAD_UNLIKELY(!stack_.push_back(v))) return too_deep();  // at Limits::max_stack_depth
    return true;
  }
  PTREAD_NOINLINE bool too_deep() { return fail(ErrorCode::limit_exceeded, "stack deeper than Limits::max_stack_depth"); }
  PTREAD_NOINLINE bool underflow() { return fail(ErrorCode::pickle_malformed, "stack underflow"); }
  PTREAD_ALWAYS_INLINE bool pop(uint32_t* v) {
    if (PTREAD_UNLIKELY(!stack_.above(floor_))) return underflow();
    *v = stack_.back();
    stack_.pop_back();
    return true;
  }
  PTREAD_ALWAYS_INLINE bool top(uint32_t* v) {
    if (PTREAD_UNLIKELY(!stack_.above(floor_))) return underflow();
    *v = stack_.back();
    return true;
  }
  PTREAD_ALWAYS_INLINE void push_mark() {
    marks_.push_back(stack_.size());
    floor_ = stack_.size();
  }
  // Pops the topmost MARK; the items above it are stack_[*m, size()), still on the stack.
  // per_item: the stack values one item of the container they make takes (a dict's: 2, a
  // key and a value; Limits::max_container_items counts a dict's pairs, as append_items).
  PTREAD_ALWAYS_INLINE bool pop_mark(size_t* m, size_t per_item = 1) {
    if (marks_.empty()) return fail(ErrorCode::pickle_malformed, "no MARK on the stack");
    *m = marks_.back();
    marks_.pop_back();
    floor_ = marks_.empty() ? 0 : marks_.back();
    const size_t n = stack_.size() - *m;
    if (n / per_item > limits_.max_container_items || n > kMaxItems) {
      return fail(ErrorCode::limit_exceeded, "more items than Limits::max_container_items");
    }
    return true;
  }
  const uint32_t* items_from(size_t m) const { return stack_.data() + m; }
  size_t count_from(size_t m) const { return stack_.size() - m; }
  void drop_from(size_t m) { stack_.resize(m); }
  // A container from the items above the topmost MARK, pushed in their place.
  PTREAD_ALWAYS_INLINE bool container_from_mark(ValueKind kind) {
    size_t m = 0;
    if (!pop_mark(&m, kind == ValueKind::dict ? 2 : 1)) return false;
    if (kind == ValueKind::dict && count_from(m) % 2) {
      return fail(ErrorCode::pickle_malformed, "odd number of items for DICT");
    }
    if ((kind == ValueKind::dict || kind == ValueKind::frozenset) &&
        !hashable_keys(items_from(m), count_from(m), kind == ValueKind::dict ? 2 : 1)) {
      return false;
    }
    const uint32_t c = g_.add_container(kind, items_from(m), count_from(m));
    drop_from(m);
    return push(c);
  }


  // ---- helpers for values ----
  bool push_long(std::string_view le) {
    int64_t v;
    if (fits_int64(reinterpret_cast<const uint8_t*>(le.data()), le.size(), &v)) return push(g_.add_int(v));
    return push(g_.add_text(ValueKind::big_integer, le));
  }
  // LONG's text, or INT's that strtol did not take: Python's int(s, 0).
  bool push_int_text(std::string_view line) {
    std::string big;
    switch (python_int(c_string(line), 0, &big)) {
      case IntText::ok: return push_long(big);
      case IntText::too_many_digits:
        return fail(ErrorCode::limit_exceeded, "integer text of over 4300 digits (Python refuses int literals over 4300 digits)");
      default: return fail(ErrorCode::pickle_malformed, "bad integer text '" + std::string(line.substr(0, 40)) + "'");
    }
  }
  bool append_items(uint32_t target, const uint32_t* items, size_t count, bool pairs) {
    if (pairs && count % 2 != 0) return fail(ErrorCode::pickle_malformed, "odd number of items for a dict");
    if (g_.kind(target) == ValueKind::object) {
      // list.append / dict.__setitem__ on an instance of a subclass: keep the items.
      const uint32_t slot = pairs ? kObjDictItems : kObjListItems;
      if (g_.nodes[target].items[slot] == kNoNode) {
        const uint32_t c = g_.add_container(pairs ? ValueKind::dict : ValueKind::list);
        g_.nodes[target].items[slot] = c;
      }
      target = g_.nodes[target].items[slot];
    }
    const ValueKind have = g_.kind(target);
    const ValueKind want = pairs ? ValueKind::dict : ValueKind::list;
    if (pairs && have == ValueKind::list) return assign_items(target, items, count);
    if (pairs && have == ValueKind::tensor) {  // Python's SETITEM calls Tensor.__setitem__: other data, not ptread's to make
      return fail(ErrorCode::unsupported_tensor,
                  "items set on a tensor (torch.load would write them into it with Tensor.__setitem__; ptread runs nothing)");
    }
    if (have != want && !(!pairs && have == ValueKind::set && op() == 0x90)) {
      return fail(ErrorCode::pickle_malformed, std::string("cannot add items to a ") + value_kind_name(have));
    }
    if ((pairs || have == ValueKind::set) && !hashable_keys(items, count, pairs ? 2 : 1)) return false;
    const size_t n = g_.count(target);
    if ((n + count) / (pairs ? 2 : 1) > limits_.max_container_items || n + count > kMaxItems) {  // (a dict: pairs)
      return fail(ErrorCode::limit_exceeded, "more items than Limits::max_container_items");
    }
    g_.append(target, items, count);
    return true;
  }
  // SETITEM and SETITEMS on a list: Python's unpickler does obj[k] = v on whatever is below,
  // so a list takes its items by index (an int or bool, from the end when negative); another
  // key or an index out of range fails, as Python's TypeError and IndexError.
  bool assign_items(uint32_t list, const uint32_t* items, size_t count) {
    const size_t n = g_.count(list);
    for (size_t k = 0; k < count; k += 2) {
      const ValueKind kind = g_.kind(items[k]);
      if (kind != ValueKind::integer && kind != ValueKind::boolean) {
        return fail(ErrorCode::pickle_malformed, std::string("a list indexed by a ") + value_kind_name(kind) +
                                                     " (Python's list takes ints)");
      }
      int64_t i = g_.nodes[items[k]].i;
      if (i < 0) i += static_cast<int64_t>(n);
      if (i < 0 || static_cast<uint64_t>(i) >= n) return fail(ErrorCode::pickle_malformed, "list assignment index out of range");
      g_.nodes[list].items[i] = items[k + 1];
    }
    return true;
  }
  // Python's d[k] = v and s.add(k) fail (TypeError) for a key it cannot hash: here, at the
  // same opcode. stride: 2 for a dict's keys and values, 1 for a set's items. A tuple or
  // frozenset found hashable is marked (kHashableTag) and never walked again, so the checks
  // of a whole pickle take time linear in its items, however often a key is given or
  // shared (a tuple of two t(k) is t(k+1): through the memo, 2^60 leaves in 600 bytes).
  bool hashable_keys(const uint32_t* items, size_t count, size_t stride) {
    for (size_t k = 0; k < count; k += stride) {
      const ValueKind kind = g_.kind(items[k]);
      if (PTREAD_LIKELY(kind == ValueKind::string)) continue;
      const ValueKind bad = unhashable(items[k], 0);
      if (bad == ValueKind::missing) continue;
      if (bad == kTooDeep) {
        return fail(ErrorCode::limit_exceeded, std::string(stride == 2 ? "a dict key" : "a set item") +
                                                   " nests tuples deeper than Limits::max_nesting_depth (or 4096)");
      }
      return fail(ErrorCode::pickle_malformed, std::string("a ") + value_kind_name(bad) +
                                                   (stride == 2 ? " as a dict key" : " in a set") +
                                                   " (unhashable in Python: torch.load fails on it)");
    }
    return true;
  }
  // The kind that makes key unhashable (a list, dict or set, in it or in its tuples and
  // frozensets), kTooDeep where those nest deeper than the limit (kMaxKeyNesting at most:
  // this recurses), or missing.
  static constexpr ValueKind kTooDeep = ValueKind::tuple;
  ValueKind unhashable(uint32_t key, size_t depth) {
    Node& n = g_.nodes[key];
    if (n.kind == ValueKind::list || n.kind == ValueKind::dict || n.kind == ValueKind::set) return n.kind;
    if ((n.kind != ValueKind::tuple && n.kind != ValueKind::frozenset) || n.tag == kHashableTag) return ValueKind::missing;
    if (depth >= limits_.max_nesting_depth || depth >= kMaxKeyNesting) return kTooDeep;
    for (uint32_t j = 0; j < n.ref; ++j) {
      const ValueKind bad = unhashable(n.items[j], depth + 1);
      if (bad != ValueKind::missing) return bad;
    }
    n.tag = kHashableTag;
    return ValueKind::missing;
  }

  // APPENDS, ADDITEMS, SETITEMS: the items above the MARK go into the value below it.
  bool append_from_mark(bool pairs) {
    size_t m = 0;
    if (!pop_mark(&m, pairs ? 2 : 1)) return false;
    if (m <= floor_) return underflow();
    if (count_from(m) == 0) return true;  // nothing to add: Python looks at no target then
    const uint32_t target = stack_[m - 1];
    if (op() == 0x90 && g_.kind(target) != ValueKind::set) return fail(ErrorCode::pickle_malformed, "ADDITEMS on a non-set");
    if (!append_items(target, items_from(m), count_from(m), pairs)) return false;
    drop_from(m);
    if (reserve_ != nullptr) reserve_->progress(static_cast<size_t>(op_ptr_ - begin_));
    return true;
  }
  bool call(uint32_t callable, uint32_t args, bool new_object = false) {
    switch (g_.kind(callable)) {  // what Python can never call (TypeError; NEWOBJ: not a type)
      case ValueKind::none: case ValueKind::boolean: case ValueKind::integer: case ValueKind::big_integer:
      case ValueKind::floating: case ValueKind::string: case ValueKind::bytes: case ValueKind::list:
      case ValueKind::tuple: case ValueKind::dict: case ValueKind::set: case ValueKind::frozenset:
      case ValueKind::tensor: case ValueKind::quantized: case ValueKind::sparse: case ValueKind::unsupported:
      case ValueKind::storage:  // (tensors and storages are no callables either)
        return fail(ErrorCode::pickle_malformed, std::string("a ") + value_kind_name(g_.kind(callable)) +
                                                     " called as a class or function (Python's unpickler refuses it)");
      default: break;
    }
    auto r = new_object ? hooks_.new_object(g_, callable, args) : hooks_.call(g_, callable, args);
    if (!r) return fail(with_where(std::move(r).error()));
    return push(*r);
  }
  bool persistent_load(uint32_t pid) {
    auto r = hooks_.persistent_load(g_, pid);
    if (!r) return fail(with_where(std::move(r).error()));
    return push(*r);
  }
  PTREAD_NOINLINE Error with_where(Error e) const {
    if (e.message().find(where_) == std::string::npos) {
      e.add_context("(opcode " + std::string(opcode_name(op()) ? opcode_name(op()) : "?") +
                    " at byte " + std::to_string(op_pos()) + " of '" + where_ + "')");
    }
    return e;
  }
  // The dicts and sets this pickle made, as Python holds them: a key given twice once
  // (DictKeys).
  PTREAD_NOINLINE Status python_keys() {
    DictKeys keys(g_, pool_, limits_.max_nesting_depth);
    for (size_t k = hashed_from_; k < g_.hashed.size(); ++k) {
      Status st = keys.dedup(g_, g_.hashed[k]);
      if (!st) {
        Error e = std::move(st).error();
        e.add_context("(a dict or set of '" + where_ + "')");
        return e;
      }
    }
    return {};
  }
  Result<std::string> python_string_literal(std::string_view s);
  Result<std::string> raw_unicode_escape(std::string_view s);

  Graph& g_;
  PickleHooks& hooks_;
  const Limits& limits_;
  std::string where_;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  const uint8_t* begin_ = nullptr;
  const UnframedPickle* unframed_ = nullptr;  // set_unframed()
  const uint8_t* op_ptr_ = nullptr;  // the opcode being run
  // Where the bytes of the last FRAME end. torch.load gives the unpickler of a zip
  // checkpoint a BytesIO of data.pkl, which reads a frame at once and any opcode after it
  // from the file: a read that begins inside a frame and ends past it makes Python drop the
  // rest of the frame and read on after it, other bytes than a flat reading. The pickler
  // never writes one. The VM reads on flat (as TorchScript's unpickler does) and notes it
  // (torch_reads_otherwise()); the zip reader reads a torch.save archive's pickle again,
  // unframed as torch.load reads it.
  const uint8_t* frame_end_ = nullptr;
  bool crossed_ = false;
  U32Stack stack_;
  std::vector<size_t> marks_;
  size_t floor_ = 0;  // marks_.back(), or 0: pops may not go below it
  uint8_t proto_ = 0;  // of the last PROTO (Python's unpickler starts at 0)
  BlockPool pool_;                  // memo_'s and lazy_'s blocks
  ChunkReserve* reserve_ = nullptr;  // set_chunk_reserve
  size_t hashed_from_ = 0;          // g_.hashed made by this run
  Error err_;
  size_t max_stack_;  // limits_.max_stack_depth
};


// STRING operand: a Python repr, 'text' or "text", with backslash escapes.
inline Result<std::string> PickleVMBase::python_string_literal(std::string_view s) {
  if (s.size() < 2 || (s[0] != '\'' && s[0] != '"') || s.back() != s[0]) {
    return error(ErrorCode::pickle_malformed, "STRING operand is not quoted");
  }
  s = s.substr(1, s.size() - 2);
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (k + 1 == s.size()) return error(ErrorCode::pickle_malformed, "STRING operand ends in a lone backslash");  // as Python's escape_decode
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

// UNICODE operand: raw-unicode-escape (\uXXXX, \UXXXXXXXX; other bytes are Latin-1). As
// CPython decodes it, an escape's backslash is the last of an odd number in a row: two
// backslashes and u0041 are two backslashes and the text u0041, three and u0041 two
// backslashes and an A.
inline Result<std::string> PickleVMBase::raw_unicode_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t backslashes = 0;  // backslashes in a row just before k, written as themselves
  for (size_t k = 0; k < s.size(); ++k) {
    const auto c = static_cast<uint8_t>(s[k]);
    const bool escape = c == '\\' && backslashes % 2 == 0 && k + 1 < s.size() && (s[k + 1] == 'u' || s[k + 1] == 'U');
    backslashes = c == '\\' && !escape ? backslashes + 1 : 0;
    if (escape) {
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

}  // namespace detail
}  // namespace ptread
