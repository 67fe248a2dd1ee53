// Every training-free position method stretch runs, as specs for a model of training length L
// and head width D: the list the family tests run the engine against its double reference under
// (tests/model/method_model_test.cc, tests/io/gemma2_test.cc, gemma3_test.cc). Windows and groups
// scale with L so that a text of about 2-3 L crosses every boundary; at L = 64 they are the
// values the LLaMA tests have always used.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace stretch::testing {

// longrope's factor lists, D / 2 entries each: short 1, 1.1, 1.2, 1.3 and long 1, 2, 3, 4 over
// four equal runs of the frequencies.
inline std::string LongropeLists(int head_dim) {
  const int n = head_dim / 2;
  std::string short_f, long_f;
  for (int i = 0; i < n; ++i) {
    const int run = i * 4 / n;
    short_f += fmt::format("{}{:g}", i ? "/" : "", 1 + 0.1 * run);
    long_f += fmt::format("{}{:g}", i ? "/" : "", 1.0 + run);
  }
  return "short=" + short_f + ",long=" + long_f;
}

inline std::vector<std::string> EveryMethodSpec(int head_dim, int64_t L) {
  const auto at = [L](int at64) { return std::max<int64_t>(2, at64 * L / 64); };
  const std::string lists = LongropeLists(head_dim);
  return {"direct",
          "pi",
          "ntk",
          "ntk-fixed:factor=3",
          "yarn",
          "yarn:factor=4,mscale=1,mscale_all_dim=0.5",
          "llama3:factor=4",
          "longrope:" + lists,
          "dynamic-ntk",
          "dynamic-yarn",
          "dynamic-longrope:" + lists,
          fmt::format("rerope:window={}", at(20)),
          fmt::format("leaky-rerope:window={},k=3", at(20)),
          fmt::format("self-extend:group=3,window={}", at(16)),
          fmt::format("window:window={}", at(24)),
          fmt::format("lambda:sinks=2,window={}", at(24)),
          fmt::format("streaming:sinks=2,window={}", at(24)),
          fmt::format("blockwise:window={}", at(16)),
          fmt::format("chunked:window={}", at(24)),
          fmt::format("string:shift={},window={}", at(30), at(6)),
          fmt::format("dca:chunk={}", at(48)),
          "yarn:factor=2+logn",
          fmt::format("rerope:window={}+logn", at(20))};
}

}  // namespace stretch::testing
