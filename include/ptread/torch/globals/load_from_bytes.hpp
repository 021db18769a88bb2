// ptread — torch.storage._load_from_bytes(b): a storage pickled by Python's pickle rather
// than by torch.save. Mirrors torch/storage.py (1.13): TypedStorage.__reduce__ returns
// (_load_from_bytes, (b,)), b a whole legacy torch.save file of the storage alone, and
// _load_from_bytes(b) is torch.load(io.BytesIO(b)). pickle.dump of a tensor, a state dict or
// a whole model writes one per storage; torch.save files hold them where an object pickled
// by pickle sits inside one.
//
// b is read as torch.load reads a file (zip, legacy or tar; ReadOptions::nested_reader, from
// containers/nested.hpp), without a copy where the graph borrowed it from a mapped file
// (Graph::borrow_bytes), and nested at most Limits::max_archive_nesting deep. Its object
// must be a storage (what TypedStorage.__reduce__ writes): it joins this model's storage
// table; an archive holding anything else is an unsupported entry naming it. A bytes node
// is read once however often the memo hands it to the call.
#pragma once

#include "../context.hpp"

#include <string>

namespace ptread {
namespace detail {

inline bool is_load_from_bytes(std::string_view mod, std::string_view name, bool /*py2*/) {
  return mod == "torch.storage" && name == "_load_from_bytes";
}

inline Result<uint32_t> load_from_bytes_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  if (c.a.size() != 1 || g.kind(c.a[0]) != ValueKind::bytes) {
    return make_error(ErrorCode::bad_tensor_args, "torch.storage._load_from_bytes(b) called with " +
                                                      std::to_string(c.a.size()) + " argument(s)" +
                                                      (c.a.size() == 1 ? std::string(", a ") + value_kind_name(g.kind(c.a[0])) : "") +
                                                      "; b must be the bytes of an archive");
  }
  const uint32_t b = c.a[0];
  const auto done = cx.nested_done.find(b);
  if (done != cx.nested_done.end()) return done->second;
  if (cx.nested == nullptr || cx.nested->nested_reader == nullptr) {
    return make_error(ErrorCode::unsupported_format, "torch.storage._load_from_bytes: no reader of nested archives here");
  }
  const std::string_view bytes = g.text(b);
  const std::shared_ptr<const void> keep = g.borrowed(bytes) ? cx.nested->pickle_keep : nullptr;
  auto inner = cx.nested->nested_reader(bytes, keep, *cx.nested);
  if (!inner) {
    Error e = std::move(inner).error();
    e.add_context("(the archive of " + std::to_string(bytes.size()) + " bytes torch.storage._load_from_bytes reads)");
    return e;
  }
  const Model& m = **inner;
  g.add_globals_of(m.graph);  // (what torch.load of the archive would import: audit())
  uint32_t node;
  if (m.graph.kind(m.root) == ValueKind::storage) {
    const Node& root = m.graph.nodes[m.root];
    const auto dtype = static_cast<uint8_t>(root.i & 0xff);
    const auto inner_location = static_cast<uint32_t>(static_cast<uint64_t>(root.i) >> 8);
    const uint32_t location = g.add_text(ValueKind::string, m.graph.text(inner_location));
    const uint32_t index = cx.model.storage_table.add(m.storage_table.shared(root.ref));
    node = g.emit_int(ValueKind::storage, index, static_cast<int64_t>((uint64_t{location} << 8) | dtype));
  } else {
    node = cx.unsupported(g, std::string("a nested archive (torch.storage._load_from_bytes) holding a ") +
                                 value_kind_name(m.graph.kind(m.root)) + ", not a storage");
  }
  cx.nested_done.emplace(b, node);
  return node;
}

}  // namespace detail
}  // namespace ptread
