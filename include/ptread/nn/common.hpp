// ptread — what the nn layers share: options, the reduction enum, and the weight matrix a
// layer reads (a checked 2-D view into the checkpoint's storage, never a copy).
#pragma once

#include "../checkpoint.hpp"
#include "../compute/kernels.hpp"
#include "../compute/parallel.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ptread {
namespace nn {

enum class Reduce { sum, mean, max };

inline const char* reduce_name(Reduce r) noexcept {
  return r == Reduce::sum ? "sum" : r == Reduce::mean ? "mean" : "max";
}

// How long the layers' worker threads keep polling for the next call after one before they
// sleep (process-wide; default 500 us; at most 1 s). Polling, a worker takes its share of a
// call at once (a sleeping one is woken through the kernel: 35-44 us of the caller's time on
// the VM of bench/README.md), and small calls back to back run on every thread; asleep, it
// costs no CPU. 0: workers sleep as soon as a call is done, and small calls run on the
// caller alone (as OMP_WAIT_POLICY=PASSIVE does for OpenMP's threads).
inline void set_spin_wait(std::chrono::microseconds wait) noexcept {
  const auto us = wait.count() < 0 ? 0 : wait.count() > 1000000 ? 1000000 : wait.count();
  ptread::detail::WorkerPool::instance().set_spin_micros(static_cast<uint32_t>(us));
}
inline std::chrono::microseconds spin_wait() noexcept {
  return std::chrono::microseconds(ptread::detail::WorkerPool::instance().spin_micros());
}

struct EmbeddingOptions {
  // torch's padding_idx (negative counts from the end). Embedding returns that row as stored,
  // as F.embedding does; EmbeddingBag leaves entries equal to it out of their bag (mean divides
  // by the entries left, a bag of padding only is zeros).
  std::optional<int64_t> padding_idx;
  // EmbeddingBag: offsets holds num_bags + 1 entries, the last one equal to the number of
  // indices (torch's include_last_offset).
  bool include_last_offset = false;
  // Threads for one forward call (the caller's included); 0 = every hardware thread.
  unsigned threads = 0;
  // Linux, mmap mode: ask the kernel to map the table with 2 MiB pages (madvise
  // MADV_HUGEPAGE on the whole 2 MiB pages inside it) when it takes at most half of the
  // machine's memory. Rows looked up at random then need a TLB entry per 2 MiB instead of
  // per 4 KiB: gathers and bags ran 1.05-2.5x faster on a table in 2 MiB pages
  // (bench/README.md, "Tables in 2 MiB pages"). The kernel reads the table's pages that are
  // not in the page cache yet as 2 MiB folios and maps them whole (file systems with large
  // folios: ext4 since Linux 6.16, XFS), a fault reading its 2 MiB and no more (the range is
  // also advised MADV_RANDOM); pages already cached stay as they are. A larger table is left
  // to 4 KiB pages, where a fault on a random row reads less of the file. (Read mode: tables
  // of 8 MiB or more already sit in buffers advised for huge pages.) false: never ask.
  bool huge_pages = true;
};

class LinearBackend;  // nn/linear.hpp

struct LinearOptions {
  // Threads for one forward call of the portable path (the caller's included); 0 = every
  // hardware thread. Small products run on the calling thread alone.
  unsigned threads = 0;
  // Another implementation of the product (ptread::nn::openblas_backend() from
  // nn/openblas.hpp); null = the portable path.
  std::shared_ptr<const LinearBackend> backend;
};

// A 2-D F32/F16/BF16 weight as the layers read it: rows of `cols` elements, `row_stride` and
// `col_stride` elements apart, at `data` inside the storage `tensor` keeps alive.
struct WeightMatrix {
  Tensor tensor;
  const void* data = nullptr;
  DType dtype = DType::F32;
  size_t rows = 0, cols = 0;
  size_t row_stride = 0, col_stride = 1;

  size_t element_size() const noexcept { return dtype == DType::F32 ? 4 : 2; }
  const void* row(size_t r) const noexcept {
    return static_cast<const uint8_t*>(data) + r * row_stride * element_size();
  }
  // Rows whose elements are adjacent: the kernels read them directly.
  bool rows_contiguous() const noexcept { return col_stride == 1 || cols <= 1; }
};

namespace detail {

inline std::string param_name(std::string_view prefix, const char* leaf) {
  std::string name(prefix);
  if (!name.empty()) name += '.';
  return name + leaf;
}

// The weight named prefix.weight as a checked 2-D matrix. Tensors with the neg bit are
// materialized (the bytes are not the values); strided ones stay views.
// A layer's weight is 2-D F32, F16 or BF16 (the CPU layers and the CUDA ones check alike).
inline Status check_weight(DType dtype, size_t dims, const std::string& name, const char* layer) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) {
    return make_error(ErrorCode::dtype_mismatch, std::string(layer) + ": '" + name + "' is " + dtype_name(dtype) +
                                                     "; F32, F16 or BF16 expected");
  }
  if (dims != 2) {
    return make_error(ErrorCode::invalid_argument, std::string(layer) + ": '" + name + "' has " +
                                                       std::to_string(dims) + " dimensions; a 2-D weight expected");
  }
  return {};
}

inline Result<WeightMatrix> weight_matrix(const Checkpoint& ck, const std::string& name, const char* layer) {
  PTREAD_TRY(Tensor t, ck.get(name));
  PTREAD_CHECK(check_weight(t.dtype(), t.dim(), name, layer));
  if (t.is_neg() || t.is_conj()) {
    PTREAD_TRY(t, t.contiguous());
  }
  WeightMatrix w;
  w.rows = static_cast<size_t>(t.shape()[0]);
  w.cols = static_cast<size_t>(t.shape()[1]);
  w.row_stride = static_cast<size_t>(t.strides()[0]);
  w.col_stride = static_cast<size_t>(t.strides()[1]);
  w.dtype = t.dtype();
  w.data = t.data_ptr();
  w.tensor = std::move(t);
  return w;
}

// Whether a table whose rows span `span` bytes is advised for 2 MiB pages, on a machine with
// `ram` bytes of memory (0: unknown, never): at most half of it (EmbeddingOptions::huge_pages).
inline bool huge_table(uint64_t span, uint64_t ram) noexcept { return ram != 0 && span <= ram / 2; }

// Bytes from a matrix's first element to the end of its last.
inline uint64_t weight_span(const WeightMatrix& w) noexcept {
  if (w.rows == 0 || w.cols == 0) return 0;
  return (static_cast<uint64_t>(w.rows - 1) * w.row_stride + static_cast<uint64_t>(w.cols - 1) * w.col_stride + 1) *
         w.element_size();
}

// Advises a table read from a mapped file for 2 MiB pages (EmbeddingOptions::huge_pages):
// true when the kernel took the advice.
inline bool advise_table(const Checkpoint& ck, const WeightMatrix& w, bool huge_pages) noexcept {
  if (!huge_pages || ck.mode() != LoadMode::mmap) return false;
  const uint64_t span = weight_span(w);
  if (!huge_table(span, ptread::detail::physical_memory()) || span > SIZE_MAX) return false;
  return ptread::detail::advise_huge_pages(w.data, static_cast<size_t>(span));
}

// Embedding and EmbeddingBag calls that read fewer row elements than this are small: on the
// caller alone unless a worker is awake or calls come back to back (parallel_for): on the
// AVX-512 VM of bench/README.md ("Small calls on one thread") waking the pool's sleeping
// worker cost its caller 35-44 us and the worker began 90-230 us late: two threads made
// gathers and bags of 0.13-0.33 M elements 1.0-2.9x slower; from 0.5 M elements (2 MiB of
// F32 rows) they took 0.5-0.86x the time after a pause (up to 1.5x with every row already
// in cache). (Only which thread computes what changes: the results are the same bits.)
constexpr size_t kMinSplitFloats = size_t{1} << 19;

// Splits `count` items into tasks of at least `min_items`, at most `per_thread` a thread.
inline size_t task_count(size_t count, size_t min_items, unsigned threads, size_t per_thread = 4) {
  if (threads <= 1 || count < 2 * min_items) return 1;
  const size_t by_size = count / min_items;
  const size_t cap = static_cast<size_t>(threads) * per_thread;
  return by_size < cap ? by_size : cap;
}

}  // namespace detail
}  // namespace nn
}  // namespace ptread
