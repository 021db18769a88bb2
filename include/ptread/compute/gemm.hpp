// ptread — the packed product behind Linear's larger batches: y[m x n] += x[m x k] W^T,
// with W's rows F32, F16 or BF16 where the checkpoint holds them.
//
// The blocking of GotoBLAS and BLIS (Goto and van de Geijn, "Anatomy of high-performance
// matrix multiplication", 2008; Van Zee and van de Geijn, "BLIS", 2015):
//   for each block of kGemmNc rows of W and kGemmKc of its columns:
//     pack it, widened to F32, as panels of NR rows stored column by column (kc x NR
//     floats each, the transposes done in registers): the block stays in L2;
//     for each block of kGemmMc rows of x: pack it as panels of MR rows (kc x MR);
//       for each W panel (in L1), each x panel: the micro-kernel, an MR x NR tile of y
//       held in registers across the kc columns, one broadcast of x and NR/L fused
//       multiply-adds per row of the tile, then added to y.
// AVX-512: MR 14, NR 32 (28 accumulators of 32 registers); AVX2: MR 6, NR 16 (12 of 16).
// Each element of y is the bias, then the sum of each kc block in column order, added.
//
// Packing reads each element of W once per call and each element of x once per block of
// W rows: worth it from a few dozen rows of x on (kGemmMinRows, measured); below that the
// dot-product tiles of nn_kernels.hpp, which read W in place, are faster. The packed blocks
// live in one buffer per thread (linear.hpp), reused from call to call.
#pragma once

#include "kernels.hpp"

namespace ptread {
namespace detail {

constexpr size_t kGemmKc = 256;       // columns of a packed block
constexpr size_t kGemmNc = 512;       // W rows of a packed block: kc x nc floats = 512 KiB
constexpr size_t kGemmMc = 42;        // x rows of a packed block (a multiple of both MRs)
constexpr size_t kGemmMinRows = 40;   // rows of x from which Linear packs

// Floats of scratch the packed product needs: both blocks, and room to align them to 64 bytes.
constexpr size_t kGemmScratchFloats = kGemmNc * kGemmKc + kGemmMc * kGemmKc + 32;

// One build of the product: run() over n rows of W from w (row stride ldw elements) into
// y's columns [0, n) (row stride ldy); nr: its panel width (ranges of whole panels waste
// nothing). run is null where there is no build (the generic level).
struct NnGemm {
  void (*run)(const float* x, size_t m, size_t k, const void* w, size_t ldw, float* y, size_t ldy, size_t n,
              float* scratch) noexcept;
  size_t nr;
};

#if PTREAD_NN_X86

// The packing and the micro-kernel, written once over V (nn_kernels.hpp) and its MR.
// transpose(r): r[i] holds row i of an L x L block; afterwards r[c] holds column c.
#define PTREAD_NN_GEMM_KERNELS(TARGET, V, MR)                                                            \
  constexpr size_t kGemmMr = MR;                                                                         \
  constexpr size_t kGemmNr = 2 * V::L;                                                                   \
  /* Panel of nr <= NR rows of W (row stride ldw), kc columns: bp[q * NR + j] = W[j][q], rows  */        \
  /* past nr as zeros.                                                                          */       \
  template <DType DT>                                                                                    \
  TARGET void gemm_pack_w(const void* w, size_t ldw, size_t nr, size_t kc, float* bp) noexcept {         \
    for (size_t h = 0; h < 2; ++h) {                                                                     \
      const size_t rows = nr > h * V::L ? std::min(nr - h * V::L, V::L) : 0;                             \
      const void* first = nn_advance<DT>(w, h * V::L * ldw);                                             \
      size_t q = 0;                                                                                      \
      for (; q + V::L <= kc; q += V::L) {                                                                \
        typename V::R r[V::L];                                                                           \
        PTREAD_NN_UNROLL                                                                                 \
        for (size_t i = 0; i < V::L; ++i) r[i] = i < rows ? load<DT>(nn_advance<DT>(first, i * ldw), q) : V::zero(); \
        transpose(r);                                                                                    \
        PTREAD_NN_UNROLL                                                                                 \
        for (size_t c = 0; c < V::L; ++c) V::store(bp + (q + c) * kGemmNr + h * V::L, r[c]);             \
      }                                                                                                  \
      for (; q < kc; ++q) {                                                                              \
        for (size_t i = 0; i < V::L; ++i) {                                                              \
          bp[q * kGemmNr + h * V::L + i] = i < rows ? nn_load1<DT>(nn_advance<DT>(first, i * ldw), q) : 0.0f; \
        }                                                                                                \
      }                                                                                                  \
    }                                                                                                    \
  }                                                                                                      \
  /* Panel of mr <= MR rows of x (row stride ldx), kc columns: ap[q * MR + i] = x[i][q].        */       \
  TARGET inline void gemm_pack_x(const float* x, size_t ldx, size_t mr, size_t kc, float* ap) noexcept {  \
    for (size_t i = 0; i < kGemmMr; ++i) {                                                               \
      if (i < mr) {                                                                                      \
        const float* xi = x + i * ldx;                                                                   \
        for (size_t q = 0; q < kc; ++q) ap[q * kGemmMr + i] = xi[q];                                     \
      } else {                                                                                           \
        for (size_t q = 0; q < kc; ++q) ap[q * kGemmMr + i] = 0.0f;                                      \
      }                                                                                                  \
    }                                                                                                    \
  }                                                                                                      \
  /* y[i][j] += sum_q ap[q][i] bp[q][j] for i < mr, j < nr.                                     */       \
  TARGET inline void gemm_micro(const float* ap, const float* bp, size_t kc, float* y, size_t ldy, size_t mr, \
                                size_t nr) noexcept {                                                    \
    typename V::R acc[kGemmMr][2];                                                                       \
    PTREAD_NN_UNROLL                                                                                     \
    for (size_t i = 0; i < kGemmMr; ++i) acc[i][0] = acc[i][1] = V::zero();                              \
    for (size_t q = 0; q < kc; ++q) {                                                                    \
      const typename V::R b0 = V::loadf(bp), b1 = V::loadf(bp + V::L);                                   \
      PTREAD_NN_UNROLL                                                                                   \
      for (size_t i = 0; i < kGemmMr; ++i) {                                                             \
        const typename V::R a = V::set1(ap[i]);                                                          \
        acc[i][0] = V::fma(a, b0, acc[i][0]);                                                            \
        acc[i][1] = V::fma(a, b1, acc[i][1]);                                                            \
      }                                                                                                  \
      ap += kGemmMr;                                                                                     \
      bp += kGemmNr;                                                                                     \
    }                                                                                                    \
    if (mr == kGemmMr && nr == kGemmNr) {                                                                \
      PTREAD_NN_UNROLL                                                                                   \
      for (size_t i = 0; i < kGemmMr; ++i) {                                                             \
        float* yi = y + i * ldy;                                                                         \
        V::store(yi, V::add(V::loadf(yi), acc[i][0]));                                                   \
        V::store(yi + V::L, V::add(V::loadf(yi + V::L), acc[i][1]));                                     \
      }                                                                                                  \
      return;                                                                                            \
    }                                                                                                    \
    alignas(64) float tile[kGemmMr][kGemmNr];                                                            \
    PTREAD_NN_UNROLL                                                                                     \
    for (size_t i = 0; i < kGemmMr; ++i) {                                                               \
      V::store(tile[i], acc[i][0]);                                                                      \
      V::store(tile[i] + V::L, acc[i][1]);                                                               \
    }                                                                                                    \
    for (size_t i = 0; i < mr; ++i) {                                                                    \
      for (size_t j = 0; j < nr; ++j) y[i * ldy + j] += tile[i][j];                                      \
    }                                                                                                    \
  }                                                                                                      \
  template <DType DT>                                                                                    \
  TARGET void gemm_run(const float* x, size_t m, size_t k, const void* w, size_t ldw, float* y, size_t ldy, \
                       size_t n, float* scratch) noexcept {                                              \
    float* wp = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});  \
    float* xp = wp + kGemmNc * kGemmKc;                                                                  \
    for (size_t n0 = 0; n0 < n; n0 += kGemmNc) {                                                         \
      const size_t nc = std::min(kGemmNc, n - n0);                                                       \
      for (size_t k0 = 0; k0 < k; k0 += kGemmKc) {                                                       \
        const size_t kc = std::min(kGemmKc, k - k0);                                                     \
        for (size_t j = 0; j < nc; j += kGemmNr) {                                                       \
          gemm_pack_w<DT>(nn_advance<DT>(w, (n0 + j) * ldw + k0), ldw, std::min(kGemmNr, nc - j), kc, wp + j * kc); \
        }                                                                                                \
        for (size_t m0 = 0; m0 < m; m0 += kGemmMc) {                                                     \
          const size_t mc = std::min(kGemmMc, m - m0);                                                   \
          for (size_t i = 0; i < mc; i += kGemmMr) {                                                     \
            gemm_pack_x(x + (m0 + i) * k + k0, k, std::min(kGemmMr, mc - i), kc, xp + i * kc);           \
          }                                                                                              \
          for (size_t j = 0; j < nc; j += kGemmNr) {                                                     \
            for (size_t i = 0; i < mc; i += kGemmMr) {                                                   \
              gemm_micro(xp + i * kc, wp + j * kc, kc, y + (m0 + i) * ldy + n0 + j, ldy,                 \
                         std::min(kGemmMr, mc - i), std::min(kGemmNr, nc - j));                          \
            }                                                                                            \
          }                                                                                              \
        }                                                                                                \
      }                                                                                                  \
    }                                                                                                    \
  }

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace nn_avx2 {
// 8 x 8: pairs interleaved, then quads, then the 128-bit halves.
PTREAD_NN_TARGET_AVX2 inline void transpose(__m256 r[8]) noexcept {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
PTREAD_NN_GEMM_KERNELS(PTREAD_NN_TARGET_AVX2, V, 6)
}  // namespace nn_avx2

namespace nn_avx512 {
// 16 x 16: pairs and quads interleaved within 128-bit lanes, then the lanes moved twice.
PTREAD_NN_TARGET_AVX512 inline void transpose(__m512 r[16]) noexcept {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // r[4q + s], lane L: column 4L + s of rows 4q .. 4q + 3.
  for (int s = 0; s < 4; ++s) {
    t[s] = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x88);
    t[s + 4] = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xdd);
    t[s + 8] = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x88);
    t[s + 12] = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xdd);
  }
  for (int s = 0; s < 4; ++s) {
    r[s] = _mm512_shuffle_f32x4(t[s], t[s + 8], 0x88);
    r[s + 8] = _mm512_shuffle_f32x4(t[s], t[s + 8], 0xdd);
    r[s + 4] = _mm512_shuffle_f32x4(t[s + 4], t[s + 12], 0x88);
    r[s + 12] = _mm512_shuffle_f32x4(t[s + 4], t[s + 12], 0xdd);
  }
}
PTREAD_NN_GEMM_KERNELS(PTREAD_NN_TARGET_AVX512, V, 14)
}  // namespace nn_avx512

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // PTREAD_NN_X86

template <DType DT>
inline NnGemm nn_gemm_for(NnIsa isa) noexcept {
#if PTREAD_NN_X86
  if (isa == NnIsa::avx512) return {&nn_avx512::gemm_run<DT>, nn_avx512::kGemmNr};
  if (isa == NnIsa::avx2) return {&nn_avx2::gemm_run<DT>, nn_avx2::kGemmNr};
#else
  (void)isa;
#endif
  return {nullptr, 0};
}

inline NnGemm nn_gemm(DType dt) noexcept {
  const NnIsa isa = nn_isa();
  if (dt == DType::F16) return nn_gemm_for<DType::F16>(isa);
  if (dt == DType::BF16) return nn_gemm_for<DType::BF16>(isa);
  return nn_gemm_for<DType::F32>(isa);
}

}  // namespace detail
}  // namespace ptread
