// ptread — CUDA kernels and their launchers (internal; the API is in cuda/*.cuh).
//
// Every kernel reads F32, F16 or BF16 elements (WK: 0, 1, 2) and computes in F32. Launchers
// take device pointers, check nothing and return nothing: the callers in cuda/*.cuh check
// arguments before and cudaGetLastError after.
//
// This file uses a small set of CUDA names only (threadIdx, blockIdx, blockDim, gridDim,
// __syncthreads, __shfl_xor_sync, __ldg, __ldcs, atomicMin, uint4, float4, dim3), so that
// with PTREAD_CUDA_EMULATE=1 (tests/cuda/emulate/emu.hpp defines those names) the same kernels
// run on the CPU, one block at a time, each thread a fiber: CI runs them that way on machines
// without a GPU.
#pragma once

#ifndef PTREAD_CUDA_EMULATE
#define PTREAD_CUDA_EMULATE 0
#endif

#include "../../dtype.hpp"

#if !PTREAD_CUDA_EMULATE
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if PTREAD_CUDA_EMULATE
#define PTREAD_CUDA_LAUNCH(kernel, grid, block, stream, ...) \
  ((void)(stream), ::ptread_emu::launch((grid), (block), [&] { kernel(__VA_ARGS__); }))
#define PTREAD_CUDA_UNROLL
#define PTREAD_CUDA_UNROLL4
#else
#define PTREAD_CUDA_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define PTREAD_CUDA_UNROLL _Pragma("unroll")
#define PTREAD_CUDA_UNROLL4 _Pragma("unroll 4")  // loads of four steps in flight per warp
#endif

namespace ptread {
namespace cuda {
namespace detail {

// ---- elements ----

__device__ __forceinline__ float bits_as_float(uint32_t u) {
#if PTREAD_CUDA_EMULATE
  return ::ptread::detail::bits_to_float(u);
#else
  return __uint_as_float(u);
#endif
}

// NaNs keep their payload and come out quiet, as x86's F16C and torch's CPU .float() make
// them (and copy_to(F32)): the same bits on every device, whatever its own conversion does.
__device__ __forceinline__ float f16_bits_to_float(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {
    return bits_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7fc00000u |
                         (static_cast<uint32_t>(h & 0x3ffu) << 13));
  }
#if PTREAD_CUDA_EMULATE
  return ::ptread::detail::f16_to_float(h);
#else
  return __half2float(__ushort_as_half(h));
#endif
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return bits_as_float(static_cast<uint32_t>(h) << 16); }

// WK: 0 F32, 1 F16, 2 BF16. kVec elements fill one 16-byte load.
template <int WK>
struct Elem;
template <>
struct Elem<0> {
  static constexpr int kVec = 4;
  static constexpr size_t kSize = 4;
  __device__ static float load(const void* p, size_t i) { return __ldg(static_cast<const float*>(p) + i); }
  __device__ static void unpack(const uint4& v, float* f) {
    f[0] = bits_as_float(v.x);
    f[1] = bits_as_float(v.y);
    f[2] = bits_as_float(v.z);
    f[3] = bits_as_float(v.w);
  }
};
template <int WK>
struct Elem16 {
  static constexpr int kVec = 8;
  static constexpr size_t kSize = 2;
  __device__ static float cvt(uint16_t h) { return WK == 1 ? f16_bits_to_float(h) : bf16_bits_to_float(h); }
  __device__ static float load(const void* p, size_t i) {
    return cvt(__ldg(static_cast<const unsigned short*>(p) + i));
  }
  __device__ static void unpack(const uint4& v, float* f) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    PTREAD_CUDA_UNROLL
    for (unsigned q = 0; q < 4; ++q) {  // element 2q is the low half (little-endian)
      f[2 * q] = cvt(static_cast<uint16_t>(words[q] & 0xffffu));
      f[2 * q + 1] = cvt(static_cast<uint16_t>(words[q] >> 16));
    }
  }
};
template <>
struct Elem<1> : Elem16<1> {};
template <>
struct Elem<2> : Elem16<2> {};

// The kernels' code for a weight dtype (-1: not F32, F16 or BF16).
inline int weight_kind(DType t) noexcept {
  return t == DType::F32 ? 0 : t == DType::F16 ? 1 : t == DType::BF16 ? 2 : -1;
}

// f(std::integral_constant<int, WK>{}) for the weight kind wk: the launchers' one dispatch.
template <class F>
inline void with_weight_kind(int wk, F&& f) {
  if (wk == 1) {
    f(std::integral_constant<int, 1>{});
  } else if (wk == 2) {
    f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, 0>{});
  }
}

inline unsigned grid_for(size_t items, unsigned per_block, unsigned cap = 1u << 20) {
  const size_t g = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(g < cap ? (g == 0 ? 1 : g) : cap);
}

// ---- conversions ----

// out[i] = in[i] as F32, i < n (contiguous; the upload's F16/BF16 -> F32).
template <int WK>
__global__ void to_f32_kernel(const void* __restrict__ in, size_t n, float* __restrict__ out) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = Elem<WK>::load(in, i);
  }
}

// The bits of an element of type T, unconverted (Elem<WK> converts to F32).
template <class T>
struct Bits {
  __device__ static T load(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
};

// out[r * cols + c] = E::load(in, r * rs + c * cs): a strided view made contiguous, widened to
// F32 (E = Elem<WK>) or copied as it is (E = Bits<T>).
template <class E, class Out>
__global__ void strided_kernel(const void* __restrict__ in, size_t rows, size_t cols, size_t rs, size_t cs,
                               Out* __restrict__ out) {
  const size_t n = rows * cols, step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const size_t r = i / cols, c = i - r * cols;
    out[i] = E::load(in, r * rs + c * cs);
  }
}

inline void launch_to_f32(int wk, const void* in, size_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, 256);
  with_weight_kind(wk, [&](auto w) {
    const auto k = to_f32_kernel<decltype(w)::value>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, in, n, out);
  });
}

inline void launch_strided_to_f32(int wk, const void* in, size_t rows, size_t cols, size_t rs, size_t cs, float* out,
                                  cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  const unsigned grid = grid_for(rows * cols, 256);
  with_weight_kind(wk, [&](auto w) {
    const auto k = strided_kernel<Elem<decltype(w)::value>, float>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, in, rows, cols, rs, cs, out);
  });
}

// Elements of 2 or 4 bytes.
inline void launch_strided_copy(size_t elem_size, const void* in, size_t rows, size_t cols, size_t rs, size_t cs,
                                void* out, cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  const unsigned grid = grid_for(rows * cols, 256);
  if (elem_size == 4) {
    const auto k = strided_kernel<Bits<uint32_t>, uint32_t>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, in, rows, cols, rs, cs, static_cast<uint32_t*>(out));
  } else {
    const auto k = strided_kernel<Bits<uint16_t>, uint16_t>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, in, rows, cols, rs, cs, static_cast<uint16_t*>(out));
  }
}

// ---- Linear: y [M x N] = x [M x K] W^T + b, W [N x K] with rows ldw elements apart ----

// Batches of 1 to 8 rows: each warp streams R rows of W once, for all MB rows of x (read
// through the cache: every warp reads the same x). VEC: 16-byte loads, when W's rows, x and K
// allow them; otherwise one element per lane and step. VEC loads the W vectors of U steps
// first, then reads x and multiplies: U * R loads of W in flight per lane, whatever x's
// registers leave the compiler (which hoists no load past the FMAs when MB * V values of x are
// live per step). Each lane sums its steps in k order; lanes sum with shuffles at the end.
constexpr int kRowsWarps = 4;  // warps per block

template <int MB, int R, int U, int WK, bool VEC>
__global__ void __launch_bounds__(kRowsWarps * 32)
    linear_rows_kernel(const void* __restrict__ w, size_t ldw, const float* __restrict__ x,
                       const float* __restrict__ bias, float* __restrict__ y, size_t N, size_t K) {
  using E = Elem<WK>;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const size_t n0 = (static_cast<size_t>(blockIdx.x) * kRowsWarps + warp) * R;
  if (n0 >= N) return;  // the whole warp leaves together; this kernel has no block barrier
  const auto* wb = static_cast<const unsigned char*>(w);
  float acc[MB][R];
  PTREAD_CUDA_UNROLL
  for (unsigned m = 0; m < MB; ++m) {
    PTREAD_CUDA_UNROLL
    for (unsigned r = 0; r < R; ++r) acc[m][r] = 0.0f;
  }
  if constexpr (VEC) {
    constexpr int V = E::kVec;
    constexpr size_t kStep = 32 * V;
    for (size_t kb = static_cast<size_t>(lane) * V; kb < K; kb += U * kStep) {
      uint4 raw[U][R];
      PTREAD_CUDA_UNROLL
      for (unsigned u = 0; u < U; ++u) {
        const size_t k = kb + u * kStep;
        PTREAD_CUDA_UNROLL
        for (unsigned r = 0; r < R; ++r) {
          raw[u][r] = uint4{};
          if (k < K && n0 + r < N) raw[u][r] = __ldcs(reinterpret_cast<const uint4*>(wb + ((n0 + r) * ldw + k) * E::kSize));
        }
      }
      PTREAD_CUDA_UNROLL
      for (unsigned u = 0; u < U; ++u) {
        const size_t k = kb + u * kStep;
        if (k >= K) break;
        float xv[MB][V];
        PTREAD_CUDA_UNROLL
        for (unsigned m = 0; m < MB; ++m) {
          const auto* xp = reinterpret_cast<const float4*>(x + static_cast<size_t>(m) * K + k);
          PTREAD_CUDA_UNROLL
          for (unsigned q = 0; q < V / 4; ++q) {
            const float4 f = __ldg(xp + q);
            xv[m][4 * q] = f.x;
            xv[m][4 * q + 1] = f.y;
            xv[m][4 * q + 2] = f.z;
            xv[m][4 * q + 3] = f.w;
          }
        }
        PTREAD_CUDA_UNROLL
        for (unsigned r = 0; r < R; ++r) {
          float wf[V];
          E::unpack(raw[u][r], wf);
          PTREAD_CUDA_UNROLL
          for (unsigned m = 0; m < MB; ++m) {
            PTREAD_CUDA_UNROLL
            for (unsigned q = 0; q < V; ++q) acc[m][r] += xv[m][q] * wf[q];
          }
        }
      }
    }
  } else {
    PTREAD_CUDA_UNROLL4
    for (size_t k = lane; k < K; k += 32) {
      float wf[R];
      PTREAD_CUDA_UNROLL
      for (unsigned r = 0; r < R; ++r) wf[r] = n0 + r < N ? E::load(w, (n0 + r) * ldw + k) : 0.0f;
      PTREAD_CUDA_UNROLL
      for (unsigned m = 0; m < MB; ++m) {
        const float xv = __ldg(x + static_cast<size_t>(m) * K + k);
        PTREAD_CUDA_UNROLL
        for (unsigned r = 0; r < R; ++r) acc[m][r] += xv * wf[r];
      }
    }
  }
  PTREAD_CUDA_UNROLL
  for (unsigned m = 0; m < MB; ++m) {
    PTREAD_CUDA_UNROLL
    for (unsigned r = 0; r < R; ++r) {
      float v = acc[m][r];
      PTREAD_CUDA_UNROLL
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      const size_t n = n0 + r;
      if (lane == ((m * R + r) & 31u) && n < N) y[m * N + n] = v + (bias ? bias[n] : 0.0f);
    }
  }
}

// Larger batches: a BM x BN tile of y per block, K in steps of kTileK through shared memory
// (x and W widened to F32 as they are stored), each thread TM x TN outputs strided by the
// thread grid (so a warp's shared-memory reads are broadcasts or consecutive).
constexpr int kTileK = 16;

template <int BM, int BN, int TM, int TN, int WK>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    linear_tiled_kernel(const void* __restrict__ w, size_t ldw, const float* __restrict__ x,
                        const float* __restrict__ bias, float* __restrict__ y, size_t M, size_t N, size_t K) {
  constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
  static_assert((BM * kTileK) % NT == 0 && (BN * kTileK) % NT == 0, "tile loads divide among the threads");
  __shared__ float xs[kTileK][BM + 1];
  __shared__ float ws[kTileK][BN + 1];
  const unsigned tid = threadIdx.x;
  const unsigned tx = tid % TX, ty = tid / TX;
  const size_t m0 = static_cast<size_t>(blockIdx.y) * BM, n0 = static_cast<size_t>(blockIdx.x) * BN;
  float acc[TM][TN];
  PTREAD_CUDA_UNROLL
  for (unsigned i = 0; i < TM; ++i) {
    PTREAD_CUDA_UNROLL
    for (unsigned j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }
  for (size_t k0 = 0; k0 < K; k0 += kTileK) {
    PTREAD_CUDA_UNROLL
    for (unsigned e = tid; e < BM * kTileK; e += NT) {
      const size_t row = e / kTileK, kk = e % kTileK;
      const size_t m = m0 + row, k = k0 + kk;
      xs[kk][row] = m < M && k < K ? __ldg(x + m * K + k) : 0.0f;
    }
    PTREAD_CUDA_UNROLL
    for (unsigned e = tid; e < BN * kTileK; e += NT) {
      const size_t row = e / kTileK, kk = e % kTileK;
      const size_t n = n0 + row, k = k0 + kk;
      ws[kk][row] = n < N && k < K ? Elem<WK>::load(w, n * ldw + k) : 0.0f;
    }
    __syncthreads();
    PTREAD_CUDA_UNROLL
    for (unsigned kk = 0; kk < kTileK; ++kk) {
      float a[TM], b[TN];
      PTREAD_CUDA_UNROLL
      for (unsigned i = 0; i < TM; ++i) a[i] = xs[kk][ty + TY * i];
      PTREAD_CUDA_UNROLL
      for (unsigned j = 0; j < TN; ++j) b[j] = ws[kk][tx + TX * j];
      PTREAD_CUDA_UNROLL
      for (unsigned i = 0; i < TM; ++i) {
        PTREAD_CUDA_UNROLL
        for (unsigned j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
      }
    }
    __syncthreads();
  }
  PTREAD_CUDA_UNROLL
  for (unsigned i = 0; i < TM; ++i) {
    const size_t m = m0 + ty + TY * i;
    PTREAD_CUDA_UNROLL
    for (unsigned j = 0; j < TN; ++j) {
      const size_t n = n0 + tx + TX * j;
      if (m < M && n < N) y[m * N + n] = acc[i][j] + (bias ? bias[n] : 0.0f);
    }
  }
}

// Larger batches when 16-byte loads are possible (rows_vectorizable): a BM x BN tile of y per
// block, 8 x 8 outputs a thread as four 4 x 4 blocks (rows 4 ty.. and BM / 2 + 4 ty.., columns
// likewise: 16-byte shared-memory reads, broadcast or consecutive across a warp), K in steps
// of kVecTileK through two shared-memory buffers: a step's global loads (16 bytes each) are
// issued before the previous step's products and stored into the other buffer after them,
// one barrier a step. Each output sums its products in k order, as the kernel above does.
constexpr int kVecTileK = 8;

template <int BM, int BN, int WK>
__global__ void __launch_bounds__((BM / 8) * (BN / 8))
    linear_tiled_vec_kernel(const void* __restrict__ w, size_t ldw, const float* __restrict__ x,
                            const float* __restrict__ bias, float* __restrict__ y, size_t M, size_t N, size_t K,
                            bool vec_store) {
  using E = Elem<WK>;
  constexpr int BK = kVecTileK, V = E::kVec, TX = BN / 8, TY = BM / 8, NT = TX * TY;
  constexpr int XL = BM * BK / 4, WL = BN * BK / V;  // 16-byte loads of an x tile, of a W tile
  constexpr int XPT = (XL + NT - 1) / NT, WPT = (WL + NT - 1) / NT;
  static_assert(BM % 32 == 0 && BN % 32 == 0 && BK % V == 0, "tile shapes");
  __shared__ float4 xs4[2][BK][BM / 4];
  __shared__ float4 ws4[2][BK][BN / 4];
  const unsigned tid = threadIdx.x;
  const unsigned tx = tid % TX, ty = tid / TX;
  const size_t m0 = static_cast<size_t>(blockIdx.y) * BM, n0 = static_cast<size_t>(blockIdx.x) * BN;
  const auto* wb = static_cast<const unsigned char*>(w);
  float4 xr[XPT];
  uint4 wr[WPT];
  float acc[8][8];
  PTREAD_CUDA_UNROLL
  for (unsigned i = 0; i < 8; ++i) {
    PTREAD_CUDA_UNROLL
    for (unsigned j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  }
  const size_t steps = (K + BK - 1) / BK;
  // Global loads of step t into xr / wr (zeros past M, N or K: K is a multiple of V).
  auto load = [&](size_t t) {
    const size_t k0 = t * BK;
    PTREAD_CUDA_UNROLL
    for (unsigned p = 0; p < XPT; ++p) {
      const unsigned e = tid + p * NT;
      const size_t m = m0 + e / (BK / 4), k = k0 + (e % (BK / 4)) * 4;
      xr[p] = float4{};
      if (e < XL && m < M && k < K) xr[p] = __ldg(reinterpret_cast<const float4*>(x + m * K + k));
    }
    PTREAD_CUDA_UNROLL
    for (unsigned p = 0; p < WPT; ++p) {
      const unsigned e = tid + p * NT;
      const size_t n = n0 + e / (BK / V), k = k0 + (e % (BK / V)) * V;
      wr[p] = uint4{};
      if (e < WL && n < N && k < K) wr[p] = __ldg(reinterpret_cast<const uint4*>(wb + (n * ldw + k) * E::kSize));
    }
  };
  // xr / wr into buffer b, k-major (widened to F32).
  auto store = [&](unsigned b) {
    float* xs = reinterpret_cast<float*>(xs4[b]);
    float* ws = reinterpret_cast<float*>(ws4[b]);
    PTREAD_CUDA_UNROLL
    for (unsigned p = 0; p < XPT; ++p) {
      const unsigned e = tid + p * NT;
      if (e >= XL) break;
      const unsigned row = e / (BK / 4), kk = (e % (BK / 4)) * 4;
      xs[(kk + 0) * BM + row] = xr[p].x;
      xs[(kk + 1) * BM + row] = xr[p].y;
      xs[(kk + 2) * BM + row] = xr[p].z;
      xs[(kk + 3) * BM + row] = xr[p].w;
    }
    PTREAD_CUDA_UNROLL
    for (unsigned p = 0; p < WPT; ++p) {
      const unsigned e = tid + p * NT;
      if (e >= WL) break;
      const unsigned row = e / (BK / V), kk = (e % (BK / V)) * V;
      float f[V];
      E::unpack(wr[p], f);
      PTREAD_CUDA_UNROLL
      for (unsigned q = 0; q < V; ++q) ws[(kk + q) * BN + row] = f[q];
    }
  };
  load(0);
  store(0);
  __syncthreads();
  for (size_t t = 0; t < steps; ++t) {
    const unsigned b = static_cast<unsigned>(t & 1);
    if (t + 1 < steps) load(t + 1);
    PTREAD_CUDA_UNROLL
    for (unsigned kk = 0; kk < BK; ++kk) {
      const float4 a0 = xs4[b][kk][ty], a1 = xs4[b][kk][TY + ty];
      const float4 b0 = ws4[b][kk][tx], b1 = ws4[b][kk][TX + tx];
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
      PTREAD_CUDA_UNROLL
      for (unsigned i = 0; i < 8; ++i) {
        PTREAD_CUDA_UNROLL
        for (unsigned j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
      }
    }
    if (t + 1 < steps) store(b ^ 1u);
    __syncthreads();
  }
  PTREAD_CUDA_UNROLL
  for (unsigned i = 0; i < 8; ++i) {
    const size_t m = m0 + (i < 4 ? 4 * ty + i : BM / 2 + 4 * ty + (i - 4));
    if (m >= M) continue;
    PTREAD_CUDA_UNROLL
    for (unsigned h = 0; h < 2; ++h) {
      const size_t n = n0 + (h == 0 ? 4 * tx : BN / 2 + 4 * tx);
      float v[4];
      PTREAD_CUDA_UNROLL
      for (unsigned j = 0; j < 4; ++j) v[j] = acc[i][4 * h + j] + (bias && n + j < N ? bias[n + j] : 0.0f);
      if (vec_store && n + 3 < N) {
        *reinterpret_cast<float4*>(y + m * N + n) = float4{v[0], v[1], v[2], v[3]};
      } else {
        PTREAD_CUDA_UNROLL
        for (unsigned j = 0; j < 4; ++j) {
          if (n + j < N) y[m * N + n + j] = v[j];
        }
      }
    }
  }
}

struct LinearArgs {
  const void* w = nullptr;
  int wk = 0;        // weight_kind()
  size_t ldw = 0;    // elements between W's rows
  const float* x = nullptr;
  const float* bias = nullptr;  // null: none
  float* y = nullptr;
  size_t m = 0, n = 0, k = 0;
};

// Batches up to this many rows use linear_rows_kernel.
constexpr size_t kRowsMaxBatch = 8;

// One shape of the rows kernel: R rows of W a warp, U steps of W loads ahead.
template <int MB, int R, int U, int WK>
inline void launch_rows_shape(const LinearArgs& a, bool vec, cudaStream_t s) {
  const size_t warps = (a.n + R - 1) / R;
  const unsigned grid = static_cast<unsigned>((warps + kRowsWarps - 1) / kRowsWarps);
  if (vec) {
    const auto k = linear_rows_kernel<MB, R, U, WK, true>;
    PTREAD_CUDA_LAUNCH(k, grid, kRowsWarps * 32, s, a.w, a.ldw, a.x, a.bias, a.y, a.n, a.k);
  } else {
    const auto k = linear_rows_kernel<MB, R, 1, WK, false>;
    PTREAD_CUDA_LAUNCH(k, grid, kRowsWarps * 32, s, a.w, a.ldw, a.x, a.bias, a.y, a.n, a.k);
  }
}

// The shapes measured fastest on an H100 at N = K = 4096 (bench/README.md, "CUDA"): F32 one
// row a warp, four steps ahead (two from 5 rows of x on, as x's registers grow); 16-bit
// weights two rows a warp four steps ahead, then four rows two steps ahead (each x value
// read serves more rows of W).
template <int MB, int WK>
inline void launch_rows(const LinearArgs& a, bool vec, cudaStream_t s) {
  if constexpr (WK == 0) {
    launch_rows_shape<MB, 1, MB <= 4 ? 4 : 2, WK>(a, vec, s);
  } else {
    launch_rows_shape<MB, MB <= 4 ? 2 : 4, MB <= 4 ? 4 : 2, WK>(a, vec, s);
  }
}

template <int WK>
inline void launch_rows_wk(const LinearArgs& a, bool vec, cudaStream_t s) {
  switch (a.m) {
    case 1: launch_rows<1, WK>(a, vec, s); break;
    case 2: launch_rows<2, WK>(a, vec, s); break;
    case 3: launch_rows<3, WK>(a, vec, s); break;
    case 4: launch_rows<4, WK>(a, vec, s); break;
    case 5: launch_rows<5, WK>(a, vec, s); break;
    case 6: launch_rows<6, WK>(a, vec, s); break;
    case 7: launch_rows<7, WK>(a, vec, s); break;
    default: launch_rows<8, WK>(a, vec, s); break;
  }
}

// gridDim.y is at most 65535: taller batches go in slices of rows. Calls
// f(r0, rows, grid) for each slice of BM-row tiles by BN-column tiles.
template <int BM, int BN, class F>
inline void for_row_slices(const LinearArgs& a, F&& f) {
  const size_t max_rows = size_t{65535} * BM;
  const unsigned gx = static_cast<unsigned>((a.n + BN - 1) / BN);
  for (size_t r0 = 0; r0 < a.m; r0 += max_rows) {
    const size_t rows = a.m - r0 < max_rows ? a.m - r0 : max_rows;
    f(r0, rows, dim3(gx, static_cast<unsigned>((rows + BM - 1) / BM)));
  }
}

template <int BM, int BN, int TM, int TN, int WK>
inline void launch_tiled(const LinearArgs& a, cudaStream_t s) {
  for_row_slices<BM, BN>(a, [&](size_t r0, size_t rows, dim3 grid) {
    const auto k = linear_tiled_kernel<BM, BN, TM, TN, WK>;
    PTREAD_CUDA_LAUNCH(k, grid, (BM / TM) * (BN / TN), s, a.w, a.ldw, a.x + r0 * a.k, a.bias, a.y + r0 * a.n, rows,
                       a.n, a.k);
  });
}

template <int BM, int BN, int WK>
inline void launch_tiled_vec(const LinearArgs& a, cudaStream_t s) {
  const bool vec_store = a.n % 4 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  for_row_slices<BM, BN>(a, [&](size_t r0, size_t rows, dim3 grid) {
    const auto k = linear_tiled_vec_kernel<BM, BN, WK>;
    PTREAD_CUDA_LAUNCH(k, grid, (BM / 8) * (BN / 8), s, a.w, a.ldw, a.x + r0 * a.k, a.bias, a.y + r0 * a.n, rows,
                       a.n, a.k, vec_store);
  });
}

// The largest tile that still gives every SM a block (sm_count: the device's SMs): with
// 16-byte loads (vec) the double-buffered kernel's 128 x 128, 128 x 64 or 64 x 64 tiles,
// else (or when even those leave SMs idle: the small tiles have more blocks) the plain one's.
template <int WK>
inline void launch_tiled_wk(const LinearArgs& a, bool vec, int sm_count, cudaStream_t s) {
  auto blocks = [&a](size_t bm, size_t bn) { return ((a.m + bm - 1) / bm) * ((a.n + bn - 1) / bn); };
  const size_t sms = sm_count > 0 ? static_cast<size_t>(sm_count) : 1;
  if (vec && blocks(128, 128) >= sms) {
    launch_tiled_vec<128, 128, WK>(a, s);
  } else if (vec && blocks(128, 64) >= sms) {
    launch_tiled_vec<128, 64, WK>(a, s);
  } else if (vec && blocks(64, 64) >= sms) {
    launch_tiled_vec<64, 64, WK>(a, s);
  } else if (blocks(128, 128) >= sms) {
    launch_tiled<128, 128, 8, 8, WK>(a, s);
  } else if (blocks(64, 64) >= sms) {
    launch_tiled<64, 64, 4, 4, WK>(a, s);
  } else {
    launch_tiled<32, 32, 2, 2, WK>(a, s);
  }
}

// 16-byte loads need W, its row pitch and x 16-byte aligned, and K a multiple of a vector.
inline bool rows_vectorizable(const LinearArgs& a) {
  const size_t es = a.wk == 0 ? 4 : 2, v = a.wk == 0 ? 4 : 8;
  return reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && (a.ldw * es) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.k % v == 0;
}

inline void launch_linear(const LinearArgs& a, int sm_count, cudaStream_t s) {
  if (a.m == 0 || a.n == 0) return;
  const bool vec = rows_vectorizable(a);
  with_weight_kind(a.wk, [&](auto w) {
    if (a.m <= kRowsMaxBatch) {
      launch_rows_wk<decltype(w)::value>(a, vec, s);
    } else {
      launch_tiled_wk<decltype(w)::value>(a, vec, sm_count, s);
    }
  });
}

// ---- Embedding and EmbeddingBag ----

// A table: rows of `dim` elements; element (r, c) at r * rs + c * cs.
struct TableArgs {
  const void* w = nullptr;
  int wk = 0;
  size_t rows = 0, dim = 0, rs = 0, cs = 1;
};

// Flags start at ~0 and keep the smallest position found bad.
template <class Index>
__global__ void check_indices_kernel(const Index* __restrict__ idx, size_t n, size_t rows,
                                     unsigned long long* __restrict__ first_bad) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const auto v = static_cast<long long>(idx[i]);
    if (v < 0 || static_cast<unsigned long long>(v) >= rows) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// offsets[0 .. count): offsets[0] == 0, never decreasing, never past n, and with
// include_last_offset offsets[num_bags] == n (the CPU layer's rules).
template <class Index>
__global__ void check_offsets_kernel(const Index* __restrict__ off, size_t count, size_t n, size_t num_bags,
                                     bool include_last, unsigned long long* __restrict__ first_bad) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t b = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < count; b += step) {
    const auto cur = static_cast<long long>(off[b]);
    bool bad = cur < 0 || static_cast<unsigned long long>(cur) > n;
    if (b == 0) {
      bad = bad || cur != 0;
    } else {
      bad = bad || cur < static_cast<long long>(off[b - 1]);
    }
    if (include_last && b == num_bags) bad = bad || static_cast<unsigned long long>(cur) != n;
    if (bad) atomicMin(first_bad, static_cast<unsigned long long>(b));
  }
}

// out[i * dim + c] = table[idx[i]][c] (indices checked before). Block: 32 x 8 threads, y
// picks an index, x walks its row.
template <int WK, class Index>
__global__ void gather_kernel(TableArgs t, const Index* __restrict__ idx, size_t n, float* __restrict__ out) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.y;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.y + threadIdx.y; i < n; i += step) {
    const auto r = static_cast<size_t>(idx[i]);
    for (size_t c = threadIdx.x; c < t.dim; c += blockDim.x) out[i * t.dim + c] = Elem<WK>::load(t.w, r * t.rs + c * t.cs);
  }
}

struct BagArgs {
  size_t n = 0, num_bags = 0;
  bool include_last = false;
  int mode = 0;               // 0 sum, 1 mean, 2 max (nn::Reduce's order)
  long long padding = -1;     // a normalized padding_idx, or -1
  const float* psw = nullptr; // per_sample_weights (sum only), or null
};

// One block per bag, threads over the columns: the CPU layer's arithmetic, column by column.
// Offsets are clamped so that even unchecked ones never read outside idx.
template <int WK, class Index>
__global__ void bag_kernel(TableArgs t, BagArgs b, const Index* __restrict__ idx, const Index* __restrict__ off,
                           float* __restrict__ out) {
  for (size_t bag = blockIdx.x; bag < b.num_bags; bag += gridDim.x) {
    const auto s64 = static_cast<long long>(off[bag]);
    const auto e64 = bag + 1 < b.num_bags || b.include_last ? static_cast<long long>(off[bag + 1])
                                                            : static_cast<long long>(b.n);
    const size_t start = s64 < 0 ? 0 : static_cast<size_t>(s64) > b.n ? b.n : static_cast<size_t>(s64);
    const size_t end = e64 < 0 ? 0 : static_cast<size_t>(e64) > b.n ? b.n : static_cast<size_t>(e64);
    for (size_t c = threadIdx.x; c < t.dim; c += blockDim.x) {
      float acc = 0.0f;
      size_t count = 0;
      for (size_t i = start; i < end; ++i) {
        const auto r = static_cast<long long>(idx[i]);
        if (r == b.padding) continue;
        const float v = Elem<WK>::load(t.w, static_cast<size_t>(r) * t.rs + c * t.cs);
        if (b.mode == 2) {
          acc = count == 0 ? v : (v > acc ? v : acc);
        } else {
          acc += (b.psw ? b.psw[i] : 1.0f) * v;
        }
        ++count;
      }
      if (count == 0) {
        acc = 0.0f;
      } else if (b.mode == 1 && count > 1) {
        acc /= static_cast<float>(count);
      }
      out[bag * t.dim + c] = acc;
    }
  }
}

inline void launch_check_indices(bool i64, const void* idx, size_t n, size_t rows, unsigned long long* flag,
                                 cudaStream_t s) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, 256, 4096);
  if (i64) {
    const auto k = check_indices_kernel<int64_t>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, static_cast<const int64_t*>(idx), n, rows, flag);
  } else {
    const auto k = check_indices_kernel<int32_t>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, static_cast<const int32_t*>(idx), n, rows, flag);
  }
}

inline void launch_check_offsets(bool i64, const void* off, size_t count, size_t n, size_t num_bags,
                                 bool include_last, unsigned long long* flag, cudaStream_t s) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, 256, 4096);
  if (i64) {
    const auto k = check_offsets_kernel<int64_t>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, static_cast<const int64_t*>(off), count, n, num_bags, include_last, flag);
  } else {
    const auto k = check_offsets_kernel<int32_t>;
    PTREAD_CUDA_LAUNCH(k, grid, 256, s, static_cast<const int32_t*>(off), count, n, num_bags, include_last, flag);
  }
}

template <class Index>
inline void launch_gather_ix(const TableArgs& t, const Index* idx, size_t n, float* out, cudaStream_t s) {
  const dim3 block(32, 8);
  const unsigned grid = grid_for(n, 8);
  with_weight_kind(t.wk, [&](auto w) {
    const auto k = gather_kernel<decltype(w)::value, Index>;
    PTREAD_CUDA_LAUNCH(k, grid, block, s, t, idx, n, out);
  });
}

inline void launch_gather(const TableArgs& t, bool i64, const void* idx, size_t n, float* out, cudaStream_t s) {
  if (n == 0 || t.dim == 0) return;
  if (i64) {
    launch_gather_ix(t, static_cast<const int64_t*>(idx), n, out, s);
  } else {
    launch_gather_ix(t, static_cast<const int32_t*>(idx), n, out, s);
  }
}

template <class Index>
inline void launch_bag_ix(const TableArgs& t, const BagArgs& b, const Index* idx, const Index* off, float* out,
                          cudaStream_t s) {
  const size_t threads = (t.dim + 31) / 32 * 32;
  const unsigned block = static_cast<unsigned>(threads < 256 ? threads : 256);
  const unsigned grid = grid_for(b.num_bags, 1);
  with_weight_kind(t.wk, [&](auto w) {
    const auto k = bag_kernel<decltype(w)::value, Index>;
    PTREAD_CUDA_LAUNCH(k, grid, block, s, t, b, idx, off, out);
  });
}

inline void launch_bag(const TableArgs& t, const BagArgs& b, bool i64, const void* idx, const void* off, float* out,
                       cudaStream_t s) {
  if (b.num_bags == 0 || t.dim == 0) return;
  if (i64) {
    launch_bag_ix(t, b, static_cast<const int64_t*>(idx), static_cast<const int64_t*>(off), out, s);
  } else {
    launch_bag_ix(t, b, static_cast<const int32_t*>(idx), static_cast<const int32_t*>(off), out, s);
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace ptread
