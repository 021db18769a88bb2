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
#include "../torch/naming.hpp"
#include "../torch/hooks.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>

namespace ptread {
namespace detail {

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

// The directory walk's result. The storages, which torch names data/0, data/1 ... under
// the folder of data.pkl: data_by_number[n] is the record data/<n>: when it is stored and
// its local header as expected, its bytes in memory; its entry, if the archive keeps one.
// Torch writes data.pkl first, so the walk takes the numbered records under the folder of
// the first data.pkl out as it meets them (bytes in memory, no ZipEntry: read in file
// order, no second pass over 100,000 entries). The first of equal names wins, as in
// ZipArchive::find. (A StoredRecord's data is nullptr when it is read through the
// ZipArchive; its entry is StringIndex::npos when it is not in zip.entries().)
struct ZipWalk {
  ZipWalk() = default;
  ZipWalk(const ZipWalk&) = delete;
  ZipWalk& operator=(const ZipWalk&) = delete;
  BlockPool pool;  // data_by_number's blocks
  SegmentedVector<StoredRecord> data_by_number{&pool};
  size_t data_records = 0;  // all data/ records under the folder, numbered or not
  std::string walk_prefix;
  bool walk_has_prefix = false;
  size_t walk_from = SIZE_MAX;  // the index of the first entry kept after that data.pkl

  // Slot n for a record: when no record has it yet, or when the walk gave it one that comes
  // later in the directory (entries kept after walk_from, or taken out) than this one.
  StoredRecord* claim(uint32_t n, size_t index) {
    while (n >= data_by_number.size()) data_by_number.push_back(StoredRecord{nullptr, 0, StringIndex::npos});
    StoredRecord& r = data_by_number[n];
    const bool empty = r.data == nullptr && r.entry == StringIndex::npos;
    const bool later = !empty && index < walk_from && (r.entry == StringIndex::npos || r.entry >= walk_from);
    return empty || later ? &r : nullptr;
  }
  // "data/<n>" (rest starts with "data/"), n below a bound the record count sets.
  static bool numbered_data(std::string_view rest, uint64_t records, uint32_t* n) {
    return decimal_key(std::string_view(rest.data() + 5, rest.size() - 5), n) && *n < 2 * records + 4096;
  }
  // A stored record's bytes where the source holds them in memory (its local header as
  // expected), or nullptr.
  static const uint8_t* in_memory(const ZipArchive& z, const ZipEntry& e, FileWindow* headers = nullptr) {
    const uint8_t* base = z.source().base();
    uint64_t off;
    const bool here = base != nullptr && e.method == 0 && e.compressed_size == e.uncompressed_size &&
                      z.try_data_offset(e, &off, headers);
    return here ? base + off : nullptr;
  }
  // Whether the walk reads the local headers through a FileWindow: a mapped archive whose
  // records lie closer together on average than kDenseRecordBytes (100,000 tensors of a
  // few elements: a header every ~200 bytes, every page of the file touched for 30 bytes
  // each). Records far apart (large tensors) are read where they lie: a window would copy
  // kBytes to read 30.
  static constexpr uint64_t kDenseRecordBytes = 1024;
  static bool dense(const ZipArchive& z) {
    return z.source().base() != nullptr && z.record_count() >= 1024 &&
           z.source().size() / z.record_count() <= kDenseRecordBytes;
  }
};

// Record names after the archive's folder compare without case, as torch finds records
// (miniz's lookup): "Data.pkl", "DATA/0" are data.pkl and data/0 to torch.load.
inline bool is_data_pkl(std::string_view name) {
  return iequals(name, "data.pkl") || (name.size() > 9 && iends_with(name, "/data.pkl"));
}

// Walks the directory of z (located, not walked yet) into z and w, calling tick() after
// every 1,024 records (read_zip_overlapped keeps the chunk reserve filled meanwhile).
struct NoTick {
  void operator()() const noexcept {}
};
template <class Tick = NoTick>
inline Status walk_zip(ZipArchive& z, ZipWalk& w, Tick tick = Tick()) {
  uint32_t seen = 0;
  std::optional<FileWindow> headers;
  if (ZipWalk::dense(z)) headers.emplace(z.source());
  FileWindow* window = headers ? &*headers : nullptr;
  auto take = [&w, &tick, &seen, window](const ZipArchive& a, const ZipEntry& e) {
    if (PTREAD_UNLIKELY((++seen & 1023) == 0)) tick();
    const std::string_view name = e.name;
    if (!w.walk_has_prefix) {
      if (is_data_pkl(name)) {
        w.walk_prefix = std::string(name.substr(0, name.size() - 8));  // (e.name lasts for this call only)
        w.walk_has_prefix = true;
        w.walk_from = a.entries().size() + 1;
      }
      return true;
    }
    if (name.size() <= w.walk_prefix.size() + 5 || !starts_with(name, w.walk_prefix)) return true;
    const std::string_view rest(name.data() + w.walk_prefix.size(), name.size() - w.walk_prefix.size());  // a longer name
    if (!starts_with(rest, "data/") && !istarts_with(rest, "data/")) return true;  // (exact first: the hot path)
    ++w.data_records;
    uint32_t n = 0;
    const size_t index = a.entries().size();  // its index, if kept
    StoredRecord* r = ZipWalk::numbered_data(rest, a.record_count(), &n) ? w.claim(n, index) : nullptr;
    if (r == nullptr) return true;
    const uint8_t* data = ZipWalk::in_memory(a, e, window);
    *r = StoredRecord{data, ZipArchive::data_size(e), data != nullptr ? StringIndex::npos : static_cast<uint32_t>(index)};
    return data == nullptr;  // taken out when its bytes are at hand
  };
  return z.walk(take);
}

// What the walked directory says about the checkpoint, before its pickles are read.
struct ZipPlan {
  const ZipEntry* pkl = nullptr;        // data.pkl
  const ZipEntry* constants = nullptr;  // TorchScript's constants.pkl
  std::string prefix;                   // the folder of data.pkl
  bool big_endian = false;
  std::vector<ScriptClass> script_classes;
};

inline Status plan_zip(const Source& src, const ReadOptions& opt, const ZipArchive& zip, ZipWalk& w, ZipPlan* plan) {
  // The folder holding data.pkl; the shallowest wins.
  const ZipEntry* pkl = nullptr;
  size_t best_depth = SIZE_MAX;
  for (const auto& e : zip.entries()) {
    const std::string_view n = e.name;
    if (is_data_pkl(n)) {
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
                      "zip archive '" + src.name() + "' has no data.pkl record (" +
                          std::to_string(zip.record_count()) + " records" +
                          (names.empty() ? std::string() : ": " + names) + "): not a torch.save file");
  }
  plan->pkl = pkl;
  plan->prefix = std::string(pkl->name.substr(0, pkl->name.size() - 8));
  const std::string& prefix = plan->prefix;
  // The walk took the numbered records under walk_prefix that follow its data.pkl; this
  // loop adds those before it. A shallower data.pkl later on makes the walk's records some
  // other folder's (not this checkpoint's): this loop then finds them all.
  const bool walked = w.walk_has_prefix && w.walk_prefix == prefix;
  if (!walked) {
    w.data_by_number.truncate(0);
    w.data_records = 0;
    w.walk_from = SIZE_MAX;
  }
  std::vector<const ZipEntry*> code_files;
  const ZipEntry* byteorder = nullptr;
  for (size_t k = 0; k < zip.entries().size(); ++k) {
    const ZipEntry& e = zip.entries()[k];
    if (e.name.size() <= prefix.size() || !starts_with(e.name, prefix)) continue;
    const std::string_view rest = e.name.substr(prefix.size());
    uint32_t n = 0;
    if (rest.size() > 5 && istarts_with(rest, "data/")) {
      if (k >= w.walk_from) continue;  // counted and numbered by the walk
      ++w.data_records;
      if (StoredRecord* r = ZipWalk::numbered_data(rest, zip.record_count(), &n) ? w.claim(n, k) : nullptr) {
        *r = StoredRecord{ZipWalk::in_memory(zip, e), ZipArchive::data_size(e), static_cast<uint32_t>(k)};
      }
    } else if (rest.size() > 8 && istarts_with(rest, "code/") && iends_with(rest, ".py")) {
      code_files.push_back(&e);
    } else if (iequals(rest, "constants.pkl")) {
      if (plan->constants == nullptr) plan->constants = &e;
    } else if (iequals(rest, "byteorder")) {
      if (byteorder == nullptr) byteorder = &e;
    }
  }
  if (plan->constants != nullptr) {
    uint64_t code_bytes = 0;
    for (const ZipEntry* e : code_files) {
      code_bytes += e->uncompressed_size;
      if (code_bytes > opt.limits.max_pickle_bytes) {
        return make_error(ErrorCode::limit_exceeded, "TorchScript code/ files larger than Limits::max_pickle_bytes");
      }
      auto read = zip.read(*e);
      if (!read && read.error().code() == ErrorCode::zip_unsupported_compression) {
        // torch deflates code/; without zlib, names come from the attributes alone.
        plan->script_classes.clear();
        break;
      }
      PTREAD_TRY(Bytes code, std::move(read));
      std::string qualifier(e->name.substr(prefix.size() + 5, e->name.size() - prefix.size() - 8));
      std::replace(qualifier.begin(), qualifier.end(), '/', '.');
      parse_script_classes(qualifier, std::string_view(reinterpret_cast<const char*>(code.data), code.size), &plan->script_classes);
    }
  }
  // torch.load honours the byteorder record (torch >= 2.1: big is swapped, anything but big
  // or little refused). torch.jit.load, which reads TorchScript archives (torch.load hands
  // them to it), never reads it: their bytes are taken as they are, whatever it says (torch
  // 1.13 and 2.11, checked; jit.save writes `little`).
  if (const ZipEntry* bo = plan->constants == nullptr ? byteorder : nullptr) {
    PTREAD_TRY(Bytes b, zip.read(*bo));
    // the record's bytes exactly, as torch compares them (b"little\n" is refused too)
    const std::string_view order(reinterpret_cast<const char*>(b.data), b.size);
    if (order == "big") {
      plan->big_endian = true;
    } else if (order != "little") {
      return make_error(ErrorCode::zip_corrupt, "record '" + std::string(bo->name) + "' says byte order " +
                                                    python_quote(order.substr(0, 16), true) +
                                                    (order.size() > 16 ? "..." : "") +
                                                    " (torch reads b'little' or b'big', exactly)");
    }
  }
  if (pkl->method == 0 && pkl->uncompressed_size > src.size()) {
    return make_error(ErrorCode::zip_record_out_of_bounds, "record '" + std::string(pkl->name) + "' claims " +
                                                               std::to_string(pkl->uncompressed_size) +
                                                               " stored bytes, more than the file holds");
  }
  if (pkl->uncompressed_size > opt.limits.max_pickle_bytes) {
    return make_error(ErrorCode::limit_exceeded, "data.pkl is larger than Limits::max_pickle_bytes");
  }
  return {};
}

// torch.jit.load reads a TorchScript archive's pickles (data.pkl, constants.pkl) with its
// own unpickler (torch/csrc/jit/serialization/unpickler.cpp), which wants PROTO 2 first and
// then reads only the opcodes below, a LONG1 only of 8 bytes; any other opcode (POP, DUP,
// APPEND, FRAME, a protocol 4 one ...) it refuses ("Unknown opcode for unpickling"): this
// refuses what torch.jit.load would, up to STOP. A pickle that ends before is the VM's to
// report.
inline Status check_script_opcodes(const uint8_t* p, size_t n, std::string_view name) {
  auto refused = [&](size_t at, const std::string& what) {
    return make_error(ErrorCode::pickle_unsupported_opcode,
                      what + " at byte " + std::to_string(at) + " of '" + std::string(name) +
                          "' in a TorchScript archive: torch.jit.load's unpickler, which reads it, refuses it");
  };
  if (n < 2 || p[0] != 0x80 || p[1] != 2) return refused(0, "a pickle that does not start with PROTO 2");
  size_t i = 2;
  while (i < n) {
    const uint8_t op = p[i];
    size_t len = 1;  // the opcode and its operand
    switch (op) {
      case '.':  // STOP
        return {};
      case ']': case ')': case '(': case 0x88: case 0x89: case 'N': case 't': case 0x85: case 0x86: case 0x87:
      case '}': case 'e': case 'l': case 'd': case 'u': case 0x81: case 'b': case 'R': case 'Q': case 's':
        break;
      case 'q': case 'K': case 'h':  // BINPUT, BININT1, BINGET
        len = 2;
        break;
      case 'M':  // BININT2
        len = 3;
        break;
      case 'r': case 'J': case 'j':  // LONG_BINPUT, BININT, LONG_BINGET
        len = 5;
        break;
      case 'G':  // BINFLOAT
        len = 9;
        break;
      case 0x8a:  // LONG1
        if (n - i < 2) return {};
        if (p[i + 1] != 8) return refused(i, "a LONG1 of " + std::to_string(p[i + 1]) + " bytes (it reads 8 only)");
        len = 10;
        break;
      case 'X': {  // BINUNICODE
        if (n - i < 5) return {};
        const uint64_t text = load_u32(p + i + 1);
        if (text > n - i - 5) return {};
        len = 5 + static_cast<size_t>(text);
        break;
      }
      case 'c': {  // GLOBAL: two lines
        const void* a = std::memchr(p + i + 1, '\n', n - i - 1);
        if (a == nullptr) return {};
        const uint8_t* a_end = static_cast<const uint8_t*>(a) + 1;
        const void* b = std::memchr(a_end, '\n', static_cast<size_t>(p + n - a_end));
        if (b == nullptr) return {};
        len = static_cast<size_t>(static_cast<const uint8_t*>(b) + 1 - (p + i));
        break;
      }
      default: {
        const char* known = opcode_name(op);
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        return refused(i, known != nullptr ? std::string("opcode ") + known : std::string("byte ") + hex);
      }
    }
    if (len > n - i) return {};
    i += len;
  }
  return {};
}

// The storages of data.pkl ("data/<key>") and constants.pkl ("constants/<key>") for the
// hooks' loader: every storage but the views of numbered records in memory, which the
// hooks make themselves.
class ZipStorages {
 public:
  ZipStorages(const ZipArchive& z, const ZipWalk& w, const std::string& prefix, StorageViews& views, bool copy_storages,
              bool swap, std::vector<FillJob>* fill)
      : z_(z), w_(w), prefix_(prefix), views_(views), copy_storages_(copy_storages), swap_(swap), fill_(fill) {}
  const char* dir = "data/";  // constants.pkl's storages are under constants/

  StorageLoader loader() {
    return [this](std::string_view key, uint64_t nbytes, DType dtype) { return load(key, nbytes, dtype); };
  }

  // The bytes of record <dir><key> when it is stored and in memory, as load() would view
  // them, its size in *size; else nullptr (TorchHooks::bind_placeholders).
  const uint8_t* stored_view(std::string_view key, uint64_t* size) {
    const ZipEntry* e = z_.find(record_name(key));
    if (e == nullptr) return nullptr;
    *size = ZipArchive::data_size(*e);
    return ZipWalk::in_memory(z_, *e);
  }

 private:
  const std::string& record_name(std::string_view key) {
    name_ = prefix_;
    name_ += dir;
    name_ += key;
    return name_;
  }
  Result<std::shared_ptr<const Storage>> load(std::string_view key, uint64_t nbytes, DType dtype) {
    const bool swapped = swap_ && dtype_swap_unit(dtype) > 1;
    const ZipEntry* e = nullptr;
    const StoredRecord* r = nullptr;
    uint32_t n = 0;
    if (dir[0] == 'd' && decimal_key(key, &n) && n < w_.data_by_number.size()) {
      r = &w_.data_by_number[n];  // (one in memory that needs no copy is the hooks' own view)
      if (r->data == nullptr && r->entry == StringIndex::npos) r = nullptr;  // no such record
      if (r != nullptr && r->entry != StringIndex::npos) e = &z_.entries()[r->entry];
    }
    record_name(key);
    if (r == nullptr) e = z_.find(name_);
    if (r == nullptr && e == nullptr) {
      return make_error(ErrorCode::record_missing,
                        "storage record '" + name_ + "' named by data.pkl is missing from the archive");
    }
    const uint64_t held = r != nullptr ? r->size : ZipArchive::data_size(*e);
    if (held < nbytes) {
      return make_error(ErrorCode::storage_too_small, "storage record '" + name_ + "' holds " + std::to_string(held) +
                                                          " bytes; data.pkl says it holds " + std::to_string(nbytes));
    }
    Bytes b;
    if (r != nullptr && r->data != nullptr) {
      b = Bytes{r->data, static_cast<size_t>(held), nullptr};  // in memory (the walk may have kept no entry)
    } else {
      if (!swapped && !copy_storages_) {
        PTREAD_TRY(const uint8_t* p, z_.view(*e));
        if (p != nullptr) return views_.make(p, held);  // a view of the source
      }
      if (copy_storages_ && !swapped && e->method == 0 && z_.source().base() == nullptr) {
        // Read mode: the buffer now, its bytes after the pickle (run_fill_jobs).
        PTREAD_TRY(uint64_t off, z_.stored_offset(*e));
        const size_t size = static_cast<size_t>(held);
        PTREAD_TRY(auto buf, allocate_aligned(size));
        fill_->push_back({off, buf.get(), size});
        const uint8_t* p = buf.get();
        return std::make_shared<const Storage>(p, size, std::move(buf));
      }
      PTREAD_TRY(b, z_.read(*e));
    }
    // Bytes of the source (not inflated into a buffer of their own) are copied for read mode,
    // and stored big-endian ones are converted in a buffer of our own (never in the mapping).
    const bool of_source = b.owner == nullptr || b.owner.get() == static_cast<const void*>(&z_.source());
    if (swapped || (copy_storages_ && of_source)) {
      PTREAD_TRY(auto buf, allocate_aligned(b.size));
      std::memcpy(buf.get(), b.data, b.size);
      if (swapped) byteswap_elements(buf.get(), b.size, dtype_swap_unit(dtype));
      const uint8_t* p = buf.get();
      return std::make_shared<const Storage>(p, b.size, std::move(buf));
    }
    if (of_source) return views_.make(b.data, b.size);  // kept alive by the block, as every view
    return std::make_shared<const Storage>(b.data, b.size, std::move(b.owner));
  }

  const ZipArchive& z_;
  const ZipWalk& w_;
  const std::string& prefix_;
  StorageViews& views_;
  bool copy_storages_, swap_;
  std::vector<FillJob>* fill_;
  std::string name_;
};

// The 2 MiB chunks the naming walk after the pickle will take for m's specs and graph (the
// tensor list, Model::listed; Model::tensor_home; the walk's bit per node): how many the
// pickle VM gives the model's pool when it is done.
inline size_t naming_chunks(const Model& m) {
  const size_t bytes = m.specs.size() * (sizeof(Model::Listed) + sizeof(uint32_t)) + m.graph.nodes.size() / 8;
  return (bytes + kHugePage - 1) / kHugePage;
}

// The plan's fields that the model keeps.
inline void apply_plan(ZipPlan& plan, Model& m) {
  m.archive_prefix = plan.prefix;
  m.format = plan.constants ? Format::torchscript : Format::zip;
  m.big_endian = plan.big_endian;
  m.script_classes = std::move(plan.script_classes);
}

// A storage referenced again under another dtype or size (TorchHooks::retyped) gets the
// first reference's storage, as torch.load gives it; in a TorchScript archive, which
// torch.jit.load reads each reference of on its own, that would be a guess: refused.
inline Status check_retyped(const Model& m, const TorchHooks& hooks) {
  if (m.format != Format::torchscript || hooks.retyped().empty()) return {};
  return make_error(ErrorCode::unsupported_format,
                    hooks.retyped() + " in a TorchScript archive (torch.jit.save never writes that)");
}

// What torch.load refuses in a zip file, or torch.jit.load in a TorchScript archive, that
// the pickle held (TorchHooks::refusal): known to be which once the directory is read.
inline Status check_refusal(const Model& m, const TorchHooks& hooks) {
  const Error* e = hooks.refusal(m.format);
  if (e == nullptr) return {};
  return *e;
}

// TorchScript's tensor constants: their own pickle and storage keys.
inline Status read_zip_constants(const ReadOptions& opt, Model& m, const ZipArchive& zip, const ZipPlan& plan,
                                 ZipStorages& storages) {
  const ZipEntry* constants = plan.constants;
  if (constants == nullptr) return {};
  if (constants->uncompressed_size > opt.limits.max_pickle_bytes) {
    return make_error(ErrorCode::limit_exceeded, "constants.pkl is larger than Limits::max_pickle_bytes");
  }
  PTREAD_TRY(Bytes cpkl, zip.read(*constants));
  storages.dir = "constants/";
  TorchHooks chooks(m, storages.loader(), opt.limits);
  PickleVM cvm(m.graph, chooks, opt.limits, std::string(constants->name));
  cvm.set_tensor_runs(opt.tensor_runs);
  PTREAD_CHECK(check_script_opcodes(cpkl.data, cpkl.size, constants->name));
  PTREAD_TRY(m.constants_root, cvm.run(cpkl.data, cpkl.size));
  PTREAD_CHECK(check_retyped(m, chooks));
  return chooks.finish();
}

// The object graph, tensors and storages of data.pkl's bytes [pkl, pkl + size) into m
// (everything but the names), from the archive's walked directory. With `otherwise` set:
// where torch.load may read the pickle otherwise (a read crossing the end of its FRAME in
// a torch.save archive, PickleVM::torch_reads_otherwise()), *otherwise is set and m is to
// be dropped (see read_zip_pickles). With `unframed` set, the bytes are those of
// unframe_as_torch_load() and errors name offsets in the pickle they came from.
inline Status read_data_pkl(const std::shared_ptr<const Source>& src, const ReadOptions& opt, Model& m,
                            std::vector<FillJob>* fill, const ZipArchive& zip, const ZipWalk& w, ZipPlan& plan,
                            const uint8_t* pkl, size_t size, const UnframedPickle* unframed, bool* otherwise) {
  apply_plan(plan, m);
  const bool copy_storages = opt.mode == LoadMode::read;
  // Storages that are views of the source: entries of the table whose Storage objects are
  // made only with the first Tensor (StorageTable), or, those the loader makes (keys that
  // are not numbers, constants/), blocks of Storage objects (StorageViews). Storages that
  // own their bytes (read mode, byte-swapped, inflated) are allocated one by one, so each
  // buffer is freed as soon as its last tensor is.
  StorageViews views(src, static_cast<size_t>(std::max<uint64_t>(zip.record_count(), 1)));
  ZipStorages storages(zip, w, plan.prefix, views, copy_storages, m.big_endian, fill);
  // Usually one tensor per storage record: room for that many.
  TorchHooks hooks(m, storages.loader(), opt.limits);
  hooks.set_nested(opt);
  hooks.expect_storages(w.data_records);
  m.storage_table.set_source(src);
  if (!copy_storages) hooks.set_stored_records(&w.data_by_number, m.big_endian);  // views without the loader
  // (torch.jit.load's refusal of an opcode comes before any error of the VM's)
  if (m.format == Format::torchscript) PTREAD_CHECK(check_script_opcodes(pkl, size, plan.pkl->name));
  PickleVM vm(m.graph, hooks, opt.limits, std::string(plan.pkl->name));
  vm.set_tensor_runs(opt.tensor_runs);
  vm.set_unframed(unframed);
  auto root = vm.run(pkl, size);
  // torch.jit.load's unpickler reads a TorchScript archive's pickle flat, as the VM does.
  if (otherwise != nullptr && vm.torch_reads_otherwise() && m.format != Format::torchscript) {
    *otherwise = true;
    return {};
  }
  PTREAD_TRY(m.root, std::move(root));
  vm.give_chunks(m.pool, naming_chunks(m));
  PTREAD_CHECK(check_retyped(m, hooks));
  PTREAD_CHECK(check_refusal(m, hooks));
  PTREAD_CHECK(hooks.finish());
  return read_zip_constants(opt, m, zip, plan, storages);
}

// The archive's object graph, tensors and storages into *model (everything but the names),
// from its walked directory. A data.pkl that torch.load reads otherwise than flat (a read
// crossing a frame's end: Python's unpickler on a BytesIO then drops the frame's rest and
// reads on after it) is read again, into a new Model, as torch.load reads it.
inline Status read_zip_pickles(const std::shared_ptr<const Source>& src, const ReadOptions& opt,
                               std::shared_ptr<Model>& model, std::vector<FillJob>* fill, const ZipArchive& zip,
                               const ZipWalk& w, ZipPlan& plan) {
  PTREAD_TRY(Bytes pickle, zip.read(*plan.pkl));
  const size_t jobs = fill->size();
  bool otherwise = false;
  PTREAD_CHECK(read_data_pkl(src, opt, *model, fill, zip, w, plan, pickle.data, pickle.size, nullptr, &otherwise));
  if (!otherwise) return {};
  const UnframedPickle unframed = unframe_as_torch_load(pickle.data, pickle.size);
  model = std::make_shared<Model>();
  fill->resize(jobs);
  return read_data_pkl(src, opt, *model, fill, zip, w, plan, unframed.bytes.data(), unframed.bytes.size(), &unframed,
                       nullptr);
}

// The archive's graph into m, the directory walked on one thread while the other reads
// data.pkl, for a source in memory (mmap, memory modes) whose directory starts with a
// stored data.pkl, as torch writes it. The pickle's storages are placeholders of the size it
// declares until the walk is done, then bound to their records (TorchHooks::
// bind_placeholders). Returns false when the file is anything but the plain case (another
// data.pkl chosen, a byte order record saying big, a storage whose record is not stored in
// memory and large enough, an error in the pickle): m is then to be dropped and the
// pickle read again after the walk, as read_zip_pickles does, which gives whatever result
// or error reading without the overlap gives. Errors returned are the directory's, which
// come first either way.
inline Result<bool> read_zip_overlapped(const std::shared_ptr<const Source>& src, const ReadOptions& opt, Model& m,
                                        std::vector<FillJob>* fill, ZipArchive& zip, ZipWalk& w, ZipPlan& plan) {
  ZipEntry first;
  uint64_t off = 0;
  const bool plain = zip.first_entry(&first) && is_data_pkl(first.name) && first.method == 0 &&
                     first.compressed_size == first.uncompressed_size &&
                     first.uncompressed_size <= opt.limits.max_pickle_bytes && zip.try_data_offset(first, &off);
  if (!plain) {
    PTREAD_CHECK(walk_zip(zip, w));
    return false;
  }
  const uint8_t* pickle = src->base() + off;
  StorageViews views(src, static_cast<size_t>(std::max<uint64_t>(zip.record_count(), 1)));
  StorageLoader none = [](std::string_view, uint64_t, DType) -> Result<std::shared_ptr<const Storage>> {
    return make_error(ErrorCode::invalid_argument, "not a placeholder");  // never used: the hooks make them
  };
  // With a pickle of a megabyte or more, the thread walking the directory faults in the
  // chunks taken before it starts (the storage tables', the graph's and the memo's first:
  // written from the pickle's first bytes) and the next ones (ChunkReserve), then maps the
  // pickle's pages, and walks the directory a slice at a time, topping the chunks up
  // between slices (the pickle's thread takes one about every 1.5 ms; a walk of 100,000
  // records lasts 10-15 ms, reading the directory and the records' local headers through
  // the file: FileWindow), then keeps them ahead of the pickle until it ends. (On VMs with
  // shadowed page tables, that thread reading a byte of each of the pickle's pages saved
  // the pickle's thread 3-7 ms, but the walk, then the longer task, ended later: not done.
  // bench/README.md, "Fresh pages the pickle's thread no longer faults in".) A pickle of
  // torch's takes about 3 bytes of chunks per byte (100,000 tensors: 9.1 MB of pickle, 26
  // MiB); the reserve (4 per byte, at most 1 GiB; the pools map their own after it) is
  // address space only, and at most kAhead chunks are faulted in before they are taken: no
  // more than the rest of the pickle will take at the rate so far (the VM reports the bytes
  // it has read), so that near its end no chunk is faulted in for nothing.
  constexpr size_t kAhead = 4;
  ChunkReserve reserve;
  const uint64_t pickle_size = first.uncompressed_size;
  const bool big = pickle_size >= (uint64_t{1} << 20);
  if (big) reserve.map(static_cast<size_t>(std::min<uint64_t>(pickle_size / (kHugePage / 4) + kAhead, 512)));
  reserve.expect(static_cast<size_t>(pickle_size));
  TorchHooks hooks(m, std::move(none), opt.limits);  // (after the reserve: destroyed before it)
  hooks.set_nested(opt);
  hooks.set_chunk_reserve(&reserve);
  hooks.expect_storages(static_cast<size_t>(zip.record_count()));  // (before the filling thread starts)
  m.storage_table.set_source(src);
  hooks.set_placeholders();
  struct PoolReserve {  // m.pool takes from the reserve while it lives
    BlockPool& pool;
    PoolReserve(BlockPool& p, ChunkReserve& r) : pool(p) { pool.set_reserve(&r); }
    ~PoolReserve() { pool.set_reserve(nullptr); }
    PoolReserve(const PoolReserve&) = delete;
    PoolReserve& operator=(const PoolReserve&) = delete;
  } pool_reserve(m.pool, reserve);
  m.pool.prime();  // (before the filling thread starts: it faults the chunk in first)
  // Made here: its chunks are not unmapped while fill() runs. The walking thread destroys
  // it once the pickle is read and fill() has returned (its memo, 6.6 MB for 100,000
  // tensors, unmapped while the pickle's thread binds the storages), else it goes with
  // this function.
  std::optional<PickleVM> vm(std::in_place, m.graph, hooks, opt.limits, std::string(first.name));
  vm->set_tensor_runs(opt.tensor_runs);
  vm->set_chunk_reserve(&reserve);
  vm->prime_pool();
  Status walked, parsed;
  bool otherwise = false;  // vm->torch_reads_otherwise(): read again (read_zip_pickles)
  std::atomic<bool> walk_done{false}, vm_done{false};
  // After the walk and the pickle: the directory's plan, the storages bound, the constants.
  auto finish = [&]() -> Result<bool> {
    PTREAD_CHECK(walked);
    PTREAD_CHECK(plan_zip(*src, opt, zip, w, &plan));
    ZipStorages storages(zip, w, plan.prefix, views, false, plan.big_endian, fill);
    auto by_name = [&storages](std::string_view key, uint64_t* size) { return storages.stored_view(key, size); };
    if (!parsed || otherwise || plan.pkl->local_header_offset != first.local_header_offset || plan.pkl->name != first.name ||
        !hooks.bind_placeholders(w.data_by_number, plan.big_endian, by_name) || !hooks.finish()) {
      return false;
    }
    apply_plan(plan, m);
    // (first, as read_data_pkl checks it, which reads the pickle again where the VM failed)
    if (m.format == Format::torchscript) {
      PTREAD_CHECK(check_script_opcodes(pickle, static_cast<size_t>(first.uncompressed_size), first.name));
    }
    PTREAD_CHECK(check_retyped(m, hooks));
    PTREAD_CHECK(check_refusal(m, hooks));
    PTREAD_CHECK(read_zip_constants(opt, m, zip, plan, storages));
    return true;
  };
  std::optional<Result<bool>> finished;  // by the pickle's thread, when the walk was done first
#if PTREAD_EXCEPTIONS
  std::exception_ptr thrown[2];
#endif
  auto task = [&](size_t t) {
#if PTREAD_EXCEPTIONS
    try {
#endif
      if (t == 0) {
        reserve.begin();
        auto root = vm->run(pickle, static_cast<size_t>(first.uncompressed_size));
        otherwise = vm->torch_reads_otherwise();
        vm->give_chunks(m.pool, naming_chunks(m));  // before vm_done: the other thread destroys the VM after
        vm_done.store(true, std::memory_order_release);  // before end(): fill() returns after both
        reserve.end();
        if (root) {
          m.root = *root;
        } else {
          static_cast<void>(parsed = std::move(root).error());  // (nvcc: nodiscard Status)
        }
        // The usual case: the walk ended first. (Never waited for: where one thread runs
        // both tasks, this one runs first.)
        if (walk_done.load(std::memory_order_acquire)) static_cast<void>(finished.emplace(finish()));  // (nvcc: nodiscard)
      } else {
        auto top_up = [&reserve] { reserve.fill(kAhead, false); };
        top_up();
        constexpr size_t kSlice = size_t{1} << 20;
        for (size_t at = 0; big && at < pickle_size; at += kSlice) {
          const size_t n = std::min<size_t>(kSlice, static_cast<size_t>(pickle_size) - at);
          populate_read(pickle + at, n);
          top_up();
        }
        static_cast<void>(walked = walk_zip(zip, w, top_up));
        walk_done.store(true, std::memory_order_release);
        reserve.fill(kAhead, true);
        if (vm_done.load(std::memory_order_acquire)) vm.reset();
      }
#if PTREAD_EXCEPTIONS
    } catch (...) {
      if (t == 0) reserve.end();
      thrown[t] = std::current_exception();
    }
#endif
  };
  parallel_for(2, 2, task);
#if PTREAD_EXCEPTIONS
  for (const std::exception_ptr& e : thrown) {
    if (e) std::rethrow_exception(e);
  }
#endif
  if (finished) return std::move(*finished);
  return finish();
}

inline Result<std::shared_ptr<Model>> read_zip_checkpoint(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  auto model = std::make_shared<Model>();
  std::vector<FillJob> fill;
  {
    // The directory is gone when the graph is read: the tensors keep what they need.
    PTREAD_TRY(ZipArchive zip, ZipArchive::locate(src, opt.limits));
    ZipWalk walk;
    ZipPlan plan;
    bool read = false;
    if (opt.overlap && opt.mode != LoadMode::read && src->base() != nullptr && resolve_threads(opt.threads) >= 2) {
      PTREAD_TRY(read, read_zip_overlapped(src, opt, *model, &fill, zip, walk, plan));
      model->overlapped = read;
      if (!read && plan.pkl != nullptr) model = std::make_shared<Model>();  // (else untouched)
    } else {
      PTREAD_CHECK(walk_zip(zip, walk));
    }
    if (!read) {
      if (plan.pkl == nullptr) PTREAD_CHECK(plan_zip(*src, opt, zip, walk, &plan));
      PTREAD_CHECK(read_zip_pickles(src, opt, model, &fill, zip, walk, plan));
    }
  }
  PTREAD_CHECK(run_fill_jobs(*src, fill, opt.threads));
  PTREAD_CHECK(realign_storages(*model));
  PTREAD_CHECK(name_tensors(*model, opt.limits, src->size()));
  return model;
}

}  // namespace detail
}  // namespace ptread
