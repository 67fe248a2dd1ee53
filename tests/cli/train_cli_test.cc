// `stretch train` as a user runs it: a tiny run on a generated corpus; a run killed with SIGKILL
// and resumed ends with the very weights of an uninterrupted run; bad input is refused; a run
// fine-tuned from a checkpoint (--init) with PI or NTK at a longer length.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "src/model/transformer.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/checkpoint_edit.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;

fs::path TempDir(const std::string& name) {
  const fs::path dir = testing::ProgramTempDir("stretch_train_cli_") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Four documents of pseudo-English: words from a small list, deterministic.
fs::path WriteCorpus() {
  const fs::path dir = TempDir("corpus");
  const char* words[] = {"the", "cat",  "sat",  "on",  "a",   "mat", "and",  "then",
                         "ran", "away", "from", "dog", "who", "was", "very", "big"};
  Rng rng(4);
  for (int d = 0; d < 4; ++d) {
    std::ofstream f(dir / ("doc" + std::to_string(d) + ".txt"));
    for (int w = 0; w < 800; ++w) f << words[rng.NextU64() % 16] << (w % 12 == 11 ? ".\n" : " ");
  }
  return dir;
}

const std::string kArgs =
    "--train-len 32 --steps 60 --batch 4 --dim 32 --layers 2 --heads 2 --save-every 5 "
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
  const auto full =
      RunCli("train --data '" + corpus.string() + "' --out '" + a.string() + "' " + kArgs);
  ASSERT_EQ(full.exit_code, 0) << full.out;
  EXPECT_TRUE(Has(full.out, "step 60/60")) << full.out;
  // The held-out loss with its 95% interval over the held-out windows.
  EXPECT_TRUE(std::regex_search(full.out,
                                std::regex(R"(val loss \d+\.\d{4} \(\d+\.\d{4}-\d+\.\d{4}\) acc)")))
      << full.out;
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

// Starts `stretch train ARGS` in the background, its output to `log`; returns its pid.
pid_t StartTrain(const std::string& args, const fs::path& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = std::string("exec '") + STRETCH_CLI_PATH + "' train " + args + " > '" +
                            log.string() + "' 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int ExitCode(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadText(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Issue 40 item 2's reproducer: two runs started together into one empty --out (one --dim 32,
// one --dim 16) both ended with exit 0, every checkpoint the dim-16 model's and the log doubled.
// Now exactly one runs; the other is refused naming it, and the run's files are its own.
TEST(TrainCli, TwoRunsIntoOneFolderOneRunsTheOtherIsRefused) {
  const fs::path corpus = WriteCorpus();
  const fs::path out = TempDir("two"), logs = TempDir("two_logs");
  const std::string common = "--data '" + corpus.string() + "' --out '" + out.string() +
                             "' --train-len 32 --steps 20 --batch 4 --layers 1 --heads 2 "
                             "--save-every 5 --eval-every 0 --threads 1";
  const pid_t a = StartTrain(common + " --dim 32", logs / "a.log");
  const pid_t b = StartTrain(common + " --dim 16", logs / "b.log");
  const int ca = ExitCode(a), cb = ExitCode(b);
  const std::string la = ReadText(logs / "a.log"), lb = ReadText(logs / "b.log");
  ASSERT_EQ((ca == 0) + (cb == 0), 1) << la << "\n---\n" << lb;
  const std::string& refused = ca == 0 ? lb : la;
  EXPECT_EQ(ca == 0 ? cb : ca, 1);
  // Refused by the lock while the other runs; or, had the other finished before this one
  // started, by the check for a run already there. Both name the folder.
  EXPECT_TRUE(Has(refused, "is in use by another stretch process, pid") ||
              Has(refused, "holds another run"))
      << refused;
  const int dim = ca == 0 ? 32 : 16;
  for (const char* step : {"step-00000005.safetensors", "step-00000020.safetensors"}) {
    const SafetensorsFile f((out / step).string());
    EXPECT_EQ(f.Read<float>("final_norm").size(), static_cast<size_t>(dim)) << step;
  }
  const std::string log = ReadText(out / "train_log.jsonl");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 20) << "one record per step";
}

// Ctrl-C used to end a run silently, its last checkpoint up to --save-every steps old and not
// named. Now the step at hand is finished and saved, the message says which checkpoint holds it,
// the exit code is 130, and --resume continues to the weights of a run that never stopped.
TEST(TrainCli, SigintSavesTheStepAtHandAndResumeEndsWithTheUninterruptedWeights) {
  const fs::path corpus = WriteCorpus();
  const fs::path a = TempDir("int_a"), b = TempDir("int_b"), logs = TempDir("int_logs");
  // No save before the end but Ctrl-C's.
  const std::string args =
      "--train-len 32 --steps 60 --batch 4 --dim 32 --layers 2 --heads 2 --save-every 1000 "
      "--eval-every 20 --eval-windows 4 --valid-fraction 0.25 --threads 1";
  const auto full =
      RunCli("train --data '" + corpus.string() + "' --out '" + a.string() + "' " + args);
  ASSERT_EQ(full.exit_code, 0) << full.out;
  const pid_t pid = StartTrain(
      "--data '" + corpus.string() + "' --out '" + b.string() + "' " + args, logs / "b.log");
  bool sent = false;
  for (int i = 0; i < 60000; ++i) {
    const std::string log = ReadText(b / "train_log.jsonl");
    if (std::count(log.begin(), log.end(), '\n') >= 3) {
      kill(pid, SIGINT);
      sent = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(sent) << "the run never logged 3 steps";
  EXPECT_EQ(ExitCode(pid), 130);
  const std::string log = ReadText(logs / "b.log");
  EXPECT_TRUE(Has(log, "stopped by SIGINT (Ctrl-C) after step")) << log;
  EXPECT_TRUE(Has(log, "--resume continues from it")) << log;
  const auto resumed = RunCli("train --out '" + b.string() + "' --resume --threads 1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  const std::vector<float> wa = Weights(a / "step-00000060.safetensors");
  const std::vector<float> wb = Weights(b / "step-00000060.safetensors");
  ASSERT_EQ(wa.size(), wb.size());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0);
}

// Issue 41 item 8: one text file is a corpus. It was refused ("a held-out split by document needs
// at least 2"); now its last tenth is held out by position, as the lab splits a single file.
TEST(TrainCli, OneTextFileIsACorpus) {
  const fs::path dir = TempDir("one_file");
  {
    std::ofstream f(dir / "book.txt");
    Rng rng(9);
    const char* words[] = {"it", "was", "the", "best", "of", "times", "worst", "age"};
    for (int w = 0; w < 3000; ++w) f << words[rng.NextU64() % 8] << (w % 15 == 14 ? ".\n" : " ");
  }
  const auto r =
      RunCli("train --data '" + (dir / "book.txt").string() + "' --out '" + (dir / "run").string() +
             "' --seq-len 32 --steps 4 --batch 2 --dim 16 --layers 1 --heads 2 "
             "--eval-every 4 --eval-windows 2 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "val loss")) << r.out;
}

TEST(TrainCli, BadInputIsRefusedBeforeTraining) {
  const fs::path corpus = WriteCorpus();
  const fs::path out = TempDir("bad");
  auto run = [&](const std::string& extra) {
    return RunCli("train --data '" + corpus.string() + "' --out '" + out.string() + "' --steps 2 " +
                  extra);
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
  r = run("--train-len 100000 --batch 1 --dim 16 --layers 1 --heads 2");
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
                        "' --block gau --train-len 32 --steps 20 --batch 4 --dim 32 --layers 2 "
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

  // The run's directory alone serves score, generate and inspect, with a method on top.
  const std::string model = " --threads 1 --model '" + out.string() + "'";
  auto scored =
      RunCli("score" + model + " --data '" + corpus.string() + "' --ctx 64 --no-progress");
  ASSERT_EQ(scored.exit_code, 0) << scored.out;
  auto mapped = RunCli("score" + model + " --data '" + corpus.string() +
                       "' --ctx 64 --method rerope:window=16 --no-progress");
  ASSERT_EQ(mapped.exit_code, 0) << mapped.out;
  const auto gen = RunCli("generate" + model + " -n 8 --prompt 'the '");
  ASSERT_EQ(gen.exit_code, 0) << gen.out;
  const auto info = RunCli("inspect --model '" + out.string() + "'");
  ASSERT_EQ(info.exit_code, 0) << info.out;
  EXPECT_TRUE(Has(info.out, "GAU (single-head Gated Attention Unit")) << info.out;
  EXPECT_TRUE(Has(info.out, "2 copies of the head (E / S)")) << info.out;
}

// Copies a checkpoint with its stretch.config changed by `edit` (every tensor and the other
// metadata as they are).
void CopyWithConfig(const fs::path& from, const fs::path& to,
                    const std::function<void(nlohmann::json&)>& edit) {
  testing::EditCheckpoint(from.string(), to.string(),
                          [&](std::map<std::string, std::string>& meta, auto&) {
                            nlohmann::json config = nlohmann::json::parse(meta["stretch.config"]);
                            edit(config);
                            meta["stretch.config"] = config.dump();
                          });
}

// The mean loss `stretch score --json-out` reports for one method and one length.
double ScoredLoss(const fs::path& model, const fs::path& data, const fs::path& json_out) {
  const auto r = RunCli("score --model '" + model.string() + "' --data '" + data.string() +
                        "' --ctx 64 --json-out '" + json_out.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(json_out);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const nlohmann::json* cell = nullptr;
  if (j.is_object() && j.contains("cells") && j.at("cells").is_array() && !j.at("cells").empty()) {
    cell = &j.at("cells").at(0);
  }
  EXPECT_TRUE(cell != nullptr && cell->contains("loss")) << j.dump(1);
  return cell != nullptr && cell->contains("loss") ? cell->at("loss").get<double>() : 0.0;
}

// --init: a run at seq-len 32 with a SentencePiece tokenizer, fine-tuned from its checkpoint
// with position interpolation at twice the length. The architecture and the tokenizer come from
// the checkpoint and the banner says so; the new checkpoint stores the interpolation and the same
// tokenizer; `stretch score` and `inspect` run it with the interpolation (the loss changes
// without it); a resumed fine-tuning run is bit for bit the uninterrupted one, even with the
// --init file gone; NTK resolves its base; flags that contradict the checkpoint are refused.
TEST(TrainCli, InitFineTunesFromACheckpointWithPiAtALongerLength) {
  const fs::path corpus = WriteCorpus();
  const fs::path base = TempDir("init_base"), pi = TempDir("init_pi"), ntk = TempDir("init_ntk");
  const std::string run_opts = " --batch 2 --eval-every 0 --valid-fraction 0.25 --threads 1";
  auto r = RunCli("train --data '" + corpus.string() + "' --out '" + base.string() +
                  "' --tokenizer bpe --vocab-size 300 --train-len 32 --steps 4 --save-every 4 "
                  "--dim 32 --layers 2 --heads 2" +
                  run_opts);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const fs::path ck = base / "step-00000004.safetensors";
  ASSERT_TRUE(fs::exists(ck));

  // Only the new length and position: sizes, block, attention and tokenizer from the checkpoint
  // (given as the run's directory: its newest checkpoint).
  const std::string init = "train --data '" + corpus.string() + "' --init '" + base.string() + "'";
  r = RunCli(init + " --out '" + pi.string() +
             "' --position rope:pi=2 --train-len 64 --steps 4 "
             "--save-every 2" +
             run_opts);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "(the checkpoint's bpe tokenizer, vocabulary 300;")) << r.out;
  EXPECT_TRUE(Has(r.out, "train: --init " + ck.string() +
                             ": from the checkpoint: bpe tokenizer, "
                             "vocabulary 300; block llama, dim 32, 2 layers, 2 heads (2 kv)"))
      << r.out;
  EXPECT_TRUE(Has(r.out,
                  "changed: seq_len 32 -> 64, position rope:base=10000 -> "
                  "rope:base=10000,pi=2\n"))
      << r.out;
  EXPECT_TRUE(Has(r.out, "dim 32, 2 layers, 2 heads; position rope:base=10000,pi=2;")) << r.out;
  EXPECT_TRUE(Has(r.out, "parameters initialized from " + ck.string())) << r.out;
  EXPECT_TRUE(Has(r.out, "train: 4 steps done")) << r.out;
  const fs::path tuned = pi / "step-00000004.safetensors";
  {
    const SafetensorsFile f(tuned.string()), g(ck.string());
    const nlohmann::json config = nlohmann::json::parse(f.GetMetadata("stretch.config"));
    EXPECT_EQ(config.at("rope_interpolation"), 2.0) << config.dump();
    EXPECT_EQ(config.at("seq_len"), 64);
    EXPECT_EQ(config.at("dim"), 32);
    EXPECT_EQ(config.at("vocab_size"), 300);
    EXPECT_EQ(f.GetMetadata("stretch.tokenizer"), g.GetMetadata("stretch.tokenizer"));
    EXPECT_EQ(f.Read<uint8_t>("tokenizer.model"), g.Read<uint8_t>("tokenizer.model"));
    const nlohmann::json cli = nlohmann::json::parse(f.GetMetadata("stretch.cli"));
    EXPECT_EQ(cli.at("init"), ck.string());
    EXPECT_EQ(cli.at("tokenizer"), "bpe");
  }
  // The inference model of the checkpoint carries the interpolation into its RoPE geometry.
  const CheckpointModel loaded = LoadCheckpointModel(tuned.string());
  EXPECT_EQ(loaded.model.config.rope_interpolation, 2.0f);
  EXPECT_EQ(Transformer(loaded.model).Geometry().interpolation, 2.0);
  r = RunCli("inspect --model '" + pi.string() + "' --ctx 64");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "positions divided by 2 (PI")) << r.out;
  // score runs the run's directory, and the interpolation is what it runs: the same checkpoint
  // without it scores otherwise.
  const fs::path without = TempDir("init_pi_without") / "step-00000004.safetensors";
  CopyWithConfig(tuned, without, [](nlohmann::json& j) { j.erase("rope_interpolation"); });
  const double with_pi = ScoredLoss(pi, corpus, TempDir("score_pi") / "a.json");
  const double without_pi = ScoredLoss(without, corpus, TempDir("score_pi") / "b.json");
  EXPECT_GT(with_pi, 0.0);
  EXPECT_GT(std::abs(with_pi - without_pi), 1e-6) << with_pi << " " << without_pi;

  // NTK: the base, resolved at head dim 16, in the banner; a size flag equal to the checkpoint's
  // is accepted; no --train-len: the checkpoint's.
  r = RunCli(init + " --out '" + ntk.string() +
             "' --position rope:ntk=2 --steps 1 "
             "--dim 32 --tokenizer bpe" +
             run_opts);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string ntk_base =
      fmt::format("{}", static_cast<float>(1e4 * std::pow(2.0, 16.0 / 14.0)));
  EXPECT_TRUE(
      Has(r.out, "position rope:base=10000,ntk=2 (NTK-aware: RoPE base 10000 -> " + ntk_base + ")"))
      << r.out;
  {
    const SafetensorsFile f((ntk / "step-00000001.safetensors").string());
    const nlohmann::json config = nlohmann::json::parse(f.GetMetadata("stretch.config"));
    EXPECT_EQ(config.at("rope_ntk"), 2.0);
    EXPECT_EQ(fmt::format("{}", config.at("rope_base").get<float>()), ntk_base);
    EXPECT_EQ(config.at("seq_len"), 32);
  }

  // Flags that contradict the checkpoint.
  const fs::path bad = TempDir("init_bad");
  auto refused = [&](const std::string& extra, const std::string& part) {
    const auto b =
        RunCli(init + " --out '" + bad.string() + "' --steps 1" + run_opts + " " + extra);
    EXPECT_NE(b.exit_code, 0) << extra;
    EXPECT_TRUE(Has(b.out, part)) << extra << "\n" << b.out;
  };
  refused("--dim 64", "--dim 64: the checkpoint " + ck.string() + " has dim=32");
  refused("--heads 4", "--heads 4: the checkpoint");
  refused("--block gau", "--block gau: the checkpoint");
  refused("--tokenizer bytes", "--tokenizer bytes: --init");
  refused("--tokenizer unigram", "--tokenizer unigram: --init");
  refused("--vocab-size 500", "--vocab-size 500: --init");
  refused("--position rope:pi=2,ntk=2", "pi and ntk together");
  refused("--position rope:pi=0.5", "pi=0.5 (allowed: a factor F >= 1");

  // Resume the fine-tuning run from its step 2 with the --init file gone: the weights of step 4.
  const fs::path resumed = TempDir("init_resumed");
  fs::copy_file(pi / "step-00000002.safetensors", resumed / "step-00000002.safetensors");
  fs::remove_all(base);
  r = RunCli("train --out '" + resumed.string() + "' --resume --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "resumed from")) << r.out;
  const std::vector<float> wa = Weights(tuned), wb = Weights(resumed / "step-00000004.safetensors");
  ASSERT_EQ(wa.size(), wb.size());
  ASSERT_FALSE(wa.empty());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0)
      << "the resumed --init run's weights differ from the uninterrupted run's";
}

// --passkey-share: the share is stored in the checkpoints and a resumed run trains with it, bit for
// bit; a run stored without it resumes without it, and a resuming command line that asks for one
// is refused; a share above 0.5 and a --train-len too short for the passkey documents are refused by their flags.
TEST(TrainCli, PasskeyShareIsStoredAndResumedWith) {
  const fs::path corpus = WriteCorpus();
  const std::string args =
      "--train-len 64 --steps 4 --batch 4 --dim 32 --layers 1 --heads 2 --save-every 2 "
      "--eval-every 0 --valid-fraction 0.25 --threads 1";
  // Trains `extra` into a fresh directory, then resumes a copy of its step 2 with `resume_extra`:
  // whether the resumed step 4 has the uninterrupted run's weights.
  auto resumed_equals_whole = [&](const std::string& name, const std::string& extra,
                                  const std::string& resume_extra, double stored_share) {
    const fs::path whole = TempDir(name), part = TempDir(name + "_part");
    auto r = RunCli("train --data '" + corpus.string() + "' --out '" + whole.string() + "' " +
                    args + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    fs::copy_file(whole / "step-00000002.safetensors", part / "step-00000002.safetensors");
    r = RunCli("train --out '" + part.string() + "' --resume --threads 1 " + resume_extra);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(Has(r.out,
                  "--passkey-share 0.3: that share of the training rows are passkey "
                  "documents of 65 tokens"),
              Has(extra, "--passkey-share"))
        << r.out;
    const SafetensorsFile f((whole / "step-00000004.safetensors").string());
    const nlohmann::json stored = nlohmann::json::parse(f.GetMetadata("stretch.cli"));
    EXPECT_EQ(stored.value("passkey_share", 0.0), stored_share) << stored.dump();
    EXPECT_EQ(stored.contains("passkey_share"), stored_share != 0.0) << stored.dump();
    const std::vector<float> wa = Weights(whole / "step-00000004.safetensors");
    const std::vector<float> wb = Weights(part / "step-00000004.safetensors");
    return !wa.empty() && wa.size() == wb.size() &&
           std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(resumed_equals_whole("passkey", "--passkey-share 0.3", "", 0.3));
  EXPECT_TRUE(resumed_equals_whole("plain", "", "--passkey-share 0", 0.0));
  // A share given with --resume that is not the run's is refused, not dropped.
  const fs::path plain_part = testing::ProgramTempDir("stretch_train_cli_") / "plain_part";
  const auto other =
      RunCli("train --out '" + plain_part.string() + "' --resume --passkey-share 0.3");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_TRUE(Has(other.out, "expected --passkey-share 0.0 or no --passkey-share")) << other.out;

  const fs::path out = TempDir("passkey_bad");
  auto refused = [&](const std::string& extra, const std::string& expected) {
    const auto r = RunCli("train --data '" + corpus.string() + "' --out '" + out.string() +
                          "' --steps 1 " + extra);
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_TRUE(Has(r.out, expected)) << r.out;
  };
  refused("--passkey-share 0.7",
          "--passkey-share: found 0.7, expected a finite number in [0, 0.5]");
  refused("--train-len 32 --passkey-share 0.1",
          "--train-len 32: too short for passkey documents (--passkey-share 0.1)");
}

// --bos-rows: stored in the checkpoints (only when given), a resumed run trains with it bit for
// bit, and it changes the training (the text rows' first token is BOS).
TEST(TrainCli, BosRowsAreStoredAndResumedWith) {
  const fs::path corpus = WriteCorpus();
  const std::string args =
      "--train-len 64 --steps 4 --batch 4 --dim 32 --layers 1 --heads 2 --save-every 2 "
      "--eval-every 0 --valid-fraction 0.25 --threads 1 --passkey-share 0.3";
  const fs::path with = TempDir("bos_rows"), part = TempDir("bos_rows_part"),
                 without = TempDir("bos_rows_not");
  auto r = RunCli("train --data '" + corpus.string() + "' --out '" + with.string() + "' " + args +
                  " --bos-rows");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--bos-rows: every training row begins with BOS")) << r.out;
  r = RunCli("train --data '" + corpus.string() + "' --out '" + without.string() + "' " + args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--bos-rows is off: the passkey and synthetic copy rows begin with BOS"))
      << r.out;
  fs::copy_file(with / "step-00000002.safetensors", part / "step-00000002.safetensors");
  r = RunCli("train --out '" + part.string() + "' --resume --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "every training row begins with BOS")) << r.out;
  auto stored = [](const fs::path& dir) {
    const SafetensorsFile f((dir / "step-00000004.safetensors").string());
    return nlohmann::json::parse(f.GetMetadata("stretch.cli"));
  };
  EXPECT_EQ(stored(with).value("bos_rows", false), true);
  EXPECT_FALSE(stored(without).contains("bos_rows"));
  const std::vector<float> wa = Weights(with / "step-00000004.safetensors");
  const std::vector<float> wb = Weights(part / "step-00000004.safetensors");
  const std::vector<float> wc = Weights(without / "step-00000004.safetensors");
  ASSERT_FALSE(wa.empty());
  ASSERT_EQ(wa.size(), wb.size());
  ASSERT_EQ(wa.size(), wc.size());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(wa.data(), wc.data(), wa.size() * sizeof(float)), 0);
}

// --mix: the copy shares are stored (passkey= as passkey_share), a resumed run trains with them bit
// for bit, a resuming command line with another mix is refused, and bad mixes are refused by the
// flag with the entry and what was expected.
TEST(TrainCli, MixIsStoredResumedWithAndRefusedWhenChanged) {
  const fs::path corpus = WriteCorpus();
  const std::string args =
      "--seq-len 64 --steps 4 --batch 4 --dim 32 --layers 1 --heads 2 --save-every 2 "
      "--eval-every 2 --eval-windows 4 --valid-fraction 0.25 --threads 1";
  const fs::path whole = TempDir("mix"), part = TempDir("mix_part");
  auto r = RunCli("train --data '" + corpus.string() + "' --out '" + whole.string() + "' " + args +
                  " --mix text=0.4,periodic=0.1,gapped=0.2,textcopy=0.2,passkey=0.1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--mix periodic=0.1,gapped=0.2,textcopy=0.2: those shares")) << r.out;
  EXPECT_TRUE(Has(r.out, "  copy ")) << r.out;  // the readout on the progress line
  const SafetensorsFile f((whole / "step-00000004.safetensors").string());
  const nlohmann::json stored = nlohmann::json::parse(f.GetMetadata("stretch.cli"));
  EXPECT_EQ(stored.at("mix"), "periodic=0.1,gapped=0.2,textcopy=0.2") << stored.dump();
  EXPECT_EQ(stored.at("passkey_share"), 0.1) << stored.dump();
  fs::copy_file(whole / "step-00000002.safetensors", part / "step-00000002.safetensors");
  r = RunCli("train --out '" + part.string() + "' --resume --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<float> wa = Weights(whole / "step-00000004.safetensors");
  const std::vector<float> wb = Weights(part / "step-00000004.safetensors");
  ASSERT_FALSE(wa.empty());
  ASSERT_EQ(wa.size(), wb.size());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0)
      << "the resumed --mix run's weights differ from the uninterrupted run's";
  // Another mix with --resume is refused, not dropped; so is another passkey share given by it.
  r = RunCli("train --out '" + part.string() + "' --resume --steps 6 --mix gapped=0.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--mix gapped=0.5: the run in")) << r.out;
  EXPECT_TRUE(Has(r.out, "expected --mix periodic=0.1,gapped=0.2,textcopy=0.2 or no --mix"))
      << r.out;
  r = RunCli("train --out '" + part.string() +
             "' --resume --steps 6 --mix periodic=0.1,gapped=0.2,textcopy=0.2,passkey=0.2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "expected --passkey-share 0.1 or no --passkey-share")) << r.out;

  const fs::path out = TempDir("mix_bad");
  auto refused = [&](const std::string& extra, const std::string& expected) {
    const auto bad = RunCli("train --data '" + corpus.string() + "' --out '" + out.string() +
                            "' --steps 1 " + extra);
    EXPECT_NE(bad.exit_code, 0) << extra;
    EXPECT_TRUE(Has(bad.out, expected)) << bad.out;
  };
  refused("--mix gapped=2",
          "--mix gapped=2: entry \"gapped=2\": the share \"2\": expected a "
          "number in [0, 1]");
  refused("--mix gapped=0.7,textcopy=0.7", "the shares add up to 1.4, expected at most 1");
  refused("--mix passkey=0.2 --passkey-share 0.1",
          "--mix passkey=0.2: passkey=0.2 disagrees with --passkey-share 0.1");
  refused("--seq-len 32 --mix gapped=0.5 --copy-span-max 16",
          "--copy-span-max 16: string lengths 2..16 at sequence length 32");
}

}  // namespace
}  // namespace stretch
