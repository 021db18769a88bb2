// ptread — CUDA: the split case. A table too large for the GPU (or not worth its memory) stays
// in host memory, read in place by the CPU layer; only the rows a batch gathers go to the
// device, and the rest of the model runs there.
//
//   auto emb = ptread::nn::Embedding::from(*ck, "emb");                 // CPU, mmap: no copy
//   auto fc = ptread::cuda::Linear::from(*ck, "fc");                    // GPU
//   auto staging = ptread::cuda::HostStaging::create(max_batch * emb->dim());
//   auto h = ptread::cuda::embedding_to_device(*emb, ids, n, *staging, stream);  // device rows
//   fc->forward(*h, n, y, stream);
//
// HostStaging is two pinned buffers and their device twins, used in turn: the CPU gathers a
// batch into one while the previous batch's copy may still be in flight from the other. The
// copy is asynchronous on the caller's stream; the device rows stay valid until the batch
// after next is shipped, so work that reads them belongs on that stream (or waits for it).
#pragma once

#include "common.cuh"

namespace ptread {
namespace cuda {

class HostStaging {
 public:
  HostStaging() = default;

  // Room for batches of up to max_floats floats.
  static Result<HostStaging> create(size_t max_floats) {
    if (max_floats > SIZE_MAX / sizeof(float)) {
      return make_error(ErrorCode::invalid_argument, "HostStaging: " + std::to_string(max_floats) + " floats overflow");
    }
    HostStaging s;
    s.max_ = max_floats;
    for (int k = 0; k < 2; ++k) {
      PTREAD_TRY(s.host_[k], PinnedBuffer::allocate(max_floats * sizeof(float)));
      PTREAD_TRY(s.dev_[k], DeviceBuffer::allocate(max_floats * sizeof(float)));
      PTREAD_TRY(s.copied_[k], Event::create());
    }
    return Result<HostStaging>(std::move(s));
  }

  size_t capacity() const noexcept { return max_; }

  // Host memory for the next batch of `floats` values; waits until that buffer's last copy to
  // the device has finished.
  Result<float*> next(size_t floats) {
    if (floats > max_) {
      return make_error(ErrorCode::invalid_argument, "HostStaging: a batch of " + std::to_string(floats) +
                                                         " floats, room for " + std::to_string(max_));
    }
    cur_ ^= 1;
    PTREAD_CHECK(copied_[cur_].synchronize());
    floats_ = floats;
    return static_cast<float*>(host_[cur_].data());
  }

  // Copies the batch next() handed out to the device on `stream` (asynchronously) and returns
  // where it lands.
  Result<const float*> ship(cudaStream_t stream) {
    auto* dst = static_cast<float*>(dev_[cur_].data());
    if (floats_ != 0) {
      PTREAD_CHECK(cuda_check(cudaMemcpyAsync(dst, host_[cur_].data(), floats_ * sizeof(float), cudaMemcpyHostToDevice,
                                              stream),
                              "cudaMemcpyAsync (HostStaging)"));
    }
    PTREAD_CHECK(copied_[cur_].record(stream));
    return static_cast<const float*>(dst);
  }

 private:
  PinnedBuffer host_[2];
  DeviceBuffer dev_[2];
  Event copied_[2];
  size_t max_ = 0, floats_ = 0;
  int cur_ = 1;
};

// The CPU Embedding's rows for ids (host memory) gathered into pinned memory and shipped:
// n * emb.dim() floats on the device.
template <class Index>
Result<const float*> embedding_to_device(const nn::Embedding& emb, const Index* ids, size_t n, HostStaging& staging,
                                         cudaStream_t stream = nullptr) {
  if (emb.dim() != 0 && n > SIZE_MAX / emb.dim()) return make_error(ErrorCode::invalid_argument, "n * dim overflows");
  PTREAD_TRY(float* h, staging.next(n * emb.dim()));
  PTREAD_CHECK(emb.forward(ids, n, h));
  return staging.ship(stream);
}

// The CPU EmbeddingBag's num_bags rows, likewise (all arguments host memory).
template <class Index>
Result<const float*> embedding_bag_to_device(const nn::EmbeddingBag& bag, const Index* ids, size_t n,
                                             const Index* offsets, size_t num_bags, const float* per_sample_weights,
                                             HostStaging& staging, cudaStream_t stream = nullptr) {
  if (bag.dim() != 0 && num_bags > SIZE_MAX / bag.dim()) {
    return make_error(ErrorCode::invalid_argument, "num_bags * dim overflows");
  }
  PTREAD_TRY(float* h, staging.next(num_bags * bag.dim()));
  PTREAD_CHECK(bag.forward(ids, n, offsets, num_bags, per_sample_weights, h));
  return staging.ship(stream);
}

}  // namespace cuda
}  // namespace ptread
