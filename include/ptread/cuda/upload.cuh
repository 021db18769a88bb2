// ptread — CUDA: a Checkpoint's tensors in device memory, through a small pinned staging ring.
//
//   auto ck = ptread::Checkpoint::open("model.pt");                 // mmap: nothing read yet
//   auto dev = ptread::cuda::upload(*ck);                            // Result<DeviceTensors>
//   const ptread::cuda::DeviceTensor* w = dev->find("fc.weight");    // w->data(): device memory
//
//   ptread::cuda::UploadOptions o;
//   o.names = {"fc.weight", "fc.bias"};     // only these (default: every tensor)
//   o.convert_to_f32 = true;                // F16/BF16 become F32 on the device (a kernel)
//   auto up = ptread::cuda::Uploader::create(o);   // the ring, allocated once, for many uploads
//   auto part = up->upload(*ck);
//
// How: each storage the chosen tensors view is uploaded once, as the span of it they reach,
// into one device allocation (spans 256-byte aligned); tensors that shared a storage share it
// on the device, with their shapes, strides and offsets (views stay views, as
// torch.load(map_location="cuda") keeps them). The host side is a ring of `buffers` pinned
// buffers of `buffer_bytes` (cudaHostAlloc, once per Uploader) and one stream: threads fill
// a free buffer with the checkpoint's next bytes while the copy engine moves earlier buffers
// to the device; an event per buffer says when it is free again. Nothing is DMA'd from the
// mapped file itself. In mmap mode the threads read the file with pread (read_file) at the
// offsets of its mapping: the mapping's pages are never faulted in, so host memory grows by
// about the ring, not by the checkpoint (and no page faults: 1.3x the rate of copying from
// the mapping on an H100 machine). Without read_file they memcpy from the mapping and drop
// its pages once copied (madvise MADV_DONTNEED, release_pages): the page cache keeps them and
// a later CPU read of a tensor pages them back in. Other load modes copy from their buffers.
//
// F16/BF16 stay as stored unless convert_to_f32: then their bytes go through a device
// scratch buffer (buffer_bytes) into F32 storage, converted exactly. Byte order was made
// native when the checkpoint was opened. Tensors with torch's neg or conj bit are uploaded
// as their resolved values (a host copy of that tensor first). upload() returns when every
// byte is on the device.
#pragma once

#include "common.cuh"
#include "detail/kernels.cuh"
#include "../memory/keyed_hash.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#if PTREAD_POSIX
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace ptread {
namespace cuda {

struct UploadOptions {
  size_t buffer_bytes = size_t{16} << 20;  // each pinned staging buffer (rounded down to 256 bytes, at least 256)
  unsigned buffers = 4;                    // buffers in the ring (at least 2)
  std::vector<std::string> names;          // the tensors to upload; empty: every tensor
  bool convert_to_f32 = false;             // F16/BF16 tensors become F32 on the device
  unsigned threads = 0;                    // host threads filling a buffer; 0: the hardware's, at most 16
  bool read_file = true;                   // mmap mode: read the file's bytes with pread (nothing mapped)
  bool release_pages = true;               // mmap mode, read_file off: drop the file's pages once copied

  // Two 2 MiB buffers: what a single layer's from(checkpoint) uses by default.
  static UploadOptions small_ring() {
    UploadOptions o;
    o.buffer_bytes = size_t{2} << 20;
    o.buffers = 2;
    return o;
  }
};

struct UploadStats {
  uint64_t host_bytes = 0;      // bytes read from the checkpoint's storages
  uint64_t device_bytes = 0;    // device memory allocated (F32 where converted, alignment)
  uint64_t transfers = 0;       // host-to-device copies issued
  uint64_t file_bytes = 0;      // bytes read from the checkpoint's file with pread (read_file)
  uint64_t released_bytes = 0;  // mapped file bytes dropped after copying (read_file off)
  double seconds = 0;           // wall time of upload()
};

// One tensor in device memory: the checkpoint tensor's shape and strides (in elements) over a
// device span of its storage. The bytes stay alive while any tensor of the upload refers to them.
class DeviceTensor {
 public:
  DType dtype() const noexcept { return dtype_; }
  // The dtype in the checkpoint (differs from dtype() where F16/BF16 were converted).
  DType stored_dtype() const noexcept { return stored_; }
  Dims shape() const noexcept { return Dims(shape_); }
  Dims strides() const noexcept { return Dims(strides_); }
  size_t dim() const noexcept { return shape_.size(); }
  int64_t numel() const noexcept { return numel_; }
  size_t element_size() const noexcept { return dtype_size(dtype_); }
  uint64_t nbytes() const noexcept { return static_cast<uint64_t>(numel_) * element_size(); }
  // Where torch saved it from ("cuda:0", "cpu" ...).
  const std::string& device() const noexcept { return device_; }
  bool is_contiguous() const noexcept {
    int64_t expected = 1;
    for (size_t d = shape_.size(); d-- > 0;) {
      if (shape_[d] == 1) continue;
      if (strides_[d] != expected) return numel_ == 0;
      expected *= shape_[d];
    }
    return true;
  }

  // Device address of element [0, 0, ...] (null for a tensor of no elements).
  void* data() const noexcept { return span_ ? static_cast<uint8_t*>(span_) + byte_offset_ : nullptr; }
  // The uploaded span of its storage: data() lies storage_offset() elements into it (exact
  // unless the storage is viewed as several dtypes).
  void* storage_data() const noexcept { return span_; }
  size_t storage_bytes() const noexcept { return span_bytes_; }
  int64_t storage_offset() const noexcept { return static_cast<int64_t>(byte_offset_ / element_size()); }

 private:
  friend class Uploader;
  std::shared_ptr<const DeviceBuffer> arena_;
  void* span_ = nullptr;
  size_t span_bytes_ = 0, byte_offset_ = 0;
  std::vector<int64_t> shape_, strides_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32, stored_ = DType::F32;
  std::string device_;
};

struct NamedDeviceTensor {
  std::string name;
  DeviceTensor tensor;
};

class DeviceTensors {
 public:
  // In the checkpoint's order (or the order of UploadOptions::names).
  const std::vector<NamedDeviceTensor>& tensors() const noexcept { return tensors_; }
  const DeviceTensor* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second].tensor;
  }
  Result<DeviceTensor> get(const std::string& name) const {
    if (const DeviceTensor* t = find(name)) return *t;
    return make_error(ErrorCode::not_found, "no uploaded tensor named '" + name + "'");
  }
  const UploadStats& stats() const noexcept { return stats_; }

 private:
  friend class Uploader;
  std::vector<NamedDeviceTensor> tensors_;
  std::unordered_map<std::string, size_t, ptread::detail::KeyedHash> index_;  // names a file chose: KeyedHash
  UploadStats stats_;
};

namespace detail {

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// [first, last] element offsets a view reaches, relative to its storage.
inline void view_extent(const Tensor& t, int64_t* first, int64_t* last) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (size_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.shape()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  *first = lo;
  *last = hi;
}

// A read-only private mapping of the checkpoint's file: addresses [lo, hi) hold the file's
// bytes from `offset` on; the file is inode `inode` of device major:minor.
struct FileMapping {
  uintptr_t lo = 0, hi = 0;
  uint64_t offset = 0;
  unsigned dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
};

// This process's read-only private mappings of `path` (from /proc/self/maps): where an
// mmap-mode checkpoint's bytes live, what upload() reads again with pread, and the only
// memory it drops pages of.
inline std::vector<FileMapping> file_mappings(const std::string& path) {
  std::vector<FileMapping> out;
#if PTREAD_POSIX
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real) == nullptr) return out;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return out;
  char line[PATH_MAX + 256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long lo = 0, hi = 0, offset = 0, inode = 0;
    unsigned dev_major = 0, dev_minor = 0;
    char perms[8] = {};
    int pos = 0;
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &lo, &hi, perms, &offset, &dev_major, &dev_minor, &inode,
                    &pos) <
            7 ||
        pos <= 0) {
      continue;
    }
    std::string p(line + pos);
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
    if (p == real && std::string(perms) == "r--p") {
      out.push_back(FileMapping{static_cast<uintptr_t>(lo), static_cast<uintptr_t>(hi), static_cast<uint64_t>(offset),
                                dev_major, dev_minor, static_cast<uint64_t>(inode)});
    }
  }
  std::fclose(f);
#else
  (void)path;
#endif
  return out;
}

// `path` opened for reading when it is still the file `m` maps (same device and inode), else -1.
inline int open_same_file(const std::string& path, const FileMapping& m) {
#if PTREAD_POSIX
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_ino) == m.inode && major(st.st_dev) == m.dev_major &&
      minor(st.st_dev) == m.dev_minor) {
    return fd;
  }
  ::close(fd);
#else
  (void)path;
  (void)m;
#endif
  return -1;
}

// One storage span to upload: bytes [lo, hi) of the storage at src, to arena offset `at`.
struct Span {
  const uint8_t* src = nullptr;
  uint64_t lo = 0, hi = 0;
  DType dtype = DType::U8;  // of the tensors viewing it (converted spans: F16 or BF16)
  bool mixed = false;       // viewed as several dtypes
  bool convert = false;
  size_t at = 0;            // arena offset of the device span
  size_t packed = 0;        // converted spans: offset in the stream of raw bytes
  uint64_t bytes() const { return hi - lo; }
};

}  // namespace detail

class Uploader {
 public:
  Uploader() = default;

  static Result<Uploader> create(UploadOptions options = {}) {
    Uploader u;
    options.buffer_bytes = std::max<size_t>(256, options.buffer_bytes / 256 * 256);
    options.buffers = std::max(2u, options.buffers);
    if (options.threads == 0) options.threads = std::min(16u, ptread::detail::resolve_threads(0));
    u.o_ = std::move(options);
    PTREAD_TRY(u.stream_, Stream::create());
    for (unsigned b = 0; b < u.o_.buffers; ++b) {
      PTREAD_TRY(PinnedBuffer p, PinnedBuffer::allocate(u.o_.buffer_bytes));
      PTREAD_TRY(Event e, Event::create());
      u.ring_.push_back(std::move(p));
      u.done_.push_back(std::move(e));
    }
    return Result<Uploader>(std::move(u));
  }

  const UploadOptions& options() const noexcept { return o_; }

  // The tensors named by options().names (all when empty).
  Result<DeviceTensors> upload(const Checkpoint& ck) { return upload(ck, o_.names); }

  Result<DeviceTensors> upload(const Checkpoint& ck, const std::vector<std::string>& names) {
    std::vector<NamedTensor> chosen;
    if (names.empty()) {
      chosen = ck.tensors();
    } else {
      std::unordered_set<std::string, ptread::detail::KeyedHash> seen;
      for (const std::string& n : names) {
        if (!seen.insert(n).second) continue;
        PTREAD_TRY(Tensor t, ck.get(n));
        chosen.push_back(NamedTensor{n, std::move(t)});
      }
    }
    return upload_tensors(std::move(chosen), &ck);
  }

  // Tensors of any origin, under the names given. `source`, when they are views of a
  // checkpoint opened in mmap mode, lets release_pages drop its file's pages.
  Result<DeviceTensors> upload_tensors(std::vector<NamedTensor> chosen, const Checkpoint* source = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    if (ring_.empty()) return make_error(ErrorCode::invalid_argument, "upload: the Uploader was not made by create()");
    for (NamedTensor& nt : chosen) {
      if (nt.tensor.is_neg() || nt.tensor.is_conj()) {
        PTREAD_TRY(nt.tensor, nt.tensor.contiguous());  // the resolved values, a host copy
      }
    }

    // Spans: one per storage, in the order tensors first reach them.
    std::vector<detail::Span> spans;
    std::vector<size_t> span_of(chosen.size(), SIZE_MAX);
    std::unordered_map<const Storage*, size_t> by_storage;
    for (size_t i = 0; i < chosen.size(); ++i) {
      const Tensor& t = chosen[i].tensor;
      if (t.numel() == 0) continue;
      int64_t first, last;
      detail::view_extent(t, &first, &last);
      const uint64_t es = t.element_size();
      const uint64_t lo = static_cast<uint64_t>(first) * es, hi = (static_cast<uint64_t>(last) + 1) * es;
      auto ins = by_storage.emplace(t.storage().get(), spans.size());
      if (ins.second) {
        detail::Span s;
        s.src = t.storage()->data();
        s.lo = lo;
        s.hi = hi;
        s.dtype = t.dtype();
        spans.push_back(s);
      } else {
        detail::Span& s = spans[ins.first->second];
        s.lo = std::min(s.lo, lo);
        s.hi = std::max(s.hi, hi);
        s.mixed = s.mixed || s.dtype != t.dtype();
      }
      span_of[i] = ins.first->second;
    }
    for (size_t i = 0; i < chosen.size(); ++i) {
      if (span_of[i] == SIZE_MAX) continue;
      detail::Span& s = spans[span_of[i]];
      const DType dt = chosen[i].tensor.dtype();
      if (!o_.convert_to_f32 || (dt != DType::F16 && dt != DType::BF16)) continue;
      if (s.mixed) {
        return make_error(ErrorCode::invalid_argument,
                          "upload: '" + chosen[i].name + "' is " + dtype_name(dt) +
                              " over a storage other tensors view as another dtype; convert_to_f32 "
                              "cannot widen it (upload it without conversion)");
      }
      s.convert = true;
    }

    // The device layout: raw spans first (their bytes go straight to the arena), then the F32
    // spans of converted ones (their raw bytes go through the scratch buffer).
    size_t arena = 0, packed = 0;
    for (auto& s : spans) {
      if (s.convert) continue;
      s.at = arena = detail::align_up(arena, 256);
      arena += static_cast<size_t>(s.bytes());
    }
    const size_t raw_end = arena;
    for (auto& s : spans) {
      if (!s.convert) continue;
      s.at = arena = detail::align_up(arena, 256);
      arena += static_cast<size_t>(s.bytes()) * 2;
      s.packed = packed = detail::align_up(packed, 16);
      packed += static_cast<size_t>(s.bytes());
    }
    PTREAD_TRY(DeviceBuffer buf, DeviceBuffer::allocate(arena));
    auto dev = std::make_shared<const DeviceBuffer>(std::move(buf));
    if (packed > 0 && scratch_.size() < o_.buffer_bytes) {
      PTREAD_TRY(scratch_, DeviceBuffer::allocate(o_.buffer_bytes));
    }

    DeviceTensors out;
    mappings_.clear();
    if ((o_.read_file || o_.release_pages) && source != nullptr && source->mode() == LoadMode::mmap) {
      mappings_ = detail::file_mappings(source->path());
    }
#if PTREAD_POSIX
    // The file again, for pread: the mapping's pages are never touched (no faults, nothing to
    // drop); a span it cannot read is copied from the mapping. Only the mapped file itself:
    // one renamed over its path since (a checkpoint saved again) is not read.
    fd_ = o_.read_file && !mappings_.empty() ? detail::open_same_file(source->path(), mappings_.front()) : -1;
    struct CloseFd {
      int& fd;
      ~CloseFd() {
        if (fd >= 0) ::close(fd);
        fd = -1;
      }
    } close_fd{fd_};
#endif
    stats_ = UploadStats();
    stats_.device_bytes = arena;
    Lane raw{{}, false}, converted{{}, true};
    for (const auto& s : spans) (s.convert ? converted : raw).spans.push_back(&s);
    auto* base = static_cast<uint8_t*>(dev->data());
    auto send = [&]() -> Status {
      PTREAD_CHECK(send_raw(raw, base, raw_end));
      return send_converted(converted, base, packed);
    };
    const Status st = send();
    const Status synced = stream_.synchronize();  // also after a failure: the ring must be idle
    if (!st) return st.error();
    PTREAD_CHECK(synced);

    for (size_t i = 0; i < chosen.size(); ++i) {
      const Tensor& t = chosen[i].tensor;
      DeviceTensor d;
      d.shape_ = t.shape().to_vector();
      d.strides_ = t.strides().to_vector();
      d.numel_ = t.numel();
      d.stored_ = d.dtype_ = t.dtype();
      d.device_ = t.device();
      if (span_of[i] != SIZE_MAX) {
        const detail::Span& s = spans[span_of[i]];
        const uint64_t off = static_cast<uint64_t>(t.storage_offset()) * t.element_size() - s.lo;
        const size_t widen = s.convert ? 2 : 1;
        if (s.convert) d.dtype_ = DType::F32;
        d.arena_ = dev;
        d.span_ = static_cast<uint8_t*>(dev->data()) + s.at;
        d.span_bytes_ = static_cast<size_t>(s.bytes()) * widen;
        d.byte_offset_ = static_cast<size_t>(off) * widen;
      }
      out.index_.emplace(chosen[i].name, out.tensors_.size());
      out.tensors_.push_back(NamedDeviceTensor{std::move(chosen[i].name), std::move(d)});
    }
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.stats_ = stats_;
    return out;
  }

 private:
  // The spans of one stream (raw or converted) in the order of their offsets in it.
  struct Lane {
    std::vector<const detail::Span*> spans;
    bool converted;
    size_t key(const detail::Span& s) const { return converted ? s.packed : s.at; }
    // Calls f(span, c0, c1) for the part [c0, c1) of each span inside [x0, x1).
    template <class F>
    void each(size_t x0, size_t x1, F f) const {
      auto it = std::partition_point(spans.begin(), spans.end(), [&](const detail::Span* s) {
        return key(*s) + static_cast<size_t>(s->bytes()) <= x0;
      });
      for (; it != spans.end() && key(**it) < x1; ++it) {
        const size_t s0 = key(**it), s1 = s0 + static_cast<size_t>((*it)->bytes());
        const size_t c0 = std::max(x0, s0), c1 = std::min(x1, s1);
        if (c0 < c1) f(**it, c0, c1);
      }
    }
  };

  // Copies [a0, a1) of a lane into dst on the pool's threads: each reads its part of the
  // file with pread (read_file), or copies it from the mapping and drops the pages it read
  // as soon as it has copied them (release_pages); returns the host bytes read.
  uint64_t fill(const Lane& lane, size_t a0, size_t a1, uint8_t* dst) {
    const size_t n = a1 - a0;
    const size_t tasks = std::max<size_t>(1, std::min<size_t>(o_.threads, n / (size_t{1} << 20)));
    const size_t per = (n + tasks - 1) / tasks;
    std::atomic<uint64_t> released{0}, from_file{0};
    ptread::detail::parallel_for(o_.threads, tasks, [&](size_t task) {
      const size_t x0 = a0 + task * per, x1 = std::min(a1, x0 + per);
      if (x0 >= x1) return;
      uint64_t dropped = 0, read = 0;
      lane.each(x0, x1, [&](const detail::Span& s, size_t c0, size_t c1) {
        const uint8_t* src = s.src + s.lo + (c0 - lane.key(s));
        if (read_file(src, c1 - c0, dst + (c0 - a0))) {
          read += c1 - c0;
          return;
        }
        std::memcpy(dst + (c0 - a0), src, c1 - c0);
        if (o_.release_pages) dropped += release(src, c1 - c0);
      });
      released.fetch_add(dropped, std::memory_order_relaxed);
      from_file.fetch_add(read, std::memory_order_relaxed);
    });
    stats_.released_bytes += released.load(std::memory_order_relaxed);
    stats_.file_bytes += from_file.load(std::memory_order_relaxed);
    uint64_t read = 0;
    lane.each(a0, a1, [&](const detail::Span&, size_t c0, size_t c1) { read += c1 - c0; });
    return read;
  }

  // The checkpoint's file mapping that holds all of [p, p + n), or null.
  const detail::FileMapping* mapping_of(const uint8_t* p, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const auto& m : mappings_) {
      if (a >= m.lo && a + n <= m.hi) return &m;
    }
    return nullptr;
  }

  // [p, p + n) of the file mapping read with pread into dst; false when there is no file to
  // read, [p, p + n) is not in the mapping, or a read fails (the caller then copies from the
  // mapping: a failed pread leaves nothing the copy does not overwrite).
  bool read_file(const uint8_t* p, size_t n, uint8_t* dst) const {
#if PTREAD_POSIX
    const detail::FileMapping* m = fd_ < 0 ? nullptr : mapping_of(p, n);
    if (m == nullptr) return false;
    uint64_t off = m->offset + (reinterpret_cast<uintptr_t>(p) - m->lo);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, dst, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      dst += r;
      n -= static_cast<size_t>(r);
      off += static_cast<uint64_t>(r);
    }
    return true;
#else
    (void)p;
    (void)n;
    (void)dst;
    return false;
#endif
  }

  // Drops the pages holding [p, p + n) when they belong to the checkpoint's file mapping;
  // returns the bytes dropped. The range is rounded out to whole pages: a neighbour's page
  // dropped early is read again from the page cache when its turn comes.
  uint64_t release(const uint8_t* p, size_t n) const {
#if PTREAD_POSIX
    const detail::FileMapping* m = n == 0 ? nullptr : mapping_of(p, n);
    if (m == nullptr) return 0;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = a / page * page, hi = std::min(m->hi, (a + n + page - 1) / page * page);
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0) return hi - lo;
#else
    (void)p;
    (void)n;
#endif
    return 0;
  }

  // Waits until ring buffer `slot` is free again.
  Result<uint8_t*> acquire(size_t slot) {
    PTREAD_CHECK(done_[slot].synchronize());
    return static_cast<uint8_t*>(ring_[slot].data());
  }

  Status send_raw(const Lane& lane, uint8_t* arena, size_t end) {
    size_t slot = 0;
    for (size_t a0 = 0; a0 < end; a0 += o_.buffer_bytes, slot = (slot + 1) % ring_.size()) {
      const size_t a1 = std::min(end, a0 + o_.buffer_bytes);
      PTREAD_TRY(uint8_t* buf, acquire(slot));
      stats_.host_bytes += fill(lane, a0, a1, buf);
      PTREAD_CHECK(cuda_check(cudaMemcpyAsync(arena + a0, buf, a1 - a0, cudaMemcpyHostToDevice, stream_.get()),
                              "cudaMemcpyAsync (upload)"));
      ++stats_.transfers;
      PTREAD_CHECK(done_[slot].record(stream_.get()));
    }
    return {};
  }

  // Raw F16/BF16 bytes to the scratch buffer, then a kernel per span piece widens them into
  // the arena. One stream orders it all: the next copy into scratch waits for the kernels.
  Status send_converted(const Lane& lane, uint8_t* arena, size_t end) {
    auto* scratch = static_cast<uint8_t*>(scratch_.data());
    size_t slot = 0;
    for (size_t a0 = 0; a0 < end; a0 += o_.buffer_bytes, slot = (slot + 1) % ring_.size()) {
      const size_t a1 = std::min(end, a0 + o_.buffer_bytes);
      PTREAD_TRY(uint8_t* buf, acquire(slot));
      stats_.host_bytes += fill(lane, a0, a1, buf);
      PTREAD_CHECK(cuda_check(cudaMemcpyAsync(scratch, buf, a1 - a0, cudaMemcpyHostToDevice, stream_.get()),
                              "cudaMemcpyAsync (upload, to convert)"));
      ++stats_.transfers;
      PTREAD_CHECK(done_[slot].record(stream_.get()));
      // (c0 - s.packed is even: spans start 16-aligned, chunks at multiples of 256.)
      lane.each(a0, a1, [&](const detail::Span& s, size_t c0, size_t c1) {
        detail::launch_to_f32(detail::weight_kind(s.dtype), scratch + (c0 - a0), (c1 - c0) / 2,
                              reinterpret_cast<float*>(arena + s.at + (c0 - s.packed) * 2), stream_.get());
      });
      PTREAD_CHECK(launch_check("the F16/BF16 -> F32 conversion"));
    }
    return {};
  }

  UploadOptions o_;
  Stream stream_;
  std::vector<PinnedBuffer> ring_;
  std::vector<Event> done_;
  DeviceBuffer scratch_;
  std::vector<detail::FileMapping> mappings_;
  int fd_ = -1;  // during upload() with read_file: the checkpoint's file, for pread
  UploadStats stats_;
};

// Uploads with a ring of its own (allocated and freed in the call).
inline Result<DeviceTensors> upload(const Checkpoint& ck, const UploadOptions& options = {}) {
  PTREAD_TRY(Uploader u, Uploader::create(options));
  return u.upload(ck);
}

// The tensor back in host memory: its uploaded span copied into an owned buffer, viewed with
// the same shape, strides and offset (a Tensor of the core: copy_to(), to_float32() ...).
inline Result<Tensor> to_host(const DeviceTensor& t) {
  // From the span's first byte that lies a whole number of elements before data().
  const size_t skip = t.storage_bytes() == 0 ? 0
                      : static_cast<size_t>(static_cast<uint8_t*>(t.data()) - static_cast<uint8_t*>(t.storage_data())) %
                            t.element_size();
  const size_t n = t.storage_bytes() - skip;
  PTREAD_TRY(auto buf, ptread::detail::allocate_aligned(n));
  if (n != 0) {
    PTREAD_CHECK(cuda_check(cudaMemcpy(buf.get(), static_cast<uint8_t*>(t.storage_data()) + skip, n,
                                       cudaMemcpyDeviceToHost),
                            "cudaMemcpy (to_host)"));
  }
  const uint8_t* p = buf.get();
  auto storage = std::make_shared<const Storage>(p, n, std::move(buf));
  return Tensor::view(std::move(storage), t.dtype(), t.shape().to_vector(), t.strides().to_vector(),
                      t.storage_offset(), t.device());
}

}  // namespace cuda
}  // namespace ptread
