#include "src/kernels/ops.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/threads.h"
#include "src/kernels/attention_simd.h"  // Highway set-up (static target)
#include "src/kernels/gemm.h"
#include "src/kernels/packed_bf16.h"
#include "src/kernels/packed_int8.h"

namespace stretch {

namespace {

// BLAS sizes are int; a larger matrix is a programming error here (weights of the models this
// project trains are far below 2^31 elements per side).
int BlasInt(int64_t n) {
  STRETCH_CHECK(n >= 0 && n <= INT32_MAX, "matrix side {} does not fit a BLAS int", n);
  return static_cast<int>(n);
}

// Float products: oneDNN or OpenBLAS (src/kernels/gemm.h); double: OpenBLAS.
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t Kd, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc) {
  SgemmOneThread(ta == CblasTrans, tb == CblasTrans, M, N, Kd, alpha, A, lda, B, ldb, beta, C, ldc);
}
void BlasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t Kd,
              double alpha, const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
              double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, BlasInt(M), BlasInt(N), BlasInt(Kd), alpha, A, BlasInt(lda), B,
              BlasInt(ldb), beta, C, BlasInt(ldc));
}
void BlasGemv(int64_t M, int64_t N, const float* A, const float* x, float beta, float* y) {
  SgemvOneThread(M, N, A, x, beta, y);
}
void BlasGemv(int64_t M, int64_t N, const double* A, const double* x, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, BlasInt(M), BlasInt(N), 1.0, A, BlasInt(N), x, 1, beta,
              y, 1);
}

// Matrix products are split by the thread pool (src/core/threads.h), each block one
// single-threaded call (oneDNN or OpenBLAS: src/kernels/gemm.h): along the rows of C when it has
// more rows than columns, else along its columns, never along the summed dimension. An sgemm
// (OpenBLAS's was measured) does not give bit-identical
// elements for different call shapes (the same rows computed as one call or as two blocks differ
// in the last bits, measured: up to 7.5e-5 in a per-token loss of scripts/golden.sh), so a split
// product is equal to the unsplit one within float32 rounding, as OpenBLAS's own threading was. Below kSplitMacs multiply-adds one call does it all; a block
// has at least kMinBlock rows (columns), so that BLAS's packing of the other operand, repeated per
// block, stays small beside the block's arithmetic. The split is along the larger of M and N: the
// operand each block repacks is then the smaller one.
constexpr int64_t kSplitMacs = int64_t{1} << 18;
// A matrix-vector product reads its matrix once: split from 128 KiB of matrix on (decode of a
// dim-288 model splits its 288 x 288 products).
constexpr int64_t kSplitGemvMacs = int64_t{1} << 15;
constexpr int64_t kMinBlock = 64;

// One block per thread: each block repacks the operand it shares with the others, so fewer blocks
// is faster on a quiet machine (stories110M shape, prefill 512, 2 threads, against OpenBLAS's own
// threading, wall-time ratios: 0.97 with 1 block per thread, 1.01 with 2, 1.02-1.06 with 4),
// and beside a busy neighbour 1 and 2 blocks per thread measured alike (stretch bench --contended).
inline int64_t GemmGrain(int64_t n) { return std::max<int64_t>(kMinBlock, n / NumThreads()); }

// Row-major C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, Kd), op(B) (Kd, N).
template <typename Real>
void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t Kd, Real alpha,
          const Real* A, int64_t lda, const Real* B, int64_t ldb, Real beta, Real* C, int64_t ldc) {
  threads_internal::SingleThreadedBlas();
  if (M * N * Kd < kSplitMacs || InParallelRegion() || NumThreads() == 1) {
    return BlasGemm(ta, tb, M, N, Kd, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  if (M >= N) {  // rows of C: rows of op(A)
    ParallelFor(M, GemmGrain(M), [&](int64_t i0, int64_t i1) {
      const Real* a = ta == CblasNoTrans ? A + i0 * lda : A + i0;
      BlasGemm(ta, tb, i1 - i0, N, Kd, alpha, a, lda, B, ldb, beta, C + i0 * ldc, ldc);
    });
  } else {  // columns of C: columns of op(B)
    ParallelFor(N, GemmGrain(N), [&](int64_t j0, int64_t j1) {
      const Real* b = tb == CblasNoTrans ? B + j0 : B + j0 * ldb;
      BlasGemm(ta, tb, M, j1 - j0, Kd, alpha, A, lda, b, ldb, beta, C + j0, ldc);
    });
  }
}

// y (M) = A (M, N) x (N) + beta y, row-major A, split along the rows of A.
template <typename Real>
void Gemv(int64_t M, int64_t N, const Real* A, const Real* x, Real beta, Real* y) {
  threads_internal::SingleThreadedBlas();
  if (M * N < kSplitGemvMacs || InParallelRegion() || NumThreads() == 1) {
    return BlasGemv(M, N, A, x, beta, y);
  }
  ParallelFor(M, kMinBlock,
              [&](int64_t i0, int64_t i1) { BlasGemv(i1 - i0, N, A + i0 * N, x, beta, y + i0); });
}

// Rows of a packed matrix decoded per sgemm call in a product of many rows: at least 128 (the
// sgemm repacks x for every call, so a thin panel would repack it too often), else about 4 MiB of
// floats, which stay in the cache between their decoding and their use.
int64_t PackedPanelRows(int64_t K) {
  return std::max<int64_t>(128, ((int64_t{1} << 20) / std::max<int64_t>(K, 1)) / 16 * 16);
}

// The PackedProducts setting (ops.h), from STRETCH_PACKED_DOT at the first use.
std::atomic<int>& PackedProductsSetting() {
  static std::atomic<int> setting = [] {
    const char* env = std::getenv("STRETCH_PACKED_DOT");
    const std::string_view v = env == nullptr ? "" : env;
    if (v.empty() || v == "fast" || v == "decode") return static_cast<int>(PackedProducts::kFast);
    if (v == "float") return static_cast<int>(PackedProducts::kFloat);
    if (v == "int8") return static_cast<int>(PackedProducts::kInt8WhereAvailable);
    Fail("STRETCH_PACKED_DOT: found '{}', expected fast, float or int8 (or unset: fast)", v);
  }();
  return setting;
}

// Whether the products of `type` (of one row, or of many) run on x quantized to 8 bits
// (src/kernels/packed_int8.h, as llama.cpp's CPU backend multiplies): where this build has the
// vector kernels (AVX-512 VNNI) and the setting (PackedProducts) allows. They stream Q4_K at 22-30
// GB/s of a matrix against 17 for the float kernels of packed_dot.cc, and Q6_K at 22-27 against
// 11-13 (one thread, 14336 x 4096 and its transpose, medians of 15, on this project's AMD EPYC);
// the float kernels keep the packed path's exact form.
bool Int8Products(PackedType type, bool one_row) {
  const PackedProducts p = ActivePackedProducts();
  return (p == PackedProducts::kInt8WhereAvailable || (one_row && p == PackedProducts::kFast)) &&
         PackedInt8Available(type);
}

// Whether a product of many rows on `W` runs in bfloat16 (src/kernels/packed_bf16.h): a BF16
// matrix of an even width, where this build has the kernel and the setting is not kFloat. On 512
// rows of x times an 8192 x 2048 matrix it multiplies at about twice the sgemm's rate on one core
// of this project's AMD EPYC (320-345 against 140-180 GFLOP/s).
bool Bf16Products(const PackedMatrix& W) {
  return W.type == PackedType::kBF16 && W.cols % 2 == 0 &&
         ActivePackedProducts() != PackedProducts::kFloat && PackedBf16Available();
}

// x as a one-row product on a packed matrix multiplies it: quantized to 8 bits for the integer
// products, rounded to bfloat16 for the BF16 ones, or neither (the float kernels on x itself).
struct RoundedX {
  const QuantizedInput* int8 = nullptr;
  const uint16_t* bf16 = nullptr;
};

// x rounded for W's one-row product (in the calling thread's slot `slot`, which the product's
// workers read through the pointers).
RoundedX RoundedFor(const PackedMatrix& W, const float* x, int slot) {
  thread_local std::array<QuantizedInput, 4> slots;
  thread_local std::array<std::vector<uint16_t>, 4> bf16_slots;
  RoundedX out;
  if (Int8Products(W.type, true)) {
    QuantizedInput& q = slots.at(static_cast<size_t>(slot));
    QuantizeInput(x, W.cols, W.type, &q);
    out.int8 = &q;
  } else if (Bf16Products(W)) {
    std::vector<uint16_t>& b = bf16_slots.at(static_cast<size_t>(slot));
    RoundRowsToBf16(x, 1, W.cols, &b);
    out.bf16 = b.data();
  }
  return out;
}

// Rows r0 .. r1 - 1 of a one-row product on a packed matrix, on x as `xr` rounds it.
void PackedRows(const PackedMatrix& W, const float* x, RoundedX xr, float beta, float* y,
                int64_t r0, int64_t r1) {
  if (xr.int8 != nullptr) return PackedDotRowsInt8(W, *xr.int8, beta, y, r0, r1);
  if (xr.bf16 != nullptr) return PackedBf16DotRows(W, xr.bf16, beta, y, r0, r1);
  PackedDotRows(W, x, beta, y, r0, r1);
}

// y (T, N) = x (T, K) W^T + beta y with W kept in its file's type (src/kernels/packed.h).
void PackedLinear(const float* x, const PackedMatrix& W, float beta, float* y, int64_t T, int64_t K,
                  int64_t N) {
  STRETCH_CHECK(W.rows == N && W.cols == K, "packed {} matrix ({}, {}) used as ({}, {})",
                PackedTypeName(W.type), W.rows, W.cols, N, K);
  threads_internal::SingleThreadedBlas();
  const bool one_call = InParallelRegion() || NumThreads() == 1;
  if (T == 1) {
    const RoundedX xq = RoundedFor(W, x, 0);
    if (one_call || N * K < kSplitGemvMacs) return PackedRows(W, x, xq, beta, y, 0, N);
    ParallelFor(N, kMinBlock,
                [&](int64_t i0, int64_t i1) { PackedRows(W, x, xq, beta, y + i0, i0, i1); });
    return;
  }
  if (Bf16Products(W)) {
    // x rounded once, in the calling thread; the workers read it.
    // (The workers take the pointer: a thread_local named in the lambda would be their own.)
    thread_local std::vector<uint16_t> rounded;
    RoundRowsToBf16(x, T, K, &rounded);
    const uint16_t* xb = rounded.data();
    const auto kernel = Bf16MatmulForManyRows() ? &Bf16MatmulRows : &PackedBf16Rows;
    auto rows = [&](int64_t j0, int64_t j1) { kernel(W, xb, T, beta, y + j0, N, j0, j1); };
    if (one_call || T * N * K < kSplitMacs) return rows(0, N);
    ParallelFor(N, std::max<int64_t>(32, GemmGrain(N)), rows);
    return;
  }
  if (Int8Products(W.type, false)) {
    // The rows of x as the integer products see them (each quantized for W's type and read
    // back): the sgemm then computes what T one-row integer products give, within float32
    // rounding, as llama.cpp's CPU backend quantizes every row of its products; prefill and
    // decode agree.
    thread_local std::vector<float> rounded;
    thread_local QuantizedInput q;
    rounded.resize(static_cast<size_t>(T * K));
    for (int64_t t = 0; t < T; ++t) {
      QuantizeInput(x + t * K, K, W.type, &q);
      for (int64_t k = 0; k < K; ++k) rounded[static_cast<size_t>(t * K + k)] = q.Value(k);
    }
    x = rounded.data();
  }
  const int64_t panel = std::min(N, PackedPanelRows(K));
  auto rows = [&](int64_t j0, int64_t j1) {
    thread_local std::vector<float> buffer;
    for (int64_t p0 = j0; p0 < j1; p0 += panel) {
      const int64_t n = std::min(panel, j1 - p0);
      buffer.resize(static_cast<size_t>(n * K));
      DequantizeRows(W, p0, n, buffer.data());
      SgemmOneThread(false, true, T, n, K, 1.0f, x, K, buffer.data(), K, beta, y + p0, N);
    }
  };
  if (one_call || T * N * K < kSplitMacs) return rows(0, N);
  ParallelFor(N, std::max(panel, GemmGrain(N)), rows);
}

}  // namespace

void SetPackedProducts(PackedProducts p) { PackedProductsSetting() = static_cast<int>(p); }

std::string PackedProductsText() {
  const PackedProducts p = ActivePackedProducts();
  if (p == PackedProducts::kFloat) {
    return "STRETCH_PACKED_DOT=float: every type in floats (blocks decoded in registers for one "
           "row, the sgemm on decoded panels for many)";
  }
  std::string s =
      p == PackedProducts::kFast ? "STRETCH_PACKED_DOT=fast: " : "STRETCH_PACKED_DOT=int8: ";
  if (PackedBf16Available()) {
    s += Bf16MatmulForManyRows()
             ? "BF16 x rounded to bfloat16 (many rows: oneDNN's bfloat16 matmul; one row: "
               "VDPBF16PS); "
             : "BF16 x rounded to bfloat16 (VDPBF16PS); ";
  } else {
    s += "BF16 in floats (no AVX512_BF16); ";
  }
  if (PackedInt8Available(PackedType::kQ8_0)) {
    s += p == PackedProducts::kFast
             ? "Q8_0, Q4_K, Q6_K decode on 8-bit x (VNNI), their prefill in floats; "
             : "Q8_0, Q4_K, Q6_K on 8-bit x (VNNI decode, sgemm on the quantized rows for "
               "prefill); ";
  } else {
    s += "Q8_0, Q4_K, Q6_K in floats (no AVX-512 VNNI); ";
  }
  return s + "other types in floats";
}
PackedProducts ActivePackedProducts() {
  return static_cast<PackedProducts>(PackedProductsSetting().load());
}

namespace {

// y (T, N) = x (T, K) W^T + beta y.
template <typename Real>
void Linear(const Real* x, WeightArg<Real> W, Real beta, Real* y, int64_t T, int64_t K, int64_t N) {
  if (W.packed != nullptr) {
    if constexpr (std::is_same_v<Real, float>) {
      return PackedLinear(x, *W.packed, beta, y, T, K, N);
    } else {
      STRETCH_CHECK(false, "a packed matrix in a {}-byte product", sizeof(Real));
    }
  }
  if (T == 1) {  // gemv for one row
    Gemv(N, K, W.data, x, beta, y);
    return;
  }
  Gemm(CblasNoTrans, CblasTrans, T, N, K, Real(1), x, K, W.data, K, beta, y, N);
}

}  // namespace

void MatMulRows(const float* x, const float* w, float* y, int64_t T, int64_t K, int64_t N) {
  Linear(x, w, 0.0f, y, T, K, N);
}

// The inference forms are the float training forwards (one code path: bit for bit the same).
void RmsNorm(const float* x, const float* w, float* out, int64_t T, int C, float eps) {
  RmsNormForward<float>(x, w, out, T, C, eps);
}

void SwiGlu(float* gate, const float* up, int64_t n) { SwiGluForward<float>(gate, up, gate, n); }

void AddInPlace(float* a, const float* b, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 262144), [&](int64_t i_begin, int64_t i_end) {
    for (int64_t i = i_begin; i < i_end; ++i) a[i] += b[i];
  });
}

namespace {

namespace hv = hwy::HWY_NAMESPACE;

// RotatePairs with sin multiplied by sign (+1: the rotation; -1: its inverse, the backward), the
// one float rotation of the project (inference, the training forward and backward, the attention
// kernel's rotated queries), so they agree bit for bit. Each result is rounded as the scalar loop
// it replaced was compiled (g++ -O2 on x86 with FMA: one product rounded, then a fused
// multiply-add):
//   y0 = fma(x0, cos, -(x1 sn)),  y1 = fma(x0, sn, x1 cos),  sn = sign sin.
// On vectors of L floats (L / 2 pairs): X = (x0, x1, ...), Xs = X with each pair swapped, C = the
// cos of each pair twice, S = (-sn, sn, ...); MulAdd(X, C, Xs S) gives y0 in the even lanes and
// MulAdd(Xs, S, X C) gives y1 in the odd ones. The last pairs (fewer than L) go through the same
// vector code on a zero-padded copy, so every pair is rounded alike whatever the row's length and
// whether or not the target has a fused multiply-add (without one, MulAdd rounds twice).
void RotatePairsSigned(float* HWY_RESTRICT x, int pairs, const float* HWY_RESTRICT cos,
                       const float* HWY_RESTRICT sin, float sign) {
#if HWY_TARGET == HWY_SCALAR
  for (int t = 0; t < pairs; ++t) {  // no lanes to pair up (every caller goes through here)
    const float x0 = x[2 * t], x1 = x[2 * t + 1], c = cos[t], sn = sign * sin[t];
    x[2 * t] = x0 * c - x1 * sn;
    x[2 * t + 1] = x0 * sn + x1 * c;
  }
#else
  const hv::ScalableTag<float> df;
  const hv::RebindToSigned<decltype(df)> di;
  using VF = hv::Vec<decltype(df)>;
  const int L = static_cast<int>(hv::Lanes(df));
  // Lane i of the low half takes pair i / 2 of L pairs, of the high half pair L / 2 + i / 2.
  const auto half_idx = hv::ShiftRight<1>(hv::Iota(di, 0));
  const auto idx_lo = hv::IndicesFromVec(df, half_idx);
  const auto idx_hi = hv::IndicesFromVec(df, hv::Add(half_idx, hv::Set(di, L / 2)));
  const VF vsign = hv::OddEven(hv::Set(df, sign), hv::Set(df, -sign));
  auto half = [&](float* HWY_RESTRICT px, const decltype(idx_lo)& idx, VF cv, VF sv) HWY_ATTR {
    const VF c = hv::TableLookupLanes(cv, idx);
    const VF s = hv::Mul(hv::TableLookupLanes(sv, idx), vsign);
    const VF xv = hv::LoadU(df, px);
    const VF xs = hv::Shuffle2301(xv);
    const VF even = hv::MulAdd(xv, c, hv::Mul(xs, s));
    const VF odd = hv::MulAdd(xs, s, hv::Mul(xv, c));
    hv::StoreU(hv::OddEven(odd, even), df, px);
  };
  auto step = [&](float* HWY_RESTRICT px, const float* HWY_RESTRICT pc,
                  const float* HWY_RESTRICT ps) HWY_ATTR {  // L pairs: two vectors of x
    const VF cv = hv::LoadU(df, pc), sv = hv::LoadU(df, ps);
    half(px, idx_lo, cv, sv);
    half(px + L, idx_hi, cv, sv);
  };
  int t = 0;
  for (; t + L <= pairs; t += L) step(x + 2 * t, cos + t, sin + t);
  if (t < pairs) {
    constexpr int kMax = HWY_MAX_BYTES / sizeof(float);
    HWY_ALIGN float xb[2 * kMax] = {}, cb[kMax] = {}, sb[kMax] = {};
    const int n = pairs - t;
    std::copy(x + 2 * t, x + 2 * pairs, xb);
    std::copy(cos + t, cos + pairs, cb);
    std::copy(sin + t, sin + pairs, sb);
    step(xb, cb, sb);
    std::copy(xb, xb + 2 * n, x + 2 * t);
  }
#endif
}

}  // namespace

void RotatePairs(float* x, int pairs, const float* cos, const float* sin) {
  RotatePairsSigned(x, pairs, cos, sin, 1.0f);
}

void RopeInterleaved(float* x, int64_t T, int heads, int64_t row_stride, int64_t head_stride,
                     const RopeTable& table) {
  STRETCH_CHECK(table.n == T, "rope table has {} rows for {} rows", table.n, T);
  const int pairs = table.pairs;
  ParallelFor(T, WorkGrain(T, T * heads * pairs, 65536), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const float* c = table.cos.data() + r * pairs;
      const float* s = table.sin.data() + r * pairs;
      for (int h = 0; h < heads; ++h)
        RotatePairs(x + r * row_stride + h * head_stride, pairs, c, s);
    }
  });
}

TokenLoss CrossEntropyRow(const float* logits, int V, int target) {
  STRETCH_CHECK(target >= 0 && target < V, "target {} outside vocabulary of {}", target, V);
  int argmax = 0;
  float max = logits[0];
  for (int i = 1; i < V; ++i) {
    if (logits[i] > max) {
      max = logits[i];
      argmax = i;
    }
  }
  double sum = 0.0;
  for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  return {std::log(sum) - (static_cast<double>(logits[target]) - max), argmax};
}

// ---------------------------------------------------------------------------------------------
// Training: Forward/Backward pairs.

namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Column sums over rows in blocks of kColumnBlock channels: threads split the channels, each
// element's sum runs over the rows in order, in double (the same result for every thread count,
// and no race where rows share a parameter). 16 floats are one 64-byte cache line.
constexpr int kColumnBlock = 16;

// The forward's 1 / rms of one row: the sum of squares in double, rounded to Real once.
template <typename Real>
Real InvRms(const Real* xr, int C, Real eps) {
  double ss = 0.0;
  for (int c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
  return static_cast<Real>(1.0 / std::sqrt(ss / C + eps));
}
// Float rows: the same sum on vectors of doubles (floats widened), four accumulators, then the
// remainder; another order of the double additions than the scalar loop, so the two may differ in
// the last bit of a double, far below the float the result is rounded to.
template <>
float InvRms<float>(const float* xr, int C, float eps) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int L = static_cast<int>(hn::Lanes(dd));
  auto s0 = hn::Zero(dd), s1 = hn::Zero(dd), s2 = hn::Zero(dd), s3 = hn::Zero(dd);
  int c = 0;
  for (; c + 4 * L <= C; c += 4 * L) {
    const auto a = hn::PromoteTo(dd, hn::LoadU(df, xr + c));
    const auto b = hn::PromoteTo(dd, hn::LoadU(df, xr + c + L));
    const auto e = hn::PromoteTo(dd, hn::LoadU(df, xr + c + 2 * L));
    const auto f = hn::PromoteTo(dd, hn::LoadU(df, xr + c + 3 * L));
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
    s2 = hn::MulAdd(e, e, s2);
    s3 = hn::MulAdd(f, f, s3);
  }
  double ss = hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
  return static_cast<float>(1.0 / std::sqrt(ss / C + eps));
}

// h[i] = silu(g[i]) * u[i] (u null: silu alone), silu(g) = g / (1 + exp(-g)), for floats on
// vectors with ExpF. g > 87.33 gives exp(-g) = 0 and silu = g; g < -88.72 gives exp(-g) = inf
// and silu = -0, as with std::exp. A partial last vector goes through a padded copy, so every
// element is computed by the same code whatever the split.
void SiluTimesFloat(const float* g, const float* u, float* h, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  auto one_vector = [&](const float* gp, const float* up, float* hp) {
    const auto gv = hn::LoadU(df, gp);
    auto y = hn::Div(gv, hn::Add(one, attention_internal::ExpF(df, hn::Neg(gv))));
    if (up != nullptr) y = hn::Mul(y, hn::LoadU(df, up));
    hn::StoreU(y, df, hp);
  };
  int64_t i = 0;
  for (; i + L <= n; i += L) one_vector(g + i, u == nullptr ? nullptr : u + i, h + i);
  if (i < n) {
    float gb[64] = {}, ub[64] = {}, hb[64];
    static_assert(sizeof(gb) / sizeof(float) >= HWY_MAX_BYTES / sizeof(float));
    std::copy(g + i, g + n, gb);
    if (u != nullptr) std::copy(u + i, u + n, ub);
    one_vector(gb, u == nullptr ? nullptr : ub, hb);
    std::copy(hb, hb + (n - i), h + i);
  }
}

// The backward of h = silu(g) * u (u null: of h = silu(g)), for floats on vectors with ExpF, as
// the scalar loops of SwiGluBackward and SiluBackward compute it:
//   s = 1 / (1 + exp(-g));  du = dh * (g * s);  dg = dh * u * (s * (1 + g * (1 - s)))
// (with no u: dg = dh * (s * (1 + g * (1 - s)))).
// exp(-g) = inf for g < -88.72 gives s = 0 and du, dg zeros (signed by dh), as std::exp does. Every vector is
// read before it is written, so dg may be dh or g; a partial last vector goes through a padded
// copy.
void SiluBackwardFloat(const float* dh, const float* g, const float* u, float* dg, float* du,
                       int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  auto one_vector = [&](const float* dhp, const float* gp, const float* up, float* dgp,
                        float* dup) {
    const auto dhv = hn::LoadU(df, dhp), gv = hn::LoadU(df, gp);
    const auto sv = hn::Div(one, hn::Add(one, attention_internal::ExpF(df, hn::Neg(gv))));
    const auto dsilu = hn::Mul(sv, hn::Add(one, hn::Mul(gv, hn::Sub(one, sv))));
    if (up == nullptr) {
      hn::StoreU(hn::Mul(dhv, dsilu), df, dgp);
      return;
    }
    const auto uv = hn::LoadU(df, up);
    hn::StoreU(hn::Mul(dhv, hn::Mul(gv, sv)), df, dup);
    hn::StoreU(hn::Mul(hn::Mul(dhv, uv), dsilu), df, dgp);
  };
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    one_vector(dh + i, g + i, u == nullptr ? nullptr : u + i, dg + i,
               du == nullptr ? nullptr : du + i);
  }
  if (i < n) {
    float dhb[64] = {}, gb[64] = {}, ub[64] = {}, dgb[64], dub[64];
    static_assert(sizeof(gb) / sizeof(float) >= HWY_MAX_BYTES / sizeof(float));
    std::copy(dh + i, dh + n, dhb);
    std::copy(g + i, g + n, gb);
    if (u != nullptr) std::copy(u + i, u + n, ub);
    one_vector(dhb, gb, u == nullptr ? nullptr : ub, dgb, dub);
    std::copy(dgb, dgb + (n - i), dg + i);
    if (u != nullptr) std::copy(dub, dub + (n - i), du + i);
  }
}

}  // namespace

// ---- Linear ----------------------------------------------------------------------------------

template <typename Real>
void LinearForward(const Real* x, WeightArg<Real> W, Real* y, int64_t T, int64_t K, int64_t N) {
  Linear(x, W, Real(0), y, T, K, N);  // as MatMulRows
}

template <typename Real>
void LinearForwardShared(const Real* x, std::span<const LinearOut<Real>> outs, int64_t T,
                         int64_t K) {
  int64_t rows = 0;
  for (const LinearOut<Real>& o : outs) rows += o.N;
  threads_internal::SingleThreadedBlas();
  if (T != 1 || rows * K < kSplitGemvMacs || InParallelRegion() || NumThreads() == 1) {
    for (const LinearOut<Real>& o : outs) LinearForward(x, o.W, o.y, T, K, o.N);
    return;
  }
  // Rows r0 .. r1 of the outputs stacked: each block is one gemv per output it overlaps. A row's
  // dot product does not depend on the block it falls in, so this equals the products one by one.
  std::array<RoundedX, 4> quantized{};
  if constexpr (std::is_same_v<Real, float>) {
    STRETCH_CHECK(outs.size() <= quantized.size(), "{} products of one input", outs.size());
    for (size_t j = 0; j < outs.size(); ++j) {
      if (outs[j].W.packed != nullptr) {
        quantized[j] = RoundedFor(*outs[j].W.packed, x, static_cast<int>(j));
      }
    }
  }
  ParallelFor(rows, kMinBlock, [&](int64_t r0, int64_t r1) {
    int64_t base = 0;
    for (size_t j = 0; j < outs.size(); ++j) {
      const LinearOut<Real>& o = outs[j];
      const int64_t a = std::max(r0, base), b = std::min(r1, base + o.N);
      if (a >= b) {
      } else if (o.W.packed != nullptr) {
        if constexpr (std::is_same_v<Real, float>) {
          PackedRows(*o.W.packed, x, quantized[j], 0.0f, o.y + (a - base), a - base, b - base);
        }
      } else {
        BlasGemv(b - a, K, o.W.data + (a - base) * K, x, Real(0), o.y + (a - base));
      }
      base += o.N;
    }
  });
}

template <typename Real>
void LinearForwardAdd(const Real* x, WeightArg<Real> W, Real* y, int64_t T, int64_t K, int64_t N) {
  Linear(x, W, Real(1), y, T, K, N);
}

template <typename Real>
void LinearBackward(const Real* dy, const Real* x, const Real* W, Real* dx, Real* dW, int64_t T,
                    int64_t K, int64_t N, GradWrite dx_write) {
  // forward: y[t][n] = sum_k x[t][k] W[n][k];  so: dx[t][k] (+)= sum_n dy[t][n] W[n][k]
  if (dx != nullptr) {
    const Real beta = dx_write == GradWrite::kAccumulate ? Real(1) : Real(0);
    Gemm(CblasNoTrans, CblasNoTrans, T, K, N, Real(1), dy, N, W, K, beta, dx, K);
  }
  // forward: y[t][n] = sum_k x[t][k] W[n][k];  so: dW[n][k] += sum_t dy[t][n] x[t][k]
  Gemm(CblasTrans, CblasNoTrans, N, K, T, Real(1), dy, N, x, K, Real(1), dW, K);
}

// ---- Embedding -------------------------------------------------------------------------------

template <typename Real>
void EmbeddingForward(const int* tokens, const Real* E, Real* out, int64_t T, int C, int V) {
  for (int64_t t = 0; t < T; ++t) {
    STRETCH_CHECK(tokens[t] >= 0 && tokens[t] < V, "token {} at row {} outside vocabulary of {}",
                  tokens[t], t, V);
  }
  ParallelFor(T, WorkGrain(T, T * C, 262144), [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const Real* e = E + static_cast<int64_t>(tokens[t]) * C;
      Real* o = out + t * C;
      for (int c = 0; c < C; ++c) o[c] = e[c];
    }
  });
}

template <typename Real>
void EmbeddingBackward(const int* tokens, const Real* dout, Real* dE, int64_t T, int C, int V) {
  for (int64_t t = 0; t < T; ++t) {
    STRETCH_CHECK(tokens[t] >= 0 && tokens[t] < V, "token {} at row {} outside vocabulary of {}",
                  tokens[t], t, V);
  }
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
  // forward: out[t][c] = E[tokens[t]][c];  so: dE[tokens[t]][c] += dout[t][c]
  ParallelFor(blocks, WorkGrain(blocks, T * C, 65536), [&](int64_t b_begin, int64_t b_end) {
    for (int b = static_cast<int>(b_begin); b < b_end; ++b) {
      const int c0 = b * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
      for (int64_t t = 0; t < T; ++t) {
        const Real* d = dout + t * C;
        Real* e = dE + static_cast<int64_t>(tokens[t]) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
    }
  });
}

// ---- RMSNorm ---------------------------------------------------------------------------------

template <typename Real>
void RmsNormForward(const Real* x, const Real* w, Real* out, int64_t T, int C, Real eps) {
  ParallelFor(T, WorkGrain(T, T * C, 65536), [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const Real* xr = x + t * C;
      Real* yr = out + t * C;
      const Real inv = InvRms(xr, C, eps);
      int c = 0;
      if constexpr (std::is_same_v<Real, float>) {  // (x inv) w on vectors, as the loop below
        const hn::ScalableTag<float> df;
        const int L = static_cast<int>(hn::Lanes(df));
        const auto vinv = hn::Set(df, inv);
        for (; c + L <= C; c += L) {
          hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, xr + c), vinv), hn::LoadU(df, w + c)), df,
                     yr + c);
        }
      }
      for (; c < C; ++c) yr[c] = xr[c] * inv * w[c];
    }
  });
}

template <typename Real>
void RmsNormBackward(const Real* dout, const Real* x, const Real* w, Real* dx, Real* dw, int64_t T,
                     int C, Real eps, GradWrite dx_write) {
  std::vector<Real> inv(static_cast<size_t>(T));  // the forward's inv of each row, recomputed
  ParallelFor(T, WorkGrain(T, T * C, 65536), [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t)
      inv[static_cast<size_t>(t)] = InvRms(x + t * C, C, eps);
  });
  // dw before dx: dx may overwrite dout. Threads split the channels (rows share dw).
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
  ParallelFor(blocks, WorkGrain(blocks, T * C, 65536), [&](int64_t b_begin, int64_t b_end) {
    for (int b = static_cast<int>(b_begin); b < b_end; ++b) {
      const int c0 = b * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
      double acc[kColumnBlock] = {};
      for (int64_t t = 0; t < T; ++t) {
        const Real* xr = x + t * C;
        const Real* dr = dout + t * C;
        const double it = inv[static_cast<size_t>(t)];
        // forward: out[c] = x[c] * inv * w[c];  so: dw[c] += dout[c] * x[c] * inv
        for (int c = c0; c < c1; ++c) acc[c - c0] += static_cast<double>(dr[c]) * xr[c] * it;
      }
      for (int c = c0; c < c1; ++c) dw[c] += static_cast<Real>(acc[c - c0]);
    }
  });
  ParallelFor(T, WorkGrain(T, T * C, 65536), [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const Real* xr = x + t * C;
      const Real* dr = dout + t * C;
      Real* dxr = dx + t * C;
      const Real it = inv[static_cast<size_t>(t)];
      // forward: out[c] = x[c] * inv * w[c], inv = (sum_j x[j]^2 / C + eps)^(-1/2)
      // so: dx[j] = inv * dout[j] w[j] + sum_c dout[c] w[c] x[c] * (-inv^3 x[j] / C)
      //           = inv * (dout[j] w[j] - x[j] * coef),  coef = inv^2 * S / C
      double S = 0.0;
      for (int c = 0; c < C; ++c) S += static_cast<double>(dr[c]) * w[c] * xr[c];
      const Real coef = static_cast<Real>(static_cast<double>(it) * it * S / C);
      if (dx_write == GradWrite::kAccumulate) {
        for (int c = 0; c < C; ++c) dxr[c] += it * (dr[c] * w[c] - xr[c] * coef);
      } else {
        for (int c = 0; c < C; ++c) dxr[c] = it * (dr[c] * w[c] - xr[c] * coef);
      }
    }
  });
}

// ---- SwiGLU ----------------------------------------------------------------------------------

template <typename Real>
void GeluTanhForward(const Real* g, const Real* u, Real* h, int64_t n) {
  const Real k = static_cast<Real>(0.7978845608028654);  // sqrt(2 / pi)
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    for (int64_t i = i_begin; i < i_end; ++i) {
      const Real x = g[i];
      h[i] = Real(0.5) * x * (Real(1) + std::tanh(k * (x + Real(0.044715) * x * x * x))) * u[i];
    }
  });
}

template <typename Real>
void SwiGluForward(const Real* g, const Real* u, Real* h, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    if constexpr (std::is_same_v<Real, float>) {
      SiluTimesFloat(g + i_begin, u + i_begin, h + i_begin, i_end - i_begin);
    } else {
      for (int64_t i = i_begin; i < i_end; ++i) {
        const Real gi = g[i];
        h[i] = gi / (Real(1) + std::exp(-gi)) * u[i];
      }
    }
  });
}

template <typename Real>
void SwiGluBackward(const Real* dh, const Real* g, const Real* u, Real* dg, Real* du, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    if constexpr (std::is_same_v<Real, float>) {
      SiluBackwardFloat(dh + i_begin, g + i_begin, u + i_begin, dg + i_begin, du + i_begin,
                        i_end - i_begin);
    } else {
      for (int64_t i = i_begin; i < i_end; ++i) {
        const Real gi = g[i], ui = u[i], dhi = dh[i];
        const Real s = Real(1) / (Real(1) + std::exp(-gi));
        // forward: h = silu(g) * u;  so: du = dh * silu(g)
        du[i] = dhi * (gi * s);
        // forward: h = silu(g) * u, silu(g) = g s;  so: dg = dh * u * s * (1 + g * (1 - s))
        dg[i] = dhi * ui * (s * (Real(1) + gi * (Real(1) - s)));
      }
    }
  });
}

template <typename Real>
void SiluForward(const Real* h, Real* y, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    if constexpr (std::is_same_v<Real, float>) {
      SiluTimesFloat(h + i_begin, nullptr, y + i_begin, i_end - i_begin);
    } else {
      for (int64_t i = i_begin; i < i_end; ++i) y[i] = h[i] / (Real(1) + std::exp(-h[i]));
    }
  });
}

template <typename Real>
void SiluBackward(const Real* dy, const Real* h, Real* dh, int64_t n) {
  ParallelFor(n, WorkGrain(n, n, 65536), [&](int64_t i_begin, int64_t i_end) {
    if constexpr (std::is_same_v<Real, float>) {
      SiluBackwardFloat(dy + i_begin, h + i_begin, nullptr, dh + i_begin, nullptr, i_end - i_begin);
    } else {
      for (int64_t i = i_begin; i < i_end; ++i) {
        const Real s = Real(1) / (Real(1) + std::exp(-h[i]));
        dh[i] = dy[i] * (s * (Real(1) + h[i] * (Real(1) - s)));
      }
    }
  });
}

// ---- RoPE ------------------------------------------------------------------------------------

namespace {

// Turns every pair by +angle (sign = +1) or -angle (sign = -1).
template <typename Real>
void RopeRotate(Real* x, int64_t T, int H, int64_t row_stride, int64_t head_stride,
                const RopeAngles<Real>& angles, Real sign) {
  STRETCH_CHECK(angles.T == T, "rope angles have {} rows for {} rows", angles.T, T);
  const int pairs = angles.pairs;
  ParallelFor(T, WorkGrain(T, T * H * pairs, 65536), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const Real* c = angles.cos + r * pairs;
      const Real* s = angles.sin + r * pairs;
      for (int h = 0; h < H; ++h) {
        Real* v = x + r * row_stride + h * head_stride;
        if constexpr (std::is_same_v<Real, float>) {
          RotatePairsSigned(v, pairs, c, s, sign);  // RotatePairs's rounding, bit for bit
        } else {
          for (int p = 0; p < pairs; ++p) {
            const Real x0 = v[2 * p], x1 = v[2 * p + 1], sn = sign * s[p];
            v[2 * p] = x0 * c[p] - x1 * sn;
            v[2 * p + 1] = x0 * sn + x1 * c[p];
          }
        }
      }
    }
  });
}

}  // namespace

template <typename Real>
void RopeInterleavedForward(Real* x, int64_t T, int H, int64_t row_stride, int64_t head_stride,
                            const RopeAngles<Real>& angles) {
  // y0 = x0 cos - x1 sin;  y1 = x0 sin + x1 cos  (sign * sin is exact for sign = 1)
  RopeRotate(x, T, H, row_stride, head_stride, angles, Real(1));
}

template <typename Real>
void RopeInterleavedBackward(Real* d, int64_t T, int H, int64_t row_stride, int64_t head_stride,
                             const RopeAngles<Real>& angles) {
  // forward: y0 = x0 cos - x1 sin;  y1 = x0 sin + x1 cos
  // so: dx0 = dy0 cos + dy1 sin;  dx1 = -dy0 sin + dy1 cos, the same rotation with -sin
  RopeRotate(d, T, H, row_stride, head_stride, angles, Real(-1));
}

// ---- Cross-entropy ---------------------------------------------------------------------------

namespace {

int64_t CheckTargets(const int* targets, int64_t T, int V) {
  int64_t scored = 0;
  for (int64_t t = 0; t < T; ++t) {
    STRETCH_CHECK(targets[t] == kNotScored || (targets[t] >= 0 && targets[t] < V),
                  "target {} at row {} is neither kNotScored nor in a vocabulary of {}", targets[t],
                  t, V);
    scored += targets[t] != kNotScored;
  }
  return scored;
}

template <typename Real>
Real RowMax(const Real* l, int V) {
  Real max = l[0];
  for (int i = 1; i < V; ++i) max = l[i] > max ? l[i] : max;
  return max;
}

}  // namespace

template <typename Real>
MeanLoss CrossEntropyForward(const Real* logits, const int* targets, int64_t T, int V) {
  const int64_t scored = CheckTargets(targets, T, V);
  if (scored == 0) return {};
  std::vector<double> row_loss(static_cast<size_t>(T), 0.0);
  ParallelFor(T, WorkGrain(T, T * V, 65536), [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      if (targets[t] == kNotScored) continue;
      const Real* l = logits + t * V;
      const Real max = RowMax(l, V);
      double sum = 0.0;
      for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(l[i]) - max);
      row_loss[static_cast<size_t>(t)] = std::log(sum) - (static_cast<double>(l[targets[t]]) - max);
    }
  });
  double total = 0.0;
  for (double r : row_loss) total += r;
  return {total / static_cast<double>(scored), scored};
}

template <typename Real>
void CrossEntropyBackward(const Real* logits, const int* targets, Real* dlogits, int64_t T, int V,
                          double dloss) {
  const int64_t scored = CheckTargets(targets, T, V);
  const double scale = scored == 0 ? 0.0 : dloss / static_cast<double>(scored);
  ParallelFor(T, WorkGrain(T, T * V, 65536), [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const Real* l = logits + t * V;
      Real* d = dlogits + t * V;
      if (targets[t] == kNotScored || scored == 0) {
        for (int i = 0; i < V; ++i) d[i] = Real(0);
        continue;
      }
      // Both read before d is written: d may be l.
      const Real max = RowMax(l, V);
      const double l_target = l[targets[t]];
      double sum = 0.0;
      for (int i = 0; i < V; ++i) {
        const double e = std::exp(static_cast<double>(l[i]) - max);
        sum += e;
        d[i] = static_cast<Real>(e);
      }
      // forward: loss_t = log sum_i exp(l[i]) - l[target];  so: dl[i] = softmax(l)[i] - [i == target]
      // The target's entry from double throughout: p - 1 cancels when p is near 1.
      const double inv_sum = 1.0 / sum;
      for (int i = 0; i < V; ++i)
        d[i] = static_cast<Real>(static_cast<double>(d[i]) * inv_sum * scale);
      d[targets[t]] = static_cast<Real>((std::exp(l_target - max) * inv_sum - 1.0) * scale);
    }
  });
}

// ---- Instances -------------------------------------------------------------------------------

template <typename Real>
void L2NormalizeForward(const Real* x, Real* y, int64_t rows, int D) {
  ParallelFor(rows, WorkGrain(rows, rows * D, 65536), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const Real* xr = x + r * D;
      Real* yr = y + r * D;
      double ss = 0.0;
      for (int d = 0; d < D; ++d) ss += static_cast<double>(xr[d]) * xr[d];
      const Real inv = ss > 0.0 ? static_cast<Real>(1.0 / std::sqrt(ss)) : Real(0);
      for (int d = 0; d < D; ++d) yr[d] = xr[d] * inv;
    }
  });
}

template <typename Real>
void L2NormalizeBackward(const Real* dy, const Real* x, Real* dx, int64_t rows, int D) {
  ParallelFor(rows, WorkGrain(rows, rows * D, 65536), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const Real* xr = x + r * D;
      const Real* dyr = dy + r * D;
      Real* dxr = dx + r * D;
      double ss = 0.0;
      for (int d = 0; d < D; ++d) ss += static_cast<double>(xr[d]) * xr[d];
      if (!(ss > 0.0)) {  // y = 0 near x = 0 is not differentiable; the forward's zero passes none
        for (int d = 0; d < D; ++d) dxr[d] = Real(0);
        continue;
      }
      const double inv = 1.0 / std::sqrt(ss);
      double dot = 0.0;  // sum_d dy[d] y[d]
      for (int d = 0; d < D; ++d) dot += static_cast<double>(dyr[d]) * xr[d] * inv;
      for (int d = 0; d < D; ++d) {
        dxr[d] = static_cast<Real>((dyr[d] - xr[d] * inv * dot) * inv);
      }
    }
  });
}

// ---- Per-pair and per-head scales (XPOS, SSMax) -------------------------------------------------

template <typename Real>
void PairScaleForward(Real* x, int64_t T, int H, int64_t row_stride, int64_t head_stride, int pairs,
                      const Real* factors) {
  for (int64_t r = 0; r < T; ++r) {
    const Real* f = factors + r * pairs;
    for (int h = 0; h < H; ++h) {
      Real* v = x + r * row_stride + h * head_stride;
      for (int t = 0; t < pairs; ++t) {  // (x0, x1) <- f (x0, x1)
        v[2 * t] *= f[t];
        v[2 * t + 1] *= f[t];
      }
    }
  }
}

template <typename Real>
void PairScaleBackward(Real* d, int64_t T, int H, int64_t row_stride, int64_t head_stride,
                       int pairs, const Real* factors) {
  // forward: y = f x  so: dx = f dy, the same scaling
  PairScaleForward(d, T, H, row_stride, head_stride, pairs, factors);
}

template <typename Real>
void HeadScaleForward(Real* x, int64_t T, int H, int D, const Real* row_weight, const Real* s) {
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const Real f = s[h] * row_weight[t];  // y = s_h w_t x
      Real* v = x + (t * H + h) * D;
      for (int e = 0; e < D; ++e) v[e] *= f;
    }
  }
}

template <typename Real>
void HeadScaleBackward(Real* d, const Real* x_in, int64_t T, int H, int D, const Real* row_weight,
                       const Real* s, Real* ds) {
  std::vector<double> acc(static_cast<size_t>(H), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      Real* g = d + (t * H + h) * D;
      const Real* xv = x_in + (t * H + h) * D;
      double dot = 0.0;  // ds_h += w_t (x . dy)
      for (int e = 0; e < D; ++e) dot += static_cast<double>(xv[e]) * g[e];
      acc[static_cast<size_t>(h)] += static_cast<double>(row_weight[t]) * dot;
      const Real f = s[h] * row_weight[t];  // dx = s_h w_t dy
      for (int e = 0; e < D; ++e) g[e] *= f;
    }
  }
  for (int h = 0; h < H; ++h) ds[h] += static_cast<Real>(acc[static_cast<size_t>(h)]);
}

#define STRETCH_OPS_INSTANTIATE(Real)                                                              \
  template void LinearForward<Real>(const Real*, WeightArg<Real>, Real*, int64_t, int64_t,         \
                                    int64_t);                                                      \
  template void LinearForwardAdd<Real>(const Real*, WeightArg<Real>, Real*, int64_t, int64_t,      \
                                       int64_t);                                                   \
  template void LinearForwardShared<Real>(const Real*, std::span<const LinearOut<Real>>, int64_t,  \
                                          int64_t);                                                \
  template void LinearBackward<Real>(const Real*, const Real*, const Real*, Real*, Real*, int64_t, \
                                     int64_t, int64_t, GradWrite);                                 \
  template void EmbeddingForward<Real>(const int*, const Real*, Real*, int64_t, int, int);         \
  template void EmbeddingBackward<Real>(const int*, const Real*, Real*, int64_t, int, int);        \
  template void RmsNormForward<Real>(const Real*, const Real*, Real*, int64_t, int, Real);         \
  template void RmsNormBackward<Real>(const Real*, const Real*, const Real*, Real*, Real*,         \
                                      int64_t, int, Real, GradWrite);                              \
  template void SwiGluForward<Real>(const Real*, const Real*, Real*, int64_t);                     \
  template void GeluTanhForward<Real>(const Real*, const Real*, Real*, int64_t);                   \
  template void SwiGluBackward<Real>(const Real*, const Real*, const Real*, Real*, Real*,          \
                                     int64_t);                                                     \
  template void SiluForward<Real>(const Real*, Real*, int64_t);                                    \
  template void SiluBackward<Real>(const Real*, const Real*, Real*, int64_t);                      \
  template void RopeInterleavedForward<Real>(Real*, int64_t, int, int64_t, int64_t,                \
                                             const RopeAngles<Real>&);                             \
  template void RopeInterleavedBackward<Real>(Real*, int64_t, int, int64_t, int64_t,               \
                                              const RopeAngles<Real>&);                            \
  template MeanLoss CrossEntropyForward<Real>(const Real*, const int*, int64_t, int);              \
  template void CrossEntropyBackward<Real>(const Real*, const int*, Real*, int64_t, int, double);  \
  template void L2NormalizeForward<Real>(const Real*, Real*, int64_t, int);                        \
  template void L2NormalizeBackward<Real>(const Real*, const Real*, Real*, int64_t, int);          \
  template void PairScaleForward<Real>(Real*, int64_t, int, int64_t, int64_t, int, const Real*);   \
  template void PairScaleBackward<Real>(Real*, int64_t, int, int64_t, int64_t, int, const Real*);  \
  template void HeadScaleForward<Real>(Real*, int64_t, int, int, const Real*, const Real*);        \
  template void HeadScaleBackward<Real>(Real*, const Real*, int64_t, int, int, const Real*,        \
                                        const Real*, Real*);
STRETCH_OPS_INSTANTIATE(float)
STRETCH_OPS_INSTANTIATE(double)
#undef STRETCH_OPS_INSTANTIATE

}  // namespace stretch
