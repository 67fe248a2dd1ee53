// The GAU layer alone (src/train/gau_layer.h), in double with the reference attention:
//   - GauLayerForward equals the GAU written out directly (one head, an explicit softmax matrix
//     over keys of width S and values of width E): the kernel's R copies of the head change
//     nothing;
//   - the gradient of L = sum(out * R), R fixed and random (so every output matters), with
//     respect to the input and every parameter (and KERPLE's a, b) against central differences
//     (tests/testing/gradcheck.h), for RoPE (full and windowed), ALiBi, KERPLE log and power,
//     and NoPE with cosine attention; each check is also shown to reject the same gradient with
//     its largest coordinate off by 1%.
// Shapes: B sequences of T positions, N = B*T rows, C width, E expansion width, S key width.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/train/transformer_train.h"
#include "tests/testing/gradcheck.h"
#include "tests/train/ref_attention.h"

namespace stretch {
namespace {

using testing::ExpectGradcheckFlagsOnePercent;
using testing::ExpectGradcheckOfZero;
using testing::LossOf;
using testing::RefAttention;

constexpr int64_t kB = 2, kT = 5;
constexpr int kC = 6, kE = 12, kS = 4;  // R = 3 copies of the head in the kernel

struct LayerCase {
  std::string name;
  LayerPosition position = LayerPosition::kRope;
  LayerLayout layout;
  bool cosine = false;  // QueryNorm + KeyNorm, scale 3
};

TrainArch CaseArch(const LayerCase& c) {
  TrainArch a;
  a.model.dim = kC;
  a.model.hidden_dim = kE;
  a.model.SetGau(kS);
  a.model.n_layers = 1;
  a.model.vocab_size = 7;
  a.model.seq_len = static_cast<int>(kT);
  a.model.attention.position = c.position;
  a.model.attention.layers = {c.layout};
  if (c.cosine) {
    a.model.attention.query_norm = a.model.attention.key_norm = true;
    a.model.attention.logit_scale = 3.0;
  }
  return a;
}

// The layer's tensors by name, in a fixed order.
std::vector<std::pair<std::string, std::vector<double>*>> Tensors(LayerWeightsOf<double>& W) {
  return {{"wu", &W.gau_u},        {"wv", &W.gau_v},        {"wz", &W.gau_z},
          {"wo", &W.wo},           {"gamma_q", &W.gamma_q}, {"beta_q", &W.beta_q},
          {"gamma_k", &W.gamma_k}, {"beta_k", &W.beta_k}};
}

std::vector<double> Random(size_t n, Rng& rng, double scale, double mean = 0.0) {
  std::vector<double> v(n);
  for (double& x : v) x = mean + scale * rng.Normal();
  return v;
}

// Everything one layer evaluation needs, with the parameters as plain data.
struct LayerSetup {
  TrainArch arch;
  LayerWeightsOf<double> layer;  // gau weights; KERPLE a, b
  std::vector<double> x;         // (N, C)
  std::vector<double> r;         // (N, C): L = sum(out * r)
  std::vector<double> cos, sin;
  RopeAngles<double> angles;

  explicit LayerSetup(const LayerCase& c) : arch(CaseArch(c)) {
    Rng rng(101);
    LayerWeightsOf<double>& W = layer;
    // Matrices O(1 / sqrt(fan_in)) so that pre-activations are O(1) and SiLU is curved there.
    W.gau_u = Random(static_cast<size_t>(kE * kC), rng, 0.6);
    W.gau_v = Random(static_cast<size_t>(kE * kC), rng, 0.6);
    W.gau_z = Random(static_cast<size_t>(kS * kC), rng, 0.6);
    W.wo = Random(static_cast<size_t>(kC * kE), rng, 0.4);
    W.gamma_q = Random(kS, rng, 0.3, 1.0);
    W.gamma_k = Random(kS, rng, 0.3, 1.0);
    W.beta_q = Random(kS, rng, 0.3);
    W.beta_k = Random(kS, rng, 0.3);
    if (c.position == LayerPosition::kKerpleLog || c.position == LayerPosition::kKerplePower) {
      layer.bias_a = {0.7};
      layer.bias_b = {0.6};
    }
    x = Random(static_cast<size_t>(kB * kT * kC), rng, 1.0);
    r = Random(x.size(), rng, 1.0);
    const int pairs = kS / 2;
    cos.resize(static_cast<size_t>(kT * pairs));
    sin.resize(cos.size());
    for (int64_t t = 0; t < kT; ++t) {
      for (int u = 0; u < pairs; ++u) {
        const double theta = std::pow(10000.0, -2.0 * u / kS);
        cos[static_cast<size_t>(t * pairs + u)] = std::cos(t * theta);
        sin[static_cast<size_t>(t * pairs + u)] = std::sin(t * theta);
      }
    }
    angles = RopeAngles<double>{cos.data(), sin.data(), kT, pairs};
  }

  std::vector<double> Forward(GauActs<double>& acts, GauScratch<double>& scratch) const {
    std::vector<double> out(x.size());
    GauLayerForward<double, RefAttention>(layer, GauConfigOf(arch.model, 0),
                                          LayerPlan(arch, layer, 0, kT), &angles, x.data(), kB, kT,
                                          acts, scratch, out.data());
    return out;
  }
  double Loss() const {
    GauActs<double> acts;
    GauScratch<double> scratch;
    const std::vector<double> out = Forward(acts, scratch);
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * r[i];
    return l;
  }
  // d L / d x, and the parameters' gradients in dW, da, db.
  std::vector<double> Backward(LayerWeightsOf<double>& dW, double& da, double& db) const {
    GauActs<double> acts;
    GauScratch<double> scratch;  // the forward's, reused by the backward, as the trainer does
    Forward(acts, scratch);
    dW = layer;
    for (auto& [name, t] : Tensors(dW)) std::fill(t->begin(), t->end(), 0.0);
    da = db = 0.0;
    std::vector<double> dx(x.size());
    const bool kerple = !layer.bias_a.empty();
    GauLayerBackward<double, RefAttention>(
        layer, GauConfigOf(arch.model, 0), LayerPlan(arch, layer, 0, kT), &angles, acts, scratch,
        kB, kT, r.data(), dx.data(), dW, kerple ? &da : nullptr, kerple ? &db : nullptr);
    return dx;
  }
};

// The GAU written out for one sequence, without the kernel: one head, P = softmax over the
// visible keys of scale * q.k + bias, AV = P V with V of width E, then the post-norm.
std::vector<double> DirectGau(const LayerSetup& s) {
  const GauLayerConfig cfg = GauConfigOf(s.arch.model, 0);
  const AttentionPlan plan = LayerPlan(s.arch, s.layer, 0, kT);
  const LayerWeightsOf<double>& W = s.layer;
  auto silu = [](double h) { return h / (1.0 + std::exp(-h)); };
  std::vector<double> out(s.x.size());
  for (int64_t b = 0; b < kB; ++b) {
    const double* x = s.x.data() + b * kT * kC;
    std::vector<double> u(kT * kE), v(kT * kE), q(kT * kS), k(kT * kS);
    for (int64_t t = 0; t < kT; ++t) {
      auto dot = [&](const std::vector<double>& w, int row) {
        double acc = 0.0;
        for (int c = 0; c < kC; ++c) acc += x[t * kC + c] * w[static_cast<size_t>(row * kC + c)];
        return acc;
      };
      for (int e = 0; e < kE; ++e) {
        u[t * kE + e] = silu(dot(W.gau_u, e));
        v[t * kE + e] = silu(dot(W.gau_v, e));
      }
      for (int d = 0; d < kS; ++d) {
        const double z = silu(dot(W.gau_z, d));
        q[t * kS + d] = W.gamma_q[d] * z + W.beta_q[d];
        k[t * kS + d] = W.gamma_k[d] * z + W.beta_k[d];
      }
    }
    if (cfg.rope) {
      RopeInterleavedForward(q.data(), kT, 1, kS, kS, s.angles);
      RopeInterleavedForward(k.data(), kT, 1, kS, kS, s.angles);
    }
    if (cfg.query_norm) L2NormalizeForward(q.data(), q.data(), kT, kS);
    if (cfg.key_norm) L2NormalizeForward(k.data(), k.data(), kT, kS);
    for (int64_t i = 0; i < kT; ++i) {
      std::vector<double> logit(kT, -std::numeric_limits<double>::infinity());
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= i; ++j) {
        if (!plan.Visible(i, j)) continue;
        double qk = 0.0;
        for (int d = 0; d < kS; ++d) qk += q[i * kS + d] * k[j * kS + d];
        const double bias = plan.bias.kind == BiasKind::kNone ? 0.0 : plan.bias.Value(0, i - j);
        logit[j] = cfg.scale * qk + bias;
        max = std::max(max, logit[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(logit[j] - max);
      std::vector<double> y(kC);
      for (int c = 0; c < kC; ++c) y[c] = x[i * kC + c];
      for (int e = 0; e < kE; ++e) {
        double av = 0.0;
        for (int64_t j = 0; j <= i; ++j) av += std::exp(logit[j] - max) / sum * v[j * kE + e];
        const double g = u[i * kE + e] * av;
        for (int c = 0; c < kC; ++c) y[c] += g * W.wo[static_cast<size_t>(c * kE + e)];
      }
      double ms = 0.0;
      for (int c = 0; c < kC; ++c) ms += y[c] * y[c] / kC;
      for (int c = 0; c < kC; ++c) {
        out[static_cast<size_t>((b * kT + i) * kC + c)] = y[c] / std::sqrt(ms + cfg.norm_eps);
      }
    }
  }
  return out;
}

std::vector<LayerCase> Cases() {
  return {
      {"rope", LayerPosition::kRope, LayerLayout{true, 0}, false},
      {"rope, window 3", LayerPosition::kRope, LayerLayout{true, 3}, false},
      {"alibi", LayerPosition::kAlibi, LayerLayout{true, 0}, false},
      {"kerple-log", LayerPosition::kKerpleLog, LayerLayout{true, 0}, false},
      {"kerple-power", LayerPosition::kKerplePower, LayerLayout{true, 3}, false},
      {"nope, cosine", LayerPosition::kNone, LayerLayout{true, 0}, true},
  };
}

TEST(GauLayer, ForwardIsTheGauFormula) {
  for (const LayerCase& c : Cases()) {
    const LayerSetup s(c);
    GauActs<double> acts;
    GauScratch<double> scratch;
    const std::vector<double> got = s.Forward(acts, scratch);
    const std::vector<double> want = DirectGau(s);
    ASSERT_EQ(got.size(), want.size());
    // Both in double through O(C + E + T) terms of O(1): rounding ~1e-15; 1e-12 is far below any
    // formula error (which would be O(1)).
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-12) << c.name << " " << i;
    }
  }
}

TEST(GauLayer, GradientsMatchCentralDifferences) {
  for (const LayerCase& c : Cases()) {
    LayerSetup s(c);
    LayerWeightsOf<double> dW;
    double da = 0.0, db = 0.0;
    const std::vector<double> dx = s.Backward(dW, da, db);
    // The input.
    ExpectGradcheckFlagsOnePercent(
        c.name + ": x",
        [&](std::span<const double> v) {
          LayerSetup t = s;
          t.x.assign(v.begin(), v.end());
          return t.Loss();
        },
        s.x, dx);
    // Every parameter tensor.
    auto params = Tensors(s.layer);
    auto grads = Tensors(dW);
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string tensor = params[i].first;
      const LossOf loss = [&](std::span<const double> v) {
        LayerSetup t = s;
        for (auto& [n, p] : Tensors(t.layer)) {
          if (n == tensor) p->assign(v.begin(), v.end());
        }
        return t.Loss();
      };
      // K = gamma_k Z + beta_k: beta_k adds q_i . beta_k to every logit of row i, which the
      // softmax ignores, unless RoPE turns it differently per key or KeyNorm rescales each key.
      if (tensor == "beta_k" && !GauConfigOf(s.arch.model, 0).rope && !c.cosine) {
        // Sums of O(10) terms of O(1) that cancel: rounding ~1e-15.
        ExpectGradcheckOfZero(c.name + ": " + tensor, loss, *params[i].second, *grads[i].second,
                              1e-12);
      } else {
        ExpectGradcheckFlagsOnePercent(c.name + ": " + tensor, loss, *params[i].second,
                                       *grads[i].second);
      }
    }
    // KERPLE's a and b: one value each for the single head, shared by its R kernel copies.
    if (!s.layer.bias_a.empty()) {
      ExpectGradcheckFlagsOnePercent(c.name + ": bias a",
                                     [&](std::span<const double> v) {
                                       LayerSetup t = s;
                                       t.layer.bias_a.assign(v.begin(), v.end());
                                       return t.Loss();
                                     },
                                     s.layer.bias_a, {da});
      ExpectGradcheckFlagsOnePercent(c.name + ": bias b",
                                     [&](std::span<const double> v) {
                                       LayerSetup t = s;
                                       t.layer.bias_b.assign(v.begin(), v.end());
                                       return t.Loss();
                                     },
                                     s.layer.bias_b, {db});
    }
  }
}

TEST(GauLayer, SiluBackwardMatchesCentralDifferences) {
  Rng rng(5);
  const std::vector<double> h = Random(64, rng, 3.0), r = Random(64, rng, 1.0);
  auto loss = [&](std::span<const double> v) {
    std::vector<double> y(v.size());
    SiluForward(v.data(), y.data(), static_cast<int64_t>(v.size()));
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
    return l;
  };
  std::vector<double> dh(h.size());
  SiluBackward(r.data(), h.data(), dh.data(), static_cast<int64_t>(h.size()));
  ExpectGradcheckFlagsOnePercent("silu", loss, h, dh);
}

}  // namespace
}  // namespace stretch
