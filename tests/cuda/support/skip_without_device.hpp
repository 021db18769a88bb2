// The GPU tests run where a CUDA device is; elsewhere the program says so and exits 77,
// which CTest reports as skipped (SKIP_RETURN_CODE). Checked while statics are initialized,
// before Catch's main (shared with the other test programs) runs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace ptread_test {

inline bool require_cuda_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("skipped: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    std::fflush(stdout);
    std::exit(77);
  }
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
    std::printf("CUDA device 0 of %d: %s (sm_%d%d)\n", n, p.name, p.major, p.minor);
  }
  return true;
}

inline const bool cuda_device_present = require_cuda_device();

}  // namespace ptread_test
