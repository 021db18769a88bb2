// ptread (the tool) — `ptread tree`: the object tree with its metadata.
#pragma once

#include "output.hpp"

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace ptread_cli {

// The items of an object that subclasses list or dict (pickled with APPENDS/SETITEMS).
// Value::list_items()/dict_items() are used when the library has them, else nothing shows.
template <class V>
auto list_items_of(const V& v, int) -> decltype(v.list_items()) { return v.list_items(); }
template <class V>
V list_items_of(const V&, long) { return V(); }
template <class V>
auto dict_items_of(const V& v, int) -> decltype(v.dict_items()) { return v.dict_items(); }
template <class V>
V dict_items_of(const V&, long) { return V(); }

class TreePrinter {
 public:
  std::string run(const ptread::Value& root) {
    const ptread::ValueKind k = root.kind();
    if (k == ptread::ValueKind::dict || is_sequence(k)) {
      // The root container's entries start at the left margin.
      if (root.size() == 0 || inline_sequence(root, nullptr)) {
        entry(0, "", root, "", 0);
      } else {
        on_path_.insert(root.id());
        shown_.emplace(root.id(), "<root>");
        children(root, 0, "", 0);
      }
    } else {
      entry(0, "", root, "", 0);
    }
    return std::move(out_);
  }

 private:
  static constexpr size_t kMaxDepth = 64;
  static constexpr size_t kMaxItems = 32;
  static constexpr size_t kInlineWidth = 100;
  static constexpr size_t kMaxScalarRepr = 200;

  static bool is_sequence(ptread::ValueKind k) {
    using K = ptread::ValueKind;
    return k == K::list || k == K::tuple || k == K::set || k == K::frozenset;
  }
  static bool is_scalar(ptread::ValueKind k) {
    using K = ptread::ValueKind;
    return k == K::none || k == K::boolean || k == K::integer || k == K::big_integer || k == K::floating ||
           k == K::string || k == K::bytes || k == K::global;
  }
  static bool is_container(ptread::ValueKind k) {
    return k == ptread::ValueKind::dict || k == ptread::ValueKind::object || is_sequence(k);
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // repr() of a scalar, cut when very long (a pickled vocabulary, a long text).
  static std::string scalar_repr(const ptread::Value& v) {
    std::string s = v.repr();
    if (s.size() <= kMaxScalarRepr) return s;
    size_t cut = kMaxScalarRepr;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
    const size_t full = s.size();
    s.resize(cut);
    s += "... (" + std::to_string(full) + " characters)";
    return s;
  }

  // A dict key as Python's str() prints it, on one line.
  static std::string key_text(const ptread::Value& k) {
    if (auto s = k.as_string()) return display(*s);
    return display(k.repr());
  }

  // A list/tuple/set of scalars on one line: "[0.9, 0.999]", "[1, 2, 3, ...] (500 items)".
  // Returns false (and writes nothing) when an item is not a scalar.
  static bool inline_sequence(const ptread::Value& v, std::string* out) {
    using K = ptread::ValueKind;
    const K k = v.kind();
    if (!is_sequence(k)) return false;
    const size_t n = v.size();
    for (size_t i = 0; i < n; ++i) {  // all of them: a tensor past the shown head must not hide
      if (!is_scalar(v[i].kind())) return false;
    }
    if (out == nullptr) return true;
    if (n == 0) {
      *out = k == K::list ? "[]" : k == K::tuple ? "()" : k == K::set ? "set()" : "frozenset()";
      return true;
    }
    std::string s = k == K::list ? "[" : k == K::tuple ? "(" : k == K::set ? "{" : "frozenset({";
    size_t shown = 0;
    for (; shown < n; ++shown) {
      if (shown > 0 && s.size() > kInlineWidth) break;
      if (shown) s += ", ";
      s += scalar_repr(v[shown]);
    }
    if (shown < n) s += ", ...";
    if (k == K::tuple && n == 1) s += ",";
    s += k == K::list ? "]" : k == K::tuple ? ")" : k == K::set ? "}" : "})";
    if (shown < n) s += " (" + std::to_string(n) + " items)";
    *out = std::move(s);
    return true;
  }

  static std::string count(size_t n) { return std::to_string(n) + (n == 1 ? " item" : " items"); }

  // The state of an object as a dict (the dict half of a (dict, slots) state), or missing.
  static ptread::Value state_dict_of(const ptread::Value& obj, ptread::Value* slots) {
    ptread::Value st = obj.state();
    if (st.is_tuple() && st.size() == 2 && (st[0].is_dict() || st[0].is_none()) && st[1].is_dict()) {
      *slots = st[1];
      return st[0];
    }
    return st;
  }

  static bool is_module_state(const ptread::Value& d) {
    return d.is_dict() && (d["_parameters"].is_dict() || d["_modules"].is_dict());
  }

  void indent(size_t n) { out_.append(n, ' '); }

  // One "label: value" line, and the value's children below it when it is a container.
  void entry(size_t ind, const std::string& label, const ptread::Value& v, const std::string& path, size_t depth) {
    using K = ptread::ValueKind;
    indent(ind);
    out_ += label;
    const K k = v.kind();
    if (k == K::tensor) {
      out_ += tensor_label(*v.as_tensor().value());
      out_ += '\n';
      return;
    }
    if (k == K::unsupported) {
      out_ += "<unsupported: " + display(v.unsupported_reason()) + ">\n";
      return;
    }
    if (k == K::storage) {  // a storage saved on its own: its dtype, size and device
      const auto st = v.as_storage();
      out_ += st ? "storage " + display(tensor_label(*st)) + "\n" : "<storage: " + display(st.error().message()) + ">\n";
      return;
    }
    if (k == K::quantized) {
      const auto q = v.as_quantized();
      std::string shape;
      if (q) append_dims(shape, q->shape);
      out_ += q ? std::string(ptread::dtype_name(q->dtype)) + shape + " quantized " + ptread::qscheme_name(q->qscheme) + "\n"
                : std::string("<quantized>\n");
      return;
    }
    if (k == K::sparse) {
      const auto sp = v.as_sparse();
      std::string shape;
      if (sp) append_dims(shape, sp->shape);
      out_ += sp ? std::string(ptread::dtype_name(sp->dtype())) + shape + " sparse " + ptread::sparse_layout_name(sp->layout) + "\n"
                 : std::string("<sparse>\n");
      return;
    }
    if (!is_container(k)) {
      out_ += display(is_scalar(k) ? scalar_repr(v) : v.repr());
      out_ += '\n';
      return;
    }
    std::string inline_text;
    if (k == K::dict && v.size() == 0) {
      out_ += "{}\n";
      return;
    }
    if (inline_sequence(v, &inline_text)) {
      out_ += display(inline_text);
      out_ += '\n';
      return;
    }
    std::string header;
    if (k == K::object) {
      header = "<" + object_label(v) + ">";
      if (!has_members(v)) {  // everything is in the label: torch.device('cuda', 0), enums
        out_ += header;
        out_ += '\n';
        return;
      }
    } else {
      header = std::string(ptread::value_kind_name(k)) + " (" + count(v.size()) + ")";
    }
    out_ += header;
    if (on_path_.count(v.id())) {
      out_ += " <cycle>\n";
      return;
    }
    auto seen = shown_.find(v.id());
    if (seen != shown_.end()) {
      out_ += " (shown above at " + display(seen->second) + ")\n";
      return;
    }
    if (depth >= kMaxDepth) {
      out_ += " <nested too deep>\n";
      return;
    }
    out_ += '\n';
    shown_.emplace(v.id(), path);
    on_path_.insert(v.id());
    children(v, ind + 2, path, depth + 1);
    on_path_.erase(v.id());
  }

  // "module.Class", with short scalar constructor arguments: "torch.device('cuda', 0)".
  static std::string object_label(const ptread::Value& obj) {
    std::string name = obj.class_name();
    if (name.empty()) name = "object";
    const ptread::Value args = obj.args();
    if (obj.state().is_missing() && args.is_tuple() && args.size() > 0) {
      std::string text;
      if (inline_sequence(args, &text) && text.size() <= kInlineWidth) {
        if (args.size() == 1 && text.size() >= 2 && text[text.size() - 2] == ',') text.erase(text.size() - 2, 1);
        return name + text;
      }
    }
    return name;
  }

  // Whether an object has anything to show below its label.
  static bool has_members(const ptread::Value& obj) {
    ptread::Value slots;
    const ptread::Value st = state_dict_of(obj, &slots);
    if (st.is_dict() ? st.size() > 0 : !st.is_missing() && !st.is_none()) return true;
    if (slots.size() > 0 || list_items_of(obj, 0).size() > 0 || dict_items_of(obj, 0).size() > 0) return true;
    return obj.args().size() > 0 && object_label(obj) == obj.class_name();
  }

  // TorchScript modules keep every attribute in their state; these two say nothing.
  static bool torchscript_noise(const ptread::Value& obj, std::string_view key, const ptread::Value& val) {
    if (obj.class_name().compare(0, 10, "__torch__.") != 0) return false;
    return key == "training" || (key == "_is_full_backward_hook" && val.is_none());
  }

  void children(const ptread::Value& v, size_t ind, const std::string& path, size_t depth) {
    using K = ptread::ValueKind;
    const K k = v.kind();
    if (k == K::dict) {
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string key = key_text(v.key(i));
        entry(ind, key + ": ", v.value(i), join(path, key), depth);
      }
      return;
    }
    if (is_sequence(k)) {
      const size_t n = v.size();
      for (size_t i = 0; i < n && i < kMaxItems; ++i) {
        entry(ind, "[" + std::to_string(i) + "]: ", v[i], join(path, std::to_string(i)), depth);
      }
      if (n > kMaxItems) {
        indent(ind);
        out_ += "... (" + std::to_string(n - kMaxItems) + " more)\n";
      }
      return;
    }
    // An object.
    ptread::Value slots;
    const ptread::Value st = state_dict_of(v, &slots);
    if (is_module_state(st)) {
      module_children(st, ind, path, depth);
    } else if (st.is_dict()) {
      for (size_t i = 0; i < st.size(); ++i) {
        const ptread::Value key = st.key(i), val = st.value(i);
        auto name = key.as_string();
        if (name && torchscript_noise(v, *name, val)) continue;
        const std::string text = key_text(key);
        entry(ind, text + ": ", val, join(path, text), depth);
      }
    } else if (!st.is_missing() && !st.is_none()) {
      entry(ind, "state: ", st, path, depth);
    } else if (v.args().size() > 0 && object_label(v) == v.class_name()) {
      entry(ind, "args: ", v.args(), path, depth);
    }
    if (slots.is_dict()) children(slots, ind, path, depth);
    const ptread::Value list_items = list_items_of(v, 0), dict_items = dict_items_of(v, 0);
    if (list_items.size() > 0) children(list_items, ind, path, depth);
    if (dict_items.size() > 0) children(dict_items, ind, path, depth);
  }

  // An nn.Module: parameters, buffers (as state_dict() names them), its public attributes
  // (hyperparameters such as in_features), then submodules; torch's hook tables and other
  // private fields are left out.
  void module_children(const ptread::Value& st, size_t ind, const std::string& path, size_t depth) {
    const ptread::Value non_persistent = st["_non_persistent_buffers_set"];
    auto is_non_persistent = [&](const ptread::Value& key) {
      auto name = key.as_string();
      if (!name) return false;
      for (size_t i = 0; i < non_persistent.size(); ++i) {
        auto e = non_persistent[i].as_string();
        if (e && *e == *name) return true;
      }
      return false;
    };
    auto members = [&](const char* field, bool buffers) {
      const ptread::Value d = st[field];
      for (size_t i = 0; i < d.size(); ++i) {
        const ptread::Value val = d.value(i);
        if (val.is_none()) continue;
        const std::string key = key_text(d.key(i));
        const bool hidden = buffers && is_non_persistent(d.key(i));
        entry(ind, key + (hidden ? " (non-persistent): " : ": "), val, join(path, key), depth);
      }
    };
    members("_parameters", false);
    members("_buffers", true);
    for (size_t i = 0; i < st.size(); ++i) {
      const ptread::Value key = st.key(i);
      auto name = key.as_string();
      if (name && (name->empty() || (*name)[0] == '_' || *name == "training")) continue;
      const std::string text = key_text(key);
      entry(ind, text + ": ", st.value(i), join(path, text), depth);
    }
    members("_modules", false);
  }

  std::string out_;
  std::unordered_set<uint32_t> on_path_;
  std::unordered_map<uint32_t, std::string> shown_;
};

}  // namespace ptread_cli
