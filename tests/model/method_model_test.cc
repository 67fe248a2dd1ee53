// The whole model under every position method: the engine (float32, tiled kernel, KV cache or
// layer-major sequence forward) against the naive double forward told the method pair by pair,
// and token-by-token decoding against one prefill.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "reference/layout_llama.h"
#include "reference/method_llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/method_specs.h"
#include "tests/testing/random_model.h"
#include "tests/testing/sanitizer.h"

namespace stretch {
namespace {

constexpr int kTokens = 150;  // fed length L' with TinyConfig's L = 64: s ~ 2.3

using testing::RandomTokens;

// Every training-free method (tests/testing/method_specs.h) at TinyConfig's L = 64.
std::vector<std::string> Specs(int head_dim = 8) { return testing::EveryMethodSpec(head_dim, 64); }

// kLastChunks7: chunks of 7 keeping only the last token's hidden state (Transformer::Rows::kLast);
// EngineLogits then gives that row's logits only. kSequenceFrom: the sequence forward asked for
// rows kFirstRow.. only (a far-copy or passkey probe's; its last layer runs the rows before for
// their keys and values alone), in chunks of 40 that kFirstRow splits; EngineLogits gives those
// rows' logits.
enum class Path { kPrefill, kChunks7, kDecode, kSequence, kLastChunks7, kSequenceFrom };
constexpr int64_t kFirstRow = 61;

// `layer_specs`: layers that run a method of their own (AttentionPlan::layer_methods).
std::vector<float> EngineLogits(const Model& m, const std::string& spec,
                                const std::vector<int>& tokens, Path path,
                                const std::vector<std::pair<int, std::string>>& layer_specs = {}) {
  Transformer model(m);
  AttentionPlan plan =
      MakeAttentionPlan(ParseMethod(spec), model.Geometry(), static_cast<int64_t>(tokens.size()));
  for (const auto& [l, own] : layer_specs) plan.layer_methods.emplace_back(l, ParseMethod(own));
  model.SetPlan(std::move(plan));
  std::vector<float> hidden;
  int64_t first = 0;
  if (path == Path::kSequence || path == Path::kSequenceFrom) {
    model.set_prefill_chunk(40);  // several chunks per layer
    first = path == Path::kSequenceFrom ? kFirstRow : 0;
    model.ForwardSequence(tokens, hidden, first);
  } else {
    const bool last = path == Path::kLastChunks7;
    model.set_prefill_chunk(path == Path::kPrefill ? 4096 : path == Path::kDecode ? 1 : 7);
    KvCache cache(m.config, static_cast<int64_t>(tokens.size()) + 5);
    model.Forward(tokens, cache, hidden, last ? Transformer::Rows::kLast : Transformer::Rows::kAll);
  }
  const int64_t rows = path == Path::kLastChunks7 ? 1 : static_cast<int64_t>(tokens.size()) - first;
  EXPECT_EQ(hidden.size(), static_cast<size_t>((first + rows) * m.config.dim));
  std::vector<float> logits(static_cast<size_t>(rows * m.config.vocab_size));
  model.Logits(hidden.data() + first * m.config.dim, rows, logits.data());
  return logits;
}

using testing::MaxAbsDiff;

// The rows of `exact` (every row's logits) that `path` gives.
std::vector<double> RowsOf(const std::vector<double>& exact, Path path, int vocab_size) {
  if (path == Path::kLastChunks7) return {exact.end() - vocab_size, exact.end()};
  if (path == Path::kSequenceFrom) return {exact.begin() + kFirstRow * vocab_size, exact.end()};
  return exact;
}

// The engine's logits for `spec` in every path within `tol` of `exact` (the double reference's,
// every row; kLastChunks7 the last row's).
void ExpectEveryPathWithin(const Model& m, const std::string& spec, const std::vector<int>& tokens,
                           const std::vector<double>& exact, double tol,
                           const std::vector<std::pair<int, std::string>>& layer_specs = {}) {
  for (Path path : {Path::kPrefill, Path::kChunks7, Path::kDecode, Path::kSequence,
                    Path::kLastChunks7, Path::kSequenceFrom}) {
    const std::vector<float> got = EngineLogits(m, spec, tokens, path, layer_specs);
    const std::vector<double> want = RowsOf(exact, path, m.config.vocab_size);
    ASSERT_EQ(got.size(), want.size()) << spec << " path " << static_cast<int>(path);
    EXPECT_LE(MaxAbsDiff(got, want), tol) << spec << " path " << static_cast<int>(path);
  }
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
    ExpectEveryPathWithin(m, spec, tokens, exact, tol);
  }
}

// A method of its own on one layer (`stretch score --layer-method`, AttentionPlan::layer_methods):
// the engine in every path against the double reference told each layer's method, for pairs that
// differ in their frequencies, relative map, mask and dynamic scale; and the reference with the
// method on both layers is far off, so the layer's own method is what the engine runs there.
TEST(MethodModel, ALayerWithAMethodOfItsOwnMatchesTheDoubleForwardInEveryPath) {
  const ModelConfig c = testing::TinyConfig();  // 2 layers
  const Model m = testing::RandomModel(c, 57);
  const std::vector<int> tokens = RandomTokens(kTokens, c.vocab_size, 58);
  const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
  struct Case {
    std::string method;
    int layer;
    std::string own;
  };
  const std::vector<Case> cases = {{"yarn", 0, "rerope:window=16"},
                                   {"rerope:window=16", 1, "yarn"},
                                   {"self-extend", 0, "window:window=32+logn"},
                                   {"direct", 1, "dynamic-ntk"},
                                   {"pi", 0, "leaky-rerope:window=16,k=4"}};
  for (const Case& k : cases) {
    const AttentionPlan method = MakeAttentionPlan(ParseMethod(k.method), geo, kTokens);
    const AttentionPlan own = MakeAttentionPlan(ParseMethod(k.own), geo, kTokens);
    std::vector<ref::PositionRef> layers(2, ref::MethodPositionRef(method));
    layers[static_cast<size_t>(k.layer)] = ref::MethodPositionRef(own);
    const std::vector<double> exact = ref::LlamaForwardRefLayers<double>(m, tokens, layers);
    const double tol =
        8 * MaxAbsDiff(ref::LlamaForwardRefLayers<float>(m, tokens, layers), exact) + 1e-6;
    const std::string label = fmt::format("{} [layer {}: {}]", k.method, k.layer, k.own);
    SCOPED_TRACE(label);
    ExpectEveryPathWithin(m, k.method, tokens, exact, tol, {{k.layer, k.own}});
    const std::vector<double> uniform =
        ref::LlamaForwardRef<double>(m, tokens, ref::MethodPositionRef(method));
    EXPECT_GT(
        MaxAbsDiff(EngineLogits(m, k.method, tokens, Path::kPrefill, {{k.layer, k.own}}), uniform),
        100 * tol);
  }
  // A layer with a RoPE base of its own (Gemma 3's global layers) resolves its own method for
  // that base: the reference told layer 1's method at base 10^6.
  {
    ModelConfig g = c;
    g.attention.layers.assign(2, LayerLayout{});
    g.attention.layers[1] = LayerLayout{.rope_base = 1e6};
    const Model gm = testing::RandomModel(g, 59);
    const AttentionPlan method = MakeAttentionPlan(ParseMethod("rerope:window=16"), geo, kTokens);
    const AttentionPlan own =
        MakeAttentionPlan(ParseMethod("yarn"), RopeGeometry{g.seq_len, g.head_dim(), 1e6}, kTokens);
    const std::vector<ref::PositionRef> layers = {ref::MethodPositionRef(method),
                                                  ref::MethodPositionRef(own)};
    const std::vector<double> exact = ref::LlamaForwardRefLayers<double>(gm, tokens, layers);
    const double tol =
        8 * MaxAbsDiff(ref::LlamaForwardRefLayers<float>(gm, tokens, layers), exact) + 1e-6;
    SCOPED_TRACE("rerope:window=16 [layer 1 at base 1e6: yarn]");
    ExpectEveryPathWithin(gm, "rerope:window=16", tokens, exact, tol, {{1, "yarn"}});
  }
  // The method itself as a layer's own runs as without it, to the bit.
  EXPECT_EQ(EngineLogits(m, "yarn", tokens, Path::kChunks7, {{1, "yarn"}}),
            EngineLogits(m, "yarn", tokens, Path::kChunks7));
}

// What a layer's own method is refused for, before anything runs: a layer the model does not
// have, one given twice, a layer trained with a window (it keeps plain RoPE), the streaming cache.
TEST(MethodModel, ALayerMethodIsRefusedWhereNoMethodApplies) {
  ModelConfig c = testing::TinyConfig();
  const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
  auto plan_of = [&](const std::vector<std::pair<int, std::string>>& own) {
    AttentionPlan plan = MakeAttentionPlan(ParseMethod("yarn"), geo, kTokens);
    for (const auto& [l, spec] : own) plan.layer_methods.emplace_back(l, ParseMethod(spec));
    return plan;
  };
  auto refusal = [&](const std::vector<std::pair<int, std::string>>& own, const ModelConfig& cc) {
    return stretch::testing::ErrorOf([&] { CheckMethodFitsLayout(cc, plan_of(own)); });
  };
  EXPECT_NE(refusal({{2, "rerope"}}, c).find("the model has layers 0 to 1"), std::string::npos);
  EXPECT_NE(refusal({{-1, "rerope"}}, c).find("layers 0 to 1"), std::string::npos);
  EXPECT_NE(
      refusal({{0, "rerope"}, {0, "pi"}}, c).find("layer 0 is given a method of its own twice"),
      std::string::npos);
  EXPECT_NE(refusal({{0, "streaming"}}, c).find("streaming cache"), std::string::npos);
  EXPECT_NO_THROW(CheckMethodFitsLayout(c, plan_of({{0, "rerope"}, {1, "pi"}})));
  c.attention.layers.assign(2, LayerLayout{});
  c.attention.layers[0] = LayerLayout{.window = 8};
  EXPECT_NE(refusal({{0, "rerope"}}, c).find("layer 0 (rope, window 8) takes no method of its own"),
            std::string::npos);
  EXPECT_NO_THROW(CheckMethodFitsLayout(c, plan_of({{1, "rerope"}})));
}

// A block choice of a family under every method, in every path: the engine on `m`
// matches the double reference within the float reference's own error, and the reference run
// without the choice (`without`, the same weights) is far off, so the choice is what it matches.
void ExpectChoiceMatchesEveryPath(const Model& m, const Model& without, uint64_t seed) {
  const ModelConfig& c = m.config;
  const std::vector<int> tokens = RandomTokens(kTokens, c.vocab_size, seed);
  const RopeGeometry geo{c.seq_len, c.head_dim(), c.rope_base};
  for (const std::string& spec : Specs(c.head_dim())) {
    const AttentionPlan plan = MakeAttentionPlan(ParseMethod(spec), geo, kTokens);
    const ref::PositionRef pos = ref::MethodPositionRef(plan);  // holds `plan` by reference
    const std::vector<double> exact = ref::LlamaForwardRef<double>(m, tokens, pos);
    const double tol = 8 * MaxAbsDiff(ref::LlamaForwardRef<float>(m, tokens, pos), exact) + 1e-6;
    ExpectEveryPathWithin(m, spec, tokens, exact, tol);
    EXPECT_GT(MaxAbsDiff(EngineLogits(m, spec, tokens, Path::kPrefill),
                         ref::LlamaForwardRef<double>(without, tokens, pos)),
              100 * tol)
        << spec;
  }
}

// Llama 3.2's block: grouped-query (TinyConfig's 2 kv heads for 4) with the classifier tied to the
// embedding, at Llama 3's RoPE base; every method (llama3 among them). Without the tie (the same
// weights with a classifier of their own) the reference is far off.
TEST(MethodModel, TiedGroupedQueryLlamaMatchesTheDoubleForwardInEveryPath) {
  ModelConfig c = testing::TinyConfig();
  c.shared_classifier = true;
  c.rope_base = 500000.0f;
  const Model m = testing::RandomModel(c, 61);
  Model untied = m;
  untied.config.shared_classifier = false;
  untied.weights.classifier = testing::RandomModel(testing::TinyConfig(), 62).weights.classifier;
  ExpectChoiceMatchesEveryPath(m, untied, 63);
}

// Qwen 2's q/k/v biases (ModelConfig::qkv_bias).
TEST(MethodModel, QkvBiasesMatchTheDoubleForwardInEveryPath) {
  ModelConfig c = testing::TinyConfig();
  c.qkv_bias = true;
  const Model m = testing::RandomModel(c, 57);
  Model unbiased = m;
  unbiased.config.qkv_bias = false;
  ExpectChoiceMatchesEveryPath(m, unbiased, 58);
}

// Qwen 3's block: heads wider than dim / heads (16 at dim 32 and 4 heads, so q is 64 wide) and an
// RMSNorm over each head of q and k before RoPE (ModelConfig::qk_norm).
TEST(MethodModel, QkNormAndWideHeadsMatchTheDoubleForwardInEveryPath) {
  ModelConfig c = testing::TinyConfig();
  c.qk_norm = true;
  c.explicit_head_dim = 16;
  const Model m = testing::RandomModel(c, 59);
  Model unnormed = m;
  unnormed.config.qk_norm = false;
  ExpectChoiceMatchesEveryPath(m, unnormed, 60);
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

// Per-layer RoPE and the layouts of current models, set on random models of head dim 64 and 128
// (3 layers): the engine in every path against reference/layout_llama.h (each layer's base and
// interpolation, windows and chunks, the temperature tuning, written from their definitions),
// and that reference with one setting dropped is far off.
TEST(MethodModel, PerLayerLayoutsMatchTheLayoutReference) {
  struct Layout {
    const char* name;
    float model_pi;
    std::vector<LayerLayout> layers;
    std::vector<std::string> specs;
  };
  const std::vector<Layout> layouts = {
      // Gemma 3: two local layers (window 24, base 300), a global one at the model's base and
      // a linear scaling of 2, which takes the method.
      {"gemma3",
       2.0f,
       {LayerLayout{.window = 24, .rope_base = 300.0},
        LayerLayout{.window = 24, .rope_base = 300.0}, LayerLayout{}},
       {"ntk", "dynamic-ntk", "rerope:window=20"}},
      // Llama 4: chunks of 32 with RoPE, a NoPE layer with the temperature tuning (floor 16).
      {"llama4",
       1.0f,
       {LayerLayout{.chunk = 32}, LayerLayout{.chunk = 32},
        LayerLayout{.position = false, .temperature = true}},
       {"direct", "window:window=40+logn"}},
      // A mix: a window at its own base, a full layer with its own base and pi, a chunked one.
      {"mix",
       1.0f,
       {LayerLayout{.window = 20, .rope_base = 50.0},
        LayerLayout{.rope_base = 3000.0, .rope_pi = 3.0}, LayerLayout{.chunk = 16}},
       {"pi", "dynamic-ntk", "lambda:sinks=2,window=30"}},
  };
  // Under the sanitizers head dim 64 only: 128 runs the same code with other tile counts, and
  // the double reference at 128 takes a minute there.
  const std::vector<int> dims = STRETCH_ASAN ? std::vector<int>{64} : std::vector<int>{64, 128};
  for (const int D : dims) {
    for (const Layout& layout : layouts) {
      SCOPED_TRACE(::testing::Message() << layout.name << ", head dim " << D);
      ModelConfig c = testing::TinyConfig();
      c.n_heads = 2;
      c.n_kv_heads = 1;
      c.dim = 2 * D;
      c.n_layers = 3;
      c.rope_interpolation = layout.model_pi;
      c.attention.layers = layout.layers;
      c.attention.temperature_floor = 16.0;
      c.attention.temperature_scale = 0.3;
      const Model m = testing::RandomModel(c, 57 + static_cast<uint64_t>(D));
      const std::vector<int> tokens = RandomTokens(100, c.vocab_size, 58);
      if (layout.name == std::string("mix")) {
        // YaRN reads the base's wavelengths, which a layer's own interpolation hides: refused,
        // naming the layer.
        Transformer model(m);
        try {
          model.SetMethod(ParseMethod("yarn"), 100);
          ADD_FAILURE() << "yarn on a layer with its own pi was accepted";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("layer 1 (RoPE base 3000, interpolation 3)"),
                    std::string::npos)
              << e.what();
        }
      }
      for (const std::string& spec : layout.specs) {
        const std::vector<double> exact = ref::LayoutForwardRef<double>(c, m.weights, spec, tokens);
        const double tol =
            8 * MaxAbsDiff(ref::LayoutForwardRef<float>(c, m.weights, spec, tokens), exact) + 1e-6;
        std::vector<float> got;
        double worst = 0;
        // kSequence last: `got` is then every row's, for the references below.
        for (Path path : {Path::kPrefill, Path::kChunks7, Path::kDecode, Path::kSequenceFrom,
                          Path::kSequence}) {
          got = EngineLogits(m, spec, tokens, path);
          const std::vector<double> want = RowsOf(exact, path, c.vocab_size);
          worst = std::max(worst, MaxAbsDiff(got, want));
          EXPECT_LE(MaxAbsDiff(got, want), tol) << spec << " path " << static_cast<int>(path);
        }
        std::printf("  D=%-3d %-6s %-24s max |engine - double| %.2e (budget %.2e)\n", D,
                    layout.name, spec.c_str(), worst, tol);
        // The reference without the layers' own RoPE, with chunks read as windows, without the
        // temperature: each far from the engine (where the layout has that setting).
        ModelConfig plain_rope = c, windows = c, no_temperature = c;
        for (LayerLayout& l : plain_rope.attention.layers) l.rope_base = l.rope_pi = 0.0;
        for (LayerLayout& l : windows.attention.layers) std::swap(l.window, l.chunk);
        for (LayerLayout& l : no_temperature.attention.layers) l.temperature = false;
        for (const ModelConfig* changed : {&plain_rope, &windows, &no_temperature}) {
          if (changed->attention.layers == c.attention.layers) continue;
          EXPECT_GT(
              MaxAbsDiff(got, ref::LayoutForwardRef<double>(*changed, m.weights, spec, tokens)),
              10 * tol)
              << spec;
        }
      }
    }
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
