// ptread — what an entry of the table of torch globals is (globals.hpp lists them): which
// module.name it matches, what kind of Python object that is, and its handlers for the
// pickle's REDUCE, NEWOBJ and BUILD. Each handler mirrors one piece of torch or Python and
// lives in a file of its own under globals/.
#pragma once

#include "../pickle/value_graph.hpp"
#include "../error.hpp"

#include <cstdint>
#include <string_view>

namespace ptread {
namespace detail {

class TorchContext;

// A call of a global: its node, the argument tuple's node and that tuple's items.
struct GlobalCall {
  uint32_t callable;
  uint32_t args;
  Items a;
};

// What Python object a global is, which decides what the pickle may do with it beyond its
// handlers.
enum class GlobalKind : uint8_t {
  plain_class,    // a class ptread knows no more of than its handlers say (numpy.ndarray)
  builtin_class,  // set, bytes, OrderedDict, torch.Size ...: BUILD on the class itself sets nothing
  function,       // written in Python (torch's rebuild functions): NEWOBJ of it is refused
  c_function,     // written in C (_codecs.encode, numpy's): no __dict__ either
  storage_type,   // FloatStorage ...: torch.load finds a StorageType object
  torch_object,   // torch.float32, torch.per_tensor_affine ...: no callable, no class
  tensor_class,   // torch.nn.parameter.Parameter, torch.autograd.variable.Variable
};
inline bool is_function(GlobalKind k) { return k == GlobalKind::function || k == GlobalKind::c_function; }

// REDUCE / INST / OBJ (call) and NEWOBJ (new_object): the node made, or kNoNode for an inert
// object node of the call; errors as torch or Python raise them.
using GlobalCallHandler = Result<uint32_t> (*)(TorchContext& cx, Graph& g, const GlobalCall& c);
// BUILD on the global itself (build_global, after Python's default BUILD's checks) or on an
// object whose class the global is (build_instance, after the object took the state).
using GlobalBuildHandler = Status (*)(TorchContext& cx, Graph& g, uint32_t target, uint32_t state);
// Whether module.name is this entry; py2: the pickle is below protocol 3, where Python maps
// Python 2 module names (__builtin__, copy_reg) to Python 3's.
using GlobalMatch = bool (*)(std::string_view module, std::string_view name, bool py2);

struct TorchGlobal {
  const char* id;  // the global, or its family, as torch names it (global_tag_of finds it by this)
  GlobalMatch match;
  GlobalKind kind;
  GlobalCallHandler call = nullptr;        // nullptr: an inert object
  GlobalCallHandler new_object = nullptr;  // nullptr: as call
  GlobalBuildHandler build_global = nullptr;
  GlobalBuildHandler build_instance = nullptr;
};

}  // namespace detail
}  // namespace ptread
