#include "src/kernels/gemm.h"

#include <cblas.h>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "src/kernels/attention_simd.h"  // Highway set-up (static target), kPrefetchHint

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {

namespace {

int BlasInt(int64_t n) {
  STRETCH_CHECK(n >= 0 && n <= INT32_MAX, "matrix side {} does not fit a BLAS int", n);
  return static_cast<int>(n);
}

GemmLibrary ChooseLibrary() {
  const char* env = std::getenv("STRETCH_GEMM");
  if (env == nullptr || *env == '\0') return GemmLibrary::kOneDnn;
  const std::string_view v(env);
  if (v == "onednn") return GemmLibrary::kOneDnn;
  if (v == "openblas") return GemmLibrary::kOpenBlas;
  Fail("STRETCH_GEMM: found '{}', expected onednn or openblas (or unset: onednn)", v);
}

const char* IsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

void Check(dnnl_status_t status, const char* what) {
  STRETCH_CHECK(status == dnnl_success, "oneDNN {} failed with status {}", what,
                static_cast<int>(status));
}

namespace hn = hwy::HWY_NAMESPACE;

// y[i] = A[i, :] . x + beta y[i] for rows [0, M): four rows at a time, so that x (in L1) is loaded
// once per four rows and four streams of the matrix are in flight; each row's dot product in one
// vector accumulator of FMAs, lanes summed at the end, the last K % lanes columns added in scalar.
//
// Each step also prefetches the same columns eight rows further on (two blocks ahead: 24 KiB at
// N = 768, 64 KiB at N = 2048), into L2 (kPrefetchHint in attention_simd.h: a non-temporal
// prefetch, into L1 only on Intel, lost those lines before their use and made the 110M decode
// 2.7x slower there). On this project's AMD EPYC machine (AVX-512, 2 threads), `stretch
// bench --case decode`, three rounds alternating the binaries, tokens/s: stories110M shape at
// depth 0, 113-116 without, 125-131 with (+10-15%), and 123-139 with 4 or 16 rows of distance;
// at depth 2048, 68-73 against 72-79; stories15M shape at depth 0, 2,021-2,351 against
// 2,281-2,630. Tried there too and slower in the model: one row after the other (one contiguous
// stream, four accumulators), 97-105 tokens/s at 110M depth 0, although a standalone loop over
// the same matrices favoured it.
void GemvRows(int64_t M, int64_t N, const float* A, const float* x, float beta, float* y) {
  // The address `ahead` bytes on, in integers: past the matrix's end it is no pointer of the
  // program (a prefetch does not fault), and pointer arithmetic beyond an array is undefined.
  const auto ahead = static_cast<uintptr_t>(8 * N) * sizeof(float);
  const auto Prefetch = [](const float* p, uintptr_t bytes) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + bytes), 0,
                       attention_internal::kPrefetchHint);
  };
  const hn::ScalableTag<float> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Nv = N - N % L;
  auto finish = [&](int64_t i, float dot) {
    for (int64_t k = Nv; k < N; ++k) dot += A[i * N + k] * x[k];
    y[i] = beta == 0.0f ? dot : dot + beta * y[i];
  };
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) {
    const float* r0 = A + i * N;
    const float* r1 = r0 + N;
    const float* r2 = r1 + N;
    const float* r3 = r2 + N;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (int64_t k = 0; k < Nv; k += L) {
      const auto xv = hn::LoadU(df, x + k);
      Prefetch(r0 + k, ahead);
      Prefetch(r1 + k, ahead);
      Prefetch(r2 + k, ahead);
      Prefetch(r3 + k, ahead);
      a0 = hn::MulAdd(hn::LoadU(df, r0 + k), xv, a0);
      a1 = hn::MulAdd(hn::LoadU(df, r1 + k), xv, a1);
      a2 = hn::MulAdd(hn::LoadU(df, r2 + k), xv, a2);
      a3 = hn::MulAdd(hn::LoadU(df, r3 + k), xv, a3);
    }
    finish(i, hn::GetLane(hn::SumOfLanes(df, a0)));
    finish(i + 1, hn::GetLane(hn::SumOfLanes(df, a1)));
    finish(i + 2, hn::GetLane(hn::SumOfLanes(df, a2)));
    finish(i + 3, hn::GetLane(hn::SumOfLanes(df, a3)));
  }
  for (; i < M; ++i) {
    const float* r = A + i * N;
    auto a = hn::Zero(df);
    for (int64_t k = 0; k < Nv; k += L)
      a = hn::MulAdd(hn::LoadU(df, r + k), hn::LoadU(df, x + k), a);
    finish(i, hn::GetLane(hn::SumOfLanes(df, a)));
  }
}

}  // namespace

GemmLibrary ActiveGemmLibrary() {
  static const GemmLibrary library = ChooseLibrary();
  return library;
}

std::string GemmKernelsText() {
  if (ActiveGemmLibrary() == GemmLibrary::kOpenBlas) {
    return fmt::format("OpenBLAS sgemm, {} kernels (STRETCH_GEMM=openblas)",
                       openblas_get_corename());
  }
  const dnnl_version_t* v = dnnl_version();
  return fmt::format(
      "oneDNN {}.{}.{} sgemm, {} kernels (from the CPU's feature bits); one-row products: "
      "stretch's own, {}-bit vectors",
      v->major, v->minor, v->patch, IsaName(dnnl_get_effective_cpu_isa()),
      8 * sizeof(float) * hn::Lanes(hn::ScalableTag<float>()));
}

void SgemmOneThread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc) {
  if (ActiveGemmLibrary() == GemmLibrary::kOneDnn) {
    // Row-major, as cblas_sgemm with CblasRowMajor (oneDNN's documented convention).
    Check(dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                     C, ldc),
          "sgemm");
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, BlasInt(M), BlasInt(N), BlasInt(K), alpha, A,
              BlasInt(lda), B, BlasInt(ldb), beta, C, BlasInt(ldc));
}

void SgemvOneThread(int64_t M, int64_t N, const float* A, const float* x, float beta, float* y) {
  if (ActiveGemmLibrary() == GemmLibrary::kOneDnn) {
    GemvRows(M, N, A, x, beta, y);
    return;
  }
  cblas_sgemv(CblasRowMajor, CblasNoTrans, BlasInt(M), BlasInt(N), 1.0f, A, BlasInt(N), x, 1, beta,
              y, 1);
}

}  // namespace stretch
