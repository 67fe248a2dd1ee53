#include "src/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kernels/attention_simd.h"

namespace stretch {
namespace {

// How the kernel's inputs sit in memory.
enum class Layout {
  kDense,   // q, out (T, H, D); k, v (S, G, D)
  kCache,   // as the model: q, out (T, H*D) rows; k, v a (G, S_capacity, D) cache, S_capacity > S
  kPadded,  // every row and head stride larger than needed, to catch stride mix-ups
};

struct Case {
  int D;
  int64_t T, S, q_pos0;
  int H, G;
  Layout layout;
  float scale;  // 0: 1/sqrt(D)
  std::string Name() const {
    return "D=" + std::to_string(D) + " T=" + std::to_string(T) + " S=" + std::to_string(S) +
           " q_pos0=" + std::to_string(q_pos0) + " H=" + std::to_string(H) +
           " G=" + std::to_string(G) + " layout=" + std::to_string(static_cast<int>(layout));
  }
};

// A strided array and the dense (rows, heads, D) copy of the same values.
struct Strided {
  std::vector<float> storage;
  int64_t row_stride = 0, head_stride = 0;
  std::vector<float> dense;
};

Strided MakeStrided(Rng& rng, int64_t rows, int heads, int D, int64_t row_stride,
                    int64_t head_stride, float amplitude) {
  Strided s;
  s.row_stride = row_stride;
  s.head_stride = head_stride;
  const int64_t span = (rows - 1) * row_stride + (heads - 1) * head_stride + D;
  s.storage.assign(span, std::numeric_limits<float>::quiet_NaN());  // gaps must never be read
  s.dense.resize(rows * heads * D);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < D; ++d) {
        const float x = amplitude * static_cast<float>(rng.Normal());
        s.storage[r * row_stride + h * head_stride + d] = x;
        s.dense[(r * heads + h) * D + d] = x;
      }
    }
  }
  return s;
}

struct Errors {
  double kernel = 0;       // max |kernel - double reference|
  double naive = 0;        // max |float naive - double reference|
  double magnitude = 0;    // max |double reference|
  double score_bound = 0;  // a-priori bound on a score's rounding error (see HugeLogits test)
  double v_max = 0;        // max |v|
};

Errors RunCase(const Case& c, uint64_t seed, std::vector<float>* kernel_out = nullptr) {
  Rng rng(seed);
  const int H = c.H, G = c.G, D = c.D;
  int64_t q_rs = int64_t{H} * D, q_hs = D, kv_rs = int64_t{G} * D, kv_hs = D;
  int64_t o_rs = int64_t{H} * D, o_hs = D;
  int64_t kv_rows = c.S;
  if (c.layout == Layout::kCache) {
    const int64_t capacity = c.S + 13;
    kv_rs = D;
    kv_hs = capacity * D;
  } else if (c.layout == Layout::kPadded) {
    q_hs = D + 3;
    q_rs = H * q_hs + 5;
    kv_hs = D + 1;
    kv_rs = G * kv_hs + 7;
    o_hs = D + 2;
    o_rs = H * o_hs + 1;
  }
  Strided q = MakeStrided(rng, c.T, H, D, q_rs, q_hs, 1.0f);
  Strided k = MakeStrided(rng, kv_rows, G, D, kv_rs, kv_hs, 1.0f);
  Strided v = MakeStrided(rng, kv_rows, G, D, kv_rs, kv_hs, 1.0f);
  const int64_t o_span = (c.T - 1) * o_rs + (H - 1) * o_hs + D;
  std::vector<float> out(o_span, -7.0f);

  const float scale = c.scale != 0 ? c.scale : 1.0f / std::sqrt(static_cast<float>(D));
  AttentionDims dims;
  dims.n_q = c.T;
  dims.n_kv = c.S;
  dims.q_pos0 = c.q_pos0;
  dims.n_heads = H;
  dims.n_kv_heads = G;
  dims.head_dim = D;
  AttentionForward({q.storage.data(), q_rs, q_hs}, {k.storage.data(), kv_rs, kv_hs},
                   {v.storage.data(), kv_rs, kv_hs}, {out.data(), o_rs, o_hs}, dims, {scale});

  ref::AttentionShape sh{c.T, c.S, c.q_pos0, H, G, D};
  auto to_double = [](const std::vector<float>& x) {
    return std::vector<double>(x.begin(), x.end());
  };
  ref::AttentionOptions<double> opt_d;
  opt_d.scale = scale;  // the same float scale, so both see the same math
  const std::vector<double> want =
      ref::Attention(to_double(q.dense), to_double(k.dense), to_double(v.dense), sh, opt_d);
  ref::AttentionOptions<float> opt_f;
  opt_f.scale = scale;
  const std::vector<float> naive = ref::Attention(q.dense, k.dense, v.dense, sh, opt_f);

  Errors e;
  // Float dot products of length D, scaled: |computed - exact| <= (D + 3) eps scale sum_d |q_d k_d|
  // (Higham's bound for the D products and sums, plus the roundings of scale, of scale * log2(e)
  // and of the subtraction of the running max).
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < c.T; ++i) {
    for (int h = 0; h < H; ++h) {
      for (int64_t j = 0; j <= c.q_pos0 + i && j < c.S; ++j) {
        double abs_dot = 0;
        for (int d = 0; d < D; ++d) {
          abs_dot +=
              std::abs(q.dense[(i * H + h) * D + d] * k.dense[(j * G + h / (H / G)) * D + d]);
        }
        e.score_bound = std::max(e.score_bound, (D + 3) * eps * scale * abs_dot);
      }
    }
  }
  for (float x : v.dense) e.v_max = std::max(e.v_max, static_cast<double>(std::abs(x)));
  for (int64_t i = 0; i < c.T; ++i) {
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < D; ++d) {
        const int64_t di = (i * H + h) * D + d;
        const double got = out[i * o_rs + h * o_hs + d];
        e.kernel = std::max(e.kernel, std::isfinite(got) ? std::abs(got - want[di])
                                                         : std::numeric_limits<double>::infinity());
        e.naive = std::max(e.naive, std::abs(static_cast<double>(naive[di]) - want[di]));
        e.magnitude = std::max(e.magnitude, std::abs(want[di]));
        if (kernel_out) kernel_out->push_back(static_cast<float>(got));
      }
    }
  }
  // Gaps between strided rows/heads of out are untouched.
  for (int64_t i = 0; i < c.T; ++i) {
    for (int h = 0; h < H; ++h) {
      const int64_t end = (h + 1 < H) ? (h + 1) * o_hs : o_rs;
      for (int64_t x = h * o_hs + D; x < end && i * o_rs + x < o_span; ++x) {
        EXPECT_EQ(out[i * o_rs + x], -7.0f) << c.Name();
      }
    }
  }
  return e;
}

// Accuracy budget. The kernel computes the same sums as the plain float32 implementation, in a
// different order (key tiles, an online rescaling by alpha = 2^(m - m') that adds one rounding per
// tile), with q pre-multiplied by scale * log2(e) (one more rounding of every score) and the
// polynomial exp2 (2.4e-7 relative, about 2 ulp, against about 1/2 ulp for std::exp). Each of these
// is an O(eps) relative perturbation of the same terms whose rounding makes the float32 error, so
// the kernel's error stays within a small factor of it: 4x. The floor, 8 ulp of the output's
// magnitude, covers cases where float32 happens to be nearly exact (a single key, one dominant
// key) and one or two roundings of the kernel's extra steps are then all there is.
void ExpectWithinBudget(const Errors& e, const Case& c) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double budget = 4.0 * e.naive + 8.0 * eps * std::max(1.0, e.magnitude);
  EXPECT_LE(e.kernel, budget) << c.Name() << " naive=" << e.naive << " mag=" << e.magnitude;
}

std::vector<Case> SweepCases() {
  std::vector<Case> cases;
  const int dims[] = {8, 16, 48, 64, 128, 24, 5};
  struct Lengths {
    int64_t T, S, q_pos0;
  };
  const Lengths lengths[] = {
      {1, 1, 0},     {7, 7, 0},       {33, 33, 0},    {130, 130, 0}, {300, 300, 0},  // prefill
      {33, 130, 97}, {130, 300, 170}, {7, 300, 200},                                 // chunks
      {1, 33, 32},   {1, 300, 299},   {1, 1000, 999}, {1, 300, 50},                  // decode
  };
  const int ratios[] = {1, 2, 4};
  int n = 0;
  for (int D : dims) {
    for (const Lengths& len : lengths) {
      const int ratio = ratios[n % 3];
      const int G = (D >= 64) ? 1 + n % 2 : 2;
      const Layout layout = static_cast<Layout>(n % 3);
      ++n;
      // Keep the double reference fast under ASan: fewer heads for the largest shapes.
      if (D >= 64 && len.T * len.S > 30000 && ratio * G > 4) continue;
      cases.push_back({D, len.T, len.S, len.q_pos0, ratio * G, G, layout, 0.0f});
    }
  }
  return cases;
}

TEST(Attention, MatchesDoubleReferenceWithinFloatBudget) {
  uint64_t seed = 1;
  for (const Case& c : SweepCases()) {
    ExpectWithinBudget(RunCase(c, seed++), c);
  }
}

TEST(Attention, AllLayoutsAndGroupRatios) {
  uint64_t seed = 100;
  for (int layout = 0; layout < 3; ++layout) {
    for (int ratio : {1, 2, 4}) {
      for (int D : {8, 32}) {
        const Case c{D, 70, 200, 130, 2 * ratio, 2, static_cast<Layout>(layout), 0.0f};
        ExpectWithinBudget(RunCase(c, seed++), c);
      }
    }
  }
}

// The decode path splits keys into chunks when there are fewer work items than threads; the
// result must not depend on the thread count beyond rounding.
TEST(Attention, DecodeSplitMatchesAcrossThreadCounts) {
  const Case c{16, 1, 1500, 1499, 4, 1, Layout::kCache, 0.0f};
  const int saved = NumThreads();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 5}) {
    SetNumThreads(threads);
    std::vector<float> out;
    const Errors e = RunCase(c, 7, &out);
    ExpectWithinBudget(e, c);
    outs.push_back(out);
  }
  SetNumThreads(saved);
  for (size_t i = 1; i < outs.size(); ++i) {
    for (size_t j = 0; j < outs[0].size(); ++j) {
      // Two results each within a few ulp of the double reference (asserted above).
      EXPECT_NEAR(outs[i][j], outs[0][j], 1e-5f);
    }
  }
}

TEST(Attention, SingleKeyGivesValueExactly) {
  // softmax over one key is exactly 1: p = 2^0 = 1 (the polynomial is exact at 0), l = 1.
  for (int D : {8, 24, 64}) {
    Rng rng(3);
    std::vector<float> q(2 * D), k(D), v(D), out(2 * D);
    for (float& x : q) x = static_cast<float>(rng.Normal());
    for (float& x : k) x = static_cast<float>(rng.Normal());
    for (float& x : v) x = static_cast<float>(rng.Normal());
    AttentionDims dims{1, 1, 0, 2, 1, D};
    AttentionForward({q.data(), 2 * D, D}, {k.data(), D, D}, {v.data(), D, D},
                     {out.data(), 2 * D, D}, dims, {0.3f});
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < D; ++d) EXPECT_EQ(out[h * D + d], v[d]) << "D=" << D;
    }
  }
}

TEST(Attention, HugeLogitsStayFiniteAndMatch) {
  uint64_t seed = 500;
  for (int D : {8, 64, 24}) {
    for (int64_t T : {1, 130}) {
      const Case c{D, T, 200, 200 - T, 4, 2, Layout::kDense, 1e3f};
      const Errors e = RunCase(c, seed++);
      EXPECT_TRUE(std::isfinite(e.kernel)) << c.Name();
      // With scores in the thousands the error is the scores' own rounding, amplified: if every
      // score is off by at most delta, each softmax weight is off by a factor within
      // e^(+-2 delta), so the output (a convex combination of v) is off by at most
      // (e^(2 delta) - 1) max|v|. Both float implementations sit anywhere inside that bound, so
      // the ratio to the float baseline is no longer meaningful; the bound is.
      const double bound = std::expm1(2 * e.score_bound) * e.v_max;
      EXPECT_LE(e.kernel, std::max(bound, 4.0 * e.naive)) << c.Name() << " bound=" << bound;
      EXPECT_GT(e.score_bound, 1e-4) << "scores are not huge: the test checks nothing new";
    }
  }
}

TEST(Attention, Exp2MaxRelativeError) {
  // Dense sweep of [-126, 127] (the range where 2^x is a normal float).
  const int n = 2000001;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = -126.0f + 253.0f * static_cast<float>(i) / (n - 1);
  attention_internal::Exp2Array(x.data(), y.data(), n);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const double want = std::exp2(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want) / want);
  }
  // Documented in attention_simd.h as 7.7e-8 (0.65 ulp): the polynomial's own error (~3e-8) plus
  // the roundings of its six FMAs and of the final multiply. 1e-7 leaves a little margin.
  EXPECT_LE(worst, 1e-7) << "worst relative error " << worst;
  // Masked scores (-inf) and anything below the normal range become exactly 0.
  const float low[] = {-std::numeric_limits<float>::infinity(), -1e30f, -200.0f, -127.0f, 0.0f};
  float out[5];
  attention_internal::Exp2Array(low, out, 5);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0f) << low[i];
  EXPECT_EQ(out[4], 1.0f);
}

TEST(Attention, ExpMaxRelativeError) {
  // ExpF (attention_simd.h), the attention backward's and the training ops' e^x: a dense sweep
  // of [-87.3, 88.7] (where e^x is a normal float), through ExpArray in place.
  const int n = 2000001;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = -87.3f + 176.0f * static_cast<float>(i) / (n - 1);
  y = x;
  attention_internal::ExpArray(y.data(), y.data(), n);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want) / want);
  }
  // "About 1 ulp" (attention_simd.h): Cephes' polynomial (~1e-8 on [-ln2/2, ln2/2]), the
  // two-step reduction of x (exact to ~1e-11 relative for |n| <= 128) and the roundings of the
  // FMAs and the two scaling multiplies; 1.2e-7 is one float ulp (2^-23) and a little margin.
  EXPECT_LE(worst, 1.2e-7) << "worst relative error " << worst;
  // Hidden keys (-inf) and anything below the normal range are exactly 0; overflow is +inf, as
  // std::exp gives; NaN stays NaN (a diverged score is not a probability of 0).
  const float edge[] = {-std::numeric_limits<float>::infinity(),
                        -1e30f,
                        -88.0f,
                        0.0f,
                        89.0f,
                        std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
  float out[7];
  attention_internal::ExpArray(edge, out, 7);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], 0.0f) << edge[i];
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[5], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(out[6]));
}

TEST(AttentionReference, RopeRelativeFormEqualsAbsoluteRotation) {
  // <R(m) q, R(n) k> = <R(m - n) q, k>: the reference with rel_pos = i - j on unrotated q, k must
  // equal the plain reference on q, k rotated at their absolute positions. Both are double; the
  // difference is rounding of cos/sin and of a few hundred terms: ~1e-15 relative, 1e-12 is loose.
  Rng rng(11);
  const int D = 16, H = 4, G = 2;
  const int64_t T = 20, S = 50, q_pos0 = 30;
  std::vector<double> q(T * H * D), k(S * G * D), v(S * G * D);
  for (double& x : q) x = rng.Normal();
  for (double& x : k) x = rng.Normal();
  for (double& x : v) x = rng.Normal();
  std::vector<double> thetas(D / 2);
  for (int t = 0; t < D / 2; ++t) thetas[t] = std::pow(10000.0, -2.0 * t / D);
  std::vector<int64_t> q_positions(T), k_positions(S);
  for (int64_t i = 0; i < T; ++i) q_positions[i] = q_pos0 + i;
  for (int64_t j = 0; j < S; ++j) k_positions[j] = j;
  const ref::AttentionShape sh{T, S, q_pos0, H, G, D};

  ref::AttentionOptions<double> relative;
  relative.scale = 0.25;
  relative.rope_thetas = thetas;
  relative.rel_pos = [](int64_t i, int64_t j) { return i - j; };
  const std::vector<double> a = ref::Attention(q, k, v, sh, relative);

  ref::AttentionOptions<double> plain;
  plain.scale = 0.25;
  const std::vector<double> b =
      ref::Attention(ref::ApplyRopeInterleaved(q, T, H, D, q_positions, thetas),
                     ref::ApplyRopeInterleaved(k, S, G, D, k_positions, thetas), v, sh, plain);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LE(worst, 1e-12);
  // And rotating really changes the result (the check above is not vacuous).
  const std::vector<double> c = ref::Attention(q, k, v, sh, plain);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - c[i]));
  EXPECT_GT(diff, 1e-3);
}

TEST(AttentionReference, ScoreModAndVisibleAreApplied) {
  // A window of 1 (each query sees only its own key) gives out = v at that position.
  Rng rng(5);
  const int D = 4, H = 2, G = 1;
  const int64_t T = 6, S = 6;
  std::vector<double> q(T * H * D), k(S * G * D), v(S * G * D);
  for (double& x : q) x = rng.Normal();
  for (double& x : k) x = rng.Normal();
  for (double& x : v) x = rng.Normal();
  ref::AttentionOptions<double> opt;
  opt.visible = [](int64_t i, int64_t j) { return i == j; };
  const std::vector<double> out = ref::Attention(q, k, v, {T, S, 0, H, G, D}, opt);
  for (int64_t i = 0; i < T; ++i) {
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < D; ++d) EXPECT_DOUBLE_EQ(out[(i * H + h) * D + d], v[i * D + d]);
    }
  }
  // A score_mod that adds a huge bias to key 0 makes every row copy v[0].
  ref::AttentionOptions<double> sink;
  sink.score_mod = [](int, int64_t, int64_t j, double s) { return j == 0 ? s + 1e3 : s; };
  const std::vector<double> out2 = ref::Attention(q, k, v, {T, S, 0, H, G, D}, sink);
  for (int64_t i = 0; i < T; ++i) {
    for (int d = 0; d < D; ++d) EXPECT_NEAR(out2[(i * H) * D + d], v[d], 1e-12);
  }
}

}  // namespace
}  // namespace stretch
