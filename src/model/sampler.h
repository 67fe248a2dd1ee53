// Choosing the next token from logits: greedy (temperature 0), or sampling from
// softmax(logits / temperature) restricted to the smallest set of most likely tokens whose
// probabilities sum to at least top_p (nucleus sampling, Holtzman et al. 2019, arXiv 1904.09751).
#pragma once

#include <cstdint>

#include "src/core/rng.h"

namespace stretch {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // 1: the whole distribution
  uint64_t seed = 42;
  // A token never chosen (its logit taken as -inf) while another can be, or -1: `generate
  // --ignore-eos` bans the end-of-text token so, as llama.cpp's --ignore-eos does ("implies
  // --logit-bias EOS-inf", common/arg.cpp; llama.cpp bans every end-of-generation token of the
  // vocabulary, such as <|eot_id|>, where stretch knows the one EOS).
  int banned = -1;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}
  // logits: (V); may be modified in place.
  int Sample(float* logits, int V);

 private:
  SamplerOptions options_;
  Rng rng_;
};

}  // namespace stretch
