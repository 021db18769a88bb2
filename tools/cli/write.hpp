// ptread (the tool) — `ptread export` (safetensors) and `ptread convert` (a state dict torch.load reads).
#pragma once

#include "args.hpp"
#include "shards.hpp"

#include <algorithm>
#include <string>
#if defined(_WIN32)
#include <direct.h>
#else
#include <sys/stat.h>
#endif

namespace ptread_cli {

// Names on stderr what is not a plain tensor and so is not written (the entries `keep`
// selects): quantized (unless written: export --quantized) and sparse tensors, and what
// ptread cannot read.
template <class Keep>
void report_not_written(const ptread::Checkpoint& ck, const Keep& keep, bool quantized_written = false,
                        const char* quantized_hint = "") {
  for (const auto& q : ck.quantized()) {
    if (quantized_written || !keep(q.name)) continue;
    std::fprintf(stderr, "ptread: skipped %s: quantized tensor (%s, %s), not a plain tensor%s\n", display(q.name).c_str(),
                 ptread::dtype_name(q.tensor.dtype), ptread::qscheme_name(q.tensor.qscheme), quantized_hint);
  }
  for (const auto& sp : ck.sparse()) {
    if (!keep(sp.name)) continue;
    std::fprintf(stderr, "ptread: skipped %s: sparse tensor (%s), not a plain tensor\n", display(sp.name).c_str(),
                 ptread::sparse_layout_name(sp.tensor.layout));
  }
  for (const auto& u : ck.unsupported()) {
    if (keep(u.name)) std::fprintf(stderr, "ptread: skipped %s: %s\n", display(u.name).c_str(), display(u.reason).c_str());
  }
}

inline int write_failed(const ptread::Error& e) {
  std::fprintf(stderr, "ptread: %s\n", e.what());
  return kExitFailed;
}

// The folder a sharded set is written into (made if absent).
inline bool make_folder(const std::string& dir) {
#if defined(_WIN32)
  const std::wstring wide = ptread::detail::win32_wide(dir);
  if (!wide.empty() && ::_wmkdir(wide.c_str()) == 0) return true;
#else
  if (::mkdir(dir.c_str(), 0777) == 0) return true;
#endif
  return ptread::detail::path_kind(dir) == ptread::detail::PathKind::directory;
}

// Writes tensors as a set under --max-shard-size (shards.hpp), each shard by write(path,
// tensors) (a Result<SaveReport>), into the folder out. bytes_of: a tensor's bytes as written.
template <class Write, class BytesOf>
int write_set(const std::vector<ptread::NamedTensor>& tensors, const std::string& out, uint64_t max_bytes,
              const std::string& stem, const std::string& ext, const std::string& index_name, BytesOf&& bytes_of,
              Write&& write) {
  std::vector<uint64_t> sizes;
  std::vector<const void*> group;
  for (const auto& nt : tensors) {
    sizes.push_back(bytes_of(nt.tensor));
    group.push_back(nt.tensor.storage().get());
  }
  const auto shards = plan_shards(sizes, group, max_bytes);
  if (!make_folder(out)) {
    std::fprintf(stderr, "ptread: cannot make the folder '%s' for the sharded set\n", out.c_str());
    return kExitFailed;
  }
  const std::string dir = out.empty() || out.back() == '/' ? out : out + "/";
  std::vector<std::pair<std::string, std::string>> weight_map;
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    // one shard: the plain name, and no index (save_pretrained's way)
    const std::string file = shards.size() == 1 ? stem + ext : shard_name(stem, ext, s, shards.size());
    std::vector<ptread::NamedTensor> part;
    for (size_t k : shards[s]) part.push_back(tensors[k]);
    auto written = write(dir + file, part);
    if (!written) return write_failed(written.error());
    std::vector<std::string> skipped;
    for (const auto& u : written->skipped) {
      std::fprintf(stderr, "ptread: skipped %s: %s\n", display(u.name).c_str(), u.reason.c_str());
      skipped.push_back(u.name);
    }
    for (size_t k : shards[s]) {
      if (std::find(skipped.begin(), skipped.end(), tensors[k].name) != skipped.end()) continue;
      weight_map.emplace_back(tensors[k].name, file);
      total += sizes[k];
    }
  }
  if (shards.size() > 1) {
    const std::string index = shard_index_json(total, std::move(weight_map));
    std::FILE* f = std::fopen((dir + index_name).c_str(), "wb");
    const bool ok = f != nullptr && std::fwrite(index.data(), 1, index.size(), f) == index.size();
    if (f == nullptr || std::fclose(f) != 0 || !ok) {
      std::fprintf(stderr, "ptread: cannot write '%s%s'\n", dir.c_str(), index_name.c_str());
      return kExitFailed;
    }
  }
  return kExitOk;
}

// --only / --exclude kept no tensor: says so (exit 1, as convert --prefix), else 0.
inline int nothing_selected(const ptread::Checkpoint& ck, const Args& args, size_t selected) {
  if (args.filter.empty() || selected != 0) return kExitOk;
  std::fprintf(stderr, "ptread: --only/--exclude keep none of the %zu tensors; nothing written\n", ck.tensor_count());
  return kExitFailed;
}

inline int export_safetensors(const ptread::Checkpoint& ck, const Args& args) {
  const std::string& out_path = args.files[1];
  const QuantizedOut quantized = args.quantized.value_or(QuantizedOut::skip);
  const bool with_quantized = quantized != QuantizedOut::skip && !ck.quantized().empty();
  std::vector<ptread::NamedTensor> kept;  // with --only / --exclude or --quantized: what is written
  std::vector<std::pair<std::string, std::string>> metadata = {{"format", "pt"}};
  if (!args.filter.empty() || with_quantized) {
    for (const auto& nt : ck.tensors()) {
      if (args.filter.keep(nt.name)) kept.push_back(nt);
    }
    for (const auto& q : ck.quantized()) {
      if (!with_quantized || !args.filter.keep(q.name)) continue;
      auto made = quantized_as_plain(q, quantized, &kept, &metadata);
      if (!made) {
        std::fprintf(stderr, "ptread: %s: %s; nothing written\n", display(q.name).c_str(), made.error().what());
        return kExitFailed;
      }
    }
    if (nothing_selected(ck, args, kept.size()) != kExitOk) return kExitFailed;
  }
  const std::vector<ptread::NamedTensor>& tensors = args.filter.empty() && !with_quantized ? ck.tensors() : kept;
  auto keep = [&args](const std::string& name) { return args.filter.keep(name); };
  const char* hint = " (--quantized int or dequantize writes it)";
  ptread_cli::ProgressLine progress;
  ptread::SaveSafetensorsOptions o;
  o.metadata = std::move(metadata);
  o.skip_unsupported = true;
  o.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  if (args.max_shard_size) {
    const int status = write_set(
        tensors, out_path, *args.max_shard_size, "model", ".safetensors", "model.safetensors.index.json",
        [](const ptread::Tensor& t) { return t.nbytes(); },
        [&o](const std::string& path, const std::vector<ptread::NamedTensor>& part) { return ptread::save_safetensors(path, part, o); });
    progress.finish();
    if (status == kExitOk) report_not_written(ck, keep, with_quantized, hint);
    return status;
  }
  auto written = ptread::save_safetensors(out_path, tensors, o);
  progress.finish();
  if (!written) return write_failed(written.error());
  for (const auto& s : written->skipped) {
    std::fprintf(stderr, "ptread: skipped %s: %s\n", display(s.name).c_str(), s.reason.c_str());
  }
  report_not_written(ck, keep, with_quantized, hint);
  return kExitOk;
}

inline int convert(const ptread::Checkpoint& ck, const Args& args) {
  auto keep = [&args](const std::string& name) {
    if (!args.filter.keep(name)) return false;
    if (!args.prefix) return true;
    const std::string& p = *args.prefix;
    return name.compare(0, p.size(), p) == 0 && (name.size() == p.size() || name[p.size()] == '.');
  };
  std::vector<ptread::NamedTensor> selected;
  std::unordered_map<std::string, const std::string*, ptread::detail::KeyedHash> source_of;  // written name -> name in the file (names a file chose: keyed)
  for (const auto& nt : ck.tensors()) {
    if (!keep(nt.name)) continue;
    std::string name = nt.name;
    if (args.strip_prefix) {
      const std::string& p = *args.strip_prefix;
      if (name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '.') name.erase(0, p.size() + 1);
    }
    const auto seen = source_of.emplace(name, &nt.name);
    if (!seen.second) {
      std::fprintf(stderr, "ptread: %s and %s would both be written as %s%s\n", display(*seen.first->second).c_str(),
                   display(nt.name).c_str(), display(name).c_str(),
                   args.strip_prefix ? " (after --strip-prefix); nothing written" : "; nothing written");
      return kExitFailed;
    }
    selected.push_back({std::move(name), nt.tensor});
  }
  if (args.prefix && selected.empty()) {
    std::fprintf(stderr, "ptread: no tensor is named %s or starts with '%s.'; nothing written\n",
                 display(*args.prefix).c_str(), display(*args.prefix).c_str());
    return kExitFailed;
  }
  if (nothing_selected(ck, args, selected.size()) != kExitOk) return kExitFailed;
  report_not_written(ck, keep);
  ptread_cli::ProgressLine progress;
  ptread::SavePtOptions o;
  o.float_dtype = args.dtype;
  o.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  if (args.max_shard_size) {
    const auto as = args.dtype;
    const int status = write_set(
        selected, args.files[1], *args.max_shard_size, "pytorch_model", ".bin", "pytorch_model.bin.index.json",
        [as](const ptread::Tensor& t) {
          return as && ptread::detail::is_float_dtype(t.dtype()) ? static_cast<uint64_t>(t.numel()) * ptread::dtype_size(*as) : t.nbytes();
        },
        [&o](const std::string& path, const std::vector<ptread::NamedTensor>& part) { return ptread::save_pt(path, part, o); });
    progress.finish();
    return status;
  }
  auto written = ptread::save_pt(args.files[1], selected, o);
  progress.finish();
  return written ? kExitOk : write_failed(written.error());
}

}  // namespace ptread_cli
