// A KV cache of 16-bit keys and values (--cache-type f16|bf16; src/model/transformer.h's
// KvCacheType): prefill then token-by-token decode through such a cache gives the logits of one
// ForwardSequence whose keys and values are rounded through the same type (the two paths see the
// same rounded values: they agree to float rounding), under methods with one and two key slots
// and dynamic ones; the float32 cache is the exact path as before, bit for bit; rounding moves the
// logits, BF16 more than F16; the cache takes half the bytes; the streaming cache refuses it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/logits.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::MaxAbsDiff;

constexpr int kPrompt = 24;
constexpr int kTokens = 40;

// Prefill of kPrompt tokens, then one token at a time, through a cache of `types` (capacity above
// the length, so a mix-up of the cache's stride with the widened copy's shows).
std::vector<float> CachedLogits(const Model& m, const std::string& spec, KvCacheTypes types,
                                const std::vector<int>& tokens) {
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  KvCache cache(m.config, static_cast<int64_t>(tokens.size()) + 7, types);
  const size_t V = static_cast<size_t>(m.config.vocab_size);
  std::vector<float> hidden, out(tokens.size() * V);
  model.Forward(std::span<const int>(tokens).first(kPrompt), cache, hidden);
  model.Logits(hidden.data(), kPrompt, out.data());
  for (size_t t = kPrompt; t < tokens.size(); ++t) {
    model.Forward(std::span<const int>(tokens).subspan(t, 1), cache, hidden);
    model.Logits(hidden.data(), 1, out.data() + t * V);
  }
  return out;
}

std::vector<float> SequenceLogits(const Model& m, const std::string& spec, KvCacheTypes types,
                                  const std::vector<int>& tokens) {
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  model.set_kv_types(types);
  std::vector<float> hidden;
  model.ForwardSequence(tokens, hidden);
  std::vector<float> out(tokens.size() * static_cast<size_t>(m.config.vocab_size));
  model.Logits(hidden.data(), static_cast<int64_t>(tokens.size()), out.data());
  return out;
}

class KvCacheTypesTest : public ::testing::Test {
 protected:
  KvCacheTypesTest()
      : model_(testing::RandomModel(testing::TinyConfig(), 31)),
        tokens_(testing::RandomTokens(kTokens, model_.config.vocab_size, 32)) {}
  Model model_;
  std::vector<int> tokens_;
};

constexpr KvCacheTypes kF32{};
constexpr KvCacheTypes kF16{KvCacheType::kF16, KvCacheType::kF16};
constexpr KvCacheTypes kBF16{KvCacheType::kBF16, KvCacheType::kBF16};

TEST_F(KvCacheTypesTest, DecodingThroughA16BitCacheEqualsTheRoundedSequence) {
  // direct (keys rotated once), rerope (two key slots, rotated in the kernel), dynamic-ntk
  // (raw keys, per-query frequencies), self-extend with log-n.
  for (const char* spec : {"direct", "rerope:window=8", "dynamic-ntk",
                           "self-extend:group=2,"
                           "window=8+logn"}) {
    for (const KvCacheTypes types :
         {kF16, kBF16, KvCacheTypes{KvCacheType::kF16, KvCacheType::kF32}}) {
      SCOPED_TRACE(std::string(spec) + " k " + std::string(KvCacheTypeName(types.k)) + " v " +
                   std::string(KvCacheTypeName(types.v)));
      const std::vector<float> cached = CachedLogits(model_, spec, types, tokens_);
      const std::vector<float> sequence = SequenceLogits(model_, spec, types, tokens_);
      // The same rounding of keys and values, products summed in other orders (prefill against
      // one row, GEMM against GEMV): those orders move a value by an ulp of float, which now and
      // then carries it across a rounding boundary of the 16-bit type (one element moves by a
      // 16-bit ulp, 2^-11 or 2^-8 of it). So the two agree far closer than rounding and not
      // rounding do (a key or value left unrounded, or a stale row, would give about that),
      // not to float rounding alone.
      const double rounding = MaxAbsDiff(sequence, SequenceLogits(model_, spec, kF32, tokens_));
      EXPECT_GT(rounding, 1e-4);
      EXPECT_LT(MaxAbsDiff(cached, sequence), rounding / 10);
    }
  }
}

TEST_F(KvCacheTypesTest, Float32IsTheExactPathAndRoundingMovesTheLogits) {
  const std::vector<float> exact = SequenceLogits(model_, "direct", kF32, tokens_);
  // The float32 cache as it always was: explicit types change nothing, bit for bit.
  EXPECT_EQ(CachedLogits(model_, "direct", kF32, tokens_),
            CachedLogits(model_, "direct", KvCacheTypes{}, tokens_));
  const double f16 = MaxAbsDiff(SequenceLogits(model_, "direct", kF16, tokens_), exact);
  const double bf16 = MaxAbsDiff(SequenceLogits(model_, "direct", kBF16, tokens_), exact);
  EXPECT_GT(f16, 0.0) << "F16 keys and values round";
  EXPECT_GT(bf16, 4 * f16) << "BF16 keeps 8 bits to F16's 11";
  // Relative rounding of 2^-11 (F16) and 2^-8 (BF16) on each key and value moves logits of about
  // unit size by that order, not more than 100 times it.
  EXPECT_LT(f16, 100 * 0x1p-11);
  EXPECT_LT(bf16, 100 * 0x1p-8);
}

TEST_F(KvCacheTypesTest, A16BitCacheTakesHalfTheBytes) {
  const ModelConfig& c = model_.config;
  const KvCache f32(c, 64), f16(c, 64, kF16), mixed(c, 64, {KvCacheType::kF32, KvCacheType::kBF16});
  EXPECT_EQ(f32.Bytes(), KvCache::BytesFor(c, 64));
  EXPECT_EQ(f16.Bytes(), f32.Bytes() / 2);
  EXPECT_EQ(f16.Bytes(), KvCache::BytesFor(c, 64, kF16));
  EXPECT_EQ(mixed.Bytes(), 3 * f32.Bytes() / 4);
  EXPECT_EQ(ParseKvCacheType("bf16"), KvCacheType::kBF16);
  EXPECT_FALSE(ParseKvCacheType("q8_0").has_value());
}

TEST_F(KvCacheTypesTest, TheStreamingCacheRefusesIt) {
  Transformer model(model_);
  model.SetMethod(ParseMethod("streaming:sinks=2,window=8"), kTokens);
  KvCache cache(model_.config, model.StreamingCacheCapacity(), kF16);
  std::vector<float> hidden;
  try {
    model.Forward(tokens_, cache, hidden);
    ADD_FAILURE() << "a 16-bit streaming cache ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use --cache-type f32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stretch
