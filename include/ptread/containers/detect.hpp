// ptread — what kind of file this is, from its first bytes.
//
//   "PK\3\4"                     zip (torch.save >= 1.6, TorchScript)
//   0x80 0x02 0x8a 0x0a 6c fc 9c 46 f9 20 6a a8 50 19   legacy: pickled magic 0x1950a86a20f9469cfc6c
//   "ustar" at byte 257          tar (torch 0.1.x)
//   "PTMF" at byte 4             TorchScript mobile flatbuffer (.ptl)
//   "PYTORCH1"                   the 1.0 preview archive format
//   8-byte length, then '{'      safetensors (whitespace may come first) (containers/safetensors.hpp)
// and the things people mistake for checkpoints: Git LFS pointers, HTML pages, gzip data,
// empty files.
#pragma once

#include "../error.hpp"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

namespace ptread {
namespace detail {

enum class Detected { zip, legacy, tar, safetensors, shard_index, pickle };

inline std::string hex_prefix(const uint8_t* p, size_t n) {
  std::string s;
  char b[4];
  for (size_t k = 0; k < n && k < 16; ++k) {
    std::snprintf(b, sizeof b, "%02x", p[k]);
    if (k) s.push_back(' ');
    s += b;
  }
  return s;
}

// `head` holds the first min(size, 512) bytes of a file of `size` bytes.
inline Result<Detected> detect_format(const uint8_t* head, size_t n, uint64_t size) {
  if (size == 0) return make_error(ErrorCode::empty_file, "the file is empty (0 bytes)");
  auto starts = [&](const char* s) {
    const size_t l = std::strlen(s);
    return n >= l && std::memcmp(head, s, l) == 0;
  };
  if (starts("PK\x03\x04") || starts("PK\x05\x06")) return Detected::zip;
  // safetensors: a header length, then the header's JSON object; before the pickles, as a
  // length of 128 to 1535 starts like one (0x80, then a byte up to 5), and a legacy file's
  // ninth byte is in its magic number. Its reader checks the length: one past the file is
  // its error to name.
  auto json_object_at = [&](size_t j) {  // (serde_json and Python's json take whitespace first)
    while (j < n && (head[j] == ' ' || head[j] == '\t' || head[j] == '\n' || head[j] == '\r')) ++j;
    return j < n && head[j] == '{';
  };
  if (n >= 9 && json_object_at(8)) {
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; --k) hlen = (hlen << 8) | head[k];
    // (text that is JSON from byte 0 reads as a length far past the file)
    if (head[0] != '{' || hlen <= size - 8) return Detected::safetensors;
  }
  // A JSON object: the index of a sharded set (containers/sharded.hpp).
  if (json_object_at(0)) return Detected::shard_index;
  if (n >= 2 && head[0] == 0x80 && head[1] <= 5) {
    // A pickle: the legacy format starts with the pickled magic number.
    static const uint8_t magic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    for (size_t k = 2; k + sizeof magic <= n && k < 24; ++k) {
      if (std::memcmp(head + k, magic, sizeof magic) == 0) return Detected::legacy;
    }
    // Without it: a bare pickle (pickle.dump), protocols 2 to 5 (PROTO came with 2).
    if (head[1] >= 2) return Detected::pickle;
    return make_error(ErrorCode::unknown_format, "a pickle PROTO " + std::to_string(head[1]) +
                                                     " opcode, which no pickler writes: not a checkpoint");
  }
  if (starts("L119547037146038801333356")) return Detected::legacy;  // protocol 0/1 magic
  if (n >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) return Detected::tar;
  if (starts("version https://git-lfs")) {
    return make_error(ErrorCode::git_lfs_pointer,
                      "a Git LFS pointer, not the checkpoint: fetch the real file with `git lfs pull`");
  }
  if (starts("PYTORCH1")) {
    return make_error(ErrorCode::unsupported_format,
                      "the archive format of the PyTorch 1.0 preview release, which torch no longer reads");
  }
  if (n >= 8 && std::memcmp(head + 4, "PTMF", 4) == 0) {
    return make_error(ErrorCode::unsupported_format,
                      "a TorchScript mobile flatbuffer (.ptl): not a torch.save checkpoint");
  }
  if (starts("\x1f\x8b")) {
    return make_error(ErrorCode::unknown_format, "gzip-compressed data: decompress it first");
  }
  size_t k = 0;
  if (n >= 3 && head[0] == 0xef && head[1] == 0xbb && head[2] == 0xbf) k = 3;  // UTF-8 BOM
  while (k < n && std::isspace(head[k])) ++k;
  if (k < n && head[k] == '<') {
    std::string lower;
    for (size_t j = k; j < n; ++j) lower.push_back(static_cast<char>(std::tolower(head[j])));
    if (lower.find("<!doctype html") != std::string::npos || lower.find("<html") != std::string::npos ||
        lower.find("<head") != std::string::npos || lower.find("<body") != std::string::npos) {
      return make_error(ErrorCode::html_page,
                        "an HTML page, not a checkpoint (a download link that returned a web page?)");
    }
  }
  if (size < 8) {
    return make_error(ErrorCode::unknown_format, "not a PyTorch checkpoint or safetensors file: the file is " +
                                                     std::to_string(size) + " bytes long, too short for one (" +
                                                     hex_prefix(head, n) + ")");
  }
  return make_error(ErrorCode::unknown_format,
                    "not a PyTorch checkpoint or safetensors file: the file starts with " + hex_prefix(head, n));
}

}  // namespace detail
}  // namespace ptread
