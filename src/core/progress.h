// A progress line on stderr for long work: "score: 12/95 windows (12.6%), 3.4 s, ~25 s left".
// On a terminal it rewrites one line at most 4 times a second; otherwise (logs, CI) it prints a
// new line at most every 10 seconds, so that logs stay short.
#pragma once

#include <cstdint>
#include <string>

#include "src/core/timer.h"

namespace stretch {

class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit, bool enabled = true);
  ~Progress();
  void Update(int64_t done);
  void Finish();

 private:
  std::string label_, unit_;
  int64_t total_;
  bool enabled_, tty_, finished_ = false, printed_ = false;
  Timer timer_;
  double last_print_ = -1.0;
};

}  // namespace stretch
