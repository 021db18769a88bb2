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

#include "detail/dict_keys.hpp"
#include "detail/keyed_hash.hpp"
#include "detail/number_text.hpp"
#include "detail/pickle_unframe.hpp"
#include "detail/run_template.hpp"
#include "detail/value_graph.hpp"


#include "error.hpp"
#include "limits.hpp"

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

// One tensor as torch.save pickles it (protocols 2 to 5), read by the VM in one go: the call
//   fn((tag, cls, key, location, numel[, None]), offset, size, stride, requires_grad, hooks_cls())
// that is the opcodes
//   fn MARK MARK tag cls key location numel [NONE] TUPLE BINPERSID offset size stride
//   NEWFALSE|NEWTRUE hooks_cls EMPTY_TUPLE REDUCE TUPLE REDUCE
// where fn, tag, cls and hooks_cls are memo gets; key and location memo gets or new text;
// numel and offset BININT1/BININT2/BININT/LONG1; size and stride tuples of such ints (at
// most kRunRank); and any value but an int, None, a bool, the storage and the call result
// may be memoized (BINPUT, LONG_BINPUT, MEMOIZE). Everything else goes opcode by opcode.
struct TensorRun {
  static constexpr uint32_t kRunRank = kRunMaxRank;
  uint32_t fn = 0, tag = 0, cls = 0, key = 0, location = 0, hooks_cls = 0;  // nodes
  // A key read as text, by this run or by the run whose key the memo gave (key is then
  // kNoNode): its text, in the pickle, and the lazy memo value that makes its node.
  std::string_view key_text;
  uint32_t key_lazy = 0;
  int64_t numel = 0, offset = 0;
  int64_t* dims = nullptr;   // rank sizes, then rank strides: in the graph's arena
  uint32_t rank = 0;
  bool pid_none = false;     // the persistent id has a sixth item, None
  bool requires_grad = false;
};

// What the VM cannot decide by itself.
class PickleHooks {
 public:
  virtual ~PickleHooks() = default;
  // A TensorRun: the node persistent_load and call would have made for it, with the same
  // effects on the hooks' state, or kNoNode to have the VM run its opcodes one by one (and
  // report any error there). The values in between (the persistent id, the size and stride
  // tuples, the hooks dict, the argument tuple) are made only if the pickle gets them from
  // the memo later.
  virtual uint32_t tensor_run(Graph& g, const TensorRun& run) {
    (void)g;
    (void)run;
    return kNoNode;
  }
  // BINPERSID / PERSID: returns the node standing for the persistent object.
  virtual Result<uint32_t> persistent_load(Graph& g, uint32_t pid) = 0;
  // REDUCE, INST, OBJ: callable(*args). Never runs anything.
  virtual Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) = 0;
  // NEWOBJ, NEWOBJ_EX: cls.__new__(cls, *args), which for most classes is what a call makes.
  virtual Result<uint32_t> new_object(Graph& g, uint32_t cls, uint32_t args) { return call(g, cls, args); }
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
      : g_(g), hooks_(hooks), limits_(limits), where_(std::move(where)), max_stack_(limits.max_stack_depth) {}

  // Whether TensorRuns are offered to the hooks (on by default; off, every opcode goes
  // through the dispatch loop: the tests compare both).
  void set_tensor_runs(bool on) { runs_ = on; }
  // Where its memo takes 2 MiB chunks from (see ChunkReserve; nullptr: none).
  // Its progress through the pickle is reported to the reserve (ChunkReserve::progress,
  // after each TensorRun and each batch of items added to a container).
  void set_chunk_reserve(ChunkReserve* r) noexcept {
    pool_.set_reserve(r);
    reserve_ = r;
  }
  // Its pool's first chunk taken from the reserve now (BlockPool::prime).
  void prime_pool() { pool_.prime(); }
  // After the pickle: up to `max` of the 2 MiB chunks its memo took, to pool `to`
  // (BlockPool::give_chunks). The VM runs no pickle after.
  void give_chunks(BlockPool& to, size_t max) { pool_.give_chunks(to, max); }
  // Whether torch.load's unpickler may read the last run()'s pickle otherwise than this
  // flat reading (see frame_end_): a read crossed the end of its FRAME, or the pickle failed
  // after a FRAME was read (the read that failed may have crossed one). The zip reader then
  // reads it again as torch.load does (unframe_as_torch_load()).
  bool torch_reads_otherwise() const { return crossed_; }
  // The next run() reads u->bytes (unframe_as_torch_load()): the byte offsets its errors
  // and *consumed give are those of the input it came from. u must outlive that run.
  void set_unframed(const UnframedPickle* u) noexcept { unframed_ = u; }
  // How many TensorRuns the last run() took, and how many of those it read by their
  // template (RunTemplate).
  size_t tensor_runs_taken() const { return runs_taken_; }
  size_t template_runs_taken() const { return template_runs_; }

  // Runs the pickle in [data, data + n) up to STOP; returns the root node and, through
  // *consumed, how many bytes the pickle took (several pickles can follow each other).
  Result<uint32_t> run(const uint8_t* data, size_t n, size_t* consumed = nullptr) {
    begin_ = data;
    end_ = data + n;
    stack_.clear();
    stack_.set_limit(max_stack_);
    marks_.clear();
    memo_.truncate(0);  // each pickle.load has its own memo
    memo_far_.clear();
    memo_count_ = 0;
    lazy_.truncate(0);
    lazy_scan_ = 0;
    runs_taken_ = 0;
    template_runs_ = 0;
    template_.clear();  // it points into the last pickle
    template_streak_ = 0;
    template_good_ = false;
    template_backoff_ = 1;
    template_wait_ = 0;
    made_.clear();
    floor_ = 0;
    proto_ = 0;
    hashed_from_ = g_.hashed.size();
    // The opcodes torch.save writes are handled here, the read position in a local; the
    // others by step(), through p_.
    const uint8_t* p = data;
    const uint8_t* const end = end_;
    frame_end_ = data;  // no frame read yet
    crossed_ = false;
    // An opcode that starts at `guard` or past it: the end of the pickle, or the last
    // opcode left the frame it began in (past its end, frame_end_ + 1: the one compare
    // each opcode had before frames were followed).
    const uint8_t* guard = end;
    for (;;) {
      if (PTREAD_UNLIKELY(p >= guard)) {
        if (p >= end) {
          if (frame_end_ != begin_) crossed_ = true;
          return make_error(ErrorCode::pickle_truncated, "pickle: the pickle ends before STOP, at byte " +
                                                             std::to_string(input_pos(p)) + " of '" + where_ + "'");
        }
        left_frame();
        guard = end;
      }
      op_ptr_ = p;
      bool ok;
      switch (*p++) {
        case '.': {
          // Python's STOP returns the top value, whatever lies below it.
          if (stack_.size() <= floor_) {
            fail(ErrorCode::pickle_malformed, "STOP with an empty stack");
            return failed_run();
          }
          if (g_.hashed.size() > hashed_from_) {
            Status keys = python_keys();
            if (!keys) {
              err_ = std::move(keys).error();
              return failed_run();
            }
          }
          if (consumed) *consumed = input_pos(p);
          return stack_.back();
        }
        case 'q':  // BINPUT
          if (PTREAD_UNLIKELY(p == end)) {
            ok = truncated();
            break;
          }
          ok = memo_put_top(*p++);
          break;
        case 'h':  // BINGET
          if (PTREAD_UNLIKELY(p == end)) {
            ok = truncated();
            break;
          }
          ok = memo_get(*p++);
          if (ok && end - p > 2 && p[0] == '(' && p[1] == '(' && runs_) tensor_run(p);
          break;
        case 'r':  // LONG_BINPUT
          if (PTREAD_UNLIKELY(end - p < 4)) {
            ok = truncated();
            break;
          }
          ok = memo_put_top(load_u32(p));
          p += 4;
          break;
        case 'j':  // LONG_BINGET
          if (PTREAD_UNLIKELY(end - p < 4)) {
            ok = truncated();
            break;
          }
          ok = memo_get(load_u32(p));
          p += 4;
          if (ok && end - p > 2 && p[0] == '(' && p[1] == '(' && runs_) tensor_run(p);
          break;
        case 0x94: ok = memo_put_top(memo_count_); break;  // MEMOIZE
        case '(': push_mark(); ok = true; break;
        case 'K':  // BININT1
          if (PTREAD_UNLIKELY(p == end)) {
            ok = truncated();
            break;
          }
          ok = push(g_.add_int(*p++));
          break;
        case 'M':  // BININT2
          if (PTREAD_UNLIKELY(end - p < 2)) {
            ok = truncated();
            break;
          }
          ok = push(g_.add_int(p[0] | (p[1] << 8)));
          p += 2;
          break;
        case 'J': {  // BININT
          if (PTREAD_UNLIKELY(end - p < 4)) {
            ok = truncated();
            break;
          }
          const uint32_t u = load_u32(p);
          p += 4;
          int32_t v;
          std::memcpy(&v, &u, 4);
          ok = push(g_.add_int(v));
          break;
        }
        case 0x8c: {  // SHORT_BINUNICODE
          if (PTREAD_UNLIKELY(p == end)) {
            ok = truncated();
            break;
          }
          const size_t len = *p++;
          if (PTREAD_UNLIKELY(static_cast<size_t>(end - p) < len)) {
            ok = truncated();
            break;
          }
          if (PTREAD_UNLIKELY(!pickle_text_ok(p, len, end))) {
            ok = bad_utf8();
            break;
          }
          ok = push(g_.add_text(ValueKind::string, std::string_view(reinterpret_cast<const char*>(p), len)));
          p += len;
          break;
        }
        case 'X': {  // BINUNICODE
          if (PTREAD_UNLIKELY(end - p < 4)) {
            ok = truncated();
            break;
          }
          const size_t len = load_u32(p);
          p += 4;
          if (PTREAD_UNLIKELY(static_cast<size_t>(end - p) < len)) {
            ok = truncated();
            break;
          }
          if (PTREAD_UNLIKELY(!pickle_text_ok(p, len, end))) {
            ok = bad_utf8();
            break;
          }
          ok = push(g_.add_text(ValueKind::string, std::string_view(reinterpret_cast<const char*>(p), len)));
          p += len;
          break;
        }
        case 'N': ok = push(kNoneNode); break;
        case 0x88: ok = push(kTrueNode); break;
        case 0x89: ok = push(kFalseNode); break;
        case ')': ok = push(g_.add_container(ValueKind::tuple)); break;
        case '}': ok = push(g_.add_container(ValueKind::dict)); break;
        case ']': ok = push(g_.add_container(ValueKind::list)); break;
        case 't': ok = container_from_mark(ValueKind::tuple); break;
        case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
          const size_t k = static_cast<size_t>(p[-1] - 0x84);
          if (PTREAD_UNLIKELY(stack_.size() - floor_ < k)) {
            ok = underflow();
            break;
          }
          const size_t m = stack_.size() - k;
          const uint32_t c = g_.add_container(ValueKind::tuple, items_from(m), k);
          drop_from(m);
          ok = push(c);
          break;
        }
        case 'R': case 0x81: {  // REDUCE, NEWOBJ
          uint32_t args = 0, callable = 0;
          ok = pop(&args) && pop(&callable);
          if (!ok) break;
          if (PTREAD_UNLIKELY(g_.kind(args) != ValueKind::tuple)) {
            ok = fail(ErrorCode::pickle_malformed, "arguments are not a tuple");
            break;
          }
          ok = call(callable, args, *op_ptr_ == 0x81);
          break;
        }
        case 'Q': {  // BINPERSID
          uint32_t pid = 0;
          ok = pop(&pid) && persistent_load(pid);
          break;
        }
        case 'u': ok = append_from_mark(true); break;  // SETITEMS
        case 0x95: {  // FRAME (see frame_end_)
          if (PTREAD_UNLIKELY(end - p < 8)) {
            ok = truncated();
            break;
          }
          uint64_t length = 0;
          for (int k = 7; k >= 0; --k) length = (length << 8) | p[k];
          p += 8;
          if (PTREAD_UNLIKELY(length > static_cast<uint64_t>(end - p))) {
            ok = frame_past_end(length);
          } else if (p < frame_end_ && length <= static_cast<uint64_t>(frame_end_ - p)) {
            ok = true;  // a FRAME that its frame holds: Python reads nothing
          } else {
            // A new frame; a FRAME that began in the last one and does not end with it (its
            // length, or its bytes, past that frame's end) is a read crossing its end.
            if (op_ptr_ < frame_end_ && op_ptr_ + 1 != frame_end_ && p != frame_end_) note_crossing();
            frame_end_ = p + length;
            guard = frame_end_ < end ? frame_end_ + 1 : end;
            ok = true;
          }
          break;
        }
        default:
          p_ = p;
          ok = step();
          p = p_;
          break;
      }
      if (PTREAD_UNLIKELY(!ok)) return failed_run();
      // Protocols 1 to 3 memoize nearly every value right after making it: BINPUT or
      // LONG_BINPUT is run here, without going round the dispatch (not after an opcode
      // that left a frame: the dispatch looks at that first).
      if (p < guard && (*p == 'q' || *p == 'r')) {
        op_ptr_ = p;
        if (*p == 'q' && end - p >= 2) {
          ok = memo_put_top(p[1]);
          p += 2;
        } else if (*p == 'r' && end - p >= 5) {
          ok = memo_put_top(load_u32(p + 1));
          p += 5;
        } else {
          continue;  // truncated: the dispatch reports it
        }
        if (PTREAD_UNLIKELY(!ok)) return failed_run();
      }
    }
  }

 private:
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
  // detail/number_text.hpp reads them as CPython does, '\r' included).
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

  // ---- memo ----
  PTREAD_ALWAYS_INLINE bool memo_put(uint64_t key, uint32_t v) {
    if (key == memo_.size() && memo_count_ < limits_.max_memo_entries) {  // the usual case: the next key
      memo_.push_back(v);
      ++memo_count_;
      return true;
    }
    if (key < memo_.size()) {
      template_.clear();  // its gets' values may be what this overwrites
      if (PTREAD_UNLIKELY(lazy_scan_ < memo_.size()) && !lazy_.empty() && !make_lazy_entries()) return false;
      if (memo_[static_cast<size_t>(key)] == kNoNode) ++memo_count_;
      memo_[static_cast<size_t>(key)] = v;
    } else if (key < memo_.size() + 4096 && key <= 2 * static_cast<uint64_t>(op_ptr_ - begin_) + 4096) {
      // A short gap: filled. (The dense memo stays within twice the pickle read so far, so
      // gaps cannot make a few bytes of pickle claim megabytes; far keys go to memo_far_.)
      while (memo_.size() < key) memo_.push_back(kNoNode);
      memo_.push_back(v);
      ++memo_count_;
    } else {
      auto r = memo_far_.emplace(key, v);
      if (r.second) ++memo_count_; else r.first->second = v;
    }
    if (memo_count_ > limits_.max_memo_entries) {
      return fail(ErrorCode::limit_exceeded, "more memo entries than Limits::max_memo_entries");
    }
    return true;
  }
  PTREAD_ALWAYS_INLINE bool memo_get(uint64_t key) {
    uint32_t v = kNoNode;
    if (key < memo_.size()) {
      v = memo_[static_cast<size_t>(key)];
    } else if (!memo_far_.empty()) {
      auto it = memo_far_.find(key);
      if (it != memo_far_.end()) v = it->second;
    }
    if (PTREAD_UNLIKELY(v >= kLazyBit)) {
      if (v == kNoNode) return fail(ErrorCode::pickle_malformed, "memo key " + std::to_string(key) + " was never stored");
      if (!materialize(v, &v)) return false;
    }
    return push(v);
  }
  PTREAD_ALWAYS_INLINE bool memo_put_top(uint64_t key) {
    uint32_t v = 0;
    if (!top(&v)) return false;
    if (PTREAD_UNLIKELY(v >= kLazyBit)) return fail(ErrorCode::limit_exceeded, "more than 2^31 values in one pickle");
    return memo_put(key, v);
  }

  // ---- torch's tensor runs (TensorRun) ----
  // A memo entry whose value a run did not make: kLazyBit | run << 3 | what. Node ids stay
  // below kLazyBit (memo_put_top refuses more), kNoNode is no lazy entry.
  static constexpr uint32_t kLazyBit = 0x80000000u;
  static constexpr size_t kMaxLazy = (size_t{1} << 28) - 1;
  // (What a lazy entry holds: a RunValue, run_template.hpp.)
  // Where a run with lazy entries was read. Its lazy entries are made as the opcodes would
  // have made them by reading the run again (read_run with RunReader<true>), with the memo
  // as the run left it: before any memo entry is overwritten (which torch never does),
  // every lazy entry is made (make_lazy_entries). 16 bytes a run, where a copy of what the
  // run read took 56 (100,000 tensors: 1.6 MB of memory instead of 5.6).
  struct LazyRun {
    const uint8_t* at;  // the run's opcodes, after MARK MARK
    size_t before;      // the memo's size before the run: its puts were the next keys
  };

  // Reads the opcodes of a TensorRun (everything but the callable). Its memo puts are
  // written as they come, when they append to the memo (as torch's always do): lazy values
  // as kLazyBit | run << 3 | what; dropped again if the run is not taken. Each read returns
  // false at anything else.
  // Bounds: a run is tried only with kSlack bytes of pickle left, and again after each
  // text; all else a run reads is at most 272 bytes (MARK MARK, four gets and their puts,
  // ints of at most 10 bytes, two tuples of at most kRunRank ints), so reads between texts
  // need no check.
  // Replay: the same opcodes read again for a lazy entry (materialize); puts then write
  // nothing (their keys are before, before + 1 ...) and a text with a put is the node the
  // run stored.
  static constexpr size_t kSlack = 320;
  template <bool Replay>
  struct RunReader {
    const uint8_t* q;
    const uint8_t* end;
    SegmentedVector<uint32_t>& memo;
    size_t& count;         // memo_count_
    const size_t max;      // Limits::max_memo_entries
    const size_t before;   // the memo's size before the run: later keys are the run's own
    const uint32_t lazy;   // kLazyBit | the run's index << 3
    bool any_lazy = false;
    size_t puts = 0;       // Replay: the puts read so far
    int64_t dims[2][TensorRun::kRunRank];
    uint32_t ranks[2] = {0, 0};

    RunReader(const uint8_t* from, const uint8_t* to, SegmentedVector<uint32_t>& m, size_t& c, size_t limit, uint32_t run,
              size_t memo_before)
        : q(from), end(to), memo(m), count(c), max(limit), before(memo_before), lazy(kLazyBit | run << 3) {}
    PTREAD_ALWAYS_INLINE bool is(uint8_t op) const { return *q == op; }
    PTREAD_ALWAYS_INLINE bool op(uint8_t o) {  // the opcode o
      if (*q != o) return false;
      ++q;
      return true;
    }
    // A memo get of an entry made before the run: its value (a node, or a lazy value).
    PTREAD_ALWAYS_INLINE bool get_entry(uint32_t* out) {
      uint64_t key;
      if (*q == 'h') {
        key = q[1];
        q += 2;
      } else if (*q == 'j') {
        key = load_u32(q + 1);
        q += 5;
      } else {
        return false;
      }
      if (key >= before) return false;
      *out = memo[static_cast<size_t>(key)];
      return true;
    }
    // A memo get of a value made before the run.
    PTREAD_ALWAYS_INLINE bool get(uint32_t* out) { return get_entry(out) && *out < kLazyBit; }
    // BINUNICODE / SHORT_BINUNICODE text: valid UTF-8, with kSlack bytes after it.
    PTREAD_ALWAYS_INLINE bool text(std::string_view* out) {
      size_t len;
      if (*q == 0x8c) {
        len = q[1];
        q += 2;
      } else if (*q == 'X') {
        len = load_u32(q + 1);
        q += 5;
      } else {
        return false;
      }
      if (static_cast<size_t>(end - q) < len || static_cast<size_t>(end - q) - len < kSlack || !pickle_text_ok(q, len, end)) {
        return false;
      }
      *out = std::string_view(reinterpret_cast<const char*>(q), len);
      q += len;
      return true;
    }
    // An optional memo put of the value just read: appended (v), else the run is refused.
    PTREAD_ALWAYS_INLINE bool put(uint32_t v) {
      if constexpr (Replay) {
        static_cast<void>(v);
        if (*q == 'q') {
          q += 2;
        } else if (*q == 'r') {
          q += 5;
        } else if (*q == 0x94) {
          ++q;
        } else {
          return true;
        }
        ++puts;
        return true;
      }
      uint64_t key;
      if (*q == 'q') {
        key = q[1];
        q += 2;
      } else if (*q == 'r') {
        key = load_u32(q + 1);
        q += 5;
      } else if (*q == 0x94) {
        key = count;
        ++q;
      } else {
        return true;
      }
      if (key != memo.size() || count >= max) return false;
      memo.push_back(v);
      ++count;
      return true;
    }
    // No memo put follows (ints, None, bools, the storage are never memoized by torch).
    PTREAD_ALWAYS_INLINE bool no_put() const { return *q != 'q' && *q != 'r' && *q != 0x94; }
    // put() of a value the run does not make: its lazy memo entry.
    PTREAD_ALWAYS_INLINE bool put_lazy(RunValue what) {
      if (no_put()) return true;
      any_lazy = true;
      return put(lazy | what);
    }
    // Replay: the node the run's next put stored.
    uint32_t stored() const { return memo[before + puts]; }
    // BININT1, BININT2, BININT, or LONG1 of at most 8 bytes (run_int), with no put after it.
    PTREAD_ALWAYS_INLINE bool integer(int64_t* out) {
      const size_t n = run_int(q, out);
      q += n;
      return n != 0 && no_put();
    }
    // A memo get, or BINUNICODE / SHORT_BINUNICODE text (valid UTF-8, with kSlack bytes after
    // it) made into a node of g; then its put.
    PTREAD_ALWAYS_INLINE bool get_or_text(Graph& g, uint32_t* node) {
      if (*q == 'h' || *q == 'j') return get(node) && put(*node);
      std::string_view t;
      if (!text(&t)) return false;
      *node = Replay && !no_put() ? stored() : g.add_text(ValueKind::string, t);
      return put(*node);
    }
    // The storage key: a memo get of a node (r->key), of another run's key (its lazy value:
    // key_text from that run, read by key_of), or BINUNICODE / SHORT_BINUNICODE text (as
    // get_or_text) that stays in the pickle: its node is made only if something gets it
    // (kRunKey). Then its put.
    template <class KeyOf>
    PTREAD_ALWAYS_INLINE bool key(TensorRun* r, KeyOf&& key_of) {
      if (*q == 'h' || *q == 'j') {
        uint32_t v;
        if (!get_entry(&v)) return false;
        if (v < kLazyBit) {
          r->key = v;
        } else if (v != kNoNode && (v & 7) == kRunKey) {
          r->key = kNoNode;
          r->key_lazy = v;
          r->key_text = key_of(v);
        } else {
          return false;
        }
        return put(v);
      }
      if (!text(&r->key_text)) return false;
      r->key = kNoNode;
      r->key_lazy = lazy | kRunKey;
      return put_lazy(kRunKey);
    }
    // Size (k = 0) or stride (k = 1): EMPTY_TUPLE, ints TUPLE1-3, or MARK ints TUPLE; then
    // its put (the empty tuple is one node, given as empty).
    PTREAD_ALWAYS_INLINE bool tuple(int k, uint32_t empty) {
      if (*q == ')') {
        ++q;
        return put(empty);
      }
      const bool marked = *q == '(';
      if (marked) ++q;
      uint32_t n = 0;
      while (*q == 'K' || *q == 'M' || *q == 'J' || *q == 0x8a) {
        if (n == TensorRun::kRunRank || !integer(&dims[k][n])) return false;
        ++n;
      }
      if (marked ? *q != 't' : (*q < 0x85 || *q > 0x87 || static_cast<uint32_t>(*q - 0x84) != n)) return false;
      ++q;
      ranks[k] = n;
      return n ? put_lazy(k ? kRunStride : kRunSize) : put(empty);
    }
  };

  // At a memo get that pushed the callable of a TensorRun (MARK MARK follows, at p):
  // reads the run and, when the hooks make its tensor, stands for its opcodes (p moves past
  // the final REDUCE). A run that does not match, or that the hooks decline, is left to the
  // dispatch loop with the memo as it was (nodes it made stay, unreferenced). A run of the
  // shape of one read before is read by its template (RunTemplate: the bytes compared, the
  // holes decoded and checked), else opcode by opcode (RunReader).
  PTREAD_NOINLINE void tensor_run(const uint8_t*& p) {
    const uint32_t fn = stack_.back();
    if (g_.kind(fn) != ValueKind::global || static_cast<size_t>(end_ - p) < kSlack || stack_.size() + 32 > max_stack_ ||
        lazy_.size() >= kMaxLazy || limits_.max_container_items < 8) {
      return;
    }
    const uint8_t* const at = p + 2;
    const size_t count_before = memo_count_, before = memo_.size();
    const uint32_t run = static_cast<uint32_t>(lazy_.size());
    TensorRun r;
    r.fn = fn;
    int64_t ints[RunTemplate::kMaxInts];  // by template: numel, offset, sizes, strides
    const int64_t* sizes = ints + RunTemplate::kDims;
    const int64_t* strides = sizes + TensorRun::kRunRank;
    const uint8_t* after = nullptr;       // the run's end, once read
    bool any_lazy = false;
    const bool by_template = !template_.empty() && static_cast<size_t>(end_ - at) >= template_.size() + kSlack &&
                             template_.same_shape(at) && template_run(at, before, run, &r, ints);
    RunReader<false> in(at, end_, memo_, memo_count_, limits_.max_memo_entries, run, before);
    if (by_template) {
      after = at + template_.size();
      any_lazy = template_.puts() != 0;
    } else if (read_run(in, &r)) {
      after = in.q;
      any_lazy = in.any_lazy;
      sizes = in.dims[0];
      strides = in.dims[1];
    }
    uint32_t tensor = kNoNode;
    if (after != nullptr && (p >= frame_end_ || after <= frame_end_)) {  // (one that leaves a frame: opcode by opcode)
      if (r.rank) {
        r.dims = static_cast<int64_t*>(g_.arena.allocate(2 * r.rank * sizeof(int64_t), alignof(int64_t)));
        for (uint32_t d = 0; d < r.rank; ++d) {
          r.dims[d] = sizes[d];
          r.dims[r.rank + d] = strides[d];
        }
      }
      tensor = hooks_.tensor_run(g_, r);
    }
    if (tensor == kNoNode) {  // not taken: the memo as it was
      memo_.truncate(before);
      memo_count_ = count_before;  // (lazy_scan_ <= before: a run writes no entry below it)
      return;
    }
    if (any_lazy) lazy_.push_back(LazyRun{at, before});
    stack_.pop_back();
    stack_.push_back(tensor);  // where fn was: cannot fail
    if (by_template) {
      ++template_runs_;
      if (++template_streak_ >= 2) template_good_ = true;
    } else {
      template_streak_ = 0;
      remember_run(at, after, r);
    }
    p = after;
    ++runs_taken_;
    if (reserve_ != nullptr) reserve_->progress(static_cast<size_t>(p - begin_));
  }

  // After a run read in full and taken: a template from it, when there is none or the one
  // in use read two runs in a row since it was made (a checkpoint's runs of one shape, now
  // of another). Where the template in use did not (runs of several shapes in turn: two
  // dtypes, a layer's shapes), templates are made less and less often (after 2, 4 ... 64
  // such runs read in full), so that making them costs little where they serve little. The
  // template's gets' values are this run's: the memo entries below `before` change only by
  // an overwrite, which drops the template.
  void remember_run(const uint8_t* at, const uint8_t* after, const TensorRun& r) {
    if (!template_.empty()) {
      if (template_good_) {
        template_backoff_ = 1;
      } else if (template_wait_ > 0) {
        --template_wait_;
        return;
      } else {
        template_backoff_ = std::min<uint32_t>(template_backoff_ * 2, 64);
        template_wait_ = template_backoff_;
      }
    }
    template_good_ = false;  // (template_streak_ is 0: this run was read in full)
    if (template_.make(at, after, end_)) {
      template_gets_[0] = r.tag;
      template_gets_[1] = r.cls;
      template_gets_[2] = r.location;
      template_gets_[3] = r.hooks_cls;
    }
  }

  // A run at `at` of the template's shape (same_shape, with kSlack bytes after it) read
  // from its holes into r and ints, as read_run would read it: the gets are the template's
  // (the same keys, entries unchanged since), and each hole is checked as the opcode reader
  // checks it: the puts append to the memo, within Limits::max_memo_entries; the key is
  // valid UTF-8; a LONG1 fits. Everything is checked before the memo is written: false
  // leaves it as it was.
  PTREAD_ALWAYS_INLINE bool template_run(const uint8_t* at, size_t before, uint32_t run, TensorRun* r,
                                         int64_t (&ints)[RunTemplate::kMaxInts]) {
    const RunTemplate& t = template_;
    const uint32_t puts = t.puts();
    if (memo_count_ != before || puts > limits_.max_memo_entries - std::min(memo_count_, limits_.max_memo_entries)) {
      return false;  // (MEMOIZE keys follow the count; the limit: the reader reports it)
    }
    const RunTemplate::Put* put = t.puts_begin();
    switch (t.put_width()) {  // the keys: before, before + 1 ...
      case 4:
        for (uint32_t k = 0; k < puts; ++k) {
          if (load_u32(at + put[k].at + 1) != before + k) return false;
        }
        break;
      case 1:
        for (uint32_t k = 0; k < puts; ++k) {
          if (at[put[k].at + 1] != before + k) return false;
        }
        break;
      case 0:
        break;
      default:
        for (uint32_t k = 0; k < puts; ++k) {
          const uint8_t* q = at + put[k].at + 1;
          if (put[k].width == 4 ? load_u32(q) != before + k : put[k].width == 1 && *q != before + k) return false;
        }
    }
    if (!pickle_text_ok(at + t.key_at(), t.key_len(), end_)) return false;
    const RunTemplate::Int* in = t.ints_begin();
    for (uint32_t k = 0; t.ints_k() && k < t.ints(); ++k) ints[in[k].target] = at[in[k].at + 1];
    for (uint32_t k = 0; !t.ints_k() && k < t.ints(); ++k) {
      if (run_int(at + in[k].at, &ints[in[k].target]) == 0) return false;
    }
    const uint32_t lazy = kLazyBit | run << 3;
    const uint32_t* what = t.put_whats();
    if (uint32_t* w = memo_.room(RunTemplate::kMaxPuts + 2)) {  // eight written, `puts` of them kept
      for (size_t k = 0; k < RunTemplate::kMaxPuts + 2; ++k) w[k] = lazy | what[k];
      memo_.add_in_place(puts);
    } else {
      for (uint32_t k = 0; k < puts; ++k) memo_.push_back(lazy | what[k]);
    }
    memo_count_ += puts;
    r->tag = template_gets_[0];
    r->cls = template_gets_[1];
    r->location = template_gets_[2];
    r->hooks_cls = template_gets_[3];
    r->key = kNoNode;
    r->key_text = std::string_view(reinterpret_cast<const char*>(at + t.key_at()), t.key_len());
    r->key_lazy = lazy | kRunKey;
    r->numel = ints[RunTemplate::kNumel];
    r->offset = ints[RunTemplate::kOffset];
    r->rank = t.rank();
    r->pid_none = t.pid_none();
    r->requires_grad = t.requires_grad();
    return true;
  }

  // The opcodes of a TensorRun after MARK MARK, read into r (all but fn and dims, which
  // stay in in.dims).
  template <bool Replay>
  PTREAD_ALWAYS_INLINE bool read_run(RunReader<Replay>& in, TensorRun* r) {
    const uint32_t empty = g_.add_container(ValueKind::tuple);
    auto key_of = [this](uint32_t v) { return run_key_text(v); };
    bool ok = in.get(&r->tag) && in.put(r->tag) && in.get(&r->cls) && in.put(r->cls) && in.key(r, key_of) &&
              in.get_or_text(g_, &r->location) && in.integer(&r->numel);
    if (ok && in.is('N')) {
      r->pid_none = true;
      ++in.q;
      ok = in.no_put();
    }
    ok = ok && in.op('t') && in.put_lazy(kRunPid) && in.op('Q') && in.no_put() && in.integer(&r->offset) &&
         in.tuple(0, empty) && in.tuple(1, empty) && in.ranks[0] == in.ranks[1] && (in.is(0x88) || in.is(0x89));
    if (ok) {
      r->requires_grad = *in.q++ == 0x88;
      ok = in.no_put() && in.get(&r->hooks_cls) && in.put(r->hooks_cls) && in.op(')') && in.op('R') &&
           in.put_lazy(kRunHooks) && in.op('t') && in.put_lazy(kRunArgs) && in.op('R');
    }
    r->rank = in.ranks[0];
    return ok;
  }

  // The key text of the run of lazy value v (kRunKey), which that run read and checked.
  std::string_view run_key_text(uint32_t v) const {
    const uint8_t* q = lazy_[(v & ~kLazyBit) >> 3].at;
    for (int k = 0; k < 2; ++k) {  // the tag and the class: memo gets, each perhaps put
      q += *q == 'h' ? 2 : 5;
      q += *q == 'q' ? 2 : *q == 'r' ? 5 : *q == 0x94 ? 1 : 0;
    }
    if (*q == 0x8c) return std::string_view(reinterpret_cast<const char*>(q + 2), q[1]);
    return std::string_view(reinterpret_cast<const char*>(q + 5), load_u32(q + 1));
  }

  // Before a memo entry is overwritten: every lazy entry not made yet is made, while the
  // memo still holds what its run read and wrote. (Each memo entry is looked at once.)
  PTREAD_NOINLINE bool make_lazy_entries() {
    for (size_t k = lazy_scan_; k < memo_.size(); ++k) {
      const uint32_t v = memo_[k];
      uint32_t node = 0;
      if (v >= kLazyBit && v != kNoNode && !materialize(v, &node)) return false;
    }
    lazy_scan_ = memo_.size();
    return true;
  }

  // The value of lazy memo entry v, made once: later gets see the same node.
  PTREAD_NOINLINE bool materialize(uint32_t v, uint32_t* out) {
    const auto found = made_.find(v);
    if (found != made_.end()) {
      *out = found->second;
      return true;
    }
    const uint32_t run = (v & ~kLazyBit) >> 3;
    const LazyRun lr = lazy_[run];
    RunReader<true> in(lr.at, end_, memo_, memo_count_, limits_.max_memo_entries, run, lr.before);
    TensorRun r;
    if (!read_run(in, &r)) return fail(ErrorCode::pickle_malformed, "internal: a lazy memo entry's run reads differently");
    const uint32_t base = v & ~uint32_t{7};
    uint32_t node = 0;
    switch (static_cast<RunValue>(v & 7)) {
      case kRunKey:
        node = g_.add_text(ValueKind::string, r.key_text);
        break;
      case kRunPid: {
        uint32_t key = r.key;
        if (key == kNoNode && !materialize(r.key_lazy, &key)) return false;
        const uint32_t items[6] = {r.tag, r.cls, key, r.location, g_.add_int(r.numel), kNoneNode};
        node = g_.add_container(ValueKind::tuple, items, r.pid_none ? 6 : 5);
        break;
      }
      case kRunSize: case kRunStride: {
        const int64_t* d = in.dims[(v & 7) == kRunStride ? 1 : 0];
        uint32_t items[TensorRun::kRunRank];
        for (uint32_t k = 0; k < r.rank; ++k) items[k] = g_.add_int(d[k]);
        node = g_.add_container(ValueKind::tuple, items, r.rank);
        break;
      }
      case kRunHooks: {
        auto made = hooks_.call(g_, r.hooks_cls, g_.add_container(ValueKind::tuple));
        if (!made) return fail(with_where(std::move(made).error()));
        node = *made;
        break;
      }
      case kRunArgs: {
        uint32_t pid = 0, size = 0, stride = 0, hooks = 0;
        if (!materialize(base | kRunPid, &pid) || !materialize(base | kRunHooks, &hooks)) return false;
        if (r.rank == 0) {
          size = stride = g_.add_container(ValueKind::tuple);
        } else if (!materialize(base | kRunSize, &size) || !materialize(base | kRunStride, &stride)) {
          return false;
        }
        auto storage = hooks_.persistent_load(g_, pid);
        if (!storage) return fail(with_where(std::move(storage).error()));
        const uint32_t items[6] = {*storage, g_.add_int(r.offset), size, stride, r.requires_grad ? kTrueNode : kFalseNode, hooks};
        node = g_.add_container(ValueKind::tuple, items, 6);
        break;
      }
      default:
        return fail(ErrorCode::pickle_malformed, "internal: bad lazy memo entry");
    }
    made_.emplace(v, node);
    *out = node;
    return true;
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

  bool step();

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
  SegmentedVector<uint32_t> memo_{&pool_};  // node by memo key; kNoNode where none
  std::unordered_map<uint64_t, uint32_t, KeyedHash> memo_far_;  // keys a file chose: KeyedHash
  size_t memo_count_ = 0;
  bool runs_ = true;                // set_tensor_runs
  size_t hashed_from_ = 0;          // g_.hashed made by this run
  size_t runs_taken_ = 0;
  size_t template_runs_ = 0;         // of them, read by template_
  RunTemplate template_;             // of a run read in full (see tensor_run)
  uint32_t template_gets_[4] = {};   // its gets' values: tag, cls, location, hooks_cls
  uint32_t template_streak_ = 0;     // runs read by the template in a row
  bool template_good_ = false;       // it read two in a row since it was made
  uint32_t template_backoff_ = 1, template_wait_ = 0;  // remember_run
  SegmentedVector<LazyRun> lazy_{&pool_};  // per TensorRun with a lazy memo entry
  size_t lazy_scan_ = 0;                     // memo entries below this hold no lazy entry not made
  std::unordered_map<uint32_t, uint32_t> made_;  // lazy entries made since: their node
  Error err_;
  size_t max_stack_;  // limits_.max_stack_depth
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
inline Result<std::string> PickleVM::raw_unicode_escape(std::string_view s) {
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

// The opcodes run() leaves to it: those torch.save writes (protocol 2 and the FRAME and
// MEMOIZE of 4) never come here.
inline bool PickleVM::step() {
  const uint8_t op_ = op();
  switch (op_) {
    case 0x80: {  // PROTO
      if (!need(1)) return truncated();
      const uint8_t v = *p_++;
      if (v > 5) return fail(ErrorCode::pickle_malformed, "unsupported pickle protocol " + std::to_string(v));
      proto_ = v;
      return true;
    }
    case '0': {  // POP: right after a MARK, CPython's unpickler pops the MARK
      size_t m = 0;
      if (!marks_.empty() && marks_.back() == stack_.size()) return pop_mark(&m);  // (no items: within any limit)
      uint32_t v = 0;
      return pop(&v);
    }
    case '1': {
      size_t m = 0;
      if (!pop_mark(&m)) return false;
      drop_from(m);
      return true;
    }
    case '2': { uint32_t v = 0; return top(&v) && push(v); }
    case 0x8a: {  // LONG1
      if (!need(1)) return truncated();
      const uint8_t n = *p_++;
      std::string_view s;
      return take(n, &s) && push_long(s);
    }
    case 0x8b: {  // LONG4
      if (!need(4)) return truncated();
      int32_t n;
      std::memcpy(&n, p_, 4);
      p_ += 4;
      if (n < 0) return fail(ErrorCode::pickle_malformed, "negative LONG4 length");
      std::string_view s;
      return take(static_cast<uint64_t>(n), &s) && push_long(s);
    }
    case 'I': {  // INT, as _pickle.c reads it (detail/number_text.hpp); "00"/"01" are False/True
      std::string_view s;
      if (!line(&s, false)) return false;
      if (s.empty()) return fail(ErrorCode::pickle_malformed, "bad integer text ''");
      int64_t v = 0;
      if (c_strtol_base0(c_string(s), &v)) {
        if (s.size() == 2 && (v == 0 || v == 1)) return push(v ? kTrueNode : kFalseNode);
        return push(g_.add_int(v));
      }
      return push_int_text(s);
    }
    case 'L': {
      std::string_view s;
      if (!line(&s, false)) return false;
      if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
      return push_int_text(s);
    }
    case 'F': {
      std::string_view s;
      if (!line(&s, false)) return false;
      double v = 0;
      switch (python_float_text(c_string(s), &v)) {
        case FloatText::ok: return push(g_.add_float(v));
        case FloatText::too_large:
          return fail(ErrorCode::pickle_malformed, "FLOAT text '" + std::string(s.substr(0, 40)) + "' too large for a float");
        default: return fail(ErrorCode::pickle_malformed, "bad FLOAT text '" + std::string(s.substr(0, 40)) + "'");
      }
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
      std::string_view s;
      if (!line(&s)) return false;
      auto str = python_string_literal(s);
      if (!str) return fail(std::move(str).error());
      return push(g_.add_text(text_kind(op_, *str), *str));
    }
    case 'T': case 'B': {  // 4-byte length: BINSTRING, BINBYTES
      if (!need(4)) return truncated();
      const uint32_t n = u32();
      if (op_ == 'T' && n > 0x7fffffffu) return fail(ErrorCode::pickle_malformed, "negative BINSTRING length");
      std::string_view s;
      if (!take(n, &s)) return false;
      return push(g_.add_text(text_kind(op_, s), s));
    }
    case 'U': case 'C': {  // 1-byte length: SHORT_BINSTRING, SHORT_BINBYTES
      if (!need(1)) return truncated();
      const uint8_t n = *p_++;
      std::string_view s;
      if (!take(n, &s)) return false;
      return push(g_.add_text(text_kind(op_, s), s));
    }
    case 0x8d: case 0x8e: case 0x96: {  // 8-byte length: BINUNICODE8, BINBYTES8, BYTEARRAY8
      if (!need(8)) return truncated();
      uint64_t n = 0;
      for (int k = 7; k >= 0; --k) n = (n << 8) | p_[k];
      p_ += 8;
      std::string_view s;
      if (!take(n, &s)) return false;
      if (op_ == 0x8d && !valid_pickle_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size())) return bad_utf8();
      return push(g_.add_text(op_ == 0x8d ? ValueKind::string : ValueKind::bytes, s));
    }
    case 'V': {
      std::string_view s;
      if (!line(&s)) return false;
      auto str = raw_unicode_escape(s);
      if (!str) return fail(std::move(str).error());
      return push(g_.add_text(ValueKind::string, *str));
    }
    case 0x8f: return push(g_.add_container(ValueKind::set));
    case 'l': return container_from_mark(ValueKind::list);
    case 0x91: return container_from_mark(ValueKind::frozenset);
    case 'd': return container_from_mark(ValueKind::dict);
    case 'a': {
      uint32_t v = 0, target = 0;
      return pop(&v) && top(&target) && append_items(target, &v, 1, false);
    }
    case 'e': case 0x90: return append_from_mark(false);  // APPENDS, ADDITEMS
    case 's': {
      uint32_t kv[2] = {0, 0}, target = 0;
      return pop(&kv[1]) && pop(&kv[0]) && top(&target) && append_items(target, kv, 2, true);
    }
    case 'p': case 'g': {  // PUT, GET: a memo key as Python's int(text, 10)
      std::string_view s;
      if (!line(&s, false)) return false;
      std::string le;
      int64_t key = -1;
      if (s.empty() || python_int(c_string(s), 10, &le) != IntText::ok ||
          !fits_int64(reinterpret_cast<const uint8_t*>(le.data()), le.size(), &key) || key < 0) {
        return fail(ErrorCode::pickle_malformed, std::string(op_ == 'p' ? "bad PUT key '" : "bad GET key '") +
                                                     std::string(s.substr(0, 40)) + "'");
      }
      return op_ == 'p' ? memo_put_top(static_cast<uint64_t>(key)) : memo_get(static_cast<uint64_t>(key));
    }
    case 'c': {  // GLOBAL: module and name are UTF-8 (Python decodes them strictly: no surrogates)
      std::string_view module, name;
      if (!line(&module) || !line(&name)) return false;
      if (module.empty() || name.empty()) return empty_global_name();
      if (!utf8_valid(module) || !utf8_valid(name)) return bad_utf8();
      return push(names_as_read(g_.add_global(module, name)));
    }
    case 0x93: {  // STACK_GLOBAL
      uint32_t name = 0, module = 0;
      if (!pop(&name) || !pop(&module)) return false;
      if (g_.kind(name) != ValueKind::string || g_.kind(module) != ValueKind::string) {
        return fail(ErrorCode::pickle_malformed, "STACK_GLOBAL needs two strings");
      }
      if (g_.text(module).empty() || g_.text(name).empty()) return empty_global_name();
      return push(names_as_read(g_.add_interned_global(g_.text(module), g_.text(name))));
    }
    case 0x92: {  // NEWOBJ_EX: cls, args, kwargs (keyword arguments to __new__ are dropped)
      uint32_t kwargs = 0, args = 0, cls = 0;
      if (!pop(&kwargs) || !pop(&args) || !pop(&cls)) return false;
      if (g_.kind(args) != ValueKind::tuple) return fail(ErrorCode::pickle_malformed, "arguments are not a tuple");
      if (g_.kind(kwargs) != ValueKind::dict) return fail(ErrorCode::pickle_malformed, "keyword arguments are not a dict");
      return call(cls, args, true);
    }
    case 'i': {  // INST module\nname\n (ASCII, as Python decodes them), args from MARK
      std::string_view module, name;
      if (!line(&module) || !line(&name)) return false;
      if (module.empty() || name.empty()) return empty_global_name();
      if (!ascii(module) || !ascii(name)) return fail(ErrorCode::pickle_malformed, "INST names that are not ASCII (Python's unpickler refuses them)");
      size_t m = 0;
      if (!pop_mark(&m)) return false;
      const uint32_t cls = names_as_read(g_.add_global(module, name));
      const uint32_t args = g_.add_container(ValueKind::tuple, items_from(m), count_from(m));
      drop_from(m);
      return call(cls, args);
    }
    case 'o': {  // OBJ: MARK cls args...
      size_t m = 0;
      if (!pop_mark(&m)) return false;
      if (count_from(m) == 0) return fail(ErrorCode::pickle_malformed, "OBJ without a class");
      const uint32_t cls = stack_[m];
      const uint32_t args = g_.add_container(ValueKind::tuple, items_from(m + 1), count_from(m + 1));
      drop_from(m);
      return call(cls, args);
    }
    case 'b': {
      uint32_t state = 0, obj = 0;
      if (!pop(&state) || !top(&obj)) return false;
      Status st = hooks_.build(g_, obj, state);
      if (!st) return fail(with_where(std::move(st).error()));
      return true;
    }
    case 'P': {  // PERSID: a text persistent id
      std::string_view s;
      if (!line(&s)) return false;
      const uint32_t pid = g_.add_text(ValueKind::string, s);
      auto r = hooks_.persistent_load(g_, pid);
      if (!r) return fail(with_where(std::move(r).error()));
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
