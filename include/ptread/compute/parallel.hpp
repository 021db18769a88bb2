// ptread — a small process-wide worker pool for the nn layers (std::thread, no OpenMP).
//
// parallel_for(threads, tasks, fn) runs fn(t) for t in [0, tasks) on up to `threads`
// threads, the caller included. Workers start on first use; after a job a worker polls for
// the next one for spin_micros() (500 us unless set_spin_micros() says otherwise), then
// sleeps on a condition variable. A small job (parallel_for(..., small = true)) takes only
// workers that are awake, unless the previous job ended less than spin_micros() / 4
// before it (calls back to back): a sleeping worker is not worth waking for one small
// call, but is for a run of them, which then finds it polling. The caller claims tasks too and never waits for a worker to wake:
// it waits only for tasks a worker has already claimed, so asking for more threads never
// costs more than a wake-up call. Tasks are claimed through one 64-bit counter that holds
// the job's generation, so a worker that wakes late cannot claim a task of a later job.
// One job runs at a time; a call made while another thread's job runs computes serially.
// A worker the system refuses to start (EAGAIN: a process or memory limit) is not an
// error: the job runs on the threads there are, the caller's at least. Workers start through
// pthread_create on POSIX systems, whose failure is a return code: std::thread would throw,
// or abort under -fno-exceptions.
// On Linux with glibc a worker starts on a CPU other than its creator's, then takes its
// creator's CPU mask (WorkerPlacement): a scheduler that packs new threads onto their
// parent's CPU (as the 2-vCPU VMs this was measured on do) otherwise runs a first job's
// worker only 2-4 ms later, at a scheduler tick, or on the caller's CPU beside it.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <intrin.h>
#endif
#if PTREAD_POSIX
#include <pthread.h>
#elif PTREAD_EXCEPTIONS
#include <system_error>
#endif
#if PTREAD_POSIX && defined(__linux__) && defined(__GLIBC__) && defined(_GNU_SOURCE)
#include <sched.h>
#define PTREAD_WORKER_PLACEMENT 1
#else
#define PTREAD_WORKER_PLACEMENT 0
#endif

namespace ptread {
namespace detail {

// 0 means "every hardware thread".
inline unsigned resolve_threads(unsigned threads) noexcept {
  if (threads != 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}

#if PTREAD_WORKER_PLACEMENT
// Where a new worker starts: one CPU of its creator's mask other than the one the creator
// runs on (the k-th such CPU for worker k, cyclically), then, from its first instruction,
// anywhere in the creator's mask, as if it had been created without a hint. A hint only:
// where it cannot be given (one CPU allowed, a mask larger than cpu_set_t) the worker
// starts as the system places it.
struct WorkerPlacement {
  cpu_set_t mask;       // the mask to put back: the creator's, or the sleeping worker's own
  bool placed = false;  // whether the worker starts, or is woken, on one CPU

  // The k-th CPU of `from` other than the one the caller runs on (cyclically), as a mask of
  // one; false when there is none.
  static bool other_cpu(const cpu_set_t& from, unsigned k, cpu_set_t* one) noexcept {
    const int here = sched_getcpu();
    const int others = CPU_COUNT(&from) - (here >= 0 && CPU_ISSET(here, &from) ? 1 : 0);
    if (others <= 0) return false;
    int skip = static_cast<int>(k % static_cast<unsigned>(others));
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (cpu == here || !CPU_ISSET(cpu, &from) || skip-- != 0) continue;
      CPU_ZERO(one);
      CPU_SET(cpu, one);
      return true;
    }
    return false;
  }
  // Fills attr (initialized) for worker k.
  void choose(pthread_attr_t* attr, unsigned k) noexcept {
    cpu_set_t one;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0 || !other_cpu(mask, k, &one)) return;
    placed = pthread_attr_setaffinity_np(attr, sizeof one, &one) == 0;
  }
  // The same for a worker asleep on the pool's condition variable, before it is woken: the
  // same scheduler wakes a thread on its waker's CPU while that one is busy (the caller,
  // about to compute its share), where it ran 0.2-2 ms later or not at all before the job
  // ended (bench/README.md, "A sleeping worker woken on another CPU"). The worker
  // puts its own mask back (release) as soon as it runs.
  void choose(pthread_t worker, unsigned k) noexcept {
    cpu_set_t one;
    if (pthread_getaffinity_np(worker, sizeof mask, &mask) != 0 || !other_cpu(mask, k, &one)) return;
    placed = pthread_setaffinity_np(worker, sizeof one, &one) == 0;
  }
  // In the worker, first: the creator's mask back (failing that, it stays on its CPU).
  void release() const noexcept {
    if (placed) pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  }
};
#endif

// One step of a polling loop: the CPU's spin-wait hint (x86 pause, Arm yield).
PTREAD_ALWAYS_INLINE void cpu_relax() noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  __builtin_ia32_pause();
#elif (defined(__GNUC__) || defined(__clang__)) && (defined(__aarch64__) || defined(__arm__))
  __asm__ __volatile__("yield");
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
  _mm_pause();
#endif
}

class WorkerPool {
 public:
  static constexpr unsigned kMaxWorkers = 255;

  static WorkerPool& instance() {
    static WorkerPool pool;
    return pool;
  }

  // A pool of its own (the process-wide one is instance()); max_workers caps the workers it
  // may start, as a system that refuses the next thread would.
  explicit WorkerPool(unsigned max_workers = kMaxWorkers) : max_workers_(std::min(max_workers, kMaxWorkers)) {}
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
#if PTREAD_POSIX
    for (pthread_t t : workers_) pthread_join(t, nullptr);
#else
    for (auto& t : workers_) t.join();
#endif
  }

  // The workers started so far.
  size_t workers() const {
    std::lock_guard<std::mutex> lock(m_);
    return workers_.size();
  }

  // For tests: the workers asleep on the condition variable now, and the wake-ups that
  // placed a sleeping worker on another CPU so far (always 0 where placement is not built).
  size_t asleep() const {
    std::lock_guard<std::mutex> lock(m_);
    return waiting_;
  }
  size_t placed_wakes() const {
    std::lock_guard<std::mutex> lock(m_);
    return placed_wakes_;
  }
  // How long a worker polls for the next job after one before it sleeps (0: it sleeps at
  // once, and small jobs never wake one).
  uint32_t spin_micros() const noexcept { return spin_us_.load(std::memory_order_relaxed); }
  void set_spin_micros(uint32_t us) noexcept { spin_us_.store(us, std::memory_order_relaxed); }

  template <class F>
  void run(unsigned threads, size_t tasks, F& fn, bool small = false) {
    if (tasks == 0) return;
    if (threads <= 1 || tasks == 1 || tasks >= (size_t{1} << 31)) {
      for (size_t t = 0; t < tasks; ++t) fn(t);
      return;
    }
    std::unique_lock<std::mutex> busy(job_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) {
      for (size_t t = 0; t < tasks; ++t) fn(t);
      return;
    }
    struct EndMark {  // when this job ended (with job_mutex_ held): the next small job's measure
      WorkerPool* pool;
      ~EndMark() { pool->last_end_ = std::chrono::steady_clock::now(); }
    } end_mark{this};
    unsigned helpers = static_cast<unsigned>(
        std::min<size_t>({static_cast<size_t>(threads - 1), tasks - 1, size_t{kMaxWorkers}}));
    const bool back_to_back = small && std::chrono::steady_clock::now() - last_end_ <
                                           std::chrono::microseconds(spin_us_.load(std::memory_order_relaxed) / 4);
    uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (small && !back_to_back) {
        // Only the workers awake (polling after a job): waking a sleeping one costs its
        // caller more than a small job's share (bench/README.md, "Small calls on one thread").
        const size_t awake = workers_.size() - waiting_;
        helpers = static_cast<unsigned>(std::min<size_t>(helpers, awake));
      }
      while (workers_.size() < helpers && start_worker(static_cast<unsigned>(workers_.size()))) {
      }
      helpers = std::min(helpers, static_cast<unsigned>(workers_.size()));  // those the system gave
      if (helpers != 0) {
        gen = ++gen_;
        call_ = [](void* ctx, size_t t) { (*static_cast<F*>(ctx))(t); };
        ctx_ = &fn;
        tasks_ = static_cast<uint32_t>(tasks);
        active_ = helpers;
        done_.store(0, std::memory_order_relaxed);
        next_.store((gen << 32) | 1, std::memory_order_release);  // task 0 is the caller's (below)
#if PTREAD_WORKER_PLACEMENT
        for (unsigned id = 0; id < helpers; ++id) {
          Sleeper& sl = sleepers_[id];
          if (!sl.asleep || sl.placement.placed) continue;
          sl.placement.choose(workers_[id], id);
          placed_wakes_ += sl.placement.placed ? 1 : 0;
        }
#endif
      }
    }
    if (helpers == 0) {  // no thread but the caller's
      for (size_t t = 0; t < tasks; ++t) fn(t);
      return;
    }
    wake_.notify_all();
    // The caller runs task 0 whatever the workers do, so that a job repeated (a layer called
    // again) gives each thread the same part: a worker polling for the next job would
    // otherwise win task 0 about half the time, and each thread read the part the other
    // one's cache holds (Linear 1024 x 1024, M = 1, two threads back to back: 0.060 ms
    // against 0.030; bench/README.md, "A worker that polls after a call").
    fn(0);
    size_t mine = 1;
    for (size_t t; claim(gen, static_cast<uint32_t>(tasks), &t);) {
      fn(t);
      ++mine;
    }
    if (done_.fetch_add(mine, std::memory_order_acq_rel) + mine == tasks) return;
    std::unique_lock<std::mutex> lock(m_);
    finished_.wait(lock, [&] { return done_.load(std::memory_order_acquire) == tasks; });
  }

 private:
  // Starts worker `id` (with m_ held); false when the system refuses a thread.
  bool start_worker(unsigned id) {
    if (workers_.size() >= max_workers_) return false;
    workers_.reserve(workers_.size() + 1);  // before the thread: it is joined if it exists
#if PTREAD_WORKER_PLACEMENT
    if (sleepers_.size() <= id) sleepers_.resize(id + 1);  // read by the worker under m_
#endif
#if PTREAD_POSIX
    struct Start {
      WorkerPool* pool = nullptr;
      unsigned id = 0;
#if PTREAD_WORKER_PLACEMENT
      WorkerPlacement placement;
#endif
    };
    Start* start = new (std::nothrow) Start;
    if (start == nullptr) return false;
    start->pool = this;
    start->id = id;
    pthread_t t;
    auto entry = [](void* arg) -> void* {
      const Start st = *static_cast<Start*>(arg);
      delete static_cast<Start*>(arg);
#if PTREAD_WORKER_PLACEMENT
      st.placement.release();
#endif
      st.pool->worker_loop(st.id);
      return nullptr;
    };
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) {
      delete start;
      return false;
    }
#if PTREAD_WORKER_PLACEMENT
    start->placement.choose(&attr, id);
#endif
    const int created = pthread_create(&t, &attr, +entry, start);
    pthread_attr_destroy(&attr);
    if (created != 0) {
      delete start;
      return false;
    }
    workers_.push_back(t);
#elif PTREAD_EXCEPTIONS
    try {
      workers_.emplace_back([this, id] { worker_loop(id); });
    } catch (const std::system_error&) {
      return false;
    }
#else
    workers_.emplace_back([this, id] { worker_loop(id); });
#endif
    return true;
  }

  bool claim(uint64_t gen, uint32_t tasks, size_t* task) {
    uint64_t v = next_.load(std::memory_order_acquire);
    for (;;) {
      if ((v >> 32) != (gen & 0xffffffffu) || static_cast<uint32_t>(v) >= tasks) return false;
      if (next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) {
        *task = static_cast<uint32_t>(v);
        return true;
      }
    }
  }

  // Returns when a job after generation `seen` is posted (or stop_ set), or spin_micros()
  // have passed. The generation is read from next_ (atomic), the job itself under m_.
  void poll(uint64_t seen) {
    const uint32_t us = spin_us_.load(std::memory_order_relaxed);
    if (us == 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    for (unsigned k = 1;; ++k) {
      if ((next_.load(std::memory_order_acquire) >> 32) != (seen & 0xffffffffu)) return;
      if (k % 64 == 0 && (stop_.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() >= until)) return;
      cpu_relax();
    }
  }

  void worker_loop(unsigned id) {
    uint64_t seen = 0;
    for (;;) {
      void (*call)(void*, size_t);
      void* ctx;
      uint32_t tasks;
      uint64_t gen;
      // It polls for the next job for spin_micros(), running (never yielding: a yielding
      // worker, runnable, was packed onto the caller's CPU and took its task only when the
      // caller had done its own, or never, in about half the jobs back to back;
      // bench/README.md, "A sleeping worker woken on another CPU"), then sleeps.
      bool in_job;
#if PTREAD_WORKER_PLACEMENT
      WorkerPlacement placed;  // where run() put it while it slept, if it did
#endif
      poll(seen);
      {
        std::unique_lock<std::mutex> lock(m_);
#if PTREAD_WORKER_PLACEMENT
        sleepers_[id].asleep = true;
#endif
        ++waiting_;
        wake_.wait(lock, [&] { return stop_.load(std::memory_order_relaxed) || gen_ != seen; });
        --waiting_;
#if PTREAD_WORKER_PLACEMENT
        Sleeper& me = sleepers_[id];
        me.asleep = false;
        placed = me.placement;
        me.placement.placed = false;
#endif
        if (stop_.load(std::memory_order_relaxed)) return;
        seen = gen = gen_;
        in_job = id < active_;
        call = call_;
        ctx = ctx_;
        tasks = tasks_;
      }
#if PTREAD_WORKER_PLACEMENT
      placed.release();
#endif
      if (!in_job) continue;
      size_t mine = 0;
      for (size_t t; claim(gen, tasks, &t);) {
        call(ctx, t);
        ++mine;
      }
      if (mine != 0 && done_.fetch_add(mine, std::memory_order_acq_rel) + mine == tasks) {
        std::lock_guard<std::mutex> lock(m_);
        finished_.notify_all();
      }
    }
  }

  std::mutex job_mutex_;  // one job at a time
  mutable std::mutex m_;
  std::condition_variable wake_, finished_;
#if PTREAD_POSIX
  std::vector<pthread_t> workers_;
#else
  std::vector<std::thread> workers_;
#endif
#if PTREAD_WORKER_PLACEMENT
  struct Sleeper {
    bool asleep = false;  // waiting on wake_ (with m_)
    WorkerPlacement placement;
  };
  std::vector<Sleeper> sleepers_;  // by worker id, with m_
#endif
  size_t placed_wakes_ = 0;
  const unsigned max_workers_;
  std::atomic<bool> stop_{false};  // set with m_ held; read without it by polling workers
  uint64_t gen_ = 0;
  void (*call_)(void*, size_t) = nullptr;
  void* ctx_ = nullptr;
  uint32_t tasks_ = 0;
  unsigned active_ = 0;
  std::atomic<uint64_t> next_{0};  // generation << 32 | next task
  std::atomic<size_t> done_{0};
  std::atomic<uint32_t> spin_us_{500};
  size_t waiting_ = 0;                  // workers asleep on wake_ (with m_)
  std::chrono::steady_clock::time_point last_end_{};  // with job_mutex_
};

template <class F>
void parallel_for(unsigned threads, size_t tasks, F&& fn, bool small = false) {
  WorkerPool::instance().run(threads, tasks, fn, small);
}

}  // namespace detail
}  // namespace ptread
