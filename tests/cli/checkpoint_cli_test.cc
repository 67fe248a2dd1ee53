// A model trained with `stretch train`, then scored, generated from and inspected with --model
// alone (the checkpoint file, or the run's directory), as a user does: sane numbers and text,
// --method on a trained layout, and clear refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/checkpoint_edit.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;
using testing::RunResult;

class CheckpointCli : public ::testing::Test {
 protected:
  static fs::path Dir() { return testing::ProgramTempDir("stretch_checkpoint_cli_"); }
  static fs::path Corpus() { return Dir() / "corpus"; }
  static fs::path Rope() { return Dir() / "rope"; }
  static fs::path Nope() { return Dir() / "nope"; }

  // Trains two tiny byte-level models once for the suite: RoPE (200 steps, about a second) and
  // NoPE (10 steps) on four documents of pseudo-English (words from a list of 16, deterministic).
  static void SetUpTestSuite() {
    fs::remove_all(Dir());
    fs::create_directories(Corpus());
    const char* words[] = {"the", "cat",  "sat",  "on",  "a",   "mat", "and",  "then",
                           "ran", "away", "from", "dog", "who", "was", "very", "big"};
    Rng rng(4);
    for (int d = 0; d < 4; ++d) {
      std::ofstream f(Corpus() / ("doc" + std::to_string(d) + ".txt"));
      for (int w = 0; w < 800; ++w) f << words[rng.NextU64() % 16] << (w % 12 == 11 ? ".\n" : " ");
    }
    const std::string common =
        " --train-len 32 --batch 4 --dim 32 --layers 2 --heads 2 --valid-fraction 0.25 "
        "--threads 1";
    trained_ = RunCli("train --data '" + Corpus().string() + "' --out '" + Rope().string() +
                      "' --steps 200 --lr 1e-2 --save-every 100 --eval-every 200" + common);
    trained_nope_ = RunCli("train --data '" + Corpus().string() + "' --out '" + Nope().string() +
                           "' --position nope --steps 10 --save-every 10 --eval-every 0" + common);
  }
  static void TearDownTestSuite() { fs::remove_all(Dir()); }

  void SetUp() override {
    ASSERT_EQ(trained_.exit_code, 0) << trained_.out;
    ASSERT_EQ(trained_nope_.exit_code, 0) << trained_nope_.out;
  }

  static std::string Q(const fs::path& p) { return "'" + p.string() + "'"; }

  static RunResult trained_, trained_nope_;
};
RunResult CheckpointCli::trained_, CheckpointCli::trained_nope_;

// The JSON report of `score --json` (the last JSON object in the output; progress goes to stderr
// before it).
nlohmann::json ScoreJson(const RunResult& r) {
  const size_t start = r.out.find("{\n");
  EXPECT_NE(start, std::string::npos) << r.out;
  if (start == std::string::npos) return {};
  return nlohmann::json::parse(r.out.substr(start));
}

// YaRN on a model trained at 32 tokens with heads of 16 (the fastest pair turns 32 / 2 pi = 5.1
// times within L, none the 32 times YaRN's ramp leaves alone): score says so, once, at the
// longest length; not for the other methods, nor at L.
TEST_F(CheckpointCli, ScoreSaysWhereYarnRunsOutsideItsRegime) {
  const RunResult r = RunCli("score --threads 1 --model " + Q(Rope()) + " --data " + Q(Corpus()) +
                             " --ctx 64,128 --methods direct,pi,yarn --windows 1 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  size_t notes = 0;
  for (size_t at = r.out.find("no RoPE pair turns"); at != std::string::npos;
       at = r.out.find("no RoPE pair turns", at + 1)) {
    notes++;
  }
  EXPECT_EQ(notes, 1u) << r.out;
  EXPECT_TRUE(Has(r.out, "note: yarn:factor=4")) << r.out;
  EXPECT_TRUE(Has(r.out,
                  " at 128: no RoPE pair turns beta_fast = 32 times within the original "
                  "length (32 tokens; the fastest turns 5.1 times)"))
      << r.out;
  const RunResult at_l = RunCli("score --threads 1 --model " + Q(Rope()) + " --data " +
                                Q(Corpus()) + " --ctx 32 --methods yarn --windows 1 --no-progress");
  ASSERT_EQ(at_l.exit_code, 0) << at_l.out;
  EXPECT_FALSE(Has(at_l.out, "no RoPE pair turns")) << at_l.out;
}

TEST_F(CheckpointCli, ScoreTakesTheCheckpointAlone) {
  const fs::path ckpt = Rope() / "step-00000200.safetensors";
  const RunResult r = RunCli("score --threads 1 --model " + Q(ckpt) + " --data " + Q(Corpus()) +
                             " --ctx 32 --json --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = ScoreJson(r);
  const double loss = j["result"]["loss"].get<double>();
  EXPECT_TRUE(Has(j["model"].get<std::string>(), "stretch checkpoint, step 200")) << r.out;
  EXPECT_TRUE(Has(j["tokenizer"].get<std::string>(), "bytes tokenizer")) << r.out;
  EXPECT_TRUE(Has(j["protocol"].get<std::string>(), "checkpoint's own tokenizer")) << r.out;
  // The report and the checkpoint name the build that made them, as `stretch --version` does.
  const RunResult version = RunCli("--version");
  EXPECT_EQ("stretch " + j.value("build", std::string("(none)")) + "\n", version.out);
  EXPECT_TRUE(Has(j["model"].get<std::string>(), "written by stretch " + j.value("build", "")))
      << j["model"];
  EXPECT_EQ("stretch " +
                SafetensorsFile(ckpt.string()).FindMetadata("stretch.build").value_or("(none)") +
                "\n",
            version.out);
  // Sane: the model learned the text (uniform over 258 bytes is ln 258 = 5.55 nats; the
  // unigram entropy of these bytes is about 2.9), and scores it about as the trainer's own
  // validation did at the end of the run (train_log.jsonl: held-out windows of the same length;
  // here every window of the corpus, training documents included, each behind BOS).
  std::ifstream log(Rope() / "train_log.jsonl");
  std::string line, last;
  while (std::getline(log, line)) last = line;
  const double val_loss = nlohmann::json::parse(last)["val_loss"].get<double>();
  EXPECT_LT(loss, 1.5) << r.out;
  EXPECT_NEAR(loss, val_loss, 0.3) << r.out;

  // The run's directory means its newest checkpoint: the same numbers.
  const RunResult dir = RunCli("score --threads 1 --model " + Q(Rope()) + " --data " + Q(Corpus()) +
                               " --ctx 32 --json --no-progress");
  ASSERT_EQ(dir.exit_code, 0) << dir.out;
  EXPECT_EQ(ScoreJson(dir)["result"]["loss"], j["result"]["loss"]);

  // An older checkpoint (step 100) is a worse model than the last one.
  const RunResult older =
      RunCli("score --threads 1 --model " + Q(Rope() / "step-00000100.safetensors") + " --data " +
             Q(Corpus()) + " --ctx 32 --json --no-progress");
  ASSERT_EQ(older.exit_code, 0) << older.out;
  EXPECT_GT(ScoreJson(older)["result"]["loss"].get<double>(), loss);

  // Text windows begin with the tokenizer's own BOS (256 for bytes): the first 8 windows of a
  // document score exactly as token sequences "256 b0 .. b31" fed as given.
  const std::string text = testing::ReadBytes((Corpus() / "doc3.txt").string());
  const fs::path ids = Dir() / "doc3_windows.txt";
  {
    std::ofstream f(ids);
    for (int w = 0; w < 8; ++w) {
      f << 256;
      for (int p = 0; p < 32; ++p) f << ' ' << int(static_cast<unsigned char>(text[w * 32 + p]));
      f << '\n';
    }
  }
  const RunResult stream =
      RunCli("score --threads 1 --model " + Q(ckpt) + " --data " + Q(Corpus() / "doc3.txt") +
             " --ctx 32 --windows 8 --json --no-progress");
  const RunResult seqs = RunCli("score --threads 1 --model " + Q(ckpt) + " --tokens " + Q(ids) +
                                " --ctx 33 --json --no-progress");
  ASSERT_EQ(stream.exit_code, 0) << stream.out;
  ASSERT_EQ(seqs.exit_code, 0) << seqs.out;
  EXPECT_EQ(ScoreJson(seqs)["result"]["tokens_scored"], 8 * 32);
  EXPECT_NEAR(ScoreJson(stream)["result"]["loss"].get<double>(),
              ScoreJson(seqs)["result"]["loss"].get<double>(), 1e-6);
}

TEST_F(CheckpointCli, ScoreRunsMethodsOnTheTrainedModel) {
  const RunResult r =
      RunCli("score --threads 1 --model " + Q(Rope()) + " --data " + Q(Corpus()) +
             " --methods direct,yarn,window:window=16,rerope:window=24+logn --ctx 32,96 "
             "--windows 4 --json --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = ScoreJson(r);
  ASSERT_EQ(j["cells"].size(), 8u) << r.out;
  for (const nlohmann::json& cell : j["cells"]) {
    const double loss = cell["loss"].get<double>();
    EXPECT_TRUE(std::isfinite(loss) && loss > 0 && loss < 6) << cell.dump();
  }
  // Cells run method-major. At the trained length yarn resolves to factor 1, the frequencies of
  // direct (up to rounding); at 96 positions the methods differ.
  EXPECT_NEAR(j["cells"][0]["loss"].get<double>(), j["cells"][2]["loss"].get<double>(), 1e-5)
      << r.out;
  EXPECT_NE(j["cells"][1]["loss"], j["cells"][3]["loss"]) << r.out;

  // A RoPE-changing method on a model with no RoPE layer is refused before anything runs; its
  // masks are accepted.
  const RunResult refused = RunCli("score --threads 1 --model " + Q(Nope()) + " --data " +
                                   Q(Corpus()) + " --methods direct,yarn --ctx 64 --windows 2");
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(Has(refused.out, "method \"yarn\" at --ctx 64")) << refused.out;
  EXPECT_TRUE(Has(refused.out, "no full-attention RoPE layer")) << refused.out;
  EXPECT_FALSE(Has(refused.out, "score [1/")) << refused.out;
  const RunResult masks =
      RunCli("score --threads 1 --model " + Q(Nope()) + " --data " + Q(Corpus()) +
             " --methods direct,window:window=16+logn --ctx 64 "
             "--windows 2 --no-progress");
  EXPECT_EQ(masks.exit_code, 0) << masks.out;
}

TEST_F(CheckpointCli, GenerateWritesTextFromTheCorpusAlphabet) {
  const RunResult r = RunCli("generate --threads 1 --model " + Q(Rope()) +
                             " --prompt 'the cat ' -n 60 --temperature 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t stats = r.out.find("\nprefill: ");
  ASSERT_NE(stats, std::string::npos) << r.out;
  const std::string text = r.out.substr(0, stats);
  ASSERT_TRUE(text.starts_with("the cat ")) << r.out;
  const std::string generated = text.substr(8);
  // 60 bytes of text; a greedy model trained on this corpus writes its letters, spaces, full
  // stops and newlines (the prompt and the bytes tokenizer: BOS + 8 bytes).
  EXPECT_EQ(generated.size(), 60u) << r.out;
  for (const char ch : generated) {
    EXPECT_TRUE((ch >= 'a' && ch <= 'z') || ch == ' ' || ch == '.' || ch == '\n')
        << "byte " << int(static_cast<unsigned char>(ch)) << " in: " << text;
  }
  EXPECT_TRUE(Has(r.out, "prefill: 9 tokens")) << r.out;
  // Greedy generation is deterministic, and a method given explicitly as the default changes
  // nothing.
  const RunResult again =
      RunCli("generate --threads 1 --model " + Q(Rope() / "step-00000200.safetensors") +
             " --prompt 'the cat ' -n 60 --temperature 0 --ignore-eos "
             "--method direct");
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(again.out.substr(0, stats), text);
  // Past the trained length with a method.
  const RunResult yarn = RunCli("generate --threads 1 --model " + Q(Rope()) +
                                " --prompt 'the dog ' -n 80 --temperature 0 --method yarn");
  ASSERT_EQ(yarn.exit_code, 0) << yarn.out;
  EXPECT_TRUE(Has(yarn.out, "method: yarn:factor=")) << yarn.out;
  // NoPE: yarn refused, a window accepted.
  const RunResult nope_yarn =
      RunCli("generate --threads 1 --model " + Q(Nope()) + " -n 10 --method yarn");
  EXPECT_EQ(nope_yarn.exit_code, 1) << nope_yarn.out;
  EXPECT_TRUE(Has(nope_yarn.out, "no full-attention RoPE layer")) << nope_yarn.out;
  EXPECT_EQ(RunCli("generate --threads 1 --model " + Q(Nope()) + " -n 10 --method window:window=8")
                .exit_code,
            0);
}

TEST_F(CheckpointCli, InspectShowsTheTrainedLayout) {
  const RunResult r = RunCli("inspect --model " + Q(Rope()) + " --ctx 128 --method yarn");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "step-00000200.safetensors (stretch checkpoint)")) << r.out;
  EXPECT_TRUE(Has(r.out, "attention as trained (step 200)")) << r.out;
  EXPECT_TRUE(Has(r.out, "layer 0: rope, full")) << r.out;
  EXPECT_TRUE(Has(r.out, "takes the method as it is")) << r.out;
  EXPECT_TRUE(Has(r.out, "bytes")) << r.out;
  const RunResult nope = RunCli("inspect --model " + Q(Nope()) + " --method window:window=16");
  ASSERT_EQ(nope.exit_code, 0) << nope.out;
  EXPECT_TRUE(Has(nope.out, "layer 1: nope, full")) << nope.out;
  EXPECT_TRUE(Has(nope.out, "takes the method's mask")) << nope.out;
  const RunResult refused = RunCli("inspect --model " + Q(Nope()) + " --method pi");
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(Has(refused.out, "no full-attention RoPE layer")) << refused.out;
}

TEST_F(CheckpointCli, BadUseAndBadFilesAreRefusedWithTheReason) {
  const fs::path ckpt = Rope() / "step-00000200.safetensors";
  // --tokenizer with a checkpoint.
  RunResult r = RunCli("score --threads 1 --model " + Q(ckpt) +
                       " --tokenizer /some/tok512.bin --data " + Q(Corpus()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "carries its own tokenizer")) << r.out;
  // A truncated checkpoint.
  const fs::path bad = Dir() / "bad";
  fs::create_directories(bad);
  const std::string bytes = testing::ReadBytes(ckpt.string());
  testing::WriteBytes((bad / "truncated.safetensors").string(), bytes.substr(0, bytes.size() / 3));
  r = RunCli("score --threads 1 --model " + Q(bad / "truncated.safetensors") + " --data " +
             Q(Corpus()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "truncated.safetensors")) << r.out;
  EXPECT_TRUE(Has(r.out, "truncated")) << r.out;
  // A safetensors file that is not ours, under a .bin name: told by content.
  SafetensorsWriter w;
  w.AddOwned<float>("weight", {2}, {1.0f, 2.0f});
  w.Write((bad / "foreign.bin").string());
  r = RunCli("inspect --model " + Q(bad / "foreign.bin"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "not a stretch checkpoint")) << r.out;
  // A LLaMA model's sizes under a GAU architecture ("block"): refused, not misread.
  testing::EditCheckpoint(ckpt.string(), (bad / "step-00000099.safetensors").string(),
                          [](std::map<std::string, std::string>& meta, auto&) {
                            nlohmann::json c = nlohmann::json::parse(meta["stretch.config"]);
                            c["block"] = "gau";
                            c["gau_key_dim"] = 8;
                            meta["stretch.config"] = c.dump();
                          });
  r = RunCli("score --threads 1 --model " + Q(bad / "step-00000099.safetensors") + " --data " +
             Q(Corpus()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "the GAU block has a single head")) << r.out;
  // In a run's directory, the newest complete checkpoint is taken; the mismatched one there is
  // a complete checkpoint, so it is picked and refused (never silently skipped).
  r = RunCli("generate --threads 1 --model " + Q(bad) + " -n 5");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "the GAU block has a single head")) << r.out;
  // A directory with no checkpoint.
  fs::create_directories(bad / "empty");
  r = RunCli("score --threads 1 --model " + Q(bad / "empty") + " --data " + Q(Corpus()));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "no complete checkpoint")) << r.out;
}

}  // namespace
}  // namespace stretch
