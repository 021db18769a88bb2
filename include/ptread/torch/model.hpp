// ptread — what a format reader produces: the object graph, its tensors, and names.
#pragma once

#include "../memory/flat_map.hpp"
#include "../compute/parallel.hpp"
#include "../io.hpp"
#include "../pickle.hpp"
#include "../quantized.hpp"
#include "../tensor.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ptread {

enum class Format { zip, legacy, tar, torchscript, safetensors, sharded, pickle };

inline const char* format_name(Format f) noexcept {
  switch (f) {
    case Format::zip: return "zip";
    case Format::legacy: return "legacy";
    case Format::tar: return "tar";
    case Format::torchscript: return "torchscript";
    case Format::safetensors: return "safetensors";
    case Format::sharded: return "sharded";
    case Format::pickle: return "pickle";
  }
  return "?";
}

// A tensor's metadata as the checkpoint lists it, read without making a Tensor
// (Checkpoint::tensor_info): what `ptread ls` prints. Every field equals what the Tensor of
// the same entry of tensors() reports; the views live as long as the Checkpoint's data
// (the Checkpoint or a copy of it).
struct TensorInfo {
  std::string_view name;
  DType dtype = DType::F32;
  Dims shape, strides;          // in elements
  int64_t storage_offset = 0;   // in elements
  std::string_view device;      // "cpu", "cuda:0" ... as stored
  uint64_t nbytes = 0;          // numel * element size (Tensor::nbytes)
  bool requires_grad = false;
  bool conj = false, neg = false;
  std::string_view shard;       // sharded sets: the shard's file, as the index names it; else empty
};

struct NamedTensor {
  // User-provided, so that emplace_back() does not zero-fill the 168 bytes before the
  // members' own constructors run (value-initialization of an aggregate would).
  NamedTensor() noexcept {}  // NOLINT(modernize-use-equals-default)
  NamedTensor(std::string n, Tensor t) noexcept : name(std::move(n)), tensor(std::move(t)) {}
  std::string name;
  Tensor tensor;
};

// A tensor-like entry ptread lists but cannot hand out (quantized, sparse, nested ...).
struct UnsupportedEntry {
  std::string name;
  std::string reason;
};

// A module of a whole pickled model or TorchScript archive: its name (the prefix of its
// tensors' names; "" for the root) and class.
struct ModuleEntry {
  std::string name;
  std::string class_name;  // "__main__.Net", "torch.nn.modules.linear.Linear", "__torch__.Net"
};

namespace detail {

struct ReadOptions;
struct Model;
// Reads a nested archive (torch.storage._load_from_bytes(b): b read as torch.load reads a
// file) into a model of its own. keep: what keeps b's memory alive, if it is not copied
// (nullptr: b must be copied). The containers' reader (containers/nested.hpp) is handed
// down in ReadOptions, so that torch's handlers, which the containers include, need not
// include them.
using NestedArchiveReader = Result<std::shared_ptr<Model>> (*)(std::string_view b, std::shared_ptr<const void> keep,
                                                               const ReadOptions& outer);

struct ReadOptions {
  LoadMode mode = LoadMode::mmap;
  Limits limits;
  unsigned threads = 1;  // read mode: threads filling the storages (0: every hardware thread)
  bool tensor_runs = true;  // PickleVM::set_tensor_runs (off only in tests that compare both)
  // Zip archives in memory, threads >= 2: the directory walked beside data.pkl
  // (read_zip_overlapped; off only in tests that compare both).
  bool overlap = true;
  // Nested archives: their reader (nullptr: _load_from_bytes is refused), how deep this
  // archive is (0: the file), and what keeps the pickle's borrowed bytes alive
  // (Graph::borrow_bytes; nullptr: they are not borrowed).
  NestedArchiveReader nested_reader = nullptr;
  unsigned nesting = 0;
  std::shared_ptr<const void> pickle_keep;
};

// Read mode: a storage's buffer is allocated while the pickle is read and filled after it,
// by run_fill_jobs, so that several threads can share the reading.
struct FillJob {
  uint64_t offset;  // in the source
  uint8_t* dst;
  size_t size;
};

// Big storages are read in pieces of `piece` bytes, shared out among the threads; less than
// two pieces in all are read by the caller alone.
inline Status run_fill_jobs(const Source& src, const std::vector<FillJob>& jobs, unsigned threads,
                            size_t piece = size_t{8} << 20) {
  const size_t kPiece = piece == 0 ? 1 : piece;
  struct Piece {
    uint64_t offset;
    uint8_t* dst;
    size_t size;
  };
  std::vector<Piece> pieces;
  uint64_t total = 0;
  for (const FillJob& j : jobs) {
    for (size_t done = 0; done < j.size; done += kPiece) {
      pieces.push_back({j.offset + done, j.dst + done, std::min(kPiece, j.size - done)});
    }
    total += j.size;
  }
  threads = resolve_threads(threads);
  if (threads <= 1 || total < 2 * kPiece) {
    for (const FillJob& j : jobs) PTREAD_CHECK(src.read_at(j.offset, j.dst, j.size));
    return {};
  }
  std::atomic<bool> failed{false};
  std::mutex m;
  Status first;
  auto fill = [&](size_t t) {
    if (failed.load(std::memory_order_relaxed)) return;
    Status st = src.read_at(pieces[t].offset, pieces[t].dst, pieces[t].size);
    if (!st) {
      std::lock_guard<std::mutex> lock(m);
      if (!failed.exchange(true)) static_cast<void>(first = std::move(st));  // (nvcc: nodiscard Status)
    }
  };
  WorkerPool::instance().run(threads, pieces.size(), fill);
  return first;
}

inline void byteswap_elements(uint8_t* p, size_t nbytes, size_t unit) {
  if (unit <= 1) return;
  for (size_t k = 0; k + unit <= nbytes; k += unit) std::reverse(p + k, p + k + unit);
}

// Storages that are views of one source, made in blocks: each Storage object lives in a
// block that the storages in it share through aliasing shared_ptrs (one allocation and one
// reference count per block, not per storage); the block keeps the source.
class StorageViews {
 public:
  StorageViews(std::shared_ptr<const void> owner, size_t block_size)
      : owner_(std::move(owner)), block_size_(std::max<size_t>(block_size, 1)) {}
  std::shared_ptr<const Storage> make(const uint8_t* p, uint64_t size) {
    if (!block_ || block_->size == block_->capacity) block_ = std::make_shared<Block>(owner_, block_size_);
    // No owner of its own: the aliasing pointer keeps the block, and the block the source.
    Storage* st = ::new (static_cast<void*>(block_->storages + block_->size)) Storage(p, static_cast<size_t>(size), nullptr);
    ++block_->size;
    return std::shared_ptr<const Storage>(block_, st);
  }
  // Points storage s, made by make(nullptr, size) and not yet in any tensor, at p.
  static void rebind(const std::shared_ptr<const Storage>& s, const uint8_t* p, uint64_t size) {
    Storage* st = const_cast<Storage*>(s.get());
    st->~Storage();
    ::new (static_cast<void*>(st)) Storage(p, static_cast<size_t>(size), nullptr);
  }

 private:
  struct Block {
    std::shared_ptr<const void> owner;
    Storage* storages = nullptr;  // capacity Storage objects, size of them made
    size_t size = 0;
    size_t capacity = 0;
    Block(std::shared_ptr<const void> o, size_t cap)
        : owner(std::move(o)), storages(static_cast<Storage*>(block_alloc(cap * sizeof(Storage)))), capacity(cap) {}
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block() {
      for (size_t k = 0; k < size; ++k) storages[k].~Storage();
      block_free(storages, capacity * sizeof(Storage));
    }
  };
  std::shared_ptr<const void> owner_;
  size_t block_size_;
  std::shared_ptr<Block> block_;
};

// The distinct storages of a model, by index (TensorSpec::storage). Each is its bytes and
// size, and the Storage object its tensors share, made only when a Tensor is made: opening
// and listing keep 16 bytes a storage, not a Storage object and a pointer to it as well
// (48 bytes, and most of the work of adding one).
// Two kinds: views of the model's source (add_view: their Storage objects are made all at
// once, by the first Tensor made after the model is read, in blocks that keep the source)
// and storages with an owner of their own (add: a copy, a view of another storage ...).
// A model gains storages only while it is read, on one thread; shared() is safe to call
// from several threads after that.
class StorageTable {
 public:
  explicit StorageTable(BlockPool* pool) : entries_(pool) {}
  StorageTable(const StorageTable&) = delete;
  StorageTable& operator=(const StorageTable&) = delete;

  // What keeps the bytes of view storages alive (the mapped or in-memory source).
  void set_source(std::shared_ptr<const void> source) { source_ = std::move(source); }

  size_t size() const noexcept { return entries_.size(); }
  const uint8_t* data(size_t k) const noexcept { return entries_[k].data; }
  uint64_t nbytes(size_t k) const noexcept { return entries_[k].nbytes; }

  // A storage of n bytes at p in the source (p: nullptr while its bytes are not known yet,
  // see rebind); its index.
  PTREAD_ALWAYS_INLINE uint32_t add_view(const uint8_t* p, uint64_t n) {
    entries_.push_back(Entry{p, n});
    low_bits_ |= reinterpret_cast<uintptr_t>(p);
    if (PTREAD_UNLIKELY(made_)) owned_.push_back(std::make_shared<const Storage>(p, static_cast<size_t>(n), source_));
    return static_cast<uint32_t>(entries_.size() - 1);
  }
  // A storage that keeps its own bytes alive; its index.
  uint32_t add(std::shared_ptr<const Storage> s) {
    entries_.push_back(Entry{s->data(), s->nbytes()});
    low_bits_ |= reinterpret_cast<uintptr_t>(s->data());
    if (owned_.size() + 1 < entries_.size()) owned_.resize(entries_.size() - 1);
    owned_.push_back(std::move(s));
    return static_cast<uint32_t>(entries_.size() - 1);
  }
  // Storage k becomes s.
  void set(size_t k, std::shared_ptr<const Storage> s) {
    entries_[k] = Entry{s->data(), s->nbytes()};
    low_bits_ |= reinterpret_cast<uintptr_t>(s->data());
    if (owned_.size() <= k) owned_.resize(k + 1);
    owned_[k] = std::move(s);
  }
  // View storage k becomes the n bytes at p in the source.
  PTREAD_ALWAYS_INLINE void rebind(size_t k, const uint8_t* p, uint64_t n) {
    entries_[k] = Entry{p, n};
    low_bits_ |= reinterpret_cast<uintptr_t>(p);
    if (PTREAD_UNLIKELY(k < owned_.size()) && owned_[k]) {
      owned_[k] = std::make_shared<const Storage>(p, static_cast<size_t>(n), source_);
    }
  }
  // Storage k becomes n bytes at byte off of storage root (off + n within it).
  void set_slice(size_t k, size_t root, uint64_t off, uint64_t n) {
    const uint8_t* p = entries_[root].data + off;
    if (root < owned_.size() && owned_[root]) {
      set(k, std::make_shared<const Storage>(p, static_cast<size_t>(n), owned_[root]));
    } else {
      rebind(k, p, n);
    }
  }

  // Whether every storage's bytes start at a multiple of 8 (all that any dtype needs; a
  // storage set anew after another may make this false though its bytes are aligned).
  bool aligned8() const noexcept { return (low_bits_ & 7) == 0; }

  // The Storage object of storage k, which the tensors of that storage share.
  const std::shared_ptr<const Storage>& shared(size_t k) const {
    std::call_once(made_once_, [this] { make_views(); });
    return owned_[k];
  }

 private:
  struct Entry {
    const uint8_t* data;
    uint64_t nbytes;
  };
  // Storage objects for the views that have none yet, in one block.
  void make_views() const {
    owned_.resize(entries_.size());
    size_t missing = 0;
    for (size_t k = 0; k < owned_.size(); ++k) missing += !owned_[k];
    if (missing != 0) {
      StorageViews views(source_, missing);
      for (size_t k = 0; k < owned_.size(); ++k) {
        if (!owned_[k]) owned_[k] = views.make(entries_[k].data, entries_[k].nbytes);
      }
    }
    made_ = true;
  }

  SegmentedVector<Entry> entries_;
  std::shared_ptr<const void> source_;
  uintptr_t low_bits_ = 0;  // every address the table was given, or-ed
  mutable std::vector<std::shared_ptr<const Storage>> owned_;  // per storage, up to the last owned one, or all once made
  mutable std::once_flag made_once_;
  mutable bool made_ = false;  // (read and written only while the model is read, or under made_once_)
};

// A tensor as the pickle describes it, already checked against its storage. Tensor
// objects are made from these when names are known (name_tensors), each in its place in
// the tensor list, once.
struct TensorSpec {
  int64_t* dims = nullptr;           // rank sizes, then rank strides: in the graph's arena
  int64_t offset = 0;
  uint32_t storage = 0;              // Model::storage_table
  uint32_t location = kNoNode;       // the device text node; kNoNode: "cpu"
  uint32_t rank = 0;
  DType dtype = DType::F32;
  bool requires_grad = false;
  bool conj = false;
  bool neg = false;

  int64_t numel() const noexcept {  // no overflow: check_view passed
    int64_t n = 1;
    for (uint32_t d = 0; d < rank; ++d) n *= dims[d];
    return n;
  }
};

// A quantized tensor: its integer representation and parameters (tensor specs by index).
struct QuantSpec {
  uint32_t int_repr = 0;
  DType dtype = DType::QINT8;       // QINT8, QUINT8, QINT32, QUINT4X2, QUINT2X4
  const int64_t* shape = nullptr;   // the logical shape, in the graph's arena
  uint32_t rank = 0;
  uint32_t scales = kNoNode, zero_points = kNoNode;
  QScheme qscheme = QScheme::per_tensor_affine;
  double scale = 0;
  int64_t zero_point = 0, axis = 0;
};
// A sparse tensor: its parts (tensor specs by index, kNoNode when absent) and dense shape.
struct SparseSpec {
  SparseLayout layout = SparseLayout::coo;
  uint32_t indices = kNoNode, compressed = kNoNode, plain = kNoNode, values = kNoNode;
  const int64_t* shape = nullptr;  // in the graph's arena
  uint32_t rank = 0;
  int coalesced = -1;
};

// A TorchScript class's parameter and buffer attribute names, from the
// `__parameters__ = [...]` and `__buffers__ = [...]` lines of its code/ file (read as
// text, never run). state_dict() lists exactly these, then the submodules.
struct ScriptClass {
  std::string qualified_name;  // "__torch__.torch.nn.modules.linear.Linear"
  std::vector<std::string> parameters, buffers;
};

struct Model {
  Model() = default;
  Model(const Model&) = delete;  // the graph and specs point into pool
  Model& operator=(const Model&) = delete;

  BlockPool pool;                       // the graph's and the specs' blocks
  Format format = Format::zip;
  bool overlapped = false;              // zip: read by read_zip_overlapped (for tests)
  std::string archive_prefix;
  bool big_endian = false;
  Graph graph{&pool};
  uint32_t root = kNoneNode;
  uint32_t constants_root = kNoNode;    // TorchScript: constants.pkl's tuple
  SegmentedVector<TensorSpec> specs{&pool};  // graph tensor nodes index this
  std::vector<std::string> unsupported; // graph unsupported nodes index this (the reason)
  std::vector<QuantSpec> qspecs;        // graph quantized nodes index this
  std::vector<SparseSpec> sparse_specs; // graph sparse nodes index this
  // The distinct storages. A graph storage node (a persistent id) holds its index in
  // ref, and in i the dtype it was saved as and the node of its location text.
  StorageTable storage_table{&pool};
  // The tensor list, in file order, as the naming walk leaves it: entry k's name and spec.
  // Its NamedTensor objects are made by the first call of named(): opening and listing
  // (info()) make none.
  struct Listed {  // 16 bytes
    const char* name;  // in the graph's arena
    uint32_t name_size;
    uint32_t spec;
    std::string_view name_view() const noexcept { return std::string_view(name, name_size); }
  };
  static_assert(sizeof(Listed) <= 16, "a listed entry is two words");
  SegmentedVector<Listed> listed{&pool};
  std::vector<UnsupportedEntry> named_unsupported;
  std::vector<NamedQuantized> named_quantized;  // name filled by the naming walk, the tensor after it
  std::vector<NamedSparse> named_sparse;
  std::vector<uint32_t> quantized_of, sparse_of;
  std::vector<ModuleEntry> modules;     // in the order the naming walk meets them
  std::vector<ScriptClass> script_classes;  // TorchScript archives: from code/  // per named entry: its qspecs / sparse_specs index
  std::vector<Tensor> tensors;          // tensors listed under no name
  // Sharded sets (containers/sharded.hpp): the shard files as the index names them, and
  // per spec the shard it came from; empty for single files.
  std::vector<std::string> shard_files;
  std::vector<uint32_t> spec_shard;
  // Per spec, once named: its first position in the tensor list, or kUnnamed | its
  // position in `tensors`. (In the pool: the chunks the pickle's pool was done with,
  // BlockPool::give_chunks.)
  static constexpr uint32_t kUnnamed = 0x80000000u;
  PoolVector<uint32_t> tensor_home{&pool};

  size_t listed_count() const noexcept { return listed.size(); }
  std::string_view listed_name(size_t k) const noexcept { return listed[k].name_view(); }
  // Entry k of the tensor list, its metadata (k < listed_count()).
  TensorInfo info(size_t k) const;

  // The tensor list: made by the first call, from the names and specs; safe to call from
  // several threads.
  const std::vector<NamedTensor>& named() const {
    std::call_once(named_once_, [this] {
      named_.clear();  // (a first try that ran out of memory may have left some)
      reserve_huge(named_, listed_count());
      for (size_t k = 0; k < listed_count(); ++k) {
        named_.emplace_back();
        NamedTensor& nt = named_.back();
        const Listed& e = listed[k];
        nt.name.assign(e.name, e.name_size);
        make_tensor(e.spec, &nt.tensor);
      }
    });
    return named_;
  }

  // The position in the tensor list of the first entry named `name`, or StringIndex::npos.
  // Its index is built by the first call (opening and listing need none); safe to call
  // from several threads.
  uint32_t find_listed(std::string_view name) const {
    std::call_once(name_index_once_, [this] {
      const size_t count = listed_count() < StringIndex::npos ? listed_count() : StringIndex::npos;
      name_index_.insert_all(static_cast<uint32_t>(count), [this](uint32_t i) { return listed_name(i); });  // first name wins
    });
    return name_index_.find(name, [this](uint32_t i) { return listed_name(i); });
  }
  // The first tensor named `name` in the tensor list (which this makes), or nullptr.
  const Tensor* find(std::string_view name) const {
    const uint32_t k = find_listed(name);
    return k == StringIndex::npos ? nullptr : &named()[k].tensor;
  }

  // The tensor of a graph tensor node (its ref), once the tensors are named.
  const Tensor& tensor(uint32_t ref) const {
    const uint32_t h = tensor_home[ref];
    return (h & kUnnamed) ? tensors[h & ~kUnnamed] : named()[h].tensor;
  }

  // Fills a default-constructed Tensor from spec k.
  void make_tensor(uint32_t k, Tensor* t) const;
  Tensor spec_tensor(uint32_t k) const {
    Tensor t;
    make_tensor(k, &t);
    return t;
  }

  // The entries of quantized and sparse nodes (their ref), once the tensors are named.
  QuantizedTensor make_quantized(uint32_t ref) const {
    const QuantSpec& q = qspecs[ref];
    QuantizedTensor t;
    t.int_repr = spec_tensor(q.int_repr);
    t.dtype = q.dtype;
    t.shape.assign(q.shape, q.shape + q.rank);
    t.qscheme = q.qscheme;
    t.scale = q.scale;
    t.zero_point = q.zero_point;
    t.axis = q.axis;
    if (q.scales != kNoNode) t.scales = spec_tensor(q.scales);
    if (q.zero_points != kNoNode) t.zero_points = spec_tensor(q.zero_points);
    return t;
  }
  SparseTensor make_sparse(uint32_t ref) const {
    const SparseSpec& sp = sparse_specs[ref];
    SparseTensor t;
    t.layout = sp.layout;
    t.shape.assign(sp.shape, sp.shape + sp.rank);
    t.coalesced = sp.coalesced;
    if (sp.indices != kNoNode) t.indices = spec_tensor(sp.indices);
    if (sp.compressed != kNoNode) t.compressed_indices = spec_tensor(sp.compressed);
    if (sp.plain != kNoNode) t.plain_indices = spec_tensor(sp.plain);
    if (sp.values != kNoNode) t.values = spec_tensor(sp.values);
    return t;
  }

 private:
  mutable std::once_flag named_once_;
  mutable std::vector<NamedTensor> named_;
  mutable std::once_flag name_index_once_;
  mutable StringIndex name_index_;
};

struct TensorAccess {
  // The spec was checked against its storage (check_view) when it was made.
  static void assign(Tensor* t, const Model& m, const TensorSpec& s) {
    t->storage_ = m.storage_table.shared(s.storage);
    t->dtype_ = s.dtype;
    t->set_dims(s.dims, s.dims + s.rank, s.rank);
    t->offset_ = s.offset;
    t->numel_ = s.numel();
    if (s.location != kNoNode) {  // else the default, "cpu"
      const std::string_view device = m.graph.text(s.location);
      if (!equals(device, "cpu")) t->device_.assign(device.data(), device.size());
    }
    t->requires_grad_ = s.requires_grad;
    t->conj_ = s.conj;
    t->neg_ = s.neg;
  }
};

inline void Model::make_tensor(uint32_t k, Tensor* t) const { TensorAccess::assign(t, *this, specs[k]); }

inline TensorInfo Model::info(size_t k) const {
  const Listed& e = listed[k];
  const TensorSpec& s = specs[e.spec];
  TensorInfo t;
  t.name = e.name_view();
  t.dtype = s.dtype;
  t.shape = Dims(s.dims, s.rank);
  t.strides = Dims(s.dims + s.rank, s.rank);
  t.storage_offset = s.offset;
  t.device = s.location == kNoNode ? std::string_view("cpu") : graph.text(s.location);
  t.nbytes = static_cast<uint64_t>(s.numel()) * dtype_size(s.dtype);
  t.requires_grad = s.requires_grad;
  t.conj = s.conj;
  t.neg = s.neg;
  if (!spec_shard.empty()) t.shard = shard_files[spec_shard[e.spec]];
  return t;
}

// Every tensor's data must suit its dtype's alignment (data<T>() hands out typed pointers).
// Storages viewed in place sit wherever the file put them: a zip written without torch's
// 64-byte padding, a legacy storage shared under a wider dtype. Those are copied into an
// aligned buffer (shared by all their tensors, as before).
inline Status realign_storages(Model& m) {
  if (m.storage_table.aligned8()) return {};
  for (size_t k = 0; k < m.specs.size(); ++k) {
    const TensorSpec& t = m.specs[k];
    const uint8_t* data = m.storage_table.data(t.storage);
    const size_t align = std::min<size_t>(dtype_size(t.dtype), 8);
    if (align <= 1 || data == nullptr || reinterpret_cast<uintptr_t>(data) % align == 0) continue;
    const size_t nbytes = static_cast<size_t>(m.storage_table.nbytes(t.storage));
    PTREAD_TRY(auto buf, allocate_aligned(nbytes));
    if (nbytes) std::memcpy(buf.get(), data, nbytes);
    const uint8_t* p = buf.get();
    m.storage_table.set(t.storage, std::make_shared<const Storage>(p, nbytes, std::move(buf)));
  }
  return {};
}

}  // namespace detail
}  // namespace ptread
