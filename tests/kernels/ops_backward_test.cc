// Backward passes of the row-wise ops (src/kernels/ops.h):
//   - Gradcheck*:             the harness itself (tests/testing/gradcheck.h) accepts an exact
//                             gradient and reports a wrong one with its coordinate;
//   - OpsBackwardGradcheck*:  each op in double against central differences, for every input and
//                             parameter, of L = sum(out * R) with a fixed random R (so every output
//                             element matters); each check is also shown to reject the same
//                             gradient with its largest coordinate off by 1%. Linear, RmsNorm and
//                             SwiGlu are the op harness's gradient rows alone
//                             (tests/kernels/op_harness_test.cc); the ops here add strides, zero
//                             rows, repeated tokens, accumulation and unscored rows;
//   - OpsBackwardFloat*:      the float instances against the double ones on the same (float)
//                             values, at training-like shapes, with bounds derived per op;
//   - OpsBackward*:           the float training forwards equal the inference forms bit for bit,
//                             accumulation, in-place use and the always-on checks.
// Shapes: T rows, C channels, K/N linear in/out, F FFN width, V vocabulary, D head dim, H heads.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kernels/ops.h"
#include "src/position/rope.h"
#include "tests/testing/gradcheck.h"

namespace stretch {
namespace {

using testing::ExpectGradcheck;
using testing::ExpectGradcheckFlagsOnePercent;
using testing::Gradcheck;
using testing::GradcheckOptions;
using testing::GradcheckResult;

constexpr double kEpsF = std::numeric_limits<float>::epsilon();  // 2^-23

std::vector<double> RandomDoubles(size_t n, uint64_t seed, double scale = 1.0, double mean = 0.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = mean + scale * rng.Normal();
  return v;
}
// Random values that are floats, held as doubles: the float and double runs see the same inputs.
std::vector<double> RandomFloatValues(size_t n, uint64_t seed, double scale = 1.0,
                                      double mean = 0.0) {
  std::vector<double> v = RandomDoubles(n, seed, scale, mean);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}
std::vector<float> ToFloat(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> Abs(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}
double Dot(std::span<const double> a, std::span<const double> b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
template <typename Real>
bool BitEqual(const std::vector<Real>& a, const std::vector<Real>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Real)) == 0;
}

// ---- The harness ----------------------------------------------------------------------------

// f(x) = sum_i sin(x_i) x_{i+1} + exp(x_0 / 2), gradient by hand.
double KnownLoss(std::span<const double> x) {
  double f = std::exp(x[0] / 2);
  for (size_t i = 0; i + 1 < x.size(); ++i) f += std::sin(x[i]) * x[i + 1];
  return f;
}
std::vector<double> KnownGradient(const std::vector<double>& x) {
  std::vector<double> g(x.size(), 0.0);
  g[0] = std::exp(x[0] / 2) / 2;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    g[i] += std::cos(x[i]) * x[i + 1];
    g[i + 1] += std::sin(x[i]);
  }
  return g;
}

TEST(Gradcheck, AcceptsTheExactGradientOfAKnownFunction) {
  const auto x = RandomDoubles(12, 1);
  const GradcheckResult r = ExpectGradcheck("known", KnownLoss, x, KnownGradient(x));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.checked, 12);
  EXPECT_EQ(r.size, 12);
  EXPECT_EQ(r.loss, KnownLoss(x));
  // The derivation in gradcheck.h expects ~1e-8 relative or better for a correct gradient.
  EXPECT_LT(r.max_rel_error, 1e-8);
  // The default allowance is the documented formula.
  EXPECT_DOUBLE_EQ(r.atol, 1000 * std::numeric_limits<double>::epsilon() *
                               std::max(1.0, std::abs(r.loss)) / 1e-5);
  EXPECT_EQ(r.rtol, 1e-6);
}

TEST(Gradcheck, ReportsTheCoordinateOfAGradientOffByOnePercent) {
  const auto x = RandomDoubles(12, 2);
  auto g = KnownGradient(x);
  g[5] *= 1.01;
  const GradcheckResult r = Gradcheck(KnownLoss, x, g);
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_EQ(r.mismatches[0].index, 5);
  EXPECT_EQ(r.mismatches[0].analytic, g[5]);
  EXPECT_NEAR(r.mismatches[0].numeric, g[5] / 1.01, 1e-8 * std::abs(g[5]));
  // Through GoogleTest: a non-fatal failure that names coordinate, analytic and numeric values.
  EXPECT_NONFATAL_FAILURE(ExpectGradcheck("known, wrong", KnownLoss, x, g),
                          "coordinate 5: analytic");
}

TEST(Gradcheck, FailsOnNanAndOnASizeMismatch) {
  const auto x = RandomDoubles(6, 3);
  auto g = KnownGradient(x);
  g[2] = std::numeric_limits<double>::quiet_NaN();
  const GradcheckResult r = Gradcheck(KnownLoss, x, g);
  ASSERT_EQ(r.mismatches.size(), 1u);
  EXPECT_EQ(r.mismatches[0].index, 2);
  g.pop_back();
  EXPECT_FALSE(Gradcheck(KnownLoss, x, g).ok());
}

TEST(Gradcheck, ChecksTheStatedRandomSubset) {
  const auto x = RandomDoubles(40, 4);
  auto g = KnownGradient(x);
  for (double& v : g) v *= 1.01;  // every coordinate wrong: the mismatches are the checked ones
  GradcheckOptions options;
  options.max_coords = 7;
  const GradcheckResult a = Gradcheck(KnownLoss, x, g, options);
  EXPECT_EQ(a.checked, 7);
  ASSERT_EQ(a.mismatches.size(), 7u);
  for (size_t k = 1; k < a.mismatches.size(); ++k) {
    EXPECT_LT(a.mismatches[k - 1].index, a.mismatches[k].index);  // distinct, sorted
  }
  options.seed = 2;
  const GradcheckResult b = Gradcheck(KnownLoss, x, g, options);
  bool differ = false;
  for (size_t k = 0; k < 7; ++k) differ |= a.mismatches[k].index != b.mismatches[k].index;
  EXPECT_TRUE(differ) << "another seed should draw another subset";
  const GradcheckResult c = Gradcheck(KnownLoss, x, KnownGradient(x), options);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.checked, 7);
}

// ---- Gradient checks in double, op by op ----------------------------------------------------

TEST(OpsBackwardGradcheck, EmbeddingWithARepeatedToken) {
  const int V = 5, C = 8;
  const std::vector<int> tokens = {3, 0, 3, 1};  // 3 twice; 2 and 4 never
  const int64_t T = static_cast<int64_t>(tokens.size());
  const auto E = RandomDoubles(V * C, 20);
  const auto R = RandomDoubles(T * C, 21);
  auto loss_E = [&](std::span<const double> Ev) {
    std::vector<double> out(T * C);
    EmbeddingForward<double>(tokens.data(), Ev.data(), out.data(), T, C, V);
    return Dot(out, R);
  };
  std::vector<double> dE(V * C, 0.0);
  EmbeddingBackward<double>(tokens.data(), R.data(), dE.data(), T, C, V);
  ExpectGradcheckFlagsOnePercent("Embedding dE", loss_E, E, dE);
  for (int c = 0; c < C; ++c) {  // the repeated token's row is the sum of its two rows
    EXPECT_EQ(dE[3 * C + c], R[0 * C + c] + R[2 * C + c]);
    EXPECT_EQ(dE[2 * C + c], 0.0);
  }
}

TEST(OpsBackwardGradcheck, L2NormalizeWithAZeroRow) {
  const int64_t rows = 3;
  const int D = 6;
  auto x = RandomDoubles(rows * D, 43);
  const auto R = RandomDoubles(rows * D, 44);
  auto loss = [&](std::span<const double> xv) {
    std::vector<double> y(rows * D);
    L2NormalizeForward<double>(xv.data(), y.data(), rows, D);
    return Dot(y, R);
  };
  std::vector<double> dx(rows * D);
  L2NormalizeBackward<double>(R.data(), x.data(), dx.data(), rows, D);
  ExpectGradcheckFlagsOnePercent("L2Normalize dx", loss, x, dx);
  // A zero row: the forward gives zeros, the backward passes no gradient.
  std::fill(x.begin(), x.begin() + D, 0.0);
  std::vector<double> y(rows * D);
  L2NormalizeForward<double>(x.data(), y.data(), rows, D);
  L2NormalizeBackward<double>(R.data(), x.data(), dx.data(), rows, D);
  for (int d = 0; d < D; ++d) {
    EXPECT_EQ(y[d], 0.0);
    EXPECT_EQ(dx[d], 0.0);
  }
}

TEST(OpsBackwardGradcheck, RopeStridedHeads) {
  const int64_t T = 3;
  const int H = 2, D = 8, pairs = D / 2;
  const int64_t head_stride = D, row_stride = H * D + 3;  // 3 padding values per row stay as is
  Rng rng(50);
  std::vector<double> cos(T * pairs), sin(T * pairs);
  for (size_t i = 0; i < cos.size(); ++i) {
    const double a = 2 * std::numbers::pi * (rng.UniformDouble() - 0.5) * 40;  // many turns
    cos[i] = std::cos(a);
    sin[i] = std::sin(a);
  }
  const RopeAngles<double> angles{cos.data(), sin.data(), T, pairs};
  const auto x = RandomDoubles(T * row_stride, 51);
  const auto R = RandomDoubles(T * row_stride, 52);
  auto loss_x = [&](std::span<const double> xv) {
    std::vector<double> y(xv.begin(), xv.end());
    RopeInterleavedForward<double>(y.data(), T, H, row_stride, head_stride, angles);
    return Dot(y, R);
  };
  std::vector<double> dx = R;
  RopeInterleavedBackward<double>(dx.data(), T, H, row_stride, head_stride, angles);
  ExpectGradcheckFlagsOnePercent("Rope dx", loss_x, x, dx);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = H * D; j < row_stride; ++j)
      EXPECT_EQ(dx[t * row_stride + j], R[t * row_stride + j]);
  }
}

TEST(OpsBackwardGradcheck, PairScaleStridedHeads) {
  const int64_t T = 3;
  const int H = 2, D = 6, pairs = D / 2;
  const int64_t head_stride = D, row_stride = H * D + 2;  // 2 padding values per row stay as is
  const auto factors = RandomDoubles(T * pairs, 53);      // of both signs, like any table
  const auto x = RandomDoubles(T * row_stride, 54);
  const auto R = RandomDoubles(T * row_stride, 55);
  auto loss = [&](std::span<const double> xv) {
    std::vector<double> y(xv.begin(), xv.end());
    PairScaleForward<double>(y.data(), T, H, row_stride, head_stride, pairs, factors.data());
    return Dot(y, R);
  };
  std::vector<double> dx = R;
  PairScaleBackward<double>(dx.data(), T, H, row_stride, head_stride, pairs, factors.data());
  ExpectGradcheckFlagsOnePercent("PairScale dx", loss, x, dx);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = H * D; j < row_stride; ++j)
      EXPECT_EQ(dx[t * row_stride + j], R[t * row_stride + j]);
  }
}

TEST(OpsBackwardGradcheck, HeadScaleInputAndLearnedScale) {
  const int64_t T = 4;
  const int H = 3, D = 5;
  std::vector<double> w(T);
  for (int64_t t = 0; t < T; ++t) w[t] = std::log(static_cast<double>(t) + 1.0);  // SSMax's ln n
  const auto x = RandomDoubles(T * H * D, 56);
  const auto s = RandomDoubles(H, 57);
  const auto R = RandomDoubles(T * H * D, 58);
  auto loss_x = [&](std::span<const double> xv) {
    std::vector<double> y(xv.begin(), xv.end());
    HeadScaleForward<double>(y.data(), T, H, D, w.data(), s.data());
    return Dot(y, R);
  };
  auto loss_s = [&](std::span<const double> sv) {
    std::vector<double> y = x;
    HeadScaleForward<double>(y.data(), T, H, D, w.data(), sv.data());
    return Dot(y, R);
  };
  std::vector<double> dx = R, ds(H, 0.25);  // ds accumulates onto what is there
  HeadScaleBackward<double>(dx.data(), x.data(), T, H, D, w.data(), s.data(), ds.data());
  for (double& g : ds) g -= 0.25;
  ExpectGradcheckFlagsOnePercent("HeadScale dx", loss_x, x, dx);
  ExpectGradcheckFlagsOnePercent("HeadScale ds", loss_s, s, ds);
}

TEST(OpsBackwardGradcheck, CrossEntropyWithAnUnscoredRow) {
  const int64_t T = 4;
  const int V = 7;
  const std::vector<int> targets = {3, kNotScored, 0, 6};
  const auto logits = RandomDoubles(T * V, 60, 2.0);
  const double dloss = 0.7;  // the upstream gradient of the mean: L = 0.7 * mean
  auto loss = [&](std::span<const double> lv) {
    return dloss * CrossEntropyForward<double>(lv.data(), targets.data(), T, V).mean;
  };
  std::vector<double> dlogits(T * V, 123.0);  // overwritten, also the unscored row
  CrossEntropyBackward<double>(logits.data(), targets.data(), dlogits.data(), T, V, dloss);
  ExpectGradcheckFlagsOnePercent("CrossEntropy dlogits", loss, logits, dlogits);
  for (int i = 0; i < V; ++i) EXPECT_EQ(dlogits[1 * V + i], 0.0);
  EXPECT_EQ(CrossEntropyForward<double>(logits.data(), targets.data(), T, V).scored, 3);
}

// ---- Float against double at training-like shapes -------------------------------------------
// Inputs are float values (held in doubles too), so the two runs differ only by float rounding
// in the float run. Each bound is a first-order rounding analysis of the float path with a margin
// of 2; magnitudes are computed in double from the absolute values of the terms.

// Largest |f - d| / tol over the elements, expecting <= 1; reports the element that fails.
template <typename Tol>
double ExpectWithin(const char* what, const std::vector<float>& f, const std::vector<double>& d,
                    Tol tol) {
  double worst = 0.0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double err = std::abs(static_cast<double>(f[i]) - d[i]), allowed = tol(i);
    worst = std::max(worst, err / allowed);
    if (!(err <= allowed)) {
      ADD_FAILURE() << what << "[" << i << "]: float " << f[i] << ", double " << d[i] << ", |diff| "
                    << err << " > " << allowed;
      return worst;
    }
  }
  std::printf("[ float/dbl ] %-24s max err/allowed %.3f\n", what, worst);
  return worst;
}

TEST(OpsBackwardFloat, LinearMatchesDouble) {
  const int64_t T = 64, K = 256, N = 192;
  const auto x = RandomFloatValues(T * K, 70), W = RandomFloatValues(N * K, 71, 0.06);
  const auto dy = RandomFloatValues(T * N, 72), dW0 = RandomFloatValues(N * K, 73);
  const auto dx0 = RandomFloatValues(T * K, 74);
  std::vector<double> dx = dx0, dW = dW0;
  LinearBackward<double>(dy.data(), x.data(), W.data(), dx.data(), dW.data(), T, K, N,
                         GradWrite::kAccumulate);
  std::vector<float> dxf = ToFloat(dx0), dWf = ToFloat(dW0);
  LinearBackward<float>(ToFloat(dy).data(), ToFloat(x).data(), ToFloat(W).data(), dxf.data(),
                        dWf.data(), T, K, N, GradWrite::kAccumulate);
  // Magnitudes sum_n |dy||W| + |dx0| and sum_t |dy||x| + |dW0|: the same op on absolute values.
  std::vector<double> mdx = Abs(dx0), mdW = Abs(dW0);
  LinearBackward<double>(Abs(dy).data(), Abs(x).data(), Abs(W).data(), mdx.data(), mdW.data(), T, K,
                         N, GradWrite::kAccumulate);
  // A float dot product of n terms plus one more errs by at most (n + 1) eps sum|terms|
  // (Higham, Accuracy and Stability, 2nd ed., eq. 3.5, gamma_n ~ n eps / 2 per term, doubled).
  ExpectWithin("Linear dx", dxf, dx, [&](size_t i) { return (N + 1) * kEpsF * mdx[i]; });
  ExpectWithin("Linear dW", dWf, dW, [&](size_t i) { return (T + 1) * kEpsF * mdW[i]; });
}

TEST(OpsBackwardFloat, EmbeddingMatchesDouble) {
  const int64_t T = 512;
  const int V = 100, C = 256;  // ~5 rows per token; T * C above the threads' threshold
  Rng rng(80);
  std::vector<int> tokens(T);
  for (int& t : tokens) t = static_cast<int>(rng.NextU64() % V);
  const auto dout = RandomFloatValues(T * C, 81), dE0 = RandomFloatValues(V * C, 82);
  std::vector<double> dE = dE0, mag = Abs(dE0);
  EmbeddingBackward<double>(tokens.data(), dout.data(), dE.data(), T, C, V);
  EmbeddingBackward<double>(tokens.data(), Abs(dout).data(), mag.data(), T, C, V);
  std::vector<float> dEf = ToFloat(dE0);
  EmbeddingBackward<float>(tokens.data(), ToFloat(dout).data(), dEf.data(), T, C, V);
  std::vector<int> count(V, 0);
  for (int t : tokens) ++count[t];
  // A float sum of n + 1 terms in order: at most n eps sum|terms| (Higham eq. 4.4, doubled).
  ExpectWithin("Embedding dE", dEf, dE,
               [&](size_t i) { return (count[i / C] + 1) * kEpsF * mag[i] + 1e-30; });
}

TEST(OpsBackwardFloat, RmsNormMatchesDouble) {
  const int64_t T = 300;  // T * C above the threads' threshold
  const int C = 256;
  const float eps = 1e-5f;
  const auto x = RandomFloatValues(T * C, 90, 2.0, 0.5), w = RandomFloatValues(C, 91, 0.1, 1.0);
  const auto dout = RandomFloatValues(T * C, 92), dx0 = RandomFloatValues(T * C, 93);
  const auto dw0 = RandomFloatValues(C, 94);
  std::vector<double> dx = dx0, dw = dw0;
  RmsNormBackward<double>(dout.data(), x.data(), w.data(), dx.data(), dw.data(), T, C, eps,
                          GradWrite::kAccumulate);
  std::vector<float> dxf = ToFloat(dx0), dwf = ToFloat(dw0);
  RmsNormBackward<float>(ToFloat(dout).data(), ToFloat(x).data(), ToFloat(w).data(), dxf.data(),
                         dwf.data(), T, C, eps, GradWrite::kAccumulate);
  // Magnitudes: m_dx[j] = |dx0[j]| + inv (|dout[j] w[j]| + |x[j]| inv^2 sum_c |dout w x| / C),
  //             m_dw[c] = |dw0[c]| + sum_t |dout x| inv.
  std::vector<double> mdx(T * C), mdw = Abs(dw0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0, sabs = 0;
    for (int c = 0; c < C; ++c) ss += x[t * C + c] * x[t * C + c];
    const double inv = 1 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) sabs += std::abs(dout[t * C + c] * w[c] * x[t * C + c]);
    for (int c = 0; c < C; ++c) {
      const size_t i = t * C + c;
      mdx[i] = std::abs(dx0[i]) +
               inv * (std::abs(dout[i] * w[c]) + std::abs(x[i]) * inv * inv * sabs / C);
      mdw[c] += std::abs(dout[i] * x[i]) * inv;
    }
  }
  // dx: inv rounded to float (eps/2), coef = inv^2 S / C rounded (S in double: 3 eps/2 in all),
  // then two products, a difference, a product by inv and the accumulation in float (eps/2
  // each): ~4.5 eps m_dx to first order; allowed 9 eps.
  ExpectWithin("RmsNorm dx", dxf, dx, [&](size_t i) { return 9 * kEpsF * mdx[i]; });
  // dw: sums in double of exact products times float inv (eps/2), the sum rounded to float and
  // added to dw0 (eps/2 each): 1.5 eps m_dw; allowed 3 eps.
  ExpectWithin("RmsNorm dw", dwf, dw, [&](size_t i) { return 3 * kEpsF * mdw[i]; });
}

TEST(OpsBackwardFloat, SwiGluMatchesDouble) {
  const int64_t n = 256 * 768 + 5;  // T = 256, F = 768, and a partial last vector
  const auto g = RandomFloatValues(n, 100, 4.0), u = RandomFloatValues(n, 101);
  const auto dh = RandomFloatValues(n, 102);
  std::vector<double> dg(n), du(n);
  SwiGluBackward<double>(dh.data(), g.data(), u.data(), dg.data(), du.data(), n);
  std::vector<float> dgf(n), duf(n);
  SwiGluBackward<float>(ToFloat(dh).data(), ToFloat(g).data(), ToFloat(u).data(), dgf.data(),
                        duf.data(), n);
  auto sigmoid = [&](size_t i) { return 1 / (1 + std::exp(-g[i])); };
  // s = 1 / (1 + exp(-g)) in float: the vector ExpF within eps (attention_simd.h), the sum and
  // the quotient eps/2 each: s within 2 eps relative. du = dh * (g s): 3 eps |du|; allowed 5 eps.
  ExpectWithin("SwiGlu du", duf, du, [&](size_t i) { return 5 * kEpsF * std::abs(du[i]) + 1e-30; });
  // dg = dh u s (1 + g (1 - s)): 1 - s errs by 2 eps s + eps/2 |1 - s| <= 2.5 eps absolute, so
  // g (1 - s) by 3 eps |g|; with 1 + ..., s and the three products: ~7 eps |dh u| s (1 + |g|)
  // to first order; allowed 12 eps.
  ExpectWithin("SwiGlu dg", dgf, dg, [&](size_t i) {
    return 12 * kEpsF * std::abs(dh[i] * u[i]) * sigmoid(i) * (1 + std::abs(g[i])) + 1e-30;
  });
}

TEST(OpsBackwardFloat, SiluMatchesDouble) {
  // The GAU block's SiLU backward, in place as gau_layer.h calls it (dh written over dy), on a
  // length with a partial last vector.
  const int64_t n = 4096 + 7;
  auto h = RandomFloatValues(n, 103, 4.0);
  const auto dy = RandomFloatValues(n, 104);
  // The edges: exp(-h) overflows in float (h < -88.72: s = 0, dh a zero) or vanishes (h > 87.34:
  // s = 1, dh = dy), in a vector and in the partial last one.
  for (const int64_t at : {int64_t{0}, n - 2}) {
    h[at] = -100.0;
    h[at + 1] = 100.0;
  }
  std::vector<double> dh(n);
  SiluBackward<double>(dy.data(), h.data(), dh.data(), n);
  std::vector<float> dhf = ToFloat(dy);
  SiluBackward<float>(dhf.data(), ToFloat(h).data(), dhf.data(), n);
  // dh = dy s (1 + h (1 - s)), s as in SwiGluMatchesDouble: ~7 eps |dy| s (1 + |h|); allowed
  // 12 eps.
  ExpectWithin("Silu dh", dhf, dh, [&](size_t i) {
    return 12 * kEpsF * std::abs(dy[i]) / (1 + std::exp(-h[i])) * (1 + std::abs(h[i])) + 1e-30;
  });
  for (const int64_t at : {int64_t{0}, n - 2}) {
    EXPECT_EQ(dhf[at], 0.0f) << at;
    EXPECT_EQ(dhf[at + 1], static_cast<float>(dy[at + 1])) << at;
  }
}

TEST(OpsBackwardFloat, RopeMatchesDouble) {
  const int64_t T = 300;
  const int H = 8, D = 64;
  const RopeTable table = MakeRopeTable(RopeThetas(10000.0, D), 1000, T);
  const std::vector<double> cos(table.cos.begin(), table.cos.end());
  const std::vector<double> sin(table.sin.begin(), table.sin.end());
  const auto dy = RandomFloatValues(T * H * D, 110);
  std::vector<double> dx = dy;
  RopeInterleavedBackward<double>(dx.data(), T, H, H * D, D, {cos.data(), sin.data(), T, D / 2});
  std::vector<float> dxf = ToFloat(dy);
  RopeInterleavedBackward<float>(dxf.data(), T, H, H * D, D, AnglesOf(table));
  // Two products and a sum in float: eps (|dy0 cos| + |dy1 sin|) at most; allowed 2 eps.
  ExpectWithin("Rope dx", dxf, dx, [&](size_t i) {
    const size_t p = (i % D) / 2, r = i / (H * D), j = i ^ 1;  // j: the other of the pair
    return 2 * kEpsF *
               (std::abs(dy[i] * cos[r * D / 2 + p]) + std::abs(dy[j] * sin[r * D / 2 + p])) +
           1e-30;
  });
}

TEST(OpsBackwardFloat, CrossEntropyMatchesDouble) {
  const int64_t T = 256;
  const int V = 512;
  const auto logits = RandomFloatValues(T * V, 120, 3.0);
  std::vector<int> targets(T);
  Rng rng(121);
  for (int& t : targets) t = static_cast<int>(rng.NextU64() % V);
  targets[7] = kNotScored;
  std::vector<double> d(T * V);
  CrossEntropyBackward<double>(logits.data(), targets.data(), d.data(), T, V, 1.0);
  std::vector<float> df(T * V);
  const std::vector<float> lf = ToFloat(logits);
  CrossEntropyBackward<float>(lf.data(), targets.data(), df.data(), T, V, 1.0);
  // Both runs do the arithmetic in double on the same values; the float run rounds exp(l - max)
  // to float and then the result (eps/2 each): eps |d| at most; allowed 2 eps.
  ExpectWithin("CrossEntropy dlogits", df, d,
               [&](size_t i) { return 2 * kEpsF * std::abs(d[i]) + 1e-30; });
  // The loss: the same double arithmetic on the same values: equal to double rounding.
  const double mf = CrossEntropyForward<float>(lf.data(), targets.data(), T, V).mean;
  const double md = CrossEntropyForward<double>(logits.data(), targets.data(), T, V).mean;
  EXPECT_NEAR(mf, md, 1e-14 * md);
}

// ---- Training forwards are the inference forwards, bit for bit ------------------------------

TEST(OpsBackward, FloatForwardsEqualTheInferenceForms) {
  for (int64_t T : {1, 37}) {
    const int64_t K = 48, N = 40;
    const auto x = ToFloat(RandomDoubles(T * K, 130)), W = ToFloat(RandomDoubles(N * K, 131));
    std::vector<float> a(T * N), b(T * N);
    MatMulRows(x.data(), W.data(), a.data(), T, K, N);
    LinearForward<float>(x.data(), W.data(), b.data(), T, K, N);
    EXPECT_TRUE(BitEqual(a, b)) << "Linear T=" << T;
  }
  {
    const int64_t T = 5;
    const int C = 96;
    const auto x = ToFloat(RandomDoubles(T * C, 132, 3.0)), w = ToFloat(RandomDoubles(C, 133));
    std::vector<float> a(T * C), b(T * C), c = x;
    RmsNorm(x.data(), w.data(), a.data(), T, C, 1e-5f);
    RmsNormForward<float>(x.data(), w.data(), b.data(), T, C, 1e-5f);
    RmsNormForward<float>(c.data(), w.data(), c.data(), T, C, 1e-5f);  // in place
    EXPECT_TRUE(BitEqual(a, b)) << "RmsNorm";
    EXPECT_TRUE(BitEqual(a, c)) << "RmsNorm in place";
  }
  {
    const int64_t n = 1000;
    auto g = ToFloat(RandomDoubles(n, 134, 4.0));
    const auto u = ToFloat(RandomDoubles(n, 135));
    std::vector<float> b(n);
    SwiGluForward<float>(g.data(), u.data(), b.data(), n);
    SwiGlu(g.data(), u.data(), n);
    EXPECT_TRUE(BitEqual(g, b)) << "SwiGlu";
  }
  {
    const int64_t T = 20;
    const int H = 3, D = 16;
    const RopeTable table = MakeRopeTable(RopeThetas(10000.0, D), 500, T);
    auto a = ToFloat(RandomDoubles(T * H * D, 136));
    auto b = a;
    RopeInterleaved(a.data(), T, H, H * D, D, table);
    RopeInterleavedForward<float>(b.data(), T, H, H * D, D, AnglesOf(table));
    EXPECT_TRUE(BitEqual(a, b)) << "Rope";
  }
  {
    const int64_t T = 9;
    const int V = 300;
    const auto l = ToFloat(RandomDoubles(T * V, 137, 5.0));
    std::vector<int> targets = {0, 299, kNotScored, 5, 17, kNotScored, 100, 3, 250};
    double sum = 0;
    int64_t scored = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (targets[t] == kNotScored) continue;
      sum += CrossEntropyRow(l.data() + t * V, V, targets[t]).loss;
      ++scored;
    }
    const MeanLoss m = CrossEntropyForward<float>(l.data(), targets.data(), T, V);
    EXPECT_EQ(m.scored, scored);
    EXPECT_EQ(m.mean, sum / scored) << "CrossEntropy";
  }
}

// ---- Accumulation, in place, the edges ------------------------------------------------------

TEST(OpsBackward, InputAndParameterGradientsAccumulate) {
  const int64_t T = 6, K = 10, N = 7;
  const int C = 10, V = 4;
  const auto x = RandomDoubles(T * K, 140), W = RandomDoubles(N * K, 141),
             dy = RandomDoubles(T * N, 142);
  const auto dx0 = RandomDoubles(T * K, 143), dW0 = RandomDoubles(N * K, 144);
  // Linear: kAccumulate adds what kOverwrite writes; dW always adds.
  std::vector<double> dx1(T * K, 7.0), dW1(N * K, 0.0), dx2 = dx0, dW2 = dW0;
  LinearBackward<double>(dy.data(), x.data(), W.data(), dx1.data(), dW1.data(), T, K, N,
                         GradWrite::kOverwrite);
  LinearBackward<double>(dy.data(), x.data(), W.data(), dx2.data(), dW2.data(), T, K, N,
                         GradWrite::kAccumulate);
  for (size_t i = 0; i < dx1.size(); ++i)
    EXPECT_NEAR(dx2[i], dx0[i] + dx1[i], 1e-14 * (std::abs(dx0[i]) + 10));
  for (size_t i = 0; i < dW1.size(); ++i)
    EXPECT_NEAR(dW2[i], dW0[i] + dW1[i], 1e-14 * (std::abs(dW0[i]) + 10));
  // dx may be null: only dW.
  std::vector<double> dW3(N * K, 0.0);
  LinearBackward<double>(dy.data(), x.data(), W.data(), nullptr, dW3.data(), T, K, N,
                         GradWrite::kOverwrite);
  EXPECT_EQ(dW3, dW1);
  // RMSNorm: the same.
  const auto w = RandomDoubles(C, 145, 0.1, 1.0), dout = RandomDoubles(T * C, 146);
  std::vector<double> rx1(T * C, 7.0), rw1(C, 0.0), rx2 = dx0, rw2 = RandomDoubles(C, 147);
  const auto rw0 = rw2;
  RmsNormBackward<double>(dout.data(), x.data(), w.data(), rx1.data(), rw1.data(), T, C, 1e-5,
                          GradWrite::kOverwrite);
  RmsNormBackward<double>(dout.data(), x.data(), w.data(), rx2.data(), rw2.data(), T, C, 1e-5,
                          GradWrite::kAccumulate);
  for (size_t i = 0; i < rx1.size(); ++i)
    EXPECT_NEAR(rx2[i], dx0[i] + rx1[i], 1e-14 * (std::abs(dx0[i]) + 10));
  for (int c = 0; c < C; ++c) EXPECT_NEAR(rw2[c], rw0[c] + rw1[c], 1e-14 * (std::abs(rw0[c]) + 10));
  // Embedding: dE adds.
  const std::vector<int> tokens = {1, 1, 3, 0, 1, 2};
  const auto E0 = RandomDoubles(V * C, 148);
  std::vector<double> dE1(V * C, 0.0), dE2 = E0;
  EmbeddingBackward<double>(tokens.data(), dout.data(), dE1.data(), T, C, V);
  EmbeddingBackward<double>(tokens.data(), dout.data(), dE2.data(), T, C, V);
  for (size_t i = 0; i < dE1.size(); ++i)
    EXPECT_NEAR(dE2[i], E0[i] + dE1[i], 1e-14 * (std::abs(E0[i]) + 10));
}

TEST(OpsBackward, InPlaceFormsEqualOutOfPlace) {
  const int64_t T = 5;
  const int C = 12, V = 9;
  // RMSNorm: dx over dout.
  const auto x = ToFloat(RandomDoubles(T * C, 150)), w = ToFloat(RandomDoubles(C, 151, 0.1, 1.0));
  const auto dout = ToFloat(RandomDoubles(T * C, 152));
  std::vector<float> dx(T * C), dw1(C, 0.0f), d = dout, dw2(C, 0.0f);
  RmsNormBackward<float>(dout.data(), x.data(), w.data(), dx.data(), dw1.data(), T, C, 1e-5f,
                         GradWrite::kOverwrite);
  RmsNormBackward<float>(d.data(), x.data(), w.data(), d.data(), dw2.data(), T, C, 1e-5f,
                         GradWrite::kOverwrite);
  EXPECT_TRUE(BitEqual(dx, d));
  EXPECT_TRUE(BitEqual(dw1, dw2));
  // SwiGLU: dg over dh.
  const auto g = ToFloat(RandomDoubles(T * C, 153, 3.0)), u = ToFloat(RandomDoubles(T * C, 154));
  std::vector<float> dg(T * C), du1(T * C), dh = dout, du2(T * C);
  SwiGluBackward<float>(dout.data(), g.data(), u.data(), dg.data(), du1.data(), T * C);
  SwiGluBackward<float>(dh.data(), g.data(), u.data(), dh.data(), du2.data(), T * C);
  EXPECT_TRUE(BitEqual(dg, dh));
  EXPECT_TRUE(BitEqual(du1, du2));
  // Cross-entropy: dlogits over logits.
  const auto l = ToFloat(RandomDoubles(T * V, 155, 4.0));
  const std::vector<int> targets = {2, kNotScored, 8, 0, 2};
  std::vector<float> dl(T * V), l2 = l;
  CrossEntropyBackward<float>(l.data(), targets.data(), dl.data(), T, V, 1.0);
  CrossEntropyBackward<float>(l2.data(), targets.data(), l2.data(), T, V, 1.0);
  EXPECT_TRUE(BitEqual(dl, l2));
  // RoPE: the backward undoes the forward (a rotation's transpose is its inverse).
  const RopeTable table = MakeRopeTable(RopeThetas(10000.0, C), 0, T);
  const auto v0 = ToFloat(RandomDoubles(T * C, 156));
  auto v = v0;
  RopeInterleavedForward<float>(v.data(), T, 1, C, C, AnglesOf(table));
  RopeInterleavedBackward<float>(v.data(), T, 1, C, C, AnglesOf(table));
  for (size_t i = 0; i < v.size(); ++i) {
    // Two rotations by float cos/sin with cos^2 + sin^2 = 1 to eps: a few eps of |v|.
    EXPECT_NEAR(v[i], v0[i], 8 * kEpsF * (std::abs(v0[i]) + std::abs(v0[i ^ 1])));
  }
}

TEST(OpsBackward, ResultsDoNotDependOnTheThreadCount) {
  // Above every op's threads' threshold. (Linear is left to OpenBLAS, which promises nothing.)
  const int64_t T = 512;
  const int C = 256, V = 1000;
  Rng rng(170);
  std::vector<int> tokens(T), targets(T);
  for (int& t : tokens) t = static_cast<int>(rng.NextU64() % 50);
  for (int& t : targets) t = static_cast<int>(rng.NextU64() % V);
  targets[3] = kNotScored;
  const auto x = ToFloat(RandomDoubles(T * C, 171)), w = ToFloat(RandomDoubles(C, 172, 0.1, 1.0));
  const auto dout = ToFloat(RandomDoubles(T * C, 173));
  const auto logits = ToFloat(RandomDoubles(T * V, 174, 3.0));
  struct Outputs {
    std::vector<float> dE, dx, dw, dl;
    double mean = 0;
  };
  auto run = [&](int threads) {
    SetNumThreads(threads);
    Outputs o{std::vector<float>(50 * C, 0.0f), std::vector<float>(T * C),
              std::vector<float>(C, 0.0f), std::vector<float>(T * V)};
    EmbeddingBackward<float>(tokens.data(), dout.data(), o.dE.data(), T, C, 50);
    RmsNormBackward<float>(dout.data(), x.data(), w.data(), o.dx.data(), o.dw.data(), T, C, 1e-5f,
                           GradWrite::kOverwrite);
    o.mean = CrossEntropyForward<float>(logits.data(), targets.data(), T, V).mean;
    CrossEntropyBackward<float>(logits.data(), targets.data(), o.dl.data(), T, V, 1.0);
    return o;
  };
  const int saved = NumThreads();
  const Outputs one = run(1), three = run(3);
  SetNumThreads(saved);
  EXPECT_TRUE(BitEqual(one.dE, three.dE));
  EXPECT_TRUE(BitEqual(one.dx, three.dx));
  EXPECT_TRUE(BitEqual(one.dw, three.dw));
  EXPECT_TRUE(BitEqual(one.dl, three.dl));
  EXPECT_EQ(one.mean, three.mean);
}

TEST(OpsBackward, CrossEntropyWithNoScoredRowIsZero) {
  const int64_t T = 3;
  const int V = 5;
  const std::vector<int> targets(T, kNotScored);
  const auto l = RandomDoubles(T * V, 160);
  const MeanLoss m = CrossEntropyForward<double>(l.data(), targets.data(), T, V);
  EXPECT_EQ(m.scored, 0);
  EXPECT_EQ(m.mean, 0.0);
  std::vector<double> d(T * V, 1.0);
  CrossEntropyBackward<double>(l.data(), targets.data(), d.data(), T, V, 1.0);
  for (double v : d) EXPECT_EQ(v, 0.0);
}

TEST(OpsBackwardDeathTest, BadIdsTripTheAlwaysOnChecks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int V = 4, C = 3;
  const std::vector<float> E(V * C, 1.0f);
  std::vector<float> out(2 * C), dE(V * C);
  const std::vector<int> high = {1, 4}, negative = {-1, 0};
  EXPECT_DEATH(EmbeddingForward<float>(high.data(), E.data(), out.data(), 2, C, V),
               "token 4 at row 1 outside vocabulary of 4");
  EXPECT_DEATH(EmbeddingBackward<float>(negative.data(), out.data(), dE.data(), 2, C, V),
               "token -1 at row 0 outside vocabulary of 4");
  const std::vector<int> targets = {0, -2};
  std::vector<float> logits(2 * V), d(2 * V);
  EXPECT_DEATH(CrossEntropyForward<float>(logits.data(), targets.data(), 2, V),
               "target -2 at row 1");
  EXPECT_DEATH(CrossEntropyBackward<float>(logits.data(), targets.data(), d.data(), 2, V, 1.0),
               "target -2 at row 1");
}

}  // namespace
}  // namespace stretch
