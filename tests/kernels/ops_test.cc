// The inference ops' checks beyond the op harness: MatMulRows, RmsNorm, SwiGlu and
// RopeInterleaved against their double references are rows of tests/kernels/op_harness_test.cc.
#include "src/kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/rng.h"

namespace stretch {
namespace {

std::vector<float> RandomVector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.Normal());
  return v;
}

TEST(RopeThetas, FollowTheRoFormerFormula) {
  // theta_t = base^(-2t/d): for d = 8, base 10000: 1, 0.1, 0.01, 0.001 exactly (10^-t).
  const auto th = RopeThetas(10000.0, 8);
  ASSERT_EQ(th.size(), 4u);
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(th[t], std::pow(10.0, -t), 1e-15);
}

TEST(CrossEntropyRow, MatchesDoubleLogSoftmaxAndArgmax) {
  const int V = 300;
  auto logits = RandomVector(V, 8, 10.0);
  logits[123] = 60.0f;  // a clear winner
  for (int target : {0, 123, 299}) {
    const TokenLoss tl = CrossEntropyRow(logits.data(), V, target);
    double max = -1e300, sum = 0;
    for (float v : logits) max = std::max<double>(max, v);
    for (float v : logits) sum += std::exp(v - max);
    const double ref = std::log(sum) + max - logits[target];
    EXPECT_NEAR(tl.loss, ref, 1e-12 * std::max(1.0, ref));
    EXPECT_EQ(tl.argmax, 123);
  }
}

}  // namespace
}  // namespace stretch
