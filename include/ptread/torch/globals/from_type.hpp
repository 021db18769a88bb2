// ptread — torch/_tensor.py's _rebuild_from_type_v2(func, new_type, args, state), which
// torch.save writes for tensor subclasses (Parameter's __reduce_ex__ in torch 2.x too).
#pragma once

#include "../context.hpp"
#include "numpy.hpp"  // is_numpy_module

namespace ptread {
namespace detail {

// Whether a global names a function ptread evaluates (whose result is not an instance of
// it), not a class.
inline bool names_function(TorchContext& cx, Graph& g, uint32_t glob) {
  const TorchGlobal* tg = cx.global(g, glob);
  return tg != nullptr && is_function(tg->kind);
}
// Whether the class named by a global may be a subclass of torch.Tensor: false for those
// ptread knows are not.
inline bool maybe_tensor_subclass(TorchContext& cx, Graph& g, uint32_t glob) {
  const std::string_view mod = g.global_module(glob), name = g.global_name(glob);
  const TorchGlobal* tg = cx.global(g, glob);
  if (tg != nullptr && tg->kind == GlobalKind::tensor_class) return name == "Parameter";
  if (tg != nullptr && tg->kind != GlobalKind::plain_class) return false;  // functions, storage types, builtins, torch.Size ...
  if (mod == "torch") return false;  // torch.FloatTensor ... (legacy tensor types), dtypes, functions
  return !(mod == "builtins" || mod == "__builtin__" || mod == "collections" || mod == "_codecs" || mod == "copyreg" ||
           mod == "copy_reg" || mod == "torch._utils" || is_numpy_module(mod));
}

// _rebuild_from_type_v2's state: torch sets each item of its dict (and of its slots, a
// state (dict, slots)) on the tensor with setattr() (torch 2.x for every type; 1.13 for a
// subclass, such as Parameter, whose __setstate__ is Tensor's). An attribute of its own
// changes no value; `data`, `real` and `imag` give the tensor other data and
// `requires_grad` changes it (torch 1.13 ignores them on a plain Tensor, 2.x applies
// them): ptread applies none, so a state that sets one is refused (E406) rather than read
// with data torch.load would not give. torch.save writes the tensor's __dict__ there.
inline Status check_from_type_state(Graph& g, uint32_t state) {
  uint32_t parts[2] = {state, kNoNode};
  split_build_state(g, state, &parts[0], &parts[1]);
  for (const uint32_t d : parts) {
    if (d == kNoNode || g.kind(d) != ValueKind::dict) continue;
    const Items kv = g.at(d).items;
    for (size_t k = 0; k < kv.size(); k += 2) {
      if (g.kind(kv[k]) != ValueKind::string) continue;
      const std::string_view name = g.text(kv[k]);
      if (name == "data" || name == "real" || name == "imag" || name == "requires_grad") {
        return make_error(ErrorCode::unsupported_tensor, "_rebuild_from_type_v2 with a state that sets the tensor's '" +
                                                             std::string(name) +
                                                             "' (torch sets it with setattr()), which ptread does not apply");
      }
    }
  }
  return {};
}

// _rebuild_from_type_v2's state for a Parameter (whose __setstate__ is Tensor's) or an
// instance of a class with no __setstate__: torch (1.13 and 2.x) takes the state apart
// itself, and refuses a tuple of other than two items (RuntimeError "Invalid serialized
// state"), a dict state without items() and slots that are true without items()
// (AttributeError), and an attribute named by other than a str (setattr()). (A plain
// Tensor's state torch 1.13 ignores; another class's __setstate__ is its own: neither is
// checked here. Objects of classes ptread does not know may have items(): taken as having
// them.)
inline Status check_setattr_state_shape(Graph& g, uint32_t new_type, uint32_t state) {
  const std::string type_name = std::string(g.global_module(new_type)) + "." + std::string(g.global_name(new_type));
  auto refused = [&type_name](const std::string& what, const char* why) {
    return make_error(ErrorCode::bad_tensor_args, "_rebuild_from_type_v2 of a " + type_name + " with " + what +
                                                      " (torch refuses it: " + why + ")");
  };
  auto mapping = [&g](uint32_t v) { return g.kind(v) == ValueKind::dict || g.kind(v) == ValueKind::object; };
  uint32_t dict_state = state, slots = kNoNode;
  if (g.kind(state) == ValueKind::tuple) {
    if (g.count(state) != 2) {
      return refused("a state tuple of " + std::to_string(g.count(state)) + " items", "Invalid serialized state");
    }
    dict_state = g.at(state).items[0];
    slots = g.at(state).items[1];
  }
  if (!mapping(dict_state)) {
    const ValueKind k = g.kind(dict_state);
    return refused(k == ValueKind::none ? std::string("the state None") : std::string("a state that is a ") + value_kind_name(k),
                   "it has no items()");
  }
  if (slots != kNoNode && python_truthy(g, slots) && !mapping(slots)) {
    return refused(std::string("slots that are a ") + value_kind_name(g.kind(slots)), "they have no items()");
  }
  for (const uint32_t d : {dict_state, slots}) {
    if (d != kNoNode && g.kind(d) == ValueKind::dict && !str_keys(g, d)) {
      return refused("an attribute named by other than a str", "setattr() takes a str");
    }
  }
  return {};
}

// _rebuild_from_type_v2(func, new_type, args, state): func(*args), made an instance of
// new_type by Tensor.as_subclass unless new_type is torch.Tensor itself (torch 1.13 then
// hands out func's result as it is) or the class func is (its result has the type
// already). as_subclass takes only a subclass of Tensor, and is a method of tensors only:
// a new_type ptread knows not to be one (a builtin, a collections or numpy class,
// torch.Size, a storage or legacy tensor type, a function, torch.autograd.Variable,
// anything but a class), or a result that is no tensor, torch refuses. Other classes (a
// user's Tensor subclass) are taken as subclasses: the tensor reads as the Tensor it is.
inline Result<uint32_t> from_type(TorchContext& cx, Graph& g, uint32_t func, uint32_t new_type, uint32_t args, uint32_t state) {
  const ValueKind tk = g.kind(new_type);
  bool is_tensor_type = false;
  if (tk == ValueKind::global) {
    const std::string_view mod = g.global_module(new_type), name = g.global_name(new_type);
    const bool plain = name == "Tensor" && (mod == "torch" || mod == "torch._tensor");
    const bool made_by_it = g.kind(func) == ValueKind::global && g.global_module(func) == mod &&
                            g.global_name(func) == name && !names_function(cx, g, func);
    is_tensor_type = plain || made_by_it;
    // Parameter's __setstate__ is Tensor's, and the classes ptread knows (made_by_it: a
    // builtin or collections class) have none: torch sets the state's items itself.
    if ((!plain && made_by_it) || (mod == "torch.nn.parameter" && name == "Parameter")) {
      PTREAD_CHECK(check_setattr_state_shape(g, new_type, state));
    }
    if (!is_tensor_type && !maybe_tensor_subclass(cx, g, new_type)) {
      return make_error(ErrorCode::bad_tensor_args, "_rebuild_from_type_v2 of '" + std::string(mod) + "." + std::string(name) +
                                                        "', which is not a subclass of torch.Tensor (torch refuses it in as_subclass)");
    }
  } else if (tk != ValueKind::object && tk != ValueKind::missing) {
    return make_error(ErrorCode::bad_tensor_args, std::string("_rebuild_from_type_v2 of a type that is a ") + value_kind_name(tk) +
                                                      " (torch refuses it: as_subclass takes a class)");
  }
  PTREAD_TRY(const uint32_t made, cx.call(g, func, args));
  if (is_tensor_type) return made;
  switch (g.kind(made)) {
    case ValueKind::tensor: case ValueKind::quantized: case ValueKind::sparse:
    case ValueKind::object: case ValueKind::unsupported: case ValueKind::missing:
      return made;
    default:
      return make_error(ErrorCode::bad_tensor_args, std::string("_rebuild_from_type_v2 whose function made a ") +
                                                        value_kind_name(g.kind(made)) +
                                                        ", not a tensor (torch refuses it: as_subclass is a method of tensors)");
  }
}

inline bool is_rebuild_from_type_v2(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._tensor" && name == "_rebuild_from_type_v2";
}
inline Result<uint32_t> rebuild_from_type_v2_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  const Items& a = c.a;
  if (a.size() != 4 || g.kind(a[2]) != ValueKind::tuple) {
    return make_error(ErrorCode::bad_tensor_args,
                      "_rebuild_from_type_v2 takes (func, type, args, state), args a tuple (torch refuses anything else)");
  }
  PTREAD_CHECK(check_from_type_state(g, a[3]));
  return from_type(cx, g, a[0], a[1], a[2], a[3]);
}

}  // namespace detail
}  // namespace ptread
