// Gemma 3 (src/model/families/gemma3.cc): the engine's forward of a random Gemma 3 model (local
// layers with a window at their own RoPE base and every third layer global, per-head q/k norms,
// norms on the attention's and feed-forward's outputs, GeGLU, the embedding times sqrt(dim), a
// query scale of its own) equals the double reference (reference/layout_llama.h, written from
// transformers' modeling_gemma3.py) under training-free methods, and is far from the reference
// with any one of those choices dropped; the model written as an HF folder (gains as w, the file's
// 1 + w convention) and as GGUF (gains as 1 + w, llama.cpp's keys) reads back the same and
// scores the same; what the formats cannot hold is refused with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/layout_llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/model_checkpoint.h"
#include "src/io/safetensors.h"
#include "src/model/family.h"
#include "src/model/model_arch.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/family_files.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/method_specs.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::ExpectSameWeights;
using testing::MaxAbsDiff;
using testing::ReadText;

constexpr int64_t kWindow = 6;
constexpr int64_t kPeriod = 3;  // layers 0, 1 local; 2 global

const ModelFamily& Gemma3() { return *FindFamilyByGguf("gemma3"); }

ModelConfig GemmaConfig() {
  ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads, 2 kv heads
  c.n_layers = 3;
  c.explicit_head_dim = 16;  // wider than dim / heads, as Gemma 3's 256 at 1152 / 4
  c.seq_len = 16;
  c.rope_base = 1e6f;
  c.family = "gemma3";
  SetFamilyBlock(Gemma3(), c);
  SetSwaPattern(c, {kPeriod, kWindow, 10000.0});
  c.attention.logit_scale = 1.0 / std::sqrt(24.0);  // query_pre_attn_scalar 24, not head_dim
  return c;
}

class Gemma3Test : public testing::TempDirTest {
 protected:
  Gemma3Test() : TempDirTest("stretch_gemma3_") {}
};

TEST(Gemma3Family, TheConfigurationIsGemmasAndItsPatternReadsBack) {
  const ModelConfig c = GemmaConfig();
  EXPECT_EQ(&FamilyOf(c), &Gemma3());
  EXPECT_TRUE(c.post_norms && c.qk_norm);
  EXPECT_EQ(c.activation, FfnActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(c.embed_scale, std::sqrt(32.0f));
  const std::optional<SwaPattern> p = SwaPatternOf(c);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->period, kPeriod);
  EXPECT_EQ(p->window, kWindow);
  EXPECT_EQ(p->local_base, 10000.0);
  EXPECT_TRUE(FamilyHoldsLayout(Gemma3(), c, /*scale_ok=*/true));
  EXPECT_FALSE(FamilyHoldsLayout(Gemma3(), c, /*scale_ok=*/false));  // GGUF has no scale key
  ModelConfig odd = c;  // a local layer where the pattern has a global one
  odd.attention.layers[2] = odd.attention.layers[0];
  EXPECT_EQ(SwaPatternOf(odd)->period, 4);  // every layer local: P = n_layers + 1
  odd.attention.layers[0] = LayerLayout{};  // global, local, local: no period fits
  EXPECT_FALSE(SwaPatternOf(odd).has_value());
}

// Float against double over three layers of a tiny model: 8 times the float reference's own
// distance bounds the engine's rounding (as tests/model/method_model_test.cc); each dropped
// choice must move the logits by more than 10 times that.
TEST(Gemma3Forward, TheEngineEqualsTheReferenceUnderEveryMethodAndFailsAPerturbedOne) {
  const Model m = testing::RandomModel(GemmaConfig(), 11);
  const std::vector<int> tokens = testing::RandomTokens(48, m.config.vocab_size, 12);
  for (const std::string& spec : testing::EveryMethodSpec(m.config.head_dim(), m.config.seq_len)) {
    // The streaming cache runs on a uniform layout only; it refuses local/global layers by name.
    if (spec.starts_with("streaming")) continue;
    SCOPED_TRACE(spec);
    const std::vector<float> got = testing::Logits(m, spec, tokens);
    const std::vector<double> exact =
        ref::LayoutForwardRef<double>(m.config, m.weights, spec, tokens);
    const double tol =
        8 * MaxAbsDiff(ref::LayoutForwardRef<float>(m.config, m.weights, spec, tokens), exact) +
        1e-6;
    EXPECT_LE(MaxAbsDiff(got, exact), tol);
    if (spec != "direct") continue;
    const auto perturbed = [&](const char* what, auto&& change) {
      ModelConfig c = m.config;
      change(c);
      EXPECT_GT(MaxAbsDiff(got, ref::LayoutForwardRef<double>(c, m.weights, spec, tokens)),
                10 * tol)
          << "dropping " << what << " is not told apart";
    };
    perturbed("the post norms", [](ModelConfig& c) { c.post_norms = false; });
    perturbed("GeGLU", [](ModelConfig& c) { c.activation = FfnActivation::kSilu; });
    perturbed("the embedding scale", [](ModelConfig& c) { c.embed_scale = 0.0f; });
    perturbed("the q/k norms", [](ModelConfig& c) { c.qk_norm = false; });
    perturbed("the query scale", [](ModelConfig& c) { c.attention.logit_scale = 0.0; });
    perturbed("the window", [](ModelConfig& c) {
      for (LayerLayout& l : c.attention.layers) l.window = l.window > 0 ? kWindow + 1 : 0;
    });
    perturbed("the local base", [](ModelConfig& c) {
      for (LayerLayout& l : c.attention.layers) l.rope_base = l.window > 0 ? 1e6 : 0.0;
    });
  }
}

TEST_F(Gemma3Test, HfFolderHoldsGainsAsWAndReadsBackTheSameModel) {
  const Model m = testing::RandomModel(GemmaConfig(), 13);
  const std::string dir = Path("gemma");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const nlohmann::json j = nlohmann::json::parse(ReadText(dir + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_EQ(j["model_type"], "gemma3_text");
  EXPECT_EQ(j["query_pre_attn_scalar"], 24);
  EXPECT_EQ(j["sliding_window"], kWindow);
  EXPECT_EQ(j["sliding_window_pattern"], kPeriod);
  EXPECT_EQ(j["layer_types"],
            nlohmann::json({"sliding_attention", "sliding_attention", "full_attention"}));
  EXPECT_EQ(j["rope_local_base_freq"], 10000);
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_TRUE(j["final_logit_softcapping"].is_null());
  EXPECT_FALSE(j.contains("hidden_act"));
  // The file's gains are w, the model's 1 + w.
  const SafetensorsFile f(dir + "/model.safetensors");
  const std::vector<float> w = f.Read<float>("model.layers.1.post_feedforward_layernorm.weight");
  ASSERT_EQ(w.size(), m.weights.layers[1].ffn_post_norm.size());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_FLOAT_EQ(w[i] + 1.0f, m.weights.layers[1].ffn_post_norm[i]) << i;
  }
  const Model back = LoadHfModel(dir);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  EXPECT_NEAR(back.config.attention.logit_scale, m.config.attention.logit_scale, 1e-15);
  EXPECT_TRUE(back.config.post_norms);
  EXPECT_FLOAT_EQ(back.config.embed_scale, m.config.embed_scale);
  ExpectSameWeights(back, m);
}

TEST_F(Gemma3Test, GgufHoldsLlamaCppsKeysAndScoresAsTheHfFolder) {
  Model m = testing::RandomModel(GemmaConfig(), 14);
  m.config.attention.logit_scale = 0.0;  // llama.cpp's 1/sqrt(head_dim)
  const std::string path = Path("gemma.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "gemma3");
  EXPECT_EQ(g.Int("gemma3.attention.sliding_window"), kWindow);
  EXPECT_EQ(g.Int("gemma3.attention.sliding_window_pattern"), kPeriod);
  EXPECT_EQ(g.FloatOr("gemma3.rope.freq_base_swa", 0), 10000.0);
  EXPECT_EQ(g.Int("gemma3.attention.key_length"), 16);
  const Model back = LoadGgufModel(path);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  ExpectSameWeights(back, m);
  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32);
  const Model hf = LoadHfModel(Path("hf"));
  const std::vector<int> tokens = testing::RandomTokens(30, m.config.vocab_size, 15);
  EXPECT_EQ(testing::Logits(back, "direct", tokens), testing::Logits(hf, "direct", tokens));
  // A query scale llama.cpp would not apply is refused, nothing written.
  Model scaled = m;
  scaled.config.attention.logit_scale = 0.2;
  const std::string error = testing::ErrorOf([&] {
    SaveGgufModel(scaled, Path("s.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr);
  });
  EXPECT_NE(error.find("query_pre_attn_scalar 25), which no GGUF key holds"), std::string::npos)
      << error;
  EXPECT_FALSE(std::filesystem::exists(Path("s.gguf")));
}

TEST_F(Gemma3Test, FormatsWithoutGemmasBlockRefuseItAndTheTrainerToo) {
  const Model m = testing::RandomModel(GemmaConfig(), 16);
  testing::ExpectFormatsWithoutTheChoiceRefuse(m, Path(""), "Gemma");
  TrainArch arch;
  arch.model = m.config;
  EXPECT_NE(testing::ErrorOf([&] { ValidateArch(arch); }).find("does not train it"),
            std::string::npos);
}

TEST_F(Gemma3Test, ConfigJsonWithSoftCappingOrAnOddLayerTypeIsRefused) {
  const Model m = testing::RandomModel(GemmaConfig(), 17);
  const std::string dir = Path("gemma");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = ReadText(dir + "/config.json");
  const auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(config);
    j[key] = v;
    testing::WriteBytes(dir + "/config.json", j.dump());
    return testing::ErrorOf([&] { LoadHfModel(dir); });
  };
  EXPECT_NE(with("final_logit_softcapping", 30.0).find("soft-capping"), std::string::npos);
  EXPECT_NE(with("layer_types", {"sliding_attention", "chunked_attention", "full_attention"})
                .find("layer_types"),
            std::string::npos);
  EXPECT_NE(with("hidden_activation", "silu").find("gelu_pytorch_tanh"), std::string::npos);
  // Gemma3TextConfig's defaults where keys are absent: pattern 6 (every layer local here), 256.
  nlohmann::json j = nlohmann::json::parse(config);
  j.erase("layer_types");
  j.erase("sliding_window_pattern");
  j.erase("query_pre_attn_scalar");
  testing::WriteBytes(dir + "/config.json", j.dump());
  const Model back = LoadHfModel(dir);
  for (const LayerLayout& l : back.config.attention.layers) EXPECT_EQ(l.window, kWindow);
  EXPECT_DOUBLE_EQ(back.config.attention.logit_scale, 1.0 / 16.0);
}

TEST_F(Gemma3Test, ConfigJsonWithoutTieOrHeadDimTakesGemma3TextConfigsDefaults) {
  ModelConfig c = GemmaConfig();
  c.shared_classifier = true;
  const Model m = testing::RandomModel(c, 18);
  const std::string dir = Path("gemma");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  // Gemma3TextConfig's defaults: tied, heads of 256 (4 heads: 1024 rows, not these 64).
  testing::ExpectHfTiedAndHeadDim256ByDefault(
      dir, nlohmann::json::parse(ReadText(dir + "/config.json")), 1024);
}

}  // namespace
}  // namespace stretch
