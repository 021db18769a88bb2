// ptread — the storages a pickle's persistent ids name, as torch.load keeps them
// (torch/serialization.py: loaded_storages, deserialized_objects): one storage per key,
// made by the key's first reference, of that reference's dtype and size; later references
// get it as it is. Numbered keys ("0", "1" ... as torch.save writes them) index a vector,
// the others a hash index. Legacy view metadata makes slices of a root storage. A storage
// is a view of the container's record when the record is in memory as it is (the
// container hands over its table of StoredRecords), else the container's loader makes it.
#pragma once

#include "model.hpp"
#include "python.hpp"
#include "../memory/flat_map.hpp"
#include "../text/text.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptread {
namespace detail {

// Loads the bytes of storage `key` holding at least `nbytes` bytes.
using StorageLoader = std::function<Result<std::shared_ptr<const Storage>>(std::string_view key, uint64_t nbytes, DType dtype)>;

// The stored record that storage key "<n>" names, as a reader found it: its bytes when they
// are in memory as they are (else data is nullptr), its size, and the reader's own index
// of it (StringIndex::npos: none).
struct StoredRecord {
  const uint8_t* data;
  uint64_t size;
  uint32_t entry;
};

class TorchStorages {
 public:
  TorchStorages(Model& m, StorageLoader loader) : m_(m), loader_(std::move(loader)) {}

  // Numbered storage keys whose record is in memory and large enough become views of the
  // source (StorageTable::add_view; the table's source must be set), without a call to the
  // loader: every such storage but those of multi-byte dtypes in a big-endian file
  // (swapped: the loader converts them). Not for read mode, whose storages are copies.
  void set_stored_records(const SegmentedVector<StoredRecord>* records, bool big_endian) {
    records_ = records;
    records_big_endian_ = big_endian;
  }
  // Storages made before their records are known (read_zip_overlapped): each key becomes a
  // placeholder view of no bytes and the size the pickle first declares for it, which every
  // check during the pickle then holds the tensors to. Legacy view metadata fails the
  // pickle. bind_placeholders() points them at their records (the table's source must be set).
  void set_placeholders() { placeholders_ = true; }

  // After the pickle, each placeholder gets its record's bytes, as find_or_load and the
  // loader would have given them: numbered keys from `records` (the walk's table), the
  // others (and numbers too far apart for it) through by_name(key, &size), which returns
  // the bytes of that stored record in memory as the loader would view them, or nullptr.
  // True when every placeholder's record is there, holds at least the bytes the pickle
  // first declared, and needs no byte swap; else false, with some storages bound and some
  // not: the model is then dropped (the file is read again without placeholders). The
  // placeholders are all the storages made from a key: the others (numpy arrays' copies)
  // are made as without placeholders.
  template <class ByName>
  bool bind_placeholders(const SegmentedVector<StoredRecord>& records, bool big_endian, ByName&& by_name) {
    auto fits = [&](uint32_t k, const uint8_t* data, uint64_t size) {
      return data != nullptr && size >= m_.storage_table.nbytes(k) &&
             !(big_endian && dtype_swap_unit(static_cast<DType>(table_dtype_[k])) > 1);
    };
    if (storage_by_number_.size() > records.size()) {  // (only npos past the records)
      for (size_t n = records.size(); n < storage_by_number_.size(); ++n) {
        if (storage_by_number_[n] != StringIndex::npos) return false;
      }
    }
    for (size_t n = 0; n < storage_by_number_.size(); ++n) {
      const uint32_t k = storage_by_number_[n];
      if (k == StringIndex::npos) continue;
      const StoredRecord& r = records[n];
      if (!fits(k, r.data, r.size)) return false;
      m_.storage_table.rebind(k, r.data, m_.storage_table.nbytes(k));  // (a longer record: its first bytes)
    }
    for (const auto& hk : hashed_keys_) {
      uint64_t size = 0;
      const uint8_t* data = by_name(hk.first, &size);
      if (!fits(hk.second, data, size)) return false;
      m_.storage_table.rebind(hk.second, data, m_.storage_table.nbytes(hk.second));
    }
    for (const auto& ik : int_keys_) {  // (the record of int key 7 is data/7)
      uint32_t number = 0;
      uint64_t size = 0;
      const uint8_t* data = nullptr;
      if (decimal_key(ik.first, &number) && number < records.size()) {
        data = records[number].data;
        size = records[number].size;
      } else {
        data = by_name(ik.first, &size);
      }
      if (!fits(ik.second, data, size)) return false;
      m_.storage_table.rebind(ik.second, data, m_.storage_table.nbytes(ik.second));
    }
    return true;
  }

  // Room for n storages (a hint: a zip archive's count of data records). With a reserve
  // (set_chunk_reserve, before its filling thread starts), the tables of more than about
  // 10,000 storages (64 KiB) take a chunk of it, which that thread faults in first
  // (ChunkReserve::begin): they are written from the pickle's start (100,000 storages':
  // 150 pages of 4 KiB, else faulted in one by one by the pickle's thread).
  void expect_storages(size_t n) {
    storage_by_number_.reserve(n + n / 2 + 2);  // keys "0" to n - 1, as torch numbers them
    table_dtype_.reserve(n);
  }
  // Where the hooks' pool takes its 2 MiB chunks from (nullptr: none); the reserve must
  // outlive its use (the calls that add storages).
  void set_chunk_reserve(ChunkReserve* r) noexcept { pool_.set_reserve(r); }

  // The index of the storage with this key (int_key: the digits of an int key), or
  // StringIndex::npos.
  uint32_t storage_index(std::string_view key, bool int_key = false) const {
    uint32_t number = 0;
    const bool numbered = decimal_key(key, &number);
    return find_storage(key, numbered, number, int_key);
  }
  // The dtype storage `index` was first referenced with.
  DType storage_dtype(uint32_t index) const {
    return index < table_dtype_.size() ? static_cast<DType>(table_dtype_[index]) : DType::U8;
  }
  // The first storage referenced again under another dtype or size ("" when none): those
  // references got the first one's storage, as torch.load gives them. torch.jit.load gives
  // each reference of a TorchScript archive a storage of its own dtype and size instead
  // (torch never writes such archives: jit.save repeats one reference of each storage).
  const std::string& retyped() const noexcept { return retyped_; }

  // After the pickle: views of storages (legacy view metadata) point into their roots, and
  // every storage the pickle references has its bytes.
  Status finish() {
    for (const View& v : views_) {
      if (m_.storage_table.data(v.root) == nullptr && m_.storage_table.nbytes(v.root) > 0) break;  // reported below
      m_.storage_table.set_slice(v.view, v.root, v.offset, v.nbytes);
    }
    for (size_t k = 0; k < m_.storage_table.size(); ++k) {
      if (m_.storage_table.data(k) == nullptr && m_.storage_table.nbytes(k) > 0) {
        std::string key = "#" + std::to_string(k);
        for (const auto& hk : hashed_keys_) {
          if (hk.second == k) key = std::string(hk.first);
        }
        for (const auto& ik : int_keys_) {
          if (ik.second == k) key = std::string(ik.first) + " (an int)";
        }
        for (size_t n = 0; n < storage_by_number_.size(); ++n) {
          if (storage_by_number_[n] == k) key = std::to_string(n);
        }
        return make_error(ErrorCode::record_missing,
                          "storage '" + key + "' is referenced by the pickle but its bytes are not in the file");
      }
    }
    return {};
  }

  // The index of storage `key`, referenced as numel elements of dtype: found, or loaded.
  // As torch.load does (torch.serialization: loaded_storages, deserialized_objects), a key's
  // first reference makes its storage, of that reference's dtype and numel * element size
  // bytes (a longer record is cut to that), and later references get that storage as it is,
  // whatever class and count they name: *stored (dtype, as the caller set it) becomes the
  // storage's dtype, and a view is checked against its size. held: key is a view of text
  // the graph keeps (else it is copied there).
  PTREAD_ALWAYS_INLINE Result<uint32_t> find_or_load(Graph& g, std::string_view key, bool held, uint64_t numel,
                                                     bool numel_valid, DType dtype, DType* stored, bool int_key = false) {
    uint64_t nbytes = 0;
    const bool overflow = !numel_valid || mul_overflow(numel, dtype_size(dtype), &nbytes);  // (numel unread if known)
    uint32_t number = 0;
    const bool numbered = decimal_key(key, &number);
    uint32_t index = find_storage(key, numbered, number, int_key);
    if (index != StringIndex::npos) {
      const DType first = static_cast<DType>(table_dtype_[index]);
      if (PTREAD_UNLIKELY(first != dtype || overflow || nbytes != m_.storage_table.nbytes(index)) && retyped_.empty()) {
        retyped_ = "storage '" + std::string(key) + "' is referenced as " + dtype_name(first) + " of " +
                   std::to_string(m_.storage_table.nbytes(index)) + " bytes, then as " + dtype_name(dtype) +
                   (overflow ? std::string(" of no valid size") : " of " + std::to_string(nbytes) + " bytes");
      }
      *stored = first;
    } else {
      if (!numel_valid) {
        return make_error(ErrorCode::bad_tensor_args, "storage '" + std::string(key) + "' has no valid element count");
      }
      if (overflow) return make_error(ErrorCode::shape_overflow, "storage '" + std::string(key) + "' byte size overflows");
      const StoredRecord* r = numbered && records_ != nullptr && number < records_->size() ? &(*records_)[number] : nullptr;
      if (placeholders_) {
        m_.storage_table.add_view(nullptr, nbytes);
      } else if (r != nullptr && r->data != nullptr && r->size >= nbytes && !(records_big_endian_ && dtype_swap_unit(dtype) > 1)) {
        m_.storage_table.add_view(r->data, nbytes);
      } else {
        PTREAD_TRY(auto st, loader_(key, nbytes, dtype));
        if (st->nbytes() > nbytes) {  // a record longer than the storage: its first nbytes (st keeps them)
          const uint8_t* p = st->data();
          st = std::make_shared<const Storage>(p, static_cast<size_t>(nbytes), std::move(st));
        }
        m_.storage_table.add(std::move(st));
      }
      index = add_storage(g, key, held, numbered, number, dtype, int_key);
    }
    return index;
  }

  // A persistent id's storage key: a string, or an int (its decimal digits, written into
  // digits; true). torch.load keeps its storages in a dict by key, where the int 0 and the
  // string '0' are two keys (two storages of the one record data/0), and a bytes key names
  // a record data/b'...' no torch file has (a legacy file's list of keys holds strings).
  static Result<bool> storage_key(const Graph& g, uint32_t node, char (&digits)[24], std::string_view* key) {
    if (g.kind(node) == ValueKind::integer) {
      const auto r = std::to_chars(digits, digits + sizeof digits, g.at(node).i);
      *key = std::string_view(digits, static_cast<size_t>(r.ptr - digits));
      return true;
    }
    if (g.kind(node) == ValueKind::bytes) {
      return make_error(ErrorCode::bad_tensor_args, "storage key is bytes, not a string (torch.load finds no storage of it)");
    }
    PTREAD_TRY(*key, text_of(g, node, "storage key"));
    return false;
  }

  // Legacy view metadata (view_key, offset, size), in elements of the root's dtype: the
  // storage `view_key` is that slice of the root (torch.serialization: the first reference
  // makes it). Resolved to memory by finish(), once the root has its bytes.
  Result<uint32_t> storage_view(Graph& g, uint32_t meta, uint32_t root, DType dtype) {
    const NodeView v = g.at(meta);
    if (v.kind != ValueKind::tuple || v.items.size() != 3 || g.kind(v.items[1]) != ValueKind::integer ||
        g.kind(v.items[2]) != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args, "storage view metadata is not (key, offset, size)");
    }
    const Items vi = v.items;
    std::string_view key;
    char digits[24];
    PTREAD_TRY(const bool int_key, storage_key(g, vi[0], digits, &key));
    uint32_t number = 0;
    const bool numbered = decimal_key(key, &number);
    const uint32_t found = find_storage(key, numbered, number, int_key);
    if (found != StringIndex::npos) return found;
    const int64_t offset = g.at(vi[1]).i, size = g.at(vi[2]).i;
    const uint64_t unit = dtype_size(dtype), root_bytes = m_.storage_table.nbytes(root);
    uint64_t off_bytes = 0, size_bytes = 0;
    if (offset < 0 || size < 0 || mul_overflow(static_cast<uint64_t>(offset), unit, &off_bytes) ||
        mul_overflow(static_cast<uint64_t>(size), unit, &size_bytes)) {
      return make_error(ErrorCode::view_out_of_bounds,
                        "storage view '" + std::string(key) + "' (offset " + std::to_string(offset) + ", size " +
                            std::to_string(size) + ") of a root storage of " + std::to_string(root_bytes) + " bytes");
    }
    // torch slices the root's bytes, root[off:off + size], as Python slices: a view that
    // reaches past the root's end ends there (its tensors are checked against what is left).
    off_bytes = std::min(off_bytes, root_bytes);
    size_bytes = std::min(size_bytes, root_bytes - off_bytes);
    m_.storage_table.add_view(nullptr, size_bytes);  // its bytes: finish()
    const uint32_t index = add_storage(g, key, !int_key, numbered, number, dtype, int_key);
    views_.push_back(View{index, root, static_cast<size_t>(off_bytes), static_cast<size_t>(size_bytes)});
    if (sliced_.size() <= std::max(index, root)) sliced_.resize(size_t{std::max(index, root)} + 1, 0);
    sliced_[index] = sliced_[root] = 1;
    return index;
  }

  // Whether storages are placeholders (set_placeholders).
  bool placeholders() const noexcept { return placeholders_; }
  // Whether storage `index` is a legacy view slice, or the root of one (torch resizes neither).
  bool sliced(uint32_t index) const noexcept { return index < sliced_.size() && sliced_[index]; }

 private:
  // The storage table. torch names storages "0", "1", ... : such keys index a vector,
  // others (and numbers far past the count) go through a hash index.
  uint32_t find_storage(std::string_view key, bool numbered, uint32_t n, bool int_key) const {
    if (PTREAD_UNLIKELY(int_key)) {
      const uint32_t k = int_index_.find(key, [this](uint32_t j) { return int_keys_[j].first; });
      return k == StringIndex::npos ? k : int_keys_[k].second;
    }
    if (numbered && n < storage_by_number_.size() && storage_by_number_[n] != StringIndex::npos) return storage_by_number_[n];
    const uint32_t k = storage_index_.find(key, [this](uint32_t j) { return hashed_keys_[j].first; });
    return k == StringIndex::npos ? k : hashed_keys_[k].second;
  }
  // Indexes the storage just added to the table under key (held: a view of text the graph
  // keeps; else the hash index, which keeps views, gets a copy).
  PTREAD_ALWAYS_INLINE uint32_t add_storage(Graph& g, std::string_view key, bool held, bool numbered, uint32_t n, DType dtype,
                                            bool int_key) {
    const uint32_t index = static_cast<uint32_t>(m_.storage_table.size() - 1);
    if (table_dtype_.size() == index) {
      table_dtype_.push_back(static_cast<uint8_t>(dtype));
    } else {
      if (table_dtype_.size() < index) table_dtype_.resize(size_t{index} + 1, 0);
      table_dtype_[index] = static_cast<uint8_t>(dtype);
    }
    if (PTREAD_UNLIKELY(int_key)) {  // (int keys: a table of their own, their digits held by the graph)
      key = g.intern(key);
      int_keys_.emplace_back(key, index);
      int_index_.insert(key, static_cast<uint32_t>(int_keys_.size() - 1), [this](uint32_t j) { return int_keys_[j].first; });
    } else if (numbered && n < 2 * m_.storage_table.size() + 4096) {
      if (n >= storage_by_number_.size()) storage_by_number_.resize(size_t{n} + 1 + storage_by_number_.size() / 2, StringIndex::npos);
      storage_by_number_[n] = index;
    } else {
      if (!held) key = g.intern(key);
      hashed_keys_.emplace_back(key, index);
      storage_index_.insert(key, static_cast<uint32_t>(hashed_keys_.size() - 1),
                            [this](uint32_t j) { return hashed_keys_[j].first; });
    }
    return index;
  }

  Model& m_;
  StorageLoader loader_;
  const SegmentedVector<StoredRecord>* records_ = nullptr;  // set_stored_records
  bool records_big_endian_ = false;
  bool placeholders_ = false;  // set_placeholders
  BlockPool pool_;                           // the next two tables' memory
  PoolVector<uint32_t> storage_by_number_{&pool_};  // decimal keys: storage_by_number_[n], or npos
  PoolVector<uint8_t> table_dtype_{&pool_};  // per storage_table entry made from a persistent id
  std::vector<std::pair<std::string_view, uint32_t>> hashed_keys_;  // the other keys (views held by the graph), their storage
  StringIndex storage_index_;                // positions in hashed_keys_
  std::vector<std::pair<std::string_view, uint32_t>> int_keys_;  // int keys (their digits), their storage
  StringIndex int_index_;                    // positions in int_keys_
  std::vector<uint8_t> sliced_;              // per storage: a legacy view slice, or the root of one
  std::string retyped_;                      // retyped()
  struct View {
    uint32_t view, root;
    size_t offset, nbytes;
  };
  std::vector<View> views_;
};

}  // namespace detail
}  // namespace ptread
