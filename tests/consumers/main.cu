// The consumer program of tools/consumers.sh for nvcc: main.cpp's program (the core, through
// check_model.hpp) in a .cu file beside a kernel. It makes no CUDA runtime call, so it runs on
// a machine without a GPU.
#include "main.cpp"

__global__ void scale(float* x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
