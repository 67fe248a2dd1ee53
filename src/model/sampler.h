// Choosing the next token from logits: greedy (temperature 0), or sampling from
// softmax(logits / temperature) restricted to the smallest set of most likely tokens whose
// probabilities sum to at least top_p (nucleus sampling, Holtzman et al. 2019, arXiv 1904.09751).
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/rng.h"

namespace stretch {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // 1: the whole distribution
  uint64_t seed = 42;
  // Tokens never chosen (their logits taken as -inf) while another can be: `generate
  // --ignore-eos` bans every token at which generation would end (EndOfGenerationTokens in
  // src/io/tokenizer/text_tokenizer.h), as llama.cpp's --ignore-eos does ("implies --logit-bias
  // EOS-inf", common/arg.cpp; a -inf bias on each end-of-generation token, common/common.cpp).
  std::vector<int> banned = {};
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // logits: (V); may be modified in place.
  int Sample(float* logits, int V);

 private:
  SamplerOptions options_;
  Rng rng_;
};

}  // namespace stretch
