// A model with a trained attention layout (per-layer positions, windows, chunks, RoPE bases and
// interpolations, biases, norms, logit variants) in any number type, full matrices, every pair
// of positions: the yardstick for src/model/transformer's per-layer plans. tests/train checks it
// against the trainer's own forward; tests/model and tests/eval use it for layouts set on random
// and real models.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "reference/llama.h"
#include "reference/position.h"
#include "src/model/config.h"
#include "src/position/method.h"
#include "src/position/plan.h"
#include "src/position/rope.h"

namespace stretch::ref {

// The naive forward of a model with a trained attention layout (src/model/config.h's
// AttentionLayout; a plain LLaMA model too) under a position method, in any number type, written
// from the rule at the top of src/model/transformer.h and from the methods' definitions in
// reference/position.h (not from the engine's per-layer plans):
//   a layer trained with a window w: keys i - w < j <= i; with chunks of c: keys j <= i with
//     floor(j / c) = floor(i / c); either with RoPE at its true positions at the layer's base
//     and interpolation (theta_t = base^(-2t/D) / pi; when the layer has RoPE), factor 1;
//   a full-attention RoPE layer: the method's mask, relative position, frequencies and factor,
//     the method resolved for the layer's base and interpolation;
//   a full-attention layer without RoPE: the method's mask, no rotation, factor max(1, ln(i+1) /
//     ln L) with +logn;
// and every layer with its bias (ALiBi, KERPLE, Sandwich) and QueryNorm / KeyNorm, scaled by
// c.LogitScale(); the later variants from their definitions (src/position/plan.h): p-RoPE (pairs
// from round(P D/2) on keep theta 0), XPOS (pair t of a score times zeta_t^(r / gamma), r the
// relative position the pair is rotated by), SSMax (times s_h ln(i + 1)) and the per-position
// lambda (times ln((i + 1) / 2)), and Llama 4's temperature tuning on the layers marked with it
// (times 1 + S ln(1 + floor((i + 1) / F)), meta-llama/llama-models llama4/model.py). The
// families' block choices too, from transformers' modeling files: q/k/v biases (Qwen 2), per-head
// q/k RMSNorm and heads not dim / heads wide (Qwen 3, Gemma 3), Gemma's embedding scale, norms
// on the attention's and feed-forward's outputs and GeGLU (modeling_gemma3.py), and Gemma 2's
// soft-capping of the attention's and the classifier's logits (modeling_gemma2.py).
template <typename T>
std::vector<T> LayoutForwardRef(const ModelConfig& c, const ModelWeights& p,
                                const std::string& spec, const std::vector<int>& tokens) {
  // The GAU (src/model/config.h's ModelBlock::kGau): one head whose queries and keys have width
  // S = head_dim() and whose values have width E; LLaMA: H heads over G kv heads of width D.
  const bool gau = c.Gau();
  const int C = c.dim, F = c.hidden_dim, D = c.head_dim();
  const int H = gau ? 1 : c.n_heads, G = gau ? 1 : c.n_kv_heads, VD = gau ? F : D;
  const int KV = c.kv_dim(), V = c.vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const RopeGeometry geo{c.seq_len, D, static_cast<double>(c.rope_base),
                         static_cast<double>(c.rope_interpolation)};
  const AttentionPlan mp = MakeAttentionPlan(ParseMethod(spec), geo, n);
  const std::vector<double> alibi = AlibiSlopes(H);
  const std::vector<float> ones(static_cast<size_t>(C), 1.0f);  // the GAU's norms' gain
  auto silu = [](std::vector<T> v) {
    for (T& e : v) e = e / (T(1) + std::exp(-e));
    return v;
  };
  std::vector<std::vector<T>> x(static_cast<size_t>(n), std::vector<T>(static_cast<size_t>(C)));
  for (int64_t t = 0; t < n; ++t) {
    for (int i = 0; i < C; ++i) x[t][i] = p.token_embedding[static_cast<size_t>(tokens[t]) * C + i];
    if (gau) x[t] = ref::RmsNormRef(x[t], ones, c.norm_eps);  // Embedding-Norm
    // Gemma: times sqrt(hidden_size) (Gemma3TextScaledWordEmbedding), as the config holds it.
    for (int i = 0; c.embed_scale != 0.0f && i < C; ++i) x[t][i] *= static_cast<T>(c.embed_scale);
  }
  auto normalize = [D](T* v) {
    T ss = 0;
    for (int d = 0; d < D; ++d) ss += v[d] * v[d];
    if (ss > 0) {
      const T inv = T(1) / std::sqrt(ss);
      for (int d = 0; d < D; ++d) v[d] *= inv;
    }
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = p.layers[static_cast<size_t>(l)];
    const LayerLayout lay =
        c.attention.layers.empty() ? LayerLayout{} : c.attention.layers[static_cast<size_t>(l)];
    const bool rope = c.attention.position == LayerPosition::kRope && lay.position;
    // The layer's RoPE: its own base and interpolation, else the model's.
    const double base = lay.rope_base != 0.0 ? lay.rope_base : static_cast<double>(c.rope_base);
    const double pi = lay.rope_pi != 0.0 ? lay.rope_pi : static_cast<double>(c.rope_interpolation);
    const int rotated = static_cast<int>(std::lround(c.attention.rope_fraction * (D / 2)));
    const bool windowed = lay.window > 0 || lay.chunk > 0;
    std::function<bool(int64_t, int64_t)> visible;
    std::function<double(int64_t, int64_t)> rel;
    std::function<std::vector<double>(int64_t)> thetas;
    std::function<double(int64_t)> factor;
    std::optional<AttentionPlan> lp;  // the method at the layer's RoPE (full RoPE layers)
    if (windowed) {
      visible = [&](int64_t i, int64_t j) {
        return j <= i && (lay.window > 0 ? i - j < lay.window : i / lay.chunk == j / lay.chunk);
      };
      rel = [](int64_t i, int64_t j) { return static_cast<double>(i - j); };
      thetas = [&](int64_t) {
        std::vector<double> th = RopeThetas(base, D);
        for (double& t : th) t /= pi;
        return th;
      };
      factor = [](int64_t) { return 1.0; };
    } else {
      visible = [&](int64_t i, int64_t j) { return ref::MethodVisible(mp.method, i, j); };
      if (rope) {
        lp = MakeAttentionPlan(ParseMethod(spec), {c.seq_len, D, base, pi}, n);
        rel = [&](int64_t i, int64_t j) { return ref::MethodRelPos(lp->method, i, j); };
        thetas = [&](int64_t i) { return ref::MethodThetas(*lp, i); };
        factor = [&](int64_t i) { return ref::MethodLogitFactor(*lp, i); };
      } else {
        factor = [&](int64_t i) {
          return mp.method.logn ? std::max(1.0, std::log(static_cast<double>(i + 1)) /
                                                    std::log(static_cast<double>(c.seq_len)))
                                : 1.0;
        };
      }
    }
    auto bias = [&](int h, int64_t d) -> double {
      if (!lay.position) return 0.0;
      switch (c.attention.position) {
        case LayerPosition::kAlibi: return -alibi[h] * static_cast<double>(d);
        case LayerPosition::kKerpleLog:
          return -double(w.bias_a[h]) *
                 std::log(1.0 + double(w.bias_b[h]) * static_cast<double>(d));
        case LayerPosition::kKerplePower:
          return -double(w.bias_a[h]) * std::pow(static_cast<double>(d), double(w.bias_b[h]));
        case LayerPosition::kSandwich: {  // lambda sum_{t < dim/2} cos(d 10000^(-2t/dim))
          double sum = 0;
          for (int t = 0; t < c.attention.sandwich_dim / 2; ++t) {
            sum += std::cos(static_cast<double>(d) *
                            std::pow(10000.0, -2.0 * t / c.attention.sandwich_dim));
          }
          return c.attention.sandwich_lambda * sum;
        }
        default: return 0.0;
      }
    };
    std::vector<std::vector<T>> q(static_cast<size_t>(n)), k(q.size()), vv(q.size()), u(q.size());
    for (int64_t t = 0; t < n; ++t) {
      if (gau) {  // U, V = silu(x Wu), silu(x Wv); Q, K = gamma Z + beta, Z = silu(x Wz)
        u[t] = silu(ref::Matvec(w.gau_u, x[t], F, C));
        vv[t] = silu(ref::Matvec(w.gau_v, x[t], F, C));
        const std::vector<T> z = silu(ref::Matvec(w.gau_z, x[t], D, C));
        q[t].resize(static_cast<size_t>(D));
        k[t].resize(static_cast<size_t>(D));
        for (int d = 0; d < D; ++d) {
          q[t][d] = T(w.gamma_q[d]) * z[d] + T(w.beta_q[d]);
          k[t][d] = T(w.gamma_k[d]) * z[d] + T(w.beta_k[d]);
        }
      } else {
        const std::vector<T> h = ref::RmsNormRef(x[t], w.attn_norm, c.norm_eps);
        q[t] = ref::Matvec(w.wq, h, H * D, C);
        k[t] = ref::Matvec(w.wk, h, KV, C);
        vv[t] = ref::Matvec(w.wv, h, KV, C);
        if (c.qkv_bias) {  // Qwen 2 (modeling_qwen2.py: q/k/v_proj with bias=True)
          for (int i = 0; i < H * D; ++i) q[t][i] += T(w.bq[i]);
          for (int i = 0; i < KV; ++i) {
            k[t][i] += T(w.bk[i]);
            vv[t][i] += T(w.bv[i]);
          }
        }
        if (c.qk_norm) {  // Qwen 3, Gemma 3: RMSNorm of each head's q and k, before RoPE
          const auto per_head = [&](std::vector<T>& y, int heads, const std::vector<float>& g) {
            for (int hh = 0; hh < heads; ++hh) {
              const std::vector<T> normed = ref::RmsNormRef(
                  std::vector<T>(y.begin() + hh * D, y.begin() + (hh + 1) * D), g, c.norm_eps);
              std::copy(normed.begin(), normed.end(), y.begin() + hh * D);
            }
          };
          per_head(q[t], H, w.q_norm);
          per_head(k[t], G, w.k_norm);
        }
      }
      // QueryNorm / KeyNorm before the rotation, which keeps the norm.
      for (int hh = 0; c.attention.query_norm && hh < H; ++hh) normalize(q[t].data() + hh * D);
      for (int g = 0; c.attention.key_norm && g < G; ++g) normalize(k[t].data() + g * D);
    }
    const T scale = static_cast<T>(c.LogitScale());
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> th = rope ? thetas(i) : std::vector<double>();
      for (size_t t = static_cast<size_t>(rotated); t < th.size(); ++t) th[t] = 0.0;
      std::vector<T> att(static_cast<size_t>(H * VD), T(0));
      for (int hh = 0; hh < H; ++hh) {
        const int g = hh / (H / G);
        double row = factor(i);
        // The scales by the number of keys the query sees, counted under the layer's mask.
        double seen = 0;
        for (int64_t j = 0; j <= i && (c.attention.ssmax || c.attention.position_log_scale ||
                                       c.attention.log_length_scale);
             ++j) {
          seen += visible(i, j) ? 1.0 : 0.0;
        }
        if (c.attention.ssmax) row *= double(w.ssmax[hh]) * std::log(seen);
        if (c.attention.position_log_scale) row *= std::log(seen / 2.0);
        if (c.attention.log_length_scale) {  // trained log-n, at every position
          row *= std::log(seen) / std::log(static_cast<double>(c.seq_len));
        }
        if (lay.temperature) {  // Llama 4: 1 + S ln(1 + floor((i + 1) / F))
          row *= 1.0 + c.attention.temperature_scale *
                           std::log(1.0 + std::floor(static_cast<double>(i + 1) /
                                                     c.attention.temperature_floor));
        }
        std::vector<T> s(static_cast<size_t>(i + 1), -INFINITY);
        T mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          if (!visible(i, j)) continue;
          std::vector<T> qr(q[i].begin() + hh * D, q[i].begin() + (hh + 1) * D);
          if (rope) {
            const double r = rel(i, j);
            for (int t = 0; t < D / 2; ++t) {
              const T cs = static_cast<T>(std::cos(r * th[t])),
                      sn = static_cast<T>(std::sin(r * th[t]));
              const T a = qr[2 * t], b = qr[2 * t + 1];
              qr[2 * t] = a * cs - b * sn;
              qr[2 * t + 1] = a * sn + b * cs;
              if (c.attention.xpos_scale_base > 0.0) {  // zeta_t^(r / gamma), zeta_t =
                const double zeta = (2.0 * t + 0.4 * D) / (1.4 * D);  // (2t + 0.4 D) / (1.4 D)
                const T f = static_cast<T>(std::pow(zeta, r / c.attention.xpos_scale_base));
                qr[2 * t] *= f;
                qr[2 * t + 1] *= f;
              }
            }
          }
          T dot = 0;
          for (int d = 0; d < D; ++d) dot += qr[d] * k[j][g * D + d];
          s[j] = scale * static_cast<T>(row) * dot + static_cast<T>(bias(hh, i - j));
          if (c.attn_softcap > 0.0) {  // Gemma 2 (modeling_gemma2.py): cap tanh(s / cap)
            const T cap = static_cast<T>(c.attn_softcap);
            s[j] = cap * std::tanh(s[j] / cap);
          }
          mx = std::max(mx, s[j]);
        }
        T sum = 0;
        for (T& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j) {
          for (int d = 0; d < VD; ++d) att[hh * VD + d] += s[j] / sum * vv[j][g * VD + d];
        }
      }
      if (gau) {  // x <- RMSNorm(x + (U * (A V)) Wo), no gain
        for (int f = 0; f < F; ++f) att[f] *= u[i][f];
        const std::vector<T> o = ref::Matvec(w.wo, att, C, F);
        for (int d = 0; d < C; ++d) x[i][d] += o[d];
        x[i] = ref::RmsNormRef(x[i], ones, c.norm_eps);
        continue;
      }
      // Gemma (modeling_gemma3.py, Gemma3DecoderLayer): post_attention_layernorm on the
      // attention's output and post_feedforward_layernorm on the feed-forward's, each before its
      // residual add.
      std::vector<T> o = ref::Matvec(w.wo, att, C, H * D);
      if (c.post_norms) o = ref::RmsNormRef(o, w.attn_post_norm, c.norm_eps);
      for (int d = 0; d < C; ++d) x[i][d] += o[d];
      const std::vector<T> h = ref::RmsNormRef(x[i], w.ffn_norm, c.norm_eps);
      std::vector<T> a = ref::Matvec(w.w1, h, F, C);
      const std::vector<T> b = ref::Matvec(w.w3, h, F, C);
      for (int f = 0; f < F; ++f) {
        if (c.activation == FfnActivation::kGeluTanh) {  // Gemma's gelu_pytorch_tanh
          const T g = a[f];
          a[f] = T(0.5) * g *
                 (T(1) + std::tanh(std::sqrt(T(2) / T(std::numbers::pi)) *
                                   (g + T(0.044715) * g * g * g))) *
                 b[f];
        } else {
          a[f] = a[f] / (T(1) + std::exp(-a[f])) * b[f];
        }
      }
      std::vector<T> down = ref::Matvec(w.w2, a, C, F);
      if (c.post_norms) down = ref::RmsNormRef(down, w.ffn_post_norm, c.norm_eps);
      for (int d = 0; d < C; ++d) x[i][d] += down[d];
    }
  }
  const std::vector<float>& cls = p.classifier.empty() ? p.token_embedding : p.classifier;
  std::vector<T> logits;
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<T> h = ref::RmsNormRef(x[t], p.final_norm, c.norm_eps);
    std::vector<T> row = ref::Matvec(cls, h, V, C);
    if (c.final_softcap > 0.0) {  // Gemma 2's final_logit_softcapping
      const T cap = static_cast<T>(c.final_softcap);
      for (T& e : row) e = cap * std::tanh(e / cap);
    }
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

}  // namespace stretch::ref
