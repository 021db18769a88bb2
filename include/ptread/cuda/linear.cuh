// ptread — CUDA: Linear on the device, y = x W^T + b (torch's F.linear), W F32, F16 or BF16.
//
//   auto fc = ptread::cuda::Linear::from(*ck, "fc");     // uploads fc.weight (as stored) and fc.bias
//   auto fc2 = ptread::cuda::Linear::from(dev, "fc");    // or from tensors upload() placed already
//   fc->forward(x, m, y, stream);                        // x [m x in], y [m x out]: device memory
//
// Computed in F32 as torch's CPU path computes F.linear(x, w.float(), b.float()) (x and y are
// F32; F16/BF16 weights are widened as they are read, never stored widened); the checks and
// messages are the CPU nn::Linear's. Batches of 1 to 8 rows stream W once at memory bandwidth
// (each warp reads rows of W with 16-byte loads when the shapes allow, for every row of x);
// larger batches use a shared-memory tiled kernel (tiles of 128, 64 or 32 chosen to fill the
// SMs). The bias is fused. forward() is asynchronous on `stream`. A weight whose rows are not
// contiguous is copied once, contiguous, on the device when the layer is made.
#pragma once

#include "upload.cuh"

#include <memory>
#include <string>
#include <string_view>

namespace ptread {
namespace cuda {

class Linear {
 public:
  Linear() = default;

  // From tensors already on the device: prefix.weight [out, in] and, when present, prefix.bias [out].
  static Result<Linear> from(const DeviceTensors& dev, std::string_view prefix) {
    const std::string wname = nn::detail::param_name(prefix, "weight");
    PTREAD_TRY(DeviceTensor w, dev.get(wname));
    PTREAD_CHECK(nn::detail::check_weight(w.dtype(), w.dim(), wname, "Linear"));
    Linear l;
    l.n_ = static_cast<size_t>(w.shape()[0]);
    l.k_ = static_cast<size_t>(w.shape()[1]);
    l.wk_ = detail::weight_kind(w.dtype());
    l.dtype_ = w.dtype();
    PTREAD_TRY(Stream setup, Stream::create());
    const auto rs = static_cast<size_t>(w.strides()[0]), cs = static_cast<size_t>(w.strides()[1]);
    if (cs == 1 || l.k_ <= 1) {
      l.w_ = w.data();
      l.ldw_ = l.n_ <= 1 ? l.k_ : rs;
    } else {  // the one copy: the kernels read rows
      PTREAD_TRY(DeviceBuffer c, DeviceBuffer::allocate(l.n_ * l.k_ * w.element_size()));
      detail::launch_strided_copy(w.element_size(), w.data(), l.n_, l.k_, rs, cs, c.data(), setup.get());
      PTREAD_CHECK(launch_check("a strided weight copy"));
      l.owned_ = std::make_shared<const DeviceBuffer>(std::move(c));
      l.w_ = l.owned_->data();
      l.ldw_ = l.k_;
    }
    l.keep_ = std::make_shared<const DeviceTensor>(std::move(w));
    const std::string bname = nn::detail::param_name(prefix, "bias");
    if (const DeviceTensor* b = dev.find(bname)) {
      if (b->dim() != 1 || static_cast<size_t>(b->shape()[0]) != l.n_) {
        return make_error(ErrorCode::invalid_argument, "Linear: '" + bname + "' has " + std::to_string(b->dim()) +
                                                           " dimensions, [" + std::to_string(l.n_) +
                                                           "] expected for '" + wname + "'");
      }
      if (detail::weight_kind(b->dtype()) < 0) {
        return make_error(ErrorCode::dtype_mismatch, "Linear: '" + bname + "' is " + dtype_name(b->dtype()) +
                                                         " on the device; F32, F16 or BF16 expected");
      }
      PTREAD_TRY(DeviceBuffer bias, DeviceBuffer::allocate(l.n_ * sizeof(float)));
      detail::launch_strided_to_f32(detail::weight_kind(b->dtype()), b->data(), 1, l.n_, 0,
                                    static_cast<size_t>(b->strides()[0]), static_cast<float*>(bias.data()), setup.get());
      PTREAD_CHECK(launch_check("the bias conversion"));
      l.bias_ = std::make_shared<const DeviceBuffer>(std::move(bias));
    }
    int dev_id = 0;
    PTREAD_CHECK(cuda_check(cudaGetDevice(&dev_id), "cudaGetDevice"));
    PTREAD_CHECK(cuda_check(cudaDeviceGetAttribute(&l.sm_count_, cudaDevAttrMultiProcessorCount, dev_id),
                            "cudaDeviceGetAttribute"));
    PTREAD_CHECK(setup.synchronize());
    return l;
  }

  // Uploads prefix.weight and prefix.bias through `up` (the CPU layer's checks first; a
  // weight whose rows are not contiguous is made contiguous on the host, as the CPU layer does).
  static Result<Linear> from(const Checkpoint& ck, std::string_view prefix, Uploader& up) {
    PTREAD_TRY(nn::Linear cpu, nn::Linear::from(ck, prefix, nn::LinearOptions{1, nullptr}));
    std::vector<NamedTensor> tensors{NamedTensor{"weight", cpu.weight()}};
    if (const Tensor* b = ck.find(nn::detail::param_name(prefix, "bias"))) tensors.push_back(NamedTensor{"bias", *b});
    PTREAD_TRY(DeviceTensors dev, up.upload_tensors(std::move(tensors), &ck));
    return from(dev, "");
  }

  static Result<Linear> from(const Checkpoint& ck, std::string_view prefix,
                             const UploadOptions& options = UploadOptions::small_ring()) {
    PTREAD_TRY(Uploader up, Uploader::create(options));
    return from(ck, prefix, up);
  }

  // y[i * out_features() + o] = sum_k x[i * in_features() + k] * W[o][k] + b[o], for i < m;
  // x and y device pointers. Asynchronous on `stream`.
  Status forward(const float* x, size_t m, float* y, cudaStream_t stream = nullptr) const {
    if (m != 0 && (x == nullptr || y == nullptr)) return make_error(ErrorCode::invalid_argument, "Linear: x or y is null");
    if (m != 0 && (n_ > SIZE_MAX / m || k_ > SIZE_MAX / m)) {
      return make_error(ErrorCode::invalid_argument, "Linear: m * features overflows");
    }
    if (m == 0 || n_ == 0) return {};
    detail::LinearArgs a;
    a.w = w_;
    a.wk = wk_;
    a.ldw = ldw_;
    a.x = x;
    a.bias = bias_ ? static_cast<const float*>(bias_->data()) : nullptr;
    a.y = y;
    a.m = m;
    a.n = n_;
    a.k = k_;
    detail::launch_linear(a, sm_count_, stream);
    return launch_check("Linear");
  }

  size_t in_features() const noexcept { return k_; }
  size_t out_features() const noexcept { return n_; }
  bool has_bias() const noexcept { return bias_ != nullptr; }
  // The weight's dtype as the kernels read it.
  DType dtype() const noexcept { return dtype_; }
  // The weight in device memory (rows ldw() elements apart) and the F32 bias (or null).
  const void* weight_data() const noexcept { return w_; }
  size_t ldw() const noexcept { return ldw_; }
  const float* bias_data() const noexcept { return bias_ ? static_cast<const float*>(bias_->data()) : nullptr; }

 private:
  std::shared_ptr<const DeviceTensor> keep_;   // keeps the upload's device memory alive
  std::shared_ptr<const DeviceBuffer> owned_;  // a contiguous copy of a strided weight
  std::shared_ptr<const DeviceBuffer> bias_;
  const void* w_ = nullptr;
  size_t ldw_ = 0, n_ = 0, k_ = 0;
  int wk_ = 0;
  int sm_count_ = 1;
  DType dtype_ = DType::F32;
};

}  // namespace cuda
}  // namespace ptread
