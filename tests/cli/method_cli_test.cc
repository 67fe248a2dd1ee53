// The position-method flags of `stretch generate`, `score` and `inspect`, the methods x lengths
// table and the fixed-tail protocol, run as a user runs them, on a tiny random model and a
// character-level tokenizer written to a temporary folder (no ../shared needed): L = 64, a
// 40-token vocabulary, 4 RoPE frequency pairs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/llama2c.h"
#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::Files;
using testing::Has;
using testing::kChars;
using testing::RunCli;
using testing::RunResult;

std::string Model() { return "--model '" + Files().model + "'"; }
std::string ModelTok() { return Model() + " --tokenizer '" + Files().tok + "'"; }
std::string Score() {
  return "score " + ModelTok() + " --data '" + Files().text + "' --no-progress ";
}
std::string Temp(const std::string& name) { return Files().dir + "/" + name; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(MethodCli, MethodsTimesLengthsPrintOneTableAndEveryCellInJson) {
  const std::string json = Temp("product.json");
  std::filesystem::remove(json);
  // Three methods: the second spec holds a comma of its own.
  const RunResult r = RunCli(Score() +
                             "--methods direct,yarn:factor=4,beta_fast=16,pi --ctx 64,128 "
                             "--windows 2 --json-out '" +
                             json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "3 methods x 2 lengths")) << r.out;
  EXPECT_TRUE(Has(r.out, "ctx 64")) << r.out;
  EXPECT_TRUE(Has(r.out, "ctx 128")) << r.out;
  EXPECT_TRUE(Has(r.out, "\nyarn:factor=4,beta_fast=16 ")) << r.out;
  EXPECT_TRUE(Has(r.out, "\npi ")) << r.out;
  EXPECT_TRUE(Has(r.out, "64: pi:factor=1")) << r.out;  // resolved per length
  EXPECT_TRUE(Has(r.out, "128: pi:factor=2")) << r.out;
  EXPECT_FALSE(Has(r.out, "positions    tokens")) << r.out;  // not the single-run report

  const nlohmann::json j = ReadJson(json);
  ASSERT_EQ(j["methods"].size(), 3u);
  EXPECT_EQ(j["methods"][1]["spec"], "yarn:factor=4,beta_fast=16");
  EXPECT_EQ(j["contexts"], nlohmann::json({64, 128}));
  EXPECT_TRUE(Has(j["protocol"].get<std::string>(), "BOS (prepended, replacing nothing)"));
  ASSERT_EQ(j["cells"].size(), 6u);
  for (size_t k = 0; k < 6; ++k) {
    const nlohmann::json& cell = j["cells"][k];
    EXPECT_EQ(cell["method_index"], k / 2);
    EXPECT_EQ(cell["ctx"], k % 2 ? 128 : 64);
    EXPECT_EQ(cell["windows"], 2);
    EXPECT_EQ(cell["tokens_scored"], 2 * cell["ctx"].get<int>());
    for (const char* f : {"loss", "perplexity", "accuracy", "resolved_method", "by_position"}) {
      EXPECT_TRUE(cell.contains(f)) << f;
    }
    EXPECT_GT(cell["loss"].get<double>(), 0.0);
  }
  EXPECT_TRUE(Has(j["cells"][3]["resolved_method"].get<std::string>(), "factor=4"));
  EXPECT_TRUE(Has(j["cells"][5]["resolved_method"].get<std::string>(), "pi:factor=2"));
  // The table and the JSON agree, each cell with its interval over the 2 windows (in the JSON:
  // loss_ci, perplexity_ci and accuracy_ci, for the cell and its buckets).
  const nlohmann::json& c5 = j["cells"][5];
  ASSERT_TRUE(c5.contains("loss_ci") && c5.contains("accuracy_ci")) << c5;
  ASSERT_TRUE(c5["by_position"][0].contains("loss_ci")) << c5;
  const double loss = c5["loss"].get<double>(), accuracy = c5["accuracy"].get<double>();
  EXPECT_LE(c5["loss_ci"][0].get<double>(), loss);
  EXPECT_GE(c5["loss_ci"][1].get<double>(), loss);
  EXPECT_TRUE(Has(r.out, fmt::format("{:.4f}+-{:.4f} / {:.4f}+-", loss,
                                     std::max(loss - c5["loss_ci"][0].get<double>(),
                                              c5["loss_ci"][1].get<double>() - loss),
                                     accuracy)))
      << r.out;
}

TEST(MethodCli, MethodAndMethodsAreOneListAndMayRepeat) {
  const RunResult r =
      RunCli(Score() + "--method direct --methods 'ntk, pi' --ctx 64 --ctx 96 --windows 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["methods"].size(), 3u);
  EXPECT_EQ(j["methods"][1]["spec"], "ntk");
  EXPECT_EQ(j["methods"][2]["spec"], "pi");
  EXPECT_EQ(j["cells"].size(), 6u);
}

// One method and one length keep the report by position (and its JSON fields).
TEST(MethodCli, OneMethodAndOneLengthKeepTheReportByPosition) {
  const RunResult r = RunCli(Score() + "--method pi --ctx 128 --bucket 64");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "method: pi:factor=2")) << r.out;
  EXPECT_TRUE(Has(r.out, "9 windows of 128 positions, 1152 tokens scored")) << r.out;
  EXPECT_TRUE(Has(r.out, "0-63")) << r.out;
  EXPECT_TRUE(Has(r.out, "64-127")) << r.out;
  const RunResult j = RunCli(Score() + "--method pi --ctx 128 --json");
  ASSERT_EQ(j.exit_code, 0) << j.out;
  const nlohmann::json report = nlohmann::json::parse(j.out.substr(j.out.find('{')));
  EXPECT_EQ(report["ctx"], 128);
  EXPECT_TRUE(Has(report["method"].get<std::string>(), "pi:factor=2"));
  EXPECT_EQ(report["result"]["tokens_scored"], 1152);
  EXPECT_EQ(report["stride"], 128);
  ASSERT_EQ(report["cells"].size(), 1u);
}

TEST(MethodCli, FixedTailScoresTheSameTargetsAtEveryLength) {
  const std::string csv = Temp("tail.csv");
  const RunResult r = RunCli(Score() +
                             "--methods direct,ntk --ctx 64,128,256 --tail 32 --json "
                             "--per-token '" +
                             csv + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["tail"], 32);
  EXPECT_TRUE(Has(j["protocol"].get<std::string>(), "Fixed tail")) << j["protocol"];
  ASSERT_EQ(j["cells"].size(), 6u);
  for (const nlohmann::json& cell : j["cells"]) {
    EXPECT_EQ(cell["windows"], 1200 / 256);
    EXPECT_EQ(cell["tokens_scored"], (1200 / 256) * 32);
  }
  // Per token: method, ctx, window, position, target, ...; the targets of every cell agree.
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "method,ctx,window,position,target,loss,correct");
  std::map<std::string, std::vector<std::string>> targets;  // "method,ctx" -> window:target
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t start = 0;
    for (size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1) {
      f.push_back(line.substr(start, comma - start));
    }
    f.push_back(line.substr(start));
    ASSERT_EQ(f.size(), 7u) << line;
    targets[f[0] + "," + f[1]].push_back(f[2] + ":" + f[4]);
  }
  ASSERT_EQ(targets.size(), 6u);
  for (const auto& [cell, t] : targets) EXPECT_EQ(t, targets.begin()->second) << cell;
}

// Each bad input fails with exit code 1 and a message naming the field, before anything is
// scored: no table, no progress line, no output file.
TEST(MethodCli, BadMethodInputsFailBeforeAnythingIsScored) {
  struct Case {
    std::string args;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      // score's list names nbce too, which is no position method (ParseMethod's also_known).
      {"--methods direct,bogus --ctx 64",
       {"unknown method \"bogus\"", "known: direct", "streaming, nbce)"}},
      {"--methods direct,yarn:fctor=4 --ctx 64", {"unknown key \"fctor\"", "allowed:"}},
      {"--method pi:factor=abc --ctx 64", {"factor=abc"}},
      {"--methods direct,rerope:window=100 --ctx 128,64",
       {"method \"rerope:window=100\" at --ctx 64", "window=100"}},
      {"--methods direct,pi --ctx 64,128 --tail 100", {"--tail: found 100, expected 1..64"}},
      {"--method pi --rope-scaling linear --rope-scale 2 --ctx 64",
       {"--method and --rope-scaling both select the position method"}},
      {"--rope-scale 2 --rope-scaling-json '{\"rope_type\":\"linear\",\"factor\":2}' --ctx 64",
       {"--rope-scale and --rope-scaling-json both select the position method"}},
      {"--rope-scaling cubic --ctx 64", {"--rope-scaling=cubic", "allowed: none, linear, yarn"}},
      {"--rope-scaling-json '{\"rope_type\":\"yarn\",\"factr\":4}' --ctx 64", {"factr"}},
      {"--methods 'direct,,pi' --ctx 64", {"empty method spec"}},
      {"--ctx 64,2000", {"fewer than one window of --ctx 2000"}},
      {"--methods yarn --layer-method 99=rerope --ctx 128",
       {"method \"yarn [layer 99: rerope]\" at --ctx 128", "a method of its own for layer 99"}},
      {"--methods yarn --layer-method first=rerope --ctx 128",
       {"--layer-method first=rerope: expected L=SPEC"}},
      {"--methods yarn --layer-method 0=rerope:windw=8 --ctx 128",
       {"--layer-method 0=rerope:windw=8", "unknown key \"windw\""}},
      {"--methods nbce --tail 16 --layer-method 0=pi --ctx 128",
       {"NBCE runs its chunks' rows under one method on every layer"}},
  };
  for (const Case& c : cases) {
    const std::string json = Temp("bad.json"), csv = Temp("bad.csv");
    std::filesystem::remove(json);
    std::filesystem::remove(csv);
    // With progress on: a cell that started would print its line.
    const RunResult r = RunCli("score " + ModelTok() + " --data '" + Files().text + "' " + c.args +
                               " --json-out '" + json + "' --per-token '" + csv + "'");
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.out;
    for (const std::string& m : c.message) EXPECT_TRUE(Has(r.out, m)) << c.args << "\n" << r.out;
    EXPECT_TRUE(Has(r.out, "stretch: error: ")) << r.out;
    EXPECT_FALSE(Has(r.out, "score [")) << r.out;
    EXPECT_FALSE(Has(r.out, "windows of")) << r.out;
    EXPECT_FALSE(Has(r.out, "loss")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(json)) << c.args;
    EXPECT_FALSE(std::filesystem::exists(csv)) << c.args;
  }
}

// --layer-method L=SPEC: layer L runs SPEC under every row's method; rows and resolved specs say
// so, and the numbers differ from the method on every layer.
TEST(MethodCli, LayerMethodRunsAnotherMethodOnOneLayer) {
  const RunResult plain = RunCli(Score() + "--methods yarn --ctx 128 --windows 2 --json");
  const RunResult own = RunCli(Score() +
                               "--methods yarn,pi --layer-method 0=rerope:window=16 --ctx 128 "
                               "--windows 2 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(own.exit_code, 0) << own.out;
  const nlohmann::json p = nlohmann::json::parse(plain.out.substr(plain.out.find('{')));
  const nlohmann::json j = nlohmann::json::parse(own.out.substr(own.out.find('{')));
  ASSERT_EQ(j["methods"].size(), 2u);
  EXPECT_EQ(j["methods"][0]["spec"], "yarn [layer 0: rerope:window=16]");
  EXPECT_EQ(j["methods"][1]["spec"], "pi [layer 0: rerope:window=16]");
  EXPECT_EQ(j["methods"][0]["canonical"], "yarn [layer 0: rerope:window=16]");
  const std::string resolved = j["cells"][0]["resolved_method"].get<std::string>();
  EXPECT_TRUE(Has(resolved, "yarn:factor=2")) << resolved;
  EXPECT_TRUE(Has(resolved, " [layer 0: rerope:window=16,base=")) << resolved;
  EXPECT_NE(j["cells"][0]["loss"].get<double>(), p["cells"][0]["loss"].get<double>());
}

TEST(MethodCli, LlamaCppAndHfFlagsSelectTheMethod) {
  const RunResult llama = RunCli(
      Score() + "--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 64 --ctx 128 --windows 1");
  ASSERT_EQ(llama.exit_code, 0) << llama.out;
  EXPECT_TRUE(Has(llama.out, "method: yarn:factor=4")) << llama.out;
  const RunResult hf =
      RunCli(Score() +
             "--rope-scaling-json '{\"rope_type\":\"linear\",\"factor\":2}' --ctx 128 --windows 1");
  ASSERT_EQ(hf.exit_code, 0) << hf.out;
  EXPECT_TRUE(Has(hf.out, "method: pi:factor=2")) << hf.out;
  const RunResult grp = RunCli("inspect " + Model() + " --ctx 256 --grp-attn-n 4 --grp-attn-w 16");
  ASSERT_EQ(grp.exit_code, 0) << grp.out;
  EXPECT_TRUE(Has(grp.out, "Self-Extend, group G = 4, neighbour window W = 16")) << grp.out;
}

TEST(MethodCli, InspectShowsTheRotationView) {
  const RunResult direct = RunCli("inspect " + Model() + " --ctx 256");
  ASSERT_EQ(direct.exit_code, 0) << direct.out;
  EXPECT_TRUE(Has(direct.out, "trained context length (seq_len)             64")) << direct.out;
  EXPECT_TRUE(Has(direct.out, "rotation per frequency pair t at context N = 256 (L = 64"))
      << direct.out;
  EXPECT_TRUE(Has(direct.out, "turns@L   turns the pair makes")) << direct.out;
  // L theta_t = 64, 6.4, 0.64, 0.064 rad: the two slow pairs never completed a turn.
  EXPECT_TRUE(Has(direct.out, "2 of 4 pairs go beyond the trained arc at N = 256")) << direct.out;
  const RunResult pi = RunCli("inspect " + Model() + " --ctx 256 --method pi");
  ASSERT_EQ(pi.exit_code, 0) << pi.out;
  EXPECT_TRUE(Has(pi.out, "resolved (every default filled in)           pi:factor=4")) << pi.out;
  EXPECT_TRUE(Has(pi.out, "0.2500")) << pi.out;  // ratio theta'/theta = 1/s
  EXPECT_TRUE(Has(pi.out, "0 of 4 pairs go beyond")) << pi.out;
  const RunResult yarn = RunCli("inspect " + Model() + " --ctx 256 --method yarn+logn");
  ASSERT_EQ(yarn.exit_code, 0) << yarn.out;
  EXPECT_TRUE(Has(yarn.out, "attention factor (multiplies q and k)")) << yarn.out;
  EXPECT_TRUE(Has(yarn.out, "log-n scaling                                on")) << yarn.out;
  const RunResult bad = RunCli("inspect " + Model() + " --ctx 32 --method rerope:window=40");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_TRUE(Has(bad.out, "window=40")) << bad.out;
  EXPECT_FALSE(Has(bad.out, "dim (width")) << bad.out;  // nothing printed before the error
}

TEST(MethodCli, GenerateRunsWithAMethodResolvedForPromptPlusNewTokens) {
  const RunResult r = RunCli("generate " + ModelTok() +
                             " --prompt 'abc' -n 100 --temperature 0 --ignore-eos --method pi");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // BOS + dummy-prefix space + 3 characters = 5 prompt tokens; L' = 5 + 100 = 105, s = 105/64.
  EXPECT_TRUE(Has(r.out, "method: pi:factor=1.640625")) << r.out;
  EXPECT_TRUE(Has(r.out, "(resolved for 105 tokens)")) << r.out;
  EXPECT_TRUE(Has(r.out, "decode: 100 tokens generated")) << r.out;
  const RunResult two = RunCli("generate " + ModelTok() + " --method direct,pi -n 4");
  EXPECT_EQ(two.exit_code, 1) << two.out;
  EXPECT_TRUE(Has(two.out, "generate runs one method, found 2")) << two.out;
  const RunResult bad =
      RunCli("generate " + ModelTok() + " --prompt 'abc' -n 4 --method rerope:window=64");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_TRUE(Has(bad.out, "--method rerope:window=64 for 9 tokens")) << bad.out;
  EXPECT_FALSE(Has(bad.out, "abc")) << bad.out;  // the prompt is printed only once the method fits
}

TEST(MethodCli, HelpDocumentsTheMethodFlags) {
  const RunResult score = RunCli("score --help");
  ASSERT_EQ(score.exit_code, 0);
  for (const char* part :
       {"--methods", "key=value pieces continue the method before them", "--tail",
        "--rope-scaling-json", "--grp-attn-n", "--yarn-beta-fast", "Fixed tail"}) {
    EXPECT_TRUE(Has(score.out, part)) << part << "\n" << score.out;
  }
  for (const char* sub : {"generate", "inspect"}) {
    const RunResult r = RunCli(std::string(sub) + " --help");
    EXPECT_TRUE(Has(r.out, "--method")) << sub;
    EXPECT_TRUE(Has(r.out, "--rope-freq-base")) << sub;
  }
}

// The real stories260K model (L = 512) on its text: the fixed tail (the last 256 tokens of two
// samples of 2048) scored with 512 and 2048 tokens of context. Plain RoPE gets worse with more
// context it was never trained on, YaRN (s = 4 at 2048) loses less. Measured: direct 1.236 ->
// 1.836, yarn 1.236 -> 1.591; the margins below are a third of those gaps or more.
TEST(MethodCli, RealModelFixedTailPlainRopeDegradesYarnLess) {
  STRETCH_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  STRETCH_REQUIRE_SHARED("data/tinystories");
  const RunResult r =
      RunCli("score --model '" + testing::SharedPath("models/stories260K/stories260K.bin") +
             "' --tokenizer '" + testing::SharedPath("models/stories260K/tok512.bin") +
             "' --data '" + testing::SharedPath("data/tinystories") +
             "' --methods direct,yarn --ctx 512,2048 --tail 256 --windows 2 --json --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["cells"].size(), 4u);
  auto loss = [&](size_t k) { return j["cells"][k]["loss"].get<double>(); };
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(j["cells"][k]["tokens_scored"], 512);
  EXPECT_NEAR(loss(0), loss(2), 1e-6);  // at L' = L, yarn is plain RoPE
  EXPECT_GT(loss(1), loss(0) + 0.2);    // direct: 2048 worse than 512
  EXPECT_LT(loss(3), loss(1) - 0.1);    // yarn at 2048 better than direct at 2048
  EXPECT_TRUE(Has(j["cells"][3]["resolved_method"].get<std::string>(), "yarn:factor=4"));
}

}  // namespace
}  // namespace stretch
