// One forward per block, for inference and training alike. The inference engine
// (src/model/transformer.cc) runs these on a chunk of tokens with its scratch and the KV cache;
// the trainer (src/train/transformer_train.h, src/train/gau_layer.h) runs them on B sequences with
// buffers that it keeps for its backward. What differs is only how q and k get their positions
// and reach the attention kernel (rotated in the kernel against a cache, or rotated, normalized
// and scaled outside it with what the backward needs saved), so the attention step is the
// caller's `attend`; everything else in the block is here, once.
//
// Shapes, fixed letters: N rows (tokens of one chunk, or B sequences of T), C width, F FFN width
// (for the GAU: E, the expansion width), H query heads, G kv heads, D head dim (the GAU: S, the
// key width). Templated on the number type: float (inference, training), double (the trainer's
// gradient checks). The float forms compute what the inference ops compute, bit for bit (ops.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "src/core/check.h"
#include "src/core/profile.h"
#include "src/kernels/ops.h"
#include "src/model/config.h"

namespace stretch {

// y[n, j] += bias[j] for each of N rows of width W.
template <typename Real>
void AddRowBias(Real* y, const Real* bias, int64_t N, int64_t W) {
  for (int64_t n = 0; n < N; ++n) {
    Real* row = y + n * W;
    for (int64_t j = 0; j < W; ++j) row[j] += bias[j];
  }
}

// Its backward for the bias: out[j] = sum over the N rows of dy[n, j] (overwritten).
template <typename Real>
void ColumnSums(const Real* dy, int64_t N, int64_t W, Real* out) {
  std::fill(out, out + W, Real(0));
  for (int64_t n = 0; n < N; ++n) {
    const Real* row = dy + n * W;
    for (int64_t j = 0; j < W; ++j) out[j] += row[j];
  }
}

// Where a LLaMA block's forward writes. Buffers marked "or null" are what the backward needs and
// inference does not: null skips them.
template <typename Real>
struct LlamaBlockBuffers {
  Real* x_in = nullptr;  // (N, C): a copy of the block's input, or null
  Real* a = nullptr;     // (N, C): RMSNorm(x; attn_norm)
  Real* q = nullptr;     // (N, H D)
  Real* k = nullptr;     // (N, G D)
  Real* v = nullptr;     // (N, G D)
  Real* att = nullptr;   // (N, H D): what `attend` writes
  Real* x1 = nullptr;    // (N, C): the stream after the attention's residual add, or null
  Real* f = nullptr;     // (N, C): RMSNorm(x1; ffn_norm); may be `a`
  Real* g = nullptr;     // (N, F): f W1^T
  Real* u = nullptr;     // (N, F): f W3^T
  Real* h = nullptr;     // (N, F): silu(g) * u; may be g (then g is not kept)
  // (N, H D), (N, G D): q and k before the per-head norms (ModelConfig::qk_norm), or null
  Real* q_pre = nullptr;
  Real* k_pre = nullptr;
};

// The pre-norm LLaMA block on x (N, C), in place:
//   a = RMSNorm(x; attn_norm);  q, k, v = a Wq^T, a Wk^T, a Wv^T  (+ bq, bk, bv when the model
//                                                                  has them, ModelConfig::qkv_bias)
//   each head of q and k: RMSNorm(q_h; q_norm), RMSNorm(k_h; k_norm)   (ModelConfig::qk_norm)
//   att = attend(q, k, v)                 (the caller's: positions, mask, the kernel)
//   x1 = x + att Wo^T                     (Gemma, ModelConfig::post_norms:
//                                          x1 = x + RMSNorm(att Wo^T; attn_post_norm))
//   f = RMSNorm(x1; ffn_norm);  h = silu(f W1^T) * (f W3^T)    (ModelConfig::activation: or
//                                                               gelu_tanh for silu)
//   x' = x1 + h W2^T                      (post_norms: x1 + RMSNorm(h W2^T; ffn_post_norm))
// The two output projections add onto x inside their products (LinearForwardAdd); with post
// norms they write into f first (inference only: the trainer refuses post norms).
// `attend()` reads b.q, b.k, b.v and writes b.att; it may use b.a as scratch, as a is dead once
// q, k and v are made.
// With 0 <= out_rows < N, only the last out_rows rows of x go on past the attention (the output
// projection and the FFN): the inference engine's last layer, when only the last token's hidden
// state is wanted, still needs every row's keys and values but not the rest of the block. Those
// rows of x become the block's output; the others keep its input. x1, f, g, u and h then hold
// out_rows rows (from their start), att all N.
template <typename Real, class Attend>
void LlamaBlockForward(const LayerWeightsOf<Real>& W, const ModelConfig& c, Real* x, int64_t N,
                       const LlamaBlockBuffers<Real>& b, Attend&& attend, int64_t out_rows = -1) {
  const int C = c.dim, F = c.hidden_dim;
  const int64_t QW = int64_t{c.n_heads} * c.head_dim(), KV = c.kv_dim();
  const Real eps = static_cast<Real>(c.norm_eps);
  using profile::Scope;
  if (b.x_in != nullptr) std::copy(x, x + N * C, b.x_in);
  {
    Scope s(profile::kNorm);
    RmsNormForward(x, W.attn_norm.data(), b.a, N, C, eps);
  }
  {
    Scope s(profile::kInProj);
    const LinearOut<Real> outs[] = {
        {W.Matrix(W.wq), b.q, QW}, {W.Matrix(W.wk), b.k, KV}, {W.Matrix(W.wv), b.v, KV}};
    LinearForwardShared<Real>(b.a, outs, N, C);
    if (!W.bq.empty()) {
      AddRowBias(b.q, W.bq.data(), N, QW);
      AddRowBias(b.k, W.bk.data(), N, KV);
      AddRowBias(b.v, W.bv.data(), N, KV);
    }
  }
  if (c.qk_norm) {  // per head, in place: each row of D values normalized on its own
    Scope s(profile::kNorm);
    const int D = c.head_dim();
    if (b.q_pre != nullptr) std::copy(b.q, b.q + N * QW, b.q_pre);
    if (b.k_pre != nullptr) std::copy(b.k, b.k + N * KV, b.k_pre);
    RmsNormForward(b.q, W.q_norm.data(), b.q, N * c.n_heads, D, eps);
    RmsNormForward(b.k, W.k_norm.data(), b.k, N * c.n_kv_heads, D, eps);
  }
  attend();
  STRETCH_CHECK(out_rows <= N, "out_rows {} above the block's {} rows", out_rows, N);
  if (out_rows < 0) out_rows = N;
  if (out_rows == 0) return;
  x += (N - out_rows) * C;  // from here on: the last out_rows rows
  const Real* att = b.att + (N - out_rows) * QW;
  N = out_rows;
  const int64_t NC = N * C;
  if (c.post_norms) {  // Gemma: x1 = x + RMSNorm(att Wo^T; attn_post_norm), f as scratch
    STRETCH_CHECK(b.x1 == nullptr, "post norms are not trained");
    {
      Scope s(profile::kOutProj);
      LinearForward(att, W.Matrix(W.wo), b.f, N, QW, C);
    }
    Scope s(profile::kNorm);
    RmsNormForward(b.f, W.attn_post_norm.data(), b.f, N, C, eps);
    for (int64_t i = 0; i < NC; ++i) x[i] += b.f[i];
  } else {
    Scope s(profile::kOutProj);  // x += att Wo^T: the residual add inside the product
    LinearForwardAdd(att, W.Matrix(W.wo), x, N, QW, C);
  }
  if (b.x1 != nullptr) std::copy(x, x + NC, b.x1);
  {
    Scope s(profile::kNorm);
    RmsNormForward(x, W.ffn_norm.data(), b.f, N, C, eps);
  }
  {
    Scope s(profile::kFfnIn);
    const LinearOut<Real> outs[] = {{W.Matrix(W.w1), b.g, F}, {W.Matrix(W.w3), b.u, F}};
    LinearForwardShared<Real>(b.f, outs, N, C);
  }
  {
    Scope s(profile::kActivation);
    if (c.activation == FfnActivation::kGeluTanh) {
      GeluTanhForward(b.g, b.u, b.h, N * F);
    } else {
      SwiGluForward(b.g, b.u, b.h, N * F);
    }
  }
  if (c.post_norms) {  // x' = x1 + RMSNorm(h W2^T; ffn_post_norm), f (dead) as scratch
    {
      Scope s(profile::kFfnOut);
      LinearForward(b.h, W.Matrix(W.w2), b.f, N, F, C);
    }
    Scope s(profile::kNorm);
    RmsNormForward(b.f, W.ffn_post_norm.data(), b.f, N, C, eps);
    for (int64_t i = 0; i < NC; ++i) x[i] += b.f[i];
    return;
  }
  Scope s(profile::kFfnOut);  // x += h W2^T, the residual add inside the product
  LinearForwardAdd(b.h, W.Matrix(W.w2), x, N, F, C);
}

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
//     in src/train/transformer_train.h);
//   - post-norm: x <- Norm(x + GAU(x)), Norm an RMS normalization with neither scale nor offset
//     (bert4keras LayerNormalization with zero_mean, scale and offset all off; its epsilon is
//     1e-12 in GAU-alpha's config, ours the model's norm_eps, 1e-5 by default, which changes
//     nothing for rows of unit RMS);
//   - no biases in the dense layers; every layer of the stack is one GAU (no separate FFN).
// GAU-alpha also drops beta (its ScaleOffset has offset = use_bias = False); we keep the paper's
// beta_q, beta_k (initialized to 0). Note that beta_k alone has no effect without RoPE or
// KeyNorm: it adds q_i . beta_k to every logit of row i, which the softmax ignores (its gradient
// is then exactly 0). Other position schemes (NoPE,
// ALiBi, KERPLE) and QueryNorm/KeyNorm apply to Q and K exactly as the LLaMA block applies them to
// its heads, with the single head's parameters (ALiBi: Press et al.'s slope for one head, 2^-8).
//
// Attention through the one tiled kernel (the caller's `attend`): the kernel
// takes one head dim D for q, k and v, while the GAU's keys have width S and its values width E.
// So V (N, E) is read as R = E / S heads of width S (its memory layout already is (N, R, S)),
// and the kernel runs with H = G = R heads whose queries and keys are R copies of the same Q and
// K: every copy computes the same softmax A (same q, k, bias), so copy r's output is exactly
// A V[:, r*S:(r+1)*S] and the R outputs side by side are A V. R kv heads (not one, GQA style):
// one kv head carries one value vector, and the R slices of V differ. In the backward, dq and dk
// of the R copies are summed (Q feeds every copy). Requires E to be a multiple of S. The cost:
// the q.k products are computed R times (R T^2 S = T^2 E flops instead of T^2 S), as many as the
// p.v products need anyway.

// The GAU's layer settings.
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

// Those of layer l of a GAU model (sizes, scale, RoPE or not, QueryNorm /
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

// Where a GAU block's forward writes.
template <typename Real>
struct GauBlockBuffers {
  Real* x_in = nullptr;  // (N, C): a copy of the block's input, or null
  // Before SiLU: (N, E), (N, E), (N, S), or null (SiLU then runs in place on u, v, z).
  Real* hu = nullptr;
  Real* hv = nullptr;
  Real* hz = nullptr;
  Real* u = nullptr;           // (N, E) = silu(x W_u)
  Real* v = nullptr;           // (N, E) = silu(x W_v)
  Real* z = nullptr;           // (N, S) = silu(x W_z)
  Real* q = nullptr;           // (N, S) = gamma_q * z + beta_q
  Real* k = nullptr;           // (N, S) = gamma_k * z + beta_k
  Real* att = nullptr;         // (N, E) = A V: what `attend` writes
  Real* y = nullptr;           // (N, C): x + O, the post-norm's input, or null
  Real* g = nullptr;           // (N, E): U * (A V), scratch; may be u (then u is not kept)
  Real* o = nullptr;           // (N, C): scratch, O
  const Real* ones = nullptr;  // (C): the post-norm's gain of 1
};

// The post-norm GAU block on x (N, C), in place:
//   U = silu(x W_u), V = silu(x W_v), Z = silu(x W_z)
//   Q = gamma_q * Z + beta_q,  K = gamma_k * Z + beta_k
//   att = attend(Q, K, V)                 (the caller's: positions, norms, the kernel)
//   x' = RMSNorm(x + (U * att) W_o) with a gain of 1
template <typename Real, class Attend>
void GauBlockForward(const LayerWeightsOf<Real>& W, const GauLayerConfig& c, Real* x, int64_t N,
                     const GauBlockBuffers<Real>& b, Attend&& attend) {
  const int C = c.C, E = c.E, S = c.S;
  STRETCH_CHECK(S >= 1 && E % S == 0, "E={} S={}", E, S);
  const int64_t NC = N * C;
  if (b.x_in != nullptr) std::copy(x, x + NC, b.x_in);
  // U = phi(X W_u), V = phi(X W_v), Z = phi(X W_z)
  Real* hu = b.hu != nullptr ? b.hu : b.u;
  Real* hv = b.hv != nullptr ? b.hv : b.v;
  Real* hz = b.hz != nullptr ? b.hz : b.z;
  {
    profile::Scope s(profile::kInProj);
    LinearForward(x, W.gau_u.data(), hu, N, C, E);
    LinearForward(x, W.gau_v.data(), hv, N, C, E);
    LinearForward(x, W.gau_z.data(), hz, N, C, S);
  }
  {
    profile::Scope s(profile::kActivation);
    SiluForward(hu, b.u, N * E);
    SiluForward(hv, b.v, N * E);
    SiluForward(hz, b.z, N * S);
    // Q = gamma_q * Z + beta_q,  K = gamma_k * Z + beta_k
    for (int64_t n = 0; n < N; ++n) {
      for (int d = 0; d < S; ++d) {
        const size_t i = static_cast<size_t>(n * S + d), ud = static_cast<size_t>(d);
        b.q[i] = W.gamma_q[ud] * b.z[i] + W.beta_q[ud];
        b.k[i] = W.gamma_k[ud] * b.z[i] + W.beta_k[ud];
      }
    }
  }
  attend();
  // O = (U * (A V)) W_o;  y = x + O;  x' = RMSNorm(y) with a gain of 1
  {
    profile::Scope s(profile::kActivation);
    for (int64_t i = 0; i < N * E; ++i) b.g[i] = b.u[i] * b.att[i];
  }
  {
    profile::Scope s(profile::kOutProj);
    LinearForward(b.g, W.wo.data(), b.o, N, E, C);
  }
  Real* y = b.y != nullptr ? b.y : x;
  {
    profile::Scope s(profile::kResidual);
    for (int64_t i = 0; i < NC; ++i) y[i] = x[i] + b.o[i];
  }
  profile::Scope s(profile::kNorm);
  RmsNormForward(y, b.ones, x, N, C, static_cast<Real>(c.norm_eps));
}

}  // namespace stretch
