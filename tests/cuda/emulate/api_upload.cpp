// tests/cuda/upload.cu built as a CPU program over the stand-in runtime (fake/cuda_runtime.h)
// and the emulated kernels (emu.hpp).
#undef _FORTIFY_SOURCE
#include "fake/cuda_runtime.h"

#include "../upload.cu"
