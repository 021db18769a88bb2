// How soon a sleeping worker starts its share of a job: ptread's pool (compute/parallel.hpp)
// against a plain worker on a condition variable, side by side in one run.
//
//   pool_wake [JOBS]       (default 200 jobs a case)
//
// Each job has two tasks: the caller's computes for 2 ms, the worker's only notes when it
// began. Before each job the caller sleeps (0, 1 or 12 ms: the worker is then still awake,
// yielding, or asleep). Printed per case: jobs whose second task the worker never took (the
// caller ran both: on a scheduler that woke the worker on the busy caller's CPU, it ran too
// late), and the quartiles and maximum of how long after the job began the worker started.
#include <ptread/ptread.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr double kWorkUs = 2000;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// The baseline: one worker asleep on a condition variable; a job hands it the second task
// unless the caller, done with the first, takes it back.
class PlainWorker {
 public:
  PlainWorker() : thread_([this] { loop(); }) {}
  ~PlainWorker() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  // Runs task 0 here and task 1 on the worker, or here if the worker has not claimed it.
  template <class F>
  void run(F&& task) {
    {
      std::lock_guard<std::mutex> lock(m_);
      job_ = [&](size_t t) { task(t); };
      state_ = 1;  // posted
    }
    cv_.notify_one();
    task(0);
    std::unique_lock<std::mutex> lock(m_);
    if (state_ == 1) {  // not claimed: the caller runs it
      state_ = 0;
      lock.unlock();
      task(1);
      return;
    }
    done_cv_.wait(lock, [&] { return state_ == 0; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || state_ == 1; });
      if (stop_) return;
      state_ = 2;  // claimed
      lock.unlock();
      job_(1);
      lock.lock();
      state_ = 0;
      done_cv_.notify_one();
    }
  }
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::function<void(size_t)> job_;
  int state_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

struct Stats {
  int serial = 0;
  std::vector<double> start_us;
};

template <class Run>
Stats measure(int jobs, int gap_us, Run&& run) {
  Stats s;
  for (int i = 0; i < jobs; ++i) {
    if (gap_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    const auto t0 = clock_type::now();
    const auto caller = std::this_thread::get_id();
    std::thread::id ran_on[2];
    double began = 0;
    run([&](size_t t) {
      ran_on[t] = std::this_thread::get_id();
      if (t == 1) began = us_since(t0);
      if (t == 0) {
        while (us_since(t0) < kWorkUs) {
        }
      }
    });
    if (ran_on[1] == caller) {
      ++s.serial;
    } else {
      s.start_us.push_back(began);
    }
  }
  std::sort(s.start_us.begin(), s.start_us.end());
  return s;
}

void print(const char* who, int gap_us, int jobs, const Stats& s) {
  auto q = [&](double f) {
    return s.start_us.empty() ? -1.0 : s.start_us[static_cast<size_t>(f * static_cast<double>(s.start_us.size() - 1))];
  };
  std::printf("%-10s %7d %9d/%d %8.0f %8.0f %8.0f %8.0f\n", who, gap_us, s.serial, jobs, q(0.25), q(0.5), q(0.75),
              q(1.0));
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 200;
  std::printf("%-10s %7s %11s %8s %8s %8s %8s   (us after the job began)\n", "worker", "gap_us", "caller_ran",
              "q1", "median", "q3", "max");
  PlainWorker plain;
  for (int gap_us : {0, 1000, 12000}) {
    // The two alternate by halves, so that a slow minute of the machine falls on both.
    Stats a = measure(jobs / 2, gap_us, [&](auto&& f) { plain.run(f); });
    Stats b = measure(jobs / 2, gap_us, [&](auto&& f) { ptread::detail::parallel_for(2, 2, f); });
    Stats a2 = measure(jobs - jobs / 2, gap_us, [&](auto&& f) { plain.run(f); });
    Stats b2 = measure(jobs - jobs / 2, gap_us, [&](auto&& f) { ptread::detail::parallel_for(2, 2, f); });
    for (Stats* s : {&a, &b}) {
      Stats& more = s == &a ? a2 : b2;
      s->serial += more.serial;
      s->start_us.insert(s->start_us.end(), more.start_us.begin(), more.start_us.end());
      std::sort(s->start_us.begin(), s->start_us.end());
    }
    print("plain", gap_us, jobs, a);
    print("ptread", gap_us, jobs, b);
  }
  return 0;
}
