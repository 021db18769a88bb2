// ptread — nested archives: the bytes torch.storage._load_from_bytes(b) reads
// (torch/globals/load_from_bytes.hpp) read as torch.load reads a file: zip, legacy or tar,
// detected by content; anything else (a bare pickle, safetensors) is refused, as torch.load
// refuses it. Each is a model of its own, read in memory mode over b (its storages views of
// b where aligned: b is the mapped file itself when the graph borrowed it, else a copy made
// here), at most Limits::max_archive_nesting deep.
#pragma once

#include "detect.hpp"
#include "legacy.hpp"
#include "tar.hpp"
#include "zip_checkpoint.hpp"

#include <cstring>
#include <memory>
#include <string>

namespace ptread {
namespace detail {

inline Result<std::shared_ptr<Model>> read_nested_archive(std::string_view b, std::shared_ptr<const void> keep,
                                                          const ReadOptions& outer) {
  if (outer.nesting + 1 > outer.limits.max_archive_nesting) {
    return make_error(ErrorCode::limit_exceeded, "archives nested over " + std::to_string(outer.limits.max_archive_nesting) +
                                                     " deep (torch.storage._load_from_bytes; Limits::max_archive_nesting)");
  }
  const auto* data = reinterpret_cast<const uint8_t*>(b.data());
  if (!keep) {  // (bytes the graph holds: the archive's storages get a buffer of their own)
    PTREAD_TRY(auto buf, allocate_aligned(b.size()));
    if (!b.empty()) std::memcpy(buf.get(), b.data(), b.size());
    data = buf.get();
    keep = std::shared_ptr<const void>(std::move(buf));
  }
  auto src = std::make_shared<MemorySource>(data, b.size(), "<nested archive>", std::move(keep));
  ReadOptions ro;
  ro.mode = LoadMode::memory;
  ro.limits = outer.limits;
  ro.nested_reader = outer.nested_reader;
  ro.nesting = outer.nesting + 1;
  auto detected = detect_format(data, std::min<size_t>(b.size(), 512), b.size());
  if (!detected) return std::move(detected).error();
  switch (*detected) {
    case Detected::legacy: return read_legacy_checkpoint(src, ro);
    case Detected::zip: return read_zip_checkpoint(src, ro);
    case Detected::tar: return read_tar_checkpoint(src, ro);
    default: break;
  }
  return make_error(ErrorCode::unknown_format, "a nested archive that is no torch.save file (zip, legacy or tar)");
}

}  // namespace detail
}  // namespace ptread
