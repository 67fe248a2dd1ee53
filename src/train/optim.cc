#include "src/train/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/threads.h"

namespace stretch {
namespace {

// Element-wise loops split over threads above this many elements (below, a thread's start-up
// costs more than the loop). Each element's arithmetic is the same on any thread.
constexpr int64_t kParallelElements = 32768;

int64_t ShapeNumel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    STRETCH_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), "bad shape {}", FormatShape(shape));
  }
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registry

int64_t Param::numel() const { return ShapeNumel(shape); }

void ParamRegistry::Add(std::string name, std::vector<int64_t> shape, std::span<float> value,
                        std::span<float> grad, WeightDecay decay) {
  STRETCH_CHECK(!name.empty(), "parameter with an empty name");
  STRETCH_CHECK(Find(name) == nullptr, "parameter '{}' registered twice", name);
  const int64_t n = ShapeNumel(shape);
  STRETCH_CHECK(static_cast<int64_t>(value.size()) == n && static_cast<int64_t>(grad.size()) == n,
                "parameter '{}' of shape {}: {} values and {} gradients, expected {} each", name,
                FormatShape(shape), value.size(), grad.size(), n);
  params_.push_back(Param{std::move(name), std::move(shape), value.data(), grad.data(), decay});
  numel_ += n;
}

const Param* ParamRegistry::Find(std::string_view name) const {
  for (const Param& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Gradients

void ZeroGrads(const ParamRegistry& params) {
  for (const Param& p : params.params()) std::fill_n(p.grad, p.numel(), 0.0f);
}

void ScaleGrads(const ParamRegistry& params, double scale) {
  for (const Param& p : params.params()) {
    const int64_t n = p.numel();
    float* g = p.grad;
    ParallelFor(n, WorkGrain(n, n, kParallelElements), [&](int64_t i_begin, int64_t i_end) {
      for (int64_t i = i_begin; i < i_end; ++i)
        g[i] = static_cast<float>(static_cast<double>(g[i]) * scale);
    });
  }
}

double GradNorm(const ParamRegistry& params) {
  double total = 0;
  std::vector<double> chunk_sums;
  for (const Param& p : params.params()) {
    const int64_t n = p.numel();
    const int64_t chunks = (n + kGradNormChunk - 1) / kGradNormChunk;
    chunk_sums.assign(static_cast<size_t>(chunks), 0.0);
    const float* g = p.grad;
    ParallelFor(chunks, WorkGrain(chunks, n, kParallelElements),
                [&](int64_t c_begin, int64_t c_end) {
                  for (int64_t c = c_begin; c < c_end; ++c) {
                    const int64_t end = std::min(n, (c + 1) * kGradNormChunk);
                    double s = 0;
                    for (int64_t i = c * kGradNormChunk; i < end; ++i) {
                      const double x = g[i];
                      s += x * x;
                    }
                    chunk_sums[static_cast<size_t>(c)] = s;
                  }
                });
    for (double s : chunk_sums) total += s;
  }
  return std::sqrt(total);
}

ClipResult ClipGradNorm(const ParamRegistry& params, double max_norm) {
  STRETCH_CHECK(max_norm > 0 && std::isfinite(max_norm), "max_norm={}", max_norm);
  ClipResult result;
  result.norm = GradNorm(params);
  if (!std::isfinite(result.norm)) return result;
  const double scale = max_norm / (result.norm + 1e-6);
  if (scale < 1) {
    result.scale = scale;
    ScaleGrads(params, scale);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// AdamW

void ValidateAdamWConfig(const AdamWConfig& c) {
  if (!(c.beta1 >= 0 && c.beta1 < 1)) Fail("adamw beta1={}: expected 0 <= beta1 < 1", c.beta1);
  if (!(c.beta2 >= 0 && c.beta2 < 1)) Fail("adamw beta2={}: expected 0 <= beta2 < 1", c.beta2);
  if (!(c.eps > 0 && std::isfinite(c.eps))) Fail("adamw eps={}: expected a positive number", c.eps);
  if (!(c.weight_decay >= 0 && std::isfinite(c.weight_decay))) {
    Fail("adamw weight_decay={}: expected a non-negative number", c.weight_decay);
  }
}

AdamW::AdamW(const ParamRegistry& params, const AdamWConfig& config)
    : params_(&params), config_(config) {
  try {
    ValidateAdamWConfig(config);
  } catch (const Error& e) {
    STRETCH_CHECK(false, "invalid AdamW config (validate it first): {}", e.what());
  }
  for (const Param& p : params.params()) {
    m_.emplace_back(static_cast<size_t>(p.numel()), 0.0f);
    v_.emplace_back(static_cast<size_t>(p.numel()), 0.0f);
  }
}

void AdamW::Step(double lr) {
  STRETCH_CHECK(lr >= 0 && std::isfinite(lr), "learning rate {}", lr);
  const std::vector<Param>& params = params_->params();
  STRETCH_CHECK(params.size() == m_.size(), "{} parameters registered after the optimizer's {}",
                params.size(), m_.size());
  ++step_;
  const double b1 = config_.beta1;
  const double b2 = config_.beta2;
  const double eps = config_.eps;
  // Bias corrections of step t: a pure function of t, so a restored step count reproduces them.
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(step_));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(step_));
  for (size_t k = 0; k < params.size(); ++k) {
    const Param& p = params[k];
    const int64_t n = p.numel();
    const double keep = p.decay == WeightDecay::kApply ? 1.0 - lr * config_.weight_decay : 1.0;
    float* value = p.value;
    const float* grad = p.grad;
    float* m = m_[k].data();
    float* v = v_[k].data();
    ParallelFor(n, WorkGrain(n, n, kParallelElements), [&](int64_t i_begin, int64_t i_end) {
      for (int64_t i = i_begin; i < i_end; ++i) {
        const double g = grad[i];
        const double mi = b1 * m[i] + (1.0 - b1) * g;
        const double vi = b2 * v[i] + (1.0 - b2) * (g * g);
        const double mhat = mi / correction1;
        const double vhat = vi / correction2;
        double pi = value[i] * keep;
        pi -= lr * (mhat / (std::sqrt(vhat) + eps));
        m[i] = static_cast<float>(mi);
        v[i] = static_cast<float>(vi);
        value[i] = static_cast<float>(pi);
      }
    });
  }
}

void AdamW::AddStateTo(SafetensorsWriter& writer) const {
  STRETCH_CHECK(params_->size() == m_.size(), "registry changed size");
  writer.AddOwned<uint64_t>(std::string(kAdamWStepTensor), {}, {static_cast<uint64_t>(step_)});
  for (size_t k = 0; k < m_.size(); ++k) {
    const Param& p = params_->params()[k];
    writer.Add<float>(std::string(kAdamWFirstMomentPrefix) + p.name, p.shape,
                      std::span<const float>(m_[k]));
    writer.Add<float>(std::string(kAdamWSecondMomentPrefix) + p.name, p.shape,
                      std::span<const float>(v_[k]));
  }
}

void AdamW::LoadStateFrom(const SafetensorsFile& file) {
  const std::vector<Param>& params = params_->params();
  STRETCH_CHECK(params.size() == m_.size(), "registry changed size");
  // Moments for a tensor this model does not have mean the checkpoint is another model's.
  for (const SafetensorsTensor& t : file.tensors()) {
    for (std::string_view prefix : {kAdamWFirstMomentPrefix, kAdamWSecondMomentPrefix}) {
      if (t.name.starts_with(prefix) &&
          params_->Find(std::string_view(t.name).substr(prefix.size())) == nullptr) {
        Fail(
            "{}: tensor '{}' holds AdamW moments for parameter '{}', which this model does not "
            "have: expected moments for the {} registered parameters only",
            file.path(), t.name, t.name.substr(prefix.size()), params.size());
      }
    }
  }
  const std::vector<uint64_t> step = file.Read<uint64_t>(kAdamWStepTensor, {});
  if (step[0] > static_cast<uint64_t>(INT64_MAX)) {
    Fail("{}: tensor '{}' is {}, expected a step count below 2^63", file.path(), kAdamWStepTensor,
         step[0]);
  }
  // Read everything first and commit after, so that a failure leaves the optimizer as it was.
  std::vector<AlignedVector<float>> m(params.size());
  std::vector<AlignedVector<float>> v(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const Param& p = params[k];
    m[k].resize(static_cast<size_t>(p.numel()));
    v[k].resize(static_cast<size_t>(p.numel()));
    file.ReadInto<float>(std::string(kAdamWFirstMomentPrefix) + p.name, p.shape,
                         std::span<float>(m[k]));
    file.ReadInto<float>(std::string(kAdamWSecondMomentPrefix) + p.name, p.shape,
                         std::span<float>(v[k]));
  }
  step_ = static_cast<int64_t>(step[0]);
  m_ = std::move(m);
  v_ = std::move(v);
}

// ---------------------------------------------------------------------------------------------
// Schedule

void ValidateLrSchedule(const LrSchedule& s) {
  if (!(s.lr > 0 && std::isfinite(s.lr))) Fail("lr={}: expected a positive number", s.lr);
  if (!(s.min_lr >= 0 && s.min_lr <= s.lr)) {
    Fail("min_lr={}: expected 0 <= min_lr <= lr={}", s.min_lr, s.lr);
  }
  if (s.total_steps < 1) Fail("total_steps={}: expected at least 1", s.total_steps);
  if (s.warmup_steps < 0 || s.warmup_steps > s.total_steps) {
    Fail("warmup_steps={}: expected 0 <= warmup_steps <= total_steps={}", s.warmup_steps,
         s.total_steps);
  }
}

double LearningRate(const LrSchedule& s, int64_t step) {
  STRETCH_CHECK(step >= 0, "step {}", step);
  const int64_t w = s.warmup_steps;
  if (step < w) return s.lr * static_cast<double>(step + 1) / static_cast<double>(w);
  const int64_t decay_steps = s.total_steps - 1 - w;
  if (decay_steps <= 0) return s.lr;
  const double r = std::min(1.0, static_cast<double>(step - w) / static_cast<double>(decay_steps));
  return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * r));
}

}  // namespace stretch
