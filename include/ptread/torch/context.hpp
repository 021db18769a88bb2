// ptread — what torch's handlers share: the model being read, its storages, the limits and
// budgets, the refusals that wait for the directory, and the dispatch of calls through the
// table of globals.
#pragma once

#include "global.hpp"
#include "model.hpp"
#include "python.hpp"
#include "storages.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ptread {
namespace detail {

// What every handler of a torch global works on: the model being read, its storages, the
// limits and the budgets the builtin calls share, the refusals that wait for the directory,
// and the dispatch of calls through the table of globals (globals.hpp), which TorchHooks
// hands it: handlers never include the table they are listed in.
class TorchContext {
 public:
  TorchContext(Model& m, StorageLoader loader, const Limits& lim, const TorchGlobal* globals, size_t n_globals)
      : model(m), limits(lim), legacy(m.format == Format::legacy), storages(m, std::move(loader)),
        globals_(globals), n_globals_(n_globals) {}

  Model& model;
  const Limits& limits;
  // torch.storage._load_from_bytes: the reader, the nesting and what keeps borrowed bytes
  // (ReadOptions' fields of those names); its results by bytes node, read once.
  const ReadOptions* nested = nullptr;
  std::unordered_map<uint32_t, uint32_t> nested_done;  // bytes node -> its result node
  const bool legacy;  // a legacy file's pickle (its format is set before the hooks are made)
  TorchStorages storages;
  size_t merge_budget = size_t{1} << 22;  // items merged_state (build.hpp) may still append

  // The table entry of global node fn (nullptr: a global ptread gives no meaning), found
  // once and cached in the node's tag: 0 not looked up yet, 1 none, else entry + 2.
  const TorchGlobal* global(Graph& g, uint32_t fn) const {
    const uint8_t tag = global_tag(g, fn);
    return tag >= 2 ? &globals_[tag - 2] : nullptr;
  }
  uint8_t global_tag(Graph& g, uint32_t fn) const {
    Node& n = g.nodes[fn];
    if (PTREAD_UNLIKELY(n.tag == 0)) n.tag = classify(g.global_module(fn), g.global_name(fn), n.ref != kGlobalNamesAsIs);
    return n.tag;
  }
  // The first entry of the table that matches module.name. py2: Python 2 module names stand
  // for their Python 3 modules, as Python's find_class() maps them below protocol 3.
  uint8_t classify(std::string_view mod, std::string_view name, bool py2) const {
    for (size_t k = 0; k < n_globals_; ++k) {
      if (globals_[k].match(mod, name, py2)) return static_cast<uint8_t>(k + 2);
    }
    return 1;
  }

  // REDUCE, INST, OBJ: callable(*args) as the callable's handler makes it; anything else (and
  // a handler's kNoNode) an inert object node.
  Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) {
    if (g.kind(callable) != ValueKind::global) return g.add_object(callable, args);
    const TorchGlobal* tg = global(g, callable);
    if (tg != nullptr && tg->call != nullptr) {
      PTREAD_TRY(const uint32_t made, tg->call(*this, g, GlobalCall{callable, args, g.at(args).items}));  // a tuple: its items never move
      if (made != kNoNode) return made;
    }
    return g.add_object(callable, args);
  }

  // cls.__new__(cls, *args): Python's unpickler takes only a class (a function, such as a
  // rebuild function, is refused); a class's new_object handler makes what __new__ makes
  // where that is not what a call makes (OrderedDict, set, bytearray ... left empty).
  Result<uint32_t> new_object(Graph& g, uint32_t cls, uint32_t args) {
    if (g.kind(cls) == ValueKind::global) {
      if (const TorchGlobal* tg = global(g, cls)) {
        if (is_function(tg->kind)) {
          return make_error(ErrorCode::pickle_malformed, "NEWOBJ of the function '" + std::string(g.global_module(cls)) +
                                                             "." + std::string(g.global_name(cls)) +
                                                             "' (Python's unpickler takes only a class)");
        }
        if (tg->new_object != nullptr) {
          PTREAD_TRY(const uint32_t made, tg->new_object(*this, g, GlobalCall{cls, args, g.at(args).items}));
          if (made != kNoNode) return made;
        }
      }
    }
    return call(g, cls, args);
  }

  uint32_t unsupported(Graph& g, std::string reason) {
    model.unsupported.push_back(std::move(reason));
    return g.emit_int(ValueKind::unsupported, static_cast<uint32_t>(model.unsupported.size() - 1), 0);
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

  // Sizes and strides: how many (a tuple or list of at most Limits::max_rank) ...
  PTREAD_ALWAYS_INLINE Result<size_t> dims_count(const Graph& g, uint32_t i, const char* what) const {
    const ValueKind k = g.kind(i);
    if (k != ValueKind::tuple && k != ValueKind::list) {
      return make_error(ErrorCode::bad_tensor_args, std::string(what) + " is a " + value_kind_name(k) + ", not a tuple");
    }
    const size_t count = g.count(i);
    if (count > limits.max_rank) {
      return make_error(ErrorCode::limit_exceeded, std::string(what) + " has " + std::to_string(count) +
                                                       " dimensions (Limits::max_rank)");
    }
    return count;
  }

  // A tensor node for spec t, once its view is checked against its storage.
  PTREAD_ALWAYS_INLINE Result<uint32_t> add_tensor(Graph& g, const TensorSpec& t, size_t stride_rank) {
    int64_t numel = 0;
    auto st = check_view(t.dims, t.rank, t.dims + t.rank, stride_rank, t.offset, t.dtype, model.storage_table.nbytes(t.storage), &numel);
    if (PTREAD_UNLIKELY(!st) && !grow_legacy_storage(t, stride_rank, st.error())) return std::move(st).error();
    model.specs.push_back(t);
    return g.emit_int(ValueKind::tensor, static_cast<uint32_t>(model.specs.size() - 1), 0);
  }

  // What torch.load refuses in a zip file, or torch.jit.load in a TorchScript archive,
  // that the other reads and the pickle held, for the reader to check once the directory
  // says which the archive is; nullptr when nothing.
  const Error* refusal(Format f) const noexcept {
    if (f == Format::zip && zip_refusal_) return &*zip_refusal_;
    if (f == Format::torchscript && script_refusal_) return &*script_refusal_;
    return nullptr;
  }
  void note_refusal(Format f, Error e) {
    std::optional<Error>& slot = f == Format::torchscript ? script_refusal_ : zip_refusal_;
    if (!slot) slot.emplace(std::move(e));
  }
  void note_zip_refusal(Error e) { note_refusal(Format::zip, std::move(e)); }

 private:
  // A legacy file's storage is torch.UntypedStorage(numel * element size), which the
  // tensor's set_() grows to the view's end when it reaches past it (resize_impl); the
  // bytes after the pickle must then fill the grown size (torch.load checks the count it
  // reads against it). So a view past a storage whose bytes are still to come grows the
  // storage (read_storages checks the count); zip and tar storages are records or read
  // already, and stay an error, as do quantized tensors (_rebuild_qtensor's set_() on a
  // quantized tensor resizes nothing: torch reads past the storage). True when grown.
  PTREAD_NOINLINE bool grow_legacy_storage(const TensorSpec& t, size_t stride_rank, const Error& e) {
    if (!legacy || e.code() != ErrorCode::view_out_of_bounds || model.storage_table.data(t.storage) != nullptr ||
        dtype_is_quantized(t.dtype)) {
      return false;
    }
    // slices (legacy view metadata) torch does not resize, nor a root once sliced
    if (storages.sliced(t.storage)) return false;
    int64_t numel = 0;
    if (!check_view(t.dims, t.rank, t.dims + t.rank, stride_rank, t.offset, t.dtype, uint64_t{1} << 62, &numel) || numel == 0) {
      return false;
    }
    uint64_t end = static_cast<uint64_t>(t.offset) + 1;  // (within 2^62 elements: checked above)
    for (uint32_t d = 0; d < t.rank; ++d) end += static_cast<uint64_t>(t.dims[d] - 1) * static_cast<uint64_t>(t.dims[t.rank + d]);
    model.storage_table.rebind(t.storage, nullptr, end * dtype_size(t.dtype));
    return true;
  }

  const TorchGlobal* globals_;
  size_t n_globals_;
  uint64_t call_budget_ = limits.max_container_items;  // spend()
  std::optional<Error> zip_refusal_, script_refusal_;  // refusal()
};

}  // namespace detail
}  // namespace ptread
