// ptread (the tool) — the progress line of `export` and `convert`.
//
// Shown on stderr only when stderr is a terminal and the data to write is at least
// kProgressMinBytes (64 MiB; the environment variable PTREAD_PROGRESS_MIN_BYTES overrides
// it, for tests): one line rewritten with '\r', at most ten times a second, with the bytes
// written and the total, the rate and the time left; finish() ends it with a newline.
// Quiet otherwise, so pipes and logs get no control characters.
#pragma once

#include "ptread/config.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#if PTREAD_POSIX
#include <unistd.h>
#endif

namespace ptread_cli {

constexpr uint64_t kProgressMinBytes = uint64_t{64} << 20;

// "1.5 GiB"; "512 B" below 1 KiB.
inline std::string human_bytes(uint64_t n) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n) / 1024.0;
  size_t u = 0;
  while (v >= 1023.95 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

class ProgressLine {
 public:
  ProgressLine() : min_bytes_(min_bytes()), start_(Clock::now()), last_(start_) {
#if PTREAD_POSIX
    terminal_ = ::isatty(2) == 1;
#endif
  }

  // The writers' progress callback.
  void update(uint64_t done, uint64_t total) {
    if (!terminal_ || total < min_bytes_ || finished_) return;
    const Clock::time_point now = Clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;  // bytes per second
    std::string line = "\r" + human_bytes(done) + " / " + human_bytes(total);
    char buf[96];
    std::snprintf(buf, sizeof buf, " (%d%%), %.1f MiB/s, ",
                  total ? static_cast<int>(static_cast<double>(done) * 100.0 / static_cast<double>(total)) : 100,
                  rate / (1024.0 * 1024.0));
    line += buf;
    line += done >= total ? "done" : rate > 0 ? duration(static_cast<double>(total - done) / rate) + " left" : "--:-- left";
    const size_t width = line.size();
    if (width < width_) line.append(width_ - width, ' ');  // cover a longer earlier line
    width_ = width;
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    shown_ = true;
    finished_ = done >= total;
  }

  // Ends the line, if one was shown; call before printing anything else on stderr.
  void finish() {
    if (shown_) std::fputc('\n', stderr);
    shown_ = false;
    finished_ = true;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static uint64_t min_bytes() {
    const char* env = std::getenv("PTREAD_PROGRESS_MIN_BYTES");
    if (env == nullptr || *env == '\0') return kProgressMinBytes;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    return *end == '\0' ? static_cast<uint64_t>(v) : kProgressMinBytes;
  }

  // "0:42", "12:05", "3:12:05".
  static std::string duration(double seconds) {
    const auto s = static_cast<unsigned long long>(seconds + 0.5);
    char buf[48];
    if (s >= 3600) {
      std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", s / 3600, s / 60 % 60, s % 60);
    } else {
      std::snprintf(buf, sizeof buf, "%llu:%02llu", s / 60, s % 60);
    }
    return buf;
  }

  bool terminal_ = false;
  uint64_t min_bytes_;
  Clock::time_point start_, last_;
  size_t width_ = 0;
  bool shown_ = false, finished_ = false;
};

}  // namespace ptread_cli
