// The op harness's compare and gradient modes (src/kernels/op_cases.h) over its case table, one
// test per group of rows (each failure names its row, see RowTrace):
//   OpHarness.OpsCompare, .AttentionForwardCompare, .AttentionBackwardCompare:  the float kernel
//       against a double reference on the same (float) inputs, within the row's error budget;
//   OpHarness.OpsGradient, .AttentionBackwardGradient:  the backward in double against central
//       differences of the double forward (tests/testing/gradcheck.h) of L = sum(out * dout),
//       dout the row's random upstream gradient;
//   OpHarnessTable:  the table itself.
// The references live here (reference/ is header-only double code the library does not carry).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "reference/attention_backward.h"
#include "reference/llama.h"
#include "reference/position.h"
#include "src/kernels/op_cases.h"
#include "src/kernels/ops.h"
#include "src/position/method.h"
#include "tests/testing/float_baseline.h"
#include "tests/testing/gradcheck.h"

namespace stretch::op_cases {

namespace {

constexpr double kEpsF = std::numeric_limits<float>::epsilon();  // 2^-23

template <typename Vector>
std::vector<double> ToDouble(const Vector& x) {
  return {x.begin(), x.end()};
}
std::vector<float> ToFloat(const AlignedVector<float>& x) { return {x.begin(), x.end()}; }
double Dot(std::span<const double> a, std::span<const double> b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- Compare mode: the ops --------------------------------------------------------------------

// The double result of an op on the run's inputs, and per element the magnitude its budget
// scales (the sum of the magnitudes of the terms the element is made of).
struct Reference {
  std::vector<double> out, magnitude;
};

// The double instance of an op's templated forward on the run's inputs (L2Normalize, PairScale,
// HeadScale, Embedding, CrossEntropy: their float forwards are the inference engine's).
// x and w replace the run's first two arguments (the gradient mode varies them).
std::vector<double> DoubleForward(const OpRun& r, std::span<const double> x,
                                  std::span<const double> w) {
  const OpShape& s = r.c().shape;
  const std::vector<double> v = ToDouble(r.v);
  std::vector<double> y(x.begin(), x.end());
  switch (r.c().op) {
    case Op::kLinear:
      y.assign(static_cast<size_t>(s.T * s.N), 0.0);
      LinearForward<double>(x.data(), w.data(), y.data(), s.T, s.C, s.N);
      break;
    case Op::kEmbedding:
      y.assign(static_cast<size_t>(s.T * s.C), 0.0);
      EmbeddingForward<double>(r.ids.data(), x.data(), y.data(), s.T, s.C, s.N);
      break;
    case Op::kRmsNorm: RmsNormForward<double>(x.data(), w.data(), y.data(), s.T, s.C, 1e-5); break;
    case Op::kSwiGlu: SwiGluForward<double>(x.data(), w.data(), y.data(), s.T * s.C); break;
    case Op::kRope: {
      const std::vector<double> cos = ToDouble(r.rope().cos), sin = ToDouble(r.rope().sin);
      RopeInterleavedForward<double>(y.data(), s.T, s.H, int64_t{s.H} * s.C, s.C,
                                     {cos.data(), sin.data(), s.T, s.C / 2});
      break;
    }
    case Op::kL2Normalize: L2NormalizeForward<double>(x.data(), y.data(), s.T * s.H, s.C); break;
    case Op::kPairScale:
      PairScaleForward<double>(y.data(), s.T, s.H, int64_t{s.H} * s.C, s.C, s.C / 2, w.data());
      break;
    case Op::kHeadScale:
      HeadScaleForward<double>(y.data(), s.T, s.H, s.C, v.data(), w.data());
      break;
    case Op::kCrossEntropy:
      y = {CrossEntropyForward<double>(x.data(), r.ids.data(), s.T, s.C).mean};
      break;
    default: ADD_FAILURE() << "not an op row";
  }
  return y;
}

// Independent references where the repository has them (a plain double product, reference/
// llama.h's RMSNorm and rotation, SwiGLU's formula), else the double instance.
Reference OpReference(const OpRun& r) {
  const OpShape& s = r.c().shape;
  Reference ref;
  const std::vector<double> x = ToDouble(r.x);
  switch (r.c().op) {
    case Op::kLinear:
      for (int64_t t = 0; t < s.T; ++t) {
        for (int n = 0; n < s.N; ++n) {
          double sum = 0, mag = 0;
          for (int k = 0; k < s.C; ++k) {
            const double term = x[t * s.C + k] * double{r.w[n * s.C + k]};
            sum += term;
            mag += std::abs(term);
          }
          ref.out.push_back(sum);
          ref.magnitude.push_back(mag);
        }
      }
      return ref;
    case Op::kRmsNorm:
      for (int64_t t = 0; t < s.T; ++t) {
        const std::vector<double> row(x.begin() + t * s.C, x.begin() + (t + 1) * s.C);
        const std::vector<double> y = ref::RmsNormRef(row, ToFloat(r.w), 1e-5);
        ref.out.insert(ref.out.end(), y.begin(), y.end());
      }
      break;
    case Op::kSwiGlu:
      for (size_t i = 0; i < x.size(); ++i)
        ref.out.push_back(x[i] / (1 + std::exp(-x[i])) * r.w[i]);
      break;
    case Op::kRope:
      ref.out = x;
      for (int64_t t = 0; t < s.T; ++t) {
        for (int h = 0; h < s.H; ++h) {
          ref::RotateRef(&ref.out[(t * s.H + h) * s.C], s.C, static_cast<double>(s.q_pos0 + t),
                         10000.0);
        }
      }
      for (size_t i = 0; i < x.size(); ++i)
        ref.magnitude.push_back(std::abs(x[i]) + std::abs(x[i ^ 1]));
      return ref;
    default: ref.out = DoubleForward(r, x, ToDouble(r.w));
  }
  for (double y : ref.out) ref.magnitude.push_back(std::abs(y));
  return ref;
}

void CompareOp(OpRun& r) {
  r.Forward();
  const Reference ref = OpReference(r);
  const std::vector<double> got =
      r.c().op == Op::kCrossEntropy ? std::vector<double>{r.loss} : ToDouble(r.out);
  ASSERT_EQ(ref.out.size(), got.size());
  const ErrorBudget& b = r.c().budget;
  double worst = 0;
  for (size_t i = 0; i < ref.out.size(); ++i) {
    const double err = std::abs(got[i] - ref.out[i]);
    const double allowed = b.eps_multiple * kEpsF * ref.magnitude[i] + 1e-30;
    worst = std::max(worst, err / allowed);
    ASSERT_LE(err, allowed) << "element " << i << ": float " << got[i] << ", double " << ref.out[i]
                            << ", error " << err << " > allowed " << allowed << " (" << b.reason
                            << ")";
  }
  std::printf("[ compare   ] %-44s max err/allowed %.3f\n", r.c().name.c_str(), worst);
}

// ---- Compare mode: attention ------------------------------------------------------------------

// The reference forward told the method pair by pair (reference/position.h), as
// tests/kernels/method_attention_test.cc does.
template <typename Real>
ref::AttentionOptions<Real> ForwardOptions(const AttentionPlan* p, float scale) {
  ref::AttentionOptions<Real> opt;
  opt.scale = scale;
  if (p == nullptr) return opt;
  opt.visible = [p](int64_t i, int64_t j) { return ref::MethodVisible(p->method, i, j); };
  opt.rel_pos = [p](int64_t i, int64_t j) {
    return static_cast<Real>(ref::MethodRelPos(p->method, i, j));
  };
  if (p->dynamic) {
    opt.thetas_at = [p](int64_t i) {
      const std::vector<double> th = ref::MethodThetas(*p, i);
      return std::vector<Real>(th.begin(), th.end());
    };
  } else {
    opt.rope_thetas.assign(p->freq.thetas.begin(), p->freq.thetas.end());
  }
  if (p->xpos_scale_base > 0) {
    const std::vector<double> x =
        ref::XposLogDecay(static_cast<int>(p->freq.thetas.size()), p->xpos_scale_base);
    opt.pair_log_decay.assign(x.begin(), x.end());
  }
  opt.score_mod = [p](int h, int64_t i, int64_t j, Real s) {
    return static_cast<Real>(s * ref::MethodLogitFactor(*p, i) * ref::SsmaxFactor(*p, h, i) +
                             ref::BiasValue(p->bias, h, i - j));
  };
  return opt;
}

// max |got - want| against the budget: baseline_factor times the plain float32 implementation's
// max error plus eps_multiple ulp of the largest |want|.
void ExpectWithinBaseline(const AlignedVector<float>& got, const std::vector<double>& want,
                          const std::vector<float>& naive, const ErrorBudget& b,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const testing::BaselineError e = testing::MeasureAgainstBaseline(got, want, naive);
  const double err = e.err, base = e.baseline, mag = e.magnitude;
  const double budget = b.baseline_factor * base + b.eps_multiple * kEpsF * std::max(1.0, mag);
  EXPECT_LE(err, budget) << what << ": naive " << base << ", magnitude " << mag << " (" << b.reason
                         << ")";
  std::printf("[ compare   ] %-50s err/budget %.3f\n", what.c_str(), err / budget);
}

void CompareAttentionForward(OpRun& r) {
  ASSERT_FALSE(r.c().kv_head_major) << "the references below read k and v as (S, G, D)";
  r.Forward();
  const OpShape& s = r.c().shape;
  const AttentionPlan* p = r.plan();
  // QueryNorm / KeyNorm: the reference gets unit vectors (RoPE keeps the norm, so normalizing
  // before rotating is the same as after).
  std::vector<float> q = ToFloat(r.x), k = ToFloat(r.w);
  if (p != nullptr && p->query_norm)
    L2NormalizeForward<float>(r.x.data(), q.data(), s.T * s.H, s.C);
  if (p != nullptr && p->key_norm) L2NormalizeForward<float>(r.w.data(), k.data(), s.S * s.G, s.C);
  const ref::AttentionShape rs{s.T, s.S, s.q_pos0, s.H, s.G, s.C};
  const std::vector<double> want = ref::Attention(ToDouble(q), ToDouble(k), ToDouble(r.v), rs,
                                                  ForwardOptions<double>(p, r.scale()));
  const std::vector<float> naive =
      ref::Attention(q, k, ToFloat(r.v), rs, ForwardOptions<float>(p, r.scale()));
  ExpectWithinBaseline(r.out, want, naive, r.c().budget, r.c().name);
}

// The training reference's options: RoPE in relative form with the method's relative position of
// each pair when the kernel rotates (q and k raw), none on the plain path.
template <typename Real>
ref::TrainAttentionOptions<Real> BackwardOptions(const AttentionPlan* p, double scale) {
  ref::TrainAttentionOptions<Real> o;
  o.scale = static_cast<Real>(scale);
  if (p == nullptr) return o;
  o.visible = [p](int64_t i, int64_t j) { return ref::MethodVisible(p->method, i, j); };
  o.row_factor = [p](int64_t i) { return static_cast<Real>(ref::MethodLogitFactor(*p, i)); };
  o.bias = [p](int h, int64_t i, int64_t j) {
    return static_cast<Real>(ref::BiasValue(p->bias, h, i - j));
  };
  o.rope_thetas.assign(p->freq.thetas.begin(), p->freq.thetas.end());
  o.rel_pos = [p](int64_t i, int64_t j) {
    return static_cast<Real>(ref::MethodRelPos(p->method, i, j));
  };
  return o;
}

void CompareAttentionBackward(OpRun& r) {
  r.Forward();
  r.Backward();
  const OpShape& s = r.c().shape;
  const ref::AttentionShape rs{s.T, s.S, s.q_pos0, s.H, s.G, s.C};
  const ref::TrainAttentionGrads<double> want =
      ref::TrainAttentionBackward(ToDouble(r.x), ToDouble(r.w), ToDouble(r.v), ToDouble(r.dout), rs,
                                  BackwardOptions<double>(r.plan(), r.scale()));
  const ref::TrainAttentionGrads<float> naive =
      ref::TrainAttentionBackward(ToFloat(r.x), ToFloat(r.w), ToFloat(r.v), ToFloat(r.dout), rs,
                                  BackwardOptions<float>(r.plan(), r.scale()));
  ExpectWithinBaseline(r.dx, want.dq, naive.dq, r.c().budget, r.c().name + " dq");
  ExpectWithinBaseline(r.dw, want.dk, naive.dk, r.c().budget, r.c().name + " dk");
  ExpectWithinBaseline(r.dv, want.dv, naive.dv, r.c().budget, r.c().name + " dv");
}

// ---- Gradient mode ----------------------------------------------------------------------------

// Each differentiable argument of an op: its double backward against central differences of its
// double forward, and the check shown to flag the same gradient with its largest coordinate off
// by 1% (gradcheck.h).
void GradientOp(const OpRun& r) {
  const OpShape& s = r.c().shape;
  const std::vector<double> x = ToDouble(r.x), w = ToDouble(r.w), v = ToDouble(r.v);
  const std::vector<double> R = ToDouble(r.dout);
  testing::GradcheckOptions options;
  options.step = r.c().grad_step;
  // L(x) and L(w): the forward with one argument replaced.
  auto loss_x = [&](std::span<const double> xv) { return Dot(DoubleForward(r, xv, w), R); };
  auto loss_w = [&](std::span<const double> wv) { return Dot(DoubleForward(r, x, wv), R); };
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
  bool has_dw = true;
  switch (r.c().op) {
    case Op::kLinear:
      LinearBackward<double>(R.data(), x.data(), w.data(), dx.data(), dw.data(), s.T, s.C, s.N,
                             GradWrite::kOverwrite);
      break;
    case Op::kEmbedding:
      EmbeddingBackward<double>(r.ids.data(), R.data(), dx.data(), s.T, s.C, s.N);
      has_dw = false;
      break;
    case Op::kRmsNorm:
      RmsNormBackward<double>(R.data(), x.data(), w.data(), dx.data(), dw.data(), s.T, s.C, 1e-5,
                              GradWrite::kOverwrite);
      break;
    case Op::kSwiGlu:
      SwiGluBackward<double>(R.data(), x.data(), w.data(), dx.data(), dw.data(), s.T * s.C);
      break;
    case Op::kRope: {
      const std::vector<double> cos = ToDouble(r.rope().cos), sin = ToDouble(r.rope().sin);
      dx = R;
      RopeInterleavedBackward<double>(dx.data(), s.T, s.H, int64_t{s.H} * s.C, s.C,
                                      {cos.data(), sin.data(), s.T, s.C / 2});
      has_dw = false;  // the angles are not learned
      break;
    }
    case Op::kL2Normalize:
      L2NormalizeBackward<double>(R.data(), x.data(), dx.data(), s.T * s.H, s.C);
      has_dw = false;
      break;
    case Op::kPairScale:
      dx = R;
      PairScaleBackward<double>(dx.data(), s.T, s.H, int64_t{s.H} * s.C, s.C, s.C / 2, w.data());
      has_dw = false;  // the factors are not learned
      break;
    case Op::kHeadScale:
      dx = R;
      HeadScaleBackward<double>(dx.data(), x.data(), s.T, s.H, s.C, v.data(), w.data(), dw.data());
      break;
    case Op::kCrossEntropy:
      CrossEntropyBackward<double>(x.data(), r.ids.data(), dx.data(), s.T, s.C, R[0]);
      has_dw = false;  // the targets are integers
      break;
    default: FAIL() << "not an op row";
  }
  testing::ExpectGradcheckFlagsOnePercent(r.c().name + " dx", loss_x, x, dx, options);
  if (!has_dw) return;
  testing::ExpectGradcheckFlagsOnePercent(r.c().name + " dw", loss_w, w, dw, options);
}

// The reference's backward against central differences of its own forward, for q, k and v (a
// drawn subset of each: every coordinate costs two reference forwards); the gradient must not be
// all ~0, or the check would check nothing.
void GradientAttention(const OpRun& r) {
  const OpShape& s = r.c().shape;
  const ref::AttentionShape rs{s.T, s.S, s.q_pos0, s.H, s.G, s.C};
  const ref::TrainAttentionOptions<double> opt = BackwardOptions<double>(r.plan(), r.scale());
  std::vector<double> q = ToDouble(r.x), k = ToDouble(r.w), v = ToDouble(r.v);
  const std::vector<double> R = ToDouble(r.dout);
  const ref::TrainAttentionGrads<double> g = ref::TrainAttentionBackward(q, k, v, R, rs, opt);
  testing::GradcheckOptions options;
  options.step = r.c().grad_step;
  options.max_coords = r.c().grad_coords;
  struct Arg {
    const char* name;
    std::vector<double>* x;
    const std::vector<double>* grad;
  };
  for (const Arg& a : {Arg{"dq", &q, &g.dq}, Arg{"dk", &k, &g.dk}, Arg{"dv", &v, &g.dv}}) {
    const std::vector<double> x0 = *a.x;
    auto loss = [&](std::span<const double> xv) {
      a.x->assign(xv.begin(), xv.end());
      const double l = Dot(ref::TrainAttentionForward(q, k, v, rs, opt).out, R);
      *a.x = x0;
      return l;
    };
    testing::ExpectGradcheck(r.c().name + " " + a.name, loss, x0, *a.grad, options);
    double largest = 0;
    for (double d : *a.grad) largest = std::max(largest, std::abs(d));
    EXPECT_GT(largest, 1e-3) << a.name << ": a gradient that is all ~0 checks nothing";
  }
}

// ---- One test per group of rows --------------------------------------------------------------
//
// Each group is one GoogleTest (one ctest entry) that runs its rows in table order. A row's
// failures carry a trace naming the row (RowTrace), and a fatal failure inside a row's check
// ends that row's check only: the loop goes on with the next row.

bool IsOpRow(const OpCase& c) { return c.op != Op::kAttention && c.op != Op::kAttentionBackward; }
bool IsAttentionForwardRow(const OpCase& c) { return c.op == Op::kAttention; }
bool IsAttentionBackwardRow(const OpCase& c) { return c.op == Op::kAttentionBackward; }

// The rows of the table that `keep` selects.
std::vector<OpCase> Rows(bool (*keep)(const OpCase&)) {
  std::vector<OpCase> out;
  for (OpCase& c : AllCases()) {
    if (keep(c)) out.push_back(std::move(c));
  }
  return out;
}

// Everything that tells a row apart: name, description, shape, parameters and error budget.
std::string RowTrace(const OpCase& c) {
  const OpShape& s = c.shape;
  std::string t = "row " + c.name + " (" + std::string(OpName(c.op)) + "): " + c.description;
  t += "\n  shape T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
       " N=" + std::to_string(s.N) + " H=" + std::to_string(s.H) + " G=" + std::to_string(s.G) +
       " S=" + std::to_string(s.S) + " q_pos0=" + std::to_string(s.q_pos0);
  if (c.op == Op::kAttention || c.op == Op::kAttentionBackward) {
    t += "\n  method '" + c.method + "' train_len " + std::to_string(c.train_len) + " variant " +
         std::string(VariantName(c.variant)) + " rotation " +
         (c.rotation == Rotation::kNone     ? "none"
          : c.rotation == Rotation::kKernel ? "kernel"
                                            : "prerotated");
  }
  t += "\n  budget " + std::to_string(c.budget.eps_multiple) + " eps, " +
       std::to_string(c.budget.baseline_factor) + " x baseline (" + std::string(c.budget.reason) +
       ")\n  grad step " + std::to_string(c.grad_step) + ", coords " +
       std::to_string(c.grad_coords) + " (0: all), seed " + std::to_string(c.seed);
  return t;
}

// Runs `check` on every row `keep` selects, each under its row's trace; expects at least one.
template <typename Check>
void ForEachRow(bool (*keep)(const OpCase&), Check check) {
  const std::vector<OpCase> rows = Rows(keep);
  EXPECT_FALSE(rows.empty());
  for (const OpCase& c : rows) {
    SCOPED_TRACE(RowTrace(c));
    OpRun r(c);
    check(r);
  }
}

// Compare mode: the float kernel against the double reference, within each row's budget.
TEST(OpHarness, OpsCompare) { ForEachRow(IsOpRow, CompareOp); }
TEST(OpHarness, AttentionForwardCompare) {
  ForEachRow(IsAttentionForwardRow, CompareAttentionForward);
}
TEST(OpHarness, AttentionBackwardCompare) {
  ForEachRow(IsAttentionBackwardRow, CompareAttentionBackward);
}

// Gradient mode: the double backward against central differences of the double forward.
TEST(OpHarness, OpsGradient) { ForEachRow(IsOpRow, GradientOp); }
TEST(OpHarness, AttentionBackwardGradient) {
  ForEachRow(IsAttentionBackwardRow, GradientAttention);
}

// `stretch bench`'s attention cases hold keys and values kv head by kv head (kv_head_major), as
// the model's cache does. The layout moves no arithmetic: the same keys and values laid out
// (S, G, D) give the same output bit for bit, for the plain path, prerotated keys and keys
// rotated in the kernel (KernelRotation's copies: one for rerope, two for self-extend). D = 32:
// 8 heads on 8 kv heads; D = 8: 8 heads on 4 kv heads.
TEST(OpHarnessBench, KvHeadMajorLayoutGivesTheSameOutput) {
  struct Row {
    std::string method;
    int D;
    Rotation rotation;
  };
  const Row rows[] = {{"", 32, Rotation::kNone},
                      {"pi:factor=2", 32, Rotation::kPrerotated},
                      {"rerope:window=64", 32, Rotation::kKernel},
                      {"self-extend:group=4,window=32", 8, Rotation::kKernel}};
  for (const auto& [method, head_dim, rotation] : rows) {
    SCOPED_TRACE((method.empty() ? std::string("plain") : method) +
                 " D=" + std::to_string(head_dim));
    const OpCase head_major = BenchAttentionCase(200, head_dim, method);
    ASSERT_TRUE(head_major.kv_head_major);
    ASSERT_EQ(head_major.rotation, rotation);
    OpCase row_major = head_major;
    row_major.kv_head_major = false;
    OpRun a(head_major), b(row_major);
    const int64_t S = head_major.shape.S, G = head_major.shape.G, D = head_major.shape.C;
    ASSERT_EQ(a.w.size(), static_cast<size_t>(S * G * D));
    for (int64_t j = 0; j < S; ++j) {  // b's (S, G, D) from a's (G, S, D)
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t d = 0; d < D; ++d) {
          b.w[(j * G + g) * D + d] = a.w[(g * S + j) * D + d];
          b.v[(j * G + g) * D + d] = a.v[(g * S + j) * D + d];
        }
      }
    }
    b.x = a.x;
    a.Forward();
    b.Forward();
    ASSERT_EQ(a.out.size(), b.out.size());
    size_t differ = 0;
    for (size_t i = 0; i < a.out.size(); ++i) differ += a.out[i] != b.out[i];
    EXPECT_EQ(differ, 0u) << "of " << a.out.size() << " outputs";
  }
}

// The table itself: unique test names, a reason beside every budget, and every method of the
// spec registry (src/position/method.h) a forward row, every static one a backward row.
TEST(OpHarnessTable, EveryRegisteredMethodAndOpIsARow) {
  const std::vector<OpCase> cases = AllCases();
  std::set<std::string> names, forward, backward, ops;
  for (const OpCase& c : cases) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate row " << c.name;
    EXPECT_FALSE(c.budget.reason.empty()) << c.name;
    EXPECT_FALSE(c.description.empty()) << c.name;
    ops.insert(std::string(OpName(c.op)));
    if (c.method.empty()) continue;
    const std::string name(MethodName(ParseMethod(c.method)));
    (c.op == Op::kAttention ? forward : backward).insert(name);
  }
  for (std::string_view name : MethodSpecNames()) {
    EXPECT_TRUE(forward.count(std::string(name))) << name << " has no attention row";
    if (name.substr(0, 8) != "dynamic-") {
      EXPECT_TRUE(backward.count(std::string(name))) << name << " has no backward row";
    }
  }
  EXPECT_EQ(ops.size(), 11u);
}

}  // namespace
}  // namespace stretch::op_cases
