#include "src/eval/score.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "reference/llama.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/io/llama2c.h"
#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"
#include "tests/testing/random_model.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::RandomStream;

ScoreOptions Options(int64_t ctx, int64_t stride = 0) {
  ScoreOptions o;
  o.ctx = ctx;
  o.stride = stride;
  o.bucket = 8;
  o.progress = false;
  return o;
}

// Non-overlapping windows: every stream token of the whole windows is a target exactly once, at
// position p of window w it is stream[w*N + p], and its loss is the reference model's
// -log softmax for the input BOS, stream[w*N], ..., stream[w*N + p - 1].
TEST(ScoreStream, WindowsFeedBosThenStreamAndScoreEveryTokenOnce) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 5);
  Transformer model(m);
  const int N = 20;
  const std::vector<int> stream = RandomStream(67, c.vocab_size, 6);  // 3 windows + 7 left over
  std::vector<TokenRecord> records;
  const ScoreSummary s =
      ScoreStream(model, stream, Options(N), [&](const TokenRecord& r) { records.push_back(r); });
  EXPECT_EQ(s.windows, 3);
  EXPECT_EQ(s.scored, 60);
  EXPECT_EQ(s.unscored_tail, 7);
  ASSERT_EQ(records.size(), 60u);
  double sum = 0;
  for (int w = 0; w < 3; ++w) {
    std::vector<int> inputs = {1};
    inputs.insert(inputs.end(), stream.begin() + w * N, stream.begin() + w * N + N - 1);
    const std::vector<double> logits = ref::LlamaForwardRef<double>(m, inputs);
    for (int p = 0; p < N; ++p) {
      const TokenRecord& r = records[static_cast<size_t>(w * N + p)];
      ASSERT_EQ(r.window, w);
      ASSERT_EQ(r.position, p);
      ASSERT_EQ(r.target, stream[static_cast<size_t>(w * N + p)]);
      const double* row = logits.data() + static_cast<size_t>(p) * c.vocab_size;
      double max = row[0];
      int argmax = 0;
      for (int v = 1; v < c.vocab_size; ++v)
        if (row[v] > max) {
          max = row[v];
          argmax = v;
        }
      double z = 0;
      for (int v = 0; v < c.vocab_size; ++v) z += std::exp(row[v] - max);
      const double ref_loss = std::log(z) + max - row[r.target];
      // -log softmax moves by at most 2 max|logit error|; the float32 logits err by ~1e-5 here
      // (transformer_test bounds them by 8x plain float32), so 1e-3 is 50x that bound; a
      // protocol error (wrong window, wrong target, off-by-one position) moves losses by O(1).
      EXPECT_NEAR(r.loss, ref_loss, 1e-3) << "w=" << w << " p=" << p;
      double second = -1e300;  // the runner-up logit: "correct" is only well defined when the
      for (int v = 0; v < c.vocab_size; ++v) {  // float32 argmax cannot flip (gap > 1e-3)
        if (v != argmax) second = std::max(second, row[v]);
      }
      if (row[argmax] - second > 1e-3) {
        EXPECT_EQ(r.correct, argmax == r.target);
      }
      sum += r.loss;
    }
  }
  EXPECT_NEAR(s.MeanLoss(), sum / 60, 1e-9);
  // Buckets of width 8 over positions 0..19: 8, 8, 4 positions per window.
  ASSERT_EQ(s.buckets.size(), 3u);
  EXPECT_EQ(s.buckets[0].count, 24);
  EXPECT_EQ(s.buckets[2].count, 12);
  EXPECT_EQ(s.buckets[2].begin, 16);
}

// Sliding windows: window 0 scores all N positions, each later one its last S positions, so
// the targets are stream[0 .. (W-1) S + N - 1], each exactly once.
TEST(ScoreStream, SlidingWindowsScoreEachTargetOnceWithContext) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 7);
  Transformer model(m);
  const int N = 16, S = 5;
  const std::vector<int> stream = RandomStream(50, c.vocab_size, 8);
  std::map<int64_t, int> seen;  // stream index -> times scored
  int64_t min_context = 1 << 30;
  const ScoreSummary s = ScoreStream(model, stream, Options(N, S), [&](const TokenRecord& r) {
    seen[r.window * S + r.position]++;
    if (r.window > 0) min_context = std::min(min_context, r.position);
  });
  EXPECT_EQ(s.windows, (50 - N) / S + 1);  // 7
  EXPECT_EQ(s.scored, N + (s.windows - 1) * S);
  for (int64_t i = 0; i < s.scored; ++i) EXPECT_EQ(seen[i], 1) << "stream index " << i;
  EXPECT_EQ(min_context, N - S);
  EXPECT_EQ(s.unscored_tail, 50 - ((s.windows - 1) * S + N));
}

// Scoring runs a window per thread when there are at least as many windows as threads: every
// protocol then gives the same records, in the same order, and the same summary, bit for bit, as
// one thread running the windows in turn.
TEST(ScoreStream, EveryThreadCountGivesTheSameRecordsInTheSameOrder) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 13);
  const std::vector<int> stream = RandomStream(400, c.vocab_size, 14);
  const std::vector<std::vector<int>> seqs = {{5, 6, 7, 8, 9}, {3},    {10, 11, 12},
                                              {4, 4, 4, 4},    {1, 2}, {9, 8, 7, 6, 5, 4}};
  struct Run {
    std::vector<TokenRecord> records;
    ScoreSummary summary;
  };
  auto run = [&](int threads, int protocol) {
    SetNumThreads(threads);
    Transformer model(m);
    Run r;
    auto sink = [&r](const TokenRecord& t) { r.records.push_back(t); };
    if (protocol == 0) r.summary = ScoreStream(model, stream, Options(16, 5), sink);  // 77 windows
    if (protocol == 1) r.summary = ScoreSequences(model, seqs, Options(8), sink);
    if (protocol == 2) {
      ScoreOptions o = Options(12);
      o.tail = 4;
      o.sample_len = 20;
      r.summary = ScoreFixedTail(model, stream, o, sink);  // 20 samples
    }
    return r;
  };
  const int saved = NumThreads();
  for (int protocol = 0; protocol < 3; ++protocol) {
    const Run one = run(1, protocol);
    ASSERT_FALSE(one.records.empty()) << protocol;
    for (const int threads : {2, 3}) {
      const Run many = run(threads, protocol);
      ASSERT_EQ(many.records.size(), one.records.size()) << protocol << " " << threads;
      for (size_t i = 0; i < one.records.size(); ++i) {
        const TokenRecord &a = one.records[i], &b = many.records[i];
        ASSERT_EQ(a.window, b.window) << protocol << " " << threads << " record " << i;
        ASSERT_EQ(a.position, b.position) << protocol << " " << threads << " record " << i;
        ASSERT_EQ(a.target, b.target);
        ASSERT_EQ(a.loss, b.loss) << protocol << " " << threads << " record " << i;
        ASSERT_EQ(a.correct, b.correct);
      }
      EXPECT_EQ(many.summary.windows, one.summary.windows);
      EXPECT_EQ(many.summary.scored, one.summary.scored);
      EXPECT_EQ(many.summary.correct, one.summary.correct);
      EXPECT_EQ(many.summary.loss_sum, one.summary.loss_sum);
      ASSERT_EQ(many.summary.buckets.size(), one.summary.buckets.size());
      for (size_t b = 0; b < one.summary.buckets.size(); ++b) {
        EXPECT_EQ(many.summary.buckets[b].loss_sum, one.summary.buckets[b].loss_sum) << b;
        EXPECT_EQ(many.summary.buckets[b].count, one.summary.buckets[b].count) << b;
      }
    }
  }
  SetNumThreads(saved);
}

TEST(ScoreStream, BadOptionsAreErrors) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 9);
  Transformer model(m);
  const std::vector<int> stream = RandomStream(30, c.vocab_size, 10);
  EXPECT_THROW(ScoreStream(model, stream, Options(1)), Error);
  EXPECT_THROW(ScoreStream(model, stream, Options(10, 11)), Error);
  try {
    ScoreStream(model, stream, Options(31));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("30 tokens"), std::string::npos) << e.what();
  }
}

TEST(ScoreSequences, FeedsTokensExactlyAsGiven) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 11);
  Transformer model(m);
  const std::vector<std::vector<int>> seqs = {{5, 6, 7, 8, 9}, {10, 11}};
  std::vector<TokenRecord> records;
  const ScoreSummary s =
      ScoreSequences(model, seqs, Options(8), [&](const TokenRecord& r) { records.push_back(r); });
  EXPECT_EQ(s.scored, 5);
  const std::vector<double> logits = ref::LlamaForwardRef<double>(m, {5, 6, 7, 8});
  for (int p = 0; p < 4; ++p) {
    const double* row = logits.data() + static_cast<size_t>(p) * c.vocab_size;
    double max = row[0];
    for (int v = 1; v < c.vocab_size; ++v) max = std::max(max, row[v]);
    double z = 0;
    for (int v = 0; v < c.vocab_size; ++v) z += std::exp(row[v] - max);
    EXPECT_NEAR(records[static_cast<size_t>(p)].loss, std::log(z) + max - row[seqs[0][p + 1]],
                1e-3);
  }
  EXPECT_THROW(ScoreSequences(model, seqs, Options(4)), Error);  // a sequence longer than ctx
}

// From a first position on (a far-copy or passkey probe's end): only those targets are reported,
// with the losses and guesses of a whole run (the last layer runs them as a chunk of their own:
// equal within float rounding); a sequence that ends before it reports nothing.
TEST(ScoreSequences, FromAFirstPositionScoresTheSameTargets) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 12);
  Transformer model(m);
  const std::vector<std::vector<int>> seqs = {
      RandomStream(90, c.vocab_size, 13), RandomStream(70, c.vocab_size, 14), {3, 4, 5}};
  std::vector<TokenRecord> all, end;
  ScoreSequences(model, seqs, Options(90), [&](const TokenRecord& r) { all.push_back(r); });
  const ScoreSummary s = ScoreSequences(
      model, seqs, Options(90), [&](const TokenRecord& r) { end.push_back(r); }, 60);
  EXPECT_EQ(s.scored, (89 - 60) + (69 - 60));
  ASSERT_EQ(end.size(), static_cast<size_t>(s.scored));
  size_t k = 0;
  for (const TokenRecord& r : all) {
    if (r.position < 60) continue;
    ASSERT_LT(k, end.size());
    EXPECT_EQ(end[k].window, r.window);
    EXPECT_EQ(end[k].position, r.position);
    EXPECT_EQ(end[k].correct, r.correct) << r.window << " " << r.position;
    EXPECT_NEAR(end[k].loss, r.loss, 1e-5);
    ++k;
  }
  EXPECT_EQ(k, end.size());
  EXPECT_THROW(ScoreSequences(model, seqs, Options(90), {}, -1), Error);
}

TEST(ReadTokenFile, ParsesLinesAndNamesBadTokens) {
  const std::string path = ::testing::TempDir() + "/tokens.txt";
  { std::ofstream(path) << "1 5 6\n\n  7\t8 \n"; }
  const auto seqs = ReadTokenFile(path, 10);
  ASSERT_EQ(seqs.size(), 2u);
  EXPECT_EQ(seqs[0], (std::vector<int>{1, 5, 6}));
  EXPECT_EQ(seqs[1], (std::vector<int>{7, 8}));
  { std::ofstream(path) << "1 2\n3 x4\n"; }
  try {
    ReadTokenFile(path, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":2:3: found 'x4'"), std::string::npos) << e.what();
  }
  { std::ofstream(path) << "1 10\n"; }
  try {
    ReadTokenFile(path, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 10 is outside the vocabulary, expected 0..9"),
              std::string::npos)
        << e.what();
  }
}

// ---- the real model on real text (../shared) -------------------------------------------------

constexpr const char* kModel = "models/stories260K/stories260K.bin";
constexpr const char* kTok = "models/stories260K/tok512.bin";
constexpr const char* kStories = "data/tinystories";

ScoreSummary ScoreStories(int64_t ctx, int64_t max_windows, const TokenSink& sink = {}) {
  const Model m = LoadLlama2c(testing::SharedPath(kModel));
  const Tokenizer tok = Tokenizer::LoadLlama2c(testing::SharedPath(kTok));
  const TextStream text = EncodeTextPath(testing::SharedPath(kStories), tok);
  Transformer model(m);
  ScoreOptions o;
  o.ctx = ctx;
  o.bucket = 512;
  o.max_windows = max_windows;
  o.progress = false;
  return ScoreStream(model, text.tokens, o, sink);
}

// ../shared/README.md: "Mean next-token loss on data/tinystories/ in windows of 512 is about
// 1.35 nats". That holds for the start of the file: the first 8 windows give 1.3715 (the running
// mean after 1, 2, 4, 8, 16, 64, 256 windows: 1.309, 1.408, 1.386, 1.372, 1.419, 1.442, 1.499).
// Later stories are harder for this model, and the whole file (767 windows) gives 1.6715; no
// other text protocol we tried brings the whole file near 1.35 (story-wise BOS with single
// newlines: 1.569). The forward itself is checked independently (the exact greedy story of
// ../shared/README.md, agreement with the double-precision reference), so the whole-file value is
// pinned as a regression check: +-0.01 nats is far above the change that summation order can
// make (float32 logits, ~4e5 terms averaged in double).
TEST(StoriesReal, LossAtTrainedLength) {
  STRETCH_REQUIRE_SHARED(kModel);
  STRETCH_REQUIRE_SHARED(kStories);
  double first_sum = 0;
  int64_t first_count = 0;
  auto first_windows = [&](const TokenRecord& r) {
    if (r.window < 8) {
      first_sum += r.loss;
      ++first_count;
    }
  };
#if STRETCH_ASAN
  // The sanitizer build scores the first 64 windows (the same code paths; the whole file takes
  // ~90 s there): their mean is 1.4417 in the optimized build.
  const ScoreSummary s = ScoreStories(512, 64, first_windows);
  EXPECT_NEAR(s.MeanLoss(), 1.4417, 0.01);
  EXPECT_EQ(s.scored, 64 * 512);
#else
  const ScoreSummary s = ScoreStories(512, 0, first_windows);
  EXPECT_NEAR(s.MeanLoss(), 1.6715, 0.01);
  EXPECT_EQ(s.scored, 392704);
#endif
  ASSERT_EQ(first_count, 8 * 512);
  EXPECT_NEAR(first_sum / first_count, 1.35, 0.05);
}

// With plain RoPE at 4096 (8x the trained length) the model does not extrapolate: README: "the
// loss by position rises from about 1.4 (0-512) to about 7 (3584-4096)". Measured: 1.69 -> 7.03
// over the whole file. Scoring at 4096 under the sanitizers is covered by the smaller exactness
// tests; the whole file there takes minutes.
TEST(StoriesReal, LossExplodesBeyondTrainedLength) {
  STRETCH_REQUIRE_SHARED(kModel);
  STRETCH_REQUIRE_SHARED(kStories);
  STRETCH_SKIP_UNDER_SANITIZER("95 windows of 4,096 tokens");
  const ScoreSummary s = ScoreStories(4096, 0);
  EXPECT_EQ(s.windows, 95);
  ASSERT_EQ(s.buckets.size(), 8u);
  EXPECT_LT(s.buckets[0].MeanLoss(), 1.8);
  EXPECT_GT(s.buckets[5].MeanLoss(), 5.0);
  EXPECT_GT(s.buckets[6].MeanLoss(), 5.0);
  EXPECT_GT(s.buckets[7].MeanLoss(), 5.0);
  EXPECT_NEAR(s.buckets[7].MeanLoss(), 7.0, 0.5);
}

// The intervals of a scoring over windows: the windows are the samples. Three windows of 4
// tokens, one bucket of 2 positions each half: losses summed per window 4, 8, 12 (means 1, 2, 3):
// the t-interval of mean 2 with standard error 1/sqrt(3), t(2) = 4.303. No token right anywhere:
// the windows' accuracies have no spread, and the interval is Wilson's over the 12 tokens, not
// [0, 0].
TEST(WindowTallyTest, IntervalsOverWindowsAndNeverNarrowerThanWilsonForAccuracy) {
  WindowTally tally(2);
  ScoreSummary s;
  s.windows = 3;
  for (int64_t w = 0; w < 3; ++w) {
    for (int64_t p = 0; p < 4; ++p) {
      const double loss = static_cast<double>(w + 1);
      tally.Add({w, p, 0, loss, false});
      AddToSummary(s, 2, p, loss, false);
    }
  }
  tally.CoverWindows(3);
  FillIntervals(s, tally);
  ASSERT_TRUE(s.ci.known);
  const double half = 4.303 / std::sqrt(3.0);
  EXPECT_NEAR(s.ci.loss_lo, 2.0 - half, 1e-12);
  EXPECT_NEAR(s.ci.loss_hi, 2.0 + half, 1e-12);
  EXPECT_EQ(s.ci.accuracy_lo, 0.0);
  EXPECT_NEAR(s.ci.accuracy_hi, 0.2425, 1e-3);  // Wilson's upper bound for 0 of 12
  ASSERT_EQ(s.buckets.size(), 2u);
  for (const PositionBucket& b : s.buckets) {  // the same windows' means in each half
    ASSERT_TRUE(b.ci.known) << b.begin;
    EXPECT_NEAR(b.ci.loss_lo, 2.0 - half, 1e-12) << b.begin;
    EXPECT_NEAR(b.ci.accuracy_hi, 0.3903, 1e-3) << b.begin;  // Wilson, 0 of 6
  }
  // One window: no interval.
  WindowTally one(2);
  ScoreSummary single;
  single.windows = 1;
  one.Add({0, 0, 0, 1.0, true});
  AddToSummary(single, 2, 0, 1.0, true);
  one.CoverWindows(1);
  FillIntervals(single, one);
  EXPECT_FALSE(single.ci.known);
}

}  // namespace
}  // namespace stretch
