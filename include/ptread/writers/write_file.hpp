// ptread — the bytes-out side of the writers: an output file that appears whole or not at
// all, and a tensor's values streamed in bounded pieces.
//
// OutputFile writes `PATH.tmp` and renames it to PATH on commit (after fsync), so a failed
// or interrupted write never leaves a half-written PATH; an uncommitted file is removed.
// ValueStream hands a tensor's logical values to a sink, C-contiguous and little-endian,
// optionally converted to another dtype, in pieces of at most kChunk bytes: a contiguous
// little-endian tensor in its own dtype goes out straight from its storage (a mapped file
// stays zero-copy), anything else through one reused buffer.
#pragma once

#include "../error.hpp"
#include "../tensor.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../platform/win32.hpp"  // (Windows only: empty elsewhere)

#if PTREAD_POSIX
#include <sys/statvfs.h>
#include <unistd.h>
#elif defined(_WIN32)
#include <io.h>  // _get_osfhandle
#endif

namespace ptread {
namespace detail {

inline bool host_is_little_endian() noexcept {
  const uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

// Reverses the bytes of each `unit`-byte element in place.
inline void swap_elements(uint8_t* p, size_t n, size_t unit) noexcept {
  if (unit <= 1) return;
  for (size_t i = 0; i + unit <= n; i += unit) {
    for (size_t a = i, b = i + unit - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
  }
}

class OutputFile {
 public:
  // `need`: the bytes the file will hold, checked against the room left on its filesystem
  // before anything is written (a stride-0 view stands for more bytes than any disk holds).
  static Result<OutputFile> create(const std::string& path, uint64_t need = 0) {
    OutputFile f;
    f.path_ = path;
    f.tmp_ = path + ".tmp";
#if defined(_WIN32)  // (paths are UTF-8: the wide-character calls take them)
    const std::wstring wide = win32_wide(f.tmp_);
    f.file_ = wide.empty() ? nullptr : ::_wfopen(wide.c_str(), L"wb");
    if (f.file_ == nullptr) return io_error("cannot create", f.tmp_, wide.empty() ? EINVAL : errno);
    uint64_t room = 0;  // (a ULARGE_INTEGER: a 64-bit unsigned integer, QuadPart)
    if (need > 0 &&
        ::GetDiskFreeSpaceExW(win32_wide(directory_of(f.tmp_)).c_str(), reinterpret_cast<_ULARGE_INTEGER*>(&room),
                              nullptr, nullptr) &&
        need > room) {
      return make_error(ErrorCode::io_error, "cannot write '" + path + "': it would hold " + std::to_string(need) +
                                                 " bytes; its filesystem has " + std::to_string(room) + " free");
    }
#else
    f.file_ = std::fopen(f.tmp_.c_str(), "wb");
    if (f.file_ == nullptr) return io_error("cannot create", f.tmp_, errno);
#endif
#if PTREAD_POSIX
    struct statvfs fs;
    if (need > 0 && ::fstatvfs(fileno(f.file_), &fs) == 0) {
      const uint64_t room = static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
      if (need > room) {
        return make_error(ErrorCode::io_error, "cannot write '" + path + "': it would hold " + std::to_string(need) +
                                                   " bytes; its filesystem has " + std::to_string(room) + " free");
      }
    }
#endif
    std::setvbuf(f.file_, nullptr, _IOFBF, size_t{1} << 20);
    return Result<OutputFile>(std::move(f));
  }

  OutputFile(OutputFile&& o) noexcept
      : file_(std::exchange(o.file_, nullptr)), path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), offset_(o.offset_) {}
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() { discard(); }

  Status write(const void* p, size_t n) {
    if (n == 0) return {};
    if (std::fwrite(p, 1, n, file_) != n) return io_error("cannot write", tmp_, errno);
    offset_ += n;
    return {};
  }
  Status write(const std::string& s) { return write(s.data(), s.size()); }
  // Bytes written so far: the offset of the next byte.
  uint64_t offset() const noexcept { return offset_; }

  // Flushes, syncs and closes the file, then renames it to its final path.
  Status commit() {
    if (std::fflush(file_) != 0) return io_error("cannot write", tmp_, errno);
#if PTREAD_POSIX
    // EINVAL, EROFS: a file system or device that cannot sync (a pipe, /dev/null ...)
    if (::fsync(fileno(file_)) != 0 && errno != EINVAL && errno != EROFS) return io_error("cannot sync", tmp_, errno);
#elif defined(_WIN32)
    // (a device that cannot flush, such as NUL, refuses with ERROR_INVALID_FUNCTION)
    void* h = reinterpret_cast<void*>(::_get_osfhandle(::_fileno(file_)));
    const unsigned long flush_err = h == win32::invalid_handle() || ::FlushFileBuffers(h) ? 0 : ::GetLastError();
    if (flush_err != 0 && flush_err != win32::kErrorInvalidFunction) {
      return make_error(ErrorCode::io_error, "cannot sync '" + tmp_ + "': " + win32_message(flush_err));
    }
#endif
    std::FILE* f = std::exchange(file_, nullptr);
    if (std::fclose(f) != 0) {
      const int err = errno;
      remove_file(tmp_);
      return io_error("cannot close", tmp_, err);
    }
#if defined(_WIN32)  // (the C runtime's rename() never replaces a file)
    if (!::MoveFileExW(win32_wide(tmp_).c_str(), win32_wide(path_).c_str(),
                       win32::kMoveReplaceExisting | win32::kMoveWriteThrough)) {
      const unsigned long err = ::GetLastError();
      remove_file(tmp_);
      return make_error(ErrorCode::io_error, "cannot rename '" + tmp_ + "' to '" + path_ + "': " + win32_message(err));
    }
#else
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int err = errno;
      std::remove(tmp_.c_str());
      return make_error(ErrorCode::io_error,
                        "cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(err));
    }
#endif
    return {};
  }

  // Closes and removes the temporary file (nothing once committed).
  void discard() noexcept {
    if (file_ == nullptr) return;
    std::fclose(std::exchange(file_, nullptr));
    remove_file(tmp_);
  }

 private:
  OutputFile() = default;
  static void remove_file(const std::string& path) noexcept {
#if defined(_WIN32)
    ::_wremove(win32_wide(path).c_str());
#else
    std::remove(path.c_str());
#endif
  }
#if defined(_WIN32)
  // The folder a path names its file in ("." for a bare name), for the free-space check.
  static std::string directory_of(const std::string& path) {
    const size_t slash = path.find_last_of("/\\");
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash + 1);
  }
#endif
  static Error io_error(const char* what, const std::string& path, int err) {
    return make_error(ErrorCode::io_error, std::string(what) + " '" + path + "': " + std::strerror(err));
  }

  std::FILE* file_ = nullptr;
  std::string path_, tmp_;
  uint64_t offset_ = 0;
};

inline bool is_float_dtype(DType t) noexcept {
  return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
}

// n contiguous elements between two different floating dtypes, each converted as
// convert_element (Tensor::copy_to) converts it, with the dtype switches out of the loop.
inline void convert_floats(const uint8_t* src, DType from, uint8_t* dst, DType to, size_t n) {
  auto run = [&](auto load) {  // load(i): element i as double (exact for every source)
    switch (to) {
      case DType::F32:
        for (size_t i = 0; i < n; ++i) {
          const float f = static_cast<float>(load(i));
          std::memcpy(dst + 4 * i, &f, 4);
        }
        return;
      case DType::F64:
        for (size_t i = 0; i < n; ++i) {
          const double d = load(i);
          std::memcpy(dst + 8 * i, &d, 8);
        }
        return;
      case DType::F16:
        for (size_t i = 0; i < n; ++i) {
          const uint16_t h = float_to_f16(static_cast<float>(load(i)));
          std::memcpy(dst + 2 * i, &h, 2);
        }
        return;
      default: {  // BF16, NaN spelled as torch's CPU copy spells it (see float_to_bf16)
        const uint16_t nan_bits = from == DType::F16 ? 0x7fc0u : 0xffffu;
        for (size_t i = 0; i < n; ++i) {
          const uint16_t h = float_to_bf16(static_cast<float>(load(i)), nan_bits);
          std::memcpy(dst + 2 * i, &h, 2);
        }
      }
    }
  };
  auto bits16 = [src](size_t i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    return h;
  };
  switch (from) {
    case DType::F16: run([&](size_t i) { return static_cast<double>(f16_to_float(bits16(i))); }); return;
    case DType::BF16: run([&](size_t i) { return static_cast<double>(bf16_to_float(bits16(i))); }); return;
    case DType::F32:
      run([src](size_t i) {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        return static_cast<double>(f);
      });
      return;
    default:
      run([src](size_t i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        return d;
      });
  }
}

class ValueStream {
 public:
  static constexpr uint64_t kChunk = uint64_t{16} << 20;

  // Calls sink(const uint8_t* p, size_t n) -> Status with t's values as `out` (a dtype
  // copy_to can convert to), C order, little-endian, math bits applied.
  template <class Sink>
  Status write(const Tensor& t, DType out, Sink&& sink) {
    if (t.numel() == 0) return {};
    if (out == t.dtype() && little_ && t.is_contiguous() && !t.is_conj() && !t.is_neg()) {
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      for (uint64_t left = t.nbytes(); left > 0;) {
        const size_t n = static_cast<size_t>(left < kChunk ? left : kChunk);
        PTREAD_CHECK(sink(p, n));
        p += n;
        left -= n;
      }
      return {};
    }
    return write_view(t, out, sink);
  }

 private:
  // A view in pieces: whole when small, else split along its first dimension.
  template <class Sink>
  Status write_view(const Tensor& t, DType out, Sink& sink) {
    const uint64_t nb = static_cast<uint64_t>(t.numel()) * dtype_size(out);
    if (nb == 0) return {};
    if (nb <= kChunk || t.dim() == 0) {
      if (!buf_) {
        PTREAD_TRY(buf_, allocate_aligned(static_cast<size_t>(kChunk)));
      }
      if (out != t.dtype() && is_float_dtype(t.dtype()) && is_float_dtype(out) && t.is_contiguous() && !t.is_conj() &&
          !t.is_neg()) {
        convert_floats(static_cast<const uint8_t*>(t.data_ptr()), t.dtype(), buf_.get(), out, static_cast<size_t>(t.numel()));
      } else {
        PTREAD_CHECK(t.copy_to(buf_.get(), static_cast<size_t>(nb), out));
      }
      if (!little_) swap_elements(buf_.get(), static_cast<size_t>(nb), dtype_swap_unit(out));
      return sink(static_cast<const uint8_t*>(buf_.get()), static_cast<size_t>(nb));
    }
    std::vector<int64_t> shape = t.shape(), strides = t.strides();
    const int64_t rows = shape[0], stride0 = strides[0];
    if (rows == 1) {  // drop the leading dimension
      shape.erase(shape.begin());
      strides.erase(strides.begin());
      return sub_view(t, shape, strides, t.storage_offset(), out, sink);
    }
    const uint64_t row_bytes = nb / static_cast<uint64_t>(rows);
    const int64_t per = static_cast<int64_t>(row_bytes >= kChunk ? 1 : kChunk / row_bytes);
    for (int64_t r = 0; r < rows; r += per) {
      shape[0] = per < rows - r ? per : rows - r;
      PTREAD_CHECK(sub_view(t, shape, strides, t.storage_offset() + r * stride0, out, sink));
    }
    return {};
  }

  template <class Sink>
  Status sub_view(const Tensor& t, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  int64_t offset, DType out, Sink& sink) {
    PTREAD_TRY(Tensor v, Tensor::view(t.storage(), t.dtype(), shape, strides, offset, t.device()));
    v.set_math_bits(t.is_conj(), t.is_neg());
    return write_view(v, out, sink);
  }

  bool little_ = host_is_little_endian();
  std::shared_ptr<uint8_t> buf_;
};

}  // namespace detail
}  // namespace ptread
