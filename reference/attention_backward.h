// Naive attention forward and backward for training, templated on the number type (tests run it
// in double, check it against central differences of its own forward, and hold the tiled kernel's
// backward to it). Full (T, S) matrices per head, on purpose.
//
//   s_ij = scale * c(p_i) * (R(r_ij) q_i) . k_j + bias(h, p_i, j)   for visible (p_i, j), else -inf
//   P = softmax_j(s),  out_i = sum_j P_ij v_j
// and for a loss with d loss / d out = dout:
//   dP_ij = dout_i . v_j;  dS_ij = P_ij (dP_ij - sum_l P_il dP_il);  dv_j = sum_i P_ij dout_i;
//   dq_i = scale c(p_i) sum_j dS_ij R(r_ij)^T k_j;  dk_j = scale sum_i c(p_i) dS_ij R(r_ij) q_i.
// R(r) is RoPE's rotation of each interleaved pair t by r * theta_t (rope_thetas; R = 1 without
// them) in its relative form, <R(a) q, R(b) k> = <R(a - b) q, k>: q and k are the RAW vectors
// and r_ij = rel_pos(p_i, j) is the relative position a method's map gives the pair (ReRoPE,
// Self-Extend, DCA, ...: reference/position.h's MethodRelPos), so the gradients are those of a
// model trained with that map, with respect to its unrotated q and k. R(r)^T = R(-r).
// Letters: T queries (positions p_i = q_pos0 + i), S keys, H heads, G kv heads, D head dim;
// q (T, H, D), k and v (S, G, D), out and dout (T, H, D), all dense.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "reference/attention.h"
#include "src/core/check.h"

namespace stretch::ref {

template <typename Real>
struct TrainAttentionOptions {
  Real scale = Real(1);
  std::function<bool(int64_t, int64_t)> visible;    // empty: causal
  std::function<Real(int64_t)> row_factor;          // c(p_i); empty: 1
  std::function<Real(int, int64_t, int64_t)> bias;  // bias(h, p_i, j); empty: 0
  // theta_t per interleaved pair t < D/2; empty: no rotation (q, k used as given).
  std::vector<Real> rope_thetas;
  // r_ij = rel_pos(p_i, j), used only with rope_thetas; empty: p_i - j. Real-valued: Leaky
  // ReRoPE's far positions are fractional.
  std::function<Real(int64_t, int64_t)> rel_pos;
};

// The relative position a pair is rotated by (options' rel_pos, else p_i - j).
template <typename Real>
Real TrainRelPos(const TrainAttentionOptions<Real>& opt, int64_t pi, int64_t j) {
  return opt.rel_pos ? opt.rel_pos(pi, j) : static_cast<Real>(pi - j);
}

template <typename Real>
struct TrainAttention {
  std::vector<Real> out;  // (T, H, D)
  std::vector<Real> lse;  // (T, H)
  std::vector<Real> p;    // (H, T, S) probabilities
};

template <typename Real>
struct TrainAttentionGrads {
  std::vector<Real> dq, dk, dv;
  std::vector<Real> ds;  // (H, T, S): d loss / d s_ij, for the gradients of bias parameters
};

template <typename Real>
TrainAttention<Real> TrainAttentionForward(const std::vector<Real>& q, const std::vector<Real>& k,
                                           const std::vector<Real>& v, const AttentionShape& sh,
                                           const TrainAttentionOptions<Real>& opt) {
  const int64_t T = sh.n_q, S = sh.n_kv;
  const int H = sh.n_heads, G = sh.n_kv_heads, D = sh.head_dim, r = H / G;
  STRETCH_CHECK(H % G == 0);
  TrainAttention<Real> f;
  f.out.assign(static_cast<size_t>(T * H * D), Real(0));
  f.lse.assign(static_cast<size_t>(T * H), -std::numeric_limits<Real>::infinity());
  f.p.assign(static_cast<size_t>(H * T * S), Real(0));
  STRETCH_CHECK(2 * static_cast<int64_t>(opt.rope_thetas.size()) <= D);
  std::vector<Real> s(static_cast<size_t>(S));
  std::vector<Real> qr(static_cast<size_t>(D));
  for (int h = 0; h < H; ++h) {
    const int g = h / r;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t pi = sh.q_pos0 + i;
      Real mx = -std::numeric_limits<Real>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        const bool vis = opt.visible ? opt.visible(pi, j) : j <= pi;
        if (!vis) {
          s[j] = -std::numeric_limits<Real>::infinity();
          continue;
        }
        // (R(r_ij) q_i) . k_j
        std::copy(&q[(i * H + h) * D], &q[(i * H + h) * D] + D, qr.begin());
        if (!opt.rope_thetas.empty()) {
          RotateInterleaved(qr.data(), TrainRelPos(opt, pi, j), opt.rope_thetas);
        }
        Real dot = Real(0);
        for (int d = 0; d < D; ++d) dot += qr[d] * k[(j * G + g) * D + d];
        const Real c = opt.row_factor ? opt.row_factor(pi) : Real(1);
        s[j] = opt.scale * c * dot + (opt.bias ? opt.bias(h, pi, j) : Real(0));
        mx = std::max(mx, s[j]);
      }
      if (mx == -std::numeric_limits<Real>::infinity()) continue;
      Real sum = Real(0);
      for (int64_t j = 0; j < S; ++j) sum += std::exp(s[j] - mx);
      f.lse[i * H + h] = mx + std::log(sum);
      for (int64_t j = 0; j < S; ++j) {
        const Real p = std::exp(s[j] - mx) / sum;
        f.p[(h * T + i) * S + j] = p;
        for (int d = 0; d < D; ++d) f.out[(i * H + h) * D + d] += p * v[(j * G + g) * D + d];
      }
    }
  }
  return f;
}

template <typename Real>
TrainAttentionGrads<Real> TrainAttentionBackward(const std::vector<Real>& q,
                                                 const std::vector<Real>& k,
                                                 const std::vector<Real>& v,
                                                 const std::vector<Real>& dout,
                                                 const AttentionShape& sh,
                                                 const TrainAttentionOptions<Real>& opt) {
  const int64_t T = sh.n_q, S = sh.n_kv;
  const int H = sh.n_heads, G = sh.n_kv_heads, D = sh.head_dim, r = H / G;
  const TrainAttention<Real> f = TrainAttentionForward(q, k, v, sh, opt);
  TrainAttentionGrads<Real> gr;
  gr.dq.assign(q.size(), Real(0));
  gr.dk.assign(k.size(), Real(0));
  gr.dv.assign(v.size(), Real(0));
  gr.ds.assign(static_cast<size_t>(H * T * S), Real(0));
  std::vector<Real> dp(static_cast<size_t>(S));
  std::vector<Real> qr(static_cast<size_t>(D)), kr(static_cast<size_t>(D));
  for (int h = 0; h < H; ++h) {
    const int g = h / r;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t pi = sh.q_pos0 + i;
      const Real c = opt.row_factor ? opt.row_factor(pi) : Real(1);
      const Real* P = &f.p[(h * T + i) * S];
      Real pdp = Real(0);  // sum_l P_il dP_il
      for (int64_t j = 0; j < S; ++j) {
        Real x = Real(0);
        for (int d = 0; d < D; ++d) x += dout[(i * H + h) * D + d] * v[(j * G + g) * D + d];
        dp[j] = x;
        pdp += P[j] * x;
      }
      for (int64_t j = 0; j < S; ++j) {
        if (P[j] == Real(0)) continue;
        const Real ds = P[j] * (dp[j] - pdp);
        gr.ds[(h * T + i) * S + j] = ds;
        // qr = R(r) q_i, kr = R(r)^T k_j = R(-r) k_j
        std::copy(&q[(i * H + h) * D], &q[(i * H + h) * D] + D, qr.begin());
        std::copy(&k[(j * G + g) * D], &k[(j * G + g) * D] + D, kr.begin());
        if (!opt.rope_thetas.empty()) {
          const Real rel = TrainRelPos(opt, pi, j);
          RotateInterleaved(qr.data(), rel, opt.rope_thetas);
          RotateInterleaved(kr.data(), -rel, opt.rope_thetas);
        }
        for (int d = 0; d < D; ++d) {
          gr.dq[(i * H + h) * D + d] += opt.scale * c * ds * kr[d];
          gr.dk[(j * G + g) * D + d] += opt.scale * c * ds * qr[d];
          gr.dv[(j * G + g) * D + d] += P[j] * dout[(i * H + h) * D + d];
        }
      }
    }
  }
  return gr;
}

}  // namespace stretch::ref
