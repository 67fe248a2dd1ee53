// The trainable LLaMA-block transformer: forward with saved activations and a hand-written
// backward, as data and plain loops over the ops of src/kernels (each Forward/Backward pair lives
// next to its forward there). Templated on the number type and on the attention implementation,
// so that the same code runs in float with the tiled kernel (training) and in double with the
// naive reference attention (tests: central differences of the whole model's loss).
//
// Shapes, fixed letters: B sequences, T positions each (the training length or less), N = B*T
// rows, C width, F FFN width, H query heads, G kv heads, D head dim, V vocabulary.
//
// One layer (the pre-norm LLaMA block of src/model/block.h, which inference runs too):
//   a = RMSNorm(x; attn_norm)
//   q = a Wq^T, k = a Wk^T, v = a Wv^T          (N, H*D), (N, G*D), (N, G*D)
//     (+ bq, bk, bv with ModelConfig::qkv_bias)
//   q, k RMS-normalized per head (with ModelConfig::qk_norm: Qwen 3's q_norm, k_norm)
//   q, k rotated by RoPE at positions 0..T-1    (unless the layer has no position: NoPE)
//   then, where the model has them: q, k / |.| per head (QueryNorm, KeyNorm), XPOS's decay,
//   SSMax's s_h ln(n_i) on q, n_i the keys query i sees (AttentionPlan::VisibleKeys)
//   att = Attention(q, k, v; mask, bias)        (N, H*D), and lse (N, H)
//   x1 = x + att Wo^T
//   f = RMSNorm(x1; ffn_norm)
//   h = silu(f W1^T) * (f W3^T);  x' = x1 + h W2^T
// and at the end: logits = RMSNorm(x; final_norm) Wcls^T, loss = mean cross-entropy.
//
// Or, with ModelBlock::kGau, every layer one post-norm Gated Attention Unit (src/model/block.h,
// single head, E expansion width = model.hidden_dim, S key width = model.key_dim):
//   x = RMSNorm(E[tokens]) with no gain   (RoFormerV2 / GAU-alpha's Embedding-Norm)
//   x' = RMSNorm(x + GAU(x)) with no gain (post-norm)
// and the same final norm and classifier (on a post-norm stack, whose output already has unit
// RMS, the final norm acts as a learned per-channel gain; GAU-alpha has none: its last layer's
// Norm feeds the output embedding directly).
// Log-n: GAU-alpha's softmax_plus multiplies the logits by log n / log 512 (bidirectional, n the
// sequence's length, 512 its training length, so 1 at the training length). Here, training causal
// at T <= L, the project's log-n form max(1, ln(i + 1) / ln L) is 1 at every trained position, so
// training uses 1/sqrt(S) alone and log-n remains an evaluation-time choice (`+logn`). The pure
// ratio without max(1, .) at training time (< 1 at early positions) is not implemented.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/kernels/attention.h"
#include "src/kernels/ops.h"
#include "src/model/block.h"
#include "src/model/config.h"
#include "src/model/model_arch.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "src/position/plan.h"
#include "src/position/rope.h"
#include "src/train/gau_layer.h"

namespace stretch {

// p-RoPE: how many of the head_dim() / 2 frequency pairs rotate (the first ones, highest
// frequencies): round(rope_fraction * pairs).
inline int RotatedPairs(const TrainArch& arch) {
  return arch.model.attention.RotatedPairs(arch.model.head_dim());
}

// The attention plan of layer l for sequences of T positions, with the layer's current KERPLE
// parameters: the model's own rule (src/model/transformer.h, LayerAttentionPlan) under the method
// the model trains with (its relative map, if any, and log-n), less what the trainer computes
// outside the kernel for its backward (QueryNorm / KeyNorm, SSMax, XPOS's decay). A plan is plain
// data; rebuilt per step, it costs nothing next to the layer.
template <typename Real>
AttentionPlan LayerPlan(const TrainArch& arch, const LayerWeightsOf<Real>& layer, int l,
                        int64_t T) {
  const AttentionLayout& layout = arch.model.attention;
  const std::string trained = layout.rope_map.empty() ? std::string("direct") : layout.rope_map;
  const AttentionPlan method =
      MakeAttentionPlan(ParseMethod(trained), ModelGeometry(arch.model), T);
  LayerHeadValues values;
  values.bias_a.assign(layer.bias_a.begin(), layer.bias_a.end());
  values.bias_b.assign(layer.bias_b.begin(), layer.bias_b.end());
  AttentionPlan plan = LayerAttentionPlan(arch.model, l, method, values);
  plan.query_norm = plan.key_norm = false;
  plan.ssmax.clear();
  plan.xpos_scale_base = 0.0;
  return plan;
}

// SSMax's row weights ln(n_i), i = 0 .. T - 1, n_i the keys query i sees under the layer's mask
// (i + 1 on a causal layer, at most its window on a local one).
template <typename Real>
std::vector<Real> LogKeysSeen(const AttentionPlan& plan, int64_t T) {
  std::vector<Real> log_n(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    log_n[static_cast<size_t>(t)] =
        static_cast<Real>(std::log(static_cast<double>(plan.VisibleKeys(t))));
  }
  return log_n;
}

// What the forward keeps for the backward, per layer.
template <typename Real>
struct LayerActs {
  std::vector<Real> x, a, q, k, v, att, lse, x1, f, g, u, h;  // LLaMA
  std::vector<Real> q_raw, k_raw;  // before QueryNorm / KeyNorm (empty without)
  std::vector<Real> q_unscaled;    // SSMax: q before s_h ln(n_i) (empty without)
  std::vector<Real> q_pre, k_pre;  // before the per-head q/k RMSNorm (empty without qk_norm)
  GauActs<Real> gau;               // GAU
};
template <typename Real>
struct TrainActs {
  int64_t B = 0, T = 0;
  std::vector<int> inputs, targets;  // (N)
  std::vector<LayerActs<Real>> layers;
  std::vector<Real> x_embed;  // (N, C): GAU: the embedding rows before their norm (empty: LLaMA)
  std::vector<Real> x_final;  // (N, C): input of the final norm
  std::vector<Real> logits;   // (N, V); the backward turns it into dlogits in place
  std::vector<Real> rope_cos, rope_sin;  // perturbed positions: (B, T, pairs) each; else empty
  double loss = 0.0;                     // mean over scored targets
  int64_t scored = 0;
  // Scratch of the forward's head and of the backward, kept here so that a step of the same shape
  // as the last one allocates nothing: a fresh vector of megabytes costs its zeroing and a page
  // fault per 4 KiB page, measured at about a tenth of a training step. Every element is written
  // before it is read in each call, so none of them carries anything from one step to the next.
  struct Scratch {
    std::vector<Real> xn, dxn, dx;                           // (N, C)
    std::vector<Real> dh, dg, du, df, datt, dq, dk, dv, da;  // the LLaMA layers' gradients
    GauScratch<Real> gau;                                    // the GAU layers'
  } scratch;
};

// Attention implementations (the template's Attn):
//   Attn::Forward(q, k, v, out, lse, dims, scale, plan)          q (T,H,D) ... dense, one sequence
//   Attn::Backward(q, k, v, out, dout, lse, dq, dk, dv, dims, scale, plan, da, db)
// KernelAttention is the tiled float kernel of src/kernels.
struct KernelAttention {
  static void Forward(const float* q, const float* k, const float* v, float* out, float* lse,
                      const AttentionDims& dims, float scale, const AttentionPlan& plan);
  static void Backward(const float* q, const float* k, const float* v, const float* out,
                       const float* dout, const float* lse, float* dq, float* dk, float* dv,
                       const AttentionDims& dims, float scale, const AttentionPlan& plan,
                       double* dbias_a, double* dbias_b);
};

template <typename Real, class Attn>
class TrainTransformer {
 public:
  // Position perturbation (src/train/positions.h): the RoPE positions of the next Forward calls,
  // (B x T) row-major, instead of 0 .. T-1 in every row; empty: the true positions. Only RoPE
  // rotates by them (RoPE layers of the LLaMA block without a relative map; checked by Forward).
  void SetPositions(std::vector<int64_t> positions) const { positions_ = std::move(positions); }

  explicit TrainTransformer(TrainArch arch) : arch_(std::move(arch)) {
    ValidateArch(arch_);
    ones_.assign(static_cast<size_t>(arch_.model.dim), Real(1));
  }
  const TrainArch& arch() const { return arch_; }

  // tokens: B sequences of T + 1 ids (inputs and next-token targets); a target of kNotScored
  // is left out of the loss. Returns the mean loss; keeps what the backward needs in acts.
  double Forward(const ModelWeightsOf<Real>& p, const std::vector<int>& tokens, int64_t B,
                 TrainActs<Real>& acts) const {
    const ModelConfig& m = arch_.model;
    const int64_t T = static_cast<int64_t>(tokens.size()) / B - 1;
    STRETCH_CHECK(B >= 1 && T >= 1 && static_cast<int64_t>(tokens.size()) == B * (T + 1),
                  "tokens={} B={}", tokens.size(), B);
    const int64_t N = B * T;
    const int C = m.dim, V = m.vocab_size;
    acts.B = B;
    acts.T = T;
    acts.inputs.resize(static_cast<size_t>(N));
    acts.targets.resize(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        acts.inputs[static_cast<size_t>(b * T + t)] = tokens[static_cast<size_t>(b * (T + 1) + t)];
        acts.targets[static_cast<size_t>(b * T + t)] =
            tokens[static_cast<size_t>(b * (T + 1) + t + 1)];
      }
    }
    std::vector<Real>& x = acts.x_final;  // the stream, updated in place layer by layer
    x.resize(static_cast<size_t>(N * C));
    EmbeddingForward(acts.inputs.data(), p.token_embedding.data(), x.data(), N, C, V);
    acts.x_embed.clear();
    if (arch_.model.Gau()) {  // forward: x = RMSNorm(E[inputs]) with gain 1
      acts.x_embed = x;
      RmsNormForward(acts.x_embed.data(), ones_.data(), x.data(), N, C,
                     static_cast<Real>(m.norm_eps));
    }
    const RopeTables& rope = Rope(T);
    PerturbedTables(B, T, acts);
    acts.layers.resize(static_cast<size_t>(m.n_layers));
    for (int l = 0; l < m.n_layers; ++l) {
      const LayerWeightsOf<Real>& W = p.layers[static_cast<size_t>(l)];
      if (arch_.model.Gau()) {  // x' = RMSNorm(x + GAU(x)), in place
        GauLayerForward<Real, Attn>(
            W, GauConfigOf(arch_.model, l), LayerPlan(arch_, W, l, T), &rope.Angles(l), x.data(), B,
            T, acts.layers[static_cast<size_t>(l)].gau, acts.scratch.gau, x.data());
        continue;
      }
      LlamaLayerForward(acts, l, W, rope, x.data());
    }
    std::vector<Real>& xn = acts.scratch.xn;
    xn.resize(x.size());
    RmsNormForward(x.data(), p.final_norm.data(), xn.data(), N, C, static_cast<Real>(m.norm_eps));
    acts.logits.resize(static_cast<size_t>(N * V));
    LinearForward(xn.data(), p.ClassifierData(), acts.logits.data(), N, C, V);
    const MeanLoss ml = CrossEntropyForward(acts.logits.data(), acts.targets.data(), N, V);
    acts.loss = ml.mean;
    acts.scored = ml.scored;
    return ml.mean;
  }

  // Adds d loss / d parameter to grads (accumulates, for gradient accumulation); `acts` from the
  // Forward of the same parameters (its logits are overwritten).
  void Backward(const ModelWeightsOf<Real>& p, TrainActs<Real>& acts, ModelWeightsOf<Real>& grads,
                double dloss = 1.0) const {
    const ModelConfig& m = arch_.model;
    const int64_t B = acts.B, T = acts.T, N = B * T;
    const int C = m.dim, F = m.hidden_dim, H = m.n_heads, G = m.n_kv_heads, D = m.head_dim(),
              V = m.vocab_size;
    const Real eps = static_cast<Real>(m.norm_eps);
    // forward: loss = CE(logits);  logits = xn Wcls^T;  xn = RMSNorm(x_final)
    CrossEntropyBackward(acts.logits.data(), acts.targets.data(), acts.logits.data(), N, V, dloss);
    typename TrainActs<Real>::Scratch& s = acts.scratch;
    auto sized = [](std::vector<Real>& v, size_t n) -> std::vector<Real>& {
      v.resize(n);
      return v;
    };
    std::vector<Real>& xn = sized(s.xn, acts.x_final.size());
    RmsNormForward(acts.x_final.data(), p.final_norm.data(), xn.data(), N, C, eps);
    std::vector<Real>& dxn = sized(s.dxn, xn.size());
    Real* dcls = grads.classifier.empty() ? grads.token_embedding.data() : grads.classifier.data();
    LinearBackward(acts.logits.data(), xn.data(), p.ClassifierData(), dxn.data(), dcls, N, C, V,
                   GradWrite::kOverwrite);
    std::vector<Real>& dx = sized(s.dx, xn.size());
    RmsNormBackward(dxn.data(), acts.x_final.data(), p.final_norm.data(), dx.data(),
                    grads.final_norm.data(), N, C, eps, GradWrite::kOverwrite);
    const RopeTables& rope = Rope(T);
    const Real scale = static_cast<Real>(arch_.model.LogitScale());
    // The LLaMA layers' scratch (none for GAU layers, which keep their own).
    auto llama_size = [&](int64_t n) {
      return arch_.model.Gau() ? size_t{0} : static_cast<size_t>(n);
    };
    std::vector<Real>& dh = sized(s.dh, llama_size(N * F));
    std::vector<Real>& dg = sized(s.dg, dh.size());
    std::vector<Real>& du = sized(s.du, dh.size());
    std::vector<Real>& df = sized(s.df, llama_size(N * C));
    std::vector<Real>& datt = sized(s.datt, llama_size(N * H * D));
    std::vector<Real>& dq = sized(s.dq, datt.size());
    std::vector<Real>& dk = sized(s.dk, llama_size(N * G * D));
    std::vector<Real>& dv = sized(s.dv, dk.size());
    std::vector<Real>& da = sized(s.da, df.size());
    for (int l = m.n_layers - 1; l >= 0; --l) {
      const LayerWeightsOf<Real>& W = p.layers[static_cast<size_t>(l)];
      LayerWeightsOf<Real>& dW = grads.layers[static_cast<size_t>(l)];
      const LayerActs<Real>& A = acts.layers[static_cast<size_t>(l)];
      // forward: x' = RMSNorm(x + GAU(x))  so: dx = GAU layer backward of dx'
      if (arch_.model.Gau()) {
        const bool learned_bias = !dW.bias_a.empty() && HasPosition(l);
        double dba = 0.0, dbb = 0.0;
        GauLayerBackward<Real, Attn>(W, GauConfigOf(arch_.model, l), LayerPlan(arch_, W, l, T),
                                     &rope.Angles(l), A.gau, s.gau, B, T, dx.data(), dx.data(), dW,
                                     learned_bias ? &dba : nullptr, learned_bias ? &dbb : nullptr);
        if (learned_bias) {
          dW.bias_a[0] += static_cast<Real>(dba);
          dW.bias_b[0] += static_cast<Real>(dbb);
        }
        continue;
      }
      // forward: x' = x1 + h W2^T  so: dx1 = dx' (dx stays), dh = dx' W2, dW2 += dx'^T h
      LinearBackward(dx.data(), A.h.data(), W.w2.data(), dh.data(), dW.w2.data(), N, F, C,
                     GradWrite::kOverwrite);
      SwiGluBackward(dh.data(), A.g.data(), A.u.data(), dg.data(), du.data(), N * F);
      // forward: g = f W1^T, u = f W3^T  so: df = dg W1 + du W3
      LinearBackward(dg.data(), A.f.data(), W.w1.data(), df.data(), dW.w1.data(), N, C, F,
                     GradWrite::kOverwrite);
      LinearBackward(du.data(), A.f.data(), W.w3.data(), df.data(), dW.w3.data(), N, C, F,
                     GradWrite::kAccumulate);
      // forward: f = RMSNorm(x1)  so: dx1 += RMSNorm backward of df
      RmsNormBackward(df.data(), A.x1.data(), W.ffn_norm.data(), dx.data(), dW.ffn_norm.data(), N,
                      C, eps, GradWrite::kAccumulate);
      // forward: x1 = x + att Wo^T  so: dx stays, datt = dx1 Wo, dWo += dx1^T att
      LinearBackward(dx.data(), A.att.data(), W.wo.data(), datt.data(), dW.wo.data(), N,
                     int64_t{H} * D, C, GradWrite::kOverwrite);
      const AttentionPlan plan = LayerPlan(arch_, W, l, T);
      const AttentionDims dims{T, T, 0, H, G, D};
      std::vector<double> dba(static_cast<size_t>(H), 0.0), dbb(dba.size(), 0.0);
      const bool learned_bias = !dW.bias_a.empty() && HasPosition(l);
      for (int64_t b = 0; b < B; ++b) {
        Attn::Backward(
            A.q.data() + b * T * H * D, A.k.data() + b * T * G * D, A.v.data() + b * T * G * D,
            A.att.data() + b * T * H * D, datt.data() + b * T * H * D, A.lse.data() + b * T * H,
            dq.data() + b * T * H * D, dk.data() + b * T * G * D, dv.data() + b * T * G * D, dims,
            scale, plan, learned_bias ? dba.data() : nullptr, learned_bias ? dbb.data() : nullptr);
      }
      if (learned_bias) {
        for (int h = 0; h < H; ++h) {
          dW.bias_a[static_cast<size_t>(h)] += static_cast<Real>(dba[static_cast<size_t>(h)]);
          dW.bias_b[static_cast<size_t>(h)] += static_cast<Real>(dbb[static_cast<size_t>(h)]);
        }
      }
      QkBackward(acts, l, W, dW, dq, dk);
      // forward: q_h = RMSNorm(q_pre_h; q_norm) per head (and k)  so: dq_pre by its backward
      if (m.qk_norm) {
        RmsNormBackward(dq.data(), A.q_pre.data(), W.q_norm.data(), dq.data(), dW.q_norm.data(),
                        N * H, D, eps, GradWrite::kOverwrite);
        RmsNormBackward(dk.data(), A.k_pre.data(), W.k_norm.data(), dk.data(), dW.k_norm.data(),
                        N * G, D, eps, GradWrite::kOverwrite);
      }
      // forward: q = a Wq^T + bq (and k, v)  so: dbq = the column sums of dq (dW's overwrite)
      if (!dW.bq.empty()) {
        ColumnSums(dq.data(), N, int64_t{H} * D, dW.bq.data());
        ColumnSums(dk.data(), N, int64_t{G} * D, dW.bk.data());
        ColumnSums(dv.data(), N, int64_t{G} * D, dW.bv.data());
      }
      // forward: q = a Wq^T, k = a Wk^T, v = a Wv^T  so: da = dq Wq + dk Wk + dv Wv
      LinearBackward(dq.data(), A.a.data(), W.wq.data(), da.data(), dW.wq.data(), N, C,
                     int64_t{H} * D, GradWrite::kOverwrite);
      LinearBackward(dk.data(), A.a.data(), W.wk.data(), da.data(), dW.wk.data(), N, C,
                     int64_t{G} * D, GradWrite::kAccumulate);
      LinearBackward(dv.data(), A.a.data(), W.wv.data(), da.data(), dW.wv.data(), N, C,
                     int64_t{G} * D, GradWrite::kAccumulate);
      // forward: a = RMSNorm(x)  so: dx += RMSNorm backward of da
      RmsNormBackward(da.data(), A.x.data(), W.attn_norm.data(), dx.data(), dW.attn_norm.data(), N,
                      C, eps, GradWrite::kAccumulate);
    }
    if (arch_.model.Gau()) {  // forward: x = RMSNorm(E[inputs]), gain 1  so: dx <- RMSNorm backward
      std::vector<Real> dgain(static_cast<size_t>(C), Real(0));  // not a parameter: discarded
      RmsNormBackward(dx.data(), acts.x_embed.data(), ones_.data(), dx.data(), dgain.data(), N, C,
                      eps, GradWrite::kOverwrite);
    }
    // forward: x = E[inputs]  so: dE[inputs] += dx
    EmbeddingBackward(acts.inputs.data(), dx.data(), grads.token_embedding.data(), N, C, V);
  }

 private:
  // cos/sin of position t * theta_u (t < T) at one RoPE base and interpolation.
  struct AngleTable {
    double base = 0.0, pi = 1.0;
    std::vector<Real> cos, sin;
    RopeAngles<Real> angles;
  };
  struct RopeTables {
    int64_t T = -1;
    std::vector<AngleTable> tables;    // one per RoPE base and interpolation of the layers
    std::vector<size_t> layer_table;   // layer l rotates by tables[layer_table[l]]
    std::vector<Real> xpos_q, xpos_k;  // XPOS: (T, pairs) factors on q and k
    const RopeAngles<Real>& Angles(int l) const {
      return tables[layer_table[static_cast<size_t>(l)]].angles;
    }
  };
  // RoPE's angles of layer l in row b: the perturbed positions' (acts) or the true ones'.
  RopeAngles<Real> RowAngles(const TrainActs<Real>& acts, const RopeTables& rope, int l,
                             int64_t b) const {
    if (acts.rope_cos.empty()) return rope.Angles(l);
    const int pairs = rope.Angles(l).pairs;
    return RopeAngles<Real>{acts.rope_cos.data() + b * acts.T * pairs,
                            acts.rope_sin.data() + b * acts.T * pairs, acts.T, pairs};
  }
  // cos/sin of the perturbed positions (SetPositions) into acts, or nothing.
  void PerturbedTables(int64_t B, int64_t T, TrainActs<Real>& acts) const {
    acts.rope_cos.clear();
    acts.rope_sin.clear();
    if (positions_.empty()) return;
    STRETCH_CHECK(static_cast<int64_t>(positions_.size()) == B * T, "positions {} for B={} T={}",
                  positions_.size(), B, T);
    const AttentionLayout& layout = arch_.model.attention;
    const bool own_rope = std::any_of(layout.layers.begin(), layout.layers.end(),
                                      [](const LayerLayout& s) { return !s.ModelRope(); });
    if (arch_.model.Gau() || layout.position != LayerPosition::kRope || Xpos() ||
        !layout.rope_map.empty() || own_rope) {
      throw Error(
          "position perturbation needs RoPE without a relative map or per-layer RoPE in LLaMA "
          "blocks (position spec rope, block spec llama)");
    }
    const int D = arch_.model.head_dim(), pairs = D / 2;
    const std::vector<double> thetas = TrainedThetas();
    acts.rope_cos.resize(static_cast<size_t>(B * T * pairs));
    acts.rope_sin.resize(acts.rope_cos.size());
    for (int64_t r = 0; r < B * T; ++r) {
      const double pos = static_cast<double>(positions_[static_cast<size_t>(r)]);
      for (int u = 0; u < pairs; ++u) {
        const double theta = thetas[static_cast<size_t>(u)];
        acts.rope_cos[static_cast<size_t>(r * pairs + u)] =
            static_cast<Real>(std::cos(pos * theta));
        acts.rope_sin[static_cast<size_t>(r * pairs + u)] =
            static_cast<Real>(std::sin(pos * theta));
      }
    }
  }
  // RoPE applied to q and k before the kernel (layers with a relative map rotate inside it).
  // theta_u of every pair (rope.h: TrainedRopeThetas) at a base and interpolation (the model's,
  // or a layer's own).
  std::vector<double> TrainedThetas(double base, double pi) const {
    return TrainedRopeThetas(base, arch_.model.head_dim(), RotatedPairs(arch_), pi);
  }
  std::vector<double> TrainedThetas() const {
    return TrainedThetas(static_cast<double>(arch_.model.rope_base),
                         static_cast<double>(arch_.model.rope_interpolation));
  }
  // Layer l of a LLaMA model on x (N, C), in place: the block of src/model/block.h, keeping what
  // the backward needs in acts.layers[l]. Its attention: q, k rotated, normalized (QueryNorm /
  // KeyNorm), then XPOS's decay: the order of the inference kernel (src/kernels/attention.cc,
  // PackQueries / PackKeyTile), so that with the norms the decay still multiplies unit vectors and
  // the score is a function of i - j; then SSMax's scale and the kernel, one sequence at a time.
  void LlamaLayerForward(TrainActs<Real>& acts, int l, const LayerWeightsOf<Real>& W,
                         const RopeTables& rope, Real* x) const {
    const ModelConfig& m = arch_.model;
    const int64_t B = acts.B, T = acts.T, N = B * T;
    const int C = m.dim, F = m.hidden_dim, H = m.n_heads, G = m.n_kv_heads, D = m.head_dim();
    LayerActs<Real>& A = acts.layers[static_cast<size_t>(l)];
    auto sized = [](std::vector<Real>& v, int64_t n) {
      v.resize(static_cast<size_t>(n));
      return v.data();
    };
    LlamaBlockBuffers<Real> buffers{
        sized(A.x, N * C),     sized(A.a, N * C),     sized(A.q, N * H * D),
        sized(A.k, N * G * D), sized(A.v, N * G * D), sized(A.att, N * H * D),
        sized(A.x1, N * C),    sized(A.f, N * C),     sized(A.g, N * F),
        sized(A.u, N * F),     sized(A.h, N * F)};
    if (m.qk_norm) {
      buffers.q_pre = sized(A.q_pre, N * H * D);
      buffers.k_pre = sized(A.k_pre, N * G * D);
    }
    sized(A.lse, N * H);
    auto attend = [&] {
      if (UsesRope(l)) {
        for (int64_t b = 0; b < B; ++b) {
          RopeInterleavedForward(A.q.data() + b * T * H * D, T, H, int64_t{H} * D, D,
                                 RowAngles(acts, rope, l, b));
          RopeInterleavedForward(A.k.data() + b * T * G * D, T, G, int64_t{G} * D, D,
                                 RowAngles(acts, rope, l, b));
        }
      }
      if (m.attention.query_norm) {  // forward: q <- q / |q| per head
        A.q_raw = A.q;
        L2NormalizeForward(A.q_raw.data(), A.q.data(), N * H, D);
      }
      if (m.attention.key_norm) {
        A.k_raw = A.k;
        L2NormalizeForward(A.k_raw.data(), A.k.data(), N * G, D);
      }
      if (UsesRope(l) && Xpos()) {  // q, k <- XPOS decay per pair
        for (int64_t b = 0; b < B; ++b) {
          PairScaleForward(A.q.data() + b * T * H * D, T, H, int64_t{H} * D, D, D / 2,
                           rope.xpos_q.data());
          PairScaleForward(A.k.data() + b * T * G * D, T, G, int64_t{G} * D, D, D / 2,
                           rope.xpos_k.data());
        }
      }
      const AttentionPlan plan = LayerPlan(arch_, W, l, T);
      if (m.attention.ssmax) {  // forward: q[i, h] <- s_h ln(n_i) q[i, h]
        A.q_unscaled = A.q;
        const std::vector<Real> log_n = LogKeysSeen<Real>(plan, T);
        for (int64_t b = 0; b < B; ++b) {
          HeadScaleForward(A.q.data() + b * T * H * D, T, H, D, log_n.data(), W.ssmax.data());
        }
      }
      const AttentionDims dims{T, T, 0, H, G, D};
      const Real scale = static_cast<Real>(m.LogitScale());
      for (int64_t b = 0; b < B; ++b) {
        Attn::Forward(A.q.data() + b * T * H * D, A.k.data() + b * T * G * D,
                      A.v.data() + b * T * G * D, A.att.data() + b * T * H * D,
                      A.lse.data() + b * T * H, dims, scale, plan);
      }
    };
    LlamaBlockForward(W, m, x, N, buffers, attend);
  }
  // The q/k side of a LLaMA layer's backward, in the forward's reverse order: SSMax's scale,
  // XPOS's decay, QueryNorm / KeyNorm, RoPE. dq, dk: the gradients at the kernel's inputs, turned
  // into those at the projections' outputs in place.
  void QkBackward(const TrainActs<Real>& acts, int l, const LayerWeightsOf<Real>& W,
                  LayerWeightsOf<Real>& dW, std::vector<Real>& dq, std::vector<Real>& dk) const {
    const ModelConfig& m = arch_.model;
    const int64_t B = acts.B, T = acts.T, N = B * T;
    const int H = m.n_heads, G = m.n_kv_heads, D = m.head_dim();
    const LayerActs<Real>& A = acts.layers[static_cast<size_t>(l)];
    const RopeTables& rope = Rope(T);
    // forward: q <- s_h ln(n_i) q  so: dq scaled, ds_h added
    if (arch_.model.attention.ssmax) {
      const std::vector<Real> log_n = LogKeysSeen<Real>(LayerPlan(arch_, W, l, T), T);
      for (int64_t b = 0; b < B; ++b) {
        HeadScaleBackward(dq.data() + b * T * H * D, A.q_unscaled.data() + b * T * H * D, T, H, D,
                          log_n.data(), W.ssmax.data(), dW.ssmax.data());
      }
    }
    if (UsesRope(l) && Xpos()) {  // forward: q, k scaled  so: dq, dk too
      for (int64_t b = 0; b < B; ++b) {
        PairScaleBackward(dq.data() + b * T * H * D, T, H, int64_t{H} * D, D, D / 2,
                          rope.xpos_q.data());
        PairScaleBackward(dk.data() + b * T * G * D, T, G, int64_t{G} * D, D, D / 2,
                          rope.xpos_k.data());
      }
    }
    if (arch_.model.attention.query_norm) {
      L2NormalizeBackward(dq.data(), A.q_raw.data(), dq.data(), N * H, D);
    }
    if (arch_.model.attention.key_norm) {
      L2NormalizeBackward(dk.data(), A.k_raw.data(), dk.data(), N * G, D);
    }
    if (UsesRope(l)) {  // forward: q, k rotated in place  so: rotate dq, dk back
      for (int64_t b = 0; b < B; ++b) {
        RopeInterleavedBackward(dq.data() + b * T * H * D, T, H, int64_t{H} * D, D,
                                RowAngles(acts, rope, l, b));
        RopeInterleavedBackward(dk.data() + b * T * G * D, T, G, int64_t{G} * D, D,
                                RowAngles(acts, rope, l, b));
      }
    }
  }
  // XPOS's decay on the RoPE layers (AttentionLayout::xpos_scale_base).
  bool Xpos() const { return arch_.model.attention.xpos_scale_base > 0.0; }
  // Whether layer l uses the model's position scheme (false: NoPE for this layer).
  bool HasPosition(int l) const {
    return arch_.model.attention.Layer(l).position != LayerPosition::kNone;
  }
  bool UsesRope(int l) const {
    return arch_.model.attention.Layer(l).position == LayerPosition::kRope && !Mapped(l);
  }
  bool Mapped(int l) const {
    const LayerAttention lay = arch_.model.attention.Layer(l);
    return !arch_.model.attention.rope_map.empty() && lay.position == LayerPosition::kRope &&
           !lay.Local();
  }
  // cos/sin of position t * theta_u for t < T, in double rounded to Real (D = the q/k width:
  // the head dim, or the GAU's key width).
  const RopeTables& Rope(int64_t T) const {
    if (rope_.T != T) {
      const int D = arch_.model.head_dim(), pairs = D / 2;
      rope_.T = T;
      // One table per base and interpolation (layers with a RoPE of their own, LayerLayout).
      rope_.tables.clear();
      rope_.layer_table.clear();
      for (int l = 0; l < arch_.model.n_layers; ++l) {
        const double base = arch_.model.LayerRopeBase(l), pi = arch_.model.LayerRopePi(l);
        size_t k = 0;
        while (k < rope_.tables.size() &&
               !(rope_.tables[k].base == base && rope_.tables[k].pi == pi)) {
          ++k;
        }
        if (k == rope_.tables.size()) rope_.tables.push_back(AngleTable{base, pi, {}, {}, {}});
        rope_.layer_table.push_back(k);
      }
      for (AngleTable& a : rope_.tables) {
        a.cos.resize(static_cast<size_t>(T * pairs));
        a.sin.resize(a.cos.size());
        // p-RoPE: pairs from RotatedPairs() on have theta 0 (cos 1, sin 0: not rotated). PI:
        // position t rotated as t / F (every theta divided by F; Chen et al. 2023).
        const std::vector<double> thetas = TrainedThetas(a.base, a.pi);
        for (int64_t t = 0; t < T; ++t) {
          for (int u = 0; u < pairs; ++u) {
            const double theta = thetas[static_cast<size_t>(u)];
            a.cos[static_cast<size_t>(t * pairs + u)] = static_cast<Real>(std::cos(t * theta));
            a.sin[static_cast<size_t>(t * pairs + u)] = static_cast<Real>(std::sin(t * theta));
          }
        }
        a.angles = RopeAngles<Real>{a.cos.data(), a.sin.data(), T, pairs};
      }
      // XPOS: pair u of a score decays as zeta_u^((i - j) / gamma), zeta_u = (2u + 0.4 D) /
      // (1.4 D) (torchscale xpos_relative_position.py); q_i gets zeta^((i - c) / gamma) and k_j
      // zeta^((c - j) / gamma) with c = T - 1, whose product is the decay; k's factor is <= 1
      // and q's at most zeta_0^(-(T - 1) / gamma) (3.5 at T = gamma), so nothing overflows at
      // training lengths (the inference kernel references positions per tile, plan.h).
      rope_.xpos_q.assign(static_cast<size_t>(T * pairs), Real(1));
      rope_.xpos_k.assign(rope_.xpos_q.size(), Real(1));
      if (Xpos()) {
        const std::vector<double> zetas = XposZetas(D);
        for (int64_t t = 0; t < T; ++t) {
          for (int u = 0; u < pairs; ++u) {
            const double zeta = zetas[static_cast<size_t>(u)];
            const double rel =
                static_cast<double>(t - (T - 1)) / arch_.model.attention.xpos_scale_base;
            rope_.xpos_q[static_cast<size_t>(t * pairs + u)] =
                static_cast<Real>(std::pow(zeta, rel));
            rope_.xpos_k[static_cast<size_t>(t * pairs + u)] =
                static_cast<Real>(std::pow(zeta, -rel));
          }
        }
      }
    }
    return rope_;
  }

  TrainArch arch_;
  std::vector<Real> ones_;  // (C): the gain of the GAU's norms, which have none to learn
  mutable RopeTables rope_;
  mutable std::vector<int64_t> positions_;  // SetPositions
};

}  // namespace stretch
