// ptread — the zip container of torch.save (PyTorch >= 1.6, `_use_new_zipfile_serialization`).
//
// Layout written by caffe2/serialize/inline_container.cc (PyTorchStreamWriter):
//   local header  "PK\3\4" ver(2) flags(2)=0x0808 method(2)=0 time(2) date(2) crc(4)
//                 csize(4)=0 usize(4)=0 name_len(2) extra_len(2) name extra
//                 The extra field pads the data to 64 bytes: id 'FB', len, 'Z'... .
//                 Sizes are zero here (flag bit 3): they follow the data in a descriptor
//                 "PK\7\8" crc(4) csize(4|8) usize(4|8). Never trust local sizes.
//   data          stored (method 0), 64-byte aligned: mapped without copying.
//   central dir   "PK\1\2" ... csize(4)@20 usize(4)@24 name_len(2)@28 extra_len(2)@30
//                 comment_len(2)@32 ... local_header_offset(4)@42, name, extra, comment.
//                 A field of 0xFFFFFFFF is in the ZIP64 extra (id 0x0001): usize, csize,
//                 offset, in that order, each present only when its field overflowed.
//   ZIP64 EOCD    "PK\6\6" (always written since 1.6, even for tiny files), its locator
//                 "PK\6\7", then the classic EOCD "PK\5\6".
// Records sit under one folder (the file's base name at save time, "archive" for buffers;
// files get renamed, so the folder is found as the one holding data.pkl). Deflated
// records (method 8, from re-zipping tools) are read through zlib when PTREAD_WITH_ZLIB=1.
#pragma once

#include "memory/arena.hpp"
#include "memory/flat_map.hpp"
#include "text/text.hpp"
#include "io.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#if PTREAD_WITH_ZLIB
#include <zlib.h>
#endif

namespace ptread {
namespace detail {

inline uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t le64(const uint8_t* p) {
  return static_cast<uint64_t>(le32(p)) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

struct ZipEntry {
  std::string_view name;  // in the central directory, which the archive keeps
  uint64_t local_header_offset = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint16_t method = 0;
  uint16_t flags = 0;
};

class ZipArchive {
 public:
  ZipArchive(ZipArchive&&) noexcept = default;
  ZipArchive& operator=(ZipArchive&&) noexcept = default;
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;
  static Result<ZipArchive> open(std::shared_ptr<const Source> src, const Limits& limits) {
    return open(std::move(src), limits, [](const ZipArchive&, const ZipEntry&) { return true; }, true);
  }
  // As open(), handing each record, in directory order, to keep(archive, entry) first:
  // entries() holds only those it returns true for (the archive passed is the one being
  // read: its record_count(), try_data_offset() and the index the entry would get,
  // entries().size(), are good to use). For readers that take most records out as they
  // come, without a ZipEntry each (a checkpoint's numbered storages).
  template <class Keep>
  static Result<ZipArchive> open(std::shared_ptr<const Source> src, const Limits& limits, Keep&& keep,
                                 bool keeps_most = false) {
    PTREAD_TRY(ZipArchive z, locate(std::move(src), limits));
    PTREAD_CHECK(z.walk(keep, keeps_most));
    return Result<ZipArchive>(std::move(z));
  }

  // open() in two steps, for a reader that starts on the first record while the directory
  // is walked: locate() reads the end records and takes the central directory (entries()
  // is empty, record_count() known); walk() then reads the entries, once, as open() does.
  static Result<ZipArchive> locate(std::shared_ptr<const Source> src, const Limits& limits) {
    ZipArchive z;
    z.src_ = std::move(src);
    z.limits_ = limits;
    PTREAD_CHECK(z.read_end_records());
    return Result<ZipArchive>(std::move(z));
  }
  // The entry keep() is given names its record with bytes that last for the call only (they
  // may be in a read buffer: see FileWindow); an entry kept names it in the directory.
  template <class Keep>
  Status walk(Keep&& keep, bool keeps_most = false) {
    reserve_huge(entries_, static_cast<size_t>(keeps_most ? count_ : std::min<uint64_t>(count_, 64)));
    size_t pos = 0;
    // A large mapped directory is read through the file a window at a time (FileWindow).
    const bool mapped = src_->base() != nullptr && cd_.data == src_->base() + directory_offset_;
    std::optional<FileWindow> window;
    if (mapped && cd_.size >= kWindowedDirectory) window.emplace(*src_);
    for (uint64_t i = 0; i < count_; ++i) {
      const size_t at = pos;
      const uint8_t* h = cd_.data + at;
      if (window && cd_.size - at >= 46) {
        h = window->at(directory_offset_ + at, 46);
        const size_t len = 46 + size_t{le16(h + 28)} + le16(h + 30) + le16(h + 32);
        if (len <= cd_.size - at) h = window->at(directory_offset_ + at, len);
      }
      ZipEntry z;
      PTREAD_CHECK(parse_entry(i, &pos, &z, h));
      if (keep(*this, static_cast<const ZipEntry&>(z))) {
        z.name = std::string_view(reinterpret_cast<const char*>(cd_.data + at + 46), z.name.size());
        entries_.push_back(z);
      }
    }
    return {};
  }
  // Directories of this many bytes or more are walked through a FileWindow.
  static constexpr size_t kWindowedDirectory = size_t{64} << 10;
  // The directory's first record, parsed as walk() parses it (after locate(), from any
  // thread while walk() runs); false when there is none or walk() would stop at it.
  bool first_entry(ZipEntry* out) const {
    size_t pos = 0;
    return count_ != 0 && static_cast<bool>(parse_entry(0, &pos, out, cd_.data));
  }

  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  // Every record of the directory, kept in entries() or not.
  uint64_t record_count() const noexcept { return count_; }
  const Source& source() const noexcept { return *src_; }

  // The first record named `name`, or nullptr. The name index is built on the first call
  // (torch checkpoints find their storages by number, without it): like the rest of a
  // ZipArchive, find() is for one thread at a time.
  const ZipEntry* find(std::string_view name) const {
    if (!indexed_) {
      index_.insert_all(static_cast<uint32_t>(entries_.size()), [this](uint32_t i) { return entries_[i].name; });
      indexed_ = true;
    }
    const uint32_t k = index_.find(name, [this](uint32_t i) { return entries_[i].name; });
    if (PTREAD_LIKELY(k != StringIndex::npos)) return &entries_[k];
    // As torch finds records (miniz compares names without case): the first whose name
    // differs only in the case of ASCII letters. Only a miss pays for this walk.
    for (const ZipEntry& e : entries_) {
      if (iequals(e.name, name)) return &e;
    }
    return nullptr;
  }

  // The record's data offset when its local header is as expected (what data_offset()
  // returns without error), for a source held in memory; false otherwise.
  bool try_data_offset(const ZipEntry& e, uint64_t* out) const { return try_data_offset(e, out, nullptr); }
  // The same, reading the 30 bytes of the local header through `window` when given.
  bool try_data_offset(const ZipEntry& e, uint64_t* out, FileWindow* window) const {
    const uint8_t* base = src_->base();
    if (base == nullptr || (e.flags & kUnreadableFlags) != 0) return false;
    uint64_t off = 0;
    if (PTREAD_LIKELY(range_inside(e.local_header_offset, 30, src_->size())) &&
        PTREAD_LIKELY(local_data_offset(e, window != nullptr ? window->at(e.local_header_offset, 30)
                                                             : base + e.local_header_offset,
                                        &off) == LocalHeader::ok)) {
      *out = off;
      return true;
    }
    if (!empty(e)) return false;
    *out = e.local_header_offset;  // as data_offset()
    return true;
  }

  // Offset of the record's first data byte, from its local header.
  Result<uint64_t> data_offset(const ZipEntry& e) const {
    if (PTREAD_UNLIKELY((e.flags & kUnreadableFlags) != 0)) {
      return make_error(ErrorCode::zip_unsupported_feature,
                        "zip: record '" + std::string(e.name) + "' is " +
                            ((e.flags & 0x20) != 0 ? "patch data (flag bit 5)" : "encrypted (flag bits 0, 6)") +
                            "; neither torch nor ptread reads it");
    }
    uint8_t h[30];
    Status header = read_checked(e.local_header_offset, h, sizeof h, e.name);
    uint64_t off = 0;
    const LocalHeader got = header ? local_data_offset(e, h, &off) : LocalHeader::no_signature;
    if (got == LocalHeader::ok) return off;
    // An empty record needs no local header (miniz never reads it): where the header is
    // not as expected, its offset is the header's own, which lies before the directory.
    if (empty(e)) return e.local_header_offset;
    PTREAD_CHECK(std::move(header));
    if (got == LocalHeader::no_signature) {
      return make_error(ErrorCode::zip_corrupt, "zip: no local header signature at byte " +
                                                    std::to_string(e.local_header_offset) +
                                                    " for record '" + std::string(e.name) + "'");
    }
    return make_error(ErrorCode::zip_record_out_of_bounds,
                      "zip: record '" + std::string(e.name) + "' (" + std::to_string(e.compressed_size) +
                          " bytes at byte " + std::to_string(off) +
                          ") runs past the start of the central directory at byte " +
                          std::to_string(directory_offset_));
  }

  // The bytes read() gives for e: none for an empty record (whatever buffer torch makes of
  // its uncompressed size, miniz leaves it unwritten), else the uncompressed size.
  static uint64_t data_size(const ZipEntry& e) noexcept { return empty(e) ? 0 : e.uncompressed_size; }

  // The record's bytes: a view (stored, mapped), a buffer (stored, read mode), or inflated.
  Result<Bytes> read(const ZipEntry& e) const {
    PTREAD_TRY(uint64_t off, data_offset(e));
    if (e.method == 0) {
      if (!empty(e)) PTREAD_CHECK(check_stored(e));
      return src_->bytes(off, e.compressed_size);
    }
    if (e.method == 8) {
      // Nothing to inflate: an empty record is empty whatever its deflate stream holds
      // (torch, through miniz, never checks a stream it inflates into no bytes).
      if (e.uncompressed_size == 0 || empty(e)) return src_->bytes(off, 0);
      return inflate(e, off);
    }
    return make_error(ErrorCode::zip_unsupported_compression,
                      "zip: record '" + std::string(e.name) + "' uses compression method " +
                          std::to_string(e.method) + "; only stored (0) and deflate (8) occur");
  }

  // Where a stored record's bytes lie in the source, checked as read() checks them: for
  // callers that read them later, into memory of their own.
  Result<uint64_t> stored_offset(const ZipEntry& e) const {
    if (e.method != 0) {
      return make_error(ErrorCode::invalid_argument, "zip: record '" + std::string(e.name) + "' is not stored");
    }
    PTREAD_TRY(uint64_t off, data_offset(e));
    if (!empty(e)) PTREAD_CHECK(check_stored(e));
    return off;
  }

  // A stored record's bytes in place, for a source held in memory (mapped, or the
  // caller's): as read() gives them, without a Bytes. nullptr when the record is deflated
  // or the source is read piecewise: use read().
  Result<const uint8_t*> view(const ZipEntry& e) const {
    if (e.method != 0 || src_->base() == nullptr) return static_cast<const uint8_t*>(nullptr);
    PTREAD_TRY(uint64_t off, data_offset(e));  // inside the file: before the directory
    if (!empty(e)) PTREAD_CHECK(check_stored(e));
    return src_->base() + off;
  }

 private:
  // A record of no compressed bytes: miniz reads nothing of it, not even its local header,
  // whatever its uncompressed size says (0xFFFFFFFF with no ZIP64 field passes its checks).
  static bool empty(const ZipEntry& e) noexcept { return e.compressed_size == 0; }
  // The data offset the 30 bytes h of e's local header give (its name and extra field
  // follow the header), checked to end before the directory.
  enum class LocalHeader { ok, no_signature, past_directory };
  PTREAD_ALWAYS_INLINE LocalHeader local_data_offset(const ZipEntry& e, const uint8_t* h, uint64_t* off) const noexcept {
    *off = e.local_header_offset + 30 + le16(h + 26) + le16(h + 28);
    if (le32(h) != 0x04034b50u) return LocalHeader::no_signature;
    return range_inside(*off, e.compressed_size, directory_offset_) ? LocalHeader::ok : LocalHeader::past_directory;
  }
  // General-purpose flag bits of records no reader decodes: encrypted (0), patch data (5),
  // strong encryption (6). miniz refuses to read them.
  static constexpr uint16_t kUnreadableFlags = 0x0061;
  ZipArchive() = default;
  Status check_stored(const ZipEntry& e) const {
    if (e.compressed_size != e.uncompressed_size) {
      return make_error(ErrorCode::zip_corrupt,
                        "zip: stored record '" + std::string(e.name) + "' has compressed size " +
                            std::to_string(e.compressed_size) + " but uncompressed size " +
                            std::to_string(e.uncompressed_size));
    }
    return {};
  }
  Status read_checked(uint64_t off, void* dst, size_t n, std::string_view what) const {
    if (!range_inside(off, n, src_->size())) {
      return make_error(ErrorCode::zip_record_out_of_bounds,
                        "zip: " + std::string(what) + " at byte " + std::to_string(off) +
                            " lies past the end of the file (" + std::to_string(src_->size()) +
                            " bytes)");
    }
    return src_->read_at(off, dst, n);
  }

  // The classic and ZIP64 end records: where the directory lies and how many entries it has.
  Status read_end_records() {
    const uint64_t size = src_->size();
    // The classic EOCD is 22 bytes plus a comment of up to 65535 bytes at the very end.
    const uint64_t tail_len = size < 22 + 65535 ? size : 22 + 65535;
    std::vector<uint8_t> tail(static_cast<size_t>(tail_len));
    PTREAD_CHECK(src_->read_at(size - tail_len, tail.data(), tail.size()));
    size_t eocd = SIZE_MAX;
    for (size_t i = tail.size() >= 22 ? tail.size() - 22 + 1 : 0; i-- > 0;) {
      if (le32(&tail[i]) == 0x06054b50u) {
        eocd = i;
        break;
      }
    }
    if (eocd == SIZE_MAX) {
      return make_error(ErrorCode::truncated,
                        "zip: no end-of-central-directory record: the file starts like a zip "
                        "archive but its end is missing (a truncated download?)");
    }
    const uint64_t eocd_pos = size - tail_len + eocd;
    const uint8_t* e = &tail[eocd];
    uint64_t this_disk = le16(e + 4), cd_disk = le16(e + 6);
    uint64_t count_here = le16(e + 8), count = le16(e + 10);
    uint64_t cd_size = le32(e + 12);
    uint64_t cd_offset = le32(e + 16);
    // ZIP64: the locator sits just before the classic EOCD. As miniz (torch's reader)
    // reads it: a locator pointing past the file is an error; one pointing at bytes that
    // are no ZIP64 end record is ignored, and the classic record's values stand.
    if (eocd_pos >= 20) {
      uint8_t loc[20];
      PTREAD_CHECK(src_->read_at(eocd_pos - 20, loc, sizeof loc));
      if (le32(loc) == 0x07064b50u) {
        const uint64_t z64 = le64(loc + 8);
        uint8_t r[56];
        if (!range_inside(z64, sizeof r, size)) {
          return make_error(ErrorCode::zip_corrupt,
                            "zip: ZIP64 locator points at byte " + std::to_string(z64) +
                                ", past the end of the file (" + std::to_string(size) + " bytes)");
        }
        PTREAD_CHECK(src_->read_at(z64, r, sizeof r));
        if (le32(r) == 0x06064b50u) {
          if (!range_inside(z64, sizeof r, eocd_pos - 20)) {
            return make_error(ErrorCode::zip_corrupt, "zip: the ZIP64 end-of-central-directory record at byte " +
                                                          std::to_string(z64) + " runs into its locator");
          }
          if (le64(r + 4) < 44) {
            return make_error(ErrorCode::zip_corrupt, "zip: the ZIP64 end-of-central-directory record declares " +
                                                          std::to_string(le64(r + 4)) + " bytes, under its 44");
          }
          if (le32(loc + 16) != 1) {
            return make_error(ErrorCode::zip_unsupported_feature,
                              "zip: the archive spans " + std::to_string(le32(loc + 16)) +
                                  " disks (ZIP64 locator); only single-file archives are read");
          }
          this_disk = le32(r + 16);
          cd_disk = le32(r + 20);
          count_here = le64(r + 24);
          count = le64(r + 32);
          cd_size = le64(r + 40);
          cd_offset = le64(r + 48);
        }
      }
    }
    // Disk numbers as miniz accepts them: all 0, or all 1 (some writers count from 1).
    if (count_here != count || ((this_disk | cd_disk) != 0 && (this_disk != 1 || cd_disk != 1))) {
      return make_error(ErrorCode::zip_unsupported_feature,
                        "zip: the end record places the directory on disk " + std::to_string(cd_disk) + " of disk " +
                            std::to_string(this_disk) + ", with " + std::to_string(count_here) + " of its " +
                            std::to_string(count) + " entries here: an archive split across disks");
    }
    this_disk_ = static_cast<uint32_t>(this_disk);
    // Bounded by the file, as miniz bounds it: a directory size that reaches into the end
    // records reads nothing more (entries are parsed by count, each inside the directory).
    if (!range_inside(cd_offset, cd_size, size)) {
      return make_error(ErrorCode::zip_corrupt,
                        "zip: central directory [" + std::to_string(cd_offset) + ", +" + std::to_string(cd_size) +
                            ") runs past the end of the file (" + std::to_string(size) + " bytes)");
    }
    if (count > cd_size / 46) {
      return make_error(ErrorCode::zip_corrupt, "zip: " + std::to_string(count) + " entries cannot fit in a " +
                                                    std::to_string(cd_size) + "-byte central directory");
    }
    if (count > limits_.max_zip_entries) {
      return make_error(ErrorCode::limit_exceeded, "zip: " + std::to_string(count) + " entries (Limits::max_zip_entries)");
    }
    directory_offset_ = cd_offset;
    count_ = count;
    PTREAD_TRY(cd_, src_->bytes(cd_offset, cd_size));
    return {};
  }

  // Entry i of the directory at *pos (parsed up to there); *pos moves past it. h: the
  // entry's bytes (cd_.data + *pos, or a copy of as many as it spans or the directory
  // holds after *pos, whichever is fewer); the entry's name points there.
  Status parse_entry(uint64_t i, size_t* pos, ZipEntry* out, const uint8_t* h) const {
    const Bytes& cd = cd_;
    const size_t at = *pos;
    if (cd.size - at < 46 || le32(h) != 0x02014b50u) {
      return make_error(ErrorCode::zip_corrupt,
                        "zip: central directory entry " + std::to_string(i) + " at byte " +
                            std::to_string(directory_offset_ + at) + " is malformed");
    }
    const size_t name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
    if (cd.size - at - 46 < name_len + extra_len + comment_len) {
      return make_error(ErrorCode::zip_corrupt,
                        "zip: central directory entry " + std::to_string(i) + " runs past the directory");
    }
    ZipEntry z;
    z.flags = le16(h + 8);
    z.method = le16(h + 10);
    z.compressed_size = le32(h + 20);
    z.uncompressed_size = le32(h + 24);
    z.local_header_offset = le32(h + 42);
    z.name = std::string_view(reinterpret_cast<const char*>(h + 46), name_len);
    // As miniz checks every entry when it opens an archive: a disk number other than this
    // disk's or 1, and local headers masked by central-directory encryption (bit 13).
    const uint16_t disk = le16(h + 34);
    if (PTREAD_UNLIKELY(disk > 1 || disk < this_disk_ || (z.flags & 0x2000) != 0)) {  // (this_disk_ is 0 or 1)
      return make_error(ErrorCode::zip_unsupported_feature,
                        "zip: record '" + std::string(z.name) + "' " +
                            ((z.flags & 0x2000) != 0 ? std::string("has masked local headers (an encrypted directory)")
                                                     : "starts on disk " + std::to_string(disk) +
                                                           ": an archive split across disks"));
    }
    if (z.uncompressed_size == 0xffffffffu || z.compressed_size == 0xffffffffu || z.local_header_offset == 0xffffffffu) {
      PTREAD_CHECK(apply_zip64_extra(h + 46 + name_len, extra_len, &z));
    }
    // And as miniz checks every entry at open (torch then refuses the whole archive, used
    // record or not), on the directory's 32-bit fields when the compressed size is not
    // ZIP64's 0xFFFFFFFF: a stored record whose sizes differ, bytes without a compressed
    // size (both when the uncompressed size is not 0xFFFFFFFF either), and data past the
    // file's end (the 32-bit offset: 0xFFFFFFFF with the offset in a ZIP64 field fails it
    // in a file under 4 GiB).
    const uint32_t csize32 = le32(h + 20), usize32 = le32(h + 24), local32 = le32(h + 42);
    if (PTREAD_UNLIKELY(csize32 != 0xffffffffu && (csize32 == 0 || csize32 != usize32 ||
                                                   uint64_t{local32} + 30 + csize32 > src_->size()))) {
      PTREAD_CHECK(check_entry_sizes(z, le32(h + 10), csize32, usize32, local32));
    }
    if (z.local_header_offset >= directory_offset_) {
      return make_error(ErrorCode::zip_record_out_of_bounds,
                        "zip: record '" + std::string(z.name) + "' has its header at byte " +
                            std::to_string(z.local_header_offset) + ", inside or after the central directory");
    }
    *out = z;
    *pos = at + 46 + name_len + extra_len + comment_len;
    return {};
  }

  // parse_entry's rare case: a compressed size (not 0xFFFFFFFF) of 0, or other than the
  // uncompressed size, or data past the file. method_time: the method and the time after
  // it, read as one.
  PTREAD_NOINLINE Status check_entry_sizes(const ZipEntry& z, uint32_t method_time, uint32_t csize, uint32_t usize,
                                           uint32_t local) const {
    if (usize != 0xffffffffu && ((method_time == 0 && usize != csize) || (usize != 0 && csize == 0))) {
      return make_error(ErrorCode::zip_corrupt,
                        "zip: " + std::string(method_time == 0 ? "stored " : "") + "record '" + std::string(z.name) +
                            "' has compressed size " + std::to_string(csize) + " but uncompressed size " +
                            std::to_string(usize) + " in the central directory");
    }
    if (uint64_t{local} + 30 + csize > src_->size()) {
      return make_error(ErrorCode::zip_record_out_of_bounds,
                        "zip: record '" + std::string(z.name) + "' " +
                            (local == 0xffffffffu ? "has the header offset 0xFFFFFFFF (a ZIP64 placeholder) in a file of " +
                                                        std::to_string(src_->size()) + " bytes"
                                                  : "(" + std::to_string(csize) + " bytes after a header at byte " +
                                                        std::to_string(local) + ") runs past the end of the file (" +
                                                        std::to_string(src_->size()) + " bytes)"));
    }
    return {};
  }

  // A 0xFFFFFFFF size or offset is ZIP64's placeholder when the entry has a ZIP64 extra
  // field, which must then hold it. Without one it is taken as it is, as miniz (torch.load)
  // takes it: an empty record whose uncompressed size says 0xFFFFFFFF still reads (torch
  // never reads an empty storage's record), a used one is refused where its size is checked.
  // Extra fields that run past their room are corrupt.
  static Status apply_zip64_extra(const uint8_t* p, size_t n, ZipEntry* z) {
    const bool need_u = z->uncompressed_size == 0xffffffffu;
    const bool need_c = z->compressed_size == 0xffffffffu;
    const bool need_o = z->local_header_offset == 0xffffffffu;
    if (!need_u && !need_c && !need_o) return {};
    while (n != 0) {
      if (n < 4) break;
      const uint16_t id = le16(p), len = le16(p + 2);
      if (len > n - 4) break;
      if (id == 0x0001) {
        const uint8_t* q = p + 4;
        size_t left = len;
        auto take = [&](uint64_t* field) {
          if (left < 8) return false;
          *field = le64(q);
          q += 8;
          left -= 8;
          return true;
        };
        if ((need_u && !take(&z->uncompressed_size)) || (need_c && !take(&z->compressed_size)) ||
            (need_o && !take(&z->local_header_offset))) {
          break;
        }
        return {};
      }
      p += 4 + len;
      n -= 4 + size_t{len};
    }
    if (n == 0) return {};  // no ZIP64 field: the 32-bit values stand
    return make_error(ErrorCode::zip_corrupt,
                      "zip: record '" + std::string(z->name) +
                          "' has a ZIP64 field too short for its sizes or offset, or extra fields past their room");
  }

  Result<Bytes> inflate(const ZipEntry& e, uint64_t off) const {
#if PTREAD_WITH_ZLIB
    const uint64_t out_size = e.uncompressed_size;
    if (out_size > limits_.max_inflated_bytes ||
        (out_size > (uint64_t{1} << 20) &&
         (e.compressed_size == 0 || out_size / e.compressed_size > limits_.max_inflate_ratio))) {
      return make_error(ErrorCode::limit_exceeded,
                        "zip: deflated record '" + std::string(e.name) + "' claims " +
                            std::to_string(out_size) + " bytes from " +
                            std::to_string(e.compressed_size) +
                            " (Limits::max_inflated_bytes / max_inflate_ratio)");
    }
    // All records together: entries may share one deflated record (torch reads such files),
    // so a small file could otherwise inflate without bound.
    uint64_t budget = 0, total = 0;
    if (mul_overflow(std::max<uint64_t>(src_->size(), uint64_t{1} << 16), limits_.max_inflate_ratio, &budget)) budget = UINT64_MAX;
    if (add_overflow(inflated_total_, out_size, &total) || total > budget) {
      return make_error(ErrorCode::limit_exceeded,
                        "zip: inflating '" + std::string(e.name) + "' would bring the archive's inflated records to " +
                            std::to_string(total) + " bytes, over max_inflate_ratio times the file's size");
    }
    inflated_total_ = total;
    PTREAD_TRY(Bytes in, src_->bytes(off, e.compressed_size));
    PTREAD_TRY(auto buf, allocate_aligned(static_cast<size_t>(out_size)));
    z_stream zs;
    std::memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
      return make_error(ErrorCode::zip_inflate_failed, "zip: zlib inflateInit2 failed");
    }
    uint64_t in_left = in.size, out_left = out_size;
    const uint8_t* in_p = in.data;
    uint8_t* out_p = buf.get();
    int rc = Z_OK;
    while (rc == Z_OK) {
      const uInt in_chunk = static_cast<uInt>(in_left < (1u << 30) ? in_left : (1u << 30));
      const uInt out_chunk = static_cast<uInt>(out_left < (1u << 30) ? out_left : (1u << 30));
      zs.next_in = const_cast<Bytef*>(in_p);
      zs.avail_in = in_chunk;
      zs.next_out = out_p;
      zs.avail_out = out_chunk;
      rc = ::inflate(&zs, Z_NO_FLUSH);
      const uInt used_in = in_chunk - zs.avail_in, made = out_chunk - zs.avail_out;
      in_p += used_in;
      in_left -= used_in;
      out_p += made;
      out_left -= made;
      if (rc == Z_OK && used_in == 0 && made == 0) rc = Z_BUF_ERROR;  // no progress
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || out_left != 0) {
      return make_error(ErrorCode::zip_inflate_failed,
                        "zip: cannot inflate record '" + std::string(e.name) + "': " +
                            (rc == Z_STREAM_END ? std::string("size differs from the directory")
                                                : "zlib error " + std::to_string(rc)));
    }
    const uint8_t* p = buf.get();
    return Bytes{p, static_cast<size_t>(out_size), std::move(buf)};
#else
    (void)off;
    return make_error(ErrorCode::zip_unsupported_compression,
                      "zip: record '" + std::string(e.name) +
                          "' is deflated; build with PTREAD_WITH_ZLIB=1 (CMake option "
                          "PTREAD_WITH_ZLIB, link zlib) to read it");
#endif
  }

  std::shared_ptr<const Source> src_;
  Limits limits_;
#if PTREAD_WITH_ZLIB  // (unused otherwise: clang's -Wunused-private-field)
  mutable uint64_t inflated_total_ = 0;  // bytes inflated so far, all records
#endif
  Bytes cd_;  // the central directory: entry names view into it
  std::vector<ZipEntry> entries_;
  mutable StringIndex index_;  // built by the first find()
  mutable bool indexed_ = false;
  uint64_t directory_offset_ = 0;
  uint64_t count_ = 0;  // records in the directory
  uint32_t this_disk_ = 0;  // the end record's disk number (0, or 1 from some writers)
};

}  // namespace detail
}  // namespace ptread
