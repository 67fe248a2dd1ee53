// Internal to src/kernels (the attention kernels, ops.cc, the matrix products and their tests):
// Highway set-up, the vector exp2 that the attention kernel uses, the vector exp of SiLU (forward
// and backward) and of the attention backward, and how decode's kernels prefetch.
//
// Highway 1.0.3 (Debian 12) stops with "#error best baseline should be included in dynamic
// targets" when compiled with -march=native on CPUs newer than it knows (this project's Zen 5
// machines report AVX-512 VP2INTERSECT). The project uses static dispatch only (-march=native), so
// we ask Highway to compile the static target alone, which is what we use anyway.
#pragma once

#ifndef HWY_COMPILE_ONLY_STATIC
#define HWY_COMPILE_ONLY_STATIC 1
#endif
#include <hwy/highway.h>

#include <cmath>
#include <cstdint>

namespace stretch::attention_internal {

namespace hn = hwy::HWY_NAMESPACE;

// The locality hint of decode's prefetches (attention_tile.h, and the one-row products of
// gemm.cc): 2, into L2 and the levels below (prefetcht1 on x86). Not 0 (non-temporal,
// prefetchnta): on the Intel Xeon of docs/performance.md it fills L1 alone, and with eight rows of
// four streams in flight (up to 64 KiB, more than L1's 48 KiB) the lines were evicted before their
// use and read twice from memory. `stretch bench --case decode`, stories110M shape, three rounds
// alternating the builds, tokens/s: at depth 0, 29-33 with hint 0 in the products, 76-83 without
// prefetching, 89-98 with hint 2; at depth 2048 (hint 2 in the products), 44-53 with hint 0 in
// attention, 57-65 without, 58-66 with hint 2. (The AMD EPYC figures in gemm.cc and
// attention_tile.h were measured with hint 0.)
inline constexpr int kPrefetchHint = 2;

// 2^x on vectors, for the softmax (the kernel keeps scores in log2 units, see attention.cc).
//   x = n + f, n = round(x), f in [-1/2, 1/2];  2^f by the degree-6 polynomial of Cephes' exp2f
//   (minimax on [-1/2, 1/2]), 2^n by writing n + 127 into the exponent field.
// Rounding by the magic number 1.5 * 2^23 + 127: adding it leaves round(x) + 127 in the low
// mantissa bits (for |x| < 2^22), so one shift makes the exponent field, with no float -> int
// conversion and its range checks.
// Max relative error 7.7e-8 (0.65 ulp) for x in [-126, 127], measured against double exp2 in
// attention_test.cc (Attention.Exp2MaxRelativeError). x < -126.5 gives exactly 0 (exponent field 0;
// this is how masked scores, -inf, become probability 0), x > 127 is clamped to 2^127.
template <class DF, class VF>
HWY_INLINE VF Exp2(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  const VF magic = hn::Set(df, 12582912.0f + 127.0f);  // 1.5 * 2^23 + 127
  x = hn::Min(hn::Max(x, hn::Set(df, -127.0f)), hn::Set(df, 127.0f));
  const VF t = hn::Add(x, magic);              // bits: ... | round(x) + 127
  const VF f = hn::Sub(x, hn::Sub(t, magic));  // x - round(x)
  VF p = hn::Set(df, 1.535336188319500e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.339887440266574e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618437357674640e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550332471162809e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.402264791363012e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931472028550421e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  return hn::Mul(p, hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(di, t))));
}

// e^x on float vectors, to about 1 ulp: x = n ln 2 + r with n = round(x log2 e) and r reduced in
// two steps (ln 2 split into a part exact in float and the rest: Cody and Waite), e^r by the
// degree-7 polynomial of Cephes' expf on [-ln2/2, ln2/2], 2^n written into the exponent field.
// x > 88.72 gives +inf, as std::exp rounds it; x < -87.33 gives 0 (std::exp still gives
// subnormals there; -inf, a masked score, gives 0); NaN gives NaN, as std::exp does, so that a
// diverged score is not hidden as a probability of 0. Used by SiLU (ops.cc: SwiGLU's forward, in
// inference and training, and the backwards) and, through ExpArray, by the attention backward.
template <class DF, class VF>
HWY_INLINE VF ExpF(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  const VF hi_limit = hn::Set(df, 88.72283935546875f), lo_limit = hn::Set(df, -87.33654022216797f);
  const VF xc = hn::Min(hn::Max(x, lo_limit), hi_limit);
  const VF magic = hn::Set(df, 12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const VF n = hn::Sub(hn::MulAdd(xc, hn::Set(df, 1.44269504088896341f), magic), magic);
  VF r = hn::NegMulAdd(n, hn::Set(df, 0.693359375f), xc);  // ln 2's first 10 bits: n * it is exact
  r = hn::NegMulAdd(n, hn::Set(df, -2.12194440e-4f), r);   // the rest of ln 2
  VF p = hn::Set(df, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(df, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(df, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(df, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(df, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(df, 1.0f)));
  // 2^n = 2^a 2^b with a = n >> 1, b = n - a, each written into an exponent field: n is in
  // [-126, 128] after the clamp, beyond one field's range at 128, a and b never are.
  const auto ni = hn::ConvertTo(di, n);
  const auto a = hn::ShiftRight<1>(ni), b = hn::Sub(ni, a);
  const auto bias = hn::Set(di, 127);
  VF y = hn::Mul(hn::Mul(p, hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(a, bias)))),
                 hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(b, bias))));
  y = hn::IfThenElse(hn::Gt(x, hi_limit), hn::Set(df, HUGE_VALF), y);
  y = hn::IfThenZeroElse(hn::Lt(x, lo_limit), y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);  // the clamps above turn NaN into a limit
}

// y[i] = Exp2(x[i]) for n floats (any n); for tests and for anyone who wants the same exp.
void Exp2Array(const float* x, float* y, int64_t n);
// y[i] = ExpF(x[i]) for n floats (any n; y may be x): the attention backward's probabilities.
void ExpArray(const float* x, float* y, int64_t n);

}  // namespace stretch::attention_internal
