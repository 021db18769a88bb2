// ptread — the pickle's BUILD as Python and torch apply it: Python's default BUILD (an
// object's __dict__ and slots), what builtin values and classes refuse, several BUILDs of one
// object merged, and Tensor.__setstate__ (torch/_tensor.py) on tensors. Objects of a class
// with a handler of its own (numpy.ndarray, Parameter) go to it (globals.hpp).
#pragma once

#include "context.hpp"

#include <string>

namespace ptread {
namespace detail {

// BUILD on a builtin value (None, a number, str, bytes, list, tuple, set, dict): Python's
// unpickler finds no __setstate__ and sets the state's items through __dict__, which these
// have not, so only a state of None (and an empty slot-state dict) passes; an OrderedDict
// or Counter (kAttrsTag) has one.
inline Status check_builtin_build(Graph& g, ValueKind kind, uint8_t tag, uint32_t state) {
  switch (kind) {
    case ValueKind::none: case ValueKind::boolean: case ValueKind::integer: case ValueKind::big_integer:
    case ValueKind::floating: case ValueKind::string: case ValueKind::bytes: case ValueKind::list:
    case ValueKind::tuple: case ValueKind::set: case ValueKind::frozenset: case ValueKind::dict:
      break;
    default:
      return {};
  }
  uint32_t dict_state = kNoNode, slots = kNoNode;
  split_build_state(g, state, &dict_state, &slots);
  if (kind == ValueKind::dict && tag == kAttrsTag) {
    // An OrderedDict or Counter: no __setstate__, so Python's default BUILD, which wants
    // a dict (set in __dict__) or None, and slots as a dict of attribute names or none.
    const ValueKind dk = g.kind(dict_state);
    if (dk != ValueKind::none && dk != ValueKind::dict) {
      return make_error(ErrorCode::pickle_malformed, std::string("BUILD of an OrderedDict or Counter with a state that is a ") +
                                                         value_kind_name(dk) + " (Python's unpickler refuses it: state is not a dictionary)");
    }
    if (slots == kNoNode) return {};
    if (g.kind(slots) != ValueKind::dict) {
      return make_error(ErrorCode::pickle_malformed, std::string("BUILD of an OrderedDict or Counter with slots that are a ") +
                                                         value_kind_name(g.kind(slots)) + " (Python's unpickler refuses it: slot state is not a dictionary)");
    }
    if (!str_keys(g, slots)) {
      return make_error(ErrorCode::pickle_malformed,
                        "BUILD of an OrderedDict or Counter with a slot named by other than a str (Python's setattr() takes a str)");
    }
    return {};
  }
  if (g.kind(dict_state) == ValueKind::none &&
      (slots == kNoNode || (g.kind(slots) == ValueKind::dict && g.count(slots) == 0))) {
    return {};
  }
  return make_error(ErrorCode::pickle_malformed, std::string("BUILD of a ") + value_kind_name(kind) +
                                                     " with a state (Python's unpickler refuses it: a " +
                                                     value_kind_name(kind) + " has no attributes to set)");
}

// Python's default BUILD, of an object with no __setstate__ (`target`, for messages):
// (state, slots) when a pair; the state None or a dict (its items set in __dict__), the
// slots a dict (each set by setattr(), which takes a str name).
inline Error build_refused(const std::string& target, const std::string& what, const char* python) {
  return make_error(ErrorCode::pickle_malformed,
                    "BUILD of " + target + " with " + what + " (Python's unpickler refuses it: " + python + ")");
}
inline Status check_default_build(Graph& g, const std::string& target, uint32_t state) {
  uint32_t dict_state = kNoNode, slots = kNoNode;
  split_build_state(g, state, &dict_state, &slots);
  auto refused = [&](const std::string& what, const char* python) { return build_refused(target, what, python); };
  const ValueKind dk = g.kind(dict_state);
  if (dk != ValueKind::none && dk != ValueKind::dict) {
    return refused(std::string("a state that is a ") + value_kind_name(dk), "state is not a dictionary");
  }
  if (slots != kNoNode && g.kind(slots) != ValueKind::dict) {
    const ValueKind sk = g.kind(slots);
    return refused(sk == ValueKind::none ? std::string("slots that are None") : std::string("slots that are a ") + value_kind_name(sk),
                   "slot state is not a dictionary");
  }
  if (slots != kNoNode && !str_keys(g, slots)) {
    return refused("a slot named by other than a str", "setattr() takes a str");
  }
  return {};
}

// BUILD on a global: the class or function itself. A function has no __setstate__ (and
// a class's own would be called unbound, and fail): Python's default BUILD. A function
// written in C (_codecs.encode, numpy's _reconstruct and scalar) has no __dict__ at all:
// only a state of None and no slots to set pass. A global's build_global handler checks
// the rest (Parameter's class has Tensor's __setstate__, which no state passes).
inline Status check_global_build(TorchContext& cx, Graph& g, uint32_t glob, uint32_t state) {
  const std::string target = "the global '" + std::string(g.global_module(glob)) + "." + std::string(g.global_name(glob)) + "'";
  PTREAD_CHECK(check_default_build(g, target, state));
  const TorchGlobal* tg = cx.global(g, glob);
  if (tg == nullptr) return {};
  if (tg->kind == GlobalKind::c_function) {
    uint32_t dict_state = kNoNode, slots = kNoNode;
    split_build_state(g, state, &dict_state, &slots);
    if (g.kind(dict_state) == ValueKind::dict) return build_refused(target, "a state that is a dict", "a function written in C has no __dict__");
    if (slots != kNoNode && g.count(slots) != 0) {
      return build_refused(target, "slots to set", "a function written in C has no attributes to set");
    }
  }
  return tg->build_global != nullptr ? tg->build_global(cx, g, glob, state) : Status{};
}

// BUILD on one of the builtin classes ptread knows (set, frozenset, bytes, bytearray,
// OrderedDict, Counter, defaultdict, torch.Size; not the global of a function, whose attributes
// Python sets): no __setstate__, and its __dict__ a read-only mappingproxy, so Python's
// default BUILD fails unless the state sets nothing (None or {}, slots {}).
inline Status check_class_build(TorchContext& cx, Graph& g, uint32_t cls, uint32_t state) {
  const TorchGlobal* tg = cx.global(g, cls);
  if (tg == nullptr || tg->kind != GlobalKind::builtin_class) return {};
  uint32_t dict_state = kNoNode, slots = kNoNode;
  split_build_state(g, state, &dict_state, &slots);
  auto empty_dict = [&g](uint32_t x) { return g.kind(x) == ValueKind::dict && g.count(x) == 0; };
  // (Counter is a class written in Python: setattr() sets its attributes, named by strs)
  auto settable = [&](uint32_t x) {
    return g.global_name(cls) == "Counter" && g.kind(x) == ValueKind::dict ? str_keys(g, x) : empty_dict(x);
  };
  if ((g.kind(dict_state) == ValueKind::none || empty_dict(dict_state)) && (slots == kNoNode || settable(slots))) return {};
  return make_error(ErrorCode::pickle_malformed, "BUILD of the class '" + std::string(g.global_module(cls)) + "." +
                                                     std::string(g.global_name(cls)) +
                                                     "' with a state (Python's unpickler refuses it: a builtin class takes no attributes)");
}

// BUILD again on an object (crafted: the pickler writes one per object). Python's default
// BUILD (and nn.Module's __setstate__) updates the instance's __dict__ and sets its slots,
// so the attributes of both states hold, a later value replacing an earlier one (the dict
// made here is in g.hashed: the STOP's DictKeys pass keeps each name once). A state that
// is no attribute dict (a class's own __setstate__ reads it) replaces the one before.
// The dict a merge makes is the object's own (kMergedTag): later merges append to it, so
// N BUILDs copy each state's items once, not N^2 / 2 times. Python updates __dict__ key by
// key, N BUILDs of an M-key state N x M updates: here all merges of a file append at most
// 2^22 items (a state given again and again through the memo), beyond which E502.
inline Result<uint32_t> merged_state(TorchContext& cx, Graph& g, uint32_t before, uint32_t state) {
  if (g.kind(state) == ValueKind::none) return before;  // BUILD None sets nothing
  uint32_t a[2], sl[2];
  object_state(g, before, &a[0], &sl[0]);
  object_state(g, state, &a[1], &sl[1]);
  auto empty = [&g](uint32_t x) { return x == kNoNode || g.kind(x) == ValueKind::none; };
  for (const uint32_t x : {a[0], a[1]}) {
    if (!empty(x) && g.kind(x) != ValueKind::dict) return state;
  }
  auto concat = [&](const uint32_t* parts) -> Result<uint32_t> {
    if (empty(parts[0]) && empty(parts[1])) return kNoNode;
    const bool own = !empty(parts[0]) && g.nodes[parts[0]].tag == kMergedTag;
    size_t adding = 0;
    for (size_t k = own ? 1 : 0; k < 2; ++k) adding += empty(parts[k]) ? 0 : g.count(parts[k]);
    if (adding > cx.merge_budget) {
      return make_error(ErrorCode::limit_exceeded, "objects given BUILD again and again: the merged states passed 2^22 items in one file");
    }
    cx.merge_budget -= adding;
    uint32_t d = parts[0];
    if (!own) {
      d = g.add_container(ValueKind::dict);
      g.nodes[d].tag = kMergedTag;
    }
    for (size_t k = own ? 1 : 0; k < 2; ++k) {
      if (!empty(parts[k])) g.append(d, g.at(parts[k]).items.data(), g.at(parts[k]).items.size());
    }
    return d;
  };
  PTREAD_TRY(const uint32_t attrs, concat(a));
  PTREAD_TRY(const uint32_t slots, concat(sl));
  if (slots == kNoNode) return attrs == kNoNode ? state : attrs;
  const uint32_t pair[2] = {attrs == kNoNode ? kNoneNode : attrs, slots};
  return g.add_container(ValueKind::tuple, pair, 2);
}

// BUILD on a tensor: torch.load calls Tensor.__setstate__(state) (torch/_tensor.py, the
// same in torch 1.13 and 2.x; torch 0.1-0.4's whole models have one after each Parameter). 4
// items are Tensor.set_(*state), which points the tensor at other data: not applied here,
// so the file is refused (E406) rather than read with the data torch.load would not give.
// 5 items are a torch 0.3 Variable's (data, grad, backward_hooks, requires_grad, volatile):
// .data = state[0] (a tensor: this one becomes it, dtype and all; anything else torch
// refuses; a tensor ptread cannot read is not applied), then requires_grad = state[3].
// 3 items, of a tuple or list, are
// (requires_grad, _, backward_hooks): requires_grad a bool, true only for floating point
// and complex dtypes, then the tensor's (any hooks object passes). A state of another
// length, or with none (None, a number ...), or a str or bytes (whose items are no bool,
// no storage, no tensor), is refused by torch too (E402). A dict, set or frozenset of 3
// to 5 items is refused as not applied (E406): its order or length before its keys are
// deduplicated is not known here. A quantized, sparse or unsupported entry takes a
// requires_grad of false only (true: E406, not applied).
inline Status tensor_setstate(TorchContext& cx, Graph& g, uint32_t obj, uint32_t state) {
  const ValueKind kind = g.kind(obj), sk = g.kind(state);
  const std::string target = std::string("BUILD of a ") + (kind == ValueKind::unsupported ? "tensor ptread cannot read" : value_kind_name(kind));
  auto refused = [&](const std::string& why) {
    return make_error(ErrorCode::bad_tensor_args, target + " with " + why + " (torch refuses it)");
  };
  auto not_applied = [&](const std::string& what) {
    return make_error(ErrorCode::unsupported_tensor, target + " with " + what + ", which ptread does not apply");
  };
  size_t items = 0;
  switch (sk) {
    case ValueKind::tuple: case ValueKind::list:
      items = g.count(state);
      break;
    case ValueKind::dict: case ValueKind::set: case ValueKind::frozenset:
      return not_applied(std::string("a state that is a ") + value_kind_name(sk) + " (Tensor.__setstate__ takes its items)");
    case ValueKind::string: case ValueKind::bytes:
      return refused(std::string("a state that is a ") + value_kind_name(sk) + " (Tensor.__setstate__ takes no item of it)");
    default:
      return refused(std::string("a state that is a ") + value_kind_name(sk) + " (Tensor.__setstate__ takes a sequence)");
  }
  if (items == 4) return not_applied("a state of 4 items (Tensor.__setstate__ calls set_(*state): other data)");
  uint32_t data = kNoNode;  // 5 items: the tensor whose data this one takes
  if (items == 5) {
    data = g.at(state).items[0];
    const ValueKind dk = g.kind(data);
    if (kind != ValueKind::tensor || dk != ValueKind::tensor) {
      if (kind == ValueKind::tensor && dk != ValueKind::unsupported && dk != ValueKind::quantized && dk != ValueKind::sparse &&
          dk != ValueKind::object && dk != ValueKind::missing) {
        return refused(std::string("a state of 5 items whose data is a ") + value_kind_name(dk) +
                       " (Tensor.__setstate__ sets .data = state[0], a tensor)");
      }
      return not_applied("a state of 5 items (Tensor.__setstate__ sets .data = state[0]: other data)");
    }
  } else if (items != 3) {
    return refused("a state of " + std::to_string(items) + " items (Tensor.__setstate__ takes 3, 4 or 5)");
  }
  const uint32_t requires_grad = g.at(state).items[items == 5 ? 3 : 0];
  if (g.kind(requires_grad) != ValueKind::boolean) {
    return refused(std::string("requires_grad a ") + value_kind_name(g.kind(requires_grad)) + ", not a bool");
  }
  const bool on = g.at(requires_grad).i != 0;
  if (kind != ValueKind::tensor) {
    if (on) return not_applied("requires_grad set");
    return {};
  }
  const uint32_t from = g.nodes[data != kNoNode ? data : obj].ref;
  if (on && !dtype_is_differentiable(cx.model.specs[from].dtype)) {
    return refused(std::string("requires_grad on a ") + dtype_name(cx.model.specs[from].dtype) +
                   " tensor; only floating point and complex tensors can require gradients");
  }
  if (data != kNoNode) {  // this tensor takes state[0]'s data: a spec of its own (state[0] keeps its requires_grad)
    cx.model.specs.push_back(cx.model.specs[from]);
    g.set_leaf(obj, ValueKind::tensor, static_cast<uint32_t>(cx.model.specs.size() - 1));
  }
  cx.model.specs[g.nodes[obj].ref].requires_grad = on;
  return {};
}

// BUILD: obj.__setstate__(state) or obj.__dict__.update(state), as Python and torch do it.
inline Status torch_build(TorchContext& cx, Graph& g, uint32_t obj, uint32_t state) {
  Node& n = g.nodes[obj];
  PTREAD_CHECK(check_builtin_build(g, n.kind, n.tag, state));
  switch (n.kind) {
    case ValueKind::global:
      PTREAD_CHECK(check_global_build(cx, g, obj, state));
      PTREAD_CHECK(check_class_build(cx, g, obj, state));
      break;
    case ValueKind::tensor: case ValueKind::quantized: case ValueKind::sparse: case ValueKind::unsupported:
      return tensor_setstate(cx, g, obj, state);
    case ValueKind::storage:  // a TypedStorage: no __setstate__, a __dict__
      return check_default_build(g, "a storage", state);
    default:
      break;
  }
  if (n.kind == ValueKind::object) {
    const uint32_t before = n.items[kObjState];
    if (before == kNoNode) {
      n.items[kObjState] = state;
    } else {
      PTREAD_TRY(uint32_t merged, merged_state(cx, g, before, state));
      n.items[kObjState] = merged;
    }
    const uint32_t cls = n.items[kObjClass];
    if (g.kind(cls) == ValueKind::global) {
      const TorchGlobal* tg = cx.global(g, cls);
      if (tg != nullptr && tg->build_instance != nullptr) return tg->build_instance(cx, g, obj, state);
    }
  }
  // BUILD on an OrderedDict carries `_metadata` (module versions); on a tensor, Python
  // attributes. Neither changes tensor values or names.
  return {};
}

}  // namespace detail
}  // namespace ptread
