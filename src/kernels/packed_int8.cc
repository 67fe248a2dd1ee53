// The integer one-row products of packed matrices (src/kernels/packed_int8.h says what they
// compute, after ggml's vec_dot_q4_K_q8_K, vec_dot_q6_K_q8_K and vec_dot_q8_0_q8_0).
//
// AVX-512 with VNNI (x86 with AVX512BW, VL and VNNI, as -march=native finds them): 64 values a
// vector, one row after the other (each thread reads its rows as one sequential stream:
// packed_rows.h says why), prefetch as PackedDotRows (packed_dot.cc). Per row and block the integers stay in one
// int32 vector S whose lanes sum to the block's integer dot; S is converted to float once per
// block and multiplied into a float accumulator by the block's d_w d_x.
//
//   Q4_K  vpmaddubsw (nibbles 0..15, unsigned, times qx: pairs summed to int16, at most
//         2 * 15 * 127, no saturation), then vpdpwssd with each sub-block's sc_j in every int16
//         lane: S = sum_j sc_j (q_j . qx_j). The mins' sum_j m_j sum(qx_j) is one vpmaddwd of
//         (m_0, m_0, m_1, m_1, ..) with the 16 sums of x.
//   Q6_K  the same with q 0..63 (pairs at most 2 * 63 * 127) and signed sc_g per 16 values; the
//         -32 of each q is taken out as -32 sc_g sum(qx_g) (ggml's bsums), two vpdpwssd of sc_g
//         with -16 sum(qx_g) (which fits int16: 16 * 16 * 127).
//   Q8_0  vpdpbusd multiplies unsigned by signed bytes: with u = q_w + 128 (q_w xor 0x80),
//         q_w . qx = u . qx - 128 sum(qx), the second term put in the accumulator's first lanes
//         before the vpdpbusd. Two blocks a vector.
//
// The lanes of S stay below 2^24 for Q4_K and Q8_0 (exact in float), and below 2^26 for Q6_K.
//
// Elsewhere the portable kernels below compute the same integers one block at a time.
//
// Speed, one thread of this project's AMD EPYC (Zen 5), GB/s of the packed bytes, QuantizeInput
// included (once per product), medians of 15 in three runs on a shared 2-core machine, 14336 x
// 4096 / 4096 x 14336: Q4_K 18.4-30.0 / 22.5-26.5 (PackedDotRows 17.5-17.7 / 16.7-17.4), Q6_K
// 22.3-25.2 / 22.0-27.0 (11.3-11.4 / 11.2-11.3), Q8_0 24.2-25.6 / 19.3-23.7 (19.2-19.7 /
// 17.5-19.1); the float GemvRows on float32 25.3-26.0 / 19.7-21.9. In cache (64 x 4096): Q4_K 31,
// Q6_K 41, Q8_0 35 (PackedDotRows 19, 13, 27). QuantizeInput: 1.0 us for 4096 values (Q4_K, Q6_K),
// 1.9 us (Q8_0's blocks of 32).
#include "src/kernels/packed_int8.h"

#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "src/core/check.h"
#include "src/kernels/attention_simd.h"  // Highway set-up (static target), kPrefetchHint
#include "src/kernels/blocks.h"
#include "src/kernels/half.h"
#include "src/kernels/packed_rows.h"

#if defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__) && defined(__FMA__)
#define STRETCH_PACKED_INT8_AVX512 1
#include <immintrin.h>
#else
#define STRETCH_PACKED_INT8_AVX512 0
#endif

namespace stretch {

namespace {

namespace hn = hwy::HWY_NAMESPACE;

bool IsInt8Type(PackedType t) {
  return t == PackedType::kQ8_0 || t == PackedType::kQ4_K || t == PackedType::kQ6_K;
}

// ---- Portable kernels: one row, one block at a time ---------------------------------------------

float DotRowPortableQ4_K(const uint8_t* row, int64_t blocks, const QuantizedInput& xq) {
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ4_KBytes;
    const int8_t* qx = xq.q.data() + b * kQ4_KElems;
    const int16_t* sums = xq.sums.data() + b * 16;
    int32_t s = 0, m = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      ScaleMinK4(j, blk + 4, &sc, &mn);
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = blk[16 + 32 * (j / 2) + l];
        dot += (j % 2 == 0 ? byte & 0xF : byte >> 4) * qx[32 * j + l];
      }
      s += sc * dot;
      m += mn * (sums[2 * j] + sums[2 * j + 1]);
    }
    const float dx = xq.d[static_cast<size_t>(b)];
    acc += HalfToFloat(LoadU16(blk)) * dx * static_cast<float>(s);
    acc -= HalfToFloat(LoadU16(blk + 2)) * dx * static_cast<float>(m);
  }
  return acc;
}

float DotRowPortableQ6_K(const uint8_t* row, int64_t blocks, const QuantizedInput& xq) {
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ6_KBytes;
    const int8_t* qx = xq.q.data() + b * kQ6_KElems;
    const int16_t* sums = xq.sums.data() + b * 16;
    int32_t s = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) {
        const int v = 16 * g + l;  // value in the block
        const int h = v / 128, k = v % 128, p = k / 32, c = k % 32;
        const uint8_t ql = blk[64 * h + c + (p % 2) * 32];
        const uint8_t qh = blk[128 + 32 * h + c];
        const int q = ((p < 2 ? ql & 0xF : ql >> 4) | (((qh >> (2 * p)) & 3) << 4));
        dot += q * qx[v];
      }
      s += reinterpret_cast<const int8_t*>(blk + 192)[g] * (dot - 32 * sums[g]);
    }
    acc += HalfToFloat(LoadU16(blk + 208)) * xq.d[static_cast<size_t>(b)] * static_cast<float>(s);
  }
  return acc;
}

float DotRowPortableQ8_0(const uint8_t* row, int64_t blocks, const QuantizedInput& xq) {
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ8_0Bytes;
    const int8_t* qx = xq.q.data() + b * kQ8_0Elems;
    // The quants through an int8_t pointer, not static_cast<int8_t>(blk[2 + l]): g++ 12.2 at
    // -O2 -march=native turns the cast's loop into vpdpbusd, which takes the first bytes as
    // unsigned (wrong code: each negative quant counts 256 more).
    const auto* qw = reinterpret_cast<const int8_t*>(blk + 2);
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) s += qw[l] * qx[l];
    acc += HalfToFloat(LoadU16(blk)) * xq.d[static_cast<size_t>(b)] * static_cast<float>(s);
  }
  return acc;
}

#if STRETCH_PACKED_INT8_AVX512

using packed_internal::ForRowGroups;
using packed_internal::kAheadRows;
using packed_internal::kStreamRows;
inline void PrefetchAhead(const uint8_t* p, uintptr_t ahead, int lines) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + ahead;  // may pass the end: no fault
  for (int i = 0; i < lines; ++i) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + 64 * static_cast<uintptr_t>(i)), 0,
                       attention_internal::kPrefetchHint);
  }
}

inline __m512i Load2x256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
      _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// Byte-shuffle indices that put byte sel(lane, word) of each 128-bit lane's source into both
// bytes' low half of that int16 word, the high byte zero (index 0x80): a uint8 widened to int16.
struct ShuffleTable {
  alignas(64) uint8_t b[64];
};
template <class Sel>
constexpr ShuffleTable WordsFromBytes(Sel sel) {
  ShuffleTable t{};
  for (int lane = 0; lane < 4; ++lane) {
    for (int w = 0; w < 8; ++w) {
      t.b[16 * lane + 2 * w] = static_cast<uint8_t>(sel(lane, w));
      t.b[16 * lane + 2 * w + 1] = 0x80;
    }
  }
  return t;
}

// ---- Q4_K ----------------------------------------------------------------------------------------
// Bytes sc_0..7, m_0..7 of a block (get_scale_min_k4 for all j at once; packed_dot.cc's
// Q4_KScales derives the word shifts and masks).
inline __m128i Q4_KScaleBytes(const uint8_t* blk) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
  const __m128i a = _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9,
                                                        10, 11));  // words u0, u2, u1, u2
  const __m128i b = _mm_shuffle_epi8(
      raw, _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7));  // words u0, u0, u1, u1
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high =
      _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}

// The four quant vectors of a block are qs[0..63] and qs[64..127], low and high nibbles: vector
// v = 2 p + (high) holds sub-block 4 p + high in bytes 0..31 and 4 p + 2 + high in bytes 32..63,
// so its scale vector has sc of the first in 128-bit lanes 0-1, of the second in lanes 2-3.
constexpr ShuffleTable kQ4_KSc[4] = {
    WordsFromBytes([](int lane, int) { return (lane < 2 ? 0 : 2) + 0; }),
    WordsFromBytes([](int lane, int) { return (lane < 2 ? 0 : 2) + 1; }),
    WordsFromBytes([](int lane, int) { return (lane < 2 ? 0 : 2) + 4; }),
    WordsFromBytes([](int lane, int) { return (lane < 2 ? 0 : 2) + 5; }),
};
// m_j twice, j = 0..7 over two 128-bit lanes: the weights of x's 16 sums, (m_0, m_0, m_1, ..).
constexpr ShuffleTable kQ4_KMins =
    WordsFromBytes([](int lane, int w) { return 8 + 4 * (lane % 2) + w / 2; });

template <int R>
void DotRowsQ4_K(const uint8_t* w, int64_t row_bytes, int64_t blocks, const QuantizedInput& xq,
                 uintptr_t ahead, float* out) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  __m512i sc_index[4];
  for (int v = 0; v < 4; ++v) sc_index[v] = _mm512_load_si512(kQ4_KSc[v].b);
  const __m256i min_index = _mm256_load_si256(reinterpret_cast<const __m256i*>(kQ4_KMins.b));
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* xb = xq.q.data() + b * kQ4_KElems;
    // x in the order of the quant vectors (sub-blocks 0 | 2, 1 | 3, 4 | 6, 5 | 7)
    const __m512i x0 = Load2x256(xb, xb + 64), x1 = Load2x256(xb + 32, xb + 96);
    const __m512i x2 = Load2x256(xb + 128, xb + 192), x3 = Load2x256(xb + 160, xb + 224);
    const __m256i sums =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.sums.data() + 16 * b));
    const __m128 dx = _mm_set1_ps(xq.d[static_cast<size_t>(b)]);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = w + i * row_bytes + b * kQ4_KBytes;
      PrefetchAhead(blk, ahead, 3);  // 144 bytes: 3 lines from each block's start cover all
      const __m512i sm = _mm512_broadcast_i32x4(Q4_KScaleBytes(blk));
      const __m512i qa = _mm512_loadu_si512(blk + 16), qb = _mm512_loadu_si512(blk + 80);
      const __m512i q0 = _mm512_and_si512(qa, nib);
      const __m512i q1 = _mm512_and_si512(_mm512_srli_epi16(qa, 4), nib);
      const __m512i q2 = _mm512_and_si512(qb, nib);
      const __m512i q3 = _mm512_and_si512(_mm512_srli_epi16(qb, 4), nib);
      __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q0, x0),
                                      _mm512_shuffle_epi8(sm, sc_index[0]));
      s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q1, x1),
                              _mm512_shuffle_epi8(sm, sc_index[1]));
      s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q2, x2),
                              _mm512_shuffle_epi8(sm, sc_index[2]));
      s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q3, x3),
                              _mm512_shuffle_epi8(sm, sc_index[3]));
      const __m256i m =
          _mm256_madd_epi16(_mm256_shuffle_epi8(_mm512_castsi512_si256(sm), min_index), sums);
      // d_x d and d_x dmin
      int32_t d_dmin;
      std::memcpy(&d_dmin, blk, 4);
      const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d_dmin)), dx);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_broadcastss_ps(dd), acc[i]);
      acc[i] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(m)),
                                _mm512_broadcastss_ps(_mm_movehdup_ps(dd)), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]);
}

// ---- Q6_K ----------------------------------------------------------------------------------------
// A half (128 values) is ql[64 h .. + 63], qh[32 h .. + 31] (dequantize_row_q6_K): its values
// 0..63 are ql's low nibbles in order with bits 4-5 from qh's bits 0-1 (values 0..31) and 2-3
// (32..63); values 64..127 the high nibbles with qh's bits 4-5 and 6-7. With qh in both 256-bit
// halves, one 16-bit shift per half (left 4 and 2; right 0 and 2) brings those bits to 4-5, and
// 0x30 keeps them (bits that a shift carries across bytes land outside them).
// Group g of 16 values has scale sc_g: vector v (values 64 v ..) has group 4 v + lane per lane.
struct WordTable {
  alignas(64) uint16_t w[32];
};
constexpr WordTable GroupIndex(int v) {
  WordTable t{};
  for (int k = 0; k < 32; ++k) t.w[k] = static_cast<uint16_t>(4 * v + k / 8);
  return t;
}
constexpr WordTable kQ6_KGroups[4] = {GroupIndex(0), GroupIndex(1), GroupIndex(2), GroupIndex(3)};

template <int R>
void DotRowsQ6_K(const uint8_t* w, int64_t row_bytes, int64_t blocks, const QuantizedInput& xq,
                 uintptr_t ahead, float* out) {
  const __m512i nib = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  __m512i group[4];
  for (int v = 0; v < 4; ++v) group[v] = _mm512_load_si512(kQ6_KGroups[v].w);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* xb = xq.q.data() + b * kQ6_KElems;
    __m512i x[4];
    for (int v = 0; v < 4; ++v) x[v] = _mm512_loadu_si512(xb + 64 * v);
    // -16 sum(qx_g): two vpdpwssd with sc_g make -32 sc_g sum(qx_g)
    const __m256i neg16 = _mm256_sub_epi16(
        _mm256_setzero_si256(),
        _mm256_slli_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.sums.data() + 16 * b)), 4));
    const float dx = xq.d[static_cast<size_t>(b)];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = w + i * row_bytes + b * kQ6_KBytes;
      PrefetchAhead(blk, ahead, 4);  // 210 bytes: 4 lines from each block's start
      const __m256i sc =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
      __m256i off = _mm256_dpwssd_epi32(_mm256_setzero_si256(), sc, neg16);
      off = _mm256_dpwssd_epi32(off, sc, neg16);
      __m512i s = _mm512_zextsi256_si512(off);
      const __m512i sc512 = _mm512_zextsi256_si512(sc);
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(ql, nib),
                                           _mm512_and_si512(_mm512_sllv_epi16(qh, shl), top));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nib),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, shr), top));
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(lo, x[2 * h]),
                                _mm512_permutexvar_epi16(group[2 * h], sc512));
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(hi, x[2 * h + 1]),
                                _mm512_permutexvar_epi16(group[2 * h + 1], sc512));
      }
      const float d = _cvtsh_ss(LoadU16(blk + 208)) * dx;
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]);
}

// ---- Q8_0 ----------------------------------------------------------------------------------------
// Two blocks a step: quants of block b in bytes 0..31, of b + 1 in 32..63 (int32 lanes 0-7 and
// 8-15), its scales likewise. An odd last block runs alone, the upper lanes zero.
//
// What a step takes from x is the same for every row: the accumulator's start (-128 times x's
// two sums of 16 in lanes 0, 1 for block b and 8, 9 for b + 1, zero elsewhere) and x's scales
// (d_x of b in lanes 0-7, of b + 1 in 8-15). Q8_0XPairs makes them once per call; a row's step
// then loads them. Made in each row's step instead (as before), decode of the Llama-3.2-1B shape
// in Q8_0 on 2 threads of an Intel Xeon ran 1.10-1.20x slower (median 1.12x, 6 rounds of
// `stretch bench --case decode` in alternation; 66% against 75% of the read rate measured before
// each run): a dozen instructions fewer per 68 bytes count even in a loop that waits on memory.
struct Q8_0XPairs {
  std::vector<int32_t> init;  // 16 lanes a step
  std::vector<float> dx;      // 16 lanes a step
};

void MakeQ8_0XPairs(int64_t blocks, const QuantizedInput& xq, Q8_0XPairs* p) {
  // lanes 0, 1 <- x's sums 0, 1 (block b); lanes 8, 9 <- sums 2, 3 (block b + 1)
  const __m512i sum_index = _mm512_setr_epi32(0, 1, 0, 0, 0, 0, 0, 0, 2, 3, 0, 0, 0, 0, 0, 0);
  const size_t lanes = static_cast<size_t>((blocks + 1) / 2) * 16;
  p->init.resize(lanes);
  p->dx.resize(lanes);
  for (int64_t b = 0; b < blocks; b += 2) {
    const bool two = b + 1 < blocks;
    int64_t sums4 = 0;  // int16 sums of 16 values: 2 per block
    std::memcpy(&sums4, xq.sums.data() + 2 * b, two ? 8 : 4);
    const __m512i s32 = _mm512_maskz_permutexvar_epi32(
        0x0303, sum_index, _mm512_zextsi128_si512(_mm_cvtepi16_epi32(_mm_cvtsi64_si128(sums4))));
    _mm512_storeu_si512(p->init.data() + 8 * b,
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s32, 7)));
    const float dx0 = xq.d[static_cast<size_t>(b)];
    const float dx1 = two ? xq.d[static_cast<size_t>(b + 1)] : 0.0f;
    _mm512_storeu_ps(p->dx.data() + 8 * b,
                     _mm512_insertf32x8(_mm512_set1_ps(dx0), _mm256_set1_ps(dx1), 1));
  }
}

template <int R>
void DotRowsQ8_0(const uint8_t* w, int64_t row_bytes, int64_t blocks, const QuantizedInput& xq,
                 const Q8_0XPairs& xp, uintptr_t ahead, float* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b += 2) {
    const bool two = b + 1 < blocks;
    const int8_t* xb = xq.q.data() + b * kQ8_0Elems;
    const __m512i x =
        two ? _mm512_loadu_si512(xb)
            : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)));
    const __m512i init = _mm512_loadu_si512(xp.init.data() + 8 * b);
    const __m512 dx = _mm512_loadu_ps(xp.dx.data() + 8 * b);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = w + i * row_bytes + b * kQ8_0Bytes;
      // 34-byte blocks: one line each, consecutive blocks cover every line
      PrefetchAhead(blk, ahead, 1);
      __m512i q;
      __m256i h = _mm256_set1_epi16(static_cast<int16_t>(LoadU16(blk)));
      if (two) {
        PrefetchAhead(blk + kQ8_0Bytes, ahead, 1);
        q = Load2x256(blk + 2, blk + kQ8_0Bytes + 2);
        h = _mm256_mask_set1_epi16(h, 0xFF00, static_cast<int16_t>(LoadU16(blk + kQ8_0Bytes)));
      } else {
        q = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
      }
      const __m512i s = _mm512_dpbusd_epi32(init, _mm512_xor_si512(q, flip), x);
      acc[i] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_cvtph_ps(h), dx), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]);
}

#endif  // STRETCH_PACKED_INT8_AVX512

void CheckOperands(const PackedMatrix& W, const QuantizedInput& xq) {
  STRETCH_CHECK(IsInt8Type(W.type) && xq.type == W.type && xq.n == W.cols,
                "x quantized for {} of {} values, matrix {} of {} columns", PackedTypeName(xq.type),
                xq.n, PackedTypeName(W.type), W.cols);
}

}  // namespace

bool PackedInt8Available(PackedType type) { return STRETCH_PACKED_INT8_AVX512 && IsInt8Type(type); }

// Per block of B values: amax = max |x|; iscale = 127 / amax; q = the nearest integer to
// iscale x, ties to even (ggml's nearest_int adds 1.5 * 2^23, which rounds so; here a vector
// float -> int conversion in the default rounding mode), at most 127 (min(127, v) as ggml;
// |iscale x| <= 127 (1 + 2^-23) rounds to 127 anyway); d = 1 / iscale. amax 0: d 0, q 0.
void QuantizeInput(const float* x, int64_t n, PackedType for_type, QuantizedInput* out) {
  STRETCH_CHECK(IsInt8Type(for_type), "no int8 products for {}", PackedTypeName(for_type));
  out->type = for_type;
  out->n = n;
  const int64_t B = out->Block();
  STRETCH_CHECK(n % B == 0, "{} values are not whole blocks of {}", n, B);
  out->d.resize(static_cast<size_t>(n / B));
  out->q.resize(static_cast<size_t>(n));
  out->sums.resize(static_cast<size_t>(n / 16));
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = 0; b < n / B; ++b) {
    const float* xb = x + b * B;
    int8_t* qb = out->q.data() + b * B;
    auto amax = hn::Zero(df), probe = hn::Zero(df);
    for (int64_t k = 0; k < B; k += L) {
      const auto v = hn::LoadU(df, xb + k);
      amax = hn::Max(amax, hn::Abs(v));
      probe = hn::Add(probe, hn::Mul(v, hn::Zero(df)));  // NaN if an inf or a NaN
    }
    const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
    const float finite = hn::GetLane(hn::SumOfLanes(df, probe));
    float& d = out->d[static_cast<size_t>(b)];
    if (m == 0.0f || finite != 0.0f) {
      d = m == 0.0f ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      std::memset(qb, 0, static_cast<size_t>(B));
    } else {
      const float iscale = 127.0f / m;
      // Q8_0 keeps d as F16 (block_q8_0; quantize_row_q8_0 stores max / 127 rounded), so its
      // products use that d; Q8_K keeps the float 1 / iscale (quantize_row_q8_K_ref).
      d = 1.0f / iscale;
      if (for_type == PackedType::kQ8_0) {
        const float dq = m / 127.0f;
        uint16_t h;
        FloatsToHalves(&dq, &h, 1, HalfType::kF16);
        d = HalfToFloat(h);
      }
      const auto s = hn::Set(df, iscale);
      for (int64_t k = 0; k < B; k += L) {
        const auto q = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, xb + k), s)), hn::Set(di, 127));
        hn::StoreU(hn::DemoteTo(d8, q), d8, qb + k);
      }
    }
    for (int64_t g = 0; g < B / 16; ++g) {
      int32_t sum = 0;
      for (int l = 0; l < 16; ++l) sum += qb[16 * g + l];
      out->sums[static_cast<size_t>(b * B / 16 + g)] = static_cast<int16_t>(sum);
    }
  }
}

void PackedDotRowsInt8(const PackedMatrix& W, const QuantizedInput& xq, float beta, float* y,
                       int64_t r0, int64_t r1) {
#if STRETCH_PACKED_INT8_AVX512
  CheckOperands(W, xq);
  const int64_t rb = W.RowBytes();
  const auto ahead = static_cast<uintptr_t>(kAheadRows * rb);
  const int64_t blocks = W.cols / PackedBlockElems(W.type);
  switch (W.type) {
    case PackedType::kQ8_0: {
      thread_local Q8_0XPairs xp;
      MakeQ8_0XPairs(blocks, xq, &xp);
      ForRowGroups<kStreamRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ8_0<decltype(rows)::value>(w, rb, blocks, xq, xp, ahead, out);
      });
      break;
    }
    case PackedType::kQ4_K:
      ForRowGroups<kStreamRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ4_K<decltype(rows)::value>(w, rb, blocks, xq, ahead, out);
      });
      break;
    case PackedType::kQ6_K:
      ForRowGroups<kStreamRows>(W, beta, y, r0, r1, [&](auto rows, const uint8_t* w, float* out) {
        DotRowsQ6_K<decltype(rows)::value>(w, rb, blocks, xq, ahead, out);
      });
      break;
    default: break;
  }
#else
  packed_int8_internal::DotRowsPortable(W, xq, beta, y, r0, r1);
#endif
}

namespace packed_int8_internal {

void DotRowsPortable(const PackedMatrix& W, const QuantizedInput& xq, float beta, float* y,
                     int64_t r0, int64_t r1) {
  CheckOperands(W, xq);
  const int64_t blocks = W.cols / PackedBlockElems(W.type);
  for (int64_t r = r0; r < r1; ++r) {
    float dot = 0.0f;
    switch (W.type) {
      case PackedType::kQ8_0: dot = DotRowPortableQ8_0(W.Row(r), blocks, xq); break;
      case PackedType::kQ4_K: dot = DotRowPortableQ4_K(W.Row(r), blocks, xq); break;
      case PackedType::kQ6_K: dot = DotRowPortableQ6_K(W.Row(r), blocks, xq); break;
      default: break;
    }
    float& o = y[r - r0];
    o = beta == 0.0f ? dot : dot + beta * o;
  }
}

}  // namespace packed_int8_internal

}  // namespace stretch
