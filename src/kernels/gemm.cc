#include "src/kernels/gemm.h"

#include <cblas.h>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <string_view>

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
  return fmt::format("oneDNN {}.{}.{} sgemm, {} kernels (from the CPU's feature bits)", v->major,
                     v->minor, v->patch, IsaName(dnnl_get_effective_cpu_isa()));
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
    // y^T (1, M) = x^T (1, N) A^T + beta y^T: a one-row product, which oneDNN runs with its gemv
    // kernels.
    Check(dnnl_sgemm('N', 'T', 1, M, N, 1.0f, x, N, A, N, beta, y, M), "sgemm (one row)");
    return;
  }
  cblas_sgemv(CblasRowMajor, CblasNoTrans, BlasInt(M), BlasInt(N), 1.0f, A, BlasInt(N), x, 1, beta,
              y, 1);
}

}  // namespace stretch
