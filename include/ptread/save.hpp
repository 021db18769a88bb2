// ptread — writers: safetensors files and torch.save zip files (state dicts).
//
//   auto ck = ptread::Checkpoint::open("model.pt");
//   ptread::SavePtOptions o;
//   o.float_dtype = ptread::DType::F16;                     // optional: floats as F16
//   auto r = ptread::save_pt("sd.pt", ck->tensors(), o);    // Result<SaveReport>
//   auto s = ptread::save_safetensors("sd.safetensors", ck->tensors());
//
// Both take ck.tensors(), any range of NamedTensor, or of std::pair<std::string, Tensor>
// (a std::map<std::string, Tensor> too). Both write `PATH.tmp` and rename it when done,
// so a failed write leaves nothing behind, and stream the data in bounded pieces (a
// mapped checkpoint is written without copying it).
//
// save_pt writes what torch.save(OrderedDict) writes, for torch.load(path,
// weights_only=True) of torch 1.13 and 2.x:
//   ARCHIVE/data.pkl     protocol 2 pickle, byte for byte as Python pickles it:
//                        OrderedDict{name: _rebuild_tensor_v2(persistent_load(('storage',
//                        torch.FloatStorage, '0', 'cpu', numel)), offset, size, stride,
//                        False, OrderedDict())}; dtypes without a storage class (fp8,
//                        U16/U32/U64, C32) as torch >= 2.1 writes them:
//                        _rebuild_tensor_v3(persistent_load(('storage',
//                        torch.storage.UntypedStorage, key, 'cpu', nbytes)), ..., torch.uint16)
//   ARCHIVE/byteorder    "little" (torch >= 2.1 writes it; older versions ignore it)
//   ARCHIVE/data/0 ...   one record per storage, whole, little-endian, 64-byte aligned,
//                        in order of first use
//   ARCHIVE/version      "3\n"
// ARCHIVE is the file name without folder and extension, as torch.save names it. Tensors
// that share a Storage share one record and keep their offset, size and stride (tied
// weights stay tied). The location is always 'cpu', requires_grad always False (as
// state_dict() gives them). Tensors with the conj or neg bit get a record of their own with
// the bit applied (torch 1.13's _rebuild_tensor_v2 takes no metadata argument).
//
// save_safetensors writes each tensor's values, contiguous and little-endian, under its
// name (tied tensors are written once per name: the format has no sharing), the header
// JSON padded with spaces so the data starts 8-byte aligned.
#pragma once

#include "memory/keyed_hash.hpp"
#include "writers/pickle_writer.hpp"
#include "text/text.hpp"
#include "writers/zip_writer.hpp"
#include "torch/model.hpp"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ptread {

// Called with the data bytes written so far and the total, first with done == 0, last with
// done == total.
using SaveProgress = std::function<void(uint64_t done, uint64_t total)>;

struct SaveReport {
  uint64_t file_bytes = 0;                // size of the file written
  size_t tensors = 0;                     // tensors written
  size_t storages = 0;                    // save_pt: storage records
  std::vector<UnsupportedEntry> skipped;  // save_safetensors with skip_unsupported: what and why
};

struct SavePtOptions {
  // The folder inside the zip; empty: the file name without folder and extension, as
  // torch.save does ("archive" when that is empty).
  std::string archive_name;
  // When set (F16, BF16, F32 or F64): floating tensors (F16, BF16, F32, F64) are written
  // as this dtype, converted as torch's .to(dtype) converts on the CPU; their storages are
  // converted whole, so tied tensors stay tied. Other dtypes are written as they are.
  std::optional<DType> float_dtype;
  // Write every ZIP64 field even when nothing needs it (they are needed from 4 GiB on).
  bool force_zip64 = false;
  SaveProgress progress;
};

struct SaveSafetensorsOptions {
  // The header's "__metadata__" (string to string), in this order; none when empty.
  std::vector<std::pair<std::string, std::string>> metadata;
  // false: a tensor safetensors cannot hold (dtypes C32, C128, FNUZ fp8, quantized; a name
  // that is not UTF-8, is "__metadata__", or repeats an earlier name) is an error.
  // true: it is left out and listed in SaveReport::skipped.
  bool skip_unsupported = false;
  SaveProgress progress;
};

namespace detail {

struct NamedRef {
  std::string_view name;
  const Tensor* tensor;
};
inline NamedRef named_ref(const NamedTensor& e) { return {e.name, &e.tensor}; }
template <class K>
NamedRef named_ref(const std::pair<K, Tensor>& e) {
  return {std::string_view(e.first), &e.second};
}
template <class Range>
std::vector<NamedRef> named_refs(const Range& range) {
  std::vector<NamedRef> refs;
  for (const auto& e : range) refs.push_back(named_ref(e));
  return refs;
}

// How torch.save names a dtype: the storage class of _rebuild_tensor_v2 (torch's
// _dtype_to_storage_type_map), else the dtype global of _rebuild_tensor_v3 (its _new_dtypes).
inline bool torch_save_names(DType t, const char** storage_class, const char** v3_dtype) noexcept {
  *storage_class = *v3_dtype = nullptr;
  switch (t) {
    case DType::F64: *storage_class = "DoubleStorage"; return true;
    case DType::F32: *storage_class = "FloatStorage"; return true;
    case DType::F16: *storage_class = "HalfStorage"; return true;
    case DType::BF16: *storage_class = "BFloat16Storage"; return true;
    case DType::I64: *storage_class = "LongStorage"; return true;
    case DType::I32: *storage_class = "IntStorage"; return true;
    case DType::I16: *storage_class = "ShortStorage"; return true;
    case DType::I8: *storage_class = "CharStorage"; return true;
    case DType::U8: *storage_class = "ByteStorage"; return true;
    case DType::BOOL: *storage_class = "BoolStorage"; return true;
    case DType::C64: *storage_class = "ComplexFloatStorage"; return true;
    case DType::C128: *storage_class = "ComplexDoubleStorage"; return true;
    case DType::F8_E4M3: *v3_dtype = "float8_e4m3fn"; return true;
    case DType::F8_E5M2: *v3_dtype = "float8_e5m2"; return true;
    case DType::F8_E4M3FNUZ: *v3_dtype = "float8_e4m3fnuz"; return true;
    case DType::F8_E5M2FNUZ: *v3_dtype = "float8_e5m2fnuz"; return true;
    case DType::F8_E8M0: *v3_dtype = "float8_e8m0fnu"; return true;
    case DType::C32: *v3_dtype = "complex32"; return true;
    case DType::U16: *v3_dtype = "uint16"; return true;
    case DType::U32: *v3_dtype = "uint32"; return true;
    case DType::U64: *v3_dtype = "uint64"; return true;
    case DType::F4_E2M1FN_X2: *v3_dtype = "float4_e2m1fn_x2"; return true;
    case DType::BITS8: *v3_dtype = "bits8"; return true;
    case DType::BITS16: *v3_dtype = "bits16"; return true;
    case DType::BITS1X8: *v3_dtype = "bits1x8"; return true;
    case DType::BITS2X4: *v3_dtype = "bits2x4"; return true;
    case DType::BITS4X2: *v3_dtype = "bits4x2"; return true;
    default: return false;  // quantized: not a plain tensor
  }
}

inline bool safetensors_dtype(DType t) noexcept {
  switch (t) {
    case DType::BOOL: case DType::U8: case DType::I8: case DType::I16: case DType::U16: case DType::I32:
    case DType::U32: case DType::I64: case DType::U64: case DType::F16: case DType::BF16: case DType::F32:
    case DType::F64: case DType::C64: case DType::F8_E4M3: case DType::F8_E5M2: case DType::F8_E8M0:
      return true;
    default:
      return false;
  }
}

// torch's archive name for a path: the base name without its last extension.
inline std::string torch_archive_name(const std::string& path) {
  size_t start = 0;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '/' || path[i] == '\\') start = i + 1;
  }
  size_t end = path.size();
  for (size_t i = end; i > start; --i) {
    if (path[i - 1] == '.') {
      end = i - 1;
      break;
    }
  }
  return end > start ? path.substr(start, end - start) : std::string("archive");
}

inline std::string quote_name(std::string_view name) { return "'" + std::string(name) + "'"; }

// One storage record of save_pt: a Storage as one dtype, with the math bits applied.
struct PtStorage {
  std::shared_ptr<const Storage> storage;
  DType dtype, out;
  bool conj, neg;
  int64_t numel;
  uint32_t key_memo = PickleWriter::kNoMemo;
};

// The pickle of save_pt: as Python's pickler writes the OrderedDict (see the top of file).
inline std::string state_dict_pickle(const std::vector<NamedRef>& items, const std::vector<size_t>& storage_of,
                                     std::vector<PtStorage>& storages) {
  PickleWriter w;
  uint32_t storage_memo = PickleWriter::kNoMemo, cpu_memo = PickleWriter::kNoMemo;
  w.global("collections", "OrderedDict");
  w.op(PickleWriter::kEmptyTuple);
  w.op(PickleWriter::kReduce);
  w.memoize();
  constexpr size_t kBatch = 1000;  // Python's _batch_setitems
  for (size_t first = 0; first < items.size(); first += kBatch) {
    const size_t n = items.size() - first < kBatch ? items.size() - first : kBatch;
    if (n > 1) w.op(PickleWriter::kMark);
    for (size_t i = first; i < first + n; ++i) {
      const Tensor& t = *items[i].tensor;
      PtStorage& s = storages[storage_of[i]];
      const char *storage_class, *v3_dtype;
      torch_save_names(s.out, &storage_class, &v3_dtype);
      w.new_str(items[i].name);
      w.global("torch._utils", v3_dtype ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
      w.op(PickleWriter::kMark);
      w.op(PickleWriter::kMark);  // the persistent id
      w.str("storage", &storage_memo);
      if (v3_dtype) {
        w.global("torch.storage", "UntypedStorage");
      } else {
        w.global("torch", storage_class);
      }
      w.str(std::to_string(storage_of[i]), &s.key_memo);
      w.str("cpu", &cpu_memo);
      w.integer(v3_dtype ? s.numel * static_cast<int64_t>(dtype_size(s.out)) : s.numel);
      w.end_tuple(5);
      w.op(PickleWriter::kBinPersId);
      w.integer(t.storage_offset());
      w.int_tuple(t.shape());
      w.int_tuple(t.strides());
      w.op(PickleWriter::kNewFalse);
      w.global("collections", "OrderedDict");  // backward hooks: OrderedDict()
      w.op(PickleWriter::kEmptyTuple);
      w.op(PickleWriter::kReduce);
      w.memoize();
      if (v3_dtype) w.global("torch", v3_dtype);
      w.end_tuple(v3_dtype ? 7 : 6);
      w.op(PickleWriter::kReduce);
      w.memoize();
    }
    w.op(n > 1 ? PickleWriter::kSetItems : PickleWriter::kSetItem);
  }
  w.op(PickleWriter::kStop);
  return std::move(w.bytes());
}

// Writes the bytes of one record or tensor and reports progress.
struct ProgressSink {
  ZipWriter* zip;
  OutputFile* file;
  const SaveProgress* progress;
  uint64_t done, total;
  Status operator()(const uint8_t* p, size_t n) {
    PTREAD_CHECK(zip ? zip->data(p, n) : file->write(p, n));
    done += n;
    if (*progress) (*progress)(done, total);
    return {};
  }
};

inline Result<SaveReport> save_pt(const std::string& path, const std::vector<NamedRef>& items, const SavePtOptions& o) {
  const std::string archive = o.archive_name.empty() ? torch_archive_name(path) : o.archive_name;
  if (archive.find_first_of("/\\") != std::string::npos || archive.size() > 60000) {
    return make_error(ErrorCode::invalid_argument, "save_pt: archive name " + quote_name(archive) +
                                                       " must be one folder name (no '/' or '\\')");
  }
  if (o.float_dtype && !is_float_dtype(*o.float_dtype)) {
    return make_error(ErrorCode::invalid_argument, std::string("save_pt: float_dtype is ") +
                                                       dtype_name(*o.float_dtype) + "; it must be F16, BF16, F32 or F64");
  }
  std::vector<PtStorage> storages;
  std::map<std::tuple<const Storage*, DType, bool, bool>, size_t> storage_index;
  std::vector<size_t> storage_of(items.size());
  std::unordered_set<std::string_view, detail::KeyedHash> names;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string_view name = items[i].name;
    const Tensor& t = *items[i].tensor;
    if (!utf8_valid(name, /*allow_surrogates=*/true) || name.size() > 0xffffffffu) {
      return make_error(ErrorCode::invalid_argument, "save_pt: the name " + quote_name(name) +
                                                         " is not UTF-8; torch.load cannot read it back");
    }
    if (!names.insert(name).second) {
      return make_error(ErrorCode::invalid_argument, "save_pt: two tensors are named " + quote_name(name));
    }
    const char *storage_class, *v3_dtype;
    if (!torch_save_names(t.dtype(), &storage_class, &v3_dtype)) {
      return make_error(ErrorCode::unsupported_tensor, "save_pt: tensor " + quote_name(name) + " has dtype " +
                                                           dtype_name(t.dtype()) + ", which a plain torch tensor cannot hold");
    }
    if (!t.storage() && (t.dim() == 0 || t.numel() != 0)) {
      return make_error(ErrorCode::invalid_argument, "save_pt: tensor " + quote_name(name) + " has no storage");
    }
    const auto key = std::make_tuple(t.storage().get(), t.dtype(), t.is_conj(), t.is_neg());
    auto it = storage_index.find(key);
    if (it == storage_index.end()) {
      const size_t nbytes = t.storage() ? t.storage()->nbytes() : 0;
      const DType out = o.float_dtype && is_float_dtype(t.dtype()) ? *o.float_dtype : t.dtype();
      const int64_t numel = static_cast<int64_t>(nbytes / dtype_size(t.dtype()));
      storages.push_back({t.storage(), t.dtype(), out, t.is_conj(), t.is_neg(), numel});
      it = storage_index.emplace(key, storages.size() - 1).first;
    }
    storage_of[i] = it->second;
  }
  const std::string pickle = state_dict_pickle(items, storage_of, storages);

  ProgressSink sink{nullptr, nullptr, &o.progress, 0, 0};
  for (const PtStorage& s : storages) {
    uint64_t n;
    if (mul_overflow(static_cast<uint64_t>(s.numel), dtype_size(s.out), &n) || add_overflow(sink.total, n, &sink.total)) {
      return make_error(ErrorCode::shape_overflow, "save_pt: the storages hold more bytes than 64 bits count");
    }
  }
  PTREAD_TRY(OutputFile file, OutputFile::create(path, sink.total > (uint64_t{1} << 63) ? sink.total : sink.total + pickle.size()));
  ZipWriter zip(file, o.force_zip64);
  sink.zip = &zip;
  const std::string prefix = archive + "/";
  PTREAD_CHECK(zip.add(prefix + "data.pkl", pickle));
  PTREAD_CHECK(zip.add(prefix + "byteorder", "little"));
  if (o.progress) o.progress(0, sink.total);
  ValueStream values;
  for (size_t k = 0; k < storages.size(); ++k) {
    const PtStorage& s = storages[k];
    PTREAD_CHECK(zip.begin(prefix + "data/" + std::to_string(k), static_cast<uint64_t>(s.numel) * dtype_size(s.out)));
    PTREAD_TRY(Tensor whole, Tensor::view(s.storage, s.dtype, {s.numel}, {1}, 0));
    whole.set_math_bits(s.conj, s.neg);
    PTREAD_CHECK(values.write(whole, s.out, sink));
    PTREAD_CHECK(zip.end());
  }
  PTREAD_CHECK(zip.add(prefix + "version", "3\n"));
  PTREAD_CHECK(zip.finish());
  SaveReport report;
  report.file_bytes = file.offset();
  report.tensors = items.size();
  report.storages = storages.size();
  PTREAD_CHECK(file.commit());
  return report;
}

inline Result<SaveReport> save_safetensors(const std::string& path, const std::vector<NamedRef>& items,
                                           const SaveSafetensorsOptions& o) {
  SaveReport report;
  std::string header = "{";
  if (!o.metadata.empty()) {
    std::unordered_set<std::string_view, detail::KeyedHash> keys;
    header += "\"__metadata__\":{";
    for (const auto& kv : o.metadata) {
      if (!utf8_valid(kv.first) || !utf8_valid(kv.second) || !keys.insert(kv.first).second) {
        return make_error(ErrorCode::invalid_argument, "save_safetensors: metadata key " + quote_name(kv.first) +
                                                           " repeats, or it or its value is not UTF-8");
      }
      if (keys.size() > 1) header += ',';
      append_json_string(header, kv.first);
      header += ':';
      append_json_string(header, kv.second);
    }
    header += '}';
  }
  std::vector<const Tensor*> written;
  std::unordered_set<std::string_view, detail::KeyedHash> names;
  uint64_t offset = 0;
  for (const NamedRef& item : items) {
    const DType dt = item.tensor->dtype();
    std::string why;
    ErrorCode code = ErrorCode::invalid_argument;
    if (!safetensors_dtype(dt)) {
      why = std::string("dtype ") + dtype_name(dt) + " has no safetensors equivalent";
      code = ErrorCode::unsupported_tensor;
    } else if (item.name == "__metadata__") {
      why = "the name is reserved in safetensors";
    } else if (!utf8_valid(item.name)) {
      why = "the name is not valid UTF-8";
    } else if (names.count(item.name)) {
      why = "an earlier tensor has the same name";
    }
    if (!why.empty()) {
      if (!o.skip_unsupported) return make_error(code, "save_safetensors: tensor " + quote_name(item.name) + ": " + why);
      report.skipped.push_back({std::string(item.name), why});
      continue;
    }
    names.insert(item.name);
    const uint64_t nb = item.tensor->nbytes();
    if (header.size() > 1) header += ',';
    append_json_string(header, item.name);
    header += ":{\"dtype\":\"";
    header += dtype_name(dt);
    header += "\",\"shape\":[";
    for (size_t d = 0; d < item.tensor->dim(); ++d) {
      if (d) header += ',';
      header += std::to_string(item.tensor->shape()[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nb) + "]}";
    if (add_overflow(offset, nb, &offset)) {
      return make_error(ErrorCode::shape_overflow, "save_safetensors: the tensors hold more bytes than 64 bits count");
    }
    written.push_back(item.tensor);
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  PTREAD_TRY(OutputFile file, OutputFile::create(path, offset > (uint64_t{1} << 63) ? offset : 8 + header.size() + offset));
  uint8_t len[8];
  for (int b = 0; b < 8; ++b) len[b] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * b));
  PTREAD_CHECK(file.write(len, sizeof len));
  PTREAD_CHECK(file.write(header));
  ProgressSink sink{nullptr, &file, &o.progress, 0, offset};
  if (o.progress) o.progress(0, sink.total);
  ValueStream values;
  for (const Tensor* t : written) PTREAD_CHECK(values.write(*t, t->dtype(), sink));
  report.file_bytes = file.offset();
  report.tensors = written.size();
  PTREAD_CHECK(file.commit());
  return report;
}

}  // namespace detail

// Writes the tensors as a zip-format state dict that torch.load(path, weights_only=True)
// reads (see the top of this file for what torch version reads which dtype).
inline Result<SaveReport> save_pt(const std::string& path, const std::vector<NamedTensor>& tensors,
                                  const SavePtOptions& options = {}) {
  return detail::save_pt(path, detail::named_refs(tensors), options);
}
template <class Range>
Result<SaveReport> save_pt(const std::string& path, const Range& tensors, const SavePtOptions& options = {}) {
  return detail::save_pt(path, detail::named_refs(tensors), options);
}

// Writes the tensors as a safetensors file.
inline Result<SaveReport> save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                                           const SaveSafetensorsOptions& options = {}) {
  return detail::save_safetensors(path, detail::named_refs(tensors), options);
}
template <class Range>
Result<SaveReport> save_safetensors(const std::string& path, const Range& tensors,
                                    const SaveSafetensorsOptions& options = {}) {
  return detail::save_safetensors(path, detail::named_refs(tensors), options);
}

}  // namespace ptread
