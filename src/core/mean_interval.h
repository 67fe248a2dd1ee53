// The 95% interval of a mean over units that each hold several correlated values (the tokens of a
// window): the units are the samples, never the values. Used where a bootstrap over thousands of
// windows would cost more than the scoring itself (`stretch score`'s table and JSON) and for the
// held-out loss of training (64 windows by default); the lab's cells use a bootstrap over their
// few windows (src/eval/interval.h BootstrapRatio).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>

namespace stretch {

// Student's t distribution's 0.975 quantile for `df` >= 1 degrees of freedom: a table to 30,
// beyond it the Cornish-Fisher expansion z + (z^3 + z) / (4 df) + (5 z^5 + 16 z^3 + 3 z) / (96
// df^2) (Abramowitz & Stegun 26.7.5), within 1e-3 of the exact value there.
double StudentT975(int64_t df);

// Unit w holds sums[w] (a summed loss, or the right predictions) over counts[w] values. The mean
// is the ratio estimator sum(sums) / sum(counts); its standard error from the units' spread,
// sqrt(n / (n - 1) sum((sums[w] - mean counts[w])^2)) / sum(counts), times StudentT975(n - 1).
// {lo, hi}; nullopt for fewer than 2 units or no value in all. Sizes must agree.
std::optional<std::pair<double, double>> RatioMeanInterval(std::span<const double> sums,
                                                           std::span<const double> counts);

}  // namespace stretch
