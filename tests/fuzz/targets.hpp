// The bodies of the libFuzzer targets (tests/fuzz/fuzz_*.cpp), shared with the unit test
// that replays findings and fixtures through them (tests/unit/fuzz_replay.cpp).
#pragma once

#include <ptread/ptread.hpp>

#include "../support/model_dump.hpp"

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ptread_fuzz {

// The zip directory (EOCD, ZIP64 records, central directory, local headers) and every
// record, deflated ones through zlib with its bounds.
inline int zip_one(const uint8_t* data, size_t size) {
  auto src = std::make_shared<ptread::detail::MemorySource>(data, size, "<fuzz>");
  ptread::Limits limits;
  auto zip = ptread::detail::ZipArchive::open(src, limits);
  if (!zip) return 0;
  for (const auto& e : zip->entries()) {
    auto b = zip->read(e);
    if (b && b->size > 0) {
      volatile uint8_t sink = b->data[0] ^ b->data[b->size - 1];
      (void)sink;
    }
    (void)zip->find(e.name);
  }
  (void)zip->find("archive/data.pkl");
  return 0;
}

// The pickle VM with torch's hooks (rebuild functions, persistent ids, numpy, quantized,
// sparse), storages served from a small buffer; then the naming walk and a repr. Read as
// the zip reader reads a torch.save archive's data.pkl: again, unframed as torch.load reads
// it (unframe_as_torch_load, which must give no more bytes than it was given, and give
// them again when given its own result), where the flat reading says torch.load may read
// it otherwise. Run twice, with TensorRuns on and off (pickle.hpp): both must leave the
// same Model, or the same error (tests/support/model_dump.hpp); a difference aborts.
struct PickleOutcome {
  std::string text;  // the Model's dump, or the error
  bool ok = false;
  ptread::detail::Model model;
};

// One run of the VM over [data, data + size) into out (unframed: those are its bytes);
// returns PickleVM::torch_reads_otherwise().
inline bool pickle_run_once(const uint8_t* data, size_t size, bool runs, PickleOutcome* out,
                            const ptread::detail::UnframedPickle* unframed) {
  using namespace ptread::detail;
  Model& m = out->model;
  ptread::Limits limits;
  limits.max_nesting_depth = 200;
  static uint8_t backing[4096];
  StorageLoader loader = [](std::string_view, uint64_t nbytes, ptread::DType) -> ptread::Result<std::shared_ptr<const ptread::Storage>> {
    if (nbytes > sizeof backing) return ptread::make_error(ptread::ErrorCode::storage_too_small, "fuzz storage");
    return std::make_shared<const ptread::Storage>(backing, static_cast<size_t>(nbytes), nullptr);
  };
  TorchHooks hooks(m, loader, limits);
  PickleVM vm(m.graph, hooks, limits, "<fuzz>");
  vm.set_tensor_runs(runs);
  vm.set_unframed(unframed);
  auto root = vm.run(data, size);
  const bool otherwise = vm.torch_reads_otherwise();
  if (!root) {
    out->text = root.error().str();
    return otherwise;
  }
  m.root = *root;
  if (auto st = hooks.finish(); !st) {
    out->text = st.error().str();
    return otherwise;
  }
  if (auto st = name_tensors(m, limits, size); !st) {
    out->text = st.error().str();
    return otherwise;
  }
  out->text = ptread_test::ModelDump(m).all();
  out->ok = true;
  return otherwise;
}

inline std::unique_ptr<PickleOutcome> pickle_run(const uint8_t* data, size_t size, bool runs) {
  auto out = std::make_unique<PickleOutcome>();
  if (!pickle_run_once(data, size, runs, out.get(), nullptr)) return out;
  const auto u = ptread::detail::unframe_as_torch_load(data, size);
  const auto again = ptread::detail::unframe_as_torch_load(u.bytes.data(), u.bytes.size());
  if (u.bytes.size() > size || again.bytes != u.bytes) {
    std::fprintf(stderr, "unframe_as_torch_load: %zu bytes from %zu, %zu when unframed again (%s)\n", u.bytes.size(),
                 size, again.bytes.size(), again.bytes == u.bytes ? "the same" : "others");
    std::abort();
  }
  out = std::make_unique<PickleOutcome>();
  pickle_run_once(u.bytes.data(), u.bytes.size(), runs, out.get(), &u);
  return out;
}

inline int pickle_one(const uint8_t* data, size_t size) {
  using namespace ptread::detail;
  const auto on = pickle_run(data, size, true);
  const auto off = pickle_run(data, size, false);
  if (on->text != off->text) {
    std::fprintf(stderr, "TensorRuns on and off differ:\n--- off\n%s\n--- on\n%s\n", off->text.c_str(), on->text.c_str());
    std::abort();
  }
  if (!on->ok) return 0;
  const Model& m = on->model;
  std::string s = python_str(m.graph, m.root, true);
  (void)s;
  const auto& named = m.named();
  for (size_t k = 0; k < named.size(); ++k) {
    const ptread::Tensor& t = named[k].tensor;
    const ptread::TensorInfo i = m.info(k);  // the listing without Tensors says the same
    if (i.name != named[k].name || i.dtype != t.dtype() || i.shape != t.shape() || i.strides != t.strides() ||
        i.storage_offset != t.storage_offset() || i.device != t.device() || i.nbytes != t.nbytes() ||
        i.requires_grad != t.requires_grad() || i.conj != t.is_conj() || i.neg != t.is_neg()) {
      std::fprintf(stderr, "tensor_info(%zu) differs from tensors()[%zu] ('%s')\n", k, k, named[k].name.c_str());
      std::abort();
    }
    // (as checkpoint_one: an expanded view may stand for more elements than memory holds;
    // to_float32 then asks malloc, which a sanitizer's allocator turns into an abort)
    if (t.numel() <= (1 << 18)) (void)t.to_float32();
  }
  for (const auto& q : m.named_quantized) {
    if (q.tensor.numel() <= (1 << 18)) (void)q.tensor.dequantize();
  }
  return 0;
}

// Walks the object tree within a budget of work (a value visited: 1, and 1 per 16 bytes
// of its repr()): a pickle's memo can make a DAG whose paths double at each level (a value
// shared by two items of each list), which a walk as a tree would visit exponentially
// often, each visit's repr() up to its 1 MiB bound.
inline void walk(const ptread::Value& v, int depth, size_t* budget) {
  if (depth > 64 || *budget == 0) return;
  const size_t cost = 1 + v.repr().size() / 16;
  *budget = cost < *budget ? *budget - cost : 0;
  (void)v.class_name();
  const size_t n = v.size() < 64 ? v.size() : 64;
  for (size_t k = 0; k < n; ++k) {
    if (v.kind() == ptread::ValueKind::dict) {
      (void)v.key(k).repr();
      walk(v.value(k), depth + 1, budget);
    } else {
      walk(v[k], depth + 1, budget);
    }
  }
  if (v.kind() == ptread::ValueKind::tensor) (void)v.as_tensor();
  if (v.kind() == ptread::ValueKind::quantized) (void)v.as_quantized();
  if (v.kind() == ptread::ValueKind::sparse) (void)v.as_sparse();
  if (v.kind() == ptread::ValueKind::storage) {  // a storage saved on its own: every byte read
    auto s = v.as_storage();
    if (s) (void)s->to_float32();
  }
}

// Zip archives read with one thread and with two (the directory walked beside data.pkl,
// zip_checkpoint.hpp): both must leave the same Model, with each storage at the same byte of
// the input, or fail with the same error; a difference aborts.
inline void compare_overlap(const uint8_t* data, size_t size) {
  using namespace ptread::detail;
  auto detected = detect_format(data, size < 512 ? size : 512, size);
  if (!detected || *detected != Detected::zip) return;
  std::string text[2];
  for (unsigned threads : {1u, 2u}) {
    auto src = std::make_shared<MemorySource>(data, size, "<fuzz>");
    ReadOptions ro;
    ro.mode = ptread::LoadMode::memory;
    ro.threads = threads;
    ro.limits.max_nesting_depth = 200;
    auto m = read_zip_checkpoint(src, ro);
    text[threads - 1] = m ? ptread_test::ModelDump(**m).source(data, size).all() : m.error().str();
  }
  if (text[0] != text[1]) {
    std::fprintf(stderr, "one and two threads differ:\n--- one\n%s\n--- two\n%s\n", text[0].c_str(), text[1].c_str());
    std::abort();
  }
}

// A safetensors header: the input is the header's text. The JSON reader skips it as one
// value (grammar only), and reads it as a sharded set's index; then the file it heads (the input's length, the input, and 0 or 64
// zero bytes of data) is opened in memory and read whole, and so is the input itself as a
// file (seeds: real files, whose headers fit their data).
inline int safetensors_header_one(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ptread::detail::JsonReader json(text, "<fuzz>", ptread::ErrorCode::safetensors_corrupt);
  if (json.skip().ok()) (void)json.finish();
  ptread::Limits limits;
  (void)ptread::detail::parse_shard_index(text, "<fuzz>", limits);  // the same text as a sharded set's index
  auto read_whole = [](const uint8_t* p, size_t n) {
    auto ck = ptread::Checkpoint::open_memory(p, n);
    if (!ck) return;
    for (const auto& nt : ck->tensors()) {
      if (nt.tensor.numel() <= (1 << 12)) (void)nt.tensor.to_float32();
    }
    size_t budget = 20000;
    walk(ck->root(), 0, &budget);
  };
  for (size_t tail : {size_t{0}, size_t{64}}) {
    std::vector<uint8_t> file(8 + size + tail, 0);
    for (size_t k = 0; k < 8; ++k) file[k] = static_cast<uint8_t>(static_cast<uint64_t>(size) >> (8 * k));
    if (size) std::memcpy(file.data() + 8, data, size);
    read_whole(file.data(), file.size());
  }
  read_whole(data, size);
  return 0;
}

// A whole checkpoint from memory (detection; zip, legacy, tar, TorchScript, safetensors): open, list,
// find, walk the object tree, materialize every tensor, dequantize, read sparse parts; zip
// archives also through compare_overlap.
inline int checkpoint_one(const uint8_t* data, size_t size) {
  compare_overlap(data, size);
  ptread::Options opt;
  opt.limits.max_nesting_depth = 200;
  auto ck = ptread::Checkpoint::open_memory(data, size, opt);
  if (!ck) return 0;
  std::vector<unsigned char> buf;
  for (const auto& nt : ck->tensors()) {
    const ptread::Tensor& t = nt.tensor;
    (void)ck->find(nt.name);
    if (t.nbytes() > (1u << 20)) continue;
    buf.resize(static_cast<size_t>(t.nbytes()) + 1);
    (void)t.copy_to(buf.data(), static_cast<size_t>(t.nbytes()));
    if (t.numel() <= (1 << 18)) (void)t.to_float32();
  }
  for (const auto& q : ck->quantized()) {
    if (q.tensor.numel() <= (1 << 18)) (void)q.tensor.dequantize();
  }
  for (const auto& s : ck->sparse()) {
    if (s.tensor.values.numel() <= (1 << 18)) (void)s.tensor.values.to_float32();
  }
  size_t budget = 200000;
  walk(ck->root(), 0, &budget);
  walk(ck->constants(), 0, &budget);
  return 0;
}

}  // namespace ptread_fuzz
