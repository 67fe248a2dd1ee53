// No command writes over its inputs, over another of its outputs, or over another training run:
// each case was reproduced on the code before the fix (exit 0 and the file destroyed), and must now
// be refused with both names while every file stays byte for byte as it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

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
using testing::RunShell;

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
  // A null device to write to. A regression run as root would replace the machine's /dev/null
  // (root may rename in /dev), so root gets a private node of the same device in the test's
  // folder; anyone else gets /dev/null, which they cannot replace.
  std::string NullDevice() const {
    const std::string mine = Path("null");
    if (::geteuid() == 0 && ::mknod(mine.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) return mine;
    return "/dev/null";
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

// ---- outputs that are not plain files (issue 40 item 1) ----
// Before the fix each of these was renamed over: the FIFO, the device node and the link became
// regular files, exit 0 (as root, `--json-out /dev/null` replaced /dev/null itself).

TEST_F(FileSafetyCli, ScoreWritesIntoAFifoWithoutReplacingIt) {
  const std::string fifo = Path("report.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The reader holds a write end of its own until the command is done, so that it meets the end
  // of the stream then, whatever the command did (before the fix it replaced the FIFO and never
  // opened it: a plain reader would have waited for ever).
  const int in = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(in, 0);
  const int keep = ::open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(keep, 0);
  ::fcntl(in, F_SETFL, 0);  // blocking reads from here on
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(in, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  });
  const RunResult r = RunCli(Score() + " --json-out " + Q(fifo));
  ::close(keep);
  reader.join();
  ::close(in);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo))) << "the FIFO was replaced";
  EXPECT_TRUE(nlohmann::json::accept(got)) << got;
}

// /dev/null, or for root a private node of the same device (see NullDevice).
TEST_F(FileSafetyCli, ScoreWritesIntoDevNullWithoutReplacingIt) {
  const std::string null = NullDevice();
  // Two outputs on one device: nothing is replaced, so nothing is refused.
  const RunResult r = RunCli(Score() + " --json-out " + Q(null) + " --per-token " + Q(null));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(null))) << "the device was replaced";
  // Through a link to it: the link stays a link to the device.
  fs::create_symlink(null, Path("dev_link"));
  const RunResult via = RunCli(Score() + " --per-token " + Q(Path("dev_link")));
  EXPECT_EQ(via.exit_code, 0) << via.out;
  EXPECT_TRUE(fs::is_symlink(Path("dev_link")));
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(null)));
}

TEST_F(FileSafetyCli, ScoreReplacesALinksTargetAndKeepsTheLink) {
  fs::create_directories(Path("reports"));
  testing::WriteBytes(Path("reports/latest.json"), "the previous report\n");
  fs::create_symlink("reports/latest.json", Path("report.json"));
  const RunResult r = RunCli(Score() + " --json-out " + Q(Path("report.json")));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(Path("report.json"))) << "the link was replaced by a file";
  EXPECT_EQ(fs::read_symlink(Path("report.json")), "reports/latest.json");
  EXPECT_TRUE(nlohmann::json::accept(ReadBytes(Path("reports/latest.json"))));
}

TEST_F(FileSafetyCli, ScoreRefusesADirectoryBeforeScoring) {
  fs::create_directories(Path("out"));
  const RunResult r = RunCli(Score() + " --json-out " + Q(Path("out")));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "--json-out " + Path("out") + ": is a directory; expected a file path"))
      << r.out;
  EXPECT_FALSE(Has(r.out, "encoded")) << "refused only after the text was read";
  EXPECT_TRUE(fs::is_empty(Path("out")));
}

TEST_F(FileSafetyCli, ScoreWritesJsonToStandardOutputForDash) {
  // Standard output alone (stderr to /dev/null): the JSON report and nothing else.
  const RunResult r = RunShell("{ '" + std::string(STRETCH_CLI_PATH) + "' " + Score() +
                               " --json-out - 2>/dev/null; }");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(nlohmann::json::accept(r.out)) << r.out;
  EXPECT_FALSE(fs::exists(Path("-")));
  // Where "-" makes no sense (a model file), it is refused by name.
  const RunResult c = RunCli("convert -m " + Q(Path("model.bin")) + " --to llama2c --out -");
  EXPECT_EQ(c.exit_code, 1) << c.out;
  EXPECT_TRUE(Has(c.out, "--out -: standard output (-) is not accepted")) << c.out;
}

TEST_F(FileSafetyCli, FolderOutputsRefuseOtherKinds) {
  const std::string null = NullDevice();
  const RunResult train = RunCli("train --data " + Q(Path("text.txt")) + " --out " + Q(null) +
                                 " --steps 2 --seq-len 16 --dim 16");
  EXPECT_EQ(train.exit_code, 1) << train.out;
  EXPECT_TRUE(Has(train.out, "--out " + null + ": is a character device; expected a directory"))
      << train.out;
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(null)));
  const RunResult dash = RunCli("lab --quick --out -");
  EXPECT_EQ(dash.exit_code, 1) << dash.out;
  EXPECT_TRUE(Has(dash.out, "--out -: standard output (-) is not accepted")) << dash.out;
}

// A pid that is certainly gone: a child that exited and was reaped.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// Issue 40 item 6: a convert killed mid-write left ".<name>.partial-<pid>-<n>" beside its output,
// and the next successful convert to the same path kept it (up to 210 MB). Now that write removes
// it and says so; a partial file of another output is left alone.
TEST_F(FileSafetyCli, ConvertRemovesTheStalePartialFileOfItsOutput) {
  const std::string dead = std::to_string(DeadPid());
  const std::string stale = Path(".model.gguf.partial-" + dead + "-0");
  const std::string other = Path(".other.gguf.partial-" + dead + "-0");
  testing::WriteBytes(stale, "half a model");
  testing::WriteBytes(other, "half another model");
  const RunResult r = RunCli("convert -m " + Q(Path("model.bin")) + " -t " + Q(Path("tok.bin")) +
                             " --to gguf --out " + Q(Path("model.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(fs::exists(stale)) << r.out;
  EXPECT_TRUE(Has(r.out, "removed " + stale)) << r.out;
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(Path("model.gguf")));
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
                  " --seq-len 16 --batch 2 --layers 1 --heads 2 "
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
                                  Q(Path("corpus")) + " --steps 2 --seq-len 16 --dim 16");
  EXPECT_EQ(inside.exit_code, 1) << inside.out;
  EXPECT_TRUE(Has(inside.out, "--data")) << inside.out;
  EXPECT_TRUE(Has(inside.out, "inside --out")) << inside.out;
}

}  // namespace
}  // namespace stretch
