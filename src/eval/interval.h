// 95% intervals for the protocols' accuracies and losses, so that a table can say which
// differences are inside the noise (as lm-eval prints a stderr beside every accuracy and
// llama-perplexity a +/- beside every perplexity).
//
//   WilsonInterval       a binomial proportion (passkey trials retrieved / trials): the Wilson
//                        score interval (Wilson 1927; Brown, Cai & DasGupta 2001, "Interval
//                        estimation for a binomial proportion", eq. 4), which keeps its coverage
//                        near 95% for small n and for p near 0 or 1, where the normal
//                        approximation p +/- z sqrt(p(1-p)/n) collapses to a point.
//   NewcombeDifference   the difference of two independent proportions (a protocol minus its
//                        control): Newcombe 1998 ("Interval estimation for the difference between
//                        independent proportions", method 10), built from the two Wilson intervals.
//   Bootstrap*           per-token means (accuracy, loss) whose tokens are correlated within a
//                        sequence: a percentile bootstrap (Efron & Tibshirani 1993, ch. 13) that
//                        resamples whole sequences, each carrying its sum and its token count, and
//                        takes the ratio of sums (the pooled per-token mean) of every resample.
//                        Seeded: the same inputs and seed give the same interval.
#pragma once

#include <cstdint>
#include <span>

namespace stretch {

// The two-sided 95% normal quantile, Phi^-1(0.975).
inline constexpr double kZ95 = 1.959963984540054;

struct Interval {
  double estimate = 0.0;  // the point estimate (the proportion, or the pooled mean)
  double low = 0.0;
  double high = 0.0;
};

// True when the intervals share a point: the two values are not told apart (a tie).
bool IntervalsOverlap(const Interval& a, const Interval& b);

// successes of trials; trials = 0 gives [0, 1] around 0. Throws stretch::Error for
// successes outside [0, trials] or z <= 0.
Interval WilsonInterval(int64_t successes, int64_t trials, double z = kZ95);

// p1 - p2 of two independent binomial samples (Newcombe's hybrid score interval).
Interval NewcombeDifference(int64_t successes1, int64_t trials1, int64_t successes2,
                            int64_t trials2, double z = kZ95);

struct BootstrapOptions {
  int64_t resamples = 2000;
  uint64_t seed = 1;
  double level = 0.95;  // the central share of the resampled means kept
};

// Per sequence i: sums[i] (correct tokens, or summed loss) over counts[i] tokens. The estimate is
// sum(sums) / sum(counts); the interval the percentiles (1 - level)/2 and (1 + level)/2 of the
// same ratio over resamples of whole sequences drawn with replacement. Sequences with count 0 are
// kept (they weigh nothing). No sequence, or no token in all: estimate 0, interval [0, 0].
// Throws stretch::Error for sizes that differ, a negative count, resamples < 1 or a level
// outside (0, 1).
Interval BootstrapRatio(std::span<const double> sums, std::span<const double> counts,
                        const BootstrapOptions& opt = {});

// a - b of two such ratios. `paired`: a[i] and b[i] come from the same unit (a far copy and its
// control share everything but the copy's source), so index i is resampled in both together;
// otherwise each side is resampled on its own (the sizes may then differ).
Interval BootstrapRatioDifference(std::span<const double> sums_a, std::span<const double> counts_a,
                                  std::span<const double> sums_b, std::span<const double> counts_b,
                                  bool paired, const BootstrapOptions& opt = {});

}  // namespace stretch
