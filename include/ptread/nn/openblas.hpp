// ptread — an OpenBLAS backend for nn::Linear. Opt-in: the only header that names cblas_*.
// Link OpenBLAS (CMake: target ptread::openblas, defined when OpenBLAS is found; Meson: the
// `openblas` feature).
//
//   #include <ptread/nn/openblas.hpp>
//   ptread::nn::LinearOptions opt;
//   opt.backend = ptread::nn::openblas_backend();
//   auto fc = ptread::nn::Linear::from(*ck, "fc", opt);
//
// Batch 1 calls cblas_sgemv (Debian's OpenBLAS 0.3.21 runs sgemm with M=1 about 4x slower than
// sgemv), larger batches cblas_sgemm; the bias is written into y first and added with beta=1.
// F32 weights are used where the checkpoint holds them (any row stride). F16 and BF16 weights
// are widened once, when the layer is made, into an owned F32 copy: 4 * in * out bytes for
// each layer, on top of the mapped file (BLAS has no F16/BF16 sgemm). Threads are OpenBLAS's
// own: openblas_backend(threads) calls openblas_set_num_threads(threads) before each product
// (a process-wide setting); 0 leaves OpenBLAS's setting alone (OPENBLAS_NUM_THREADS, or all
// cores).
#pragma once

#include "linear.hpp"

#include <cblas.h>

#include <climits>
#include <cstring>
#include <vector>

namespace ptread {
namespace nn {

namespace detail {

class OpenBlasLinear final : public LinearBackend {
 public:
  explicit OpenBlasLinear(int threads) : threads_(threads) {}
  const char* name() const noexcept override { return "openblas"; }

  Result<std::shared_ptr<const void>> prepare(const WeightMatrix& w) const override {
    if (w.rows > INT_MAX || w.cols > INT_MAX || w.row_stride > INT_MAX) {
      return make_error(ErrorCode::limit_exceeded, "Linear (openblas): weight dimensions exceed BLAS's int");
    }
    if (w.dtype == DType::F32) return std::shared_ptr<const void>();
    const size_t n = w.rows * w.cols;
    if (w.cols != 0 && n / w.cols != w.rows) return make_error(ErrorCode::shape_overflow, "Linear: weight too large");
    auto widened = std::make_shared<std::vector<float>>();
    widened->resize(n);
    const ptread::detail::NnKernels k = ptread::detail::nn_kernels(w.dtype);
    for (size_t r = 0; r < w.rows; ++r) k.widen(w.row(r), widened->data() + r * w.cols, w.cols);
    return std::shared_ptr<const void>(std::move(widened));
  }

  Status forward(const WeightMatrix& w, const void* prepared, const float* bias, const float* x, size_t m,
                 float* y) const override {
    if (m > INT_MAX) return make_error(ErrorCode::limit_exceeded, "Linear (openblas): batch exceeds BLAS's int");
    const int N = static_cast<int>(w.rows), K = static_cast<int>(w.cols);
    const float* W = static_cast<const float*>(w.data);
    int ldw = static_cast<int>(w.row_stride);
    if (prepared != nullptr) {
      W = static_cast<const std::vector<float>*>(prepared)->data();
      ldw = K;
    }
    if (ldw < (K > 1 ? K : 1)) ldw = K > 1 ? K : 1;  // a [N, 1] or overlapping-row view: BLAS wants ld >= K
    const size_t rows = w.rows;
    for (size_t i = 0; i < m; ++i) {
      if (bias != nullptr) {
        std::memcpy(y + i * rows, bias, rows * sizeof(float));
      } else {
        std::memset(y + i * rows, 0, rows * sizeof(float));
      }
    }
    if (K == 0) return {};
    if (ldw != static_cast<int>(w.row_stride) && prepared == nullptr) return rows_by_hand(w, x, m, y);
    if (threads_ > 0) openblas_set_num_threads(threads_);
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W, ldw, x, 1, 1.0f, y, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), N, K, 1.0f, x, K, W, ldw, 1.0f, y, N);
    }
    return {};
  }

 private:
  // Rows that overlap or a single column: row strides BLAS cannot express.
  static Status rows_by_hand(const WeightMatrix& w, const float* x, size_t m, float* y) {
    const ptread::detail::NnKernels k = ptread::detail::nn_kernels(w.dtype);
    for (size_t n = 0; n < w.rows; ++n) {
      for (size_t i = 0; i < m; ++i) k.tile(x + i * w.cols, w.cols, w.row(n), w.row_stride, y + i * w.rows + n, 0, 1, 1, w.cols);
    }
    return {};
  }

  int threads_;
};

}  // namespace detail

// The OpenBLAS backend for LinearOptions::backend. threads > 0: openblas_set_num_threads(threads)
// before each product; 0: OpenBLAS's own setting.
inline std::shared_ptr<const LinearBackend> openblas_backend(int threads = 0) {
  return std::make_shared<detail::OpenBlasLinear>(threads);
}

}  // namespace nn
}  // namespace ptread
