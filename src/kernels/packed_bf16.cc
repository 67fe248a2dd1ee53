#include "src/kernels/packed_bf16.h"

#include <algorithm>

#include "src/core/check.h"
#include "src/kernels/blocks.h"
#include "src/kernels/half.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512BF16__)
#define STRETCH_PACKED_BF16_AVX512 1
#include <immintrin.h>
#else
#define STRETCH_PACKED_BF16_AVX512 0
#endif

namespace stretch {

namespace {

void CheckShape(const PackedMatrix& W, int64_t r0, int64_t r1) {
  STRETCH_CHECK(W.type == PackedType::kBF16 && W.cols % 2 == 0,
                "bf16 products: a {} matrix of {} columns (expected BF16, an even count)",
                PackedTypeName(W.type), W.cols);
  STRETCH_CHECK(0 <= r0 && r0 <= r1 && r1 <= W.rows, "bf16 products: rows {}..{} of {}", r0, r1,
                W.rows);
}

#if STRETCH_PACKED_BF16_AVX512

// The tile: kMr rows of x times a panel of kNr rows of W, over a block of kKc values of K. The
// panel is packed so that each pair of K's values of the panel's 32 rows is two vectors (row n's
// pair at lane n), and each x row's pair is one 32-bit value broadcast to every lane: one
// VDPBF16PS adds two products to 16 sums. 8 rows of x and 32 of W keep 16 sums in registers, with
// two loads of W and eight broadcasts for sixteen dot instructions.
constexpr int kNr = 32;
constexpr int kMr = 8;
// Values of K per block: a packed panel of 32 x 2048 bfloat16 is 128 KiB, in the core's L2 with x's
// rows beside it.
constexpr int64_t kKc = 2048;

// A vector of 32 bfloat16 seen as the instruction's operand type (the same 64 bytes).
inline __m512bh AsBh(__m512i v) { return (__m512bh)v; }  // NOLINT: a vector reinterpretation

// panel[p * kNr + n] = the pair p of row r + n from value k0 on (both values as one uint32); rows
// past `rows` are zero.
void PackPanel(const PackedMatrix& W, int64_t r, int64_t rows, int64_t k0, int64_t pairs,
               uint32_t* panel) {
  for (int64_t n = 0; n < kNr; ++n) {
    if (n >= rows) {
      for (int64_t p = 0; p < pairs; ++p) panel[p * kNr + n] = 0;
      continue;
    }
    const auto* src = reinterpret_cast<const uint32_t*>(W.Row(r + n)) + k0 / 2;
    for (int64_t p = 0; p < pairs; ++p) panel[p * kNr + n] = src[p];
  }
}

// y rows of the tile (kMr or fewer rows of x, `rows` <= 32 of W): the block's sums stored (first
// block: plus beta y when beta != 0) or added.
template <int MR>
__attribute__((always_inline)) inline void Tile(const uint32_t* panel, int64_t pairs,
                                                const uint16_t* x, int64_t K, int64_t k0, float* y,
                                                int64_t ldy, int64_t rows, bool first, float beta) {
  __m512 acc[MR][2];
  const uint32_t* xr[MR];
  for (int m = 0; m < MR; ++m) {
    acc[m][0] = _mm512_setzero_ps();
    acc[m][1] = _mm512_setzero_ps();
    xr[m] = reinterpret_cast<const uint32_t*>(x + m * K + k0);
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const auto w0 = AsBh(_mm512_loadu_si512(panel + p * kNr));
    const auto w1 = AsBh(_mm512_loadu_si512(panel + p * kNr + 16));
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const auto b = AsBh(_mm512_set1_epi32(static_cast<int>(xr[m][p])));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], b, w0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], b, w1);
    }
  }
  const auto lanes = [](int64_t n) {
    return static_cast<__mmask16>(n >= 16 ? 0xFFFF : (n <= 0 ? 0 : (1u << n) - 1u));
  };
  const __mmask16 mask[2] = {lanes(rows), lanes(rows - 16)};
  const __m512 vbeta = _mm512_set1_ps(beta);
  for (int m = 0; m < MR; ++m) {
    for (int h = 0; h < 2; ++h) {
      if (mask[h] == 0) continue;
      float* out = y + m * ldy + h * 16;
      __m512 v = acc[m][h];
      if (!first) {
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[h], out));
      } else if (beta != 0.0f) {
        v = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mask[h], out), v);
      }
      _mm512_mask_storeu_ps(out, mask[h], v);
    }
  }
}

template <int MR>
void TileRows(const uint32_t* panel, int64_t pairs, const uint16_t* x, int64_t K, int64_t k0,
              float* y, int64_t ldy, int64_t rows, bool first, float beta) {
  Tile<MR>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
}

// The rest of the rows of x (fewer than kMr), one tile.
void TailTile(int mr, const uint32_t* panel, int64_t pairs, const uint16_t* x, int64_t K,
              int64_t k0, float* y, int64_t ldy, int64_t rows, bool first, float beta) {
  switch (mr) {
    case 1: return TileRows<1>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    case 2: return TileRows<2>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    case 3: return TileRows<3>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    case 4: return TileRows<4>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    case 5: return TileRows<5>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    case 6: return TileRows<6>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    case 7: return TileRows<7>(panel, pairs, x, K, k0, y, ldy, rows, first, beta);
    default: STRETCH_CHECK(false, "bf16 products: a tail of {} rows", mr);
  }
}

void RowsAvx512(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t K = W.cols;
  thread_local std::vector<uint32_t> panel;
  panel.resize(static_cast<size_t>(kKc / 2 * kNr));
  for (int64_t r = r0; r < r1; r += kNr) {
    const int64_t rows = std::min<int64_t>(kNr, r1 - r);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t pairs = std::min(kKc, K - k0) / 2;
      PackPanel(W, r, rows, k0, pairs, panel.data());
      const bool first = k0 == 0;
      float* yr = y + (r - r0);
      int64_t t = 0;
      for (; t + kMr <= T; t += kMr) {
        TileRows<kMr>(panel.data(), pairs, xb + t * K, K, k0, yr + t * ldy, ldy, rows, first, beta);
      }
      if (t < T) {
        TailTile(static_cast<int>(T - t), panel.data(), pairs, xb + t * K, K, k0, yr + t * ldy, ldy,
                 rows, first, beta);
      }
    }
  }
}

// One row: four sums of 16 lanes over 128 values a step (four independent chains of
// VDPBF16PS), then 32 a step, the last ones masked; the row after next prefetched as the others'
// one-row kernels do (kAheadRows rows ahead).
float DotRowAvx512(const uint16_t* w, const uint16_t* x, int64_t K, uintptr_t ahead) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t k = 0;
  for (; k + 128 <= K; k += 128) {
    const auto* line = reinterpret_cast<const char*>(w + k);
    _mm_prefetch(line + ahead, _MM_HINT_T0);
    _mm_prefetch(line + ahead + 64, _MM_HINT_T0);
    _mm_prefetch(line + ahead + 128, _MM_HINT_T0);
    _mm_prefetch(line + ahead + 192, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      acc[c] = _mm512_dpbf16_ps(acc[c], AsBh(_mm512_loadu_si512(x + k + 32 * c)),
                                AsBh(_mm512_loadu_si512(w + k + 32 * c)));
    }
  }
  for (; k < K; k += 32) {
    const int64_t left = std::min<int64_t>(32, K - k);
    const auto mask = static_cast<__mmask32>(left == 32 ? 0xFFFFFFFFu : (1u << left) - 1u);
    acc[0] = _mm512_dpbf16_ps(acc[0], AsBh(_mm512_maskz_loadu_epi16(mask, x + k)),
                              AsBh(_mm512_maskz_loadu_epi16(mask, w + k)));
  }
  // (Summed through memory: g++ 12's _mm512_reduce_add_ps trips its own uninitialized warning.)
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes,
                  _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  float sum = 0.0f;
  for (const float v : lanes) sum += v;
  return sum;
}

#endif  // STRETCH_PACKED_BF16_AVX512

}  // namespace

bool PackedBf16Available() { return STRETCH_PACKED_BF16_AVX512 != 0; }

void RoundRowsToBf16(const float* x, int64_t T, int64_t K, std::vector<uint16_t>* out) {
  out->resize(static_cast<size_t>(T * K));
  FloatsToHalves(x, out->data(), T * K, HalfType::kBF16);
}

void PackedBf16Rows(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                    int64_t ldy, int64_t r0, int64_t r1) {
  CheckShape(W, r0, r1);
#if STRETCH_PACKED_BF16_AVX512
  RowsAvx512(W, xb, T, beta, y, ldy, r0, r1);
#else
  packed_bf16_internal::RowsPortable(W, xb, T, beta, y, ldy, r0, r1);
#endif
}

void PackedBf16DotRows(const PackedMatrix& W, const uint16_t* xb, float beta, float* y, int64_t r0,
                       int64_t r1) {
  CheckShape(W, r0, r1);
#if STRETCH_PACKED_BF16_AVX512
  const auto ahead = static_cast<uintptr_t>(8 * W.RowBytes());
  for (int64_t r = r0; r < r1; ++r) {
    const float dot = DotRowAvx512(reinterpret_cast<const uint16_t*>(W.Row(r)), xb, W.cols, ahead);
    float& o = y[r - r0];
    o = beta == 0.0f ? dot : dot + beta * o;
  }
#else
  packed_bf16_internal::RowsPortable(W, xb, 1, beta, y, r1 - r0, r0, r1);
#endif
}

namespace packed_bf16_internal {

// The same sums in the same pairs (two products, exact in float32, added to the running sum in
// one rounding each: the instruction's own order within a lane) but for the denormals the
// instruction flushes.
void RowsPortable(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                  int64_t ldy, int64_t r0, int64_t r1) {
  CheckShape(W, r0, r1);
  const int64_t K = W.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* w = reinterpret_cast<const uint16_t*>(W.Row(r));
    for (int64_t t = 0; t < T; ++t) {
      const uint16_t* x = xb + t * K;
      float sum = 0.0f;
      for (int64_t k = 0; k < K; k += 2) {
        sum += BFloat16ToFloat(x[k]) * BFloat16ToFloat(w[k]);
        sum += BFloat16ToFloat(x[k + 1]) * BFloat16ToFloat(w[k + 1]);
      }
      float& o = y[t * ldy + (r - r0)];
      o = beta == 0.0f ? sum : sum + beta * o;
    }
  }
}

}  // namespace packed_bf16_internal

}  // namespace stretch
