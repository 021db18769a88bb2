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
//
// The VM is three layers, each a header: pickle/vm_base.hpp (state, operands, stack,
// values), pickle/tensor_runs.hpp (the memo and torch.save's tensor runs) and this one
// (the public API and the opcode dispatch). pickle/interface.hpp is what it asks of the
// layer above (PickleHooks).
#pragma once

#include "pickle/interface.hpp"
#include "pickle/tensor_runs.hpp"

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

class PickleVM : public TensorRunVM {
 public:
  PickleVM(Graph& g, PickleHooks& hooks, const Limits& limits, std::string where)
      : TensorRunVM(g, hooks, limits, std::move(where)) {}


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
  bool step();

  bool runs_ = true;                // set_tensor_runs
};


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
    case 'I': {  // INT, as _pickle.c reads it (pickle/number_text.hpp); "00"/"01" are False/True
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
