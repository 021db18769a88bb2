// ptread — CUDA: what the cuda/*.cuh headers share. Include these headers from your own .cu
// files (compiled by nvcc) and link the CUDA runtime (CMake: ptread::cuda); the core headers
// need neither.
//
// CUDA errors become ptread errors (ErrorCode::cuda_error, E600) naming the call and CUDA's
// own error name; nothing here throws. Device and pinned memory, streams and events are
// owned by move-only RAII types. Everything uses the calling thread's current device
// (cudaSetDevice before the first call to choose another).
#pragma once

#include "../ptread.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ptread {
namespace cuda {

// "what: out of memory (cudaErrorMemoryAllocation)".
inline Error cuda_failure(cudaError_t e, const std::string& what) {
  return make_error(ErrorCode::cuda_error,
                    what + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}

inline Status cuda_check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return {};
  return cuda_failure(e, what);
}

// The error of the last kernel launch on this thread, if any (cudaGetLastError).
inline Status launch_check(const char* kernel) {
  return cuda_check(cudaGetLastError(), std::string("launching ") + kernel);
}

// How many CUDA devices the runtime sees; a cuda_error when it cannot tell (no driver ...).
inline Result<int> device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDeviceCount");
  return n;
}

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" for the current device.
inline Result<std::string> device_description() {
  int dev = 0;
  PTREAD_CHECK(cuda_check(cudaGetDevice(&dev), "cudaGetDevice"));
  cudaDeviceProp p;
  PTREAD_CHECK(cuda_check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties"));
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor,
                p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / (1u << 30));
  return std::string(buf);
}

namespace detail {
// The move-only owner of one handle; Free releases it (errors at teardown are ignored: the
// context may already be gone at process exit).
template <class H, class Free>
class Owned {
 public:
  Owned() = default;
  explicit Owned(H h) noexcept : h_(h) {}
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  H get() const noexcept { return h_; }
  void reset() noexcept {
    if (h_ != H{}) Free()(h_);
    h_ = H{};
  }

 private:
  H h_{};
};

struct FreeDevice {
  void operator()(void* p) const noexcept { (void)cudaFree(p); }
};
struct FreePinned {
  void operator()(void* p) const noexcept { (void)cudaFreeHost(p); }
};
struct FreeStream {
  void operator()(cudaStream_t s) const noexcept { (void)cudaStreamDestroy(s); }
};
struct FreeEvent {
  void operator()(cudaEvent_t e) const noexcept { (void)cudaEventDestroy(e); }
};
}  // namespace detail

namespace detail {
struct DeviceKind {
  static constexpr const char* kAlloc = "cudaMalloc";
  static cudaError_t alloc(void** p, size_t n) { return cudaMalloc(p, n); }
  using Free = FreeDevice;
};
struct PinnedKind {
  static constexpr const char* kAlloc = "cudaHostAlloc";
  static cudaError_t alloc(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
  using Free = FreePinned;
};

// Memory of one kind, freed when the owner goes. Zero bytes allocate nothing.
template <class Kind>
class Memory {
 public:
  Memory() = default;
  static Result<Memory> allocate(size_t bytes) {
    Memory b;
    if (bytes == 0) return Result<Memory>(std::move(b));
    void* p = nullptr;
    const cudaError_t e = Kind::alloc(&p, bytes);
    if (e != cudaSuccess) return cuda_failure(e, std::string(Kind::kAlloc) + "(" + std::to_string(bytes) + " bytes)");
    b.p_ = Owned<void*, typename Kind::Free>(p);
    b.bytes_ = bytes;
    return Result<Memory>(std::move(b));
  }
  void* data() const noexcept { return p_.get(); }
  size_t size() const noexcept { return bytes_; }

 private:
  Owned<void*, typename Kind::Free> p_;
  size_t bytes_ = 0;
};
}  // namespace detail

// Device memory (cudaMalloc).
using DeviceBuffer = detail::Memory<detail::DeviceKind>;
// Page-locked host memory (cudaHostAlloc): what the copy engines read at full speed.
using PinnedBuffer = detail::Memory<detail::PinnedKind>;

class Stream {
 public:
  Stream() = default;
  // A stream that does not wait for the legacy default stream.
  static Result<Stream> create() {
    cudaStream_t s = nullptr;
    PTREAD_CHECK(cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    Stream r;
    r.s_ = detail::Owned<cudaStream_t, detail::FreeStream>(s);
    return Result<Stream>(std::move(r));
  }
  cudaStream_t get() const noexcept { return s_.get(); }
  Status synchronize() const { return cuda_check(cudaStreamSynchronize(s_.get()), "cudaStreamSynchronize"); }

 private:
  detail::Owned<cudaStream_t, detail::FreeStream> s_;
};

class Event {
 public:
  Event() = default;
  // Timing off: these events only order work.
  static Result<Event> create(bool timing = false) {
    cudaEvent_t e = nullptr;
    PTREAD_CHECK(cuda_check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
                            "cudaEventCreate"));
    Event r;
    r.e_ = detail::Owned<cudaEvent_t, detail::FreeEvent>(e);
    return Result<Event>(std::move(r));
  }
  cudaEvent_t get() const noexcept { return e_.get(); }
  Status record(cudaStream_t s) const { return cuda_check(cudaEventRecord(e_.get(), s), "cudaEventRecord"); }
  // Waits for the work recorded before it (at once if never recorded).
  Status synchronize() const { return cuda_check(cudaEventSynchronize(e_.get()), "cudaEventSynchronize"); }

 private:
  detail::Owned<cudaEvent_t, detail::FreeEvent> e_;
};

}  // namespace cuda
}  // namespace ptread
