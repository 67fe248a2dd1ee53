// Per-layer RoPE and the layouts of current models (Gemma 3's local/global layers with their own
// bases and linear scaling, Llama 4's chunked RoPE layers and tuned NoPE layers) set on
// stories260K: the engine, prefill and token-by-token decoding, against the naive double forward
// of reference/layout_llama.h, which takes each layer's base, interpolation, window or chunks and
// temperature from their definitions; and that reference with one setting dropped is far off.
// (Random models with head dims 64 and 128: tests/model/method_model_test.cc; trained models:
// tests/train/inference_model_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "reference/layout_llama.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/logits.h"
#include "tests/testing/stories.h"

namespace stretch {
namespace {

using testing::MaxAbsDiff;

// Logits of every position: the first `prompt` tokens in one call, then one token at a time.
std::vector<float> EngineLogits(const Model& m, const std::string& spec,
                                const std::vector<int>& tokens, int prompt) {
  const int V = m.config.vocab_size;
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  KvCache cache(m.config, static_cast<int64_t>(tokens.size()));
  std::vector<float> logits(tokens.size() * static_cast<size_t>(V)), hidden;
  model.Forward(std::span<const int>(tokens.data(), static_cast<size_t>(prompt)), cache, hidden);
  model.Logits(hidden.data(), prompt, logits.data());
  for (size_t t = static_cast<size_t>(prompt); t < tokens.size(); ++t) {
    model.Forward(std::span<const int>(&tokens[t], 1), cache, hidden);
    model.Logits(hidden.data(), 1, logits.data() + t * V);
  }
  return logits;
}

TEST(LayerRope, StoriesLayoutsMatchTheReference) {
  STRETCH_REQUIRE_SHARED(testing::kStoriesModel);
  STRETCH_REQUIRE_SHARED(testing::kStoriesText);
  const testing::Stories stories = testing::LoadStories();
  const Model& base = stories.model;
  constexpr int kTokens = 300;
  const std::vector<int> tokens = stories.Tokens(kTokens);
  ASSERT_EQ(base.config.n_layers, 5);
  // Gemma 3's pattern on 5 layers: local windows of 64 at base 2,000, the last layer global at
  // the model's base with a linear scaling of 2, taking the method; Llama 4's: chunks of 64 and
  // a tuned NoPE layer (floor 32, scale 0.2, so that the temperature grows inside 300 tokens).
  const LayerLayout local{.window = 64, .rope_base = 2000.0};
  const LayerLayout chunked{.chunk = 64};
  struct Case {
    const char* name;
    std::vector<LayerLayout> layers;
    const char* spec;
  };
  const std::vector<Case> cases = {
      {"gemma3", {local, local, local, local, LayerLayout{.rope_pi = 2.0}}, "ntk:factor=2"},
      {"llama4",
       {chunked, chunked, chunked, LayerLayout{.position = false, .temperature = true}, chunked},
       "direct"},
  };
  for (const Case& c : cases) {
    Model m = base;
    m.config.attention.layers = c.layers;
    m.config.attention.temperature_floor = 32.0;
    m.config.attention.temperature_scale = 0.2;
    const std::vector<double> exact =
        ref::LayoutForwardRef<double>(m.config, m.weights, c.spec, tokens);
    const std::vector<float> plain =
        ref::LayoutForwardRef<float>(m.config, m.weights, c.spec, tokens);
    // As tests/model/method_model_test.cc: within 8x a plain float32 forward's error (BLAS
    // blocking and the online softmax reorder sums); a wrong base, mask or factor errs by O(0.01-1).
    const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;
    const std::vector<float> got = EngineLogits(m, c.spec, tokens, 100);
    EXPECT_LE(MaxAbsDiff(got, exact), tol) << c.name;
    std::printf("  stories260K %-7s %s, %d tokens: max |engine - double| %.2e (budget %.2e)\n",
                c.name, c.spec, kTokens, MaxAbsDiff(got, exact), tol);
    ModelConfig dropped = m.config;
    for (LayerLayout& l : dropped.attention.layers) {
      l.rope_base = l.rope_pi = 0.0;
      std::swap(l.chunk, l.window);
      l.temperature = false;
    }
    const double off =
        MaxAbsDiff(got, ref::LayoutForwardRef<double>(dropped, m.weights, c.spec, tokens));
    EXPECT_GT(off, 10 * tol) << c.name;
    std::printf("  %-19s the reference without its per-layer settings: %.2e\n", c.name, off);
  }
}

}  // namespace
}  // namespace stretch
