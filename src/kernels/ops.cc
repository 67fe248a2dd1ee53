#include "src/kernels/ops.h"

#include <cblas.h>

#include <cmath>

#include "src/core/check.h"

namespace stretch {

void MatMulRows(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N) {
  if (T == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(N), static_cast<int>(K), 1.0f, w,
                static_cast<int>(K), x, 1, 0.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(N),
              static_cast<int>(K), 1.0f, x, static_cast<int>(K), w, static_cast<int>(K), 0.0f, y,
              static_cast<int>(N));
}

void RmsNorm(const float* x, const float* w, float* out, int64_t T, int C, float eps) {
#pragma omp parallel for schedule(static) if (T * C > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * C;
    float* yr = out + t * C;
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / C + eps));
    for (int c = 0; c < C; ++c) yr[c] = xr[c] * inv * w[c];
  }
}

void SwiGlu(float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddInPlace(float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 262144)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void RopeInterleaved(float* x, int64_t T, int heads, int64_t row_stride, int64_t head_stride,
                     const RopeTable& table) {
  STRETCH_CHECK(table.n == T, "rope table has {} rows for {} rows", table.n, T);
  const int pairs = table.pairs;
#pragma omp parallel for schedule(static) if (T * heads * pairs > 65536)
  for (int64_t r = 0; r < T; ++r) {
    const float* c = table.cos.data() + r * pairs;
    const float* s = table.sin.data() + r * pairs;
    for (int h = 0; h < heads; ++h) {
      float* v = x + r * row_stride + h * head_stride;
      for (int t = 0; t < pairs; ++t) {
        const float x0 = v[2 * t], x1 = v[2 * t + 1];
        v[2 * t] = x0 * c[t] - x1 * s[t];
        v[2 * t + 1] = x0 * s[t] + x1 * c[t];
      }
    }
  }
}

TokenLoss CrossEntropyRow(const float* logits, int V, int target) {
  STRETCH_CHECK(target >= 0 && target < V, "target {} outside vocabulary of {}", target, V);
  int argmax = 0;
  float max = logits[0];
  for (int i = 1; i < V; ++i) {
    if (logits[i] > max) {
      max = logits[i];
      argmax = i;
    }
  }
  double sum = 0.0;
  for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  return {std::log(sum) - (static_cast<double>(logits[target]) - max), argmax};
}

}  // namespace stretch
