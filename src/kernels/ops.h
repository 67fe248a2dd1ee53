// Row-wise building blocks of the LLaMA block. The float forms without a suffix (MatMulRows,
// RmsNorm, ...) are the inference engine's; the templated Forward/Backward pairs below them are the
// training issue's, instantiated for float (training) and double (gradient checks), each backward
// next to its forward and quoting the forward line it differentiates (llm.c's habit).
//
// Shapes, in fixed letters: T rows (tokens), C channels, K and N a linear map's input and output
// width, F FFN width, V vocabulary, D head dim, H heads. All pointers are dense row-major unless a
// stride is given.
//
// Gradients: a backward's parameter gradients (dW, dw, dE) always accumulate (+=), so that
// gradients add up over micro-batches and over tied weights; an input's gradient is written or
// accumulated as the caller asks (GradWrite), because in a pre-norm block one activation feeds
// several ops (x feeds the residual and the norm; the normed x feeds q, k and v) and its gradient
// is the sum of theirs.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "src/kernels/packed.h"
#include "src/position/rope.h"

namespace stretch {

// y (T, N) = x (T, K) * w^T, with w (N, K) row-major (out, in) as llama2.c stores weights.
// One sgemm (a matrix-vector product for one row), split over the threads: src/kernels/gemm.h.
void MatMulRows(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N);

// RMSNorm (Zhang & Sennrich 2019): out[t, c] = x[t, c] / sqrt(mean_c x[t, c]^2 + eps) * w[c].
// The sum of squares is accumulated in double: at C = 8192 a float sum already loses ~3 bits.
void RmsNorm(const float* x, const float* w, float* out, int64_t T, int C, float eps);

// SwiGLU (Shazeer 2020): gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void SwiGlu(float* gate, const float* up, int64_t n);

// Adds b to a: a[i] += b[i].
// Backward of the residual add x = x + f(x): forward: a[i] += b[i];  so: db[i] = da[i] and da[i]
// passes through unchanged. The block's branch gets the stream's gradient as it is, and the
// branch's input gradient is added onto the stream's (GradWrite::kAccumulate below); no function
// is needed.
void AddInPlace(float* a, const float* b, int64_t n);

// RoPE on interleaved pairs (x0, x1), (x2, x3), ... of every head of T rows:
//   (x_{2t}, x_{2t+1}) <- (x_{2t} cos - x_{2t+1} sin,  x_{2t} sin + x_{2t+1} cos)
// with the angle of row r's position taken from table row r. x: (T, heads, D), rows row_stride
// floats apart and heads head_stride floats apart; D = 2 * table.pairs.
void RopeInterleaved(float* x, int64_t T, int heads, int64_t row_stride, int64_t head_stride,
                     const RopeTable& table);

// One row of RopeInterleaved: the `pairs` interleaved pairs of x rotated by the angles whose
// cos/sin are given, (x0, x1) <- (x0 cos - x1 sin,  x0 sin + x1 cos); on vectors, each rounded
// as fma(x0, cos, -(x1 sin)) and fma(x0, sin, x1 cos) where the CPU has a fused multiply-add
// (ops.cc). The training forward and backward rotate through the same code.
void RotatePairs(float* x, int pairs, const float* cos, const float* sin);

// Next-token loss of one row of logits (V): -log softmax(logits)[target], computed with the
// max subtracted and the sum in double. Also the argmax (lowest index on ties), so that
// "correct" means argmax == target.
struct TokenLoss {
  double loss = 0.0;
  int argmax = 0;
};
TokenLoss CrossEntropyRow(const float* logits, int V, int target);

// ---------------------------------------------------------------------------------------------
// Training: Forward/Backward pairs, templates on the number type (float and double instances in
// ops.cc). A float Forward computes exactly what its inference form above computes (LinearForward
// as MatMulRows, RmsNormForward as RmsNorm, SwiGluForward as SwiGlu, RopeInterleavedForward as
// RopeInterleaved, CrossEntropyForward as the mean of CrossEntropyRow; the tests compare them bit
// for bit), so a model trained here scores the same in the inference engine.

// How a backward writes an input's gradient: over what is there, or added to it.
enum class GradWrite { kOverwrite, kAccumulate };

// How the products on packed matrices multiply (src/kernels/ops.cc), from STRETCH_PACKED_DOT
// when the process starts:
//   - kFloat ("float"): in floats. One row (decode) by src/kernels/packed_dot.cc, the decoded
//     weights times x; many rows (prefill, scoring) by the sgemm on decoded panels of the matrix.
//     Equal to the float32 path within float32 rounding (prefill bit for bit).
//   - kInt8WhereAvailable ("int8"): x rounded to the weights' own dot type once per product, as
//     llama.cpp's CPU backend multiplies, where the CPU has the kernels: for Q8_0, Q4_K and Q6_K
//     8 bits per block (src/kernels/packed_int8.h; AVX-512 VNNI), one row in integers, many rows
//     by the sgemm on the rows of x quantized and read back, so that prefill and decode compute
//     the same; for BF16 x rounded to bfloat16, one row and many (src/kernels/packed_bf16.h;
//     AVX512_BF16). Each product moves by about 0.2-0.5% of its size.
//   - kFast ("fast", the default; "decode" is its earlier name): the fastest of the two per
//     product. Q8_0, Q4_K and Q6_K: one row in integers (decode streams the K-quants at 1.5-2x the
//     float kernels' speed, which are bound by their decoding instructions), many rows in floats
//     (integers there would not be faster: the rows of x are quantized and read back). BF16: x
//     rounded to bfloat16 for one row and many (many rows at about twice the sgemm's
//     multiplications a second; one row about 12% faster than the widening float kernel). On a
//     model trained here (dim 256, SOTU text, 4,096 tokens) the rounding of x moved the mean
//     per-token loss by 1e-5 (Q8_0) to 2e-4 (Q6_K) nats (docs/performance.md).
// Process-wide; the tests and benchmarks that compare them set it.
enum class PackedProducts { kInt8WhereAvailable, kFloat, kFast };
void SetPackedProducts(PackedProducts p);
PackedProducts ActivePackedProducts();
// What multiplies packed matrices under the active setting on this CPU, for `stretch bench`:
// "STRETCH_PACKED_DOT=fast: BF16 x rounded to bfloat16 (VDPBF16PS); Q8_0, Q4_K, Q6_K decode on
// 8-bit x (VNNI), their prefill in floats; other types in floats".
std::string PackedProductsText();

// Linear map without bias: y (T, N) = x (T, K) W^T, W (N, K) row-major (out, in) as MatMulRows.
// BLAS gemm (gemv for one row): sgemm for float, dgemm for double. A packed W (float only): one
// row streams its blocks (PackedDotRows); more rows decode panels of W that the sgemm multiplies.
template <typename Real>
void LinearForward(const Real* x,      // (T, K)
                   WeightArg<Real> W,  // (N, K)
                   Real* y,            // (T, N)
                   int64_t T, int64_t K, int64_t N);
// Several linear maps of one input: outs[j].y (T, N_j) = x (T, K) outs[j].W^T, each exactly what
// LinearForward computes. For one row (decode) the matrix-vector products run as one parallel
// region over all their output rows (the q, k and v projections; the FFN's gate and up), which
// saves a region's start and end per product; for more rows, one product each.
template <typename Real>
struct LinearOut {
  WeightRef<Real> W;  // (N, K)
  Real* y;            // (T, N)
  int64_t N;
};
template <typename Real>
void LinearForwardShared(const Real* x, std::span<const LinearOut<Real>> outs, int64_t T,
                         int64_t K);

// y (T, N) += x (T, K) W^T: LinearForward added onto y (a residual stream) by the product itself
// (beta = 1), with no (T, N) temporary and no separate pass over y. Its backward is
// LinearBackward's; y's own gradient passes through unchanged.
template <typename Real>
void LinearForwardAdd(const Real* x,      // (T, K)
                      WeightArg<Real> W,  // (N, K)
                      Real* y,            // (T, N), added to
                      int64_t T, int64_t K, int64_t N);
// forward: y[t][n] = sum_k x[t][k] W[n][k];  so: dx[t][k] (+)= sum_n dy[t][n] W[n][k]  (dx = dy W)
//                                           and dW[n][k] += sum_t dy[t][n] x[t][k]  (dW += dy^T x)
// dx may be null (an input that needs no gradient); dW always accumulates.
template <typename Real>
void LinearBackward(const Real* dy,  // (T, N)
                    const Real* x,   // (T, K)
                    const Real* W,   // (N, K)
                    Real* dx,        // (T, K), or null
                    Real* dW,        // (N, K), accumulated
                    int64_t T, int64_t K, int64_t N, GradWrite dx_write);

// Token embedding: out[t] = E[tokens[t]]. Every id is checked (0 <= id < V, always on).
template <typename Real>
void EmbeddingForward(const int* tokens,  // (T)
                      const Real* E,      // (V, C)
                      Real* out,          // (T, C)
                      int64_t T, int C, int V);
// forward: out[t][c] = E[tokens[t]][c];  so: dE[tokens[t]][c] += dout[t][c]
// A scatter-add: a token that repeats gathers the sum of its rows' gradients. Threads split the
// channels, not the rows (two rows may hit the same token); every element sums its rows in row
// order, so the result does not depend on the thread count.
template <typename Real>
void EmbeddingBackward(const int* tokens,  // (T)
                       const Real* dout,   // (T, C)
                       Real* dE,           // (V, C), accumulated
                       int64_t T, int C, int V);

// RMSNorm, as RmsNorm above: out[t][c] = x[t][c] * inv[t] * w[c],
// inv[t] = 1 / sqrt(mean_c x[t][c]^2 + eps), the sum of squares in double and inv rounded to Real.
// out may be x (in place).
template <typename Real>
void RmsNormForward(const Real* x,  // (T, C)
                    const Real* w,  // (C)
                    Real* out,      // (T, C)
                    int64_t T, int C, Real eps);
// forward: out[c] = x[c] * inv * w[c], inv = (sum_j x[j]^2 / C + eps)^(-1/2)
// so: dw[c] += dout[c] * x[c] * inv
//     d inv / d x[j] = -inv^3 x[j] / C, hence
//     dx[j] (+)= inv * (dout[j] w[j] - x[j] * inv^2 * S / C),  S = sum_c dout[c] w[c] x[c]
// inv is recomputed from x (O(C) per row) rather than saved; S and the sums for dw are in double.
// dx may be dout (in place, with kOverwrite).
template <typename Real>
void RmsNormBackward(const Real* dout,  // (T, C)
                     const Real* x,     // (T, C), the forward's input
                     const Real* w,     // (C)
                     Real* dx,          // (T, C)
                     Real* dw,          // (C), accumulated
                     int64_t T, int C, Real eps, GradWrite dx_write);

// SwiGLU, as SwiGlu above but not in place: h[i] = silu(g[i]) * u[i], silu(g) = g / (1 + exp(-g)).
// n = T * F. h may be g.
template <typename Real>
void SwiGluForward(const Real* g,  // (T, F) gate pre-activation
                   const Real* u,  // (T, F) up projection
                   Real* h,        // (T, F)
                   int64_t n);
// forward: h = silu(g) * u,  silu(g) = g s, s = 1 / (1 + exp(-g)),  s' = s (1 - s)
// so: du = dh * silu(g)
//     dg = dh * u * silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
// Overwrites dg and du (they are the inputs of two linears, nothing else adds to them). dg may be
// dh (in place).
template <typename Real>
void SwiGluBackward(const Real* dh,  // (T, F)
                    const Real* g,   // (T, F), saved from the forward
                    const Real* u,   // (T, F), saved from the forward
                    Real* dg,        // (T, F)
                    Real* du,        // (T, F)
                    int64_t n);

// GeGLU with GELU's tanh approximation (Gemma's feed-forward, transformers' "gelu_pytorch_tanh",
// Hendrycks and Gimpel 2016, eq. in section 2): h[i] = gelu(g[i]) * u[i],
//   gelu(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
// n = T * F. h may be g. Inference only (no backward).
template <typename Real>
void GeluTanhForward(const Real* g, const Real* u, Real* h, int64_t n);

// SiLU (Swish with beta = 1), the GAU's phi: y[i] = h[i] s, s = 1 / (1 + exp(-h[i])), as
// SwiGLU's gate. y may be h (in place).
template <typename Real>
void SiluForward(const Real* h, Real* y, int64_t n);
// forward: y = h s,  s' = s (1 - s)
// so: dh = dy * (s + h s (1 - s)) = dy * s (1 + h (1 - s))   (overwrites dh; dh may be dy)
template <typename Real>
void SiluBackward(const Real* dy, const Real* h, Real* dh, int64_t n);

// The rotation angles of T rows as cos/sin tables (RopeTable's layout, any number type).
template <typename Real>
struct RopeAngles {
  const Real* cos = nullptr;  // (T, pairs)
  const Real* sin = nullptr;  // (T, pairs)
  int64_t T = 0;
  int pairs = 0;  // D / 2
};
inline RopeAngles<float> AnglesOf(const RopeTable& table) {
  return {table.cos.data(), table.sin.data(), table.n, table.pairs};
}

// RoPE on interleaved pairs in place, as RopeInterleaved above:
//   (x0, x1) <- (x0 cos - x1 sin,  x0 sin + x1 cos)  for every pair of every head of every row.
// x: (T, H, D), rows row_stride and heads head_stride elements apart, D = 2 * angles.pairs.
template <typename Real>
void RopeInterleavedForward(Real* x,  // (T, H, D), strided
                            int64_t T, int H, int64_t row_stride, int64_t head_stride,
                            const RopeAngles<Real>& angles);
// forward: y0 = x0 cos - x1 sin;  y1 = x0 sin + x1 cos  (y = R x, R a rotation)
// so: dx0 = dy0 cos + dy1 sin;  dx1 = -dy0 sin + dy1 cos  (dx = R^T dy: the rotation by -angle)
// In place on the gradient; the angles are not learned, so they get none.
template <typename Real>
void RopeInterleavedBackward(Real* d,  // (T, H, D), strided: dy in, dx out
                             int64_t T, int H, int64_t row_stride, int64_t head_stride,
                             const RopeAngles<Real>& angles);

// L2 normalization of every head vector (QueryNorm / KeyNorm; both: cosine attention):
//   y = x / |x|,  |x| = sqrt(sum_d x[d]^2) (in double); a zero vector stays zero.
// x: (T, H, D) dense; y may be x.
template <typename Real>
void L2NormalizeForward(const Real* x,         // (T, H, D)
                        Real* y,               // (T, H, D)
                        int64_t rows, int D);  // rows = T * H
// forward: y[d] = x[d] / n,  n = |x|,  d n / d x[e] = x[e] / n = y[e]
// so: dx[e] = (dy[e] - y[e] * sum_d dy[d] y[d]) / n   (overwrites dx; dx may be dy)
template <typename Real>
void L2NormalizeBackward(const Real* dy,  // (T, H, D)
                         const Real* x,   // (T, H, D), the forward's input
                         Real* dx,        // (T, H, D)
                         int64_t rows, int D);

// Scaling of every pair of every head vector by a per-row, per-pair factor (XPOS's decay on q and
// k: pair t of row r times factors[r * pairs + t]), in place:
//   (x0, x1) <- f (x0, x1),  f = factors[r * pairs + t],  D = 2 * pairs.
// x: (T, H, D), rows row_stride and heads head_stride elements apart.
template <typename Real>
void PairScaleForward(Real* x, int64_t T, int H, int64_t row_stride, int64_t head_stride, int pairs,
                      const Real* factors);  // factors: (T, pairs)
// forward: y = f x  so: dx = f dy (in place on the gradient; the factors are not learned).
template <typename Real>
void PairScaleBackward(Real* d, int64_t T, int H, int64_t row_stride, int64_t head_stride,
                       int pairs, const Real* factors);

// SSMax's learned logit scale on queries (arXiv 2501.19399), in place:
//   x[t, h, :] <- s_h w_t x[t, h, :]      w_t = row_weight[t] (ln(n_t) for SSMax), s_h = s[h]
// x: (T, H, D) dense.
template <typename Real>
void HeadScaleForward(Real* x, int64_t T, int H, int D, const Real* row_weight, const Real* s);
// forward: y[t,h,:] = s_h w_t x[t,h,:]
// so: dx[t,h,:] = s_h w_t dy[t,h,:]  (in place: d holds dy in, dx out; x_in is the forward's
//     input), ds_h += sum_t w_t (x_in[t,h,:] . dy[t,h,:])  (added in double, in row order).
template <typename Real>
void HeadScaleBackward(Real* d, const Real* x_in, int64_t T, int H, int D, const Real* row_weight,
                       const Real* s, Real* ds);

// Cross-entropy of T rows of logits against integer targets, averaged over the scored rows.
// targets[t] = kNotScored (-1) leaves row t out of the loss and of the count (a padded row, or a
// position the task does not score); any other target must lie in [0, V) (checked, always on).
inline constexpr int kNotScored = -1;
struct MeanLoss {
  double mean = 0.0;   // sum over scored rows of -log softmax(logits[t])[targets[t]], / scored;
                       // 0 when no row is scored
  int64_t scored = 0;  // rows with a target
};
// Row loss as CrossEntropyRow: log sum_i exp(l[i] - max) - (l[target] - max), exp and sums in
// double; rows in parallel, summed in row order (the same mean for every thread count).
template <typename Real>
MeanLoss CrossEntropyForward(const Real* logits,  // (T, V)
                             const int* targets,  // (T)
                             int64_t T, int V);
// forward: mean = (1 / scored) sum_t (log sum_i exp(l[t][i]) - l[t][target_t])
// so: dlogits[t][i] = (softmax(l[t])[i] - [i == target_t]) * dloss / scored  for a scored row,
//     dlogits[t][i] = 0 for an unscored row (and every row when scored == 0).
// dloss is the upstream gradient of the mean (1 for the loss itself). Overwrites dlogits, which
// may be logits (in place: each row's max is taken before the row is written).
template <typename Real>
void CrossEntropyBackward(const Real* logits,  // (T, V)
                          const int* targets,  // (T)
                          Real* dlogits,       // (T, V)
                          int64_t T, int V, double dloss);

}  // namespace stretch
