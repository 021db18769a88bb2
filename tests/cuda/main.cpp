// The GPU tests' main: with no CUDA device (or no driver) it says so and exits 77, which
// CTest reports as skipped (SKIP_RETURN_CODE); otherwise it runs the Catch2 tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("skipped: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 77;
  }
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
    std::printf("CUDA device 0 of %d: %s (sm_%d%d)\n", n, p.name, p.major, p.minor);
  }
  return Catch::Session().run(argc, argv);
}
