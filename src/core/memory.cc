#include "src/core/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string_view>

namespace stretch {
namespace {

// The first whole number in a file (cgroup's memory.max holds "max" when there is no limit).
std::optional<int64_t> ReadNumber(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<int64_t> MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> AvailableMemoryBytes() {
  std::optional<int64_t> avail = MemAvailable();
  const std::optional<int64_t> limit = ReadNumber("/sys/fs/cgroup/memory.max");
  const std::optional<int64_t> used = ReadNumber("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const int64_t left = std::max<int64_t>(*limit - *used, 0);
    avail = avail ? std::min(*avail, left) : left;
  }
  if (const char* cap = std::getenv("STRETCH_MEMORY_LIMIT")) {
    const std::string_view text(cap);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && end == text.data() + text.size() && v >= 0) {
      avail = avail ? std::min(*avail, v) : v;
    }
  }
  return avail;
}

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace stretch
