#include "src/eval/interval.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"

namespace stretch {
namespace {

// A uniform index in [0, n) without modulo bias (draws below 2^64 mod n are rejected).
size_t UniformIndexBelow(Rng& rng, size_t n) {
  const uint64_t m = static_cast<uint64_t>(n);
  const uint64_t threshold = (0 - m) % m;
  for (;;) {
    const uint64_t r = rng.NextU64();
    if (r >= threshold) return static_cast<size_t>(r % m);
  }
}

// The q-quantile of sorted values, linear between order statistics (Hyndman & Fan 1996,
// definition 7, R's and NumPy's default).
double Quantile(const std::vector<double>& sorted, double q) {
  const double h = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double Ratio(double sum, double count) { return count > 0 ? sum / count : 0.0; }

void CheckSides(std::span<const double> sums, std::span<const double> counts) {
  if (sums.size() != counts.size()) {
    Fail("bootstrap: {} sums and {} counts, expected one of each per sequence", sums.size(),
         counts.size());
  }
  for (const double c : counts) {
    if (!(c >= 0)) Fail("bootstrap: a sequence's token count is {}, expected >= 0", c);
  }
}

void CheckOptions(const BootstrapOptions& opt) {
  if (opt.resamples < 1) Fail("bootstrap: {} resamples, expected at least 1", opt.resamples);
  if (!(opt.level > 0 && opt.level < 1)) Fail("bootstrap: level {}, expected in (0, 1)", opt.level);
}

double Sum(std::span<const double> v) {
  double s = 0;
  for (const double x : v) s += x;
  return s;
}

// One resample of a side: the pooled ratio over n sequences drawn with replacement.
double ResampledRatio(std::span<const double> sums, std::span<const double> counts, Rng& rng) {
  double s = 0, c = 0;
  for (size_t k = 0; k < sums.size(); ++k) {
    const size_t i = UniformIndexBelow(rng, sums.size());
    s += sums[i];
    c += counts[i];
  }
  return Ratio(s, c);
}

Interval Percentiles(double estimate, std::vector<double> draws, double level) {
  std::sort(draws.begin(), draws.end());
  return {estimate, Quantile(draws, (1 - level) / 2), Quantile(draws, (1 + level) / 2)};
}

}  // namespace

bool IntervalsOverlap(const Interval& a, const Interval& b) {
  return a.low <= b.high && b.low <= a.high;
}

Interval WilsonInterval(int64_t successes, int64_t trials, double z) {
  if (trials < 0 || successes < 0 || successes > trials) {
    Fail("Wilson interval: {} successes of {} trials, expected 0 <= successes <= trials", successes,
         trials);
  }
  if (!(z > 0)) Fail("Wilson interval: z = {}, expected > 0", z);
  if (trials == 0) return {0.0, 0.0, 1.0};  // nothing observed: every proportion is possible
  // p~ = (p + z^2/2n) / (1 + z^2/n),  half = z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2).
  const double n = static_cast<double>(trials);
  const double p = static_cast<double>(successes) / n;
  const double z2 = z * z;
  const double denom = 1 + z2 / n;
  const double centre = (p + z2 / (2 * n)) / denom;
  const double half = z / denom * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
  // Clamped against rounding only: exactly, centre - half >= 0 and centre + half <= 1.
  return {p, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

Interval NewcombeDifference(int64_t successes1, int64_t trials1, int64_t successes2,
                            int64_t trials2, double z) {
  const Interval a = WilsonInterval(successes1, trials1, z);
  const Interval b = WilsonInterval(successes2, trials2, z);
  // delta = p1 - p2;  L = delta - sqrt((p1 - l1)^2 + (u2 - p2)^2),
  //                   U = delta + sqrt((u1 - p1)^2 + (p2 - l2)^2)   (Newcombe 1998, method 10).
  const double d = a.estimate - b.estimate;
  const double lo = d - std::hypot(a.estimate - a.low, b.high - b.estimate);
  const double hi = d + std::hypot(a.high - a.estimate, b.estimate - b.low);
  return {d, std::max(-1.0, lo), std::min(1.0, hi)};
}

Interval BootstrapRatio(std::span<const double> sums, std::span<const double> counts,
                        const BootstrapOptions& opt) {
  CheckSides(sums, counts);
  CheckOptions(opt);
  const double estimate = Ratio(Sum(sums), Sum(counts));
  if (sums.empty() || Sum(counts) == 0) return {0.0, 0.0, 0.0};
  Rng rng(opt.seed);
  std::vector<double> draws(static_cast<size_t>(opt.resamples));
  for (double& d : draws) d = ResampledRatio(sums, counts, rng);
  return Percentiles(estimate, std::move(draws), opt.level);
}

Interval BootstrapRatioDifference(std::span<const double> sums_a, std::span<const double> counts_a,
                                  std::span<const double> sums_b, std::span<const double> counts_b,
                                  bool paired, const BootstrapOptions& opt) {
  CheckSides(sums_a, counts_a);
  CheckSides(sums_b, counts_b);
  CheckOptions(opt);
  if (paired && sums_a.size() != sums_b.size()) {
    Fail("paired bootstrap: {} and {} sequences, expected the same number", sums_a.size(),
         sums_b.size());
  }
  const double estimate = Ratio(Sum(sums_a), Sum(counts_a)) - Ratio(Sum(sums_b), Sum(counts_b));
  if (sums_a.empty() || sums_b.empty()) return {estimate, estimate, estimate};
  Rng rng(opt.seed);
  std::vector<double> draws(static_cast<size_t>(opt.resamples));
  for (double& d : draws) {
    if (paired) {
      double sa = 0, ca = 0, sb = 0, cb = 0;
      for (size_t k = 0; k < sums_a.size(); ++k) {
        const size_t i = UniformIndexBelow(rng, sums_a.size());
        sa += sums_a[i];
        ca += counts_a[i];
        sb += sums_b[i];
        cb += counts_b[i];
      }
      d = Ratio(sa, ca) - Ratio(sb, cb);
    } else {
      const double a = ResampledRatio(sums_a, counts_a, rng);
      d = a - ResampledRatio(sums_b, counts_b, rng);
    }
  }
  return Percentiles(estimate, std::move(draws), opt.level);
}

}  // namespace stretch
