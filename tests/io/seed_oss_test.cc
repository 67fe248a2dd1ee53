// Seed-OSS (src/model/families/seed_oss.cc), the family added as one descriptor file: Qwen 2's
// block under its own names. A random model with q/k/v biases is written as an HF folder and as
// GGUF and read back bit for bit; the files hold what the family's own tools hold
// (SeedOssForCausalLM with attention_bias true and attention_out_bias false; llama.cpp's
// seed_oss keys, the pre-feed-forward norm as blk.N.post_attention_norm, q and k in HF's
// rotate-half rows); and a folder whose o_proj has a bias (attention_out_bias true) is refused
// by the tensor's name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/safetensors.h"
#include "src/model/family.h"
#include "tests/testing/family_files.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::ExpectSameWeights;
using testing::ReadText;

class SeedOssFilesTest : public testing::TempDirTest {
 protected:
  SeedOssFilesTest() : TempDirTest("stretch_seed_oss_") {}
  static ModelConfig Config() {
    ModelConfig c = testing::TinyConfig();  // dim 32, 4 heads of 8, 2 kv heads
    c.family = "seed_oss";
    c.qkv_bias = true;
    c.explicit_head_dim = 16;  // Seed-OSS-36B: head_dim 128 at hidden 5120 / 80 heads
    c.rope_base = 10000000.0f;
    c.norm_eps = 1e-6f;
    return c;
  }
};

TEST_F(SeedOssFilesTest, TheFamilyIsFoundByItsNamesAndQwen2KeepsItsOwn) {
  const ModelFamily* f = FindFamilyByGguf("seed_oss");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(&FamilyOf(Config()), f);
  ModelConfig unnamed = Config();
  unnamed.family.clear();  // a biased model of no stated family is Qwen 2's, as before
  EXPECT_EQ(FamilyOf(unnamed).name, std::string("qwen2"));
}

TEST_F(SeedOssFilesTest, HfFolderRoundTripsBitForBitAsSeedOssForCausalLM) {
  const Model m = testing::RandomModel(Config(), 3);
  const std::string dir = Path("seed");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const nlohmann::json j = nlohmann::json::parse(ReadText(dir + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "SeedOssForCausalLM");
  EXPECT_EQ(j["model_type"], "seed_oss");
  EXPECT_EQ(j["attention_bias"], true);
  EXPECT_EQ(j["attention_out_bias"], false);
  EXPECT_EQ(j["head_dim"], 16);
  const SafetensorsFile f(dir + "/model.safetensors");
  EXPECT_NE(f.Find("model.layers.1.self_attn.k_proj.bias"), nullptr);
  EXPECT_NE(f.Find("model.layers.1.post_attention_layernorm.weight"), nullptr);
  const Model back = LoadHfModel(dir);
  EXPECT_EQ(back.config.family, "seed_oss");
  EXPECT_EQ(back.config.head_dim(), 16);
  ExpectSameWeights(back, m);
  // The same tokens score the same from the folder as from the model it was written from.
  const std::vector<int> tokens = testing::RandomTokens(40, m.config.vocab_size, 4);
  EXPECT_EQ(testing::Logits(back, "direct", tokens), testing::Logits(m, "direct", tokens));
}

TEST_F(SeedOssFilesTest, GgufRoundTripsBitForBitWithSeedOssKeysAndNames) {
  const Model m = testing::RandomModel(Config(), 5);
  const std::string path = Path("seed.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("general.architecture"), "seed_oss");
  EXPECT_EQ(g.Int("seed_oss.context_length"), m.config.seq_len);
  EXPECT_EQ(g.Int("seed_oss.attention.key_length"), 16);
  EXPECT_NE(g.FindTensor("blk.1.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(g.FindTensor("blk.1.ffn_norm.weight"), nullptr);
  // q and k in HF's rotate-half rows, as llama.cpp's converter leaves them.
  const GgufTensorInfo* k = g.FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  std::vector<float> raw(static_cast<size_t>(k->elements));
  g.ReadFloats(*k, raw);
  const LayerWeights& L = m.weights.layers[0];
  EXPECT_EQ(raw, InterleavedToHalves(L.wk, m.config.n_kv_heads, 16, m.config.dim));
  const Model back = LoadGgufModel(path);
  EXPECT_EQ(back.config.family, "seed_oss");
  ExpectSameWeights(back, m);
}

TEST_F(SeedOssFilesTest, AnOutputProjectionBiasIsRefusedByItsName) {
  const Model m = testing::RandomModel(Config(), 6);
  const std::string dir = Path("biased");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  // attention_out_bias true: o_proj.bias in the weights, which no family of stretch's runs.
  SafetensorsWriter w;
  {
    const SafetensorsFile f(dir + "/model.safetensors");
    for (const SafetensorsTensor& t : f.tensors()) {
      w.AddOwned<float>(t.name, t.shape, f.Read<float>(t.name));
    }
  }
  w.AddOwned<float>("model.layers.0.self_attn.o_proj.bias", {m.config.dim},
                    std::vector<float>(static_cast<size_t>(m.config.dim), 0.5f));
  w.Write(dir + "/model.safetensors");
  const std::string why = testing::ErrorOf([&] { LoadHfModel(dir); });
  EXPECT_NE(why.find("model.layers.0.self_attn.o_proj.bias"), std::string::npos) << why;
}

TEST_F(SeedOssFilesTest, ConfigSwitchesOtherThanTheFamilysAreRefusedByName) {
  const Model m = testing::RandomModel(Config(), 7);
  const std::string dir = Path("switched");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = ReadText(dir + "/config.json");
  const auto with = [&](const char* key, bool value) {
    nlohmann::json j = nlohmann::json::parse(config);
    j[key] = value;
    testing::WriteBytes(dir + "/config.json", j.dump());
    return testing::ErrorOf([&] { LoadHfModel(dir); });
  };
  // The family's switches (ModelFamily::hf_config_keys), named before any tensor is looked for.
  std::string why = with("attention_bias", false);
  EXPECT_NE(why.find("attention_bias is false, expected true"), std::string::npos) << why;
  why = with("attention_out_bias", true);
  EXPECT_NE(why.find("attention_out_bias is true, expected false"), std::string::npos) << why;
  why = with("mlp_bias", true);
  EXPECT_NE(why.find("mlp_bias is true, expected false"), std::string::npos) << why;
  testing::WriteBytes(dir + "/config.json", config);  // as written: reads
  EXPECT_TRUE(LoadHfModel(dir).config.qkv_bias);
}

}  // namespace
}  // namespace stretch
