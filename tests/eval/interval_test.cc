// The intervals against published values and by simulation: a 95% interval must cover a known
// proportion (or mean) in about 95% of seeded replicates, and a broken one (a perturbed z) must
// not.
#include "src/eval/interval.h"

#include <gtest/gtest.h>

#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"

namespace stretch {
namespace {

// Newcombe 1998 ("Two-sided confidence intervals for the single proportion", Statistics in
// Medicine 17, Table II, method 3: the score interval without continuity correction), printed to
// 4 decimals.
TEST(Interval, WilsonMatchesNewcombesPublishedValues) {
  struct Case {
    int64_t s, n;
    double low, high;
  };
  for (const Case& c : {Case{81, 263, 0.2553, 0.3662}, Case{15, 148, 0.0624, 0.1605},
                        Case{0, 20, 0.0, 0.1611}, Case{1, 29, 0.0061, 0.1718}}) {
    const Interval w = WilsonInterval(c.s, c.n);
    EXPECT_NEAR(w.low, c.low, 5e-5) << c.s << "/" << c.n;
    EXPECT_NEAR(w.high, c.high, 5e-5) << c.s << "/" << c.n;
    EXPECT_DOUBLE_EQ(w.estimate, static_cast<double>(c.s) / static_cast<double>(c.n));
  }
}

// By hand: 7 of 20, z = 1.959964: p = 0.35, z^2/n = 0.192073, centre = (0.35 + 0.096036) /
// 1.192073 = 0.374169, half = 1.959964 / 1.192073 * sqrt(0.35 * 0.65 / 20 + z^2 / 1600)
// = 1.644164 * 0.117371 = 0.192977: [0.181192, 0.567146].
TEST(Interval, WilsonByHand) {
  const Interval w = WilsonInterval(7, 20);
  EXPECT_NEAR(w.low, 0.1811918, 1e-6);
  EXPECT_NEAR(w.high, 0.5671457, 1e-6);
  // The edges: all or nothing stays inside [0, 1] and is not a point.
  EXPECT_DOUBLE_EQ(WilsonInterval(0, 10).low, 0.0);
  EXPECT_GT(WilsonInterval(0, 10).high, 0.2);
  EXPECT_DOUBLE_EQ(WilsonInterval(10, 10).high, 1.0);
  EXPECT_LT(WilsonInterval(10, 10).low, 0.8);
  const Interval none = WilsonInterval(0, 0);
  EXPECT_EQ(none.low, 0.0);
  EXPECT_EQ(none.high, 1.0);
  EXPECT_THROW(WilsonInterval(3, 2), Error);
  EXPECT_THROW(WilsonInterval(-1, 2), Error);
}

// Newcombe 1998 ("Interval estimation for the difference between independent proportions",
// Table II, example (a): 56/70 - 48/80, method 10): +0.0524 to +0.3339.
TEST(Interval, NewcombeDifferenceMatchesPublishedValues) {
  const Interval d = NewcombeDifference(56, 70, 48, 80);
  EXPECT_NEAR(d.estimate, 0.2, 1e-12);
  EXPECT_NEAR(d.low, 0.0524, 5e-5);
  EXPECT_NEAR(d.high, 0.3339, 5e-5);
}

// Share of `replicates` binomial(n, p) samples whose interval (at this z) holds p.
double WilsonCoverage(double p, int64_t n, int replicates, double z, uint64_t seed) {
  Rng rng(seed);
  int covered = 0;
  for (int r = 0; r < replicates; ++r) {
    int64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += rng.UniformDouble() < p ? 1 : 0;
    const Interval w = WilsonInterval(s, n, z);
    covered += (w.low <= p && p <= w.high) ? 1 : 0;
  }
  return static_cast<double>(covered) / replicates;
}

// 2000 replicates: a true 95% coverage gives a share within 0.95 +/- 0.01 (2 standard errors:
// sqrt(0.95 * 0.05 / 2000) = 0.0049), and Wilson's own coverage at n = 50 stays within about a
// point of 95% (Brown, Cai & DasGupta 2001, Fig. 4), so [0.93, 0.97] holds it with room.
TEST(Interval, WilsonCoversAKnownProportion) {
  EXPECT_GE(WilsonCoverage(0.3, 50, 2000, kZ95, 7), 0.93);
  EXPECT_LE(WilsonCoverage(0.3, 50, 2000, kZ95, 7), 0.97);
  EXPECT_GE(WilsonCoverage(0.05, 50, 2000, kZ95, 8), 0.93);
}

// The check above catches a broken interval: z perturbed to 1.5 (an 87% interval) or to 2.6
// (99%) falls outside the band.
TEST(Interval, APerturbedZFailsTheCoverageCheck) {
  const double narrow = WilsonCoverage(0.3, 50, 2000, 1.5, 7);
  const double wide = WilsonCoverage(0.3, 50, 2000, 2.6, 7);
  EXPECT_FALSE(narrow >= 0.93 && narrow <= 0.97) << narrow;
  EXPECT_FALSE(wide >= 0.93 && wide <= 0.97) << wide;
}

TEST(Interval, OverlapIsATie) {
  EXPECT_TRUE(IntervalsOverlap({0.5, 0.4, 0.6}, {0.7, 0.59, 0.8}));
  EXPECT_TRUE(IntervalsOverlap({0.5, 0.4, 0.6}, {0.7, 0.6, 0.8}));  // touching
  EXPECT_FALSE(IntervalsOverlap({0.5, 0.4, 0.6}, {0.7, 0.61, 0.8}));
  EXPECT_FALSE(IntervalsOverlap({0.7, 0.61, 0.8}, {0.5, 0.4, 0.6}));
}

// Sequences of correlated tokens: each sequence has its own rate drawn uniformly in
// [mean - 0.3, mean + 0.3], its `tokens` tokens right with that rate. The mean over tokens is
// `mean`; a bootstrap over sequences must cover it about 95% of the time.
struct Sample {
  std::vector<double> sums, counts;
};
Sample CorrelatedSequences(Rng& rng, int sequences, int tokens, double mean) {
  Sample s;
  for (int i = 0; i < sequences; ++i) {
    const double rate = mean - 0.3 + 0.6 * rng.UniformDouble();
    double right = 0;
    for (int t = 0; t < tokens; ++t) right += rng.UniformDouble() < rate ? 1 : 0;
    s.sums.push_back(right);
    s.counts.push_back(tokens);
  }
  return s;
}

TEST(Interval, BootstrapOverSequencesCoversAKnownMean) {
  Rng rng(11);
  const int replicates = 400;
  int covered = 0, covered_naive = 0;
  for (int r = 0; r < replicates; ++r) {
    const Sample s = CorrelatedSequences(rng, 40, 30, 0.5);
    BootstrapOptions opt;
    opt.resamples = 1000;
    opt.seed = static_cast<uint64_t>(r) + 1;
    const Interval b = BootstrapRatio(s.sums, s.counts, opt);
    covered += (b.low <= 0.5 && 0.5 <= b.high) ? 1 : 0;
    // Treating the 1,200 tokens as independent (a Wilson interval over tokens) ignores the
    // correlation and is far too narrow: that is why the bootstrap resamples sequences.
    double right = 0;
    for (const double x : s.sums) right += x;
    const Interval w = WilsonInterval(static_cast<int64_t>(right), 40 * 30);
    covered_naive += (w.low <= 0.5 && 0.5 <= w.high) ? 1 : 0;
  }
  const double coverage = static_cast<double>(covered) / replicates;
  // 400 replicates: standard error 0.011; the percentile bootstrap with 40 units runs about a
  // point under its nominal level (Efron & Tibshirani 1993, ch. 14), hence the lower edge 0.91.
  EXPECT_GE(coverage, 0.91);
  EXPECT_LE(coverage, 0.98);
  EXPECT_LT(static_cast<double>(covered_naive) / replicates, 0.8);
}

TEST(Interval, BootstrapIsSeededAndPoolsByTokens) {
  const std::vector<double> sums = {1, 9, 3}, counts = {10, 10, 0};
  const Interval a = BootstrapRatio(sums, counts);
  const Interval b = BootstrapRatio(sums, counts);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  EXPECT_DOUBLE_EQ(a.estimate, 13.0 / 20.0);  // pooled: sum of sums over sum of counts
  EXPECT_LE(a.low, a.estimate);
  EXPECT_GE(a.high, a.estimate);
  // Every sequence the same: no spread.
  const std::vector<double> same = {3, 3, 3}, ten = {10, 10, 10};
  const Interval flat = BootstrapRatio(same, ten);
  EXPECT_DOUBLE_EQ(flat.low, 0.3);
  EXPECT_DOUBLE_EQ(flat.high, 0.3);
  EXPECT_THROW(BootstrapRatio(sums, std::vector<double>{1, 2}), Error);
}

// A paired difference removes what the two sides share: sequences of very different difficulty
// whose control is always 0.1 lower give a tight interval around 0.1 paired, a wide one unpaired.
TEST(Interval, PairedDifferenceIsTighterWhenTheSidesShareTheSequence) {
  std::vector<double> a, b, counts;
  Rng rng(3);
  for (int i = 0; i < 30; ++i) {
    const double base = 10 + 80 * rng.UniformDouble();
    a.push_back(base + 10);
    b.push_back(base);
    counts.push_back(100);
  }
  const Interval paired = BootstrapRatioDifference(a, counts, b, counts, true);
  const Interval unpaired = BootstrapRatioDifference(a, counts, b, counts, false);
  EXPECT_NEAR(paired.estimate, 0.1, 1e-12);
  EXPECT_NEAR(paired.low, 0.1, 1e-9);
  EXPECT_NEAR(paired.high, 0.1, 1e-9);
  EXPECT_LT(unpaired.low, 0.05);
  EXPECT_GT(unpaired.high, 0.15);
  EXPECT_THROW(
      BootstrapRatioDifference(a, counts, std::vector<double>{1}, std::vector<double>{1}, true),
      Error);
}

}  // namespace
}  // namespace stretch
