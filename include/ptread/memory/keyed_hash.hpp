// ptread — a keyed hash for tables whose keys come from a file.
//
// The fast hashes of the hot tables (hash_string, DictKeys' mixes) have a fixed key: a file
// can be crafted so that thousands of its names fall into one run of slots, and every
// insert then walks that run (quadratic: 20,000 such names took seconds, 200,000 minutes).
// Those tables bound how far a key may lie from its slot and, past that bound, index again
// with this hash: SipHash-1-3 under a key drawn once per process (Rust's and Python's
// answer to hash flooding), which a file cannot target. Tables of keys that never matter to
// speed (far memo keys, tar keys, TorchScript class names) use it from the start through
// KeyedHash.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ptread {
namespace detail {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;
};

// SipHash-c-d of n bytes under key (c compression and d finalization rounds).
template <int C = 1, int D = 3>
inline uint64_t siphash(const void* data, size_t n, const SipKey& key) noexcept {
  uint64_t v0 = key.k0 ^ 0x736f6d6570736575ull, v1 = key.k1 ^ 0x646f72616e646f6dull;
  uint64_t v2 = key.k0 ^ 0x6c7967656e657261ull, v3 = key.k1 ^ 0x7465646279746573ull;
  auto rotl = [](uint64_t x, int b) { return (x << b) | (x >> (64 - b)); };
  auto sip_round = [&] {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  auto word = [&](uint64_t m) {
    v3 ^= m;
    for (int i = 0; i < C; ++i) sip_round();
    v0 ^= m;
  };
  const unsigned char* p = static_cast<const unsigned char*>(data);
  size_t left = n;
  for (; left >= 8; left -= 8, p += 8) {
    uint64_t m = 0;
    for (int k = 0; k < 8; ++k) m |= static_cast<uint64_t>(p[k]) << (8 * k);  // little-endian on any host
    word(m);
  }
  uint64_t last = static_cast<uint64_t>(n) << 56;
  for (size_t k = 0; k < left; ++k) last |= static_cast<uint64_t>(p[k]) << (8 * k);
  word(last);
  v2 ^= 0xff;
  for (int i = 0; i < D; ++i) sip_round();
  return v0 ^ v1 ^ v2 ^ v3;
}

// The key of this process: drawn on first use from what differs between runs and machines
// (the clocks, the addresses of a stack variable and of this function under ASLR). Nothing
// in a file can learn it. (Not std::random_device: it may throw, and builds without
// exceptions use ptread too.)
inline const SipKey& process_sip_key() noexcept {
  static const SipKey key = [] {
    uint64_t seed[5];
    seed[0] = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    seed[1] = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    seed[2] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&seed));
    seed[3] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&process_sip_key));
    seed[4] = static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    const SipKey fixed{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    SipKey k;
    k.k0 = siphash<2, 4>(seed, sizeof seed, fixed);
    seed[0] ^= k.k0;
    k.k1 = siphash<2, 4>(seed, sizeof seed, fixed);
    return k;
  }();
  return key;
}

inline uint64_t keyed_hash(std::string_view s) noexcept { return siphash(s.data(), s.size(), process_sip_key()); }
inline uint64_t keyed_hash(uint64_t v) noexcept {
  unsigned char b[8];
  for (int k = 0; k < 8; ++k) b[k] = static_cast<unsigned char>(v >> (8 * k));
  return siphash(b, 8, process_sip_key());
}

// For std::unordered_map / unordered_set keyed by what a file chose (std::hash of an integer
// is the integer itself in libstdc++: keys a multiple of the bucket count apart share a
// bucket).
struct KeyedHash {
  size_t operator()(std::string_view s) const noexcept { return static_cast<size_t>(keyed_hash(s)); }
  size_t operator()(const std::string& s) const noexcept { return static_cast<size_t>(keyed_hash(std::string_view(s))); }
  size_t operator()(uint64_t v) const noexcept { return static_cast<size_t>(keyed_hash(v)); }
  size_t operator()(int64_t v) const noexcept { return static_cast<size_t>(keyed_hash(static_cast<uint64_t>(v))); }
};

}  // namespace detail
}  // namespace ptread
