// ptread — bare pickles: files written by Python's pickle.dump (protocols 2 to 5) of tensors,
// state dicts or whole models, without torch.save's container. pickle.dump pickles each
// storage as torch.storage._load_from_bytes(b), b a whole torch.save file of that storage
// (torch/globals/load_from_bytes.hpp). torch.load refuses these files (no magic number);
// pickle.load reads them, importing and running what they name; ptread reads them as
// pickle.load would, with torch imported, and runs nothing.
//
// The file is one pickle (bytes after its STOP are not read, as pickle.load reads none; but an
// int followed by more bytes is a legacy file with a wrong magic number, E206). In
// mmap and memory modes the pickle is the mapped file, and the nested archives are read where
// it holds them (their bytes are borrowed by the graph, not copied; their storages are views
// where aligned); read mode reads the file into one buffer first. A persistent id is refused
// (TorchHooks::persistent_load): pickle.load has no persistent_load.
#pragma once

#include "legacy.hpp"

#include <memory>

namespace ptread {
namespace detail {

class BarePickleReader {
 public:
  BarePickleReader(std::shared_ptr<const Source> src, const ReadOptions& opt) : src_(std::move(src)), opt_(opt) {}

  Result<std::shared_ptr<Model>> read() {
    model_ = std::make_shared<Model>();
    model_->format = Format::pickle;
    const uint8_t* p = src_->base();
    if (p != nullptr && opt_.mode != LoadMode::read) {
      opt_.pickle_keep = src_;
    } else {
      PTREAD_TRY(auto buf, allocate_aligned(static_cast<size_t>(src_->size())));
      PTREAD_CHECK(run_fill_jobs(*src_, {FillJob{0, buf.get(), static_cast<size_t>(src_->size())}}, opt_.threads));
      p = buf.get();
      opt_.pickle_keep = std::shared_ptr<const void>(std::move(buf));
    }
    const size_t n = static_cast<size_t>(src_->size());
    model_->storage_table.set_source(opt_.pickle_keep);  // (the graph's borrowed bytes live in it)
    Graph& g = model_->graph;
    g.borrow_bytes(reinterpret_cast<const char*>(p), reinterpret_cast<const char*>(p) + n);
    StorageLoader none;  // (a persistent id is refused before it names a storage: TorchHooks)
    TorchHooks hooks(*model_, std::move(none), opt_.limits);
    hooks.set_nested(opt_);
    PickleVM vm(g, hooks, opt_.limits, src_->name());
    vm.set_tensor_runs(opt_.tensor_runs);
    size_t used = 0;
    auto root = vm.run(p, n, &used);
    PTREAD_CHECK(legacy_frames_read_flat(vm, p, n, 0, src_->name(), [] { return std::string("the bare pickle"); }));
    if (!root) return std::move(root).error();
    // A legacy torch.save file starts with a pickled int, its magic number, then the other
    // pickles: one whose magic differs reads as a bare pickle of that int.
    const ValueKind rk = g.kind(*root);
    if (used < n && (rk == ValueKind::integer || rk == ValueKind::big_integer)) {
      return make_error(ErrorCode::legacy_corrupt, "the file starts with a pickled int that is not torch's legacy magic "
                                                   "number, then more bytes: a legacy torch.save file whose magic number "
                                                   "is wrong (corrupt file?)");
    }
    model_->root = *root;
    PTREAD_CHECK(hooks.finish());
    PTREAD_CHECK(realign_storages(*model_));
    PTREAD_CHECK(name_tensors(*model_, opt_.limits, src_->size()));
    return model_;
  }

 private:
  std::shared_ptr<const Source> src_;
  ReadOptions opt_;
  std::shared_ptr<Model> model_;
};

inline Result<std::shared_ptr<Model>> read_bare_pickle(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  return BarePickleReader(std::move(src), opt).read();
}

}  // namespace detail
}  // namespace ptread
