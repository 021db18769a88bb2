// ptread — safetensors files (huggingface/safetensors, safetensors/src/tensor.rs).
//
//   bytes 0..8     N, the header's length: unsigned 64-bit little-endian
//   bytes 8..8+N   the header: UTF-8 JSON, one object:
//                    "__metadata__": null or {str: str}           (optional)
//                    "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                  often padded with spaces so that the data starts on 8 bytes
//   bytes 8+N..    the data: each tensor's elements, C order, little-endian, at
//                  [begin, end) relative to byte 8+N
//
// Checked as the reference reader checks (read_metadata, Metadata::validate): N at most
// 100,000,000 and inside the file; the header UTF-8 and JSON (text/json.hpp); the tensors,
// sorted by offsets, cover the data exactly (each begins where the one before ends, the
// first at 0, the last ends at the file's end); end - begin = the shape's element count x
// the dtype's bits / 8, whole bytes. Stricter than the reference: no name twice, in any
// object (serde keeps the last); a dimension must fit int64 (torch's sizes do).
//
// dtypes: all the format defines. F4 is torch's float4_e2m1fn_x2 with the last dimension
// halved, as the safetensors torch binding makes it (an odd last dimension: an unsupported
// entry, as there); F6_E2M3 and F6_E3M2 have no torch dtype: unsupported entries.
//
// The tensors are listed in the header's order, under their names as stored; root() is a
// dict of the header: the names, and "__metadata__" (a dict of strings, or None) where the
// header has it. mmap and memory modes: tensors are views of the file where the data suits
// their dtype's alignment (copied where not); read mode reads the data in one buffer.
#pragma once

#include "../text/json.hpp"
#include "../torch/naming.hpp"
#include "../torch/python.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ptread {
namespace detail {

// A name for a message: JSON-quoted, at most 200 bytes of it.
inline std::string quote_json(std::string_view s) {
  std::string out;
  append_json_string(out, s.substr(0, 200));
  return out;
}

inline constexpr uint64_t kSafetensorsMaxHeader = 100000000;  // MAX_HEADER_SIZE of the reference

// A safetensors dtype: ptread's dtype (when torch has one) and the bits of one element.
struct SafetensorsDType {
  std::string_view name;
  DType dtype;
  unsigned bits;
  bool torch_has;  // false: no torch dtype (F6_*); listed as unsupported
};

inline const SafetensorsDType* safetensors_dtype_of(std::string_view name) noexcept {
  static constexpr SafetensorsDType table[] = {
      {"BOOL", DType::BOOL, 8, true},         {"U8", DType::U8, 8, true},
      {"I8", DType::I8, 8, true},             {"I16", DType::I16, 16, true},
      {"U16", DType::U16, 16, true},          {"I32", DType::I32, 32, true},
      {"U32", DType::U32, 32, true},          {"I64", DType::I64, 64, true},
      {"U64", DType::U64, 64, true},          {"F16", DType::F16, 16, true},
      {"BF16", DType::BF16, 16, true},        {"F32", DType::F32, 32, true},
      {"F64", DType::F64, 64, true},          {"C64", DType::C64, 64, true},
      {"F8_E4M3", DType::F8_E4M3, 8, true},   {"F8_E5M2", DType::F8_E5M2, 8, true},
      {"F8_E4M3FNUZ", DType::F8_E4M3FNUZ, 8, true}, {"F8_E5M2FNUZ", DType::F8_E5M2FNUZ, 8, true},
      {"F8_E8M0", DType::F8_E8M0, 8, true},   {"F4", DType::F4_E2M1FN_X2, 4, true},
      {"F6_E2M3", DType::U8, 6, false},       {"F6_E3M2", DType::U8, 6, false},
  };
  for (const auto& d : table) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

class SafetensorsReader {
 public:
  SafetensorsReader(std::shared_ptr<const Source> src, const ReadOptions& opt) : src_(std::move(src)), opt_(opt) {}

  Result<std::shared_ptr<Model>> read() {
    model_ = std::make_shared<Model>();
    model_->format = Format::safetensors;
    PTREAD_TRY(std::string_view header, read_header());
    PTREAD_CHECK(parse(header));
    PTREAD_CHECK(check_offsets());
    PTREAD_CHECK(make_tensors());
    PTREAD_CHECK(realign_storages(*model_));
    PTREAD_CHECK(name_tensors(*model_, opt_.limits, src_->size()));
    return model_;
  }

 private:
  struct Entry {
    uint32_t key = 0;         // the name's text node
    const SafetensorsDType* dtype = nullptr;
    int64_t* dims = nullptr;  // rank sizes, then rank strides (graph arena)
    uint32_t rank = 0;
    uint64_t begin = 0, end = 0;
    uint64_t nbits = 0;
  };

  Error corrupt(const std::string& why) const {
    return make_error(ErrorCode::safetensors_corrupt, "safetensors: " + why);
  }
  std::string tensor_label(const Entry& e) const { return "tensor " + quote_json(model_->graph.text(e.key)); }

  Result<std::string_view> read_header() {
    if (src_->size() < 8) {
      return corrupt("the file is " + std::to_string(src_->size()) + " bytes, too short for the 8-byte header length");
    }
    uint8_t head[8];
    PTREAD_CHECK(src_->read_at(0, head, 8));
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = (n << 8) | head[k];
    if (n > kSafetensorsMaxHeader) {
      return corrupt("the header length " + std::to_string(n) + " is over 100,000,000 bytes (the reference reader's bound)");
    }
    if (n > src_->size() - 8) {
      return corrupt("the header length " + std::to_string(n) + " runs past the end of the file (" +
                     std::to_string(src_->size()) + " bytes)");
    }
    header_bytes_ = n;
    PTREAD_TRY(header_buf_, src_->bytes(8, n));
    const std::string_view text(reinterpret_cast<const char*>(header_buf_.data), header_buf_.size);
    if (!utf8_valid(text)) return corrupt("the header is not valid UTF-8");
    return text;
  }

  // The header's object: entries_ in header order, root_items_ the root dict's items.
  Status parse(std::string_view text) {
    Graph& g = model_->graph;
    JsonReader json(text, "safetensors header of '" + src_->name() + "'", ErrorCode::safetensors_corrupt);
    PTREAD_CHECK(json.begin_object());
    // Room for as many tensors as the header could hold (an entry takes 50 bytes or more):
    // growing these tables, the name index above all, took a third of the time of a header
    // of 100,000 tensors.
    const size_t room = std::min<size_t>(text.size() / 64, opt_.limits.max_tensors);
    entries_.reserve(room);
    root_items_.reserve(2 * room + 2);
    names_.reserve(room, [this](uint32_t j) { return model_->graph.text(entries_[j].key); });
    std::string scratch;
    std::string_view key;
    bool seen_metadata = false;
    for (;;) {
      PTREAD_TRY(bool more, json.next(&scratch, &key));
      if (!more) break;
      if (key == "__metadata__") {
        if (seen_metadata) return corrupt("\"__metadata__\" appears twice in the header");
        seen_metadata = true;
        root_items_.push_back(g.add_text(ValueKind::string, key));
        PTREAD_TRY(uint32_t md, parse_metadata(json));
        root_items_.push_back(md);
        continue;
      }
      if (entries_.size() >= opt_.limits.max_tensors) {
        return make_error(ErrorCode::limit_exceeded, "safetensors: the header lists over " +
                                                         std::to_string(opt_.limits.max_tensors) +
                                                         " tensors (Limits::max_tensors)");
      }
      entries_.emplace_back();
      Entry& e = entries_.back();
      e.key = g.add_text(ValueKind::string, key);
      const auto k = static_cast<uint32_t>(entries_.size() - 1);
      if (names_.insert(g.text(e.key), k, [this](uint32_t j) { return model_->graph.text(entries_[j].key); }) != k) return corrupt("the header names " + tensor_label(e) + " twice");
      PTREAD_CHECK(parse_tensor(json, &e));
      root_items_.push_back(e.key);
      root_items_.push_back(kNoNode);  // the tensor's node, once made
    }
    return json.finish();
  }

  Result<uint32_t> parse_metadata(JsonReader& json) {
    Graph& g = model_->graph;
    if (json.peek() == JsonType::null) {
      PTREAD_CHECK(json.null());
      return kNoneNode;
    }
    if (json.peek() != JsonType::object) {
      return corrupt(std::string("\"__metadata__\" is ") + json_type_name(json.peek()) + ", not an object of strings");
    }
    PTREAD_CHECK(json.begin_object());
    std::vector<uint32_t> items;
    StringIndex keys;
    auto key_at = [&](uint32_t k) { return g.text(items[2 * k]); };
    std::string key, value;
    for (;;) {
      PTREAD_TRY(bool more, json.next_member(&key));
      if (!more) break;
      if (items.size() / 2 >= opt_.limits.max_container_items) {
        return make_error(ErrorCode::limit_exceeded, "safetensors: \"__metadata__\" holds over " +
                                                         std::to_string(opt_.limits.max_container_items) +
                                                         " entries (Limits::max_container_items)");
      }
      items.push_back(g.add_text(ValueKind::string, key));
      const auto k = static_cast<uint32_t>(items.size() / 2);
      if (keys.insert(g.text(items.back()), k, key_at) != k) {
        return corrupt("\"__metadata__\" holds the key " + quote_json(key) + " twice");
      }
      if (json.peek() != JsonType::string) {
        return corrupt("\"__metadata__\" maps " + quote_json(key) + " to " + json_type_name(json.peek()) +
                       ": its values must be strings");
      }
      PTREAD_CHECK(json.string(&value));
      items.push_back(g.add_text(ValueKind::string, value));
    }
    return g.add_container(ValueKind::dict, items.data(), items.size());
  }

  Status parse_tensor(JsonReader& json, Entry* e) {
    if (json.peek() != JsonType::object) {
      return corrupt(tensor_label(*e) + " is " + json_type_name(json.peek()) +
                     ", not an object of dtype, shape and data_offsets");
    }
    PTREAD_CHECK(json.begin_object());
    bool has_dtype = false, has_shape = false, has_offsets = false;
    std::string_view field, text;
    std::vector<uint64_t>& shape = shape_;
    shape.clear();
    for (;;) {
      PTREAD_TRY(bool more, json.next(&field_scratch_, &field));
      if (!more) break;
      bool* seen = field.size() == 5 && std::memcmp(field.data(), "dtype", 5) == 0   ? &has_dtype
                   : field.size() == 5 && std::memcmp(field.data(), "shape", 5) == 0 ? &has_shape
                   : field == std::string_view("data_offsets")                       ? &has_offsets
                                                                                     : nullptr;
      if (seen == nullptr) {  // serde ignores fields it does not know
        PTREAD_CHECK(json.skip());
        continue;
      }
      if (*seen) return corrupt(tensor_label(*e) + " has \"" + std::string(field) + "\" twice");
      *seen = true;
      if (seen == &has_dtype) {
        if (json.peek() != JsonType::string) return corrupt(tensor_label(*e) + ": \"dtype\" is " + json_type_name(json.peek()));
        PTREAD_CHECK(json.string_view(&text_scratch_, &text));
        e->dtype = safetensors_dtype_of(text);
        if (e->dtype == nullptr) {
          return make_error(ErrorCode::unknown_dtype, "safetensors: " + tensor_label(*e) + " has the dtype " + quote_json(text) +
                                                          ", which the format does not define");
        }
      } else if (seen == &has_shape) {
        PTREAD_CHECK(json.begin_array());
        for (;;) {
          PTREAD_TRY(bool item, json.next_item());
          if (!item) break;
          if (shape.size() >= opt_.limits.max_rank) {
            return make_error(ErrorCode::limit_exceeded, "safetensors: " + tensor_label(*e) + " has over " +
                                                             std::to_string(opt_.limits.max_rank) + " dimensions (Limits::max_rank)");
          }
          PTREAD_TRY(uint64_t d, json.unsigned_integer());
          shape.push_back(d);
        }
      } else {
        PTREAD_CHECK(json.begin_array());
        uint64_t v[2];
        size_t count = 0;
        for (;;) {
          PTREAD_TRY(bool item, json.next_item());
          if (!item) break;
          if (count == 2) return corrupt(tensor_label(*e) + ": \"data_offsets\" holds more than two numbers");
          PTREAD_TRY(v[count], json.unsigned_integer());
          ++count;
        }
        if (count != 2) return corrupt(tensor_label(*e) + ": \"data_offsets\" holds " + std::to_string(count) + " numbers, not two");
        e->begin = v[0];
        e->end = v[1];
      }
    }
    if (!has_dtype || !has_shape || !has_offsets) {
      return corrupt(tensor_label(*e) + " lacks \"" + (!has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets") + "\"");
    }
    // The element count and bits as the reference counts them (in 64 bits), before any
    // dimension becomes an int64.
    uint64_t numel = 1;
    for (uint64_t d : shape) {
      if (mul_overflow(numel, d, &numel)) return make_error(ErrorCode::shape_overflow, "safetensors: " + tensor_label(*e) + ": the shape's element count overflows 64 bits");
    }
    if (mul_overflow(numel, e->dtype->bits, &e->nbits)) {
      return make_error(ErrorCode::shape_overflow, "safetensors: " + tensor_label(*e) + ": the shape's bit count overflows 64 bits");
    }
    e->rank = static_cast<uint32_t>(shape.size());
    e->dims = new_dims(model_->graph, shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] > static_cast<uint64_t>(INT64_MAX)) {
        return make_error(ErrorCode::shape_overflow, "safetensors: " + tensor_label(*e) + ": dimension " + std::to_string(d) +
                                                         " (" + std::to_string(shape[d]) + ") is over 2^63 - 1, more than torch's sizes hold");
      }
      e->dims[d] = static_cast<int64_t>(shape[d]);
    }
    return {};
  }

  // Sorted by offsets, the tensors tile the data exactly (Metadata::validate), and the data
  // ends at the file's end.
  Status check_offsets() {
    std::vector<uint32_t> order(entries_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<uint32_t>(k);
    auto before = [&](uint32_t a, uint32_t b) {
      return entries_[a].begin != entries_[b].begin ? entries_[a].begin < entries_[b].begin : entries_[a].end < entries_[b].end;
    };
    if (!std::is_sorted(order.begin(), order.end(), before)) std::sort(order.begin(), order.end(), before);  // (writers mostly list them in order)
    uint64_t at = 0;
    for (uint32_t k : order) {
      const Entry& e = entries_[k];
      if (e.begin != at || e.end < e.begin) {
        return corrupt(tensor_label(e) + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                       "]; sorted by offsets, the tensors must follow each other from 0 without gap or overlap (here " +
                       (e.end < e.begin ? "it ends before it begins" : "the one before ends at " + std::to_string(at)) + ")");
      }
      if (e.nbits % 8 != 0) {
        return corrupt(tensor_label(e) + " of dtype " + std::string(e.dtype->name) + " holds " + std::to_string(e.nbits) + " bits, not whole bytes");
      }
      if (e.end - e.begin != e.nbits / 8) {
        return corrupt(tensor_label(e) + ": its shape and dtype " + std::string(e.dtype->name) + " make " + std::to_string(e.nbits / 8) +
                       " bytes, its data_offsets " + std::to_string(e.end - e.begin));
      }
      at = e.end;
    }
    data_start_ = 8 + header_bytes_;
    if (at != src_->size() - data_start_) {
      return corrupt("the tensors' data ends at byte " + std::to_string(data_start_ + at) + " of the file, which is " +
                     std::to_string(src_->size()) + " bytes (the format requires they agree)");
    }
    return {};
  }

  Status make_tensors() {
    Model& m = *model_;
    Graph& g = m.graph;
    // The data: the mapping itself, or (read mode) one buffer read from the file.
    const uint8_t* data = nullptr;
    const uint64_t data_bytes = src_->size() - data_start_;
    if (src_->base() != nullptr && opt_.mode != LoadMode::read) {
      data = src_->base() + data_start_;
      m.storage_table.set_source(src_);
    } else {
      PTREAD_TRY(auto buf, allocate_aligned(static_cast<size_t>(data_bytes)));
      PTREAD_CHECK(run_fill_jobs(*src_, {FillJob{data_start_, buf.get(), static_cast<size_t>(data_bytes)}}, opt_.threads));
      data = buf.get();
      m.storage_table.set_source(std::shared_ptr<const void>(std::move(buf)));
    }
    size_t item = 0;
    for (const Entry& e : entries_) {
      while (root_items_[item + 1] != kNoNode) item += 2;  // past "__metadata__"
      root_items_[item + 1] = make_tensor(e, data);
      item += 2;
    }
    m.root = g.add_container(ValueKind::dict, root_items_.data(), root_items_.size());
    return {};
  }

  uint32_t make_tensor(const Entry& e, const uint8_t* data) {
    Model& m = *model_;
    Graph& g = m.graph;
    if (!e.dtype->torch_has) {
      m.unsupported.push_back("safetensors dtype " + std::string(e.dtype->name) + " (6-bit floats): torch has no such dtype");
      return g.emit_int(ValueKind::unsupported, static_cast<uint32_t>(m.unsupported.size() - 1), 0);
    }
    if (e.dtype->dtype == DType::F4_E2M1FN_X2) {
      // torch's float4_e2m1fn_x2 holds two values a byte: the last dimension halves.
      if (e.rank == 0 || e.dims[e.rank - 1] % 2 != 0) {
        m.unsupported.push_back("safetensors dtype F4 with an odd last dimension: torch's float4_e2m1fn_x2 packs two values a byte");
        return g.emit_int(ValueKind::unsupported, static_cast<uint32_t>(m.unsupported.size() - 1), 0);
      }
      e.dims[e.rank - 1] /= 2;
    }
    static_cast<void>(contiguous_strides(e.dims, e.rank));  // (no overflow: numel * bits fit 64 bits)
    TensorSpec t;
    t.dims = e.dims;
    t.rank = e.rank;
    t.dtype = e.dtype->dtype;
    t.storage = m.storage_table.add_view(data + e.begin, e.end - e.begin);
    m.specs.push_back(t);
    return g.emit_int(ValueKind::tensor, static_cast<uint32_t>(m.specs.size() - 1), 0);
  }

  std::shared_ptr<const Source> src_;
  ReadOptions opt_;
  std::shared_ptr<Model> model_;
  Bytes header_buf_;
  uint64_t header_bytes_ = 0, data_start_ = 0;
  std::vector<Entry> entries_;
  std::vector<uint32_t> root_items_;  // key, value, ... (a tensor's value: kNoNode until made)
  StringIndex names_;
  std::vector<uint64_t> shape_;  // parse_tensor's, reused
  std::string field_scratch_, text_scratch_;
};

inline Result<std::shared_ptr<Model>> read_safetensors_checkpoint(std::shared_ptr<const Source> src, const ReadOptions& opt) {
  return SafetensorsReader(std::move(src), opt).read();
}

}  // namespace detail
}  // namespace ptread
