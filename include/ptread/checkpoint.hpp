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
#include "containers/legacy.hpp"
#include "containers/safetensors.hpp"
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
    PTREAD_TRY(auto src, detail::FileSource::open(path, options.mode == LoadMode::mmap));
    auto r = from_source(src, options);
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
  static Result<Checkpoint> from_source(const std::shared_ptr<detail::Source>& src, const Options& options) {
    uint8_t head[512];
    const size_t n = static_cast<size_t>(src->size() < sizeof head ? src->size() : sizeof head);
    PTREAD_CHECK(src->read_at(0, head, n));
    auto detected = detail::detect_format(head, n, src->size());
    if (!detected) return with_file(std::move(detected).error(), src->name());
    const detail::ReadOptions ro{options.mode, options.limits, options.threads};
    auto model = *detected == detail::Detected::legacy        ? detail::read_legacy_checkpoint(src, ro)
                 : *detected == detail::Detected::tar         ? detail::read_tar_checkpoint(src, ro)
                 : *detected == detail::Detected::safetensors ? detail::read_safetensors_checkpoint(src, ro)
                                                              : detail::read_zip_checkpoint(src, ro);
    if (!model) return with_file(std::move(model).error(), src->name());
    Checkpoint ck;
    ck.model_ = std::move(*model);
    ck.mode_ = options.mode;
    ck.path_ = src->name();
    return ck;
  }

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
