// ptread — the template of one tensor's opcodes (a TensorRun, see pickle.hpp), made from a
// run the VM read and took, to read the next runs of the same shape by comparing bytes.
//
// A state dict of many tensors of one dtype and shape (features per item, shards of a
// table, a layer's tensors repeated) pickles each tensor as the same opcodes: the same
// memo gets, the same int opcodes, the same tuple opcodes. Only some bytes differ from one
// tensor to the next: the storage key's text, the keys of the memo puts, and the values of
// the ints (numel, offset, sizes, strides). The template keeps where those "holes" are;
// a later run whose other bytes equal the template's (a few 8-byte compares) is then read
// by decoding its holes alone. The VM checks the holes exactly as its opcode reader checks
// them (the put keys, the text's UTF-8, a LONG1's size), and its gets (the same keys) give
// the values they gave the run the template was made from while no memo entry is
// overwritten, so a run is taken this way only if the reader would take it, with the same
// values (tests/unit/run_template.cpp compares the two on runs that differ in every hole,
// and on damaged ones).
#pragma once

#include "../config.hpp"
#include "value_graph.hpp"  // fits_int64, load_u32

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ptread {
namespace detail {

// The values of a run that its memo puts may hold, made only if a get asks for them (the
// lazy memo entries of pickle.hpp).
enum RunValue : uint8_t { kRunPid = 1, kRunSize, kRunStride, kRunHooks, kRunArgs, kRunKey };

// The most dimensions a run reads in one go (more: opcode by opcode).
inline constexpr uint32_t kRunMaxRank = 8;

// An int of a TensorRun at q (its opcode, with 10 bytes readable): BININT1, BININT2, BININT,
// or LONG1 of at most 8 bytes that fits 64 bits. The bytes it takes; 0 for anything else.
// (The opcode reader and the template read ints through this one.)
PTREAD_ALWAYS_INLINE size_t run_int(const uint8_t* q, int64_t* out) noexcept {
  switch (*q) {
    case 'K': *out = q[1]; return 2;
    case 'M': *out = q[1] | (q[2] << 8); return 3;
    case 'J': {
      const uint32_t u = load_u32(q + 1);
      int32_t v;
      std::memcpy(&v, &u, 4);
      *out = v;
      return 5;
    }
    case 0x8a: {
      const size_t n = q[1];
      return n <= 8 && fits_int64(q + 2, n, out) ? 2 + n : 0;
    }
    default: return 0;
  }
}

class RunTemplate {
 public:
  static constexpr size_t kMaxBytes = 256;  // longer runs get no template
  static constexpr size_t kMaxPuts = 6;      // the run's own values, each put at most once
  static constexpr size_t kMaxInts = 2 + 2 * kRunMaxRank;
  // Where an int goes: kNumel, kOffset, then kDims + d (size d) and kDims + kRunMaxRank + d
  // (stride d): an index into an array of kMaxInts.
  enum Target : uint8_t { kNumel = 0, kOffset = 1, kDims = 2 };
  struct Put {
    uint16_t at;    // the opcode's offset in the run
    uint8_t width;  // of its key: 1 (BINPUT), 4 (LONG_BINPUT), 0 (MEMOIZE: the memo's count)
    uint8_t what;   // the RunValue it holds
  };
  struct Int {
    uint16_t at;    // the opcode's offset in the run (run_int reads it)
    uint8_t target;
  };

  // Whether a template is kept.
  bool empty() const noexcept { return size_ == 0; }
  size_t size() const noexcept { return size_; }
  void clear() noexcept { size_ = 0; }

  // Makes the template of the run [at, stop) (after MARK MARK), one the VM read and took,
  // in a pickle that ends at end. False (and no template) when the run is not of the kind
  // a template reads: the tag, the storage class, the location and the hooks class as
  // memo gets without puts, the storage key as text, puts only of the run's own values, at
  // most kMaxBytes, with 8 bytes of pickle after it (same_shape reads whole words).
  bool make(const uint8_t* at, const uint8_t* stop, const uint8_t* end) noexcept {
    size_ = 0;
    const size_t n = static_cast<size_t>(stop - at);
    if (n == 0 || n > kMaxBytes || end - stop < 8) return false;
    uint8_t keep[kMaxBytes + 8];
    std::memset(keep, 0xff, n);
    std::memset(keep + n, 0, sizeof keep - n);
    ints_ = 0;
    ints_k_ = true;
    gets_ = 0;
    puts_ = 0;
    std::memset(put_what_, 0, sizeof put_what_);
    const uint8_t* q = at;
    auto left = [&](size_t k) { return static_cast<size_t>(stop - q) >= k; };
    auto hide = [&](const uint8_t* p, size_t k) { std::memset(keep + (p - at), 0, k); };
    auto add_put = [&](uint8_t width, RunValue what) {
      if (puts_ == kMaxPuts) return false;
      put_what_[puts_] = what;
      put_[puts_++] = Put{static_cast<uint16_t>(q - at), width, what};
      return true;
    };
    auto add_int = [&](uint8_t target) {
      if (ints_ == kMaxInts) return false;
      int_[ints_++] = Int{static_cast<uint16_t>(q - at), target};
      ints_k_ = ints_k_ && *q == 'K';
      return true;
    };
    auto op = [&](uint8_t o) {
      if (!left(1) || *q != o) return false;
      ++q;
      return true;
    };
    auto no_put = [&] { return !left(1) || (*q != 'q' && *q != 'r' && *q != 0x94); };
    auto read_get = [&] {  // a memo get (its key bytes stay compared), with no put after it
      if (left(2) && *q == 'h') {
        q += 2;
      } else if (left(5) && *q == 'j') {
        q += 5;
      } else {
        return false;
      }
      ++gets_;
      return no_put();
    };
    auto read_put = [&](RunValue what) {  // an optional put of one of the run's values
      if (!left(1)) return true;
      if (*q == 'q' && left(2)) {
        if (!add_put(1, what)) return false;
        hide(q + 1, 1);
        q += 2;
      } else if (*q == 'r' && left(5)) {
        if (!add_put(4, what)) return false;
        hide(q + 1, 4);
        q += 5;
      } else if (*q == 0x94) {
        if (!add_put(0, what)) return false;
        ++q;
      }
      return true;
    };
    auto read_int = [&](uint8_t target) {  // its value bytes hidden (LONG1: not its length)
      int64_t v;
      const size_t k = left(2) ? run_int(q, &v) : 0;  // (reads at most 10 bytes: 8 after stop)
      if (k == 0 || !left(k) || !add_int(target)) return false;
      const size_t from = *q == 0x8a ? 2 : 1;
      hide(q + from, k - from);
      q += k;
      return no_put();
    };
    auto is_int = [&] { return left(1) && (*q == 'K' || *q == 'M' || *q == 'J' || *q == 0x8a); };

    if (!read_get() || !read_get()) return false;  // the tag and the storage class
    size_t len = 0;                      // the storage key: text
    if (left(2) && *q == 0x8c) {
      len = q[1];
      q += 2;
    } else if (left(5) && *q == 'X') {
      len = static_cast<size_t>(q[1]) | (static_cast<size_t>(q[2]) << 8) | (static_cast<size_t>(q[3]) << 16) |
            (static_cast<size_t>(q[4]) << 24);
      q += 5;
    } else {
      return false;
    }
    if (!left(len)) return false;
    key_at_ = static_cast<uint16_t>(q - at);
    key_len_ = static_cast<uint16_t>(len);
    hide(q, len);
    q += len;
    if (!read_put(kRunKey) || !read_get() || !read_int(kNumel)) return false;  // the location: a get
    pid_none_ = op('N');
    if (!no_put() || !op('t') || !read_put(kRunPid) || !op('Q') || !no_put() || !read_int(kOffset)) return false;
    uint32_t ranks[2] = {0, 0};
    for (uint32_t k = 0; k < 2; ++k) {
      if (op(')')) {
        if (!no_put()) return false;
        continue;
      }
      const bool marked = op('(');
      uint32_t d = 0;
      while (is_int()) {
        if (d == kRunMaxRank || !read_int(static_cast<uint8_t>(kDims + k * kRunMaxRank + d))) return false;
        ++d;
      }
      if (marked ? !op('t') : (d == 0 || d > 3 || !op(static_cast<uint8_t>(0x84 + d)))) return false;
      if (d == 0 ? !no_put() : !read_put(k ? kRunStride : kRunSize)) return false;
      ranks[k] = d;
    }
    if (ranks[0] != ranks[1]) return false;
    rank_ = ranks[0];
    if (op(0x88)) {
      requires_grad_ = true;
    } else if (op(0x89)) {
      requires_grad_ = false;
    } else {
      return false;
    }
    if (!no_put() || !read_get() || !op(')') || !op('R') || !read_put(kRunHooks) || !op('t') || !read_put(kRunArgs) || !op('R') ||
        q != stop || gets_ != 4) {
      return false;
    }
    put_width_ = puts_ != 0 ? put_[0].width : 0;
    for (uint32_t k = 1; k < puts_; ++k) {
      if (put_[k].width != put_width_) put_width_ = kMixedWidths;
    }
    words_ = (n + 7) / 8;
    for (size_t w = 0; w < words_; ++w) std::memcpy(&mask_[w], keep + 8 * w, 8);
    from_ = at;
    size_ = static_cast<uint32_t>(n);
    return true;
  }

  // Whether the bytes at q (a run after MARK MARK, with at least size() + slack bytes of
  // pickle from q) equal the template's everywhere but in its holes.
  PTREAD_ALWAYS_INLINE bool same_shape(const uint8_t* q) const noexcept {
    uint64_t diff = 0;
    for (size_t w = 0; w < words_; ++w) {
      uint64_t a, b;
      std::memcpy(&a, q + 8 * w, 8);
      std::memcpy(&b, from_ + 8 * w, 8);
      diff |= (a ^ b) & mask_[w];
    }
    return diff == 0;
  }

  // The template's parts: its puts and ints in the order of the run's bytes, the storage
  // key's text, the rest. (Its four gets, the tag, the storage class, the location and the
  // hooks class, are compared bytes.)
  const Put* puts_begin() const noexcept { return put_; }
  // The puts' RunValues, 0 after the last (kMaxPuts + 2 of them: two whole vectors of 4).
  const uint32_t* put_whats() const noexcept { return put_what_; }
  // The width of every put key (1, 4; 0: MEMOIZE), or kMixedWidths.
  static constexpr uint8_t kMixedWidths = 0xff;
  uint8_t put_width() const noexcept { return put_width_; }
  // Whether every int is a BININT1 (K): one byte.
  bool ints_k() const noexcept { return ints_k_; }
  uint32_t puts() const noexcept { return puts_; }
  const Int* ints_begin() const noexcept { return int_; }
  uint32_t ints() const noexcept { return ints_; }
  size_t key_at() const noexcept { return key_at_; }
  size_t key_len() const noexcept { return key_len_; }
  uint32_t rank() const noexcept { return rank_; }
  bool pid_none() const noexcept { return pid_none_; }
  bool requires_grad() const noexcept { return requires_grad_; }

 private:
  const uint8_t* from_ = nullptr;  // the run it was made from (in the pickle, which outlives it)
  uint32_t size_ = 0;              // its bytes; 0: no template
  size_t words_ = 0;
  uint64_t mask_[kMaxBytes / 8 + 1] = {};  // per 8 bytes: 0xff where bytes must be equal
  Put put_[kMaxPuts] = {};
  uint32_t put_what_[kMaxPuts + 2] = {};
  uint8_t put_width_ = 0;
  bool ints_k_ = false;
  Int int_[kMaxInts] = {};
  uint32_t puts_ = 0, ints_ = 0;
  uint32_t gets_ = 0;
  uint16_t key_at_ = 0, key_len_ = 0;
  uint32_t rank_ = 0;
  bool pid_none_ = false, requires_grad_ = false;
};

}  // namespace detail
}  // namespace ptread
