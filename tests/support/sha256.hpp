// ptread test support — SHA-256 (FIPS 180-4), self-contained, header-only.
//
//   std::string ptread_test::sha256_hex(const void* data, size_t n);   // 64 lowercase hex chars
//   ptread_test::Sha256 h; h.update(p, n); ...; std::string hex = h.hex_digest();
//
// hex_digest()/digest() finalize a copy of the state, so they may be called repeatedly and
// update() may continue afterwards (the result is then the digest of everything so far).
// Never throws (beyond std::string allocation); builds with -fno-exceptions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ptread_test {

class Sha256 {
 public:
  static constexpr size_t kDigestSize = 32;
  static constexpr size_t kBlockSize = 64;

  Sha256() noexcept { reset(); }

  void reset() noexcept {
    static constexpr std::uint32_t kInit[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                               0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    for (size_t i = 0; i < 8; ++i) state_[i] = kInit[i];
    buffered_ = 0;
    total_ = 0;
  }

  void update(const void* data, size_t n) noexcept {
    if (n == 0) return;
    const unsigned char* p = static_cast<const unsigned char*>(data);
    total_ += n;
    if (buffered_ != 0) {
      size_t take = kBlockSize - buffered_;
      if (take > n) take = n;
      std::memcpy(buffer_ + buffered_, p, take);
      buffered_ += take;
      p += take;
      n -= take;
      if (buffered_ < kBlockSize) return;
      compress(buffer_);
      buffered_ = 0;
    }
    while (n >= kBlockSize) {
      compress(p);
      p += kBlockSize;
      n -= kBlockSize;
    }
    if (n != 0) {
      std::memcpy(buffer_, p, n);
      buffered_ = n;
    }
  }

  // Raw 32-byte digest of everything passed to update() so far.
  std::array<unsigned char, kDigestSize> digest() const noexcept {
    Sha256 c = *this;
    return c.finish();
  }

  // Lowercase hex digest (64 characters).
  std::string hex_digest() const {
    static const char kHex[] = "0123456789abcdef";
    const std::array<unsigned char, kDigestSize> d = digest();
    std::string out(kDigestSize * 2, '0');
    for (size_t i = 0; i < kDigestSize; ++i) {
      out[2 * i] = kHex[(d[i] >> 4) & 0x0fu];
      out[2 * i + 1] = kHex[d[i] & 0x0fu];
    }
    return out;
  }

 private:
  static std::uint32_t rotr(std::uint32_t x, unsigned r) noexcept {
    return (x >> r) | (x << (32u - r));
  }

  void compress(const unsigned char* block) noexcept {
    static constexpr std::uint32_t kK[64] = {
        0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
        0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
        0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
        0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
        0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
        0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
        0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
        0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
        0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
        0xc67178f2u};

    std::uint32_t w[64];
    for (size_t t = 0; t < 16; ++t) {
      w[t] = (static_cast<std::uint32_t>(block[4 * t]) << 24) |
             (static_cast<std::uint32_t>(block[4 * t + 1]) << 16) |
             (static_cast<std::uint32_t>(block[4 * t + 2]) << 8) |
             static_cast<std::uint32_t>(block[4 * t + 3]);
    }
    for (size_t t = 16; t < 64; ++t) {
      const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }

    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (size_t t = 0; t < 64; ++t) {
      const std::uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const std::uint32_t ch = (e & f) ^ (~e & g);
      const std::uint32_t t1 = h + S1 + ch + kK[t] + w[t];
      const std::uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = S0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  // Pads and processes the final block(s); destroys this object's state.
  std::array<unsigned char, kDigestSize> finish() noexcept {
    const std::uint64_t bit_len = total_ * 8u;  // message length mod 2^64 bits, per the spec
    buffer_[buffered_++] = 0x80u;
    if (buffered_ > kBlockSize - 8) {
      std::memset(buffer_ + buffered_, 0, kBlockSize - buffered_);
      compress(buffer_);
      buffered_ = 0;
    }
    std::memset(buffer_ + buffered_, 0, kBlockSize - 8 - buffered_);
    for (size_t i = 0; i < 8; ++i) {
      buffer_[kBlockSize - 1 - i] = static_cast<unsigned char>((bit_len >> (8 * i)) & 0xffu);
    }
    compress(buffer_);
    buffered_ = 0;

    std::array<unsigned char, kDigestSize> out{};
    for (size_t i = 0; i < 8; ++i) {
      out[4 * i] = static_cast<unsigned char>((state_[i] >> 24) & 0xffu);
      out[4 * i + 1] = static_cast<unsigned char>((state_[i] >> 16) & 0xffu);
      out[4 * i + 2] = static_cast<unsigned char>((state_[i] >> 8) & 0xffu);
      out[4 * i + 3] = static_cast<unsigned char>(state_[i] & 0xffu);
    }
    return out;
  }

  std::uint32_t state_[8];
  unsigned char buffer_[kBlockSize];
  size_t buffered_;
  std::uint64_t total_;  // bytes hashed so far
};

// One-shot SHA-256 of n bytes at data; lowercase hex. data may be null when n == 0.
inline std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex_digest();
}

}  // namespace ptread_test
