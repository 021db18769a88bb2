// ptread — byte sources.
//
// Every format reads through one interface, "give me N bytes at offset O", so a mapped file,
// a file read with pread and the caller's memory are one code path. A Bytes value is a range
// plus the owner that keeps it alive: a view into a mapping shares the mapping, a range read
// from a file owns its aligned buffer.
#pragma once

#include "memory/arena.hpp"  // whole_huge_pages
#include "error.hpp"
#include "limits.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#if defined(_WIN32)
#include <mutex>
#endif

#include "platform/win32.hpp"  // (Windows only: empty elsewhere)

#if PTREAD_POSIX
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace ptread {

// How a checkpoint's bytes are reached.
enum class LoadMode {
  mmap,    // map the file; tensors are zero-copy views; opening touches no tensor byte
  read,    // read each storage into its own buffer at open; the file is closed afterwards
  memory,  // views into a span the caller owns and keeps alive (open_memory)
};

inline const char* load_mode_name(LoadMode m) noexcept {
  switch (m) {
    case LoadMode::mmap: return "mmap";
    case LoadMode::read: return "read";
    case LoadMode::memory: return "memory";
  }
  return "?";
}

namespace detail {

// A byte range and what keeps it alive.
struct Bytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

// Buffers this large come straight from the kernel, aligned to 2 MiB and marked for
// transparent huge pages where Linux offers them: filling them then takes 512 times fewer
// page faults, which is most of the cost of reading a checkpoint into fresh memory.
constexpr size_t kHugeBufferBytes = size_t{8} << 20;

#if PTREAD_POSIX && defined(__linux__) && defined(MADV_HUGEPAGE)
inline std::shared_ptr<uint8_t> allocate_huge(size_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t len = ((n + kHuge - 1) & ~(kHuge - 1)) + kHuge;  // room to align the start
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<uint8_t*>(p);
  const size_t lead = (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
  ::madvise(base + lead, len - lead, MADV_HUGEPAGE);  // advice only: fine if refused
  return std::shared_ptr<uint8_t>(base + lead, [base, len](uint8_t*) { ::munmap(base, len); });
}
#endif

// Asks Linux for 2 MiB pages on the whole 2 MiB pages inside [p, p + n), part of a file
// mapping (or memory ptread owns) that is read at random: pages not in the page cache yet
// are then read in as 2 MiB folios, and mapped with one TLB entry each, whatever the
// device's readahead size (pages already cached stay as they are). The range is also marked
// for random reads (MADV_RANDOM): a fault then reads its 2 MiB and nothing ahead. Without
// that, a range read in order after its first pages were cached in small folios (the zip
// entry's header read at open brings them in) went on in small folios: the readahead that
// follows a read in order keeps the size it started with. True when the kernel took the
// advice for 2 MiB pages; false where it was refused (no transparent huge pages) or is not
// offered (other systems).
inline bool advise_huge_pages(const void* p, size_t n) noexcept {
#if PTREAD_POSIX && defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto range = whole_huge_pages(p, n);
  if (range.first == range.second) return false;
  void* start = reinterpret_cast<void*>(range.first);
  const size_t len = range.second - range.first;
  if (::madvise(start, len, MADV_HUGEPAGE) != 0) return false;
  ::madvise(start, len, MADV_RANDOM);  // a hint: failure is fine
  return true;
#else
  (void)p;
  (void)n;
  return false;
#endif
}

// Bytes of physical memory, or 0 where unknown.
inline uint64_t physical_memory() noexcept {
#if PTREAD_POSIX && defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
#else
  return 0;
#endif
}

// A 64-byte aligned heap buffer, or an error when it cannot be had.
inline Result<std::shared_ptr<uint8_t>> allocate_aligned(size_t n) {
  const size_t rounded = (n + 63) & ~size_t{63};
  if (rounded < n) return make_error(ErrorCode::limit_exceeded, "allocation size overflows");
#if PTREAD_POSIX && defined(__linux__) && defined(MADV_HUGEPAGE)
  if (n >= kHugeBufferBytes && n < (size_t{1} << 62)) {
    if (auto huge = allocate_huge(n)) return huge;
  }
#endif
#if defined(_WIN32)  // (no std::aligned_alloc in the Windows C runtime)
  void* p = ::_aligned_malloc(rounded == 0 ? 64 : rounded, 64);
  const auto release = [](uint8_t* q) { ::_aligned_free(q); };
#else
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  const auto release = [](uint8_t* q) { std::free(q); };
#endif
  if (p == nullptr) {
    return make_error(ErrorCode::limit_exceeded,
                      "cannot allocate " + std::to_string(n) + " bytes");
  }
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), release);
}

class Source : public std::enable_shared_from_this<Source> {
 public:
  virtual ~Source() = default;
  uint64_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }
  // The whole source as memory, or nullptr when it is read piecewise (read mode).
  const uint8_t* base() const noexcept { return base_; }

  // Bytes [offset, offset + n): a view when mapped, else a fresh aligned buffer.
  Result<Bytes> bytes(uint64_t offset, uint64_t n) const {
    if (!range_inside(offset, n, size_)) {
      return make_error(ErrorCode::truncated,
                        "range [" + std::to_string(offset) + ", +" + std::to_string(n) +
                            ") lies past the end of '" + name_ + "' (" + std::to_string(size_) +
                            " bytes)");
    }
    if (base_ != nullptr) return Bytes{base_ + offset, static_cast<size_t>(n), shared_from_this()};
    PTREAD_TRY(auto buf, allocate_aligned(static_cast<size_t>(n)));
    PTREAD_CHECK(read_at(offset, buf.get(), static_cast<size_t>(n)));
    const uint8_t* p = buf.get();
    return Bytes{p, static_cast<size_t>(n), std::move(buf)};
  }

  // Copies bytes into dst (works for every source).
  Status read_at(uint64_t offset, void* dst, size_t n) const {
    if (!range_inside(offset, n, size_)) {
      return make_error(ErrorCode::truncated, "read past the end of '" + name_ + "'");
    }
    if (n == 0) return {};
    if (base_ != nullptr) {
      if (n) std::memcpy(dst, base_ + offset, n);
      return {};
    }
    return read_impl(offset, static_cast<uint8_t*>(dst), n);
  }

  // Copies bytes [offset, offset + n) into dst through the file rather than through base():
  // false where the source has no file open (memory, a mapped file after open() has
  // returned) or the read fails or comes up short. For a walk over many small pieces of a
  // mapped file (FileWindow): on VMs whose host shadows the guest's page tables, the first
  // access to each page of a mapping costs about 1.5 us even when the guest has mapped it,
  // while a read copies at memory speed.
  bool copy_from_file(uint64_t offset, void* dst, size_t n) const noexcept {
    return range_inside(offset, n, size_) && file_copy_impl(offset, static_cast<uint8_t*>(dst), n);
  }

 protected:
  virtual Status read_impl(uint64_t, uint8_t*, size_t) const {
    return make_error(ErrorCode::io_error, "source cannot be read");
  }
  virtual bool file_copy_impl(uint64_t, uint8_t*, size_t) const noexcept { return false; }
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::string name_;
};

class MemorySource final : public Source {
 public:
  // keep: what keeps the memory alive, if the source is to (a nested archive's bytes).
  MemorySource(const void* data, size_t n, std::string name, std::shared_ptr<const void> keep = nullptr)
      : keep_(std::move(keep)) {
    base_ = static_cast<const uint8_t*>(data);
    size_ = n;
    name_ = std::move(name);
  }

 private:
  std::shared_ptr<const void> keep_;
};

#if PTREAD_POSIX
inline Error errno_error(const std::string& what, const std::string& path, int err) {
  return make_error(ErrorCode::io_error, what + " '" + path + "': " + std::strerror(err));
}

class FileSource final : public Source {
 public:
  static Result<std::shared_ptr<FileSource>> open(const std::string& path, bool map) {
    // O_NONBLOCK: opening a FIFO (a named pipe no one writes to) would otherwise wait for a
    // writer forever; it is refused below like any file that is not regular. (On a regular
    // file the flag changes nothing; it is cleared all the same, with the one status flag
    // open() set: F_SETFL changes no other, so no F_GETFL is needed.)
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno_error("cannot open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return errno_error("cannot stat", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return make_error(ErrorCode::io_error, "'" + path + "' is not a regular file");
    }
    ::fcntl(fd, F_SETFL, 0);
    auto src = std::shared_ptr<FileSource>(new FileSource());
    src->name_ = path;
    src->size_ = static_cast<uint64_t>(st.st_size);
    if (map && src->size_ > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(src->size_), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        return errno_error("cannot mmap", path, err);
      }
      src->base_ = static_cast<const uint8_t*>(p);
      src->map_size_ = static_cast<size_t>(src->size_);
    }
    // Kept until close_file() (Checkpoint::open closes it when open() is done): read mode
    // reads through it; mmap mode's directory walk may copy through it (copy_from_file).
    // The mapping stays valid without it.
    src->fd_ = fd;
    return src;
  }

  ~FileSource() override {
    if (map_size_ != 0) ::munmap(const_cast<uint8_t*>(base_), map_size_);
    if (fd_ >= 0) ::close(fd_);
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  // After open has read everything it needs, the descriptor is closed.
  void close_file() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  FileSource() = default;
  Status read_impl(uint64_t offset, uint8_t* dst, size_t n) const override {
    if (fd_ < 0) return make_error(ErrorCode::io_error, "'" + name_ + "' is closed");
    while (n > 0) {
      const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
      ssize_t got = ::pread(fd_, dst, chunk, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        return errno_error("cannot read", name_, errno);
      }
      if (got == 0) {
        return make_error(ErrorCode::truncated,
                          "'" + name_ + "' ended at byte " + std::to_string(offset) +
                              " while reading (it changed since it was opened?)");
      }
      dst += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return {};
  }
  bool file_copy_impl(uint64_t offset, uint8_t* dst, size_t n) const noexcept override {
    while (fd_ >= 0 && n > 0) {
      const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      dst += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return n == 0;
  }
  int fd_ = -1;
  size_t map_size_ = 0;
};
#elif defined(_WIN32)
inline Error win32_error(const std::string& what, const std::string& path, unsigned long err) {
  return make_error(ErrorCode::io_error, what + " '" + path + "': " + win32_message(err));
}

// The same source on Windows: the path is UTF-8; the file is shared for reading, writing
// and deletion as a POSIX file is (while it is mapped, Windows refuses to truncate it); one
// read-only view maps the whole file; reads seek and read under a lock (a positioned read
// would need the SDK's OVERLAPPED, see platform/win32.hpp).
class FileSource final : public Source {
 public:
  static Result<std::shared_ptr<FileSource>> open(const std::string& path, bool map) {
    const std::wstring wide = win32_wide(path);
    if (wide.empty()) return make_error(ErrorCode::io_error, "cannot open '" + path + "': not a UTF-8 path");
    const unsigned long attributes = ::GetFileAttributesW(wide.c_str());
    if (attributes != win32::kInvalidAttributes && (attributes & win32::kAttributeDirectory) != 0) {
      return make_error(ErrorCode::io_error, "'" + path + "' is not a regular file");
    }
    void* file = ::CreateFileW(wide.c_str(), win32::kGenericRead, win32::kShareReadWriteDelete, nullptr,
                               win32::kOpenExisting, win32::kAttributeNormal, nullptr);
    if (file == win32::invalid_handle()) return win32_error("cannot open", path, ::GetLastError());
    auto src = std::shared_ptr<FileSource>(new FileSource());
    src->file_ = file;  // closed by the destructor from here on
    src->name_ = path;
    if (::GetFileType(file) != win32::kFileTypeDisk) {
      return make_error(ErrorCode::io_error, "'" + path + "' is not a regular file");
    }
    unsigned long high = 0;
    ::SetLastError(win32::kNoError);
    const unsigned long low = ::GetFileSize(file, &high);
    if (low == win32::kInvalidFileSize && ::GetLastError() != win32::kNoError) {
      return win32_error("cannot stat", path, ::GetLastError());
    }
    src->size_ = (static_cast<uint64_t>(high) << 32) | low;
    if (map && src->size_ > 0) {
      if (src->size_ > static_cast<uint64_t>(SIZE_MAX)) {
        return make_error(ErrorCode::io_error, "cannot mmap '" + path + "': larger than the address space");
      }
      void* mapping = ::CreateFileMappingW(file, nullptr, win32::kPageReadonly, 0, 0, nullptr);
      if (mapping == nullptr) return win32_error("cannot mmap", path, ::GetLastError());
      void* p = ::MapViewOfFile(mapping, win32::kFileMapRead, 0, 0, 0);
      const unsigned long err = ::GetLastError();
      ::CloseHandle(mapping);  // the view keeps the mapping alive
      if (p == nullptr) return win32_error("cannot mmap", path, err);
      src->base_ = static_cast<const uint8_t*>(p);
    }
    return src;
  }

  ~FileSource() override {
    if (base_ != nullptr) ::UnmapViewOfFile(base_);
    close_file();
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  // After open has read everything it needs, the handle is closed (the view stays valid).
  void close_file() {
    if (file_ != win32::invalid_handle()) ::CloseHandle(file_);
    file_ = win32::invalid_handle();
  }

 private:
  FileSource() = default;
  // Reads [offset, offset + n) into dst: 0 on success, else the error (ERROR_HANDLE_EOF for
  // a file that ended first).
  unsigned long read_file(uint64_t offset, uint8_t* dst, size_t n) const noexcept {
    if (file_ == win32::invalid_handle()) return win32::kErrorInvalidHandle;
    std::lock_guard<std::mutex> lock(mutex_);
    long high = static_cast<long>(offset >> 32);
    ::SetLastError(win32::kNoError);
    if (::SetFilePointer(file_, static_cast<long>(offset & 0xffffffffu), &high, win32::kFileBegin) ==
            win32::kInvalidSetFilePointer &&
        ::GetLastError() != win32::kNoError) {
      return ::GetLastError();
    }
    while (n > 0) {
      const unsigned long chunk = static_cast<unsigned long>(n < (size_t{1} << 30) ? n : (size_t{1} << 30));
      unsigned long got = 0;
      if (!::ReadFile(file_, dst, chunk, &got, nullptr)) return ::GetLastError();
      if (got == 0) return win32::kErrorHandleEof;
      dst += got;
      n -= got;
    }
    return win32::kNoError;
  }
  Status read_impl(uint64_t offset, uint8_t* dst, size_t n) const override {
    if (file_ == win32::invalid_handle()) return make_error(ErrorCode::io_error, "'" + name_ + "' is closed");
    const unsigned long err = read_file(offset, dst, n);
    if (err == win32::kErrorHandleEof) {
      return make_error(ErrorCode::truncated, "'" + name_ + "' ended before byte " + std::to_string(offset + n) +
                                                  " while reading (it changed since it was opened?)");
    }
    if (err != win32::kNoError) return win32_error("cannot read", name_, err);
    return {};
  }
  bool file_copy_impl(uint64_t offset, uint8_t* dst, size_t n) const noexcept override {
    return read_file(offset, dst, n) == win32::kNoError;
  }
  void* file_ = win32::invalid_handle();
  mutable std::mutex mutex_;  // one seek and read at a time
};
#endif

// What a path names (Checkpoint::open takes a folder of a sharded set too).
enum class PathKind { missing, file, directory };
#if PTREAD_POSIX
inline PathKind path_kind(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return PathKind::missing;
  return S_ISDIR(st.st_mode) ? PathKind::directory : PathKind::file;
}
#elif defined(_WIN32)
inline PathKind path_kind(const std::string& path) {
  const std::wstring wide = win32_wide(path);
  const unsigned long attributes = wide.empty() ? win32::kInvalidAttributes : ::GetFileAttributesW(wide.c_str());
  if (attributes == win32::kInvalidAttributes) return PathKind::missing;
  return (attributes & win32::kAttributeDirectory) != 0 ? PathKind::directory : PathKind::file;
}
#endif

// Pieces of a mapped source read a window at a time through its file (copy_from_file), for
// walks over many small pieces in order (a zip directory's entries, the local headers of
// 100,000 small records): at(off, n) gives [off, off + n) from the window, reading the
// window again from `off` when the piece is not in it, or from base() where the file cannot
// be read (no descriptor, a failed read: from then on) or the piece is larger than the
// window. The same bytes either way; a pointer stays good until the next call. Callers
// check that [off, off + n) lies inside the source; base() must be non-null.
class FileWindow {
 public:
  static constexpr size_t kBytes = size_t{32} << 10;
  explicit FileWindow(const Source& src) : src_(&src) {}
  FileWindow(const FileWindow&) = delete;
  FileWindow& operator=(const FileWindow&) = delete;

  const uint8_t* at(uint64_t off, size_t n) {
    if (hi_ != lo_ && off >= lo_ && off - lo_ + n <= hi_ - lo_) return buf_.get() + (off - lo_);
    if (on_ && n <= kBytes) {
      if (!buf_) buf_.reset(new (std::nothrow) uint8_t[kBytes]);
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kBytes, src_->size() - off));  // >= n
      if (buf_ && len >= n && src_->copy_from_file(off, buf_.get(), len)) {
        lo_ = off;
        hi_ = off + len;
        return buf_.get();
      }
      on_ = false;
      lo_ = hi_ = 0;
    }
    return src_->base() + off;
  }

 private:
  const Source* src_;
  std::unique_ptr<uint8_t[]> buf_;
  uint64_t lo_ = 0, hi_ = 0;  // the window holds [lo_, hi_)
  bool on_ = true;
};

}  // namespace detail
}  // namespace ptread
