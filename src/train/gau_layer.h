// The Gated Attention Unit (GAU) layer for training: its forward (the block of
// src/model/block.h, which describes the GAU, with what the backward needs kept) and its
// hand-written backward, each backward step next to the forward line it differentiates.
// Initialization: src/train/trainer.h (InitParams).
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
#include "src/model/block.h"
#include "src/model/config.h"
#include "src/position/plan.h"

namespace stretch {

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

// The temporaries of GauLayerForward and GauLayerBackward, which the caller keeps from call to
// call (the layers of a model share one) so that a step of the same shape allocates nothing (see
// TrainActs::Scratch). Every element is written before it is read in each call.
template <typename Real>
struct GauScratch {
  std::vector<Real> g, o;                  // forward: U * AV (N, E) and O (N, C)
  std::vector<Real> qr, kr, dqr, dkr;      // one sequence's R copies of Q, K (T, E)
  std::vector<Real> dy, dg, du, datt, dv;  // backward: (N, C), then (N, E)
  std::vector<Real> dq, dk, dz;            // (N, S)
};

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

// One GAU layer, post-norm: out = RMSNorm(x + GAU(x)) with no gain, over B sequences of T rows:
// the block of src/model/block.h (GauBlockForward), its attention as training runs it. `plan` is
// the layer's attention plan for R = E / S kernel heads (mask; ALiBi/KERPLE biases with the single
// head's values repeated R times); `rope` the angles of positions 0..T-1 (with S / 2 pairs) when
// cfg.rope. out may be x.
template <typename Real, class Attn>
void GauLayerForward(const LayerWeightsOf<Real>& W, const GauLayerConfig& cfg,
                     const AttentionPlan& plan, const RopeAngles<Real>* rope,
                     const Real* x,  // (N, C)
                     int64_t B, int64_t T, GauActs<Real>& A, GauScratch<Real>& scratch,
                     Real* out) {  // (N, C)
  const int64_t N = B * T;
  const int C = cfg.C, E = cfg.E, S = cfg.S, R = cfg.Replicas();
  STRETCH_CHECK(!cfg.rope || rope != nullptr, "RoPE without angles");
  auto sized = [](std::vector<Real>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    return v.data();
  };
  for (std::vector<Real>* v : {&A.x, &A.y}) sized(*v, N * C);
  for (std::vector<Real>* v : {&A.hu, &A.hv, &A.u, &A.v, &A.att}) sized(*v, N * E);
  for (std::vector<Real>* v : {&A.hz, &A.z, &A.q, &A.k}) sized(*v, N * S);
  sized(A.lse, N * R);
  Real* g = sized(scratch.g, N * E);
  Real* o = sized(scratch.o, N * C);
  Real* qr = sized(scratch.qr, T * E);
  Real* kr = sized(scratch.kr, T * E);
  const std::vector<Real> ones(static_cast<size_t>(C), Real(1));
  const GauBlockBuffers<Real> buffers{
      A.x.data(), A.hu.data(), A.hv.data(),  A.hz.data(), A.u.data(), A.v.data(), A.z.data(),
      A.q.data(), A.k.data(),  A.att.data(), A.y.data(),  g,          o,          ones.data()};
  // Q, K: rotated, then normalized (as the inference kernel does); the kernel sees R copies of
  // them and V as R heads of width S.
  auto attend = [&] {
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
    const AttentionDims dims{T, T, 0, R, R, S};
    for (int64_t b = 0; b < B; ++b) {
      gau_internal::Replicate(A.q.data() + b * T * S, qr, T, R, S);
      gau_internal::Replicate(A.k.data() + b * T * S, kr, T, R, S);
      Attn::Forward(qr, kr, A.v.data() + b * T * E, A.att.data() + b * T * E,
                    A.lse.data() + b * T * R, dims, static_cast<Real>(cfg.scale), plan);
    }
  };
  if (out != x) std::copy(x, x + N * C, out);
  GauBlockForward(W, cfg, out, N, buffers, attend);
}

// Gradients of GauLayerForward: dx = d loss / d x (overwritten; dx may be dout), parameter
// gradients added to dW, and with KERPLE (dbias_a, dbias_b non-null) the single head's d loss /
// d a and d b added to dbias_a[0], dbias_b[0]. `A` from the forward of the same weights.
template <typename Real, class Attn>
void GauLayerBackward(const LayerWeightsOf<Real>& W, const GauLayerConfig& cfg,
                      const AttentionPlan& plan, const RopeAngles<Real>* rope,
                      const GauActs<Real>& A, GauScratch<Real>& scratch, int64_t B, int64_t T,
                      const Real* dout,  // (N, C)
                      Real* dx,          // (N, C)
                      LayerWeightsOf<Real>& dW, double* dbias_a, double* dbias_b) {
  const int64_t N = B * T;
  const int C = cfg.C, E = cfg.E, S = cfg.S, R = cfg.Replicas();
  const Real eps = static_cast<Real>(cfg.norm_eps);
  // forward: out = RMSNorm(y), gain 1  so: dy = RMSNorm backward of dout (the gain's gradient is
  // not a parameter's: it goes to a scratch)
  auto sized = [](std::vector<Real>& v, int64_t n) -> std::vector<Real>& {
    v.resize(static_cast<size_t>(n));
    return v;
  };
  const std::vector<Real> ones(static_cast<size_t>(C), Real(1));
  std::vector<Real> dgain(static_cast<size_t>(C), Real(0));
  std::vector<Real>& dy = sized(scratch.dy, N * C);
  RmsNormBackward(dout, A.y.data(), ones.data(), dy.data(), dgain.data(), N, C, eps,
                  GradWrite::kOverwrite);
  // forward: y = x + O  so: dx = dy + (the branch's terms, added below), dO = dy
  std::copy(dy.begin(), dy.end(), dx);
  // forward: O = g W_o^T, g = U * AV  so: dg = dO W_o, dW_o += dO^T g
  std::vector<Real>& g = sized(scratch.g, N * E);
  std::vector<Real>& dg = sized(scratch.dg, N * E);
  for (size_t i = 0; i < g.size(); ++i) g[i] = A.u[i] * A.att[i];
  LinearBackward(dy.data(), g.data(), W.wo.data(), dg.data(), dW.wo.data(), N, E, C,
                 GradWrite::kOverwrite);
  // forward: g = U * AV  so: dU = dg * AV, dAV = dg * U
  std::vector<Real>& du = sized(scratch.du, N * E);
  std::vector<Real>& datt = sized(scratch.datt, N * E);
  for (size_t i = 0; i < g.size(); ++i) {
    du[i] = dg[i] * A.att[i];
    datt[i] = dg[i] * A.u[i];
  }
  // forward: AV = Attention(R copies of Q, K; V as R heads)  so: dV from the kernel, and
  // dQ = sum over the copies of their dq (likewise dK): each copy is a use of Q.
  std::vector<Real>& dq = sized(scratch.dq, N * S);
  std::vector<Real>& dk = sized(scratch.dk, N * S);
  std::vector<Real>& dv = sized(scratch.dv, N * E);
  std::vector<Real>& qr = sized(scratch.qr, T * E);
  std::vector<Real>& kr = sized(scratch.kr, T * E);
  std::vector<Real>& dqr = sized(scratch.dqr, T * E);
  std::vector<Real>& dkr = sized(scratch.dkr, T * E);
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
  std::vector<Real>& dz = sized(scratch.dz, N * S);
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
