// ptread — Parameters and Variables: torch/_utils.py's _rebuild_parameter and
// _rebuild_parameter_with_state (torch.save since 0.4), and the classes
// torch.nn.parameter.Parameter and torch.autograd.variable.Variable as torch 0.1-0.3 pickled
// them (REDUCE of the class, or NEWOBJ with the state (data, ...)). A Parameter is its data
// tensor, with requires_grad set.
#pragma once

#include "../context.hpp"
#include "../build.hpp"

#include <string>

namespace ptread {
namespace detail {

// Parameter(None): torch.empty(0), an F32 tensor of shape [0] over no bytes.
inline Result<uint32_t> empty_parameter(TorchContext& cx, Graph& g, bool requires_grad) {
  PTREAD_TRY(auto storage, owned_copy(std::string_view(), 1));
  int64_t* dims = new_dims(g, 1);
  dims[0] = 0;  // size
  dims[1] = 1;  // stride
  TensorSpec spec;
  spec.dims = dims;
  spec.rank = 1;
  spec.requires_grad = requires_grad;
  spec.storage = cx.model.storage_table.add(std::move(storage));  // found by no key
  cx.model.specs.push_back(spec);
  return g.emit_int(ValueKind::tensor, static_cast<uint32_t>(cx.model.specs.size() - 1), 0);
}

// How a call of the family takes requires_grad (its second argument).
enum class ParameterArgs {
  rebuild,    // _rebuild_parameter(data, requires_grad, hooks[, state]): a bool
  parameter,  // Parameter.__new__(cls, data=None, requires_grad=True): a bool, true when left out
  variable,   // torch 0.3's Variable(data[, requires_grad ...]): true only when given true
};

// _rebuild_parameter(data, requires_grad, backward_hooks) and _with_state(..., state),
// torch 0.1-0.4's Parameter(data[, requires_grad]) and Variable(data, ...): Parameter(data)
// takes a tensor (Tensor._make_subclass) or None (torch.empty(0)); anything else is
// refused, as Python refuses it. requires_grad as `how` says, checked as torch checks it (a
// bool, and true only for floating point and complex dtypes).
inline Result<uint32_t> parameter(TorchContext& cx, Graph& g, const Items& a, size_t min_args, size_t max_args,
                                  ParameterArgs how) {
  const ValueKind data = a.empty() ? ValueKind::none : g.kind(a[0]);
  if (a.size() < min_args || a.size() > max_args ||
      (data != ValueKind::tensor && data != ValueKind::unsupported && data != ValueKind::quantized &&
       data != ValueKind::sparse && data != ValueKind::none)) {
    return make_error(ErrorCode::bad_tensor_args,
                      "Parameter rebuild arguments are malformed (" + std::to_string(a.size()) + " arguments" +
                          (a.empty() ? std::string() : std::string(", data is a ") + value_kind_name(data)) + ")");
  }
  const DType dt = data == ValueKind::tensor ? cx.model.specs[g.at(a[0]).ref].dtype
                   : data == ValueKind::none ? DType::F32
                                             : DType::U8;  // quantized, sparse ...: checked as no float
  bool requires_grad = false;
  if (how != ParameterArgs::variable) {  // Parameter(data, requires_grad)
    PTREAD_TRY(requires_grad, requires_grad_arg(g, a.size() > 1 ? a[1] : kTrueNode, dt, "Parameter"));
  } else if (a.size() > 1) {  // Variable(data, requires_grad, ...): an int or bool, as torch's argument parser takes it
    const ValueKind rk = g.kind(a[1]);
    if (rk != ValueKind::boolean && rk != ValueKind::integer) {
      return make_error(ErrorCode::bad_tensor_args, std::string("Variable rebuild: requires_grad is a ") + value_kind_name(rk) +
                                                        " (torch refuses it: it takes an integer)");
    }
    PTREAD_TRY(requires_grad, requires_grad_arg(g, g.at(a[1]).i != 0 ? kTrueNode : kFalseNode, dt, "Variable"));
  }
  if (data == ValueKind::none) return empty_parameter(cx, g, requires_grad);
  if (data == ValueKind::tensor) cx.model.specs[g.at(a[0]).ref].requires_grad = requires_grad;
  return a[0];  // a Parameter is its data tensor (or an unsupported entry)
}
inline bool is_rebuild_parameter(std::string_view mod, std::string_view name, bool) {
  return mod == "torch._utils" && (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state");
}
inline Result<uint32_t> rebuild_parameter_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  const size_t n = g.global_name(c.callable) == "_rebuild_parameter" ? 3 : 4;  // _with_state: 4
  return parameter(cx, g, c.a, n, n, ParameterArgs::rebuild);
}

inline bool is_variable_class(std::string_view mod, std::string_view name, bool) {
  return (mod == "torch.nn.parameter" && name == "Parameter") || (mod == "torch.autograd.variable" && name == "Variable");
}
// torch 0.1-0.4's whole models: Parameter(data=None, requires_grad=True) and
// Variable(data=None, requires_grad=False, volatile=False, _grad_fn=None, name=None) by REDUCE
// or NEWOBJ, often followed by a BUILD of (requires_grad, volatile, backward_hooks)
// (Tensor.__setstate__, build.hpp). No data, or None, is an empty tensor (torch.empty(0));
// data that is no tensor and cannot be one (a number, text, a container, a storage) torch
// refuses; data ptread cannot tell (an object of a class it does not know, a tensor it
// cannot read) keeps the call inert.
inline Result<uint32_t> variable_call(TorchContext& cx, Graph& g, const GlobalCall& c) {
  const bool is_parameter = g.global_name(c.callable) == "Parameter";
  const ValueKind data = c.a.empty() ? ValueKind::none : g.kind(c.a[0]);
  switch (data) {
    case ValueKind::tensor: case ValueKind::none:
      break;
    case ValueKind::boolean: case ValueKind::integer: case ValueKind::big_integer: case ValueKind::floating:
    case ValueKind::string: case ValueKind::bytes: case ValueKind::list: case ValueKind::tuple: case ValueKind::dict:
    case ValueKind::set: case ValueKind::frozenset: case ValueKind::storage:
      return make_error(ErrorCode::bad_tensor_args, std::string(is_parameter ? "Parameter" : "Variable") + " of a " +
                                                        value_kind_name(data) + " (torch refuses it: the data must be a tensor)");
    default:
      return kNoNode;
  }
  if (is_parameter) return parameter(cx, g, c.a, 0, 2, ParameterArgs::parameter);
  return parameter(cx, g, c.a, 0, 5, ParameterArgs::variable);
}

// BUILD on the class: Parameter has Tensor's __setstate__, called unbound whatever the state.
inline Status variable_class_build(TorchContext& cx, Graph& g, uint32_t glob, uint32_t state) {
  static_cast<void>(cx);
  static_cast<void>(state);
  if (g.global_name(glob) != "Parameter") return {};
  const std::string target = "the global '" + std::string(g.global_module(glob)) + "." + std::string(g.global_name(glob)) + "'";
  return build_refused(target, "a state", "Tensor.__setstate__ called on no tensor");
}

// torch 0.1-0.3 pickled Parameters and Variables as Parameter() with the state
// (data, ...): the object is its data tensor.
inline Status variable_build(TorchContext& cx, Graph& g, uint32_t obj, uint32_t state) {
  if (g.kind(state) == ValueKind::tuple && !g.at(state).items.empty()) {
    const Items st = g.at(state).items;
    const uint32_t data = st[0];
    if (g.kind(data) == ValueKind::tensor || g.kind(data) == ValueKind::unsupported) {
      // (data, grad, backward_hooks, requires_grad, volatile): Tensor.__setstate__
      if (g.kind(data) == ValueKind::tensor && st.size() == 5 && g.kind(st[3]) == ValueKind::boolean) {
        cx.model.specs[g.nodes[data].ref].requires_grad = g.at(st[3]).i != 0;
      }
      g.set_leaf(obj, g.kind(data), g.nodes[data].ref);
    }
  }
  return {};
}

}  // namespace detail
}  // namespace ptread
