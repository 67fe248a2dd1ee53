// The integer products of packed matrices (src/kernels/packed_int8.h):
//   - QuantizeInput equals its definition (ggml's quantize_row_q8_K_ref: iscale = 127 / max|x|,
//     nearest_int's ties to even, d = 1 / iscale; the sums of 16) bit for bit, and rounds the ties
//     of a block whose scale is exactly 1 to even;
//   - PackedDotRowsInt8 (the vector kernels where the CPU has them) and the portable kernels equal
//     a double-precision dot of the scalar decoders' row (src/kernels/blocks.h) with the quantized
//     x within the float32 rounding of one term per block (IntDotBound), on random valid blocks,
//     with beta 0 and not, on row ranges that start after row 0 and leave rows outside the
//     groups of four; a NaN in x gives NaN;
//   - their difference from PackedDotRows with the float x (x's quantization) is reported.
// Broken kernels fail here (each tried once): Q4_K's scales of the second quant vector used for
// the first (sc_index[1] for [0]) fails the Q4_K bound; Q6_K's values 0..31 taking qh's bits 2-3
// (shift 2 for 4) fails Q6_K's; Q8_0's offset -64 sum(qx) for -128 fails Q8_0's. The portable
// test caught g++ 12.2 compiling static_cast<int8_t>(byte) * int8 sums to vpdpbusd (see
// packed_int8.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kernels/blocks.h"
#include "src/kernels/half.h"
#include "src/kernels/packed.h"
#include "src/kernels/packed_int8.h"
#include "tests/testing/packed_bounds.h"

namespace stretch {
namespace {

using testing::RandomByte;
using testing::RandomFiniteHalf;

// A positive f16 scale of a trained model's size, 2^-8 .. 2^-6 (for the accuracy figures).
uint16_t TypicalHalf(Rng& rng) {
  const auto frac = static_cast<uint16_t>(rng.NextU64() >> 54);  // 10 bits
  const auto exp = static_cast<uint16_t>(15 - 8 + UniformBelow(rng, 2));
  return static_cast<uint16_t>(frac | (exp << 10));
}

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// `rows` rows of `cols` values of `type`: random bytes for the quants and sub-block scales, and
// random finite f16 scales (typical: TypicalHalf's).
std::vector<uint8_t> RandomRows(PackedType type, int64_t rows, int64_t cols, Rng& rng,
                                bool typical = false) {
  const int64_t blocks = rows * cols / PackedBlockElems(type);
  const int64_t bb = PackedBlockBytes(type);
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks * bb));
  for (auto& b : bytes) b = RandomByte(rng);
  const auto half = [&] { return typical ? TypicalHalf(rng) : RandomFiniteHalf(rng); };
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* blk = bytes.data() + i * bb;
    switch (type) {
      case PackedType::kQ8_0: PutU16(blk, half()); break;
      case PackedType::kQ4_K:
        PutU16(blk, half());      // d
        PutU16(blk + 2, half());  // dmin
        break;
      case PackedType::kQ6_K: PutU16(blk + 208, half()); break;
      default: break;
    }
  }
  return bytes;
}

std::vector<float> ScalarRow(PackedType type, const uint8_t* row, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  switch (type) {
    case PackedType::kQ8_0: DequantizeQ8_0(row, out.data(), cols); break;
    case PackedType::kQ4_K: DequantizeQ4_K(row, out.data(), cols); break;
    case PackedType::kQ6_K: DequantizeQ6_K(row, out.data(), cols); break;
    default: break;
  }
  return out;
}

PackedMatrix Wrap(PackedType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  return MakePackedMatrix("w", type, bytes.data(), static_cast<int64_t>(bytes.size()), rows, cols,
                          nullptr);
}

// ggml's nearest_int: adding 1.5 * 2^23 leaves round(v) (ties to even, the default rounding) in
// the low mantissa bits, for |v| < 2^22.
int NearestInt(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// QuantizeInput's definition, one block of B values at a time (quantize_row_q8_K_ref with a
// positive iscale: ggml's -127 / max flips the signs of q and d together; for Q8_0,
// quantize_row_q8_0's d, max / 127 rounded to F16).
QuantizedInput QuantizeReference(const std::vector<float>& x, PackedType type) {
  QuantizedInput r;
  r.type = type;
  r.n = static_cast<int64_t>(x.size());
  const int64_t B = r.Block();
  for (int64_t b = 0; b < r.n / B; ++b) {
    float amax = 0.0f;
    for (int64_t k = 0; k < B; ++k)
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * B + k)]));
    const float iscale = amax == 0.0f ? 0.0f : 127.0f / amax;
    float d = amax == 0.0f ? 0.0f : 1.0f / iscale;
    if (type == PackedType::kQ8_0 && amax != 0.0f) {  // block_q8_0's d: max / 127 as F16
      const float dq = amax / 127.0f;
      uint16_t h;
      FloatsToHalves(&dq, &h, 1, HalfType::kF16);
      d = HalfToFloat(h);
    }
    r.d.push_back(d);
    for (int64_t k = 0; k < B; ++k) {
      r.q.push_back(static_cast<int8_t>(
          std::min(127, NearestInt(iscale * x[static_cast<size_t>(b * B + k)]))));
    }
  }
  for (int64_t g = 0; g < r.n / 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += r.q[static_cast<size_t>(16 * g + l)];
    r.sums.push_back(static_cast<int16_t>(sum));
  }
  return r;
}

const PackedType kTypes[] = {PackedType::kQ8_0, PackedType::kQ4_K, PackedType::kQ6_K};

std::vector<int64_t> ColsOf(PackedType type) {
  if (type == PackedType::kQ8_0) return {32, 64, 96, 160, 256, 4096};  // odd block counts too
  return {256, 768, 4096};
}

TEST(QuantizeInput, EqualsItsDefinition) {
  Rng rng(3);
  for (const PackedType type : kTypes) {
    for (const int64_t n : {int64_t{256}, int64_t{4096}}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x)
        v = static_cast<float>(rng.Normal()) *
            std::ldexp(1.0f, static_cast<int>(UniformBelow(rng, 20)) - 10);
      std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero Q8_0 block: d 0, q 0
      x[40] = 1e30f;                               // one value far above its block's others
      QuantizedInput got;
      QuantizeInput(x.data(), n, type, &got);
      const QuantizedInput want = QuantizeReference(x, type);
      ASSERT_EQ(got.d.size(), want.d.size());
      for (size_t b = 0; b < want.d.size(); ++b) {
        uint32_t gb, wb;
        std::memcpy(&gb, &got.d[b], 4);
        std::memcpy(&wb, &want.d[b], 4);
        EXPECT_EQ(gb, wb) << PackedTypeName(type) << " block " << b;
      }
      EXPECT_EQ(got.q, want.q) << PackedTypeName(type);
      EXPECT_EQ(got.sums, want.sums) << PackedTypeName(type);
    }
  }
}

TEST(QuantizeInput, RoundsTiesToEven) {
  // max |x| = 127: iscale = 1 exactly, so x itself is rounded.
  const float ties[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f, 3.25f, -3.75f};
  const int want[] = {0, 2, 2, 0, -2, -2, 126, -126, 3, -4};
  for (const PackedType type : kTypes) {
    std::vector<float> x(256, 0.0f);
    x[0] = -127.0f;
    for (size_t i = 0; i < std::size(ties); ++i) x[1 + i] = ties[i];
    QuantizedInput q;
    QuantizeInput(x.data(), 256, type, &q);
    EXPECT_EQ(q.d[0], 1.0f);
    EXPECT_EQ(q.q[0], -127);
    for (size_t i = 0; i < std::size(ties); ++i) {
      EXPECT_EQ(q.q[1 + i], want[i]) << PackedTypeName(type) << " x " << ties[i];
    }
  }
}

// sum_k of the magnitudes that a term of the integer product sees for value k (xh = d_x q_x):
// |w_k xh_k| (Q8_0); |d sc_j q_k xh_k| + |dmin m_j xh_k| (Q4_K: the mins are a separate sum);
// |d sc_g| (|q_k - 32| + 64) |xh_k| (Q6_K: q and the 32 are separate sums; |q| <= |q - 32| + 32,
// and w_k = d sc_g (q - 32) up to its rounding).
double SumOfMagnitudes(PackedType type, const uint8_t* row, const std::vector<float>& w,
                       const std::vector<double>& xh) {
  double s = 0.0;
  const auto cols = static_cast<int64_t>(xh.size());
  for (int64_t b = 0; b < cols / 256 || (type == PackedType::kQ8_0 && b == 0); ++b) {
    if (type == PackedType::kQ8_0) {
      for (size_t k = 0; k < xh.size(); ++k) s += std::fabs(double{w[k]} * xh[k]);
      break;
    }
    if (type == PackedType::kQ6_K) {
      const uint8_t* blk = row + b * kQ6_KBytes;
      const double d = HalfToFloat(LoadU16(blk + 208));
      for (int k = 0; k < 256; ++k) {
        const auto i = static_cast<size_t>(b * 256 + k);
        const double dsc = std::fabs(d * static_cast<int8_t>(blk[192 + k / 16]));
        s += (std::fabs(double{w[i]}) + 64.0 * dsc) * std::fabs(xh[i]);
      }
      continue;
    }
    s += testing::Q4KSplitMagnitudes(row + b * kQ4_KBytes, kQ4_KElems,
                                     &xh[static_cast<size_t>(b * 256)]);
  }
  return s;
}

// How far the products may land from the double dot of the decoded row with xh. Their integer
// sums are exact; each term then meets at most: the decoder's rounding of w_k in the reference
// (1), d_w d_x (1), the conversion of an int32 sum (1: Q6_K's may pass 2^24), the multiply-add
// into the accumulator (1), the additions of the later blocks (blocks - 1) and the lane sum (4)
// and the mins' accumulator (1). So gamma_m times the magnitudes with m = blocks + 16 (Higham,
// Accuracy and Stability of Numerical Algorithms, 3.1): about cols / 256 + 16 roundings where
// PackedDotRows' float bound counts cols + 8.
double IntDotBound(int64_t blocks, double magnitudes) {
  return testing::GammaBound(static_cast<double>(blocks + 16), magnitudes);
}

using Kernel = void (*)(const PackedMatrix&, const QuantizedInput&, float, float*, int64_t,
                        int64_t);

void CheckAgainstReference(PackedType type, Kernel kernel, const char* name) {
  Rng rng(23 + static_cast<uint64_t>(type));
  const int64_t rows = 11;  // ranges below: two groups of four and a remainder, or one row alone
  for (const int64_t cols : ColsOf(type)) {
    const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
    const PackedMatrix m = Wrap(type, bytes, rows, cols);
    std::vector<float> x(static_cast<size_t>(cols));
    for (auto& v : x) v = 2.0f * rng.Uniform() - 1.0f;
    // blocks of other sizes, and a zero block
    for (int64_t k = 0; k < cols; ++k)
      x[static_cast<size_t>(k)] *= static_cast<float>(1 + (k / 256) % 3 * 40);
    if (cols >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
    QuantizedInput xq;
    QuantizeInput(x.data(), cols, type, &xq);
    std::vector<double> xh(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k)
      xh[static_cast<size_t>(k)] =
          double{xq.d[static_cast<size_t>(k / xq.Block())]} * xq.q[static_cast<size_t>(k)];
    std::vector<double> exact(rows), magnitudes(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> w = ScalarRow(type, m.Row(r), cols);
      double s = 0.0;
      for (size_t k = 0; k < w.size(); ++k) s += double{w[k]} * xh[k];
      exact[static_cast<size_t>(r)] = s;
      magnitudes[static_cast<size_t>(r)] = SumOfMagnitudes(type, m.Row(r), w, xh);
    }
    testing::ExpectRowRanges(
        exact, [&](size_t r) { return IntDotBound(cols / PackedBlockElems(type), magnitudes[r]); },
        [&](float beta, float* y, int64_t r0, int64_t r1) { kernel(m, xq, beta, y, r0, r1); }, rng,
        fmt::format("{} {} cols {}", name, PackedTypeName(type), cols));
  }
}

class Int8Types : public ::testing::TestWithParam<PackedType> {};

TEST_P(Int8Types, DotRowsWithinOneRoundingPerBlockOfTheQuantizedProduct) {
  CheckAgainstReference(GetParam(), PackedDotRowsInt8, "PackedDotRowsInt8");
}

TEST_P(Int8Types, PortableDotRowsWithinOneRoundingPerBlockOfTheQuantizedProduct) {
  CheckAgainstReference(GetParam(), packed_int8_internal::DotRowsPortable, "portable");
}

TEST_P(Int8Types, NaNInXGivesNaN) {
  const PackedType type = GetParam();
  Rng rng(9);
  const int64_t rows = 5, cols = 512;
  const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng, /*typical=*/true);
  std::vector<float> x(cols, 0.5f);
  x[300] = std::numeric_limits<float>::quiet_NaN();
  QuantizedInput xq;
  QuantizeInput(x.data(), cols, type, &xq);
  std::vector<float> y(rows);
  PackedDotRowsInt8(Wrap(type, bytes, rows, cols), xq, 0.0f, y.data(), 0, rows);
  for (const float v : y) EXPECT_TRUE(std::isnan(v)) << PackedTypeName(type);
}

// Not a bound: the size of x's quantization error against PackedDotRows with the float x, on
// blocks with typical scales and normal x (printed, and checked loosely: 8-bit x carries about
// 2^-8 of each block's largest value, and the errors of 4096 values mostly cancel).
TEST_P(Int8Types, ReportsTheQuantizationErrorOfX) {
  const PackedType type = GetParam();
  Rng rng(31);
  const int64_t rows = 256, cols = 4096;
  const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng, /*typical=*/true);
  const PackedMatrix m = Wrap(type, bytes, rows, cols);
  std::vector<float> x(cols);
  for (auto& v : x) v = static_cast<float>(rng.Normal());
  QuantizedInput xq;
  QuantizeInput(x.data(), cols, type, &xq);
  std::vector<float> yf(rows), yi(rows);
  PackedDotRows(m, x.data(), 0.0f, yf.data(), 0, rows);
  PackedDotRowsInt8(m, xq, 0.0f, yi.data(), 0, rows);
  double se = 0.0, sy = 0.0;
  std::vector<double> rel(rows);
  for (size_t r = 0; r < yf.size(); ++r) {
    se += (double{yi[r]} - yf[r]) * (double{yi[r]} - yf[r]);
    sy += double{yf[r]} * yf[r];
    rel[r] = std::fabs(double{yi[r]} - yf[r]) / std::fabs(double{yf[r]});
  }
  std::sort(rel.begin(), rel.end());
  const double rms = std::sqrt(se / sy);
  std::printf(
      "%s, 4096 columns, normal x: rms(int8 - float) / rms(float) %.2e, median |rel| %.2e\n",
      PackedTypeName(type), rms, rel[rel.size() / 2]);
  EXPECT_LT(rms, 0.02);
}

INSTANTIATE_TEST_SUITE_P(Int8, Int8Types, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(PackedTypeName(info.param)); });

TEST(PackedInt8, AvailableOnlyForTheQuantizedTypes) {
  EXPECT_FALSE(PackedInt8Available(PackedType::kF16));
  EXPECT_FALSE(PackedInt8Available(PackedType::kBF16));
#if defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
  for (const PackedType type : kTypes) EXPECT_TRUE(PackedInt8Available(type));
#endif
}

}  // namespace
}  // namespace stretch
