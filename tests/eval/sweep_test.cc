// The fixed-tail protocol, method x length sweeps and the rotation view, on the tiny random model
// (L = 64, 4 frequency pairs): no files needed.
#include "src/eval/sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <tuple>

#include "reference/llama.h"
#include "reference/position.h"
#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/eval/rotation.h"
#include "src/eval/score.h"
#include "src/position/plan.h"
#include "src/position/rope.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

using testing::RandomStream;

ScoreOptions Quiet() {
  ScoreOptions o;
  o.bucket = 8;
  o.progress = false;
  return o;
}

double RefLoss(const std::vector<double>& logits, int V, int64_t p, int target) {
  const double* row = logits.data() + static_cast<size_t>(p) * V;
  double max = row[0];
  for (int v = 1; v < V; ++v) max = std::max(max, row[v]);
  double z = 0;
  for (int v = 0; v < V; ++v) z += std::exp(row[v] - max);
  return std::log(z) + max - row[target];
}

// ---- fixed tail --------------------------------------------------------------------------------

// At C = M the fixed tail is ScoreStream's window w (stride M) restricted to its last `tail`
// positions: the same inputs and the same hidden states. Only the classifier's matrix product
// runs on a different block of rows (the tail's rows instead of the whole window's), which BLAS
// may sum in another order: each logit is a dot product of C = 32 float32 terms, so it can move
// by ~C eps |h| |w| ~ 1e-6 here (measured: 3e-7), and -log softmax by at most twice the largest
// logit change. 1e-5 bounds that; a wrong window, position or target moves the loss by O(1).
TEST(FixedTail, AtTheLongestContextItIsTheStreamWindowsTail) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 21);
  Transformer model(m);
  const int64_t M = 24, tail = 7;
  const std::vector<int> stream = RandomStream(80, c.vocab_size, 22);  // 3 samples + 8 left
  std::vector<TokenRecord> windows, fixed;
  ScoreOptions o = Quiet();
  o.ctx = M;
  ScoreStream(model, stream, o, [&](const TokenRecord& r) {
    if (r.position >= M - tail) windows.push_back(r);
  });
  o.sample_len = M;
  o.tail = tail;
  const ScoreSummary s =
      ScoreFixedTail(model, stream, o, [&](const TokenRecord& r) { fixed.push_back(r); });
  EXPECT_EQ(s.windows, 3);
  EXPECT_EQ(s.scored, 3 * tail);
  EXPECT_EQ(s.unscored_tail, 8);
  ASSERT_EQ(fixed.size(), windows.size());
  for (size_t k = 0; k < fixed.size(); ++k) {
    EXPECT_EQ(fixed[k].window, windows[k].window);
    EXPECT_EQ(fixed[k].position, windows[k].position);
    EXPECT_EQ(fixed[k].target, windows[k].target);
    EXPECT_NEAR(fixed[k].loss, windows[k].loss, 1e-5) << k;
  }
}

// Every context scores the same targets, the last `tail` tokens of each sample, and the window
// at C feeds BOS + the C-1 tokens before the sample's last one: each loss is the double
// reference's for exactly that input.
TEST(FixedTail, EveryContextScoresTheSameTargetsWithItsOwnContext) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 23);
  Transformer model(m);
  const std::vector<int64_t> contexts = {9, 16, 30};
  const int64_t M = 30, tail = 6;
  const std::vector<int> stream = RandomStream(95, c.vocab_size, 24);  // 3 samples
  std::map<int64_t, std::vector<TokenRecord>> by_ctx;
  ScoreOptions o = Quiet();
  o.tail = tail;
  const std::vector<FixedTailResult> results =
      ScoreFixedTailContexts(model, Method{}, stream, contexts, o,
                             [&](int64_t ctx, const TokenRecord& r) { by_ctx[ctx].push_back(r); });
  ASSERT_EQ(results.size(), 3u);
  for (const FixedTailResult& r : results) {
    EXPECT_EQ(r.summary.windows, 3) << r.ctx;
    EXPECT_EQ(r.summary.scored, 3 * tail) << r.ctx;
    EXPECT_EQ(r.resolved_method,
              CanonicalSpec(MakeAttentionPlan(Method{}, model.Geometry(), r.ctx).method));
  }
  for (const int64_t C : contexts) {
    const std::vector<TokenRecord>& recs = by_ctx[C];
    ASSERT_EQ(recs.size(), static_cast<size_t>(3 * tail)) << C;
    for (int64_t w = 0; w < 3; ++w) {
      const int64_t b = w * M + M - C;  // the window's first fed stream token
      std::vector<int> inputs = {kScoreBos};
      inputs.insert(inputs.end(), stream.begin() + b, stream.begin() + b + C - 1);
      const std::vector<double> logits = ref::LlamaForwardRef<double>(m, inputs);
      for (int64_t k = 0; k < tail; ++k) {
        const TokenRecord& r = recs[static_cast<size_t>(w * tail + k)];
        EXPECT_EQ(r.window, w);
        EXPECT_EQ(r.position, C - tail + k);
        // The same target at every context: stream[a + M - tail + k].
        ASSERT_EQ(r.target, stream[static_cast<size_t>(w * M + M - tail + k)]) << C;
        // Float32 logits err by ~1e-5 against the double reference (score_test's bound): 1e-3
        // is 50x that, while scoring the wrong window or target moves the loss by O(1).
        EXPECT_NEAR(r.loss, RefLoss(logits, c.vocab_size, r.position, r.target), 1e-3)
            << "C=" << C << " w=" << w << " k=" << k;
      }
    }
  }
  // More context changes the losses of the same targets (the model is not position-blind).
  EXPECT_NE(results[0].summary.MeanLoss(), results[2].summary.MeanLoss());
}

TEST(FixedTail, BadOptionsAreErrorsNamingTheField) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 25);
  Transformer model(m);
  const std::vector<int> stream = RandomStream(40, c.vocab_size, 26);
  auto message = [&](ScoreOptions o) -> std::string {
    try {
      ScoreFixedTail(model, stream, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  ScoreOptions o = Quiet();
  o.ctx = 16;
  o.tail = 17;
  EXPECT_NE(message(o).find("ScoreOptions::tail: found 17, expected 1..16"), std::string::npos)
      << message(o);
  o.tail = 4;
  o.stride = 8;
  EXPECT_NE(message(o).find("ScoreOptions::stride 8 and ScoreOptions::tail 4"), std::string::npos)
      << message(o);
  o.stride = 0;
  o.sample_len = 41;
  EXPECT_NE(message(o).find("40 tokens, fewer than one sample of 41"), std::string::npos)
      << message(o);
  o.sample_len = 8;
  EXPECT_NE(message(o).find("shorter than ScoreOptions::ctx 16"), std::string::npos) << message(o);
}

// ---- sweeps ------------------------------------------------------------------------------------

std::vector<SweepMethod> Methods(std::initializer_list<const char*> specs) {
  std::vector<SweepMethod> out;
  for (const char* s : specs) out.push_back({s, ParseMethod(s)});
  return out;
}

TEST(Sweep, ScoresTheProductMethodMajorWithSpecsResolvedPerLength) {
  const ModelConfig c = testing::TinyConfig();  // L = 64
  const Model m = testing::RandomModel(c, 27);
  Transformer model(m);
  const std::vector<int> stream = RandomStream(300, c.vocab_size, 28);
  const std::vector<SweepMethod> methods = Methods({"direct", "pi", "yarn:factor=4,beta_fast=16"});
  const std::vector<int64_t> contexts = {64, 128};
  ScoreOptions o = Quiet();
  o.max_windows = 2;
  std::map<std::pair<size_t, int64_t>, int64_t> tokens;
  const std::vector<SweepCell> cells =
      ScoreSweep(model, methods, contexts, SweepInput{stream, nullptr}, o,
                 [&](const SweepCell& cell, const TokenRecord&) {
                   tokens[{cell.method, cell.ctx}]++;
                 });
  ASSERT_EQ(cells.size(), 6u);
  for (size_t k = 0; k < cells.size(); ++k) {
    EXPECT_EQ(cells[k].method, k / 2);
    EXPECT_EQ(cells[k].ctx, contexts[k % 2]);
    EXPECT_EQ(cells[k].summary.windows, 2);
    EXPECT_EQ(cells[k].summary.scored, 2 * cells[k].ctx);
    EXPECT_EQ(tokens[std::make_pair(cells[k].method, cells[k].ctx)], cells[k].summary.scored);
  }
  // pi without a factor takes s = ctx / L at each length; a given factor stays.
  EXPECT_NE(cells[2].resolved.find("pi:factor=1"), std::string::npos) << cells[2].resolved;
  EXPECT_NE(cells[3].resolved.find("pi:factor=2"), std::string::npos) << cells[3].resolved;
  EXPECT_NE(cells[5].resolved.find("factor=4"), std::string::npos) << cells[5].resolved;
  EXPECT_NE(cells[5].resolved.find("beta_fast=16"), std::string::npos) << cells[5].resolved;
  // At L' = L, pi is plain RoPE: the same numbers as direct.
  EXPECT_DOUBLE_EQ(cells[2].summary.MeanLoss(), cells[0].summary.MeanLoss());
  EXPECT_NE(cells[3].summary.MeanLoss(), cells[1].summary.MeanLoss());

  const std::string table = SweepTableText(methods, contexts, cells);
  EXPECT_NE(table.find("ctx 64"), std::string::npos) << table;
  EXPECT_NE(table.find("ctx 128"), std::string::npos) << table;
  // Each cell with the half widths of its 95% intervals over the windows.
  const ScoreSummary& s3 = cells[3].summary;
  ASSERT_TRUE(s3.ci.known);
  EXPECT_NE(
      table.find(fmt::format("{:.4f}+-{:.4f} / {:.4f}+-", s3.MeanLoss(),
                             std::max(s3.MeanLoss() - s3.ci.loss_lo, s3.ci.loss_hi - s3.MeanLoss()),
                             s3.Accuracy())),
      std::string::npos)
      << table;
  EXPECT_NE(table.find("64: pi:factor=1"), std::string::npos) << table;

  const nlohmann::json j = SweepCellsJson(methods, cells);
  ASSERT_EQ(j.size(), 6u);
  for (const char* field :
       {"method", "method_index", "ctx", "resolved_method", "windows", "tokens_scored", "loss",
        "perplexity", "accuracy", "seconds", "by_position"}) {
    EXPECT_TRUE(j[3].contains(field)) << field;
  }
  EXPECT_EQ(j[3]["method"], "pi");
  EXPECT_EQ(j[3]["ctx"], 128);
  EXPECT_EQ(j[3]["resolved_method"], cells[3].resolved);
  EXPECT_DOUBLE_EQ(j[3]["loss"].get<double>(), cells[3].summary.MeanLoss());
}

TEST(Sweep, FixedTailCellsAllScoreTheSameTargets) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 29);
  Transformer model(m);
  const std::vector<int> stream = RandomStream(400, c.vocab_size, 30);
  const std::vector<SweepMethod> methods = Methods({"direct", "ntk"});
  const std::vector<int64_t> contexts = {32, 64, 128};
  ScoreOptions o = Quiet();
  o.tail = 16;
  std::map<std::pair<size_t, int64_t>, std::vector<int>> targets;
  const std::vector<SweepCell> cells =
      ScoreSweep(model, methods, contexts, SweepInput{stream, nullptr}, o,
                 [&](const SweepCell& cell, const TokenRecord& r) {
                   targets[{cell.method, cell.ctx}].push_back(r.target);
                 });
  ASSERT_EQ(cells.size(), 6u);
  for (const SweepCell& cell : cells) {
    EXPECT_EQ(cell.summary.windows, 400 / 128);
    EXPECT_EQ(cell.summary.scored, (400 / 128) * 16);
    EXPECT_EQ(targets[std::make_pair(cell.method, cell.ctx)], (targets[{size_t{0}, int64_t{128}}]));
  }
}

// A pair that does not fit is found before anything is scored, whatever its place in the order.
TEST(Sweep, EveryPairIsCheckedBeforeTheFirstCellRuns) {
  const ModelConfig c = testing::TinyConfig();
  const Model m = testing::RandomModel(c, 31);
  Transformer model(m);
  const std::vector<int> stream = RandomStream(300, c.vocab_size, 32);
  int64_t scored = 0;
  auto run = [&](const std::vector<SweepMethod>& methods, const std::vector<int64_t>& contexts,
                 ScoreOptions o) -> std::string {
    try {
      ScoreSweep(model, methods, contexts, SweepInput{stream, nullptr}, o,
                 [&](const SweepCell&, const TokenRecord&) { ++scored; });
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // rerope's window must be smaller than the context: fine at 128, not at 32 (the last cell).
  std::string e = run(Methods({"direct", "rerope:window=40"}), {128, 32}, Quiet());
  EXPECT_NE(e.find("method \"rerope:window=40\" at ScoreOptions::ctx 32"), std::string::npos) << e;
  EXPECT_NE(e.find("window=40"), std::string::npos) << e;
  ScoreOptions o = Quiet();
  o.tail = 40;
  e = run(Methods({"direct"}), {128, 32}, o);
  EXPECT_NE(e.find("ScoreOptions::tail: found 40, expected 1..32"), std::string::npos) << e;
  e = run(Methods({"direct"}), {128, 301}, Quiet());
  EXPECT_NE(e.find("300 tokens, fewer than one window of ScoreOptions::ctx 301"), std::string::npos)
      << e;
  e = run(Methods({"direct"}), {128, 1}, Quiet());
  EXPECT_NE(e.find("PlanSweep contexts: found 1"), std::string::npos) << e;
  e = run(Methods({"direct"}), {128, 64, 128}, Quiet());
  EXPECT_NE(e.find("PlanSweep contexts: 128 given twice"), std::string::npos) << e;
  e = run(Methods({"pi", "direct", "pi"}), {128}, Quiet());
  EXPECT_NE(e.find("PlanSweep methods: \"pi\" given twice"), std::string::npos) << e;
  EXPECT_EQ(scored, 0);
}

// ---- rotation view -----------------------------------------------------------------------------

RopeGeometry TinyGeometry() {
  const ModelConfig c = testing::TinyConfig();
  return RopeGeometry{c.seq_len, c.head_dim(), c.rope_base};
}

// The largest relative position over every visible (i, j) with i < N, by brute force with the
// reference's pair-by-pair definition of each method.
double BruteMaxRel(const AttentionPlan& plan, int64_t N) {
  double best = 0;
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      if (ref::MethodVisible(plan.method, i, j)) {
        best = std::max(best, ref::MethodRelPos(plan.method, i, j));
      }
    }
  }
  return best;
}

TEST(Rotation, LargestRelativePositionMatchesBruteForceForEveryMap) {
  const RopeGeometry geo = TinyGeometry();
  for (const char* spec :
       {"direct", "rerope:window=20", "leaky-rerope:window=20,k=4", "self-extend:group=4,window=16",
        "string", "dca", "dca:chunk=40,window=8", "window:window=30", "lambda:sinks=4,window=30"}) {
    for (const int64_t N : {40, 97, 200}) {
      const AttentionPlan plan = MakeAttentionPlan(ParseMethod(spec), geo, N);
      EXPECT_DOUBLE_EQ(MaxRelativePosition(plan, N), BruteMaxRel(plan, N)) << spec << " N=" << N;
    }
  }
}

// L = 64, theta_t = 10000^(-t/4): L theta = 64, 6.4, 0.64, 0.064 rad, so pairs 2 and 3 never
// completed a turn in training.
TEST(Rotation, PlainRopePastTheTrainedLengthLeavesTheArcInterpolationDoesNot) {
  const RopeGeometry geo = TinyGeometry();
  const double two_pi = 2 * std::numbers::pi;
  {
    const RotationView v = MakeRotationView(geo, MakeAttentionPlan(Method{}, geo, 256));
    ASSERT_EQ(v.pairs.size(), 4u);
    EXPECT_EQ(v.max_rel_method, 255);
    const std::vector<double> thetas = RopeThetas(geo.base, geo.rotary_dim);
    for (int t = 0; t < 4; ++t) {
      const RotationPair& p = v.pairs[static_cast<size_t>(t)];
      EXPECT_DOUBLE_EQ(p.theta, thetas[static_cast<size_t>(t)]);
      EXPECT_DOUBLE_EQ(p.theta_method, p.theta);
      EXPECT_DOUBLE_EQ(p.ratio, 1.0);
      EXPECT_DOUBLE_EQ(p.period, two_pi / p.theta);
      EXPECT_DOUBLE_EQ(p.turns_trained, 64 * p.theta / two_pi);
      EXPECT_DOUBLE_EQ(p.turns_method, 255 * p.theta / two_pi);
      EXPECT_EQ(p.beyond_trained, t >= 2) << t;
    }
    EXPECT_EQ(v.BeyondCount(), 2);
    const std::string text = RotationViewText(v);
    EXPECT_NE(text.find("2 of 4 pairs go beyond"), std::string::npos) << text;
    EXPECT_NE(text.find("beyond    yes when"), std::string::npos) << text;
  }
  // Plain RoPE within the trained length, and one position past it.
  EXPECT_EQ(MakeRotationView(geo, MakeAttentionPlan(Method{}, geo, 64)).BeyondCount(), 0);
  EXPECT_EQ(MakeRotationView(geo, MakeAttentionPlan(Method{}, geo, 65)).BeyondCount(), 2);
  // PI at s = N/L: (N-1)/s < L, within one step of the trained angles: never beyond.
  {
    const RotationView v = MakeRotationView(geo, MakeAttentionPlan(ParseMethod("pi"), geo, 256));
    EXPECT_EQ(v.BeyondCount(), 0);
    for (const RotationPair& p : v.pairs) EXPECT_DOUBLE_EQ(p.ratio, 0.25);
  }
  // ReRoPE caps relative positions at the window: R = w.
  {
    const RotationView v =
        MakeRotationView(geo, MakeAttentionPlan(ParseMethod("rerope:window=32"), geo, 256));
    EXPECT_EQ(v.max_rel_method, 32);
    EXPECT_EQ(v.BeyondCount(), 0);
  }
  // Dynamic methods are shown at the last query, s = N/L.
  {
    const AttentionPlan plan = MakeAttentionPlan(ParseMethod("dynamic-ntk"), geo, 256);
    const RotationView v = MakeRotationView(geo, plan);
    const RopeFrequencies last = ComputeFrequencies(plan.method.rope, plan.geo, 4.0);
    for (size_t t = 0; t < 4; ++t) EXPECT_DOUBLE_EQ(v.pairs[t].theta_method, last.thetas[t]);
  }
}

TEST(Rotation, MapAndMaskSummariesNameTheirParameters) {
  const RopeGeometry geo = TinyGeometry();
  EXPECT_NE(RelMapText(MakeAttentionPlan(ParseMethod("self-extend:group=4,window=16"), geo, 128))
                .find("group G = 4, neighbour window W = 16"),
            std::string::npos);
  EXPECT_NE(MaskText(MakeAttentionPlan(ParseMethod("lambda:sinks=4,window=30"), geo, 128))
                .find("window of 30 plus the first 4 tokens"),
            std::string::npos);
  EXPECT_NE(MaskText(MakeAttentionPlan(Method{}, geo, 128)).find("causal"), std::string::npos);
}

}  // namespace
}  // namespace stretch
