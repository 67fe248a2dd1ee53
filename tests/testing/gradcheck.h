// Central-difference gradient checks in double, for every hand-written backward (one op, the
// attention backward, the whole model). Given a scalar loss L(x) of a flat vector of doubles and
// the analytic gradient g = dL/dx, every coordinate i (or a stated random subset of them) is
// compared with
//
//   n_i = (L(x + h e_i) - L(x - h e_i)) / ((x_i + h) - (x_i - h)),
//
// the denominator being the step actually taken after rounding x_i +- h.
//
// Tolerance. The error of n_i has two parts (e.g. Nocedal & Wright, Numerical Optimization,
// 2nd ed., sec. 8.1):
//   truncation  |n_i - g_i| <= h^2 / 6 * |d^3 L / dx_i^3|      (Taylor to third order)
//   rounding    |n_i - g_i| <= delta / h,  delta = the error of one evaluation of L, about
//               k * eps * |L| with eps = 2^-52 and k the rounding steps on the loss's path
//               (k grows with the length of its sums, and with cancellation when |L| is much
//               smaller than the terms summed).
// With step h = 1e-5 and the O(1) inputs of the checks, the truncation part is ~2e-11 |L'''| and
// the rounding part ~2e-11 k |L|: a correct gradient agrees to ~1e-8 relative or better. The
// check is
//
//   |g_i - n_i| <= atol + rtol * max(|g_i|, |n_i|)
//
//   rtol = 1e-6: two orders above what a correct gradient reaches (h^2 |L'''| / (6 |L'|) ~ 1e-11,
//                plus rounding), and four below what a wrong formula gives (a missing term or
//                factor is an O(1) relative error; even a 1% error is 1e-2);
//   atol = kRoundingSteps * eps * max(1, |L(x)|) / h, kRoundingSteps = 1000: the rounding floor
//                delta / h for a loss computed in up to ~1000 dependent rounding steps (or
//                cancellation by a factor of ~1000). It covers the coordinates whose gradient is
//                near 0, where a relative test means nothing; at |L| = 10 it is ~2e-7.
// A relative error alone would fail a correct gradient of 1e-12 whose numeric estimate is
// rounding noise; an absolute error alone would not scale with the gradient. Both can be
// overridden in GradcheckOptions, with the reason written next to the call.
//
// A wrong gradient is reported with its coordinate, the analytic and numeric values, their
// difference and the allowance; ExpectGradcheck turns that into a GoogleTest failure.
//
// The check can fail. ExpectGradcheckFlagsOnePercent also runs it on the same gradient with its
// largest coordinate off by 1% and expects exactly that coordinate flagged: a 1% error is four
// orders above rtol, so a check that lets it pass is checking nothing (too large a step, too
// loose an allowance, or a loss that does not depend on x). A gradient that is 0 by the math has
// no such coordinate: ExpectGradcheckOfZero checks it against the numeric one and against a
// bound the caller derives.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "src/core/rng.h"

namespace stretch::testing {

// The loss as a function of the checked argument (everything else held fixed by the closure).
using LossOf = std::function<double(std::span<const double>)>;

inline constexpr double kGradcheckRoundingSteps = 1000.0;

struct GradcheckOptions {
  double step = 1e-5;      // h
  double rtol = 1e-6;      // see the derivation above
  double atol = -1.0;      // < 0: kGradcheckRoundingSteps * eps * max(1, |L(x)|) / h
  int64_t max_coords = 0;  // 0: every coordinate; else this many, drawn without replacement
  uint64_t seed = 1;       // for the drawn subset
  int max_reported = 10;   // mismatches listed in the failure message
};

struct GradcheckMismatch {
  int64_t index = 0;
  double analytic = 0.0;
  double numeric = 0.0;
  double allowed = 0.0;  // atol + rtol * max(|analytic|, |numeric|)
};

struct GradcheckResult {
  int64_t size = 0;     // coordinates in x
  int64_t checked = 0;  // coordinates compared
  double loss = 0.0;    // L(x)
  double atol = 0.0, rtol = 0.0;
  // Largest |g - n| / max(|g|, |n|) among coordinates where the relative test governs
  // (max(|g|, |n|) >= atol / rtol), and where it occurred (-1: none such).
  double max_rel_error = 0.0;
  int64_t max_rel_index = -1;
  // Largest |g - n| / (atol + rtol * max(|g|, |n|)) over all checked coordinates: <= 1 passes.
  double max_error_ratio = 0.0;
  std::vector<GradcheckMismatch> mismatches;  // every failing coordinate, by index

  bool ok() const { return mismatches.empty(); }

  std::string Describe(std::string_view name, int max_reported = 10) const {
    std::string s = fmt::format(
        "gradcheck {}: {} of {} checked coordinates fail |g - n| <= atol + rtol * max(|g|, |n|) "
        "(atol {:.3g}, rtol {:.3g}, L(x) = {:.17g}); max relative error {:.3g} at {}, "
        "max error/allowed {:.3g}",
        name, mismatches.size(), checked, atol, rtol, loss, max_rel_error, max_rel_index,
        max_error_ratio);
    for (size_t k = 0; k < mismatches.size() && static_cast<int>(k) < max_reported; ++k) {
      const GradcheckMismatch& m = mismatches[k];
      s += fmt::format(
          "\n  coordinate {}: analytic {:.17g}, numeric {:.17g}, |diff| {:.3g} > {:.3g}", m.index,
          m.analytic, m.numeric, std::abs(m.analytic - m.numeric), m.allowed);
    }
    if (static_cast<int64_t>(mismatches.size()) > max_reported) {
      s += fmt::format("\n  ... and {} more",
                       static_cast<int64_t>(mismatches.size()) - max_reported);
    }
    return s;
  }
};

// Compares `analytic` with central differences of `loss` at `x`. Pure: no test assertions.
inline GradcheckResult Gradcheck(const LossOf& loss, std::vector<double> x,
                                 std::span<const double> analytic,
                                 const GradcheckOptions& options = {}) {
  GradcheckResult r;
  r.size = static_cast<int64_t>(x.size());
  if (analytic.size() != x.size()) {
    // A harness misuse, reported as a failing coordinate -1 rather than a crash.
    r.mismatches.push_back(
        {-1, static_cast<double>(analytic.size()), static_cast<double>(x.size()), 0});
    return r;
  }
  const double h = options.step;
  constexpr double eps = std::numeric_limits<double>::epsilon();
  r.loss = loss(x);
  r.rtol = options.rtol;
  r.atol = options.atol >= 0 ? options.atol
                             : kGradcheckRoundingSteps * eps * std::max(1.0, std::abs(r.loss)) / h;

  std::vector<int64_t> coords(x.size());
  std::iota(coords.begin(), coords.end(), int64_t{0});
  if (options.max_coords > 0 && options.max_coords < r.size) {
    Rng rng(options.seed);  // partial Fisher-Yates: the first max_coords of a random permutation
    for (int64_t k = 0; k < options.max_coords; ++k) {
      const int64_t j = k + static_cast<int64_t>(rng.NextU64() % static_cast<uint64_t>(r.size - k));
      std::swap(coords[static_cast<size_t>(k)], coords[static_cast<size_t>(j)]);
    }
    coords.resize(static_cast<size_t>(options.max_coords));
    std::sort(coords.begin(), coords.end());
  }

  for (int64_t i : coords) {
    double& xi = x[static_cast<size_t>(i)];
    const double x0 = xi;
    const double xp = x0 + h, xm = x0 - h;
    xi = xp;
    const double lp = loss(x);
    xi = xm;
    const double lm = loss(x);
    xi = x0;
    const double n = (lp - lm) / (xp - xm);
    const double g = analytic[static_cast<size_t>(i)];
    const double diff = std::abs(g - n), mag = std::max(std::abs(g), std::abs(n));
    const double allowed = r.atol + r.rtol * mag;
    ++r.checked;
    r.max_error_ratio = std::max(r.max_error_ratio, diff / allowed);
    if (mag * r.rtol >= r.atol && diff / mag > r.max_rel_error) {
      r.max_rel_error = diff / mag;
      r.max_rel_index = i;
    }
    if (!(diff <= allowed)) r.mismatches.push_back({i, g, n, allowed});  // NaN fails too
  }
  return r;
}

// Gradcheck plus a GoogleTest failure (non-fatal) naming every mismatched coordinate.
inline GradcheckResult ExpectGradcheck(std::string_view name, const LossOf& loss,
                                       const std::vector<double>& x,
                                       std::span<const double> analytic,
                                       const GradcheckOptions& options = {}) {
  GradcheckResult r = Gradcheck(loss, x, analytic, options);
  if (!r.ok()) {
    ADD_FAILURE() << r.Describe(name, options.max_reported);
  }
  return r;
}

// ExpectGradcheck of every coordinate, then the same check shown to flag `analytic` with its
// largest coordinate multiplied by 1.01 at that coordinate and no other. The largest is taken
// so that 1% of it is far above the allowance; it must exceed 1e-3 (a gradient that is all ~0
// is ExpectGradcheckOfZero's case). Prints a line with the largest relative error seen.
// `options` may set the step (every coordinate is checked: options.max_coords is ignored).
inline void ExpectGradcheckFlagsOnePercent(std::string_view name, const LossOf& loss,
                                           const std::vector<double>& x,
                                           const std::vector<double>& analytic,
                                           GradcheckOptions options = {}) {
  SCOPED_TRACE(name);
  options.max_coords = 0;
  const GradcheckResult r = ExpectGradcheck(name, loss, x, analytic, options);
  EXPECT_EQ(r.checked, static_cast<int64_t>(x.size()));
  ASSERT_EQ(analytic.size(), x.size());
  size_t k = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    if (std::abs(analytic[i]) > std::abs(analytic[k])) k = i;
  }
  ASSERT_GT(std::abs(analytic[k]), 1e-3) << "a gradient that is all ~0 checks nothing";
  std::vector<double> wrong = analytic;
  wrong[k] *= 1.01;
  const GradcheckResult rw = Gradcheck(loss, x, wrong, options);
  ASSERT_EQ(rw.mismatches.size(), 1u) << "the 1% error at coordinate " << k << " went unnoticed";
  EXPECT_EQ(rw.mismatches[0].index, static_cast<int64_t>(k));
  std::printf("[ gradcheck ] %-34s %4lld coords  max rel err %.2e  max err/allowed %.2e\n",
              std::string(name).c_str(), static_cast<long long>(r.checked), r.max_rel_error,
              r.max_error_ratio);
}

// For an argument whose gradient is 0 by the math: ExpectGradcheck of every coordinate (the
// numeric gradient is then ~0 too), and every analytic coordinate within `bound` of 0, a
// rounding bound the caller derives and states.
inline void ExpectGradcheckOfZero(std::string_view name, const LossOf& loss,
                                  const std::vector<double>& x, const std::vector<double>& analytic,
                                  double bound) {
  SCOPED_TRACE(name);
  const GradcheckResult r = ExpectGradcheck(name, loss, x, analytic);
  EXPECT_EQ(r.checked, static_cast<int64_t>(x.size()));
  ASSERT_EQ(analytic.size(), x.size());
  for (double g : analytic) EXPECT_LT(std::abs(g), bound);
  std::printf("[ gradcheck ] %-34s %4lld coords  zero by the math (analytic and numeric)\n",
              std::string(name).c_str(), static_cast<long long>(r.checked));
}

}  // namespace stretch::testing
