// ptread — bounds on what a file may make the reader do.
//
// No allocation is sized from a number in the file before it is checked against what the
// file can hold and against these limits. Defaults fit every real checkpoint seen; raise
// them for unusual files, lower them for untrusted input on small machines.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptread {

struct Limits {
  // Pickle VM
  size_t max_memo_entries = size_t{1} << 24;      // distinct memo keys
  size_t max_stack_depth = size_t{1} << 24;       // values on the VM stack at once
  size_t max_container_items = size_t{1} << 26;   // items in one list, tuple, set, or dict (its pairs)
  size_t max_nesting_depth = 4096;                // containers inside containers (walks)
  size_t max_pickle_bytes = size_t{1} << 32;      // size of data.pkl (4 GiB)
  // Archives inside archives (torch.storage._load_from_bytes, as pickle.dump writes a
  // storage): how deep they may nest
  size_t max_archive_nesting = 4;
  // Tensors
  size_t max_rank = 64;                           // dimensions of one tensor
  size_t max_tensors = size_t{1} << 24;           // named entries listed (tied names count)
  // Bytes of all the names the naming walk makes (tensors, unsupported entries, modules),
  // and never more than 64 MiB + 256x the file's size.
  uint64_t max_name_bytes = uint64_t{1} << 32;
  // Zip
  size_t max_zip_entries = size_t{1} << 24;
  uint64_t max_inflated_bytes = uint64_t{1} << 36;  // one deflated record, decompressed (64 GiB)
  // Decompressed / compressed size. Deflate cannot exceed about 1032:1, so a record that
  // claims more is lying about its size; checked before the output buffer is allocated.
  uint64_t max_inflate_ratio = 1100;
};

namespace detail {

// Overflow-checked arithmetic on sizes read from files.
inline bool mul_overflow(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
inline bool add_overflow(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
// True when [offset, offset + length) lies inside [0, size).
inline bool range_inside(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace detail
}  // namespace ptread
