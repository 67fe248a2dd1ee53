// Naive LLaMA forward in any number type (tests run it in double): every position, every head,
// the full attention matrix, no caching, no BLAS, no tiling. It is the yardstick that the engine's
// float32 forward (src/model/transformer) is tested against. Mirrors llama2.c's run.c forward,
// written here from the math (RMSNorm, RoPE on interleaved pairs with theta_t = base^(-2t/D),
// causal grouped-query attention with 1/sqrt(D), SwiGLU, residuals, final norm, classifier), and
// the q/k/v biases of Qwen 2 and the per-head q/k RMSNorm and explicit head width of Qwen 3
// where the model has them (ModelConfig::qkv_bias, qk_norm, explicit_head_dim).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "src/core/threads.h"
#include "src/model/config.h"

namespace stretch::ref {

// A position method pair by pair (see reference/position.h for the methods' definitions). Every
// member may be left empty: plain causal RoPE with the model's base.
struct PositionRef {
  std::function<bool(int64_t, int64_t)> visible;          // (i, j); empty: j <= i
  std::function<double(int64_t, int64_t)> rel_pos;        // (i, j); empty: i - j
  std::function<std::vector<double>(int64_t)> thetas_at;  // query i's theta_t; empty: base^(-2t/D)
  std::function<double(int64_t)> logit_factor;            // query i's factor; empty: 1
};

template <typename T>
std::vector<T> Matvec(const std::vector<float>& w, const std::vector<T>& x, int out, int in) {
  std::vector<T> y(static_cast<size_t>(out), T(0));
  for (int o = 0; o < out; ++o) {
    T acc = 0;
    for (int i = 0; i < in; ++i)
      acc += static_cast<T>(w[static_cast<size_t>(o) * in + i]) * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = acc;
  }
  return y;
}

template <typename T>
std::vector<T> RmsNormRef(const std::vector<T>& x, const std::vector<float>& w, double eps) {
  T ss = 0;
  for (T v : x) ss += v * v;
  const T inv = T(1) / std::sqrt(ss / static_cast<T>(x.size()) + static_cast<T>(eps));
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * static_cast<T>(w[i]);
  return y;
}

// Rotates the interleaved pairs of one head vector by pos * theta_t.
template <typename T>
void RotateRef(T* v, int D, double pos, double base) {
  for (int t = 0; t < D / 2; ++t) {
    const double theta = std::pow(base, -2.0 * t / D);
    const T c = static_cast<T>(std::cos(pos * theta)), s = static_cast<T>(std::sin(pos * theta));
    const T x0 = v[2 * t], x1 = v[2 * t + 1];
    v[2 * t] = x0 * c - x1 * s;
    v[2 * t + 1] = x0 * s + x1 * c;
  }
}

// Logits (T, V) for `tokens` at positions 0 .. T-1. RoPE in relative form: q and k stay
// unrotated and the score of (i, j) is <R(rel_pos(i, j) theta(i)) q_i, k_j> / sqrt(D) *
// logit_factor(i), which for rel_pos = i - j equals rotating q at i and k at j.
// With `layers` one PositionRef per layer (layer l's method; a model whose layers run different
// methods, AttentionPlan::layer_methods); the overload below gives every layer the same one.
template <typename T>
std::vector<T> LlamaForwardRefLayers(const Model& model, const std::vector<int>& tokens,
                                     const std::vector<PositionRef>& layers) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  const int C = c.dim, F = c.hidden_dim, H = c.n_heads, G = c.n_kv_heads, D = c.head_dim();
  const int KV = c.kv_dim(), V = c.vocab_size, HD = H * D;
  const size_t n = tokens.size();
  std::vector<std::vector<T>> x(n, std::vector<T>(static_cast<size_t>(C)));
  for (size_t t = 0; t < n; ++t) {
    for (int i = 0; i < C; ++i) {
      x[t][static_cast<size_t>(i)] = w.token_embedding[static_cast<size_t>(tokens[t]) * C + i];
    }
  }
  if (layers.size() != static_cast<size_t>(c.n_layers)) {
    throw std::invalid_argument("LlamaForwardRefLayers: one PositionRef per layer");
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const PositionRef& pos = layers[static_cast<size_t>(l)];
    std::vector<std::vector<T>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const std::vector<T> h = RmsNormRef(x[t], lw.attn_norm, c.norm_eps);
      q[t] = Matvec(lw.wq, h, HD, C);
      k[t] = Matvec(lw.wk, h, KV, C);
      v[t] = Matvec(lw.wv, h, KV, C);
      if (c.qkv_bias) {  // Qwen 2 (HF modeling_qwen2.py Qwen2Attention: q/k/v_proj bias=True)
        for (int i = 0; i < HD; ++i) q[t][static_cast<size_t>(i)] += lw.bq[static_cast<size_t>(i)];
        for (int i = 0; i < KV; ++i) {
          k[t][static_cast<size_t>(i)] += lw.bk[static_cast<size_t>(i)];
          v[t][static_cast<size_t>(i)] += lw.bv[static_cast<size_t>(i)];
        }
      }
      if (c.qk_norm) {  // Qwen 3 (HF modeling_qwen3.py Qwen3Attention: q_norm, k_norm per head)
        auto per_head = [&](std::vector<T>& y, int heads, const std::vector<float>& gain) {
          for (int hh = 0; hh < heads; ++hh) {
            const auto first = y.begin() + hh * D;
            const std::vector<T> normed =
                RmsNormRef(std::vector<T>(first, first + D), gain, c.norm_eps);
            std::copy(normed.begin(), normed.end(), first);
          }
        };
        per_head(q[t], H, lw.q_norm);
        per_head(k[t], G, lw.k_norm);
      }
    }
    // Rows are independent given q, k, v: spread them over threads (only to keep tests short).
    ParallelForEach(static_cast<int64_t>(n), [&](int64_t row, int) {
      const size_t t = static_cast<size_t>(row);
      const int64_t i = static_cast<int64_t>(t);
      std::vector<double> thetas(static_cast<size_t>(D / 2));
      if (pos.thetas_at) {
        thetas = pos.thetas_at(i);
      } else {
        for (int p = 0; p < D / 2; ++p)
          thetas[static_cast<size_t>(p)] = std::pow(c.rope_base, -2.0 * p / D);
      }
      const T factor = pos.logit_factor ? static_cast<T>(pos.logit_factor(i)) : T(1);
      // s[hh][j] for every head; -inf where j is not visible.
      std::vector<std::vector<T>> s(static_cast<size_t>(H), std::vector<T>(t + 1, -INFINITY));
      std::vector<T> qr(static_cast<size_t>(HD)), cs(static_cast<size_t>(D / 2)), sn(cs.size());
      for (size_t j = 0; j <= t; ++j) {
        const int64_t jj = static_cast<int64_t>(j);
        if (pos.visible ? !pos.visible(i, jj) : jj > i) continue;
        const double rel = pos.rel_pos ? pos.rel_pos(i, jj) : static_cast<double>(i - jj);
        for (int p = 0; p < D / 2; ++p) {
          const double a = rel * thetas[static_cast<size_t>(p)];
          cs[static_cast<size_t>(p)] = static_cast<T>(std::cos(a));
          sn[static_cast<size_t>(p)] = static_cast<T>(std::sin(a));
        }
        qr = q[t];
        for (int hh = 0; hh < H; ++hh) {
          T* x = qr.data() + hh * D;
          for (int p = 0; p < D / 2; ++p) {
            const T x0 = x[2 * p], x1 = x[2 * p + 1];
            x[2 * p] = x0 * cs[static_cast<size_t>(p)] - x1 * sn[static_cast<size_t>(p)];
            x[2 * p + 1] = x0 * sn[static_cast<size_t>(p)] + x1 * cs[static_cast<size_t>(p)];
          }
          const int g = hh / (H / G);
          T dot = 0;
          for (int d = 0; d < D; ++d) dot += x[d] * k[j][static_cast<size_t>(g * D + d)];
          s[static_cast<size_t>(hh)][j] = dot / std::sqrt(static_cast<T>(D)) * factor;
        }
      }
      std::vector<T> att(static_cast<size_t>(HD), T(0));
      for (int hh = 0; hh < H; ++hh) {
        const int g = hh / (H / G);
        std::vector<T>& sh = s[static_cast<size_t>(hh)];
        T max = -INFINITY;
        for (T e : sh) max = std::max(max, e);
        T sum = 0;
        for (T& e : sh) sum += (e = std::exp(e - max));
        for (size_t j = 0; j <= t; ++j) {
          if (sh[j] == T(0)) continue;
          for (int d = 0; d < D; ++d) {
            att[static_cast<size_t>(hh * D + d)] +=
                sh[j] / sum * v[j][static_cast<size_t>(g * D + d)];
          }
        }
      }
      const std::vector<T> o = Matvec(lw.wo, att, C, HD);
      for (int i = 0; i < C; ++i) x[t][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
      const std::vector<T> h = RmsNormRef(x[t], lw.ffn_norm, c.norm_eps);
      std::vector<T> a = Matvec(lw.w1, h, F, C);
      const std::vector<T> b = Matvec(lw.w3, h, F, C);
      for (int i = 0; i < F; ++i) {
        const T g = a[static_cast<size_t>(i)];
        a[static_cast<size_t>(i)] = g / (T(1) + std::exp(-g)) * b[static_cast<size_t>(i)];
      }
      const std::vector<T> down = Matvec(lw.w2, a, C, F);
      for (int i = 0; i < C; ++i) x[t][static_cast<size_t>(i)] += down[static_cast<size_t>(i)];
    });
  }
  std::vector<T> logits(n * static_cast<size_t>(V));
  const float* cls = w.ClassifierData();
  for (size_t t = 0; t < n; ++t) {
    const std::vector<T> h = RmsNormRef(x[t], w.final_norm, c.norm_eps);
    for (int o = 0; o < V; ++o) {
      T acc = 0;
      for (int i = 0; i < C; ++i)
        acc += static_cast<T>(cls[static_cast<size_t>(o) * C + i]) * h[static_cast<size_t>(i)];
      logits[t * static_cast<size_t>(V) + static_cast<size_t>(o)] = acc;
    }
  }
  return logits;
}

template <typename T>
std::vector<T> LlamaForwardRef(const Model& model, const std::vector<int>& tokens,
                               const PositionRef& pos = {}) {
  return LlamaForwardRefLayers<T>(
      model, tokens, std::vector<PositionRef>(static_cast<size_t>(model.config.n_layers), pos));
}

}  // namespace stretch::ref
