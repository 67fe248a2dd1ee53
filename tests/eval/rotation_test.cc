// The rotation view of a plan (src/eval/rotation.h, `stretch inspect --method`) against numbers
// derived here by hand from the definitions of src/position/method.h and plan.h: the largest
// relative position R each relative map and mask gives at a context N, the model's and the
// method's angles per pair, the "beyond the trained arc" rule, the attention factor and logit
// scale, and the table's text. (tests/eval/sweep_test.cc checks R against a brute force over the
// reference maps; here every expected R is worked out in a comment.)
#include "src/eval/rotation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "src/position/method.h"
#include "src/position/plan.h"

namespace stretch {
namespace {

// L = 64, d = 8, base 10000: theta_t = 10000^(-t/4) = 1, 0.1, 0.01, 0.001; L theta_t = 64, 6.4,
// 0.64, 0.064 rad, i.e. 10.19, 1.019, 0.102, 0.0102 turns: pairs 2 and 3 never completed a turn.
constexpr int64_t kL = 64;
RopeGeometry Geo() { return RopeGeometry{kL, 8, 10000.0}; }
const double kTwoPi = 2.0 * std::numbers::pi;

AttentionPlan Plan(const char* spec, int64_t N, const RopeGeometry& geo = Geo()) {
  return MakeAttentionPlan(ParseMethod(spec), geo, N);
}

// ---- R, the largest relative position at N ------------------------------------------------------

struct RCase {
  const char* spec;
  int64_t N;
  double R;  // derived by hand in the table of the test below
};

TEST(RotationMaxRel, EachMapAndMaskGivesTheLargestRelativePositionDerivedByHand) {
  const RCase cases[] = {
      // identity: query N-1 against key 0.
      {"direct", 256, 255},
      {"direct", 1, 0},
      {"pi", 200, 199},  // interpolation changes angles, not positions
      // rerope(w): min(i - j, w).
      {"rerope:window=20", 100, 20},
      {"rerope:window=20", 20, 19},  // no pair is 20 apart yet
      // leaky(w, k): w + (i - j - w)/k at i - j = 99: 20 + 79/4.
      {"leaky-rerope:window=20,k=4", 100, 39.75},
      // self-extend(G=4, W=16): far pairs give floor(i/4) - floor(j/4) + 16 - floor(16/4); at
      // i = 99, j = 0: 24 + 12 = 36 (near pairs give at most 15).
      {"self-extend:group=4,window=16", 100, 36},
      // string(S=40, W=8): i - j - 40 + 8 at i - j = 99: 67.
      {"string:shift=40,window=8", 100, 67},
      {"string:shift=40,window=8", 40, 39},  // all pairs near: i - j <= 39
      // dca(chunk 40, window 8): c = 32; a previous-chunk query sits at min(i mod 32 + 32, 40),
      // an older-chunk one at min(63, 40) = 40, keys at j mod 32 >= 0: 40 once i mod 32 >= 8 in
      // chunk 1 (i = 40) or any query in chunk 2.
      {"dca:chunk=40,window=8", 100, 40},
      // N = 36: queries 32..35 are in chunk 1 at 32 + (i mod 32) <= 35, keys of chunk 0 at 0.
      {"dca:chunk=40,window=8", 36, 35},
      // N = 30: one chunk, plain distances.
      {"dca:chunk=40,window=8", 30, 29},
      // sliding window 30: identity map, i - j < 30.
      {"window:window=30", 100, 29},
      // Lambda(4 sinks, window 30): inside the window i - j <= 29; a sink outside it is seen at
      // distance 30 (ReRoPE with w = 30).
      {"lambda:sinks=4,window=30", 100, 30},
      {"lambda:sinks=4,window=30", 30, 29},  // the window still covers every key
  };
  for (const RCase& c : cases) {
    const AttentionPlan plan = Plan(c.spec, c.N);
    // Every R above is an integer or a quarter: exact in double.
    EXPECT_EQ(MaxRelativePosition(plan, c.N), c.R) << c.spec << " N=" << c.N;
    EXPECT_EQ(MakeRotationView(Geo(), plan).max_rel_method, c.R) << c.spec << " N=" << c.N;
  }
}

TEST(RotationMaxRel, SelfExtendDefaultGroupKeepsRInsideTraining) {
  // W = L/4 = 16; G the smallest with floor(255/G) + 16 - floor(16/G) <= floor(2 L / 3) - 1 =
  // 41: G = 10 gives 25 + 16 - 1 = 40, G = 9 gives 28 + 16 - 1 = 43. So R = 40 < L and no pair
  // goes beyond.
  const AttentionPlan plan = Plan("self-extend", 256);
  const RotationView v = MakeRotationView(Geo(), plan);
  EXPECT_EQ(v.max_rel_method, 40);
  EXPECT_EQ(v.BeyondCount(), 0);
  EXPECT_NE(RelMapText(plan).find("group G = 10, neighbour window W = 16"), std::string::npos)
      << RelMapText(plan);
}

// BUG (src/eval/rotation.cc, MaxRelativePosition): the header promises the largest relative
// position "that a query at positions < N sees", but only the last query is scanned (DCA aside),
// on the premise that a later query sees every key an earlier one does. The blockwise mask breaks
// that premise: query i sees only keys from the start of the half-block before its own. With
// B = 16 (half-blocks of h = 8) and N = 100, query 95 (half-block 11) sees key 80 (start of
// half-block 10) at distance 15, while the last query, 99 (half-block 12), sees keys from 88 on:
// at most 11. Expected (intended) R = 15 = B - 1; the implementation returns 11. This also makes
// `inspect --method blockwise` report turns@N (and, for B > L, beyond) from too small an R at
// every N whose last query is not the last of its half-block.
TEST(RotationMaxRel, BlockwiseMaskCountsEveryQueryNotOnlyTheLast) {
  const AttentionPlan plan = Plan("blockwise:window=16", 100);
  double brute = 0;
  for (int64_t i = 0; i < 100; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      // The definition (method.h): floor(i/h) - floor(j/h) <= 1, h = 8; identity map.
      if (i / 8 - j / 8 <= 1) brute = std::max(brute, static_cast<double>(i - j));
    }
  }
  ASSERT_EQ(brute, 15);  // the hand derivation above
  EXPECT_EQ(MaxRelativePosition(plan, 100), 15) << "see the BUG note above this test";
  // At N = 96 the last query (95) is the one that sees 15: both readings agree there.
  EXPECT_EQ(MaxRelativePosition(Plan("blockwise:window=16", 96), 96), 15);
}

// ---- the per-pair numbers -----------------------------------------------------------------------

// theta_t = base^(-2t/d), computed here from the definition.
double Theta(double base, int t, int d) { return std::pow(base, -2.0 * t / d); }

// Relative tolerance for a value computed in a different order from the same doubles: a few ulps
// of pow and a division or two, far below 1e-12.
void ExpectClose(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * std::abs(want)) << what;
}

TEST(RotationView, MethodBaseOverrideIsComparedWithTheModelsOwnBase) {
  // direct:base=160000 on a base-10000 model: theta'_t / theta_t = 16^(-t/4) = 2^(-t). The view
  // takes theta from the model's geometry, not from the plan's (which carries the new base).
  const AttentionPlan plan = Plan("direct:base=160000", 256);
  const RotationView v = MakeRotationView(Geo(), plan);
  ASSERT_EQ(v.pairs.size(), 4u);
  EXPECT_EQ(v.train_len, kL);
  EXPECT_EQ(v.ctx, 256);
  for (int t = 0; t < 4; ++t) {
    const RotationPair& p = v.pairs[static_cast<size_t>(t)];
    const std::string at = "t=" + std::to_string(t);
    EXPECT_EQ(p.t, t);
    ExpectClose(p.theta, Theta(10000, t, 8), at);
    ExpectClose(p.theta_method, Theta(160000, t, 8), at);
    ExpectClose(p.ratio, std::exp2(-t), at);
    ExpectClose(p.period, kTwoPi / Theta(160000, t, 8), at);
    ExpectClose(p.turns_trained, 64 * Theta(10000, t, 8) / kTwoPi, at);
    ExpectClose(p.turns_method, 255 * Theta(160000, t, 8) / kTwoPi, at);
  }
  // Beyond: pairs 2, 3 (< 1 turn in training) with 255 theta' vs 64 theta: 255/4 = 63.75 < 64
  // for t = 2 (not beyond), 255/8 < 64 for t = 3 (not beyond). A larger base pulls them back.
  EXPECT_EQ(v.BeyondCount(), 0);
  for (const RotationPair& p : v.pairs) EXPECT_FALSE(p.beyond_trained) << p.t;
}

TEST(RotationView, NtkFixedScalesTheBase) {
  // ntk-fixed:factor=4: base x 4, so theta'_t / theta_t = 4^(-t/4) = 2^(-t/2); R = 255.
  // Beyond (t = 2, 3): 255 * 2^(-t/2) >= 64? 127.5 and 90.2: both yes.
  const RotationView v = MakeRotationView(Geo(), Plan("ntk-fixed:factor=4", 256));
  for (const RotationPair& p : v.pairs) {
    ExpectClose(p.ratio, std::exp2(-p.t / 2.0), "t=" + std::to_string(p.t));
    EXPECT_EQ(p.beyond_trained, p.t >= 2) << p.t;
  }
}

TEST(RotationView, ModelsOwnInterpolationDividesTheTrainedAngles) {
  // A model trained with PI F = 2 turned pair t by theta_t / 2 per position; `direct` keeps that.
  RopeGeometry geo = Geo();
  geo.interpolation = 2.0;
  const RotationView v = MakeRotationView(geo, Plan("direct", 256, geo));
  for (const RotationPair& p : v.pairs) {
    const std::string at = "t=" + std::to_string(p.t);
    ExpectClose(p.theta, Theta(10000, p.t, 8) / 2, at);
    ExpectClose(p.theta_method, p.theta, at);
    ExpectClose(p.ratio, 1.0, at);
    ExpectClose(p.turns_trained, 32 * Theta(10000, p.t, 8) / kTwoPi, at);
  }
  // L theta = 32, 3.2, 0.32, 0.032 rad: pair 1 now never completed a turn either (3.2 < 2 pi),
  // and 255 theta >= 64 theta for every pair: pairs 1, 2, 3 go beyond.
  EXPECT_EQ(v.BeyondCount(), 3);
  EXPECT_FALSE(v.pairs[0].beyond_trained);
}

TEST(RotationView, BeyondNeedsBothAnIncompleteTurnAndAnAngleOneTrainedStepFurther) {
  // L = 62: L theta_1 = 6.2 < 2 pi, so pair 1 joins pairs 2 and 3 among the incomplete ones.
  RopeGeometry geo = Geo();
  geo.train_len = 62;
  // N = L: R = 61 < 62: nothing beyond. N = L + 1: R = 62 = L exactly: the three go beyond
  // (equality counts: position L itself was never seen).
  EXPECT_EQ(MakeRotationView(geo, Plan("direct", 62, geo)).BeyondCount(), 0);
  const RotationView v = MakeRotationView(geo, Plan("direct", 63, geo));
  EXPECT_EQ(v.max_rel_method, 62);
  EXPECT_EQ(v.BeyondCount(), 3);
  EXPECT_FALSE(v.pairs[0].beyond_trained);  // 62 rad: 9.9 turns, every angle seen
  EXPECT_LT(v.pairs[1].turns_trained, 1.0);
  EXPECT_TRUE(v.pairs[1].beyond_trained);
}

TEST(RotationView, RelativeMapsDecideBeyondThroughR) {
  // ReRoPE at w = 32: R = 32 < 64: nothing beyond, however long N.
  EXPECT_EQ(MakeRotationView(Geo(), Plan("rerope:window=32", 1000)).BeyondCount(), 0);
  // Leaky ReRoPE, w = 32, k = s = 4 at N = 256: R = 32 + 223/4 = 87.75 >= 64: pairs 2 and 3 go
  // beyond, as the far distances still grow past L.
  const RotationView leaky = MakeRotationView(Geo(), Plan("leaky-rerope:window=32,k=s", 256));
  EXPECT_EQ(leaky.max_rel_method, 87.75);
  EXPECT_EQ(leaky.BeyondCount(), 2);
  // Its default k = 223/31 maps the farthest distance to L - 1 = 63: nothing beyond.
  const RotationView inside = MakeRotationView(Geo(), Plan("leaky-rerope:window=32", 256));
  EXPECT_NEAR(inside.max_rel_method, 63.0, 1e-9);
  EXPECT_EQ(inside.BeyondCount(), 0);
  // STRING default at L = 64: S = int(0.33 * 64) = 21, W = min(128, 21 / 2) = 10; at N = 256,
  // R = 255 - 21 + 10 = 244 >= 64: beyond.
  const RotationView string = MakeRotationView(Geo(), Plan("string", 256));
  EXPECT_EQ(string.max_rel_method, 244);
  EXPECT_EQ(string.BeyondCount(), 2);
  // DCA default at L = 64: chunk 48, window 4, c = 44: R = min(2c - 1, 48) = 48 < 64.
  const RotationView dca = MakeRotationView(Geo(), Plan("dca", 256));
  EXPECT_EQ(dca.max_rel_method, 48);
  EXPECT_EQ(dca.BeyondCount(), 0);
}

TEST(RotationView, AttentionFactorAndLogitScaleOfTheLastQuery) {
  // YaRN at s = 4 with no mscale given: attention factor 0.1 ln 4 + 1; logits scale by its square.
  const RotationView yarn = MakeRotationView(Geo(), Plan("yarn", 256));
  const double af = 0.1 * std::log(4.0) + 1.0;
  ExpectClose(yarn.attention_factor, af, "yarn attention factor");
  ExpectClose(yarn.logit_scale_last, af * af, "yarn logit scale");
  // Plain RoPE with +logn at N = 256, L = 64: max(1, ln 256 / ln 64) = 8/6.
  const RotationView logn = MakeRotationView(Geo(), Plan("direct+logn", 256));
  EXPECT_EQ(logn.attention_factor, 1.0);
  ExpectClose(logn.logit_scale_last, 8.0 / 6.0, "logn scale");
  // Within the trained length logn changes nothing: ln 64 / ln 64 = 1.
  EXPECT_EQ(MakeRotationView(Geo(), Plan("direct+logn", 64)).logit_scale_last, 1.0);
}

// ---- the text -----------------------------------------------------------------------------------

TEST(RotationViewText, EveryRowPrintsThePairsNumbers) {
  const RotationView v = MakeRotationView(Geo(), Plan("pi", 256));
  const std::string text = RotationViewText(v);
  EXPECT_EQ(
      text.rfind("rotation per frequency pair t at context N = 256 (L = 64 trained; R = 255,", 0),
      0u)
      << text;
  for (const char* column :
       {"theta ", "theta' ", "ratio ", "period ", "turns@L ", "turns@N ", "beyond "}) {
    EXPECT_NE(text.find(std::string("\n  ") + column), std::string::npos) << column;
  }
  // The rows: lines that read as "t theta theta' ratio period turns@L turns@N beyond" (the header
  // and the explanations do not start with a number). PI at s = 4: theta' = theta / 4, R = 255,
  // never beyond.
  std::istringstream lines(text);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    std::istringstream row(line);
    int t = -1;
    double theta = 0, theta_m = 0, ratio = 0, period = 0, turns_l = 0, turns_n = 0;
    std::string beyond;
    if (!(row >> t >> theta >> theta_m >> ratio >> period >> turns_l >> turns_n >> beyond)) {
      continue;
    }
    ASSERT_EQ(t, rows) << line;
    const double th = Theta(10000, t, 8);
    // Printed with at least 4 significant digits (.4e, .5g, .4g): half a unit in the last place
    // is at most 5e-4 relative, so 1e-3 relative cannot reject a correct value.
    EXPECT_NEAR(theta, th, 1e-3 * th) << line;
    EXPECT_NEAR(theta_m, th / 4, 1e-3 * th / 4) << line;
    EXPECT_NEAR(ratio, 0.25, 1e-4) << line;  // printed with 4 decimals: 0.2500 exactly
    EXPECT_NEAR(period, kTwoPi * 4 / th, 1e-3 * kTwoPi * 4 / th) << line;
    EXPECT_NEAR(turns_l, 64 * th / kTwoPi, 1e-3 * 64 * th / kTwoPi) << line;
    EXPECT_NEAR(turns_n, 255 * th / 4 / kTwoPi, 1e-3 * 255 * th / 4 / kTwoPi) << line;
    EXPECT_EQ(beyond, "no") << line;
    ++rows;
  }
  EXPECT_EQ(rows, 4) << text;
  EXPECT_NE(text.find("0 of 4 pairs go beyond the trained arc at N = 256.\n"), std::string::npos)
      << text;
}

TEST(RotationViewText, BeyondPairsAreMarkedYes) {
  const std::string text = RotationViewText(MakeRotationView(Geo(), Plan("direct", 256)));
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> marks;
  while (std::getline(lines, line)) {
    std::istringstream row(line);
    int t = -1;
    std::string cols[7];
    if (row >> t >> cols[0] >> cols[1] >> cols[2] >> cols[3] >> cols[4] >> cols[5] >> cols[6] &&
        (cols[6] == "yes" || cols[6] == "no")) {
      marks.push_back(cols[6]);
    }
  }
  EXPECT_EQ(marks, (std::vector<std::string>{"no", "no", "yes", "yes"})) << text;
  EXPECT_NE(text.find("2 of 4 pairs go beyond the trained arc at N = 256."), std::string::npos);
}

// ---- the one-line summaries ---------------------------------------------------------------------

TEST(RotationSummaries, RelMapTextNamesEveryMapWithItsParameters) {
  const struct {
    const char* spec;
    int64_t N;
    const char* expected;
  } cases[] = {
      {"direct", 128, "identity: a (query i, key j) pair is rotated by its true distance i - j"},
      {"rerope:window=20", 128, "ReRoPE, window w = 20: min(i - j, w)"},
      {"leaky-rerope:window=20,k=2.5", 128,
       "Leaky ReRoPE, window w = 20, k = 2.5: i - j below w, else w + (i - j - w) / k"},
      {"self-extend:group=4,window=16", 128,
       "Self-Extend, group G = 4, neighbour window W = 16: i - j below W, else floor(i/G) - "
       "floor(j/G) + W - floor(W/G)"},
      {"string:shift=40,window=8", 128,
       "STRING, shift S = 40, local window W = 8: i - j below S, else i - j - S + W"},
      // Lambda is ReRoPE at its window over the keys its mask lets through (plan.h).
      {"lambda:sinks=4,window=30", 128, "ReRoPE, window w = 30: min(i - j, w)"},
  };
  for (const auto& c : cases) EXPECT_EQ(RelMapText(Plan(c.spec, c.N)), c.expected) << c.spec;
}

// BUG (src/position/maps/dca.cc, describe and build): for DCA the text prints
// PositionMap::window as the local window, but the map once never set map.window (only the chunk
// size ints[0] and the chunk length ints[1] = chunk - window), so `inspect --method
// dca:chunk=40,window=8` reported "local window 0". The intended text names the method's window,
// 8 = chunk size - chunk length.
TEST(RotationSummaries, RelMapTextNamesDcasLocalWindow) {
  const AttentionPlan plan = Plan("dca:chunk=40,window=8", 128);
  ASSERT_EQ(plan.map.ints[0] - plan.map.ints[1], 8);  // chunk size - chunk length
  EXPECT_EQ(RelMapText(plan),
            "Dual Chunk Attention, chunk size 40, local window 8 (chunks of 32 positions): "
            "intra-, successive- and inter-chunk maps")
      << "see the BUG note above this test";
}

TEST(RotationSummaries, MaskTextNamesEveryMaskWithItsParameters) {
  EXPECT_EQ(MaskText(Plan("direct", 128)), "causal: query i sees every key j <= i");
  EXPECT_EQ(MaskText(Plan("window:window=30", 128)),
            "sliding window of 30: query i sees keys j with 0 <= i - j < 30");
  EXPECT_EQ(MaskText(Plan("lambda:sinks=4,window=30", 128)),
            "Lambda: a window of 30 plus the first 4 tokens (attention sinks)");
  // B = 16: half-blocks of 8; a query sees its own half-block and the previous one, 9 .. 16 keys
  // (1 + 8 at a half-block's start, 16 at its end).
  EXPECT_EQ(MaskText(Plan("blockwise:window=16", 128)),
            "blockwise causal: query i sees its own half-block of 8 positions and the one before "
            "it (9 .. 16 keys)");
}

// ---- YaRN outside its regime ------------------------------------------------------------------

// YaRN's ramp is meant to leave alone the pairs that turn at least beta_fast = 32 times within
// the original length. L = 128, rotary dim 32, base 10,000: theta_0 = 1, so the fastest pair
// turns 128 / 2 pi = 20.37 times: none does. The ramp (HF _compute_yarn_parameters, truncated):
// low = max(0, floor(32 ln(128 / (32 2 pi)) / (2 ln 10000))) = max(0, floor(-0.78)) = 0, high =
// ceil(32 ln(128 / 2 pi) / (2 ln 10000)) = ceil(5.24) = 6; pair t runs at its own frequency where
// the ramp (t - 0) / 6 is 0: pair 0 alone, so 15 of the 16 pairs are slowed.
TEST(YarnRegime, SaidWhereNoPairTurnsBetaFastTimesWithinTheOriginalLength) {
  const RopeGeometry short_geo{128, 32, 10000.0};
  const std::string note = YarnOutsideItsRegimeNote(short_geo, Plan("yarn", 1024, short_geo));
  EXPECT_NE(note.find("beta_fast = 32 times within the original length (128 tokens; the fastest "
                      "turns 20.4 times)"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("slows 15 of the 16 pairs"), std::string::npos) << note;
  EXPECT_NE(YarnOutsideItsRegimeNote(short_geo, Plan("dynamic-yarn", 1024, short_geo)), "")
      << "dynamic YaRN uses the same ramp";
  // A ramp the geometry reaches (the fastest turns 20.4 >= 16 times), an original length of
  // 4,096 (652 turns), and the regime YaRN was made for (L = 4,096, rotary dim 128: 652 turns):
  // nothing to say; nor for other methods.
  EXPECT_EQ(YarnOutsideItsRegimeNote(short_geo, Plan("yarn:beta_fast=16", 1024, short_geo)), "");
  EXPECT_EQ(YarnOutsideItsRegimeNote(short_geo, Plan("yarn", 128, short_geo)), "")
      << "at L YaRN's factor is 1: it slows nothing";
  EXPECT_EQ(YarnOutsideItsRegimeNote(short_geo, Plan("yarn:orig=4096", 8192, short_geo)), "");
  const RopeGeometry long_geo{4096, 128, 10000.0};
  EXPECT_EQ(YarnOutsideItsRegimeNote(long_geo, Plan("yarn", 32768, long_geo)), "");
  for (const char* spec : {"direct", "pi", "ntk", "rerope"}) {
    EXPECT_EQ(YarnOutsideItsRegimeNote(short_geo, Plan(spec, 1024, short_geo)), "") << spec;
  }
}

}  // namespace
}  // namespace stretch
