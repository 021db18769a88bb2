// The GPU tests as one nvcc translation unit: each one parses the core twice (host and
// device passes), so one unit builds in about half the time of two. (tests/cuda/emulate
// builds the same files one by one, for the CPU.) Catch's main is the other test programs'.
#include "support/skip_without_device.hpp"

#include "upload.cu"
#include "layers.cu"
