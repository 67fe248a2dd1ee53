// The logits a model gives for a token sequence under a method spec, every position (T x V), for
// tests that compare models loaded from different files; and the largest difference of two.
#pragma once

#include <algorithm>
#include <cmath>
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

// max_i |a_i - b_i| in double, over two logit vectors of any number types.
template <typename A, typename B>
double MaxAbsDiff(const std::vector<A>& a, const std::vector<B>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

}  // namespace stretch::testing
