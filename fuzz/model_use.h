// Runs a model read from fuzzed bytes as the commands do (a few tokens through the Transformer
// with a KV cache, then the logits), so that a configuration the reader accepted but the engine
// cannot run (a head size no kernel has, a layout that breaks a check) shows up as a finding:
// each reader must refuse, by name, what the engine cannot run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/model/config.h"
#include "src/model/transformer.h"
#include "src/position/method.h"

namespace stretch::fuzz {

// Models up to this many parameters are run (the seeds have a few thousand); larger ones would
// only slow the fuzzer down, their reading is what matters.
inline constexpr int64_t kMaxRunParameters = int64_t{1} << 20;

inline void UseModel(const Model& m) {
  const ModelConfig& c = m.config;
  if (c.ParameterCount() > kMaxRunParameters || c.vocab_size < 1) return;
  const int64_t T = std::min<int64_t>(4, std::max<int64_t>(c.seq_len, 1));
  std::vector<int> tokens;
  for (int64_t t = 0; t < T; ++t) tokens.push_back(static_cast<int>(t % c.vocab_size));
  Transformer model(m);
  model.SetMethod(Method{}, T + 1);
  KvCache cache(c, T + 1);
  std::vector<float> hidden;
  model.Forward(tokens, cache, hidden);
  std::vector<float> logits(static_cast<size_t>(T) * static_cast<size_t>(c.vocab_size));
  model.Logits(hidden.data(), T, logits.data());
  const int last = tokens.back();
  model.Forward(std::span<const int>(&last, 1), cache, hidden);
}

}  // namespace stretch::fuzz
