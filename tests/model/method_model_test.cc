// The whole model under every position method: the engine (float32, tiled kernel, KV cache or
// layer-major sequence forward) against the naive double forward told the method pair by pair,
// and token-by-token decoding against one prefill.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "reference/method_llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

constexpr int kTokens = 150;  // fed length L' with TinyConfig's L = 64: s ~ 2.3

using testing::RandomTokens;

// Head dim 8 (TinyConfig: dim 32, 4 heads): longrope lists have 4 entries.
std::vector<std::string> Specs() {
  return {"direct",
          "pi",
          "ntk",
          "ntk-fixed:factor=3",
          "yarn",
          "yarn:factor=4,mscale=1,mscale_all_dim=0.5",
          "llama3:factor=4",
          "longrope:short=1/1.1/1.2/1.3,long=1/2/3/4",
          "dynamic-ntk",
          "dynamic-yarn",
          "dynamic-longrope:short=1/1.1/1.2/1.3,long=1/2/3/4",
          "rerope:window=20",
          "leaky-rerope:window=20,k=3",
          "self-extend:group=3,window=16",
          "window:window=24",
          "lambda:sinks=2,window=24",
          "streaming:sinks=2,window=24",
          "blockwise:window=16",
          "string:shift=30,window=6",
          "dca:chunk=48",
          "yarn:factor=2+logn",
          "rerope:window=20+logn"};
}

enum class Path { kPrefill, kChunks7, kDecode, kSequence };

std::vector<float> EngineLogits(const Model& m, const std::string& spec,
                                const std::vector<int>& tokens, Path path) {
  Transformer model(m);
  model.SetMethod(ParseMethod(spec), static_cast<int64_t>(tokens.size()));
  std::vector<float> hidden;
  if (path == Path::kSequence) {
    model.set_prefill_chunk(40);  // several chunks per layer
    model.ForwardSequence(tokens, hidden);
  } else {
    model.set_prefill_chunk(path == Path::kPrefill ? 4096 : path == Path::kChunks7 ? 7 : 1);
    KvCache cache(m.config, static_cast<int64_t>(tokens.size()) + 5);
    model.Forward(tokens, cache, hidden);
  }
  std::vector<float> logits(tokens.size() * static_cast<size_t>(m.config.vocab_size));
  model.Logits(hidden.data(), static_cast<int64_t>(tokens.size()), logits.data());
  return logits;
}

template <typename A, typename B>
double MaxAbsDiff(const std::vector<A>& a, const std::vector<B>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

TEST(MethodModel, EveryMethodMatchesTheDoubleForwardInEveryPath) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 51);
  const std::vector<int> tokens = RandomTokens(kTokens, c.vocab_size, 52);
  const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
  for (const std::string& spec : Specs()) {
    const AttentionPlan plan = MakeAttentionPlan(ParseMethod(spec), geo, kTokens);
    const ref::PositionRef pos = ref::MethodPositionRef(plan);
    const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, pos);
    const std::vector<float> plain = ref::LlamaForwardRef<float>(m, tokens, pos);
    // As tests/model/transformer_test.cc: within 8x a plain float32 forward's error (BLAS
    // blocking and the online softmax reorder sums); a wrong position or mask errs by O(1).
    const double tol = 8 * MaxAbsDiff(plain, exact) + 1e-6;
    for (Path path : {Path::kPrefill, Path::kChunks7, Path::kDecode, Path::kSequence}) {
      const std::vector<float> got = EngineLogits(m, spec, tokens, path);
      EXPECT_LE(MaxAbsDiff(got, exact), tol) << spec << " path " << static_cast<int>(path);
    }
  }
}

TEST(MethodModel, LongRopeSwitchesPerCallOrPerPositionAsDefined) {
  // Locally static (longrope: the long set for every query of a call longer than orig) and per
  // position (dynamic-longrope: query i's set by i + 1, every key re-rotated with it) are two
  // definitions: the engine's dynamic-longrope matches its own reference and not the other's, and
  // not a reference that switches one position early. Head dims 8, 64 and 128.
  for (const int D : {8, 64, 128}) {
    SCOPED_TRACE(::testing::Message() << "head dim " << D);
    ModelConfig c = testing::TinyConfig();
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.dim = 2 * D;
    const Model m = testing::RandomModel(c, 55 + static_cast<uint64_t>(D));
    const int n = D == 8 ? kTokens : 100;
    const std::vector<int> tokens = RandomTokens(n, c.vocab_size, 56);
    const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
    std::string shorts, longs;
    for (int t = 0; t < D / 2; ++t) {
      shorts += fmt::format("{}{}", t ? "/" : "", 1.0 + 0.3 * t / (D / 2));
      longs += fmt::format("{}{}", t ? "/" : "", 1.0 + 3.0 * t / (D / 2));
    }
    const std::string lists = "short=" + shorts + ",long=" + longs;
    const AttentionPlan dyn = MakeAttentionPlan(ParseMethod("dynamic-longrope:" + lists), geo, n);
    const AttentionPlan stat = MakeAttentionPlan(ParseMethod("longrope:" + lists), geo, n);
    const ref::PositionRef own = ref::MethodPositionRef(dyn);
    const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, own);
    const double tol = 8 * MaxAbsDiff(ref::LlamaForwardRef<float>(m, tokens, own), exact) + 1e-6;
    ref::PositionRef early = own;
    early.thetas_at = [&](int64_t i) { return ref::MethodThetas(dyn, i + 1); };
    for (Path path : {Path::kPrefill, Path::kChunks7, Path::kDecode, Path::kSequence}) {
      const std::vector<float> got = EngineLogits(m, "dynamic-longrope:" + lists, tokens, path);
      EXPECT_LE(MaxAbsDiff(got, exact), tol) << "path " << static_cast<int>(path);
    }
    const std::vector<float> got =
        EngineLogits(m, "dynamic-longrope:" + lists, tokens, Path::kDecode);
    EXPECT_GT(
        MaxAbsDiff(got, ref::LlamaForwardRef<double>(m, tokens, ref::MethodPositionRef(stat))),
        100 * tol);
    EXPECT_GT(MaxAbsDiff(got, ref::LlamaForwardRef<double>(m, tokens, early)), 100 * tol);
  }
}

TEST(MethodModel, MethodsReallyDiffer) {
  // Not vacuous: beyond L the methods give logits far apart from direct's.
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 61);
  const std::vector<int> tokens = RandomTokens(kTokens, c.vocab_size, 62);
  const std::vector<float> direct = EngineLogits(m, "direct", tokens, Path::kPrefill);
  for (const std::string& spec : Specs()) {
    if (spec == "direct") continue;
    EXPECT_GT(MaxAbsDiff(EngineLogits(m, spec, tokens, Path::kPrefill), direct), 1e-3) << spec;
  }
}

TEST(MethodModel, CacheFromAnotherMethodIsRefused) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 71);
  Transformer model(m);
  KvCache cache(c, 32);
  std::vector<float> hidden;
  const std::vector<int> tokens = RandomTokens(8, c.vocab_size, 72);
  model.Forward(tokens, cache, hidden);
  model.SetMethod(ParseMethod("rerope:window=4"), 32);
  try {
    model.Forward(tokens, cache, hidden);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rerope"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 8);
  cache.Clear();
  model.Forward(tokens, cache, hidden);  // a cleared cache takes the new method
  EXPECT_EQ(cache.length(), 8);
}

}  // namespace
}  // namespace stretch
