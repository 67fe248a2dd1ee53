// The logits a model gives for a token sequence under a method spec, every position (T x V), for
// tests that compare models loaded from different files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/transformer.h"
#include "src/position/method.h"

namespace stretch::testing {

inline std::vector<float> Logits(const Model& m, const std::string& spec,
                                 const std::vector<int>& tokens) {
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  KvCache cache(m.config, static_cast<int64_t>(tokens.size()));
  std::vector<float> hidden;
  model.Forward(tokens, cache, hidden);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(m.config.vocab_size));
  model.Logits(hidden.data(), static_cast<int64_t>(tokens.size()), logits.data());
  return logits;
}

}  // namespace stretch::testing
