// Qwen 2 (src/model/families/qwen2.cc) in both formats. A random model with q/k/v biases is
// written as an HF folder and as GGUF and read back bit for bit; the files hold what the
// families' own tools hold: HF's rotate-half rows for q and k and their biases in both formats
// (llama.cpp's converter copies Qwen 2's tensors unpermuted and runs them with NEOX RoPE), and
// the attention scores computed from the files' rows with HF's rotate_half equal the ones
// computed from the loaded model's rows with stretch's interleaved pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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
#include "src/position/method.h"
#include "tests/testing/family_files.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

class Qwen2FilesTest : public testing::TempDirTest {
 protected:
  Qwen2FilesTest() : TempDirTest("stretch_qwen2_") {}
  static ModelConfig Config() {
    ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads of 8, 2 kv heads
    c.qkv_bias = true;
    c.shared_classifier = true;  // as the small Qwen 2.5 models
    c.rope_base = 1000000.0f;    // Qwen 2's rope_theta
    c.norm_eps = 1e-6f;
    return c;
  }
};

using testing::Dot;
using testing::ExpectSameWeights;
using testing::Head;
using testing::ReadText;
using testing::RotateHalf;
using testing::RotateInterleaved;

TEST_F(Qwen2FilesTest, HfFolderRoundTripsBitForBitAsQwen2ForCausalLM) {
  const Model m = testing::RandomModel(Config(), 3);
  const std::string dir = Path("qwen");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = ReadText(dir + "/config.json");
  EXPECT_NE(config.find("\"Qwen2ForCausalLM\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"model_type\": \"qwen2\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"use_sliding_window\": false"), std::string::npos) << config;
  EXPECT_EQ(config.find("attention_bias"), std::string::npos) << "a LlamaConfig key";
  const SafetensorsFile f(dir + "/model.safetensors");
  EXPECT_NE(f.Find("model.layers.1.self_attn.v_proj.bias"), nullptr);
  EXPECT_EQ(f.Find("model.layers.1.self_attn.o_proj.bias"), nullptr);  // Qwen 2 has none
  const Model back = LoadHfModel(dir);
  EXPECT_TRUE(back.config.qkv_bias);
  EXPECT_EQ(back.config.rope_base, m.config.rope_base);
  ExpectSameWeights(back, m);
}

TEST_F(Qwen2FilesTest, GgufRoundTripsBitForBitWithQwen2KeysAndHfRows) {
  const Model m = testing::RandomModel(Config(), 4);
  const std::string path = Path("qwen.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "qwen2");
  EXPECT_EQ(g.Int("qwen2.context_length"), m.config.seq_len);
  EXPECT_EQ(g.Find("llama.context_length"), nullptr);
  EXPECT_NEAR(g.Float("qwen2.rope.freq_base"), 1e6, 1e-3);
  // q, k and their biases in HF's rotate-half rows, as llama.cpp's converter leaves them; v's
  // bias as it is.
  const int64_t D = m.config.head_dim();
  const auto raw = [&](const std::string& name) {
    const GgufTensorInfo* t = g.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    std::vector<float> v(static_cast<size_t>(t->elements));
    g.ReadFloats(*t, v);
    return v;
  };
  const LayerWeights& L = m.weights.layers[1];
  EXPECT_EQ(raw("blk.1.attn_q.bias"), InterleavedToHalves(L.bq, m.config.n_heads, D, 1));
  EXPECT_EQ(raw("blk.1.attn_k.bias"), InterleavedToHalves(L.bk, m.config.n_kv_heads, D, 1));
  EXPECT_EQ(raw("blk.1.attn_k.weight"),
            InterleavedToHalves(L.wk, m.config.n_kv_heads, D, m.config.dim));
  EXPECT_EQ(raw("blk.1.attn_v.bias"), L.bv);
  EXPECT_NE(raw("blk.1.attn_q.bias"), L.bq) << "the test cannot tell the layouts apart";
  const Model back = LoadGgufModel(path);
  EXPECT_NE(back.source.find("qwen2"), std::string::npos) << back.source;
  ExpectSameWeights(back, m);
}

TEST_F(Qwen2FilesTest, ScoresFromTheFilesRowsWithRotateHalfAreTheEngines) {
  const Model m = testing::RandomModel(Config(), 5);
  const std::string dir = Path("qwen");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const SafetensorsFile f(dir + "/model.safetensors");
  const ModelConfig& c = m.config;
  const int D = c.head_dim(), H = c.n_heads, G = c.n_kv_heads;
  const std::string p = "model.layers.0.self_attn.";
  const std::vector<float> wq = f.Read<float>(p + "q_proj.weight"),
                           bq = f.Read<float>(p + "q_proj.bias"),
                           wk = f.Read<float>(p + "k_proj.weight"),
                           bk = f.Read<float>(p + "k_proj.bias");
  const Model loaded = LoadHfModel(dir);
  const LayerWeights& L = loaded.weights.layers[0];
  Rng rng(6);
  double wrong_bias_layout = 0;
  for (const auto& [i, j] : std::vector<std::pair<int, int>>{{0, 0}, {7, 3}, {90, 12}}) {
    std::vector<double> xi(static_cast<size_t>(c.dim)), xj(xi.size());
    for (double& v : xi) v = rng.Normal();
    for (double& v : xj) v = rng.Normal();
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / G);
      const double hf = Dot(RotateHalf(Head(wq, bq, xi, h, D), i, c.rope_base),
                            RotateHalf(Head(wk, bk, xj, g, D), j, c.rope_base));
      const double ours = Dot(RotateInterleaved(Head(L.wq, L.bq, xi, h, D), i, c.rope_base),
                              RotateInterleaved(Head(L.wk, L.bk, xj, g, D), j, c.rope_base));
      // Both in double from the same floats: only the order of D products differs (~1e-14); a
      // wrong layout of a weight or a bias errs by the scores' own size.
      EXPECT_NEAR(ours, hf, 1e-10 * (1.0 + std::fabs(hf))) << "head " << h;
      // The biases left in HF's rows (not permuted) give other scores.
      const double unpermuted_bias =
          Dot(RotateInterleaved(Head(L.wq, bq, xi, h, D), i, c.rope_base),
              RotateInterleaved(Head(L.wk, bk, xj, g, D), j, c.rope_base));
      wrong_bias_layout = std::max(wrong_bias_layout, std::fabs(unpermuted_bias - hf));
    }
  }
  EXPECT_GT(wrong_bias_layout, 0.5) << "the test cannot tell the bias layouts apart";
}

TEST_F(Qwen2FilesTest, UnknownGgufArchitectureIsRefusedNamingTheKnownOnes) {
  const Model m = testing::RandomModel(Config(), 7);
  const std::string path = Path("qwen.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  // The same bytes with another architecture name of the same length.
  std::string bytes = ReadText(path);
  for (size_t at = bytes.find("qwen2"); at != std::string::npos; at = bytes.find("qwen2", at)) {
    bytes.replace(at, 5, "qwen9");
  }
  const std::string other = File("other.gguf", bytes);
  try {
    LoadGgufModel(other);
    ADD_FAILURE() << "an unknown architecture was read";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"qwen9\""), std::string::npos) << what;
    EXPECT_NE(what.find("\"qwen2\""), std::string::npos) << what;
    EXPECT_NE(what.find("\"llama\""), std::string::npos) << what;
  }
}

// LLaMA 3.1's rule goes into GGUF as rope_freqs.weight, which llama.cpp reads for the llama
// architecture only (ModelFamily::gguf_rope_freqs): a Qwen 2 file with it is refused, not written.
TEST_F(Qwen2FilesTest, Llama3ScalingIsRefusedForGgufOfAnotherArchitecture) {
  const Model m = testing::RandomModel(Config(), 9);
  const std::string path = Path("qwen-llama3.gguf");
  const Method llama3 = ParseMethod("llama3:factor=8");
  const std::string why = testing::ErrorOf(
      [&] { SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr, &llama3); });
  EXPECT_NE(why.find("rope_freqs.weight"), std::string::npos) << why;
  EXPECT_NE(why.find("only for the llama architecture, and this is a qwen2 model"),
            std::string::npos)
      << why;
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Formats with no place for the biases refuse the model by name, writing nothing, rather than
// drop them.
TEST_F(Qwen2FilesTest, FormatsWithoutBiasesRefuseItAndWriteNothing) {
  testing::ExpectFormatsWithoutTheChoiceRefuse(testing::RandomModel(Config(), 8), Path(""),
                                               "biases");
}

}  // namespace
}  // namespace stretch
