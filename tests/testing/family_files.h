// Helpers for the model-family file tests (tests/io/qwen2_test.cc, qwen3_test.cc): the two RoPE
// layouts on one head in double, a head of a projection, weights compared tensor by tensor.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/model_checkpoint.h"
#include "src/model/config.h"
#include "tests/testing/files.h"

namespace stretch::testing {

// Every tensor of `got` equals `want`'s, bit for bit, in ForEach's order.
inline void ExpectSameWeights(const Model& got, const Model& want) {
  ASSERT_EQ(got.config.qkv_bias, want.config.qkv_bias);
  ASSERT_EQ(got.config.qk_norm, want.config.qk_norm);
  ASSERT_EQ(got.config.head_dim(), want.config.head_dim());
  ModelWeights a = got.weights, b = want.weights;
  std::vector<std::vector<float>*> bs;
  b.ForEach([&](const std::string&, std::vector<float>& t, bool) { bs.push_back(&t); });
  size_t i = 0;
  a.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    ASSERT_LT(i, bs.size()) << name;
    EXPECT_TRUE(t == *bs[i]) << name << " differs";
    ++i;
  });
  EXPECT_EQ(i, bs.size());
}

// Formats with no place for a family's choice refuse the model with a message holding `why`,
// writing nothing, rather than drop it: a llama2.c file and a stretch checkpoint in `dir`.
inline void ExpectFormatsWithoutTheChoiceRefuse(const Model& m, const std::string& dir,
                                                const std::string& why) {
  const std::string bin = dir + "/m.bin", ckpt = dir + "/m.safetensors";
  for (const auto& [path, save] : std::vector<std::pair<std::string, std::function<void()>>>{
           {bin, [&] { SaveLlama2cVersion1(m, bin); }},
           {ckpt, [&] { SaveModelAsCheckpoint(m, ckpt, nullptr); }}}) {
    try {
      save();
      ADD_FAILURE() << path << " was written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
}

// An HF folder `dir` of a tied model written by stretch, whose config.json is `j`: with
// tie_word_embeddings absent it reads as tied (the config class's default,
// ModelFamily::hf_default_tied); with head_dim absent too, as heads of 256
// (hf_default_head_dim), so q_proj's `q_rows_at_256` rows are looked for and its own refused.
inline void ExpectHfTiedAndHeadDim256ByDefault(const std::string& dir, nlohmann::json j,
                                               int64_t q_rows_at_256) {
  j.erase("tie_word_embeddings");
  WriteBytes(dir + "/config.json", j.dump());
  EXPECT_TRUE(LoadHfModel(dir).config.shared_classifier);
  j.erase("head_dim");
  WriteBytes(dir + "/config.json", j.dump());
  const std::string error = ErrorOf([&] { LoadHfModel(dir); });
  EXPECT_NE(error.find("q_proj"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(q_rows_at_256)), std::string::npos) << error;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// HF's rotate_half on one head: pair i is (x[i], x[i + D/2]) at angle p theta_i.
inline std::vector<double> RotateHalf(const std::vector<double>& x, double p, double base) {
  const size_t D = x.size();
  std::vector<double> y(D);
  for (size_t i = 0; i < D / 2; ++i) {
    const double a = p * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    y[i] = x[i] * std::cos(a) - x[i + D / 2] * std::sin(a);
    y[i + D / 2] = x[i + D / 2] * std::cos(a) + x[i] * std::sin(a);
  }
  return y;
}

// stretch's interleaved pairs: pair i is (x[2i], x[2i + 1]).
inline std::vector<double> RotateInterleaved(const std::vector<double>& x, double p, double base) {
  const size_t D = x.size();
  std::vector<double> y(D);
  for (size_t i = 0; i < D / 2; ++i) {
    const double a = p * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    y[2 * i] = x[2 * i] * std::cos(a) - x[2 * i + 1] * std::sin(a);
    y[2 * i + 1] = x[2 * i + 1] * std::cos(a) + x[2 * i] * std::sin(a);
  }
  return y;
}

// Head h of W x + b (b may be empty): rows h D .. h D + D - 1.
inline std::vector<double> Head(const std::vector<float>& W, const std::vector<float>& b,
                                const std::vector<double>& x, int h, int D) {
  const size_t C = x.size();
  std::vector<double> out(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) {
    const size_t row = static_cast<size_t>(h * D + d);
    double s = b.empty() ? 0.0 : b[row];
    for (size_t c = 0; c < C; ++c) s += static_cast<double>(W[row * C + c]) * x[c];
    out[static_cast<size_t>(d)] = s;
  }
  return out;
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace stretch::testing
