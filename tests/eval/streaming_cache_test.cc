// The streaming cache (StreamingLLM, method `streaming`): decoding through a cache that keeps the
// sinks and the last window, dropping the oldest tokens and re-rotating the kept keys as it goes,
// gives at every step the logits of the naive double forward told StreamingLLM's cache positions
// pair by pair (reference/position.h), on random models with head dims 64 and 128 and on
// stories260K; and the cache never grows past its capacity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "reference/method_llama.h"
#include "src/core/error.h"
#include "src/io/llama2c.h"
#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/logits.h"
#include "tests/testing/random_model.h"
#include "tests/testing/stories.h"

namespace stretch {
namespace {

using testing::MaxAbsDiff;

// Logits of every position: the first `prompt` tokens in one Forward call (in chunks of
// `chunk`), then the others one at a time, through a cache of the streaming capacity.
std::vector<float> StreamedLogits(const Model& m, const std::string& spec,
                                  const std::vector<int>& tokens, int prompt, int64_t chunk,
                                  int64_t* drops = nullptr) {
  const int V = m.config.vocab_size;
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  model.set_prefill_chunk(chunk);
  const int64_t capacity = model.StreamingCacheCapacity();
  EXPECT_GT(capacity, 0) << spec;
  KvCache cache(m.config, capacity);
  const int64_t bytes = cache.Bytes();
  std::vector<float> logits(tokens.size() * static_cast<size_t>(V)), hidden;
  model.Forward(std::span<const int>(tokens.data(), static_cast<size_t>(prompt)), cache, hidden);
  model.Logits(hidden.data(), prompt, logits.data());
  int64_t dropped = 0, last = cache.length();
  for (size_t t = static_cast<size_t>(prompt); t < tokens.size(); ++t) {
    model.Forward(std::span<const int>(&tokens[t], 1), cache, hidden);
    model.Logits(hidden.data(), 1, logits.data() + t * V);
    EXPECT_LE(cache.length(), capacity);
    if (cache.length() < last) ++dropped;
    last = cache.length();
  }
  EXPECT_EQ(cache.Bytes(), bytes);  // nothing grows
  if (drops != nullptr) *drops = dropped;
  return logits;
}

ModelConfig HeadDimConfig(int head_dim) {
  ModelConfig c = testing::TinyConfig();
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.dim = 2 * head_dim;
  c.hidden_dim = 96;
  c.vocab_size = 48;
  c.seq_len = 32;
  return c;
}

// The reference with the streaming spec's positions replaced by `rel` (a wrong definition).
std::vector<double> PerturbedReference(const Model& m, const std::vector<int>& tokens,
                                       const AttentionPlan& plan,
                                       std::function<double(int64_t, int64_t)> rel) {
  ref::PositionRef pos = ref::MethodPositionRef(plan);
  pos.rel_pos = std::move(rel);
  return ref::LlamaForwardRef<double>(m, tokens, pos);
}

TEST(StreamingCache, DecodingMatchesTheReferenceAtEveryStep) {
  constexpr int kTokens = 120, kSinks = 4, kWindow = 16;
  const std::string spec = "streaming:sinks=4,window=16";
  for (int D : {64, 128}) {
    const ModelConfig c = HeadDimConfig(D);
    const Model m = testing::RandomModel(c, 80 + static_cast<uint64_t>(D));
    const std::vector<int> tokens = testing::RandomTokens(kTokens, c.vocab_size, 81);
    const AttentionPlan plan = MakeAttentionPlan(
        ParseMethod(spec), RopeGeometry{c.seq_len, c.head_dim(), c.rope_base}, kTokens);
    const ref::PositionRef pos = ref::MethodPositionRef(plan);
    const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, pos);
    const std::vector<float> plain = ref::LlamaForwardRef<float>(m, tokens, pos);
    // As tests/model/method_model_test.cc: within 8x a plain float32 forward's error (BLAS
    // blocking and the online softmax reorder sums; each kept key is rotated once more, by a
    // float rotation, when the cache drops tokens); a wrong position errs by O(0.01-1).
    const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;
    struct Path {
      int prompt;
      int64_t chunk;
    };
    for (const Path path : {Path{40, 4096}, Path{40, 7}, Path{1, 1}, Path{kTokens - 1, 5}}) {
      SCOPED_TRACE(::testing::Message()
                   << "D " << D << " prompt " << path.prompt << " chunk " << path.chunk);
      int64_t drops = 0;
      const std::vector<float> got = StreamedLogits(m, spec, tokens, path.prompt, path.chunk,
                                                    path.prompt < kTokens - 1 ? &drops : nullptr);
      EXPECT_LE(MaxAbsDiff(got, exact), tol);
      if (path.prompt < kTokens - 1) {
        EXPECT_GE(drops, 4);  // the cache really dropped tokens
      }
    }

    // Teeth: the positions of a Lambda mask without the cache's numbering (sinks at their
    // distance in the text, or at the window's edge as LM-Infinite), or a query slot one off,
    // give other logits.
    const std::vector<float> got = StreamedLogits(m, spec, tokens, 40, 4096);
    const double text_distance = MaxAbsDiff(
        got, PerturbedReference(m, tokens, plan,
                                [](int64_t i, int64_t j) { return static_cast<double>(i - j); }));
    const double clamped =
        MaxAbsDiff(got, PerturbedReference(m, tokens, plan, [](int64_t i, int64_t j) {
                     return static_cast<double>(std::min<int64_t>(i - j, kWindow));
                   }));
    const double one_off =
        MaxAbsDiff(got, PerturbedReference(m, tokens, plan, [&](int64_t i, int64_t j) {
                     const double right = ref::MethodRelPos(plan.method, i, j);
                     return i - j >= kWindow && j < kSinks ? right + 1 : right;
                   }));
    EXPECT_GT(text_distance, 20 * tol);
    EXPECT_GT(clamped, 20 * tol);
    EXPECT_GT(one_off, 20 * tol);
  }
}

TEST(StreamingCache, StoriesDecodingMatchesTheReference) {
  STRETCH_REQUIRE_SHARED(testing::kStoriesModel);
  STRETCH_REQUIRE_SHARED(testing::kStoriesText);
  const testing::Stories stories = testing::LoadStories();
  const Model& m = stories.model;
  constexpr int kTokens = 320;
  const std::vector<int> tokens = stories.Tokens(kTokens);
  const std::string spec = "streaming:sinks=4,window=60";
  const AttentionPlan plan = MakeAttentionPlan(
      ParseMethod(spec), RopeGeometry{m.config.seq_len, m.config.head_dim(), m.config.rope_base},
      kTokens);
  const ref::PositionRef pos = ref::MethodPositionRef(plan);
  const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, pos);
  const std::vector<float> plain = ref::LlamaForwardRef<float>(m, tokens, pos);
  const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;  // as above
  int64_t drops = 0;
  const std::vector<float> got = StreamedLogits(m, spec, tokens, 100, 2048, &drops);
  EXPECT_LE(MaxAbsDiff(got, exact), tol);
  EXPECT_GE(drops, 3);
  std::printf(
      "  stories260K, %d tokens, %s: max |engine - double| %.2e (budget %.2e), %lld drops\n",
      kTokens, spec.c_str(), MaxAbsDiff(got, exact), tol, static_cast<long long>(drops));
}

TEST(StreamingCache, NeedsRoomAndThePlainLayout) {
  const ModelConfig c = HeadDimConfig(64);
  const Model m = testing::RandomModel(c, 90);
  Transformer model(m);
  model.SetMethod(ParseMethod("streaming:sinks=2,window=8"), 100);
  EXPECT_EQ(model.StreamingCacheCapacity(), 2 + 2 * 8 - 1);
  KvCache small(c, 9);  // sinks + window - 1: no room for a new token
  std::vector<float> hidden;
  const std::vector<int> tokens = testing::RandomTokens(20, c.vocab_size, 91);
  try {
    model.Forward(tokens, small, hidden);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capacity of at least 10"), std::string::npos) << e.what();
  }
  KvCache enough(c, 10);  // one free position: it drops tokens before every new one
  model.Forward(tokens, enough, hidden);
  EXPECT_EQ(enough.length(), 10);

  ModelConfig nope = c;
  nope.attention.position = LayerPosition::kNone;
  const Model n = testing::RandomModel(nope, 92);
  Transformer nope_model(n);
  try {
    nope_model.SetMethod(ParseMethod("streaming"), 100);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("streaming cache"), std::string::npos) << e.what();
  }
  // Its positions are the cache's: frequency scaling and log-n are refused by name.
  const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
  for (const char* spec : {"streaming+logn"}) {
    try {
      MakeAttentionPlan(ParseMethod(spec), geo, 100);
      FAIL() << spec;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("without frequency scaling or +logn"), std::string::npos)
          << e.what();
    }
  }
  Method yarn_streaming = ParseMethod("streaming");
  yarn_streaming.rope.scaling = RopeScaling::kYarn;
  EXPECT_THROW(MakeAttentionPlan(yarn_streaming, geo, 100), Error);
}

}  // namespace
}  // namespace stretch
