// The real stories260K model on 2,048 tokens of real text (4x its trained length) under every
// position method: the engine's float32 mean loss against the naive double forward told the
// method pair by pair (reference/method_llama.h), to 1e-4 nats.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/method_llama.h"
#include "src/eval/score.h"
#include "src/io/llama2c.h"
#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/kernels/ops.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

constexpr const char* kModel = "models/stories260K/stories260K.bin";
constexpr const char* kTok = "models/stories260K/tok512.bin";
constexpr const char* kStories = "data/tinystories";
constexpr int kWindow = 2048;

// Mean next-token loss of logits (n, V) against tokens[1..n-1] (position p predicts p + 1).
template <typename Real>
double MeanLoss(const std::vector<Real>& logits, const std::vector<int>& tokens, int V) {
  double sum = 0;
  const size_t n = tokens.size();
  for (size_t p = 0; p + 1 < n; ++p) {
    const Real* row = logits.data() + p * static_cast<size_t>(V);
    double mx = -INFINITY;
    for (int v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    sum += mx + std::log(z) - static_cast<double>(row[tokens[p + 1]]);
  }
  return sum / static_cast<double>(n - 1);
}

// The engine's mean loss on the first kWindow tokens of TinyStories under each spec, against the
// double forward told the method pair by pair, to 1e-4 nats. Three tests of about equal cost, so
// that CI's parallel test runs share them.
void ExpectFloatEngineMatchesDoubleForward(const std::vector<std::string>& specs) {
  STRETCH_REQUIRE_SHARED(kModel);
  STRETCH_REQUIRE_SHARED(kStories);
  const Model m = LoadLlama2c(testing::SharedPath(kModel));
  const Tokenizer tok = Tokenizer::LoadLlama2c(testing::SharedPath(kTok));
  const TextStream text = EncodeTextPath(testing::SharedPath(kStories), tok);
  std::vector<int> tokens(kWindow);
  tokens[0] = kScoreBos;
  std::copy(text.tokens.begin(), text.tokens.begin() + kWindow - 1, tokens.begin() + 1);
  const int V = m.config.vocab_size;
  const RopeGeometry geo{m.config.seq_len, m.config.head_dim(), m.config.rope_base};
  for (const std::string& spec : specs) {
    Transformer model(m);
    model.SetMethod(ParseMethod(spec), kWindow);
    std::vector<float> hidden;
    model.ForwardSequence(tokens, hidden);
    std::vector<float> logits(static_cast<size_t>(kWindow) * V);
    model.Logits(hidden.data(), kWindow, logits.data());
    const double engine = MeanLoss(logits, tokens, V);

    const AttentionPlan plan = MakeAttentionPlan(ParseMethod(spec), geo, kWindow);
    const double exact =
        MeanLoss(ref::LlamaForwardRef<double>(m, tokens, ref::MethodPositionRef(plan)), tokens, V);
    EXPECT_NEAR(engine, exact, 1e-4) << spec;
    std::printf("  %-40s engine %.6f  double %.6f  diff %.2e\n", spec.c_str(), engine, exact,
                engine - exact);
  }
}

#if STRETCH_ASAN
// The double forward takes ~10x longer under ASan: one dynamic method and one relative map
// (the random-model tests in tests/model cover every method under ASan).
TEST(StoriesMethods, FloatEngineMatchesDoubleForwardTo1e4Nats) {
  ExpectFloatEngineMatchesDoubleForward({"dynamic-yarn", "leaky-rerope:window=256,k=4"});
}
#else
TEST(StoriesMethods, FloatEngineMatchesDoubleForwardTo1e4NatsFrequencies) {
  ExpectFloatEngineMatchesDoubleForward(
      {"direct", "pi", "ntk", "ntk-fixed", "yarn", "yarn+logn", "llama3"});
}
TEST(StoriesMethods, FloatEngineMatchesDoubleForwardTo1e4NatsDynamicAndMaps) {
  ExpectFloatEngineMatchesDoubleForward(
      {"longrope:short=1/1/1/1,long=1/1.5/3/4", "dynamic-ntk", "dynamic-yarn",
       "dynamic-longrope:short=1/1/1/1,long=1/1.5/3/4", "rerope:window=256",
       "leaky-rerope:window=256,k=4", "self-extend:group=8,window=128"});
}
TEST(StoriesMethods, FloatEngineMatchesDoubleForwardTo1e4NatsMasksAndChunks) {
  ExpectFloatEngineMatchesDoubleForward({"window", "lambda:sinks=4,window=384",
                                         "streaming:sinks=4,window=384", "blockwise", "string",
                                         "dca"});
}
#endif

}  // namespace
}  // namespace stretch
