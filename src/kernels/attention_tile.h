// The tile steps of the attention kernel (src/kernels/attention.cc, whose top comment gives the
// math, the structure and the tile sizes): the mask policies (Classify a tile, bound a query
// tile's keys, mask a partial tile), the packing of K^T, and the three SIMD micro-kernels of one
// key tile (S = Q K^T, the online softmax update, O = alpha O + P V). Internal to src/kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "src/kernels/attention.h"
#include "src/kernels/attention_simd.h"

namespace stretch::attention_internal {

constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLog2eD = 1.4426950408889634;
constexpr double kLn2D = 0.6931471805599453;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Vector registers available to a micro-kernel's accumulators.
#if HWY_ARCH_X86 && (HWY_TARGET <= HWY_AVX3)
constexpr int kVecRegs = 32;
#else
constexpr int kVecRegs = 16;
#endif

// Stacked query rows per query tile (all heads of one kv group): 240 from D = 16 on, 60 at D = 8.
// Since a prefill's tile is processed in blocks of kSubRows rows (attention_impl.h), each on the
// keys its rows see, the tile's size no longer sets the waste on the causal diagonal (which had
// kept it at 60 below D = 64), and a larger tile shares each K^T packing among more rows. `stretch
// bench --case attention --length 2048 --threads 1`, best of 9, rounds alternating 240 rows with
// the sizes before (Intel Xeon of docs/performance.md, issue 14, sixth session), GFLOP/s: D = 64,
// 115-126 against 105-110 at 120 rows; D = 48, 115-126 against 81-120 at 60 (six rounds, 240 ahead
// in five); D = 32, 106-110 against 92-103; D = 16, 79-85 against 55-82; D = 8, 37-51 against
// 35-50, no clear difference, so it keeps 60. Multiples of the micro-kernels' 6 (and 4) rows, also
// after dividing by H/G = 1, 2, 4: no ragged row blocks.
constexpr int QueryTileRows(int D) { return D >= 16 ? 240 : 60; }

enum class TileKind { kEmpty, kFull, kPartial };

// Mask policies. Positions are inclusive ranges of absolute positions; Classify answers for the
// tile of queries [q_lo, q_hi] x keys [k_lo, k_hi]; KeyBegin/KeyEnd bound the keys a query tile
// can see, so that a window of w costs O(L w), not O(L^2).
struct CausalMask {
  TileKind Classify(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
    if (k_lo > q_hi) return TileKind::kEmpty;
    if (k_hi <= q_lo) return TileKind::kFull;
    return TileKind::kPartial;
  }
  bool Visible(int64_t q_pos, int64_t k_pos) const { return k_pos <= q_pos; }
  int64_t KeyBegin(int64_t /*q_lo*/) const { return 0; }
  // Keys at or after this position are invisible to queries at positions <= q_hi.
  int64_t KeyEnd(int64_t q_hi) const { return q_hi + 1; }
};

// Key j visible to query i when 0 <= i - j < w.
struct WindowMask {
  int64_t w;
  TileKind Classify(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
    const int64_t d_lo = q_lo - k_hi, d_hi = q_hi - k_lo;  // range of i - j over the tile
    if (d_hi < 0 || d_lo >= w) return TileKind::kEmpty;
    if (d_lo >= 0 && d_hi < w) return TileKind::kFull;
    return TileKind::kPartial;
  }
  bool Visible(int64_t q_pos, int64_t k_pos) const { return k_pos <= q_pos && q_pos - k_pos < w; }
  int64_t KeyBegin(int64_t q_lo) const { return std::max<int64_t>(0, q_lo - w + 1); }
  int64_t KeyEnd(int64_t q_hi) const { return q_hi + 1; }
};

// Lambda: the window, plus the first n keys (sinks) for every query after them.
struct LambdaMask {
  int64_t w, n;
  TileKind Classify(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
    const TileKind causal = CausalMask{}.Classify(q_lo, q_hi, k_lo, k_hi);
    if (causal == TileKind::kEmpty || k_hi < n) return causal;  // sinks: causal only
    const TileKind window = WindowMask{w}.Classify(q_lo, q_hi, k_lo, k_hi);
    if (k_lo >= n || window == TileKind::kFull) return window;
    return TileKind::kPartial;  // straddles the last sink
  }
  bool Visible(int64_t q_pos, int64_t k_pos) const {
    return k_pos <= q_pos && (q_pos - k_pos < w || k_pos < n);
  }
  int64_t KeyBegin(int64_t /*q_lo*/) const { return 0; }
  int64_t KeyEnd(int64_t q_hi) const { return q_hi + 1; }
};

// Masks whose query i sees the keys from Begin(i, n) to i, Begin nondecreasing in i: blockwise
// causal (BlockKeyBegin, half-blocks of n: from the start of the half-block before the query's)
// and chunked (ChunkKeyBegin, chunks of n: from the start of the query's own chunk).
template <int64_t (*Begin)(int64_t, int64_t)>
struct BeginMask {
  int64_t n;
  TileKind Classify(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
    if (k_lo > q_hi || k_hi < KeyBegin(q_lo)) return TileKind::kEmpty;
    if (k_hi <= q_lo && k_lo >= KeyBegin(q_hi)) return TileKind::kFull;
    return TileKind::kPartial;
  }
  bool Visible(int64_t q_pos, int64_t k_pos) const {
    return k_pos <= q_pos && k_pos >= KeyBegin(q_pos);
  }
  int64_t KeyBegin(int64_t q_lo) const { return Begin(q_lo, n); }
  int64_t KeyEnd(int64_t q_hi) const { return q_hi + 1; }
};
using BlockMask = BeginMask<BlockKeyBegin>;
using ChunkMask = BeginMask<ChunkKeyBegin>;

// Calls f(mask) with the mask policy of `plan` (causal without a plan): the one choice of mask
// for the forward (attention.cc) and the backward (attention_backward.cc), made once per call.
template <class F>
void WithMask(const AttentionPlan* plan, F&& f) {
  if (plan == nullptr) return f(CausalMask{});
  switch (plan->mask) {
    case MaskKind::kCausal: return f(CausalMask{});
    case MaskKind::kWindow: return f(WindowMask{plan->window});
    case MaskKind::kBlock: return f(BlockMask{plan->window / 2});
    case MaskKind::kLambda: return f(LambdaMask{plan->window, plan->sinks});
    case MaskKind::kChunk: return f(ChunkMask{plan->window});
  }
}

// Compile-time shape of the kernel for one head dimension (kD = 0: any D, known at run time).
template <int kD>
struct Config {
  // Vectors across keys (QK^T, softmax): up to 16 lanes whatever D is.
  using DF = hn::CappedTag<float, 16>;
  static constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  // Vectors across D (P V): one V row is one vector at D = 8; 8 lanes for the generic path.
  using DFV = hn::CappedTag<float, (kD == 8 || kD == 0) ? 8 : 16>;
  static constexpr int kNV = static_cast<int>(hn::MaxLanes(DFV()));
  // Keys per tile. 128 up to D = 64: on the Intel Xeon of docs/performance.md (issue 14, fifth
  // session), `stretch bench --case prefill --length 2048` alternating 64 and 128 keys a tile:
  // stories110M shape (D = 64), six rounds, 128 / 64 per round 1.07, 1.04, 1.12, 0.96, 1.09, 0.99;
  // stories15M shape (D = 48), two rounds, 1.09 and 1.09; 110M decode at depth 2,048 level. A
  // small gain at most, inside the machine's noise at 110M. D = 128 keeps 64: its K^T tile (32
  // KiB) stays in L1.
  static constexpr int kBk = (kD != 0 && kD <= 64) ? 128 : 64;
  // QK^T block: R query rows x C vectors of keys.
  static constexpr int kQkR = kVecRegs == 32 ? 6 : 4;
  static constexpr int kQkC = kVecRegs == 32 ? 4 : 2;
  // PV block: R query rows x C vectors of D (accumulators R*C, plus C loads and a broadcast).
  static constexpr int kDv = kD == 0 ? 1 : std::max(1, kD / kNV);  // vectors per row of D
  static constexpr int kPvC = std::min(kDv, kVecRegs == 32 ? 4 : 2);
  static constexpr int kPvR = kVecRegs == 32 ? 6 : 4;
  static constexpr bool kVectorPv = kD != 0 && kD % kNV == 0;
};

// Calls f.operator()<R, C>(row0, vec0) over a (rows x vecs) grid in blocks of R x C, with smaller
// blocks at the edges, so every micro-kernel has compile-time extents.
template <int R, int C, class F>
HWY_INLINE void TailRows(int rem, int r0, int v0, F& f) {
  if constexpr (R >= 1) {
    if (rem == R) {
      f.template operator()<R, C>(r0, v0);
    } else {
      TailRows<R - 1, C>(rem, r0, v0, f);
    }
  }
}
template <int R, int C, class F>
HWY_INLINE void ForRowBlocks(int rows, int v0, F& f) {
  int r0 = 0;
  for (; r0 + R <= rows; r0 += R) f.template operator()<R, C>(r0, v0);
  if (r0 < rows) TailRows<R - 1, C>(rows - r0, r0, v0, f);
}
template <int R, int C, class F>
HWY_INLINE void ForBlocks(int rows, int vecs, F& f) {
  int v0 = 0;
  for (; v0 + C <= vecs; v0 += C) ForRowBlocks<R, C>(rows, v0, f);
  for (; v0 < vecs; ++v0) ForRowBlocks<R, 1>(rows, v0, f);
}

// kt (D, kBk) <- keys [k_lo, k_lo + nk) of kv head g, transposed; columns nk..ncols-1 zero.
template <int kBk>
void PackKeysTransposed(const HeadRows& k, int g, int64_t k_lo, int nk, int ncols, int D,
                        float* HWY_RESTRICT kt) {
  const float* base = k.data + k_lo * k.row_stride + g * k.head_stride;
  const int64_t rs = k.row_stride;
  int j0 = 0;
#if HWY_ARCH_X86 && (HWY_TARGET <= HWY_AVX2)
  if (D % 8 == 0) {
    // 8x8 blocks transposed in registers.
    const hn::FixedTag<float, 8> d8;
    const hn::Repartition<double, decltype(d8)> dd;
    for (; j0 + 8 <= nk; j0 += 8) {
      for (int d0 = 0; d0 < D; d0 += 8) {
        const float* src = base + j0 * rs + d0;
        const auto r0 = hn::LoadU(d8, src), r1 = hn::LoadU(d8, src + rs);
        const auto r2 = hn::LoadU(d8, src + 2 * rs), r3 = hn::LoadU(d8, src + 3 * rs);
        const auto r4 = hn::LoadU(d8, src + 4 * rs), r5 = hn::LoadU(d8, src + 5 * rs);
        const auto r6 = hn::LoadU(d8, src + 6 * rs), r7 = hn::LoadU(d8, src + 7 * rs);
        const auto t0 = hn::BitCast(dd, hn::InterleaveLower(d8, r0, r1));
        const auto t1 = hn::BitCast(dd, hn::InterleaveUpper(d8, r0, r1));
        const auto t2 = hn::BitCast(dd, hn::InterleaveLower(d8, r2, r3));
        const auto t3 = hn::BitCast(dd, hn::InterleaveUpper(d8, r2, r3));
        const auto t4 = hn::BitCast(dd, hn::InterleaveLower(d8, r4, r5));
        const auto t5 = hn::BitCast(dd, hn::InterleaveUpper(d8, r4, r5));
        const auto t6 = hn::BitCast(dd, hn::InterleaveLower(d8, r6, r7));
        const auto t7 = hn::BitCast(dd, hn::InterleaveUpper(d8, r6, r7));
        // u_c holds column c (rows 0-3) in its low half and column c + 4 in its high half.
        const auto u0 = hn::BitCast(d8, hn::InterleaveLower(dd, t0, t2));
        const auto u1 = hn::BitCast(d8, hn::InterleaveUpper(dd, t0, t2));
        const auto u2 = hn::BitCast(d8, hn::InterleaveLower(dd, t1, t3));
        const auto u3 = hn::BitCast(d8, hn::InterleaveUpper(dd, t1, t3));
        const auto u4 = hn::BitCast(d8, hn::InterleaveLower(dd, t4, t6));
        const auto u5 = hn::BitCast(d8, hn::InterleaveUpper(dd, t4, t6));
        const auto u6 = hn::BitCast(d8, hn::InterleaveLower(dd, t5, t7));
        const auto u7 = hn::BitCast(d8, hn::InterleaveUpper(dd, t5, t7));
        float* dst = kt + d0 * kBk + j0;
        hn::StoreU(hn::ConcatLowerLower(d8, u4, u0), d8, dst + 0 * kBk);
        hn::StoreU(hn::ConcatLowerLower(d8, u5, u1), d8, dst + 1 * kBk);
        hn::StoreU(hn::ConcatLowerLower(d8, u6, u2), d8, dst + 2 * kBk);
        hn::StoreU(hn::ConcatLowerLower(d8, u7, u3), d8, dst + 3 * kBk);
        hn::StoreU(hn::ConcatUpperUpper(d8, u4, u0), d8, dst + 4 * kBk);
        hn::StoreU(hn::ConcatUpperUpper(d8, u5, u1), d8, dst + 5 * kBk);
        hn::StoreU(hn::ConcatUpperUpper(d8, u6, u2), d8, dst + 6 * kBk);
        hn::StoreU(hn::ConcatUpperUpper(d8, u7, u3), d8, dst + 7 * kBk);
      }
    }
  }
#endif
  for (int j = j0; j < nk; ++j) {
    const float* src = base + j * rs;
    for (int d = 0; d < D; ++d) kt[d * kBk + j] = src[d];
  }
  for (int d = 0; d < D; ++d) {
    for (int j = nk; j < ncols; ++j) kt[d * kBk + j] = 0.0f;
  }
}

// dst[d] = scale * src[d] for d < n (any n; vectors, then a scalar tail): the copies in and out
// of a work item (PackQueries, WriteItem), which as scalar loops cost ~7% of a 2,048-token
// prefill's attention (perf, stories110M shape).
// In place (src == dst) is allowed.
HWY_INLINE void ScaledCopy(const float* src, float scale, int n, float* dst) {
  const hn::CappedTag<float, 16> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale);
  int d = 0;
  for (; d + N <= n; d += N) hn::StoreU(hn::Mul(vs, hn::LoadU(df, src + d)), df, dst + d);
  for (; d < n; ++d) dst[d] = scale * src[d];
}

// Step 2: s (rows, kBk) <- q (rows, dp) . kt (D, kBk), columns [0, ncols).
template <int kD>
void ScoreTile(const float* HWY_RESTRICT q, int dp, const float* HWY_RESTRICT kt,
               float* HWY_RESTRICT s, int rows, int ncols, int D) {
  using Cfg = Config<kD>;
  constexpr int kBk = Cfg::kBk;
  constexpr int N = Cfg::kN;
  const typename Cfg::DF df;
  using V = hn::Vec<typename Cfg::DF>;
  const int dd = kD != 0 ? kD : D;
  auto block = [&]<int R, int C>(int r0, int v0) HWY_ATTR {
    V acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = hn::Zero(df);
    }
    const float* qr = q + r0 * dp;
    const float* kc = kt + v0 * N;
    for (int d = 0; d < dd; ++d) {
      V kv[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) kv[c] = hn::Load(df, kc + d * kBk + c * N);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V b = hn::Set(df, qr[r * dp + d]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc[r][c] = hn::MulAdd(b, kv[c], acc[r][c]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) hn::Store(acc[r][c], df, s + (r0 + r) * kBk + (v0 + c) * N);
    }
  };
  ForBlocks<Cfg::kQkR, Cfg::kQkC>(rows, ncols / N, block);
}

// Step 2 under a dynamic plan, for the rows of one query position: s (rows, kBk) <- q (rows, dp)
// . kt (D, kBk) with pair t of key column b first rotated by the angle whose cos/sin are
// cos[t kBk + b], sin[t kBk + b] (that position's own angles), columns [0, ncols). Each q row
// holds its pairs split in halves, (q_0, q_2, ..., q_D-2, q_1, q_3, ..., q_D-1), so that the
// kernel rotates its rows with vector operations:
//   s[row][b] = sum_t q[t] (k0 c - k1 s) + q[D/2 + t] (k0 s + k1 c),   (k0, k1) = kt[2t, 2t + 1][b].
// The rotated keys live in registers only, computed once per block of rows (4 operations per pair
// and key vector) and used by every row of the block (2 FMAs each). D even.
template <int kD>
void ScoreTileRotating(const float* HWY_RESTRICT q, int dp, const float* HWY_RESTRICT kt,
                       const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin,
                       float* HWY_RESTRICT s, int rows, int ncols, int D) {
  using Cfg = Config<kD>;
  constexpr int kBk = Cfg::kBk;
  constexpr int N = Cfg::kN;
  const typename Cfg::DF df;
  using V = hn::Vec<typename Cfg::DF>;
  const int pairs = (kD != 0 ? kD : D) / 2;
  auto block = [&]<int R, int C>(int r0, int v0) HWY_ATTR {
    V acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = hn::Zero(df);
    }
    const float* qr = q + r0 * dp;
    const int c0 = v0 * N;
    for (int t = 0; t < pairs; ++t) {
      const float* k0 = kt + (2 * t) * kBk + c0;
      const float* k1 = k0 + kBk;
      const float* co = cos + t * kBk + c0;
      const float* si = sin + t * kBk + c0;
      V x0[C], x1[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const V a = hn::Load(df, k0 + c * N), b = hn::Load(df, k1 + c * N);
        const V vc = hn::Load(df, co + c * N), vs = hn::Load(df, si + c * N);
        x0[c] = hn::NegMulAdd(b, vs, hn::Mul(a, vc));  // a c - b s
        x1[c] = hn::MulAdd(a, vs, hn::Mul(b, vc));     // a s + b c
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V q0 = hn::Set(df, qr[r * dp + t]), q1 = hn::Set(df, qr[r * dp + pairs + t]);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c)
          acc[r][c] = hn::MulAdd(q1, x1[c], hn::MulAdd(q0, x0[c], acc[r][c]));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) hn::Store(acc[r][c], df, s + (r0 + r) * kBk + (v0 + c) * N);
    }
  };
  constexpr int kR = kVecRegs == 32 ? 4 : 2;
  constexpr int kC = kVecRegs == 32 ? 4 : 2;
  ForBlocks<kR, kC>(rows, ncols / N, block);
}

// Rows ahead that decode's kernels prefetch (keys in ScoreTileDirect, values in AccumulatePV):
// measured on the AMD EPYC machine in docs/performance.md (issue 14, fourth session).
inline constexpr int kPrefetchRows = 8;

// Prefetches the kD floats `bytes` after `row` (computed as an integer: past the cache's end it is
// no pointer of the program, and a prefetch does not fault).
template <int kD>
HWY_INLINE void PrefetchRow(const float* row, uintptr_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(row) + bytes;
  for (uintptr_t b = 0; b < kD * sizeof(float); b += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + b), 0, kPrefetchHint);
  }
}

// Step 2 for few query rows (decode), in place of packing K^T and ScoreTile: s (rows, kBk) <- q
// (rows, dp) . keys [k_lo, k_lo + nk) of kv head g read in place, one dot product per (row, key)
// (D / N vector FMAs and a sum across lanes); columns [nk, ncols) get 0. With one query row the
// packing would cost several times the products (an 8x8 transpose per 64 floats of K); a key row
// is read once for all `rows` rows. D a multiple of the vector length.
template <int kD, int kRows>
void ScoreTileDirect(const float* HWY_RESTRICT q, int dp, const HeadRows& k, int g, int64_t k_lo,
                     int nk, int ncols, float* HWY_RESTRICT s) {
  using Cfg = Config<kD>;
  constexpr int kBk = Cfg::kBk;
  const typename Cfg::DFV df;
  using V = hn::Vec<typename Cfg::DFV>;
  constexpr int N = Cfg::kNV;
  constexpr int kV = kD / N;
  static_assert(kD % N == 0 && kV >= 1);
  V qv[kRows][kV];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < kV; ++c) qv[r][c] = hn::Load(df, q + r * dp + c * N);
  }
  const float* base = k.data + k_lo * k.row_stride + g * k.head_stride;
  // The key row kPrefetchRows on (in this tile or the next one) is requested ahead of its use:
  // the rows of one head lie row_stride apart, and decode reads each once.
  const uintptr_t ahead = static_cast<uintptr_t>(kPrefetchRows * k.row_stride) * sizeof(float);
  for (int j = 0; j < nk; ++j) {
    const float* kr = base + j * k.row_stride;
    PrefetchRow<kD>(kr, ahead);
    V kv[kV];
#pragma GCC unroll 8
    for (int c = 0; c < kV; ++c) kv[c] = hn::LoadU(df, kr + c * N);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      V acc = hn::Mul(qv[r][0], kv[0]);
#pragma GCC unroll 8
      for (int c = 1; c < kV; ++c) acc = hn::MulAdd(qv[r][c], kv[c], acc);
      s[r * kBk + j] = hn::GetLane(hn::SumOfLanes(df, acc));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = nk; j < ncols; ++j) s[r * kBk + j] = 0.0f;
  }
}

// Between steps 2 and 3 with a soft cap (Gemma 2, AttentionPlan::softcap): s -> c tanh(s / c), c
// the cap in the scores' log2 units (cap log2 e, so that the natural-log score x becomes
// cap tanh(x / cap)); a score already -inf stays so. Scalar tanh: the one family that caps runs
// it once per score, and its cost is not measured yet.
template <int kBk>
void SoftCap(float* HWY_RESTRICT s, int rows, int ncols, float c) {
  const float inv = 1.0f / c;
  for (int row = 0; row < rows; ++row) {
    float* sr = s + row * kBk;
    for (int j = 0; j < ncols; ++j) {
      if (sr[j] != kNegInf) sr[j] = c * std::tanh(sr[j] * inv);
    }
  }
}

// Step 3 (partial tiles): scores of invisible pairs and of the padding columns [nk, ncols) -> -inf.
template <class Mask, int kBk>
void ApplyMask(const Mask& mask, float* HWY_RESTRICT s, int rows, int group, int ncols, int nk,
               int64_t q_lo, int64_t k_lo, int row0 = 0) {
  for (int row = 0; row < rows; ++row) {
    const int64_t q_pos = q_lo + (row0 + row) / group;
    float* sr = s + row * kBk;
    for (int c = 0; c < ncols; ++c) {
      if (c >= nk || !mask.Visible(q_pos, k_lo + c)) sr[c] = kNegInf;
    }
  }
}

// Step 4: online softmax update; s becomes p in place, alpha[row] is the factor for the old o.
template <int kD>
void SoftmaxUpdate(float* HWY_RESTRICT s, int rows, int ncols, float* HWY_RESTRICT m,
                   float* HWY_RESTRICT l, float* HWY_RESTRICT alpha) {
  using Cfg = Config<kD>;
  constexpr int N = Cfg::kN;
  const typename Cfg::DF df;
  using V = hn::Vec<typename Cfg::DF>;
  for (int row = 0; row < rows; ++row) {
    float* sr = s + row * Cfg::kBk;
    V mx0 = hn::Set(df, kNegInf), mx1 = mx0;
    int c = 0;
    for (; c + 2 * N <= ncols; c += 2 * N) {
      mx0 = hn::Max(mx0, hn::Load(df, sr + c));
      mx1 = hn::Max(mx1, hn::Load(df, sr + c + N));
    }
    for (; c < ncols; c += N) mx0 = hn::Max(mx0, hn::Load(df, sr + c));
    const float tile_max = hn::GetLane(hn::MaxOfLanes(df, hn::Max(mx0, mx1)));
    const float m_new = std::max(m[row], tile_max);
    // A row that has seen no visible key yet keeps p = 0 and o = 0 whatever the reference is.
    const float m_ref = m_new == kNegInf ? 0.0f : m_new;
    alpha[row] = std::exp2(m[row] - m_ref);
    m[row] = m_new;
    const V vm = hn::Set(df, m_ref);
    V sum0 = hn::Zero(df), sum1 = sum0;
    c = 0;
    for (; c + 2 * N <= ncols; c += 2 * N) {
      const V p0 = Exp2(df, hn::Sub(hn::Load(df, sr + c), vm));
      const V p1 = Exp2(df, hn::Sub(hn::Load(df, sr + c + N), vm));
      hn::Store(p0, df, sr + c);
      hn::Store(p1, df, sr + c + N);
      sum0 = hn::Add(sum0, p0);
      sum1 = hn::Add(sum1, p1);
    }
    for (; c < ncols; c += N) {
      const V p = Exp2(df, hn::Sub(hn::Load(df, sr + c), vm));
      hn::Store(p, df, sr + c);
      sum0 = hn::Add(sum0, p);
    }
    l[row] = l[row] * alpha[row] + hn::GetLane(hn::SumOfLanes(df, hn::Add(sum0, sum1)));
  }
}

// Step 5: o (rows, dp) <- alpha o + p (rows, kBk) v, with v = nk rows of stride v_rs.
template <int kD>
void AccumulatePV(const float* HWY_RESTRICT p, const float* HWY_RESTRICT v, int64_t v_rs, int nk,
                  const float* HWY_RESTRICT alpha, float* HWY_RESTRICT o, int dp, int rows, int D) {
  using Cfg = Config<kD>;
  constexpr int kBk = Cfg::kBk;
  constexpr int N = Cfg::kNV;
  const typename Cfg::DFV df;
  using V = hn::Vec<typename Cfg::DFV>;
  auto block = [&]<int R, int C>(int r0, int v0) HWY_ATTR {
    // U sets of accumulators over interleaved keys, so that few rows (decode: H/G rows) still
    // keep enough independent FMA chains in flight to hide the FMA latency.
    constexpr int U = R * C >= 8 ? 1 : (R * C >= 4 ? 2 : 4);
    V acc[U][R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V a = hn::Set(df, alpha[r0 + r]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        acc[0][r][c] = hn::Mul(a, hn::Load(df, o + (r0 + r) * dp + (v0 + c) * N));
#pragma GCC unroll 4
        for (int u = 1; u < U; ++u) acc[u][r][c] = hn::Zero(df);
      }
    }
    const float* pr = p + r0 * kBk;
    const float* vc = v + v0 * N;
    // Decode (few rows, read once): value rows kPrefetchRows on are requested ahead, by the block
    // of the first columns (the whole row: D floats).
    const bool prefetch = kD >= 32 && rows <= 4 && v0 == 0;
    const uintptr_t ahead = static_cast<uintptr_t>(kPrefetchRows * v_rs) * sizeof(float);
    int j = 0;
    for (; j + U <= nk; j += U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        if (prefetch) PrefetchRow<kD>(vc + (j + u) * v_rs, ahead);
        V vv[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) vv[c] = hn::LoadU(df, vc + (j + u) * v_rs + c * N);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const V b = hn::Set(df, pr[r * kBk + j + u]);
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) acc[u][r][c] = hn::MulAdd(b, vv[c], acc[u][r][c]);
        }
      }
    }
    for (; j < nk; ++j) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const V vv = hn::LoadU(df, vc + j * v_rs + c * N);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          acc[0][r][c] = hn::MulAdd(hn::Set(df, pr[r * kBk + j]), vv, acc[0][r][c]);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
        for (int u = 1; u < U; ++u) acc[0][r][c] = hn::Add(acc[0][r][c], acc[u][r][c]);
        hn::Store(acc[0][r][c], df, o + (r0 + r) * dp + (v0 + c) * N);
      }
    }
  };
  if constexpr (Cfg::kVectorPv) {
    ForBlocks<Cfg::kPvR, Cfg::kPvC>(rows, kD / N, block);
  } else {
    ForBlocks<Cfg::kPvR, 1>(rows, D / N, block);
    for (int row = 0; row < rows; ++row) {  // scalar tail of D
      for (int d = D / N * N; d < D; ++d) {
        float acc = alpha[row] * o[row * dp + d];
        for (int j = 0; j < nk; ++j) acc += p[row * kBk + j] * v[j * v_rs + d];
        o[row * dp + d] = acc;
      }
    }
  }
}

}  // namespace stretch::attention_internal
