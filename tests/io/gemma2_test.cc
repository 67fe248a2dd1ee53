// Gemma 2 (src/model/families/gemma2.cc): the engine's forward of a random Gemma 2 model (local and
// global layers alternating, every layer at the model's RoPE, Gemma's norms, GeGLU and embedding
// scale, a query scale of its own, and the soft-capping of the attention's and the classifier's
// logits) equals the double reference (reference/layout_llama.h, written from transformers'
// modeling_gemma2.py) under training-free methods, and is far from the reference with any one
// choice dropped; the model written as an HF folder and as GGUF (llama.cpp's keys) reads back the
// same and scores the same; config.json's and GGUF's defaults are Gemma2Config's and llama.cpp's;
// what a format cannot hold is refused with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/layout_llama.h"
#include "src/core/error.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
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
// Caps small enough for the random model's logits to reach tanh's bend (Gemma 2's own are 50 and
// 30, for logits of a trained model's size): a cap the logits never approach would change nothing
// a test could see.
constexpr double kAttnCap = 0.5;
constexpr double kFinalCap = 0.25;

const ModelFamily& Gemma2() { return *FindFamilyByGguf("gemma2"); }

ModelConfig GemmaConfig() {
  ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads, 2 kv heads
  c.n_layers = 4;
  c.explicit_head_dim = 16;  // wider than dim / heads, as Gemma 2's 256 at 2304 / 8
  c.seq_len = 16;
  c.family = "gemma2";
  c.shared_classifier = true;  // Gemma 2's tied embedding
  SetFamilyBlock(Gemma2(), c);
  SetSwaPattern(c, {2, kWindow, 0.0});              // layers 0, 2 local; 1, 3 global; one RoPE
  c.attention.logit_scale = 1.0 / std::sqrt(24.0);  // query_pre_attn_scalar 24, not head_dim
  c.attn_softcap = kAttnCap;
  c.final_softcap = kFinalCap;
  return c;
}

Model GemmaModel(uint64_t seed) {
  Model m = testing::RandomModel(GemmaConfig(), seed);
  m.weights.classifier.clear();
  return m;
}

class Gemma2Test : public testing::TempDirTest {
 protected:
  Gemma2Test() : TempDirTest("stretch_gemma2_") {}
};

TEST(Gemma2Family, TheConfigurationIsGemma2sAndOnlyGemma2HoldsIt) {
  const ModelConfig c = GemmaConfig();
  EXPECT_EQ(&FamilyOf(c), &Gemma2());
  EXPECT_TRUE(c.post_norms);
  EXPECT_FALSE(c.qk_norm);
  const std::optional<SwaPattern> p = SwaPatternOf(c);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->period, 2);
  EXPECT_EQ(p->window, kWindow);
  EXPECT_EQ(p->local_base, 0.0) << "the local layers keep the model's RoPE";
  EXPECT_EQ(c.attention.layers[0], LayerLayout{.window = kWindow});
  EXPECT_TRUE(FamilyHoldsLayout(Gemma2(), c, /*scale_ok=*/true));
  // Gemma 3's files hold neither the soft caps nor local layers at the model's RoPE.
  const ModelFamily& gemma3 = *FindFamilyByGguf("gemma3");
  EXPECT_FALSE(FamilyHoldsLayout(gemma3, c, true));
  ModelConfig uncapped = c;
  uncapped.attn_softcap = uncapped.final_softcap = 0.0;
  EXPECT_FALSE(FamilyHoldsLayout(gemma3, uncapped, true)) << "the local layers' RoPE";
  EXPECT_NE(c.UntrainedBlock().find("soft-capped logits (Gemma 2)"), std::string::npos);
}

// Float against double over four layers of a tiny model: 8 times the float reference's own
// distance bounds the engine's rounding (as tests/io/gemma3_test.cc); each dropped choice must
// move the logits by more than 10 times that.
TEST(Gemma2Forward, TheEngineEqualsTheReferenceUnderEveryMethodAndFailsAPerturbedOne) {
  const Model m = GemmaModel(21);
  const std::vector<int> tokens = testing::RandomTokens(48, m.config.vocab_size, 22);
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
    perturbed("the attention soft cap", [](ModelConfig& c) { c.attn_softcap = 0.0; });
    perturbed("the final soft cap", [](ModelConfig& c) { c.final_softcap = 0.0; });
    perturbed("the post norms", [](ModelConfig& c) { c.post_norms = false; });
    perturbed("the embedding scale", [](ModelConfig& c) { c.embed_scale = 0.0f; });
    perturbed("the query scale", [](ModelConfig& c) { c.attention.logit_scale = 0.0; });
    perturbed("the window", [](ModelConfig& c) {
      for (LayerLayout& l : c.attention.layers) l.window = l.window > 0 ? kWindow + 1 : 0;
    });
  }
}

// The soft cap in the kernel's every path: a prompt then tokens one at a time through the KV
// cache (decode: a few query rows, keys read in place) gives the logits of one whole forward.
TEST(Gemma2Forward, DecodingTokenByTokenGivesTheWholeForwardsLogits) {
  const Model m = GemmaModel(23);
  const std::vector<int> tokens = testing::RandomTokens(20, m.config.vocab_size, 24);
  const std::vector<float> whole = testing::Logits(m, "direct", tokens);
  Transformer model(m);
  model.SetMethod(ParseMethod("direct"), static_cast<int64_t>(tokens.size()));
  KvCache cache(m.config, static_cast<int64_t>(tokens.size()));
  const size_t V = static_cast<size_t>(m.config.vocab_size);
  std::vector<float> hidden, logits(V);
  model.Forward(std::vector<int>(tokens.begin(), tokens.begin() + 12), cache, hidden,
                Transformer::Rows::kLast);
  for (size_t t = 12; t <= tokens.size(); ++t) {
    model.Logits(hidden.data(), 1, logits.data());
    const std::vector<float> want(whole.begin() + static_cast<std::ptrdiff_t>((t - 1) * V),
                                  whole.begin() + static_cast<std::ptrdiff_t>(t * V));
    EXPECT_LE(MaxAbsDiff(logits, want), 1e-5) << "token " << t - 1;
    if (t < tokens.size()) {
      model.Forward(std::vector<int>{tokens[t]}, cache, hidden, Transformer::Rows::kLast);
    }
  }
}

TEST_F(Gemma2Test, HfFolderHoldsTheCapsAndReadsBackTheSameModel) {
  const Model m = GemmaModel(25);
  const std::string dir = Path("gemma");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const nlohmann::json j = nlohmann::json::parse(ReadText(dir + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "Gemma2ForCausalLM");
  EXPECT_EQ(j["model_type"], "gemma2");
  EXPECT_EQ(j["attn_logit_softcapping"], kAttnCap);
  EXPECT_EQ(j["final_logit_softcapping"], kFinalCap);
  EXPECT_EQ(j["query_pre_attn_scalar"], 24);
  EXPECT_EQ(j["sliding_window"], kWindow);
  EXPECT_EQ(j["layer_types"], nlohmann::json({"sliding_attention", "full_attention",
                                              "sliding_attention", "full_attention"}));
  EXPECT_FALSE(j.contains("rope_local_base_freq"));
  EXPECT_EQ(j["tie_word_embeddings"], true);
  const Model back = LoadHfModel(dir);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  EXPECT_EQ(back.config.attn_softcap, kAttnCap);
  EXPECT_EQ(back.config.final_softcap, kFinalCap);
  EXPECT_EQ(back.config.family, "gemma2");
  ExpectSameWeights(back, m);
}

TEST_F(Gemma2Test, GgufHoldsLlamaCppsKeysAndScoresAsTheHfFolder) {
  Model m = GemmaModel(26);
  m.config.attention.logit_scale = 0.0;  // llama.cpp's 1/sqrt(head_dim)
  const std::string path = Path("gemma.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "gemma2");
  EXPECT_EQ(g.Int("gemma2.attention.sliding_window"), kWindow);
  EXPECT_EQ(g.Int("gemma2.attention.sliding_window_pattern"), 2);
  EXPECT_EQ(g.Find("gemma2.rope.freq_base_swa"), nullptr);
  EXPECT_EQ(g.FloatOr("gemma2.attn_logit_softcapping", 0), kAttnCap);
  EXPECT_EQ(g.FloatOr("gemma2.final_logit_softcapping", 0), kFinalCap);
  EXPECT_EQ(g.FindTensor("output.weight"), nullptr);
  const Model back = LoadGgufModel(path);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  EXPECT_EQ(back.config.attn_softcap, kAttnCap);
  ExpectSameWeights(back, m);
  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32);
  const Model hf = LoadHfModel(Path("hf"));
  const std::vector<int> tokens = testing::RandomTokens(30, m.config.vocab_size, 27);
  EXPECT_EQ(testing::Logits(back, "direct", tokens), testing::Logits(hf, "direct", tokens));

  // llama.cpp's defaults where the keys are absent: caps 50 and 30, a window of 4096.
  std::vector<std::pair<std::string, GgufValue>> kv;
  for (const auto& [key, value] : g.metadata()) {
    if (key != "gemma2.attn_logit_softcapping" && key != "gemma2.final_logit_softcapping" &&
        key != "gemma2.attention.sliding_window") {
      kv.emplace_back(key, value);
    }
  }
  std::vector<GgufTensorOut> tensors;
  for (const GgufTensorInfo& t : g.tensors()) {
    const auto bytes = g.TensorData(t);
    tensors.push_back({t.name, t.ne, t.type, std::vector<uint8_t>(bytes.begin(), bytes.end())});
  }
  WriteGguf(Path("d.gguf"), kv, tensors);
  const ModelConfig d = ReadGgufModelHeader(Path("d.gguf")).config;
  EXPECT_EQ(d.attn_softcap, 50.0);
  EXPECT_EQ(d.final_softcap, 30.0);
  EXPECT_EQ(SwaPatternOf(d)->window, 4096);
}

TEST_F(Gemma2Test, WhatLlamaCppWouldRunOtherwiseIsRefusedAndNothingWritten) {
  const Model m = GemmaModel(28);
  const auto refused = [&](const char* what, auto&& change, const std::string& why) {
    Model x = m;
    x.config.attention.logit_scale = 0.0;
    change(x);
    const std::string error = testing::ErrorOf(
        [&] { SaveGgufModel(x, Path("x.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr); });
    EXPECT_NE(error.find(why), std::string::npos) << what << ": " << error;
    EXPECT_FALSE(std::filesystem::exists(Path("x.gguf"))) << what;
    // The HF folder holds every one of them.
    SaveHfModel(x, Path(std::string("hf_") + what), SafetensorsDtype::kF32);
  };
  refused(
      "uncapped", [](Model& x) { x.config.attn_softcap = 0.0; }, "always soft-caps both");
  refused(
      "untied",
      [](Model& x) {
        x.config.shared_classifier = false;
        x.weights.classifier = x.weights.token_embedding;
      },
      "reads no output.weight");
  refused(
      "global", [](Model& x) { x.config.attention.layers.clear(); }, "no local layers");
  ModelConfig narrow = m.config;  // heads dim / heads wide, which both formats could hold
  narrow.explicit_head_dim = 0;
  testing::ExpectFormatsWithoutTheChoiceRefuse(testing::RandomModel(narrow, 30), Path(""),
                                               "soft-capped logits (Gemma 2)");
  TrainArch arch;
  arch.model = m.config;
  EXPECT_NE(testing::ErrorOf([&] { ValidateArch(arch); }).find("does not train it"),
            std::string::npos);
}

TEST_F(Gemma2Test, ConfigJsonDefaultsAreGemma2Configs) {
  const Model m = GemmaModel(29);
  const std::string dir = Path("gemma");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  nlohmann::json j = nlohmann::json::parse(ReadText(dir + "/config.json"));
  // Absent: caps 50 and 30, layer i local when i is even, rope_theta 10000.
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "layer_types",
                          "sliding_window_pattern", "rope_theta"}) {
    j.erase(key);
  }
  testing::WriteBytes(dir + "/config.json", j.dump());
  const Model back = LoadHfModel(dir);
  EXPECT_EQ(back.config.attn_softcap, 50.0);
  EXPECT_EQ(back.config.final_softcap, 30.0);
  EXPECT_EQ(back.config.attention.layers, m.config.attention.layers);
  EXPECT_EQ(back.config.rope_base, 10000.0f);
  // null: no cap.
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  testing::WriteBytes(dir + "/config.json", j.dump());
  const Model none = LoadHfModel(dir);
  EXPECT_EQ(none.config.attn_softcap, 0.0);
  EXPECT_EQ(none.config.final_softcap, 0.0);
  j["attn_logit_softcapping"] = -1;
  testing::WriteBytes(dir + "/config.json", j.dump());
  EXPECT_NE(testing::ErrorOf([&] { LoadHfModel(dir); }).find("attn_logit_softcapping"),
            std::string::npos);
  // Gemma2Config's tie_word_embeddings and head_dim defaults: tied, 256 (4 heads: 1024 rows).
  j.erase("attn_logit_softcapping");
  testing::ExpectHfTiedAndHeadDim256ByDefault(dir, j, 1024);
}

}  // namespace
}  // namespace stretch
