// ptread — the table of torch globals: every module.name a checkpoint's pickle may name that
// ptread gives a meaning, one line each, with the handlers of its own file under globals/.
// A global in no line is an inert object node (its class, arguments and state kept).
//
// Adding a global: write globals/NAME.hpp (its match function, its handlers, a comment naming
// the torch or Python source it mirrors), include it here and add its line. The first line
// that matches wins (the storage classes match any module: they come first). See
// docs/design.md, "Adding a torch global".
#pragma once

#include "global.hpp"
#include "globals/builtins.hpp"
#include "globals/codecs.hpp"
#include "globals/collections.hpp"
#include "globals/copyreg.hpp"
#include "globals/from_type.hpp"
#include "globals/load_from_bytes.hpp"
#include "globals/numpy.hpp"
#include "globals/parameter.hpp"
#include "globals/quantized.hpp"
#include "globals/rebuild_tensor.hpp"
#include "globals/sparse.hpp"
#include "globals/storage_type.hpp"
#include "globals/torch_objects.hpp"
#include "globals/torch_size.hpp"
#include "globals/unsupported.hpp"

#include <cstdint>
#include <iterator>
#include <string_view>

namespace ptread {
namespace detail {


// id, match, kind, call, new_object, build_global, build_instance
inline constexpr TorchGlobal kTorchGlobals[] = {
    {"FloatStorage ... (any module)", is_storage_type_global, GlobalKind::storage_type, storage_type_call},
    {"torch._utils._rebuild_tensor_v2", is_rebuild_tensor_v2, GlobalKind::function, rebuild_tensor_v2_call},
    {"torch._utils._rebuild_tensor_v3", is_rebuild_tensor_v3, GlobalKind::function, rebuild_tensor_v3_call},
    {"torch._utils._rebuild_tensor", is_rebuild_tensor_v1, GlobalKind::function, rebuild_tensor_v1_call},
    {"torch._utils._rebuild_parameter", is_rebuild_parameter, GlobalKind::function, rebuild_parameter_call},
    {"torch._utils._rebuild_device_tensor_from_cpu_tensor", is_rebuild_device_from_cpu, GlobalKind::function, rebuild_device_from_cpu_call},
    {"torch._utils._rebuild_qtensor", is_rebuild_qtensor, GlobalKind::function, rebuild_qtensor_call},
    {"torch._utils._rebuild_sparse_tensor", is_rebuild_sparse, GlobalKind::function, rebuild_sparse_call},
    {"torch._utils: rebuilds ptread cannot hand out", is_unsupported_rebuild, GlobalKind::function, unsupported_rebuild_call},
    {"torch._tensor._rebuild_from_type_v2", is_rebuild_from_type_v2, GlobalKind::function, rebuild_from_type_v2_call},
    {"collections.OrderedDict", is_ordered_dict, GlobalKind::builtin_class, dict_class_call, dict_class_new},
    {"collections.defaultdict", is_dict_like, GlobalKind::builtin_class, dict_class_call, dict_class_new},
    {"builtins.set", is_builtin_set, GlobalKind::builtin_class, set_call, set_new},
    {"builtins.frozenset", is_builtin_frozenset, GlobalKind::builtin_class, set_call},
    {"builtins.bytes", is_builtin_bytes, GlobalKind::builtin_class, bytes_class_call},
    {"builtins.bytearray", is_builtin_bytearray, GlobalKind::builtin_class, bytes_class_call, bytearray_new},
    {"torch.Size", is_torch_size, GlobalKind::builtin_class, torch_size_call},
    {"torch.float32 ... (dtypes, qschemes, layouts, memory formats)", is_torch_object, GlobalKind::torch_object, torch_object_call,
     torch_object_new, torch_object_build},
    {"_codecs.encode", is_codecs_encode, GlobalKind::c_function, codecs_encode_call},
    {"numpy.core.multiarray._reconstruct", is_numpy_reconstruct, GlobalKind::c_function, numpy_reconstruct_call},
    {"numpy.core.multiarray.scalar", is_numpy_scalar, GlobalKind::c_function, numpy_scalar_call},
    {"numpy.ndarray", is_numpy_ndarray, GlobalKind::plain_class, nullptr, nullptr, nullptr, numpy_array},
    {"copyreg._reconstructor", is_copyreg_reconstructor, GlobalKind::function, copyreg_reconstructor_call},
    {"torch.storage._load_from_bytes", is_load_from_bytes, GlobalKind::function, load_from_bytes_call},
    {"torch.nn.parameter.Parameter", is_variable_class, GlobalKind::tensor_class, variable_call, nullptr, variable_class_build,
     variable_build},
};
inline constexpr size_t kTorchGlobalCount = std::size(kTorchGlobals);
static_assert(kTorchGlobalCount < 254, "a global's entry + 2 is cached in a node's 8-bit tag");

// The node tag (TorchContext::global_tag) of the entry with this id; 0 for none.
constexpr uint8_t global_tag_of(std::string_view id) {
  for (size_t k = 0; k < kTorchGlobalCount; ++k) {
    if (id == kTorchGlobals[k].id) return static_cast<uint8_t>(k + 2);
  }
  return 0;
}

}  // namespace detail
}  // namespace ptread
