// A stand-in for the CUDA runtime API on machines without a GPU: the subset ptread's CUDA
// headers, tests, example and benchmark call, with "device" memory in host memory and every
// copy, memset and kernel (emu.hpp) done at once, in order. So the GPU tests' own sources
// (tests/cuda/*.cu) also run as a CPU program: upload's planning and chunking, the layers'
// argument checks and messages, the split helpers. What it cannot show is anything about
// concurrency (copies overlapping fills, events, streams): there everything is synchronous.
#pragma once

#include "../emu.hpp"

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };

struct FakeCudaEvent {
  std::chrono::steady_clock::time_point at;
};
using cudaEvent_t = FakeCudaEvent*;

constexpr unsigned cudaHostAllocDefault = 0, cudaStreamNonBlocking = 1, cudaEventDefault = 0,
                   cudaEventDisableTiming = 2;

struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount;
  size_t totalGlobalMem;
};

namespace fake_cuda {
// The SM count the tiled Linear's tile choice sees (tests may change it).
inline int& sm_count() {
  static int n = 4;
  return n;
}
inline void* alloc(size_t n) { return std::aligned_alloc(256, (n + 255) / 256 * 256); }
}  // namespace fake_cuda

inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "invalid argument";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation"
                                                                            : "cudaErrorInvalidValue";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "ptread CPU emulation");
  p->major = 9;
  p->multiProcessorCount = fake_cuda::sm_count();
  p->totalGlobalMem = size_t{1} << 30;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
  *v = fake_cuda::sm_count();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = fake_cuda::alloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = fake_cuda::alloc(1);
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { return cudaFree(s); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new FakeCudaEvent{std::chrono::steady_clock::now()};
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (n != 0 && (dst == nullptr || src == nullptr)) return cudaErrorInvalidValue;
  if (n != 0) std::memmove(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(dst, src, n, k);
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  if (n != 0) std::memset(p, v, n);
  return cudaSuccess;
}
