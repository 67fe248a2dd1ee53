// A model read from a GGUF file gives the same logits as the llama2.c file it was written from,
// bit for bit, under every position method (F32 matrices: the same weights, the same config), and
// close ones from F16 and Q8_0 matrices.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/llama2c.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::Logits;

// A file name of this process under the test's temporary directory.
std::string TempPath(const std::string& name) {
  return (testing::ProgramTempDir("stretch_gguf_") / name).string();
}

TEST(GgufLogits, Stories260KEqualsTheLlama2cFileUnderEveryMethod) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const Model m = LoadLlama2c(bin);
  const std::string path = TempPath("logits.gguf");
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  const Model g = LoadGgufModel(path);
  std::remove(path.c_str());
  // 700 tokens: past the trained 512, where the methods differ from each other.
  const std::vector<int> tokens = testing::RandomTokens(700, m.config.vocab_size, 5);
  for (const char* spec :
       {"direct", "pi", "ntk", "yarn", "dynamic-yarn", "rerope:window=128",
        "self-extend:group=4,window=128", "lambda:sinks=4,window=256", "yarn+logn"}) {
    const std::vector<float> a = Logits(m, spec, tokens), b = Logits(g, spec, tokens);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << spec;
  }
}

TEST(GgufLogits, HalfAndEightBitMatricesStayClose) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const Model m = LoadLlama2c(bin);
  const std::vector<int> tokens = testing::RandomTokens(200, m.config.vocab_size, 9);
  const std::vector<float> ref = Logits(m, "direct", tokens);
  for (GgmlType t : {GgmlType::kF16, GgmlType::kQ8_0}) {
    const std::string path = TempPath("q.gguf");
    SaveGgufModel(m, path, static_cast<uint32_t>(t), nullptr);
    const Model g = LoadGgufModel(path);
    std::remove(path.c_str());
    const std::vector<float> got = Logits(g, "direct", tokens);
    double max_diff = 0, max_abs = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[k] - ref[k])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(ref[k])));
    }
    // Rounded weights change the logits, but by far less than their scale: F16 keeps 11 bits
    // (relative 2^-11 per weight), Q8_0 about 7 (half a step of max/127). Measured here on
    // stories260K: F16 4.7e-4 of the logits' largest magnitude, Q8_0 1.8e-2; the budgets leave a
    // factor of 4-5 for other machines' summation orders.
    const double budget = (t == GgmlType::kF16 ? 2e-3 : 8e-2) * max_abs;
    EXPECT_LT(max_diff, budget) << GgmlTypeName(static_cast<uint32_t>(t)) << " max " << max_abs;
    EXPECT_GT(max_diff, 0.0) << "the rounding should change something";
  }
}

}  // namespace
// What the writer says about the file, as llama.cpp's converters do: general.name is the model's
// name (its file or run, never the path it was read from) and general.file_type the matrices'
// llama_ftype.
TEST(GgufWriter, NamesTheModelAndItsFileType) {
  Model m = testing::RandomModel(testing::TinyConfig(), 3);
  const std::string path = TempPath("named.gguf");
  const std::pair<GgmlType, int64_t> types[] = {
      {GgmlType::kF32, 0}, {GgmlType::kF16, 1}, {GgmlType::kQ8_0, 7}, {GgmlType::kBF16, 32}};
  m.source = "/data/models/stories260K.bin (llama2.c checkpoint)";
  for (const auto& [type, ftype] : types) {
    SaveGgufModel(m, path, static_cast<uint32_t>(type), nullptr);
    const GgufFile g = GgufFile::Open(path);
    EXPECT_EQ(g.String("general.name"), "stories260K");
    EXPECT_EQ(g.Int("general.file_type"), ftype) << GgmlTypeName(static_cast<uint32_t>(type));
  }
  m.source = "/tmp/runs/tiny-rope/step-00000600.safetensors (stretch checkpoint, step 600)";
  SaveGgufModel(m, path, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  EXPECT_EQ(GgufFile::Open(path).String("general.name"), "tiny-rope");
  std::remove(path.c_str());
}

}  // namespace stretch
