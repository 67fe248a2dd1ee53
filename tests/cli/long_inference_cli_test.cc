// Long inference from the command line, as a user runs it on the tiny random model of
// tests/cli/tiny_files.h (L = 64): the streaming cache of `generate` / `score` (--stream-cache)
// and NBCE (`--method nbce`: `score --tail`, `generate --context`). The engine's exactness is
// tested against the double reference in tests/eval; here the flags, their errors and what the
// command reports.
#include <gtest/gtest.h>

#include <string>

#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"

namespace stretch {
namespace {

using testing::Files;
using testing::Has;
using testing::RunCli;
using testing::RunResult;

std::string ModelTok() {
  return "--model '" + Files().model + "' --tokenizer '" + Files().tok + "' ";
}
std::string Generate() { return "generate " + ModelTok() + "--temperature 0 --ignore-eos "; }
std::string Score() {
  return "score " + ModelTok() + "--data '" + Files().text + "' --no-progress --windows 2 ";
}

// The number after `key` in `text` (-1 when absent).
long long NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + key.size()));
}

TEST(LongInferenceCli, StreamCacheGeneratesPastTheTrainedLengthInABoundedCache) {
  const RunResult r = RunCli(Generate() + "-n 400 --stream-cache sinks=2,window=20");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "method: streaming:sinks=2,window=20")) << r.out;
  EXPECT_TRUE(Has(r.out, "decode: 400 tokens generated")) << r.out;
  // The context is every token read (BOS, the empty prompt, then 399 forward passes: the last
  // token printed needs none); the cache holds the sinks and two windows at most: 2 + 2 * 20 - 1
  // = 41 slots.
  EXPECT_EQ(NumberAfter(r.out, "context reached "), 400) << r.out;
  const long long held = NumberAfter(r.out, "the streaming cache holds ");
  EXPECT_GT(held, 0) << r.out;
  EXPECT_LE(held, 41) << r.out;
  EXPECT_TRUE(Has(r.out, " of them in its 41 slots")) << r.out;
  // The flag is the method `streaming`: the same greedy text.
  const RunResult same = RunCli(Generate() + "-n 400 --method streaming:sinks=2,window=20");
  ASSERT_EQ(same.exit_code, 0) << same.out;
  EXPECT_EQ(r.out.substr(0, r.out.find("prefill:")), same.out.substr(0, same.out.find("prefill:")));
}

TEST(LongInferenceCli, StreamCacheErrorsNameTheFlag) {
  // A text shorter than the cache never fills it: the default window (L - 4 = 60) and 10 tokens.
  const RunResult short_text = RunCli(Generate() + "-n 10 --stream-cache default");
  EXPECT_EQ(short_text.exit_code, 0) << short_text.out;
  EXPECT_TRUE(Has(short_text.out, "method: streaming:sinks=4,window=60")) << short_text.out;
  const RunResult both = RunCli(Generate() + "-n 5 --stream-cache sinks=2 --method yarn");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_TRUE(Has(both.out, "--method and --stream-cache both select the position method"))
      << both.out;
  const RunResult zero = RunCli(Generate() + "-n 5 --stream-cache sinks=0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_TRUE(Has(zero.out, "--stream-cache sinks=0")) << zero.out;
  EXPECT_TRUE(Has(zero.out, "not a positive integer")) << zero.out;
  const RunResult order = RunCli(Generate() + "-n 5 --stream-cache sinks=8,window=8");
  EXPECT_NE(order.exit_code, 0);
  EXPECT_TRUE(Has(order.out, "sinks=8 is not below window=8")) << order.out;
  const RunResult logn = RunCli(Generate() + "-n 5 --method streaming+logn");
  EXPECT_NE(logn.exit_code, 0);
  EXPECT_TRUE(Has(logn.out, "without frequency scaling or +logn")) << logn.out;
}

TEST(LongInferenceCli, ScoreTakesTheStreamCacheAndNbceOnTheFixedTail) {
  const RunResult r =
      RunCli(Score() + "--methods direct,nbce,nbce:pool=mean --ctx 64,128 --tail 16");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "\nnbce ")) << r.out;
  EXPECT_TRUE(Has(r.out, "\nnbce:pool=mean ")) << r.out;
  // The default chunk: L - 1 - tail = 64 - 1 - 16.
  EXPECT_TRUE(Has(r.out, "nbce (chunks of 47, rows direct")) << r.out;
  const RunResult stream = RunCli(Score() + "--stream-cache sinks=2,window=30 --ctx 128");
  ASSERT_EQ(stream.exit_code, 0) << stream.out;
  EXPECT_TRUE(Has(stream.out, "streaming:sinks=2,window=30")) << stream.out;

  const RunResult no_tail = RunCli(Score() + "--method nbce --ctx 128");
  EXPECT_NE(no_tail.exit_code, 0);
  EXPECT_TRUE(Has(no_tail.out, "NBCE scores the fixed tail of a text (expected --tail K"))
      << no_tail.out;
  const RunResult bad = RunCli(Score() + "--method nbce:pool=max --ctx 128 --tail 8");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(Has(bad.out, "pool=max")) << bad.out;
}

TEST(LongInferenceCli, NbceGeneratesFromAContextFile) {
  const RunResult r =
      RunCli(Generate() + "-n 20 --method nbce:beta=0.5 --context '" + Files().text + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "NBCE: ")) << r.out;
  EXPECT_TRUE(Has(r.out, "nbce:beta=0.5")) << r.out;
  EXPECT_GE(NumberAfter(r.out, "context tokens in "), 2) << r.out;  // several chunks

  const RunResult no_context = RunCli(Generate() + "-n 5 --method nbce");
  EXPECT_NE(no_context.exit_code, 0);
  EXPECT_TRUE(Has(no_context.out, "give it with --context FILE")) << no_context.out;
  const RunResult context_alone = RunCli(Generate() + "-n 5 --context '" + Files().text + "'");
  EXPECT_NE(context_alone.exit_code, 0);
  EXPECT_TRUE(Has(context_alone.out, "only NBCE reads a separate context")) << context_alone.out;
  const RunResult inspect = RunCli("inspect --model '" + Files().model + "' --method nbce");
  EXPECT_NE(inspect.exit_code, 0);
  EXPECT_TRUE(Has(inspect.out, "inspect has nothing to show")) << inspect.out;
}

}  // namespace
}  // namespace stretch
