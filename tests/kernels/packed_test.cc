// Packed matrices (src/kernels/packed.h) against ggml's scalar block decoders (src/kernels/blocks.h)
// on random valid blocks of every type: random bytes for the quants and the Q4_K / Q6_K sub-block
// scales, random finite f16 scales (subnormals included), random finite 16-bit values.
//   - DequantizeRows equals the scalar decoders bit for bit;
//   - PackedDotRows equals a double-precision dot of the scalar-decoded row within the bound that
//     float32 rounding allows (DotBound says how it is derived), with beta 0 and not, on row
//     ranges that start after row 0 and leave rows outside the groups of four;
//   - MakePackedMatrix refuses NaN and infinite scales, wrong byte counts and partial blocks.
// Broken kernels fail here: Q4_K's nibbles swapped in PackedDotRows fails the Q4_K bound; Q6_K's
// first quarter taking qh's bits 2-3 instead of 0-1 fails both Q6_K tests; Q4_K's two sub-blocks
// of a byte swapped in DequantizeRows fails the Q4_K equality. Q4_0 and Q5_K (each tried): the
// scalar decoders' Q4_0 low nibbles less 7, or Q5_K's even sub-blocks taking the odd one's qh bit,
// fail both tests of the type; DequantizeRows' Q4_0 high half stored from the low nibbles, or
// Q5_K's odd sub-blocks less m1 + m2, fail the equality; PackedDotRows' Q4_0 high nibbles against
// the low half of x, or Q5_K's qh read one byte on, fail the bound; Q4_0's d or Q5_K's dmin left
// out of the scale check fails RefusesNonFiniteScales.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/kernels/blocks.h"
#include "src/kernels/packed.h"
#include "tests/testing/packed_bounds.h"

namespace stretch {
namespace {

using testing::RandomByte;
using testing::RandomFiniteHalf;

// A random bfloat16 of moderate magnitude (2^-30 .. 2^24, and subnormal floats: exponent field 0),
// so that products with x and their sums stay far from overflow.
uint16_t RandomBFloat16(Rng& rng) {
  const auto bits = static_cast<uint16_t>(rng.NextU64() >> 48);
  const uint64_t e = UniformBelow(rng, 56);  // 0, or 97 .. 151
  const auto exp = static_cast<uint16_t>(e == 0 ? 0 : 96 + e);
  return static_cast<uint16_t>((bits & 0x807fu) | (exp << 7));
}

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// `rows` rows of `cols` values of `type`, random valid blocks.
std::vector<uint8_t> RandomRows(PackedType type, int64_t rows, int64_t cols, Rng& rng) {
  const int64_t blocks = rows * cols / PackedBlockElems(type);
  const int64_t bb = PackedBlockBytes(type);
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks * bb));
  for (auto& b : bytes) b = RandomByte(rng);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* blk = bytes.data() + i * bb;
    switch (type) {
      case PackedType::kF16: PutU16(blk, RandomFiniteHalf(rng)); break;
      case PackedType::kBF16: PutU16(blk, RandomBFloat16(rng)); break;
      case PackedType::kQ8_0: PutU16(blk, RandomFiniteHalf(rng)); break;
      case PackedType::kQ4_0: PutU16(blk, RandomFiniteHalf(rng)); break;
      case PackedType::kQ4_K:
      case PackedType::kQ5_K:
        PutU16(blk, RandomFiniteHalf(rng));      // d
        PutU16(blk + 2, RandomFiniteHalf(rng));  // dmin
        break;
      case PackedType::kQ6_K: PutU16(blk + 208, RandomFiniteHalf(rng)); break;
    }
  }
  return bytes;
}

// One row by the scalar decoders of blocks.h.
std::vector<float> ScalarRow(PackedType type, const uint8_t* row, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  switch (type) {
    case PackedType::kF16:
      for (int64_t k = 0; k < cols; ++k)
        out[static_cast<size_t>(k)] = HalfToFloat(LoadU16(row + 2 * k));
      break;
    case PackedType::kBF16:
      for (int64_t k = 0; k < cols; ++k) {
        out[static_cast<size_t>(k)] = BFloat16ToFloat(LoadU16(row + 2 * k));
      }
      break;
    case PackedType::kQ8_0: DequantizeQ8_0(row, out.data(), cols); break;
    case PackedType::kQ4_0: DequantizeQ4_0(row, out.data(), cols); break;
    case PackedType::kQ4_K: DequantizeQ4_K(row, out.data(), cols); break;
    case PackedType::kQ5_K: DequantizeQ5_K(row, out.data(), cols); break;
    case PackedType::kQ6_K: DequantizeQ6_K(row, out.data(), cols); break;
  }
  return out;
}

// sum_k of the magnitudes that the product's float operations see for value k: |w_k x_k|, except
// for Q4_K and Q5_K, whose kernels sum d sc_j q_k x_k and dmin m_j x_k separately (packed_dot.cc),
// so |d sc_j q_k x_k| + |dmin m_j x_k| (which can exceed |w_k x_k| when the two nearly cancel).
double SumOfMagnitudes(PackedType type, const uint8_t* row, const std::vector<float>& w,
                       const std::vector<float>& x) {
  double s = 0.0;
  const auto cols = static_cast<int64_t>(x.size());
  if (type == PackedType::kQ4_K) return testing::Q4KSplitMagnitudes(row, cols, x);
  if (type == PackedType::kQ5_K) return testing::Q5KSplitMagnitudes(row, cols, x);
  for (size_t k = 0; k < x.size(); ++k) s += std::fabs(double{w[k]} * double{x[k]});
  return s;
}

// How far a float32 evaluation of sum_k t_k may land from the exact sum. Each t_k reaches the
// result through at most cols + 8 roundings of relative size 2^-24 (u): the decoder's own rounding
// of w_k (the reference multiplies the rounded w_k, the kernel may form d sc q x in another
// association), the products of the scales, q and x, and the additions that carry it, at most one
// per value of the row plus the lane sum (4 for 16 lanes). The classic bound on such sums
// (Higham, Accuracy and Stability of Numerical Algorithms, 3.1 and 4.2): |error| <= gamma_m *
// sum_k |t_k|, gamma_m = m u / (1 - m u), with sum_k |t_k| as in SumOfMagnitudes. It is loose (a
// lane-wise sum rounds each term about cols / 16 times, and randomly), but a wrong kernel misses
// it by far: with random signs the dot is about sum_k |t_k| / sqrt(cols), and an error of a whole
// term's size is 2^24 / cols^1.5 (64 at 4096 columns) times the bound.
double DotBound(int64_t cols, double magnitudes) {
  return testing::GammaBound(static_cast<double>(cols + 8), magnitudes);
}

std::vector<int64_t> ColsOf(PackedType type) {
  switch (type) {
    case PackedType::kF16:
    case PackedType::kBF16: return {1, 31, 96, 100, 160, 256, 4096};
    case PackedType::kQ8_0:
    case PackedType::kQ4_0: return {32, 96, 160, 256, 4096};
    case PackedType::kQ4_K:
    case PackedType::kQ5_K:
    case PackedType::kQ6_K: return {256, 768, 4096};
  }
  return {};
}

PackedMatrix Wrap(PackedType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  return MakePackedMatrix("w", type, bytes.data(), static_cast<int64_t>(bytes.size()), rows, cols,
                          nullptr);
}

class PackedTypes : public ::testing::TestWithParam<PackedType> {};

TEST_P(PackedTypes, DequantizeRowsEqualsScalarDecoders) {
  const PackedType type = GetParam();
  Rng rng(11 + static_cast<uint64_t>(type));
  const int64_t rows = 5;
  for (const int64_t cols : ColsOf(type)) {
    const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
    const PackedMatrix m = Wrap(type, bytes, rows, cols);
    // Rows 1 .. 4 (a start after row 0).
    std::vector<float> got(static_cast<size_t>((rows - 1) * cols));
    DequantizeRows(m, 1, rows - 1, got.data());
    for (int64_t r = 1; r < rows; ++r) {
      const std::vector<float> want = ScalarRow(type, m.Row(r), cols);
      const float* g = got.data() + (r - 1) * cols;
      for (int64_t k = 0; k < cols; ++k) {
        // Bits, not ==: a -0 for a +0 would be a different computation.
        uint32_t gb, wb;
        std::memcpy(&gb, g + k, 4);
        std::memcpy(&wb, &want[static_cast<size_t>(k)], 4);
        ASSERT_EQ(gb, wb) << PackedTypeName(type) << " cols " << cols << " row " << r << " value "
                          << k << ": " << g[k] << " vs " << want[static_cast<size_t>(k)];
      }
    }
  }
}

TEST_P(PackedTypes, DotRowsWithinFloatRoundingOfTheDecodedRows) {
  const PackedType type = GetParam();
  Rng rng(23 + static_cast<uint64_t>(type));
  const int64_t rows = 11;  // ranges below: two groups of four and a remainder, or one row alone
  for (const int64_t cols : ColsOf(type)) {
    const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
    const PackedMatrix m = Wrap(type, bytes, rows, cols);
    std::vector<float> x(static_cast<size_t>(cols));
    for (auto& v : x) v = 2.0f * rng.Uniform() - 1.0f;
    std::vector<double> exact(rows), magnitudes(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> w = ScalarRow(type, m.Row(r), cols);
      double s = 0.0;
      for (size_t k = 0; k < x.size(); ++k) s += double{w[k]} * double{x[k]};
      exact[static_cast<size_t>(r)] = s;
      magnitudes[static_cast<size_t>(r)] = SumOfMagnitudes(type, m.Row(r), w, x);
    }
    testing::ExpectRowRanges(
        exact, [&](size_t r) { return DotBound(cols, magnitudes[r]); },
        [&](float beta, float* y, int64_t r0, int64_t r1) {
          PackedDotRows(m, x.data(), beta, y, r0, r1);
        },
        rng, fmt::format("{} cols {}", PackedTypeName(type), cols));
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, PackedTypes,
                         ::testing::Values(PackedType::kF16, PackedType::kBF16, PackedType::kQ8_0,
                                           PackedType::kQ4_0, PackedType::kQ4_K, PackedType::kQ5_K,
                                           PackedType::kQ6_K),
                         [](const auto& info) { return std::string(PackedTypeName(info.param)); });

TEST(MakePackedMatrix, RefusesNonFiniteScales) {
  struct Spot {
    PackedType type;
    int offset;  // of an f16 scale within the block
  };
  const uint16_t bad[] = {0x7c00u, 0xfc00u, 0x7e00u, 0x7d01u};  // +inf, -inf, NaN, signalling NaN
  for (const Spot spot :
       {Spot{PackedType::kQ8_0, 0}, Spot{PackedType::kQ4_0, 0}, Spot{PackedType::kQ4_K, 0},
        Spot{PackedType::kQ4_K, 2}, Spot{PackedType::kQ5_K, 0}, Spot{PackedType::kQ5_K, 2},
        Spot{PackedType::kQ6_K, 208}}) {
    Rng rng(5);
    const int64_t rows = 3, cols = 512;
    std::vector<uint8_t> bytes = RandomRows(spot.type, rows, cols, rng);
    EXPECT_NO_THROW(Wrap(spot.type, bytes, rows, cols));
    for (const uint16_t v : bad) {
      std::vector<uint8_t> broken = bytes;
      // The last block of the second row.
      const int64_t block = 2 * cols / PackedBlockElems(spot.type) - 1;
      PutU16(broken.data() + block * PackedBlockBytes(spot.type) + spot.offset, v);
      EXPECT_THROW(Wrap(spot.type, broken, rows, cols), Error)
          << PackedTypeName(spot.type) << " offset " << spot.offset << " value " << v;
    }
  }
  // F16 and BF16 have no scales: their values are the file's, inf and NaN included.
  std::vector<uint8_t> halves(2 * 32, 0);
  PutU16(halves.data(), 0x7e00u);
  EXPECT_NO_THROW(Wrap(PackedType::kF16, halves, 1, 32));
  EXPECT_NO_THROW(Wrap(PackedType::kBF16, halves, 1, 32));
}

TEST(MakePackedMatrix, RefusesWrongByteCountsAndPartialBlocks) {
  for (const PackedType type :
       {PackedType::kF16, PackedType::kBF16, PackedType::kQ8_0, PackedType::kQ4_0,
        PackedType::kQ4_K, PackedType::kQ5_K, PackedType::kQ6_K}) {
    Rng rng(7);
    const int64_t rows = 2, cols = 256;
    std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
    const auto n = static_cast<int64_t>(bytes.size());
    EXPECT_NO_THROW(MakePackedMatrix("w", type, bytes.data(), n, rows, cols, nullptr));
    EXPECT_THROW(MakePackedMatrix("w", type, bytes.data(), n - 1, rows, cols, nullptr), Error)
        << PackedTypeName(type);
    EXPECT_THROW(MakePackedMatrix("w", type, bytes.data(), n + 1, rows, cols, nullptr), Error)
        << PackedTypeName(type);
    // One row fewer than the bytes hold (a mislabelled shape).
    EXPECT_THROW(MakePackedMatrix("w", type, bytes.data(), n, rows - 1, cols, nullptr), Error)
        << PackedTypeName(type);
    EXPECT_THROW(MakePackedMatrix("w", type, bytes.data(), n, rows, 0, nullptr), Error)
        << PackedTypeName(type);
    if (PackedBlockElems(type) > 1) {  // a row that ends inside a block
      const int64_t part = cols - PackedBlockElems(type) / 2;
      EXPECT_THROW(MakePackedMatrix("w", type, bytes.data(), n, rows, part, nullptr), Error)
          << PackedTypeName(type);
    }
  }
}

TEST(PackedMatrix, RowRangeSharesTheBytes) {
  Rng rng(3);
  const int64_t rows = 6, cols = 256;
  const std::vector<uint8_t> bytes = RandomRows(PackedType::kQ4_K, rows, cols, rng);
  const PackedMatrix m = Wrap(PackedType::kQ4_K, bytes, rows, cols);
  const PackedMatrix sub = m.RowRange(2, 3);
  EXPECT_EQ(sub.rows, 3);
  EXPECT_EQ(sub.Row(0), m.Row(2));
  EXPECT_EQ(sub.Bytes(), 3 * m.RowBytes());
}

}  // namespace
}  // namespace stretch
