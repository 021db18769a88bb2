// ptread — nn::Embedding and nn::EmbeddingBag: F.embedding and F.embedding_bag on the CPU.
//
//   auto ck = ptread::Checkpoint::open("model.pt");
//   auto emb = ptread::nn::Embedding::from(*ck, "model.emb");          // finds model.emb.weight
//   std::vector<float> out(n * emb->dim());
//   if (auto st = emb->forward(ids, n, out.data()); !st) { ... st.error().what() ... }
//
//   auto bag = ptread::nn::EmbeddingBag::from(*ck, "emb", ptread::nn::Reduce::mean);
//   bag->forward(ids, n, offsets, num_bags, /*per_sample_weights=*/nullptr, out.data());
//
// The table is never copied: each row is read where the checkpoint holds it (in mmap mode the
// mapped file, so a table larger than RAM is paged in by the OS as rows are touched), F16 and
// BF16 rows are widened to F32 as they are read, and strided (non-contiguous) tables are read
// element by element through their strides. A bag (contiguous tables) is reduced in one pass
// over its indices with the sums in registers, so many rows' loads are in flight at once: a
// random gather from a big table waits on memory, not on arithmetic. The layer holds the
// weight Tensor, which keeps the mapping alive: it may outlive the Checkpoint.
//
// Semantics are torch's (1.13): indices must lie in [0, num_embeddings); offsets[0] must be 0,
// offsets never decrease and never pass n; without include_last_offset the last bag ends at n,
// with it offsets holds num_bags + 1 entries and the last one must be n (as torch documents;
// torch 1.13 corrupts its heap when it is less). Empty bags are zeros. per_sample_weights scale each row (Reduce::sum only, as in torch). Entries equal to
// padding_idx are left out of their bag. Everything is computed in F32 (torch 1.13 has no
// BF16 embedding_bag on the CPU; its F16 one accumulates in F16). Sums run in index order
// and round as torch's F32 path does: a fused multiply-add per row (fbgemm), or with a
// padding_idx a product then a sum (torch's own loop), so weighted sums match it bit for bit
// even where their terms cancel.
//
// Every argument is checked before anything is read; on an error `out` is left untouched.
#pragma once

#include "common.hpp"

#include <cstring>
#include <vector>

namespace ptread {
namespace nn {

namespace detail {

// How far ahead (in indices) Embedding's gather asks for rows, all of each row, into L1
// (prefetcht0): far enough to cover DRAM latency. Into L2 (prefetcht1) the same was as fast on
// an AMD EPYC VM and 10% slower than no prefetch at all on an Intel Xeon VM at D=256 (1 KiB
// rows); into L1 it is as fast as none there (bench/README.md, "Embedding's prefetch").
inline constexpr size_t kPrefetchDistance = 8;
inline constexpr int kPrefetchLocality = 3;

inline Error index_error(const char* layer, int64_t v, size_t i, size_t num_embeddings) {
  return make_error(ErrorCode::invalid_argument, std::string(layer) + ": index " + std::to_string(v) + " at position " +
                                                     std::to_string(i) + " is out of range [0, " +
                                                     std::to_string(num_embeddings) + ")");
}

template <class Index>
Status check_indices(const Index* indices, size_t n, size_t num_embeddings, const char* layer) {
  if (n != 0 && indices == nullptr) return make_error(ErrorCode::invalid_argument, std::string(layer) + ": indices is null");
  const size_t bad = ptread::detail::nn_first_bad_index(indices, n, num_embeddings);
  if (bad != n) return index_error(layer, static_cast<int64_t>(indices[bad]), bad, num_embeddings);
  return {};
}

// Whether offsets[b] (cur; prev is offsets[b - 1]) keeps the order: offsets[0] is 0, later
// offsets never decrease nor pass n. (The check of every offset; offset_status words a break.)
inline bool offset_in_order(size_t b, int64_t prev, int64_t cur, size_t n) noexcept {
  return b == 0 ? cur == 0 : cur >= prev && static_cast<uint64_t>(cur) <= n;
}

// Why offsets[b] (cur; prev is offsets[b - 1]) breaks EmbeddingBag's rules, or ok: those of
// offset_in_order, and with include_last_offset offsets[num_bags] is n.
inline Status offset_status(size_t b, int64_t prev, int64_t cur, size_t n, size_t num_bags, bool include_last_offset) {
  if (b == 0 && cur != 0) {
    return make_error(ErrorCode::invalid_argument, "EmbeddingBag: offsets[0] is " + std::to_string(cur) +
                                                       "; the first bag starts at 0 (as torch requires)");
  }
  if (b > 0 && cur < prev) {
    return make_error(ErrorCode::invalid_argument, "EmbeddingBag: offsets decrease at " + std::to_string(b) + " (" +
                                                       std::to_string(prev) + " then " + std::to_string(cur) + ")");
  }
  if (b > 0 && static_cast<uint64_t>(cur) > n) {
    return make_error(ErrorCode::invalid_argument, "EmbeddingBag: offsets[" + std::to_string(b) + "] is " +
                                                       std::to_string(cur) + ", past the " + std::to_string(n) +
                                                       " indices");
  }
  if (include_last_offset && b == num_bags && static_cast<uint64_t>(cur) != n) {
    return make_error(ErrorCode::invalid_argument,
                      "EmbeddingBag: offsets[" + std::to_string(num_bags) + "] ends the last bag at " +
                          std::to_string(cur) + "; with include_last_offset it is the number of indices, " +
                          std::to_string(n));
  }
  return {};
}

// torch's padding_idx (negative counts from the end) as a row, or -1 without one.
inline Result<int64_t> padding_row(const EmbeddingOptions& opt, size_t rows, const char* layer) {
  if (!opt.padding_idx) return int64_t{-1};
  const int64_t p = *opt.padding_idx;
  const auto num = static_cast<int64_t>(rows);
  if (p < -num || p >= num) {
    return make_error(ErrorCode::invalid_argument, std::string(layer) + ": padding_idx " + std::to_string(p) +
                                                       " is outside [-" + std::to_string(num) + ", " +
                                                       std::to_string(num) + ")");
  }
  return p < 0 ? p + num : p;
}

// Rows and the arithmetic on them, for one table.
class RowReader {
 public:
  explicit RowReader(const WeightMatrix& w) : w_(&w), k_(ptread::detail::nn_kernels(w.dtype)) {}

  // out[0..cols) = row r as F32.
  void copy(size_t r, float* out) const noexcept {
    if (w_->rows_contiguous()) {
      k_.widen(w_->row(r), out, w_->cols);
    } else {
      strided(r, out, [](float& o, float v) { o = v; });
    }
  }
  // acc += a * row r, acc = max(acc, row r): strided tables only (contiguous ones go through bag()).
  void strided_axpy(size_t r, float a, float* acc) const noexcept {
    strided(r, acc, [a](float& o, float v) { o += a * v; });
  }
  void strided_max(size_t r, float* acc) const noexcept {
    strided(r, acc, [](float& o, float v) { o = v > o ? v : o; });
  }
  PTREAD_ALWAYS_INLINE void prefetch(size_t r) const noexcept {
    if (w_->rows_contiguous()) ptread::detail::nn_prefetch<kPrefetchLocality>(w_->row(r), w_->cols * w_->element_size());
  }
  // Rows whose elements are contiguous are reduced a bag at a time (bag()).
  bool contiguous() const noexcept { return w_->rows_contiguous(); }
  // out = the sum of psw[i] (1 when null) * row idx[i], or their max, over the entries not equal
  // to padding (zeros when none is left); returns how many were kept. idx[0..ahead) are
  // checked indices (the rows of the next bags, asked for ahead). Contiguous rows only.
  template <class Index>
  size_t bag(const Index* idx, size_t count, size_t ahead, const float* psw, int64_t padding, bool max_op,
             float* out) const noexcept {
    const size_t row_bytes = w_->row_stride * w_->element_size();
    if constexpr (sizeof(Index) == 8) {
      return k_.bag64(out, w_->data, row_bytes, reinterpret_cast<const int64_t*>(idx), count, ahead, psw, padding,
                      w_->cols, max_op);
    } else {
      return k_.bag32(out, w_->data, row_bytes, reinterpret_cast<const int32_t*>(idx), count, ahead, psw, padding,
                      w_->cols, max_op);
    }
  }

 private:
  template <class F>
  void strided(size_t r, float* out, F f) const noexcept {
    const void* base = w_->row(r);
    const size_t cs = w_->col_stride;
    for (size_t c = 0; c < w_->cols; ++c) {
      float v;
      if (w_->dtype == DType::F32) {
        v = ptread::detail::nn_load1<DType::F32>(base, c * cs);
      } else if (w_->dtype == DType::F16) {
        v = ptread::detail::nn_load1<DType::F16>(base, c * cs);
      } else {
        v = ptread::detail::nn_load1<DType::BF16>(base, c * cs);
      }
      f(out[c], v);
    }
  }

  const WeightMatrix* w_;
  ptread::detail::NnKernels k_;
};

inline Result<WeightMatrix> table(const Checkpoint& ck, std::string_view prefix, const char* layer,
                                  const EmbeddingOptions& opt, int64_t* padding, bool* huge) {
  PTREAD_TRY(WeightMatrix w, weight_matrix(ck, param_name(prefix, "weight"), layer));
  PTREAD_TRY(*padding, padding_row(opt, w.rows, layer));
  *huge = advise_table(ck, w, opt.huge_pages);
  return w;
}

}  // namespace detail

class Embedding {
 public:
  Embedding() = default;

  static Result<Embedding> from(const Checkpoint& ck, std::string_view prefix, EmbeddingOptions options = {}) {
    Embedding e;
    PTREAD_TRY(e.w_, detail::table(ck, prefix, "Embedding", options, &e.padding_, &e.huge_));
    e.threads_ = options.threads;
    return e;
  }

  // out[i * dim() + c] = weight[indices[i]][c], as F32.
  Status forward(const int64_t* indices, size_t n, float* out) const { return forward_impl(indices, n, out); }
  Status forward(const int32_t* indices, size_t n, float* out) const { return forward_impl(indices, n, out); }

  size_t num_embeddings() const noexcept { return w_.rows; }
  size_t dim() const noexcept { return w_.cols; }
  // The row F.embedding's padding_idx names (normalized), or -1.
  int64_t padding_idx() const noexcept { return padding_; }
  const Tensor& weight() const noexcept { return w_.tensor; }
  // Whether from() asked the kernel for 2 MiB pages on the table and it took the advice
  // (EmbeddingOptions::huge_pages).
  bool huge_pages() const noexcept { return huge_; }

 private:
  template <class Index>
  Status forward_impl(const Index* indices, size_t n, float* out) const {
    PTREAD_CHECK(detail::check_indices(indices, n, w_.rows, "Embedding"));
    if (n != 0 && out == nullptr) return make_error(ErrorCode::invalid_argument, "Embedding: out is null");
    const detail::RowReader rows(w_);
    const size_t dim = w_.cols;
    const unsigned threads = ptread::detail::resolve_threads(threads_);
    const size_t min_rows = dim == 0 ? n + 1 : (size_t{1} << 14) / dim + 1;  // >= 64 KiB of output a task
    const size_t tasks = detail::task_count(n, min_rows, threads);
    const size_t per = (n + tasks - 1) / (tasks == 0 ? 1 : tasks);
    ptread::detail::parallel_for(threads, tasks, [&](size_t t) {
      const size_t begin = t * per, end = std::min(n, begin + per);
      for (size_t i = begin; i < end; ++i) {
        if (i + detail::kPrefetchDistance < end) rows.prefetch(static_cast<size_t>(indices[i + detail::kPrefetchDistance]));
        rows.copy(static_cast<size_t>(indices[i]), out + i * dim);
      }
    }, n * dim < detail::kMinSplitFloats);
    return {};
  }

  WeightMatrix w_;
  int64_t padding_ = -1;
  bool huge_ = false;
  unsigned threads_ = 0;
};

class EmbeddingBag {
 public:
  EmbeddingBag() = default;

  static Result<EmbeddingBag> from(const Checkpoint& ck, std::string_view prefix, Reduce mode,
                                   EmbeddingOptions options = {}) {
    EmbeddingBag e;
    PTREAD_TRY(e.w_, detail::table(ck, prefix, "EmbeddingBag", options, &e.padding_, &e.huge_));
    e.mode_ = mode;
    e.include_last_offset_ = options.include_last_offset;
    e.threads_ = options.threads;
    return e;
  }

  // Bag b holds indices[offsets[b] .. end_b), end_b = offsets[b + 1] (or n for the last bag
  // without include_last_offset); out[b * dim() + c] is its reduction. per_sample_weights
  // (n values, Reduce::sum only) may be null.
  Status forward(const int64_t* indices, size_t n, const int64_t* offsets, size_t num_bags,
                 const float* per_sample_weights, float* out) const {
    return forward_impl(indices, n, offsets, num_bags, per_sample_weights, out);
  }
  Status forward(const int32_t* indices, size_t n, const int32_t* offsets, size_t num_bags,
                 const float* per_sample_weights, float* out) const {
    return forward_impl(indices, n, offsets, num_bags, per_sample_weights, out);
  }

  size_t num_embeddings() const noexcept { return w_.rows; }
  size_t dim() const noexcept { return w_.cols; }
  Reduce mode() const noexcept { return mode_; }
  int64_t padding_idx() const noexcept { return padding_; }
  bool include_last_offset() const noexcept { return include_last_offset_; }
  const Tensor& weight() const noexcept { return w_.tensor; }
  // Whether from() asked the kernel for 2 MiB pages on the table and it took the advice
  // (EmbeddingOptions::huge_pages).
  bool huge_pages() const noexcept { return huge_; }

 private:
  template <class Index>
  Status check_offsets(const Index* offsets, size_t n, size_t num_bags) const {
    if (num_bags == 0) return {};
    if (offsets == nullptr) return make_error(ErrorCode::invalid_argument, "EmbeddingBag: offsets is null");
    const size_t count = num_bags + (include_last_offset_ ? 1 : 0);
    int64_t prev = 0;
    for (size_t b = 0; b < count; ++b) {
      const auto cur = static_cast<int64_t>(offsets[b]);
      if (!detail::offset_in_order(b, prev, cur, n) || b == num_bags) {  // the message, or the last offset's own rule
        PTREAD_CHECK(detail::offset_status(b, prev, cur, n, num_bags, include_last_offset_));
      }
      prev = cur;
    }
    return {};
  }

  template <class Index>
  Status forward_impl(const Index* indices, size_t n, const Index* offsets, size_t num_bags,
                      const float* psw, float* out) const {
    if (psw != nullptr && mode_ != Reduce::sum) {
      return make_error(ErrorCode::invalid_argument,
                        std::string("EmbeddingBag: per_sample_weights is only supported for Reduce::sum, not ") +
                            reduce_name(mode_));
    }
    PTREAD_CHECK(check_offsets(offsets, n, num_bags));
    PTREAD_CHECK(detail::check_indices(indices, n, w_.rows, "EmbeddingBag"));
    if (num_bags != 0 && out == nullptr) return make_error(ErrorCode::invalid_argument, "EmbeddingBag: out is null");
    const detail::RowReader rows(w_);
    const size_t dim = w_.cols;
    const unsigned threads = ptread::detail::resolve_threads(threads_);
    const size_t avg = num_bags == 0 ? 0 : n / num_bags + 1;
    const size_t min_bags = (size_t{1} << 14) / (avg * (dim == 0 ? 1 : dim) + 1) + 1;
    const size_t tasks = detail::task_count(num_bags, min_bags, threads);
    const size_t per = (num_bags + tasks - 1) / (tasks == 0 ? 1 : tasks);
    ptread::detail::parallel_for(threads, tasks, [&](size_t t) {
      const size_t bag_begin = t * per, bag_end = std::min(num_bags, bag_begin + per);
      for (size_t b = bag_begin; b < bag_end; ++b) {
        const auto start = static_cast<size_t>(offsets[b]);
        const size_t end = b + 1 < num_bags || include_last_offset_ ? static_cast<size_t>(offsets[b + 1]) : n;
        float* acc = out + b * dim;
        size_t count = 0;
        if (rows.contiguous()) {
          // The sums in registers, a pass over the bag's indices per 256 bytes of them (the loads
          // of the next rows issue while this one is added: a random gather waits on memory, not
          // arithmetic); rows further on, into the next bags, are asked for as it goes.
          count = rows.bag(indices + start, end - start, n - start, psw ? psw + start : nullptr, padding_,
                           mode_ == Reduce::max, acc);
        } else {  // strided rows (a transposed table): one row at a time
          for (size_t i = start; i < end; ++i) {
            const auto r = static_cast<size_t>(indices[i]);
            if (static_cast<int64_t>(r) == padding_) continue;
            if (mode_ == Reduce::max) {
              if (count == 0) {
                rows.copy(r, acc);
              } else {
                rows.strided_max(r, acc);
              }
            } else {
              if (count == 0) std::memset(acc, 0, dim * sizeof(float));
              rows.strided_axpy(r, psw ? psw[i] : 1.0f, acc);
            }
            ++count;
          }
        }
        if (count == 0) {
          std::memset(acc, 0, dim * sizeof(float));
        } else if (mode_ == Reduce::mean && count > 1) {
          const float c = static_cast<float>(count);
          for (size_t k = 0; k < dim; ++k) acc[k] /= c;
        }
      }
    }, n * dim < detail::kMinSplitFloats);
    return {};
  }

  WeightMatrix w_;
  Reduce mode_ = Reduce::sum;
  int64_t padding_ = -1;
  bool huge_ = false;
  bool include_last_offset_ = false;
  unsigned threads_ = 0;
};

}  // namespace nn
}  // namespace ptread
