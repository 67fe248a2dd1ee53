// Errors caused by input from outside (a file, a flag, a config value). The message names the
// object, what was found and what was expected, e.g.
//   "stories.bin: n_kv_heads=3 does not divide n_heads=8".
// Library code throws stretch::Error; only the CLI turns it into a message and an exit code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace stretch {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace stretch
