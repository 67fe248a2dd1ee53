// The attention backward: the naive double reference (reference/attention_backward.h) against
// central differences of its own forward, then the tiled float kernel against that reference,
// with every mask, log-n and the additive biases (KERPLE's learned parameters included), and with
// every relative position map of a static plan (raw q and k, rotated in the kernel: ReRoPE, Leaky
// ReRoPE, Self-Extend, STRING, DCA, Lambda), whose gradients are with respect to the raw q and k.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reference/attention_backward.h"
#include "reference/position.h"
#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kernels/attention.h"
#include "src/kernels/ops.h"
#include "src/position/method.h"
#include "src/position/plan.h"
#include "tests/testing/float_baseline.h"

namespace stretch {
namespace {

constexpr int64_t kTrainLen = 32;

struct Shape {
  int D;
  int64_t T, S, q_pos0;
  int H, G;
};

// A plan from a spec plus a tweak (bias), geometry L = 32.
AttentionPlan Plan(const std::string& spec, int D, int64_t S,
                   const std::function<void(AttentionPlan&)>& tweak) {
  AttentionPlan p = MakeAttentionPlan(ParseMethod(spec), RopeGeometry{kTrainLen, D, 10000.0}, S);
  if (tweak) tweak(p);
  return p;
}

template <typename Real>
ref::TrainAttentionOptions<Real> Options(const AttentionPlan& p, double scale) {
  ref::TrainAttentionOptions<Real> o;
  o.scale = static_cast<Real>(scale);
  o.visible = [&p](int64_t i, int64_t j) { return ref::MethodVisible(p.method, i, j); };
  o.row_factor = [&p](int64_t i) { return static_cast<Real>(ref::MethodLogitFactor(p, i)); };
  o.bias = [&p](int h, int64_t i, int64_t j) {
    return static_cast<Real>(ref::BiasValue(p.bias, h, i - j));
  };
  return o;
}

// Options plus RoPE in relative form with the method's relative position of each pair, from the
// definitions (reference/position.h), not from the kernel's segments (src/position/plan.cc): q
// and k are then the raw vectors.
template <typename Real>
ref::TrainAttentionOptions<Real> MapOptions(const AttentionPlan& p, double scale) {
  ref::TrainAttentionOptions<Real> o = Options<Real>(p, scale);
  o.rope_thetas.assign(p.freq.thetas.begin(), p.freq.thetas.end());
  o.rel_pos = [&p](int64_t i, int64_t j) {
    return static_cast<Real>(ref::MethodRelPos(p.method, i, j));
  };
  return o;
}

std::vector<double> RandomVec(Rng& rng, size_t n, double sd = 1.0) {
  std::vector<double> x(n);
  for (double& e : x) e = sd * rng.Normal();
  return x;
}

// A kernel call's float inputs, N(0, 1) values drawn in this order.
struct FloatInputs {
  std::vector<float> q;     // (T, H, D)
  std::vector<float> k;     // (S, G, D)
  std::vector<float> v;     // (S, G, D)
  std::vector<float> dout;  // (T, H, D)
};
FloatInputs RandomFloatInputs(Rng& rng, const Shape& sh) {
  auto fl = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  FloatInputs in;
  in.q = fl(RandomVec(rng, sh.T * sh.H * sh.D));
  in.k = fl(RandomVec(rng, sh.S * sh.G * sh.D));
  in.v = fl(RandomVec(rng, sh.S * sh.G * sh.D));
  in.dout = fl(RandomVec(rng, sh.T * sh.H * sh.D));
  return in;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d a_h and d b_h of a KERPLE bias, from dS = d loss / d logit (H, T, S): the sum over
// the pairs with dS != 0 at distance d = q_pos0 + i - j >= 0 of dS times
//   log   (bias -a log(1 + b d)):  d/da = -log(1 + b d),  d/db = -a d / (1 + b d);
//   power (bias -a d^b):           d/da = -d^b,            d/db = -a d^b ln d  (both 0 at d = 0).
// `mag` is the sum of the terms' magnitudes, per head: the scale of a float sum's rounding.
struct KerpleGrads {
  std::vector<double> da, db, mag;  // (H)
};
KerpleGrads KerpleParamGrads(const AttentionPlan& plan, const Shape& sh,
                             const std::vector<double>& ds) {
  KerpleGrads g{std::vector<double>(sh.H, 0.0), std::vector<double>(sh.H, 0.0),
                std::vector<double>(sh.H, 0.0)};
  const bool is_log = plan.bias.kind == BiasKind::kKerpleLog;
  for (int h = 0; h < sh.H; ++h) {
    const double a = plan.bias.a[h], b = plan.bias.b[h];
    for (int64_t i = 0; i < sh.T; ++i) {
      for (int64_t j = 0; j < sh.S; ++j) {
        const double dsij = ds[(h * sh.T + i) * sh.S + j];
        const double d = static_cast<double>(sh.q_pos0 + i - j);
        if (dsij == 0 || d < 0) continue;
        const double ga = is_log ? -std::log1p(b * d) : (d > 0 ? -std::pow(d, b) : 0.0);
        const double gb =
            is_log ? -a * d / (1 + b * d) : (d > 0 ? -a * std::pow(d, b) * std::log(d) : 0.0);
        g.da[h] += dsij * ga;
        g.db[h] += dsij * gb;
        g.mag[h] += std::abs(dsij * ga) + std::abs(dsij * gb);
      }
    }
  }
  return g;
}

// Central differences of L = sum(out * R) for each coordinate of x, against the analytic
// gradient. Step 1e-5 on O(1) inputs: truncation ~h^2 |f'''| ~ 1e-10 and rounding
// ~eps |L| / h ~ 1e-11 per coordinate; 1e-7 absolute + 1e-6 relative is far above both and far
// below any real error (a wrong term is O(1e-2) or more at these sizes).
void CheckGradient(const std::function<double()>& loss, std::vector<double>& x,
                   const std::vector<double>& analytic, const std::string& what) {
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    ASSERT_NEAR(analytic[i], numeric, 1e-7 + 1e-6 * std::abs(numeric))
        << what << " coordinate " << i;
  }
}

TEST(AttentionBackwardReference, MatchesCentralDifferences) {
  // Queries at positions 40..44, beyond L = 32, so that log-n scales them (c > 1).
  const Shape sh{4, 5, 45, 40, 4, 2};
  const ref::AttentionShape rs{sh.T, sh.S, sh.q_pos0, sh.H, sh.G, sh.D};
  const std::vector<std::pair<std::string, std::function<void(AttentionPlan&)>>> cases = {
      {"direct", {}},
      {"window:window=3", {}},
      {"blockwise:window=4", {}},
      {"direct+logn", {}},
      {"direct",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kAlibi, AlibiSlopes(4), {}, 0, {}};
       }},
      {"direct",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kKerpleLog, {0.5, 1.0, 2.0, 0.3}, {0.2, 1.0, 0.05, 3.0}, 0, {}};
       }},
      {"direct",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kKerplePower, {0.3, 0.05, 1.0, 0.2}, {0.5, 1.0, 1.5, 2.0}, 0, {}};
       }},
  };
  Rng rng(3);
  for (const auto& [spec, tweak] : cases) {
    AttentionPlan plan = Plan(spec, sh.D, sh.S, tweak);
    std::vector<double> q = RandomVec(rng, sh.T * sh.H * sh.D),
                        k = RandomVec(rng, sh.S * sh.G * sh.D),
                        v = RandomVec(rng, sh.S * sh.G * sh.D),
                        R = RandomVec(rng, sh.T * sh.H * sh.D);
    const double scale = 0.7;
    auto loss = [&] {
      return Dot(ref::TrainAttentionForward(q, k, v, rs, Options<double>(plan, scale)).out, R);
    };
    const ref::TrainAttentionGrads<double> g =
        ref::TrainAttentionBackward(q, k, v, R, rs, Options<double>(plan, scale));
    CheckGradient(loss, q, g.dq, spec + " dq");
    CheckGradient(loss, k, g.dk, spec + " dk");
    CheckGradient(loss, v, g.dv, spec + " dv");
    if (plan.bias.kind == BiasKind::kKerpleLog || plan.bias.kind == BiasKind::kKerplePower) {
      // d loss / d a_h and d b_h from dS and the bias formula, against differences of the loss in
      // the parameters themselves.
      const KerpleGrads kg = KerpleParamGrads(plan, sh, g.ds);
      for (int h = 0; h < sh.H; ++h) {
        for (int which = 0; which < 2; ++which) {
          const double analytic = which == 0 ? kg.da[h] : kg.db[h];
          std::vector<double>& param = which == 0 ? plan.bias.a : plan.bias.b;
          std::vector<double> one{param[h]};
          CheckGradient(
              [&] {
                param[h] = one[0];
                return loss();
              },
              one, {analytic}, spec + " bias parameter " + std::to_string(which));
          param[h] = one[0];
        }
      }
    }
  }
}

// The relative maps of the methods issue, the reference's gradients with respect to the raw q and
// k. Queries at 40..44 against keys 0..44 meet every segment of each map: ReRoPE / Leaky /
// Self-Extend beyond their window, STRING beyond its shift, DCA's same, previous and older chunks
// (chunks of 12 - 2 = 10), Lambda's sinks outside its window. Leaky's k = 3 puts far pairs at
// fractional positions; D = 4 gives two rotary pairs (theta 1 and 0.01); GQA (H = 4, G = 2).
TEST(AttentionBackwardReference, RelativeMapsMatchCentralDifferences) {
  const Shape sh{4, 5, 45, 40, 4, 2};
  const ref::AttentionShape rs{sh.T, sh.S, sh.q_pos0, sh.H, sh.G, sh.D};
  const std::vector<std::pair<std::string, std::function<void(AttentionPlan&)>>> cases = {
      {"direct", {}},  // plain RoPE through the same raw-q, raw-k path
      {"rerope:window=8", {}},
      {"leaky-rerope:window=8,k=3", {}},
      {"self-extend:group=3,window=7", {}},
      {"string:shift=10,window=3", {}},
      {"dca:chunk=12,window=2", {}},
      {"lambda:sinks=3,window=9", {}},
      {"rerope:window=8+logn",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kKerpleLog, {0.5, 1.0, 2.0, 0.3}, {0.2, 1.0, 0.05, 3.0}, 0, {}};
       }},
  };
  Rng rng(13);
  for (const auto& [spec, tweak] : cases) {
    const AttentionPlan plan = Plan(spec, sh.D, sh.S, tweak);
    std::vector<double> q = RandomVec(rng, sh.T * sh.H * sh.D),
                        k = RandomVec(rng, sh.S * sh.G * sh.D),
                        v = RandomVec(rng, sh.S * sh.G * sh.D),
                        R = RandomVec(rng, sh.T * sh.H * sh.D);
    const double scale = 0.7;
    auto loss = [&] {
      return Dot(ref::TrainAttentionForward(q, k, v, rs, MapOptions<double>(plan, scale)).out, R);
    };
    const ref::TrainAttentionGrads<double> g =
        ref::TrainAttentionBackward(q, k, v, R, rs, MapOptions<double>(plan, scale));
    CheckGradient(loss, q, g.dq, spec + " dq");
    CheckGradient(loss, k, g.dk, spec + " dk");
    CheckGradient(loss, v, g.dv, spec + " dv");
  }
}

struct KernelRun {
  std::vector<float> dq, dk, dv, lse;
  std::vector<double> da, db;
};

// The kernel's forward (for out and lse) and backward. With `rotate`, q and k are raw and the
// call is set up as a model does it (attention.h): the query tables for this call, and each key
// rotated once per key slot of the map.
KernelRun RunKernel(const AttentionPlan& plan, const Shape& sh, const std::vector<float>& q,
                    const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<float>& dout, float scale, bool rotate = false) {
  const int H = sh.H, G = sh.G, D = sh.D;
  const AttentionDims dims{sh.T, sh.S, sh.q_pos0, H, G, D};
  std::vector<float> out(sh.T * H * D);
  KernelRun r;
  r.lse.assign(sh.T * H, 0.0f);
  AttentionParams params;
  params.scale = scale;
  params.plan = &plan;
  params.lse = r.lse.data();
  std::optional<KernelRotation> rotation;
  if (rotate) rotation.emplace(plan, HeadRows{k.data(), int64_t{G} * D, D}, dims).Into(params);
  const HeadRows hq{q.data(), int64_t{H} * D, D}, hk{k.data(), int64_t{G} * D, D},
      hv{v.data(), int64_t{G} * D, D};
  AttentionForward(hq, hk, hv, {out.data(), int64_t{H} * D, D}, dims, params);
  r.dq.assign(q.size(), 7.0f);
  r.dk.assign(k.size(), 7.0f);
  r.dv.assign(v.size(), 7.0f);
  r.da.assign(H, 0.0);
  r.db.assign(H, 0.0);
  AttentionGrads grads{{r.dq.data(), int64_t{H} * D, D},
                       {r.dk.data(), int64_t{G} * D, D},
                       {r.dv.data(), int64_t{G} * D, D},
                       r.da.data(),
                       r.db.data()};
  AttentionBackward(hq, hk, hv, {out.data(), int64_t{H} * D, D}, {dout.data(), int64_t{H} * D, D},
                    r.lse.data(), dims, params, grads);
  return r;
}

// Kernel (float) vs the double reference, judged against the float reference's own error: within
// 4x of it plus 8 ulp of the magnitude (tests/kernels/attention_test.cc's budget; the kernel's
// sums run in another order and in tiles, each an O(eps) relative perturbation per term).
struct GradError {
  double err = 0, budget = 0;
};
GradError MeasureGrad(const std::vector<float>& got, const std::vector<double>& want,
                      const std::vector<float>& naive) {
  const testing::BaselineError e = testing::MeasureAgainstBaseline(got, want, naive);
  const double err = e.err, base = e.baseline, mag = e.magnitude;
  const double eps = std::numeric_limits<float>::epsilon();
  return {err, 4 * base + 8 * eps * std::max(1.0, mag)};
}
void ExpectGradWithin(const std::vector<float>& got, const std::vector<double>& want,
                      const std::vector<float>& naive, const std::string& what) {
  const GradError e = MeasureGrad(got, want, naive);
  EXPECT_LE(e.err, e.budget) << what << " err=" << e.err << " budget=" << e.budget;
}

// The kernel's KERPLE da, db against the sums of the reference's dS (KerpleParamGrads). Each is a
// sum of ~T*S float-rounded terms: bounded by ~1e-5 of the sum of their magnitudes.
void ExpectKerpleGradsWithin(const KernelRun& got, const AttentionPlan& plan, const Shape& sh,
                             const std::vector<double>& ds, const std::string& what) {
  const KerpleGrads want = KerpleParamGrads(plan, sh, ds);
  for (int h = 0; h < sh.H; ++h) {
    EXPECT_NEAR(got.da[h], want.da[h], 1e-5 * want.mag[h] + 1e-9) << what << " da head " << h;
    EXPECT_NEAR(got.db[h], want.db[h], 1e-5 * want.mag[h] + 1e-9) << what << " db head " << h;
  }
}

TEST(AttentionBackward, KernelMatchesTheReference) {
  const std::vector<std::pair<std::string, std::function<void(AttentionPlan&)>>> cases = {
      {"direct", {}},
      {"window:window=50", {}},
      {"blockwise:window=40", {}},
      {"direct+logn", {}},
      {"direct",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kKerpleLog, {0.5, 1.0, 2.0, 0.3}, {0.2, 1.0, 0.05, 3.0}, 0, {}};
       }},
      {"window:window=50",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kKerplePower, {0.3, 0.05, 1.0, 0.01}, {0.5, 1.0, 1.5, 2.0}, 0, {}};
       }},
      {"direct",
       [](AttentionPlan& p) {
         p.bias = SandwichBias({0.5, 0.1, 0.02, -0.05}, 16, 400);
       }},
  };
  uint64_t seed = 11;
  for (const auto& [spec, tweak] : cases) {
    for (const Shape& sh : {Shape{8, 150, 150, 0, 4, 2}, Shape{16, 70, 200, 130, 4, 4},
                            Shape{64, 65, 65, 0, 4, 1}, Shape{24, 129, 129, 0, 4, 2}}) {
      const AttentionPlan plan = Plan(spec, sh.D, sh.S, tweak);
      Rng rng(++seed);
      const auto [q, k, v, dout] = RandomFloatInputs(rng, sh);
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
      const KernelRun got = RunKernel(plan, sh, q, k, v, dout, scale);
      const ref::AttentionShape rs{sh.T, sh.S, sh.q_pos0, sh.H, sh.G, sh.D};
      auto db = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
      const ref::TrainAttentionGrads<double> want = ref::TrainAttentionBackward(
          db(q), db(k), db(v), db(dout), rs, Options<double>(plan, scale));
      const ref::TrainAttentionGrads<float> naive =
          ref::TrainAttentionBackward(q, k, v, dout, rs, Options<float>(plan, scale));
      const std::string what = spec + " D=" + std::to_string(sh.D) + " T=" + std::to_string(sh.T) +
                               " S=" + std::to_string(sh.S);
      ExpectGradWithin(got.dq, want.dq, naive.dq, what + " dq");
      ExpectGradWithin(got.dk, want.dk, naive.dk, what + " dk");
      ExpectGradWithin(got.dv, want.dv, naive.dv, what + " dv");
      // The forward's lse against the reference's.
      const ref::TrainAttention<double> f =
          ref::TrainAttentionForward(db(q), db(k), db(v), rs, Options<double>(plan, scale));
      for (size_t x = 0; x < f.lse.size(); ++x) {
        ASSERT_NEAR(got.lse[x], f.lse[x], 1e-5 * std::max(1.0, std::abs(f.lse[x]))) << what;
      }
      if (plan.bias.kind == BiasKind::kKerpleLog || plan.bias.kind == BiasKind::kKerplePower) {
        ExpectKerpleGradsWithin(got, plan, sh, want.ds, what);
      }
    }
  }
}

// The kernel's backward with one thread and with two (or all there are) gives the same bits in
// dq, dk, dv and KERPLE's da, db, for `spec` with a KERPLE-log bias. `rotate`: raw q and k rotated
// in the kernel, the relative maps' path (RunKernel).
void ExpectSameBitsWithOneOrTwoThreads(const std::string& spec, bool rotate, uint64_t seed) {
  const Shape sh{16, 200, 200, 0, 4, 2};
  const AttentionPlan plan = Plan(spec, sh.D, sh.S, [](AttentionPlan& p) {
    p.bias = {BiasKind::kKerpleLog, {0.5, 1.0, 2.0, 0.3}, {0.2, 1.0, 0.05, 3.0}, 0, {}};
  });
  Rng rng(seed);
  const auto [q, k, v, dout] = RandomFloatInputs(rng, sh);
  const int threads = NumThreads();
  SetNumThreads(1);
  const KernelRun one = RunKernel(plan, sh, q, k, v, dout, 0.25f, rotate);
  SetNumThreads(std::max(2, threads));
  const KernelRun two = RunKernel(plan, sh, q, k, v, dout, 0.25f, rotate);
  SetNumThreads(threads);
  EXPECT_EQ(std::memcmp(one.dq.data(), two.dq.data(), one.dq.size() * sizeof(float)), 0) << spec;
  EXPECT_EQ(std::memcmp(one.dk.data(), two.dk.data(), one.dk.size() * sizeof(float)), 0) << spec;
  EXPECT_EQ(std::memcmp(one.dv.data(), two.dv.data(), one.dv.size() * sizeof(float)), 0) << spec;
  EXPECT_EQ(one.da, two.da) << spec;
  EXPECT_EQ(one.db, two.db) << spec;
}

TEST(AttentionBackward, SameBitsWithOneOrTwoThreads) {
  ExpectSameBitsWithOneOrTwoThreads("direct", /*rotate=*/false, /*seed=*/5);
}

// The maps' cases for the kernel: windows, shifts and chunks that are not multiples of the
// backward's 64-key tiles, so tiles inside one segment and tiles on a boundary both occur.
std::vector<std::pair<std::string, std::function<void(AttentionPlan&)>>> MapCases() {
  return {
      {"direct", {}},
      {"rerope:window=40", {}},
      {"leaky-rerope:window=40,k=4", {}},
      {"self-extend:group=4,window=37", {}},
      {"string:shift=40,window=8", {}},
      {"dca:chunk=24,window=5", {}},
      {"lambda:sinks=4,window=50", {}},
      {"rerope:window=40+logn",
       [](AttentionPlan& p) {
         p.bias = {BiasKind::kKerpleLog, {0.5, 1.0, 2.0, 0.3}, {0.2, 1.0, 0.05, 3.0}, 0, {}};
       }},
  };
}

struct MapRun {
  GradError dq, dk, dv;
};

// The kernel on raw q, k with `plan` against the double reference told `ref_plan`'s map pair by
// pair (the same plan, except in the test that must fail).
MapRun RunMap(const AttentionPlan& plan, const AttentionPlan& ref_plan, const Shape& sh,
              uint64_t seed, const std::string& what) {
  Rng rng(seed);
  auto db = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const auto [q, k, v, dout] = RandomFloatInputs(rng, sh);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
  const KernelRun got = RunKernel(plan, sh, q, k, v, dout, scale, /*rotate=*/true);
  const ref::AttentionShape rs{sh.T, sh.S, sh.q_pos0, sh.H, sh.G, sh.D};
  const ref::TrainAttentionGrads<double> want = ref::TrainAttentionBackward(
      db(q), db(k), db(v), db(dout), rs, MapOptions<double>(ref_plan, scale));
  const ref::TrainAttentionGrads<float> naive =
      ref::TrainAttentionBackward(q, k, v, dout, rs, MapOptions<float>(ref_plan, scale));
  MapRun r{MeasureGrad(got.dq, want.dq, naive.dq), MeasureGrad(got.dk, want.dk, naive.dk),
           MeasureGrad(got.dv, want.dv, naive.dv)};
  if (plan.bias.kind == BiasKind::kKerpleLog && &plan == &ref_plan) {
    // The bias parameters' gradients read dS, which the map changes: the same check as in
    // KernelMatchesTheReference.
    ExpectKerpleGradsWithin(got, plan, sh, want.ds, what);
  }
  return r;
}

// Kernel (float) vs the double reference, with the budget of ExpectGradWithin: within 4x of the
// plain float reference's error plus 8 ulp of the magnitude. The kernel's extra roundings (cos/sin
// rounded to float from double angles, q rotated once per segment and keys once per slot, the
// rotations back of dq and dk, sums in tiles) are each O(eps) relative perturbations of the terms
// whose float rounding makes the baseline's error; the float reference also rounds its angles
// r * theta in float.
TEST(AttentionBackward, RelativeMapsKernelMatchesTheReference) {
  uint64_t seed = 101;
  for (const auto& [spec, tweak] : MapCases()) {
    for (const Shape& sh : {Shape{16, 150, 150, 0, 4, 2}, Shape{8, 70, 200, 130, 4, 2},
                            Shape{24, 129, 129, 0, 4, 4}, Shape{64, 65, 65, 0, 4, 1}}) {
      const AttentionPlan plan = Plan(spec, sh.D, sh.S, tweak);
      const std::string what = spec + " D=" + std::to_string(sh.D) + " T=" + std::to_string(sh.T) +
                               " S=" + std::to_string(sh.S);
      const MapRun r = RunMap(plan, plan, sh, ++seed, what);
      EXPECT_LE(r.dq.err, r.dq.budget) << what << " dq";
      EXPECT_LE(r.dk.err, r.dk.budget) << what << " dk";
      EXPECT_LE(r.dv.err, r.dv.budget) << what << " dv";
    }
  }
}

// The comparison can fail: the reference told a map one position off (ReRoPE's window 41 against
// the kernel's 40; Self-Extend's group 5 against 4; DCA's chunk 25 against 24) puts dq and dk far
// outside the budget.
TEST(AttentionBackward, APerturbedMapIsFarOutsideTheBudget) {
  const Shape sh{16, 150, 150, 0, 4, 2};
  for (const auto& [spec, wrong] : std::vector<std::pair<std::string, std::string>>{
           {"rerope:window=40", "rerope:window=41"},
           {"self-extend:group=4,window=37", "self-extend:group=5,window=37"},
           {"dca:chunk=24,window=5", "dca:chunk=25,window=5"}}) {
    const AttentionPlan plan = Plan(spec, sh.D, sh.S, {});
    const AttentionPlan ref_plan = Plan(wrong, sh.D, sh.S, {});
    const MapRun r = RunMap(plan, ref_plan, sh, 7, spec);
    EXPECT_GT(r.dq.err, 10 * r.dq.budget) << spec;
    EXPECT_GT(r.dk.err, 10 * r.dk.budget) << spec;
  }
}

TEST(AttentionBackward, RelativeMapsSameBitsWithOneOrTwoThreads) {
  for (const char* spec : {"dca:chunk=24,window=5", "rerope:window=40"}) {
    ExpectSameBitsWithOneOrTwoThreads(spec, /*rotate=*/true, /*seed=*/9);
  }
}

// Dynamic frequencies have no backward, and a relative map needs raw q and k: both refused by an
// always-on check that says so.
TEST(AttentionBackwardDeathTest, DynamicPlansAndPrerotatedMapsAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Shape sh{8, 4, 4, 0, 2, 1};
  const std::vector<float> q(sh.T * sh.H * sh.D, 0.5f), k(sh.S * sh.G * sh.D, 0.5f),
      dout(sh.T * sh.H * sh.D, 1.0f);
  std::vector<float> out(q.size()), lse(sh.T * sh.H, 0.0f), dq(q.size()), dk(k.size()),
      dv(k.size());
  const AttentionDims dims{sh.T, sh.S, sh.q_pos0, sh.H, sh.G, sh.D};
  const HeadRows hq{q.data(), sh.H * sh.D, sh.D}, hk{k.data(), sh.G * sh.D, sh.D};
  const AttentionGrads grads{{dq.data(), sh.H * sh.D, sh.D},
                             {dk.data(), sh.G * sh.D, sh.D},
                             {dv.data(), sh.G * sh.D, sh.D}};
  const AttentionPlan dynamic = Plan("dynamic-ntk", sh.D, sh.S, {});
  AttentionParams params;
  params.scale = 1.0f;
  params.plan = &dynamic;
  params.qk = QkDynamicRotation{};
  EXPECT_DEATH(AttentionBackward(hq, hk, hk, {out.data(), sh.H * sh.D, sh.D},
                                 {dout.data(), sh.H * sh.D, sh.D}, lse.data(), dims, params, grads),
               "no dynamic frequencies");
  const AttentionPlan rerope = Plan("rerope:window=2", sh.D, sh.S, {});
  params.plan = &rerope;
  params.qk = QkRotated{};
  EXPECT_DEATH(AttentionBackward(hq, hk, hk, {out.data(), sh.H * sh.D, sh.D},
                                 {dout.data(), sh.H * sh.D, sh.D}, lse.data(), dims, params, grads),
               "a relative map needs raw q and k");
}

}  // namespace
}  // namespace stretch
