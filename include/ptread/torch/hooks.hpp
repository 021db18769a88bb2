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
// The globals ptread gives a meaning are the lines of the table in globals.hpp; everything
// else becomes an inert object node. Rebuild functions for tensors ptread cannot hand out
// (nested, meta, wrapper subclasses ...) become "unsupported" entries.
//
// The work is split along torch's own: persistent_id.hpp (storages, storages.hpp), the table
// of globals (globals.hpp, one handler file each under globals/), build.hpp (BUILD), all on
// a TorchContext (context.hpp). TorchHooks is what the pickle VM calls: it hands each call
// to them, and reads torch.save's tensor runs (pickle/tensor_runs.hpp) in one go.
#pragma once

#include "build.hpp"
#include "context.hpp"
#include "globals.hpp"
#include "persistent_id.hpp"
#include "../pickle.hpp"

#include <string>
#include <utility>

namespace ptread {
namespace detail {

class TorchHooks : public PickleHooks {
 public:
  TorchHooks(Model& m, StorageLoader loader, const Limits& limits)
      : cx_(m, std::move(loader), limits, kTorchGlobals, kTorchGlobalCount) {}

  // The storages' setup and what the readers ask of them afterwards (storages.hpp).
  void set_stored_records(const SegmentedVector<StoredRecord>* records, bool big_endian) {
    cx_.storages.set_stored_records(records, big_endian);
  }
  void set_placeholders() { cx_.storages.set_placeholders(); }
  template <class ByName>
  bool bind_placeholders(const SegmentedVector<StoredRecord>& records, bool big_endian, ByName&& by_name) {
    return cx_.storages.bind_placeholders(records, big_endian, std::forward<ByName>(by_name));
  }
  void expect_storages(size_t n) { cx_.storages.expect_storages(n); }
  // Nested archives (torch.storage._load_from_bytes) are read by opt's reader; opt must
  // outlive the hooks.
  void set_nested(const ReadOptions& opt) noexcept { cx_.nested = &opt; }
  void set_chunk_reserve(ChunkReserve* r) noexcept { cx_.storages.set_chunk_reserve(r); }
  uint32_t storage_index(std::string_view key, bool int_key = false) const { return cx_.storages.storage_index(key, int_key); }
  DType storage_dtype(uint32_t index) const { return cx_.storages.storage_dtype(index); }
  const std::string& retyped() const noexcept { return cx_.storages.retyped(); }
  Status finish() { return cx_.storages.finish(); }
  const Error* refusal(Format f) const noexcept { return cx_.refusal(f); }

  Result<uint32_t> persistent_load(Graph& g, uint32_t pid) override {
    if (PTREAD_UNLIKELY(cx_.model.format == Format::pickle)) {
      return make_error(ErrorCode::bad_tensor_args, "a persistent id in a bare pickle, for which pickle.load has no persistent_load");
    }
    return detail::persistent_load(cx_, g, pid);
  }
  Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) override { return cx_.call(g, callable, args); }
  Result<uint32_t> new_object(Graph& g, uint32_t cls, uint32_t args) override { return cx_.new_object(g, cls, args); }
  Status build(Graph& g, uint32_t obj, uint32_t state) override { return torch_build(cx_, g, obj, state); }

  // _rebuild_tensor_v2 of a ('storage', class, key, location, numel[, None]) persistent id,
  // with an empty OrderedDict of hooks and no metadata, as torch.save writes each tensor:
  // what persistent_load, call(OrderedDict, ()) and call(fn, args) make of it, or kNoNode
  // for anything else (and for anything that would be an error: the VM then reports it).
  uint32_t tensor_run(Graph& g, const TensorRun& r) override {
    DType dtype = run_.dtype;
    // The callable, tag, storage class and hooks class of the last run taken: nodes never
    // change, so the same four need no second look.
    if (r.fn != run_.fn || r.tag != run_.tag || r.cls != run_.cls || r.hooks_cls != run_.hooks_cls) {
      if (cx_.global_tag(g, r.fn) != kTagRebuildTensorV2 || g.kind(r.hooks_cls) != ValueKind::global ||
          cx_.global_tag(g, r.hooks_cls) != kTagOrderedDict || !g.is_string(r.tag, "storage") ||
          g.kind(r.cls) != ValueKind::global || !storage_class_dtype(g, r.cls, &dtype)) {
        return kNoNode;
      }
      run_ = RunClasses{r.fn, r.tag, r.cls, r.hooks_cls, dtype};
    }
    if (PTREAD_UNLIKELY(r.pid_none != cx_.legacy)) {  // (5 items in zip files, 6 in legacy ones)
      if (!r.pid_none) return kNoNode;  // persistent_load refuses it
      cx_.note_zip_refusal(make_error(ErrorCode::bad_tensor_args,
                                      "persistent id ('storage', ...) with 6 items in a zip file; torch.load takes 5"));
    }
    if (PTREAD_UNLIKELY(r.requires_grad && !dtype_is_differentiable(dtype))) return kNoNode;  // rebuild() refuses it
    const bool key_node = r.key != kNoNode;  // else a text in the pickle (copied where the index keeps it)
    if ((key_node && g.kind(r.key) != ValueKind::string) || !is_text(g, r.location) || r.numel < 0 || r.rank > cx_.limits.max_rank) return kNoNode;
    DType stored = dtype;
    const auto storage = cx_.storages.find_or_load(g, key_node ? g.text(r.key) : r.key_text, key_node,
                                                   static_cast<uint64_t>(r.numel), true, dtype, &stored);
    if (!storage) return kNoNode;
    TensorSpec t;
    t.dims = r.dims;
    t.rank = r.rank;
    t.offset = r.offset;
    t.storage = *storage;
    t.location = r.location;
    t.dtype = stored;
    t.requires_grad = r.requires_grad;
    const auto tensor = cx_.add_tensor(g, t, r.rank);
    return tensor ? *tensor : kNoNode;
  }

 protected:
  static constexpr uint8_t kTagRebuildTensorV2 = global_tag_of("torch._utils._rebuild_tensor_v2");
  static constexpr uint8_t kTagOrderedDict = global_tag_of("collections.OrderedDict");
  static_assert(kTagRebuildTensorV2 != 0 && kTagOrderedDict != 0, "the tensor runs' globals are in the table");

  struct RunClasses {
    uint32_t fn = kNoNode, tag = kNoNode, cls = kNoNode, hooks_cls = kNoNode;
    DType dtype = DType::F32;
  };
  RunClasses run_;  // tensor_run's checked classes

  TorchContext cx_;
};

}  // namespace detail
}  // namespace ptread
