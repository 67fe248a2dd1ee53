#include "src/core/check.h"

#include <cstdio>
#include <cstdlib>

namespace stretch::detail {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "%s:%d: internal check failed: %s%s%s\n", file, line, condition,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace stretch::detail
