// The conformance pack (src/eval/conformance.h): written, it holds every family's files and the
// log-probabilities stretch computes from them; checked, this build agrees with it; a
// log-probability changed by 1e-3 nats in one case is reported by that case and file.
#include "src/eval/conformance.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/io/gguf.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

class ConformanceTest : public testing::TempDirTest {
 protected:
  ConformanceTest() : TempDirTest("stretch_conformance_") {}
};

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(f), {}));
}

TEST_F(ConformanceTest, APackHoldsEveryFamilyAndThisBuildAgreesWithIt) {
  ConformanceOptions o;
  o.out = Path("pack");
  o.tokens = 300;  // beyond the models' 128: the scalings act
  const std::vector<ConformanceCase> cases = WriteConformancePack(o);
  std::set<std::string> architectures;
  for (const ConformanceCase& k : cases) {
    const std::string dir = o.out + "/" + k.name;
    architectures.insert(GgufFile::Open(dir + "/model.gguf").String("general.architecture"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/hf/config.json")) << k.name;
    const nlohmann::json j = ReadJsonFile(dir + "/logprobs.json");
    EXPECT_EQ(j["logprob"].size(), 299u) << k.name;
    EXPECT_LE(j["gguf_hf_max_abs_diff"].get<double>(), 1e-4) << k.name;
    for (const nlohmann::json& v : j["logprob"]) EXPECT_LT(v.get<double>(), 0.0) << k.name;
  }
  EXPECT_EQ(architectures,
            (std::set<std::string>{"llama", "qwen2", "qwen3", "phi3", "gemma3", "gemma2"}));
  EXPECT_TRUE(std::filesystem::exists(o.out + "/text.txt"));
  EXPECT_TRUE(std::filesystem::exists(o.out + "/README.md"));
  EXPECT_EQ(ReadJsonFile(o.out + "/qwen3-yarn/logprobs.json")["method"], "yarn:factor=4");
  EXPECT_EQ(ReadJsonFile(o.out + "/mistral/logprobs.json")["window"], 32);
  // The scalings change the log-probabilities beyond the trained length (not vacuous).
  const nlohmann::json plain = ReadJsonFile(o.out + "/qwen3/logprobs.json");
  const nlohmann::json yarn = ReadJsonFile(o.out + "/qwen3-yarn/logprobs.json");
  EXPECT_NE(plain["logprob"], yarn["logprob"]);

  EXPECT_TRUE(CheckConformancePack(o.out, 1e-4).empty());

  // One value moved by 1e-3 nats: that case's two files are reported, nothing else.
  const std::string path = o.out + "/phi3-longrope/logprobs.json";
  nlohmann::json j = ReadJsonFile(path);
  j["logprob"][200] = j["logprob"][200].get<double>() + 1e-3;
  std::ofstream(path) << j.dump();
  const std::vector<std::string> problems = CheckConformancePack(o.out, 1e-4);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("phi3-longrope/model.gguf: position 201"), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("phi3-longrope/hf: position 201"), std::string::npos) << problems[1];

  // A folder holding a pack is not written over.
  EXPECT_THROW(WriteConformancePack(o), Error);
}

}  // namespace
}  // namespace stretch
