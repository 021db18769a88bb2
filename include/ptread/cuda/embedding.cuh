// ptread — CUDA: Embedding and EmbeddingBag on the device (F.embedding, F.embedding_bag).
//
//   auto emb = ptread::cuda::Embedding::from(*ck, "emb");        // uploads emb.weight as stored
//   emb->forward(ids, n, out, stream);                            // ids, out: device memory
//   auto bag = ptread::cuda::EmbeddingBag::from(dev, "emb", ptread::nn::Reduce::mean, opt);
//   bag->forward(ids, n, offsets, num_bags, per_sample_weights, out, stream);
//
// The semantics, options (nn::EmbeddingOptions: padding_idx, include_last_offset) and error
// messages are the CPU layers' (nn/embedding.hpp): tables F32, F16 or BF16 read in place
// (strided ones through their strides), F32 results, empty bags zeros, padding entries left
// out of their bag, per_sample_weights with Reduce::sum only. Indices and offsets live on the
// device, so they are checked there: before anything is computed, a kernel finds the first
// bad index or offset and forward() reads that back, which waits for `stream`; on an error
// `out` is left untouched and the message names the value and its position, as on the CPU.
// The gather or bag kernel then runs asynchronously. A layer keeps a 16-byte flag buffer for
// that check: calls on one layer must not overlap (one stream, or one host thread, at a time).
#pragma once

#include "upload.cuh"

#include <memory>
#include <string>
#include <string_view>

namespace ptread {
namespace cuda {

namespace detail {

// A table on the device, its padding row and the check's flags.
struct DeviceTable {
  std::shared_ptr<const DeviceTensor> weight;  // keeps the upload's memory alive
  TableArgs args;
  int64_t padding = -1;
  std::shared_ptr<const DeviceBuffer> flags;   // two unsigned long long

  static Result<DeviceTable> make(const DeviceTensors& dev, std::string_view prefix, const nn::EmbeddingOptions& opt,
                                  const char* layer) {
    const std::string wname = nn::detail::param_name(prefix, "weight");
    PTREAD_TRY(DeviceTensor w, dev.get(wname));
    PTREAD_CHECK(nn::detail::check_weight(w.dtype(), w.dim(), wname, layer));
    DeviceTable t;
    t.args.w = w.data();
    t.args.wk = weight_kind(w.dtype());
    t.args.rows = static_cast<size_t>(w.shape()[0]);
    t.args.dim = static_cast<size_t>(w.shape()[1]);
    t.args.rs = static_cast<size_t>(w.strides()[0]);
    t.args.cs = static_cast<size_t>(w.strides()[1]);
    PTREAD_TRY(t.padding, nn::detail::padding_row(opt, t.args.rows, layer));
    PTREAD_TRY(DeviceBuffer f, DeviceBuffer::allocate(2 * sizeof(unsigned long long)));
    t.flags = std::make_shared<const DeviceBuffer>(std::move(f));
    t.weight = std::make_shared<const DeviceTensor>(std::move(w));
    return t;
  }

  unsigned long long* flag(size_t k) const { return static_cast<unsigned long long*>(flags->data()) + k; }
};

template <class T>
Result<T> read_back(const T* p, size_t i) {
  T v{};
  PTREAD_CHECK(cuda_check(cudaMemcpy(&v, p + i, sizeof v, cudaMemcpyDeviceToHost), "cudaMemcpy (reading a bad index back)"));
  return v;
}

// Checks offsets (with `count` entries; none when null) and indices on the device; the first
// error as the CPU layer words it. Waits for `s`.
template <class Index>
Status check_on_device(const DeviceTable& t, const char* layer, const Index* idx, size_t n, const Index* off,
                       size_t count, size_t num_bags, bool include_last, cudaStream_t s) {
  const bool i64 = sizeof(Index) == 8;
  PTREAD_CHECK(cuda_check(cudaMemsetAsync(t.flags->data(), 0xff, t.flags->size(), s), "cudaMemsetAsync"));
  launch_check_offsets(i64, off, count, n, num_bags, include_last, t.flag(0), s);
  launch_check_indices(i64, idx, n, t.args.rows, t.flag(1), s);
  PTREAD_CHECK(launch_check("the index check"));
  unsigned long long h[2] = {0, 0};
  PTREAD_CHECK(cuda_check(cudaMemcpyAsync(h, t.flags->data(), sizeof h, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
  PTREAD_CHECK(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (index check)"));
  if (h[0] != ~0ull) {
    const auto b = static_cast<size_t>(h[0]);
    PTREAD_TRY(Index cur, read_back(off, b));
    Index prev{};
    if (b > 0) {
      PTREAD_TRY(prev, read_back(off, b - 1));
    }
    PTREAD_CHECK(nn::detail::offset_status(b, static_cast<int64_t>(prev), static_cast<int64_t>(cur), n, num_bags,
                                           include_last));
  }
  if (h[1] != ~0ull) {
    const auto i = static_cast<size_t>(h[1]);
    PTREAD_TRY(Index v, read_back(idx, i));
    return nn::detail::index_error(layer, static_cast<int64_t>(v), i, t.args.rows);
  }
  return {};
}

inline Result<DeviceTensors> upload_weight(const Checkpoint& ck, std::string_view prefix, Uploader& up) {
  return up.upload(ck, {nn::detail::param_name(prefix, "weight")});
}

}  // namespace detail

class Embedding {
 public:
  Embedding() = default;

  static Result<Embedding> from(const DeviceTensors& dev, std::string_view prefix, nn::EmbeddingOptions options = {}) {
    Embedding e;
    PTREAD_TRY(e.t_, detail::DeviceTable::make(dev, prefix, options, "Embedding"));
    return e;
  }
  static Result<Embedding> from(const Checkpoint& ck, std::string_view prefix, nn::EmbeddingOptions options,
                                Uploader& up) {
    PTREAD_TRY(DeviceTensors dev, detail::upload_weight(ck, prefix, up));
    return from(dev, prefix, options);
  }
  static Result<Embedding> from(const Checkpoint& ck, std::string_view prefix, nn::EmbeddingOptions options = {},
                                const UploadOptions& upload = UploadOptions::small_ring()) {
    PTREAD_TRY(Uploader up, Uploader::create(upload));
    return from(ck, prefix, options, up);
  }

  // out[i * dim() + c] = weight[indices[i]][c] as F32; indices and out in device memory.
  Status forward(const int64_t* indices, size_t n, float* out, cudaStream_t stream = nullptr) const {
    return forward_impl(indices, n, out, stream);
  }
  Status forward(const int32_t* indices, size_t n, float* out, cudaStream_t stream = nullptr) const {
    return forward_impl(indices, n, out, stream);
  }

  size_t num_embeddings() const noexcept { return t_.args.rows; }
  size_t dim() const noexcept { return t_.args.dim; }
  int64_t padding_idx() const noexcept { return t_.padding; }
  DType dtype() const noexcept { return t_.weight ? t_.weight->dtype() : DType::F32; }

 private:
  template <class Index>
  Status forward_impl(const Index* idx, size_t n, float* out, cudaStream_t s) const {
    if (n != 0 && idx == nullptr) return make_error(ErrorCode::invalid_argument, "Embedding: indices is null");
    if (n != 0 && out == nullptr) return make_error(ErrorCode::invalid_argument, "Embedding: out is null");
    if (n == 0) return {};
    PTREAD_CHECK(detail::check_on_device<Index>(t_, "Embedding", idx, n, nullptr, 0, 0, false, s));
    detail::launch_gather(t_.args, sizeof(Index) == 8, idx, n, out, s);
    return launch_check("Embedding");
  }

  detail::DeviceTable t_;
};

class EmbeddingBag {
 public:
  EmbeddingBag() = default;

  static Result<EmbeddingBag> from(const DeviceTensors& dev, std::string_view prefix, nn::Reduce mode,
                                   nn::EmbeddingOptions options = {}) {
    EmbeddingBag e;
    PTREAD_TRY(e.t_, detail::DeviceTable::make(dev, prefix, options, "EmbeddingBag"));
    e.mode_ = mode;
    e.include_last_offset_ = options.include_last_offset;
    return e;
  }
  static Result<EmbeddingBag> from(const Checkpoint& ck, std::string_view prefix, nn::Reduce mode,
                                   nn::EmbeddingOptions options, Uploader& up) {
    PTREAD_TRY(DeviceTensors dev, detail::upload_weight(ck, prefix, up));
    return from(dev, prefix, mode, options);
  }
  static Result<EmbeddingBag> from(const Checkpoint& ck, std::string_view prefix, nn::Reduce mode,
                                   nn::EmbeddingOptions options = {},
                                   const UploadOptions& upload = UploadOptions::small_ring()) {
    PTREAD_TRY(Uploader up, Uploader::create(upload));
    return from(ck, prefix, mode, options, up);
  }

  // Bag b holds indices[offsets[b] .. end_b), end_b = offsets[b + 1] (or n for the last bag
  // without include_last_offset); out[b * dim() + c] is its reduction. Every pointer is device
  // memory; per_sample_weights (n floats, Reduce::sum only) may be null.
  Status forward(const int64_t* indices, size_t n, const int64_t* offsets, size_t num_bags,
                 const float* per_sample_weights, float* out, cudaStream_t stream = nullptr) const {
    return forward_impl(indices, n, offsets, num_bags, per_sample_weights, out, stream);
  }
  Status forward(const int32_t* indices, size_t n, const int32_t* offsets, size_t num_bags,
                 const float* per_sample_weights, float* out, cudaStream_t stream = nullptr) const {
    return forward_impl(indices, n, offsets, num_bags, per_sample_weights, out, stream);
  }

  size_t num_embeddings() const noexcept { return t_.args.rows; }
  size_t dim() const noexcept { return t_.args.dim; }
  nn::Reduce mode() const noexcept { return mode_; }
  int64_t padding_idx() const noexcept { return t_.padding; }
  bool include_last_offset() const noexcept { return include_last_offset_; }
  DType dtype() const noexcept { return t_.weight ? t_.weight->dtype() : DType::F32; }

 private:
  template <class Index>
  Status forward_impl(const Index* idx, size_t n, const Index* off, size_t num_bags, const float* psw, float* out,
                      cudaStream_t s) const {
    if (psw != nullptr && mode_ != nn::Reduce::sum) {
      return make_error(ErrorCode::invalid_argument,
                        std::string("EmbeddingBag: per_sample_weights is only supported for Reduce::sum, not ") +
                            nn::reduce_name(mode_));
    }
    if (num_bags != 0 && off == nullptr) return make_error(ErrorCode::invalid_argument, "EmbeddingBag: offsets is null");
    if (n != 0 && idx == nullptr) return make_error(ErrorCode::invalid_argument, "EmbeddingBag: indices is null");
    if (num_bags != 0 && out == nullptr) return make_error(ErrorCode::invalid_argument, "EmbeddingBag: out is null");
    const size_t count = num_bags == 0 ? 0 : num_bags + (include_last_offset_ ? 1 : 0);
    if (n != 0 || count != 0) {
      PTREAD_CHECK(detail::check_on_device<Index>(t_, "EmbeddingBag", idx, n, off, count, num_bags,
                                                  include_last_offset_, s));
    }
    detail::BagArgs b;
    b.n = n;
    b.num_bags = num_bags;
    b.include_last = include_last_offset_;
    b.mode = mode_ == nn::Reduce::sum ? 0 : mode_ == nn::Reduce::mean ? 1 : 2;
    b.padding = t_.padding;
    b.psw = psw;
    detail::launch_bag(t_.args, b, sizeof(Index) == 8, idx, off, out, s);
    return launch_check("EmbeddingBag");
  }

  detail::DeviceTable t_;
  nn::Reduce mode_ = nn::Reduce::sum;
  bool include_last_offset_ = false;
};

}  // namespace cuda
}  // namespace ptread
