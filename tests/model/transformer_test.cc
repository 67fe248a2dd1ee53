#include "src/model/transformer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "reference/llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/position/method.h"
#include "src/position/plan.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::RandomTokens;

std::vector<float> EngineLogits(const Model& m, const std::vector<int>& tokens, int64_t chunk) {
  Transformer model(m);
  model.set_prefill_chunk(chunk);
  // Capacity above the length, so that the cache's per-head stride (capacity * D) differs from
  // length * D and a mix-up of the two shows.
  KvCache cache(m.config, static_cast<int64_t>(tokens.size()) + 13);
  std::vector<float> hidden;
  model.Forward(tokens, cache, hidden);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(m.config.vocab_size));
  model.Logits(hidden.data(), static_cast<int64_t>(tokens.size()), logits.data());
  return logits;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// The engine (BLAS, tiled attention, float32) against the naive forward in double. The bound is
// relative to a plain float32 run of the same naive forward: the engine may sum in other orders,
// but must not be much less accurate than float32 arithmetic itself (STYLE.md's baseline rule).
TEST(Transformer, PrefillMatchesDoubleReference) {
  for (bool shared : {false, true}) {
    ModelConfig c = testing::TinyConfig();
    c.shared_classifier = shared;
    const Model m = testing::RandomModel(c, shared ? 11 : 12);
    const std::vector<int> tokens = RandomTokens(150, c.vocab_size, 13);
    const std::vector<float> engine = EngineLogits(m, tokens, 2048);
    const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens);
    const std::vector<float> plain = ref::LlamaForwardRef<float>(m, tokens);
    const double plain_err = MaxAbsDiff(plain, exact);
    const double engine_err = MaxAbsDiff(engine, exact);
    EXPECT_GT(plain_err, 0.0);
    // 8x: BLAS blocking and the online softmax reorder sums; a real bug errs by O(1).
    EXPECT_LE(engine_err, 8 * plain_err + 1e-6) << "plain float32 error " << plain_err;
  }
}

TEST(Transformer, ChunkedPrefillAndDecodeMatchOnePrefill) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 21);
  const std::vector<int> tokens = RandomTokens(97, c.vocab_size, 22);
  const std::vector<float> whole = EngineLogits(m, tokens, 4096);
  const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens);
  const std::vector<float> plain = ref::LlamaForwardRef<float>(m, tokens);
  const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;  // as above
  for (int64_t chunk : {1, 7, 32}) {                       // chunk 1 is token-by-token decoding
    const std::vector<float> chunked = EngineLogits(m, tokens, chunk);
    double diff = 0;
    for (size_t i = 0; i < whole.size(); ++i)
      diff = std::max(diff, double(std::abs(chunked[i] - whole[i])));
    EXPECT_LE(diff, tol) << "chunk " << chunk;
  }
}

// Rows::kLast (what generation runs): the last token's state within float rounding of kAll's last
// row (its last layer's output projection and FFN run on one row: another BLAS call shape), and the
// KV cache bit for bit the same (every layer's keys and values come from the same products), so
// the decoding that follows is bit for bit the same too. Prompts of one chunk and of several,
// plain RoPE, a method with a second key slot, and the streaming cache dropping old tokens.
TEST(Transformer, LastRowOnlyPrefillKeepsTheCacheAndTheLastState) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 61);
  const std::vector<int> tokens = RandomTokens(90, c.vocab_size, 62);
  const std::vector<int> next = {5};
  for (const char* spec : {"direct", "rerope:window=20", "streaming:sinks=2,window=24"}) {
    for (int64_t chunk : {4096, 16, 1}) {
      SCOPED_TRACE(std::string(spec) + ", chunk " + std::to_string(chunk));
      Transformer all(m), last(m);
      for (Transformer* t : {&all, &last}) {
        t->SetMethod(ParseMethod(spec), 91);
        t->set_prefill_chunk(chunk);
      }
      const int64_t streaming = all.StreamingCacheCapacity();
      const int64_t cap = streaming > 0 ? streaming : 95;  // streaming: drops old tokens on the way
      KvCache ca(c, cap), cl(c, cap);
      std::vector<float> ha, hl;
      all.Forward(tokens, ca, ha);
      last.Forward(tokens, cl, hl, Transformer::Rows::kLast);
      ASSERT_EQ(hl.size(), static_cast<size_t>(c.dim));
      ASSERT_EQ(cl.length(), ca.length());
      double diff = 0, scale = 0;
      for (int i = 0; i < c.dim; ++i) {
        const float want = ha[ha.size() - static_cast<size_t>(c.dim) + static_cast<size_t>(i)];
        diff = std::max(diff, double(std::abs(hl[static_cast<size_t>(i)] - want)));
        scale = std::max(scale, double(std::abs(want)));
      }
      // Float rounding of sums of C and F terms taken in another order: a few ulps of the row's
      // scale, while a wrong row (any other token's state) differs by O(scale).
      EXPECT_LE(diff, 1e-5 * scale) << "scale " << scale;
      // The cached positions of each kv head ((G, cap, D) per layer and key slot).
      const int G = c.n_kv_heads, D = c.head_dim();
      auto same = [&](const float* a, const float* b) {
        for (int g = 0; g < G; ++g) {
          const size_t at = static_cast<size_t>(g) * static_cast<size_t>(cap * D);
          if (std::memcmp(a + at, b + at, sizeof(float) * static_cast<size_t>(ca.length() * D)))
            return false;
        }
        return true;
      };
      for (int l = 0; l < c.n_layers; ++l) {
        for (int slot = 0; slot < ca.key_slots(l); ++slot) {
          EXPECT_TRUE(same(ca.Keys(l, slot), cl.Keys(l, slot)))
              << "keys of layer " << l << " slot " << slot;
        }
        EXPECT_TRUE(same(ca.Values(l), cl.Values(l))) << "values of layer " << l;
      }
      all.Forward(next, ca, ha);
      last.Forward(next, cl, hl, Transformer::Rows::kLast);
      EXPECT_EQ(ha, hl) << "the decode step after the prefill";
    }
  }
  Transformer model(m);
  KvCache cache(c, 8);
  std::vector<float> hidden(3);
  model.Forward({}, cache, hidden, Transformer::Rows::kLast);
  EXPECT_TRUE(hidden.empty()) << "no token: no last state";
}

TEST(Transformer, CacheOverflowIsAnErrorNotACrash) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 31);
  Transformer model(m);
  KvCache cache(c, 8);
  std::vector<float> hidden;
  const std::vector<int> tokens = RandomTokens(9, c.vocab_size, 32);
  try {
    model.Forward(tokens, cache, hidden);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capacity of 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 0);
}

TEST(Transformer, TokenOutsideVocabularyIsAnError) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 41);
  Transformer model(m);
  KvCache cache(c, 8);
  std::vector<float> hidden;
  const std::vector<int> tokens = {1, 2, c.vocab_size};
  EXPECT_THROW(model.Forward(tokens, cache, hidden), Error);
}

// SetPlan takes a plan resolved once elsewhere (PlanSweep): the same as SetMethod for a plan made
// for this model, refused for a plan made for another model's geometry.
TEST(Transformer, SetPlanEqualsSetMethodAndRefusesAnotherModelsPlan) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 51);
  const std::vector<int> tokens = {1, 5, 9, 3, 7, 2, 4, 8, 6, 1, 3, 5};
  const int64_t fed = static_cast<int64_t>(tokens.size());
  const Method rerope = ParseMethod("rerope:window=3");
  Transformer a(m), b(m);
  a.SetMethod(rerope, fed);
  b.SetPlan(MakeAttentionPlan(rerope, b.Geometry(), fed));
  std::vector<float> ha, hb;
  a.ForwardSequence(tokens, ha);
  b.ForwardSequence(tokens, hb);
  EXPECT_EQ(ha, hb);
  EXPECT_EQ(CanonicalSpec(a.plan().method), CanonicalSpec(b.plan().method));

  RopeGeometry other = b.Geometry();
  other.train_len *= 2;
  try {
    b.SetPlan(MakeAttentionPlan(rerope, other, fed));
    FAIL() << "a plan for another trained length was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("resolved for another model"), std::string::npos)
        << e.what();
  }
}

// The note on +logn over a trained log-n: given exactly where both factors multiply the logits
// beyond L, with the product the last query takes (ln(4L) / ln L squared), and nowhere else.
TEST(Transformer, DoubleLogNNoteOnlyWhereBothFactorsMultiply) {
  ModelConfig c = testing::TinyConfig();
  const int64_t L = c.seq_len;
  c.attention.log_length_scale = true;
  const RopeGeometry geo = ModelGeometry(c);
  const double f = std::log(4.0 * static_cast<double>(L)) / std::log(static_cast<double>(L));
  const std::string note =
      DoubleLogNNote(c, MakeAttentionPlan(ParseMethod("rerope+logn"), geo, 4 * L));
  EXPECT_NE(note.find(fmt::format("{:.2f} x {:.2f} = {:.2f}", f, f, f * f)), std::string::npos)
      << note;
  EXPECT_NE(note.find("at " + std::to_string(4 * L) + " tokens"), std::string::npos) << note;
  // No +logn, or no longer than L: one factor at most.
  EXPECT_EQ(DoubleLogNNote(c, MakeAttentionPlan(ParseMethod("rerope"), geo, 4 * L)), "");
  EXPECT_EQ(DoubleLogNNote(c, MakeAttentionPlan(ParseMethod("rerope+logn"), geo, L)), "");
  // A window of L under +logn: the trained factor counts the window's keys, 1 at most.
  EXPECT_EQ(
      DoubleLogNNote(
          c, MakeAttentionPlan(ParseMethod(fmt::format("window:window={}+logn", L)), geo, 4 * L)),
      "");
  // A wider window: both factors beyond 1, the trained one by the window's keys.
  const double w = std::log(2.0 * static_cast<double>(L)) / std::log(static_cast<double>(L));
  const std::string wide = DoubleLogNNote(
      c, MakeAttentionPlan(ParseMethod(fmt::format("window:window={}+logn", 2 * L)), geo, 4 * L));
  EXPECT_NE(wide.find(fmt::format("{:.2f} x {:.2f} = {:.2f}", f, w, f * w)), std::string::npos)
      << wide;
  // A model without the trained log-n: +logn is the only factor.
  c.attention.log_length_scale = false;
  EXPECT_EQ(DoubleLogNNote(c, MakeAttentionPlan(ParseMethod("rerope+logn"), geo, 4 * L)), "");
}

}  // namespace
}  // namespace stretch
