// A GGUF file's RoPE scaling (llama.rope.scaling.* and the factor tensors) becomes the method the
// file asks for, read as llama.cpp reads it (src/io/gguf_model.cc, RopeScalingFromGguf).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/model_file.h"
#include "src/position/method.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::ErrorOf;

// Head dim 16: 8 RoPE pairs.
ModelConfig SmallConfig(int seq_len) {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 48;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.vocab_size = 40;
  c.seq_len = seq_len;
  return c;
}

class GgufRopeScaling : public testing::TempDirTest {
 protected:
  GgufRopeScaling() : TempDirTest("stretch_gguf_rope_") {}

  // A small model (head dim 16: 8 pairs) written as GGUF, then rewritten with `extra` keys and
  // tensors added (replacing keys of the same name).
  std::string Write(const std::vector<std::pair<std::string, GgufValue>>& extra,
                    const std::vector<GgufTensorOut>& extra_tensors = {}) {
    const std::string base = Path("base.gguf");
    SaveGgufModel(testing::RandomModel(SmallConfig(2048), 3), base,
                  static_cast<uint32_t>(GgmlType::kF32), nullptr);
    const GgufFile g = GgufFile::Open(base);
    std::vector<std::pair<std::string, GgufValue>> kv;
    for (const auto& [key, value] : g.metadata()) {
      bool replaced = false;
      for (const auto& e : extra) replaced |= e.first == key;
      if (!replaced) kv.emplace_back(key, value);
    }
    for (const auto& e : extra) kv.push_back(e);
    std::vector<GgufTensorOut> tensors;
    for (const GgufTensorInfo& t : g.tensors()) {
      const auto bytes = g.TensorData(t);
      tensors.push_back({t.name, t.ne, t.type, std::vector<uint8_t>(bytes.begin(), bytes.end())});
    }
    for (const GgufTensorOut& t : extra_tensors) tensors.push_back(t);
    const std::string path = Path("scaled.gguf");
    WriteGguf(path, kv, tensors);
    return path;
  }
};

GgufValue F32(float v) { return GgufF32(v); }
GgufTensorOut Factors(const std::string& name, const std::vector<float>& f) {
  return {name,
          {static_cast<int64_t>(f.size())},
          static_cast<uint32_t>(GgmlType::kF32),
          EncodeTensor(f, GgmlType::kF32)};
}

TEST_F(GgufRopeScaling, NoKeysIsPlainRope) {
  const GgufModelHeader h = ReadGgufModelHeader(Write({}));
  EXPECT_EQ(h.method_spec, "");
  EXPECT_EQ(h.config.seq_len, 2048);
  EXPECT_EQ(h.config.rope_interpolation, 1.0f);
}

TEST_F(GgufRopeScaling, YarnBecomesTheMethodWithTheOriginalLengthAsL) {
  const GgufModelHeader h =
      ReadGgufModelHeader(Write({{"llama.rope.scaling.type", GgufString("yarn")},
                                 {"llama.rope.scaling.factor", F32(4.0f)},
                                 {"llama.rope.scaling.original_context_length", GgufU32(512)}}));
  EXPECT_EQ(h.config.seq_len, 512);
  const Method m = ParseMethod(h.method_spec);
  EXPECT_EQ(m.rope.scaling, RopeScaling::kYarn);
  EXPECT_EQ(m.rope.factor, 4.0);
  EXPECT_EQ(m.rope.attention_factor, 0.0);  // YaRN's own 0.1 ln s + 1, as llama.cpp
  EXPECT_NE(h.method_source.find("yarn"), std::string::npos) << h.method_source;
  bool said = false;
  for (const std::string& line : h.provenance) {
    said |= line.find("seq_len 512 <- llama.rope.scaling.original_context_length") == 0;
  }
  EXPECT_TRUE(said);
}

TEST_F(GgufRopeScaling, YarnAttentionFactorFollowsLlamaCpp) {
  // llama.cpp (src/llama-context.cpp): with yarn_log_multiplier m the factor is
  // get_mscale(s, 1) / get_mscale(s, m), times rope.scaling.attn_factor.
  const double s = 8.0, m = 0.707, a = 1.25;
  const GgufModelHeader h =
      ReadGgufModelHeader(Write({{"llama.rope.scaling.type", GgufString("yarn")},
                                 {"llama.rope.scaling.factor", F32(static_cast<float>(s))},
                                 {"llama.rope.scaling.yarn_log_multiplier", F32(0.707f)},
                                 {"llama.rope.scaling.attn_factor", F32(1.25f)},
                                 {"llama.rope.scaling.yarn_beta_fast", F32(16.0f)}}));
  const Method got = ParseMethod(h.method_spec);
  const double mf = static_cast<double>(static_cast<float>(m));
  const double want = static_cast<double>(static_cast<float>(a)) * (0.1 * std::log(s) + 1.0) /
                      (0.1 * mf * std::log(s) + 1.0);
  EXPECT_NEAR(got.rope.attention_factor, want, 1e-12);
  EXPECT_EQ(got.rope.beta_fast, 16.0);
  EXPECT_EQ(h.config.seq_len, 2048);  // no original_context_length: llama.context_length
}

TEST_F(GgufRopeScaling, LinearIsTheModelsOwnInterpolation) {
  // llama.cpp's default type is linear: a factor alone (or the older scale_linear key) scales.
  for (const char* key : {"llama.rope.scaling.factor", "llama.rope.scale_linear"}) {
    const GgufModelHeader h = ReadGgufModelHeader(Write({{key, F32(2.0f)}}));
    EXPECT_EQ(h.config.rope_interpolation, 2.0f) << key;
    EXPECT_EQ(h.method_spec, "") << key;
  }
  const GgufModelHeader none = ReadGgufModelHeader(Write(
      {{"llama.rope.scaling.type", GgufString("none")}, {"llama.rope.scaling.factor", F32(2)}}));
  EXPECT_EQ(none.config.rope_interpolation, 1.0f);
}

TEST_F(GgufRopeScaling, RopeFreqsTensorGivesLlama3sFrequencies) {
  // LLaMA 3.1 files carry llama3's rule as per-pair divisors (rope_freqs.weight). Written from
  // the llama3 method's own frequencies, the file's method must give the same angles.
  const RopeGeometry geo{8192, 16, 500000.0, 1.0};
  const Method llama3 = ParseMethod("llama3:factor=8");
  const RopeFrequencies want = ComputeFrequencies(llama3.rope, geo, 8.0);
  const RopeFrequencies plain = ComputeFrequencies(Method{}.rope, geo, 1.0);
  std::vector<float> divisors;
  for (size_t t = 0; t < want.thetas.size(); ++t) {
    divisors.push_back(static_cast<float>(plain.thetas[t] / want.thetas[t]));
  }
  const std::string path =
      Write({{"llama.context_length", GgufU32(8192)}, {"llama.rope.freq_base", F32(500000.0f)}},
            {Factors("rope_freqs.weight", divisors)});
  const GgufModelHeader h = ReadGgufModelHeader(path);
  const Method m = ParseMethod(h.method_spec);
  // At every call length (inside and beyond the trained one) the divisors apply.
  for (double s : {1.0, 4.0}) {
    const RopeFrequencies got = ComputeFrequencies(m.rope, geo, s);
    ASSERT_EQ(got.thetas.size(), want.thetas.size());
    for (size_t t = 0; t < got.thetas.size(); ++t) {
      // The divisors went through float32: relative 2^-24 each.
      EXPECT_NEAR(got.thetas[t] / want.thetas[t], 1.0, 1e-7) << t;
    }
    EXPECT_EQ(got.attention_factor, 1.0);
  }
  // The whole model loads, the tensor used rather than refused.
  EXPECT_EQ(LoadGgufModel(path).config.seq_len, 8192);
}

TEST_F(GgufRopeScaling, LongRopeTakesBothListsAndItsAttentionFactor) {
  const std::vector<float> s = {1, 1, 1.5f, 2, 3, 4, 6, 8}, l = {1, 2, 3, 4, 8, 16, 24, 32};
  const GgufModelHeader h = ReadGgufModelHeader(
      Write({{"llama.rope.scaling.type", GgufString("longrope")},
             {"llama.rope.scaling.original_context_length", GgufU32(256)}},
            {Factors("rope_factors_short.weight", s), Factors("rope_factors_long.weight", l)}));
  const Method m = ParseMethod(h.method_spec);
  EXPECT_EQ(m.rope.scaling, RopeScaling::kLongRope);
  EXPECT_EQ(m.rope.short_factor, std::vector<double>(s.begin(), s.end()));
  EXPECT_EQ(m.rope.long_factor, std::vector<double>(l.begin(), l.end()));
  EXPECT_EQ(h.config.seq_len, 256);
  // HF: sqrt(1 + ln(f) / ln(orig)), f = 2048 / 256.
  EXPECT_NEAR(m.rope.attention_factor, std::sqrt(1.0 + std::log(8.0) / std::log(256.0)), 1e-12);
}

TEST_F(GgufRopeScaling, WhatItCannotExpressIsRefusedByName) {
  EXPECT_NE(ErrorOf([&] {
              ReadGgufModelHeader(Write({{"llama.rope.scaling.type", GgufString("su")}}));
            }).find("llama.rope.scaling.type"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ReadGgufModelHeader(Write({{"llama.rope.scaling.type", GgufString("yarn")},
                                         {"llama.rope.scaling.factor", F32(4)},
                                         {"llama.rope.scaling.yarn_ext_factor", F32(0.5f)}}));
            }).find("yarn_ext_factor"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ReadGgufModelHeader(Write({{"llama.rope.scaling.factor", F32(0.5f)}}));
            }).find("llama.rope.scaling.factor"),
            std::string::npos);
  // LongRoPE without its lists, or a list of the wrong length.
  EXPECT_NE(ErrorOf([&] {
              ReadGgufModelHeader(Write({{"llama.rope.scaling.type", GgufString("longrope")}}));
            }).find("rope_factors_short.weight"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ReadGgufModelHeader(Write({}, {Factors("rope_freqs.weight", {1, 2, 3})}));
            }).find("rope_freqs.weight"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf([&] {
        ReadGgufModelHeader(Write({}, {Factors("rope_freqs.weight", {1, 2, 3, 4, 5, 6, 7, -8})}));
      }).find("rope_freqs.weight"),
      std::string::npos);
}

TEST_F(GgufRopeScaling, AWrittenMethodReadsBackWithTheSameFrequencies) {
  const Model model = testing::RandomModel(SmallConfig(512), 4);
  const RopeGeometry geo{512, 16, 10000.0, 1.0};
  for (const char* spec :
       {"pi:factor=4", "yarn:factor=4", "yarn:factor=8,attention_factor=1.5", "llama3:factor=8"}) {
    const Method want = ParseMethod(spec);
    const std::string path = Path("written.gguf");
    SaveGgufModel(model, path, static_cast<uint32_t>(GgmlType::kF32), nullptr, &want);
    const GgufModelHeader h = ReadGgufModelHeader(path);
    EXPECT_EQ(h.config.seq_len, 512) << spec;
    // pi comes back as the model's own interpolation, the others as the file's method.
    const Method got = ParseMethod(h.method_spec.empty() ? "direct" : h.method_spec);
    const RopeGeometry got_geo{h.config.seq_len, 16, h.config.rope_base,
                               h.config.rope_interpolation};
    for (double s : {1.0, 2.0, 4.0}) {  // inside and beyond the trained length
      const RopeFrequencies a = ComputeFrequencies(want.rope, geo, want.rope.factor);
      const RopeFrequencies b = ComputeFrequencies(
          got.rope, got_geo, CallScale(got.rope, got_geo, static_cast<int64_t>(512 * s)));
      ASSERT_EQ(a.thetas.size(), b.thetas.size());
      for (size_t t = 0; t < a.thetas.size(); ++t) {
        // Factors pass through float32 keys and tensors: relative 2^-24 each, a few of them.
        EXPECT_NEAR(b.thetas[t] / a.thetas[t], 1.0, 1e-6) << spec << " pair " << t;
      }
      EXPECT_NEAR(b.attention_factor, a.attention_factor, 1e-6) << spec;
    }
  }
  // What llama.cpp's files cannot say is refused by name, and nothing is written.
  for (const char* spec : {"ntk:factor=4", "yarn", "yarn:factor=4,beta_fast=16", "dynamic-yarn",
                           "rerope:window=64", "yarn:factor=4+logn"}) {
    const Method m = ParseMethod(spec);
    const std::string path = Path("refused.gguf");
    const std::string message = ErrorOf(
        [&] { SaveGgufModel(model, path, static_cast<uint32_t>(GgmlType::kF32), nullptr, &m); });
    EXPECT_NE(message.find("--method"), std::string::npos) << spec << ": " << message;
    EXPECT_FALSE(std::filesystem::exists(path)) << spec;
  }
}

TEST_F(GgufRopeScaling, TheModelFileHeaderCarriesTheMethodAndItsSource) {
  const std::string path = Write(
      {{"llama.rope.scaling.type", GgufString("yarn")}, {"llama.rope.scaling.factor", F32(2.0f)}});
  const ModelFileHeader h = ReadModelFileHeader(path);
  EXPECT_EQ(h.method_spec, "yarn:factor=2");
  EXPECT_FALSE(h.method_source.empty());
  EXPECT_FALSE(h.provenance.empty());
  EXPECT_EQ(LoadModelFile(path, {}).header.method_spec, "yarn:factor=2");
}

}  // namespace
}  // namespace stretch
