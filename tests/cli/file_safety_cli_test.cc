// No command writes over its inputs, over another of its outputs, or over another training run:
// each case was reproduced on the code before the fix (exit 0 and the file destroyed), and must now
// be refused with both names while every file stays byte for byte as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "src/core/rng.h"
#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Files;
using testing::Has;
using testing::ReadBytes;
using testing::RunCli;
using testing::RunResult;

std::string Q(const std::string& path) { return "'" + path + "'"; }

class FileSafetyCli : public testing::TempDirTest {
 protected:
  FileSafetyCli() : TempDirTest("stretch_file_safety_") {}

  // A copy of the tiny model, tokenizer and text in this test's directory, so that a failure
  // cannot damage the files other tests use.
  void SetUp() override {
    TempDirTest::SetUp();
    fs::copy_file(Files().model, Path("model.bin"));
    fs::copy_file(Files().tok, Path("tok.bin"));
    fs::copy_file(Files().text, Path("text.txt"));
  }
  std::string Score() const {
    return "score --model " + Q(Path("model.bin")) + " --tokenizer " + Q(Path("tok.bin")) +
           " --data " + Q(Path("text.txt")) + " --ctx 64 --no-progress";
  }
};

TEST_F(FileSafetyCli, ScoreRefusesAnOutputThatIsAnInput) {
  const std::string model = ReadBytes(Path("model.bin")), tok = ReadBytes(Path("tok.bin")),
                    text = ReadBytes(Path("text.txt"));
  struct Case {
    std::string flags, expected;
  };
  fs::create_directories(Path("sub"));
  fs::create_symlink(Path("model.bin"), Path("link.bin"));
  fs::create_hard_link(Path("tok.bin"), Path("hard_tok.bin"));
  const Case cases[] = {
      {"--per-token " + Q(Path("model.bin")), "--per-token"},
      {"--json-out " + Q(Path("tok.bin")), "--json-out"},
      {"--per-token " + Q(Path("text.txt")), "--data"},
      // Other spellings of the same files: a relative detour, a symbolic link, a hard link.
      {"--per-token " + Q(Path("sub/../model.bin")), "--model"},
      {"--json-out " + Q(Path("link.bin")), "--model"},
      {"--json-out " + Q(Path("hard_tok.bin")), "--tokenizer"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunCli(Score() + " " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.out;
    EXPECT_TRUE(Has(r.out, "refusing to write over an input")) << r.out;
    EXPECT_TRUE(Has(r.out, c.expected)) << r.out;
  }
  EXPECT_EQ(ReadBytes(Path("model.bin")), model);
  EXPECT_EQ(ReadBytes(Path("tok.bin")), tok);
  EXPECT_EQ(ReadBytes(Path("text.txt")), text);
}

TEST_F(FileSafetyCli, ScoreRefusesOneFileForTwoOutputs) {
  const RunResult r = RunCli(Score() + " --json-out " + Q(Path("out.txt")) + " --per-token " +
                             Q(Path("./out.txt")));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "--json-out")) << r.out;
  EXPECT_TRUE(Has(r.out, "--per-token")) << r.out;
  EXPECT_TRUE(Has(r.out, "are the same file")) << r.out;
  EXPECT_FALSE(fs::exists(Path("out.txt")));
}

TEST_F(FileSafetyCli, ScoreOutputsAppearWholeAndLeaveNoPartialFile) {
  testing::WriteBytes(Path("report.json"), "the previous report\n");
  const RunResult ok = RunCli(Score() + " --json-out " + Q(Path("report.json")) + " --per-token " +
                              Q(Path("tokens.csv")));
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_TRUE(ReadBytes(Path("report.json")).starts_with("{")) << ReadBytes(Path("report.json"));
  EXPECT_TRUE(ReadBytes(Path("tokens.csv")).starts_with("window,position,target,loss,correct\n"));
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(e.path().filename().string().find(".partial-") != std::string::npos) << e.path();
  }
}

TEST_F(FileSafetyCli, BenchRefusesJsonOutOverItsModel) {
  const std::string model = ReadBytes(Path("model.bin"));
  const RunResult r = RunCli("bench --quick --model " + Q(Path("model.bin")) + " --json-out " +
                             Q(Path("model.bin")));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "refusing to write over an input")) << r.out;
  EXPECT_EQ(ReadBytes(Path("model.bin")), model);
}

// Training: a tiny byte-level run on generated text.
class TrainRunSafetyCli : public testing::TempDirTest {
 protected:
  TrainRunSafetyCli() : TempDirTest("stretch_run_safety_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(Path("corpus"));
    const char* words[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
    Rng rng(7);
    for (int d = 0; d < 3; ++d) {
      std::ofstream f(Path("corpus/doc" + std::to_string(d) + ".txt"));
      for (int w = 0; w < 300; ++w) f << words[rng.NextU64() % 8] << (w % 10 == 9 ? ".\n" : " ");
    }
  }
  RunResult Train(const std::string& out, const std::string& extra) const {
    return RunCli("train --data " + Q(Path("corpus")) + " --out " + Q(out) +
                  " --train-len 16 --batch 2 --layers 1 --heads 2 "
                  "--save-every 2 --eval-every 0 --valid-fraction 0.34 --threads 1 " +
                  extra);
  }
  // Every file of a directory with its bytes.
  std::map<std::string, std::string> Snapshot(const std::string& dir) const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      files[e.path().filename().string()] = ReadBytes(e.path().string());
    }
    return files;
  }
};

TEST_F(TrainRunSafetyCli, ANewRunIntoAnotherRunsDirectoryIsRefused) {
  const std::string run = Path("run");
  const RunResult first = Train(run, "--dim 32 --steps 4");
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const auto before = Snapshot(run);
  ASSERT_TRUE(before.count("step-00000004.safetensors")) << first.out;
  ASSERT_TRUE(before.count("train_log.jsonl"));

  const RunResult second = Train(run, "--dim 16 --steps 4");
  EXPECT_EQ(second.exit_code, 1) << second.out;
  EXPECT_TRUE(Has(second.out, "holds another run")) << second.out;
  EXPECT_TRUE(Has(second.out, "--resume")) << second.out;
  EXPECT_TRUE(Has(second.out, "--overwrite")) << second.out;
  EXPECT_EQ(Snapshot(run), before) << "the first run's files changed";

  // --init from the run into the run itself: refused, nothing touched.
  const RunResult self = Train(run, "--init " + Q(run) + " --overwrite --steps 4");
  EXPECT_EQ(self.exit_code, 1) << self.out;
  EXPECT_TRUE(Has(self.out, "--init")) << self.out;
  EXPECT_TRUE(Has(self.out, "inside --out")) << self.out;
  EXPECT_EQ(Snapshot(run), before);

  // --resume and --overwrite together: refused.
  const RunResult both = Train(run, "--resume --overwrite --steps 4 --dim 32");
  EXPECT_EQ(both.exit_code, 1) << both.out;
  EXPECT_TRUE(Has(both.out, "contradict")) << both.out;
  EXPECT_EQ(Snapshot(run), before);
}

TEST_F(TrainRunSafetyCli, OverwriteDeletesTheEarlierRunAndKeepsOtherFiles) {
  const std::string run = Path("run");
  ASSERT_EQ(Train(run, "--dim 32 --steps 6").exit_code, 0);
  testing::WriteBytes(run + "/notes.md", "my notes\n");
  const RunResult second = Train(run, "--dim 16 --steps 4 --overwrite");
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_TRUE(Has(second.out, "deleted the earlier run")) << second.out;
  const auto after = Snapshot(run);
  EXPECT_EQ(after.at("notes.md"), "my notes\n");
  EXPECT_FALSE(after.count("step-00000006.safetensors")) << "a checkpoint of the first run is left";
  EXPECT_TRUE(after.count("step-00000004.safetensors"));
  // The log holds the second run's 4 steps only.
  std::istringstream log(after.at("train_log.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(log, line);) ++lines;
  EXPECT_EQ(lines, 4);
}

TEST_F(TrainRunSafetyCli, DataInsideTheRunDirectoryIsRefused) {
  const std::string run = Path("corpus");
  const RunResult r = Train(run + "/run", "--dim 16 --steps 4");
  EXPECT_EQ(r.exit_code, 0) << "--out below the data directory is fine: " << r.out;
  const RunResult inside = RunCli("train --data " + Q(Path("corpus/doc0.txt")) + " --out " +
                                  Q(Path("corpus")) + " --steps 2 --train-len 16 --dim 16");
  EXPECT_EQ(inside.exit_code, 1) << inside.out;
  EXPECT_TRUE(Has(inside.out, "--data")) << inside.out;
  EXPECT_TRUE(Has(inside.out, "inside --out")) << inside.out;
}

}  // namespace
}  // namespace stretch
