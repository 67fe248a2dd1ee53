// Wall-clock timing and process memory, for progress lines and reports.
#pragma once

#include <chrono>
#include <cstdint>

namespace stretch {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Peak resident set size of this process so far, in bytes (VmHWM from /proc/self/status; 0 when
// unavailable).
int64_t PeakRssBytes();
// Current resident set size in bytes (VmRSS).
int64_t CurrentRssBytes();

}  // namespace stretch
