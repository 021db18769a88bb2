// ptread — writes the zip container of torch.save, streaming, as PyTorchStreamWriter
// (caffe2/serialize/inline_container.cc) lays it out:
//   local header  "PK\3\4" ver(2) flags(2)=0x0008 method(2)=0 time(2)=0 date(2)=1980-01-01
//                 crc(4)=0 csize(4) usize(4) name_len(2) extra_len(2) name extra
//                 Bit 3: the CRC follows the data (it is computed while the data streams
//                 out), so the local CRC and sizes are 0, or 0xFFFFFFFF with a ZIP64 extra
//                 (id 0x0001: usize, csize) for a record of 4 GiB or more. Then an extra
//                 field 'FB' of 'Z's pads the data to a multiple of 64 bytes, as torch
//                 does, so that readers can map each record without copying.
//   data          stored (method 0)
//   descriptor    "PK\7\8" crc(4) csize usize: 4 bytes each, 8 with the ZIP64 local extra
//   central dir   one "PK\1\2" entry per record; sizes or offset of 4 GiB and more go to
//                 its ZIP64 extra (usize, csize, offset: only those that overflowed)
//   ZIP64 EOCD    "PK\6\6" and its locator "PK\6\7" (torch writes them always), then the
//                 classic EOCD "PK\5\6" with 0xFFFF.. in the fields that overflowed.
// Bit 11 (UTF-8) is set for names with bytes above 0x7F. force_zip64 writes every ZIP64
// field even where nothing overflows (tests of readers: miniz and Python's zipfile accept it).
#pragma once

#include "crc32.hpp"
#include "write_file.hpp"

#include <string>
#include <vector>

namespace ptread {
namespace detail {

class ZipWriter {
 public:
  static constexpr uint64_t kAlignment = 64;

  explicit ZipWriter(OutputFile& out, bool force_zip64 = false) : out_(out), force_zip64_(force_zip64) {}

  // Starts a record of exactly `size` bytes.
  Status begin(const std::string& name, uint64_t size) {
    if (name.empty() || name.size() > 0xffff) {
      return make_error(ErrorCode::invalid_argument, "zip: a record name must have 1 to 65535 bytes");
    }
    Entry e;
    e.name = name;
    e.size = size;
    e.offset = out_.offset();
    e.zip64_local = force_zip64_ || size >= kMax32;
    for (char c : name) {
      if (static_cast<unsigned char>(c) >= 0x80) e.flags = static_cast<uint16_t>(e.flags | 0x0800u);
    }
    std::vector<uint8_t> h;
    h.reserve(30 + name.size() + 20 + 4 + kAlignment);
    put32(h, 0x04034b50u);
    put16(h, e.zip64_local ? 45 : 20);
    put16(h, e.flags);
    put16(h, 0);       // stored
    put16(h, 0);       // time
    put16(h, 0x0021);  // date: 1980-01-01
    put32(h, 0);       // crc: in the descriptor
    put32(h, e.zip64_local ? kMax32 : 0);
    put32(h, e.zip64_local ? kMax32 : 0);
    put16(h, name.size());
    const size_t zip64_len = e.zip64_local ? 20 : 0;
    const uint64_t unpadded = e.offset + 30 + name.size() + zip64_len + 4;
    const size_t pad = static_cast<size_t>((kAlignment - unpadded % kAlignment) % kAlignment);
    put16(h, zip64_len + 4 + pad);
    h.insert(h.end(), name.begin(), name.end());
    if (e.zip64_local) {
      put16(h, 0x0001);
      put16(h, 16);
      put64(h, size);
      put64(h, size);
    }
    h.push_back('F');
    h.push_back('B');
    put16(h, pad);
    h.insert(h.end(), pad, 'Z');
    PTREAD_CHECK(out_.write(h.data(), h.size()));
    entries_.push_back(std::move(e));
    open_ = true;
    written_ = 0;
    crc_ = 0;
    return {};
  }

  // Appends to the open record.
  Status data(const void* p, size_t n) {
    if (!open_) return make_error(ErrorCode::invalid_argument, "zip: data outside a record");
    if (n > entries_.back().size - written_) {
      return make_error(ErrorCode::invalid_argument, "zip: more data than the record '" + entries_.back().name +
                                                         "' was started with");
    }
    crc_ = Crc32::update(crc_, static_cast<const uint8_t*>(p), n);
    written_ += n;
    return out_.write(p, n);
  }

  // Ends the open record with its data descriptor.
  Status end() {
    if (!open_) return make_error(ErrorCode::invalid_argument, "zip: no record to end");
    Entry& e = entries_.back();
    if (written_ != e.size) {
      return make_error(ErrorCode::invalid_argument, "zip: record '" + e.name + "' got " + std::to_string(written_) +
                                                         " of its " + std::to_string(e.size) + " bytes");
    }
    open_ = false;
    e.crc = crc_;
    std::vector<uint8_t> d;
    put32(d, 0x08074b50u);
    put32(d, e.crc);
    if (e.zip64_local) {
      put64(d, e.size);
      put64(d, e.size);
    } else {
      put32(d, e.size);
      put32(d, e.size);
    }
    return out_.write(d.data(), d.size());
  }

  Status add(const std::string& name, const void* p, size_t n) {
    PTREAD_CHECK(begin(name, n));
    PTREAD_CHECK(data(p, n));
    return end();
  }
  Status add(const std::string& name, const std::string& s) { return add(name, s.data(), s.size()); }

  // Writes the central directory and the end records.
  Status finish() {
    if (open_) return make_error(ErrorCode::invalid_argument, "zip: record '" + entries_.back().name + "' is not ended");
    const uint64_t cd_offset = out_.offset();
    std::vector<uint8_t> c;
    for (const Entry& e : entries_) {
      c.clear();
      const bool big_size = force_zip64_ || e.size >= kMax32;
      const bool big_offset = force_zip64_ || e.offset >= kMax32;
      const size_t extra = (big_size || big_offset) ? 4 + (big_size ? 16 : 0) + (big_offset ? 8 : 0) : 0;
      put32(c, 0x02014b50u);
      put16(c, 45);  // made by: zip 4.5, MS-DOS attributes
      put16(c, e.zip64_local || big_offset ? 45 : 20);
      put16(c, e.flags);
      put16(c, 0);
      put16(c, 0);
      put16(c, 0x0021);
      put32(c, e.crc);
      put32(c, big_size ? kMax32 : e.size);
      put32(c, big_size ? kMax32 : e.size);
      put16(c, e.name.size());
      put16(c, extra);
      put16(c, 0);  // comment
      put16(c, 0);  // disk
      put16(c, 0);  // internal attributes
      put32(c, 0);  // external attributes
      put32(c, big_offset ? kMax32 : e.offset);
      c.insert(c.end(), e.name.begin(), e.name.end());
      if (extra) {
        put16(c, 0x0001);
        put16(c, extra - 4);
        if (big_size) {
          put64(c, e.size);
          put64(c, e.size);
        }
        if (big_offset) put64(c, e.offset);
      }
      PTREAD_CHECK(out_.write(c.data(), c.size()));
    }
    const uint64_t cd_size = out_.offset() - cd_offset, eocd64 = out_.offset(), n = entries_.size();
    c.clear();
    put32(c, 0x06064b50u);
    put64(c, 44);  // the record's size after this field
    put16(c, 45);
    put16(c, 45);
    put32(c, 0);
    put32(c, 0);
    put64(c, n);
    put64(c, n);
    put64(c, cd_size);
    put64(c, cd_offset);
    put32(c, 0x07064b50u);
    put32(c, 0);
    put64(c, eocd64);
    put32(c, 1);
    put32(c, 0x06054b50u);
    put16(c, 0);
    put16(c, 0);
    put16(c, n >= 0xffff || force_zip64_ ? 0xffff : n);
    put16(c, n >= 0xffff || force_zip64_ ? 0xffff : n);
    put32(c, cd_size >= kMax32 || force_zip64_ ? kMax32 : cd_size);
    put32(c, cd_offset >= kMax32 || force_zip64_ ? kMax32 : cd_offset);
    put16(c, 0);  // comment
    return out_.write(c.data(), c.size());
  }

 private:
  static constexpr uint64_t kMax32 = 0xffffffffu;
  struct Entry {
    std::string name;
    uint64_t size = 0, offset = 0;
    uint32_t crc = 0;
    uint16_t flags = 0x0008;
    bool zip64_local = false;
  };

  static void put16(std::vector<uint8_t>& b, uint64_t v) {
    for (int k = 0; k < 2; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
  }
  static void put32(std::vector<uint8_t>& b, uint64_t v) {
    for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
  }
  static void put64(std::vector<uint8_t>& b, uint64_t v) {
    for (int k = 0; k < 8; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
  }

  OutputFile& out_;
  bool force_zip64_;
  std::vector<Entry> entries_;
  bool open_ = false;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace detail
}  // namespace ptread
