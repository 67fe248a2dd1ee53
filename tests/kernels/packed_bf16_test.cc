// The bfloat16 products of many rows on BF16 matrices (src/kernels/packed_bf16.h):
//   - RoundRowsToBf16 rounds each value to the nearest bfloat16, ties to even (as half.h narrows);
//   - PackedBf16Rows (the vector kernel where the CPU has AVX512_BF16) and the portable form equal
//     a double-precision dot of the rounded x with the row within float32 rounding of the sums
//     (GammaBound over K + 2 roundings a term: the pairs' running sums, the blocks of K added and
//     beta), on shapes that leave tails of every kind: rows of x beyond the tiles of 8, rows of W
//     beyond the panels of 32, a K beyond the blocks of 2048, row ranges that start after row 0;
//   - the bound is tight enough to tell the rounding of x: the same dots on x unrounded miss it
//     (for K of 64-512; beyond, the worst-case bound outgrows the rounding's random walk);
//   - LinearForward on a packed BF16 matrix takes this kernel for many rows under the default
//     products and the sgemm on decoded panels under STRETCH_PACKED_DOT=float, and reports how far
//     the two lie apart (x's rounding).
// Broken kernels fail here (each tried once): the panel's pair p taken from pair p + 1 of the row;
// the second K block stored over the first instead of added; the tail tile of 7 rows run as 6;
// LinearForward's workers reading a thread_local x of their own (empty: a crash, every time of 3).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kernels/blocks.h"
#include "src/kernels/half.h"
#include "src/kernels/ops.h"
#include "src/kernels/packed.h"
#include "src/kernels/packed_bf16.h"
#include "tests/testing/packed_bounds.h"

namespace stretch {
namespace {

// A (rows, cols) BF16 matrix of normal values (no subnormals, which the instruction flushes).
struct Bf16Matrix {
  std::vector<uint16_t> values;
  PackedMatrix m;
};
Bf16Matrix RandomMatrix(int64_t rows, int64_t cols, Rng& rng) {
  Bf16Matrix out;
  std::vector<float> f(static_cast<size_t>(rows * cols));
  for (float& v : f) v = static_cast<float>(rng.Normal());
  out.values.resize(f.size());
  FloatsToHalves(f.data(), out.values.data(), rows * cols, HalfType::kBF16);
  out.m =
      MakePackedMatrix("w", PackedType::kBF16, reinterpret_cast<const uint8_t*>(out.values.data()),
                       rows * cols * 2, rows, cols, nullptr);
  return out;
}

std::vector<float> RandomX(int64_t n, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = static_cast<float>(rng.Normal());
  return x;
}

TEST(PackedBf16, RoundsXToTheNearestBfloat16) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1); 1 + 3 * 2^-8
  // between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6; just above the first halfway point rounds up.
  const float x[4] = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                      1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), -2.5f};
  std::vector<uint16_t> b;
  RoundRowsToBf16(x, 2, 2, &b);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(BFloat16ToFloat(b[0]), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(b[1]), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(BFloat16ToFloat(b[2]), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(BFloat16ToFloat(b[3]), -2.5f);
}

struct Shape {
  int64_t T, rows, K, r0, r1;
};

using RowsFn = void (*)(const PackedMatrix&, const uint16_t*, int64_t, float, float*, int64_t,
                        int64_t, int64_t);

// Checks `rows` against the double dots of the rounded x (within the bound) and, for the vector
// kernel, that the unrounded x's dots miss the bound somewhere.
void CheckAgainstDoubleDots(RowsFn rows_fn, const char* what) {
  Rng rng(43);
  const Shape shapes[] = {{1, 5, 2, 0, 5},       {7, 33, 64, 0, 33},    {8, 32, 128, 0, 32},
                          {13, 70, 2050, 3, 67}, {20, 40, 4100, 9, 40}, {3, 64, 4096, 32, 64},
                          {17, 100, 256, 1, 99}};
  for (const Shape& s : shapes) {
    const Bf16Matrix w = RandomMatrix(s.rows, s.K, rng);
    const std::vector<float> x = RandomX(s.T * s.K, rng);
    std::vector<uint16_t> xb;
    RoundRowsToBf16(x.data(), s.T, s.K, &xb);
    for (const float beta : {0.0f, 0.5f}) {
      const int64_t n = s.r1 - s.r0, ldy = n + 3;
      std::vector<float> y(static_cast<size_t>(s.T * ldy));
      for (float& v : y) v = static_cast<float>(rng.Normal());
      const std::vector<float> before = y;
      rows_fn(w.m, xb.data(), s.T, beta, y.data(), ldy, s.r0, s.r1);
      int missed_unrounded = 0;
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t r = s.r0; r < s.r1; ++r) {
          double dot = 0, dot_unrounded = 0, magnitudes = 0;
          for (int64_t k = 0; k < s.K; ++k) {
            const double wk = BFloat16ToFloat(w.values[static_cast<size_t>(r * s.K + k)]);
            const double xk = BFloat16ToFloat(xb[static_cast<size_t>(t * s.K + k)]);
            dot += xk * wk;
            dot_unrounded += x[static_cast<size_t>(t * s.K + k)] * wk;
            magnitudes += std::fabs(xk * wk);
          }
          const size_t at = static_cast<size_t>(t * ldy + (r - s.r0));
          const double old = before[at];
          const double expect = dot + beta * old;
          const double bound =
              testing::GammaBound(static_cast<double>(s.K + 2), magnitudes + std::fabs(beta * old));
          ASSERT_LE(std::fabs(y[at] - expect), bound)
              << what << " T " << s.T << " rows " << s.rows << " K " << s.K << " t " << t << " r "
              << r << " beta " << beta;
          if (std::fabs(y[at] - (dot_unrounded + beta * old)) > bound) ++missed_unrounded;
        }
        // The columns of y beyond the row range stay as they were.
        for (int64_t c = n; c < ldy; ++c) {
          const size_t at = static_cast<size_t>(t * ldy + c);
          ASSERT_EQ(y[at], before[at]) << what << " wrote past its rows";
        }
      }
      // (Over thousands of values the worst-case bound grows past x's rounding, which adds up
      // like a random walk: the check holds where it can tell them apart.)
      if (s.K >= 64 && s.K <= 512) {
        EXPECT_GT(missed_unrounded, 0)
            << what << ": the bound does not tell x's rounding, K " << s.K;
      }
    }
  }
}

TEST(PackedBf16, VectorKernelEqualsDoubleDotsOfTheRoundedX) {
  if (!PackedBf16Available())
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (the portable form runs)";
  CheckAgainstDoubleDots(&PackedBf16Rows, "vector kernel");
}

TEST(PackedBf16, OneDnnMatmulEqualsDoubleDotsOfTheRoundedX) {
  if (!PackedBf16Available()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (no bfloat16 products)";
  CheckAgainstDoubleDots(&Bf16MatmulRows, "oneDNN's bfloat16 matmul");
}

TEST(PackedBf16, PortableFormEqualsDoubleDotsOfTheRoundedX) {
  CheckAgainstDoubleDots(&packed_bf16_internal::RowsPortable, "portable form");
}

// The one-row kernel in the shape of the many-row ones: each row of x on its own.
void OneRowAtATime(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                   int64_t ldy, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < T; ++t) PackedBf16DotRows(W, xb + t * W.cols, beta, y + t * ldy, r0, r1);
}

TEST(PackedBf16, OneRowKernelEqualsDoubleDotsOfTheRoundedX) {
  CheckAgainstDoubleDots(&OneRowAtATime, "one-row kernel");
}

TEST(PackedBf16, LinearForwardTakesItForManyRowsUnlessFloat) {
  // Large enough for the product to be split among the pool's threads (each worker must read the
  // caller's rounded x).
  struct Threads {
    int before = NumThreads();
    Threads() { SetNumThreads(2); }
    ~Threads() { SetNumThreads(before); }
  } threads;
  Rng rng(7);
  const int64_t T = 24, K = 512, N = 1000;
  const Bf16Matrix w = RandomMatrix(N, K, rng);
  const std::vector<float> x = RandomX(T * K, rng);
  std::vector<uint16_t> xb;
  RoundRowsToBf16(x.data(), T, K, &xb);
  // The kernel the products choose on this CPU (oneDNN's matmul where it runs on AMX tiles).
  std::vector<float> direct(static_cast<size_t>(T * N));
  (Bf16MatmulForManyRows() ? &Bf16MatmulRows : &PackedBf16Rows)(w.m, xb.data(), T, 0.0f,
                                                                direct.data(), N, 0, N);

  std::vector<float> fast(static_cast<size_t>(T * N)), exact(static_cast<size_t>(T * N));
  {
    const testing::ProductsFor p(PackedProducts::kFast);
    LinearForward<float>(x.data(), WeightRef<float>(&w.m), fast.data(), T, K, N);
  }
  {
    const testing::ProductsFor p(PackedProducts::kFloat);
    LinearForward<float>(x.data(), WeightRef<float>(&w.m), exact.data(), T, K, N);
  }
  double worst = 0, rms = 0, size = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    if (PackedBf16Available()) {
      // The same kernel on the same rows: each output is the same sums in the same order, whichever
      // thread computed it.
      ASSERT_EQ(fast[i], direct[i]) << "output " << i;
    } else {
      ASSERT_EQ(fast[i], exact[i]) << "output " << i << " (no bf16 kernel: the float products)";
    }
    const double d = fast[i] - exact[i];
    worst = std::max(worst, std::fabs(d));
    rms += d * d;
    size += static_cast<double>(exact[i]) * exact[i];
  }
  if (PackedBf16Available()) {
    EXPECT_GT(worst, 0.0) << "the default products did not round x";
  }
  std::printf(
      "bf16 products against float ones, %lld x %lld x %lld: rms difference %.3g of the "
      "outputs' rms, largest %.3g\n",
      static_cast<long long>(T), static_cast<long long>(K), static_cast<long long>(N),
      std::sqrt(rms / size), worst);
}

}  // namespace
}  // namespace stretch
