// ptread — a small open-addressing hash index from strings to positions.
//
// StringIndex maps a string to a uint32 position in a table the caller owns (zip entries,
// storages, named tensors): the keys are not stored, a `key_at(position)` function gives
// them back. Slots are 8 bytes (32 bits of hash, the position), linear probing, at most
// half full.
#pragma once

#include "arena.hpp"

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

  size_t size() const noexcept { return size_; }

  // Room for n keys without rehashing.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > slots_.size()) rehash(cap);
  }

  // The position stored under key, or npos.
  template <class KeyAt>
  uint32_t find(std::string_view key, const KeyAt& key_at) const {
    if (size_ == 0) return npos;
    const uint32_t h = static_cast<uint32_t>(hash_string(key));
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.pos == npos) return npos;
      if (s.hash == h && key_at(s.pos) == key) return s.pos;
    }
  }

  // Stores pos under key unless the key is present; returns the position now under key.
  template <class KeyAt>
  uint32_t insert(std::string_view key, uint32_t pos, const KeyAt& key_at) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    return insert_hashed(key, static_cast<uint32_t>(hash_string(key)), pos, key_at);
  }

  // Inserts positions 0 .. n-1 under key_at(position), in order (the first of equal keys
  // wins). The slots are random accesses into a table larger than the caches: they are
  // prefetched a few keys ahead.
  template <class KeyAt>
  void insert_all(uint32_t n, const KeyAt& key_at) {
    reserve(size_ + n);
    constexpr uint32_t kAhead = 16;
    uint32_t ahead[kAhead];
    for (uint64_t i = 0; i < uint64_t{n} + kAhead; ++i) {
      const uint32_t slot = static_cast<uint32_t>(i % kAhead);
      if (i >= kAhead) {  // key i - kAhead, whose slot was prefetched
        const uint32_t j = static_cast<uint32_t>(i - kAhead);
        insert_hashed(key_at(j), ahead[slot], j, key_at);
      }
      if (i < n) {
        const uint32_t h = static_cast<uint32_t>(hash_string(key_at(static_cast<uint32_t>(i))));
        ahead[slot] = h;
        __builtin_prefetch(&slots_[h & mask_], 1);
      }
    }
  }

 private:
  struct Slot {
    uint32_t hash;
    uint32_t pos;
  };

  template <class KeyAt>
  uint32_t insert_hashed(std::string_view key, uint32_t h, uint32_t pos, const KeyAt& key_at) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.pos == npos) {
        s.hash = h;
        s.pos = pos;
        ++size_;
        return pos;
      }
      if (s.hash == h && key_at(s.pos) == key) return s.pos;
    }
  }

  void rehash(size_t cap) {
    std::vector<Slot> old;
    reserve_huge(old, cap);
    old.resize(cap, Slot{0, npos});
    old.swap(slots_);
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (s.pos == npos) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].pos != npos) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

}  // namespace detail
}  // namespace ptread
