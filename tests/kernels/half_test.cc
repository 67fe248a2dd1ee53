// 16-bit floats of the KV cache (src/kernels/half.h) against their definitions, independently of
// the converters under test: every one of the 65,536 bit patterns widens to the value its sign,
// exponent and fraction fields say (computed in double with ldexp); between every two adjacent
// finite values a and b, a float just below their midpoint narrows to a, just above to b, and the
// midpoint itself (a float: 12 or 9 significant bits) to the one whose last bit is 0. A perturbed
// converter (truncation instead of rounding) fails the midpoint check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "src/kernels/half.h"

namespace stretch {
namespace {

// The value of a 16-bit pattern: F16 1 + 5 + 10 bits (bias 15), BF16 1 + 8 + 7 (bias 127).
double Defined(uint16_t h, HalfType type) {
  const int frac_bits = type == HalfType::kF16 ? 10 : 7;
  const int exp_bits = 15 - frac_bits, bias = (1 << (exp_bits - 1)) - 1;
  const int e = (h >> frac_bits) & ((1 << exp_bits) - 1);
  const int f = h & ((1 << frac_bits) - 1);
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << exp_bits) - 1) {
    return f == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(f, 1 - bias - frac_bits);  // subnormal
  return sign * std::ldexp((1 << frac_bits) + f, e - bias - frac_bits);
}

float Narrowed(float x, HalfType type) {
  uint16_t h;
  FloatsToHalves(&x, &h, 1, type);
  float y;
  HalvesToFloats(&h, &y, 1, type);
  return y;
}

class HalfTypes : public ::testing::TestWithParam<HalfType> {};

TEST_P(HalfTypes, EveryPatternWidensToItsDefinedValue) {
  const HalfType type = GetParam();
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  HalvesToFloats(all.data(), wide.data(), static_cast<int64_t>(all.size()), type);
  for (size_t i = 0; i < all.size(); ++i) {
    const double want = Defined(all[i], type);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(wide[i])) << i;
    } else {
      ASSERT_EQ(static_cast<double>(wide[i]), want) << i;
    }
  }
  // And back: every finite pattern narrows to itself (a value already representable is kept).
  std::vector<uint16_t> back(all.size());
  FloatsToHalves(wide.data(), back.data(), static_cast<int64_t>(wide.size()), type);
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::isfinite(Defined(all[i], type))) {
      ASSERT_EQ(back[i], all[i]) << i;
    }
  }
}

TEST_P(HalfTypes, NarrowingRoundsToNearestTiesToEven) {
  const HalfType type = GetParam();
  int checked = 0;
  for (uint32_t h = 0; h + 1 < 0x7c00u || (type == HalfType::kBF16 && h + 1 < 0x7f80u); ++h) {
    const double a = Defined(static_cast<uint16_t>(h), type);
    const double b = Defined(static_cast<uint16_t>(h + 1), type);
    const float mid = static_cast<float>((a + b) / 2);
    ASSERT_EQ(static_cast<double>(mid), (a + b) / 2) << "the midpoint is a float";
    const float below = std::nextafter(mid, -1.0f), above = std::nextafter(mid, 2.0f * mid + 1);
    ASSERT_EQ(Narrowed(below, type), static_cast<float>(a)) << h;
    ASSERT_EQ(Narrowed(above, type), static_cast<float>(b)) << h;
    ASSERT_EQ(Narrowed(mid, type), static_cast<float>(h % 2 == 0 ? a : b)) << h << " tie";
    ASSERT_EQ(Narrowed(-mid, type), -static_cast<float>(h % 2 == 0 ? a : b)) << h;
    ++checked;
  }
  EXPECT_GT(checked, 30000);
  // Beyond the largest finite value (F16: 65504), inf; a truncating narrower would give 65504.
  if (type == HalfType::kF16) {
    EXPECT_TRUE(std::isinf(Narrowed(65520.0f, type)));
    EXPECT_EQ(Narrowed(65519.0f, type), 65504.0f);
  }
}

// Arrays of every length up to a few vectors (the tail through a padded copy) and in place.
TEST_P(HalfTypes, ArraysOfAnyLengthAndInPlaceRounding) {
  const HalfType type = GetParam();
  for (int64_t n = 0; n < 70; ++n) {
    std::vector<float> x(static_cast<size_t>(n)), y = x;
    // Normal numbers of both formats (|x| >= 0.5), where the relative bound below holds.
    for (int64_t i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = (i % 2 ? 1.0f : -1.0f) * (0.5f + 0.37f * static_cast<float>(i));
    }
    std::vector<uint16_t> h(x.size() + 1, 0xdead);
    FloatsToHalves(x.data(), h.data(), n, type);
    EXPECT_EQ(h.back(), 0xdead) << "wrote past n = " << n;
    HalvesToFloats(h.data(), y.data(), n, type);
    std::vector<float> z = x;
    RoundThroughHalves(z.data(), n, type);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      EXPECT_EQ(y[k], Narrowed(x[k], type)) << n << " " << i;
      EXPECT_EQ(z[k], y[k]);
      EXPECT_LE(std::abs(y[k] - x[k]),
                std::abs(x[k]) * (type == HalfType::kF16 ? 0x1p-11f : 0x1p-8f));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HalfTypes, ::testing::Values(HalfType::kF16, HalfType::kBF16),
                         [](const auto& info) {
                           return info.param == HalfType::kF16 ? "F16" : "BF16";
                         });

}  // namespace
}  // namespace stretch
