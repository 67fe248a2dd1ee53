// Internal to src/kernels: the templates of the attention kernel (attention.cc's top comment gives
// the math, the structure and the tile sizes), shared by the files that instantiate them.
//
// The head dimensions of AttentionForward's dispatch are compiled in four files, two dimensions
// each in attention_d8_d16.cc, attention_d32_d48.cc and attention_d64_d128.cc, the generic path
// (kD = 0) with the dispatch in attention.cc, so that a build compiles them in parallel: as one
// file the kernel was the build's longest compile, which the rest of a two-core build waited on.
// The kernel stays in an anonymous namespace, so that each file has its own copy of what it
// instantiates, as when they were one file; only Problem and the entry points below are shared.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "src/core/aligned.h"
#include "src/core/check.h"
#include "src/core/threads.h"
#include "src/kernels/attention.h"
#include "src/kernels/attention_simd.h"
#include "src/kernels/attention_tile.h"
#include "src/kernels/ops.h"

namespace stretch::attention_internal {

// What a call needs to know, fixed for all its work items.
struct Problem {
  HeadRows q, k, v;
  HeadRowsMut out;
  int64_t T, S, q_pos0;
  int G, D, dp;
  int group;  // H / G query heads per kv head
  int H;
  int64_t tq;  // query positions per query tile
  int64_t n_qtiles;
  int n_chunks;  // key chunks per work item (flash-decoding); 1 for prefill
  int64_t chunk_keys;
  int64_t key_first;  // first key any query of the call sees (a window skips the rest)
  int rows_max;       // tq * group
  float qscale;       // scale * log2(e)
  float* partial;     // n_chunks > 1: per (item, chunk): rows_max x (dp + 2) floats: o, m, l
  float* lse;         // optional (T, H): log-sum-exp per row, natural log
  // Position plan (may be null), and how it is applied.
  const AttentionPlan* plan;
  bool row_scale;                              // multiply query i's scores by plan->LogitScale(i)
  const std::vector<double>* ssmax = nullptr;  // plan->ssmax when on: per-head s_h ln(n_i)
  bool rotate;                                 // q and k are raw: rotate them here
  bool dynamic;                                // rotate with per-query frequencies
  const RotationTables* tables;
  const HeadRows* key_slots;  // static rotating plans: keys rotated once per key slot
  const AttentionBias* bias;  // null when the plan has none
  float softcap;              // > 0: the plan's soft cap in log2 units (cap log2 e), else 0
  bool query_norm, key_norm;
  const std::vector<double>* xpos;  // XPOS: log2(zeta_t) / gamma per pair; null when off
  int pairs;                        // rotated pairs (D / 2) when rotating
  uint64_t call_id;                 // distinct per call: keys the dynamic tables of Scratch
};

constexpr int kMaxSegments = 3;
// Query rows per block of a prefill's tile (RunItem): its scores, kSubRows x kBk floats (12 KiB
// at kBk = 128), stay in L1 from QK^T through the softmax to P V, where a whole tile's (60 KiB
// at 120 rows) went through L2 three times. A multiple of the micro-kernels' 6 and 4 rows.
// Measured with the tile at 120 rows (`stretch bench --case attention --length 2048 --head-dim
// 64 --threads 1`, best of 9 runs, 3 rounds alternating the builds, Intel Xeon of
// docs/performance.md): 100-109 GFLOP/s before, 114-118 after.
constexpr int kSubRows = 24;
// Stacked query rows per query tile under a dynamic plan. Each position's rows score against keys
// rotated for it alone, so the tile shares only the packing of K^T and the P V step; each
// position also keeps its own cos/sin table of kBk key offsets (pairs x kBk x 2 floats: 16 KiB at
// D = 64), which a larger tile would push out of L2.
constexpr int kDynamicTileRows = 32;
constexpr int kMaxPairsOnStack = 256;  // head dims up to 512 when rotating

// The kernel for one head dimension (RunMasked<kD> below), compiled in the file named.
void RunHeadDim8(const Problem& pb);    // attention_d8_d16.cc
void RunHeadDim16(const Problem& pb);   // attention_d8_d16.cc
void RunHeadDim32(const Problem& pb);   // attention_d32_d48.cc
void RunHeadDim48(const Problem& pb);   // attention_d32_d48.cc
void RunHeadDim64(const Problem& pb);   // attention_d64_d128.cc
void RunHeadDim128(const Problem& pb);  // attention_d64_d128.cc
void RunHeadDimAny(const Problem& pb);  // attention.cc: any other D (kD = 0)

namespace {

// Per-thread scratch, kept across calls (the pool keeps its threads): O(tile sizes).
struct Scratch {
  AlignedVector<float> q, kt, s, seg_s, o, m, l, alpha, xpos_arg, xpos_f;
  std::vector<double> xpos_rel;
  std::vector<float> bias;  // AddBias: a tile's bias per (head of the group, distance)
  // Dynamic plans (PrepareDynamicTile), per query position p of the tile (nt of them) and pair
  // t, with theta = p's own frequencies: fine_c/s (nt, pairs, kBk) = cos/sin(b theta_t), b < kBk;
  // thetas, pos_c/s and step_c/s (nt, pairs) = theta_t, cos/sin(p theta_t) and cos/sin(kBk
  // theta_t); logit (nt)
  // = LogitScale(p). Kept across the work items of one call (dyn_call) with the same query tile
  // (dyn_q_lo): the G kv heads share them. u_c/s (nt, pairs): cos/sin((p - dyn_k) theta_t), the
  // work item's current key tile starting at dyn_k.
  AlignedVector<float> fine_c, fine_s, qrot, u_cf, u_sf;
  std::vector<double> thetas, pos_c, pos_s, step_c, step_s, logit, u_c, u_s;
  uint64_t dyn_call = 0;
  int64_t dyn_q_lo = -1, dyn_k = 0;
  int dyn_nt = 0;
  void Reserve(int rows, int dp, int D, int bk, int segments) {
    auto grow = [](AlignedVector<float>& x, size_t n) {
      if (x.size() < n) x.resize(n);
    };
    grow(q, static_cast<size_t>(segments) * rows * dp);
    grow(kt, static_cast<size_t>(D) * bk);
    grow(s, static_cast<size_t>(rows) * bk);
    if (segments > 1) grow(seg_s, static_cast<size_t>(segments) * rows * bk);
    grow(o, static_cast<size_t>(rows) * dp);
    grow(m, rows);
    grow(l, rows);
    grow(alpha, rows);
    grow(xpos_arg, bk);
    grow(xpos_f, bk);
    if (xpos_rel.size() < static_cast<size_t>(bk)) xpos_rel.resize(static_cast<size_t>(bk));
  }
};

// A row's log-sum-exp in natural log from its running max m and sum l (both in log2 units:
// l = sum_j 2^(s_j - m)), so lse = (m + log2 l) ln 2.
float LogSumExp(float m, float l) {
  if (!(l > 0.0f)) return -std::numeric_limits<float>::infinity();
  return static_cast<float>((static_cast<double>(m) + std::log2(static_cast<double>(l))) * kLn2D);
}

float* PartialSlot(const Problem& pb, int g, int64_t qt, int c) {
  const int64_t slot = (qt * pb.G + g) * pb.n_chunks + c;
  return pb.partial + slot * pb.rows_max * (pb.dp + 2);
}

// What one work item covers: kv head g, query tile qt (rows i0 .. i0 + nt - 1 of the call, at
// positions q_lo .. q_hi, stacked with their r = H/G query heads into `rows` tile rows), key chunk
// `chunk` (keys k_begin .. k_end - 1; the mask ends the last query's keys at k_stop).
struct Item {
  int g = 0;
  int64_t qt = 0;
  int chunk = 0;
  int64_t i0 = 0;
  int nt = 0;
  int rows = 0;
  int64_t q_lo = 0, q_hi = 0;
  int64_t k_begin = 0, k_end = 0, k_stop = 0;
  const PositionMap* map = nullptr;  // the relative map when the kernel rotates, else null
  uint32_t segs = 1u;                // the segments this tile's queries meet over all their keys
  // XPOS: the largest query position of the tile per segment (see XposReference).
  double xpos_ref[kMaxSegments] = {};

  // Positions a query / key is rotated at in a segment (no map: the true ones).
  double QueryPos(int seg, int64_t i) const {
    return map != nullptr ? map->QueryPos(seg, i) : static_cast<double>(i);
  }
  double KeyPos(int seg, int64_t j) const {
    return map != nullptr ? map->KeyPos(seg, j) : static_cast<double>(j);
  }
};

template <class Mask>
Item MakeItem(const Problem& pb, const Mask& mask, int g, int64_t qt, int chunk) {
  Item it;
  it.g = g;
  it.qt = qt;
  it.chunk = chunk;
  it.i0 = qt * pb.tq;
  it.nt = static_cast<int>(std::min(pb.tq, pb.T - it.i0));
  it.rows = it.nt * pb.group;
  it.q_lo = pb.q_pos0 + it.i0;
  it.q_hi = it.q_lo + it.nt - 1;
  it.k_begin = std::max(chunk * pb.chunk_keys + pb.key_first, mask.KeyBegin(it.q_lo));
  it.k_end = std::min(pb.S, pb.key_first + (chunk + 1) * pb.chunk_keys);
  it.k_stop = std::min(it.k_end, mask.KeyEnd(it.q_hi));
  it.map = pb.rotate ? &pb.plan->map : nullptr;
  // Dynamic plans rotate at the true positions (identity map): one score per tile.
  it.segs = it.map != nullptr && !pb.dynamic && it.k_begin < it.k_stop
                ? it.map->SegmentsIn(it.q_lo, it.q_hi, it.k_begin, it.k_stop - 1)
                : 1u;
  // XPOS: pair t of a score decays as zeta_t^((a - b)/gamma) = 2^(x_t (a - c)) 2^(x_t (c - b))
  // for any c; with c the largest query position a of the tile (per segment), the key factor is
  // at most 1 (x_t < 0 and b <= a <= c for every visible pair) and the query factor at most
  // zeta_t^(-(tile span)/gamma), the tile's few rows, so nothing overflows at any length
  // (scaling by zeta^(a/gamma) and zeta^(-b/gamma) as written would overflow float past ~35k
  // positions), and far keys underflow to 0, their true limit.
  for (int seg = 0; seg < kMaxSegments; ++seg) {
    if (pb.xpos == nullptr || !(it.segs & (1u << seg))) continue;
    double c = it.QueryPos(seg, it.q_lo);
    for (int t = 1; t < it.nt; ++t) c = std::max(c, it.QueryPos(seg, it.q_lo + t));
    it.xpos_ref[seg] = c;
  }
  return it;
}

// Dynamic frequencies: query position p has its own thetas, so the keys it sees are rotated for
// p alone. For key j = k_lo + b of the tile starting at k_lo, by <R(x) q, R(y) k> = <R(x - z) q,
// R(y - z) k>:
//   < R(p theta) q , R(j theta) k_j >  =  < R((p - k_lo) theta) q , R(b theta) k_j >,
// so per tile the rows of p are rotated once, by (p - k_lo) theta (u_c/s), and each key by its
// offset b < kBk in the tile (fine_c/s, the same table for every tile): no per-key cos/sin.
// Both angles are tabulated in double and rounded once to float, as the static tables are, so the
// products are those of the static path. In double: fine_c/s and u_c/s by the angle-addition
// recurrence from exact cos/sin, kBk steps for fine and one per key tile for u (S / kBk), each
// step adding ~1 double ulp: ~1e-13 at 64k keys, far below the float rounding of the result.
template <int kBk>
void PrepareDynamicTile(const Problem& pb, const Item& it, Scratch& sc) {
  const int pairs = pb.pairs, nt = it.nt;
  const size_t np = static_cast<size_t>(nt) * pairs;
  if (sc.dyn_call != pb.call_id || sc.dyn_q_lo != it.q_lo || sc.dyn_nt != nt) {
    sc.fine_c.resize(np * kBk);
    sc.fine_s.resize(np * kBk);
    for (std::vector<double>* v : {&sc.thetas, &sc.pos_c, &sc.pos_s, &sc.step_c, &sc.step_s}) {
      v->resize(np);
    }
    sc.logit.resize(static_cast<size_t>(nt));
    std::vector<double> c(static_cast<size_t>(pairs)), sn(c.size()), c1(c.size()), s1(c.size());
    for (int t = 0; t < nt; ++t) {
      const int64_t pos = it.q_lo + t;
      const std::vector<double> th = pb.plan->FrequenciesAt(pos).thetas;
      sc.logit[static_cast<size_t>(t)] = pb.plan->LogitScale(pos);
      const size_t row = static_cast<size_t>(t) * pairs;
      for (int u = 0; u < pairs; ++u) {
        const double x = th[static_cast<size_t>(u)];
        const double a = static_cast<double>(pos) * x;
        sc.thetas[row + u] = x;
        sc.pos_c[row + u] = std::cos(a);
        sc.pos_s[row + u] = std::sin(a);
        sc.step_c[row + u] = std::cos(x * kBk);
        sc.step_s[row + u] = std::sin(x * kBk);
        c[static_cast<size_t>(u)] = 1.0;
        sn[static_cast<size_t>(u)] = 0.0;
        c1[static_cast<size_t>(u)] = std::cos(x);
        s1[static_cast<size_t>(u)] = std::sin(x);
      }
      float* fc = sc.fine_c.data() + row * kBk;
      float* fs = sc.fine_s.data() + row * kBk;
      for (int b = 0; b < kBk; ++b) {
        for (int u = 0; u < pairs; ++u) {
          const size_t x = static_cast<size_t>(u);
          fc[u * kBk + b] = static_cast<float>(c[x]);
          fs[u * kBk + b] = static_cast<float>(sn[x]);
          const double cn = c[x] * c1[x] - sn[x] * s1[x];
          sn[x] = sn[x] * c1[x] + c[x] * s1[x];
          c[x] = cn;
        }
      }
    }
    sc.dyn_call = pb.call_id;
    sc.dyn_q_lo = it.q_lo;
    sc.dyn_nt = nt;
  }
  // The item's first key tile: (p - k_begin) theta, exact.
  sc.u_c.resize(np);
  sc.u_s.resize(np);
  sc.u_cf.resize(np);
  sc.u_sf.resize(np);
  sc.dyn_k = it.k_begin;
  for (int t = 0; t < nt; ++t) {
    const double rel = static_cast<double>(it.q_lo + t - it.k_begin);
    for (int u = 0; u < pairs; ++u) {
      const size_t x = static_cast<size_t>(t) * pairs + u;
      sc.u_c[x] = it.k_begin == 0 ? sc.pos_c[x] : std::cos(rel * sc.thetas[x]);
      sc.u_s[x] = it.k_begin == 0 ? sc.pos_s[x] : std::sin(rel * sc.thetas[x]);
    }
  }
  if (sc.qrot.size() < static_cast<size_t>(pb.group) * pb.dp) {
    sc.qrot.resize(static_cast<size_t>(pb.group) * pb.dp);
  }
}

// Moves the item's query angles u_c/s to the key tile starting at k_lo (a later tile, kBk keys
// per step): (p - k) theta -> (p - k - kBk) theta, one rotation by -kBk theta per step; then
// rounds them to float (u_cf/sf) for ScoreDynamicTile.
template <int kBk>
void AdvanceDynamicAngles(int64_t k_lo, Scratch& sc) {
  STRETCH_CHECK(k_lo >= sc.dyn_k && (k_lo - sc.dyn_k) % kBk == 0, "k_lo={} from {}", k_lo,
                sc.dyn_k);
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const size_t n = sc.u_c.size(), N = hn::Lanes(dd);
  double* HWY_RESTRICT uc = sc.u_c.data();
  double* HWY_RESTRICT us = sc.u_s.data();
  const double* HWY_RESTRICT kc = sc.step_c.data();
  const double* HWY_RESTRICT ks = sc.step_s.data();
  for (; sc.dyn_k < k_lo; sc.dyn_k += kBk) {
    size_t x = 0;
    for (; x + N <= n; x += N) {
      const auto c = hn::LoadU(dd, uc + x), s = hn::LoadU(dd, us + x);
      const auto step_c = hn::LoadU(dd, kc + x), step_s = hn::LoadU(dd, ks + x);
      hn::StoreU(hn::MulAdd(c, step_c, hn::Mul(s, step_s)), dd, uc + x);     // c cos + s sin
      hn::StoreU(hn::NegMulAdd(c, step_s, hn::Mul(s, step_c)), dd, us + x);  // s cos - c sin
    }
    for (; x < n; ++x) {
      const double c = uc[x], s = us[x];
      uc[x] = c * kc[x] + s * ks[x];
      us[x] = s * kc[x] - c * ks[x];
    }
  }
  size_t x = 0;
  for (; x + N <= n; x += N) {
    hn::StoreU(hn::DemoteTo(df, hn::LoadU(dd, uc + x)), df, sc.u_cf.data() + x);
    hn::StoreU(hn::DemoteTo(df, hn::LoadU(dd, us + x)), df, sc.u_sf.data() + x);
  }
  for (; x < n; ++x) {
    sc.u_cf[x] = static_cast<float>(uc[x]);
    sc.u_sf[x] = static_cast<float>(us[x]);
  }
}

// Step 2 under a dynamic plan, for the key tile at k_lo packed raw in sc.kt: per query position,
// its rows (the group's heads, packed with their pairs split in halves, see PackQueries) rotated
// by (p - k_lo) theta_p into sc.qrot, then scored against the keys rotated by b theta_p on the fly
// (ScoreTileRotating). A position before the tile's first key sees none of it: its rows are left
// for ApplyMask (such a tile is partial) to set to -inf.
template <int kD, int kBk>
void ScoreDynamicTile(const Problem& pb, const Item& it, int64_t k_lo, int ncols, Scratch& sc) {
  AdvanceDynamicAngles<kBk>(k_lo, sc);
  const int pairs = pb.pairs, r = pb.group, dp = pb.dp;
  const int D = kD != 0 ? kD : pb.D;
  const hn::CappedTag<float, 16> df;
  const int N = static_cast<int>(hn::Lanes(df));
  for (int t = 0; t < it.nt; ++t) {
    if (it.q_lo + t < k_lo) continue;
    const size_t row = static_cast<size_t>(t) * pairs;
    const float* HWY_RESTRICT cs = sc.u_cf.data() + row;
    const float* HWY_RESTRICT sn = sc.u_sf.data() + row;
    for (int hh = 0; hh < r; ++hh) {
      const float* HWY_RESTRICT x0 = sc.q.data() + static_cast<size_t>(t * r + hh) * dp;
      const float* HWY_RESTRICT x1 = x0 + pairs;
      float* HWY_RESTRICT y0 = sc.qrot.data() + static_cast<size_t>(hh) * dp;
      float* HWY_RESTRICT y1 = y0 + pairs;
      int u = 0;
      for (; u + N <= pairs; u += N) {
        const auto a = hn::LoadU(df, x0 + u), b = hn::LoadU(df, x1 + u);
        const auto c = hn::LoadU(df, cs + u), s = hn::LoadU(df, sn + u);
        hn::StoreU(hn::NegMulAdd(b, s, hn::Mul(a, c)), df, y0 + u);
        hn::StoreU(hn::MulAdd(a, s, hn::Mul(b, c)), df, y1 + u);
      }
      for (; u < pairs; ++u) {
        y0[u] = x0[u] * cs[u] - x1[u] * sn[u];
        y1[u] = x0[u] * sn[u] + x1[u] * cs[u];
      }
    }
    ScoreTileRotating<kD>(sc.qrot.data(), dp, sc.kt.data(), sc.fine_c.data() + row * kBk,
                          sc.fine_s.data() + row * kBk, sc.s.data() + t * r * kBk, r, ncols, D);
  }
}

// Q of the item, one packed (rows, dp) copy per segment it meets: rotated for that segment
// (static plans: the segment's query table; dynamic: not yet, see ScoreDynamicTile), normalized
// (QueryNorm), scaled by XPOS's query factor, and multiplied by the row's logit scale (scale
// log2(e), times log-n or YaRN's temperature, times SSMax's s_h ln(i + 1)); columns D .. dp zero.
template <int kD>
void PackQueries(const Problem& pb, const Item& it, Scratch& sc) {
  const int D = kD != 0 ? kD : pb.D;
  const int dp = pb.dp;
  const int r = pb.group;
  const int pairs = pb.pairs;
  for (int seg = 0; seg < kMaxSegments; ++seg) {
    if (!(it.segs & (1u << seg))) continue;
    float* q = sc.q.data() + static_cast<size_t>(seg) * pb.rows_max * dp;
    float xpos_q[kMaxPairsOnStack];
    for (int t = 0; t < it.nt; ++t) {
      const int64_t pos = it.q_lo + t;
      const double logit = !pb.row_scale ? 1.0
                           : pb.dynamic  ? sc.logit[static_cast<size_t>(t)]
                                         : pb.plan->LogitScale(pos);
      const float qs = pb.row_scale ? static_cast<float>(pb.qscale * logit) : pb.qscale;
      const float* qcos = nullptr;
      const float* qsin = nullptr;
      if (pb.rotate && !pb.dynamic) {  // dynamic: rotated per key tile (ScoreDynamicTile)
        const RopeTable& tab = pb.tables->Query(seg);
        qcos = tab.cos.data() + (pos - pb.tables->pos0()) * pairs;
        qsin = tab.sin.data() + (pos - pb.tables->pos0()) * pairs;
      }
      for (int hh = 0; hh < r; ++hh) {
        const float* src = pb.q.data + (it.i0 + t) * pb.q.row_stride +
                           static_cast<int64_t>(it.g * r + hh) * pb.q.head_stride;
        float* dst = q + (t * r + hh) * dp;
        ScaledCopy(src, 1.0f, D, dst);
        if (qcos != nullptr) RotatePairs(dst, pairs, qcos, qsin);
        float row_qs = qs;
        if (pb.query_norm) {  // QueryNorm: q / |q| (a zero q stays zero)
          double ss = 0;
          for (int d = 0; d < D; ++d) ss += static_cast<double>(dst[d]) * dst[d];
          if (ss > 0) row_qs = static_cast<float>(qs / std::sqrt(ss));
        }
        if (pb.xpos != nullptr) {
          if (hh == 0) {
            const double rel = it.QueryPos(seg, pos) - it.xpos_ref[seg];
            for (size_t p = 0; p < pb.xpos->size(); ++p) {
              xpos_q[p] = static_cast<float>(std::exp2((*pb.xpos)[p] * rel));
            }
          }
          for (size_t p = 0; p < pb.xpos->size(); ++p) {
            dst[2 * p] *= xpos_q[p];
            dst[2 * p + 1] *= xpos_q[p];
          }
        }
        if (pb.ssmax != nullptr) {  // SSMax: s_h ln(n_i), n_i the keys query i sees
          row_qs *= static_cast<float>((*pb.ssmax)[static_cast<size_t>(it.g * r + hh)] *
                                       std::log(static_cast<double>(pb.plan->VisibleKeys(pos))));
        }
        ScaledCopy(dst, row_qs, D, dst);
        for (int d = D; d < dp; ++d) dst[d] = 0.0f;
        if (pb.dynamic) {  // pairs split in halves, x_2t at t and x_2t+1 at pairs + t
          float tmp[2 * kMaxPairsOnStack];
          for (int u = 0; u < pairs; ++u) {
            tmp[u] = dst[2 * u];
            tmp[pairs + u] = dst[2 * u + 1];
          }
          std::copy(tmp, tmp + 2 * pairs, dst);
        }
      }
    }
  }
}

// K^T of keys [k_lo, k_lo + nk) as segment seg sees them, in sc.kt: packed (static plans: from
// the key slot that holds them rotated for this segment; dynamic: raw, ScoreDynamicTile rotates
// them per query position), normalized (KeyNorm, which rotation keeps) and scaled by XPOS's key
// factor 2^(x_t (c_seg - b_j)) (per pair: it commutes with the pair's rotation).
template <int kD, int kBk>
void PackKeyTile(const Problem& pb, const Item& it, int seg, int64_t k_lo, int nk, int ncols,
                 Scratch& sc) {
  const int D = kD != 0 ? kD : pb.D;
  float* kt = sc.kt.data();
  if (pb.rotate && !pb.dynamic) {
    PackKeysTransposed<kBk>(pb.key_slots[it.map->KeySlot(seg)], it.g, k_lo, nk, ncols, D, kt);
  } else {
    PackKeysTransposed<kBk>(pb.k, it.g, k_lo, nk, ncols, D, kt);
  }
  if (pb.key_norm) {
    for (int c = 0; c < nk; ++c) {
      double ss = 0;
      for (int d = 0; d < D; ++d) ss += static_cast<double>(kt[d * kBk + c]) * kt[d * kBk + c];
      if (ss <= 0) continue;
      const float inv = static_cast<float>(1.0 / std::sqrt(ss));
      for (int d = 0; d < D; ++d) kt[d * kBk + c] *= inv;
    }
  }
  if (pb.xpos != nullptr) {
    for (int c = 0; c < nk; ++c)
      sc.xpos_rel[static_cast<size_t>(c)] = it.xpos_ref[seg] - it.KeyPos(seg, k_lo + c);
    for (size_t t = 0; t < pb.xpos->size(); ++t) {
      const double x = (*pb.xpos)[t];
      for (int c = 0; c < nk; ++c)
        sc.xpos_arg[c] = static_cast<float>(x * sc.xpos_rel[static_cast<size_t>(c)]);
      Exp2Array(sc.xpos_arg.data(), sc.xpos_f.data(), nk);
      float* r0 = kt + (2 * t) * kBk;
      float* r1 = r0 + kBk;
      for (int c = 0; c < nk; ++c) {
        r0[c] *= sc.xpos_f[c];
        r1[c] *= sc.xpos_f[c];
      }
    }
  }
}

// A tile on a segment boundary: each element's score from its own segment's scores (seg_s).
template <int kBk>
void SelectSegmentScores(const Problem& pb, const Item& it, int64_t k_lo, int nk, Scratch& sc) {
  for (int row = 0; row < it.rows; ++row) {
    const int64_t q_pos = it.q_lo + row / pb.group;
    float* sr = sc.s.data() + row * kBk;
    for (int c = 0; c < nk;) {
      const int seg = it.map->SegmentOf(q_pos, k_lo + c);
      const int end =
          static_cast<int>(std::min<int64_t>(nk, it.map->SegmentRunEnd(q_pos, k_lo + c) - k_lo));
      const float* src = sc.seg_s.data() + static_cast<size_t>(seg) * it.rows * kBk + row * kBk;
      std::copy(src + c, src + end, sr + c);
      c = end;
    }
  }
}

// Additive bias (ALiBi, KERPLE, Sandwich), in log2 units like the scores, on keys [k_lo, k_lo + nk).
// A bias depends on the head and the distance i - j only, and the tile's distances form one run
// of nk + nt - 1 values: each is evaluated once per head (sc.bias), and the scores add them by
// distance.
template <int kBk>
void AddBias(const Problem& pb, const Item& it, int64_t k_lo, int nk, Scratch& sc) {
  const int r = pb.group;
  const int64_t d_min = it.q_lo - (k_lo + nk - 1), d_max = it.q_hi - k_lo;
  if (d_max < 0) return;  // every pair is in the future: masked anyway
  const int64_t d_lo = std::max<int64_t>(0, d_min), span = d_max - d_lo + 1;
  sc.bias.resize(static_cast<size_t>(r * span));
  for (int hh = 0; hh < r; ++hh) {
    for (int64_t d = d_lo; d <= d_max; ++d) {
      sc.bias[static_cast<size_t>(hh * span + d - d_lo)] =
          static_cast<float>(kLog2eD * pb.bias->Value(it.g * r + hh, d));
    }
  }
  for (int row = 0; row < it.rows; ++row) {
    const int64_t q_pos = it.q_lo + row / r;
    const float* bias = sc.bias.data() + static_cast<size_t>(row % r) * span;
    float* sr = sc.s.data() + row * kBk;
    for (int c = 0; c < nk; ++c) {
      const int64_t dist = q_pos - (k_lo + c);
      if (dist >= 0) sr[c] += bias[dist - d_lo];
    }
  }
}

// The item's result: out = o / l (and the rows' log-sum-exp), or with key chunks the partial
// (o, m, l) that MergeChunks combines.
template <int kD>
void WriteItem(const Problem& pb, const Item& it, const Scratch& sc) {
  const int r = pb.group, dp = pb.dp, D = kD != 0 ? kD : pb.D;
  const float* o = sc.o.data();
  const float* m = sc.m.data();
  const float* l = sc.l.data();
  if (pb.n_chunks == 1) {
    for (int row = 0; row < it.rows; ++row) {
      const int t = row / r, hh = row % r;
      float* dst = pb.out.data + (it.i0 + t) * pb.out.row_stride +
                   static_cast<int64_t>(it.g * r + hh) * pb.out.head_stride;
      const float inv = l[row] > 0.0f ? 1.0f / l[row] : 0.0f;
      ScaledCopy(o + row * dp, inv, D, dst);
      if (pb.lse != nullptr) pb.lse[(it.i0 + t) * pb.H + it.g * r + hh] = LogSumExp(m[row], l[row]);
    }
  } else {
    float* slot = PartialSlot(pb, it.g, it.qt, it.chunk);
    for (int row = 0; row < it.rows; ++row) {
      float* dst = slot + row * (dp + 2);
      std::copy(o + row * dp, o + row * dp + D, dst);
      dst[dp] = m[row];
      dst[dp + 1] = l[row];
    }
  }
}

constexpr int kDirectRows = 4;
// ScoreTileDirect for it.rows (1 .. kDirectRows) rows: false when it does not apply.
template <int kD>
bool ScoreDirect(const Problem& pb, const Item& it, int seg, const float* q, int64_t k_lo, int nk,
                 int ncols, Scratch& sc) {
  if constexpr (kD == 0 || kD % Config<kD>::kNV != 0) {
    return false;
  } else {
    const HeadRows& k = pb.rotate ? pb.key_slots[it.map->KeySlot(seg)] : pb.k;
    float* s = sc.s.data();
    switch (it.rows) {
      case 1: ScoreTileDirect<kD, 1>(q, pb.dp, k, it.g, k_lo, nk, ncols, s); return true;
      case 2: ScoreTileDirect<kD, 2>(q, pb.dp, k, it.g, k_lo, nk, ncols, s); return true;
      case 3: ScoreTileDirect<kD, 3>(q, pb.dp, k, it.g, k_lo, nk, ncols, s); return true;
      case 4: ScoreTileDirect<kD, 4>(q, pb.dp, k, it.g, k_lo, nk, ncols, s); return true;
      default: return false;
    }
  }
}

// One work item: kv head g, query tile qt, key chunk `chunk`; the steps of the top of this file.
template <int kD, class Mask>
void RunItem(const Problem& pb, const Mask& mask, int g, int64_t qt, int chunk, Scratch& sc) {
  using Cfg = Config<kD>;
  constexpr int kBk = Cfg::kBk;
  constexpr int N = Cfg::kN;
  const int D = kD != 0 ? kD : pb.D;
  const int dp = pb.dp;
  const Item it = MakeItem(pb, mask, g, qt, chunk);
  if (pb.dynamic) PrepareDynamicTile<kBk>(pb, it, sc);
  PackQueries<kD>(pb, it, sc);
  float* o = sc.o.data();
  float* m = sc.m.data();
  float* l = sc.l.data();
  std::fill(o, o + static_cast<int64_t>(it.rows) * dp, 0.0f);
  std::fill(m, m + it.rows, kNegInf);
  std::fill(l, l + it.rows, 0.0f);

  // Few rows (decode), keys used as stored: score from the key rows in place (ScoreTileDirect).
  // Not below D = 32, where the packing is cheap (one 8x8 block per 8 keys) and a sum across lanes
  // per key would cost more: BM_AttentionDecode at D = 8 measured no faster with it; at D = 64,
  // 1.4x faster (bench/attention_bench.cc, docs/performance.md).
  const bool direct = kD >= 32 && kD % Cfg::kNV == 0 && it.rows <= kDirectRows && !pb.dynamic &&
                      !pb.key_norm && pb.xpos == nullptr;
  // Steps 3-5 for the rows [r0, r0 + rows) of the item, whose scores are in s (rows, kBk), on the
  // keys [k_lo, k_lo + nk) of the tile.
  auto finish = [&](int r0, int rows, const float* v, int64_t k_lo, int nk, int ncols,
                    TileKind kind) {
    // Gemma 2's soft cap, before the mask (which it leaves as it is).
    if (pb.softcap > 0.0f) SoftCap<kBk>(sc.s.data(), rows, ncols, pb.softcap);
    // 3. Mask partial tiles.
    if (kind == TileKind::kPartial) {
      ApplyMask<Mask, kBk>(mask, sc.s.data(), rows, pb.group, ncols, nk, it.q_lo, k_lo, r0);
    }
    // 4. Online softmax, 5. P V.
    SoftmaxUpdate<kD>(sc.s.data(), rows, ncols, m + r0, l + r0, sc.alpha.data() + r0);
    AccumulatePV<kD>(sc.s.data(), v, pb.v.row_stride, nk, sc.alpha.data() + r0,
                     o + static_cast<size_t>(r0) * dp, dp, rows, D);
  };
  for (int64_t k_lo = it.k_begin; k_lo < it.k_stop; k_lo += kBk) {
    const int nk = static_cast<int>(std::min<int64_t>(kBk, it.k_end - k_lo));
    const int ncols = (nk + N - 1) / N * N;
    const float* v = pb.v.data + k_lo * pb.v.row_stride + g * pb.v.head_stride;
    // 1. Classify the tile.
    TileKind kind = mask.Classify(it.q_lo, it.q_hi, k_lo, k_lo + nk - 1);
    if (kind == TileKind::kEmpty) continue;
    if (kind == TileKind::kFull && ncols != nk) kind = TileKind::kPartial;
    // 2. Score it: once per segment it meets.
    const uint32_t segs =
        it.map != nullptr ? it.map->SegmentsIn(it.q_lo, it.q_hi, k_lo, k_lo + nk - 1) : 1u;
    const bool one_seg = (segs & (segs - 1)) == 0;
    if (one_seg && !pb.dynamic && !direct && pb.bias == nullptr) {
      // Most tiles of a prefill: steps 2-5 per block of kSubRows rows, each block on the keys
      // its rows can see (a block above the causal diagonal skips the tile, one on it stops at
      // its last row's position), so that the block's scores stay in L1 from step 2 to step 5.
      const int seg = std::countr_zero(segs);
      const float* qs = sc.q.data() + static_cast<size_t>(seg) * pb.rows_max * dp;
      PackKeyTile<kD, kBk>(pb, it, seg, k_lo, nk, ncols, sc);
      for (int r0 = 0; r0 < it.rows; r0 += kSubRows) {
        const int rows = std::min(kSubRows, it.rows - r0);
        const int64_t sub_lo = it.q_lo + r0 / pb.group;
        const int64_t sub_hi = it.q_lo + (r0 + rows - 1) / pb.group;
        const int sub_nk = static_cast<int>(std::clamp<int64_t>(mask.KeyEnd(sub_hi) - k_lo, 0, nk));
        if (sub_nk == 0) continue;
        const int sub_ncols = (sub_nk + N - 1) / N * N;
        TileKind sub_kind = mask.Classify(sub_lo, sub_hi, k_lo, k_lo + sub_nk - 1);
        if (sub_kind == TileKind::kEmpty) continue;  // exact: o, m, l stay as they are
        if (sub_kind == TileKind::kFull && sub_ncols != sub_nk) sub_kind = TileKind::kPartial;
        ScoreTile<kD>(qs + static_cast<size_t>(r0) * dp, dp, sc.kt.data(), sc.s.data(), rows,
                      sub_ncols, D);
        finish(r0, rows, v, k_lo, sub_nk, sub_ncols, sub_kind);
      }
      continue;
    }
    if (pb.dynamic) {  // keys rotated per query position
      PackKeyTile<kD, kBk>(pb, it, 0, k_lo, nk, ncols, sc);
      ScoreDynamicTile<kD, kBk>(pb, it, k_lo, ncols, sc);
    } else if (one_seg) {  // decode, or a bias: the whole tile at once
      const int seg = std::countr_zero(segs);
      const float* qs = sc.q.data() + static_cast<size_t>(seg) * pb.rows_max * dp;
      if (!(direct && ScoreDirect<kD>(pb, it, seg, qs, k_lo, nk, ncols, sc))) {
        PackKeyTile<kD, kBk>(pb, it, seg, k_lo, nk, ncols, sc);
        ScoreTile<kD>(qs, dp, sc.kt.data(), sc.s.data(), it.rows, ncols, D);
      }
    } else {  // a segment boundary: every segment's score, then the right one per element
      for (int seg = 0; seg < kMaxSegments; ++seg) {
        if (!(segs & (1u << seg))) continue;
        PackKeyTile<kD, kBk>(pb, it, seg, k_lo, nk, ncols, sc);
        ScoreTile<kD>(sc.q.data() + static_cast<size_t>(seg) * pb.rows_max * dp, dp, sc.kt.data(),
                      sc.seg_s.data() + static_cast<size_t>(seg) * it.rows * kBk, it.rows, ncols,
                      D);
      }
      SelectSegmentScores<kBk>(pb, it, k_lo, nk, sc);
      kind = TileKind::kPartial;  // padding columns were not selected
    }
    if (pb.bias != nullptr) AddBias<kBk>(pb, it, k_lo, nk, sc);
    finish(0, it.rows, v, k_lo, nk, ncols, kind);
  }
  WriteItem<kD>(pb, it, sc);
}

// Flash-decoding merge of the chunks of work item (g, qt) into out.
void MergeChunks(const Problem& pb, int g, int64_t qt) {
  const int r = pb.group;
  const int64_t i0 = qt * pb.tq;
  const int nt = static_cast<int>(std::min(pb.tq, pb.T - i0));
  for (int row = 0; row < nt * r; ++row) {
    float m = kNegInf;
    for (int c = 0; c < pb.n_chunks; ++c)
      m = std::max(m, PartialSlot(pb, g, qt, c)[row * (pb.dp + 2) + pb.dp]);
    const float m_ref = m == kNegInf ? 0.0f : m;
    float l = 0.0f;
    float* dst = pb.out.data + (i0 + row / r) * pb.out.row_stride +
                 static_cast<int64_t>(g * r + row % r) * pb.out.head_stride;
    for (int d = 0; d < pb.D; ++d) dst[d] = 0.0f;
    for (int c = 0; c < pb.n_chunks; ++c) {
      const float* src = PartialSlot(pb, g, qt, c) + row * (pb.dp + 2);
      const float w = std::exp2(src[pb.dp] - m_ref);
      l += w * src[pb.dp + 1];
      for (int d = 0; d < pb.D; ++d) dst[d] += w * src[d];
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < pb.D; ++d) dst[d] *= inv;
    if (pb.lse != nullptr) pb.lse[(i0 + row / r) * pb.H + g * r + row % r] = LogSumExp(m_ref, l);
  }
}

template <int kD, class Mask>
void RunAll(Problem pb, const Mask& mask) {
  using Cfg = Config<kD>;
  const int threads = NumThreads();
  const int64_t items = pb.n_qtiles * pb.G;
  // Keys any query of this call can see: split them into chunks when there are too few work
  // items to keep every thread busy (decode), each chunk at least two key tiles.
  const int64_t s_vis = std::min(pb.S, mask.KeyEnd(pb.q_pos0 + pb.T - 1));
  pb.key_first = std::min(s_vis, mask.KeyBegin(pb.q_pos0));
  const int64_t span = s_vis - pb.key_first;
  int64_t chunks = 1;
  if (items < 2 * threads) {
    chunks = std::min<int64_t>((2 * threads + items - 1) / items,
                               std::max<int64_t>(1, span / (2 * Cfg::kBk)));
  }
  pb.chunk_keys = std::max<int64_t>(
      Cfg::kBk, ((span + chunks - 1) / chunks + Cfg::kBk - 1) / Cfg::kBk * Cfg::kBk);
  pb.n_chunks = static_cast<int>((span + pb.chunk_keys - 1) / pb.chunk_keys);
  if (pb.n_chunks < 1) pb.n_chunks = 1;
  AlignedVector<float> partial;
  if (pb.n_chunks > 1) {
    partial.resize(static_cast<size_t>(items) * pb.n_chunks * pb.rows_max * (pb.dp + 2));
    pb.partial = partial.data();
  }
  const int64_t units = items * pb.n_chunks;
  const int D = kD != 0 ? kD : pb.D;
  const int segments = pb.rotate ? pb.plan->map.Segments() : 1;
  // Heaviest first: the last query tiles see the most keys. Without key chunks (prefill), one kv
  // head after the other, so that its keys and values stay in cache from one tile to the next
  // (the queue still ends on light tiles); with chunks (decode), query tile after query tile.
  ParallelForEach(units, [&](int64_t u, int) {
    thread_local Scratch sc;
    sc.Reserve(pb.rows_max, pb.dp, D, Cfg::kBk, segments);
    if (pb.n_chunks == 1) {
      const int g = static_cast<int>(u / pb.n_qtiles);
      const int64_t qt = pb.n_qtiles - 1 - u % pb.n_qtiles;
      RunItem<kD, Mask>(pb, mask, g, qt, 0, sc);
      return;
    }
    const int64_t qt = pb.n_qtiles - 1 - u / (pb.G * pb.n_chunks);
    const int64_t rest = u % (pb.G * pb.n_chunks);
    RunItem<kD, Mask>(pb, mask, static_cast<int>(rest / pb.n_chunks), qt,
                      static_cast<int>(rest % pb.n_chunks), sc);
  });
  if (pb.n_chunks > 1) {
    ParallelForEach(
        items, [&](int64_t it, int) { MergeChunks(pb, static_cast<int>(it % pb.G), it / pb.G); });
  }
}

template <int kD>
void RunMasked(const Problem& pb) {
  WithMask(pb.plan, [&](const auto& mask) { RunAll<kD>(pb, mask); });
}

}  // namespace
}  // namespace stretch::attention_internal
