// ptread — writes pickles as Python's pickle.Pickler does at protocol 2 (what torch.save
// uses): the same opcodes, and the memo filled as Python fills it (every global, str,
// non-empty tuple and reduced object is put in the memo, in order; a global or a str met
// again as the same Python object is fetched from it). Callers say which values are "the
// same object"; the bytes then equal Python's for the same object graph.
//
// Only the opcodes torch 1.13's weights_only unpickler knows are used: PROTO, GLOBAL,
// BINPUT/LONG_BINPUT, BINGET/LONG_BINGET, MARK, EMPTY_TUPLE, TUPLE1-3, TUPLE, BINUNICODE,
// BININT1/BININT2/BININT/LONG1, NEWFALSE, BINPERSID, REDUCE, SETITEM(S), EMPTY_DICT, STOP.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ptread {
namespace detail {

class PickleWriter {
 public:
  static constexpr char kMark = '(', kStop = '.', kReduce = 'R', kBinPersId = 'Q', kNewFalse = '\x89',
                        kEmptyTuple = ')', kSetItem = 's', kSetItems = 'u', kEmptyDict = '}';
  static constexpr uint32_t kNoMemo = UINT32_MAX;

  PickleWriter() { out_ += "\x80\x02"; }

  std::string& bytes() noexcept { return out_; }
  void op(char c) { out_ += c; }

  // Puts the value on top of the stack into the memo; returns its index.
  uint32_t memoize() {
    const uint32_t idx = next_memo_++;
    memo_op('q', 'r', idx);  // BINPUT, LONG_BINPUT
    return idx;
  }
  void memo_get(uint32_t idx) { memo_op('h', 'j', idx); }  // BINGET, LONG_BINGET

  // A module-level object (class, function, dtype): GLOBAL the first time, then the memo.
  void global(std::string_view module, std::string_view name) {
    std::string key;
    key.reserve(module.size() + 1 + name.size());
    key.append(module).append(1, '\n').append(name);
    auto it = globals_.find(key);
    if (it != globals_.end()) {
      memo_get(it->second);
      return;
    }
    out_ += 'c';
    out_ += key;
    out_ += '\n';
    globals_.emplace(std::move(key), memoize());
  }

  // A str object (UTF-8 bytes, under 4 GiB). *memo: kNoMemo for a new object, set to its
  // memo index; an index already there fetches the same object again.
  void str(std::string_view s, uint32_t* memo) {
    if (*memo != kNoMemo) {
      memo_get(*memo);
      return;
    }
    out_ += 'X';
    append_u32(static_cast<uint32_t>(s.size()));
    out_ += s;
    *memo = memoize();
  }
  void new_str(std::string_view s) {
    uint32_t memo = kNoMemo;
    str(s, &memo);
  }

  // An int as Python writes it: BININT1, BININT2, BININT, else LONG1.
  void integer(int64_t v) {
    if (v >= 0 && v <= 0xff) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else if (v >= 0 && v <= 0xffff) {
      out_ += 'M';
      out_ += static_cast<char>(v & 0xff);
      out_ += static_cast<char>(v >> 8);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      append_u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {
      // LONG1: the shortest two's complement little-endian form, (bit_length >> 3) + 1 bytes
      const uint64_t u = static_cast<uint64_t>(v);
      const uint64_t magnitude = v < 0 ? ~u : u;
      size_t bits = 0;
      while (bits < 64 && (magnitude >> bits) != 0) ++bits;
      const size_t n = (bits >> 3) + 1;
      out_ += '\x8a';
      out_ += static_cast<char>(n);
      for (size_t k = 0; k < n; ++k) out_ += static_cast<char>(k < 8 ? (u >> (8 * k)) & 0xff : (v < 0 ? 0xff : 0));
    }
  }

  // Closes a tuple of n items (after MARK and the items when n > 3, after the items when
  // n is 1 to 3; EMPTY_TUPLE alone for n == 0, which Python does not memoize).
  void end_tuple(size_t n) {
    if (n == 0) {
      out_ += kEmptyTuple;
      return;
    }
    out_ += n == 1 ? '\x85' : n == 2 ? '\x86' : n == 3 ? '\x87' : 't';
    memoize();
  }
  // A tuple of ints (sizes, strides).
  template <class Ints>
  void int_tuple(const Ints& v) {
    if (v.size() > 3) out_ += kMark;
    for (size_t k = 0; k < v.size(); ++k) integer(static_cast<int64_t>(v[k]));
    end_tuple(v.size());
  }

 private:
  // The one-byte-index form of a memo opcode below 256, else the four-byte one.
  void memo_op(char one_byte, char four_bytes, uint32_t idx) {
    if (idx < 256) {
      out_ += one_byte;
      out_ += static_cast<char>(idx);
    } else {
      out_ += four_bytes;
      append_u32(idx);
    }
  }
  void append_u32(uint32_t v) {
    for (int k = 0; k < 4; ++k) out_ += static_cast<char>((v >> (8 * k)) & 0xff);
  }

  std::string out_;
  uint32_t next_memo_ = 0;
  std::unordered_map<std::string, uint32_t> globals_;
};

}  // namespace detail
}  // namespace ptread
