// The worker pool behind the nn layers' threads and read mode's storage reads: every task
// runs once, whatever number of threads the system lets it start.
#include <catch2/catch.hpp>

#include <ptread/ptread.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#if PTREAD_POSIX
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace {

using ptread::detail::WorkerPool;

// Runs `tasks` tasks on `pool` with `threads` threads; how often each task ran.
std::vector<int> run_counted(WorkerPool& pool, unsigned threads, size_t tasks) {
  std::vector<std::atomic<int>> ran(tasks);
  auto fn = [&](size_t t) { ran[t].fetch_add(1, std::memory_order_relaxed); };
  pool.run(threads, tasks, fn);
  std::vector<int> out;
  for (auto& r : ran) out.push_back(r.load());
  return out;
}

}  // namespace

TEST_CASE("the worker pool runs every task once on the threads the system gives it", "[parallel]") {
  const std::vector<int> once(1000, 1);
  SECTION("as many as asked") {
    WorkerPool pool;
    CHECK(run_counted(pool, 3, 1000) == once);
    CHECK(pool.workers() == 2);  // the caller is the third
    CHECK(run_counted(pool, 3, 1000) == once);  // and again, on the same workers
    CHECK(pool.workers() == 2);
  }
  SECTION("fewer than asked: one worker started, the next refused") {
    WorkerPool pool(1);
    CHECK(run_counted(pool, 4, 1000) == once);
    CHECK(pool.workers() == 1);
  }
  SECTION("none: the caller alone") {
    WorkerPool pool(0);
    CHECK(run_counted(pool, 4, 1000) == once);
    CHECK(pool.workers() == 0);
  }
}

#if PTREAD_POSIX && !PTREAD_ASAN
// Run in a child process of its own (a fresh process, so no thread stack is cached for
// reuse) by the test below: under an address-space limit that leaves no room for a thread's
// stack, pthread_create fails, and the pool must compute on the caller's thread (std::thread
// would throw, or abort under -fno-exceptions). Not under AddressSanitizer, whose shadow
// memory does not live with such a limit.
TEST_CASE("worker pool child: a system that refuses every thread", "[.pool-child]") {
  long pages = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  REQUIRE(std::fscanf(f, "%ld", &pages) == 1);
  std::fclose(f);
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
  const rlim_t vm = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
  // Room for the test's own small allocations, not for a thread's stack (8 MiB by default:
  // RLIMIT_STACK; glibc says what it will ask for).
  rlim_t room = rlim_t{1} << 19;
#ifdef __GLIBC__
  pthread_attr_t attr;
  size_t stack = 0;
  if (pthread_getattr_default_np(&attr) == 0) {
    if (pthread_attr_getstacksize(&attr, &stack) == 0 && stack / 2 < room) room = stack / 2;
    pthread_attr_destroy(&attr);
  }
#endif
  rlimit tight = old;
  tight.rlim_cur = vm + room;
  REQUIRE(setrlimit(RLIMIT_AS, &tight) == 0);
  std::vector<int> ran;
  size_t workers = 0;
  {
    WorkerPool pool;
    ran = run_counted(pool, 3, 100);
    workers = pool.workers();
  }
  REQUIRE(setrlimit(RLIMIT_AS, &old) == 0);
  CHECK(workers == 0);
  CHECK(ran == std::vector<int>(100, 1));
}

TEST_CASE("the worker pool computes alone when the system refuses every thread", "[parallel]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    char exe[] = "/proc/self/exe";
    char name[] = "worker pool child: a system that refuses every thread";
    char quiet[] = "--reporter=compact";
    char* argv[] = {exe, name, quiet, nullptr};
    execv(exe, argv);
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif

#if PTREAD_WORKER_PLACEMENT
namespace {

// The CPU mask a worker of a fresh pool runs its task with, the caller's thread having
// `mask`: a job of two tasks that each wait until both have begun, so one runs on the
// worker. (The worker starts on one CPU other than the caller's, then takes this mask.)
bool worker_mask(const cpu_set_t& mask, cpu_set_t* seen) {
  cpu_set_t before;
  if (pthread_getaffinity_np(pthread_self(), sizeof before, &before) != 0) return false;
  if (pthread_setaffinity_np(pthread_self(), sizeof mask, &mask) != 0) return false;
  const pthread_t caller = pthread_self();
  std::atomic<int> begun{0};
  std::atomic<bool> got{false};
  {
    WorkerPool pool;
    auto fn = [&](size_t) {
      begun.fetch_add(1);
      for (int spin = 0; begun.load() < 2 && spin < 10000000; ++spin) std::this_thread::yield();
      if (!pthread_equal(pthread_self(), caller)) {
        got = pthread_getaffinity_np(pthread_self(), sizeof *seen, seen) == 0;
      }
    };
    pool.run(2, 2, fn);
  }
  pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  return got.load() && begun.load() == 2;
}

}  // namespace

TEST_CASE("a worker runs wherever its creator may: the CPU it starts on is a hint only", "[parallel]") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  }
  cpu_set_t seen;
  SECTION("every CPU the process may use") {
    CPU_ZERO(&seen);
    REQUIRE(worker_mask(all, &seen));
    CHECK(CPU_EQUAL(&seen, &all));
  }
  SECTION("the caller held to one CPU: the worker too, no hint given") {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus.back(), &one);
    CPU_ZERO(&seen);
    REQUIRE(worker_mask(one, &seen));
    CHECK(CPU_EQUAL(&seen, &one));
  }
  if (cpus.size() >= 2) {
    SECTION("the caller held to two CPUs: the worker to the same two") {
      cpu_set_t two;
      CPU_ZERO(&two);
      CPU_SET(cpus.front(), &two);
      CPU_SET(cpus.back(), &two);
      CPU_ZERO(&seen);
      REQUIRE(worker_mask(two, &seen));
      CHECK(CPU_EQUAL(&seen, &two));
    }
  }
}

TEST_CASE("a sleeping worker is woken on another CPU, then runs its task wherever it may", "[parallel]") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  WorkerPool pool;
  const pthread_t caller = pthread_self();
  std::atomic<int> begun{0};
  std::atomic<int> worker_tasks{0};
  std::atomic<bool> got{false};
  cpu_set_t seen;
  CPU_ZERO(&seen);
  auto fn = [&](size_t) {  // two tasks that wait for each other: one runs on the worker
    begun.fetch_add(1);
    for (int spin = 0; begun.load() % 2 != 0 && spin < 10000000; ++spin) std::this_thread::yield();
    if (!pthread_equal(pthread_self(), caller)) {
      got = pthread_getaffinity_np(pthread_self(), sizeof seen, &seen) == 0;  // (no Catch2 macros off the main thread)
      worker_tasks.fetch_add(1);
    }
  };
  pool.run(2, 2, fn);  // starts the worker
  REQUIRE(worker_tasks.load() == 1);
  // The worker sleeps once it has polled for the next job for spin_micros().
  for (int i = 0; i < 500 && pool.asleep() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(pool.asleep() == 1);
  CHECK(pool.placed_wakes() == 0);
  pool.run(2, 2, fn);
  CHECK(worker_tasks.load() == 2);
  // Placed only where there is another CPU to place it on; its own mask back before its task.
  CHECK(pool.placed_wakes() == (CPU_COUNT(&all) >= 2 ? 1u : 0u));
  REQUIRE(got.load());
  CHECK(CPU_EQUAL(&seen, &all));
}
TEST_CASE("a worker polls after a job; a small job takes only workers awake, or wakes one for calls back to back",
          "[parallel]") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  if (CPU_COUNT(&all) < 2) return;  // (one CPU: nothing runs beside the caller; placement off)
  const pthread_t caller = pthread_self();
  std::atomic<int> begun{0};
  std::atomic<int> worker_tasks{0};
  auto both = [&](size_t) {  // two tasks that wait for each other, when two threads run them
    begun.fetch_add(1);
    for (int spin = 0; begun.load() % 2 != 0 && spin < 2000000; ++spin) std::this_thread::yield();
    if (!pthread_equal(pthread_self(), caller)) worker_tasks.fetch_add(1);
  };
  auto where = [&](size_t) {
    begun.fetch_add(1);
    if (!pthread_equal(pthread_self(), caller)) worker_tasks.fetch_add(1);
  };
  auto started_asleep = [&](WorkerPool& pool) {  // the worker started by a job, then asleep (no polling)
    pool.set_spin_micros(0);
    pool.run(2, 2, both);
    for (int i = 0; i < 500 && pool.asleep() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return worker_tasks.load() == 1 && pool.asleep() == 1;
  };
  SECTION("polling for 2 s: a small job right after a job finds the worker awake, no wake needed") {
    WorkerPool pool;
    pool.set_spin_micros(2000000);
    pool.run(2, 2, both);
    REQUIRE(worker_tasks.load() == 1);
    pool.run(2, 2, both, /*small=*/true);
    CHECK(worker_tasks.load() == 2);
    CHECK(pool.placed_wakes() == 0);
    CHECK(pool.asleep() == 0);
  }
  SECTION("no polling: the worker sleeps, and a small job runs on the caller alone") {
    WorkerPool pool;
    REQUIRE(started_asleep(pool));
    pool.run(2, 2, where, /*small=*/true);
    pool.run(2, 2, where, /*small=*/true);  // (back to back, but 0 means never)
    CHECK(worker_tasks.load() == 1);
    CHECK(pool.placed_wakes() == 0);
    CHECK(pool.asleep() == 1);
    pool.run(2, 2, both);  // a job that is not small wakes it
    CHECK(worker_tasks.load() == 2);
    CHECK(pool.placed_wakes() == 1);
  }
  SECTION("the worker asleep: a small job after a pause runs alone, the next one back to back wakes it") {
    WorkerPool pool;
    REQUIRE(started_asleep(pool));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    pool.set_spin_micros(400000);  // back to back: within 100 ms of the last job's end
    pool.run(2, 2, where, /*small=*/true);
    CHECK(worker_tasks.load() == 1);
    CHECK(pool.placed_wakes() == 0);
    pool.run(2, 2, both, /*small=*/true);
    CHECK(worker_tasks.load() == 2);
    CHECK(pool.placed_wakes() == 1);
  }
}
#endif
