// Row-wise building blocks of the LLaMA block, forward only in this issue (backward passes come
// with training and will sit next to each forward). Shapes: T rows, C channels, F FFN width,
// V vocabulary, D head dim. All pointers are dense row-major unless a stride is given.
#pragma once

#include <cstdint>

#include "src/position/rope.h"

namespace stretch {

// y (T, N) = x (T, K) * w^T, with w (N, K) row-major (out, in) as llama2.c stores weights.
// OpenBLAS sgemm (sgemv for one row).
void MatMulRows(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N);

// RMSNorm (Zhang & Sennrich 2019): out[t, c] = x[t, c] / sqrt(mean_c x[t, c]^2 + eps) * w[c].
// The sum of squares is accumulated in double: at C = 8192 a float sum already loses ~3 bits.
void RmsNorm(const float* x, const float* w, float* out, int64_t T, int C, float eps);

// SwiGLU (Shazeer 2020): gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void SwiGlu(float* gate, const float* up, int64_t n);

// Adds b to a: a[i] += b[i].
void AddInPlace(float* a, const float* b, int64_t n);

// RoPE on interleaved pairs (x0, x1), (x2, x3), ... of every head of T rows:
//   (x_{2t}, x_{2t+1}) <- (x_{2t} cos - x_{2t+1} sin,  x_{2t} sin + x_{2t+1} cos)
// with the angle of row r's position taken from table row r. x: (T, heads, D), rows row_stride
// floats apart and heads head_stride floats apart; D = 2 * table.pairs.
void RopeInterleaved(float* x, int64_t T, int heads, int64_t row_stride, int64_t head_stride,
                     const RopeTable& table);

// Next-token loss of one row of logits (V): -log softmax(logits)[target], computed with the
// max subtracted and the sum in double. Also the argmax (lowest index on ties), so that
// "correct" means argmax == target.
struct TokenLoss {
  double loss = 0.0;
  int argmax = 0;
};
TokenLoss CrossEntropyRow(const float* logits, int V, int target);

}  // namespace stretch
