// ptread — torch's meaning of the globals in a checkpoint pickle.
//
// torch.save pickles each tensor as a call to a rebuild function (torch/_utils.py) whose
// first argument is a persistent id naming a storage:
//   _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
//                      backward_hooks[, metadata])        dtype from the storage class
//   _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
//                      torch >= 2.1 for fp8, uint16/32/64, complex32; UntypedStorage
//   _rebuild_tensor(storage, offset, size, stride)      before 0.4
//   _rebuild_parameter(data, requires_grad, hooks), _rebuild_parameter_with_state(..., state)
//   torch._tensor._rebuild_from_type_v2(func, new_type, args, state) = func(*args)
// Persistent id: ('storage', <storage class>, key, location, numel[, view_metadata]);
// numel counts elements of the class's dtype (bytes for UntypedStorage). The class is
// matched by name in any module (torch.FloatStorage, torch.cuda.HalfStorage, LibTorch's
// Float8_e4m3fnStorage ...). `metadata` holds the conj/neg bits, applied when values are
// materialized. The location ("cuda:1", "mps", "xla:0") is kept as Tensor::device() and
// never stops a load.
//
// Also interpreted: collections.OrderedDict, builtins.set/frozenset, torch.Size,
// _codecs.encode (protocol-2 bytes), bytearray, copyreg._reconstructor. Everything else
// becomes an inert object node. Rebuild functions for tensors ptread cannot hand out
// (quantized, sparse, nested, meta, wrapper subclasses) become "unsupported" entries.
#pragma once

#include "model.hpp"

#include "../detail/flat_map.hpp"
#include "../detail/python_repr.hpp"
#include "../detail/text.hpp"

#include <algorithm>
#include <charconv>
#include <functional>
#include <iterator>
#include <optional>
#include <string_view>

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

// What TorchHooks::call does with a global; cached in the global's node (Node::tag).
enum GlobalTag : uint8_t {
  kGlobalUnclassified = 0,
  kGlobalOther,
  kRebuildTensorV2,
  kRebuildTensorV3,
  kRebuildTensorV1,
  kRebuildParameter,           // _rebuild_parameter, _rebuild_parameter_with_state
  kRebuildDeviceFromCpu,       // _rebuild_device_tensor_from_cpu_tensor
  kRebuildUnsupported,         // torch._utils rebuilds of tensors ptread cannot hand out
  kRebuildFromTypeV2,          // torch._tensor._rebuild_from_type_v2
  kOrderedDict,
  kDictLike,                   // collections.defaultdict, collections.Counter
  kBuiltinSet,
  kBuiltinFrozenset,
  kBuiltinBytes,
  kBuiltinBytearray,
  kTorchSize,
  kCodecsEncode,
  kNumpyReconstruct,
  kNumpyScalar,
  kCopyregReconstructor,
  kOldVariable,                // torch.nn.parameter.Parameter, torch.autograd.variable.Variable
  kRebuildQTensor,             // _rebuild_qtensor
  kRebuildSparse,              // _rebuild_sparse_tensor, _rebuild_sparse_csr_tensor
  kPickleStorageType,          // FloatStorage ... (any module): torch.load finds a StorageType
  kTorchInstance,              // torch.float32, torch.per_tensor_affine, torch.strided ...: no classes
};

// What the torch globals are that are objects, not classes or functions (torch_instance_type):
// Python calls none of them, takes none as NEWOBJ's class, and sets no state on any.
inline const char* torch_instance_type(std::string_view name) noexcept {
  DType d;
  if (dtype_from_torch_name(name, &d)) return "torch.dtype";
  for (const char* q : {"per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
                        "per_channel_affine_float_qparams"}) {
    if (name == q) return "torch.qscheme";
  }
  for (const char* l : {"strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn"}) {
    if (name == l) return "torch.layout";
  }
  for (const char* f : {"contiguous_format", "channels_last", "channels_last_3d", "preserve_format"}) {
    if (name == f) return "torch.memory_format";
  }
  return nullptr;
}

// The storage classes torch.load's unpickler turns into StorageType objects, whatever their
// module (torch.serialization's find_class: the names of
// torch.storage._dtype_to_storage_type_map, the same in torch 1.13 and 2.x).
inline bool is_pickle_storage_type(std::string_view name) noexcept {
  static const std::string_view names[] = {
      "DoubleStorage", "FloatStorage", "HalfStorage", "LongStorage", "IntStorage", "ShortStorage",
      "CharStorage", "ByteStorage", "BoolStorage", "BFloat16Storage", "ComplexDoubleStorage",
      "ComplexFloatStorage", "QInt8Storage", "QInt32Storage", "QUInt8Storage", "QUInt4x2Storage",
      "QUInt2x4Storage"};
  for (std::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

// The node whose text a storage's tensors report as Tensor::device(): the stored location
// when it is text (str, or bytes from Python 2), else a string of Python's str() of it (at
// most 256 bytes and "..."). torch.load(map_location="cpu") never reads the location, so
// none stops a load (without map_location torch refuses a location that is no string: it
// calls location.startswith).
inline uint32_t storage_location_node(Graph& g, uint32_t loc) {
  const ValueKind k = g.kind(loc);
  if (PTREAD_LIKELY(k == ValueKind::string || k == ValueKind::bytes)) return loc;
  return g.add_text(ValueKind::string, python_str(g, loc, false, 0, 256));
}

class TorchHooks : public PickleHooks {
 public:
  TorchHooks(Model& m, StorageLoader loader, const Limits& limits)
      : m_(m), loader_(std::move(loader)), limits_(limits), legacy_(m.format == Format::legacy) {}

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

  Result<uint32_t> persistent_load(Graph& g, uint32_t pid) override {
    const NodeView n = g.at(pid);
    if (n.kind != ValueKind::tuple || n.items.empty()) {
      return make_error(ErrorCode::bad_tensor_args, "persistent id is not a tuple");
    }
    const Items it = n.items;  // a tuple: its items never move
    PTREAD_TRY(std::string_view tag, text_of(g, it[0], "persistent id tag"));
    if (tag == "module" && it.size() >= 2 && legacy_) return module_pid(g, it);  // legacy full-model files
    // torch.load unpacks ('storage', class, key, location, numel) in a zip file and
    // ('storage', class, root key, location, numel, view) in a legacy one, and refuses
    // other counts; torch.jit.load reads the first five items of a TorchScript archive's.
    // Zip and TorchScript are told apart by the directory, which the pickle may be read
    // before: a zip file's refusal waits for it (refusal()).
    if (!equals(tag, "storage") || it.size() < 5 || (legacy_ && it.size() != 6)) {
      return make_error(ErrorCode::bad_tensor_args,
                        "unknown persistent id ('" + std::string(tag) + "' with " + std::to_string(it.size()) +
                            " items); expected ('storage', class, key, location, numel" +
                            (legacy_ ? ", view)" : ")"));
    }
    if (it.size() != 5 && !legacy_) {
      note_zip_refusal(make_error(ErrorCode::bad_tensor_args, "persistent id ('storage', ...) with " +
                                                                  std::to_string(it.size()) +
                                                                  " items in a zip file; torch.load takes 5"));
    }
    return storage_pid(g, it);
  }

  // A legacy file's ('module', class, source file, source): the class. torch.load checks the
  // saved source against the class's (a warning when they differ) by calling
  // _check_container_source(class, file, source) unless an item after the class is
  // empty (falsy), so other counts are refused then.
  static Result<uint32_t> module_pid(Graph& g, const Items& it) {
    bool all_set = true;
    for (size_t k = 2; k < it.size(); ++k) all_set = all_set && python_truthy(g, it[k]);
    if (all_set && it.size() != 4) {
      return make_error(ErrorCode::bad_tensor_args, "persistent id ('module', ...) with " + std::to_string(it.size()) +
                                                        " items; torch.load passes the 3 after the tag to "
                                                        "_check_container_source, which takes 3");
    }
    return it[1];
  }
  // Python's bool() of a value, where ptread can know it (objects, classes and tensors are
  // taken as true, as most are).
  static bool python_truthy(Graph& g, uint32_t v) {
    switch (g.kind(v)) {
      case ValueKind::none: return false;
      case ValueKind::boolean: case ValueKind::integer: return g.at(v).i != 0;
      case ValueKind::floating: return g.at(v).f != 0;
      case ValueKind::string: case ValueKind::bytes: return !g.text(v).empty();
      case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::set: case ValueKind::frozenset:
        return g.count(v) != 0;
      default: return true;
    }
  }

  // What torch.load refuses in a zip file, or torch.jit.load in a TorchScript archive,
  // that the other reads and the pickle held, for the reader to check once the directory
  // says which the archive is; nullptr when nothing.
  const Error* refusal(Format f) const noexcept {
    if (f == Format::zip && zip_refusal_) return &*zip_refusal_;
    if (f == Format::torchscript && script_refusal_) return &*script_refusal_;
    return nullptr;
  }

  // _rebuild_tensor_v2 of a ('storage', class, key, location, numel[, None]) persistent id,
  // with an empty OrderedDict of hooks and no metadata, as torch.save writes each tensor:
  // what persistent_load, call(OrderedDict, ()) and call(fn, args) make of it, or kNoNode
  // for anything else (and for anything that would be an error: the VM then reports it).
  uint32_t tensor_run(Graph& g, const TensorRun& r) override {
    DType dtype = run_.dtype;
    // The callable, tag, storage class and hooks class of the last run taken: nodes never
    // change, so the same four need no second look.
    if (r.fn != run_.fn || r.tag != run_.tag || r.cls != run_.cls || r.hooks_cls != run_.hooks_cls) {
      if (global_tag(g, r.fn) != kRebuildTensorV2 || g.kind(r.hooks_cls) != ValueKind::global ||
          global_tag(g, r.hooks_cls) != kOrderedDict || !g.is_string(r.tag, "storage") ||
          g.kind(r.cls) != ValueKind::global || !storage_class_dtype(g, r.cls, &dtype)) {
        return kNoNode;
      }
      run_ = RunClasses{r.fn, r.tag, r.cls, r.hooks_cls, dtype};
    }
    if (PTREAD_UNLIKELY(r.pid_none != legacy_)) {  // (5 items in zip files, 6 in legacy ones)
      if (!r.pid_none) return kNoNode;  // persistent_load refuses it
      note_zip_refusal(make_error(ErrorCode::bad_tensor_args,
                                  "persistent id ('storage', ...) with 6 items in a zip file; torch.load takes 5"));
    }
    if (PTREAD_UNLIKELY(r.requires_grad && !dtype_is_differentiable(dtype))) return kNoNode;  // rebuild() refuses it
    const bool key_node = r.key != kNoNode;  // else a text in the pickle (copied where the index keeps it)
    if ((key_node && g.kind(r.key) != ValueKind::string) || !is_text(g, r.location) || r.numel < 0 || r.rank > limits_.max_rank) return kNoNode;
    DType stored = dtype;
    const auto storage = find_or_load(g, key_node ? g.text(r.key) : r.key_text, key_node, static_cast<uint64_t>(r.numel), true,
                                      dtype, &stored);
    if (!storage) return kNoNode;
    TensorSpec t;
    t.dims = r.dims;
    t.rank = r.rank;
    t.offset = r.offset;
    t.storage = *storage;
    t.location = r.location;
    t.dtype = stored;
    t.requires_grad = r.requires_grad;
    const auto tensor = add_tensor(g, t, r.rank);
    return tensor ? *tensor : kNoNode;
  }

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

 protected:
  // The dtype of storage class `cls` (a global node; cached in its tag2: 0 unknown yet,
  // 0xff no storage class, else dtype + 1); false when it is no storage class.
  static bool storage_class_dtype(Graph& g, uint32_t cls, DType* dtype) {
    Node& n = g.nodes[cls];
    if (n.tag2 == 0) {
      n.tag2 = dtype_from_storage_class(g.global_name(cls), dtype) ? static_cast<uint8_t>(static_cast<uint8_t>(*dtype) + 1) : 0xff;
    }
    *dtype = static_cast<DType>(n.tag2 - 1);
    return n.tag2 != 0xff;
  }
  // The tag call() acts on for global node fn (cached in its tag).
  static GlobalTag global_tag(Graph& g, uint32_t fn) {
    Node& n = g.nodes[fn];
    if (n.tag == kGlobalUnclassified) n.tag = classify(g.global_module(fn), g.global_name(fn), n.ref != kGlobalNamesAsIs);
    return static_cast<GlobalTag>(n.tag);
  }

  // ('storage', class, key, location, numel[, view_metadata]): a storage node.
  Result<uint32_t> storage_pid(Graph& g, const Items& it) {
    DType dtype;
    const ValueKind ck = g.kind(it[1]);
    if (ck == ValueKind::tensor || ck == ValueKind::storage) {
      // torch.load takes the class's .dtype, which a tensor and a storage have too (a crafted
      // file's; torch.jit.load wants a dtype there and refuses them).
      dtype = ck == ValueKind::tensor ? m_.specs[g.at(it[1]).ref].dtype : static_cast<DType>(g.nodes[it[1]].i & 0xff);
      note_refusal(Format::torchscript, make_error(ErrorCode::unknown_storage_class,
                                                   std::string("a ") + value_kind_name(ck) +
                                                       " as a persistent id's storage class in a TorchScript archive"));
    } else if (ck == ValueKind::global) {
      if (!storage_class_dtype(g, it[1], &dtype)) {
        std::string full(g.global_module(it[1]));
        full += '.';
        full += g.global_name(it[1]);
        return make_error(ErrorCode::unknown_storage_class, "unknown storage class '" + full + "'");
      }
    } else {
      PTREAD_TRY(std::string_view cls, text_of(g, it[1], "storage class"));
      if (!dtype_from_storage_class(cls, &dtype)) {
        return make_error(ErrorCode::unknown_storage_class, "unknown storage class '" + std::string(cls) + "'");
      }
    }
    std::string_view key;
    char digits[24];
    PTREAD_TRY(const bool int_key, storage_key(g, it[2], digits, &key));
    const uint32_t location = storage_location_node(g, it[3]);
    // The element count: torch.load multiplies it by the element size at a key's first
    // reference (a bool counts 0 or 1) and never reads a later one's; a legacy file's pickle
    // multiplies every one, so there it must be something Python multiplies by an int.
    const ValueKind nk = g.kind(it[4]);
    const int64_t count = nk == ValueKind::integer || nk == ValueKind::boolean ? g.at(it[4]).i : -1;
    if (legacy_ && nk != ValueKind::integer && nk != ValueKind::big_integer && nk != ValueKind::boolean &&
        nk != ValueKind::floating && nk != ValueKind::string && nk != ValueKind::bytes && nk != ValueKind::list &&
        nk != ValueKind::tuple) {
      return make_error(ErrorCode::bad_tensor_args, "storage '" + std::string(key) + "' has an element count that is a " +
                                                        value_kind_name(nk) + " (torch refuses it)");
    }
    DType stored = dtype;  // the storage's: its first reference's
    PTREAD_TRY(uint32_t index, find_or_load(g, key, !int_key, static_cast<uint64_t>(count), count >= 0, dtype, &stored, int_key));
    if (legacy_ && g.kind(it[5]) != ValueKind::none) {  // (a legacy id has 6 items; others' sixth is unread)
      if (placeholders_) {
        return make_error(ErrorCode::unsupported_format, "storage view metadata with placeholder storages");
      }
      // A view is of this reference's dtype (its offset and size count its elements), and
      // again the first reference of its own key makes it.
      PTREAD_TRY(index, storage_view(g, it[5], index, dtype));
      stored = storage_dtype(index);
    }
    return g.emit_int(ValueKind::storage, index, static_cast<int64_t>((uint64_t{location} << 8) | static_cast<uint8_t>(stored)));
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

 public:
  Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) override {
    if (g.kind(callable) != ValueKind::global) return g.add_object(callable, args);
    const GlobalTag tag = global_tag(g, callable);
    const Items a = g.at(args).items;  // a tuple: its items never move
    switch (tag) {
      case kRebuildTensorV2: return rebuild(g, a, RebuildKind::v2);
      case kRebuildTensorV3: return rebuild(g, a, RebuildKind::v3);
      case kRebuildTensorV1: return rebuild(g, a, RebuildKind::v1);
      case kRebuildParameter: {
        const size_t n = g.global_name(callable) == "_rebuild_parameter" ? 3 : 4;  // _with_state: 4
        return parameter(g, a, n, n);
      }
      case kRebuildDeviceFromCpu:
        if (!a.empty() && g.kind(a[0]) == ValueKind::tensor) return a[0];
        return unsupported_call(g, callable);
      case kRebuildUnsupported: return unsupported_call(g, callable);
      case kRebuildQTensor: return qtensor(g, a);
      case kRebuildSparse: return sparse(g, a, g.global_name(callable) == "_rebuild_sparse_csr_tensor");
      case kRebuildFromTypeV2:
        if (a.size() != 4 || g.kind(a[2]) != ValueKind::tuple) {
          return make_error(ErrorCode::bad_tensor_args,
                            "_rebuild_from_type_v2 takes (func, type, args, state), args a tuple (torch refuses anything else)");
        }
        PTREAD_CHECK(check_from_type_state(g, a[3]));
        return from_type(g, a[0], a[1], a[2], a[3]);
      case kOrderedDict: case kDictLike: return dict_call(g, callable, a);
      case kBuiltinSet: case kBuiltinFrozenset: {  // set(), set(iterable): a list or tuple (what pickle writes), a set, a dict's keys
        const ValueKind made = tag == kBuiltinSet ? ValueKind::set : ValueKind::frozenset;
        if (a.empty()) return g.add_container(made);
        const ValueKind of = g.kind(a[0]);
        if (a.size() == 1 && (of == ValueKind::list || of == ValueKind::tuple || of == ValueKind::set || of == ValueKind::frozenset)) {
          const Items items = g.at(a[0]).items;
          PTREAD_CHECK(spend(items.size(), "set()"));
          return g.add_container(made, items.data(), items.size());
        }
        if (a.size() == 1 && of == ValueKind::dict) {
          const Items kv = g.at(a[0]).items;
          PTREAD_CHECK(spend(kv.size() / 2, "set()"));
          std::vector<uint32_t> keys;
          for (size_t k = 0; k < kv.size(); k += 2) keys.push_back(kv[k]);
          return g.add_container(made, keys.data(), keys.size());
        }
        if (a.size() == 1 && (of == ValueKind::string || of == ValueKind::bytes)) {
          // a str's characters (one-character strs), a bytes' bytes (ints); the set keeps
          // each once (DictKeys, at STOP)
          const std::string_view t = g.text(a[0]);
          PTREAD_CHECK(spend(t.size(), "set()"));
          std::vector<uint32_t> items;
          for (size_t k = 0; k < t.size();) {
            uint32_t cp = 0;
            const size_t n = of == ValueKind::string ? std::max<size_t>(utf8_next(t, k, &cp), 1) : 1;  // (valid UTF-8)
            items.push_back(of == ValueKind::string ? g.add_text(ValueKind::string, t.substr(k, n))
                                                    : g.add_int(static_cast<uint8_t>(t[k])));
            k += n;
          }
          return g.add_container(made, items.data(), items.size());
        }
        return make_error(ErrorCode::pickle_malformed, std::string(tag == kBuiltinSet ? "set" : "frozenset") + "() of " +
                                                           (a.size() == 1 ? std::string("a ") + value_kind_name(of) : std::to_string(a.size()) + " arguments") +
                                                           " (ptread reads set() of lists, tuples, sets, dicts, strs and bytes)");
      }
      case kBuiltinBytes: case kBuiltinBytearray:  // protocols 0-2 pickle b'' as bytes()
        return bytes_call(g, a, tag == kBuiltinBytes ? "bytes" : "bytearray");
      case kTorchSize: return torch_size(g, callable, args, a);
      case kCodecsEncode:
        // protocols 0-2 write bytes as _codecs.encode(latin-1 text, 'latin1')
        return codecs_encode(g, a);
      case kNumpyReconstruct:
        // numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b'), then BUILD
        if (!a.empty()) return g.add_object(a[0], args);
        break;
      case kNumpyScalar:
        if (a.size() == 2) return numpy_scalar(g, callable, args, a);
        break;
      case kCopyregReconstructor:
        if (!a.empty()) return g.add_object(a[0], g.add_container(ValueKind::tuple));
        break;
      case kOldVariable:
        // torch 0.3: Parameter(data, requires_grad) / Variable(data) by REDUCE
        if (!a.empty() && g.kind(a[0]) == ValueKind::tensor) return parameter(g, a, 1, a.size());  // (as lenient as before)
        break;
      case kPickleStorageType: {
        // torch.load's unpickler (zip, legacy and tar files) finds a StorageType object
        // there, which cannot be called; torch.jit.load's (TorchScript) finds other things.
        Error e = make_error(ErrorCode::pickle_malformed, "the storage class '" +
                                                              std::string(g.global_module(callable)) + "." +
                                                              std::string(g.global_name(callable)) +
                                                              "' called; torch.load reads it as a StorageType, which "
                                                              "cannot be");
        if (m_.format == Format::legacy || m_.format == Format::tar) return e;
        note_zip_refusal(std::move(e));
        break;
      }
      case kTorchInstance:
        return make_error(ErrorCode::pickle_malformed, "'torch." + std::string(g.global_name(callable)) + "', a " +
                                                           torch_instance_type(g.global_name(callable)) +
                                                           ", called (it is no callable: torch.load refuses it)");
      case kGlobalUnclassified: case kGlobalOther:
        break;
    }
    return g.add_object(callable, args);
  }

  // cls.__new__(cls, *args): Python's unpickler takes only a class (a function, such as a
  // rebuild function, is refused), and a few classes' __new__ leaves what their __init__
  // would fill empty: OrderedDict, defaultdict, Counter, set and bytearray. The others ptread
  // interprets (frozenset, bytes, torch.Size, Parameter) make in __new__ what a call makes.
  Result<uint32_t> new_object(Graph& g, uint32_t cls, uint32_t args) override {
    if (g.kind(cls) == ValueKind::global) {
      switch (global_tag(g, cls)) {
        case kRebuildTensorV2: case kRebuildTensorV3: case kRebuildTensorV1: case kRebuildParameter:
        case kRebuildDeviceFromCpu: case kRebuildUnsupported: case kRebuildFromTypeV2: case kCodecsEncode:
        case kNumpyReconstruct: case kNumpyScalar: case kCopyregReconstructor: case kRebuildQTensor:
        case kRebuildSparse:
          return make_error(ErrorCode::pickle_malformed, "NEWOBJ of the function '" + std::string(g.global_module(cls)) +
                                                             "." + std::string(g.global_name(cls)) +
                                                             "' (Python's unpickler takes only a class)");
        case kTorchInstance:
          return make_error(ErrorCode::pickle_malformed, "NEWOBJ of 'torch." + std::string(g.global_name(cls)) + "', a " +
                                                             torch_instance_type(g.global_name(cls)) +
                                                             " (Python's unpickler takes only a class)");
        case kOrderedDict: case kDictLike: return attrs_dict(g, cls, g.add_container(ValueKind::dict));
        case kBuiltinSet: return g.add_container(ValueKind::set);
        case kBuiltinBytearray: return g.add_text(ValueKind::bytes, "");
        default: break;
      }
    }
    return call(g, cls, args);
  }

  Status build(Graph& g, uint32_t obj, uint32_t state) override {
    Node& n = g.nodes[obj];
    PTREAD_CHECK(check_builtin_build(g, n.kind, n.tag, state));
    switch (n.kind) {
      case ValueKind::global:
        PTREAD_CHECK(check_global_build(g, obj, state));
        PTREAD_CHECK(check_class_build(g, obj, state));
        break;
      case ValueKind::tensor: case ValueKind::quantized: case ValueKind::sparse: case ValueKind::unsupported:
        return tensor_setstate(g, obj, state);
      case ValueKind::storage:  // a TypedStorage: no __setstate__, a __dict__
        return check_default_build(g, "a storage", state);
      default:
        break;
    }
    if (n.kind == ValueKind::object) {
      const uint32_t before = n.items[kObjState];
      if (before == kNoNode) {
        n.items[kObjState] = state;
      } else {
        PTREAD_TRY(uint32_t merged, merged_state(g, before, state));
        n.items[kObjState] = merged;
      }
      const uint32_t cls = n.items[kObjClass];
      if (is_numpy(g, cls, "ndarray")) return numpy_array(g, obj, state);
      // torch 0.1-0.3 pickled Parameters and Variables as Parameter() with the state
      // (data, ...): the object is its data tensor.
      if (is_old_variable(g, cls) && g.kind(state) == ValueKind::tuple && !g.at(state).items.empty()) {
        const Items st = g.at(state).items;
        const uint32_t data = st[0];
        if (g.kind(data) == ValueKind::tensor || g.kind(data) == ValueKind::unsupported) {
          // (data, grad, backward_hooks, requires_grad, volatile): Tensor.__setstate__
          if (g.kind(data) == ValueKind::tensor && st.size() == 5 && g.kind(st[3]) == ValueKind::boolean) {
            m_.specs[g.nodes[data].ref].requires_grad = g.at(st[3]).i != 0;
          }
          g.set_leaf(obj, g.kind(data), g.nodes[data].ref);
        }
      }
    }
    // BUILD on an OrderedDict carries `_metadata` (module versions); on a tensor, Python
    // attributes. Neither changes tensor values or names.
    return {};
  }

 protected:
  // BUILD again on an object (crafted: the pickler writes one per object). Python's default
  // BUILD (and nn.Module's __setstate__) updates the instance's __dict__ and sets its slots,
  // so the attributes of both states hold, a later value replacing an earlier one (the dict
  // made here is in g.hashed: the STOP's DictKeys pass keeps each name once). A state that
  // is no attribute dict (a class's own __setstate__ reads it) replaces the one before.
  // The dict a merge makes is the object's own (kMergedTag): later merges append to it, so
  // N BUILDs copy each state's items once, not N^2 / 2 times. Python updates __dict__ key by
  // key, N BUILDs of an M-key state N x M updates: here all merges of a file append at most
  // 2^22 items (a state given again and again through the memo), beyond which E502.
  Result<uint32_t> merged_state(Graph& g, uint32_t before, uint32_t state) {
    if (g.kind(state) == ValueKind::none) return before;  // BUILD None sets nothing
    uint32_t a[2], sl[2];
    object_state(g, before, &a[0], &sl[0]);
    object_state(g, state, &a[1], &sl[1]);
    auto empty = [&g](uint32_t x) { return x == kNoNode || g.kind(x) == ValueKind::none; };
    for (const uint32_t x : {a[0], a[1]}) {
      if (!empty(x) && g.kind(x) != ValueKind::dict) return state;
    }
    auto concat = [&](const uint32_t* parts) -> Result<uint32_t> {
      if (empty(parts[0]) && empty(parts[1])) return kNoNode;
      const bool own = !empty(parts[0]) && g.nodes[parts[0]].tag == kMergedTag;
      size_t adding = 0;
      for (size_t k = own ? 1 : 0; k < 2; ++k) adding += empty(parts[k]) ? 0 : g.count(parts[k]);
      if (adding > merge_budget_) {
        return make_error(ErrorCode::limit_exceeded, "objects given BUILD again and again: the merged states passed 2^22 items in one file");
      }
      merge_budget_ -= adding;
      uint32_t d = parts[0];
      if (!own) {
        d = g.add_container(ValueKind::dict);
        g.nodes[d].tag = kMergedTag;
      }
      for (size_t k = own ? 1 : 0; k < 2; ++k) {
        if (!empty(parts[k])) g.append(d, g.at(parts[k]).items.data(), g.at(parts[k]).items.size());
      }
      return d;
    };
    PTREAD_TRY(const uint32_t attrs, concat(a));
    PTREAD_TRY(const uint32_t slots, concat(sl));
    if (slots == kNoNode) return attrs == kNoNode ? state : attrs;
    const uint32_t pair[2] = {attrs == kNoNode ? kNoneNode : attrs, slots};
    return g.add_container(ValueKind::tuple, pair, 2);
  }

  enum class RebuildKind { v1, v2, v3 };

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

  // What call() does with module.name. py2: Python 2 module names stand for their Python
  // 3 modules, as Python's find_class() maps them below protocol 3 (fix_imports).
  static GlobalTag classify(std::string_view mod, std::string_view name, bool py2) {
    if (is_pickle_storage_type(name)) return kPickleStorageType;
    if (mod == "torch._utils") {
      if (name == "_rebuild_tensor_v2") return kRebuildTensorV2;
      if (name == "_rebuild_tensor_v3") return kRebuildTensorV3;
      if (name == "_rebuild_tensor") return kRebuildTensorV1;
      if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state") return kRebuildParameter;
      if (name == "_rebuild_device_tensor_from_cpu_tensor") return kRebuildDeviceFromCpu;
      if (name == "_rebuild_qtensor") return kRebuildQTensor;
      if (name == "_rebuild_sparse_tensor" || name == "_rebuild_sparse_csr_tensor") return kRebuildSparse;
      if (unsupported_rebuild(name)) return kRebuildUnsupported;
      return kGlobalOther;
    }
    if (mod == "torch._tensor" && name == "_rebuild_from_type_v2") return kRebuildFromTypeV2;
    if (mod == "collections") {
      if (name == "OrderedDict") return kOrderedDict;
      if (name == "defaultdict" || name == "Counter") return kDictLike;
      return kGlobalOther;
    }
    if (mod == "builtins" || (py2 && mod == "__builtin__")) {
      if (name == "set") return kBuiltinSet;
      if (name == "frozenset") return kBuiltinFrozenset;
      if (name == "bytes") return kBuiltinBytes;
      if (name == "bytearray") return kBuiltinBytearray;
      return kGlobalOther;
    }
    if (mod == "torch" && name == "Size") return kTorchSize;
    if (mod == "torch" && torch_instance_type(name) != nullptr) return kTorchInstance;
    if (mod == "_codecs" && name == "encode") return kCodecsEncode;
    if (is_numpy_module(mod)) {
      if (name == "_reconstruct") return kNumpyReconstruct;
      if (name == "scalar") return kNumpyScalar;
      return kGlobalOther;
    }
    if ((mod == "copyreg" || (py2 && mod == "copy_reg")) && name == "_reconstructor") return kCopyregReconstructor;
    if ((mod == "torch.nn.parameter" && name == "Parameter") || (mod == "torch.autograd.variable" && name == "Variable")) {
      return kOldVariable;
    }
    return kGlobalOther;
  }

  // collections.OrderedDict(x), Counter(x) and defaultdict(factory, x), as Python makes
  // them. Their __reduce__ give Counter(dict), defaultdict(factory) and OrderedDict() with
  // the items set after, and protocols 0-1 OrderedDict([(k, v), ...]); x may be a dict,
  // or for OrderedDict and defaultdict a list or tuple of pairs (Counter would count a
  // list's items: refused), and Counter(None) is empty. What Python refuses (more
  // arguments, an x of another kind, a factory that is no class, function or object) is
  // an error, never a dict made of part of the arguments.
  Result<uint32_t> dict_call(Graph& g, uint32_t callable, const Items& a) {
    const std::string_view name = g.global_name(callable);
    const bool factory = name == "defaultdict", counter = name == "Counter";
    auto refuse = [&](const std::string& why) {
      return make_error(ErrorCode::pickle_malformed, "collections." + std::string(name) + "() " + why);
    };
    if (factory && !a.empty()) {
      const ValueKind f = g.kind(a[0]);
      if (f != ValueKind::none && f != ValueKind::global && f != ValueKind::object) {
        return refuse(std::string("with a default factory that is a ") + value_kind_name(f) + ", which cannot be called");
      }
    }
    const size_t at = factory ? 1 : 0;  // the argument with the items
    if (a.size() > at + 1) {
      return refuse("of " + std::to_string(a.size()) + " arguments (Python takes at most " + std::to_string(at + 1) + ")");
    }
    const uint32_t d = attrs_dict(g, callable, g.add_container(ValueKind::dict));
    if (a.size() <= at) return d;  // (defaultdict() has no factory either)
    const uint32_t x = a[at];
    const ValueKind k = g.kind(x);
    if (k == ValueKind::dict) {
      const Items kv = g.at(x).items;
      PTREAD_CHECK(spend(kv.size(), "collections' dicts"));
      g.append(d, kv.data(), kv.size());
      return d;
    }
    if (counter && k == ValueKind::none) return d;
    if (!counter && (k == ValueKind::list || k == ValueKind::tuple)) {
      const Items pairs = g.at(x).items;
      PTREAD_CHECK(spend(2 * pairs.size(), "collections' dicts"));
      for (uint32_t pair : pairs) {
        const NodeView pn = g.at(pair);
        if ((pn.kind != ValueKind::tuple && pn.kind != ValueKind::list) || pn.items.size() != 2) {
          return refuse("item is not a pair");
        }
        const uint32_t kv[2] = {pn.items[0], pn.items[1]};
        g.append(d, kv, 2);
      }
      return d;
    }
    return refuse(std::string("of a ") + value_kind_name(k) + " (ptread reads a dict" +
                  (counter ? std::string(" or None)") : std::string(", or a list or tuple of pairs)")));
  }

  // Dict node d as made by callable (a class of collections): tagged kAttrsTag when its
  // instances take attributes (OrderedDict, Counter; a defaultdict has no __dict__).
  static uint32_t attrs_dict(Graph& g, uint32_t callable, uint32_t d) {
    if (g.global_name(callable) != "defaultdict") g.nodes[d].tag = kAttrsTag;
    return d;
  }

  // A torch._utils rebuild function ptread cannot hand out a tensor for.
  uint32_t unsupported_call(Graph& g, uint32_t fn) {
    const std::string_view name = g.global_name(fn);
    return unsupported(g, std::string(unsupported_rebuild(name)) + " (torch._utils." + std::string(name) + ") is not supported");
  }

  // Whether node i is text: str or bytes (torch.load takes either for persistent ids).
  PTREAD_ALWAYS_INLINE static bool is_text(const Graph& g, uint32_t i) {
    return g.kind(i) == ValueKind::string || g.kind(i) == ValueKind::bytes;
  }
  PTREAD_ALWAYS_INLINE static Result<std::string_view> text_of(const Graph& g, uint32_t i, const char* what) {
    if (is_text(g, i)) return g.text(i);
    return make_error(ErrorCode::bad_tensor_args, std::string(what) + " is a " + value_kind_name(g.kind(i)) + ", not a string");
  }

  // The codec Python's codecs.lookup() finds for an encoding name, of those ptread
  // encodes with: the name normalized as CPython does (_Py_normalize_encoding: ASCII
  // letters lowercased, letters, digits and '.' kept, any other run of bytes one '_'
  // between them), then looked up in encodings.aliases (Python 3.11), again with '.' as
  // '_', else taken as the name of a module of the encodings package.
  enum class Codec { latin1, utf8, ascii, other };
  static Codec python_codec(std::string_view name) {
    std::string norm;
    bool punct = false;
    for (char c : name) {
      const char l = ascii_lower(c);
      if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.') {
        if (punct && !norm.empty()) norm.push_back('_');
        norm.push_back(l);
        punct = false;
      } else {
        punct = true;
      }
    }
    static const char* const kLatin1[] = {"8859", "cp819", "csisolatin1", "ibm819", "iso8859", "iso8859_1", "iso_8859_1",
                                          "iso_8859_1_1987", "iso_ir_100", "l1", "latin", "latin1"};
    static const char* const kUtf8[] = {"cp65001", "u8", "utf", "utf8", "utf8_ucs2", "utf8_ucs4"};
    static const char* const kAscii[] = {"646", "ansi_x3.4_1968", "ansi_x3.4_1986", "ansi_x3_4_1968", "cp367", "csascii",
                                         "ibm367", "iso646_us", "iso_646.irv_1991", "iso_ir_6", "us", "us_ascii"};
    auto alias = [](std::string_view n) {
      auto in = [n](const auto& names) {
        return std::any_of(std::begin(names), std::end(names), [n](const char* k) { return n == k; });
      };
      return in(kLatin1) ? Codec::latin1 : in(kUtf8) ? Codec::utf8 : in(kAscii) ? Codec::ascii : Codec::other;
    };
    Codec c = alias(norm);
    if (c != Codec::other) return c;
    std::string underscored = norm;
    std::replace(underscored.begin(), underscored.end(), '.', '_');
    c = alias(underscored);
    if (c != Codec::other) return c;
    // Modules: latin_1, iso8859_1 (its table is latin-1's), charmap (latin-1 without a
    // mapping), utf_8, ascii. (A name with a '.' names no module.)
    if (norm == "latin_1" || norm == "iso8859_1" || norm == "charmap") return Codec::latin1;
    if (norm == "utf_8") return Codec::utf8;
    if (norm == "ascii") return Codec::ascii;
    return Codec::other;
  }

  // Items and bytes the builtin calls copy or make (set(x), bytes(x), bytes(n),
  // _codecs.encode(s), OrderedDict(x), torch.Size(x)). The memo gives one value to a call
  // again and again (a pickle of a few bytes a call), so all the calls of a file share
  // one budget, Limits::max_container_items, rather than each its own: beyond it E502.
  Status spend(uint64_t n, const char* what) {
    if (n > call_budget_) {
      return make_error(ErrorCode::limit_exceeded, std::string(what) +
                                                       ": the builtin calls of this file copy or make more than Limits::max_container_items items or bytes");
    }
    call_budget_ -= n;
    return {};
  }

  // bytes(...) and bytearray(...) (ptread's bytes both) as Python makes them: of nothing;
  // of bytes; of a str with an encoding (and errors), as _codecs.encode; of an int n, n
  // zero bytes (within spend()'s budget); of a list or tuple of ints in
  // [0, 256). What Python refuses is an error, and so is what ptread does not read (a set's
  // or dict's ints: Python takes them in its hash order).
  Result<uint32_t> bytes_call(Graph& g, const Items& a, const char* name) {
    auto refuse = [&](const std::string& why) {
      return make_error(ErrorCode::pickle_malformed, std::string(name) + "() " + why);
    };
    if (a.empty()) return g.add_text(ValueKind::bytes, "");
    if (a.size() > 3) return refuse("of " + std::to_string(a.size()) + " arguments (Python takes at most 3)");
    const ValueKind of = g.kind(a[0]);
    if (of == ValueKind::string) {
      if (a.size() == 1) return refuse("of a str without an encoding (Python refuses it)");
      return codecs_encode(g, a);
    }
    if (a.size() > 1) return refuse(std::string("of a ") + value_kind_name(of) + " with an encoding (Python refuses it)");
    if (of == ValueKind::bytes) return g.add_interned_text(ValueKind::bytes, g.text(a[0]));
    if (of == ValueKind::integer || of == ValueKind::boolean) {
      const int64_t n = g.at(a[0]).i;
      if (n < 0) return refuse("of a negative count (Python refuses it)");
      PTREAD_CHECK(spend(static_cast<uint64_t>(n), name));
      return g.add_text(ValueKind::bytes, std::string(static_cast<size_t>(n), '\0'));
    }
    if (of == ValueKind::list || of == ValueKind::tuple) {
      const Items items = g.at(a[0]).items;
      PTREAD_CHECK(spend(items.size(), name));
      std::string out;
      out.reserve(items.size());
      for (const uint32_t v : items) {
        const ValueKind k = g.kind(v);
        if (k != ValueKind::integer && k != ValueKind::boolean) {
          return refuse(std::string("of a ") + value_kind_name(of) + " holding a " + value_kind_name(k) + " (Python takes ints)");
        }
        const int64_t b = g.at(v).i;
        if (b < 0 || b > 255) return refuse("of a byte value " + std::to_string(b) + " (Python takes 0 to 255)");
        out.push_back(static_cast<char>(b));
      }
      return g.add_text(ValueKind::bytes, out);
    }
    return refuse(std::string("of a ") + value_kind_name(of) + " (ptread reads bytes of nothing, bytes, a str with an encoding, an int, a list or tuple of ints)");
  }

  // _codecs.encode(obj, encoding='utf-8', errors='strict') as Python calls it, for the
  // codecs ptread reads, as Python's codecs spell them (python_codec): latin-1, UTF-8 (the
  // default) or ASCII (text codecs: obj must be a str). What Python refuses (other
  // counts, an encoding or errors that is no str, obj of another type, text the codec
  // cannot encode) is an error, and so is a codec ptread does not read.
  Result<uint32_t> codecs_encode(Graph& g, const Items& a) {
    if (a.empty() || a.size() > 3) {
      return make_error(ErrorCode::pickle_malformed, "_codecs.encode of " + std::to_string(a.size()) +
                                                         " arguments (Python takes 1 to 3)");
    }
    Codec codec = Codec::utf8;
    if (a.size() >= 2) {
      if (g.kind(a[1]) != ValueKind::string) return make_error(ErrorCode::pickle_malformed, "_codecs.encode with an encoding that is no string");
      codec = python_codec(g.text(a[1]));
    }
    if (a.size() == 3 && g.kind(a[2]) != ValueKind::string) {
      return make_error(ErrorCode::pickle_malformed, "_codecs.encode with errors that are no string");
    }
    for (size_t k = 1; k < a.size(); ++k) {  // (Python's C strings)
      if (g.text(a[k]).find('\0') != std::string_view::npos) {
        return make_error(ErrorCode::pickle_malformed, "_codecs.encode with a NUL in its encoding or errors (Python: embedded null character)");
      }
    }
    const bool known = codec == Codec::latin1 || codec == Codec::utf8 || codec == Codec::ascii;
    if (known && g.kind(a[0]) != ValueKind::string) {
      return make_error(ErrorCode::pickle_malformed, std::string("_codecs.encode of a ") + value_kind_name(g.kind(a[0])) +
                                                         " (a text codec encodes a str)");
    }
    const std::string_view text = known ? g.text(a[0]) : std::string_view();
    PTREAD_CHECK(spend(text.size(), "_codecs.encode()"));
    if (codec == Codec::latin1) {
      PTREAD_TRY(std::string raw, utf8_to_latin1(text));
      return g.add_text(ValueKind::bytes, raw);
    }
    const bool utf8 = codec == Codec::utf8;
    const bool ascii = codec == Codec::ascii;
    if (utf8 || ascii) {
      for (char c : text) {
        if (ascii && static_cast<unsigned char>(c) >= 0x80) return make_error(ErrorCode::pickle_malformed, "_codecs.encode text is not ASCII");
      }
      if (!utf8_valid(text)) return make_error(ErrorCode::pickle_malformed, "_codecs.encode of text with a lone surrogate");
      return g.add_text(ValueKind::bytes, text);
    }
    return make_error(ErrorCode::pickle_malformed, "_codecs.encode to '" + std::string(g.text(a[1]).substr(0, 40)) +
                                                       "' (ptread reads latin-1, UTF-8 and ASCII)");
  }

  static Result<std::string> utf8_to_latin1(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
      const auto c = static_cast<uint8_t>(s[k]);
      if (c < 0x80) {
        out.push_back(static_cast<char>(c));
      } else if ((c & 0xe0) == 0xc0 && k + 1 < s.size() && c <= 0xc3) {
        out.push_back(static_cast<char>(((c & 0x1f) << 6) | (static_cast<uint8_t>(s[k + 1]) & 0x3f)));
        ++k;
      } else {
        return make_error(ErrorCode::pickle_malformed, "_codecs.encode text is not latin-1");
      }
    }
    return out;
  }

  static const char* unsupported_rebuild(std::string_view name) {
    if (name == "_rebuild_nested_tensor") return "nested tensor";
    if (name == "_rebuild_meta_tensor_no_storage") return "meta tensor without data";
    if (name == "_rebuild_wrapper_subclass") return "wrapper-subclass tensor without data";
    if (name == "_rebuild_device_tensor_from_numpy" || name == "_rebuild_xla_tensor") return "device tensor from numpy";
    if (name == "_rebuild_device_tensor_from_cpu_tensor") return "device tensor";
    return nullptr;
  }

  static bool is_old_variable(const Graph& g, uint32_t cls) {
    if (g.kind(cls) != ValueKind::global) return false;
    const std::string_view mod = g.global_module(cls), name = g.global_name(cls);
    return (mod == "torch.nn.parameter" && name == "Parameter") || (mod == "torch.autograd.variable" && name == "Variable");
  }

  // ---- numpy (numpy.core.multiarray before numpy 2, numpy._core.multiarray since) ----
  static bool is_numpy_module(std::string_view mod) {
    return mod == "numpy.core.multiarray" || mod == "numpy._core.multiarray";
  }
  static bool is_numpy(const Graph& g, uint32_t cls, const char* name) {
    return g.kind(cls) == ValueKind::global && g.global_module(cls) == "numpy" && g.global_name(cls) == name;
  }

  // A numpy.dtype object: numpy.dtype('f8', False, True) with BUILD state (3, '<', ...).
  struct NumpyType {
    DType dtype;
    bool big_endian;
  };
  static Result<NumpyType> numpy_dtype(const Graph& g, uint32_t d);

  static Result<std::shared_ptr<const Storage>> owned_copy(std::string_view bytes, size_t swap_unit);

  Status numpy_array(Graph& g, uint32_t obj, uint32_t state);

  Result<uint32_t> numpy_scalar(Graph& g, uint32_t callable, uint32_t args, const Items& a);

  uint32_t unsupported(Graph& g, std::string reason) {
    m_.unsupported.push_back(std::move(reason));
    return g.emit_int(ValueKind::unsupported, static_cast<uint32_t>(m_.unsupported.size() - 1), 0);
  }

  // Sizes and strides: how many (a tuple or list of at most Limits::max_rank) ...
  PTREAD_ALWAYS_INLINE Result<size_t> dims_count(const Graph& g, uint32_t i, const char* what) const {
    const ValueKind k = g.kind(i);
    if (k != ValueKind::tuple && k != ValueKind::list) {
      return make_error(ErrorCode::bad_tensor_args, std::string(what) + " is a " + value_kind_name(k) + ", not a tuple");
    }
    const size_t count = g.count(i);
    if (count > limits_.max_rank) {
      return make_error(ErrorCode::limit_exceeded, std::string(what) + " has " + std::to_string(count) +
                                                       " dimensions (Limits::max_rank)");
    }
    return count;
  }
  // ... and their values (ints), copied to out when it is given: into the graph's arena,
  // as a list could still grow later. With `set_args`, as torch's argument parser takes the
  // sizes and strides of Tensor.set_ (the rebuild functions): it checks the first item's
  // type alone, so a bool after it is an int, 0 or 1 (torch 1.13 reads (2, False) as
  // [2, 0] and refuses (False, 2)).
  PTREAD_ALWAYS_INLINE static Status read_dims(const Graph& g, uint32_t i, const char* what, int64_t* out,
                                               bool set_args = false) {
    const Items items = g.at(i).items;
    for (size_t k = 0; k < items.size(); ++k) {
      const Node& e = g.nodes[items[k]];
      if (e.kind != ValueKind::integer && !(set_args && k > 0 && e.kind == ValueKind::boolean)) {
        return make_error(ErrorCode::bad_tensor_args, std::string(what) + " holds a " + value_kind_name(e.kind));
      }
      if (out) out[k] = e.i;
    }
    return {};
  }
  // dims[rank ...]: the contiguous strides of sizes dims[0 ... rank), as torch computes them
  // (a size of 0 or less counts as 1).
  static Status contiguous_strides(int64_t* dims, size_t rank) {
    int64_t step = 1;
    for (size_t d = rank; d-- > 0;) {
      dims[rank + d] = step;
      const int64_t n = std::max<int64_t>(dims[d], 1);
      if (d > 0 && step > INT64_MAX / n) {
        return make_error(ErrorCode::shape_overflow, "the contiguous strides of the size overflow 64 bits");
      }
      step *= n;
    }
    return {};
  }
  // Room for rank sizes and rank strides.
  static int64_t* new_dims(Graph& g, size_t rank) {
    return rank ? static_cast<int64_t*>(g.arena.allocate(2 * rank * sizeof(int64_t), alignof(int64_t))) : nullptr;
  }

  Result<uint32_t> rebuild(Graph& g, const Items& a, RebuildKind kind) {
    // _rebuild_tensor(storage, offset, size, stride), _rebuild_tensor_v2(..., requires_grad,
    // backward_hooks, metadata=None), _rebuild_tensor_v3(..., backward_hooks, dtype,
    // metadata=None): Python refuses other counts.
    // torch.jit.load's _rebuild_tensor_v2 reads the first five and ignores the rest: in a
    // zip file such a count waits for the directory (refusal()).
    const size_t min_args = kind == RebuildKind::v1 ? 4 : kind == RebuildKind::v2 ? 6 : 7;
    const size_t max_args = kind == RebuildKind::v1 ? 4 : min_args + 1;
    const bool script_reads = kind == RebuildKind::v2 && !legacy_ && a.size() >= 5;
    const bool python_reads = a.size() >= min_args && a.size() <= max_args;
    if ((!python_reads && !script_reads) || g.kind(a[0]) != ValueKind::storage || g.kind(a[1]) != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args,
                        "tensor rebuild arguments are malformed (" + std::to_string(a.size()) +
                            " arguments, first is a " + value_kind_name(g.kind(a.empty() ? 0 : a[0])) + ")");
    }
    if (!python_reads) {
      note_zip_refusal(make_error(ErrorCode::bad_tensor_args, "_rebuild_tensor_v2 with " + std::to_string(a.size()) +
                                                                  " arguments in a zip file (torch.load takes 6 or 7)"));
    }
    const Node& sn = g.nodes[a[0]];  // ref: the storage; i: dtype, location node << 8
    const uint32_t storage = sn.ref;
    const uint32_t location = static_cast<uint32_t>(static_cast<uint64_t>(sn.i) >> 8);
    DType dtype = static_cast<DType>(sn.i & 0xff);
    size_t meta_index = 6;
    if (kind == RebuildKind::v3) {
      const uint32_t d = a[6];
      if (g.kind(d) != ValueKind::global) return make_error(ErrorCode::bad_tensor_args, "_rebuild_tensor_v3 dtype is not a global");
      Node& dn = g.nodes[d];  // tag3: 0 unknown yet, 0xff no torch dtype, else dtype + 1
      if (dn.tag3 == 0) {
        dn.tag3 = g.global_module(d) == "torch" && dtype_from_torch_name(g.global_name(d), &dtype)
                      ? static_cast<uint8_t>(static_cast<uint8_t>(dtype) + 1)
                      : 0xff;
      }
      if (dn.tag3 == 0xff) {
        return make_error(ErrorCode::unknown_dtype,
                          "unknown dtype '" + std::string(g.global_module(d)) + "." + std::string(g.global_name(d)) + "'");
      }
      dtype = static_cast<DType>(dn.tag3 - 1);
      meta_index = 7;
    }
    PTREAD_TRY(size_t rank, dims_count(g, a[2], "size"));
    int64_t* dims = new_dims(g, rank);
    PTREAD_CHECK(read_dims(g, a[2], "size", dims, true));
    size_t stride_rank = rank;
    const ValueKind stride_kind = g.kind(a[3]);
    if (stride_kind == ValueKind::none ||
        ((stride_kind == ValueKind::tuple || stride_kind == ValueKind::list) && g.count(a[3]) == 0)) {
      // Tensor.set_ takes a stride of None, or an empty one, as the size's contiguous strides
      // (torch 1.13 reads _rebuild_tensor_v2(s, 0, (2, 3), None, ...) with strides (3, 1)).
      PTREAD_CHECK(contiguous_strides(dims, rank));
    } else {
      PTREAD_TRY(stride_rank, dims_count(g, a[3], "stride"));
      PTREAD_CHECK(read_dims(g, a[3], "stride", stride_rank == rank ? dims + rank : nullptr, true));
    }
    TensorSpec t;
    t.offset = g.at(a[1]).i;
    t.dims = dims;
    t.rank = static_cast<uint32_t>(rank);
    t.storage = storage;
    t.location = location;
    t.dtype = dtype;
    if (kind != RebuildKind::v1) {
      PTREAD_TRY(t.requires_grad, requires_grad_arg(g, a[4], dtype, "tensor"));
    }
    if (a.size() > meta_index && g.kind(a[meta_index]) == ValueKind::dict) {
      const uint32_t md = a[meta_index];
      auto flag = [&](const char* k) {
        uint32_t v = g.dict_get(md, k);
        return v != kNoNode && g.kind(v) == ValueKind::boolean && g.at(v).i != 0;
      };
      t.conj = flag("conj");
      t.neg = flag("neg");
      if (PTREAD_UNLIKELY(t.neg && dtype_is_opaque(dtype))) {  // no value to negate: refused, not guessed
        return make_error(ErrorCode::bad_tensor_args,
                          std::string("a ") + dtype_name(dtype) + " tensor with the neg bit (torch negates no such tensor)");
      }
    }
    return add_tensor(g, t, stride_rank);
  }

  // A tensor node for spec t, once its view is checked against its storage.
  PTREAD_ALWAYS_INLINE Result<uint32_t> add_tensor(Graph& g, const TensorSpec& t, size_t stride_rank) {
    int64_t numel = 0;
    auto st = check_view(t.dims, t.rank, t.dims + t.rank, stride_rank, t.offset, t.dtype, m_.storage_table.nbytes(t.storage), &numel);
    if (PTREAD_UNLIKELY(!st) && !grow_legacy_storage(t, stride_rank, st.error())) return std::move(st).error();
    m_.specs.push_back(t);
    return g.emit_int(ValueKind::tensor, static_cast<uint32_t>(m_.specs.size() - 1), 0);
  }

  // A legacy file's storage is torch.UntypedStorage(numel * element size), which the
  // tensor's set_() grows to the view's end when it reaches past it (resize_impl); the
  // bytes after the pickle must then fill the grown size (torch.load checks the count it
  // reads against it). So a view past a storage whose bytes are still to come grows the
  // storage (read_storages checks the count); zip and tar storages are records or read
  // already, and stay an error, as do quantized tensors (_rebuild_qtensor's set_() on a
  // quantized tensor resizes nothing: torch reads past the storage). True when grown.
  PTREAD_NOINLINE bool grow_legacy_storage(const TensorSpec& t, size_t stride_rank, const Error& e) {
    if (!legacy_ || e.code() != ErrorCode::view_out_of_bounds || m_.storage_table.data(t.storage) != nullptr ||
        dtype_is_quantized(t.dtype)) {
      return false;
    }
    // slices (legacy view metadata) torch does not resize, nor a root once sliced
    if (t.storage < sliced_.size() && sliced_[t.storage]) return false;
    int64_t numel = 0;
    if (!check_view(t.dims, t.rank, t.dims + t.rank, stride_rank, t.offset, t.dtype, uint64_t{1} << 62, &numel) || numel == 0) {
      return false;
    }
    uint64_t end = static_cast<uint64_t>(t.offset) + 1;  // (within 2^62 elements: checked above)
    for (uint32_t d = 0; d < t.rank; ++d) end += static_cast<uint64_t>(t.dims[d] - 1) * static_cast<uint64_t>(t.dims[t.rank + d]);
    m_.storage_table.rebind(t.storage, nullptr, end * dtype_size(t.dtype));
    return true;
  }

  Result<uint32_t> qtensor(Graph& g, const Items& a);

  Result<uint32_t> packed_qtensor(Graph& g, const Items& a, QuantSpec* spec);

  Result<uint32_t> sparse(Graph& g, const Items& a, bool csr_only);

  // BUILD on a builtin value (None, a number, str, bytes, list, tuple, set, dict): Python's
  // unpickler finds no __setstate__ and sets the state's items through __dict__, which these
  // have not, so only a state of None (and an empty slot-state dict) passes; an OrderedDict
  // or Counter (kAttrsTag) has one.
  // A BUILD state as Python's default BUILD reads it: (state, slots) when a pair, else the
  // state alone (*slots kNoNode).
  static void split_build_state(const Graph& g, uint32_t state, uint32_t* dict_state, uint32_t* slots) {
    *dict_state = state;
    *slots = kNoNode;
    if (g.kind(state) == ValueKind::tuple && g.count(state) == 2) {
      *dict_state = g.at(state).items[0];
      *slots = g.at(state).items[1];
    }
  }
  // Whether dict node d's keys are all strs (setattr() takes a str).
  static bool str_keys(const Graph& g, uint32_t d) {
    const Items kv = g.at(d).items;
    for (size_t k = 0; k < kv.size(); k += 2) {
      if (g.kind(kv[k]) != ValueKind::string) return false;
    }
    return true;
  }

  static Status check_builtin_build(Graph& g, ValueKind kind, uint8_t tag, uint32_t state) {
    switch (kind) {
      case ValueKind::none: case ValueKind::boolean: case ValueKind::integer: case ValueKind::big_integer:
      case ValueKind::floating: case ValueKind::string: case ValueKind::bytes: case ValueKind::list:
      case ValueKind::tuple: case ValueKind::set: case ValueKind::frozenset: case ValueKind::dict:
        break;
      default:
        return {};
    }
    uint32_t dict_state = kNoNode, slots = kNoNode;
    split_build_state(g, state, &dict_state, &slots);
    if (kind == ValueKind::dict && tag == kAttrsTag) {
      // An OrderedDict or Counter: no __setstate__, so Python's default BUILD, which wants
      // a dict (set in __dict__) or None, and slots as a dict of attribute names or none.
      const ValueKind dk = g.kind(dict_state);
      if (dk != ValueKind::none && dk != ValueKind::dict) {
        return make_error(ErrorCode::pickle_malformed, std::string("BUILD of an OrderedDict or Counter with a state that is a ") +
                                                           value_kind_name(dk) + " (Python's unpickler refuses it: state is not a dictionary)");
      }
      if (slots == kNoNode) return {};
      if (g.kind(slots) != ValueKind::dict) {
        return make_error(ErrorCode::pickle_malformed, std::string("BUILD of an OrderedDict or Counter with slots that are a ") +
                                                           value_kind_name(g.kind(slots)) + " (Python's unpickler refuses it: slot state is not a dictionary)");
      }
      if (!str_keys(g, slots)) {
        return make_error(ErrorCode::pickle_malformed,
                          "BUILD of an OrderedDict or Counter with a slot named by other than a str (Python's setattr() takes a str)");
      }
      return {};
    }
    if (g.kind(dict_state) == ValueKind::none &&
        (slots == kNoNode || (g.kind(slots) == ValueKind::dict && g.count(slots) == 0))) {
      return {};
    }
    return make_error(ErrorCode::pickle_malformed, std::string("BUILD of a ") + value_kind_name(kind) +
                                                       " with a state (Python's unpickler refuses it: a " +
                                                       value_kind_name(kind) + " has no attributes to set)");
  }

  // _rebuild_from_type_v2(func, new_type, args, state): func(*args), made an instance of
  // new_type by Tensor.as_subclass unless new_type is torch.Tensor itself (torch 1.13 then
  // hands out func's result as it is) or the class func is (its result has the type
  // already). as_subclass takes only a subclass of Tensor, and is a method of tensors only:
  // a new_type ptread knows not to be one (a builtin, a collections or numpy class,
  // torch.Size, a storage or legacy tensor type, a function, torch.autograd.Variable,
  // anything but a class), or a result that is no tensor, torch refuses. Other classes (a
  // user's Tensor subclass) are taken as subclasses: the tensor reads as the Tensor it is.
  Result<uint32_t> from_type(Graph& g, uint32_t func, uint32_t new_type, uint32_t args, uint32_t state) {
    const ValueKind tk = g.kind(new_type);
    bool is_tensor_type = false;
    if (tk == ValueKind::global) {
      const std::string_view mod = g.global_module(new_type), name = g.global_name(new_type);
      const bool plain = name == "Tensor" && (mod == "torch" || mod == "torch._tensor");
      const bool made_by_it = g.kind(func) == ValueKind::global && g.global_module(func) == mod &&
                              g.global_name(func) == name && !names_function(g, func);
      is_tensor_type = plain || made_by_it;
      // Parameter's __setstate__ is Tensor's, and the classes ptread knows (made_by_it: a
      // builtin or collections class) have none: torch sets the state's items itself.
      if ((!plain && made_by_it) || (mod == "torch.nn.parameter" && name == "Parameter")) {
        PTREAD_CHECK(check_setattr_state_shape(g, new_type, state));
      }
      if (!is_tensor_type && !maybe_tensor_subclass(g, new_type)) {
        return make_error(ErrorCode::bad_tensor_args, "_rebuild_from_type_v2 of '" + std::string(mod) + "." + std::string(name) +
                                                          "', which is not a subclass of torch.Tensor (torch refuses it in as_subclass)");
      }
    } else if (tk != ValueKind::object && tk != ValueKind::missing) {
      return make_error(ErrorCode::bad_tensor_args, std::string("_rebuild_from_type_v2 of a type that is a ") + value_kind_name(tk) +
                                                        " (torch refuses it: as_subclass takes a class)");
    }
    PTREAD_TRY(const uint32_t made, call(g, func, args));
    if (is_tensor_type) return made;
    switch (g.kind(made)) {
      case ValueKind::tensor: case ValueKind::quantized: case ValueKind::sparse:
      case ValueKind::object: case ValueKind::unsupported: case ValueKind::missing:
        return made;
      default:
        return make_error(ErrorCode::bad_tensor_args, std::string("_rebuild_from_type_v2 whose function made a ") +
                                                          value_kind_name(g.kind(made)) +
                                                          ", not a tensor (torch refuses it: as_subclass is a method of tensors)");
    }
  }
  // Whether a global names a function ptread evaluates (whose result is not an instance of
  // it), not a class.
  static bool names_function(Graph& g, uint32_t glob) {
    switch (global_tag(g, glob)) {
      case kRebuildTensorV2: case kRebuildTensorV3: case kRebuildTensorV1: case kRebuildParameter:
      case kRebuildDeviceFromCpu: case kRebuildUnsupported: case kRebuildFromTypeV2: case kCodecsEncode:
      case kNumpyReconstruct: case kNumpyScalar: case kCopyregReconstructor: case kRebuildQTensor: case kRebuildSparse:
        return true;
      default:
        return false;
    }
  }
  // Whether the class named by a global may be a subclass of torch.Tensor: false for those
  // ptread knows are not.
  static bool maybe_tensor_subclass(Graph& g, uint32_t glob) {
    const std::string_view mod = g.global_module(glob), name = g.global_name(glob);
    switch (global_tag(g, glob)) {
      case kGlobalOther: case kGlobalUnclassified: break;
      case kOldVariable: return name == "Parameter";
      default: return false;  // functions, storage types, builtins, OrderedDict, torch.Size ...
    }
    if (mod == "torch") return false;  // torch.FloatTensor ... (legacy tensor types), dtypes, functions
    return !(mod == "builtins" || mod == "__builtin__" || mod == "collections" || mod == "_codecs" || mod == "copyreg" ||
             mod == "copy_reg" || mod == "torch._utils" || is_numpy_module(mod));
  }

  // _rebuild_from_type_v2's state: torch sets each item of its dict (and of its slots, a
  // state (dict, slots)) on the tensor with setattr() (torch 2.x for every type; 1.13 for a
  // subclass, such as Parameter, whose __setstate__ is Tensor's). An attribute of its own
  // changes no value; `data`, `real` and `imag` give the tensor other data and
  // `requires_grad` changes it (torch 1.13 ignores them on a plain Tensor, 2.x applies
  // them): ptread applies none, so a state that sets one is refused (E406) rather than read
  // with data torch.load would not give. torch.save writes the tensor's __dict__ there.
  static Status check_from_type_state(Graph& g, uint32_t state) {
    uint32_t parts[2] = {state, kNoNode};
    split_build_state(g, state, &parts[0], &parts[1]);
    for (const uint32_t d : parts) {
      if (d == kNoNode || g.kind(d) != ValueKind::dict) continue;
      const Items kv = g.at(d).items;
      for (size_t k = 0; k < kv.size(); k += 2) {
        if (g.kind(kv[k]) != ValueKind::string) continue;
        const std::string_view name = g.text(kv[k]);
        if (name == "data" || name == "real" || name == "imag" || name == "requires_grad") {
          return make_error(ErrorCode::unsupported_tensor, "_rebuild_from_type_v2 with a state that sets the tensor's '" +
                                                               std::string(name) +
                                                               "' (torch sets it with setattr()), which ptread does not apply");
        }
      }
    }
    return {};
  }

  // _rebuild_from_type_v2's state for a Parameter (whose __setstate__ is Tensor's) or an
  // instance of a class with no __setstate__: torch (1.13 and 2.x) takes the state apart
  // itself, and refuses a tuple of other than two items (RuntimeError "Invalid serialized
  // state"), a dict state without items() and slots that are true without items()
  // (AttributeError), and an attribute named by other than a str (setattr()). (A plain
  // Tensor's state torch 1.13 ignores; another class's __setstate__ is its own: neither is
  // checked here. Objects of classes ptread does not know may have items(): taken as having
  // them.)
  static Status check_setattr_state_shape(Graph& g, uint32_t new_type, uint32_t state) {
    const std::string type_name = std::string(g.global_module(new_type)) + "." + std::string(g.global_name(new_type));
    auto refused = [&type_name](const std::string& what, const char* why) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_from_type_v2 of a " + type_name + " with " + what +
                                                        " (torch refuses it: " + why + ")");
    };
    auto mapping = [&g](uint32_t v) { return g.kind(v) == ValueKind::dict || g.kind(v) == ValueKind::object; };
    uint32_t dict_state = state, slots = kNoNode;
    if (g.kind(state) == ValueKind::tuple) {
      if (g.count(state) != 2) {
        return refused("a state tuple of " + std::to_string(g.count(state)) + " items", "Invalid serialized state");
      }
      dict_state = g.at(state).items[0];
      slots = g.at(state).items[1];
    }
    if (!mapping(dict_state)) {
      const ValueKind k = g.kind(dict_state);
      return refused(k == ValueKind::none ? std::string("the state None") : std::string("a state that is a ") + value_kind_name(k),
                     "it has no items()");
    }
    if (slots != kNoNode && python_truthy(g, slots) && !mapping(slots)) {
      return refused(std::string("slots that are a ") + value_kind_name(g.kind(slots)), "they have no items()");
    }
    for (const uint32_t d : {dict_state, slots}) {
      if (d != kNoNode && g.kind(d) == ValueKind::dict && !str_keys(g, d)) {
        return refused("an attribute named by other than a str", "setattr() takes a str");
      }
    }
    return {};
  }

  // Python's default BUILD, of an object with no __setstate__ (`target`, for messages):
  // (state, slots) when a pair; the state None or a dict (its items set in __dict__), the
  // slots a dict (each set by setattr(), which takes a str name).
  static Error build_refused(const std::string& target, const std::string& what, const char* python) {
    return make_error(ErrorCode::pickle_malformed,
                      "BUILD of " + target + " with " + what + " (Python's unpickler refuses it: " + python + ")");
  }
  static Status check_default_build(Graph& g, const std::string& target, uint32_t state) {
    uint32_t dict_state = kNoNode, slots = kNoNode;
    split_build_state(g, state, &dict_state, &slots);
    auto refused = [&](const std::string& what, const char* python) { return build_refused(target, what, python); };
    const ValueKind dk = g.kind(dict_state);
    if (dk != ValueKind::none && dk != ValueKind::dict) {
      return refused(std::string("a state that is a ") + value_kind_name(dk), "state is not a dictionary");
    }
    if (slots != kNoNode && g.kind(slots) != ValueKind::dict) {
      const ValueKind sk = g.kind(slots);
      return refused(sk == ValueKind::none ? std::string("slots that are None") : std::string("slots that are a ") + value_kind_name(sk),
                     "slot state is not a dictionary");
    }
    if (slots != kNoNode && !str_keys(g, slots)) {
      return refused("a slot named by other than a str", "setattr() takes a str");
    }
    return {};
  }

  // BUILD on a global: the class or function itself. A function has no __setstate__ (and
  // a class's own would be called unbound, and fail): Python's default BUILD. A function
  // written in C (_codecs.encode, numpy's _reconstruct and scalar) has no __dict__ at all:
  // only a state of None and no slots to set pass. Parameter's class has Tensor's
  // __setstate__, which no state passes (called on the class, it has no tensor).
  static Status check_global_build(Graph& g, uint32_t glob, uint32_t state) {
    const std::string target = "the global '" + std::string(g.global_module(glob)) + "." + std::string(g.global_name(glob)) + "'";
    PTREAD_CHECK(check_default_build(g, target, state));
    uint32_t dict_state = kNoNode, slots = kNoNode;
    split_build_state(g, state, &dict_state, &slots);
    auto refused = [&](const std::string& what, const char* python) { return build_refused(target, what, python); };
    const ValueKind dk = g.kind(dict_state);
    switch (global_tag(g, glob)) {
      case kOldVariable:  // Parameter has Tensor's __setstate__: called unbound, whatever the state
        if (g.global_name(glob) == "Parameter") return refused("a state", "Tensor.__setstate__ called on no tensor");
        break;
      case kCodecsEncode: case kNumpyReconstruct: case kNumpyScalar:
        if (dk == ValueKind::dict) return refused("a state that is a dict", "a function written in C has no __dict__");
        if (slots != kNoNode && g.count(slots) != 0) {
          return refused("slots to set", "a function written in C has no attributes to set");
        }
        break;
      case kTorchInstance: {  // (as a C function: no __dict__, no attribute to set)
        const std::string type = std::string("a ") + torch_instance_type(g.global_name(glob));
        if (dk == ValueKind::dict) return refused("a state that is a dict", (type + " has no __dict__").c_str());
        if (slots != kNoNode && g.count(slots) != 0) return refused("slots to set", (type + " has no attributes to set").c_str());
        break;
      }
      default:
        break;
    }
    return {};
  }

  // BUILD on a tensor: torch.load calls Tensor.__setstate__(state) (torch/_tensor.py, the
  // same in torch 1.13 and 2.x; no file torch writes has one). 4 items are
  // Tensor.set_(*state), which points the tensor at other data, and 5 replace its data
  // (.data = state[0]): neither is applied here, so the file is refused (E406) rather than
  // read with the data torch.load would not give. 3 items, of a tuple or list, are
  // (requires_grad, _, backward_hooks): requires_grad a bool, true only for floating point
  // and complex dtypes, then the tensor's (any hooks object passes). A state of another
  // length, or with none (None, a number ...), or a str or bytes (whose items are no bool,
  // no storage, no tensor), is refused by torch too (E402). A dict, set or frozenset of 3
  // to 5 items is refused as not applied (E406): its order or length before its keys are
  // deduplicated is not known here. A quantized, sparse or unsupported entry takes a
  // requires_grad of false only (true: E406, not applied).
  Status tensor_setstate(Graph& g, uint32_t obj, uint32_t state) {
    const ValueKind kind = g.kind(obj), sk = g.kind(state);
    const std::string target = std::string("BUILD of a ") + (kind == ValueKind::unsupported ? "tensor ptread cannot read" : value_kind_name(kind));
    auto refused = [&](const std::string& why) {
      return make_error(ErrorCode::bad_tensor_args, target + " with " + why + " (torch refuses it)");
    };
    auto not_applied = [&](const std::string& what) {
      return make_error(ErrorCode::unsupported_tensor, target + " with " + what + ", which ptread does not apply");
    };
    size_t items = 0;
    switch (sk) {
      case ValueKind::tuple: case ValueKind::list:
        items = g.count(state);
        break;
      case ValueKind::dict: case ValueKind::set: case ValueKind::frozenset:
        return not_applied(std::string("a state that is a ") + value_kind_name(sk) + " (Tensor.__setstate__ takes its items)");
      case ValueKind::string: case ValueKind::bytes:
        return refused(std::string("a state that is a ") + value_kind_name(sk) + " (Tensor.__setstate__ takes no item of it)");
      default:
        return refused(std::string("a state that is a ") + value_kind_name(sk) + " (Tensor.__setstate__ takes a sequence)");
    }
    if (items == 4) return not_applied("a state of 4 items (Tensor.__setstate__ calls set_(*state): other data)");
    if (items == 5) return not_applied("a state of 5 items (Tensor.__setstate__ sets .data = state[0]: other data)");
    if (items != 3) {
      return refused("a state of " + std::to_string(items) + " items (Tensor.__setstate__ takes 3, 4 or 5)");
    }
    const uint32_t requires_grad = g.at(state).items[0];
    if (g.kind(requires_grad) != ValueKind::boolean) {
      return refused(std::string("requires_grad a ") + value_kind_name(g.kind(requires_grad)) + ", not a bool");
    }
    const bool on = g.at(requires_grad).i != 0;
    if (kind != ValueKind::tensor) {
      if (on) return not_applied("requires_grad set");
      return {};
    }
    TensorSpec& spec = m_.specs[g.nodes[obj].ref];
    if (on && !dtype_is_differentiable(spec.dtype)) {
      return refused(std::string("requires_grad on a ") + dtype_name(spec.dtype) +
                     " tensor; only floating point and complex tensors can require gradients");
    }
    spec.requires_grad = on;
    return {};
  }

  // torch.Size(), torch.Size(iterable) (by REDUCE or NEWOBJ: Size.__new__ is the same call)
  // as torch builds it: a tuple of ints. An iterable whose items ptread cannot take as ints
  // without running anything (tensors, objects) or whose order it does not know (a set, a
  // dict) keeps the call inert; what torch refuses (more arguments, no iterable, items of
  // other types) is refused.
  Result<uint32_t> torch_size(Graph& g, uint32_t callable, uint32_t args, const Items& a) {
    auto refused = [](const std::string& why) {
      return make_error(ErrorCode::pickle_malformed, "torch.Size() of " + why + " (torch refuses it)");
    };
    if (a.size() > 1) return refused(std::to_string(a.size()) + " arguments");
    if (a.empty()) return g.add_container(ValueKind::tuple);
    const ValueKind of = g.kind(a[0]);
    if (of == ValueKind::bytes) {  // its bytes, as ints
      const std::string_view t = g.text(a[0]);
      PTREAD_CHECK(spend(t.size(), "torch.Size()"));
      std::vector<uint32_t> dims;
      for (const char c : t) dims.push_back(g.add_int(static_cast<uint8_t>(c)));
      return g.add_container(ValueKind::tuple, dims.data(), dims.size());
    }
    if (of == ValueKind::string) {
      if (g.text(a[0]).empty()) return g.add_container(ValueKind::tuple);
      return refused("a str (its items are strs, not ints)");
    }
    if (of == ValueKind::none || of == ValueKind::integer || of == ValueKind::big_integer || of == ValueKind::floating ||
        of == ValueKind::boolean) {
      return refused(std::string(value_kind_name(of)) + ", which is not iterable");
    }
    if (of != ValueKind::tuple && of != ValueKind::list) return g.add_object(callable, args);
    const Items items = g.at(a[0]).items;
    PTREAD_CHECK(spend(items.size(), "torch.Size()"));
    std::vector<uint32_t> dims(items.begin(), items.end());
    for (size_t k = 0; k < dims.size(); ++k) {
      const ValueKind ik = g.kind(dims[k]);
      if (ik == ValueKind::integer) continue;
      if (ik == ValueKind::boolean) {  // an int to torch (__index__)
        dims[k] = g.add_int(g.at(dims[k]).i);
        continue;
      }
      switch (ik) {
        case ValueKind::none: case ValueKind::big_integer: case ValueKind::floating: case ValueKind::string:
        case ValueKind::bytes: case ValueKind::list: case ValueKind::tuple: case ValueKind::dict: case ValueKind::set:
        case ValueKind::frozenset:  // (a big integer: no int64 holds it)
          return refused("an iterable whose item " + std::to_string(k) + " is of kind " + value_kind_name(ik) + ", not an int");
        default:
          return g.add_object(callable, args);  // a tensor or an object: its __index__ is torch's to run
      }
    }
    return g.add_container(ValueKind::tuple, dims.data(), dims.size());
  }

  // BUILD on one of the builtin classes ptread knows (set, frozenset, bytes, bytearray,
  // OrderedDict, Counter, defaultdict, torch.Size; not the global of a function, whose attributes
  // Python sets): no __setstate__, and its __dict__ a read-only mappingproxy, so Python's
  // default BUILD fails unless the state sets nothing (None or {}, slots {}).
  static Status check_class_build(Graph& g, uint32_t cls, uint32_t state) {
    switch (global_tag(g, cls)) {
      case kBuiltinSet: case kBuiltinFrozenset: case kBuiltinBytes: case kBuiltinBytearray: case kOrderedDict:
      case kDictLike: case kTorchSize:
        break;
      default:
        return {};
    }
    uint32_t dict_state = kNoNode, slots = kNoNode;
    split_build_state(g, state, &dict_state, &slots);
    auto empty_dict = [&g](uint32_t x) { return g.kind(x) == ValueKind::dict && g.count(x) == 0; };
    // (Counter is a class written in Python: setattr() sets its attributes, named by strs)
    auto settable = [&](uint32_t x) {
      return g.global_name(cls) == "Counter" && g.kind(x) == ValueKind::dict ? str_keys(g, x) : empty_dict(x);
    };
    if ((g.kind(dict_state) == ValueKind::none || empty_dict(dict_state)) && (slots == kNoNode || settable(slots))) return {};
    return make_error(ErrorCode::pickle_malformed, "BUILD of the class '" + std::string(g.global_module(cls)) + "." +
                                                       std::string(g.global_name(cls)) +
                                                       "' with a state (Python's unpickler refuses it: a builtin class takes no attributes)");
  }

  // A requires_grad argument as torch sets it: a bool, and true only for floating point
  // and complex dtypes (torch refuses an int, None ..., and gradients of others).
  static Result<bool> requires_grad_arg(Graph& g, uint32_t v, DType dtype, const char* what) {
    if (g.kind(v) != ValueKind::boolean) {
      return make_error(ErrorCode::bad_tensor_args, std::string(what) + " rebuild: requires_grad is a " +
                                                        value_kind_name(g.kind(v)) + ", not a bool (torch refuses it)");
    }
    const bool on = g.at(v).i != 0;
    if (on && !dtype_is_differentiable(dtype)) {
      return make_error(ErrorCode::bad_tensor_args, std::string(what) + " rebuild: requires_grad on a " +
                                                        dtype_name(dtype) +
                                                        " tensor; only floating point and complex tensors can "
                                                        "require gradients (torch refuses it)");
    }
    return on;
  }

  // _rebuild_parameter(data, requires_grad, backward_hooks) and _with_state(..., state),
  // and torch 0.3's Parameter(data[, requires_grad]): Parameter(data) takes a tensor
  // (Tensor._make_subclass) or None (torch.empty(0)); anything else is refused, as Python
  // refuses it.
  Result<uint32_t> parameter(Graph& g, const Items& a, size_t min_args, size_t max_args) {
    const ValueKind data = a.empty() ? ValueKind::none : g.kind(a[0]);
    if (a.size() < min_args || a.size() > max_args ||
        (data != ValueKind::tensor && data != ValueKind::unsupported && data != ValueKind::quantized &&
         data != ValueKind::sparse && data != ValueKind::none)) {
      return make_error(ErrorCode::bad_tensor_args,
                        "Parameter rebuild arguments are malformed (" + std::to_string(a.size()) + " arguments" +
                            (a.empty() ? std::string() : std::string(", data is a ") + value_kind_name(data)) + ")");
    }
    bool requires_grad = a.size() > 1 && g.kind(a[1]) == ValueKind::boolean && g.at(a[1]).i != 0;
    if (min_args == max_args) {  // _rebuild_parameter(_with_state): Parameter(data, requires_grad)
      const DType dt = data == ValueKind::tensor ? m_.specs[g.at(a[0]).ref].dtype
                       : data == ValueKind::none ? DType::F32
                                                 : DType::U8;  // quantized, sparse ...: checked as no float
      PTREAD_TRY(requires_grad, requires_grad_arg(g, a[1], dt, "Parameter"));
    }
    if (data == ValueKind::none) return empty_parameter(g, requires_grad);
    if (data == ValueKind::tensor) m_.specs[g.at(a[0]).ref].requires_grad = requires_grad;
    return a[0];  // a Parameter is its data tensor (or an unsupported entry)
  }
  // Parameter(None): torch.empty(0), an F32 tensor of shape [0] over no bytes.
  Result<uint32_t> empty_parameter(Graph& g, bool requires_grad) {
    PTREAD_TRY(auto storage, owned_copy(std::string_view(), 1));
    int64_t* dims = new_dims(g, 1);
    dims[0] = 0;  // size
    dims[1] = 1;  // stride
    TensorSpec spec;
    spec.dims = dims;
    spec.rank = 1;
    spec.requires_grad = requires_grad;
    spec.storage = m_.storage_table.add(std::move(storage));  // found by no key
    m_.specs.push_back(spec);
    return g.emit_int(ValueKind::tensor, static_cast<uint32_t>(m_.specs.size() - 1), 0);
  }

  struct RunClasses {
    uint32_t fn = kNoNode, tag = kNoNode, cls = kNoNode, hooks_cls = kNoNode;
    DType dtype = DType::F32;
  };
  RunClasses run_;  // tensor_run's checked classes

  Model& m_;
  StorageLoader loader_;
  const SegmentedVector<StoredRecord>* records_ = nullptr;  // set_stored_records
  bool records_big_endian_ = false;
  bool placeholders_ = false;  // set_placeholders
  const Limits& limits_;
  const bool legacy_;  // a legacy file's pickle (its format is set before the hooks are made)
  size_t merge_budget_ = size_t{1} << 22;  // items merged_state may still append
  uint64_t call_budget_ = limits_.max_container_items;  // spend()
  BlockPool pool_;                           // the next two tables' memory
  PoolVector<uint32_t> storage_by_number_{&pool_};  // decimal keys: storage_by_number_[n], or npos
  PoolVector<uint8_t> table_dtype_{&pool_};  // per storage_table entry made from a persistent id
  std::vector<std::pair<std::string_view, uint32_t>> hashed_keys_;  // the other keys (views held by the graph), their storage
  StringIndex storage_index_;                // positions in hashed_keys_
  std::vector<std::pair<std::string_view, uint32_t>> int_keys_;  // int keys (their digits), their storage
  StringIndex int_index_;                    // positions in int_keys_
  std::vector<uint8_t> sliced_;              // per storage: a legacy view slice, or the root of one
  std::string retyped_;                      // retyped()
  std::optional<Error> zip_refusal_, script_refusal_;  // refusal()
  void note_refusal(Format f, Error e) {
    std::optional<Error>& slot = f == Format::torchscript ? script_refusal_ : zip_refusal_;
    if (!slot) slot.emplace(std::move(e));
  }
  void note_zip_refusal(Error e) { note_refusal(Format::zip, std::move(e)); }
  struct View {
    uint32_t view, root;
    size_t offset, nbytes;
  };
  std::vector<View> views_;
};

}  // namespace detail
}  // namespace ptread

#include "torch_numpy.hpp"
#include "torch_quantized.hpp"
