// The whole trainable model: its loss gradient with respect to every parameter tensor against
// central differences, in double (with the naive reference attention), for every position
// variant and a mixed layer layout; then the float model (tiled kernel) against the double one.
// Both block kinds: LLaMA and GAU (the GAU layer alone: tests/train/gau_layer_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/train/positions.h"
#include "src/train/transformer_train.h"
#include "tests/train/ref_attention.h"

namespace stretch {
namespace {

using testing::RefAttention;

TrainArch TinyArch(LayerPosition position) {
  TrainArch a;
  a.model.dim = 8;
  a.model.hidden_dim = 12;
  a.model.n_layers = 2;
  a.model.n_heads = 2;
  a.model.n_kv_heads = 1;
  a.model.vocab_size = 11;
  a.model.seq_len = 6;
  a.model.shared_classifier = position != LayerPosition::kNone;  // both cases covered
  a.model.attention.position = position;
  a.model.attention.layers = {LayerLayout{true, 3},
                              LayerLayout{false, 0}};  // windowed, then full without position
  if (position == LayerPosition::kAlibi)
    a.model.attention.layers = {LayerLayout{true, 0}, LayerLayout{true, 4}};
  return a;
}

template <typename Real>
ModelWeightsOf<Real> RandomParams(const TrainArch& arch, uint64_t seed) {
  ModelWeightsOf<Real> p = ZeroWeights<Real>(arch.model);
  Rng rng(seed);
  p.ForEach([&](const std::string& name, std::vector<Real>& t, bool) {
    const bool norm = name.find("norm") != std::string::npos;
    const bool bias = name.find("bias_") != std::string::npos;
    for (Real& x : t) {
      // norms near 1, KERPLE parameters positive (0.2 .. 1.2), matrices O(1) so that every
      // path carries gradient.
      x = static_cast<Real>(norm   ? 1.0 + 0.2 * rng.Normal()
                            : bias ? 0.2 + rng.UniformDouble()
                                   : 0.5 * rng.Normal());
    }
  });
  return p;
}

std::vector<int> TinyTokens(const TrainArch& arch, int64_t B, int64_t T, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> tok(static_cast<size_t>(B * (T + 1)));
  for (int& t : tok) t = static_cast<int>(rng.NextU64() % arch.model.vocab_size);
  return tok;
}

// The analytic gradient of the model's loss with respect to every parameter tensor.
ModelWeightsOf<double> ModelGradients(const TrainTransformer<double, RefAttention>& model,
                                      const ModelWeightsOf<double>& p,
                                      const std::vector<int>& tokens, int64_t B) {
  TrainActs<double> acts;
  model.Forward(p, tokens, B, acts);
  ModelWeightsOf<double> grads = ZeroWeights<double>(model.arch().model);
  model.Backward(p, acts, grads);
  return grads;
}

struct ModelGradientMismatch {
  std::string name;
  size_t index = 0;
  double analytic = 0, numeric = 0;
};

// Every coordinate of the parameter tensors `filter` accepts, `grads` against central differences
// of the model's loss. Step 1e-5 on O(1) values: truncation ~h^2 |f'''| ~ 1e-10, rounding
// ~1e-16 |L| / h ~ 1e-11; bound 1e-7 + 1e-6 relative, orders of magnitude above both.
std::vector<ModelGradientMismatch> ModelGradientMismatches(
    const TrainTransformer<double, RefAttention>& model, ModelWeightsOf<double>& p,
    ModelWeightsOf<double>& grads, const std::vector<int>& tokens, int64_t B,
    const std::function<bool(const std::string&)>& filter) {
  std::vector<ModelGradientMismatch> out;
  std::vector<std::vector<double>*> gt;
  grads.ForEach([&](const std::string&, std::vector<double>& t, bool) { gt.push_back(&t); });
  size_t idx = 0;
  p.ForEach([&](const std::string& name, std::vector<double>& t, bool) {
    const std::vector<double>& g = *gt[idx++];
    if (!filter(name)) return;
    for (size_t i = 0; i < t.size(); ++i) {
      const double keep = t[i];
      TrainActs<double> a2;
      t[i] = keep + 1e-5;
      const double up = model.Forward(p, tokens, B, a2);
      t[i] = keep - 1e-5;
      const double down = model.Forward(p, tokens, B, a2);
      t[i] = keep;
      const double numeric = (up - down) / 2e-5;
      if (!(std::abs(g[i] - numeric) <= 1e-7 + 1e-6 * std::abs(numeric))) {
        out.push_back({name, i, g[i], numeric});
      }
    }
  });
  return out;
}

void ExpectModelGradients(const TrainTransformer<double, RefAttention>& model,
                          ModelWeightsOf<double>& p, const std::vector<int>& tokens, int64_t B,
                          const std::function<bool(const std::string&)>& filter,
                          const std::string& label) {
  ModelWeightsOf<double> grads = ModelGradients(model, p, tokens, B);
  const std::vector<ModelGradientMismatch> bad =
      ModelGradientMismatches(model, p, grads, tokens, B, filter);
  for (size_t k = 0; k < bad.size() && k < 10; ++k) {
    ADD_FAILURE() << label << " " << bad[k].name << "[" << bad[k].index << "]: analytic "
                  << bad[k].analytic << ", numeric " << bad[k].numeric;
  }
  EXPECT_TRUE(bad.empty()) << label << ": " << bad.size() << " coordinates off";
}

TEST(TrainTransformer, GradientOfEveryParameterMatchesCentralDifferences) {
  for (LayerPosition pos : {LayerPosition::kRope, LayerPosition::kNone, LayerPosition::kAlibi,
                            LayerPosition::kKerpleLog, LayerPosition::kKerplePower}) {
    const TrainArch arch = TinyArch(pos);
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, 17 + static_cast<int>(pos));
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, 5), 2, [](const std::string&) { return true; },
        "position " + std::to_string(static_cast<int>(pos)));
  }
}

TEST(TrainTransformer, NormalizedLogitsGradientsMatchCentralDifferences) {
  // KeyNorm, QueryNorm, and both (cosine attention with lambda = 3).
  for (int v = 0; v < 3; ++v) {
    TrainArch arch = TinyArch(LayerPosition::kRope);
    arch.model.attention.query_norm = v != 1;
    arch.model.attention.key_norm = v != 0;
    if (v == 2) arch.model.attention.logit_scale = 3.0;
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, 31 + v);
    // The q/k path of layer 0.
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, 6), 2,
        [](const std::string& name) { return name.find("layers.0.w") != std::string::npos; },
        "variant " + std::to_string(v));
  }
}

// The float model (tiled kernel) against the double model (reference attention) on the same
// parameters and tokens: the loss and every parameter's gradient.
void ExpectFloatModelMatchesDouble(const TrainArch& arch, const std::string& label) {
  const int64_t B = 2, T = arch.model.seq_len;
  const std::vector<int> tokens = TinyTokens(arch, B, T, 9);
  const ModelWeightsOf<double> pd = RandomParams<double>(arch, 23);
  ModelWeights pf = ZeroWeights<float>(arch.model);
  {
    std::vector<std::vector<double>*> src;
    ModelWeightsOf<double> copy = pd;
    copy.ForEach([&](const std::string&, std::vector<double>& t, bool) { src.push_back(&t); });
    size_t i = 0;
    pf.ForEach([&](const std::string&, std::vector<float>& t, bool) {
      t.assign(src[i]->begin(), src[i]->end());
      ++i;
    });
  }
  TrainTransformer<double, RefAttention> md(arch);
  TrainTransformer<float, KernelAttention> mf(arch);
  TrainActs<double> ad;
  TrainActs<float> af;
  const double ld = md.Forward(pd, tokens, B, ad);
  const double lf = mf.Forward(pf, tokens, B, af);
  // float32 forward through 2 layers at these sizes: ~1e-6 relative.
  EXPECT_NEAR(lf, ld, 1e-4 * std::abs(ld)) << label;
  ModelWeightsOf<double> gd = ZeroWeights<double>(arch.model);
  ModelWeights gf = ZeroWeights<float>(arch.model);
  md.Backward(pd, ad, gd);
  mf.Backward(pf, af, gf);
  std::vector<std::vector<double>*> want;
  gd.ForEach([&](const std::string&, std::vector<double>& t, bool) { want.push_back(&t); });
  size_t idx = 0;
  double worst = 0;  // largest err / allowed
  gf.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    const std::vector<double>& w = *want[idx++];
    double err = 0, mag = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      err = std::max(err, std::abs(t[i] - w[i]));
      mag = std::max(mag, std::abs(w[i]));
    }
    // Every gradient is a sum of O(N) float products through 2 layers; float's 6e-8 relative
    // rounding grows to ~1e-5 of the tensor's largest entry; 1e-3 still catches any wrong term.
    const double allowed = 1e-3 * mag + 1e-7;
    worst = std::max(worst, err / allowed);
    EXPECT_LE(err, allowed) << label << " " << name << " mag=" << mag;
  });
  std::printf("[ float    ] %s: loss %.6f vs %.6f, largest gradient error / allowed %.2e\n",
              label.c_str(), lf, ld, worst);
}

// Larger than the tiny shapes, for the float kernel against the double model: several key tiles
// of the kernel (T = 100 > 64), GQA, a windowed layer and a full one.
void MakeMidSized(TrainArch& arch) {
  arch.model.dim = 32;
  arch.model.hidden_dim = 48;
  arch.model.n_heads = 4;
  arch.model.n_kv_heads = 2;
  arch.model.vocab_size = 40;
  arch.model.seq_len = 100;
  arch.model.attention.layers = {LayerLayout{true, 30}, LayerLayout{true, 0}};
}

// The later position and logit variants: Sandwich, XPOS (a small gamma, so the decay is
// strong over 5 positions), p-RoPE, SSMax (its learned s_h included), log-n (a training length
// of 3 below the 5 positions, so the factor exceeds 1) and cosine attention's per-position lambda.
std::vector<std::pair<std::string, std::function<void(TrainArch&)>>> LaterVariants() {
  return {
      // Qwen 2's q/k/v projection biases: their gradients are dq's, dk's and dv's column sums.
      {"qkv bias", [](TrainArch& a) { a.model.qkv_bias = true; }},
      // Qwen 3's per-head q/k RMSNorm before RoPE, with heads wider than dim / heads.
      {"qk norm, wide heads",
       [](TrainArch& a) {
         a.model.qk_norm = true;
         a.model.explicit_head_dim = a.model.dim / a.model.n_heads + 2;
       }},
      {"sandwich",
       [](TrainArch& a) {
         a.model.attention.position = LayerPosition::kSandwich;
         a.model.attention.sandwich_dim = 6;
         a.model.attention.sandwich_lambda = 0.7;
       }},
      {"xpos",
       [](TrainArch& a) {
         a.model.attention.position = LayerPosition::kRope;
         a.model.attention.xpos_scale_base = 3.0;  // XPOS
       }},
      {"xpos cosine",  // QueryNorm and KeyNorm before the decay
       [](TrainArch& a) {
         a.model.attention.xpos_scale_base = 3.0;
         a.model.attention.query_norm = a.model.attention.key_norm = true;
         a.model.attention.logit_scale = 4.0;
       }},
      {"p-rope", [](TrainArch& a) { a.model.attention.rope_fraction = 0.5; }},
      // The fine-tuning initialisations: position interpolation (every theta / F) and NTK-aware
      // RoPE (base * F^(D/(D-2)), resolved at this arch's head dim), the latter with p-RoPE.
      {"pi", [](TrainArch& a) { a.model.rope_interpolation = 2.5f; }},
      {"ntk",
       [](TrainArch& a) {
         a.rope_ntk = 3.0;
         a.rope_ntk_base = a.model.rope_base;
         a.model.attention.rope_fraction = 0.5;
         FinalizeArch(a);
       }},
      {"ssmax", [](TrainArch& a) { a.model.attention.ssmax = true; }},
      {"trained logn", [](TrainArch& a) { a.model.attention.log_length_scale = true; }},
      // SSMax and trained log-n on a window layer: n counts the keys the window lets a query see
      // (at most 3 here), not i + 1; the full layer after it counts i + 1.
      {"ssmax and logn on a window layer",
       [](TrainArch& a) {
         a.model.attention.ssmax = a.model.attention.log_length_scale = true;
         a.model.attention.layers = {LayerLayout{.window = 3}, LayerLayout{}};
       }},
      {"cosine per position",
       [](TrainArch& a) {
         a.model.attention.query_norm = a.model.attention.key_norm =
             a.model.attention.position_log_scale = true;
         a.model.attention.logit_scale = 4.0;
       }},
      // Per-layer RoPE: chunks of 2 at a base of their own, then full attention with its own
      // position interpolation.
      {"per-layer rope, chunks",
       [](TrainArch& a) {
         a.model.attention.layers = {LayerLayout{.chunk = 2, .rope_base = 50.0},
                                     LayerLayout{.rope_pi = 2.5}};
       }},
      // Llama 4: a chunked RoPE layer and a NoPE layer with the temperature tuning (floor 2:
      // it changes from position 1 on).
      {"llama4 temperature",
       [](TrainArch& a) {
         a.model.attention.layers = {LayerLayout{.chunk = 3},
                                     LayerLayout{.position = false, .temperature = true}};
         a.model.attention.temperature_floor = 2.0;
         a.model.attention.temperature_scale = 0.7;
       }},
  };
}

TEST(TrainTransformer, LaterVariantsGradientsMatchCentralDifferences) {
  uint64_t seed = 90;
  for (const auto& [label, set] : LaterVariants()) {
    TrainArch arch = TinyArch(LayerPosition::kRope);
    set(arch);
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, ++seed);
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, seed), 2, [](const std::string&) { return true; }, label);
  }
}

// Relative maps at training time: the full layer rotates inside the attention (the reference
// with the map's r_ij, the kernel per segment), the windowed one keeps plain RoPE. Windows of 2
// and 3 so that 5 positions cross them; p-RoPE on top for rerope.
TEST(TrainTransformer, RelativeMapsGradientsMatchCentralDifferences) {
  uint64_t seed = 120;
  for (const char* map :
       {"rerope:window=2", "leaky-rerope:window=2,k=2", "self-extend:group=2,window=2",
        "string:shift=3,window=1", "dca:chunk=4,window=1"}) {
    TrainArch arch = TinyArch(LayerPosition::kRope);
    arch.model.attention.layers = {LayerLayout{true, 3}, LayerLayout{true, 0}};
    arch.model.attention.rope_map = map;
    if (std::string(map).starts_with("rerope")) arch.model.attention.rope_fraction = 0.5;
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, ++seed);
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, seed), 2, [](const std::string&) { return true; }, map);
  }
}

TEST(TrainTransformer, RelativeMapFloatKernelModelMatchesDoubleModel) {
  for (const char* map :
       {"rerope:window=24", "leaky-rerope:window=20,k=3", "self-extend:group=4,window=16"}) {
    TrainArch arch = TinyArch(LayerPosition::kRope);
    MakeMidSized(arch);
    arch.model.attention.rope_map = map;
    ExpectFloatModelMatchesDouble(arch, map);
  }
}

// Position perturbation: RoPE rotates by the given positions (randomized ones here, with gaps),
// and the gradient stays exact; a constant shift of every position changes nothing (RoPE sees
// differences only), while the randomized positions do change the loss.
TEST(TrainTransformer, PerturbedPositionsGradientsAndInvariance) {
  TrainArch arch = TinyArch(LayerPosition::kRope);
  arch.model.attention.layers = {LayerLayout{true, 0}, LayerLayout{true, 3}};
  TrainTransformer<double, RefAttention> model(arch);
  ModelWeightsOf<double> p = RandomParams<double>(arch, 140);
  const std::vector<int> tokens = TinyTokens(arch, 2, 5, 141);
  const PositionPerturbation randomized = ParsePerturbation("randomized:max=40", "test");
  const std::vector<int64_t> positions = PerturbedPositions(randomized, 7, 0, 2, 5);
  model.SetPositions(positions);
  ExpectModelGradients(
      model, p, tokens, 2, [](const std::string&) { return true; }, "randomized positions");
  TrainActs<double> acts;
  const double perturbed = model.Forward(p, tokens, 2, acts);
  model.SetPositions({});
  const double plain = model.Forward(p, tokens, 2, acts);
  std::vector<int64_t> shifted(10);
  for (int64_t r = 0; r < 10; ++r) shifted[r] = r % 5 + 1000;
  model.SetPositions(shifted);
  // Rotations by 1000 + t in double: the angles' rounding is ~1e-13 relative.
  EXPECT_NEAR(model.Forward(p, tokens, 2, acts), plain, 1e-10);
  EXPECT_GT(std::abs(perturbed - plain), 1e-6);
}

// PI is "position m rotated as m / F": a model with F = 2 at positions 0, 2, 4, ... is the plain
// model at 0, 1, 2, ... (angles 2t * theta/2 = t * theta, exact in binary floating point), and
// its perturbed-position tables agree with its own tables at the true positions.
TEST(TrainTransformer, PositionInterpolationDividesPositions) {
  TrainArch plain_arch = TinyArch(LayerPosition::kRope);
  plain_arch.model.attention.layers = {LayerLayout{true, 0}, LayerLayout{true, 3}};
  TrainArch pi_arch = plain_arch;
  pi_arch.model.rope_interpolation = 2.0f;
  TrainTransformer<double, RefAttention> plain(plain_arch), pi(pi_arch);
  const ModelWeightsOf<double> p = RandomParams<double>(plain_arch, 150);
  const std::vector<int> tokens = TinyTokens(plain_arch, 2, 5, 151);
  TrainActs<double> acts;
  const double at_t = plain.Forward(p, tokens, 2, acts);
  const double pi_true = pi.Forward(p, tokens, 2, acts);
  EXPECT_GT(std::abs(pi_true - at_t), 1e-6);  // PI reaches the loss
  std::vector<int64_t> doubled(10), same(10);
  for (int64_t r = 0; r < 10; ++r) doubled[r] = 2 * (r % 5), same[r] = r % 5;
  pi.SetPositions(doubled);
  EXPECT_EQ(pi.Forward(p, tokens, 2, acts), at_t);
  pi.SetPositions(same);
  EXPECT_EQ(pi.Forward(p, tokens, 2, acts), pi_true);
}

TEST(TrainTransformer, LaterVariantsChangeTheLoss) {
  // Each variant must reach the loss: the same parameters give another loss than plain RoPE.
  const TrainArch base = TinyArch(LayerPosition::kRope);
  TrainTransformer<double, RefAttention> plain(base);
  for (const auto& [label, set] : LaterVariants()) {
    TrainArch arch = base;
    set(arch);
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, 5);
    ModelWeightsOf<double> q = RandomParams<double>(base, 5);
    const std::vector<int> tokens = TinyTokens(arch, 2, 5, 3);
    TrainActs<double> a1, a2;
    EXPECT_GT(std::abs(model.Forward(p, tokens, 2, a1) - plain.Forward(q, tokens, 2, a2)), 1e-6)
        << label;
  }
}

TEST(TrainTransformer, LaterVariantsFloatKernelModelMatchesDoubleModel) {
  for (const auto& [label, set] : LaterVariants()) {
    TrainArch arch = TinyArch(LayerPosition::kRope);
    MakeMidSized(arch);
    set(arch);
    if (label == "xpos")
      arch.model.attention.xpos_scale_base = 64.0;  // a decay over 100 positions, no underflow
    if (label == "logn") arch.model.seq_len = 40;
    ExpectFloatModelMatchesDouble(arch, label);
  }
}

TEST(TrainTransformer, FloatKernelModelMatchesDoubleModel) {
  for (LayerPosition pos : {LayerPosition::kRope, LayerPosition::kKerpleLog}) {
    TrainArch arch = TinyArch(pos);
    MakeMidSized(arch);
    ExpectFloatModelMatchesDouble(arch, "llama position " + std::to_string(static_cast<int>(pos)));
  }
}

// ---- The GAU block (src/train/gau_layer.h) ---------------------------------------------------

// One head of key width S = 4 and expansion width E = 12: the kernel runs R = 3 copies of it.
TrainArch TinyGauArch(LayerPosition position) {
  TrainArch a = TinyArch(position);
  a.model.hidden_dim = 12;
  a.model.SetGau(4);
  return a;
}

// `a` with sizes for the float kernel against the double model: several key tiles of the kernel
// (T = 100 > 64), E = 64, S = 16: R = 4 copies of the head; a windowed and a full layer.
TrainArch MidGauArch(TrainArch a) {
  a.model.dim = 32;
  a.model.hidden_dim = 64;
  a.model.SetGau(16);
  a.model.vocab_size = 40;
  a.model.seq_len = 100;
  a.model.attention.layers = {LayerLayout{true, 30}, LayerLayout{true, 0}};
  return a;
}

// The forward's and backward's scratch lives in TrainActs from step to step (so that a step
// allocates nothing): steps run on the same TrainActs after steps of other shapes and tokens give
// the loss and gradients of a fresh TrainActs, bit for bit. Fails if any scratch element is read
// before the current step writes it (e.g. a gradient added onto what the last step left).
void ExpectReusedActsMatchFresh(const TrainArch& arch, const std::string& label) {
  const int64_t T = arch.model.seq_len;
  const ModelWeights p = RandomParams<float>(arch, 5);
  const TrainTransformer<float, KernelAttention> model(arch);
  auto step = [&](TrainActs<float>& acts, const std::vector<int>& tokens, int64_t B) {
    ModelWeights g = ZeroWeights<float>(arch.model);
    const double loss = model.Forward(p, tokens, B, acts);
    model.Backward(p, acts, g);
    return std::pair{loss, g};
  };
  const std::vector<int> tokens = TinyTokens(arch, 2, T, 41);
  TrainActs<float> fresh;
  const auto [want_loss, want] = step(fresh, tokens, 2);
  TrainActs<float> reused;
  step(reused, TinyTokens(arch, 3, T, 42), 3);       // more rows
  step(reused, TinyTokens(arch, 1, T - 37, 43), 1);  // fewer rows, shorter
  step(reused, TinyTokens(arch, 2, T, 44), 2);       // the same shape, other tokens
  const auto [got_loss, got] = step(reused, tokens, 2);
  EXPECT_EQ(got_loss, want_loss) << label;
  std::vector<const std::vector<float>*> w;
  ModelWeights want_copy = want;
  want_copy.ForEach([&](const std::string&, std::vector<float>& t, bool) { w.push_back(&t); });
  size_t i = 0;
  ModelWeights got_copy = got;
  got_copy.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    EXPECT_TRUE(t == *w[i]) << label << ": " << name << " differs after reuse";
    ++i;
  });
}

TEST(TrainTransformer, ActsReusedAcrossStepsGiveTheGradientsOfFreshOnes) {
  TrainArch llama = TinyArch(LayerPosition::kRope);
  MakeMidSized(llama);
  ExpectReusedActsMatchFresh(llama, "llama");
  ExpectReusedActsMatchFresh(MidGauArch(TinyGauArch(LayerPosition::kRope)), "gau");
}

TEST(TrainTransformer, GauGradientOfEveryParameterMatchesCentralDifferences) {
  for (LayerPosition pos : {LayerPosition::kRope, LayerPosition::kNone, LayerPosition::kAlibi,
                            LayerPosition::kKerpleLog, LayerPosition::kKerplePower}) {
    const TrainArch arch = TinyGauArch(pos);
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, 41 + static_cast<int>(pos));
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, 7), 2, [](const std::string&) { return true; },
        "gau position " + std::to_string(static_cast<int>(pos)));
  }
}

// The GAU's RoPE with position interpolation and with NTK's base (its D: the key width S = 4).
TEST(TrainTransformer, GauInterpolationAndNtkGradientsMatchCentralDifferences) {
  for (int v = 0; v < 2; ++v) {
    TrainArch arch = TinyGauArch(LayerPosition::kRope);
    arch.model.attention.layers = {LayerLayout{true, 3}, LayerLayout{true, 0}};
    if (v == 0) {
      arch.model.rope_interpolation = 3.0f;
    } else {
      arch.rope_ntk = 2.0;
      arch.rope_ntk_base = arch.model.rope_base;
      FinalizeArch(arch);
      EXPECT_EQ(arch.model.rope_base, 40000.0f);  // 10^4 * 2^(4/2)
    }
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, 71 + v);
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, 10 + v), 2, [](const std::string&) { return true; },
        v == 0 ? "gau pi" : "gau ntk");
    TrainArch mid = MidGauArch(arch);  // the float kernel against the double model
    FinalizeArch(mid);
    ExpectFloatModelMatchesDouble(mid, v == 0 ? "gau pi" : "gau ntk");
  }
}

TEST(TrainTransformer, GauNormalizedLogitsGradientsMatchCentralDifferences) {
  // KeyNorm, QueryNorm, and both (cosine attention with lambda = 3), on the GAU's Q and K.
  for (int v = 0; v < 3; ++v) {
    TrainArch arch = TinyGauArch(LayerPosition::kRope);
    arch.model.attention.query_norm = v != 1;
    arch.model.attention.key_norm = v != 0;
    if (v == 2) arch.model.attention.logit_scale = 3.0;
    TrainTransformer<double, RefAttention> model(arch);
    ModelWeightsOf<double> p = RandomParams<double>(arch, 51 + v);
    ExpectModelGradients(
        model, p, TinyTokens(arch, 2, 5, 8), 2,
        [](const std::string& name) { return name.starts_with("layers.0."); },
        "gau variant " + std::to_string(v));
  }
}

// The check above is not blind: the same comparison, handed the analytic gradient with the
// largest coordinate of one tensor off by 1%, flags that coordinate and no other, for every
// tensor of a GAU layer (and the embedding, through the GAU's embedding norm). The layer with
// RoPE: without it (or KeyNorm) beta_k's gradient is 0 by the math (tests/train/gau_layer_test.cc).
TEST(TrainTransformer, GauWrongGradientIsFlagged) {
  const TrainArch arch = TinyGauArch(LayerPosition::kRope);
  TrainTransformer<double, RefAttention> model(arch);
  ModelWeightsOf<double> p = RandomParams<double>(arch, 61);
  const std::vector<int> tokens = TinyTokens(arch, 2, 5, 9);
  ModelWeightsOf<double> grads = ModelGradients(model, p, tokens, 2);
  std::vector<std::pair<std::string, std::vector<double>*>> tensors;
  grads.ForEach([&](const std::string& name, std::vector<double>& t, bool) {
    if (name.starts_with("layers.0.") || name == "token_embedding") tensors.emplace_back(name, &t);
  });
  ASSERT_EQ(tensors.size(), 9u);  // embedding, 4 matrices, 4 scales and offsets
  for (auto& [name, t] : tensors) {
    size_t k = 0;
    for (size_t i = 0; i < t->size(); ++i) {
      if (std::abs((*t)[i]) > std::abs((*t)[k])) k = i;
    }
    // 1% of the coordinate must exceed the bound 1e-7 + 1e-6 |g| by far.
    ASSERT_GT(std::abs((*t)[k]), 1e-3) << name << ": a gradient that is all ~0 checks nothing";
    const double keep = (*t)[k];
    (*t)[k] *= 1.01;
    const std::string target = name;
    const std::vector<ModelGradientMismatch> bad = ModelGradientMismatches(
        model, p, grads, tokens, 2, [&](const std::string& n) { return n == target; });
    (*t)[k] = keep;
    ASSERT_EQ(bad.size(), 1u) << name << ": the 1% error at " << k << " went unnoticed";
    EXPECT_EQ(bad[0].name, name);
    EXPECT_EQ(bad[0].index, k);
  }
}

TEST(TrainTransformer, GauFloatKernelModelMatchesDoubleModel) {
  for (LayerPosition pos :
       {LayerPosition::kRope, LayerPosition::kAlibi, LayerPosition::kKerpleLog}) {
    const TrainArch arch = MidGauArch(TinyGauArch(pos));
    ExpectFloatModelMatchesDouble(arch, "gau position " + std::to_string(static_cast<int>(pos)));
  }
}

TEST(TrainTransformer, GauArchitectureIsValidated) {
  TrainArch a = TinyGauArch(LayerPosition::kRope);
  a.model.hidden_dim = 10;  // not a multiple of S = 4
  try {
    ValidateArch(a);
    ADD_FAILURE() << "E = 10, S = 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a positive multiple of gau_key_dim=4"), std::string::npos)
        << e.what();
  }
  a = TinyGauArch(LayerPosition::kRope);
  a.model.n_heads = 2;
  EXPECT_THROW(ValidateArch(a), Error);
  a = TinyGauArch(LayerPosition::kRope);
  a.model.key_dim = 3;
  EXPECT_THROW(ValidateArch(a), Error);
}

// GAU parameters: names, shapes and weight decay (none on the per-dim scales and offsets).
TEST(TrainTransformer, GauParameterList) {
  const TrainArch arch = TinyGauArch(LayerPosition::kKerpleLog);
  ModelWeightsOf<double> p = ZeroWeights<double>(arch.model);
  std::vector<std::string> names;
  p.ForEach([&](const std::string& name, std::vector<double>& t, bool decay) {
    names.push_back(name);
    int64_t n = 1;
    for (int64_t d : WeightShape(arch.model, name)) n *= d;
    EXPECT_EQ(n, static_cast<int64_t>(t.size())) << name;
    const bool matrix = name == "token_embedding" || name.ends_with("_u") || name.ends_with("_v") ||
                        name.ends_with("_z") || name.ends_with("_o");
    EXPECT_EQ(decay, matrix) << name;
  });
  const std::vector<std::string> layer0 = {
      "layers.0.gau_u",   "layers.0.gau_v",  "layers.0.gau_z",   "layers.0.gau_o",
      "layers.0.gamma_q", "layers.0.beta_q", "layers.0.gamma_k", "layers.0.beta_k",
      "layers.0.bias_a",  "layers.0.bias_b"};
  ASSERT_EQ(names.size(), 1 + 2 * layer0.size() + 1);  // + embedding, final norm (classifier tied)
  for (size_t i = 0; i < layer0.size(); ++i) EXPECT_EQ(names[1 + i], layer0[i]);
  EXPECT_EQ(WeightShape(arch.model, "layers.1.gau_u"), (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(WeightShape(arch.model, "layers.1.gau_z"), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(WeightShape(arch.model, "layers.1.gau_o"), (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(WeightShape(arch.model, "layers.1.beta_k"), (std::vector<int64_t>{4}));
  EXPECT_EQ(WeightShape(arch.model, "layers.1.bias_b"), (std::vector<int64_t>{1}));
}

// The LLaMA block with every optional tensor (q/k/v biases, q/k norms, post norms, KERPLE's
// a_h, b_h, SSMax's s_h): ForEach lists each held weight once, in the table's order, with the
// shape WeightShape gives it and weight decay on the matrices only; WeightShape refuses names that
// are not a layer's tensor.
TEST(TrainTransformer, LlamaParameterListFollowsTheBlockTable) {
  TrainArch arch = TinyArch(LayerPosition::kKerpleLog);
  arch.model.qkv_bias = true;
  arch.model.qk_norm = true;
  arch.model.post_norms = true;
  arch.model.attention.ssmax = true;
  arch.model.shared_classifier = false;
  ModelWeightsOf<double> p = ZeroWeights<double>(arch.model);
  std::vector<std::string> names;
  std::set<const std::vector<double>*> listed;
  p.ForEach([&](const std::string& name, std::vector<double>& t, bool decay) {
    names.push_back(name);
    EXPECT_TRUE(listed.insert(&t).second) << name << " listed twice";
    EXPECT_FALSE(t.empty()) << name;
    int64_t n = 1;
    for (int64_t d : WeightShape(arch.model, name)) n *= d;
    EXPECT_EQ(n, static_cast<int64_t>(t.size())) << name;
    EXPECT_EQ(decay, WeightShape(arch.model, name).size() == 2) << name;
  });
  const std::vector<std::string> layer0 = {"attn_norm",
                                           "wq",
                                           "wk",
                                           "wv",
                                           "bq",
                                           "bk",
                                           "bv",
                                           "q_norm",
                                           "k_norm",
                                           "wo",
                                           "attn_post_norm",
                                           "ffn_norm",
                                           "w1",
                                           "w2",
                                           "w3",
                                           "ffn_post_norm",
                                           "bias_a",
                                           "bias_b",
                                           "ssmax"};
  ASSERT_EQ(names.size(), 1 + 2 * layer0.size() + 2);  // + embedding, final norm, classifier
  EXPECT_EQ(names.front(), "token_embedding");
  for (size_t i = 0; i < layer0.size(); ++i) EXPECT_EQ(names[1 + i], "layers.0." + layer0[i]);
  EXPECT_EQ(names[names.size() - 2], "final_norm");
  EXPECT_EQ(names.back(), "classifier");
  // Every weight the layers hold is listed (none is left out of the table).
  for (auto& L : p.layers) {
    for (std::vector<double>* v : {&L.attn_norm,
                                   &L.wq,
                                   &L.wk,
                                   &L.wv,
                                   &L.wo,
                                   &L.bq,
                                   &L.bk,
                                   &L.bv,
                                   &L.q_norm,
                                   &L.k_norm,
                                   &L.attn_post_norm,
                                   &L.ffn_post_norm,
                                   &L.ffn_norm,
                                   &L.w1,
                                   &L.w2,
                                   &L.w3,
                                   &L.bias_a,
                                   &L.bias_b,
                                   &L.ssmax,
                                   &L.gau_u,
                                   &L.gau_v,
                                   &L.gau_z,
                                   &L.gamma_q,
                                   &L.beta_q,
                                   &L.gamma_k,
                                   &L.beta_k}) {
      EXPECT_EQ(listed.contains(v), !v->empty());
    }
  }
  EXPECT_EQ(WeightShape(arch.model, "layers.1.k_norm"), (std::vector<int64_t>{4}));
  EXPECT_EQ(WeightShape(arch.model, "layers.0.wk"), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(WeightShape(arch.model, "layers.0.ssmax"), (std::vector<int64_t>{2}));
  for (const char* bad : {"wq", "layers.wq", "layers.x.wq", "layers.0.nonsense", "layers.0.",
                          "layers.0", "final_norm.x"}) {
    EXPECT_THROW(WeightShape(arch.model, bad), Error) << bad;
  }
}

}  // namespace
}  // namespace stretch
