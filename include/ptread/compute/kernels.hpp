// ptread — CPU kernels of the nn layers, with runtime dispatch on the instruction set.
//
// Three builds of the same kernels: generic C++ (whatever the compiler targets), AVX2+FMA+F16C
// and AVX-512 (F, BW). The x86 ones are compiled with GCC/Clang target attributes, so users
// need no -march flag; which one runs is decided once from the CPU (cpuid, and the OS's
// saved-state mask, through __builtin_cpu_supports). Every kernel computes in F32; F16 and
// BF16 elements are widened as they are loaded.
//
//   tile:  y[i][j] += sum_k x[i][k] * w[j][k] for an mb x nb block (mb <= 4, nb <= 4): the
//          dot-product form of y = x W^T, reading W's rows where they lie
//   widen: dst[k] = float(src[k])
//   axpy:  acc[k] += a * row[k]          vmax: acc[k] = max(acc[k], row[k])
//
// Sums of rows are in index order, as torch's are, and rounded as torch rounds them: a fused
// multiply-add per row as fbgemm's kernels do (torch's path without a padding_idx), or, with
// a padding_idx (torch's plain loop, out += row * w), a product then a sum. `fused` says
// which; bag() takes it from padding < 0.
#pragma once

#include "../config.hpp"
#include "../dtype.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && \
    !defined(__CUDACC__) && !defined(__NVCOMPILER)
#define PTREAD_NN_X86 1
#include <immintrin.h>
#else
#define PTREAD_NN_X86 0
#endif

// Unrolls the loop after it whole. The kernels' loops over the rows of a tile and the
// vectors of a pass have compile-time counts and index arrays of registers: GCC 12's -O2 left
// them rolled (and the arrays in memory), Linear 2-5x slower than at -O3 (bench/README.md,
// "A sleeping worker woken on another CPU; kernels as fast at -O2 as at -O3").
#if defined(__CUDACC__) || defined(__NVCOMPILER)
#define PTREAD_NN_UNROLL  // (nvcc's front end warns of GCC's pragma; it compiles no x86 kernel)
#elif defined(__clang__)
#define PTREAD_NN_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define PTREAD_NN_UNROLL _Pragma("GCC unroll 16")
#else
#define PTREAD_NN_UNROLL
#endif

namespace ptread {
namespace detail {

// Instruction-set levels of the kernels.
enum class NnIsa : int { generic = 0, avx2 = 1, avx512 = 2 };

inline NnIsa nn_detect_isa() noexcept {
#if PTREAD_NN_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return NnIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return NnIsa::avx2;
#endif
  return NnIsa::generic;
}

// The level the kernels use: the best the CPU has, or a lower one set for tests and
// benchmarks (nn_set_isa). Never above what the CPU has.
inline std::atomic<int>& nn_isa_setting() noexcept {
  static std::atomic<int> level{static_cast<int>(nn_detect_isa())};
  return level;
}
inline NnIsa nn_isa() noexcept { return static_cast<NnIsa>(nn_isa_setting().load(std::memory_order_relaxed)); }
// Returns the level now in use (min of the request and the CPU's best).
inline NnIsa nn_set_isa(NnIsa want) noexcept {
  const int best = static_cast<int>(nn_detect_isa());
  const int level = std::min(static_cast<int>(want), best);
  nn_isa_setting().store(level, std::memory_order_relaxed);
  return static_cast<NnIsa>(level);
}
inline const char* nn_isa_name(NnIsa i) noexcept {
  return i == NnIsa::avx512 ? "avx512" : i == NnIsa::avx2 ? "avx2" : "generic";
}

template <DType DT>
inline float nn_load1(const void* base, size_t k) noexcept {
  if constexpr (DT == DType::F32) {
    return static_cast<const float*>(base)[k];
  } else if constexpr (DT == DType::F16) {
    return f16_to_float(static_cast<const uint16_t*>(base)[k]);
  } else {
    return bf16_to_float(static_cast<const uint16_t*>(base)[k]);
  }
}
// Bytes per element of the weights the kernels read (F32, or F16/BF16).
template <DType DT>
inline constexpr size_t kNnElementBytes = DT == DType::F32 ? 4 : 2;
template <DType DT>
inline const void* nn_advance(const void* base, size_t elements) noexcept {
  return static_cast<const uint8_t*>(base) + elements * kNnElementBytes<DT>;
}

// c + a * b with the product rounded first. C++ lets a compiler fuse the two into one FMA
// (GCC does by default wherever the target has FMA), so the product passes through an empty
// asm the compiler cannot see into.
inline float nn_mul_add(float a, float b, float c) noexcept {
  float p = a * b;
#if (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
  __asm__("" : "+x"(p));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
  __asm__("" : "+w"(p));
#else
  volatile float kept = p;
  p = kept;
#endif
  return c + p;
}
// c + a * b rounded once, as std::fma. MinGW-w64's fmaf is not correctly rounded (of 10^6
// random sums c + 1 * b it got 5% wrong by an ulp, under Wine and on Windows alike), so
// there it is computed in double: the product is exact (24 + 24 bits), the sum is rounded
// to odd (TwoSum gives its exact error; an inexact sum with an even last bit steps one ulp
// toward the error), and a double rounded to odd then to float is rounded once (53 >= 24 + 2
// bits: Boldo and Melquiond, "When double rounding is odd", 2005).
inline float nn_fma(float a, float b, float c) noexcept {
#if defined(__MINGW32__)
  const double p = static_cast<double>(a) * static_cast<double>(b);
  const double s = p + static_cast<double>(c);
  if (!std::isfinite(s)) return static_cast<float>(s);
  const double cs = s - p;
  const double err = (p - (s - cs)) + (static_cast<double>(c) - cs);
  uint64_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  if (err != 0.0 && (bits & 1u) == 0) {
    bits = (err > 0.0) == (s > 0.0) ? bits + 1 : bits - 1;  // away from or toward zero
    double odd;
    std::memcpy(&odd, &bits, sizeof odd);
    return static_cast<float>(odd);
  }
  return static_cast<float>(s);
#else
  return std::fma(a, b, c);
#endif
}
// c + a * b as one fused multiply-add, or (fused false) as nn_mul_add.
inline float nn_madd(bool fused, float a, float b, float c) noexcept {
  return fused ? nn_fma(a, b, c) : nn_mul_add(a, b, c);
}

// Asks for the cache lines of [p, p + bytes) (a hint: never faults), with __builtin_prefetch's
// temporal locality (3: into every cache level, x86 prefetcht0; 1: prefetcht2). Always
// inlined: GCC takes a function whose only statements are prefetches for "const" and deletes
// calls to it whose result is unused (see PTREAD_ALWAYS_INLINE).
template <int Locality>
PTREAD_ALWAYS_INLINE void nn_prefetch(const void* p, size_t bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  const auto* b = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(b + off, 0, Locality);
#else
  (void)p;
  (void)bytes;
#endif
}
// The same for a size known when compiling: one prefetch instruction a line, no loop left.
template <int Locality, size_t Bytes>
PTREAD_ALWAYS_INLINE void nn_prefetch(const void* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  const auto* b = static_cast<const char*>(p);
  PTREAD_NN_UNROLL for (size_t off = 0; off < Bytes; off += 64) __builtin_prefetch(b + off, 0, Locality);
#else
  (void)p;
#endif
}

// The bag kernels ask for the row this many indices ahead of the one they add, into L1 (as
// torch's kernels do: caffe2's EmbeddingLookupIdx, fbgemm's), across bag ends: the rows of the
// next bag are on their way while a bag ends. Chosen (bags of 20, AVX2) over asking for the
// next bag's rows a bag ahead, over 8, 24 and 32 ahead, and over L2 (locality 1), in runs
// whose order could favor a build by up to about 10% (bench/README.md); measured fairly, this
// and the 8-register passes and the faster index check together: D=32 sums 11-15% faster,
// D=128 2-7%.
constexpr size_t kNnBagPrefetchDistance = 16;
constexpr int kNnBagPrefetchLocality = 3;

// The row that idx[i + kNnBagPrefetchDistance] names, or idx[ahead - 1] when that is nearer.
template <class Index>
inline const uint8_t* nn_row_ahead(const uint8_t* base, size_t row_bytes, const Index* idx, size_t i,
                                   size_t ahead) noexcept {
  const size_t j = i + kNnBagPrefetchDistance < ahead ? i + kNnBagPrefetchDistance : ahead - 1;
  return base + static_cast<size_t>(idx[j]) * row_bytes;
}

// The bag kernels reduce a bag this many bytes of F32 sums at a time: one pass over the bag's
// indices per 256 output bytes (8 AVX2 registers of sums, 4 AVX-512). With AVX2 on a
// 512-byte row, 8 registers a pass (two passes) were no slower than 4 (four passes).
// Sums without a factor (no per_sample_weights) of F32 rows add each row from memory and
// hold nothing but the sums: with AVX2 they take 16 registers (V::BAG_ADD, one pass over a
// D=128 bag, as caffe2's kernel for torch's sum does), 7-8% faster at D=128 than two passes
// of 8 (fair A/B, 150 rounds). A first try at 16 was 18-29% slower only because GCC kept the
// 16 column offsets of the pass on the stack (the loads now take fixed offsets from one row
// address: that alone made max 9% faster at D=128). Max with 16 stays slower (11%: its loads
// need a register of their own, 17 in all).
constexpr size_t kNnBagPassBytes = 256;

// ---- generic kernels -------------------------------------------------------------------
namespace nn_generic {

template <DType DT>
inline void tile(const float* x, size_t ldx, const void* w, size_t ldw, float* y, size_t ldy, int mb, int nb,
                 size_t k) noexcept {
  for (int i = 0; i < mb; ++i) {
    const float* xi = x + static_cast<size_t>(i) * ldx;
    for (int j = 0; j < nb; ++j) {
      const void* wj = nn_advance<DT>(w, static_cast<size_t>(j) * ldw);
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t q = 0;
      for (; q + 4 <= k; q += 4) {
        s0 += xi[q] * nn_load1<DT>(wj, q);
        s1 += xi[q + 1] * nn_load1<DT>(wj, q + 1);
        s2 += xi[q + 2] * nn_load1<DT>(wj, q + 2);
        s3 += xi[q + 3] * nn_load1<DT>(wj, q + 3);
      }
      for (; q < k; ++q) s0 += xi[q] * nn_load1<DT>(wj, q);
      y[static_cast<size_t>(i) * ldy + static_cast<size_t>(j)] += (s0 + s1) + (s2 + s3);
    }
  }
}
template <DType DT>
inline void widen(const void* src, float* dst, size_t n) noexcept {
  if constexpr (DT == DType::F32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (size_t q = 0; q < n; ++q) dst[q] = nn_load1<DT>(src, q);
  }
}
template <DType DT>
inline void axpy(float* acc, const void* row, size_t n, float a, bool fused) noexcept {
  for (size_t q = 0; q < n; ++q) acc[q] = nn_madd(fused, a, nn_load1<DT>(row, q), acc[q]);
}
template <DType DT>
inline void vmax(float* acc, const void* row, size_t n) noexcept {
  for (size_t q = 0; q < n; ++q) {
    const float v = nn_load1<DT>(row, q);
    acc[q] = v > acc[q] ? v : acc[q];
  }
}

// EmbeddingBag's reduction of one bag, reading the rows through the indices: out[0..n) =
// the sum of psw[i] (1 when null) * row idx[i] (from zero), or their max, over the entries
// not equal to `padding`; zeros when none is left. Returns how many were kept. The same
// arithmetic in the same order as axpy/vmax row after row. idx[0..ahead) (ahead >= count:
// this bag's indices and the next bags') are all rows of the table: the row
// kNnBagPrefetchDistance entries ahead (at most idx[ahead - 1]) is asked for as each is added.
template <DType DT, class Index>
inline size_t bag(float* out, const void* base, size_t row_bytes, const Index* idx, size_t count, size_t ahead,
                  const float* psw, int64_t padding, size_t n, bool max_op) noexcept {
  const size_t used = n * kNnElementBytes<DT>;
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* next = nn_row_ahead(static_cast<const uint8_t*>(base), row_bytes, idx, i, ahead);
    nn_prefetch<kNnBagPrefetchLocality>(next, used);
    const auto r = static_cast<int64_t>(idx[i]);
    if (r == padding) continue;
    const void* row = static_cast<const uint8_t*>(base) + static_cast<size_t>(r) * row_bytes;
    if (max_op) {
      if (kept == 0) {
        widen<DT>(row, out, n);
      } else {
        vmax<DT>(out, row, n);
      }
    } else {
      if (kept == 0) {
        for (size_t q = 0; q < n; ++q) out[q] = 0.0f;
      }
      axpy<DT>(out, row, n, psw ? psw[i] : 1.0f, padding < 0);
    }
    ++kept;
  }
  if (kept == 0) {
    for (size_t q = 0; q < n; ++q) out[q] = 0.0f;
  }
  return kept;
}

}  // namespace nn_generic

#if PTREAD_NN_X86

// The kernel bodies, written once over a vector type V and compiled per target.
// TARGET: the function attribute; V: a struct of vector operations; MB: rows of x per tile.
#define PTREAD_NN_SIMD_KERNELS(TARGET, V)                                                               \
  template <DType DT>                                                                                   \
  TARGET inline typename V::R load(const void* base, size_t k) noexcept {                               \
    if constexpr (DT == DType::F32) {                                                                   \
      return V::loadf(static_cast<const float*>(base) + k);                                             \
    } else if constexpr (DT == DType::F16) {                                                            \
      return V::load_f16(static_cast<const uint16_t*>(base) + k);                                       \
    } else {                                                                                            \
      return V::load_bf16(static_cast<const uint16_t*>(base) + k);                                      \
    }                                                                                                   \
  }                                                                                                     \
  template <int MB, int NB, DType DT, bool PIN = false>                                                 \
  TARGET inline void micro(const float* x, size_t ldx, const void* w, size_t ldw, float* y, size_t ldy, \
                           size_t k) noexcept {                                                         \
    typename V::R acc[MB][NB];                                                                          \
    PTREAD_NN_UNROLL for (int i = 0; i < MB; ++i)                                                       \
      PTREAD_NN_UNROLL for (int j = 0; j < NB; ++j) acc[i][j] = V::zero();                              \
    const void* wr[NB];                                                                                 \
    PTREAD_NN_UNROLL for (int j = 0; j < NB; ++j) wr[j] = nn_advance<DT>(w, static_cast<size_t>(j) * ldw); \
    size_t q = 0;                                                                                       \
    for (; q + V::L <= k; q += V::L) {                                                                  \
      typename V::R wv[NB];                                                                             \
      PTREAD_NN_UNROLL for (int j = 0; j < NB; ++j) {                                                   \
        wv[j] = load<DT>(wr[j], q);                                                                     \
        if constexpr (PIN) V::pin(wv[j]); /* loaded once, used MB times (see V::PIN_FROM) */            \
      }                                                                                                 \
      PTREAD_NN_UNROLL for (int i = 0; i < MB; ++i) {                                                   \
        const typename V::R xv = V::loadf(x + static_cast<size_t>(i) * ldx + q);                        \
        PTREAD_NN_UNROLL for (int j = 0; j < NB; ++j) acc[i][j] = V::fma(xv, wv[j], acc[i][j]);         \
      }                                                                                                 \
    }                                                                                                   \
    for (int i = 0; i < MB; ++i) {                                                                      \
      const float* xi = x + static_cast<size_t>(i) * ldx;                                               \
      for (int j = 0; j < NB; ++j) {                                                                    \
        float s = V::hsum(acc[i][j]);                                                                   \
        for (size_t r = q; r < k; ++r) s += xi[r] * nn_load1<DT>(wr[j], r);                             \
        y[static_cast<size_t>(i) * ldy + static_cast<size_t>(j)] += s;                                  \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
  template <int MB, DType DT, bool PIN>                                                                 \
  TARGET inline void tile_m(const float* x, size_t ldx, const void* w, size_t ldw, float* y, size_t ldy,  \
                            int nb, size_t k) noexcept {                                                \
    if constexpr (MB == 1 && V::GEMV_NB == 8) { /* one row of x: 8 rows of W at once (more streams) */ \
      if (nb == 8) {                                                                                    \
        micro<1, 8, DT>(x, ldx, w, ldw, y, ldy, k);                                                     \
        return;                                                                                         \
      }                                                                                                 \
    }                                                                                                   \
    switch (nb) {                                                                                       \
      case 4: micro<MB, 4, DT, PIN>(x, ldx, w, ldw, y, ldy, k); break;                                  \
      case 3: micro<MB, 3, DT, PIN>(x, ldx, w, ldw, y, ldy, k); break;                                  \
      case 2: micro<MB, 2, DT, PIN>(x, ldx, w, ldw, y, ldy, k); break;                                  \
      default: micro<MB, 1, DT, PIN>(x, ldx, w, ldw, y, ldy, k); break;                                 \
    }                                                                                                   \
  }                                                                                                     \
  template <DType DT, bool PIN>                                                                         \
  TARGET inline void tile_rows(const float* x, size_t ldx, const void* w, size_t ldw, float* y,         \
                              size_t ldy, int mb, int nb, size_t k) noexcept {                          \
    while (mb > 0) {                                                                                    \
      const int step = mb >= V::MB ? V::MB : mb;                                                        \
      if constexpr (V::MB >= 4) {                                                                       \
        if (step == 4) tile_m<4, DT, PIN>(x, ldx, w, ldw, y, ldy, nb, k);                               \
        if (step == 3) tile_m<3, DT, PIN>(x, ldx, w, ldw, y, ldy, nb, k);                               \
      }                                                                                                 \
      if (step == 2) tile_m<2, DT, PIN>(x, ldx, w, ldw, y, ldy, nb, k);                                 \
      if (step == 1) tile_m<1, DT, false>(x, ldx, w, ldw, y, ldy, nb, k); /* nothing to reuse */        \
      x += static_cast<size_t>(step) * ldx;                                                             \
      y += static_cast<size_t>(step) * ldy;                                                             \
      mb -= step;                                                                                       \
    }                                                                                                   \
  }                                                                                                     \
  template <DType DT>                                                                                   \
  TARGET void tile(const float* x, size_t ldx, const void* w, size_t ldw, float* y, size_t ldy, int mb, \
                   int nb, size_t k) noexcept {                                                         \
    if constexpr (V::PIN_FROM > 0) {                                                                    \
      if (mb >= V::PIN_FROM) {                                                                          \
        tile_rows<DT, true>(x, ldx, w, ldw, y, ldy, mb, nb, k);                                         \
        return;                                                                                         \
      }                                                                                                 \
    }                                                                                                   \
    tile_rows<DT, false>(x, ldx, w, ldw, y, ldy, mb, nb, k);                                            \
  }                                                                                                     \
  template <DType DT>                                                                                   \
  TARGET void widen(const void* src, float* dst, size_t n) noexcept {                                   \
    if constexpr (DT == DType::F32) { /* a copy: memcpy loads a whole row before it stores (all its */ \
      if (n < kNnStreamFloats) {      /* lines in flight at once: 1.2-1.4x faster on 256-byte rows) */ \
        std::memcpy(dst, src, n * sizeof(float));                                                       \
        return;                                                                                         \
      }                                                                                                 \
    }                                                                                                   \
    size_t q = 0;                                                                                       \
    if (n >= kNnStreamFloats) { /* large: stores that bypass the caches, as memcpy's do */               \
      for (; q < n && reinterpret_cast<uintptr_t>(dst + q) % (V::L * 4) != 0; ++q) {                    \
        dst[q] = nn_load1<DT>(src, q);                                                                  \
      }                                                                                                 \
      for (; q + V::L <= n; q += V::L) V::stream(dst + q, load<DT>(src, q));                            \
      _mm_sfence();                                                                                     \
    }                                                                                                   \
    for (; q + V::L <= n; q += V::L) V::store(dst + q, load<DT>(src, q));                               \
    for (; q < n; ++q) dst[q] = nn_load1<DT>(src, q);                                                   \
  }                                                                                                     \
  template <DType DT>                                                                                   \
  TARGET void axpy(float* acc, const void* row, size_t n, float a, bool fused) noexcept {               \
    const typename V::R av = V::set1(a);                                                                \
    size_t q = 0;                                                                                       \
    if (fused) {                                                                                        \
      for (; q + V::L <= n; q += V::L) V::store(acc + q, V::fma(av, load<DT>(row, q), V::loadf(acc + q))); \
    } else {                                                                                            \
      for (; q + V::L <= n; q += V::L) V::store(acc + q, V::mul_add(av, load<DT>(row, q), V::loadf(acc + q))); \
    }                                                                                                   \
    for (; q < n; ++q) acc[q] = nn_madd(fused, a, nn_load1<DT>(row, q), acc[q]); /* as the vectors */   \
  }                                                                                                     \
  /* bag() on NV vectors from element q, the rows read through the indices in one pass (as      */ \
  /* fbgemm does): the loads of the next rows issue while this one is summed. OP: 0 max, 1 fused  */ \
  /* sum, 2 unfused sum, 3 sum without weights (acc + row: what both sums give with a factor of   */ \
  /* 1): each its own loop, which tests no mode per row.                                         */ \
  /* Each row added asks for the same columns of the row kNnBagPrefetchDistance entries ahead.   */ \
  template <int NV, int OP, DType DT, class Index>                                                      \
  TARGET inline size_t bag_chunk(float* out, const uint8_t* base, size_t row_bytes, const Index* idx,     \
                                 size_t count, size_t ahead, const float* psw, int64_t padding,          \
                                 size_t q) noexcept {                                                   \
    constexpr size_t pass_bytes = NV * V::L * kNnElementBytes<DT>;                                      \
    const size_t col = q * kNnElementBytes<DT>;                                                         \
    typename V::R acc[NV];                                                                              \
    size_t i = 0, skipped = 0;                                                                          \
    if constexpr (OP == 0) { /* max: the first kept row is the start */                                \
      for (; i < count && static_cast<int64_t>(idx[i]) == padding; ++i) {}                              \
      if (i == count) {                                                                                 \
        PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) V::store(out + q + static_cast<size_t>(v) * V::L, V::zero()); \
        return 0;                                                                                       \
      }                                                                                                 \
      const uint8_t* row = base + static_cast<size_t>(idx[i]) * row_bytes + col;                         \
      PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) acc[v] = load<DT>(row, static_cast<size_t>(v) * V::L); \
      skipped = i++;                                                                                    \
    } else {                                                                                            \
      PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) acc[v] = V::zero();                                 \
    }                                                                                                   \
    for (; i < count; ++i) {                                                                            \
      nn_prefetch<kNnBagPrefetchLocality, pass_bytes>(nn_row_ahead(base, row_bytes, idx, i, ahead) + col); \
      const auto r = static_cast<int64_t>(idx[i]);                                                      \
      if (r == padding) {                                                                               \
        ++skipped;                                                                                      \
        continue;                                                                                       \
      }                                                                                                 \
      /* (the pass's columns of the row: fixed offsets from one address) */                            \
      const uint8_t* row = base + static_cast<size_t>(r) * row_bytes + col;                             \
      if constexpr (OP == 0) {                                                                          \
        PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) acc[v] = V::max(load<DT>(row, static_cast<size_t>(v) * V::L), acc[v]); \
      } else if constexpr (OP == 3) {                                                                   \
        PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) acc[v] = V::add(load<DT>(row, static_cast<size_t>(v) * V::L), acc[v]); \
      } else {                                                                                          \
        const typename V::R a = V::set1(psw[i]); /* OP 1, 2: weights given (else OP 3) */              \
        PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) {                                                 \
          const typename V::R x = load<DT>(row, static_cast<size_t>(v) * V::L);                          \
          acc[v] = OP == 1 ? V::fma(a, x, acc[v]) : V::mul_add(a, x, acc[v]);                            \
        }                                                                                               \
      }                                                                                                 \
    }                                                                                                   \
    PTREAD_NN_UNROLL for (int v = 0; v < NV; ++v) V::store(out + q + static_cast<size_t>(v) * V::L, acc[v]); /* zeros if none kept */ \
    return count - skipped;                                                                             \
  }                                                                                                     \
  template <int OP, DType DT, class Index>                                                              \
  TARGET size_t bag_op(float* out, const uint8_t* base, size_t row_bytes, const Index* idx, size_t count, \
                       size_t ahead, const float* psw, int64_t padding, size_t n) noexcept {            \
    size_t kept = 0, q = 0;                                                                             \
    constexpr int kAdd = OP == 3 && DT == DType::F32 ? V::BAG_ADD : V::BAG; /* no factor to hold */      \
    if constexpr (kAdd > V::BAG) {                                                                      \
      for (; q + kAdd * V::L <= n; q += kAdd * V::L) kept = bag_chunk<kAdd, OP, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, q); \
    }                                                                                                   \
    for (; q + V::BAG * V::L <= n; q += V::BAG * V::L) kept = bag_chunk<V::BAG, OP, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, q); \
    for (; q + 4 * V::L <= n; q += 4 * V::L) kept = bag_chunk<4, OP, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, q); \
    switch ((n - q) / V::L) {                                                                           \
      case 3: kept = bag_chunk<3, OP, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, q); q += 3 * V::L; break; \
      case 2: kept = bag_chunk<2, OP, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, q); q += 2 * V::L; break; \
      case 1: kept = bag_chunk<1, OP, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, q); q += V::L; break; \
      default: break;                                                                                   \
    }                                                                                                   \
    for (; q < n; ++q) {                                                                                \
      float s = 0.0f;                                                                                   \
      kept = 0;                                                                                         \
      for (size_t i = 0; i < count; ++i) {                                                              \
        const auto r = static_cast<int64_t>(idx[i]);                                                    \
        if (r == padding) continue;                                                                     \
        const float v = nn_load1<DT>(base + static_cast<size_t>(r) * row_bytes, q);                     \
        if constexpr (OP == 0) {                                                                        \
          s = kept == 0 || v > s ? v : s;                                                               \
        } else if constexpr (OP == 3) {                                                                 \
          s = v + s;                                                                                    \
        } else {                                                                                        \
          s = nn_madd(OP == 1, psw[i], v, s); /* as the vectors */                                       \
        }                                                                                               \
        ++kept;                                                                                         \
      }                                                                                                 \
      out[q] = s; /* 0 if none kept */                                                                  \
    }                                                                                                   \
    return kept;                                                                                        \
  }                                                                                                     \
  template <DType DT, class Index>                                                                      \
  TARGET size_t bag(float* out, const void* base_, size_t row_bytes, const Index* idx, size_t count,     \
                    size_t ahead, const float* psw, int64_t padding, size_t n, bool max_op) noexcept {  \
    const auto* base = static_cast<const uint8_t*>(base_);                                              \
    if (max_op) return bag_op<0, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, n);         \
    if (psw == nullptr) return bag_op<3, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, n); \
    if (padding < 0) return bag_op<1, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, n);    \
    return bag_op<2, DT>(out, base, row_bytes, idx, count, ahead, psw, padding, n);                     \
  }                                                                                                     \
  template <DType DT>                                                                                   \
  TARGET void vmax(float* acc, const void* row, size_t n) noexcept {                                    \
    size_t q = 0;                                                                                       \
    for (; q + V::L <= n; q += V::L) V::store(acc + q, V::max(load<DT>(row, q), V::loadf(acc + q)));    \
    for (; q < n; ++q) {                                                                                \
      const float v = nn_load1<DT>(row, q);                                                             \
      acc[q] = v > acc[q] ? v : acc[q];                                                                 \
    }                                                                                                   \
  }

// Widening this many elements or more writes with non-temporal stores (4 MiB of output: a
// conversion that large would only push everything else out of the cache).
constexpr size_t kNnStreamFloats = size_t{1} << 20;

#define PTREAD_NN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PTREAD_NN_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

namespace nn_avx2 {
struct V {
  using R = __m256;
  static constexpr size_t L = 8;
  static constexpr int MB = 2;  // 16 ymm registers: 2 x 4 accumulators, 4 weights, 1 input
  // Rows of W a tile reads at once when x has one row (a GEMV). 8 streams of W instead of 4
  // kept more of the weight-streaming bound: 4096 x 4096 F32, one thread, 2.53-2.83 ms
  // against 2.85-3.17 for 4 (a read of W: 2.01-2.41 ms); 12 rows were no faster, 16 slower.
  static constexpr int GEMV_NB = 8;
  // Up to this many rows of x, F32 rows of W are streamed whole (no K blocks): the K blocks'
  // 4 KiB pieces of 4 rows at a time, 64 KiB apart at N = 4096, defeat the hardware
  // prefetcher. 4096 x 4096, one thread: M = 4 5.1-5.9 ms against 7.0-8.5, M = 8 7.4-8.3
  // against 9.4-10.8, M = 16 12.3-13.1 against 14.5-16.0; at M = 32 the K blocks were faster.
  static constexpr int STREAM_M = 16;
  // From this many rows of x on, a tile keeps each W vector in a register for its MB rows
  // of x (pin): GCC otherwise reloads it from memory as an FMA operand once a row, 10 loads
  // a step of 8 FMAs instead of 6. That pays where a tile's rows of W are read many times
  // from L1 (4096 x 4096, M = 32: 20.2-20.8 ms against 24.7-25.1; 1024 x 1024, M = 16: 0.54
  // against 0.62-0.67) and cost 2-10% at M = 2 to 8, where they come from memory or L2.
  static constexpr int PIN_FROM = 16;
  PTREAD_NN_TARGET_AVX2 static void pin(R& r) noexcept { __asm__("" : "+x"(r)); }
  static constexpr int BAG = static_cast<int>(kNnBagPassBytes / (L * sizeof(float)));  // 8 accumulators
  static constexpr int BAG_ADD = 16;  // sums without a factor, F32 rows: 16 accumulators, rows added from memory
  PTREAD_NN_TARGET_AVX2 static R zero() noexcept { return _mm256_setzero_ps(); }
  PTREAD_NN_TARGET_AVX2 static R set1(float a) noexcept { return _mm256_set1_ps(a); }
  PTREAD_NN_TARGET_AVX2 static R loadf(const float* p) noexcept { return _mm256_loadu_ps(p); }
  PTREAD_NN_TARGET_AVX2 static R load_f16(const uint16_t* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  PTREAD_NN_TARGET_AVX2 static R load_bf16(const uint16_t* p) noexcept {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  PTREAD_NN_TARGET_AVX2 static R fma(R a, R b, R c) noexcept { return _mm256_fmadd_ps(a, b, c); }
  PTREAD_NN_TARGET_AVX2 static R mul_add(R a, R b, R c) noexcept {  // c + a * b, rounded twice
    R p = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(p));  // opaque: the compiler cannot fuse the product into the sum
    return _mm256_add_ps(c, p);
  }
  PTREAD_NN_TARGET_AVX2 static R max(R a, R b) noexcept { return _mm256_max_ps(a, b); }
  PTREAD_NN_TARGET_AVX2 static R add(R a, R b) noexcept { return _mm256_add_ps(a, b); }
  PTREAD_NN_TARGET_AVX2 static void store(float* p, R v) noexcept { _mm256_storeu_ps(p, v); }
  PTREAD_NN_TARGET_AVX2 static void stream(float* p, R v) noexcept { _mm256_stream_ps(p, v); }  // p: 32-aligned
  PTREAD_NN_TARGET_AVX2 static float hsum(R v) noexcept {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
PTREAD_NN_SIMD_KERNELS(PTREAD_NN_TARGET_AVX2, V)
}  // namespace nn_avx2

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics as
// uninitialized when they are inlined at -O3 (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace nn_avx512 {
struct V {
  using R = __m512;
  static constexpr size_t L = 16;
  static constexpr int MB = 4;  // 32 zmm registers: 4 x 4 accumulators, 4 weights, 1 input
  // The constants below as measured on an AVX-512 AMD EPYC VM (2026-11-28; bench/README.md,
  // "The AVX-512 kernels' constants measured"), each against the one before it in
  // alternating runs of two builds that differed in it alone.
  // 8 rows of W at once for a GEMV, as with AVX2: 4096 x 4096 F32 in three A/B runs, warm
  // 0.93-1.01x the time of 4 rows on one thread and 0.82-0.91x on two; cold 0.96x and 0.95-1.04x.
  static constexpr int GEMV_NB = 8;
  // F32 rows of W streamed whole up to 16 rows of x, as with AVX2: 4096 x 4096, M = 8 to 16,
  // 0.78-0.92x the time of K blocks from M = 5 on.
  static constexpr int STREAM_M = 16;
  // Never: with 32 registers GCC keeps a tile's W vectors in them. Pinned from M = 16 on:
  // 0.98-1.05x the time at M = 16 to 32, no gain.
  static constexpr int PIN_FROM = 0;
  PTREAD_NN_TARGET_AVX512 static void pin(R&) noexcept {}
  static constexpr int BAG = static_cast<int>(kNnBagPassBytes / (L * sizeof(float)));  // 4 accumulators
  // Sums without a factor: 8 accumulators, one pass over a D=128 bag: 0.82x the time of
  // two passes of 4 (D=128 sum, one and two threads; D=32 and the other modes unchanged).
  static constexpr int BAG_ADD = 2 * BAG;
  PTREAD_NN_TARGET_AVX512 static R zero() noexcept { return _mm512_setzero_ps(); }
  PTREAD_NN_TARGET_AVX512 static R set1(float a) noexcept { return _mm512_set1_ps(a); }
  PTREAD_NN_TARGET_AVX512 static R loadf(const float* p) noexcept { return _mm512_loadu_ps(p); }
  PTREAD_NN_TARGET_AVX512 static R load_f16(const uint16_t* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  PTREAD_NN_TARGET_AVX512 static R load_bf16(const uint16_t* p) noexcept {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  PTREAD_NN_TARGET_AVX512 static R fma(R a, R b, R c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  PTREAD_NN_TARGET_AVX512 static R mul_add(R a, R b, R c) noexcept {  // c + a * b, rounded twice
    R p = _mm512_mul_ps(a, b);
    __asm__("" : "+v"(p));  // opaque: the compiler cannot fuse the product into the sum
    return _mm512_add_ps(c, p);
  }
  PTREAD_NN_TARGET_AVX512 static R max(R a, R b) noexcept { return _mm512_max_ps(a, b); }
  PTREAD_NN_TARGET_AVX512 static R add(R a, R b) noexcept { return _mm512_add_ps(a, b); }
  PTREAD_NN_TARGET_AVX512 static void store(float* p, R v) noexcept { _mm512_storeu_ps(p, v); }
  PTREAD_NN_TARGET_AVX512 static void stream(float* p, R v) noexcept { _mm512_stream_ps(p, v); }  // p: 64-aligned
  PTREAD_NN_TARGET_AVX512 static float hsum(R v) noexcept {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
PTREAD_NN_SIMD_KERNELS(PTREAD_NN_TARGET_AVX512, V)
}  // namespace nn_avx512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // PTREAD_NN_X86

// The position of the first index outside [0, num) from position i on, or n when none is:
// the layers' check of every index before they read a row. Reads 16 at a time and looks
// for the culprit only in a block that holds one.
template <class Index>
inline size_t nn_first_bad_index_from(const Index* idx, size_t i, size_t n, uint64_t num) noexcept {
  for (; i + 16 <= n; i += 16) {
    uint64_t high = 0;  // as unsigned, a negative index is above every row
    for (size_t k = 0; k < 16; ++k) {
      const auto v = static_cast<uint64_t>(static_cast<int64_t>(idx[i + k]));
      high = v > high ? v : high;
    }
    if (high >= num) break;
  }
  for (; i < n; ++i) {
    if (static_cast<uint64_t>(static_cast<int64_t>(idx[i])) >= num) return i;
  }
  return n;
}

#if PTREAD_NN_X86
// The same with AVX2 compares (an unsigned a > b is a signed (a ^ sign) > (b ^ sign)), so that
// it does not depend on the compiler vectorizing the loop above (GCC 12 does at -O3, not -O2):
// 81,920 indices in 10-14 us, against 58-72 us testing one index at a time.
PTREAD_NN_TARGET_AVX2 inline size_t nn_first_bad_index_avx2(const int64_t* idx, size_t n, uint64_t num) noexcept {
  size_t i = 0;
  if (num != 0) {
    const __m256i sign = _mm256_set1_epi64x(INT64_MIN);
    const __m256i last = _mm256_xor_si256(_mm256_set1_epi64x(static_cast<long long>(num - 1)), sign);
    for (; i + 16 <= n; i += 16) {
      __m256i bad = _mm256_setzero_si256();
      for (size_t k = 0; k < 16; k += 4) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i + k));
        bad = _mm256_or_si256(bad, _mm256_cmpgt_epi64(_mm256_xor_si256(v, sign), last));
      }
      if (!_mm256_testz_si256(bad, bad)) break;
    }
  }
  return nn_first_bad_index_from(idx, i, n, num);
}
PTREAD_NN_TARGET_AVX2 inline size_t nn_first_bad_index_avx2(const int32_t* idx, size_t n, uint64_t num) noexcept {
  size_t i = 0;
  if (num != 0) {  // as unsigned 32-bit, a negative index is above 2^31 - 1, the last row it could name
    const auto last32 = static_cast<uint32_t>(num - 1 < 0x7fffffffu ? num - 1 : 0x7fffffffu);
    const __m256i sign = _mm256_set1_epi32(INT32_MIN);
    const __m256i last = _mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(last32)), sign);
    for (; i + 32 <= n; i += 32) {
      __m256i bad = _mm256_setzero_si256();
      for (size_t k = 0; k < 32; k += 8) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + i + k));
        bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_xor_si256(v, sign), last));
      }
      if (!_mm256_testz_si256(bad, bad)) break;
    }
  }
  return nn_first_bad_index_from(idx, i, n, num);
}
#endif

template <class Index>
inline size_t nn_first_bad_index(const Index* idx, size_t n, uint64_t num) noexcept {
#if PTREAD_NN_X86
  if (nn_isa() != NnIsa::generic) return nn_first_bad_index_avx2(idx, n, num);
#endif
  return nn_first_bad_index_from(idx, 0, n, num);
}

// Dispatch: one table of function pointers per (level, dtype), chosen once per call.
struct NnKernels {
  void (*tile)(const float*, size_t, const void*, size_t, float*, size_t, int, int, size_t) noexcept;
  void (*widen)(const void*, float*, size_t) noexcept;
  // A row at a time (acc += a * row, fused or not; acc = max(acc, row)): what bag64/bag32
  // compute a bag at a time, in the same order; the tests hold the bag kernels to them.
  void (*axpy)(float*, const void*, size_t, float, bool) noexcept;
  void (*vmax)(float*, const void*, size_t) noexcept;
  // bag(out, base, row_bytes, idx, count, ahead, psw, padding, n, max_op): see nn_generic::bag.
  size_t (*bag64)(float*, const void*, size_t, const int64_t*, size_t, size_t, const float*, int64_t, size_t,
                  bool) noexcept;
  size_t (*bag32)(float*, const void*, size_t, const int32_t*, size_t, size_t, const float*, int64_t, size_t,
                  bool) noexcept;
  int mb;       // rows of x a tile computes at once (a multiple of it keeps the kernel busiest)
  int gemv_nb;  // rows of W a tile takes at once when x has one row (4 or 8; otherwise at most 4)
  int stream_m;  // up to this many rows of x, Linear streams whole F32 rows of W (no K blocks)
};

template <DType DT>
inline NnKernels nn_kernels_for(NnIsa isa) noexcept {
#if PTREAD_NN_X86
  if (isa == NnIsa::avx512) {
    return {&nn_avx512::tile<DT>, &nn_avx512::widen<DT>, &nn_avx512::axpy<DT>, &nn_avx512::vmax<DT>,
            &nn_avx512::bag<DT, int64_t>, &nn_avx512::bag<DT, int32_t>,
            nn_avx512::V::MB, nn_avx512::V::GEMV_NB, nn_avx512::V::STREAM_M};
  }
  if (isa == NnIsa::avx2) {
    return {&nn_avx2::tile<DT>, &nn_avx2::widen<DT>, &nn_avx2::axpy<DT>, &nn_avx2::vmax<DT>,
            &nn_avx2::bag<DT, int64_t>, &nn_avx2::bag<DT, int32_t>, nn_avx2::V::MB,
            nn_avx2::V::GEMV_NB, nn_avx2::V::STREAM_M};
  }
#else
  (void)isa;
#endif
  return {&nn_generic::tile<DT>, &nn_generic::widen<DT>, &nn_generic::axpy<DT>, &nn_generic::vmax<DT>,
          &nn_generic::bag<DT, int64_t>, &nn_generic::bag<DT, int32_t>, 4, 4, 4};
}

inline NnKernels nn_kernels(DType dt) noexcept {
  const NnIsa isa = nn_isa();
  if (dt == DType::F16) return nn_kernels_for<DType::F16>(isa);
  if (dt == DType::BF16) return nn_kernels_for<DType::BF16>(isa);
  return nn_kernels_for<DType::F32>(isa);
}

}  // namespace detail
}  // namespace ptread
