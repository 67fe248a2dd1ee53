// Qwen 3 (src/model/families/qwen3.cc) in both formats, and heads given apart from dim / heads in
// any family. A random model with per-head q/k norms and heads twice dim / heads wide is written
// as an HF folder and as GGUF and read back bit for bit; the files hold what the families' own
// tools hold: config.json's head_dim and GGUF's attention.key_length, HF's rotate-half rows for q
// and k and for the norms' gains in both formats (llama.cpp runs qwen3 with NEOX RoPE and its
// converter leaves the tensors unpermuted); and the attention scores computed from the files'
// tensors as transformers' Qwen3Attention computes them equal the ones from the loaded model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/model_checkpoint.h"
#include "src/io/safetensors.h"
#include "src/model/family.h"
#include "tests/testing/family_files.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::Dot;
using testing::ExpectSameWeights;
using testing::Head;
using testing::ReadText;
using testing::RotateHalf;
using testing::RotateInterleaved;

class Qwen3FilesTest : public testing::TempDirTest {
 protected:
  Qwen3FilesTest() : TempDirTest("stretch_qwen3_") {}
  static ModelConfig Config() {
    ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads, 2 kv heads
    c.qk_norm = true;
    c.explicit_head_dim = 16;    // dim / heads is 8: q is 64 wide, as Qwen3-0.6B's 2048 at 1024
    c.shared_classifier = true;  // as the small Qwen 3 models
    c.rope_base = 1000000.0f;
    c.norm_eps = 1e-6f;
    return c;
  }
};

TEST_F(Qwen3FilesTest, HfFolderRoundTripsBitForBitAsQwen3ForCausalLM) {
  const Model m = testing::RandomModel(Config(), 3);
  const std::string dir = Path("qwen");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = ReadText(dir + "/config.json");
  EXPECT_NE(config.find("\"Qwen3ForCausalLM\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"model_type\": \"qwen3\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"head_dim\": 16"), std::string::npos) << config;
  EXPECT_NE(config.find("\"attention_bias\": false"), std::string::npos) << config;
  const SafetensorsFile f(dir + "/model.safetensors");
  ASSERT_NE(f.Find("model.layers.1.self_attn.k_norm.weight"), nullptr);
  EXPECT_EQ(f.Find("model.layers.1.self_attn.k_norm.weight")->shape, std::vector<int64_t>{16});
  EXPECT_EQ(f.Find("model.layers.1.self_attn.q_proj.weight")->shape,
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f.Find("model.layers.1.self_attn.q_proj.bias"), nullptr);  // Qwen 3 has none
  const Model back = LoadHfModel(dir);
  EXPECT_TRUE(back.config.qk_norm);
  EXPECT_EQ(back.config.head_dim(), 16);
  ExpectSameWeights(back, m);
}

TEST_F(Qwen3FilesTest, GgufRoundTripsBitForBitWithKeyLengthAndHfRows) {
  const Model m = testing::RandomModel(Config(), 4);
  const std::string path = Path("qwen.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "qwen3");
  EXPECT_EQ(g.Int("qwen3.attention.key_length"), 16);
  EXPECT_EQ(g.Int("qwen3.attention.value_length"), 16);
  EXPECT_EQ(g.Int("qwen3.rope.dimension_count"), 16);
  const int64_t D = m.config.head_dim();
  const auto raw = [&](const std::string& name) {
    const GgufTensorInfo* t = g.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return std::vector<float>{};
    std::vector<float> v(static_cast<size_t>(t->elements));
    g.ReadFloats(*t, v);
    return v;
  };
  const LayerWeights& L = m.weights.layers[1];
  EXPECT_EQ(raw("blk.1.attn_q_norm.weight"), InterleavedToHalves(L.q_norm, 1, D, 1));
  EXPECT_EQ(raw("blk.1.attn_k_norm.weight"), InterleavedToHalves(L.k_norm, 1, D, 1));
  EXPECT_EQ(raw("blk.1.attn_q.weight"),
            InterleavedToHalves(L.wq, m.config.n_heads, D, m.config.dim));
  EXPECT_NE(raw("blk.1.attn_q_norm.weight"), L.q_norm) << "the test cannot tell the layouts apart";
  const Model back = LoadGgufModel(path);
  ExpectSameWeights(back, m);
}

// RMSNorm of one head in double with the gain as it is.
std::vector<double> NormHead(std::vector<double> x, const std::vector<float>& gain, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= inv * gain[i];
  return x;
}

TEST_F(Qwen3FilesTest, ScoresFromTheFilesTensorsAsQwen3AttentionAreTheEngines) {
  const Model m = testing::RandomModel(Config(), 5);
  const std::string dir = Path("qwen");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const SafetensorsFile f(dir + "/model.safetensors");
  const ModelConfig& c = m.config;
  const int D = c.head_dim(), H = c.n_heads, G = c.n_kv_heads;
  const double eps = c.norm_eps;
  const std::string p = "model.layers.0.self_attn.";
  const std::vector<float> wq = f.Read<float>(p + "q_proj.weight"),
                           wk = f.Read<float>(p + "k_proj.weight"),
                           qn = f.Read<float>(p + "q_norm.weight"),
                           kn = f.Read<float>(p + "k_norm.weight");
  const Model loaded = LoadHfModel(dir);
  const LayerWeights& L = loaded.weights.layers[0];
  Rng rng(6);
  double wrong_norm_layout = 0;
  for (const auto& [i, j] : std::vector<std::pair<int, int>>{{0, 0}, {7, 3}, {90, 12}}) {
    std::vector<double> xi(static_cast<size_t>(c.dim)), xj(xi.size());
    for (double& v : xi) v = rng.Normal();
    for (double& v : xj) v = rng.Normal();
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / G);
      // Qwen3Attention: q_norm(q_proj(x).view(heads, head_dim)), then rotate_half RoPE.
      const double hf = Dot(RotateHalf(NormHead(Head(wq, {}, xi, h, D), qn, eps), i, c.rope_base),
                            RotateHalf(NormHead(Head(wk, {}, xj, g, D), kn, eps), j, c.rope_base));
      const double ours =
          Dot(RotateInterleaved(NormHead(Head(L.wq, {}, xi, h, D), L.q_norm, eps), i, c.rope_base),
              RotateInterleaved(NormHead(Head(L.wk, {}, xj, g, D), L.k_norm, eps), j, c.rope_base));
      // Both in double from the same floats: only the order of the sums differs (~1e-14).
      EXPECT_NEAR(ours, hf, 1e-10 * (1.0 + std::fabs(hf))) << "head " << h;
      // The gains left in HF's order give other scores.
      const double unpermuted =
          Dot(RotateInterleaved(NormHead(Head(L.wq, {}, xi, h, D), qn, eps), i, c.rope_base),
              RotateInterleaved(NormHead(Head(L.wk, {}, xj, g, D), kn, eps), j, c.rope_base));
      wrong_norm_layout = std::max(wrong_norm_layout, std::fabs(unpermuted - hf));
    }
  }
  EXPECT_GT(wrong_norm_layout, 0.5) << "the test cannot tell the gains' layouts apart";
}

// Heads given apart from dim / heads are not Qwen 3's alone (Mistral Nemo: head_dim 128 at hidden
// 5120 and 32 heads): a LLaMA model with them keeps its family and its width in both formats.
TEST_F(Qwen3FilesTest, LlamaWithWideHeadsKeepsItsFamilyAndWidthInBothFormats) {
  ModelConfig c = testing::TinyConfig();
  c.explicit_head_dim = 12;
  const Model m = testing::RandomModel(c, 7);
  SaveHfModel(m, Path("hf"), SafetensorsDtype::kF32);
  EXPECT_NE(ReadText(Path("hf") + "/config.json").find("\"LlamaForCausalLM\""), std::string::npos);
  ExpectSameWeights(LoadHfModel(Path("hf")), m);
  SaveGgufModel(m, Path("m.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(Path("m.gguf"));
  EXPECT_EQ(g.String("general.architecture"), "llama");
  EXPECT_EQ(g.Int("llama.attention.key_length"), 12);
  ExpectSameWeights(LoadGgufModel(Path("m.gguf")), m);
}

// Formats with no place for the norms or the width refuse the model by name, writing nothing.
TEST_F(Qwen3FilesTest, FormatsWithoutTheNormsRefuseItAndWriteNothing) {
  testing::ExpectFormatsWithoutTheChoiceRefuse(testing::RandomModel(Config(), 8), Path(""),
                                               "q and k");
}

}  // namespace
}  // namespace stretch
