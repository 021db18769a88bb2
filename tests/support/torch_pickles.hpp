// Pickles in torch's shape written by hand (a tensor's opcodes as torch.save writes them,
// memoized as protocol 2 or 4 memoizes), and the readers the TensorRun tests compare: a
// pickle run by the VM with runs on or off, a file read as Checkpoint::open_memory reads it
// (tests/unit/tensor_runs.cpp, tests/unit/run_template.cpp).
#pragma once

#include "helpers.hpp"
#include "model_dump.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ptread_test {

using Bytes = std::vector<uint8_t>;

// A file read as Checkpoint::open_memory reads it, into a Model's text (or the error).
inline std::string read_model(const Bytes& file, bool runs, size_t* nodes = nullptr) {
  auto src = std::make_shared<ptread::detail::MemorySource>(file.data(), file.size(), "<test>");
  auto detected = ptread::detail::detect_format(file.data(), std::min<size_t>(file.size(), 512), file.size());
  if (!detected) return detected.error().str();
  ptread::detail::ReadOptions ro;
  ro.mode = ptread::LoadMode::memory;
  ro.tensor_runs = runs;
  auto model = *detected == ptread::detail::Detected::legacy ? ptread::detail::read_legacy_checkpoint(src, ro)
               : *detected == ptread::detail::Detected::tar  ? ptread::detail::read_tar_checkpoint(src, ro)
                                                             : ptread::detail::read_zip_checkpoint(src, ro);
  if (!model) return model.error().str();
  if (nodes) *nodes = (*model)->graph.nodes.size();
  return ModelDump(**model).all();
}

// ---- hand-written pickles in torch's shape ----

struct Pickle {
  Bytes b;
  Pickle& op(uint8_t o) {
    b.push_back(o);
    return *this;
  }
  Pickle& raw(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Pickle& u32(uint32_t v) {
    for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(v >> (8 * k)));
    return *this;
  }
  Pickle& str(const std::string& s) { return op('X').u32(static_cast<uint32_t>(s.size())).raw(s); }
  Pickle& short_str(const std::string& s) { return op(0x8c).op(static_cast<uint8_t>(s.size())).raw(s); }
  Pickle& global(const std::string& mod, const std::string& name) { return op('c').raw(mod + "\n" + name + "\n"); }
  Pickle& put(uint32_t k) { return k < 256 ? op('q').op(static_cast<uint8_t>(k)) : op('r').u32(k); }
  Pickle& get(uint32_t k) { return k < 256 ? op('h').op(static_cast<uint8_t>(k)) : op('j').u32(k); }
  Pickle& integer(int64_t v) {
    if (v >= 0 && v < 256) return op('K').op(static_cast<uint8_t>(v));
    if (v >= 0 && v < 65536) return op('M').op(static_cast<uint8_t>(v)).op(static_cast<uint8_t>(v >> 8));
    if (v >= INT32_MIN && v <= INT32_MAX) return op('J').u32(static_cast<uint32_t>(v));
    op(0x8a).op(8);
    for (int k = 0; k < 8; ++k) b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * k)));
    return *this;
  }
  Pickle& tuple_of(const std::vector<int64_t>& v) {
    if (v.empty()) return op(')');
    if (v.size() > 3) op('(');
    for (int64_t x : v) integer(x);
    return v.size() > 3 ? op('t') : op(static_cast<uint8_t>(0x84 + v.size()));
  }
};

// How the values of a run are memoized: protocol 2 (BINPUT / LONG_BINPUT keys, counted by
// hand) or protocol 4 (MEMOIZE).
struct Memo {
  bool memoize = false;
  uint32_t next = 0;
  uint32_t put(Pickle& p) {
    if (memoize) {
      p.op(0x94);
    } else {
      p.put(next);
    }
    return next++;
  }
};

// The memo keys of the values one tensor's opcodes made.
struct RunKeys {
  uint32_t fn = 0, storage = 0, cls = 0, key = 0, location = 0, pid = 0, size = 0, stride = 0, od = 0, hooks = 0, args = 0, tensor = 0;
};

struct TensorSpecIn {
  std::string key = "0";
  int64_t numel = 6, offset = 0;
  std::vector<int64_t> size{2, 3}, stride{3, 1};
  bool requires_grad = false;
  bool pid_none = false;
  bool new_location = false;  // the location as new text, not a memo get
  int64_t key_get = -1;       // >= 0: the key is this memo get (a storage shared with an earlier tensor)
};

// One tensor as torch.save writes it; the first one names the globals and strings, later
// ones get them from the memo (first: that first run's keys).
inline RunKeys tensor(Pickle& p, Memo& m, const TensorSpecIn& t, const RunKeys* first, const char* cls = "FloatStorage") {
  RunKeys k;
  auto text = [&](const std::string& s) {
    if (m.memoize) {
      p.short_str(s);
    } else {
      p.str(s);
    }
  };
  if (first) {
    k = *first;
    p.get(k.fn).op('(').op('(').get(k.storage).get(k.cls);
  } else {
    p.global("torch._utils", "_rebuild_tensor_v2");
    k.fn = m.put(p);
    p.op('(').op('(');
    text("storage");
    k.storage = m.put(p);
    p.global("torch", cls);
    k.cls = m.put(p);
  }
  if (t.key_get >= 0) {
    k.key = static_cast<uint32_t>(t.key_get);
    p.get(k.key);  // the same str object: pickled once, gotten after
  } else {
    text(t.key);
    k.key = m.put(p);
  }
  if (first && !t.new_location) {
    p.get(k.location);
  } else {
    text("cuda:1");
    k.location = m.put(p);
  }
  p.integer(t.numel);
  if (t.pid_none) p.op('N');
  p.op('t');
  k.pid = m.put(p);
  p.op('Q').integer(t.offset).tuple_of(t.size);
  if (!t.size.empty()) k.size = m.put(p);
  p.tuple_of(t.stride);
  if (!t.stride.empty()) k.stride = m.put(p);
  p.op(t.requires_grad ? 0x88 : 0x89);
  if (first) {
    p.get(k.od);
  } else {
    p.global("collections", "OrderedDict");
    k.od = m.put(p);
  }
  p.op(')').op('R');
  k.hooks = m.put(p);
  p.op('t');
  k.args = m.put(p);
  p.op('R');
  k.tensor = m.put(p);
  return k;
}

// Protocol 2, an empty dict (memo 0), MARK, and the key 'a' (memo 1).
inline void dict_start(Pickle& p, Memo& m) {
  p.op(0x80).op(2).op('}');
  m.put(p);
  p.op('(').str("a");
  m.put(p);
}

// Storages "0" to "99" of 96 bytes each, from one buffer; and one under the key "\xc3", not
// UTF-8 (a pickle's text must be: only a reader that skips that check would find it).
inline ptread::detail::StorageLoader test_storages() {
  static uint8_t backing[101 * 96] = {};
  return [](std::string_view key, uint64_t nbytes, ptread::DType) -> ptread::Result<std::shared_ptr<const ptread::Storage>> {
    const bool number = (key.size() == 1 || (key.size() == 2 && key[0] != '0')) &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!number && key != "\xc3") {
      return ptread::make_error(ptread::ErrorCode::record_missing, "no storage '" + std::string(key) + "'");
    }
    if (nbytes > 96) return ptread::make_error(ptread::ErrorCode::storage_too_small, "storage of 96 bytes");
    return std::make_shared<const ptread::Storage>(backing + 96 * (number ? std::stoi(std::string(key)) : 100), 96, nullptr);
  };
}

// A pickle run as the zip reader runs data.pkl, then finish() and the names.
// (taken: the runs the VM took; by_template: of them, those read by their template.)
inline std::string run_pickle(const Bytes& b, bool runs, const ptread::Limits& limits = {}, size_t* taken = nullptr,
                              size_t* by_template = nullptr) {
  ptread::detail::Model m;
  ptread::detail::TorchHooks hooks(m, test_storages(), limits);
  ptread::detail::PickleVM vm(m.graph, hooks, limits, "test.pkl");
  vm.set_tensor_runs(runs);
  auto root = vm.run(b.data(), b.size());
  if (taken) *taken = vm.tensor_runs_taken();
  if (by_template) *by_template = vm.template_runs_taken();
  if (!root) return root.error().str();
  m.root = *root;
  if (auto st = hooks.finish(); !st) return st.error().str();
  if (auto st = ptread::detail::name_tensors(m, limits, b.size()); !st) return st.error().str();
  return ModelDump(m).all();
}

// Protocol 2 (BINPUT) or 4 (MEMOIZE), a dict, MARK, 'a': the first tensor (which names the
// globals, opcode by opcode), and the key 'b'; returns the first tensor's memo keys.
inline RunKeys dict_with_first_tensor(Pickle& p, Memo& m, bool memoize, bool long_keys) {
  m.memoize = memoize;
  p.op(0x80).op(memoize ? 4 : 2).op('}');
  m.put(p);
  if (long_keys) m.next = 300;  // LONG_BINPUT / LONG_BINGET from here (protocol 2 only)
  p.op('(');
  p.str("a");
  m.put(p);
  const RunKeys k0 = tensor(p, m, {}, nullptr);
  p.str("b");
  m.put(p);
  return k0;
}

}  // namespace ptread_test
