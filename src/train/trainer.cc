#include "src/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {
namespace {

bool IsBiasParameter(const std::string& name) { return name.find(".bias_") != std::string::npos; }

ParamRegistry Register(const TrainArch& arch, ModelWeights& p, ModelWeights& g) {
  ParamRegistry reg;
  std::vector<std::vector<float>*> grads;
  g.ForEach([&](const std::string&, std::vector<float>& t, bool) { grads.push_back(&t); });
  size_t i = 0;
  p.ForEach([&](const std::string& name, std::vector<float>& t, bool decay) {
    std::vector<float>& gt = *grads[i++];
    STRETCH_CHECK(gt.size() == t.size(), "{}", name);
    const std::vector<int64_t> shape = WeightShape(arch.model, name);
    reg.Add(name, shape, t, gt, decay ? WeightDecay::kApply : WeightDecay::kNone);
  });
  return reg;
}

}  // namespace

void InitParams(const TrainArch& arch, ModelWeights& p, Rng& rng) {
  const double resid = 0.02 / std::sqrt(2.0 * arch.model.n_layers);
  const bool power = arch.model.attention.position == LayerPosition::kKerplePower;
  // GAU layers (post-norm): GAU-alpha's initialization of the matrices (RoFormerV2's initializer
  // with order 3 in bert4keras): a normal of standard deviation n_layers^(-1/3) / sqrt(fan_in)
  // (bert4keras draws a normal of 1.13684723 times that, truncated at 2 sd, which has this sd; we
  // draw the plain normal). gamma ~ N(0, 0.02^2) and beta = 0, as the GAU implementations that
  // follow the paper's appendix code start them (e.g. lucidrains' FLASH-pytorch OffsetScale), not
  // GAU-alpha's gamma = 1: with gamma_q = gamma_k = 1 (and beta 0) Q = K at the start, every score
  // q_i . k_j is a symmetric form of the two tokens, and the copy task of
  // tests/train/copy_task_test.cc learned far slower (measured: not within its 1,500 steps, ~2,200
  // steps with a 3,000-step schedule; with this start it passes at step 850).
  const double gau_gain = std::pow(static_cast<double>(arch.model.n_layers), -1.0 / 3.0);
  const double C = arch.model.dim, E = arch.model.hidden_dim;
  p.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    if (name.find("norm") != std::string::npos) {
      std::fill(t.begin(), t.end(), 1.0f);
    } else if (name.find(".gamma_") != std::string::npos) {
      for (float& x : t) x = static_cast<float>(0.02 * rng.Normal());
    } else if (name.find(".beta_") != std::string::npos) {
      std::fill(t.begin(), t.end(), 0.0f);
    } else if (name.find(".gau_") != std::string::npos) {
      const double fan_in = name.ends_with(".gau_o") ? E : C;
      const double sd = gau_gain / std::sqrt(fan_in);
      for (float& x : t) x = static_cast<float>(sd * rng.Normal());
    } else if (name.ends_with(".ssmax")) {
      // SSMax's s_h ln n equals 1 at n = L: at the training length the logits start as they
      // would without it.
      const double s0 = 1.0 / std::log(static_cast<double>(arch.model.seq_len));
      std::fill(t.begin(), t.end(), static_cast<float>(s0));
    } else if (name.find(".bias_a") != std::string::npos) {
      for (float& x : t) x = static_cast<float>(std::max(0.01, 2.0 * rng.UniformDouble()));
    } else if (name.find(".bias_b") != std::string::npos) {
      for (float& x : t) {
        x = static_cast<float>(std::max(0.01, (power ? 2.0 : 1.0) * rng.UniformDouble()));
      }
    } else {
      const bool to_residual = name.ends_with(".wo") || name.ends_with(".w2");
      const double sd = to_residual ? resid : 0.02;
      for (float& x : t) x = static_cast<float>(sd * rng.Normal());
    }
  });
}

void ValidateTrainerOptions(const TrainerOptions& o) {
  if (o.batch < 1) Fail("batch={} (allowed: >= 1)", o.batch);
  if (o.accumulate < 1) Fail("accumulate={} (allowed: >= 1)", o.accumulate);
  if (!(o.clip >= 0.0)) Fail("clip={} (allowed: >= 0; 0 = none)", o.clip);
  if (o.skip_nonfinite < 0) Fail("skip_nonfinite={} (allowed: >= 0; 0 = none)", o.skip_nonfinite);
  ValidateLrSchedule(o.schedule);
  ValidateAdamWConfig(o.adamw);
}

namespace {

const TrainerOptions& Validated(const TrainerOptions& o) {
  try {
    ValidateTrainerOptions(o);
  } catch (const Error& e) {
    Fail("train: {}", e.what());
  }
  return o;
}

}  // namespace

Trainer::Trainer(TrainArch arch, TrainerOptions options)
    : model_(std::move(arch)),
      options_(Validated(options)),  // before the weights and AdamW's moments are allocated
      params_(ZeroWeights<float>(model_.arch().model)),
      grads_(ZeroWeights<float>(model_.arch().model)),
      registry_(Register(model_.arch(), params_, grads_)),
      adam_(registry_, options.adamw),
      data_rng_(options.seed ^ 0xda7aULL) {
  if (options_.perturb.Active()) {
    CheckPerturbation(options_.perturb, model_.arch().model.seq_len);
    const TrainArch& a = model_.arch();
    if (a.model.Gau() || a.model.attention.position != LayerPosition::kRope ||
        a.model.attention.xpos_scale_base > 0.0 || !a.model.attention.rope_map.empty()) {
      Fail(
          "train: position perturbation {} moves RoPE positions: it needs position spec rope "
          "(no relative map, no XPOS) and block spec llama",
          options_.perturb.Spec());
    }
  }
  Rng init(options_.seed);
  InitParams(model_.arch(), params_, init);
}

namespace {

// Which tensors of `w` hold a NaN or an infinity: "the gradient of layers.0.wq holds nan (and 3
// more tensors)", or "every gradient is finite". `what`: "parameter" or "gradient".
std::string NonFiniteText(ModelWeights& w, const char* what) {
  std::string first;
  float value = 0;
  int64_t count = 0;
  w.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    const auto bad = std::find_if(t.begin(), t.end(), [](float x) { return !std::isfinite(x); });
    if (bad == t.end()) return;
    if (count++ == 0) {
      first = name;
      value = *bad;
    }
  });
  if (count == 0) return fmt::format("every {} is finite", what);
  return fmt::format("the {} {}{} holds {}{}", what,
                     std::string_view(what) == "gradient" ? "of " : "", first, value,
                     count > 1 ? fmt::format(" (and {} more tensors)", count - 1) : "");
}

}  // namespace

StepStats Trainer::Step(const BatchSource& next) {
  StepStats st;
  const int A = options_.accumulate;
  for (int attempt = 0;; ++attempt) {
    ZeroGrads(registry_);
    st.loss = 0.0;
    st.tokens = 0;
    for (int a = 0; a < A; ++a) {
      next(data_rng_, options_.batch, tokens_);
      if (options_.perturb.Active()) {
        const int64_t T = static_cast<int64_t>(tokens_.size()) / options_.batch - 1;
        model_.SetPositions(PerturbedPositions(options_.perturb, options_.seed,
                                               adam_.step() * A + a, options_.batch, T));
      }
      st.loss += model_.Forward(params_, tokens_, options_.batch, acts_) / A;
      st.tokens += acts_.scored;
      model_.Backward(params_, acts_, grads_, 1.0 / A);
    }
    if (options_.clip > 0.0) {
      st.grad_norm = ClipGradNorm(registry_, options_.clip).norm;
    } else {
      st.grad_norm = GradNorm(registry_);
    }
    if (std::isfinite(st.grad_norm)) break;
    // Nothing of this batch is applied (ClipGradNorm leaves non-finite gradients as they are), so
    // the parameters and the last checkpoint stay as they were.
    const std::string why =
        fmt::format("the loss is {} and the gradient norm {}: {}; {}", st.loss, st.grad_norm,
                    NonFiniteText(params_, "parameter"), NonFiniteText(grads_, "gradient"));
    if (attempt < options_.skip_nonfinite) {
      ++st.skipped;
      st.skipped_why = why;
      continue;
    }
    Fail(
        "train: step {}: {}; nothing of this step was applied{}. Lower "
        "TrainerOptions::schedule.lr or enable clipping, or resume from an earlier checkpoint",
        adam_.step() + 1, why,
        options_.skip_nonfinite > 0
            ? fmt::format(" (after {} batch(es) passed over for the same reason, the most "
                          "TrainerOptions::skip_nonfinite allows)",
                          st.skipped)
            : std::string());
  }
  st.lr = LearningRate(options_.schedule, adam_.step());
  adam_.Step(st.lr);
  // KERPLE: a, b >= 0.01 (and the power's exponent <= 2).
  const bool power = model_.arch().model.attention.position == LayerPosition::kKerplePower;
  params_.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    if (!IsBiasParameter(name)) return;
    const bool exponent = power && name.ends_with(".bias_b");
    for (float& x : t) x = std::clamp(x, 0.01f, exponent ? 2.0f : 1e30f);
  });
  st.step = adam_.step();
  return st;
}

EvalStats Trainer::Evaluate(const std::vector<int>& tokens, int64_t B, int64_t from_position) {
  model_.SetPositions({});  // evaluation at the true positions
  model_.Forward(params_, tokens, B, acts_);
  const int64_t T = acts_.T;
  const int V = model_.arch().model.vocab_size;
  EvalStats ev;
  double loss = 0.0;
  int64_t correct = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = from_position; t < T; ++t) {
      const int64_t row = b * T + t;
      const int target = acts_.targets[static_cast<size_t>(row)];
      if (target == kNotScored) continue;
      const TokenLoss tl = CrossEntropyRow(acts_.logits.data() + row * V, V, target);
      loss += tl.loss;
      correct += tl.argmax == target ? 1 : 0;
      ++ev.scored;
    }
  }
  if (ev.scored > 0) {
    ev.loss = loss / static_cast<double>(ev.scored);
    ev.accuracy = static_cast<double>(correct) / static_cast<double>(ev.scored);
  }
  return ev;
}

std::vector<int> Trainer::Predict(const std::vector<int>& tokens, int64_t B) {
  model_.SetPositions({});  // the true positions, as Evaluate
  model_.Forward(params_, tokens, B, acts_);
  const int64_t T = acts_.T;
  const int V = model_.arch().model.vocab_size;
  std::vector<int> out(static_cast<size_t>(B * T));
  for (int64_t row = 0; row < B * T; ++row) {
    // Evaluate's argmax (the same tie rule), so a readout's hits are its accuracy's.
    out[static_cast<size_t>(row)] = CrossEntropyRow(acts_.logits.data() + row * V, V, 0).argmax;
  }
  return out;
}

}  // namespace stretch
