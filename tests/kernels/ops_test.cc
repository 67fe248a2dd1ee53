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

// RotatePairs runs its pairs on vectors, the last ones (fewer than a vector's worth) on a padded
// copy of the same vectors: every row length from 1 to 40 pairs crosses both parts on 4-, 8- and
// 16-lane targets. Each element must be the rounding the scalar loop had (one product rounded,
// then a fused multiply-add, where the CPU has one: compared bit for bit), and in any case within
// 2 float eps of the double rotation (two roundings of values at most |x0| + |x1|). The training
// forward and the backward (sign -1) rotate through the same code: bit for bit equal to it.
TEST(RotatePairs, VectorsAndTailRoundAsTheScalarFmaLoopForEveryLength) {
  for (int pairs = 1; pairs <= 40; ++pairs) {
    SCOPED_TRACE(pairs);
    const std::vector<float> x = RandomVector(2 * pairs, 20 + pairs, 3.0);
    const std::vector<float> angle = RandomVector(pairs, 90 + pairs, 100.0);
    std::vector<float> c(pairs), sn(pairs), neg_sn(pairs);
    for (int t = 0; t < pairs; ++t) {
      c[t] = static_cast<float>(std::cos(static_cast<double>(angle[t])));
      sn[t] = static_cast<float>(std::sin(static_cast<double>(angle[t])));
      neg_sn[t] = -sn[t];
    }
    std::vector<float> y = x;
    RotatePairs(y.data(), pairs, c.data(), sn.data());
    for (int t = 0; t < pairs; ++t) {
      const float x0 = x[2 * t], x1 = x[2 * t + 1];
#if defined(__FMA__)
      EXPECT_EQ(y[2 * t], std::fma(x0, c[t], -(x1 * sn[t]))) << t;
      EXPECT_EQ(y[2 * t + 1], std::fma(x0, sn[t], x1 * c[t])) << t;
#endif
      const double bound = 2 * 1.2e-7 * (std::fabs(x0) + std::fabs(x1));
      EXPECT_NEAR(y[2 * t], static_cast<double>(x0) * c[t] - static_cast<double>(x1) * sn[t],
                  bound);
      EXPECT_NEAR(y[2 * t + 1], static_cast<double>(x0) * sn[t] + static_cast<double>(x1) * c[t],
                  bound);
    }
    // One row, one head: the training forward equals RotatePairs; the backward (rotation by
    // -angle) equals RotatePairs with -sin.
    std::vector<float> f = x, b = x, want_b = x;
    RopeInterleavedForward<float>(f.data(), 1, 1, 2 * pairs, 2 * pairs,
                                  RopeAngles<float>{c.data(), sn.data(), 1, pairs});
    RopeInterleavedBackward<float>(b.data(), 1, 1, 2 * pairs, 2 * pairs,
                                   RopeAngles<float>{c.data(), sn.data(), 1, pairs});
    RotatePairs(want_b.data(), pairs, c.data(), neg_sn.data());
    for (int i = 0; i < 2 * pairs; ++i) {
      EXPECT_EQ(f[i], y[i]) << i;
      EXPECT_EQ(b[i], want_b[i]) << i;
    }
  }
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

// SwiGLU's float path computes exp on vectors (ExpF, attention_simd.h): checked here against double
// silu(g) u over the whole float range of g, a dense sweep and the edges where exp(-g)
// overflows (g < -88.72: silu = -0, as with std::exp) or vanishes (g > 87.3: silu = g). Every
// element within 4 float eps of the double value: ExpF's ~1 ulp, the division and the product.
TEST(SwiGlu, FloatVectorPathMatchesDoubleAcrossTheRange) {
  std::vector<float> g;
  for (float v = -120.0f; v <= 120.0f; v += 0.0137f) g.push_back(v);
  for (float v :
       {-1e30f, -200.0f, -88.73f, -88.7f, -87.34f, -1e-30f, 0.0f, 1e-30f, 87.34f, 88.7f, 1e30f})
    g.push_back(v);
  const std::vector<float> u = RandomVector(g.size(), 11, 2.0);
  std::vector<float> h(g.size());
  SwiGluForward<float>(g.data(), u.data(), h.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double gd = g[i];
    const double want = gd / (1.0 + std::exp(-gd)) * u[i];
    if (gd < -88.72) {
      EXPECT_EQ(h[i], 0.0f) << "g=" << g[i];  // exp(-g) overflows to inf in float
      continue;
    }
    EXPECT_NEAR(h[i], want, 4 * 0x1p-24 * std::abs(want)) << "g=" << g[i] << " u=" << u[i];
  }
}

// The products of one input run together (LinearForwardShared) give, bit for bit, what each
// LinearForward gives alone: for one row (decode: one parallel region over all their rows,
// blocks straddling the products) and for several rows (one product each). LinearForwardAdd
// adds exactly LinearForward's output when y starts at zero.
TEST(LinearForwardShared, EqualsTheProductsOneByOne) {
  const int64_t K = 96;
  const std::vector<int64_t> widths = {288, 64, 64, 200};  // rows of four maps, not multiples of 4
  std::vector<std::vector<float>> W;
  for (size_t j = 0; j < widths.size(); ++j) W.push_back(RandomVector(widths[j] * K, 20 + j));
  for (int64_t T : {1, 3, 130}) {
    const std::vector<float> x = RandomVector(T * K, 30);
    std::vector<std::vector<float>> alone(widths.size()), together(widths.size());
    std::vector<LinearOut<float>> outs;
    for (size_t j = 0; j < widths.size(); ++j) {
      alone[j].assign(T * widths[j], 0.0f);
      together[j].assign(T * widths[j], -1.0f);
      LinearForward<float>(x.data(), W[j].data(), alone[j].data(), T, K, widths[j]);
      outs.push_back({W[j].data(), together[j].data(), widths[j]});
    }
    LinearForwardShared<float>(x.data(), outs, T, K);
    for (size_t j = 0; j < widths.size(); ++j) {
      EXPECT_EQ(alone[j], together[j]) << "T=" << T << " product " << j;
      std::vector<float> added(T * widths[j], 0.0f);
      LinearForwardAdd<float>(x.data(), W[j].data(), added.data(), T, K, widths[j]);
      for (size_t i = 0; i < added.size(); ++i) {
        ASSERT_NEAR(added[i], alone[j][i], 1e-5 * (1 + std::abs(alone[j][i])))
            << "T=" << T << " product " << j << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace stretch
