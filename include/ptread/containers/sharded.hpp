// ptread — sharded sets: one checkpoint saved as several files and an index, as Hugging Face
// transformers writes them (save_pretrained with max_shard_size; huggingface_hub's
// split_state_dict_into_shards):
//
//   model.safetensors.index.json  or  pytorch_model.bin.index.json:
//     {"metadata": {"total_size": <bytes>, ...}, "weight_map": {"<tensor>": "<shard file>", ...}}
//   model-00001-of-00003.safetensors ...  or  pytorch_model-00001-of-00003.bin ...
//     (beside the index; .bin shards are torch.save files of any format, .safetensors shards
//     safetensors files)
//
// The set reads as one checkpoint: the tensors of every shard (shards in file-name order,
// each in its own order), each with its shard (TensorInfo::shard); root() a dict of them by
// name. Every shard is opened when the set is (mapped: no tensor byte is read), and checked
// against the weight_map: a tensor it lists missing from its shard, found in another shard
// or in two, a tensor no line lists, a shard file missing: errors that name file and
// tensor. metadata.total_size, where it is an integer, must be the bytes of the tensors
// (each name counted: older transformers) or of their distinct storages (huggingface_hub).
// Shard names are paths relative to the index's folder: absolute paths and ".." are refused.
// Quantized and sparse tensors of .bin shards are listed by quantized() and sparse().
#pragma once

#include "../text/json.hpp"
#include "../torch/naming.hpp"
#include "../torch/python.hpp"
#include "safetensors.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace ptread {
namespace detail {

struct ShardIndex {
  std::vector<std::string> files;  // distinct shard files, sorted
  struct Line {
    uint32_t name_at, name_size;   // in names
    uint32_t file;                 // into files
  };
  std::vector<Line> weight_map;    // in the index's order
  std::string names;               // the lines' names, end to end
  StringIndex by_name;             // line k under its name
  bool has_total = false;
  uint64_t total_size = 0;

  std::string_view name(uint32_t k) const { return std::string_view(names).substr(weight_map[k].name_at, weight_map[k].name_size); }
  uint32_t find(std::string_view key) const {
    return by_name.find(key, [this](uint32_t j) { return name(j); });
  }
};

inline Error index_corrupt(const std::string& where, const std::string& why) {
  return make_error(ErrorCode::shard_index_corrupt, "sharded set index '" + where + "': " + why);
}

// A shard's name as the index gives it: a relative path without "..", NUL or backslash.
inline bool shard_name_ok(std::string_view f) {
  if (f.empty() || f[0] == '/' || f.find('\\') != std::string_view::npos || f.find('\0') != std::string_view::npos ||
      (f.size() >= 2 && f[1] == ':')) {
    return false;
  }
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(f.find('/', start), f.size());
    const std::string_view part = f.substr(start, end - start);
    if (part == ".." || part.empty()) return false;
    if (end == f.size()) return true;
    start = end + 1;
  }
}

inline Result<ShardIndex> parse_shard_index(std::string_view text, const std::string& where, const Limits& limits) {
  if (!utf8_valid(text)) return index_corrupt(where, "not valid UTF-8");
  JsonReader json(text, "sharded set index '" + where + "'", ErrorCode::shard_index_corrupt);
  ShardIndex index;
  PTREAD_CHECK(json.begin_object());
  bool seen_map = false, seen_metadata = false;
  // Keys and values are views of the text (or of scratch, where they hold escapes): a
  // name is copied once, into index.names; a file once per distinct file.
  std::string key_scratch, value_scratch;
  std::string_view key, value;
  StringIndex files;
  std::vector<std::string> distinct;
  for (;;) {
    PTREAD_TRY(bool more, json.next(&key_scratch, &key));
    if (!more) break;
    if (key == "metadata") {
      if (seen_metadata) return index_corrupt(where, "\"metadata\" appears twice");
      seen_metadata = true;
      if (json.peek() != JsonType::object) {
        PTREAD_CHECK(json.skip());  // (transformers reads no more of it than total_size)
        continue;
      }
      PTREAD_CHECK(json.begin_object());
      for (;;) {
        PTREAD_TRY(bool m, json.next(&key_scratch, &key));
        if (!m) break;
        if (key == "total_size" && json.peek() == JsonType::number) {
          PTREAD_TRY(std::string_view t, json.number_text());
          uint64_t v = 0;
          bool integer = !t.empty() && t.find_first_not_of("0123456789") == std::string_view::npos && t.size() <= 19;
          for (char c : t) v = v * 10 + static_cast<uint64_t>(c - '0');
          index.has_total = integer;  // (a float or negative total says nothing checkable)
          index.total_size = v;
        } else {
          PTREAD_CHECK(json.skip());
        }
      }
      continue;
    }
    if (key != "weight_map") {
      PTREAD_CHECK(json.skip());
      continue;
    }
    if (seen_map) return index_corrupt(where, "\"weight_map\" appears twice");
    seen_map = true;
    if (json.peek() != JsonType::object) {
      return index_corrupt(where, std::string("\"weight_map\" is ") + json_type_name(json.peek()) + ", not an object");
    }
    PTREAD_CHECK(json.begin_object());
    {  // sized for lines of 48 bytes or more (a name, a file name, quotes and indent)
      const size_t guess = std::min<size_t>(text.size() / 48, limits.max_tensors);
      index.weight_map.reserve(guess);
      index.names.reserve(text.size() / 2);
      index.by_name.reserve(guess, [&](uint32_t j) { return index.name(j); });
    }
    for (;;) {
      PTREAD_TRY(bool m, json.next(&key_scratch, &key));
      if (!m) break;
      if (index.weight_map.size() >= limits.max_tensors) {
        return make_error(ErrorCode::limit_exceeded, "sharded set index '" + where + "': over " +
                                                         std::to_string(limits.max_tensors) + " tensors (Limits::max_tensors)");
      }
      if (json.peek() != JsonType::string) {
        return index_corrupt(where, "the weight_map maps " + quote_json(key) + " to " + json_type_name(json.peek()) +
                                        ", not a file name");
      }
      PTREAD_CHECK(json.string_view(&value_scratch, &value));
      const auto k = static_cast<uint32_t>(index.weight_map.size());
      index.weight_map.push_back({static_cast<uint32_t>(index.names.size()), static_cast<uint32_t>(key.size()), 0});
      index.names.append(key.data(), key.size());
      if (index.by_name.insert(key, k, [&](uint32_t j) { return index.name(j); }) != k) {
        return index_corrupt(where, "the weight_map lists " + quote_json(key) + " twice");
      }
      // (Lines of one shard mostly follow each other: the last line's file is tried first.)
      const auto f = static_cast<uint32_t>(distinct.size());
      const uint32_t last = k == 0 ? StringIndex::npos : index.weight_map[k - 1].file;
      const uint32_t at = last != StringIndex::npos && distinct[last] == value
                              ? last
                              : files.insert(value, f, [&](uint32_t j) { return j == f ? value : std::string_view(distinct[j]); });
      if (at == f) {
        if (!shard_name_ok(value)) {
          return index_corrupt(where, "the weight_map puts " + quote_json(key) + " in " + quote_json(value) +
                                          ": a shard must be a relative path inside the index's folder");
        }
        distinct.emplace_back(value);
      }
      index.weight_map.back().file = at;
    }
  }
  PTREAD_CHECK(json.finish());
  if (!seen_map) return index_corrupt(where, "no \"weight_map\"");
  // Shards in file-name order (model-00001-of-00003 ... sort as numbered).
  std::vector<uint32_t> order(distinct.size()), rank(distinct.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return distinct[a] < distinct[b]; });
  for (uint32_t k = 0; k < order.size(); ++k) {
    rank[order[k]] = k;
    index.files.push_back(std::move(distinct[order[k]]));
  }
  for (auto& line : index.weight_map) line.file = rank[line.file];
  return index;
}

// Merges the shards' models, read already (shards[k]: index.files[k]), into one.
class ShardMerger {
 public:
  ShardMerger(const ShardIndex& index, std::string where, const Limits& limits)
      : index_(index), where_(std::move(where)), limits_(limits) {}

  Result<std::shared_ptr<Model>> merge(const std::vector<std::shared_ptr<Model>>& shards, uint64_t source_bytes) {
    out_ = std::make_shared<Model>();
    out_->format = Format::sharded;
    out_->shard_files = index_.files;
    const size_t n = index_.weight_map.size();
    found_.assign(n, kNoNode);
    out_->spec_shard.reserve(n);
    root_items_.reserve(2 * n);
    for (uint32_t s = 0; s < shards.size(); ++s) PTREAD_CHECK(add_shard(*shards[s], s));
    for (uint32_t k = 0; k < found_.size(); ++k) {
      if (found_[k] == kNoNode) {
        const auto& line = index_.weight_map[k];
        return mismatch("the weight_map puts tensor " + quote_json(index_.name(k)) + " in shard '" + index_.files[line.file] +
                        "', which does not hold it");
      }
    }
    PTREAD_CHECK(check_total(shards));
    Graph& g = out_->graph;
    out_->root = g.add_container(ValueKind::dict, root_items_.data(), root_items_.size());
    PTREAD_CHECK(name_tensors(*out_, limits_, source_bytes));
    out_->named_quantized = std::move(quantized_);  // (made already: no node of ours names them)
    out_->named_sparse = std::move(sparse_);
    return out_;
  }

 private:
  Error mismatch(const std::string& why) const {
    return make_error(ErrorCode::shard_mismatch, "sharded set '" + where_ + "': " + why);
  }

  // A name shard s holds: listed by the weight_map, for shard s, and once.
  Status claim(std::string_view name, uint32_t s) {
    const uint32_t k = index_.find(name);
    const std::string& file = index_.files[s];
    if (k == StringIndex::npos) {
      return mismatch("shard '" + file + "' holds tensor " + quote_json(name) + ", which the weight_map does not list");
    }
    if (found_[k] != kNoNode) {
      return mismatch("tensor " + quote_json(name) + " is in two shards, '" + index_.files[found_[k]] + "' and '" + file + "'");
    }
    const uint32_t want = index_.weight_map[k].file;
    if (want != s) {
      return mismatch("tensor " + quote_json(name) + " is in shard '" + file + "'; the weight_map puts it in '" +
                      index_.files[want] + "'");
    }
    found_[k] = s;
    return {};
  }

  Status add_shard(const Model& shard, uint32_t s) {
    Graph& g = out_->graph;
    g.add_globals_of(shard.graph);  // (what torch.load of the shard would import: audit())
    std::vector<uint32_t> storage_of(shard.storage_table.size(), kNoNode);  // shard storage -> ours
    std::vector<uint32_t> node_of(shard.specs.size(), kNoNode);            // shard spec -> our tensor node
    for (size_t k = 0; k < shard.listed_count(); ++k) {
      const auto& e = shard.listed[k];
      PTREAD_CHECK(claim(e.name_view(), s));
      if (node_of[e.spec] == kNoNode) {
        const TensorSpec& from = shard.specs[e.spec];
        TensorSpec t = from;
        t.dims = new_dims(g, from.rank);
        if (from.rank) std::memcpy(t.dims, from.dims, 2 * from.rank * sizeof(int64_t));
        if (from.location != kNoNode) t.location = g.add_text(ValueKind::string, shard.graph.text(from.location));
        if (storage_of[from.storage] == kNoNode) {
          storage_of[from.storage] = out_->storage_table.add(shard.storage_table.shared(from.storage));
        }
        t.storage = storage_of[from.storage];
        out_->specs.push_back(t);
        out_->spec_shard.push_back(s);
        node_of[e.spec] = g.emit_int(ValueKind::tensor, static_cast<uint32_t>(out_->specs.size() - 1), 0);
      }
      root_items_.push_back(g.add_text(ValueKind::string, e.name_view()));
      root_items_.push_back(node_of[e.spec]);
    }
    for (const auto& u : shard.named_unsupported) {
      PTREAD_CHECK(claim(u.name, s));
      out_->unsupported.push_back(u.reason);
      root_items_.push_back(g.add_text(ValueKind::string, u.name));
      root_items_.push_back(g.emit_int(ValueKind::unsupported, static_cast<uint32_t>(out_->unsupported.size() - 1), 0));
    }
    for (const auto& q : shard.named_quantized) {
      PTREAD_CHECK(claim(q.name, s));
      quantized_.push_back(q);
    }
    for (const auto& sp : shard.named_sparse) {
      PTREAD_CHECK(claim(sp.name, s));
      sparse_.push_back(sp);
    }
    return {};
  }

  // metadata.total_size: the tensors' bytes, each name counted, or their distinct storages'.
  Status check_total(const std::vector<std::shared_ptr<Model>>& shards) const {
    if (!index_.has_total) return {};
    uint64_t per_name = 0, per_storage = 0;
    for (const auto& m : shards) {
      for (size_t k = 0; k < m->listed_count(); ++k) {
        const TensorSpec& t = m->specs[m->listed[k].spec];
        per_name += static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
      }
      for (size_t k = 0; k < m->storage_table.size(); ++k) per_storage += m->storage_table.nbytes(k);
    }
    if (index_.total_size == per_name || index_.total_size == per_storage) return {};
    return mismatch("metadata.total_size is " + std::to_string(index_.total_size) + "; the shards' tensors hold " +
                    std::to_string(per_name) + " bytes (" + std::to_string(per_storage) + " in distinct storages)");
  }

  const ShardIndex& index_;
  std::string where_;
  Limits limits_;
  std::shared_ptr<Model> out_;
  std::vector<uint32_t> found_;       // per weight_map line: the shard that held it
  std::vector<uint32_t> root_items_;
  std::vector<NamedQuantized> quantized_;
  std::vector<NamedSparse> sparse_;
};

}  // namespace detail
}  // namespace ptread
