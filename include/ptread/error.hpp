// ptread — errors.
//
// The core never throws and never aborts on bad input: every fallible call returns a
// Result<T> (a value or an Error) or a Status. An Error carries a stable numeric code
// (never renumbered; the table is in docs/errors.md) and a message saying what was expected,
// what was found, and where. With exceptions on, Error derives from std::exception and
// thin wrappers (Result::value_or_throw, ptread::load) throw it.
#pragma once

#include "config.hpp"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#if PTREAD_EXCEPTIONS
#include <exception>
#endif

namespace ptread {

// Stable codes. Add new ones at the end of their block; never renumber.
enum class ErrorCode : int {
  ok = 0,
  // 1xx: the file as a whole
  io_error = 100,            // open, stat, read or mmap failed
  empty_file = 101,          // zero bytes
  git_lfs_pointer = 102,     // a Git LFS pointer text instead of the file
  html_page = 103,           // an HTML page (a download that returned a web page)
  safetensors_file = 104,    // (no longer raised: safetensors files are read)
  unknown_format = 105,      // not a format ptread knows
  truncated = 106,           // the file ends before its format says it should
  unsupported_format = 107,  // recognised, but this version cannot read it
  // 2xx: zip container
  zip_corrupt = 200,                  // malformed directory or header
  zip_record_out_of_bounds = 201,     // a record lies outside the file or overlaps the directory
  zip_unsupported_compression = 202,  // deflate without PTREAD_WITH_ZLIB, or another method
  zip_inflate_failed = 203,           // zlib error or size mismatch
  no_data_pkl = 204,                  // the archive has no data.pkl
  record_missing = 205,               // a storage record named by the pickle is absent
  legacy_corrupt = 206,               // legacy/tar: bad magic, version, key list or storage header
  zip_unsupported_feature = 207,      // an encrypted record, or an archive split across disks
  safetensors_corrupt = 208,          // a safetensors header that breaks the format (length, JSON, offsets)
  shard_index_corrupt = 209,          // a sharded set's index JSON is malformed (no weight_map, bad names ...)
  shard_mismatch = 210,               // a sharded set's shards disagree with its index
  // 3xx: pickle
  pickle_unknown_opcode = 300,      // a byte that is no pickle opcode
  pickle_unsupported_opcode = 301,  // a real opcode a checkpoint cannot use (EXT*, buffers; TorchScript: jit's subset)
  pickle_truncated = 302,           // the pickle ends inside an opcode or before STOP
  pickle_malformed = 303,           // stack underflow, missing MARK, bad memo key, wrong operand
  // 4xx: tensors
  unknown_storage_class = 400,  // a storage class name that maps to no dtype
  unknown_dtype = 401,          // a dtype name ptread does not know
  bad_tensor_args = 402,        // malformed rebuild arguments or persistent id
  view_out_of_bounds = 403,     // offset/shape/strides reach past the storage
  storage_too_small = 404,      // a record holds fewer bytes than its storage needs
  shape_overflow = 405,         // element or byte counts overflow 64 bits
  unsupported_tensor = 406,     // a tensor torch.load would give other data than the file (BUILD, set_) ...
  dtype_mismatch = 407,         // data<T>() with a T that is not the tensor's dtype
  not_contiguous = 408,         // a contiguous view was asked of a strided tensor
  unsupported_conversion = 409, // copy_to between dtypes with no defined conversion
  // 5xx: API use and limits
  not_found = 500,         // find(name) or an object-tree lookup found nothing
  invalid_argument = 501,  // a caller passed a bad argument (buffer too small ...)
  limit_exceeded = 502,    // a Limits bound was hit
  // 6xx: optional backends
  cuda_error = 600,  // a CUDA runtime call failed (no device, out of device memory, launch failure ...)
};

inline const char* error_code_name(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::io_error: return "io_error";
    case ErrorCode::empty_file: return "empty_file";
    case ErrorCode::git_lfs_pointer: return "git_lfs_pointer";
    case ErrorCode::html_page: return "html_page";
    case ErrorCode::safetensors_file: return "safetensors_file";
    case ErrorCode::unknown_format: return "unknown_format";
    case ErrorCode::truncated: return "truncated";
    case ErrorCode::unsupported_format: return "unsupported_format";
    case ErrorCode::zip_corrupt: return "zip_corrupt";
    case ErrorCode::zip_record_out_of_bounds: return "zip_record_out_of_bounds";
    case ErrorCode::zip_unsupported_compression: return "zip_unsupported_compression";
    case ErrorCode::zip_inflate_failed: return "zip_inflate_failed";
    case ErrorCode::no_data_pkl: return "no_data_pkl";
    case ErrorCode::record_missing: return "record_missing";
    case ErrorCode::legacy_corrupt: return "legacy_corrupt";
    case ErrorCode::zip_unsupported_feature: return "zip_unsupported_feature";
    case ErrorCode::safetensors_corrupt: return "safetensors_corrupt";
    case ErrorCode::shard_index_corrupt: return "shard_index_corrupt";
    case ErrorCode::shard_mismatch: return "shard_mismatch";
    case ErrorCode::pickle_unknown_opcode: return "pickle_unknown_opcode";
    case ErrorCode::pickle_unsupported_opcode: return "pickle_unsupported_opcode";
    case ErrorCode::pickle_truncated: return "pickle_truncated";
    case ErrorCode::pickle_malformed: return "pickle_malformed";
    case ErrorCode::unknown_storage_class: return "unknown_storage_class";
    case ErrorCode::unknown_dtype: return "unknown_dtype";
    case ErrorCode::bad_tensor_args: return "bad_tensor_args";
    case ErrorCode::view_out_of_bounds: return "view_out_of_bounds";
    case ErrorCode::storage_too_small: return "storage_too_small";
    case ErrorCode::shape_overflow: return "shape_overflow";
    case ErrorCode::unsupported_tensor: return "unsupported_tensor";
    case ErrorCode::dtype_mismatch: return "dtype_mismatch";
    case ErrorCode::not_contiguous: return "not_contiguous";
    case ErrorCode::unsupported_conversion: return "unsupported_conversion";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::limit_exceeded: return "limit_exceeded";
    case ErrorCode::cuda_error: return "cuda_error";
  }
  return "unknown_error";
}

class Error
#if PTREAD_EXCEPTIONS
    : public std::exception
#endif
{
 public:
  Error() = default;
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {
    char tag[24];
    std::snprintf(tag, sizeof tag, "[ptread.E%03d] ", static_cast<int>(code_));
    what_ = tag + message_;
  }

  ErrorCode code() const noexcept { return code_; }
  // The message without the code tag.
  const std::string& message() const noexcept { return message_; }
  // "[ptread.E403] message": the line to print.
  const std::string& str() const noexcept { return what_; }
#if PTREAD_EXCEPTIONS
  const char* what() const noexcept override { return what_.c_str(); }
#else
  const char* what() const noexcept { return what_.c_str(); }
#endif

  // Adds where the error happened ("in 'archive/data.pkl'"), outermost context last.
  Error& add_context(const std::string& where) {
    *this = Error(code_, message_ + " " + where);
    return *this;
  }

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
  std::string what_;
};

inline Error make_error(ErrorCode code, std::string message) { return Error(code, std::move(message)); }

// A value or an Error. Check with ok() or operator bool before value().
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(implicit)
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(implicit)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { PTREAD_ASSERT(ok()); return *std::get_if<0>(&v_); }
  const T& value() const& { PTREAD_ASSERT(ok()); return *std::get_if<0>(&v_); }
  T&& value() && { PTREAD_ASSERT(ok()); return std::move(*std::get_if<0>(&v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { PTREAD_ASSERT(!ok()); return *std::get_if<1>(&v_); }
  Error&& error() && { PTREAD_ASSERT(!ok()); return std::move(*std::get_if<1>(&v_)); }
  ErrorCode code() const noexcept { return ok() ? ErrorCode::ok : std::get_if<1>(&v_)->code(); }

#if PTREAD_EXCEPTIONS
  T value_or_throw() && {
    if (!ok()) throw std::move(*std::get_if<1>(&v_));
    return std::move(*std::get_if<0>(&v_));
  }
#endif

 private:
  std::variant<T, Error> v_;
};

// Success or an Error; converts to true on success. (A success holds no Error object:
// returning one costs a flag. The default constructor is user-provided for that: with
// `= default`, `return {};` value-initializes, which zero-fills all of the optional Error's
// bytes first, a `rep stos` of 88 bytes on every successful return.)
class [[nodiscard]] Status {
 public:
  Status() noexcept {}  // NOLINT(modernize-use-equals-default): see above
  Status(Error error) : error_(std::move(error)) {}  // NOLINT(implicit)

  bool ok() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const& {
    PTREAD_ASSERT(!ok());
    if (ok()) return none();
    return *error_;
  }
  Error&& error() && {
    PTREAD_ASSERT(!ok());
    if (ok()) error_.emplace();
    return std::move(*error_);
  }
  ErrorCode code() const noexcept { return ok() ? ErrorCode::ok : error_->code(); }

#if PTREAD_EXCEPTIONS
  void throw_if_error() && {
    if (!ok()) throw std::move(*error_);
  }
#endif

 private:
  static const Error& none() {
    static const Error e;
    return e;
  }
  std::optional<Error> error_;
};

}  // namespace ptread

// Internal propagation helpers (used in ptread's own headers).
#define PTREAD_CONCAT_INNER(a, b) a##b
#define PTREAD_CONCAT(a, b) PTREAD_CONCAT_INNER(a, b)
#define PTREAD_TRY_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                    \
  if (!tmp) return std::move(tmp).error(); \
  lhs = std::move(*tmp)
// PTREAD_TRY(auto x, f()) declares x from a Result, or returns its Error.
#define PTREAD_TRY(lhs, expr) PTREAD_TRY_IMPL(PTREAD_CONCAT(ptread_try_, __LINE__), lhs, expr)
// PTREAD_CHECK(status) returns the Error of a failed Status or Result.
#define PTREAD_CHECK(expr)                                                 \
  do {                                                                     \
    auto ptread_check_tmp = (expr);                                        \
    if (!ptread_check_tmp) return std::move(ptread_check_tmp).error();     \
  } while (0)
