// `stretch train` and the model loaders against bad numbers, edited runs and damaged checkpoints
// (issue 17): every case here once crashed, hung, or silently did something else, and each is
// now refused with its name and range, before any work, with the run's files left as they were.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/core/dir_lock.h"
#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/checkpoint_edit.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;
using testing::RunCliWithin;

fs::path TempDir(const std::string& name) {
  const fs::path dir = testing::ProgramTempDir("stretch_train_faults_") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path WriteCorpus(const std::string& name) {
  const fs::path dir = TempDir(name);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then"};
  Rng rng(7);
  for (int d = 0; d < 4; ++d) {
    std::ofstream f(dir / ("doc" + std::to_string(d) + ".txt"));
    for (int w = 0; w < 400; ++w) f << words[rng.NextU64() % 8] << (w % 10 == 9 ? ".\n" : " ");
  }
  return dir;
}

std::string ReadBytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const std::string kTiny =
    "--train-len 16 --batch 2 --dim 16 --layers 1 --heads 2 --eval-every 0 --valid-fraction 0.25 "
    "--threads 1";

std::string Quote(const fs::path& p) { return "'" + p.string() + "'"; }

// A tiny run of `steps` steps with a checkpoint every 2.
testing::RunResult TrainTiny(const fs::path& corpus, const fs::path& out, int steps) {
  return RunCli("train --data " + Quote(corpus) + " --out " + Quote(out) + " --steps " +
                std::to_string(steps) + " " + kTiny + " --save-every 2");
}

// Rewrites a checkpoint in place with `edit` applied to its tensors' bytes, sealed anew.
void RewriteCheckpoint(
    const fs::path& path,
    const std::function<void(const std::string&, std::vector<std::byte>&)>& edit) {
  testing::EditCheckpoint(path.string(), path.string(),
                          [&](auto&, std::vector<testing::TensorBytes>& tensors) {
                            for (testing::TensorBytes& t : tensors) edit(t.name, t.bytes);
                          });
}

template <typename T>
void SetFirst(std::vector<std::byte>& bytes, T value) {
  std::memcpy(bytes.data(), &value, sizeof(T));
}

// Finding 3, 8: each value below was accepted (trained with a default in its place) or aborted on
// an internal check. Now each is refused by its flag, with the allowed range, before the data is
// read: no run directory, no token cache.
TEST(TrainFaults, OutOfRangeNumbersAreRefusedBeforeAnyWork) {
  const fs::path corpus = WriteCorpus("corpus_ranges");
  const fs::path root = TempDir("ranges");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--weight-decay", "nan"},
      {"--weight-decay", "-1"},
      {"--heads", "0"},
      {"--heads", "-2"},
      {"--kv-heads", "0"},
      {"--min-lr", "nan"},
      {"--min-lr", "-5"},
      {"--warmup", "-7"},
      {"--hidden-dim", "-5"},
      {"--threads", "-4"},
      {"--lr", "inf"},
      {"--lr", "0"},
      {"--clip", "-1"},
      {"--steps", "99999999999999999999"},
      {"--seed", "-1"},
      {"--batch", "0"},
      {"--valid-fraction", "1"},
      {"--passkey-share", "0.7"},
      {"--layers", "100000000"},
      {"--save-every", "0"},
      {"--eval-windows", "-3"},
      {"--steps", "1e3"},
      {"--skip-nonfinite", "-1"},
      {"--skip-nonfinite", "1001"},
  };
  int i = 0;
  for (const auto& [flag, value] : cases) {
    const fs::path out = root / std::to_string(i++);
    const auto r = RunCliWithin(60, "train --data " + Quote(corpus) + " --out " + Quote(out) +
                                        " --steps 2 " + kTiny + " " + flag + " " + value);
    EXPECT_NE(r.exit_code, 0) << flag << " " << value << "\n" << r.out;
    EXPECT_NE(r.exit_code, 134) << flag << " " << value << ": aborted\n" << r.out;
    EXPECT_TRUE(Has(r.out, flag + ": found " + value + ", expected a ")) << r.out;
    EXPECT_FALSE(fs::exists(out)) << flag << " " << value << ": work began before the check";
  }
  // The same ranges hold for --config files (their values go through the same checks).
  const fs::path config = root / "config.json";
  std::ofstream(config) << R"({"weight_decay": -0.5})";
  const auto r = RunCli("train --data " + Quote(corpus) + " --out " + Quote(root / "cfg") +
                        " --config " + Quote(config) + " " + kTiny);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--weight-decay: found -0.5, expected a finite number in [0, 1000]"))
      << r.out;
}

// Finding 7: flags given with --resume were silently dropped for the stored ones, and a run's
// relative --data was resolved from wherever --resume ran. Now --steps (and how often the run
// saves, validates and reports) apply; any other flag must repeat the stored value; the stored
// corpus path is absolute and its fingerprint must match, and another corpus is refused before
// the run's token cache is touched.
TEST(TrainFaults, ResumeAppliesStepsAndRefusesEveryOtherChange) {
  const fs::path corpus = WriteCorpus("corpus_resume");
  const fs::path out = TempDir("resume");
  auto r = TrainTiny(corpus, out, 2);
  ASSERT_EQ(r.exit_code, 0) << r.out;

  r = RunCli("train --out " + Quote(out) + " --resume --steps 4 --skip-nonfinite 3");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--steps 4 (the run was started with 2): applies from here on")) << r.out;
  EXPECT_TRUE(Has(r.out, "--skip-nonfinite 3 (the run was started with 0): applies from here on"))
      << r.out;
  EXPECT_TRUE(fs::exists(out / "step-00000004.safetensors")) << r.out;
  EXPECT_TRUE(
      Has(SafetensorsFile((out / "step-00000004.safetensors").string()).GetMetadata("stretch.cli"),
          "\"skip_nonfinite\":3"));

  r = RunCli("train --out " + Quote(out) + " --resume --steps 6 --lr 0.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--lr 0.5: the run in")) << r.out;
  EXPECT_TRUE(Has(r.out, "expected --lr 0.001 or no --lr")) << r.out;
  r = RunCli("train --out " + Quote(out) + " --resume --steps 6 --dim 32");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "expected --dim 16 or no --dim")) << r.out;
  r = RunCli("train --out " + Quote(out) + " --resume --steps 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--steps 3: the run in")) << r.out;
  EXPECT_TRUE(Has(r.out, "is already at step 4")) << r.out;

  // The stored corpus is absolute: resuming from another directory trains on the same files.
  const std::string stored =
      SafetensorsFile((out / "step-00000004.safetensors").string()).GetMetadata("stretch.cli");
  EXPECT_TRUE(Has(stored, "\"data\":\"" + fs::absolute(corpus).lexically_normal().string()))
      << stored;

  // Another corpus given by name, or the run's own files edited: refused, the cache untouched.
  const fs::path other = WriteCorpus("corpus_other");
  std::ofstream(other / "doc0.txt", std::ios::app) << "a few more words.\n";
  r = RunCli("train --out " + Quote(out) + " --resume --steps 6 --data " + Quote(other));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--data " + other.string() + ": the run in")) << r.out;
  const std::string cache = ReadBytes(out / "tokens.cache");
  std::ofstream(corpus / "doc1.txt", std::ios::app) << "an edit.\n";
  r = RunCli("train --out " + Quote(out) + " --resume --steps 6");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "it is not the corpus the run was trained on")) << r.out;
  EXPECT_EQ(ReadBytes(out / "tokens.cache"), cache) << "the run's token cache was replaced";
  EXPECT_FALSE(fs::exists(out / "step-00000006.safetensors"));
}

// Findings 3, 4, 6 and item 2: damaged checkpoints. A changed byte fails the checksum: --resume
// passes over the file for the one before it, and a command given the file itself refuses it by
// name. Content that a writer sealed anyway (a step that disagrees, an all-zero generator, a NaN
// weight) is refused by name instead of an abort, a hang or a finite wrong loss.
TEST(TrainFaults, DamagedCheckpointsAreRefusedByNameAndResumeFallsBack) {
  const fs::path corpus = WriteCorpus("corpus_damage");
  const fs::path out = TempDir("damage");
  auto r = TrainTiny(corpus, out, 4);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const fs::path newest = out / "step-00000004.safetensors";
  const fs::path pristine = TempDir("pristine") / "step-00000004.safetensors";
  fs::copy_file(newest, pristine);
  const auto restore = [&] {
    fs::copy_file(pristine, newest, fs::copy_options::overwrite_existing);
  };

  // One flipped bit in the last byte of the data section.
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x10));
  }
  r = RunCli("score --model " + Quote(newest) + " --data " + Quote(corpus / "doc0.txt") +
             " --ctx 16 --windows 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, newest.string() + ": damaged")) << r.out;
  r = RunCli("train --out " + Quote(out) + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "skipping " + newest.string())) << r.out;
  EXPECT_TRUE(Has(r.out, "resumed from " + (out / "step-00000002.safetensors").string())) << r.out;
  EXPECT_EQ(ReadBytes(newest), ReadBytes(pristine)) << "the redone step 4 differs";

  struct Case {
    const char* what;
    std::function<void(const std::string&, std::vector<std::byte>&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"step disagrees",
       [](const std::string& name, std::vector<std::byte>& b) {
         if (name == "train.step") SetFirst<uint64_t>(b, 3);
       },
       "expected the same step"},
      {"huge step",
       [](const std::string& name, std::vector<std::byte>& b) {
         if (name == "train.step") SetFirst<uint64_t>(b, ~uint64_t{0});
       },
       "expected a step count below 2^63"},
      {"all-zero generator",
       [](const std::string& name, std::vector<std::byte>& b) {
         if (name == "rng.data") std::fill(b.begin(), b.end(), std::byte{0});
       },
       "tensor 'rng.data' is all zero"},
      {"NaN weight",
       [](const std::string& name, std::vector<std::byte>& b) {
         if (name == "layers.0.wq") SetFirst(b, std::numeric_limits<float>::quiet_NaN());
       },
       "tensor 'layers.0.wq' holds nan"},
  };
  for (const Case& c : cases) {
    restore();
    RewriteCheckpoint(newest, c.edit);
    r = RunCliWithin(60, "train --out " + Quote(out) + " --resume --steps 6");
    EXPECT_EQ(r.exit_code, 1) << c.what << "\n" << r.out;
    EXPECT_TRUE(Has(r.out, c.expected)) << c.what << "\n" << r.out;
  }
  // At inference the NaN weight is refused too, not scored into a finite loss.
  r = RunCli("score --model " + Quote(newest) + " --data " + Quote(corpus / "doc0.txt") +
             " --ctx 16 --windows 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "tensor layers.0.wq holds nan")) << r.out;

  // A whole, consistent checkpoint under another step's name (step 2's copied over step 4's):
  // refused by both names, where --resume went on from step 2 under step 4's name.
  fs::copy_file(out / "step-00000002.safetensors", newest, fs::copy_options::overwrite_existing);
  r = RunCliWithin(60, "train --out " + Quote(out) + " --resume --steps 6");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, newest.string() + ": named step 4 but holds step 2")) << r.out;
}

// Item 2: a file-size limit in the middle of a run (as a full disk): the run stops with the
// system's reason naming the file, instead of dying silently on SIGXFSZ; the previous checkpoint
// is intact, and the run resumes from it once the limit is lifted.
TEST(TrainFaults, AFullDiskStopsTheRunWithTheReasonAndItResumes) {
  const fs::path corpus = WriteCorpus("corpus_full");
  const fs::path out = TempDir("full");
  auto r = TrainTiny(corpus, out, 4);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string before = ReadBytes(out / "step-00000004.safetensors");
  // 60 KiB: the token cache and log are already there, a checkpoint (about 140 KiB) is not.
  r = testing::RunShell("ulimit -f 60; '" + std::string(STRETCH_CLI_PATH) + "' train --out " +
                        Quote(out) + " --resume --steps 8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "step-00000006.safetensors")) << r.out;
  EXPECT_TRUE(Has(r.out, "File too large")) << r.out;
  EXPECT_EQ(ReadBytes(out / "step-00000004.safetensors"), before);
  EXPECT_FALSE(fs::exists(out / "step-00000006.safetensors"));
  r = RunCli("train --out " + Quote(out) + " --resume --steps 8");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "resumed from " + (out / "step-00000004.safetensors").string())) << r.out;
  EXPECT_TRUE(fs::exists(out / "step-00000008.safetensors"));
}

// Whether `dir` holds the checkpoint of `step`, or (with `partial`) its file being written.
bool Reached(const fs::path& dir, int64_t step, bool partial) {
  const std::string name = StepFileName(step);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (partial ? f.starts_with("." + name + ".partial-") : f == name) return true;
  }
  return false;
}

// Item 2: a run killed with SIGKILL 20 times at random moments, resumed after each, ends with the
// uninterrupted run's final checkpoint byte for byte, no partial file left, and one log record
// per step. Each kill waits for a random step a few steps ahead: half of them strike while that
// step's checkpoint is being written (its partial file exists), the others once it is complete.
TEST(TrainFaults, TwentyKillsAtRandomMomentsEndWithTheUninterruptedWeights) {
  const fs::path corpus = WriteCorpus("corpus_kills");
  const fs::path whole = TempDir("kills_whole"), killed = TempDir("kills");
  const std::string args = "--steps 200 --save-every 1 " + kTiny;
  auto r = RunCli("train --data " + Quote(corpus) + " --out " + Quote(whole) + " " + args);
  ASSERT_EQ(r.exit_code, 0) << r.out;

  const fs::path last = killed / "step-00000200.safetensors";
  Rng rng(11);
  int kills = 0, in_writes = 0;
  for (int i = 0; i < 20; ++i) {
    // Until a checkpoint exists the run starts afresh (--overwrite: a kill before the first
    // checkpoint leaves a log and a token cache, which a new run would otherwise refuse to
    // replace); after that it resumes, whatever the kill left behind.
    const std::vector<std::pair<int64_t, std::string>> steps = StepFiles(killed.string());
    const int64_t at = steps.empty() ? 0 : steps.front().first;
    const int64_t target = at + 1 + static_cast<int64_t>(rng.NextU64() % 6);
    const bool partial = i % 2 == 0;
    const std::string cmd = steps.empty() ? "train --data " + Quote(corpus) + " --out " +
                                                Quote(killed) + " --overwrite " + args
                                          : "train --out " + Quote(killed) + " --resume";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string sh =
          std::string("exec '") + STRETCH_CLI_PATH + "' " + cmd + " >/dev/null 2>&1";
      execl("/bin/sh", "sh", "-c", sh.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    bool struck = false;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Reached(killed, target, partial) || (partial && Reached(killed, target, false))) {
        struck = !Reached(killed, target, false) || !partial;
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
    }
    ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << "run " << i << " failed on its own (status " << status << ")";
    if (WIFSIGNALED(status)) {
      ++kills;
      in_writes += partial && struck ? 1 : 0;
    }
  }
  r = RunCli("train --out " + Quote(killed) + " --resume --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(kills, 20);
  EXPECT_GE(in_writes, 1) << "no kill landed inside a checkpoint write";
  EXPECT_EQ(ReadBytes(last), ReadBytes(whole / "step-00000200.safetensors"))
      << "after " << kills << " kills the final checkpoint differs from the uninterrupted run's";
  for (const auto& e : fs::directory_iterator(killed)) {
    const std::string name = e.path().filename().string();
    // The folder's lock file stays by design (src/core/dir_lock.h); no partial file may.
    if (name == kDirLockName) continue;
    EXPECT_FALSE(name.starts_with(".")) << e.path() << " left behind";
  }
  // One record per step, in order.
  std::ifstream log(killed / "train_log.jsonl");
  std::string line;
  int64_t expected = 1;
  while (std::getline(log, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.value("step", int64_t{-1}) == expected) << line;
    ++expected;
  }
  EXPECT_EQ(expected, 201);
  std::printf("20 runs: %d killed, %d of them inside a checkpoint write\n", kills, in_writes);
}

// Issue 40, item 7: --resume with only a damaged checkpoint said "no complete checkpoint" and no
// more; the reason each file was passed over is now in the message.
TEST(TrainFaults, ResumeWithOnlyADamagedCheckpointSaysWhy) {
  const fs::path corpus = WriteCorpus("corpus_only_damaged");
  const fs::path out = TempDir("only_damaged");
  auto r = TrainTiny(corpus, out, 2);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const fs::path only = out / "step-00000002.safetensors";
  fs::resize_file(only, fs::file_size(only) - 100);  // cut short, as by a full disk
  r = RunCliWithin(60, "train --out " + Quote(out) + " --resume");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "--resume: no complete checkpoint in " + out.string() +
                             ": every candidate was passed over:\n  skipping " + only.string() +
                             ": "))
      << r.out;
}

// Issue 40, item 7: a step count of -5 stored in a checkpoint's options (metadata stretch.cli)
// was reported as "--steps: found -5" although no --steps was typed. Now the checkpoint and the
// stored option are named.
TEST(TrainFaults, AnOutOfRangeStoredOptionNamesTheCheckpoint) {
  const fs::path corpus = WriteCorpus("corpus_stored");
  const fs::path out = TempDir("stored");
  auto r = TrainTiny(corpus, out, 2);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const fs::path checkpoint = out / "step-00000002.safetensors";
  testing::EditCheckpoint(checkpoint.string(), checkpoint.string(),
                          [](std::map<std::string, std::string>& metadata, auto&) {
                            nlohmann::json cli = nlohmann::json::parse(metadata.at("stretch.cli"));
                            cli["steps"] = -5;
                            metadata["stretch.cli"] = cli.dump();
                          });
  r = RunCliWithin(60, "train --out " + Quote(out) + " --resume");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, checkpoint.string() +
                             " stretch.cli: stored option \"steps\" is -5: expected a whole "
                             "number in [1, "))
      << r.out;
  EXPECT_FALSE(Has(r.out, "--steps: found -5")) << r.out;
}

}  // namespace
}  // namespace stretch
