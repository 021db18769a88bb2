// ptread — Checkpoint: open a file (or memory), list its tensors, walk its object tree.
//
//   auto ck = ptread::Checkpoint::open("model.pt");          // Result<Checkpoint>
//   if (!ck) { std::fprintf(stderr, "%s\n", ck.error().what()); return 1; }
//   for (const auto& t : ck->tensors()) ...                   // name + Tensor, file order
//   ptread::TensorInfo i = ck->tensor_info(0);                // metadata only: name, dtype, shape ...
//   const ptread::Tensor* w = ck->find("fc.weight");
//   int64_t epoch = ck->root()["epoch"].as_int().value();
//
// Opening reads the container's directory and the pickle; in mmap mode (the default) no
// tensor byte is touched until it is used. A Checkpoint is cheap to move; tensors keep the
// mapping or buffers alive on their own, so they may outlive it.
#pragma once

#include "containers/detect.hpp"
#include "containers/bare_pickle.hpp"
#include "containers/legacy.hpp"
#include "containers/nested.hpp"
#include "containers/safetensors.hpp"
#include "containers/sharded.hpp"
#include "containers/tar.hpp"
#include "containers/zip_checkpoint.hpp"
#include "value.hpp"

#include <string>
#include <string_view>

namespace ptread {

namespace detail {
struct AuditAccess;
}

struct Options {
  LoadMode mode = LoadMode::mmap;
  Limits limits;
  // Threads open() may use (0: one per hardware thread; 1, the default: it starts none).
  // Read mode: they read the storages into their buffers, after the pickle. Mmap and memory
  // modes read no tensor byte on open; with 2 or more, a zip checkpoint's directory is walked
  // on a second thread while the first reads data.pkl (same result, less wall time).
  unsigned threads = 1;
};

class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& path, const Options& options = {}) {
#if PTREAD_POSIX || defined(_WIN32)
    if (options.mode == LoadMode::memory) {
      return make_error(ErrorCode::invalid_argument, "LoadMode::memory is for open_memory(); open() maps or reads");
    }
    std::string file = path;
    if (detail::path_kind(path) == detail::PathKind::directory) {
      PTREAD_TRY(file, checkpoint_in_folder(path));
    }
    // A sharded set's index is read, not mapped: a mapping of a few KiB costs more than the
    // read (its page tables, its unmapping), and the set's open is the sum of its shards'.
    const bool map = options.mode == LoadMode::mmap;
    const bool json_name = detail::ends_with(file, ".json");
    PTREAD_TRY(auto src, detail::FileSource::open(file, map && !json_name));
    detail::Detected kind{};
    if (json_name && src->size() <= kIndexReadAtOnce) {  // one read for detection and parse
      PTREAD_TRY(detail::Bytes text, src->bytes(0, src->size()));
      PTREAD_TRY(kind, detect(text, *src));
      if (kind == detail::Detected::shard_index) return open_set(file, text, options);
    } else {
      PTREAD_TRY(kind, detect(*src));
      if (kind == detail::Detected::shard_index) return open_set(file, *src, options);
    }
    if (map && json_name) {  // a checkpoint named .json: mapped after all
      src->close_file();
      PTREAD_TRY(src, detail::FileSource::open(file, true));
    }
    auto r = read_detected(src, kind, options);
    src->close_file();
    return r;
#else
    (void)options;
    return make_error(ErrorCode::io_error, "open(" + path + "): no file support on this platform; use open_memory()");
#endif
  }

  // Reads a checkpoint the caller holds in memory (linked into the binary, received over a
  // network ...). Tensors are views into it: keep it alive and unchanged while they live.
  static Result<Checkpoint> open_memory(const void* data, size_t size, const Options& options = {}) {
    Options o = options;
    o.mode = LoadMode::memory;
    auto src = std::make_shared<detail::MemorySource>(data, size, "<memory>");
    return from_source(src, o);
  }

  Format format() const noexcept { return model_->format; }
  const char* format_name() const noexcept { return ptread::format_name(model_->format); }
  LoadMode mode() const noexcept { return mode_; }
  const std::string& path() const noexcept { return path_; }
  // The folder holding data.pkl inside a zip archive ("archive", "model", ...).
  const std::string& archive_prefix() const noexcept { return model_->archive_prefix; }
  // True when the file stored its data big-endian (converted on open).
  bool big_endian() const noexcept { return model_->big_endian; }

  // Every readable tensor with its name, in file order. (The list is made by the first
  // call, from what open() read: open() itself makes no Tensor.)
  const std::vector<NamedTensor>& tensors() const { return model_->named(); }
  // The same entries' metadata, read without making the list: name, dtype, shape,
  // strides, offset, device, bytes (TensorInfo). For listing and indexing: a checkpoint of
  // 100,000 tensors is listed without 100,000 Tensor objects.
  size_t tensor_count() const noexcept { return model_->listed_count(); }
  TensorInfo tensor_info(size_t i) const { return model_->info(i); }  // i < tensor_count()
  // Sharded sets: the shard files (as the index names them, in the order read); empty for
  // single files. TensorInfo::shard says each tensor's.
  const std::vector<std::string>& shards() const noexcept { return model_->shard_files; }
  // Quantized tensors (integer representation, scales, zero points; dequantize()).
  const std::vector<NamedQuantized>& quantized() const noexcept { return model_->named_quantized; }
  // Sparse tensors (layout, shape, index and value tensors).
  const std::vector<NamedSparse>& sparse() const noexcept { return model_->named_sparse; }
  // The modules of a whole pickled model or TorchScript archive (name and class), in
  // state_dict() order; empty for state dicts.
  const std::vector<ModuleEntry>& modules() const noexcept { return model_->modules; }
  // Tensor-like entries that cannot be read (nested, meta, wrapper subclasses ...), with
  // the reason: listed, never dropped.
  const std::vector<UnsupportedEntry>& unsupported() const noexcept { return model_->named_unsupported; }

  // The tensor with this name in tensors(), or nullptr. (The first call indexes the names
  // and makes the list.)
  const Tensor* find(std::string_view name) const { return model_ ? model_->find(name) : nullptr; }
  // The tensor with this name (a copy of the one find() gives), or a not_found error naming
  // it. Made on its own: getting a few tensors of a large checkpoint does not make the list.
  Result<Tensor> get(std::string_view name) const {
    const uint32_t k = model_ ? model_->find_listed(name) : detail::StringIndex::npos;
    if (k != detail::StringIndex::npos) return model_->spec_tensor(model_->listed[k].spec);
    return make_error(ErrorCode::not_found, "no tensor named '" + std::string(name) + "' in '" + path_ + "'");
  }

  // The unpickled object: a dict for state dicts, an object for whole models ...
  Value root() const { return Value(model_.get(), model_->root); }
  // TorchScript archives: the tuple of constants.pkl (tensor literals of the code; not part
  // of state_dict(), so not in tensors()); a missing Value for other formats.
  Value constants() const { return Value(model_.get(), model_->constants_root); }

 private:
  static constexpr uint64_t kIndexReadAtOnce = uint64_t{1} << 20;
  static constexpr size_t kDetectBytes = 512;

  static Result<detail::Detected> detect(const detail::Source& src) {
    uint8_t head[kDetectBytes];
    const size_t n = static_cast<size_t>(src.size() < sizeof head ? src.size() : sizeof head);
    PTREAD_CHECK(src.read_at(0, head, n));
    auto detected = detail::detect_format(head, n, src.size());
    if (!detected) return with_file(std::move(detected).error(), src.name());
    return *detected;
  }
  // The same, on the source's whole text read already.
  static Result<detail::Detected> detect(const detail::Bytes& text, const detail::Source& src) {
    auto detected = detail::detect_format(text.data, std::min<size_t>(text.size, kDetectBytes), src.size());
    if (!detected) return with_file(std::move(detected).error(), src.name());
    return *detected;
  }

  static Result<Checkpoint> from_source(const std::shared_ptr<detail::Source>& src, const Options& options) {
    PTREAD_TRY(auto detected, detect(*src));
    return read_detected(src, detected, options);
  }

  // The reader of a source whose kind detect() found.
  static Result<Checkpoint> read_detected(const std::shared_ptr<detail::Source>& src, detail::Detected detected,
                                          const Options& options) {
    if (detected == detail::Detected::shard_index) {
      return make_error(ErrorCode::invalid_argument, "'" + src->name() +
                                                         "' is the JSON index of a sharded set (or other JSON): "
                                                         "open a set by the path of its index or folder");
    }
    detail::ReadOptions ro;
    ro.mode = options.mode;
    ro.limits = options.limits;
    ro.threads = options.threads;
    ro.nested_reader = detail::read_nested_archive;
    auto model = detected == detail::Detected::legacy        ? detail::read_legacy_checkpoint(src, ro)
                 : detected == detail::Detected::tar         ? detail::read_tar_checkpoint(src, ro)
                 : detected == detail::Detected::safetensors ? detail::read_safetensors_checkpoint(src, ro)
                 : detected == detail::Detected::pickle      ? detail::read_bare_pickle(src, ro)
                                                             : detail::read_zip_checkpoint(src, ro);
    if (!model) return with_file(std::move(model).error(), src->name());
    Checkpoint ck;
    ck.model_ = std::move(*model);
    ck.mode_ = options.mode;
    ck.path_ = src->name();
    return ck;
  }

#if PTREAD_POSIX || defined(_WIN32)
  // The file a folder is opened by: a sharded set's index, else a single file, by the names
  // transformers and diffusers give them (safetensors first, as they load).
  static Result<std::string> checkpoint_in_folder(const std::string& dir) {
    static const char* const names[] = {
        "model.safetensors.index.json", "pytorch_model.bin.index.json",
        "diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.bin.index.json",
        "model.safetensors", "pytorch_model.bin", "diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin"};
    const std::string base = dir.empty() || dir.back() == '/' || dir.back() == '\\' ? dir : dir + "/";
    for (const char* n : names) {
      if (detail::path_kind(base + n) == detail::PathKind::file) return base + n;
    }
    return make_error(ErrorCode::io_error, "the folder '" + dir +
                                               "' holds no model.safetensors.index.json, pytorch_model.bin.index.json, "
                                               "model.safetensors or pytorch_model.bin (nor their diffusion_pytorch_model "
                                               "forms): open the checkpoint's file itself");
  }

  // A sharded set, by its index: every shard opened (as open() opens a file), checked
  // against the index and merged (containers/sharded.hpp).
  static Result<Checkpoint> open_set(const std::string& index_path, const detail::Source& index_src, const Options& options) {
    if (index_src.size() > detail::kSafetensorsMaxHeader) {
      return make_error(ErrorCode::limit_exceeded, "the sharded set index '" + index_path + "' is " +
                                                       std::to_string(index_src.size()) + " bytes, over 100,000,000");
    }
    PTREAD_TRY(detail::Bytes text, index_src.bytes(0, index_src.size()));
    return open_set(index_path, text, options);
  }
  static Result<Checkpoint> open_set(const std::string& index_path, const detail::Bytes& text, const Options& options) {
    PTREAD_TRY(auto index, detail::parse_shard_index(std::string_view(reinterpret_cast<const char*>(text.data), text.size),
                                                     index_path, options.limits));
    const size_t slash = index_path.find_last_of("/\\");
    const std::string folder = slash == std::string::npos ? std::string() : index_path.substr(0, slash + 1);
    std::vector<std::shared_ptr<detail::Model>> shards;
    uint64_t source_bytes = 0;  // (the naming walk's budget: the set's bytes)
    for (const std::string& f : index.files) {
      auto shard = open_shard(folder + f, options, &source_bytes);
      if (!shard) {
        Error e = std::move(shard).error();
        e.add_context("(shard '" + f + "' of the sharded set '" + index_path + "')");
        return e;
      }
      shards.push_back(std::move(shard->model_));
    }
    detail::ShardMerger merger(index, index_path, options.limits);
    PTREAD_TRY(auto model, merger.merge(shards, source_bytes));
    Checkpoint ck;
    ck.model_ = std::move(model);
    ck.mode_ = options.mode;
    ck.path_ = index_path;
    return ck;
  }
  static Result<Checkpoint> open_shard(const std::string& path, const Options& options, uint64_t* bytes) {
    PTREAD_TRY(auto src, detail::FileSource::open(path, options.mode == LoadMode::mmap));
    PTREAD_TRY(detail::Detected kind, detect(*src));
    if (kind == detail::Detected::shard_index) {
      return make_error(ErrorCode::shard_index_corrupt, "a shard is JSON, not a checkpoint: sets do not nest");
    }
    *bytes += src->size();
    auto r = read_detected(src, kind, options);
    src->close_file();
    return r;
  }
#endif

  static Error with_file(Error e, const std::string& name) {
    if (e.message().find(name) == std::string::npos) e.add_context("(file '" + name + "')");
    return e;
  }

  friend struct detail::AuditAccess;
  std::shared_ptr<detail::Model> model_;
  LoadMode mode_ = LoadMode::mmap;
  std::string path_;
};

#if PTREAD_EXCEPTIONS
// Throwing convenience: the Checkpoint, or throws ptread::Error.
inline Checkpoint load(const std::string& path, const Options& options = {}) {
  return Checkpoint::open(path, options).value_or_throw();
}
#endif

}  // namespace ptread
