#include "src/core/timer.h"

#include <cstdio>
#include <cstring>

namespace stretch {
namespace {
int64_t ReadStatusKb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int64_t kb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0) {
      long long v = 0;
      if (std::sscanf(line + n, " %lld", &v) == 1) kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb;
}
}  // namespace

int64_t PeakRssBytes() { return ReadStatusKb("VmHWM:") * 1024; }
int64_t CurrentRssBytes() { return ReadStatusKb("VmRSS:") * 1024; }

}  // namespace stretch
