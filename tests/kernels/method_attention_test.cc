// Every position method through the tiled kernel against the naive double reference, which is
// told each method pair by pair as its paper defines it (reference/position.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "reference/position.h"
#include "src/core/rng.h"
#include "src/kernels/attention.h"
#include "src/kernels/ops.h"
#include "src/position/method.h"
#include "src/position/plan.h"

namespace stretch {
namespace {

constexpr int64_t kTrainLen = 64;  // L: small, so that every method is far beyond it

struct Shape {
  int D;
  int64_t T, S, q_pos0;
  int H, G;
};

template <typename Real>
ref::AttentionOptions<Real> ReferenceOptions(const AttentionPlan& p, float scale) {
  ref::AttentionOptions<Real> opt;
  opt.scale = scale;
  opt.visible = [&p](int64_t i, int64_t j) { return ref::MethodVisible(p.method, i, j); };
  opt.rel_pos = [&p](int64_t i, int64_t j) {
    return static_cast<Real>(ref::MethodRelPos(p.method, i, j));
  };
  if (p.dynamic) {
    opt.thetas_at = [&p](int64_t i) {
      const std::vector<double> th = ref::MethodThetas(p, i);
      return std::vector<Real>(th.begin(), th.end());
    };
  } else {
    opt.rope_thetas.assign(p.freq.thetas.begin(), p.freq.thetas.end());
  }
  if (p.xpos_scale_base > 0) {
    const std::vector<double> x =
        ref::XposLogDecay(static_cast<int>(p.freq.thetas.size()), p.xpos_scale_base);
    opt.pair_log_decay.assign(x.begin(), x.end());
  }
  opt.score_mod = [&p](int h, int64_t i, int64_t j, Real s) {
    return static_cast<Real>(s * ref::MethodLogitFactor(p, i) * ref::SsmaxFactor(p, h, i) +
                             ref::BiasValue(p.bias, h, i - j));
  };
  return opt;
}

AttentionPlan WithSandwich(AttentionPlan p, std::vector<double> lambdas, int dim, int64_t n) {
  p.bias = SandwichBias(std::move(lambdas), dim, n);
  return p;
}

struct Result {
  double kernel = 0, naive = 0, magnitude = 0;
};

// Runs the kernel on raw q, k (rotate = true) or, when `prerotate`, on q and k rotated at their
// true positions by the test (the model's path for methods whose keys never change rotation).
Result Run(const std::string& spec, const Shape& sh, bool prerotate, uint64_t seed,
           const std::function<void(AttentionPlan&)>& tweak = {}) {
  AttentionPlan plan =
      MakeAttentionPlan(ParseMethod(spec), RopeGeometry{kTrainLen, sh.D, 10000.0}, sh.S);
  if (tweak) tweak(plan);
  Rng rng(seed);
  const int H = sh.H, G = sh.G, D = sh.D;
  std::vector<float> q(sh.T * H * D), k(sh.S * G * D), v(sh.S * G * D);
  for (float& x : q) x = static_cast<float>(rng.Normal());
  for (float& x : k) x = static_cast<float>(rng.Normal());
  for (float& x : v) x = static_cast<float>(rng.Normal());
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  AttentionDims dims{sh.T, sh.S, sh.q_pos0, H, G, D};
  std::vector<float> out(sh.T * H * D, -7.0f);
  AttentionParams params;
  params.scale = scale;
  params.plan = &plan;
  std::vector<float> qk = q, kk = k;
  std::optional<KernelRotation> rotation;
  if (prerotate) {
    std::vector<int64_t> qpos(sh.T), kpos(sh.S);
    for (int64_t i = 0; i < sh.T; ++i) qpos[i] = sh.q_pos0 + i;
    for (int64_t j = 0; j < sh.S; ++j) kpos[j] = j;
    const std::vector<double> th = plan.freq.thetas;
    auto rot = [&](const std::vector<float>& x, int64_t rows, int heads,
                   const std::vector<int64_t>& pos) {
      const std::vector<double> y = ref::ApplyRopeInterleaved(
          std::vector<double>(x.begin(), x.end()), rows, heads, D, pos, th);
      return std::vector<float>(y.begin(), y.end());
    };
    qk = rot(q, sh.T, H, qpos);
    kk = rot(k, sh.S, G, kpos);
  } else {
    // As the model does: each key rotated once per key slot, q rotated by the kernel.
    rotation.emplace(plan, HeadRows{k.data(), int64_t{G} * D, D}, dims).Into(params);
  }
  AttentionForward({qk.data(), int64_t{H} * D, D}, {kk.data(), int64_t{G} * D, D},
                   {v.data(), int64_t{G} * D, D}, {out.data(), int64_t{H} * D, D}, dims, params);

  const ref::AttentionShape rs{sh.T, sh.S, sh.q_pos0, H, G, D};
  // QueryNorm / KeyNorm: the reference gets unit vectors (RoPE keeps the norm, so normalizing
  // before rotating is the same as after).
  auto normalize = [D](std::vector<float>& x) {
    for (size_t r0 = 0; r0 < x.size(); r0 += D) {
      double ss = 0;
      for (int d = 0; d < D; ++d) ss += double{x[r0 + d]} * x[r0 + d];
      for (int d = 0; d < D; ++d) x[r0 + d] = static_cast<float>(x[r0 + d] / std::sqrt(ss));
    }
  };
  if (plan.query_norm) normalize(q);
  if (plan.key_norm) normalize(k);
  const std::vector<double> want = ref::Attention(
      std::vector<double>(q.begin(), q.end()), std::vector<double>(k.begin(), k.end()),
      std::vector<double>(v.begin(), v.end()), rs, ReferenceOptions<double>(plan, scale));
  const std::vector<float> naive =
      ref::Attention(q, k, v, rs, ReferenceOptions<float>(plan, scale));
  Result r;
  for (size_t x = 0; x < want.size(); ++x) {
    const double got = out[x];
    r.kernel = std::max(r.kernel, std::isfinite(got) ? std::abs(got - want[x])
                                                     : std::numeric_limits<double>::infinity());
    r.naive = std::max(r.naive, std::abs(static_cast<double>(naive[x]) - want[x]));
    r.magnitude = std::max(r.magnitude, std::abs(want[x]));
  }
  return r;
}

// The budget of tests/kernels/attention_test.cc: within 4x of a plain float32 implementation's
// error (here the float reference, which rotates with float angles rel * theta), plus 8 ulp of the
// output's magnitude. The kernel's own extra roundings (float cos/sin tables rounded from double
// angles, the rotation's two products, the scale folded into q) are each O(eps) relative
// perturbations of the terms whose float rounding makes the baseline's error.
void ExpectWithinBudget(const Result& r, const std::string& what) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double budget = 4.0 * r.naive + 8.0 * eps * std::max(1.0, r.magnitude);
  EXPECT_LE(r.kernel, budget) << what << " naive=" << r.naive << " magnitude=" << r.magnitude;
}

std::vector<std::string> Specs(int D) {
  std::string longs, shorts;
  for (int t = 0; t < D / 2; ++t) {
    longs += (t ? "/" : "") + std::to_string(1.0 + 0.5 * t);
    shorts += (t ? "/" : "") + std::to_string(1.0 + 0.1 * t);
  }
  return {
      "direct",
      "pi",
      "ntk",
      "ntk-fixed:factor=4",
      "yarn",
      "yarn:factor=8,beta_fast=16,beta_slow=2,truncate=false",
      "llama3:factor=8",
      "longrope:short=" + shorts + ",long=" + longs,
      "dynamic-longrope:short=" + shorts + ",long=" + longs,
      "dynamic-ntk",
      "dynamic-yarn",
      "rerope:window=40",
      "leaky-rerope:window=40,k=4",
      "leaky-rerope:window=24",
      "self-extend:group=4,window=32",
      "self-extend:group=3,window=20",
      "window:window=50",
      "lambda:sinks=4,window=50",
      "streaming:sinks=4,window=50",
      "blockwise:window=40",
      "blockwise",
      "string:shift=40,window=8",
      "dca:chunk=48",
      "yarn:factor=4+logn",
      "rerope:window=40+logn",
      "direct+logn",
  };
}

// Prefill from 0, a chunk after a cached prefix, decode at depth, and key counts that split into
// flash-decoding chunks. Lengths cross tile edges (64 / 128 keys, 60 / 120 query rows).
std::vector<Shape> Shapes(int D) {
  return {{D, 300, 300, 0, 4, 2},
          {D, 130, 300, 170, 4, 2},
          {D, 1, 1000, 999, 4, 2},
          {D, 1, 300, 120, 2, 1},
          {D, 70, 200, 130, 4, 4}};
}

void SweepMethods(int D, bool prerotate_where_possible) {
  uint64_t seed = 1000 + D;
  for (const std::string& spec : Specs(D)) {
    for (const Shape& sh : Shapes(D)) {
      const AttentionPlan plan =
          MakeAttentionPlan(ParseMethod(spec), RopeGeometry{kTrainLen, D, 10000.0}, sh.S);
      const bool prerotate = prerotate_where_possible && plan.KeysRotatedOnce();
      const std::string what = spec + " D=" + std::to_string(D) + " T=" + std::to_string(sh.T) +
                               " S=" + std::to_string(sh.S) +
                               " q_pos0=" + std::to_string(sh.q_pos0) +
                               (prerotate ? " prerotated" : " raw");
      ExpectWithinBudget(Run(spec, sh, prerotate, ++seed), what);
    }
  }
}

TEST(MethodAttention, EveryMethodMatchesTheReferenceD8) { SweepMethods(8, false); }
TEST(MethodAttention, EveryMethodMatchesTheReferenceD64) { SweepMethods(64, false); }
TEST(MethodAttention, EveryMethodMatchesTheReferenceGenericD) { SweepMethods(24, false); }
TEST(MethodAttention, PrerotatedKeysMatchTheReference) { SweepMethods(16, true); }

// Dynamic scaling's own path (attention.cc: PrepareDynamicTile, ScoreDynamicTile): each query
// position scores keys rotated with its own frequencies, as <R((p - k_lo) theta) q, R(b theta) k>
// for key k_lo + b of the key tile at k_lo, the query angle moved from tile to tile by the
// angle-addition recurrence in double and the key offset's angle from a per-position table.
// Longer key ranges than the sweep, so that the recurrence runs over many tiles (3000 keys: 47
// tiles of 64), query tiles (16 stacked rows) cut part-way, head groups of 1 to 4 rows (the
// rotating micro-kernel's row blocks), chunks after a cached prefix, and decodes split into
// flash-decoding chunks (whose first key tile is not 0: their first angle is computed directly).
// The sweep's budget: the recurrence drifts by ~1 double ulp per tile (~1e-14 here), far below
// the float roundings the budget is made of.
TEST(MethodAttention, DynamicScalingOverLongKeyRanges) {
  uint64_t seed = 4242;
  double worst = 0.0;  // the kernel's error over the float reference's, recorded for the log
  for (const char* spec : {"dynamic-ntk", "dynamic-yarn"}) {
    for (const Shape& sh : {Shape{64, 700, 700, 0, 4, 4}, Shape{128, 100, 1500, 1400, 4, 1},
                            Shape{8, 257, 2000, 1743, 8, 2}, Shape{24, 33, 900, 867, 6, 2},
                            Shape{64, 1, 3000, 2999, 2, 1}, Shape{16, 3, 2500, 2497, 4, 4}}) {
      const std::string what = std::string(spec) + " D=" + std::to_string(sh.D) +
                               " T=" + std::to_string(sh.T) + " S=" + std::to_string(sh.S) +
                               " q_pos0=" + std::to_string(sh.q_pos0) +
                               " H=" + std::to_string(sh.H) + " G=" + std::to_string(sh.G);
      const Result r = stretch::Run(spec, sh, false, ++seed);
      ExpectWithinBudget(r, what);
      worst = std::max(worst, r.kernel / std::max(r.naive, 1e-30));
    }
  }
  RecordProperty("worst_kernel_over_float_reference_error", std::to_string(worst));
}

// Variants of models trained with them: ALiBi, KERPLE log and power (per-head parameters as the
// training issue will learn them), QueryNorm, KeyNorm, and both (cosine attention, with the
// kernel's scale as lambda), alone and on top of a relative map and a window.
TEST(MethodAttention, TrainedVariantsMatchTheReference) {
  const int H = 4;
  const std::vector<std::function<void(AttentionPlan&)>> variants = {
      [](AttentionPlan& p) {
        p.bias.kind = BiasKind::kAlibi;
        p.bias.a = AlibiSlopes(H);
      },
      [](AttentionPlan& p) {
        p.bias = {BiasKind::kKerpleLog, {0.5, 1.0, 2.0, 0.3}, {0.2, 1.0, 0.05, 3.0}, 0, {}};
      },
      [](AttentionPlan& p) {
        p.bias = {BiasKind::kKerplePower, {0.3, 0.05, 1.0, 0.01}, {0.5, 1.0, 1.5, 2.0}, 0, {}};
      },
      [](AttentionPlan& p) { p.query_norm = true; },
      [](AttentionPlan& p) { p.key_norm = true; },
      [](AttentionPlan& p) { p.query_norm = p.key_norm = true; },
      // Sandwich with lambdas of both signs and magnitudes, tabulated only up to distance 100
      // (beyond it Value sums the cosines directly).
      [](AttentionPlan& p) {
        p = WithSandwich(p, {0.5, 0.1, 0.02, -0.05}, 16, 100);
      },
      [](AttentionPlan& p) { p.xpos_scale_base = 512; },  // torchscale's default gamma
      [](AttentionPlan& p) { p.xpos_scale_base = 16; },   // a strong decay
      // Cosine attention with the per-position lambda ln((i + 1) / 2) (times the scale).
      [](AttentionPlan& p) { p.query_norm = p.key_norm = p.position_log_scale = true; },
      // Trained log-n, ln(i + 1) / ln L at every position, with KeyNorm beside it.
      [](AttentionPlan& p) { p.key_norm = p.log_length_scale = true; },
      // SSMax with per-head s of both signs and sizes, with and without log-n beside it.
      [](AttentionPlan& p) {
        p.ssmax = {0.5, 1.0, 0.1, -0.3};
      },
      [](AttentionPlan& p) {
        p.ssmax = {0.2, 0.7, 1.3, 0.4};
        p.logn = p.method.logn = true;
      },
  };
  uint64_t seed = 77;
  for (const char* spec :
       {"direct", "rerope:window=40", "window:window=50", "blockwise:window=40", "dca:chunk=48"}) {
    for (size_t v = 0; v < variants.size(); ++v) {
      for (const Shape& sh : {Shape{8, 130, 300, 170, H, 2}, Shape{64, 1, 1000, 999, H, 2},
                              Shape{16, 200, 200, 0, H, 4}}) {
        const std::string what = std::string(spec) + " variant " + std::to_string(v) +
                                 " D=" + std::to_string(sh.D) + " T=" + std::to_string(sh.T);
        ExpectWithinBudget(stretch::Run(spec, sh, false, ++seed, variants[v]), what);
      }
    }
  }
}

// XPOS scaled as written (q by zeta^(a/gamma), k by zeta^(-b/gamma)) overflows float near 35k
// positions; the kernel's per-tile reference keeps every factor <= 1. Decode and a prefill chunk
// at 70k positions, against the double reference.
TEST(MethodAttention, XposStaysExactAt70kPositions) {
  auto xpos = [](AttentionPlan& p) { p.xpos_scale_base = 512; };
  for (const Shape& sh : {Shape{8, 1, 70000, 69999, 2, 1}, Shape{16, 20, 70000, 69980, 2, 2}}) {
    ExpectWithinBudget(stretch::Run("direct", sh, false, 5, xpos),
                       "xpos T=" + std::to_string(sh.T));
    ExpectWithinBudget(stretch::Run("direct", sh, true, 6, xpos),
                       "xpos prerotated T=" + std::to_string(sh.T));
  }
}

TEST(MethodAttention, SandwichBiasIsTheSinusoidalInnerProduct) {
  // p_i . p_j at distance 0 is dim/2 (each pair sin^2 + cos^2 = 1); the table and the direct sum
  // agree past the table's end.
  const AttentionBias b = SandwichBias({2.0}, 32, 10);
  EXPECT_DOUBLE_EQ(b.Value(0, 0), 2.0 * 16);
  for (int64_t d : {1, 5, 9, 10, 11, 1000}) {
    EXPECT_NEAR(b.Value(0, d), ref::BiasValue(b, 0, d), 1e-9) << d;
  }
  // At d = 1, pair t = 0 contributes cos(1): the highest frequency, w_0 = 1.
  double want = 0;
  for (int t = 0; t < 16; ++t) want += std::cos(std::pow(10000.0, -2.0 * t / 32));
  EXPECT_NEAR(b.Value(0, 1), 2.0 * want, 1e-12);
}

TEST(MethodAttention, AlibiSlopesArePressEtAls) {
  // Press et al. 2022, section 3: 8 heads: 1/2, 1/4, ..., 1/256; 12 heads: the 8-head slopes,
  // then slopes 1, 3, 5, 7 of the 16-head sequence 2^(-0.5 h): 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  const std::vector<double> s8 = AlibiSlopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s8[h], std::exp2(-(h + 1)));
  const std::vector<double> s12 = AlibiSlopes(12);
  ASSERT_EQ(s12.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s12[h], std::exp2(-(h + 1)));
  for (int x = 0; x < 4; ++x) EXPECT_DOUBLE_EQ(s12[8 + x], std::exp2(-0.5 - x));
}

TEST(MethodAttention, RelativeMapsReallyChangeTheResult) {
  // Not vacuous: with q_pos0 far past every window, rerope, self-extend and a window mask each
  // give outputs far from direct's (same inputs: the seed is the same).
  const Shape sh{8, 1, 1000, 999, 4, 2};
  auto run = [&](const std::string& spec) {
    const AttentionPlan plan =
        MakeAttentionPlan(ParseMethod(spec), RopeGeometry{kTrainLen, 8, 10000.0}, sh.S);
    Rng rng(7);
    std::vector<float> q(sh.T * sh.H * sh.D), k(sh.S * sh.G * sh.D), v(sh.S * sh.G * sh.D);
    for (float& x : q) x = static_cast<float>(rng.Normal());
    for (float& x : k) x = static_cast<float>(rng.Normal());
    for (float& x : v) x = static_cast<float>(rng.Normal());
    const AttentionDims dims{sh.T, sh.S, sh.q_pos0, sh.H, sh.G, 8};
    const KernelRotation rotation(plan, HeadRows{k.data(), sh.G * 8, 8}, dims);
    AttentionParams params{1.0f / std::sqrt(8.0f), &plan};
    rotation.Into(params);
    std::vector<float> out(sh.T * sh.H * sh.D);
    AttentionForward({q.data(), sh.H * 8, 8}, {k.data(), sh.G * 8, 8}, {v.data(), sh.G * 8, 8},
                     {out.data(), sh.H * 8, 8}, dims, params);
    return out;
  };
  const std::vector<float> direct = run("direct");
  for (const char* spec :
       {"rerope:window=40", "self-extend:group=4,window=32", "window:window=50"}) {
    const std::vector<float> other = run(spec);
    double diff = 0;
    for (size_t x = 0; x < direct.size(); ++x)
      diff = std::max(diff, double{std::abs(direct[x] - other[x])});
    EXPECT_GT(diff, 1e-2) << spec;
  }
}

}  // namespace
}  // namespace stretch
