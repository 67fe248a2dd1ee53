// The Gated Attention Unit (GAU) layer for training: forward with saved activations and its
// hand-written backward, each backward step next to the forward line it differentiates.
//
// The GAU (Hua, Dai, Liu, Le 2022, "Transformer Quality in Linear Time", arXiv 2202.10447,
// section 2) merges attention and the gated FFN into one single-head unit:
//   U = phi(X W_u), V = phi(X W_v)     (N, E), E the expansion width (e = 2C in the paper)
//   Z = phi(X W_z)                      (N, S), S the small shared key width (s = 128)
//   Q = gamma_q * Z + beta_q,  K = gamma_k * Z + beta_k    (per-dim scale and offset of Z)
//   O = (U * (A V)) W_o                 (N, C), A the attention matrix, * elementwise
// with phi = SiLU (Swish) and RoPE on Q and K. The paper's A is relu^2(Q K^T / n + rel. bias)
// and its code normalizes the unit's input (pre-norm) (as Su Jianlin reads the paper,
// kexue.fm/archives/8934); the variant this project follows is Su Jianlin's GAU-alpha
// (kexue.fm/archives/9052, code github.com/ZhuiyiTechnology/GAU-alpha models.py on top of
// bert4keras' GatedAttentionUnit), which differs in three facts:
//   - A = softmax(Q K^T / sqrt(S)) (the "softmax_plus" normalization: softmax of the logits times
//     log n / log 512, n the sequence length and 512 the training length; see the note on log-n
//     in TrainTransformer);
//   - post-norm: x <- Norm(x + GAU(x)), Norm an RMS normalization with neither scale nor offset
//     (bert4keras LayerNormalization with zero_mean, scale and offset all off; its epsilon is
//     1e-12 in GAU-alpha's config, ours the model's norm_eps, 1e-5 by default, which changes
//     nothing for rows of unit RMS);
//   - no biases in the dense layers; every layer of the stack is one GAU (no separate FFN).
// GAU-alpha also drops beta (its ScaleOffset has offset = use_bias = False); we keep the paper's
// beta_q, beta_k (initialized to 0). Initialization: src/train/trainer.h (InitParams). Note that
// beta_k alone has no effect without RoPE or KeyNorm: it adds q_i . beta_k to every logit of row
// i, which the softmax ignores (its gradient is then exactly 0). Other position schemes (NoPE,
// ALiBi, KERPLE) and QueryNorm/KeyNorm apply to Q and K exactly as the LLaMA block applies them to
// its heads, with the single head's parameters (ALiBi: Press et al.'s slope for one head, 2^-8).
//
// Attention through the one tiled kernel (the template's Attn, see TrainTransformer): the kernel
// takes one head dim D for q, k and v, while the GAU's keys have width S and its values width E.
// So V (N, E) is read as R = E / S heads of width S (its memory layout already is (N, R, S)),
// and the kernel runs with H = G = R heads whose queries and keys are R copies of the same Q and
// K: every copy computes the same softmax A (same q, k, bias), so copy r's output is exactly
// A V[:, r*S:(r+1)*S] and the R outputs side by side are A V. R kv heads (not one, GQA style):
// one kv head carries one value vector, and the R slices of V differ. In the backward, dq and dk
// of the R copies are summed (Q feeds every copy). Requires E to be a multiple of S. The cost:
// the q.k products are computed R times (R T^2 S = T^2 E flops instead of T^2 S), as many as the
// p.v products need anyway.
//
// Shapes, fixed letters: B sequences of T positions, N = B*T rows, C width, E expansion width,
// S key width, R = E / S kernel heads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "src/core/check.h"
#include "src/core/threads.h"
#include "src/kernels/attention.h"
#include "src/kernels/ops.h"
#include "src/model/config.h"
#include "src/position/plan.h"

namespace stretch {

struct GauLayerConfig {
  int C = 0;           // width of the residual stream
  int E = 0;           // expansion width e (U, V)
  int S = 0;           // key width s (Z, Q, K; RoPE's rotary dim); divides E
  double scale = 0.0;  // multiplies q.k before the softmax: 1/sqrt(S) by default
  bool rope = false;   // RoPE on Q and K (angles passed to the calls)
  bool query_norm = false, key_norm = false;  // L2-normalized Q / K after RoPE
  double norm_eps = 1e-5;                     // the post-norm's epsilon
  int Replicas() const { return E / S; }
};

// The GAU's layer settings for layer l of a GAU model (sizes, scale, RoPE or not, QueryNorm /
// KeyNorm).
inline GauLayerConfig GauConfigOf(const ModelConfig& m, int l) {
  GauLayerConfig c;
  c.C = m.dim;
  c.E = m.hidden_dim;
  c.S = m.key_dim;
  c.scale = m.LogitScale();
  c.rope = m.attention.Layer(l).position == LayerPosition::kRope;
  c.query_norm = m.attention.query_norm;
  c.key_norm = m.attention.key_norm;
  c.norm_eps = m.norm_eps;
  return c;
}

// What the forward keeps for the backward.
template <typename Real>
struct GauActs {
  std::vector<Real> x;             // (N, C) the layer's input
  std::vector<Real> hu, hv, hz;    // (N, E), (N, E), (N, S) before SiLU
  std::vector<Real> u, v, z;       // after SiLU
  std::vector<Real> q, k;          // (N, S) as the attention saw them (after RoPE and norms)
  std::vector<Real> q_raw, k_raw;  // (N, S) before QueryNorm / KeyNorm (empty without)
  std::vector<Real> att;           // (N, E) = A V
  std::vector<Real> lse;           // (N, R) log-sum-exp of each kernel head (all R equal)
  std::vector<Real> y;             // (N, C) x + O, the post-norm's input
};

// SiLU (Swish with beta = 1), phi of the paper: y = h s, s = 1 / (1 + exp(-h)), as SwiGLU's gate.
template <typename Real>
void SiluForward(const Real* h, Real* y, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    for (int64_t i = i_begin; i < i_end; ++i) y[i] = h[i] / (Real(1) + std::exp(-h[i]));
  });
}
// forward: y = h s,  s' = s (1 - s)
// so: dh = dy * (s + h s (1 - s)) = dy * s (1 + h (1 - s))   (overwrites dh; dh may be dy)
template <typename Real>
void SiluBackward(const Real* dy, const Real* h, Real* dh, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    for (int64_t i = i_begin; i < i_end; ++i) {
      const Real s = Real(1) / (Real(1) + std::exp(-h[i]));  // exp overflows to inf for h < -88
                                                             // (float): s = 0, dh = 0, as it should
      dh[i] = dy[i] * (s * (Real(1) + h[i] * (Real(1) - s)));
    }
  });
}

namespace gau_internal {

// dst (T, R, S) <- R copies of each row of src (T, S).
template <typename Real>
void Replicate(const Real* src, Real* dst, int64_t T, int R, int S) {
  for (int64_t t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      std::copy(src + t * S, src + (t + 1) * S, dst + (t * R + r) * S);
    }
  }
}
// dst (T, S) <- the sum of the R copies of each row of src (T, R, S), in replica order.
template <typename Real>
void SumReplicas(const Real* src, Real* dst, int64_t T, int R, int S) {
  for (int64_t t = 0; t < T; ++t) {
    for (int d = 0; d < S; ++d) {
      Real acc = src[(t * R) * S + d];
      for (int r = 1; r < R; ++r) acc += src[(t * R + r) * S + d];
      dst[t * S + d] = acc;
    }
  }
}

}  // namespace gau_internal

// One GAU layer, post-norm: out = RMSNorm(x + GAU(x)) with no gain, over B sequences of T rows.
// `plan` is the layer's attention plan for R = E / S kernel heads (mask; ALiBi/KERPLE biases with
// the single head's values repeated R times); `rope` the angles of positions 0..T-1 (with S / 2
// pairs) when cfg.rope. out may be x.
template <typename Real, class Attn>
void GauLayerForward(const LayerWeightsOf<Real>& W, const GauLayerConfig& cfg,
                     const AttentionPlan& plan, const RopeAngles<Real>* rope,
                     const Real* x,  // (N, C)
                     int64_t B, int64_t T, GauActs<Real>& A,
                     Real* out) {  // (N, C)
  const int64_t N = B * T;
  const int C = cfg.C, E = cfg.E, S = cfg.S, R = cfg.Replicas();
  STRETCH_CHECK(S >= 1 && E % S == 0, "E={} S={}", E, S);
  STRETCH_CHECK(!cfg.rope || rope != nullptr, "RoPE without angles");
  A.x.assign(x, x + N * C);
  auto sized = [](std::vector<Real>& v, int64_t n) { v.resize(static_cast<size_t>(n)); };
  for (std::vector<Real>* v : {&A.hu, &A.hv, &A.u, &A.v}) sized(*v, N * E);
  for (std::vector<Real>* v : {&A.hz, &A.z, &A.q, &A.k}) sized(*v, N * S);
  // U = phi(X W_u), V = phi(X W_v), Z = phi(X W_z)
  LinearForward(A.x.data(), W.gau_u.data(), A.hu.data(), N, C, E);
  LinearForward(A.x.data(), W.gau_v.data(), A.hv.data(), N, C, E);
  LinearForward(A.x.data(), W.gau_z.data(), A.hz.data(), N, C, S);
  SiluForward(A.hu.data(), A.u.data(), N * E);
  SiluForward(A.hv.data(), A.v.data(), N * E);
  SiluForward(A.hz.data(), A.z.data(), N * S);
  // Q = gamma_q * Z + beta_q,  K = gamma_k * Z + beta_k
  for (int64_t n = 0; n < N; ++n) {
    for (int d = 0; d < S; ++d) {
      const Real z = A.z[static_cast<size_t>(n * S + d)];
      A.q[static_cast<size_t>(n * S + d)] =
          W.gamma_q[static_cast<size_t>(d)] * z + W.beta_q[static_cast<size_t>(d)];
      A.k[static_cast<size_t>(n * S + d)] =
          W.gamma_k[static_cast<size_t>(d)] * z + W.beta_k[static_cast<size_t>(d)];
    }
  }
  if (cfg.rope) {  // one head of width S per row
    for (int64_t b = 0; b < B; ++b) {
      RopeInterleavedForward(A.q.data() + b * T * S, T, 1, S, S, *rope);
      RopeInterleavedForward(A.k.data() + b * T * S, T, 1, S, S, *rope);
    }
  }
  if (cfg.query_norm) {  // forward: q <- q / |q|
    A.q_raw = A.q;
    L2NormalizeForward(A.q_raw.data(), A.q.data(), N, S);
  }
  if (cfg.key_norm) {
    A.k_raw = A.k;
    L2NormalizeForward(A.k_raw.data(), A.k.data(), N, S);
  }
  // A V through the kernel: R copies of Q and K, V as R heads of width S.
  sized(A.att, N * E);
  sized(A.lse, N * R);
  std::vector<Real> qr(static_cast<size_t>(T * E)), kr(qr.size());
  const AttentionDims dims{T, T, 0, R, R, S};
  for (int64_t b = 0; b < B; ++b) {
    gau_internal::Replicate(A.q.data() + b * T * S, qr.data(), T, R, S);
    gau_internal::Replicate(A.k.data() + b * T * S, kr.data(), T, R, S);
    Attn::Forward(qr.data(), kr.data(), A.v.data() + b * T * E, A.att.data() + b * T * E,
                  A.lse.data() + b * T * R, dims, static_cast<Real>(cfg.scale), plan);
  }
  // O = (U * (A V)) W_o;  y = x + O
  std::vector<Real> g(static_cast<size_t>(N * E)), o(static_cast<size_t>(N * C));
  for (size_t i = 0; i < g.size(); ++i) g[i] = A.u[i] * A.att[i];
  LinearForward(g.data(), W.wo.data(), o.data(), N, E, C);
  sized(A.y, N * C);
  for (size_t i = 0; i < A.y.size(); ++i) A.y[i] = A.x[i] + o[i];
  // out = RMSNorm(y) with a gain of 1 (no learned scale)
  const std::vector<Real> ones(static_cast<size_t>(C), Real(1));
  RmsNormForward(A.y.data(), ones.data(), out, N, C, static_cast<Real>(cfg.norm_eps));
}

// Gradients of GauLayerForward: dx = d loss / d x (overwritten; dx may be dout), parameter
// gradients added to dW, and with KERPLE (dbias_a, dbias_b non-null) the single head's d loss /
// d a and d b added to dbias_a[0], dbias_b[0]. `A` from the forward of the same weights.
template <typename Real, class Attn>
void GauLayerBackward(const LayerWeightsOf<Real>& W, const GauLayerConfig& cfg,
                      const AttentionPlan& plan, const RopeAngles<Real>* rope,
                      const GauActs<Real>& A, int64_t B, int64_t T,
                      const Real* dout,  // (N, C)
                      Real* dx,          // (N, C)
                      LayerWeightsOf<Real>& dW, double* dbias_a, double* dbias_b) {
  const int64_t N = B * T;
  const int C = cfg.C, E = cfg.E, S = cfg.S, R = cfg.Replicas();
  const Real eps = static_cast<Real>(cfg.norm_eps);
  // forward: out = RMSNorm(y), gain 1  so: dy = RMSNorm backward of dout (the gain's gradient is
  // not a parameter's: it goes to a scratch)
  const std::vector<Real> ones(static_cast<size_t>(C), Real(1));
  std::vector<Real> dgain(static_cast<size_t>(C), Real(0)), dy(static_cast<size_t>(N * C));
  RmsNormBackward(dout, A.y.data(), ones.data(), dy.data(), dgain.data(), N, C, eps,
                  GradWrite::kOverwrite);
  // forward: y = x + O  so: dx = dy + (the branch's terms, added below), dO = dy
  std::copy(dy.begin(), dy.end(), dx);
  // forward: O = g W_o^T, g = U * AV  so: dg = dO W_o, dW_o += dO^T g
  std::vector<Real> g(static_cast<size_t>(N * E)), dg(g.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = A.u[i] * A.att[i];
  LinearBackward(dy.data(), g.data(), W.wo.data(), dg.data(), dW.wo.data(), N, E, C,
                 GradWrite::kOverwrite);
  // forward: g = U * AV  so: dU = dg * AV, dAV = dg * U
  std::vector<Real> du(g.size()), datt(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    du[i] = dg[i] * A.att[i];
    datt[i] = dg[i] * A.u[i];
  }
  // forward: AV = Attention(R copies of Q, K; V as R heads)  so: dV from the kernel, and
  // dQ = sum over the copies of their dq (likewise dK): each copy is a use of Q.
  std::vector<Real> dq(static_cast<size_t>(N * S)), dk(dq.size()), dv(g.size());
  std::vector<Real> qr(static_cast<size_t>(T * E)), kr(qr.size()), dqr(qr.size()), dkr(qr.size());
  const AttentionDims dims{T, T, 0, R, R, S};
  std::vector<double> dba(static_cast<size_t>(R), 0.0), dbb(dba.size(), 0.0);
  const bool learned_bias = dbias_a != nullptr;
  for (int64_t b = 0; b < B; ++b) {
    gau_internal::Replicate(A.q.data() + b * T * S, qr.data(), T, R, S);
    gau_internal::Replicate(A.k.data() + b * T * S, kr.data(), T, R, S);
    Attn::Backward(qr.data(), kr.data(), A.v.data() + b * T * E, A.att.data() + b * T * E,
                   datt.data() + b * T * E, A.lse.data() + b * T * R, dqr.data(), dkr.data(),
                   dv.data() + b * T * E, dims, static_cast<Real>(cfg.scale), plan,
                   learned_bias ? dba.data() : nullptr, learned_bias ? dbb.data() : nullptr);
    gau_internal::SumReplicas(dqr.data(), dq.data() + b * T * S, T, R, S);
    gau_internal::SumReplicas(dkr.data(), dk.data() + b * T * S, T, R, S);
  }
  if (learned_bias) {  // forward: bias of copy r = the head's (a, b)  so: da = sum_r da_r
    for (int r = 0; r < R; ++r) {
      dbias_a[0] += dba[static_cast<size_t>(r)];
      dbias_b[0] += dbb[static_cast<size_t>(r)];
    }
  }
  if (cfg.query_norm) L2NormalizeBackward(dq.data(), A.q_raw.data(), dq.data(), N, S);
  if (cfg.key_norm) L2NormalizeBackward(dk.data(), A.k_raw.data(), dk.data(), N, S);
  if (cfg.rope) {  // forward: Q, K rotated in place  so: rotate dQ, dK back
    for (int64_t b = 0; b < B; ++b) {
      RopeInterleavedBackward(dq.data() + b * T * S, T, 1, S, S, *rope);
      RopeInterleavedBackward(dk.data() + b * T * S, T, 1, S, S, *rope);
    }
  }
  // forward: Q = gamma_q * Z + beta_q, K = gamma_k * Z + beta_k
  // so: dgamma_q += sum_n dQ Z, dbeta_q += sum_n dQ (likewise for K), dZ = dQ gamma_q + dK gamma_k
  std::vector<Real> dz(dq.size());
  for (int d = 0; d < S; ++d) {
    double gq = 0, bq = 0, gk = 0, bk = 0;  // sums over N rows in double, in row order
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = static_cast<size_t>(n * S + d);
      gq += static_cast<double>(dq[i]) * A.z[i];
      bq += dq[i];
      gk += static_cast<double>(dk[i]) * A.z[i];
      bk += dk[i];
      dz[i] = dq[i] * W.gamma_q[static_cast<size_t>(d)] + dk[i] * W.gamma_k[static_cast<size_t>(d)];
    }
    dW.gamma_q[static_cast<size_t>(d)] += static_cast<Real>(gq);
    dW.beta_q[static_cast<size_t>(d)] += static_cast<Real>(bq);
    dW.gamma_k[static_cast<size_t>(d)] += static_cast<Real>(gk);
    dW.beta_k[static_cast<size_t>(d)] += static_cast<Real>(bk);
  }
  // forward: U = phi(hu), V = phi(hv), Z = phi(hz)  so: dh = SiLU backward (in place)
  SiluBackward(du.data(), A.hu.data(), du.data(), N * E);
  SiluBackward(dv.data(), A.hv.data(), dv.data(), N * E);
  SiluBackward(dz.data(), A.hz.data(), dz.data(), N * S);
  // forward: hu = x W_u^T, hv = x W_v^T, hz = x W_z^T  so: dx += dhu W_u + dhv W_v + dhz W_z
  LinearBackward(du.data(), A.x.data(), W.gau_u.data(), dx, dW.gau_u.data(), N, C, E,
                 GradWrite::kAccumulate);
  LinearBackward(dv.data(), A.x.data(), W.gau_v.data(), dx, dW.gau_v.data(), N, C, E,
                 GradWrite::kAccumulate);
  LinearBackward(dz.data(), A.x.data(), W.gau_z.data(), dx, dW.gau_z.data(), N, C, S,
                 GradWrite::kAccumulate);
}

}  // namespace stretch
