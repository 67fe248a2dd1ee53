#include "src/core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace stretch {

Progress::Progress(std::string label, int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(fileno(stderr)) != 0) {}

Progress::~Progress() { Finish(); }

void Progress::Update(int64_t done) {
  if (!enabled_ || finished_) return;
  const double now = timer_.Seconds();
  const double every = tty_ ? 0.25 : 10.0;
  if (last_print_ >= 0 && now - last_print_ < every && done < total_) return;
  if (last_print_ < 0 && now < (tty_ ? 0.5 : 10.0)) return;  // short work stays quiet
  last_print_ = now;
  const double frac = total_ > 0 ? static_cast<double>(done) / total_ : 1.0;
  const double left = frac > 0 ? now / frac - now : 0.0;
  std::fprintf(stderr, "%s%s: %lld/%lld %s (%.1f%%), %.1f s, ~%.0f s left%s", tty_ ? "\r" : "",
               label_.c_str(), static_cast<long long>(done), static_cast<long long>(total_),
               unit_.c_str(), 100.0 * frac, now, left, tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
  printed_ = true;
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && printed_ && tty_) std::fprintf(stderr, "\n");
}

}  // namespace stretch
