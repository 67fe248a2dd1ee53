// `stretch lab` as a user runs it: killed with SIGKILL at any point and started again, it ends
// with the records of a run that never stopped; under `mpirun -np 2` the two processes' records
// merge into those of one process; the report is written at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "src/core/rng.h"
#include "src/report/records.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;

class LabCliTest : public testing::TempDirTest {
 protected:
  LabCliTest() : TempDirTest("stretch_lab_cli_") {}

  void SetUp() override {
    TempDirTest::SetUp();
    const fs::path dir = dir_ / "corpus";
    fs::create_directories(dir);
    static const char* kWords[] = {"the", "nation", "people", "congress", "law",   "year",
                                   "we",  "must",   "will",   "peace",    "trade", "and"};
    for (int i = 0; i < 8; ++i) {
      Rng rng(static_cast<uint64_t>(i + 1));
      std::string text;
      while (text.size() < 6000) {
        text += kWords[rng.NextU64() % 12];
        text += rng.NextU64() % 7 == 0 ? ".\n" : " ";
      }
      testing::WriteBytes((dir / ("199" + std::to_string(i) + "_x.txt")).string(), text);
    }
  }

  // The lab's flags for a tiny run into `out` (one thread: the records then do not depend on how
  // many cores the machine has).
  std::string Args(const std::string& out, const std::string& methods = "direct,pi,rerope",
                   const std::string& factors = "2,4") const {
    return "lab --data '" + (dir_ / "corpus").string() + "' --cutoff-year 1996 --out '" + out +
           "' --train-len 16 --steps 40 --batch 4 --dim 16 --layers 1 --heads 2 --methods " +
           methods + " --factors " + factors +
           " --windows 3 --passkey-trials 0 --passkey-share 0 --threads 1 --no-stages "
           "--copy-trials 0";
  }

  // Starts the lab in its own process group and kills the group with SIGKILL once `ready`
  // holds. Returns whether the kill hit a running lab (false: it finished first).
  bool RunAndKill(const std::string& out, const std::function<bool()>& ready) {
    const std::string cmd =
        std::string("exec '") + STRETCH_CLI_PATH + "' " + Args(out) + " >/dev/null 2>&1";
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    for (int i = 0; i < 60000; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) return false;  // finished first
      if (ready()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
};

size_t Lines(const std::string& path) {
  const std::string text = testing::ReadBytes(path);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Every record of the files, without the time each took, sorted by key.
std::vector<std::string> Records(const std::vector<std::string>& files) {
  std::vector<std::string> out;
  for (LabRecord r : ReadLabRecords(files).records) {
    r.seconds = 0;
    out.push_back(LabRecordJson(r).dump());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(LabCliTest, KilledTwiceAndResumedGivesTheRecordsOfAnUninterruptedRun) {
  const testing::RunResult whole = RunCli(Args(Path("whole")));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_TRUE(Has(whole.out, "non-repeat 64 (4x)")) << whole.out;  // the table
  EXPECT_TRUE(fs::exists(Path("whole/report/report.html")));
  const std::vector<std::string> expected = Records({Path("whole/results.jsonl")});
  // 2 models x 3 methods x (5 + repeat of period 2L at 4L + 3 tail) cells
  ASSERT_EQ(expected.size(), 54u);

  const std::string out = Path("killed");
  // Once during the first model's training (its first checkpoint is on disk), once in the middle
  // of scoring (some records written, not all).
  const bool in_training = RunAndKill(
      out, [&] { return fs::exists(out + "/models/rope-logn/step-00000010.safetensors"); });
  const bool in_scoring = RunAndKill(out, [&] {
    return fs::exists(out + "/results.jsonl") && Lines(out + "/results.jsonl") >= 10;
  });
  EXPECT_TRUE(in_training) << "the lab finished before the first kill";
  EXPECT_TRUE(in_scoring) << "the lab finished before the second kill";
  const testing::RunResult resumed = RunCli(Args(out));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_TRUE(Has(resumed.out, "found done")) << resumed.out;
  EXPECT_EQ(Records({out + "/results.jsonl"}), expected);
}

// How far a lab run in `out` has come: checkpoint files in its models' folders (written or being
// written: a partial file counts, so that some kills land inside a write), 3 units each so that
// about half the kills land in training, and lines of records.
size_t Progress(const std::string& out) {
  size_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(out + "/models", ec), end; !ec && it != end;
       it.increment(ec)) {
    n += Has(it->path().filename().string(), ".safetensors") ? 3 : 0;
  }
  if (fs::exists(out + "/results.jsonl")) n += Lines(out + "/results.jsonl");
  return n;
}

// Issue 17 item 2, the sweep version: 20 SIGKILLs at random points of one lab run (in training,
// in checkpoint writes, between and inside record appends), each followed by a restart: the
// records end as those of the run that never stopped, none lost, none twice.
TEST_F(LabCliTest, TwentyKillsAtRandomMomentsEndWithTheRecordsOfAnUninterruptedRun) {
  const testing::RunResult whole = RunCli(Args(Path("whole20")));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  const std::vector<std::string> expected = Records({Path("whole20/results.jsonl")});
  ASSERT_EQ(expected.size(), 54u);

  const std::string out = Path("killed20");
  Rng rng(17);
  int kills = 0, in_training = 0;
  for (int i = 0; i < 20; ++i) {
    // Each run is killed once it has made 1 to 3 units of progress beyond where it started.
    const size_t target = Progress(out) + 1 + rng.NextU64() % 3;
    bool training = false;
    if (RunAndKill(out, [&] {
          training = !fs::exists(out + "/results.jsonl") || Lines(out + "/results.jsonl") == 0;
          return Progress(out) >= target;
        })) {
      ++kills;
      in_training += training ? 1 : 0;
    }
  }
  EXPECT_EQ(kills, 20) << "the lab finished before the last kill";
  EXPECT_GE(in_training, 1) << "no kill landed in training";
  EXPECT_GE(kills - in_training, 1) << "no kill landed in scoring";
  std::printf("20 runs: %d killed, %d in training, %d in scoring\n", kills, in_training,
              kills - in_training);
  const testing::RunResult resumed = RunCli(Args(out));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_EQ(Records({out + "/results.jsonl"}), expected);
  const LabRecordFile read = ReadLabRecords({out + "/results.jsonl"});
  EXPECT_EQ(read.duplicates, 0) << "a record was written twice";
  EXPECT_EQ(read.partial_lines, 0);
  EXPECT_EQ(Lines(out + "/results.jsonl"), Lines(Path("whole20/results.jsonl")));
  EXPECT_TRUE(fs::exists(out + "/report/report.html"));
}

TEST_F(LabCliTest, MpirunTwoRanksMergeToTheRecordsOfOneProcess) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "mpirun is not installed (Debian package openmpi-bin; scripts/setup.sh all "
                    "installs it)";
  }
  const testing::RunResult one = RunCli(Args(Path("one")));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const std::string cmd = "mpirun --allow-run-as-root --oversubscribe -np 2 '" +
                          std::string(STRETCH_CLI_PATH) + "' " + Args(Path("two")) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << text;
  EXPECT_TRUE(Has(text, "lab[0/2]")) << text;
  EXPECT_TRUE(Has(text, "lab[1/2]")) << text;
  const std::vector<std::string> files = {Path("two/results-rank0.jsonl"),
                                          Path("two/results-rank1.jsonl")};
  EXPECT_EQ(Records({files[0]}).size(), 27u) << "one model each";
  EXPECT_EQ(Records(files), Records({Path("one/results.jsonl")}));
  EXPECT_TRUE(fs::exists(Path("two/report/report.html"))) << "rank 0 reports once both are done";
}

// Starts `stretch ARGS` in its own process group, its output to `log`; returns the pid.
pid_t Start(const std::string& args, const std::string& log) {
  const std::string cmd =
      std::string("exec '") + STRETCH_CLI_PATH + "' " + args + " >'" + log + "' 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits up to a minute for `ready` (polled every millisecond); false if it never held.
bool WaitFor(const std::function<bool()>& ready) {
  for (int i = 0; i < 60000; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

int ExitCodeOf(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Issue 40 item 2: two labs into one folder tore each other's lines of results.jsonl and lost
// cells. Now the second is refused while the first runs, naming it, and the first's records are
// those of a lab run alone.
TEST_F(LabCliTest, ASecondLabIntoTheSameFolderIsRefusedWhileTheFirstRuns) {
  const testing::RunResult alone = RunCli(Args(Path("alone")));
  ASSERT_EQ(alone.exit_code, 0) << alone.out;
  const std::string out = Path("shared");
  const pid_t first = Start(Args(out), Path("first.log"));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out + "/models/rope-logn/train_log.jsonl"); }));
  const testing::RunResult second = RunCli(Args(out));
  EXPECT_EQ(second.exit_code, 1) << second.out;
  EXPECT_TRUE(Has(second.out, "--out " + out + " is in use by another stretch process, pid " +
                                  std::to_string(first)))
      << second.out;
  ASSERT_EQ(ExitCodeOf(first), 0) << testing::ReadBytes(Path("first.log"));
  EXPECT_EQ(Records({out + "/results.jsonl"}), Records({Path("alone/results.jsonl")}));
}

// A records file torn in the middle (as two labs writing at once left them before the lock)
// stopped every later lab and report on the folder at that line. The lab now moves the torn
// lines aside, says so, and scores their cells again.
TEST_F(LabCliTest, ATornLineInTheRecordsIsMovedAsideAndItsCellScoredAgain) {
  const std::string out = Path("torn");
  const testing::RunResult whole = RunCli(Args(out, "direct"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  const std::vector<std::string> expected = Records({out + "/results.jsonl"});
  std::string text = testing::ReadBytes(out + "/results.jsonl");
  const size_t second_line = text.find('\n') + 1;
  text.insert(second_line + 40, "\n");  // line 2 cut in two: neither half is JSON
  testing::WriteBytes(out + "/results.jsonl", text);
  const testing::RunResult report =
      RunCli("report '" + out + "/results.jsonl' --out '" + Path("rep") + "'");
  EXPECT_EQ(report.exit_code, 0) << report.out;
  EXPECT_TRUE(Has(report.out, "2 torn lines skipped")) << report.out;
  const testing::RunResult again = RunCli(Args(out, "direct"));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_TRUE(Has(again.out, "moved 2 torn lines (lines 2, 3")) << again.out;
  EXPECT_EQ(Records({out + "/results.jsonl"}), expected);
  EXPECT_TRUE(ReadLabRecords({out + "/results.jsonl"}).torn_lines.empty());
  EXPECT_TRUE(fs::exists(out + "/results.jsonl.torn"));
}

// Ctrl-C (SIGINT) used to kill the lab on the spot without a word. Now it finishes the step or
// cell at hand, saves it, says where, and exits with 130; the same command then finishes the lab
// with the records of one that never stopped.
TEST_F(LabCliTest, SigintSavesTheWorkAtHandSaysWhereAndExits130) {
  const testing::RunResult whole = RunCli(Args(Path("whole_int"), "direct"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  const std::string out = Path("int");
  const pid_t pid = Start(Args(out, "direct"), Path("int.log"));
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(out + "/models/rope-logn/step-00000010.safetensors"); }));
  kill(pid, SIGINT);
  EXPECT_EQ(ExitCodeOf(pid), 130);
  const std::string log = testing::ReadBytes(Path("int.log"));
  EXPECT_TRUE(Has(log, "stopped by SIGINT (Ctrl-C) after ")) << log;
  EXPECT_TRUE(Has(log, "the same `stretch lab` command continues the lab")) << log;
  const testing::RunResult resumed = RunCli(Args(out, "direct"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_EQ(Records({out + "/results.jsonl"}), Records({Path("whole_int/results.jsonl")}));
}

TEST_F(LabCliTest, ModelsFlagTrainsAndScoresOnlyTheNamedModels) {
  const testing::RunResult r = RunCli(Args(Path("k"), "direct") + " --models keynorm-logn");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<std::string> records = Records({Path("k/results.jsonl")});
  // nonrepeat at L; nonrepeat and repeat at 2L and 4L, repeat of period 2L at 4L; 3 tails.
  EXPECT_EQ(records.size(), 9u) << "one model x one method";
  for (const std::string& line : records) {
    EXPECT_TRUE(Has(line, "\"model\":\"keynorm-logn\"")) << line;
  }
  EXPECT_FALSE(fs::exists(Path("k/models/rope-logn")));
}

// --seed trains another model (stored in its options) and so gives other figures; the default is
// seed 1.
TEST_F(LabCliTest, SeedTrainsAnotherModelAndIsStoredWithIt) {
  const testing::RunResult one = RunCli(Args(Path("s1"), "direct") + " --models keynorm-logn");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const testing::RunResult two =
      RunCli(Args(Path("s2"), "direct") + " --models keynorm-logn --seed 2");
  ASSERT_EQ(two.exit_code, 0) << two.out;
  const auto seed_of = [&](const std::string& out) {
    return nlohmann::json::parse(testing::ReadBytes(Path(out + "/options/keynorm-logn.json")))
        .at("seed");
  };
  EXPECT_EQ(seed_of("s1"), 1);
  EXPECT_EQ(seed_of("s2"), 2);
  EXPECT_NE(Records({Path("s1/results.jsonl")}), Records({Path("s2/results.jsonl")}));
  EXPECT_NE(RunCli(Args(Path("s3"), "direct") + " --seed 0").exit_code, 0);
}

TEST_F(LabCliTest, PlanPrintsThePlanAndTheEstimateAndTrainsAndScoresNothing) {
  const testing::RunResult r = RunCli(Args(Path("p"), "direct") + " --plan");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "plan: 2 models x 1 method,")) << r.out;
  EXPECT_TRUE(Has(r.out, "estimated time: about")) << r.out;
  EXPECT_TRUE(Has(r.out, "plan only (--plan): nothing trained or scored")) << r.out;
  EXPECT_FALSE(fs::exists(Path("p/models")));
  const fs::path records = Path("p/results.jsonl");
  if (fs::exists(records)) {
    EXPECT_EQ(fs::file_size(records), 0u);
  }
  EXPECT_FALSE(fs::exists(Path("p/report")));
  // The same command without --plan runs the lab from there.
  const testing::RunResult run = RunCli(Args(Path("p"), "direct"));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(Records({Path("p/results.jsonl")}).size(), 18u);
}

TEST_F(LabCliTest, NbceScoresTheFixedTailAndIsRefusedElsewhereByName) {
  const testing::RunResult r = RunCli(Args(Path("nbce"), "direct,nbce") + " --models rope-logn");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "NBCE scores a question after a context (protocols tail and passkey)"))
      << r.out;
  int tail = 0, nbce = 0;
  for (const std::string& line : Records({Path("nbce/results.jsonl")})) {
    if (!Has(line, "\"method\":\"nbce\"")) continue;
    ++nbce;
    tail += Has(line, "\"protocol\":\"tail\"") ? 1 : 0;
    EXPECT_TRUE(Has(line, "\"resolved_method\":\"nbce (rows direct")) << line;
  }
  EXPECT_EQ(nbce, 3) << "the fixed tail at L and both factors";
  EXPECT_EQ(tail, nbce);
}

TEST_F(LabCliTest, BadFlagsAreRefusedWithTheFlagsName) {
  testing::RunResult r = RunCli(Args(Path("x"), "direct", "8,x"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Has(r.out, "--factors")) << r.out;
  r = RunCli(Args(Path("x"), "direct,nonsense"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Has(r.out, "nonsense")) << r.out;
  r = RunCli(Args(Path("x")) + " --models rope-logn,nonsense");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      Has(r.out, "no model \"nonsense\" in the --quick lab (its models: rope-logn,keynorm-logn)"))
      << r.out;
  r = RunCli(Args(Path("x")) + " --models keynorm-logn,keynorm-logn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Has(r.out, "named twice")) << r.out;
  r = RunCli("lab --quick --full --out '" + Path("y") + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Has(r.out, "--quick and --full")) << r.out;
  EXPECT_FALSE(fs::exists(Path("x")));
  EXPECT_FALSE(fs::exists(Path("y")));
}

TEST_F(LabCliTest, BadStagesAreRefusedWithWhatWasExpected) {
  const std::string base = "lab --data '" + (dir_ / "corpus").string() +
                           "' --cutoff-year 1996 --out '" + Path("s") +
                           "' --train-len 16 --batch 4 --dim 16 --layers 1 --heads 2 --methods "
                           "direct --factors 2 --passkey-trials 0 --copy-trials 0 --threads 1";
  struct Case {
    std::string flags, expect;
  };
  const std::vector<Case> cases = {
      {" --stage copy:abc:1e-3:gapped=1", "--stage copy:abc:1e-3:gapped=1: STEPS \"abc\""},
      {" --stage copy:100:fast:gapped=1", "LR \"fast\""},
      {" --stage copy:100:1e-3", "expected NAME:STEPS:LR:MIX"},
      {" --stage copy:100:1e-3:gapped=2", "MIX"},
      {" --stage 'a b:100:1e-3:gapped=1'", "is not a folder name"},
      {" --stage a:10:1e-3:gapped=1 --stage a:10:1e-3:text=1", "stage name a twice"},
      {" --stage a:10:1e-3:gapped=1 --no-stages", "--no-stages and --stage"},
      // The preset trains in stages: --steps alone would be silently unused.
      {" --steps 40", "--steps 40: the lab trains in stages"},
  };
  for (const Case& c : cases) {
    const testing::RunResult r = RunCli(base + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.out;
    EXPECT_TRUE(Has(r.out, c.expect)) << c.flags << "\n" << r.out;
    if (c.expect.rfind("--steps", 0) == 0) {
      EXPECT_TRUE(Has(r.out, "--no-stages")) << r.out;
    }
  }
  EXPECT_FALSE(fs::exists(Path("s")));
  const testing::RunResult help = RunCli("lab --help");
  EXPECT_TRUE(Has(help.out, "NAME:STEPS:LR:MIX")) << help.out;
  EXPECT_TRUE(Has(help.out, "--no-stages")) << help.out;
}

TEST_F(LabCliTest, StagesTrainInTurnAndAKillBetweenThemContinues) {
  const std::string args =
      "lab --data '" + (dir_ / "corpus").string() + "' --cutoff-year 1996 --out '" + Path("st") +
      "' --train-len 16 --batch 4 --dim 16 --layers 1 --heads 2 --methods "
      "direct --factors 2 --windows 2 --passkey-trials 0 --copy-trials 0 "
      "--threads 1 --models rope-logn --stage copy:6:3e-3:periodic=0.5,gapped=0.5 "
      "--stage mixed:6:1e-3:text=0.5,textcopy=0.2,gapped=0.3";
  const testing::RunResult first = RunCli(args);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_TRUE(Has(first.out, "stage 2/2 (mixed): starting from the last checkpoint of"))
      << first.out;
  EXPECT_TRUE(fs::exists(Path("st/models/rope-logn/1-copy")));
  EXPECT_TRUE(fs::exists(Path("st/models/rope-logn/2-mixed")));
  const std::vector<std::string> records = Records({Path("st/results.jsonl")});
  // The second stage and the records gone, as after a kill between the stages: the first stage
  // is not trained again, the second is, from the same checkpoint, to the same records.
  fs::remove_all(Path("st/models/rope-logn/2-mixed"));
  fs::remove(Path("st/results.jsonl"));
  const testing::RunResult again = RunCli(args);
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_TRUE(Has(again.out, "stage 1/2 (copy): trained already")) << again.out;
  EXPECT_EQ(Records({Path("st/results.jsonl")}), records);
}

}  // namespace
}  // namespace stretch
