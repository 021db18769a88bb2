// ptread — nn::Linear: F.linear (y = x W^T + b) on the CPU.
//
//   auto fc = ptread::nn::Linear::from(*ck, "fc");          // fc.weight [out, in], fc.bias [out]
//   std::vector<float> y(m * fc->out_features());
//   if (auto st = fc->forward(x, m, y.data()); !st) { ... }
//
// Weights F32, F16 or BF16, computed in F32 as torch's CPU path computes
// F.linear(x, w.float(), b.float()). The portable path needs nothing but the standard library:
// blocked dot-product kernels over W's rows where the checkpoint holds them (no copy: in mmap
// mode they are read from the mapped file), widened to F32 as they are loaded, compiled for
// AVX-512, AVX2 and plain C++ and chosen at run time from the CPU; batch 1 streams each row
// once (a GEMV, 8 rows of W at once with AVX2 and AVX-512, 4 otherwise), and with AVX2 and
// AVX-512 up to 16 rows of x stream F32 rows of W whole too. From kGemmMinRows (40) rows of x
// on, on AVX2 and AVX-512, the packed product of compute/gemm.hpp instead: blocks of W and
// x copied into a buffer of each thread's own (about 570 KiB, kept for the thread's next
// call) and multiplied there. Threads split the output features (LinearOptions::threads,
// std::thread).
// A weight whose rows are not contiguous (a transposed view, say) is copied once, contiguous
// and in its own dtype, when the layer is made: that copy is the only one. The bias is kept as
// F32 (out_features floats).
//
// Another backend (nn/openblas.hpp) is chosen explicitly through LinearOptions::backend.
#pragma once

#include "../compute/gemm.hpp"
#include "common.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ptread {
namespace nn {

// An implementation of y = x W^T + b for Linear (the portable path is built in).
class LinearBackend {
 public:
  virtual ~LinearBackend() = default;
  virtual const char* name() const noexcept = 0;
  // Called once when a Linear is made; what it returns is kept by the layer and handed to
  // forward (a widened copy of the weight, say), or null.
  virtual Result<std::shared_ptr<const void>> prepare(const WeightMatrix& w) const = 0;
  // y [m x w.rows] = x [m x w.cols] W^T + bias (bias null: none). Arguments are checked.
  virtual Status forward(const WeightMatrix& w, const void* prepared, const float* bias, const float* x, size_t m,
                         float* y) const = 0;
};

namespace detail {

// The portable product for output features [n0, n1) of every row of x; y already holds the bias.
// packed: the packed product to use (compute/gemm.hpp), or null for the tiles.
inline void linear_block(const WeightMatrix& w, const float* x, size_t m, float* y, size_t n0, size_t n1,
                         const ptread::detail::NnGemm* packed) {
  const size_t K = w.cols, N = w.rows;
  if (packed != nullptr) {
    // The packed blocks: one buffer per thread, kept for its next call.
    static thread_local std::vector<float> scratch;
    if (scratch.size() < ptread::detail::kGemmScratchFloats) scratch.resize(ptread::detail::kGemmScratchFloats);
    packed->run(x, m, K, w.row(n0), w.row_stride, y + n0, N, n1 - n0, scratch.data());
    return;
  }
  const ptread::detail::NnKernels kw = ptread::detail::nn_kernels(w.dtype);
  const ptread::detail::NnKernels kf = ptread::detail::nn_kernels(DType::F32);
  const size_t mb = static_cast<size_t>(kw.mb);
  // Small batches stream W's rows whole (up to kw.stream_m rows of x for F32 weights, mb
  // otherwise); larger ones keep a 4 x kKc block of W in L1 and a kMc x kKc block of x in L2
  // (F16/BF16 blocks are widened once per block).
  constexpr size_t kKc = 1024, kMc = 128;
  const bool blocked = m > (w.dtype == DType::F32 ? static_cast<size_t>(kw.stream_m) : mb);
  const size_t kc_step = blocked ? kKc : K;
  const size_t mc_step = blocked ? kMc : m;
  const bool widen = blocked && w.dtype != DType::F32;
  std::vector<float> wbuf(widen ? 4 * kKc : 0);
  for (size_t k0 = 0; k0 < K; k0 += kc_step) {
    const size_t kc = std::min(kc_step, K - k0);
    for (size_t m0 = 0; m0 < m; m0 += mc_step) {
      const size_t mc = std::min(mc_step, m - m0);
      for (size_t n = n0, nb = 0; n < n1; n += nb) {
        nb = m == 1 && n1 - n >= static_cast<size_t>(kw.gemv_nb) ? static_cast<size_t>(kw.gemv_nb)
                                                                   : std::min<size_t>(4, n1 - n);
        const void* wp = static_cast<const uint8_t*>(w.row(n)) + k0 * w.element_size();
        const float* xp = x + m0 * K + k0;
        float* yp = y + m0 * N + n;
        if (widen) {
          for (size_t j = 0; j < nb; ++j) {
            kw.widen(static_cast<const uint8_t*>(wp) + j * w.row_stride * w.element_size(), wbuf.data() + j * kc, kc);
          }
          kf.tile(xp, K, wbuf.data(), kc, yp, N, static_cast<int>(mc), static_cast<int>(nb), kc);
        } else {
          kw.tile(xp, K, wp, w.row_stride, yp, N, static_cast<int>(mc), static_cast<int>(nb), kc);
        }
      }
    }
  }
}

}  // namespace detail

class Linear {
 public:
  Linear() = default;

  static Result<Linear> from(const Checkpoint& ck, std::string_view prefix, LinearOptions options = {}) {
    Linear l;
    const std::string wname = detail::param_name(prefix, "weight");
    PTREAD_TRY(l.w_, detail::weight_matrix(ck, wname, "Linear"));
    if (!l.w_.rows_contiguous()) {  // the one copy: rows must be contiguous for the kernels
      PTREAD_TRY(Tensor c, l.w_.tensor.contiguous());
      l.w_.data = c.data_ptr();
      l.w_.row_stride = l.w_.cols;
      l.w_.col_stride = 1;
      l.w_.tensor = std::move(c);
    }
    const std::string bname = detail::param_name(prefix, "bias");
    if (const auto b = ck.get(bname)) {  // (get, not find: no tensor list made for one tensor)
      if (b->dim() != 1 || static_cast<size_t>(b->shape()[0]) != l.w_.rows) {
        return make_error(ErrorCode::invalid_argument,
                          "Linear: '" + bname + "' has shape " + shape_string(b->shape()) + "; [" +
                              std::to_string(l.w_.rows) + "] expected for '" + wname + "' of shape " +
                              shape_string(l.w_.tensor.shape()));
      }
      PTREAD_TRY(l.bias_, b->to_float32());
    }
    l.threads_ = options.threads;
    l.backend_ = std::move(options.backend);
    if (l.backend_) {
      PTREAD_TRY(l.prepared_, l.backend_->prepare(l.w_));
    }
    return l;
  }

  // y[i * out_features() + o] = sum_k x[i * in_features() + k] * W[o][k] + b[o], for i < m.
  Status forward(const float* x, size_t m, float* y) const {
    if (m != 0 && (x == nullptr || y == nullptr)) {
      return make_error(ErrorCode::invalid_argument, "Linear: x or y is null");
    }
    if (m != 0 && (w_.rows > SIZE_MAX / m || w_.cols > SIZE_MAX / m)) {
      return make_error(ErrorCode::invalid_argument, "Linear: m * features overflows");
    }
    if (m == 0 || w_.rows == 0) return {};
    if (backend_) return backend_->forward(w_, prepared_.get(), has_bias() ? bias_.data() : nullptr, x, m, y);
    forward_portable(x, m, y);
    return {};
  }

  size_t in_features() const noexcept { return w_.cols; }
  size_t out_features() const noexcept { return w_.rows; }
  bool has_bias() const noexcept { return !bias_.empty(); }
  const Tensor& weight() const noexcept { return w_.tensor; }
  // "portable" or the backend's name.
  const char* backend_name() const noexcept { return backend_ ? backend_->name() : "portable"; }

 private:
  static std::string shape_string(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
    return r + "]";
  }

  void forward_portable(const float* x, size_t m, float* y) const {
    const size_t N = w_.rows, K = w_.cols;
    for (size_t i = 0; i < m; ++i) {
      if (has_bias()) {
        std::memcpy(y + i * N, bias_.data(), N * sizeof(float));
      } else {
        std::memset(y + i * N, 0, N * sizeof(float));
      }
    }
    if (K == 0) return;
    const unsigned threads = ptread::detail::resolve_threads(threads_);
    size_t rows = 4;  // W rows a task's range is a multiple of
    size_t tasks = 0;
    bool small = false;  // a call the pool gives only workers already awake, unless calls come back to back
    const ptread::detail::NnGemm gemm = ptread::detail::nn_gemm(w_.dtype);
    const bool packed = m >= ptread::detail::kGemmMinRows && gemm.run != nullptr;
    if (packed) {
      // The packed product: tasks of whole panels, a block of W each or one a thread if
      // that is more (each task packs x again for each of its blocks).
      rows = gemm.nr;
      const size_t panels = (N + rows - 1) / rows;
      const size_t blocks = (N + ptread::detail::kGemmNc - 1) / ptread::detail::kGemmNc;
      tasks = std::min(panels, std::max<size_t>(blocks, threads));
    } else {
      // Tasks of whole 4-row groups of W, each at least ~256K multiply-adds. Small batches
      // stream W: one task a thread, so each thread keeps reading the same rows (they stay
      // in its cache from call to call). Larger ones: up to 16 tasks a thread, so a thread
      // the OS delays holds back little.
      // A call under 8M multiply-adds and 16 MiB of W is small: it runs on the caller alone
      // unless a worker is awake or calls come back to back (parallel_for): waking a
      // sleeping worker cost its caller 35-44 us and the worker began 90-230 us late on the
      // AVX-512 VM of bench/README.md ("Small calls on one thread"), where two threads
      // made 1024 x 1024 at M = 1 to 4 and 1536 x 1536 at M = 1 and 2 1.1-1.5x slower;
      // a worker polling after the last call takes its half at once ("A worker that polls
      // after a call").
      const size_t groups = (N + 3) / 4;
      const size_t min_groups = (size_t{1} << 18) / (4 * m * K) + 1;
      small = m * N * K < (size_t{1} << 23) && N * K * w_.element_size() < (size_t{1} << 24);
      tasks = detail::task_count(groups, min_groups, threads, m <= 4 ? 1 : 16);
    }
    const size_t units = (N + rows - 1) / rows;
    const size_t per = (units + tasks - 1) / tasks;
    ptread::detail::parallel_for(threads, tasks, [&](size_t t) {
      const size_t n0 = std::min(N, t * per * rows), n1 = std::min(N, (t + 1) * per * rows);
      if (n0 < n1) detail::linear_block(w_, x, m, y, n0, n1, packed ? &gemm : nullptr);
    }, small);
  }

  WeightMatrix w_;
  std::vector<float> bias_;
  unsigned threads_ = 0;
  std::shared_ptr<const LinearBackend> backend_;
  std::shared_ptr<const void> prepared_;
};

}  // namespace nn
}  // namespace ptread
