// A CPU emulation of the part of CUDA's execution model that ptread's kernels use, so that
// include/ptread/cuda/detail/kernels.cuh runs (slowly, exactly) on machines without a GPU.
//
// A launch runs the grid's blocks one after another; each thread of a block is a fiber with
// its own stack, started with makecontext and switched with _setjmp/_longjmp (no system call
// per switch). Fibers run until they finish or reach __syncthreads() (a block barrier) or a
// warp shuffle (a barrier of the 32 lanes of their warp); the scheduler releases a barrier
// when every live thread of the block (or warp) has reached it. It is strict where hardware
// is undefined: a barrier some threads of the block have exited, a shuffle a lane of the warp
// has left, a partial warp shuffling, or threads waiting at different barriers abort with a
// message. __shared__ arrays are function-local statics: blocks run one at a time, so each
// block sees one copy. "Device" pointers are host pointers.
//
// Include this before kernels.cuh, in a translation unit compiled without _FORTIFY_SOURCE
// (its longjmp check refuses jumps between stacks).
#pragma once

#define PTREAD_CUDA_EMULATE 1

#include <setjmp.h>
#include <ucontext.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace ptread_emu {

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}  // NOLINT: implicit, as CUDA's
};
inline dim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0}, blockDim, gridDim;

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
using cudaStream_t = void*;

namespace impl {

enum class State { ready, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  jmp_buf env;
  ucontext_t start;
  State state = State::ready;
  bool started = false;
  dim3 tid;
  unsigned linear = 0;
};

constexpr size_t kStackBytes = size_t{128} << 10;

// Fiber stacks, kept from launch to launch (left uninitialized: nothing reads them first).
inline char* stack(size_t t) {
  static std::vector<std::unique_ptr<char[]>> pool;
  while (pool.size() <= t) pool.emplace_back(new char[kStackBytes]);
  return pool[t].get();
}

struct Machine {
  std::vector<Fiber> fibers;
  std::vector<std::array<uint64_t, 32>> slots;  // shuffle values, per warp
  jmp_buf scheduler;
  size_t current = 0;
  const std::function<void()>* body = nullptr;
};

inline Machine*& machine() {
  static Machine* m = nullptr;
  return m;
}

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "cuda emulation: %s (block %u,%u,%u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z);
  std::abort();
}

inline void fiber_entry() {
  Machine& m = *machine();
  (*m.body)();
  m.fibers[m.current].state = State::done;
  _longjmp(m.scheduler, 1);
}

// Parks the current fiber in state s and returns when the scheduler resumes it.
inline void park(State s) {
  Machine& m = *machine();
  Fiber& f = m.fibers[m.current];
  f.state = s;
  if (_setjmp(f.env) == 0) _longjmp(m.scheduler, 1);
}

// Runs fiber t until it parks or finishes. (A function of its own: the caller's variables
// stay clear of the jump.)
__attribute__((noinline)) inline void resume(Machine& m, size_t t) {
  m.current = t;
  threadIdx = m.fibers[t].tid;
  if (_setjmp(m.scheduler) == 0) {
    Fiber& f = m.fibers[t];
    if (!f.started) {
      f.started = true;
      setcontext(&f.start);
    }
    _longjmp(f.env, 1);
  }
}

// getcontext returns twice: kept apart from any loop variable.
__attribute__((noinline)) inline void prepare(Fiber& f, char* stack_base) {
  f.state = State::ready;
  f.started = false;
  getcontext(&f.start);
  f.start.uc_stack.ss_sp = stack_base;
  f.start.uc_stack.ss_size = kStackBytes;
  f.start.uc_link = nullptr;
  makecontext(&f.start, fiber_entry, 0);
}

inline void run_block(Machine& m) {
  const size_t n = m.fibers.size();
  for (size_t t = 0; t < n; ++t) prepare(m.fibers[t], stack(t));
  for (;;) {
    bool ran = false;
    for (size_t t = 0; t < n; ++t) {
      if (m.fibers[t].state != State::ready) continue;
      resume(m, t);
      ran = true;
    }
    size_t done = 0, at_block = 0;
    for (const Fiber& f : m.fibers) {
      done += f.state == State::done;
      at_block += f.state == State::at_block_barrier;
    }
    if (done == n) return;
    bool released = false;
    if (at_block > 0 && at_block + done == n) {
      if (done > 0) fail("__syncthreads() after some threads of the block returned");
      for (Fiber& f : m.fibers) f.state = State::ready;
      released = true;
    }
    for (size_t w = 0; w * 32 < n; ++w) {
      const size_t lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
      size_t waiting = 0, gone = 0;
      for (size_t t = lo; t < hi; ++t) {
        waiting += m.fibers[t].state == State::at_warp_barrier;
        gone += m.fibers[t].state == State::done;
      }
      if (waiting == 0 || waiting + gone != hi - lo) continue;
      if (gone > 0 || hi - lo != 32) fail("a warp shuffle without all 32 lanes of the warp");
      for (size_t t = lo; t < hi; ++t) m.fibers[t].state = State::ready;
      released = true;
    }
    if (!released && !ran) fail("deadlock: threads wait at different barriers");
  }
}

}  // namespace impl

// Runs body (the kernel call) for every thread of the grid.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  impl::Machine m;
  const size_t n = static_cast<size_t>(block.x) * block.y * block.z;
  if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    impl::fail("invalid launch configuration");
  }
  m.fibers.resize(n);
  m.slots.resize((n + 31) / 32);
  for (unsigned z = 0, t = 0; z < block.z; ++z) {
    for (unsigned y = 0; y < block.y; ++y) {
      for (unsigned x = 0; x < block.x; ++x, ++t) {
        m.fibers[t].tid = dim3(x, y, z);
        m.fibers[t].linear = t;
      }
    }
  }
  m.body = &body;
  impl::Machine* saved = impl::machine();
  impl::machine() = &m;
  blockDim = block;
  gridDim = grid;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        impl::run_block(m);
      }
    }
  }
  impl::machine() = saved;
}

inline void __syncthreads() { impl::park(impl::State::at_block_barrier); }

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");
  if (mask != 0xffffffffu) impl::fail("only full-warp shuffles are emulated");
  impl::Machine& m = *impl::machine();
  const unsigned linear = m.fibers[m.current].linear, lane = linear & 31u, warp = linear >> 5;
  std::memcpy(&m.slots[warp][lane], &v, sizeof v);
  impl::park(impl::State::at_warp_barrier);  // every lane has written
  T r;
  std::memcpy(&r, &m.slots[warp][lane ^ (static_cast<unsigned>(lane_mask) & 31u)], sizeof r);
  impl::park(impl::State::at_warp_barrier);  // every lane has read
  return r;
}

template <class T>
T __ldg(const T* p) {
  return *p;
}
template <class T>
T __ldcs(const T* p) {
  return *p;
}

inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  if (v < old) *p = v;
  return old;
}

}  // namespace ptread_emu

using namespace ptread_emu;  // NOLINT: the kernels name these unqualified, as CUDA's globals

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
