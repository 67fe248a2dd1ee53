// Paths into ../shared (real models and corpora). Tests that need them skip when they are absent.
#pragma once

#include <filesystem>
#include <string>

namespace stretch::testing {

inline std::string SharedPath(const std::string& relative) {
  return std::string(STRETCH_SOURCE_DIR) + "/../shared/" + relative;
}
inline bool SharedExists(const std::string& relative) {
  return std::filesystem::exists(SharedPath(relative));
}

}  // namespace stretch::testing

// Skips the current test when the file at an absolute `path` is missing.
#define STRETCH_SKIP_IF_MISSING(path)                                              \
  do {                                                                             \
    if (!std::filesystem::exists(path)) {                                          \
      GTEST_SKIP() << "../shared missing: " << (path)                              \
                   << ": this test needs the project's shared models and corpora"; \
    }                                                                              \
  } while (0)

// Skips the current test with a message naming the missing file (relative to ../shared).
#define STRETCH_REQUIRE_SHARED(relative)                                           \
  do {                                                                             \
    if (!::stretch::testing::SharedExists(relative)) {                             \
      GTEST_SKIP() << "../shared is missing " << (relative)                        \
                   << ": this test needs the project's shared models and corpora"; \
    }                                                                              \
  } while (0)
