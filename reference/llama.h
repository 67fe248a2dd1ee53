// Naive LLaMA forward in any number type (tests run it in double): every position, every head,
// the full attention matrix, no caching, no BLAS, no tiling. It is the yardstick that the engine's
// float32 forward (src/model/transformer) is tested against. Mirrors llama2.c's run.c forward,
// written here from the math (RMSNorm, RoPE on interleaved pairs with theta_t = base^(-2t/D),
// causal grouped-query attention with 1/sqrt(D), SwiGLU, residuals, final norm, classifier).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "src/model/config.h"

namespace stretch::ref {

template <typename T>
std::vector<T> Matvec(const std::vector<float>& w, const std::vector<T>& x, int out, int in) {
  std::vector<T> y(static_cast<size_t>(out), T(0));
  for (int o = 0; o < out; ++o) {
    T acc = 0;
    for (int i = 0; i < in; ++i) acc += static_cast<T>(w[static_cast<size_t>(o) * in + i]) * x[static_cast<size_t>(i)];
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

// Logits (T, V) for `tokens` at positions 0 .. T-1.
template <typename T>
std::vector<T> LlamaForwardRef(const Model& model, const std::vector<int>& tokens) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  const int C = c.dim, F = c.hidden_dim, H = c.n_heads, G = c.n_kv_heads, D = c.head_dim();
  const int KV = c.kv_dim(), V = c.vocab_size;
  const size_t n = tokens.size();
  std::vector<std::vector<T>> x(n, std::vector<T>(static_cast<size_t>(C)));
  for (size_t t = 0; t < n; ++t) {
    for (int i = 0; i < C; ++i) {
      x[t][static_cast<size_t>(i)] = w.token_embedding[static_cast<size_t>(tokens[t]) * C + i];
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    std::vector<std::vector<T>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const std::vector<T> h = RmsNormRef(x[t], lw.attn_norm, c.norm_eps);
      q[t] = Matvec(lw.wq, h, C, C);
      k[t] = Matvec(lw.wk, h, KV, C);
      v[t] = Matvec(lw.wv, h, KV, C);
      for (int hh = 0; hh < H; ++hh) RotateRef(q[t].data() + hh * D, D, static_cast<double>(t), c.rope_base);
      for (int g = 0; g < G; ++g) RotateRef(k[t].data() + g * D, D, static_cast<double>(t), c.rope_base);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<T> att(static_cast<size_t>(C), T(0));
      for (int hh = 0; hh < H; ++hh) {
        const int g = hh / (H / G);
        std::vector<T> s(t + 1);
        T max = -INFINITY;
        for (size_t j = 0; j <= t; ++j) {
          T dot = 0;
          for (int d = 0; d < D; ++d) dot += q[t][static_cast<size_t>(hh * D + d)] * k[j][static_cast<size_t>(g * D + d)];
          s[j] = dot / std::sqrt(static_cast<T>(D));
          max = std::max(max, s[j]);
        }
        T sum = 0;
        for (T& e : s) sum += (e = std::exp(e - max));
        for (size_t j = 0; j <= t; ++j) {
          for (int d = 0; d < D; ++d) {
            att[static_cast<size_t>(hh * D + d)] += s[j] / sum * v[j][static_cast<size_t>(g * D + d)];
          }
        }
      }
      const std::vector<T> o = Matvec(lw.wo, att, C, C);
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
    }
  }
  std::vector<T> logits(n * static_cast<size_t>(V));
  const float* cls = w.ClassifierData();
  for (size_t t = 0; t < n; ++t) {
    const std::vector<T> h = RmsNormRef(x[t], w.final_norm, c.norm_eps);
    for (int o = 0; o < V; ++o) {
      T acc = 0;
      for (int i = 0; i < C; ++i) acc += static_cast<T>(cls[static_cast<size_t>(o) * C + i]) * h[static_cast<size_t>(i)];
      logits[t * static_cast<size_t>(V) + static_cast<size_t>(o)] = acc;
    }
  }
  return logits;
}

}  // namespace stretch::ref
