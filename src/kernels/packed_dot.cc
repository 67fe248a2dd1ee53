// The decoders and one-row products of packed matrices (src/kernels/packed.h).
//
// Both decode a block's quants in vector registers, after reading its scales once:
//
//   DequantizeRows:  dst = the values of src/kernels/blocks.h, bit for bit: each float operation
//                    of the scalar decoders, in the same order. Q4_K's d1 * q - m1 rounds once
//                    whether or not it is fused (g++ fuses it at -march=native), since d1 * q is
//                    exact: d1 = d * sc has at most 11 + 6 significant bits, d1 * q 21.
//   PackedDotRows:   y[r] = W[r] . x, each block multiplied into float32 accumulators as it is
//                    decoded, with the block's scales taken out of the inner sums; F16, BF16
//                    and Q8_0 one row after the other (one sequential stream per thread), the
//                    K-quants and Q4_0 four rows at a time (x loaded once per four rows: their
//                    decoding, not memory, bounds them; packed_rows.h):
//
//     Q8_0  W[r] . x = sum_b d_b (q_b . x_b)                              (32 values per d)
//     Q4_0  W[r] . x = sum_b d_b ((q_b - 8) . x_b)                        (32 values per d)
//     Q4_K  W[r] . x = sum_b sum_j d_b sc_bj (q_bj . x_bj) - dmin_b m_bj (sum of x_bj)
//                                                                         (32 values per sc, m)
//     Q5_K  the same as Q4_K, q_bj 5 bits
//     Q6_K  W[r] . x = sum_b sum_g (d_b sc_bg) (q_bg . x_bg)              (16 values per sc)
//
// so the per-value work is a widening, a conversion and one multiply-add (and the few integer
// operations that put a quant's bits together), and Q4_K's and Q5_K's sums of x (one per 32
// values) are computed once per call for all the rows. The result equals the float
// dot of the dequantized row within float32 rounding of its products and sums
// (tests/kernels/packed_test.cc derives the bound it checks).
//
// Prefetching as in gemm.cc's GemvRows: each block's lines eight rows further on (two groups of
// four ahead), into L2 (kPrefetchHint, attention_simd.h says why not L1).
//
// Speed, one thread of this project's AMD EPYC (Zen 5, AVX-512), a 14336 x 4096 matrix, GB/s of
// the packed bytes (a throwaway benchmark, medians of 15; ranges over three runs on a shared
// machine), from memory / in cache (64 rows): F16 23-25 / 44-55, BF16 22-25 / 44-55, Q8_0 25-28 /
// 25-37, Q4_K 17-18 / 17-19, Q6_K 12-13 / 12-16; the float GemvRows 25-28 / 55-84. So the 16-bit
// and Q8_0 products stream at memory speed, while Q4_K and Q6_K are bound by their decoding
// instructions (Q4_K: about 80 vector instructions per 144-byte block and row), not by memory.
// Tried and slower here: Q4_K's dot with each sub-block's 16 values looked up by vpermps (as its
// decoder below does), 13 GB/s in cache.
#include <hwy/highway.h>

#include <type_traits>
#include <vector>

#include "src/kernels/attention_simd.h"  // Highway set-up (static target), kPrefetchHint
#include "src/kernels/blocks.h"
#include "src/kernels/half.h"
#include "src/kernels/packed.h"
#include "src/kernels/packed_rows.h"

#if HWY_ARCH_X86
#include <immintrin.h>  // _cvtsh_ss (F16C)
#endif

namespace stretch {

namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DI32 = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;  // one byte per float lane
using DI8 = hn::Rebind<int8_t, DF>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using DU32 = hn::RebindToUnsigned<DF>;
// Lanes per float vector. The blocks are cut into 16- and 32-value pieces, so the loops below
// need L to divide 16: x86's targets have 4, 8 or 16 (fixed at compile time).
constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(16 % L == 0, "a vector must divide Q6_K's 16-value scale groups");

using packed_internal::ForRowGroups;
using packed_internal::kAheadRows;
using packed_internal::kGroupRows;
using packed_internal::kStreamRows;

// A block's f16 scale as a float, exact: one vcvtph2ps where the target has F16C (Highway's
// AVX2 and AVX-512 targets require it), else the scalar decoder.
HWY_INLINE float ScaleF16(const uint8_t* p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return _cvtsh_ss(LoadU16(p));
#else
  return HalfToFloat(LoadU16(p));
#endif
}

// Prefetches `lines` cache lines from `ahead` bytes past p (an integer address: past the matrix's
// end it is no pointer of the program, and a prefetch does not fault).
HWY_INLINE void PrefetchAhead(const uint8_t* p, uintptr_t ahead, int lines) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + ahead;
  for (int i = 0; i < lines; ++i) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + 64 * static_cast<uintptr_t>(i)), 0,
                       attention_internal::kPrefetchHint);
  }
}

HWY_INLINE float SumLanes(hn::Vec<DF> v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

// Float lanes from 1-byte integers: zero- or sign-extended, then converted (exact).
HWY_INLINE hn::Vec<DF> FloatsFromU8(const uint8_t* p) {
  return hn::ConvertTo(DF(), hn::PromoteTo(DI32(), hn::LoadU(DU8(), p)));
}
HWY_INLINE hn::Vec<DF> FloatsFromI8(const uint8_t* p) {
  return hn::ConvertTo(DF(),
                       hn::PromoteTo(DI32(), hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(p))));
}

#if HWY_TARGET <= HWY_AVX3
// AVX-512 (16 lanes): t[idx & 15] in each lane, one vpermps, which reads only the low 4 bits of
// each index; so a nibble is turned into its value without a mask or a conversion. Highway's
// TableLookupLanes is the same instruction, but asserts (in debug builds) indices below 16.
HWY_INLINE hn::Vec<DF> Lookup16(hn::Vec<DF> t, hn::Vec<DI32> idx) {
  return hn::Vec<DF>{_mm512_permutexvar_ps(idx.raw, t.raw)};
}
#endif

// ---- Q4_K ----------------------------------------------------------------------------------------
// block_q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128]. Sub-block j (32 values) is
// d sc_j q - dmin m_j, its quants the low nibbles of qs[32 (j / 2) .. + 31] for even j, the high
// nibbles for odd j (dequantize_row_q4_K).

// s[j] = d * sc_j and s[8 + j] = dmin * m_j (j < 8), the floats of dequantize_row_q4_K's d1 and
// m1, from the 12 packed bytes. get_scale_min_k4 per byte, written for 4-byte words u0 = bytes
// 0-3, u1 = 4-7, u2 = 8-11 (each byte's top two bits move to bits 4-5 by a word shift of 2,
// which the masks keep within the byte):
//   sc 0-3 = u0 & 0x3f..                    m 0-3 = u1 & 0x3f..
//   sc 4-7 = (u2 & 0x0f..) | ((u0 >> 2) & 0x30..)
//   m 4-7  = ((u2 >> 4) & 0x0f..) | ((u1 >> 2) & 0x30..)
// as one 128-bit vector: two byte shuffles put [u0, u2, u1, u2] and [-, u0, -, u1] in its words.
HWY_INLINE void Q4_KScales(const uint8_t* blk, float* s) {
  const hn::Full128<uint8_t> d8;
  const hn::Full128<uint32_t> d32;
  alignas(16) static constexpr uint8_t kLow[16] = {0, 1, 2, 3, 8, 9, 10, 11,
                                                   4, 5, 6, 7, 8, 9, 10, 11};
  alignas(16) static constexpr uint8_t kHigh[16] = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7};
  alignas(16) static constexpr uint32_t kShift[4] = {0, 0, 0, 4};
  alignas(16) static constexpr uint32_t kLowMask[4] = {0x3f3f3f3fu, 0x0f0f0f0fu, 0x3f3f3f3fu,
                                                       0x0f0f0f0fu};
  alignas(16) static constexpr uint32_t kHighMask[4] = {0, 0x30303030u, 0, 0x30303030u};
  // Bytes 4-19 of the block: the 12 scale bytes and 4 of qs (unused).
  const auto raw = hn::LoadU(d8, blk + 4);
  const auto a = hn::BitCast(d32, hn::TableLookupBytes(raw, hn::Load(d8, kLow)));
  const auto b = hn::BitCast(d32, hn::TableLookupBytes(raw, hn::Load(d8, kHigh)));
  const auto low = hn::And(hn::operator>>(a, hn::Load(d32, kShift)), hn::Load(d32, kLowMask));
  const auto high = hn::And(hn::ShiftRight<2>(b), hn::Load(d32, kHighMask));
  alignas(16) uint8_t sm[16];  // sc 0-7, m 0-7
  hn::Store(hn::BitCast(d8, hn::Or(low, high)), d8, sm);
  const float d = ScaleF16(blk), dmin = ScaleF16(blk + 2);
  const DF df;
  for (int64_t k = 0; k < 16; k += L) {
    const auto first = hn::Lt(hn::Iota(DI32(), static_cast<int32_t>(k)), hn::Set(DI32(), 8));
    const auto scale = hn::IfThenElse(hn::RebindMask(df, first), hn::Set(df, d), hn::Set(df, dmin));
    hn::StoreU(hn::Mul(FloatsFromU8(sm + k), scale), df, s + k);
  }
}

void DequantizeRowQ4_K(const uint8_t* src, float* dst, int64_t cols) {
  const DF df;
  const DI32 di;
#if HWY_TARGET > HWY_AVX3
  const auto nib = hn::Set(di, 0xF);
#endif
  for (int64_t b = 0; b < cols / kQ4_KElems; ++b) {
    const uint8_t* blk = src + b * kQ4_KBytes;
    const uint8_t* qs = blk + 16;
    float* y = dst + b * kQ4_KElems;
    HWY_ALIGN float s[16];
    Q4_KScales(blk, s);
    for (int p = 0; p < 4; ++p) {
      const auto d1 = hn::Set(df, s[2 * p]), m1 = hn::Set(df, s[8 + 2 * p]);
      const auto d2 = hn::Set(df, s[2 * p + 1]), m2 = hn::Set(df, s[9 + 2 * p]);
#if HWY_TARGET <= HWY_AVX3
      // The 16 values a nibble can take in each sub-block, then one lookup per 16 values.
      const auto t1 = hn::MulSub(hn::Iota(df, 0.0f), d1, m1);
      const auto t2 = hn::MulSub(hn::Iota(df, 0.0f), d2, m2);
      for (int64_t c = 0; c < 32; c += L) {
        const auto q = hn::PromoteTo(di, hn::LoadU(DU8(), qs + 32 * p + c));
        hn::StoreU(Lookup16(t1, q), df, y + 64 * p + c);
        hn::StoreU(Lookup16(t2, hn::ShiftRight<4>(q)), df, y + 64 * p + 32 + c);
      }
#else
      for (int64_t c = 0; c < 32; c += L) {
        const auto q = hn::PromoteTo(di, hn::LoadU(DU8(), qs + 32 * p + c));
        hn::StoreU(hn::MulSub(d1, hn::ConvertTo(df, hn::And(q, nib)), m1), df, y + 64 * p + c);
        hn::StoreU(hn::MulSub(d2, hn::ConvertTo(df, hn::ShiftRight<4>(q)), m2), df,
                   y + 64 * p + 32 + c);
      }
#endif
    }
  }
}

// xs[16 b + 8 + j] = -(sum of x over sub-block j of block b), xs[16 b + j] = 0: the lanes that
// meet Q4_KScales' dmin m_j (and d sc_j) in one multiply-add per block.
void Q4_KNegSums(const float* x, int64_t blocks, float* xs) {
  const DF df;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int j = 0; j < 8; ++j) {
      const float* xj = x + b * kQ4_KElems + 32 * j;
      auto s = hn::LoadU(df, xj);
      for (int64_t k = L; k < 32; k += L) s = hn::Add(s, hn::LoadU(df, xj + k));
      xs[16 * b + j] = 0.0f;
      xs[16 * b + 8 + j] = -SumLanes(s);
    }
  }
}

// out[i] = row i . x for R rows at w, w + row_bytes, ...: d sc_j (q . x_j) per sub-block, and
// the mins' - dmin m_j (sum of x_j) from the sums of x, xs (Q4_KNegSums).
template <int R>
void DotRowsQ4_K(const uint8_t* w, int64_t row_bytes, int64_t blocks, const float* x,
                 const float* xs, uintptr_t ahead, float* out) {
  const DF df;
  const DI32 di;
  const auto nib = hn::Set(di, 0xF);
  hn::Vec<DF> acc[R];
  for (int i = 0; i < R; ++i) acc[i] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQ4_KElems;
    const uint8_t* blk[R];
    HWY_ALIGN float s[R][16];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      blk[i] = w + i * row_bytes + b * kQ4_KBytes;
      PrefetchAhead(blk[i], ahead, 3);  // 144 bytes: 3 lines from each block's start cover all
      Q4_KScales(blk[i], s[i]);
      // - dmin m_j (sum of x_j), j < 8 (the first 8 lanes meet zeros)
      for (int64_t k = 0; k < 16; k += L) {
        acc[i] = hn::MulAdd(hn::Load(df, s[i] + k), hn::LoadU(df, xs + 16 * b + k), acc[i]);
      }
    }
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles)
      hn::Vec<DF> lo[R], hi[R];    // q . x over each sub-block
      for (int64_t c = 0; c < 32; c += L) {
        const auto x1 = hn::LoadU(df, xb + 64 * p + c);
        const auto x2 = hn::LoadU(df, xb + 64 * p + 32 + c);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const auto q = hn::PromoteTo(di, hn::LoadU(DU8(), blk[i] + 16 + 32 * p + c));
          const auto q1 = hn::ConvertTo(df, hn::And(q, nib));
          const auto q2 = hn::ConvertTo(df, hn::ShiftRight<4>(q));
          lo[i] = c == 0 ? hn::Mul(q1, x1) : hn::MulAdd(q1, x1, lo[i]);
          hi[i] = c == 0 ? hn::Mul(q2, x2) : hn::MulAdd(q2, x2, hi[i]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        acc[i] = hn::MulAdd(hn::Set(df, s[i][2 * p]), lo[i], acc[i]);
        acc[i] = hn::MulAdd(hn::Set(df, s[i][2 * p + 1]), hi[i], acc[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) out[i] = SumLanes(acc[i]);
}

// ---- Q5_K ----------------------------------------------------------------------------------------
// block_q5_K: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]: Q4_K's block with a fifth bit
// per value. Sub-block j (32 values) is d sc_j q - dmin m_j, q = the nibble of qs as in Q4_K, plus
// 16 times bit j of qh[l] for its value l (dequantize_row_q5_K). The scales are Q4_K's bytes at
// the same place (Q4_KScales), the product Q4_K's with the mins taken out the same way.

// The 5-bit quants of sub-blocks 2p (lo) and 2p + 1 (hi), values c .. c + L - 1: q the bytes of
// qs, h those of qh (both zero-extended to 32 bits).
HWY_INLINE void Q5_KQuants(hn::Vec<DI32> q, hn::Vec<DI32> h, int p, hn::Vec<DI32>* lo,
                           hn::Vec<DI32>* hi) {
  const DI32 di;
  const auto nib = hn::Set(di, 0xF), bit4 = hn::Set(di, 16);
  const auto hp = hn::ShiftRightSame(h, 2 * p);  // bit 2p at bit 0, bit 2p + 1 at bit 1
  *lo = hn::Or(hn::And(q, nib), hn::And(hn::ShiftLeft<4>(hp), bit4));
  *hi = hn::Or(hn::ShiftRight<4>(q), hn::And(hn::ShiftLeft<3>(hp), bit4));
}

void DequantizeRowQ5_K(const uint8_t* src, float* dst, int64_t cols) {
  const DF df;
  const DI32 di;
  for (int64_t b = 0; b < cols / kQ5_KElems; ++b) {
    const uint8_t* blk = src + b * kQ5_KBytes;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + 48;
    float* y = dst + b * kQ5_KElems;
    HWY_ALIGN float s[16];
    Q4_KScales(blk, s);
    for (int p = 0; p < 4; ++p) {
      const auto d1 = hn::Set(df, s[2 * p]), m1 = hn::Set(df, s[8 + 2 * p]);
      const auto d2 = hn::Set(df, s[2 * p + 1]), m2 = hn::Set(df, s[9 + 2 * p]);
      for (int64_t c = 0; c < 32; c += L) {
        hn::Vec<DI32> lo, hi;
        Q5_KQuants(hn::PromoteTo(di, hn::LoadU(DU8(), qs + 32 * p + c)),
                   hn::PromoteTo(di, hn::LoadU(DU8(), qh + c)), p, &lo, &hi);
        // d1 * q - m1 rounds once, fused or not: d1 * q is exact (17 + 5 significant bits).
        hn::StoreU(hn::MulSub(d1, hn::ConvertTo(df, lo), m1), df, y + 64 * p + c);
        hn::StoreU(hn::MulSub(d2, hn::ConvertTo(df, hi), m2), df, y + 64 * p + 32 + c);
      }
    }
  }
}

// out[i] = row i . x for R rows at w, w + row_bytes, ...: as DotRowsQ4_K, xs from Q4_KNegSums
// (the sub-blocks are Q4_K's).
template <int R>
void DotRowsQ5_K(const uint8_t* w, int64_t row_bytes, int64_t blocks, const float* x,
                 const float* xs, uintptr_t ahead, float* out) {
  const DF df;
  const DI32 di;
  hn::Vec<DF> acc[R];
  for (int i = 0; i < R; ++i) acc[i] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQ5_KElems;
    const uint8_t* blk[R];
    HWY_ALIGN float s[R][16];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      blk[i] = w + i * row_bytes + b * kQ5_KBytes;
      // 176 bytes: 3 lines from each block's start, and the next block's first line has the rest
      PrefetchAhead(blk[i], ahead, 3);
      Q4_KScales(blk[i], s[i]);
      for (int64_t k = 0; k < 16; k += L) {
        acc[i] = hn::MulAdd(hn::Load(df, s[i] + k), hn::LoadU(df, xs + 16 * b + k), acc[i]);
      }
    }
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles)
      hn::Vec<DF> lo[R], hi[R];    // q . x over each sub-block
      for (int64_t c = 0; c < 32; c += L) {
        const auto x1 = hn::LoadU(df, xb + 64 * p + c);
        const auto x2 = hn::LoadU(df, xb + 64 * p + 32 + c);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          hn::Vec<DI32> q1, q2;
          Q5_KQuants(hn::PromoteTo(di, hn::LoadU(DU8(), blk[i] + 48 + 32 * p + c)),
                     hn::PromoteTo(di, hn::LoadU(DU8(), blk[i] + 16 + c)), p, &q1, &q2);
          const auto f1 = hn::ConvertTo(df, q1), f2 = hn::ConvertTo(df, q2);
          lo[i] = c == 0 ? hn::Mul(f1, x1) : hn::MulAdd(f1, x1, lo[i]);
          hi[i] = c == 0 ? hn::Mul(f2, x2) : hn::MulAdd(f2, x2, hi[i]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        acc[i] = hn::MulAdd(hn::Set(df, s[i][2 * p]), lo[i], acc[i]);
        acc[i] = hn::MulAdd(hn::Set(df, s[i][2 * p + 1]), hi[i], acc[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) out[i] = SumLanes(acc[i]);
}

// ---- Q6_K ----------------------------------------------------------------------------------------
// block_q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d. Value v of the block is
// d sc[v / 16] (q_v - 32), q_v 6 bits: in each half (128 values, ql + 64 h, qh + 32 h), for
// l < 32 (dequantize_row_q6_K):
//   q[l]      = (ql[l] & 0xF)      | ((qh[l] >> 0) & 3) << 4
//   q[l + 32] = (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4
//   q[l + 64] = (ql[l] >> 4)       | ((qh[l] >> 4) & 3) << 4
//   q[l + 96] = (ql[l + 32] >> 4)  | ((qh[l] >> 6) & 3) << 4

// s[g] = d * sc[g] (g < 16): the scalar decoder's d * sc, rounded the same.
HWY_INLINE void Q6_KScales(const uint8_t* blk, float* s) {
  const DF df;
  const auto d = hn::Set(df, ScaleF16(blk + 208));
  for (int64_t k = 0; k < 16; k += L)
    hn::StoreU(hn::Mul(d, FloatsFromI8(blk + 192 + k)), df, s + k);
}

// q[0..127] = the half's q - 32 as int8 (-32..31), in value order. In bytes, 32 values a vector
// where the target has them: a 16-bit shift's bits that cross into the next byte are outside the
// masks that follow it (0x30 keeps bits 4-5; 0x0F after >> 4).
HWY_INLINE void Q6_KHalfQuants(const uint8_t* ql, const uint8_t* qh, uint8_t* q) {
  const hn::CappedTag<uint8_t, 32> d8;
  const hn::RepartitionToWide<decltype(d8)> d16;
  const auto lo4 = hn::Set(d8, 0x0F), hi2 = hn::Set(d8, 0x30), bias = hn::Set(d8, 32);
  const auto shl = [&](auto v, auto bits) {
    return hn::BitCast(d8, hn::ShiftLeft<decltype(bits)::value>(hn::BitCast(d16, v)));
  };
  const auto shr = [&](auto v, auto bits) {
    return hn::BitCast(d8, hn::ShiftRight<decltype(bits)::value>(hn::BitCast(d16, v)));
  };
  using Two = std::integral_constant<int, 2>;
  using Four = std::integral_constant<int, 4>;
  const int64_t n8 = static_cast<int64_t>(hn::Lanes(d8));
  for (int64_t c = 0; c < 32; c += n8) {
    const auto a = hn::LoadU(d8, ql + c), b = hn::LoadU(d8, ql + 32 + c);
    const auto h = hn::LoadU(d8, qh + c);
    const auto q1 = hn::Or(hn::And(a, lo4), hn::And(shl(h, Four()), hi2));
    const auto q2 = hn::Or(hn::And(b, lo4), hn::And(shl(h, Two()), hi2));
    const auto q3 = hn::Or(hn::And(shr(a, Four()), lo4), hn::And(h, hi2));
    const auto q4 = hn::Or(hn::And(shr(b, Four()), lo4), hn::And(shr(h, Two()), hi2));
    hn::StoreU(hn::Sub(q1, bias), d8, q + c);  // wraps to the int8 q - 32
    hn::StoreU(hn::Sub(q2, bias), d8, q + 32 + c);
    hn::StoreU(hn::Sub(q3, bias), d8, q + 64 + c);
    hn::StoreU(hn::Sub(q4, bias), d8, q + 96 + c);
  }
}

void DequantizeRowQ6_K(const uint8_t* src, float* dst, int64_t cols) {
  const DF df;
  for (int64_t b = 0; b < cols / kQ6_KElems; ++b) {
    const uint8_t* blk = src + b * kQ6_KBytes;
    HWY_ALIGN float s[16];
    Q6_KScales(blk, s);
    for (int h = 0; h < 2; ++h) {
      HWY_ALIGN uint8_t q[128];
      Q6_KHalfQuants(blk + 64 * h, blk + 128 + 32 * h, q);
      float* y = dst + b * kQ6_KElems + 128 * h;
      for (int64_t k = 0; k < 128; k += L) {
        hn::StoreU(hn::Mul(hn::Set(df, s[8 * h + k / 16]), FloatsFromI8(q + k)), df, y + k);
      }
    }
  }
}

template <int R>
void DotRowsQ6_K(const uint8_t* w, int64_t row_bytes, int64_t blocks, const float* x,
                 uintptr_t ahead, float* out) {
  const DF df;
  hn::Vec<DF> acc[R];
  for (int i = 0; i < R; ++i) acc[i] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk[R];
    HWY_ALIGN float s[R][16];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      blk[i] = w + i * row_bytes + b * kQ6_KBytes;
      PrefetchAhead(blk[i], ahead, 4);  // 210 bytes: 4 lines from each block's start
      Q6_KScales(blk[i], s[i]);
    }
    for (int h = 0; h < 2; ++h) {
      HWY_ALIGN uint8_t q[R][128];
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) Q6_KHalfQuants(blk[i] + 64 * h, blk[i] + 128 + 32 * h, q[i]);
      const float* xh = x + b * kQ6_KElems + 128 * h;
      for (int64_t k = 0; k < 128; k += L) {
        const auto xv = hn::LoadU(df, xh + k);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const auto t = hn::Mul(FloatsFromI8(q[i] + k), xv);
          acc[i] = hn::MulAdd(hn::Set(df, s[i][8 * h + k / 16]), t, acc[i]);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) out[i] = SumLanes(acc[i]);
}

// ---- Q8_0 ----------------------------------------------------------------------------------------
// block_q8_0: f16 d, i8 qs[32]; value d q (dequantize_row_q8_0).

void DequantizeRowQ8_0(const uint8_t* src, float* dst, int64_t cols) {
  const DF df;
  for (int64_t b = 0; b < cols / kQ8_0Elems; ++b) {
    const uint8_t* blk = src + b * kQ8_0Bytes;
    const auto d = hn::Set(df, ScaleF16(blk));
    for (int64_t c = 0; c < 32; c += L) {
      hn::StoreU(hn::Mul(FloatsFromI8(blk + 2 + c), d), df, dst + b * kQ8_0Elems + c);
    }
  }
}

template <int R>
void DotRowsQ8_0(const uint8_t* w, int64_t row_bytes, int64_t blocks, const float* x,
                 uintptr_t ahead, float* out) {
  const DF df;
  hn::Vec<DF> acc[R];
  for (int i = 0; i < R; ++i) acc[i] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQ8_0Elems;
    const uint8_t* blk[R];
    hn::Vec<DF> t[R];  // q . x over the block
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      blk[i] = w + i * row_bytes + b * kQ8_0Bytes;
      // 34-byte blocks: one line each, consecutive blocks cover every line
      PrefetchAhead(blk[i], ahead, 1);
    }
    for (int64_t c = 0; c < 32; c += L) {
      const auto xv = hn::LoadU(df, xb + c);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const auto q = FloatsFromI8(blk[i] + 2 + c);
        t[i] = c == 0 ? hn::Mul(q, xv) : hn::MulAdd(q, xv, t[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = hn::MulAdd(hn::Set(df, ScaleF16(blk[i])), t[i], acc[i]);
  }
  for (int i = 0; i < R; ++i) out[i] = SumLanes(acc[i]);
}

// ---- Q4_0 ----------------------------------------------------------------------------------------
// block_q4_0: f16 d, u8 qs[16]; value j < 16 is d (low nibble of qs[j] - 8), value 16 + j
// d (high nibble - 8) (dequantize_row_q4_0). The 8 is taken off in integers, so the product is
// Q8_0's: W[r] . x = sum_b d_b ((q_b - 8) . x_b).

// The quants less 8 of values c .. c + L - 1 (lo) and 16 + c .. 16 + c + L - 1 (hi) of a block.
HWY_INLINE void Q4_0Quants(const uint8_t* blk, int64_t c, hn::Vec<DF>* lo, hn::Vec<DF>* hi) {
  const DF df;
  const DI32 di;
  const auto q = hn::PromoteTo(di, hn::LoadU(DU8(), blk + 2 + c));
  const auto eight = hn::Set(di, 8);
  *lo = hn::ConvertTo(df, hn::Sub(hn::And(q, hn::Set(di, 0xF)), eight));
  *hi = hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(q), eight));
}

void DequantizeRowQ4_0(const uint8_t* src, float* dst, int64_t cols) {
  const DF df;
  for (int64_t b = 0; b < cols / kQ4_0Elems; ++b) {
    const uint8_t* blk = src + b * kQ4_0Bytes;
    const auto d = hn::Set(df, ScaleF16(blk));
    for (int64_t c = 0; c < 16; c += L) {
      hn::Vec<DF> lo, hi;
      Q4_0Quants(blk, c, &lo, &hi);
      hn::StoreU(hn::Mul(lo, d), df, dst + b * kQ4_0Elems + c);
      hn::StoreU(hn::Mul(hi, d), df, dst + b * kQ4_0Elems + 16 + c);
    }
  }
}

template <int R>
void DotRowsQ4_0(const uint8_t* w, int64_t row_bytes, int64_t blocks, const float* x,
                 uintptr_t ahead, float* out) {
  const DF df;
  hn::Vec<DF> acc[R];
  for (int i = 0; i < R; ++i) acc[i] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQ4_0Elems;
    const uint8_t* blk[R];
    hn::Vec<DF> t[R];  // (q - 8) . x over the block
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      blk[i] = w + i * row_bytes + b * kQ4_0Bytes;
      // 18-byte blocks: one line each, consecutive blocks cover every line
      PrefetchAhead(blk[i], ahead, 1);
    }
    for (int64_t c = 0; c < 16; c += L) {
      const auto x1 = hn::LoadU(df, xb + c), x2 = hn::LoadU(df, xb + 16 + c);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        hn::Vec<DF> lo, hi;
        Q4_0Quants(blk[i], c, &lo, &hi);
        t[i] = c == 0 ? hn::Mul(lo, x1) : hn::MulAdd(lo, x1, t[i]);
        t[i] = hn::MulAdd(hi, x2, t[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = hn::MulAdd(hn::Set(df, ScaleF16(blk[i])), t[i], acc[i]);
  }
  for (int i = 0; i < R; ++i) out[i] = SumLanes(acc[i]);
}

// ---- F16, BF16 ------------------------------------------------------------------------------------
// Widened exactly (half.h); any number of columns: 32 values (one 64-byte line) a step, then
// whole vectors, then the last cols % L in scalar.

template <HalfType kType>
HWY_INLINE hn::Vec<DF> WidenHalves(const uint8_t* p) {
  const auto h = hn::LoadU(DU16(), reinterpret_cast<const uint16_t*>(p));
  if constexpr (kType == HalfType::kF16) {
    return hn::PromoteTo(DF(), hn::BitCast(DH(), h));
  } else {
    return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU32(), h)));
  }
}

template <HalfType kType, int R>
void DotRowsHalves(const uint8_t* w, int64_t row_bytes, int64_t cols, const float* x,
                   uintptr_t ahead, float* out) {
  const DF df;
  // One accumulator per vector of a 32-value step, so a row's multiply-adds form 32 / L
  // independent chains (one row at a time would otherwise wait on the latency of each).
  constexpr int64_t kChains = 32 / L;
  hn::Vec<DF> acc[R], part[R][kChains];
  for (int i = 0; i < R; ++i) {
    for (int64_t c = 0; c < kChains; ++c) part[i][c] = hn::Zero(df);
  }
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) PrefetchAhead(w + i * row_bytes + 2 * k, ahead, 1);
    for (int64_t c = 0; c < kChains; ++c) {
      const auto xv = hn::LoadU(df, x + k + c * L);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        part[i][c] =
            hn::MulAdd(WidenHalves<kType>(w + i * row_bytes + 2 * (k + c * L)), xv, part[i][c]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    acc[i] = part[i][0];
    for (int64_t c = 1; c < kChains; ++c) acc[i] = hn::Add(acc[i], part[i][c]);
  }
  for (; k + L <= cols; k += L) {
    const auto xv = hn::LoadU(df, x + k);
    for (int i = 0; i < R; ++i) {
      acc[i] = hn::MulAdd(WidenHalves<kType>(w + i * row_bytes + 2 * k), xv, acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float dot = SumLanes(acc[i]);
    for (int64_t j = k; j < cols; ++j) {
      const uint16_t h = LoadU16(w + i * row_bytes + 2 * j);
      dot += (kType == HalfType::kF16 ? HalfToFloat(h) : BFloat16ToFloat(h)) * x[j];
    }
    out[i] = dot;
  }
}

}  // namespace

void DequantizeRows(const PackedMatrix& m, int64_t r0, int64_t n, float* dst) {
  const int64_t C = m.cols;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* src = m.Row(r0 + r);
    float* out = dst + r * C;
    switch (m.type) {
      case PackedType::kF16:
        HalvesToFloats(reinterpret_cast<const uint16_t*>(src), out, C, HalfType::kF16);
        break;
      case PackedType::kBF16:
        HalvesToFloats(reinterpret_cast<const uint16_t*>(src), out, C, HalfType::kBF16);
        break;
      case PackedType::kQ8_0: DequantizeRowQ8_0(src, out, C); break;
      case PackedType::kQ4_K: DequantizeRowQ4_K(src, out, C); break;
      case PackedType::kQ6_K: DequantizeRowQ6_K(src, out, C); break;
      case PackedType::kQ4_0: DequantizeRowQ4_0(src, out, C); break;
      case PackedType::kQ5_K: DequantizeRowQ5_K(src, out, C); break;
    }
  }
}

void PackedDotRows(const PackedMatrix& W, const float* x, float beta, float* y, int64_t r0,
                   int64_t r1) {
  const int64_t rb = W.RowBytes();
  const auto ahead = static_cast<uintptr_t>(kAheadRows * rb);
  const int64_t blocks = W.cols / PackedBlockElems(W.type);
  switch (W.type) {
    case PackedType::kF16:
      ForRowGroups<kStreamRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsHalves<HalfType::kF16, decltype(rows)::value>(w, rb, W.cols, x, ahead, out);
      });
      break;
    case PackedType::kBF16:
      ForRowGroups<kStreamRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsHalves<HalfType::kBF16, decltype(rows)::value>(w, rb, W.cols, x, ahead, out);
      });
      break;
    case PackedType::kQ8_0:
      ForRowGroups<kStreamRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ8_0<decltype(rows)::value>(w, rb, blocks, x, ahead, out);
      });
      break;
    case PackedType::kQ4_K: {
      thread_local std::vector<float> xs;
      xs.resize(static_cast<size_t>(16 * blocks));
      Q4_KNegSums(x, blocks, xs.data());
      ForRowGroups<kGroupRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ4_K<decltype(rows)::value>(w, rb, blocks, x, xs.data(), ahead, out);
      });
      break;
    }
    case PackedType::kQ6_K:
      ForRowGroups<kGroupRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ6_K<decltype(rows)::value>(w, rb, blocks, x, ahead, out);
      });
      break;
    case PackedType::kQ4_0:
      ForRowGroups<kGroupRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ4_0<decltype(rows)::value>(w, rb, blocks, x, ahead, out);
      });
      break;
    case PackedType::kQ5_K: {
      thread_local std::vector<float> xs;
      xs.resize(static_cast<size_t>(16 * blocks));
      Q4_KNegSums(x, blocks, xs.data());
      ForRowGroups<kGroupRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ5_K<decltype(rows)::value>(w, rb, blocks, x, xs.data(), ahead, out);
      });
      break;
    }
  }
}

std::string PackedKernelsText() {
  return std::string("blocks decoded in registers, Highway ") + hwy::TargetName(HWY_TARGET);
}

}  // namespace stretch
