// Host <-> device copies for the GPU tests (.cu files only).
#pragma once

#include <ptread/cuda/common.cuh>

#include <catch2/catch.hpp>

#include <vector>

namespace ptread_test {

// A device copy of v (REQUIREs success).
template <class T>
ptread::cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  auto b = ptread::cuda::DeviceBuffer::allocate(v.size() * sizeof(T));
  REQUIRE(b.ok());
  if (!v.empty()) REQUIRE(cudaMemcpy(b->data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return std::move(*b);
}

template <class T>
std::vector<T> from_device(const void* p, size_t n) {
  std::vector<T> v(n);
  if (n != 0) REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

// n floats of device memory filled with `fill` (to see what a call left untouched).
inline ptread::cuda::DeviceBuffer device_floats(size_t n, float fill) {
  return to_device(std::vector<float>(n, fill));
}

}  // namespace ptread_test
