// ptread — a small open-addressing hash index from strings to positions.
//
// StringIndex maps a string to a uint32 position in a table the caller owns (zip entries,
// storages, named tensors): the keys are not stored, a `key_at(position)` function gives
// them back. Slots are 8 bytes (32 bits of hash, the position), linear probing, at most
// half full.
#pragma once

#include "arena.hpp"
#include "keyed_hash.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace ptread {
namespace detail {

inline uint64_t hash_mix(uint64_t h) noexcept {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

// MurmurHash3's finalizer: a bijection of 64-bit words.
inline uint64_t fmix64(uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

inline uint64_t hash_string(std::string_view s) noexcept {
  constexpr uint64_t m = 0x9e3779b97f4a7c15ull;
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x243f6a8885a308d3ull ^ (static_cast<uint64_t>(n) * m);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * m;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {  // 1 to 7 bytes, read without a variable-length copy
    uint64_t w;
    if (n >= 4) {
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      w = lo | (static_cast<uint64_t>(hi) << 32);
    } else {
      w = static_cast<uint64_t>(static_cast<unsigned char>(p[0])) |
          (static_cast<uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8) |
          (static_cast<uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16);
    }
    h = (h ^ w) * m;
    h ^= h >> 29;
  }
  return hash_mix(h);
}

// The number a canonical decimal text spells ("0", "17"; not "017", "+1" or "1e3"),
// when it is below 10^9.
PTREAD_ALWAYS_INLINE bool decimal_key(std::string_view s, uint32_t* out) noexcept {
  const size_t n = s.size();
  if (n - 1 > 8 || (s[0] == '0' && n > 1)) return false;  // 1 to 9 digits (n - 1 wraps for 0)
  uint32_t v = 0;
  for (size_t k = 0; k < n; ++k) {
    const uint32_t d = static_cast<uint32_t>(static_cast<unsigned char>(s[k])) - uint32_t{'0'};
    if (d > 9) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

class StringIndex {
 public:
  static constexpr uint32_t npos = 0xffffffffu;
  // No key lies more than this many slots past its home slot, so a find looks no further.
  // Keys a file crafted to share their hashes' low bits (hash_string has a fixed key) would
  // otherwise make one run of slots that every insert walks: 20,000 such names took 1.6 s
  // to index, 200,000 minutes. The first insert that would go past it indexes all the keys
  // again under keyed_hash (SipHash, a key per process), which no file can aim at. (Random
  // keys at this load go past 128 slots with a chance of about 1 in 10^10 per key.)
  static constexpr size_t kMaxDistance = 128;

  // limit: kMaxDistance (tests lower it to reach the keyed hash's own bound).
  explicit StringIndex(size_t limit = kMaxDistance) noexcept : limit_(limit) {}

  size_t size() const noexcept { return size_; }
  // The keys hash with keyed_hash (a flood was seen).
  bool keyed() const noexcept { return keyed_; }
  // The farthest any key lies past its home slot.
  size_t max_distance() const noexcept {
    size_t most = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].pos != npos) most = std::max(most, (i - (slots_[i].hash & mask_)) & mask_);
    }
    return most;
  }

  // Room for n keys without rehashing.
  template <class KeyAt>
  void reserve(size_t n, const KeyAt& key_at) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > slots_.size()) rebuild(cap, false, key_at);
  }

  // The position stored under key, or npos.
  template <class KeyAt>
  uint32_t find(std::string_view key, const KeyAt& key_at) const {
    if (size_ == 0) return npos;
    const uint32_t h = hash_of(key);
    size_t i = h & mask_;
    for (size_t d = 0; d <= limit_; ++d, i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.pos == npos) return npos;
      if (s.hash == h && key_at(s.pos) == key) return s.pos;
    }
    return npos;  // further than any key lies
  }

  // Stores pos under key unless the key is present; returns the position now under key.
  template <class KeyAt>
  uint32_t insert(std::string_view key, uint32_t pos, const KeyAt& key_at) {
    if (2 * (size_ + 1) > slots_.size()) rebuild(slots_.empty() ? 16 : slots_.size() * 2, false, key_at);
    return insert_hashed(key, hash_of(key), pos, key_at);
  }

  // Inserts positions 0 .. n-1 under key_at(position), in order (the first of equal keys
  // wins). The slots are random accesses into a table larger than the caches: they are
  // prefetched a few keys ahead.
  template <class KeyAt>
  void insert_all(uint32_t n, const KeyAt& key_at) {
    reserve(size_ + n, key_at);
    constexpr uint32_t kAhead = 16;
    uint32_t ahead[kAhead];
    const bool was_keyed = keyed_;
    for (uint64_t i = 0; i < uint64_t{n} + kAhead; ++i) {
      const uint32_t slot = static_cast<uint32_t>(i % kAhead);
      if (i >= kAhead) {  // key i - kAhead, whose slot was prefetched
        const uint32_t j = static_cast<uint32_t>(i - kAhead);
        insert_hashed(key_at(j), ahead[slot], j, key_at);
        if (PTREAD_UNLIKELY(keyed_ != was_keyed)) {  // indexed again: the hashes ahead are stale
          for (uint32_t r = j + 1; r < n; ++r) insert(key_at(r), r, key_at);
          return;
        }
      }
      if (i < n) {
        ahead[slot] = hash_of(key_at(static_cast<uint32_t>(i)));
        __builtin_prefetch(&slots_[ahead[slot] & mask_], 1);
      }
    }
  }

 private:
  struct Slot {
    uint32_t hash;
    uint32_t pos;
  };

  uint32_t hash_of(std::string_view key) const noexcept {
    return static_cast<uint32_t>(keyed_ ? keyed_hash(key) : hash_string(key));
  }

  template <class KeyAt>
  uint32_t insert_hashed(std::string_view key, uint32_t h, uint32_t pos, const KeyAt& key_at) {
    size_t i = h & mask_;
    for (size_t d = 0; d <= limit_; ++d, i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.pos == npos) {
        s.hash = h;
        s.pos = pos;
        ++size_;
        return pos;
      }
      if (s.hash == h && key_at(s.pos) == key) return s.pos;
    }
    // Absent (every key lies within limit_ of its home), and no room within it: a flood.
    if (!keyed_) {
      rebuild(slots_.size(), true, key_at);
    } else {
      limit_ = SIZE_MAX;  // even under the keyed hash (never seen: the key is secret)
    }
    return insert_hashed(key, hash_of(key), pos, key_at);
  }

  // The keys in a table of cap slots; rekey: under keyed_hash. A key that would lie past
  // limit_ makes it index under keyed_hash; one past it even so (never seen: the key is
  // secret), with no limit.
  template <class KeyAt>
  void rebuild(size_t cap, bool rekey, const KeyAt& key_at) {
    std::vector<Slot> old;
    old.swap(slots_);
    if (rekey) keyed_ = true;
    for (;;) {
      slots_.clear();
      reserve_huge(slots_, cap);
      slots_.resize(cap, Slot{0, npos});
      mask_ = cap - 1;
      bool placed = true;
      for (Slot s : old) {
        if (s.pos == npos) continue;
        if (rekey) s.hash = hash_of(key_at(s.pos));
        if (!place(s)) {
          placed = false;
          break;
        }
      }
      if (placed) return;
      if (!keyed_) {
        keyed_ = rekey = true;
      } else {
        limit_ = SIZE_MAX;
      }
    }
  }
  bool place(const Slot& s) noexcept {
    size_t i = s.hash & mask_;
    for (size_t d = 0; d <= limit_; ++d, i = (i + 1) & mask_) {
      if (slots_[i].pos == npos) {
        slots_[i] = s;
        return true;
      }
    }
    return false;
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  size_t limit_;  // how far a key may lie from its home slot; SIZE_MAX: any distance
  bool keyed_ = false;
};

}  // namespace detail
}  // namespace ptread
