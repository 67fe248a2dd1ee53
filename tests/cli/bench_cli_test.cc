// `stretch bench --profile`, run as a user runs it, on the tiny random model of tiny_files.h.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"

namespace stretch {
namespace {

using testing::Files;
using testing::Has;
using testing::RunCli;
using testing::RunResult;
using testing::RunShell;

TEST(BenchCli, ProfileTimesEveryOpOfPrefillAndDecodeAndTheirSharesAddUp) {
  const std::string json = Files().dir + "/profile.json";
  std::filesystem::remove(json);
  const RunResult r = RunCli("bench --profile --model '" + Files().model +
                             "' --length 48 --repeats 2 --json-out '" + json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* what :
       {"q/k/v projections", "attention kernel", "ffn gate/up", "ffn down", "classifier",
        "matrix products:", "of the FMA peak", "of the STREAM triad", "decode at depth 48"}) {
    EXPECT_TRUE(Has(r.out, what)) << what << "\n" << r.out;
  }
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  const ModelConfig c = ReadLlama2cHeader(Files().model).config;
  const int layers = c.n_layers;
  // The bytes each product reads in decode, in the type held (float32 here: 4 a weight), from
  // which the table's GB/s come.
  EXPECT_EQ(j["op_bytes"]["ffn down"].get<double>(), 4.0 * layers * c.dim * c.hidden_dim);
  EXPECT_EQ(j["op_bytes"]["q/k/v projections"].get<double>(),
            4.0 * layers * c.dim * (c.n_heads * c.head_dim() + 2.0 * c.kv_dim()));
  for (const char* part : {"prefill", "decode_0", "decode_L"}) {
    SCOPED_TRACE(part);
    const nlohmann::json& p = j[part];
    double sum = 0.0;
    for (const auto& [op, v] : p["ops"].items()) sum += v["seconds"].get<double>();
    // The ops are timed inside the forward: together they cannot exceed the forward's own time.
    EXPECT_LE(sum, p["seconds"].get<double>() * 1.0001);
    EXPECT_GT(sum, 0.0);
    // Every layer's projections and attention were seen, once per layer and token step.
    EXPECT_EQ(p["ops"]["q/k/v projections"]["calls"].get<double>(), layers);
    EXPECT_EQ(p["ops"]["attention kernel"]["calls"].get<double>(), layers);
  }
}

// Two threads held on one processor (taskset) measure the 1-thread FMA peak on "2 threads" (on
// this project's machines, two processors of two physical cores): the bench measures it again,
// then says the fractions of the peak read too high.
TEST(BenchCli, ProfileWarnsWhenTheThreadsCouldNotAllRunTheFmaLoop) {
#ifndef _OPENMP
  GTEST_SKIP() << "a build without OpenMP runs the FMA loop on one thread: nothing to check";
#endif
  if (RunShell("taskset -c 0 true").exit_code != 0) GTEST_SKIP() << "no taskset here";
  const RunResult cores = RunShell("lscpu -p=CORE,SOCKET | grep -v '^#' | sort -u | wc -l");
  if (cores.exit_code != 0 || std::stoi(cores.out) < 2) {
    GTEST_SKIP() << "fewer than two physical cores: nothing to take away";
  }
  const RunResult r = RunShell(std::string("taskset -c 0 '") + STRETCH_CLI_PATH +
                               "' bench --profile --threads 2 --length 16 --repeats 1 --model '" +
                               Files().model + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: the FMA peak on 2 threads")) << r.out;
  EXPECT_TRUE(Has(r.out, "read too high")) << r.out;
}

TEST(BenchCli, ProfileNeedsAModel) {
  const RunResult r = RunCli("bench --profile");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "--profile: needs --model")) << r.out;
}

// scripts/vs_llamacpp.sh times a decode from an empty context with `--case decode --length 0`;
// a prompt of 0 tokens is refused for the cases that time one.
TEST(BenchCli, DecodeStartsFromAnEmptyContextAndPromptCasesRefuseLengthZero) {
  const RunResult d =
      RunCli("bench --case decode --length 0 --repeats 1 --model '" + Files().model + "'");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_GT(nlohmann::json::parse(d.out)["tokens_per_s"].get<double>(), 0.0) << d.out;
  const RunResult p =
      RunCli("bench --case prefill --length 0 --repeats 1 --model '" + Files().model + "'");
  EXPECT_EQ(p.exit_code, 1) << p.out;
  EXPECT_TRUE(Has(p.out, "--length: found 0, expected a whole number in [1, ")) << p.out;
  const RunResult q = RunCli("bench --profile --length 0 --model '" + Files().model + "'");
  EXPECT_EQ(q.exit_code, 1) << q.out;
  EXPECT_TRUE(Has(q.out, "with --profile")) << q.out;
}

// The model cases read any model file, not only llama2.c checkpoints (a GGUF file failed with
// "n_heads=0 in the llama2.c legacy header").
TEST(BenchCli, ModelCasesReadAGgufFile) {
  const std::string gguf = Files().dir + "/bench.gguf";
  std::filesystem::remove(gguf);
  const RunResult c = RunCli("convert --model '" + Files().model + "' --tokenizer '" + Files().tok +
                             "' --to gguf --out '" + gguf + "'");
  ASSERT_EQ(c.exit_code, 0) << c.out;
  const RunResult d = RunCli("bench --case decode --length 8 --repeats 1 --model '" + gguf + "'");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_GT(nlohmann::json::parse(d.out)["tokens_per_s"].get<double>(), 0.0) << d.out;
  const RunResult p = RunCli("bench --profile --length 16 --repeats 1 --model '" + gguf + "'");
  ASSERT_EQ(p.exit_code, 0) << p.out;
  EXPECT_TRUE(Has(p.out, "attention kernel")) << p.out;
}

}  // namespace
}  // namespace stretch
