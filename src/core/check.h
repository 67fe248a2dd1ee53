// Always-on checks for programming errors (a broken invariant inside stretch, never bad input).
// Unlike assert, they stay in Release builds; a failure names file and line and aborts.
// Bad input (files, flags, config values) is reported with stretch::Error instead (error.h).
#pragma once

#include <fmt/format.h>

#include <string>

namespace stretch::detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message = {});
}  // namespace stretch::detail

// STRETCH_CHECK(cond) or STRETCH_CHECK(cond, "fmt {}", args...)
#define STRETCH_CHECK(cond, ...)                                                                 \
  do {                                                                                           \
    if (!(cond)) [[unlikely]] {                                                                  \
      ::stretch::detail::CheckFailed(__FILE__, __LINE__,                                         \
                                     #cond __VA_OPT__(, ) __VA_OPT__(fmt::format(__VA_ARGS__))); \
    }                                                                                            \
  } while (0)
