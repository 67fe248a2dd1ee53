// `stretch train` as a user runs it: a tiny run on a generated corpus; a run killed with SIGKILL
// and resumed ends with the very weights of an uninterrupted run; bad input is refused.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "tests/cli/cli_run.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;

fs::path TempDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("stretch_train_cli_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Four documents of pseudo-English: words from a small list, deterministic.
fs::path WriteCorpus() {
  const fs::path dir = TempDir("corpus");
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "away",
                         "from", "dog", "who", "was", "very", "big"};
  Rng rng(4);
  for (int d = 0; d < 4; ++d) {
    std::ofstream f(dir / ("doc" + std::to_string(d) + ".txt"));
    for (int w = 0; w < 800; ++w) f << words[rng.NextU64() % 16] << (w % 12 == 11 ? ".\n" : " ");
  }
  return dir;
}

const std::string kArgs =
    "--seq-len 32 --steps 60 --batch 4 --dim 32 --layers 2 --heads 2 --save-every 5 "
    "--eval-every 20 --eval-windows 4 --valid-fraction 0.25 --threads 1";

std::vector<float> Weights(const fs::path& ckpt) {
  const SafetensorsFile f(ckpt.string());
  std::vector<float> all;
  for (const SafetensorsTensor& t : f.tensors()) {
    if (t.name.starts_with("layers.") || t.name == "token_embedding" || t.name == "classifier" ||
        t.name == "final_norm") {
      const std::vector<float> v = f.Read<float>(t.name);
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  return all;
}

TEST(TrainCli, KilledAndResumedRunEndsWithTheUninterruptedWeights) {
  const fs::path corpus = WriteCorpus();
  const fs::path a = TempDir("a"), b = TempDir("b");
  const auto full = RunCli("train --data '" + corpus.string() + "' --out '" + a.string() + "' " + kArgs);
  ASSERT_EQ(full.exit_code, 0) << full.out;
  EXPECT_TRUE(Has(full.out, "step 60/60")) << full.out;
  EXPECT_TRUE(Has(full.out, "val loss")) << full.out;
  EXPECT_TRUE(Has(full.out, "checkpoints in")) << full.out;

  // Run b in a child process and kill it (SIGKILL: no chance to clean up) once its third
  // checkpoint is on disk, mid-run.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = std::string("exec '") + STRETCH_CLI_PATH + "' train --data '" +
                            corpus.string() + "' --out '" + b.string() + "' " + kArgs +
                            " > /dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const fs::path third = b / "step-00000015.safetensors";
  bool killed_midway = false;
  for (int i = 0; i < 60000 && !fs::exists(b / "step-00000060.safetensors"); ++i) {
    if (fs::exists(third)) {
      kill(pid, SIGKILL);
      killed_midway = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(killed_midway) << "the run ended before it could be killed";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(fs::exists(b / "step-00000060.safetensors"));

  const auto resumed = RunCli("train --out '" + b.string() + "' --resume --threads 1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_TRUE(Has(resumed.out, "resumed from")) << resumed.out;
  const std::vector<float> wa = Weights(a / "step-00000060.safetensors");
  const std::vector<float> wb = Weights(b / "step-00000060.safetensors");
  ASSERT_EQ(wa.size(), wb.size());
  ASSERT_FALSE(wa.empty());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0)
      << "resumed weights differ from the uninterrupted run's";
}

TEST(TrainCli, BadInputIsRefusedBeforeTraining) {
  const fs::path corpus = WriteCorpus();
  const fs::path out = TempDir("bad");
  auto run = [&](const std::string& extra) {
    return RunCli("train --data '" + corpus.string() + "' --out '" + out.string() +
                  "' --steps 2 " + extra);
  };
  auto r = run("--position sinusoidal");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "unknown scheme \"sinusoidal\"")) << r.out;
  r = run("--attention window=0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "not a positive integer")) << r.out;
  r = run("--heads 3 --dim 32");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "heads=3")) << r.out;
  r = run("--seq-len 100000");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "no document has the 100001 tokens")) << r.out;
  r = RunCli("train --out '" + TempDir("empty").string() + "' --resume");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "no complete checkpoint")) << r.out;
  r = run("--block mamba");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "unknown block \"mamba\"")) << r.out;
  r = run("--block gau --heads 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "the GAU block has a single head")) << r.out;
  r = run("--block gau:key=12 --dim 32");  // e = 64 is not a multiple of 12
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "a positive multiple of gau_key_dim=12")) << r.out;
}

// --block gau: a tiny GAU run trains, validates, checkpoints, and its checkpoint holds the GAU's
// tensors and configuration.
TEST(TrainCli, GauBlockRunCompletes) {
  const fs::path corpus = WriteCorpus();
  const fs::path out = TempDir("gau");
  const auto r = RunCli("train --data '" + corpus.string() + "' --out '" + out.string() +
                        "' --block gau --seq-len 32 --steps 20 --batch 4 --dim 32 --layers 2 "
                        "--save-every 10 --eval-every 10 --eval-windows 4 --valid-fraction 0.25 "
                        "--threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "GAU blocks (key width 32, expansion 64)")) << r.out;
  EXPECT_TRUE(Has(r.out, "step 20/20")) << r.out;
  EXPECT_TRUE(Has(r.out, "val loss")) << r.out;
  const SafetensorsFile f((out / "step-00000020.safetensors").string());
  EXPECT_NE(f.Find("layers.1.gau_u"), nullptr);
  EXPECT_NE(f.Find("layers.1.beta_k"), nullptr);
  EXPECT_EQ(f.Find("layers.0.wq"), nullptr);
  const std::string config = f.GetMetadata("stretch.config");
  EXPECT_TRUE(Has(config, "\"block\":\"gau\"")) << config;
  // Training went somewhere: the loss of the last step is below the first's.
  std::ifstream log(out / "train_log.jsonl");
  std::string line, first, last;
  while (std::getline(log, line)) {
    if (first.empty()) first = line;
    last = line;
  }
  auto loss_of = [](const std::string& rec) {
    const size_t at = rec.find("\"loss\":");
    return std::stod(rec.substr(at + 7));
  };
  ASSERT_FALSE(first.empty());
  EXPECT_LT(loss_of(last), loss_of(first)) << first << "\n" << last;
}

}  // namespace
}  // namespace stretch
