// ptread — torch.save's zip format (PyTorch >= 1.6) and the tensors of TorchScript archives.
//
// Records under one folder (the "archive prefix", found as the folder holding data.pkl):
//   data.pkl           the pickled object; storages are persistent ids (see torch_pickle.hpp)
//   data/<key>         each storage's raw bytes, stored (uncompressed), 64-byte aligned
//   byteorder          "little" or "big" (torch >= 2.1; absent means little)
//   version or .data/version, .format_version, .storage_alignment, .data/serialization_id
//   constants.pkl      present in TorchScript archives (torch.jit.save)
#pragma once

#include "../zip.hpp"
#include "naming.hpp"
#include "torch_pickle.hpp"

#include <algorithm>

namespace ptread {
namespace detail {

// The archive's object graph, tensors and storages into m (everything but the names):
// the archive's directory is gone when this returns.
// The classes a TorchScript code file defines: `class Name(Module):` at the left margin,
// then indented `__parameters__ = ["a", "b", ]` and `__buffers__ = [...]` lines.
inline void parse_script_classes(std::string_view qualifier, std::string_view code, std::vector<ScriptClass>* out) {
  auto names = [](std::string_view line, std::vector<std::string>* dst) {
    size_t p = line.find('[');
    while (p != std::string_view::npos) {
      const size_t q0 = line.find('"', p);
      if (q0 == std::string_view::npos) break;
      const size_t q1 = line.find('"', q0 + 1);
      if (q1 == std::string_view::npos) break;
      dst->emplace_back(line.substr(q0 + 1, q1 - q0 - 1));
      p = q1 + 1;
    }
  };
  ScriptClass* current = nullptr;
  size_t pos = 0;
  while (pos < code.size()) {
    size_t eol = code.find('\n', pos);
    if (eol == std::string_view::npos) eol = code.size();
    const std::string_view line = code.substr(pos, eol - pos);
    pos = eol + 1;
    if (starts_with(line, "class ")) {
      const size_t paren = line.find_first_of("(:", 6);
      out->push_back(ScriptClass{std::string(qualifier) + "." + std::string(line.substr(6, paren - 6)), {}, {}});
      current = &out->back();
    } else if (current != nullptr && starts_with(line, "  __parameters__ ")) {
      names(line, &current->parameters);
    } else if (current != nullptr && starts_with(line, "  __buffers__ ")) {
      names(line, &current->buffers);
    } else if (!line.empty() && line[0] != ' ') {
      current = nullptr;
    }
  }
}

inline Status read_zip_graph(const std::shared_ptr<const Source>& src, const ReadOptions& opt, Model& m,
                             std::vector<FillJob>* fill) {
  // The storages, which torch names data/0, data/1 ... under the folder of data.pkl:
  // data_by_number[n] is the record data/<n>: when it is stored and its local header as
  // expected, its bytes in memory; its entry, if the archive keeps one. Torch writes
  // data.pkl first, so the directory walk takes the numbered records under the folder of
  // the first data.pkl out as it meets them (bytes in memory, no ZipEntry: read in file
  // order, no second pass over 100,000 entries). The first of equal names wins, as in
  // ZipArchive::find.
  // (A StoredRecord's data is nullptr when it is read through the ZipArchive; its entry is
  // StringIndex::npos when it is not in zip.entries().)
  BlockPool pool;  // data_by_number's blocks
  SegmentedVector<StoredRecord> data_by_number(&pool);
  size_t data_records = 0;  // all data/ records under the folder, numbered or not
  std::string_view walk_prefix;
  bool walk_has_prefix = false;
  size_t walk_from = SIZE_MAX;  // the index of the first entry kept after that data.pkl
  const uint8_t* base = src->base();
  // Slot n for a record: when no record has it yet, or when the walk gave it one that comes
  // later in the directory (entries kept after walk_from, or taken out) than this one.
  auto claim = [&data_by_number, &walk_from](uint32_t n, size_t index) -> StoredRecord* {
    while (n >= data_by_number.size()) data_by_number.push_back(StoredRecord{nullptr, 0, StringIndex::npos});
    StoredRecord& r = data_by_number[n];
    const bool empty = r.data == nullptr && r.entry == StringIndex::npos;
    const bool later = !empty && index < walk_from && (r.entry == StringIndex::npos || r.entry >= walk_from);
    return empty || later ? &r : nullptr;
  };
  auto numbered_data = [](std::string_view rest, uint64_t records, uint32_t* n) {  // "data/<n>", n < a bound
    return decimal_key(std::string_view(rest.data() + 5, rest.size() - 5), n) && *n < 2 * records + 4096;  // rest: "data/..."
  };
  // A stored record's bytes where the source holds them in memory (its local header as
  // expected), or nullptr.
  auto in_memory = [base](const ZipArchive& z, const ZipEntry& e) -> const uint8_t* {
    uint64_t off;
    const bool here = base != nullptr && e.method == 0 && e.compressed_size == e.uncompressed_size && z.try_data_offset(e, &off);
    return here ? base + off : nullptr;
  };
  auto take = [&](const ZipArchive& z, const ZipEntry& e) {
    const std::string_view name = e.name;
    if (!walk_has_prefix) {
      if (equals(name, "data.pkl") || (name.size() > 9 && ends_with(name, "/data.pkl"))) {
        walk_prefix = name.substr(0, name.size() - 8);
        walk_has_prefix = true;
        walk_from = z.entries().size() + 1;
      }
      return true;
    }
    if (name.size() <= walk_prefix.size() + 5 || !starts_with(name, walk_prefix)) return true;
    const std::string_view rest(name.data() + walk_prefix.size(), name.size() - walk_prefix.size());  // a longer name
    if (!starts_with(rest, "data/")) return true;
    ++data_records;
    uint32_t n = 0;
    const size_t index = z.entries().size();  // its index, if kept
    StoredRecord* r = numbered_data(rest, z.record_count(), &n) ? claim(n, index) : nullptr;
    if (r == nullptr) return true;
    const uint8_t* data = in_memory(z, e);
    *r = StoredRecord{data, e.uncompressed_size, data != nullptr ? StringIndex::npos : static_cast<uint32_t>(index)};
    return data == nullptr;  // taken out when its bytes are at hand
  };
  PTREAD_TRY(ZipArchive zip, ZipArchive::open(src, opt.limits, take));
  // The folder holding data.pkl; the shallowest wins.
  const ZipEntry* pkl = nullptr;
  size_t best_depth = SIZE_MAX;
  for (const auto& e : zip.entries()) {
    const std::string_view n = e.name;
    if (equals(n, "data.pkl") || (n.size() > 9 && ends_with(n, "/data.pkl"))) {
      const size_t depth = static_cast<size_t>(std::count(n.begin(), n.end(), '/'));
      if (depth < best_depth) {
        best_depth = depth;
        pkl = &e;
      }
    }
  }
  if (pkl == nullptr) {
    for (const auto& e : zip.entries()) {
      const std::string_view n = e.name;
      if (n == "model.json" || (n.size() > 11 && ends_with(n, "/model.json"))) {
        return make_error(ErrorCode::unsupported_format,
                          "a TorchScript archive in the torch 1.0-1.2 layout (model.json and tensors/, record '" +
                              std::string(n) + "'), which this version does not read; load and re-save it with torch.jit.save "
                              "in torch >= 1.3");
      }
    }
    std::string names;
    for (size_t k = 0; k < zip.entries().size() && k < 5; ++k) {
      names += k ? ", '" : "'";
      names += zip.entries()[k].name;
      names += "'";
    }
    return make_error(ErrorCode::no_data_pkl,
                      "zip archive '" + src->name() + "' has no data.pkl record (" +
                          std::to_string(zip.record_count()) + " records" +
                          (names.empty() ? std::string() : ": " + names) + "): not a torch.save file");
  }
  m.archive_prefix = std::string(pkl->name.substr(0, pkl->name.size() - 8));
  const std::string& prefix = m.archive_prefix;
  // The walk took the numbered records under walk_prefix that follow its data.pkl; this
  // loop adds those before it. A shallower data.pkl later on makes the walk's records some
  // other folder's (not this checkpoint's): this loop then finds them all.
  const bool walked = walk_has_prefix && walk_prefix == prefix;
  if (!walked) {
    data_by_number.truncate(0);
    data_records = 0;
    walk_from = SIZE_MAX;
  }
  std::vector<const ZipEntry*> code_files;
  const ZipEntry* constants = nullptr;
  const ZipEntry* byteorder = nullptr;
  for (size_t k = 0; k < zip.entries().size(); ++k) {
    const ZipEntry& e = zip.entries()[k];
    if (e.name.size() <= prefix.size() || !starts_with(e.name, prefix)) continue;
    const std::string_view rest = e.name.substr(prefix.size());
    uint32_t n = 0;
    if (rest.size() > 5 && starts_with(rest, "data/")) {
      if (k >= walk_from) continue;  // counted and numbered by the walk
      ++data_records;
      if (StoredRecord* r = numbered_data(rest, zip.record_count(), &n) ? claim(n, k) : nullptr) {
        *r = StoredRecord{in_memory(zip, e), e.uncompressed_size, static_cast<uint32_t>(k)};
      }
    } else if (rest.size() > 8 && starts_with(rest, "code/") && ends_with(rest, ".py")) {
      code_files.push_back(&e);
    } else if (rest == "constants.pkl") {
      if (constants == nullptr) constants = &e;
    } else if (rest == "byteorder") {
      if (byteorder == nullptr) byteorder = &e;
    }
  }
  m.format = constants ? Format::torchscript : Format::zip;
  if (constants != nullptr) {
    uint64_t code_bytes = 0;
    for (const ZipEntry* e : code_files) {
      code_bytes += e->uncompressed_size;
      if (code_bytes > opt.limits.max_pickle_bytes) {
        return make_error(ErrorCode::limit_exceeded, "TorchScript code/ files larger than Limits::max_pickle_bytes");
      }
      auto read = zip.read(*e);
      if (!read && read.error().code() == ErrorCode::zip_unsupported_compression) {
        // torch deflates code/; without zlib, names come from the attributes alone.
        m.script_classes.clear();
        break;
      }
      PTREAD_TRY(Bytes code, std::move(read));
      std::string qualifier(e->name.substr(prefix.size() + 5, e->name.size() - prefix.size() - 8));
      std::replace(qualifier.begin(), qualifier.end(), '/', '.');
      parse_script_classes(qualifier, std::string_view(reinterpret_cast<const char*>(code.data), code.size), &m.script_classes);
    }
  }

  if (const ZipEntry* bo = byteorder) {
    PTREAD_TRY(Bytes b, zip.read(*bo));
    std::string order(reinterpret_cast<const char*>(b.data), std::min<size_t>(b.size, 16));
    while (!order.empty() && std::isspace(static_cast<unsigned char>(order.back()))) order.pop_back();
    if (order == "big") {
      m.big_endian = true;
    } else if (order != "little") {
      return make_error(ErrorCode::zip_corrupt, "record '" + std::string(bo->name) + "' says byte order '" + order + "'");
    }
  }
  if (pkl->method == 0 && pkl->uncompressed_size > src->size()) {
    return make_error(ErrorCode::zip_record_out_of_bounds, "record '" + std::string(pkl->name) + "' claims " +
                                                               std::to_string(pkl->uncompressed_size) +
                                                               " stored bytes, more than the file holds");
  }
  if (pkl->uncompressed_size > opt.limits.max_pickle_bytes) {
    return make_error(ErrorCode::limit_exceeded, "data.pkl is larger than Limits::max_pickle_bytes");
  }
  PTREAD_TRY(Bytes pickle, zip.read(*pkl));

  const bool copy_storages = opt.mode == LoadMode::read;
  const bool swap = m.big_endian;
  const ZipArchive& z = zip;
  // Storages that are views of the source share blocks of Storage objects (StorageViews).
  // Storages that own their bytes (read mode, byte-swapped, inflated) are allocated one by
  // one, so each buffer is freed as soon as its last tensor is.
  StorageViews views(src, static_cast<size_t>(std::max<uint64_t>(zip.record_count(), 1)));
  std::string name;
  const char* dir = "data/";  // constants.pkl's storages are under constants/
  StorageLoader loader = [&z, &data_by_number, &name, &prefix, &views, &dir, copy_storages, swap, fill](
                             std::string_view key, uint64_t nbytes, DType dtype) -> Result<std::shared_ptr<const Storage>> {
    const bool swapped = swap && dtype_swap_unit(dtype) > 1;
    const ZipEntry* e = nullptr;
    const StoredRecord* r = nullptr;
    uint32_t n = 0;
    if (dir[0] == 'd' && decimal_key(key, &n) && n < data_by_number.size()) {
      r = &data_by_number[n];  // (one in memory that needs no copy is the hooks' own view)
      if (r->data == nullptr && r->entry == StringIndex::npos) r = nullptr;  // no such record
      if (r != nullptr && r->entry != StringIndex::npos) e = &z.entries()[r->entry];
    }
    name = prefix;
    name += dir;
    name += key;
    if (r == nullptr) e = z.find(name);
    if (r == nullptr && e == nullptr) {
      return make_error(ErrorCode::record_missing,
                        "storage record '" + name + "' named by data.pkl is missing from the archive");
    }
    const uint64_t held = r != nullptr ? r->size : e->uncompressed_size;
    if (held < nbytes) {
      return make_error(ErrorCode::storage_too_small, "storage record '" + name + "' holds " + std::to_string(held) +
                                                          " bytes; data.pkl says it holds " + std::to_string(nbytes));
    }
    Bytes b;
    if (r != nullptr && r->data != nullptr) {
      b = Bytes{r->data, static_cast<size_t>(held), nullptr};  // in memory (the walk may have kept no entry)
    } else {
      if (!swapped && !copy_storages) {
        PTREAD_TRY(const uint8_t* p, z.view(*e));
        if (p != nullptr) return views.make(p, e->uncompressed_size);  // a view of the source
      }
      if (copy_storages && !swapped && e->method == 0 && z.source().base() == nullptr) {
        // Read mode: the buffer now, its bytes after the pickle (run_fill_jobs).
        PTREAD_TRY(uint64_t off, z.stored_offset(*e));
        const size_t size = static_cast<size_t>(e->uncompressed_size);
        PTREAD_TRY(auto buf, allocate_aligned(size));
        fill->push_back({off, buf.get(), size});
        const uint8_t* p = buf.get();
        return std::make_shared<const Storage>(p, size, std::move(buf));
      }
      PTREAD_TRY(b, z.read(*e));
    }
    // Bytes of the source (not inflated into a buffer of their own) are copied for read mode,
    // and stored big-endian ones are converted in a buffer of our own (never in the mapping).
    const bool of_source = b.owner == nullptr || b.owner.get() == static_cast<const void*>(&z.source());
    if (swapped || (copy_storages && of_source)) {
      PTREAD_TRY(auto buf, allocate_aligned(b.size));
      std::memcpy(buf.get(), b.data, b.size);
      if (swapped) byteswap_elements(buf.get(), b.size, dtype_swap_unit(dtype));
      const uint8_t* p = buf.get();
      return std::make_shared<const Storage>(p, b.size, std::move(buf));
    }
    if (of_source) return views.make(b.data, b.size);  // kept alive by the block, as every view
    return std::make_shared<const Storage>(b.data, b.size, std::move(b.owner));
  };

  // Usually one tensor per storage record: room for that many.
  TorchHooks hooks(m, loader, opt.limits);
  hooks.expect_storages(data_records);
  if (!copy_storages) hooks.set_stored_records(&data_by_number, &views, swap);  // views without the loader
  PickleVM vm(m.graph, hooks, opt.limits, std::string(pkl->name));
  vm.set_tensor_runs(opt.tensor_runs);
  PTREAD_TRY(m.root, vm.run(pickle.data, pickle.size));
  PTREAD_CHECK(hooks.finish());
  if (constants != nullptr) {
    // TorchScript's tensor constants: their own pickle and storage keys.
    if (constants->uncompressed_size > opt.limits.max_pickle_bytes) {
      return make_error(ErrorCode::limit_exceeded, "constants.pkl is larger than Limits::max_pickle_bytes");
    }
    PTREAD_TRY(Bytes cpkl, zip.read(*constants));
    dir = "constants/";
    TorchHooks chooks(m, loader, opt.limits);
    PickleVM cvm(m.graph, chooks, opt.limits, std::string(constants->name));
    cvm.set_tensor_runs(opt.tensor_runs);
    PTREAD_TRY(m.constants_root, cvm.run(cpkl.data, cpkl.size));
    PTREAD_CHECK(chooks.finish());
  }
  return {};
}

inline Result<std::shared_ptr<Model>> read_zip_checkpoint(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  auto model = std::make_shared<Model>();
  std::vector<FillJob> fill;
  PTREAD_CHECK(read_zip_graph(src, opt, *model, &fill));
  PTREAD_CHECK(run_fill_jobs(*src, fill, opt.threads));
  PTREAD_CHECK(realign_storages(*model));
  PTREAD_CHECK(name_tensors(*model, opt.limits));
  return model;
}

}  // namespace detail
}  // namespace ptread
