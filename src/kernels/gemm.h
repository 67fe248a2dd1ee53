// The float matrix products of the engine and the trainer, one single-threaded call each (the
// thread pool splits a product into such calls: src/kernels/ops.cc), from one of two libraries:
//
//   - oneDNN's sgemm (Debian's libdnnl, the default): it generates its kernels at run time for the
//     instruction set the CPU's feature bits (CPUID) report: AVX-512 where the CPU has it, AVX2,
//     else SSE4.1;
//   - OpenBLAS's sgemm: its kernels are chosen from the CPU's model name, which Debian's 0.3.21
//     does not know for recent CPUs (an Intel Xeon with AVX-512, FP16 and BF16 gets its Prescott
//     SSE3 kernels), or from OPENBLAS_CORETYPE where the environment sets it.
//
// Measured on one core of this project's AVX-512 machine, alternating the libraries on the
// products of the stories15M and stories110M shapes (prefill of 512 rows) and of the training
// benchmark (docs/performance.md, issue 14): oneDNN 120-165 GFLOP/s, OpenBLAS 20-32 with the
// kernels it picks by itself, about 70-80 with OPENBLAS_CORETYPE=Haswell and about 150 with
// SkylakeX; with oneDNN held to AVX2 (DNNL_MAX_CPU_ISA=AVX2, what an AVX2-only CPU gets) both
// libraries reach 70-80. So oneDNN is at least as fast everywhere and much faster where OpenBLAS
// misjudges the CPU. OpenBLAS keeps the double products (the gradient checks) and is one
// environment variable away for comparisons: STRETCH_GEMM=openblas.
#pragma once

#include <cstdint>
#include <string>

namespace stretch {

enum class GemmLibrary { kOneDnn, kOpenBlas };

// The library in use: STRETCH_GEMM=onednn|openblas when set (anything else is refused with a
// message), else oneDNN. Decided once per process.
GemmLibrary ActiveGemmLibrary();

// What runs the float products, for `stretch bench` and the benchmarks' headers, e.g.
// "oneDNN 2.6.3 sgemm, avx512_core_bf16 kernels (from the CPU's feature bits)".
std::string GemmKernelsText();

// Row-major C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, K), op(B) (K, N); on the calling
// thread only.
void SgemmOneThread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc);

// y (M) = A (M, N) x (N) + beta y, row-major A; on the calling thread only. With oneDNN chosen,
// a kernel of our own (Highway, four rows at a time): decode is bound by how fast the matrix
// streams from memory, and on this project's AVX-512 machine it streamed the 110M shape's
// matrices at 23.6-26.0 GB/s on 2 threads against 20.7-23.9 for oneDNN's one-row sgemm, and
// 12.7-14.7 against 12.4-14.2 on one (docs/performance.md). With OpenBLAS, its sgemv.
void SgemvOneThread(int64_t M, int64_t N, const float* A, const float* x, float beta, float* y);

}  // namespace stretch
