// Tests of the parameter registry, AdamW, clipping and the schedule (src/train/optim.h).
// AdamW is checked against the update written out here in double from the paper's formula, not
// against the library's own code path.
#include "src/train/optim.h"
#include "tests/testing/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/io/safetensors.h"

namespace stretch {
namespace {

using testing::ErrorOf;

constexpr double kFloatEps = 1.0 / 16777216.0;  // 2^-24: the relative error of one float rounding

// A tensor with its gradient, owned by the test as a model would own it.
struct Tensor {
  std::vector<float> value;
  std::vector<float> grad;
  explicit Tensor(std::vector<float> v) : value(std::move(v)), grad(value.size(), 0.0f) {}
};

std::string TempPath(const std::string& name) {
  return (testing::ProgramTempDir("stretch_train_optim_") / name).string();
}

// ---------------------------------------------------------------------------------------------
// Registry

TEST(ParamRegistryTest, ListsTensorsInOrder) {
  Tensor a({1, 2, 3, 4, 5, 6});
  Tensor b({7});
  ParamRegistry params;
  params.Add("a", {2, 3}, a.value, a.grad, WeightDecay::kApply);
  params.Add("b.gain", {1}, b.value, b.grad, WeightDecay::kNone);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params.numel(), 7);
  EXPECT_EQ(params.params()[0].name, "a");
  EXPECT_EQ(params.params()[0].numel(), 6);
  EXPECT_EQ(params.params()[1].decay, WeightDecay::kNone);
  EXPECT_EQ(params.Find("b.gain")->value, b.value.data());
  EXPECT_EQ(params.Find("c"), nullptr);
}

TEST(ParamRegistryTest, ZeroAndScaleGrads) {
  Tensor a({1, 2, 3});
  a.grad = {1.0f, -3.0f, 0.1f};
  ParamRegistry params;
  params.Add("a", {3}, a.value, a.grad, WeightDecay::kApply);
  ScaleGrads(params, 0.25);
  EXPECT_EQ(a.grad, (std::vector<float>{0.25f, -0.75f, static_cast<float>(0.1f * 0.25)}));
  ZeroGrads(params);
  EXPECT_EQ(a.grad, (std::vector<float>{0, 0, 0}));
}

// ---------------------------------------------------------------------------------------------
// AdamW against the formula

// One scalar under AdamW, in double, written from Loshchilov & Hutter's update:
//   p_t = p_{t-1} - lr * (mhat / (sqrt(vhat) + eps) + wd * p_{t-1}).
struct ReferenceScalar {
  double p, m = 0, v = 0;
  void Step(int t, double g, double lr, const AdamWConfig& c, bool decay) {
    m = c.beta1 * m + (1 - c.beta1) * g;
    v = c.beta2 * v + (1 - c.beta2) * g * g;
    const double mhat = m / (1 - std::pow(c.beta1, t));
    const double vhat = v / (1 - std::pow(c.beta2, t));
    p = p - lr * (mhat / (std::sqrt(vhat) + c.eps) + (decay ? c.weight_decay : 0.0) * p);
  }
};

TEST(AdamWTest, FollowsTheFormulaInDouble) {
  const AdamWConfig config{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  // Per scalar: start, gradients (one sign each, see the tolerance), whether it decays. The third
  // has gradients near eps, where eps's place (outside the square root) matters.
  struct Case {
    float p0;
    std::vector<float> grads;
    bool decay;
  };
  const std::vector<Case> cases = {
      {0.75f, {0.5f, 0.25f, 1.0f, 0.125f, 2.0f, 0.5f}, true},
      {-1.5f, {-3.0f, -0.001f, -0.5f, -7.0f, -0.25f, -1.0f}, false},
      {2.0f, {1e-9f, 3e-9f, 2e-9f, 1e-8f, 5e-9f, 1e-9f}, true},
      {0.0f, {0.25f, 0.5f, 0.125f, 1.0f, 0.75f, 0.5f}, false},
  };
  const std::vector<double> lrs = {0.05, 0.1, 0.1, 0.08, 0.02, 0.01};

  std::vector<Tensor> tensors;
  for (const Case& c : cases) tensors.emplace_back(std::vector<float>{c.p0});
  ParamRegistry params;
  for (size_t i = 0; i < cases.size(); ++i) {
    params.Add("s" + std::to_string(i), {}, tensors[i].value, tensors[i].grad,
               cases[i].decay ? WeightDecay::kApply : WeightDecay::kNone);
  }
  AdamW adamw(params, config);
  std::vector<ReferenceScalar> ref;
  for (const Case& c : cases) ref.push_back({.p = c.p0});

  double max_p = 0, max_lr = 0;
  for (size_t t = 1; t <= lrs.size(); ++t) {
    for (size_t i = 0; i < cases.size(); ++i) {
      tensors[i].grad[0] = cases[i].grads[t - 1];
      ref[i].Step(static_cast<int>(t), cases[i].grads[t - 1], lrs[t - 1], config, cases[i].decay);
      max_p = std::max(max_p, std::abs(ref[i].p));
    }
    adamw.Step(lrs[t - 1]);
    max_lr = std::max(max_lr, lrs[t - 1]);
    ASSERT_EQ(adamw.step(), static_cast<int64_t>(t));
    // The library stores m, v and p in float each step (relative error 2^-24 each); with gradients
    // of one sign, m and v are sums of like-signed terms, so after t steps their relative error is
    // at most t * 2^-24, the update lr * mhat / (sqrt(vhat) + eps) carries at most 2t * 2^-24
    // (1 from m, 1/2 from v through the root, rounding), and p adds |p| * 2^-24 per step:
    //   |p - p_ref| <= t * (max|p| + 2 t max lr) * 2^-24, doubled for the double-precision steps.
    const double tol_p = 2.0 * t * (max_p + 2.0 * t * max_lr) * kFloatEps;
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE("scalar " + std::to_string(i) + ", step " + std::to_string(t));
      EXPECT_NEAR(tensors[i].value[0], ref[i].p, tol_p);
      EXPECT_NEAR(adamw.first_moment(i)[0], ref[i].m, 2.0 * t * std::abs(ref[i].m) * kFloatEps);
      EXPECT_NEAR(adamw.second_moment(i)[0], ref[i].v, 2.0 * t * std::abs(ref[i].v) * kFloatEps);
    }
  }
  // The scalars did move by many tolerances (the test can tell a wrong update from a right one).
  EXPECT_GT(std::abs(tensors[0].value[0] - 0.75f), 0.1);
  EXPECT_GT(std::abs(tensors[2].value[0] - 2.0f), 0.01);
}

// Bias correction written out for the first two steps:
//   t = 1: mhat = g1, vhat = g1^2, so p1 = p0 - lr * (g1 / (|g1| + eps) + wd p0);
//   t = 2: mhat = (b1 g1 + g2) / (1 + b1), vhat = (b2 g1^2 + g2^2) / (1 + b2).
TEST(AdamWTest, BiasCorrectionAtSteps1And2) {
  const AdamWConfig c{.beta1 = 0.8, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.5};
  const double p0 = 1.25, g1 = -0.375, g2 = 1.5, lr = 0.1;
  Tensor x({static_cast<float>(p0)});
  ParamRegistry params;
  params.Add("x", {}, x.value, x.grad, WeightDecay::kApply);
  AdamW adamw(params, c);

  x.grad[0] = static_cast<float>(g1);
  adamw.Step(lr);
  const double p1 = p0 - lr * (g1 / (std::abs(g1) + c.eps) + c.weight_decay * p0);
  // One rounding of p (2^-24 |p|) and of the update (<= 4 roundings of the lr-sized term).
  const double tol1 = (std::abs(p1) + 4 * lr) * kFloatEps;
  EXPECT_NEAR(x.value[0], p1, tol1);
  EXPECT_NEAR(adamw.first_moment(0)[0], (1 - c.beta1) * g1, 2 * kFloatEps);
  EXPECT_NEAR(adamw.second_moment(0)[0], (1 - c.beta2) * g1 * g1, 2 * kFloatEps);

  x.grad[0] = static_cast<float>(g2);
  adamw.Step(lr);
  const double mhat = (c.beta1 * g1 + g2) / (1 + c.beta1);
  const double vhat = (c.beta2 * g1 * g1 + g2 * g2) / (1 + c.beta2);
  const double p2 = p1 - lr * (mhat / (std::sqrt(vhat) + c.eps) + c.weight_decay * p1);
  // Twice the roundings of step 1; m changes sign here, so m's own rounding is relative to the
  // larger of its two terms (|g| <= 1.5): well inside 8 roundings of the lr-sized term.
  EXPECT_NEAR(x.value[0], p2, 2 * tol1 + 8 * lr * kFloatEps);
  // Without bias correction the step would differ by far more than the tolerance.
  const double m2 = c.beta1 * (1 - c.beta1) * g1 + (1 - c.beta1) * g2;
  const double v2 = c.beta2 * (1 - c.beta2) * g1 * g1 + (1 - c.beta2) * g2 * g2;
  const double p2_uncorrected = p1 - lr * (m2 / (std::sqrt(v2) + c.eps) + c.weight_decay * p1);
  EXPECT_GT(std::abs(p2 - p2_uncorrected), 1000 * tol1);
}

TEST(AdamWTest, WeightDecayOnlyWhereFlagged) {
  const AdamWConfig c{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.2};
  const std::vector<float> start = {1.0f, -2.0f, 0.5f, 3.0f};
  Tensor decayed(start), kept(start);
  ParamRegistry params;
  params.Add("w", {2, 2}, decayed.value, decayed.grad, WeightDecay::kApply);
  params.Add("norm.gain", {4}, kept.value, kept.grad, WeightDecay::kNone);
  AdamW adamw(params, c);
  const double lr = 0.05;

  // Zero gradient: the Adam term is 0 / (0 + eps) = 0, so only the decay moves anything.
  adamw.Step(lr);
  EXPECT_EQ(kept.value, start);
  for (size_t i = 0; i < start.size(); ++i) {
    EXPECT_EQ(decayed.value[i], static_cast<float>(start[i] * (1.0 - lr * c.weight_decay)));
  }

  // Equal gradients: the two tensors now differ by the decay term alone, lr * wd * p.
  const std::vector<float> before_decayed = decayed.value;
  const std::vector<float> before_kept = kept.value;
  decayed.grad = kept.grad = {0.5f, -1.0f, 0.25f, 2.0f};
  adamw.Step(lr);
  for (size_t i = 0; i < start.size(); ++i) {
    const double moved_decayed = decayed.value[i] - static_cast<double>(before_decayed[i]);
    const double moved_kept = kept.value[i] - static_cast<double>(before_kept[i]);
    const double expected = -lr * c.weight_decay * before_decayed[i];
    // Three float roundings of values of size <= 3.
    EXPECT_NEAR(moved_decayed - moved_kept, expected, 3 * 3.0 * kFloatEps) << i;
    EXPECT_NE(moved_kept, 0.0);
  }
}

// f(x) = 1/2 sum_i a_i (x_i - c_i)^2 with curvatures over three decades; gradient a_i (x_i - c_i).
// 400 steps of warm-up + cosine from lr 0.1 to 0 bring every coordinate within 1e-3 of c (Adam's
// step is about lr in every coordinate whatever a_i, and the cosine's tail shrinks it to 0).
TEST(AdamWTest, MinimizesAConvexQuadratic) {
  const std::vector<double> a = {0.1, 1.0, 10.0, 100.0};
  const std::vector<double> target = {1.0, -2.0, 3.0, 0.5};
  Tensor x({0, 0, 0, 0});
  ParamRegistry params;
  params.Add("x", {4}, x.value, x.grad, WeightDecay::kNone);
  AdamW adamw(params, {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.0});
  const LrSchedule schedule{.lr = 0.1, .min_lr = 0.0, .warmup_steps = 10, .total_steps = 400};
  auto loss = [&] {
    double f = 0;
    for (size_t i = 0; i < a.size(); ++i) f += 0.5 * a[i] * std::pow(x.value[i] - target[i], 2);
    return f;
  };
  const double initial = loss();
  for (int64_t s = 0; s < schedule.total_steps; ++s) {
    for (size_t i = 0; i < a.size(); ++i) {
      x.grad[i] = static_cast<float>(a[i] * (x.value[i] - target[i]));
    }
    adamw.Step(LearningRate(schedule, s));
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(x.value[i], target[i], 1e-3) << i;
  EXPECT_LT(loss(), 1e-6 * initial);
}

// The same inputs give the same bits on 1 thread and on several (the update is element-wise).
TEST(AdamWTest, IsIndependentOfTheThreadCount) {
  const int64_t n = 100003;  // above the parallel threshold, not a multiple of anything
  Rng rng(7);
  std::vector<float> start(n), grads(n);
  for (int64_t i = 0; i < n; ++i) {
    start[i] = static_cast<float>(rng.Normal());
    grads[i] = static_cast<float>(rng.Normal() * 0.01);
  }
  auto run = [&](int threads) {
    SetNumThreads(threads);
    Tensor w(start);
    ParamRegistry params;
    params.Add("w", {n}, w.value, w.grad, WeightDecay::kApply);
    AdamW adamw(params, AdamWConfig{});
    for (int t = 0; t < 3; ++t) {
      for (int64_t i = 0; i < n; ++i) w.grad[i] = grads[i] * static_cast<float>(t + 1);
      ScaleGrads(params, 0.5);
      adamw.Step(1e-3);
    }
    return std::vector<std::vector<float>>{
        w.value, std::vector<float>(adamw.first_moment(0).begin(), adamw.first_moment(0).end()),
        std::vector<float>(adamw.second_moment(0).begin(), adamw.second_moment(0).end())};
  };
  const int saved = NumThreads();
  const auto one = run(1);
  const auto four = run(4);
  SetNumThreads(saved);
  for (size_t k = 0; k < one.size(); ++k) {
    EXPECT_EQ(std::memcmp(one[k].data(), four[k].data(), n * sizeof(float)), 0) << k;
  }
  EXPECT_NE(std::memcmp(one[0].data(), start.data(), n * sizeof(float)), 0);
}

// ---------------------------------------------------------------------------------------------
// Clipping

TEST(ClipTest, NormOverEveryTensor) {
  Tensor a({0, 0});
  Tensor b({0});
  a.grad = {3, 4};
  b.grad = {12};
  ParamRegistry params;
  params.Add("a", {2}, a.value, a.grad, WeightDecay::kApply);
  params.Add("b", {1}, b.value, b.grad, WeightDecay::kNone);
  EXPECT_EQ(GradNorm(params), 13.0);  // sqrt(9 + 16 + 144), exact in double

  // Below the threshold: the gradients are not touched.
  ClipResult r = ClipGradNorm(params, 14.0);  // scale 14 / 13 > 1: not applied
  EXPECT_EQ(r.norm, 13.0);
  EXPECT_EQ(r.scale, 1.0);
  EXPECT_EQ(a.grad, (std::vector<float>{3, 4}));
  EXPECT_EQ(b.grad, (std::vector<float>{12}));

  // Above: scaled by max_norm / (norm + 1e-6), every tensor alike.
  for (const double max_norm : {10.0, 6.5, 0.01}) {
    SCOPED_TRACE(max_norm);
    a.grad = {3, 4};
    b.grad = {12};
    r = ClipGradNorm(params, max_norm);
    EXPECT_EQ(r.norm, 13.0);
    const double scale = max_norm / (13.0 + 1e-6);
    EXPECT_EQ(r.scale, scale);
    EXPECT_EQ(a.grad,
              (std::vector<float>{static_cast<float>(3 * scale), static_cast<float>(4 * scale)}));
    EXPECT_EQ(b.grad, (std::vector<float>{static_cast<float>(12 * scale)}));
    // Three float roundings of the gradients, and the 1e-6.
    EXPECT_NEAR(GradNorm(params), max_norm, max_norm * (4 * kFloatEps + 1e-6 / 13));
  }
}

TEST(ClipTest, NonFiniteNormLeavesGradients) {
  Tensor a({0, 0});
  a.grad = {1.0f, std::numeric_limits<float>::infinity()};
  ParamRegistry params;
  params.Add("a", {2}, a.value, a.grad, WeightDecay::kApply);
  const ClipResult r = ClipGradNorm(params, 1.0);
  EXPECT_TRUE(std::isinf(r.norm));
  EXPECT_EQ(r.scale, 1.0);
  EXPECT_EQ(a.grad[0], 1.0f);
}

// A long tensor (several chunks, a partial last one): the norm matches a plain double sum to
// rounding (n additions of positive terms: relative error <= n * 2^-53), and is bit-identical on
// any number of threads.
TEST(ClipTest, LongTensorNormIsAccurateAndThreadIndependent) {
  const int64_t n = 5 * kGradNormChunk + 123;
  Rng rng(3);
  Tensor w(std::vector<float>(n, 0.0f));
  for (float& g : w.grad) g = static_cast<float>(rng.Normal());
  ParamRegistry params;
  params.Add("w", {n}, w.value, w.grad, WeightDecay::kApply);
  double plain = 0;
  for (float g : w.grad) plain += static_cast<double>(g) * g;
  plain = std::sqrt(plain);
  const int saved = NumThreads();
  SetNumThreads(1);
  const double one = GradNorm(params);
  SetNumThreads(3);
  const double three = GradNorm(params);
  SetNumThreads(saved);
  EXPECT_NEAR(one, plain, plain * static_cast<double>(n) * 0x1p-53);
  EXPECT_EQ(std::memcmp(&one, &three, sizeof(double)), 0);
}

// ---------------------------------------------------------------------------------------------
// Schedule

TEST(LrScheduleTest, WarmUpThenCosine) {
  const LrSchedule s{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 111};
  ValidateLrSchedule(s);
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.1);  // lr / W
  EXPECT_DOUBLE_EQ(LearningRate(s, 4), 0.5);
  EXPECT_EQ(LearningRate(s, 9), 1.0);   // end of warm-up
  EXPECT_EQ(LearningRate(s, 10), 1.0);  // start of the decay
  // Decay over 100 steps: halfway (step 60) is the mean of lr and min_lr.
  EXPECT_NEAR(LearningRate(s, 60), 0.55, 1e-15);
  EXPECT_NEAR(LearningRate(s, 35), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)),
              1e-15);
  EXPECT_EQ(LearningRate(s, 110), 0.1);  // the last step, exactly min_lr
  EXPECT_EQ(LearningRate(s, 500), 0.1);  // and after
  for (int64_t t = 1; t < 10; ++t) EXPECT_GT(LearningRate(s, t), LearningRate(s, t - 1)) << t;
  for (int64_t t = 11; t < 111; ++t) EXPECT_LT(LearningRate(s, t), LearningRate(s, t - 1)) << t;
}

TEST(LrScheduleTest, EdgeCases) {
  // No warm-up: the first step runs at lr.
  EXPECT_EQ(LearningRate({.lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 5}, 0), 2.0);
  EXPECT_EQ(LearningRate({.lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 5}, 4), 0.0);
  // Constant after warm-up when min_lr == lr.
  const LrSchedule flat{.lr = 0.3, .min_lr = 0.3, .warmup_steps = 2, .total_steps = 20};
  for (int64_t t = 1; t < 20; ++t) EXPECT_DOUBLE_EQ(LearningRate(flat, t), 0.3) << t;
  // Warm-up over the whole run, and a single step.
  EXPECT_EQ(LearningRate({.lr = 1.0, .min_lr = 0.0, .warmup_steps = 4, .total_steps = 4}, 3), 1.0);
  EXPECT_EQ(LearningRate({.lr = 1.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 1}, 0), 1.0);
}

TEST(LrScheduleTest, ValidationNamesTheField) {
  EXPECT_EQ(ErrorOf([] {
              ValidateLrSchedule({.lr = -1, .min_lr = 0, .warmup_steps = 0, .total_steps = 1});
            }),
            "lr=-1: expected a positive number");
  EXPECT_EQ(ErrorOf([] {
              ValidateLrSchedule({.lr = 1, .min_lr = 2, .warmup_steps = 0, .total_steps = 1});
            }),
            "min_lr=2: expected 0 <= min_lr <= lr=1");
  EXPECT_EQ(ErrorOf([] {
              ValidateLrSchedule({.lr = 1, .min_lr = 0, .warmup_steps = 5, .total_steps = 4});
            }),
            "warmup_steps=5: expected 0 <= warmup_steps <= total_steps=4");
  EXPECT_EQ(ErrorOf([] {
              ValidateLrSchedule({.lr = 1, .min_lr = 0, .warmup_steps = 0, .total_steps = 0});
            }),
            "total_steps=0: expected at least 1");
  EXPECT_EQ(ErrorOf([] { ValidateAdamWConfig({.beta1 = 0.9, .beta2 = 1.5}); }),
            "adamw beta2=1.5: expected 0 <= beta2 < 1");
  EXPECT_EQ(ErrorOf([] { ValidateAdamWConfig({.eps = 0}); }),
            "adamw eps=0: expected a positive number");
}

// ---------------------------------------------------------------------------------------------
// Checkpointing the optimizer

// A tiny "model": two tensors and a loss whose gradient depends on the weights and the step.
struct TinyModel {
  Tensor w{std::vector<float>(6)};
  Tensor gain{std::vector<float>(3)};
  ParamRegistry params;
  TinyModel() {
    params.Add("w", {2, 3}, w.value, w.grad, WeightDecay::kApply);
    params.Add("gain", {3}, gain.value, gain.grad, WeightDecay::kNone);
  }
  void Init(uint64_t seed) {
    Rng rng(seed);
    for (float& x : w.value) x = static_cast<float>(rng.Normal());
    for (float& x : gain.value) x = 1.0f + 0.1f * static_cast<float>(rng.Normal());
  }
  void Gradients(int64_t step) {
    for (size_t i = 0; i < w.value.size(); ++i) {
      w.grad[i] = w.value[i] - 0.5f + 0.3f * static_cast<float>(std::sin(0.7 * step + i));
    }
    for (size_t i = 0; i < gain.value.size(); ++i) {
      gain.grad[i] = 2.0f * (gain.value[i] - 1.0f) + 0.1f * static_cast<float>(std::cos(step + i));
    }
  }
};

void Train(TinyModel& model, AdamW& adamw, const LrSchedule& s, int64_t from, int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    model.Gradients(step);
    ClipGradNorm(model.params, 1.0);
    adamw.Step(LearningRate(s, step));
  }
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST(AdamWCheckpointTest, RestoredStateContinuesBitForBit) {
  const AdamWConfig config{};
  const LrSchedule schedule{.lr = 0.05, .min_lr = 0.005, .warmup_steps = 3, .total_steps = 12};
  const int64_t stop = 5;

  TinyModel uninterrupted;
  uninterrupted.Init(11);
  AdamW adamw_u(uninterrupted.params, config);
  Train(uninterrupted, adamw_u, schedule, 0, schedule.total_steps);

  // The same run, stopped after `stop` steps and checkpointed (weights and optimizer).
  TinyModel first;
  first.Init(11);
  AdamW adamw_first(first.params, config);
  Train(first, adamw_first, schedule, 0, stop);
  const std::string path = TempPath("resume.safetensors");
  {
    SafetensorsWriter writer;
    for (const Param& p : first.params.params()) {
      writer.Add<float>(p.name, p.shape, std::span<const float>(p.value, p.numel()));
    }
    adamw_first.AddStateTo(writer);
    writer.Write(path);
  }

  // A fresh process would start from other weights and zero moments; restore both from the file.
  TinyModel resumed;
  resumed.Init(99);
  AdamW adamw_r(resumed.params, config);
  const SafetensorsFile file(path);
  for (const Param& p : resumed.params.params()) {
    file.ReadInto<float>(p.name, p.shape, std::span<float>(p.value, p.numel()));
  }
  adamw_r.LoadStateFrom(file);
  EXPECT_EQ(adamw_r.step(), stop);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(SameBits(adamw_r.first_moment(k), adamw_first.first_moment(k))) << k;
    EXPECT_TRUE(SameBits(adamw_r.second_moment(k), adamw_first.second_moment(k))) << k;
  }
  Train(resumed, adamw_r, schedule, stop, schedule.total_steps);

  EXPECT_EQ(adamw_r.step(), adamw_u.step());
  EXPECT_TRUE(SameBits(resumed.w.value, uninterrupted.w.value));
  EXPECT_TRUE(SameBits(resumed.gain.value, uninterrupted.gain.value));
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(SameBits(adamw_r.first_moment(k), adamw_u.first_moment(k))) << k;
    EXPECT_TRUE(SameBits(adamw_r.second_moment(k), adamw_u.second_moment(k))) << k;
  }
  // The file holds what the names promise.
  EXPECT_EQ(file.Read<uint64_t>("optim.adamw.step", {}), std::vector<uint64_t>{stop});
  EXPECT_EQ(file.Get("optim.adamw.m.w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.Get("optim.adamw.v.gain").dtype, SafetensorsDtype::kF32);
  std::filesystem::remove(path);
}

TEST(AdamWCheckpointTest, RejectsStateOfAnotherModel) {
  TinyModel model;
  model.Init(1);
  AdamW adamw(model.params, AdamWConfig{});
  Train(model, adamw, {.lr = 0.01, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 3}, 0, 2);
  const std::vector<float> m_before(adamw.first_moment(0).begin(), adamw.first_moment(0).end());
  const std::string path = TempPath("other.safetensors");
  auto load_error = [&](auto&& fill) {
    SafetensorsWriter writer;
    fill(writer);
    writer.Write(path);
    return ErrorOf([&] { adamw.LoadStateFrom(SafetensorsFile(path)); });
  };
  const std::vector<float> six(6, 1.0f), three(3, 1.0f), four(4, 1.0f);
  auto state = [&](SafetensorsWriter& w, bool with_v_gain) {
    w.AddOwned<uint64_t>("optim.adamw.step", {}, {7});
    w.Add<float>("optim.adamw.m.w", {2, 3}, six);
    w.Add<float>("optim.adamw.v.w", {2, 3}, six);
    w.Add<float>("optim.adamw.m.gain", {3}, three);
    if (with_v_gain) w.Add<float>("optim.adamw.v.gain", {3}, three);
  };
  EXPECT_EQ(load_error([&](SafetensorsWriter& w) { state(w, false); }),
            path + ": no tensor named 'optim.adamw.v.gain' (the file has 4 tensors)");
  EXPECT_EQ(load_error([&](SafetensorsWriter& w) {
              state(w, true);
              w.Add<float>("optim.adamw.m.wq", {4}, four);
            }),
            path +
                ": tensor 'optim.adamw.m.wq' holds AdamW moments for parameter 'wq', which "
                "this model does not have: expected moments for the 2 registered parameters "
                "only");
  EXPECT_EQ(load_error([&](SafetensorsWriter& w) {
              w.AddOwned<uint64_t>("optim.adamw.step", {}, {7});
              w.Add<float>("optim.adamw.m.w", {3, 2}, six);
            }),
            path + ": tensor 'optim.adamw.m.w': shape [3, 2], expected [2, 3]");
  // Each failure left the optimizer as it was.
  EXPECT_EQ(adamw.step(), 2);
  EXPECT_TRUE(SameBits(adamw.first_moment(0), m_before));
  // And a complete state loads.
  {
    SafetensorsWriter w;
    state(w, true);
    w.Write(path);
    adamw.LoadStateFrom(SafetensorsFile(path));
  }
  EXPECT_EQ(adamw.step(), 7);
  EXPECT_EQ(adamw.first_moment(0)[0], 1.0f);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stretch
