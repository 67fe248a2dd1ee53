// End-to-end tests of the `stretch` command as a user runs it.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/cli/cli_run.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::Has;
using testing::RunCli;
using testing::RunResult;

TEST(Cli, EverySubcommandExplainsItself) {
  const RunResult top = RunCli("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_TRUE(Has(top.out, "length extrapolation")) << top.out;
  for (const char* sub : {"generate", "score", "inspect", "bench"}) {
    const RunResult r = RunCli(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_TRUE(Has(r.out, "Example:")) << sub << ": " << r.out;
  }
  const RunResult score = RunCli("score --help");
  EXPECT_TRUE(Has(score.out, "BOS (prepended, replacing nothing)")) << score.out;
}

// `stretch --version` names the commit the binary was built from: what `git describe` says of the
// source tree now, when the tests run from a git checkout (CI builds a fresh clone), else a phrase
// that says the sources were not one. A build id baked in at configure time only, or a stale
// one, fails here after the next commit.
TEST(Cli, VersionNamesTheCommitItWasBuiltFrom) {
  const RunResult r = RunCli("--version");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const RunResult git = testing::RunShell("git -C '" STRETCH_SOURCE_DIR
                                          "' describe --always --dirty --abbrev=12 2>/dev/null");
  if (git.exit_code == 0 && !git.out.empty()) {
    EXPECT_EQ(r.out, "stretch " + git.out);
  } else {
    EXPECT_EQ(r.out, "stretch unknown (not built from a git checkout)\n");
  }
}

TEST(Cli, ContendedBenchNeedsAModel) {
  const RunResult r = RunCli("bench --contended");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "--contended needs --model")) << r.out;
}

TEST(Cli, MissingSubcommandOrFileFailsWithAMessage) {
  EXPECT_NE(RunCli("").exit_code, 0);
  const RunResult r = RunCli("inspect --model /nonexistent/model.bin");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Has(r.out, "/nonexistent/model.bin")) << r.out;
}

constexpr const char* kModel = "models/stories260K/stories260K.bin";
constexpr const char* kTok = "models/stories260K/tok512.bin";

std::string ModelArgs() {
  return "--model '" + testing::SharedPath(kModel) + "' --tokenizer '" + testing::SharedPath(kTok) +
         "'";
}

// ../shared/README.md: greedy decoding from BOS, 200 tokens, begins with this text.
TEST(Cli, GreedyGenerationFromBosMatchesTheKnownStory) {
  STRETCH_REQUIRE_SHARED(kModel);
  const RunResult r = RunCli("generate " + ModelArgs() + " -n 200 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
  EXPECT_EQ(r.out.substr(0, expected.size()), expected) << r.out;
  EXPECT_TRUE(Has(r.out, "prefill: 1 tokens")) << r.out;
  EXPECT_TRUE(Has(r.out, "tokens/s")) << r.out;
}

TEST(Cli, ScoreWritesJsonAndPerTokenCsvForTokenFiles) {
  STRETCH_REQUIRE_SHARED(kModel);
  const std::string tokens = ::testing::TempDir() + "/cli_tokens.txt";
  const std::string csv = ::testing::TempDir() + "/cli_per_token.csv";
  std::ofstream(tokens) << "1 403 407 261 378 434 500\n";
  const RunResult r = RunCli("score " + ModelArgs() + " --tokens '" + tokens +
                             "' --ctx 16 --json --per-token '" + csv + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "\"tokens_scored\": 6")) << r.out;
  EXPECT_TRUE(Has(r.out, "no BOS added")) << r.out;
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header, "window,position,target,loss,correct");
  int rows = 0;
  while (std::getline(in, line)) ++rows;
  EXPECT_EQ(rows, 6);
  // One 7-token sequence scores positions 0..5: the bucket label says so, not 0-511.
  const RunResult table = RunCli("score " + ModelArgs() + " --tokens '" + tokens + "' --ctx 16");
  EXPECT_TRUE(Has(table.out, "1 sequences, 6 tokens scored")) << table.out;
  EXPECT_TRUE(Has(table.out, "0-5")) << table.out;
}

TEST(Cli, ScoreRejectsBadFlagsBeforeRunning) {
  STRETCH_REQUIRE_SHARED(kModel);
  const RunResult neither = RunCli("score " + ModelArgs() + " --ctx 512");
  EXPECT_EQ(neither.exit_code, 1);
  EXPECT_TRUE(
      Has(neither.out, "exactly one of --data (text) or --tokens (token ids); found neither"))
      << neither.out;
  const std::string tokens = ::testing::TempDir() + "/cli_tokens_both.txt";
  std::ofstream(tokens) << "1 2 3\n";
  const RunResult both =
      RunCli("score " + ModelArgs() + " --data '" + testing::SharedPath("data/tinystories") +
             "' --tokens '" + tokens + "'");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_TRUE(Has(both.out, "found both")) << both.out;
  const RunResult tok_stride =
      RunCli("score " + ModelArgs() + " --tokens '" + tokens + "' --stride 2");
  EXPECT_EQ(tok_stride.exit_code, 1);
  EXPECT_TRUE(Has(tok_stride.out, "--stride applies to text")) << tok_stride.out;
  const RunResult nan = RunCli("generate " + ModelArgs() + " --temperature nan");
  EXPECT_NE(nan.exit_code, 0);
  EXPECT_TRUE(Has(nan.out, "--temperature: found nan")) << nan.out;
  const RunResult bench = RunCli("bench --quick --model /nonexistent/m.bin");
  EXPECT_EQ(bench.exit_code, 1);
  EXPECT_TRUE(Has(bench.out, "/nonexistent/m.bin")) << bench.out;
  const RunResult stride =
      RunCli("score " + ModelArgs() + " --data '" + testing::SharedPath("data/tinystories") +
             "' --ctx 64 --stride 65");
  EXPECT_EQ(stride.exit_code, 1);
  EXPECT_TRUE(Has(stride.out, "--stride: found 65")) << stride.out;
}

// Runs `args` as RunCli does, from a process forked for it, and returns the largest resident set
// (KiB) of the processes it waited for: RUSAGE_CHILDREN in the test binary itself would be the
// largest child of every test run before this one in the same process (a whole-binary run),
// not this command's.
RunResult RunCliMeasuringPeak(const std::string& args, long& peak_kib) {
  int fd[2];
  RunResult r;
  peak_kib = -1;
  if (pipe(fd) != 0) return r;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    const RunResult child = RunCli(args);
    struct rusage usage {};
    const long peak = getrusage(RUSAGE_CHILDREN, &usage) == 0 ? usage.ru_maxrss : -1;
    const std::string head = std::to_string(child.exit_code) + " " + std::to_string(peak) + "\n";
    for (const std::string* part : {&head, &child.out}) {
      for (size_t done = 0; done < part->size();) {
        const ssize_t n = write(fd[1], part->data() + done, part->size() - done);
        if (n <= 0) _exit(1);
        done += static_cast<size_t>(n);
      }
    }
    _exit(0);
  }
  close(fd[1]);
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return r;
  const size_t eol = all.find('\n');
  if (eol == std::string::npos ||
      std::sscanf(all.c_str(), "%d %ld", &r.exit_code, &peak_kib) != 2) {
    return r;
  }
  r.out = all.substr(eol + 1);
  return r;
}

// Memory is O(L): scoring at 16384 positions must never hold an L x L matrix (one such float
// matrix is 1 GiB). Measured peak RSS: 41 MiB for the whole run (weights 1 MiB, KV cache 20 MiB,
// hidden states and activations ~15 MiB). The bound, 256 MiB, is a quarter of a single L x L
// matrix. Not checked under AddressSanitizer, whose shadow memory and quarantine inflate RSS.
TEST(Cli, ScoringAt16kNeverHoldsALengthSquaredMatrix) {
  STRETCH_REQUIRE_SHARED(kModel);
#if STRETCH_ASAN
  GTEST_SKIP() << "peak RSS is not meaningful under AddressSanitizer";
#endif
  long peak_kib = -1;
  const RunResult r = RunCliMeasuringPeak("score " + ModelArgs() + " --data '" +
                                              testing::SharedPath("data/tinystories") +
                                              "' --ctx 16384 --windows 1 --no-progress",
                                          peak_kib);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "16384 tokens scored")) << r.out;
  ASSERT_GT(peak_kib, 0);
  const double peak_mib = static_cast<double>(peak_kib) / 1024.0;  // ru_maxrss: KiB on Linux
  EXPECT_LT(peak_mib, 256.0);
  EXPECT_GT(peak_mib,
            20.0);  // the KV cache alone is 20 MiB: the measurement is of the right process
}

TEST(Cli, InspectReportsConfigAndLinearMemory) {
  STRETCH_REQUIRE_SHARED(kModel);
  const RunResult r = RunCli("inspect --model '" + testing::SharedPath(kModel) + "' --ctx 16384");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "trained context length (seq_len)             512")) << r.out;
  EXPECT_TRUE(Has(r.out, "heads / kv heads (grouped-query attention)   8 / 4")) << r.out;
  // KV cache: 2 (k, v) x 5 layers x 16384 positions x 32 floats x 4 bytes = 20 MiB.
  EXPECT_TRUE(Has(r.out, "KV cache (16384 positions)                   20.0 MiB")) << r.out;
}

}  // namespace
}  // namespace stretch
