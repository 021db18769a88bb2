// ptread (the tool) — `ptread export` (safetensors) and `ptread convert` (a state dict torch.load reads).
#pragma once

#include "args.hpp"

#include <string>

namespace ptread_cli {

// Names on stderr what is not a plain tensor and so is not written (the entries `keep`
// selects): quantized and sparse tensors, and what ptread cannot read.
template <class Keep>
void report_not_written(const ptread::Checkpoint& ck, const Keep& keep) {
  for (const auto& q : ck.quantized()) {
    if (!keep(q.name)) continue;
    std::fprintf(stderr, "ptread: skipped %s: quantized tensor (%s, %s), not a plain tensor\n", display(q.name).c_str(),
                 ptread::dtype_name(q.tensor.dtype), ptread::qscheme_name(q.tensor.qscheme));
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

inline int export_safetensors(const ptread::Checkpoint& ck, const std::string& out_path) {
  ptread_cli::ProgressLine progress;
  ptread::SaveSafetensorsOptions o;
  o.metadata = {{"format", "pt"}};
  o.skip_unsupported = true;
  o.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  auto written = ptread::save_safetensors(out_path, ck.tensors(), o);
  progress.finish();
  if (!written) return write_failed(written.error());
  for (const auto& s : written->skipped) {
    std::fprintf(stderr, "ptread: skipped %s: %s\n", display(s.name).c_str(), s.reason.c_str());
  }
  report_not_written(ck, [](const std::string&) { return true; });
  return kExitOk;
}

inline int convert(const ptread::Checkpoint& ck, const Args& args) {
  auto keep = [&args](const std::string& name) {
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
  report_not_written(ck, keep);
  ptread_cli::ProgressLine progress;
  ptread::SavePtOptions o;
  o.float_dtype = args.dtype;
  o.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  auto written = ptread::save_pt(args.files[1], selected, o);
  progress.finish();
  return written ? kExitOk : write_failed(written.error());
}

}  // namespace ptread_cli
