// ptread — the legacy format: torch.save before 1.6, and _use_new_zipfile_serialization=False
// ever since (torch/serialization.py, _legacy_save / _legacy_load).
//
// Pickles, one after another, then raw storages:
//   1. the magic number 0x1950a86a20f9469cfc6c     2. the protocol version 1001
//   3. sys_info {protocol_version, little_endian, type_sizes}
//   4. the object; storages are persistent ids ('storage', class, key, location, numel,
//      view_metadata), view_metadata None or (view_key, offset, size) in elements; classes
//      of full-model saves are ('module', class, source_file, source)
//   5. the list of storage keys, in the order the storages follow
// then, for each key: an 8-byte element count and count * element size raw bytes.
//
// Byte order: THPStorage_writeFileRaw has written the elements little-endian whatever the
// host since February 2017 (before the legacy format existed), and the 8-byte counts in
// host order until torch 1.4 (pytorch#26383). So a file from a big-endian host before 1.4
// has big-endian counts and little-endian data: the pickle gives each storage's element
// count, so a count that matches only byte-swapped is read swapped (torch itself fails on
// such files with "storage has wrong byte size"). sys_info is read but not needed.
//
// mmap and memory modes: storages are views into the file where their address suits their
// dtype's alignment (else copied). Read mode: the pickles are read with a growing prefix,
// then each storage into its own buffer.
#pragma once

#include "../torch/naming.hpp"
#include "../torch/hooks.hpp"

#include <algorithm>
#include <memory>

namespace ptread {
namespace detail {

inline uint64_t load_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}
inline uint64_t byteswap_u64(uint64_t v) {
  uint64_t r = 0;
  for (int k = 0; k < 8; ++k) {
    r = (r << 8) | (v & 0xff);
    v >>= 8;
  }
  return r;
}

// A storage's bytes at [offset, offset + nbytes) of src: a view when the source is memory,
// the mode allows it and the address suits `dtype`, else an aligned copy (byte-swapped per
// element when `swap`). `view_owner` keeps a view's memory alive.
inline Result<std::shared_ptr<const Storage>> storage_from_source(const Source& src, const std::shared_ptr<const void>& view_owner,
                                                                  uint64_t offset, uint64_t nbytes, DType dtype,
                                                                  bool copy, bool swap,
                                                                  std::vector<FillJob>* fill = nullptr) {
  if (!range_inside(offset, nbytes, src.size())) {
    return make_error(ErrorCode::truncated, "a storage of " + std::to_string(nbytes) + " bytes at offset " +
                                                std::to_string(offset) + " lies past the end of the file (" +
                                                std::to_string(src.size()) + " bytes)");
  }
  const size_t align = std::min<size_t>(dtype_size(dtype), 8);
  if (src.base() != nullptr && !copy && !swap) {
    const uint8_t* p = src.base() + offset;
    if (reinterpret_cast<uintptr_t>(p) % align == 0) return std::make_shared<const Storage>(p, static_cast<size_t>(nbytes), view_owner);
  }
  PTREAD_TRY(auto buf, allocate_aligned(static_cast<size_t>(nbytes)));
  if (fill != nullptr && !swap) {
    fill->push_back({offset, buf.get(), static_cast<size_t>(nbytes)});  // read by run_fill_jobs
  } else {
    PTREAD_CHECK(src.read_at(offset, buf.get(), static_cast<size_t>(nbytes)));
  }
  if (swap) byteswap_elements(buf.get(), static_cast<size_t>(nbytes), dtype_swap_unit(dtype));
  const uint8_t* p = buf.get();
  return std::make_shared<const Storage>(p, static_cast<size_t>(nbytes), std::move(buf));
}

// Runs the pickles of a legacy or tar file from a buffer holding a prefix of the file (read
// mode) or all of it; a pickle that runs past a prefix is retried with twice the prefix.
template <class Parse>
Status with_growing_prefix(const Source& src, Parse&& parse) {
  if (src.base() != nullptr) return parse(src.base(), static_cast<size_t>(src.size()));
  uint64_t n = std::min<uint64_t>(src.size(), uint64_t{1} << 20);
  for (;;) {
    PTREAD_TRY(Bytes head, src.bytes(0, n));
    Status st = parse(head.data, head.size);
    if (st || st.error().code() != ErrorCode::pickle_truncated || n == src.size()) return st;
    n = std::min<uint64_t>(src.size(), 2 * n);
  }
}

// A legacy or tar file's pickle [p, p + n), at byte `at` of `where`, read by vm: refused
// where a read crosses the end of a FRAME and so reads other bytes than a flat reading
// (Python's pickler never writes one). torch.load unpickles a legacy file from the file
// object it is given and a tar file's members through tarfile's buffered reader, and what
// it reads then depends on that object: a BytesIO drops the frame's rest and reads on
// after it, a buffered file does that only for a frame its buffer does not hold at that
// point (its 4 or 8 KiB, wherever they fall). Not guessed.
// (`pickle()` names the pickle; called only for the error.)
template <class Name>
Status legacy_frames_read_flat(const PickleVM& vm, const uint8_t* p, size_t n, uint64_t at, const std::string& where,
                               Name pickle) {
  if (!vm.torch_reads_otherwise()) return {};
  const size_t part = frame_readings_part(p, n);
  if (part == n) return {};
  return make_error(ErrorCode::pickle_malformed,
                    "pickle: a read crosses the end of a FRAME in " + pickle() +
                        ", which torch.load reads otherwise by the file object it reads from (a BytesIO drops "
                        "the frame's rest and reads on after it, a buffered file only for a frame its buffer does "
                        "not hold): the two readings part at byte " + std::to_string(at + part) + " of '" + where +
                        "'");
}

class LegacyReader {
 public:
  LegacyReader(std::shared_ptr<const Source> src, const ReadOptions& opt) : src_(std::move(src)), opt_(opt) {}

  Result<std::shared_ptr<Model>> read() {
    uint64_t data_start = 0;
    PTREAD_CHECK(with_growing_prefix(*src_, [&](const uint8_t* p, size_t n) { return parse_pickles(p, n, &data_start); }));
    std::vector<FillJob> fill;
    PTREAD_CHECK(read_storages(data_start, &fill));
    PTREAD_CHECK(run_fill_jobs(*src_, fill, opt_.threads));
    PTREAD_CHECK(hooks_->finish());
    PTREAD_CHECK(realign_storages(*model_));
    PTREAD_CHECK(name_tensors(*model_, opt_.limits, src_->size()));
    return model_;
  }

 private:
  Status parse_pickles(const uint8_t* p, size_t n, uint64_t* data_start) {
    model_ = std::make_shared<Model>();
    model_->format = Format::legacy;
    Graph& g = model_->graph;
    // Storages are known only by their persistent ids until the key list: placeholders,
    // filled by read_storages().
    StorageLoader placeholder = [](std::string_view, uint64_t nbytes, DType) -> Result<std::shared_ptr<const Storage>> {
      return std::make_shared<const Storage>(nullptr, static_cast<size_t>(nbytes), nullptr);
    };
    hooks_ = std::make_unique<TorchHooks>(*model_, std::move(placeholder), opt_.limits);
    hooks_->set_nested(opt_);
    PickleVM vm(g, *hooks_, opt_.limits, src_->name());
    vm.set_tensor_runs(opt_.tensor_runs);
    size_t pos = 0;
    auto next = [&](const char* what) -> Result<uint32_t> {
      size_t used = 0;
      auto r = vm.run(p + pos, n - pos, &used);
      PTREAD_CHECK(legacy_frames_read_flat(vm, p + pos, n - pos, pos, src_->name(),
                                           [what] { return std::string("the legacy format's ") + what + " pickle"; }));
      if (!r) {
        Error e = std::move(r).error();
        e.add_context(std::string("(the legacy format's ") + what + " pickle, at byte " + std::to_string(pos) + ")");
        return e;
      }
      pos += used;
      return *r;
    };
    PTREAD_TRY(uint32_t magic, next("magic number"));
    if (g.kind(magic) != ValueKind::big_integer || big_to_decimal(g.text(magic)) != "119547037146038801333356") {
      return make_error(ErrorCode::legacy_corrupt, "the legacy format's magic number is wrong (corrupt file?)");
    }
    PTREAD_TRY(uint32_t version, next("protocol version"));
    if (g.kind(version) != ValueKind::integer || g.at(version).i != 1001) {
      return make_error(ErrorCode::legacy_corrupt, "legacy protocol version is not 1001 (corrupt file?)");
    }
    // sys_info: torch.load unpickles it and never looks at it (any value: `legacy_sys_info_int.pt`)
    PTREAD_TRY(uint32_t sys_info, next("sys_info"));
    (void)sys_info;
    PTREAD_TRY(model_->root, next("object"));
    PTREAD_TRY(uint32_t keys, next("storage key list"));
    if (g.kind(keys) != ValueKind::list && g.kind(keys) != ValueKind::tuple) {
      return make_error(ErrorCode::legacy_corrupt, "the legacy storage key list is a " + std::string(value_kind_name(g.kind(keys))));
    }
    keys_ = keys;
    *data_start = pos;
    return {};
  }

  Status read_storages(uint64_t pos, std::vector<FillJob>* fill) {
    Graph& g = model_->graph;
    const Items keys = g.at(keys_).items;
    std::vector<uint8_t> filled(model_->storage_table.size(), 0);
    const bool copy = opt_.mode == LoadMode::read;
    const std::shared_ptr<const void> owner = src_;
    for (uint32_t k : keys) {
      // (torch.load finds each listed key in its dict of storages by key: the int 0 is not
      // the string '0', and the pickle's keys are never bytes)
      std::string key;
      const bool int_key = g.kind(k) == ValueKind::integer;
      if (int_key) {
        key = std::to_string(g.at(k).i);
      } else if (g.kind(k) == ValueKind::string) {
        key = std::string(g.text(k));
      } else {
        return make_error(ErrorCode::legacy_corrupt, std::string("a legacy storage key is a ") + value_kind_name(g.kind(k)));
      }
      const uint32_t index = hooks_->storage_index(key, int_key);
      if (index == StringIndex::npos || index >= filled.size()) {
        return make_error(ErrorCode::legacy_corrupt, "storage key '" + key + "' of the key list is not referenced by the pickle");
      }
      if (filled[index]) return make_error(ErrorCode::legacy_corrupt, "storage key '" + key + "' is listed twice");
      filled[index] = 1;
      const DType dtype = hooks_->storage_dtype(index);
      const uint64_t unit = dtype_size(dtype);
      const uint64_t nbytes = model_->storage_table.nbytes(index);
      const uint64_t expected = nbytes / unit;
      uint8_t head[8];
      if (!range_inside(pos, 8, src_->size())) {
        return make_error(ErrorCode::truncated, "the file ends before storage '" + key + "' (byte " + std::to_string(pos) + ")");
      }
      PTREAD_CHECK(src_->read_at(pos, head, 8));
      const uint64_t count = load_u64_le(head);
      if (count != expected) {
        if (byteswap_u64(count) != expected) {  // a big-endian host before torch 1.4: accepted
          return make_error(ErrorCode::legacy_corrupt,
                            "storage '" + key + "' holds " + std::to_string(count) + " elements in the file; the pickle says " +
                                std::to_string(expected) + " (byte " + std::to_string(pos) + ")");
        }
      }
      PTREAD_TRY(auto st, storage_from_source(*src_, owner, pos + 8, nbytes, dtype, copy, false, fill));
      model_->storage_table.set(index, std::move(st));
      pos += 8 + nbytes;
    }
    return {};
  }

  std::shared_ptr<const Source> src_;
  ReadOptions opt_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<TorchHooks> hooks_;
  uint32_t keys_ = kNoNode;
};

inline Result<std::shared_ptr<Model>> read_legacy_checkpoint(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  return LegacyReader(std::move(src), opt).read();
}

}  // namespace detail
}  // namespace ptread
