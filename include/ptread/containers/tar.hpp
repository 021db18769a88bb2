// ptread — the tar format of torch 0.1.x (torch/serialization.py, legacy_load inside
// _legacy_load; torch still reads it).
//
// A POSIX tar archive with four members:
//   sys_info   a pickle {protocol_version, little_endian, type_sizes}
//   storages   a pickled count; per storage a pickle (key, location, storage class), an
//              8-byte element count and the raw bytes; then a pickled list of views
//              (target_key, root_key, offset, numel), in elements of the root
//   tensors    a pickled count; per tensor a pickle (key, storage_key, tensor class), then
//              int32 ndim, 4 bytes of padding, ndim int64 sizes, ndim int64 strides, an int64
//              storage offset
//   pickle     the object; a persistent id is a key of `tensors` (or of `storages`: a
//              storage saved on its own) as text, or a tuple (class, source_file, source)
//              for the classes of whole models
// torch.load keeps storages, views and tensors in one table by key, a later entry replacing
// an earlier one of the same key; ptread follows it (see persistent_load, read_tensors).
// Numbers are in the saving host's order; files from big-endian hosts are refused (see
// read()).
#pragma once

#include "../memory/keyed_hash.hpp"
#include "legacy.hpp"

#include <cstring>
#include <unordered_map>

namespace ptread {
namespace detail {

struct TarMember {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool found = false;
};

// The members of a tar archive named in `want` (ustar and pax headers; checksums checked).
inline Status tar_members(const Source& src, const char* const* want, TarMember* out, size_t n_want) {
  uint64_t pos = 0;
  std::string pax_path;
  uint64_t pax_size = UINT64_MAX;
  size_t blocks = 0;
  while (pos + 512 <= src.size()) {
    uint8_t h[512];
    PTREAD_CHECK(src.read_at(pos, h, 512));
    bool zero = true;
    for (uint8_t b : h) zero = zero && b == 0;
    if (zero) return {};  // end of archive
    if (++blocks > (uint64_t{1} << 20)) return make_error(ErrorCode::limit_exceeded, "tar archive with over 2^20 members");
    uint64_t sum = 0;
    for (size_t k = 0; k < 512; ++k) sum += (k >= 148 && k < 156) ? uint64_t{' '} : h[k];
    uint64_t stored = 0;
    for (size_t k = 148; k < 156 && h[k] >= '0' && h[k] <= '7'; ++k) stored = stored * 8 + (h[k] - '0');
    if (stored != sum) {
      return make_error(ErrorCode::legacy_corrupt, "tar header at byte " + std::to_string(pos) + " has a wrong checksum");
    }
    uint64_t size = 0;
    if (h[124] & 0x80) {  // base-256
      for (size_t k = 125; k < 136; ++k) size = (size << 8) | h[k];
    } else {
      for (size_t k = 124; k < 136 && h[k] >= '0' && h[k] <= '7'; ++k) size = size * 8 + (h[k] - '0');
    }
    if (pax_size != UINT64_MAX) size = pax_size;
    const uint64_t data = pos + 512;
    // tarfile (and so torch) wants each member's padding to the next 512-byte block too.
    if (size > (uint64_t{1} << 62) || !range_inside(data, (size + 511) / 512 * 512, src.size())) {
      return make_error(ErrorCode::truncated, "tar member at byte " + std::to_string(pos) + " (" + std::to_string(size) +
                                                 " bytes) lies past the end of the file");
    }
    const char type = static_cast<char>(h[156]);
    std::string name(reinterpret_cast<const char*>(h), strnlen(reinterpret_cast<const char*>(h), 100));
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0) {
      name = std::string(reinterpret_cast<const char*>(h + 345), strnlen(reinterpret_cast<const char*>(h + 345), 155)) + "/" + name;
    }
    if (!pax_path.empty()) name = pax_path;
    pax_path.clear();
    pax_size = UINT64_MAX;
    if (type == 'x') {
      // pax extended header: "len key=value\n" records for the next member.
      if (size > (uint64_t{1} << 20)) return make_error(ErrorCode::limit_exceeded, "tar pax header over 1 MiB");
      std::string rec(static_cast<size_t>(size), '\0');
      PTREAD_CHECK(src.read_at(data, &rec[0], rec.size()));
      size_t p = 0;
      while (p < rec.size()) {
        const size_t sp = rec.find(' ', p);
        if (sp == std::string::npos) break;
        size_t len = 0;
        for (size_t k = p; k < sp && len < rec.size(); ++k) len = len * 10 + static_cast<size_t>(rec[k] - '0');
        if (len == 0 || p + len > rec.size() || sp + 1 >= p + len) break;
        const std::string kv = rec.substr(sp + 1, p + len - sp - 2);
        const size_t eq = kv.find('=');
        if (eq != std::string::npos) {
          if (kv.compare(0, eq, "path") == 0) pax_path = kv.substr(eq + 1);
          if (kv.compare(0, eq, "size") == 0) {
            uint64_t s = 0;
            for (size_t k = eq + 1; k < kv.size() && s < (uint64_t{1} << 60); ++k) s = s * 10 + static_cast<uint64_t>(kv[k] - '0');
            pax_size = s;
          }
        }
        p += len;
      }
    } else if (type == '0' || type == 0) {
      for (size_t k = 0; k < n_want; ++k) {
        if (name == want[k] && !out[k].found) out[k] = TarMember{data, size, true};
      }
    }
    const uint64_t padded = (size + 511) / 512 * 512;
    pos = data + padded;
  }
  return {};
}

class TarHooks final : public TorchHooks {
 public:
  using TorchHooks::TorchHooks;
  std::unordered_map<int64_t, uint32_t, KeyedHash> tensors;   // key -> spec (keys a file chose: KeyedHash)
  std::unordered_map<int64_t, uint32_t, KeyedHash> storages;  // key -> storage table index
  std::vector<DType> dtypes;                        // per storage table entry
  std::vector<uint32_t> locations;                  // per storage table entry: its location text node

  // Tar pickles name their storages their own way: no TensorRun shortcut.
  uint32_t tensor_run(Graph&, const TensorRun&) override { return kNoNode; }

  Result<uint32_t> persistent_load(Graph& g, uint32_t pid) override {
    const ValueKind k = g.kind(pid);
    if (k == ValueKind::tuple && !g.at(pid).items.empty()) return g.at(pid).items[0];  // a module's class
    int64_t key = 0;
    if (k == ValueKind::integer) {
      key = g.at(pid).i;
    } else if (k == ValueKind::string || k == ValueKind::bytes) {
      const std::string_view s = g.text(pid);
      const auto r = std::from_chars(s.data(), s.data() + s.size(), key);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
        return make_error(ErrorCode::bad_tensor_args, "tar persistent id '" + std::string(s) + "' is not a key");
      }
    } else {
      return make_error(ErrorCode::bad_tensor_args, std::string("tar persistent id is a ") + value_kind_name(k));
    }
    auto t = tensors.find(key);
    if (t != tensors.end()) return g.emit_int(ValueKind::tensor, t->second, 0);
    auto s = storages.find(key);
    if (s != storages.end()) {  // a storage saved on its own: a node as the other formats make
      const uint32_t index = s->second;
      return g.emit_int(ValueKind::storage, index,
                        static_cast<int64_t>((uint64_t{locations[index]} << 8) | static_cast<uint8_t>(dtypes[index])));
    }
    return make_error(ErrorCode::record_missing, "tar persistent id " + std::to_string(key) + " names no saved tensor or storage");
  }

  uint32_t add_tensor_spec(const TensorSpec& s) {
    cx_.model.specs.push_back(s);
    return static_cast<uint32_t>(cx_.model.specs.size() - 1);
  }
};

class TarReader {
 public:
  TarReader(std::shared_ptr<const Source> src, const ReadOptions& opt) : src_(std::move(src)), opt_(opt) {}

  Result<std::shared_ptr<Model>> read() {
    static const char* const names[] = {"sys_info", "storages", "tensors", "pickle"};
    TarMember mem[4];
    PTREAD_CHECK(tar_members(*src_, names, mem, 4));
    for (size_t k = 1; k < 4; ++k) {
      if (!mem[k].found) {
        return make_error(ErrorCode::record_missing, std::string("the tar archive has no '") + names[k] + "' member");
      }
    }
    model_ = std::make_shared<Model>();
    model_->format = Format::tar;
    StorageLoader none = [](std::string_view key, uint64_t, DType) -> Result<std::shared_ptr<const Storage>> {
      return make_error(ErrorCode::bad_tensor_args, "a storage persistent id ('" + std::string(key) + "') in a tar-format pickle");
    };
    hooks_ = std::make_unique<TarHooks>(*model_, std::move(none), opt_.limits);
    hooks_->set_nested(opt_);
    vm_ = std::make_unique<PickleVM>(model_->graph, *hooks_, opt_.limits, src_->name());
    if (mem[0].found) {
      uint64_t pos = mem[0].offset;
      PTREAD_TRY(uint32_t info, pickle_at(&pos, mem[0], "sys_info"));
      const uint32_t le = model_->graph.kind(info) == ValueKind::dict ? model_->graph.dict_get(info, "little_endian") : kNoNode;
      if (le != kNoNode && model_->graph.kind(le) == ValueKind::boolean && model_->graph.at(le).i == 0) {
        // Counts and metadata are big-endian; the elements are too before torch's fix of
        // February 2017 (pytorch#718) and little-endian after it: nothing in the file says.
        return make_error(ErrorCode::unsupported_format,
                          "a tar-format file from a big-endian host: its element byte order depends on the torch 0.1 "
                          "release that wrote it, which the file does not record");
      }
    }
    PTREAD_CHECK(read_storages(mem[1]));
    PTREAD_CHECK(read_tensors(mem[2]));
    uint64_t pos = mem[3].offset;
    PTREAD_TRY(model_->root, pickle_at(&pos, mem[3], "pickle"));
    PTREAD_CHECK(realign_storages(*model_));
    PTREAD_CHECK(name_tensors(*model_, opt_.limits, src_->size()));
    return model_;
  }

 private:
  // The pickle at *pos inside member m; *pos moves past it.
  Result<uint32_t> pickle_at(uint64_t* pos, const TarMember& m, const char* member) {
    const uint64_t end = m.offset + m.size;
    uint64_t n = std::min<uint64_t>(end - *pos, src_->base() ? end - *pos : 4096);
    for (;;) {
      PTREAD_TRY(Bytes b, src_->bytes(*pos, n));
      size_t used = 0;
      auto r = vm_->run(b.data, b.size, &used);
      PTREAD_CHECK(legacy_frames_read_flat(*vm_, b.data, b.size, *pos, src_->name(),
                                           [member] { return std::string("tar member '") + member + "'"; }));
      if (r) {
        *pos += used;
        return r;
      }
      if (r.error().code() != ErrorCode::pickle_truncated || *pos + n == end) {
        Error e = std::move(r).error();
        e.add_context(std::string("(tar member '") + member + "', byte " + std::to_string(*pos - m.offset) + ")");
        return e;
      }
      n = std::min<uint64_t>(end - *pos, 2 * n);
    }
  }

  Result<uint64_t> u64_at(uint64_t* pos, uint64_t end, const char* what) {
    if (*pos > end || end - *pos < 8) return make_error(ErrorCode::truncated, std::string("tar: the member ends inside ") + what);
    uint8_t b[8];
    PTREAD_CHECK(src_->read_at(*pos, b, 8));
    *pos += 8;
    return load_u64_le(b);
  }

  Result<int64_t> key_of(uint32_t node, const char* what) {
    const Graph& g = model_->graph;
    if (g.kind(node) == ValueKind::integer) return g.at(node).i;
    return make_error(ErrorCode::legacy_corrupt, std::string("tar: ") + what + " key is a " + value_kind_name(g.kind(node)));
  }

  Result<uint32_t> tuple_at(uint64_t* pos, const TarMember& m, const char* member, size_t n) {
    PTREAD_TRY(uint32_t t, pickle_at(pos, m, member));
    const Graph& g = model_->graph;
    if (g.kind(t) != ValueKind::tuple || g.count(t) != n) {
      return make_error(ErrorCode::legacy_corrupt, std::string("tar member '") + member + "' holds a malformed record");
    }
    return t;
  }

  Status read_storages(const TarMember& m) {
    Graph& g = model_->graph;
    uint64_t pos = m.offset;
    const uint64_t end = m.offset + m.size;
    PTREAD_TRY(uint32_t count_node, pickle_at(&pos, m, "storages"));
    if (g.kind(count_node) != ValueKind::integer || g.at(count_node).i < 0) {
      return make_error(ErrorCode::legacy_corrupt, "tar: the storage count is not a count");
    }
    const int64_t count = g.at(count_node).i;
    const std::shared_ptr<const void> owner = src_;
    for (int64_t k = 0; k < count; ++k) {
      PTREAD_TRY(uint32_t rec, tuple_at(&pos, m, "storages", 3));
      const Items it = g.at(rec).items;
      PTREAD_TRY(int64_t key, key_of(it[0], "storage"));
      DType dtype;
      const std::string_view cls = g.kind(it[2]) == ValueKind::global ? g.global_name(it[2]) : std::string_view();
      if (!dtype_from_storage_class(cls, &dtype)) {
        return make_error(ErrorCode::unknown_storage_class, "unknown storage class '" + std::string(cls) + "'");
      }
      PTREAD_TRY(uint64_t numel, u64_at(&pos, end, "a storage's element count"));
      uint64_t nbytes;
      if (mul_overflow(numel, dtype_size(dtype), &nbytes) || nbytes > end - pos) {
        return make_error(ErrorCode::legacy_corrupt, "tar: storage " + std::to_string(key) + " says it holds " +
                                                         std::to_string(numel) + " elements, past the end of its member");
      }
      PTREAD_TRY(auto st, storage_from_source(*src_, owner, pos, nbytes, dtype, opt_.mode == LoadMode::read, false));
      pos += nbytes;
      add_storage(key, std::move(st), dtype, storage_location_node(g, it[1]));
    }
    PTREAD_TRY(uint32_t views, pickle_at(&pos, m, "storages"));
    if (g.kind(views) != ValueKind::list && g.kind(views) != ValueKind::tuple) {
      return make_error(ErrorCode::legacy_corrupt, "tar: the storage view list is not a list");
    }
    const Items vs = g.at(views).items;
    for (uint32_t v : vs) {
      const NodeView vn = g.at(v);
      if (vn.kind != ValueKind::tuple || vn.items.size() != 4 || g.kind(vn.items[2]) != ValueKind::integer ||
          g.kind(vn.items[3]) != ValueKind::integer) {
        return make_error(ErrorCode::legacy_corrupt, "tar: a storage view is not (target, root, offset, numel)");
      }
      PTREAD_TRY(int64_t target, key_of(vn.items[0], "storage view"));
      PTREAD_TRY(int64_t root_key, key_of(vn.items[1], "storage view root"));
      auto r = hooks_->storages.find(root_key);
      if (r == hooks_->storages.end()) {
        return make_error(ErrorCode::record_missing, "tar: storage view of unknown storage " + std::to_string(root_key));
      }
      const uint32_t root = r->second;
      const DType dtype = hooks_->dtypes[root];
      const int64_t offset = g.at(vn.items[2]).i, numel = g.at(vn.items[3]).i;
      const uint64_t root_bytes = model_->storage_table.nbytes(root);
      uint64_t ob = 0, nb = 0;
      if (offset < 0 || numel < 0 || mul_overflow(static_cast<uint64_t>(offset), dtype_size(dtype), &ob) ||
          mul_overflow(static_cast<uint64_t>(numel), dtype_size(dtype), &nb)) {
        return make_error(ErrorCode::view_out_of_bounds, "tar: storage view " + std::to_string(target) + " (offset " +
                                                             std::to_string(offset) + ", " + std::to_string(numel) +
                                                             " elements) of storage " + std::to_string(root_key));
      }
      // torch slices the root's bytes, root[ob:ob + nb], as Python slices: a view that
      // reaches past the root's end ends there (its tensors are checked against what is left).
      ob = std::min(ob, root_bytes);
      nb = std::min(nb, root_bytes - ob);
      const uint32_t index = model_->storage_table.add_view(nullptr, 0);
      model_->storage_table.set_slice(index, root, ob, nb);
      index_storage(target, index, dtype, hooks_->locations[root]);
    }
    return {};
  }

  void add_storage(int64_t key, std::shared_ptr<const Storage> st, DType dtype, uint32_t location) {
    index_storage(key, model_->storage_table.add(std::move(st)), dtype, location);
  }
  void index_storage(int64_t key, uint32_t index, DType dtype, uint32_t location) {
    hooks_->dtypes.push_back(dtype);
    hooks_->locations.push_back(location);
    hooks_->storages[key] = index;
  }

  Status read_tensors(const TarMember& m) {
    Graph& g = model_->graph;
    uint64_t pos = m.offset;
    const uint64_t end = m.offset + m.size;
    PTREAD_TRY(uint32_t count_node, pickle_at(&pos, m, "tensors"));
    if (g.kind(count_node) != ValueKind::integer || g.at(count_node).i < 0) {
      return make_error(ErrorCode::legacy_corrupt, "tar: the tensor count is not a count");
    }
    const int64_t count = g.at(count_node).i;
    for (int64_t k = 0; k < count; ++k) {
      PTREAD_TRY(uint32_t rec, tuple_at(&pos, m, "tensors", 3));
      const Items it = g.at(rec).items;
      PTREAD_TRY(int64_t key, key_of(it[0], "tensor"));
      PTREAD_TRY(int64_t storage_key, key_of(it[1], "tensor storage"));
      if (hooks_->tensors.count(storage_key)) {  // torch's one key table holds that tensor now, not a storage
        return make_error(ErrorCode::legacy_corrupt, "tar: tensor " + std::to_string(key) + " names tensor " +
                                                         std::to_string(storage_key) + " as its storage");
      }
      auto s = hooks_->storages.find(storage_key);
      if (s == hooks_->storages.end()) {
        return make_error(ErrorCode::record_missing, "tar: tensor " + std::to_string(key) + " names unknown storage " +
                                                         std::to_string(storage_key));
      }
      PTREAD_TRY(uint64_t ndim_word, u64_at(&pos, end, "a tensor's rank"));
      // int32 ndim then 4 bytes of padding: the low half of the word.
      const uint64_t ndim = ndim_word & 0xffffffffu;
      if (ndim > opt_.limits.max_rank) {
        return make_error(ErrorCode::limit_exceeded, "tar: tensor " + std::to_string(key) + " has " + std::to_string(ndim) +
                                                         " dimensions (Limits::max_rank)");
      }
      int64_t* dims = new_dims(g, static_cast<size_t>(ndim));
      for (uint64_t d = 0; d < 2 * ndim; ++d) {
        PTREAD_TRY(uint64_t v, u64_at(&pos, end, "a tensor's sizes and strides"));
        dims[d] = static_cast<int64_t>(v);
      }
      PTREAD_TRY(uint64_t offset, u64_at(&pos, end, "a tensor's storage offset"));
      TensorSpec spec;
      spec.dims = dims;
      spec.rank = static_cast<uint32_t>(ndim);
      spec.offset = static_cast<int64_t>(offset);
      spec.storage = s->second;
      spec.dtype = hooks_->dtypes[s->second];
      spec.location = hooks_->locations[s->second];
      int64_t numel = 0;
      PTREAD_CHECK(check_view(dims, spec.rank, dims + spec.rank, spec.rank, spec.offset, spec.dtype,
                              model_->storage_table.nbytes(spec.storage), &numel));
      hooks_->tensors[key] = hooks_->add_tensor_spec(spec);
    }
    return {};
  }

  std::shared_ptr<const Source> src_;
  ReadOptions opt_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<TarHooks> hooks_;
  std::unique_ptr<PickleVM> vm_;
};

inline Result<std::shared_ptr<Model>> read_tar_checkpoint(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  return TarReader(std::move(src), opt).read();
}

}  // namespace detail
}  // namespace ptread
