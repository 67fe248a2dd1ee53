// The decoders and one-row products of packed matrices (src/kernels/packed.h).
#include <hwy/highway.h>

#include <vector>

#include "src/kernels/attention_simd.h"  // Highway set-up (static target)
#include "src/kernels/blocks.h"
#include "src/kernels/half.h"
#include "src/kernels/packed.h"

namespace stretch {

namespace {

namespace hn = hwy::HWY_NAMESPACE;

// sum_k a[k] b[k], n a multiple of nothing in particular.
float Dot(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t k = 0;
  for (; k + 2 * L <= n; k += 2 * L) {
    s0 = hn::MulAdd(hn::LoadU(d, a + k), hn::LoadU(d, b + k), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + k + L), hn::LoadU(d, b + k + L), s1);
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

}  // namespace

void DequantizeRows(const PackedMatrix& m, int64_t r0, int64_t n, float* dst) {
  const int64_t C = m.cols;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* src = m.Row(r0 + r);
    float* out = dst + r * C;
    switch (m.type) {
      case PackedType::kF16:
        HalvesToFloats(reinterpret_cast<const uint16_t*>(src), out, C, HalfType::kF16);
        break;
      case PackedType::kBF16:
        HalvesToFloats(reinterpret_cast<const uint16_t*>(src), out, C, HalfType::kBF16);
        break;
      case PackedType::kQ8_0: DequantizeQ8_0(src, out, C); break;
      case PackedType::kQ4_K: DequantizeQ4_K(src, out, C); break;
      case PackedType::kQ6_K: DequantizeQ6_K(src, out, C); break;
    }
  }
}

void PackedDotRows(const PackedMatrix& W, const float* x, float beta, float* y, int64_t r0,
                   int64_t r1) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(W.cols));
  for (int64_t r = r0; r < r1; ++r) {
    DequantizeRows(W, r, 1, row.data());
    const float v = Dot(row.data(), x, W.cols);
    y[r - r0] = beta == 0.0f ? v : v + beta * y[r - r0];
  }
}

std::string PackedKernelsText() {
  return std::string("rows decoded then dotted, Highway ") + hwy::TargetName(HWY_TARGET);
}

}  // namespace stretch
