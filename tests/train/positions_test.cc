// Position perturbation: randomized positions and PoSE's skipped chunks.
#include "src/train/positions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "src/core/error.h"

namespace stretch {
namespace {

using Kind = PositionPerturbation::Kind;

TEST(Positions, NoneIsZeroToTMinusOne) {
  const auto pos = PerturbedPositions({}, 1, 0, 2, 5);
  ASSERT_EQ(pos.size(), 10u);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 5; ++t) EXPECT_EQ(pos[b * 5 + t], t);
  }
}

TEST(Positions, RandomizedAreSortedDistinctBelowMaxAndReproducible) {
  const PositionPerturbation p = ParsePerturbation("randomized:max=100", "--perturb");
  EXPECT_EQ(p.kind, Kind::kRandomized);
  const int64_t B = 3, T = 20;
  const auto a = PerturbedPositions(p, 7, 4, B, T);
  EXPECT_EQ(a, PerturbedPositions(p, 7, 4, B, T));  // a pure function of (seed, step, row)
  EXPECT_NE(a, PerturbedPositions(p, 7, 5, B, T));
  EXPECT_NE(a, PerturbedPositions(p, 8, 4, B, T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t x = a[b * T + t];
      EXPECT_GE(x, 0);
      EXPECT_LT(x, 100);
      if (t > 0) {
        EXPECT_GT(x, a[b * T + t - 1]);
      }
    }
  }
  // max = T leaves one choice: 0 .. T-1.
  const auto tight = PerturbedPositions(ParsePerturbation("randomized:max=20", "f"), 1, 0, 1, T);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(tight[t], t);
}

// A uniform sorted sample of T from 0 .. M-1: the t-th smallest has mean (t + 1)(M + 1)/(T + 1) - 1.
// Over n = 4000 samples the mean's standard error is below sqrt(M^2/4 / n) = M/126; the bound
// of M/25 is 5 of those, so a correct sampler fails with probability far below 1e-6, while a
// sampler biased to the low or high end (or the identity) misses it by O(M).
TEST(Positions, RandomizedOrderStatisticsHaveTheUniformMeans) {
  const int64_t M = 1000, T = 8, n = 4000;
  const PositionPerturbation p = ParsePerturbation("randomized:max=1000", "f");
  std::vector<double> mean(T, 0.0);
  for (int64_t s = 0; s < n; ++s) {
    const auto pos = PerturbedPositions(p, 3, s, 1, T);
    for (int64_t t = 0; t < T; ++t) mean[t] += static_cast<double>(pos[t]) / n;
  }
  for (int64_t t = 0; t < T; ++t) {
    const double want = (t + 1.0) * (M + 1.0) / (T + 1.0) - 1.0;
    EXPECT_NEAR(mean[t], want, M / 25.0) << "t=" << t;
  }
}

TEST(Positions, PoseKeepsDistancesInsidePiecesAndSkipsBetween) {
  const PositionPerturbation p = ParsePerturbation("pose:max=500,chunks=3", "--perturb");
  EXPECT_EQ(p.kind, Kind::kPose);
  EXPECT_EQ(p.chunks, 3);
  const int64_t B = 50, T = 32;
  const auto pos = PerturbedPositions(p, 11, 2, B, T);
  int64_t rows_with_a_skip = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = pos.data() + b * T;
    EXPECT_EQ(row[0], 0);
    EXPECT_LT(row[T - 1], 500);
    int jumps = 0;
    for (int64_t t = 1; t < T; ++t) {
      EXPECT_GE(row[t] - row[t - 1], 1);
      jumps += row[t] - row[t - 1] > 1;
    }
    EXPECT_LE(jumps, 2);  // at most chunks - 1 skips
    rows_with_a_skip += jumps > 0;
  }
  EXPECT_GT(rows_with_a_skip, B / 2);  // skips are drawn from 0 .. 468: rarely all zero
  // One chunk: the window as it is.
  const auto one = PerturbedPositions(ParsePerturbation("pose:max=500,chunks=1", "f"), 1, 0, 1, T);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(one[t], t);
}

TEST(Positions, BadSpecsNameTheFlagAndWhatIsAllowed) {
  auto error = [](const std::string& spec) {
    try {
      ParsePerturbation(spec, "--perturb");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("jitter:max=5").find("unknown perturbation 'jitter'"), std::string::npos);
  EXPECT_NE(error("randomized").find("needs max=M"), std::string::npos);
  EXPECT_NE(error("randomized:max=0").find("max=0 is not a positive integer"), std::string::npos);
  EXPECT_NE(error("randomized:chunks=2,max=9").find("unknown key 'chunks'"), std::string::npos);
  EXPECT_NE(error("pose:max=x").find("--perturb"), std::string::npos);
  EXPECT_EQ(ParsePerturbation("none", "f").kind, Kind::kNone);
  EXPECT_THROW(CheckPerturbation(ParsePerturbation("pose:max=10", "f"), 64), Error);
  EXPECT_NO_THROW(CheckPerturbation(ParsePerturbation("pose:max=64", "f"), 64));
  EXPECT_EQ(ParsePerturbation("pose:max=64", "f").Spec(), "pose:max=64,chunks=2");
}

}  // namespace
}  // namespace stretch
