#include "src/kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "reference/llama.h"
#include "src/core/rng.h"

namespace stretch {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();  // 2^-23

std::vector<float> RandomVector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.Normal());
  return v;
}

TEST(MatMulRows, MatchesDoubleProduct) {
  for (int64_t T : {1, 5, 64}) {
    const int64_t K = 37, N = 19;
    const auto x = RandomVector(static_cast<size_t>(T * K), 1);
    const auto w = RandomVector(static_cast<size_t>(N * K), 2);
    std::vector<float> y(static_cast<size_t>(T * N));
    MatMulRows(x.data(), w.data(), y.data(), T, K, N);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += static_cast<double>(x[t * K + k]) * w[n * K + k];
          mag += std::abs(static_cast<double>(x[t * K + k]) * w[n * K + k]);
        }
        // A float dot product of K terms errs by at most ~K eps sum|x_k w_k| (Higham 3.1).
        EXPECT_NEAR(y[t * N + n], ref, K * kEps * mag) << "T=" << T << " t=" << t << " n=" << n;
      }
    }
  }
}

TEST(RmsNorm, MatchesDouble) {
  const int64_t T = 3;
  const int C = 96;
  const auto x = RandomVector(T * C, 3, 5.0);
  const auto w = RandomVector(C, 4);
  std::vector<float> y(x.size());
  RmsNorm(x.data(), w.data(), y.data(), T, C, 1e-5f);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> row(x.begin() + t * C, x.begin() + (t + 1) * C);
    const std::vector<double> ref = ref::RmsNormRef(row, w, 1e-5);
    for (int c = 0; c < C; ++c) {
      // A few roundings of float per element (scale, multiply by w): 4 eps relative.
      EXPECT_NEAR(y[t * C + c], ref[c], 4 * kEps * std::abs(ref[c]) + 1e-30);
    }
  }
}

TEST(SwiGlu, MatchesDouble) {
  auto gate = RandomVector(1000, 5, 4.0);
  const auto up = RandomVector(1000, 6);
  const auto g0 = gate;
  SwiGlu(gate.data(), up.data(), 1000);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = g0[i];
    const double ref = g / (1 + std::exp(-g)) * up[i];
    // std::exp in float is within 1 ulp; with the division and two products, 8 eps relative.
    EXPECT_NEAR(gate[i], ref, 8 * kEps * std::abs(ref) + 1e-30) << "g=" << g;
  }
}

TEST(RopeInterleaved, MatchesReferenceRotationAtEveryPosition) {
  const int D = 16, heads = 3;
  const int64_t T = 50, pos0 = 1000;  // far positions: angles up to ~1050 rad
  const auto thetas = RopeThetas(10000.0, D);
  const RopeTable table = MakeRopeTable(thetas, pos0, T);
  auto x = RandomVector(static_cast<size_t>(T * heads * D), 7);
  const auto x0 = x;
  RopeInterleaved(x.data(), T, heads, heads * D, D, table);
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < heads; ++h) {
      std::vector<double> v(x0.begin() + (t * heads + h) * D, x0.begin() + (t * heads + h + 1) * D);
      ref::RotateRef(v.data(), D, static_cast<double>(pos0 + t), 10000.0);
      for (int d = 0; d < D; ++d) {
        // cos/sin rounded to float (eps/2 each), two products and a sum: |x| * 3 eps bound.
        const double mag =
            std::abs(x0[(t * heads + h) * D + (d ^ 1)]) + std::abs(x0[(t * heads + h) * D + d]);
        EXPECT_NEAR(x[(t * heads + h) * D + d], v[d], 3 * kEps * mag) << "t=" << t << " d=" << d;
      }
    }
  }
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
