// The float products of src/kernels/gemm.h against a double-precision product, for every
// transpose pair, strided operands, beta = 0 and 1, and the one-row (gemv) path, with the library
// this process uses (oneDNN unless STRETCH_GEMM says otherwise).
#include "src/kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/rng.h"

namespace stretch {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

// Float sums of K products of unit normals: the error of any summation order is below
// K * 2^-24 * sum |a b| (Higham's bound, gamma_K), which is what each element is held to.
void ExpectGemmMatches(bool ta, bool tb, int M, int N, int K, float alpha, float beta) {
  SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                  << " K=" << K << " beta=" << beta);
  // Leading dimensions larger than the rows: the products must honour the strides.
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
  const std::vector<float> A = Random(static_cast<size_t>(ta ? K : M) * lda, 1);
  const std::vector<float> B = Random(static_cast<size_t>(tb ? N : K) * ldb, 2);
  std::vector<float> C = Random(static_cast<size_t>(M) * ldc, 3);
  const std::vector<float> C0 = C;
  SgemmOneThread(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int k = 0; k < K; ++k) {
        const double a =
            ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        const double b =
            tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        sum += a * b;
        abs_sum += std::abs(a * b);
      }
      const double c0 = C0[static_cast<size_t>(i) * ldc + j];
      const double want = alpha * sum + beta * c0;
      const double tol =
          (K + 2) * 0x1p-24 * (std::abs(alpha) * abs_sum + std::abs(beta * c0)) + 1e-30;
      ASSERT_NEAR(C[static_cast<size_t>(i) * ldc + j], want, tol)
          << "at (" << i << ", " << j << ")";
    }
    for (int j = N; j < ldc; ++j) {  // the padding of C is left alone
      ASSERT_EQ(C[static_cast<size_t>(i) * ldc + j], C0[static_cast<size_t>(i) * ldc + j]);
    }
  }
}

TEST(Gemm, EveryTransposePairAndStrideMatchesDoubleProducts) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      ExpectGemmMatches(ta, tb, 37, 53, 71, 1.0f, 0.0f);
      ExpectGemmMatches(ta, tb, 64, 96, 288, 1.0f, 1.0f);  // the accumulating backward's form
      ExpectGemmMatches(ta, tb, 1, 130, 77, 1.0f, 0.0f);   // one row
      ExpectGemmMatches(ta, tb, 5, 1, 9, 0.5f, 1.0f);      // one column
    }
  }
}

TEST(Gemm, GemvMatchesDoubleProductsWithAndWithoutAddingOntoY) {
  for (auto [M, N] : {std::pair{1, 1}, std::pair{288, 288}, std::pair{513, 77}}) {
    const std::vector<float> A = Random(static_cast<size_t>(M) * N, 4), x = Random(N, 5);
    for (const float beta : {0.0f, 1.0f}) {
      std::vector<float> y(static_cast<size_t>(M), 42.0f);
      SgemvOneThread(M, N, A.data(), x.data(), beta, y.data());
      for (int i = 0; i < M; ++i) {
        double sum = beta * 42.0, abs_sum = beta * 42.0;
        for (int k = 0; k < N; ++k) {
          const double p = static_cast<double>(A[static_cast<size_t>(i) * N + k]) * x[k];
          sum += p;
          abs_sum += std::abs(p);
        }
        ASSERT_NEAR(y[i], sum, (N + 2) * 0x1p-24 * abs_sum)
            << "M=" << M << " N=" << N << " beta=" << beta << " row " << i;
      }
    }
  }
}

TEST(Gemm, NamesTheLibraryAndKernelsThatRun) {
  const std::string text = GemmKernelsText();
  if (ActiveGemmLibrary() == GemmLibrary::kOneDnn) {
    EXPECT_NE(text.find("oneDNN"), std::string::npos) << text;
    EXPECT_EQ(text.find("unknown"), std::string::npos) << text;
  } else {
    EXPECT_NE(text.find("OpenBLAS"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace stretch
