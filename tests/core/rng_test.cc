#include "src/core/rng.h"

#include <gtest/gtest.h>

namespace stretch {
namespace {

TEST(Rng, SameSeedSameStream) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differs |= (x != c.NextU64());
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, UniformInUnitIntervalWithMeanOneHalf) {
  Rng rng(7);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float u = rng.Uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  // The mean of n uniforms has standard deviation 1/sqrt(12 n) ~ 0.0009; 5 sigma.
  EXPECT_NEAR(sum / n, 0.5, 0.0046);
}

}  // namespace
}  // namespace stretch
