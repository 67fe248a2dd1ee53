// SaveHfModel's `method` (src/io/hf_model.h): a position method written as config.json's
// rope_scaling, read back by ReadHfModelHeader and MethodFromHfRopeScaling (src/position/method.h)
// as the same method, with the trained length as seq_len; what rope_scaling cannot say is refused
// naming --method, before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/io/hf_model.h"
#include "src/io/safetensors.h"
#include "src/model/config.h"
#include "src/position/method.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::ErrorOf;

class HfRopeScalingTest : public testing::TempDirTest {
 protected:
  HfRopeScalingTest() : TempDirTest("stretch_hf_rope_") {}
};

struct Case {
  std::string spec;
  std::string rope_type;  // what config.json's rope_scaling says
  double factor;          // the extension: max_position_embeddings = seq_len x factor
};

TEST_F(HfRopeScalingTest, MethodsComeBackWithTheTrainedLength) {
  const ModelConfig c = testing::TinyConfig();  // seq_len 64; head dim 8: 4 RoPE pairs
  const Model m = testing::RandomModel(c, 21);
  const std::vector<Case> cases = {
      {"yarn:factor=4", "yarn", 4.0},
      {"yarn:factor=8,attention_factor=1.5", "yarn", 8.0},
      {"llama3:factor=8", "llama3", 8.0},
      {"longrope:factor=4,short=1/1/1/1,long=1/2/3/4", "longrope", 4.0},
      {"dynamic-ntk", "dynamic", 1.0},  // HF's dynamic with factor 1
      {"pi:factor=4", "linear", 4.0},
  };
  int n = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.spec);
    const Method method = ParseMethod(k.spec);
    const std::string dir = Path("m" + std::to_string(n++));
    SaveHfModel(m, dir, SafetensorsDtype::kF32, {}, &method);
    EXPECT_TRUE(LooksLikeHfFolder(dir));

    const HfModelHeader h = ReadHfModelHeader(dir);
    EXPECT_EQ(h.rope_type, k.rope_type);
    EXPECT_EQ(h.config.seq_len, c.seq_len);        // the trained (original) length
    EXPECT_EQ(h.config.rope_interpolation, 1.0f);  // the method is the caller's to run
    const json scaling = json::parse(h.rope_scaling_json);
    if (k.rope_type == "linear") {
      // HF's linear scaling reads max_position_embeddings as the length the interpolated model
      // runs at, which is also the length stretch's L is: it stays seq_len.
      EXPECT_EQ(h.rope_linear_factor, 4.0);
      EXPECT_EQ(h.max_position_embeddings, c.seq_len);
    } else {
      EXPECT_EQ(h.rope_linear_factor, 1.0);
      EXPECT_EQ(h.max_position_embeddings, std::llround(c.seq_len * k.factor));
    }
    if (k.rope_type == "yarn" || k.rope_type == "llama3" || k.rope_type == "longrope") {
      EXPECT_EQ(scaling.at("original_max_position_embeddings"), c.seq_len);
    }

    // The same method back; the types that state the original length state seq_len, which is
    // what the method's L (orig 0) meant on this model.
    Method want = method;
    if (scaling.contains("original_max_position_embeddings")) {
      want.rope.original_length = c.seq_len;
    }
    const Method back = MethodFromHfRopeScaling(h.rope_scaling_json);
    EXPECT_TRUE(back == want) << CanonicalSpec(back) << " != " << CanonicalSpec(want);

    // The weights are those of a save without a method.
    const Model g = LoadHfModel(dir);
    EXPECT_EQ(g.weights.layers[1].wq, m.weights.layers[1].wq);
    EXPECT_EQ(g.weights.classifier, m.weights.classifier);
  }
  // The keys of two of them, as transformers reads them.
  const json yarn = json::parse(testing::ReadBytes(Path("m1") + "/config.json"))["rope_scaling"];
  EXPECT_EQ(yarn, (json{{"rope_type", "yarn"},
                        {"factor", 8.0},
                        {"original_max_position_embeddings", 64},
                        {"attention_factor", 1.5}}));
  const json dynamic = json::parse(testing::ReadBytes(Path("m4") + "/config.json"))["rope_scaling"];
  EXPECT_EQ(dynamic, (json{{"rope_type", "dynamic"}, {"factor", 1.0}}));
}

TEST_F(HfRopeScalingTest, DirectIsTheModelsOwnRope) {
  const ModelConfig c = testing::TinyConfig();
  const Method direct = ParseMethod("direct");
  const std::string dir = Path("direct");
  SaveHfModel(testing::RandomModel(c, 22), dir, SafetensorsDtype::kF32, {}, &direct);
  const json config = json::parse(testing::ReadBytes(dir + "/config.json"));
  EXPECT_TRUE(config["rope_scaling"].is_null());
  EXPECT_EQ(config["max_position_embeddings"], c.seq_len);
  EXPECT_EQ(ReadHfModelHeader(dir).rope_scaling_json, "");
}

TEST_F(HfRopeScalingTest, WhatRopeScalingCannotSayIsRefusedBeforeWriting) {
  const Model m = testing::RandomModel(testing::TinyConfig(), 23);
  int n = 0;
  for (const char* spec : {"ntk:factor=4", "rerope:window=64", "yarn", "yarn:factor=4+logn"}) {
    SCOPED_TRACE(spec);
    const Method method = ParseMethod(spec);
    const std::string dir = Path("r" + std::to_string(n++));
    const std::string e =
        ErrorOf([&] { SaveHfModel(m, dir, SafetensorsDtype::kF32, {}, &method); });
    EXPECT_NE(e.find("--method"), std::string::npos) << e;
    EXPECT_NE(e.find(dir), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(dir));  // not even the folder
  }
  // An existing model folder is left as it was.
  const std::string dir = Path("kept");
  SaveHfModel(m, dir, SafetensorsDtype::kF32);
  const std::string config = testing::ReadBytes(dir + "/config.json");
  const Method ntk = ParseMethod("ntk:factor=4");
  ErrorOf([&] { SaveHfModel(m, dir, SafetensorsDtype::kBF16, {}, &ntk); });
  EXPECT_EQ(testing::ReadBytes(dir + "/config.json"), config);
  EXPECT_EQ(ReadHfModelHeader(dir).format, "Hugging Face folder (LlamaForCausalLM, F32)");
}

}  // namespace
}  // namespace stretch
