// A small zip writer for ptread's tests: builds archives in memory with a knob for every
// layout choice the reader must handle (torch's data descriptors and 'FB' alignment
// padding, sizes in local headers, forced ZIP64 fields and records, comments, records far
// into a sparse file) and overrides to write the broken archives the error tests need.
//
//   ptread_test::ZipWriter w;
//   w.add("archive/data.pkl", pickle_bytes);
//   ptread_test::ZipEntrySpec e{"archive/data/0", bytes};
//   e.method = 8;
//   w.add(e);
//   ptread_test::ZipBuilt z = w.build();
//   std::vector<uint8_t> file = z.flat();   // or z.write_sparse(path, &err)
//
// Every offset written is absolute (from the start of the file), so an archive built with
// base_offset = N describes itself as sitting N bytes into the file (flat() fills those N
// bytes with zeros; a test may overwrite them). CRC-32s are real. Method 8 uses zlib's raw
// deflate when PTREAD_WITH_ZLIB, else a valid deflate stream of stored blocks.
#pragma once

#include <ptread/ptread.hpp>  // for PTREAD_WITH_ZLIB; the umbrella, which single_include/ has too

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if PTREAD_WITH_ZLIB
#include <zlib.h>
#endif

#include "platform.hpp"

namespace ptread_test {

inline uint32_t crc32_of(const uint8_t* p, size_t n, uint32_t crc = 0) {
  static const struct Table {
    uint32_t t[256];
    Table() : t() {
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
      }
    }
  } table;
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table.t[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}
inline uint32_t crc32_of(const std::vector<uint8_t>& v) { return crc32_of(v.data(), v.size()); }

inline std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Little-endian stores into a buffer, for writing and for patching built archives.
inline void put16(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  b[at] = static_cast<uint8_t>(v);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}
inline void put32(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (size_t k = 0; k < 4; ++k) b[at + k] = static_cast<uint8_t>(v >> (8 * k));
}
inline void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (size_t k = 0; k < 8; ++k) b[at + k] = static_cast<uint8_t>(v >> (8 * k));
}
inline void append16(std::vector<uint8_t>& b, uint64_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
inline void append32(std::vector<uint8_t>& b, uint64_t v) {
  for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
}
inline void append64(std::vector<uint8_t>& b, uint64_t v) {
  for (int k = 0; k < 8; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
}
inline void append(std::vector<uint8_t>& b, const std::vector<uint8_t>& s) { b.insert(b.end(), s.begin(), s.end()); }
inline void append(std::vector<uint8_t>& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }

// Raw deflate (no zlib header), as zip method 8 stores it.
inline std::vector<uint8_t> deflate_raw(const std::vector<uint8_t>& in) {
  std::vector<uint8_t> out;
#if PTREAD_WITH_ZLIB
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return out;
  out.resize(static_cast<size_t>(deflateBound(&zs, static_cast<uLong>(in.size()))) + 16);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? static_cast<size_t>(zs.total_out) : 0);
  deflateEnd(&zs);
#else
  // Stored blocks: BFINAL/BTYPE=00 byte, LEN, NLEN, the bytes. Valid deflate without zlib.
  size_t pos = 0;
  do {
    const size_t n = in.size() - pos < 65535 ? in.size() - pos : 65535;
    out.push_back(pos + n == in.size() ? 1 : 0);
    append16(out, n);
    append16(out, ~n & 0xffffu);
    out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(pos),
               in.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < in.size());
#endif
  return out;
}

struct ZipEntrySpec {
  std::string name;
  std::vector<uint8_t> data;  // uncompressed bytes
  uint16_t method = 0;        // 0 stored, 8 deflate
  // Torch's layout: zero sizes (and CRC) in the local header, flag bit 3, and a data
  // descriptor "PK\7\8" crc csize usize after the data. false: sizes in the local header.
  bool descriptor = true;
  bool pad64 = true;          // 'FB' extra field in the local header aligning the data to 64
  bool zip64_sizes = false;   // 0xFFFFFFFF sizes + ZIP64 extra (also when a size overflows)
  bool zip64_offset = false;  // 0xFFFFFFFF offset + ZIP64 extra (also when it overflows)
  bool omit_zip64_extra = false;  // write the 0xFFFFFFFF fields but leave the extra out
  uint64_t gap_before = 0;        // bytes of hole (zeros) before the local header
  // Overrides of what the headers claim (written raw; the data stays what it is).
  int64_t claim_usize = -1;  // uncompressed size in local, central and ZIP64 fields
  int64_t claim_csize = -1;  // compressed size, likewise
  int method_field = -1;     // the method field written, when not `method`
};

struct ZipEntryLayout {
  std::string name;
  uint64_t local_offset = 0;    // "PK\3\4"
  uint64_t data_offset = 0;     // first data byte
  uint64_t data_size = 0;       // bytes of (compressed) data written
  uint64_t central_offset = 0;  // its "PK\1\2"
};

// A built archive: the bytes as chunks at absolute offsets (holes between them read as zeros).
struct ZipBuilt {
  struct Chunk {
    uint64_t offset = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<Chunk> chunks;
  uint64_t size = 0;
  std::vector<ZipEntryLayout> entries;
  uint64_t cd_offset = 0, cd_size = 0;
  uint64_t zip64_eocd_offset = UINT64_MAX, locator_offset = UINT64_MAX;  // MAX: not written
  uint64_t eocd_offset = 0;

  // The whole file in memory (only for archives without large holes).
  std::vector<uint8_t> flat() const {
    std::vector<uint8_t> out(static_cast<size_t>(size), 0);
    for (const auto& c : chunks) {
      if (!c.bytes.empty()) std::memcpy(out.data() + c.offset, c.bytes.data(), c.bytes.size());
    }
    return out;
  }

  // Writes the chunks at their offsets: the holes cost no disk on filesystems with sparse
  // files.
  bool write_sparse(const std::string& path, std::string* err) const {
    std::vector<FilePiece> pieces;
    for (const auto& c : chunks) pieces.push_back({c.offset, c.bytes.data(), c.bytes.size()});
    return write_pieces(path, pieces, size, err);
  }
};

class ZipWriter {
 public:
  bool zip64_eocd = true;  // ZIP64 EOCD + locator before the classic EOCD (torch always writes them)
  std::string comment;     // after the classic EOCD; its length field saturates at 65535
  uint64_t base_offset = 0;  // the archive's first byte sits this far into the file
  bool utf8_flag = true;     // general purpose bit 11, as torch sets it

  ZipWriter& add(ZipEntrySpec e) {
    specs_.push_back(std::move(e));
    return *this;
  }
  ZipWriter& add(const std::string& name, std::vector<uint8_t> data) {
    ZipEntrySpec e;
    e.name = name;
    e.data = std::move(data);
    return add(std::move(e));
  }
  std::vector<ZipEntrySpec>& specs() { return specs_; }

  ZipBuilt build() const {
    ZipBuilt z;
    z.chunks.push_back({base_offset, {}});
    auto pos = [&z]() { return z.chunks.back().offset + z.chunks.back().bytes.size(); };
    auto out = [&z]() -> std::vector<uint8_t>& { return z.chunks.back().bytes; };

    struct Central {
      uint16_t flags, method, version;
      uint32_t crc;
      uint64_t csize, usize, offset;
      bool z_u, z_c, z_o, omit;
    };
    std::vector<Central> cents;
    for (const auto& s : specs_) {
      if (s.gap_before > 0) z.chunks.push_back({pos() + s.gap_before, {}});
      const std::vector<uint8_t> payload = s.method == 8 ? deflate_raw(s.data) : s.data;
      Central c;
      c.crc = crc32_of(s.data);
      c.usize = s.claim_usize >= 0 ? static_cast<uint64_t>(s.claim_usize) : s.data.size();
      c.csize = s.claim_csize >= 0 ? static_cast<uint64_t>(s.claim_csize) : payload.size();
      c.method = static_cast<uint16_t>(s.method_field >= 0 ? s.method_field : s.method);
      c.flags = static_cast<uint16_t>((s.descriptor ? 0x0008 : 0) | (utf8_flag ? 0x0800 : 0));
      c.offset = pos();
      c.z_u = s.zip64_sizes || c.usize >= 0xffffffffu;
      c.z_c = s.zip64_sizes || c.csize >= 0xffffffffu;
      c.z_o = s.zip64_offset || c.offset >= 0xffffffffu;
      c.omit = s.omit_zip64_extra;
      const bool local_z64 = c.z_u || c.z_c;
      c.version = static_cast<uint16_t>(c.z_u || c.z_c || c.z_o ? 45 : 20);

      ZipEntryLayout lay;
      lay.name = s.name;
      lay.local_offset = c.offset;
      std::vector<uint8_t> extra;
      if (local_z64 && !c.omit) {  // the local ZIP64 extra holds both sizes
        append16(extra, 0x0001);
        append16(extra, 16);
        append64(extra, s.descriptor ? 0 : c.usize);
        append64(extra, s.descriptor ? 0 : c.csize);
      }
      if (s.pad64) {
        const uint64_t before = c.offset + 30 + s.name.size() + extra.size() + 4;
        const uint64_t pad = (64 - before % 64) % 64;
        append16(extra, 0x4246);  // 'F' 'B'
        append16(extra, pad);
        extra.insert(extra.end(), static_cast<size_t>(pad), 'Z');
      }
      std::vector<uint8_t>& b = out();
      append32(b, 0x04034b50u);
      append16(b, c.version);
      append16(b, c.flags);
      append16(b, c.method);
      append16(b, 0);       // time
      append16(b, 0x0021);  // date 1980-01-01
      if (s.descriptor) {
        append32(b, 0);
        append32(b, 0);
        append32(b, 0);
      } else {
        append32(b, c.crc);
        append32(b, c.z_c ? 0xffffffffu : c.csize);
        append32(b, c.z_u ? 0xffffffffu : c.usize);
      }
      append16(b, s.name.size());
      append16(b, extra.size());
      append(b, s.name);
      append(b, extra);
      lay.data_offset = pos();
      lay.data_size = payload.size();
      append(b, payload);
      if (s.descriptor) {
        append32(b, 0x08074b50u);
        append32(b, c.crc);
        if (local_z64) {
          append64(b, c.csize);
          append64(b, c.usize);
        } else {
          append32(b, c.csize);
          append32(b, c.usize);
        }
      }
      z.entries.push_back(lay);
      cents.push_back(c);
    }

    z.cd_offset = pos();
    for (size_t i = 0; i < specs_.size(); ++i) {
      const ZipEntrySpec& s = specs_[i];
      const Central& c = cents[i];
      z.entries[i].central_offset = pos();
      std::vector<uint8_t> extra;
      if ((c.z_u || c.z_c || c.z_o) && !c.omit) {
        append16(extra, 0x0001);
        append16(extra, 8 * ((c.z_u ? 1 : 0) + (c.z_c ? 1 : 0) + (c.z_o ? 1 : 0)));
        if (c.z_u) append64(extra, c.usize);
        if (c.z_c) append64(extra, c.csize);
        if (c.z_o) append64(extra, c.offset);
      }
      std::vector<uint8_t>& b = out();
      append32(b, 0x02014b50u);
      append16(b, 0x0300 | c.version);  // made by: unix
      append16(b, c.version);
      append16(b, c.flags);
      append16(b, c.method);
      append16(b, 0);
      append16(b, 0x0021);
      append32(b, c.crc);
      append32(b, c.z_c ? 0xffffffffu : c.csize);
      append32(b, c.z_u ? 0xffffffffu : c.usize);
      append16(b, s.name.size());
      append16(b, extra.size());
      append16(b, 0);  // comment
      append16(b, 0);  // disk
      append16(b, 0);  // internal attributes
      append32(b, 0100644u << 16);
      append32(b, c.z_o ? 0xffffffffu : c.offset);
      append(b, s.name);
      append(b, extra);
    }
    z.cd_size = pos() - z.cd_offset;
    const uint64_t count = specs_.size();

    std::vector<uint8_t>& b = out();
    if (zip64_eocd) {
      z.zip64_eocd_offset = pos();
      append32(b, 0x06064b50u);
      append64(b, 44);  // size of the rest of the record
      append16(b, 0x032d);
      append16(b, 45);
      append32(b, 0);
      append32(b, 0);
      append64(b, count);
      append64(b, count);
      append64(b, z.cd_size);
      append64(b, z.cd_offset);
      z.locator_offset = pos();
      append32(b, 0x07064b50u);
      append32(b, 0);
      append64(b, z.zip64_eocd_offset);
      append32(b, 1);
    }
    z.eocd_offset = pos();
    append32(b, 0x06054b50u);
    append16(b, 0);
    append16(b, 0);
    append16(b, count < 0xffff ? count : 0xffff);
    append16(b, count < 0xffff ? count : 0xffff);
    append32(b, z.cd_size < 0xffffffffu ? z.cd_size : 0xffffffffu);
    append32(b, z.cd_offset < 0xffffffffu ? z.cd_offset : 0xffffffffu);
    append16(b, comment.size() < 0xffff ? comment.size() : 0xffff);
    append(b, comment);
    z.size = pos();
    return z;
  }

 private:
  std::vector<ZipEntrySpec> specs_;
};

}  // namespace ptread_test
