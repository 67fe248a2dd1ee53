// Random blocks and rounding bounds of the products on packed matrices, for tests/kernels/packed_test.cc (float
// kernels) and packed_int8_test.cc (integer kernels), and the products' setting for a scope.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "src/core/rng.h"

#include "src/kernels/blocks.h"
#include "src/kernels/ops.h"

namespace stretch::testing {

// Sets how the products on packed matrices multiply (src/kernels/ops.h) for a scope.
class ProductsFor {
 public:
  explicit ProductsFor(PackedProducts p) : before_(ActivePackedProducts()) { SetPackedProducts(p); }
  ~ProductsFor() { SetPackedProducts(before_); }
  ProductsFor(const ProductsFor&) = delete;
  ProductsFor& operator=(const ProductsFor&) = delete;

 private:
  PackedProducts before_;
};

inline uint8_t RandomByte(Rng& rng) { return static_cast<uint8_t>(rng.NextU64() >> 56); }

// A random finite f16 pattern: any sign and fraction, exponent field 0-30 (31 is inf and NaN), so
// zeros, subnormals and the whole normal range up to 65504.
inline uint16_t RandomFiniteHalf(Rng& rng) {
  const auto bits = static_cast<uint16_t>(rng.NextU64() >> 48);
  const auto exp = static_cast<uint16_t>(UniformBelow(rng, 31));
  return static_cast<uint16_t>((bits & 0x83ffu) | (exp << 10));
}

// gamma_m times the magnitudes: how far a float32 evaluation of a sum whose every term passes
// through at most m roundings of relative size u = 2^-24 may land from the exact sum, |error| <=
// gamma_m sum_k |t_k|, gamma_m = m u / (1 - m u) (Higham, Accuracy and Stability of Numerical
// Algorithms, 3.1 and 4.2).
inline double GammaBound(double m, double magnitudes) {
  const double u = std::ldexp(1.0, -24);
  return m * u / (1.0 - m * u) * magnitudes;
}

// sum over the values of a Q4_K row (cols values) of |d sc_j q_k x_k| + |dmin m_j x_k|: the
// magnitudes of the two sums a Q4_K product keeps apart (the quants' and the mins'), which can
// exceed |w_k x_k| when the two nearly cancel.
template <typename X>
double Q4KSplitMagnitudes(const uint8_t* row, int64_t cols, const X& x) {
  double s = 0.0;
  for (int64_t b = 0; b < cols / kQ4_KElems; ++b) {
    const uint8_t* blk = row + b * kQ4_KBytes;
    const double d = HalfToFloat(LoadU16(blk)), dmin = HalfToFloat(LoadU16(blk + 2));
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      ScaleMinK4(j, blk + 4, &sc, &m);
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = blk[16 + 32 * (j / 2) + l];
        const int q = j % 2 == 0 ? byte & 0xF : byte >> 4;
        const double xk = x[static_cast<size_t>(b * kQ4_KElems + 32 * j + l)];
        s += std::fabs(d * sc * q * xk) + std::fabs(dmin * m * xk);
      }
    }
  }
  return s;
}

// The same for a Q5_K row: Q4_K's sub-blocks with 5-bit quants (bit j of qh[l] as bit 4 of value
// l of sub-block j).
template <typename X>
double Q5KSplitMagnitudes(const uint8_t* row, int64_t cols, const X& x) {
  double s = 0.0;
  for (int64_t b = 0; b < cols / kQ5_KElems; ++b) {
    const uint8_t* blk = row + b * kQ5_KBytes;
    const double d = HalfToFloat(LoadU16(blk)), dmin = HalfToFloat(LoadU16(blk + 2));
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      ScaleMinK4(j, blk + 4, &sc, &m);
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = blk[48 + 32 * (j / 2) + l];
        const int q = (j % 2 == 0 ? byte & 0xF : byte >> 4) | ((blk[16 + l] >> j) & 1) << 4;
        const double xk = x[static_cast<size_t>(b * kQ5_KElems + 32 * j + l)];
        s += std::fabs(d * sc * q * xk) + std::fabs(dmin * m * xk);
      }
    }
  }
  return s;
}

// Runs `product(beta, y, r0, r1)` (a one-row product writing y[r - r0] = W[r] . x + beta y[r - r0])
// on the row ranges [0, rows), [1, rows) and [2, 3), each with beta 0 (y filled with NaN: it must
// not be read) and 0.75 (y random, scaled as the row), and expects each result within
// `bound(r)` of exact[r] + beta y, plus 2 u of their sizes for beta y's product and the final
// addition. `what` names the case in failures.
inline void ExpectRowRanges(
    const std::vector<double>& exact, const std::function<double(size_t)>& bound,
    const std::function<void(float beta, float* y, int64_t r0, int64_t r1)>& product, Rng& rng,
    const std::string& what) {
  const auto rows = static_cast<int64_t>(exact.size());
  struct Range {
    int64_t r0, r1;
  };
  for (const Range range : {Range{0, rows}, Range{1, rows}, Range{2, 3}}) {
    for (const float beta : {0.0f, 0.75f}) {
      const auto n = static_cast<size_t>(range.r1 - range.r0);
      std::vector<float> y(n), y0(n);
      for (size_t i = 0; i < n; ++i) {
        const double e = exact[static_cast<size_t>(range.r0) + i];
        y0[i] = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN()
                             : static_cast<float>(std::fabs(e) + 1.0) * rng.Uniform();
        y[i] = y0[i];
      }
      product(beta, y.data(), range.r0, range.r1);
      for (size_t i = 0; i < n; ++i) {
        const auto r = static_cast<size_t>(range.r0) + i;
        const double add = beta == 0.0f ? 0.0 : double{beta} * double{y0[i]};
        const double want = exact[r] + add;
        const double allowed =
            bound(r) + std::ldexp(2.0, -24) * (std::fabs(exact[r]) + std::fabs(add));
        EXPECT_LE(std::fabs(double{y[i]} - want), allowed)
            << what << " rows [" << range.r0 << ", " << range.r1 << ") row " << r << " beta "
            << beta << ": " << y[i] << " vs " << want;
      }
    }
  }
}

}  // namespace stretch::testing
