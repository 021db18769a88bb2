// ptread — torch's meaning of the globals in a checkpoint pickle.
//
// torch.save pickles each tensor as a call to a rebuild function (torch/_utils.py) whose
// first argument is a persistent id naming a storage:
//   _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
//                      backward_hooks[, metadata])        dtype from the storage class
//   _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
//                      torch >= 2.1 for fp8, uint16/32/64, complex32; UntypedStorage
//   _rebuild_tensor(storage, offset, size, stride)      before 0.4
//   _rebuild_parameter(data, requires_grad, hooks), _rebuild_parameter_with_state(..., state)
//   torch._tensor._rebuild_from_type_v2(func, new_type, args, state) = func(*args)
// Persistent id: ('storage', <storage class>, key, location, numel[, view_metadata]);
// numel counts elements of the class's dtype (bytes for UntypedStorage). The class is
// matched by name in any module (torch.FloatStorage, torch.cuda.HalfStorage, LibTorch's
// Float8_e4m3fnStorage ...). `metadata` holds the conj/neg bits, applied when values are
// materialized. The location ("cuda:1", "mps", "xla:0") is kept as Tensor::device() and
// never stops a load.
//
// Also interpreted: collections.OrderedDict, builtins.set/frozenset, torch.Size,
// _codecs.encode (protocol-2 bytes), bytearray, copyreg._reconstructor. Everything else
// becomes an inert object node. Rebuild functions for tensors ptread cannot hand out
// (quantized, sparse, nested, meta, wrapper subclasses) become "unsupported" entries.
#pragma once

#include "model.hpp"

#include <functional>
#include <unordered_map>

namespace ptread {
namespace detail {

// Loads the bytes of storage `key` holding at least `nbytes` bytes.
using StorageLoader = std::function<Result<std::shared_ptr<const Storage>>(const std::string& key, uint64_t nbytes, DType dtype)>;

class TorchHooks final : public PickleHooks {
 public:
  TorchHooks(Model& m, StorageLoader loader, const Limits& limits)
      : m_(m), loader_(std::move(loader)), limits_(limits) {}

  Result<uint32_t> persistent_load(Graph& g, uint32_t pid) override {
    const Node& n = g.at(pid);
    if (n.kind != ValueKind::tuple || n.items.empty()) {
      return make_error(ErrorCode::bad_tensor_args, "persistent id is not a tuple");
    }
    const std::vector<uint32_t> it = n.items;
    PTREAD_TRY(std::string tag, text_of(g, it[0], "persistent id tag"));
    if (tag == "module" && it.size() >= 2) return it[1];  // legacy full-model files
    if (tag != "storage" || (it.size() != 5 && it.size() != 6)) {
      return make_error(ErrorCode::bad_tensor_args,
                        "unknown persistent id ('" + tag + "' with " + std::to_string(it.size()) +
                            " items); expected ('storage', class, key, location, numel[, view])");
    }
    std::string cls;
    if (g.kind(it[1]) == ValueKind::global) {
      cls = g.global_name(it[1]);
    } else {
      PTREAD_TRY(cls, text_of(g, it[1], "storage class"));
    }
    DType dtype;
    if (!dtype_from_storage_class(cls, &dtype)) {
      std::string full = g.kind(it[1]) == ValueKind::global ? g.global_module(it[1]) + "." + cls : cls;
      return make_error(ErrorCode::unknown_storage_class, "unknown storage class '" + full + "'");
    }
    std::string key;
    if (g.kind(it[2]) == ValueKind::integer) {
      key = std::to_string(g.at(it[2]).i);
    } else {
      PTREAD_TRY(key, text_of(g, it[2], "storage key"));
    }
    PTREAD_TRY(std::string location, text_of(g, it[3], "storage location"));
    if (g.kind(it[4]) != ValueKind::integer || g.at(it[4]).i < 0) {
      return make_error(ErrorCode::bad_tensor_args, "storage '" + key + "' has no valid element count");
    }
    const uint64_t numel = static_cast<uint64_t>(g.at(it[4]).i);
    uint64_t nbytes;
    if (mul_overflow(numel, dtype_size(dtype), &nbytes)) {
      return make_error(ErrorCode::shape_overflow, "storage '" + key + "' byte size overflows");
    }
    if (it.size() == 6 && g.kind(it[5]) != ValueKind::none) {
      return make_error(ErrorCode::bad_tensor_args,
                        "storage '" + key + "' has view metadata, which only legacy files use");
    }
    std::shared_ptr<const Storage> st;
    auto found = cache_.find(key);
    if (found != cache_.end()) {
      st = found->second;
      if (st->nbytes() < nbytes) {
        return make_error(ErrorCode::storage_too_small,
                          "storage '" + key + "' is referenced with " + std::to_string(nbytes) +
                              " bytes but was first referenced with " + std::to_string(st->nbytes()));
      }
    } else {
      PTREAD_TRY(st, loader_(key, nbytes, dtype));
      cache_.emplace(key, st);
    }
    m_.storages.push_back(StorageRef{std::move(st), dtype, std::move(location)});
    Node s;
    s.kind = ValueKind::storage;
    s.ref = static_cast<uint32_t>(m_.storages.size() - 1);
    return g.add(std::move(s));
  }

  Result<uint32_t> call(Graph& g, uint32_t callable, uint32_t args) override {
    if (g.kind(callable) != ValueKind::global) return g.add_object(callable, args);
    const std::string& mod = g.global_module(callable);
    const std::string& name = g.global_name(callable);
    const std::vector<uint32_t>& a = g.at(args).items;
    if (mod == "torch._utils") {
      if (name == "_rebuild_tensor_v2") return rebuild(g, a, RebuildKind::v2);
      if (name == "_rebuild_tensor_v3") return rebuild(g, a, RebuildKind::v3);
      if (name == "_rebuild_tensor") return rebuild(g, a, RebuildKind::v1);
      if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state") {
        return parameter(g, a);
      }
      if (name == "_rebuild_device_tensor_from_cpu_tensor" && !a.empty() &&
          g.kind(a[0]) == ValueKind::tensor) {
        return a[0];
      }
      if (const char* why = unsupported_rebuild(name)) {
        return unsupported(g, std::string(why) + " (torch._utils." + name + ") is not supported");
      }
    }
    if (mod == "torch._tensor" && name == "_rebuild_from_type_v2") {
      if (a.size() < 3 || g.kind(a[2]) != ValueKind::tuple) {
        return make_error(ErrorCode::bad_tensor_args, "_rebuild_from_type_v2 needs (func, type, args, state)");
      }
      return call(g, a[0], a[2]);
    }
    if (mod == "collections" && (name == "OrderedDict" || name == "defaultdict" || name == "Counter")) {
      uint32_t d = g.add_container(ValueKind::dict);
      // OrderedDict([(k, v), ...]) from protocol 0/1 files
      if (name == "OrderedDict" && !a.empty() && g.kind(a[0]) == ValueKind::list) {
        for (uint32_t pair : std::vector<uint32_t>(g.at(a[0]).items)) {
          const Node& pn = g.at(pair);
          if ((pn.kind != ValueKind::tuple && pn.kind != ValueKind::list) || pn.items.size() != 2) {
            return make_error(ErrorCode::pickle_malformed, "OrderedDict item is not a pair");
          }
          const uint32_t k = pn.items[0], v = pn.items[1];
          g.nodes[d].items.push_back(k);
          g.nodes[d].items.push_back(v);
        }
      }
      return d;
    }
    if ((mod == "builtins" || mod == "__builtin__") && (name == "set" || name == "frozenset")) {
      std::vector<uint32_t> items;
      if (!a.empty() && (g.kind(a[0]) == ValueKind::list || g.kind(a[0]) == ValueKind::tuple)) items = g.at(a[0]).items;
      return g.add_container(name == "set" ? ValueKind::set : ValueKind::frozenset, std::move(items));
    }
    if ((mod == "builtins" || mod == "__builtin__") && name == "bytes" && a.empty()) {
      return g.add_text(ValueKind::bytes, "");  // protocols 0-2 pickle b'' as bytes()
    }
    if ((mod == "builtins" || mod == "__builtin__") && name == "bytearray") {
      if (a.empty()) return g.add_text(ValueKind::bytes, "");
      if (g.kind(a[0]) == ValueKind::bytes) return g.add_text(ValueKind::bytes, g.text(a[0]));
    }
    if (mod == "torch" && name == "Size" && a.size() == 1 && g.kind(a[0]) == ValueKind::tuple) {
      return g.add_container(ValueKind::tuple, g.at(a[0]).items);
    }
    if (mod == "_codecs" && name == "encode" && !a.empty() && g.kind(a[0]) == ValueKind::string) {
      // protocol 2 writes bytes as _codecs.encode(latin-1 text, 'latin1')
      PTREAD_TRY(std::string raw, utf8_to_latin1(g.text(a[0])));
      return g.add_text(ValueKind::bytes, std::move(raw));
    }
    if (is_numpy_module(mod) && name == "_reconstruct" && !a.empty()) {
      // numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b'), then BUILD
      return g.add_object(a[0], args);
    }
    if (is_numpy_module(mod) && name == "scalar" && a.size() == 2) return numpy_scalar(g, callable, args, a);
    if ((mod == "copyreg" || mod == "copy_reg") && name == "_reconstructor" && !a.empty()) {
      return g.add_object(a[0], g.add_container(ValueKind::tuple));
    }
    return g.add_object(callable, args);
  }

  Status build(Graph& g, uint32_t obj, uint32_t state) override {
    Node& n = g.nodes[obj];
    if (n.kind == ValueKind::object) {
      n.items[kObjState] = state;
      const uint32_t cls = n.items[kObjClass];
      if (is_numpy(g, cls, "ndarray")) return numpy_array(g, obj, state);
    }
    // BUILD on an OrderedDict carries `_metadata` (module versions); on a tensor, Python
    // attributes. Neither changes tensor values or names.
    return {};
  }

 private:
  enum class RebuildKind { v1, v2, v3 };

  static Result<std::string> text_of(const Graph& g, uint32_t i, const char* what) {
    if (g.kind(i) == ValueKind::string || g.kind(i) == ValueKind::bytes) return g.text(i);
    return make_error(ErrorCode::bad_tensor_args, std::string(what) + " is a " + value_kind_name(g.kind(i)) + ", not a string");
  }

  static Result<std::string> utf8_to_latin1(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
      const auto c = static_cast<uint8_t>(s[k]);
      if (c < 0x80) {
        out.push_back(static_cast<char>(c));
      } else if ((c & 0xe0) == 0xc0 && k + 1 < s.size() && c <= 0xc3) {
        out.push_back(static_cast<char>(((c & 0x1f) << 6) | (static_cast<uint8_t>(s[k + 1]) & 0x3f)));
        ++k;
      } else {
        return make_error(ErrorCode::pickle_malformed, "_codecs.encode text is not latin-1");
      }
    }
    return out;
  }

  static const char* unsupported_rebuild(const std::string& name) {
    if (name == "_rebuild_qtensor") return "quantized tensor";
    if (name == "_rebuild_sparse_tensor" || name == "_rebuild_sparse_csr_tensor") return "sparse tensor";
    if (name == "_rebuild_nested_tensor") return "nested tensor";
    if (name == "_rebuild_meta_tensor_no_storage") return "meta tensor without data";
    if (name == "_rebuild_wrapper_subclass") return "wrapper-subclass tensor without data";
    if (name == "_rebuild_device_tensor_from_numpy" || name == "_rebuild_xla_tensor") return "device tensor from numpy";
    if (name == "_rebuild_device_tensor_from_cpu_tensor") return "device tensor";
    return nullptr;
  }

  // ---- numpy (numpy.core.multiarray before numpy 2, numpy._core.multiarray since) ----
  static bool is_numpy_module(const std::string& mod) {
    return mod == "numpy.core.multiarray" || mod == "numpy._core.multiarray";
  }
  static bool is_numpy(const Graph& g, uint32_t cls, const char* name) {
    return g.kind(cls) == ValueKind::global && g.global_module(cls) == "numpy" && g.global_name(cls) == name;
  }

  // A numpy.dtype object: numpy.dtype('f8', False, True) with BUILD state (3, '<', ...).
  struct NumpyType {
    DType dtype;
    bool big_endian;
  };
  static Result<NumpyType> numpy_dtype(const Graph& g, uint32_t d) {
    const Node& n = g.at(d);
    if (n.kind != ValueKind::object || !is_numpy(g, n.items[kObjClass], "dtype")) {
      return make_error(ErrorCode::bad_tensor_args, "numpy data without a numpy.dtype");
    }
    const auto& args = g.at(n.items[kObjArgs]).items;
    if (args.empty() || g.kind(args[0]) != ValueKind::string) {
      return make_error(ErrorCode::bad_tensor_args, "numpy.dtype without a type code");
    }
    static const struct { const char* code; DType t; } codes[] = {
        {"b1", DType::BOOL}, {"u1", DType::U8}, {"i1", DType::I8}, {"i2", DType::I16},
        {"u2", DType::U16}, {"i4", DType::I32}, {"u4", DType::U32}, {"i8", DType::I64},
        {"u8", DType::U64}, {"f2", DType::F16}, {"f4", DType::F32}, {"f8", DType::F64},
        {"c8", DType::C64}, {"c16", DType::C128}};
    const std::string& code = g.text(args[0]);
    NumpyType out{DType::U8, false};
    bool known = false;
    for (const auto& c : codes) {
      if (code == c.code) {
        out.dtype = c.t;
        known = true;
      }
    }
    if (!known) return make_error(ErrorCode::unknown_dtype, "numpy dtype '" + code + "' has no tensor equivalent");
    const uint32_t st = n.items[kObjState];
    if (st != kNoNode && g.kind(st) == ValueKind::tuple && g.at(st).items.size() > 1) {
      const uint32_t order = g.at(st).items[1];
      out.big_endian = g.is_string(order, ">");
    }
    return out;
  }

  static Result<std::shared_ptr<const Storage>> owned_copy(const std::string& bytes, size_t swap_unit) {
    PTREAD_TRY(auto buf, allocate_aligned(bytes.size()));
    if (!bytes.empty()) std::memcpy(buf.get(), bytes.data(), bytes.size());
    if (swap_unit > 1) {
      for (size_t k = 0; k + swap_unit <= bytes.size(); k += swap_unit) {
        std::reverse(buf.get() + k, buf.get() + k + swap_unit);
      }
    }
    const uint8_t* p = buf.get();
    return std::make_shared<const Storage>(p, bytes.size(), std::move(buf));
  }

  // ndarray BUILD state: (version, shape, dtype, is_fortran, raw bytes). The object node
  // becomes a tensor node in place, so every reference to it sees the tensor.
  Status numpy_array(Graph& g, uint32_t obj, uint32_t state) {
    const Node& s = g.at(state);
    if (s.kind != ValueKind::tuple || s.items.size() != 5) return {};
    const auto it = s.items;
    if (g.kind(it[4]) != ValueKind::bytes && g.kind(it[4]) != ValueKind::string) {
      const uint32_t u = unsupported(g, "numpy array of Python objects");
      g.nodes[obj] = g.at(u);
      return {};
    }
    PTREAD_TRY(NumpyType nt, numpy_dtype(g, it[2]));
    PTREAD_TRY(auto shape, int_tuple(g, it[1], "numpy shape"));
    std::vector<int64_t> strides = Tensor::contiguous_strides(shape);
    if (g.kind(it[3]) == ValueKind::boolean && g.at(it[3]).i != 0) {  // Fortran order
      int64_t acc = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        strides[d] = acc;
        acc *= shape[d] > 0 ? shape[d] : 1;
      }
    }
    std::string raw = g.text(it[4]);
    if (g.kind(it[4]) == ValueKind::string) {  // protocol 2 from Python 2: latin-1 text
      PTREAD_TRY(raw, utf8_to_latin1(raw));
    }
    PTREAD_TRY(auto storage, owned_copy(raw, nt.big_endian ? dtype_swap_unit(nt.dtype) : 1));
    PTREAD_TRY(Tensor t, Tensor::view(std::move(storage), nt.dtype, std::move(shape), std::move(strides), 0));
    m_.tensors.push_back(std::move(t));
    Node& n = g.nodes[obj];
    n.kind = ValueKind::tensor;
    n.ref = static_cast<uint32_t>(m_.tensors.size() - 1);
    n.items.clear();
    return {};
  }

  // numpy.core.multiarray.scalar(dtype, raw bytes): a plain int, float or bool value.
  Result<uint32_t> numpy_scalar(Graph& g, uint32_t callable, uint32_t args, const std::vector<uint32_t>& a) {
    auto nt = numpy_dtype(g, a[0]);
    if (!nt || (g.kind(a[1]) != ValueKind::bytes && g.kind(a[1]) != ValueKind::string)) return g.add_object(callable, args);
    std::string raw = g.text(a[1]);
    if (g.kind(a[1]) == ValueKind::string) {
      PTREAD_TRY(raw, utf8_to_latin1(raw));
    }
    const DType t = nt->dtype;
    if (raw.size() != dtype_size(t) || dtype_is_complex(t)) return g.add_object(callable, args);
    if (nt->big_endian) std::reverse(raw.begin(), raw.end());
    const Scalar v = load_scalar(reinterpret_cast<const uint8_t*>(raw.data()), t);
    if (t == DType::BOOL) return v.i ? kTrueNode : kFalseNode;
    if (v.kind == Scalar::kFloat) return g.add_float(v.f);
    if (v.kind == Scalar::kUInt) {
      if (v.u > static_cast<uint64_t>(INT64_MAX)) return g.add_object(callable, args);
      return g.add_int(static_cast<int64_t>(v.u));
    }
    return g.add_int(v.i);
  }

  uint32_t unsupported(Graph& g, std::string reason) {
    m_.unsupported.push_back(std::move(reason));
    Node n;
    n.kind = ValueKind::unsupported;
    n.ref = static_cast<uint32_t>(m_.unsupported.size() - 1);
    return g.add(std::move(n));
  }

  Result<std::vector<int64_t>> int_tuple(const Graph& g, uint32_t i, const char* what) const {
    const Node& n = g.at(i);
    if (n.kind != ValueKind::tuple && n.kind != ValueKind::list) {
      return make_error(ErrorCode::bad_tensor_args, std::string(what) + " is a " + value_kind_name(n.kind) + ", not a tuple");
    }
    if (n.items.size() > limits_.max_rank) {
      return make_error(ErrorCode::limit_exceeded, std::string(what) + " has " + std::to_string(n.items.size()) +
                                                       " dimensions (Limits::max_rank)");
    }
    std::vector<int64_t> out;
    out.reserve(n.items.size());
    for (uint32_t e : n.items) {
      if (g.kind(e) != ValueKind::integer) {
        return make_error(ErrorCode::bad_tensor_args, std::string(what) + " holds a " + value_kind_name(g.kind(e)));
      }
      out.push_back(g.at(e).i);
    }
    return out;
  }

  Result<uint32_t> rebuild(Graph& g, const std::vector<uint32_t>& a, RebuildKind kind) {
    const size_t min_args = kind == RebuildKind::v1 ? 4 : kind == RebuildKind::v2 ? 6 : 7;
    if (a.size() < min_args || g.kind(a[0]) != ValueKind::storage || g.kind(a[1]) != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args,
                        "tensor rebuild arguments are malformed (" + std::to_string(a.size()) +
                            " arguments, first is a " + value_kind_name(g.kind(a.empty() ? 0 : a[0])) + ")");
    }
    const StorageRef& sref = m_.storages[g.at(a[0]).ref];
    DType dtype = sref.dtype;
    size_t meta_index = 6;
    if (kind == RebuildKind::v3) {
      const uint32_t d = a[6];
      if (g.kind(d) != ValueKind::global) return make_error(ErrorCode::bad_tensor_args, "_rebuild_tensor_v3 dtype is not a global");
      if (g.global_module(d) != "torch" || !dtype_from_torch_name(g.global_name(d), &dtype)) {
        return make_error(ErrorCode::unknown_dtype, "unknown dtype '" + g.global_module(d) + "." + g.global_name(d) + "'");
      }
      meta_index = 7;
    }
    PTREAD_TRY(auto shape, int_tuple(g, a[2], "size"));
    PTREAD_TRY(auto strides, int_tuple(g, a[3], "stride"));
    PTREAD_TRY(Tensor t, Tensor::view(sref.storage, dtype, std::move(shape), std::move(strides), g.at(a[1]).i, sref.location));
    if (kind != RebuildKind::v1) t.set_requires_grad(g.kind(a[4]) == ValueKind::boolean && g.at(a[4]).i != 0);
    if (a.size() > meta_index && g.kind(a[meta_index]) == ValueKind::dict) {
      const uint32_t md = a[meta_index];
      auto flag = [&](const char* k) {
        uint32_t v = g.dict_get(md, k);
        return v != kNoNode && g.kind(v) == ValueKind::boolean && g.at(v).i != 0;
      };
      t.set_math_bits(flag("conj"), flag("neg"));
    }
    m_.tensors.push_back(std::move(t));
    Node n;
    n.kind = ValueKind::tensor;
    n.ref = static_cast<uint32_t>(m_.tensors.size() - 1);
    return g.add(std::move(n));
  }

  Result<uint32_t> parameter(Graph& g, const std::vector<uint32_t>& a) {
    if (a.empty()) return make_error(ErrorCode::bad_tensor_args, "_rebuild_parameter without data");
    if (g.kind(a[0]) == ValueKind::tensor) {
      m_.tensors[g.at(a[0]).ref].set_requires_grad(a.size() > 1 && g.kind(a[1]) == ValueKind::boolean && g.at(a[1]).i != 0);
    }
    return a[0];  // a Parameter is its data tensor (or an unsupported entry)
  }

  Model& m_;
  StorageLoader loader_;
  const Limits& limits_;
  std::unordered_map<std::string, std::shared_ptr<const Storage>> cache_;
};

}  // namespace detail
}  // namespace ptread
