// ptread (the tool) — `--max-shard-size`: export and convert write a sharded set in
// transformers' layout: OUT becomes a folder of model-00001-of-0000N.safetensors (export)
// or pytorch_model-00001-of-0000N.bin (convert) and model.safetensors.index.json /
// pytorch_model.bin.index.json ({"metadata": {"total_size": N}, "weight_map": {...}},
// keys sorted, indent 2, as save_pretrained writes it). Shards fill in the tensors' order
// as huggingface_hub fills them: a tensor that would take a shard past the size starts the
// next one, a tensor larger than the size is a shard of its own, tensors sharing a storage
// stay together. A set that fits one shard is one file, model.safetensors or
// pytorch_model.bin, without an index, as save_pretrained writes it.
#pragma once

#include "output.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

namespace ptread_cli {

// "5GB" (10^9), "500MB", "2GiB" (2^30), "64KiB", "1000" (bytes): transformers' sizes
// (convert_file_size_to_int), bits excepted. False when s is none of these.
inline bool parse_size(const std::string& s, uint64_t* out) {
  size_t k = 0;
  uint64_t v = 0;
  while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
    const uint64_t d = static_cast<uint64_t>(s[k] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
    ++k;
  }
  if (k == 0) return false;
  std::string unit;
  for (; k < s.size(); ++k) unit.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(s[k]))));
  static const struct {
    const char* unit;
    uint64_t scale;
  } units[] = {{"", 1},           {"B", 1},
               {"KB", 1000},      {"MB", 1000000},           {"GB", 1000000000},           {"TB", 1000000000000},
               {"KIB", 1u << 10}, {"MIB", uint64_t{1} << 20}, {"GIB", uint64_t{1} << 30}, {"TIB", uint64_t{1} << 40}};
  for (const auto& u : units) {
    if (unit == u.unit) {
      if (v > UINT64_MAX / u.scale) return false;
      *out = v * u.scale;
      return v > 0;
    }
  }
  return false;
}

// The shards: for each, the indexes of its tensors in `sizes` (bytes as written) order.
// group[k]: tensors with the same group (a storage) go to one shard.
inline std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& sizes, const std::vector<const void*>& group,
                                                    uint64_t max_bytes) {
  // Tensors of one storage travel with its first one.
  std::unordered_map<const void*, size_t> first;
  std::vector<std::vector<size_t>> units;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const auto f = group[k] ? first.emplace(group[k], units.size()) : std::make_pair(first.end(), true);
    if (!group[k] || f.second) {
      units.push_back({k});
    } else {
      units[f.first->second].push_back(k);
    }
  }
  std::vector<std::vector<size_t>> shards;
  uint64_t in_shard = 0;
  for (const auto& u : units) {
    uint64_t bytes = 0;
    for (size_t k : u) bytes += sizes[k];
    if (shards.empty() || (in_shard > 0 && in_shard + bytes > max_bytes)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().insert(shards.back().end(), u.begin(), u.end());
    in_shard += bytes;
  }
  return shards;
}

// model-00001-of-00003.safetensors: transformers' shard names (5 digits).
inline std::string shard_name(const std::string& stem, const std::string& ext, size_t k, size_t n) {
  char b[64];
  std::snprintf(b, sizeof b, "-%05zu-of-%05zu", k + 1, n);
  return stem + b + ext;
}

// The index, as save_pretrained writes it (json.dumps(index, indent=2, sort_keys=True)).
inline std::string shard_index_json(uint64_t total_size, std::vector<std::pair<std::string, std::string>> weight_map) {
  std::sort(weight_map.begin(), weight_map.end());
  std::string out = "{\n  \"metadata\": {\n    \"total_size\": ";
  append_u64(out, total_size);
  out += "\n  },\n  \"weight_map\": {";
  for (size_t k = 0; k < weight_map.size(); ++k) {
    out += k ? ",\n    " : "\n    ";
    append_json_string(out, weight_map[k].first);
    out += ": ";
    append_json_string(out, weight_map[k].second);
  }
  out += weight_map.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

}  // namespace ptread_cli
