// Backward of the tiled attention (attention.h, AttentionBackward), for training.
//
// Forward, per query head h, query row i (position p_i), visible key j (natural-log units):
//   s_ij = scale * c_i * q_i . k_j + bias_h(p_i - j)      c_i = plan's LogitScale(p_i) (log-n, ...)
//   P_ij = exp(s_ij - lse_i),   lse_i = log sum_j exp(s_ij)         (saved by the forward)
//   o_i  = sum_j P_ij v_j
// Backward (the softmax Jacobian: dP -> dS = P (dP - sum_j P dP)):
//   forward: o_i = sum_j P_ij v_j;            so: dv_j += sum_i P_ij do_i,  dP_ij = do_i . v_j
//   forward: P_ij = softmax_j(s_ij);          so: dS_ij = P_ij (dP_ij - Delta_i),
//            Delta_i = sum_j P_ij dP_ij = do_i . o_i   (o_i = sum_j P_ij v_j)
//   forward: s_ij = scale c_i q_i . k_j + b;  so: dq_i += scale c_i sum_j dS_ij k_j,
//                                                 dk_j += scale sum_i c_i dS_ij q_i,
//                                                 db    = dS_ij (and through b's parameters)
// Grouped-query attention: dk, dv of kv head g sum over the H/G query heads that read it.
//
// Relative position maps (QkStaticRotation, static plans: every map of src/position/maps/, Lambda's
// sinks; src/position/plan.h). q and k are raw; the pair (i, j) falls in segment
// seg = map.SegmentOf(p_i, j), whose query position a_seg(p_i) = map.QueryPos and key position
// b_seg(j) = map.KeyPos are rotated separately (attention.cc, RunItem), and segments sharing a
// key position function share a key slot (slot = map.KeySlot(seg)):
//   forward: qr^seg_i  = R(a_seg(p_i)) q_i     (attention.cc: RotatePairs(dst, pairs, qcos, qsin))
//   forward: kr^slot_j = R(b_seg(j)) k_j       (the caller's key_slots[slot]; R = 1 for an
//                                               unrotated slot, whose keys sit at position 0)
//   forward: s_ij = scale c_i qr^seg_i . kr^slot_j + b
//       so: dqr^seg_i  += scale c_i sum_{j: SegmentOf(p_i, j) = seg} dS_ij kr^slot_j
//           dkr^slot_j += scale sum_{i, seg: SegmentOf(p_i, j) = seg, KeySlot(seg) = slot}
//                                                                       c_i dS_ij qr^seg_i
//   forward: qr^seg_i = R(a) q_i;   so: dq_i = sum_seg R(a_seg(p_i))^T dqr^seg_i
//   forward: kr^slot_j = R(b) k_j;  so: dk_j = sum_slot R(b_slot(j))^T dkr^slot_j
// with R(a)^T = R(-a): per interleaved pair, (x0, x1) -> (x0 cos + x1 sin, -x0 sin + x1 cos).
// The returned dq and dk are with respect to the RAW q and k: the caller applies no RoPE backward.
// A tile inside one segment (most tiles) scores once, as without a map; a tile crossing a segment
// boundary scores once per segment it touches, keeps each element's own score, and splits dS by
// segment (zeros elsewhere) for the products with that segment's q copy and key slot. The query
// copies qr^seg (Segments() x (T, H, D) floats: O(T H D), never (T, S)) are made once per call
// from the call's QkStaticRotation tables, the same tables the forward rotated q with; the keys' angles b_slot(j)
// theta_t are tabulated here for keys 0 .. S-1 (MakeRopeTableAt, as RotationTables does, so the
// same float cos/sin as the caller's key slots).
//
// Never an (T, S) matrix: the scores are recomputed tile by tile (kTile x kTile) from q, k and the
// saved lse, in two passes so that every output tile has exactly one writer and the result does
// not depend on the thread count (bit-exact resume needs that; atomics would not give it):
//   pass 1, one work item per (kv head, key tile): dk, dv of those keys, over every query tile
//           and query head of the group that sees them;
//   pass 2, one work item per (query head, query tile): dq of those rows (and the bias
//           parameters' gradients, per item, summed in a fixed order afterwards).
// The score products of pass 1 are computed again in pass 2: 2 QK^T and 2 dO V^T instead of 1,
// the price of determinism without a (T, S) buffer. Tile products go to the engine's sgemm
// (src/kernels/gemm.h), called single-threaded from inside the parallel loop.
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
#include "src/kernels/attention_simd.h"  // ExpArray
#include "src/kernels/attention_tile.h"
#include "src/kernels/gemm.h"
#include "src/kernels/ops.h"
#include "src/position/rope.h"

namespace stretch {
namespace {

using attention_internal::TileKind;

constexpr int kTile = 64;
constexpr int kMaxSegments = 3;  // the chunked map's; every other map has 1 or 2

struct Backward {
  HeadRows q, v, o, dout;
  const float* lse;
  int64_t T, S, q_pos0;
  int H, G, D, group;
  float scale;
  const AttentionPlan* plan;
  std::vector<float> delta;  // (T, H): do_i . o_i
  std::vector<float> row_c;  // (T): c_i
  // What segment seg scores with: q as it sees it (q itself, or its rotated copy qr^seg) and its
  // key slot's rows (k itself, or key_slots[KeySlot(seg)]). One segment without a map.
  const PositionMap* map = nullptr;  // rotating plans only
  int segments = 1;
  HeadRows qseg[kMaxSegments], kseg[kMaxSegments];
  int slot_of[kMaxSegments] = {0, 0, 0};
  int slots = 1;
  // Rotating plans: cos/sin of b_slot(j) theta_t for keys 0 .. S-1 (empty for an unrotated slot).
  std::vector<RopeTable> key_tab;
  bool rotate = false;  // QkStaticRotation: q raw, keys in key_slots, rotated per segment
  const RotationTables* tables = nullptr;
  const HeadRows* key_slots = nullptr;

  // Segments the pairs of a tile may fall in (bit s: segment s; a superset).
  uint32_t Segments(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
    return map != nullptr ? map->SegmentsIn(q_lo, q_hi, k_lo, k_hi) : 1u;
  }
  const float* QRow(int seg, int64_t i, int h) const {
    const HeadRows& x = qseg[seg];
    return x.data + i * x.row_stride + h * x.head_stride;
  }
  const float* KRow(int seg, int64_t j, int g) const {
    const HeadRows& x = kseg[seg];
    return x.data + j * x.row_stride + g * x.head_stride;
  }
  const float* VRow(int64_t j, int g) const {
    return v.data + j * v.row_stride + g * v.head_stride;
  }
  const float* DoRow(int64_t i, int h) const {
    return dout.data + i * dout.row_stride + h * dout.head_stride;
  }
};

// One (query tile, key tile, query head) block: P and G = scale c_i dS (both nq x nk, stride
// kTile); dS itself (before the scale) in dp. Boundary tiles also keep each segment's scores
// (seg_s), each element's segment (seg_of) and G restricted to one segment (gs).
struct TileWork {
  AlignedVector<float> s, p, dp, g, seg_s, gs;
  std::vector<uint8_t> seg_of;
  explicit TileWork(int segments)
      : s(kTile * kTile), p(kTile * kTile), dp(kTile * kTile), g(kTile * kTile) {
    if (segments > 1) {
      seg_s.resize(static_cast<size_t>(segments) * kTile * kTile);
      gs.resize(kTile * kTile);
      seg_of.resize(kTile * kTile);
    }
  }
};

template <class Mask>
void ComputeTile(const Backward& b, const Mask& mask, int h, int64_t i0, int nq, int64_t j0, int nk,
                 uint32_t segs, TileWork& w) {
  const int g = h / b.group;
  if ((segs & (segs - 1)) == 0) {
    // One segment: s = q k^T (raw dot products) of that segment's q copy and key slot.
    const int seg = std::countr_zero(segs);
    SgemmOneThread(false, true, nq, nk, b.D, 1.0f, b.QRow(seg, i0, h),
                   static_cast<int>(b.qseg[seg].row_stride), b.KRow(seg, j0, g),
                   static_cast<int>(b.kseg[seg].row_stride), 0.0f, w.s.data(), kTile);
  } else {
    // A tile on a segment boundary: every segment's scores, then each element's own (by runs of
    // keys, as the forward selects them).
    for (int seg = 0; seg < b.segments; ++seg) {
      if (!(segs & (1u << seg))) continue;
      SgemmOneThread(false, true, nq, nk, b.D, 1.0f, b.QRow(seg, i0, h),
                     static_cast<int>(b.qseg[seg].row_stride), b.KRow(seg, j0, g),
                     static_cast<int>(b.kseg[seg].row_stride), 0.0f,
                     w.seg_s.data() + static_cast<size_t>(seg) * kTile * kTile, kTile);
    }
    for (int a = 0; a < nq; ++a) {
      const int64_t pos = b.q_pos0 + i0 + a;
      for (int x = 0; x < nk;) {
        const int seg = b.map->SegmentOf(pos, j0 + x);
        const int end =
            static_cast<int>(std::min<int64_t>(nk, b.map->SegmentRunEnd(pos, j0 + x) - j0));
        const float* src = w.seg_s.data() + static_cast<size_t>(seg) * kTile * kTile + a * kTile;
        std::copy(src + x, src + end, w.s.data() + a * kTile + x);
        std::fill(w.seg_of.data() + a * kTile + x, w.seg_of.data() + a * kTile + end,
                  static_cast<uint8_t>(seg));
        x = end;
      }
    }
  }
  // dP = do v^T
  SgemmOneThread(false, true, nq, nk, b.D, 1.0f, b.DoRow(i0, h),
                 static_cast<int>(b.dout.row_stride), b.VRow(j0, g),
                 static_cast<int>(b.v.row_stride), 0.0f, w.dp.data(), kTile);
  const bool bias = b.plan != nullptr && b.plan->bias.kind != BiasKind::kNone;
  for (int a = 0; a < nq; ++a) {
    const int64_t i = i0 + a;
    const int64_t pos = b.q_pos0 + i;
    const float lse = b.lse[i * b.H + h];
    const float c = b.scale * b.row_c[static_cast<size_t>(i)];
    const float delta = b.delta[static_cast<size_t>(i * b.H + h)];
    float* sr = w.s.data() + a * kTile;
    float* pr = w.p.data() + a * kTile;
    float* dpr = w.dp.data() + a * kTile;
    float* gr = w.g.data() + a * kTile;
    if (lse == -std::numeric_limits<float>::infinity()) {  // a row that sees no key
      std::fill(pr, pr + nk, 0.0f);
      std::fill(dpr, dpr + nk, 0.0f);
      std::fill(gr, gr + nk, 0.0f);
      continue;
    }
    // P = exp(s - lse), a key the mask hides at -inf (probability 0), on vectors (ExpArray).
    for (int x = 0; x < nk; ++x) {
      const int64_t j = j0 + x;
      if (!mask.Visible(pos, j)) {
        pr[x] = -std::numeric_limits<float>::infinity();
        continue;
      }
      float s = c * sr[x];
      if (bias) s += static_cast<float>(b.plan->bias.Value(h, pos - j));
      pr[x] = s - lse;
    }
    attention_internal::ExpArray(pr, pr, nk);
    for (int x = 0; x < nk; ++x) {
      const float ds = pr[x] * (dpr[x] - delta);  // 0 where the key is hidden (P = 0)
      dpr[x] = ds;                                // dS, kept for the bias gradients
      gr[x] = c * ds;
    }
  }
}

// G of the tile restricted to segment seg's elements (zeros elsewhere); G itself for a tile
// inside one segment.
const float* SegmentG(uint32_t segs, int seg, int nq, int nk, TileWork& w) {
  if ((segs & (segs - 1)) == 0) return w.g.data();
  for (int a = 0; a < nq; ++a) {
    const float* gr = w.g.data() + a * kTile;
    const uint8_t* so = w.seg_of.data() + a * kTile;
    float* out = w.gs.data() + a * kTile;
    for (int x = 0; x < nk; ++x) out[x] = so[x] == seg ? gr[x] : 0.0f;
  }
  return w.gs.data();
}

// x += R^T y, R the rotation whose cos/sin are given:
//   forward: y0 = x0 cos - x1 sin;  y1 = x0 sin + x1 cos
//   so:      dx0 = dy0 cos + dy1 sin;  dx1 = -dy0 sin + dy1 cos
void AddRotatedBack(float* x, const float* y, int pairs, const float* cos, const float* sin) {
  for (int t = 0; t < pairs; ++t) {
    const float y0 = y[2 * t], y1 = y[2 * t + 1];
    x[2 * t] += y0 * cos[t] + y1 * sin[t];
    x[2 * t + 1] += y1 * cos[t] - y0 * sin[t];
  }
}

// KERPLE's bias gradients from one tile's dS (head h), added to da and db.
void KerpleGradsOfTile(const Backward& b, int h, int64_t i0, int nq, int64_t j0, int nk,
                       const TileWork& w, double& da, double& db) {
  const AttentionPlan* plan = b.plan;
  // KERPLE log:   b = -a log(1 + r d):  db/da = -log(1 + r d),  db/dr = -a d / (1 + r d)
  // KERPLE power: b = -a d^r:           db/da = -d^r,           db/dr = -a d^r ln d
  const double pa = plan->bias.a[static_cast<size_t>(h)];
  const double pr = plan->bias.b[static_cast<size_t>(h)];
  for (int a = 0; a < nq; ++a) {
    const int64_t pos = b.q_pos0 + i0 + a;
    const float* dsr = w.dp.data() + a * kTile;
    for (int x = 0; x < nk; ++x) {
      if (dsr[x] == 0.0f) continue;
      const double d = static_cast<double>(pos - (j0 + x));
      const double ds = dsr[x];
      if (plan->bias.kind == BiasKind::kKerpleLog) {
        da += ds * -std::log1p(pr * d);
        db += ds * (-pa * d / (1.0 + pr * d));
      } else if (d > 0.0) {
        const double dr = std::pow(d, pr);
        da += ds * -dr;
        db += ds * (-pa * dr * std::log(d));
      }
    }
  }
}

// The shapes, and what the backward supports: static frequencies, and the q/k-side variants
// (norms, XPOS, SSMax) applied outside the kernel.
void CheckBackwardInputs(const float* lse, const AttentionDims& dims, const AttentionParams& params,
                         const AttentionGrads& grads) {
  const AttentionPlan* plan = params.plan;
  STRETCH_CHECK(dims.n_q >= 0 && dims.q_pos0 >= 0 && dims.q_pos0 + dims.n_q <= dims.n_kv,
                "T={} S={} q_pos0={}", dims.n_q, dims.n_kv, dims.q_pos0);
  STRETCH_CHECK(dims.n_heads >= 1 && dims.n_kv_heads >= 1 && dims.n_heads % dims.n_kv_heads == 0,
                "H={} G={}", dims.n_heads, dims.n_kv_heads);
  STRETCH_CHECK(!std::holds_alternative<QkDynamicRotation>(params.qk),
                "the backward has no dynamic frequencies (dynamic-ntk, dynamic-yarn): a key's "
                "rotation there depends on the query; train with a static plan");
  if (const auto* fixed = std::get_if<QkStaticRotation>(&params.qk)) {
    STRETCH_CHECK(plan != nullptr, "rotate needs a plan");
    STRETCH_CHECK(!plan->dynamic,
                  "the backward has no dynamic frequencies (dynamic-ntk, dynamic-yarn): a key's "
                  "rotation there depends on the query; train with a static plan");
    STRETCH_CHECK(
        dims.head_dim % 2 == 0 && static_cast<int>(plan->freq.thetas.size()) == dims.head_dim / 2,
        "D={} with {} rotary pairs", dims.head_dim, plan->freq.thetas.size());
    STRETCH_CHECK(fixed->tables != nullptr && fixed->tables->pairs() == dims.head_dim / 2 &&
                      fixed->tables->pos0() == dims.q_pos0 &&
                      fixed->tables->Query(0).n == dims.n_q && fixed->key_slots != nullptr,
                  "rotation tables or key slots not prepared");
  } else if (plan != nullptr) {
    STRETCH_CHECK(plan->map.IsIdentity() && !plan->dynamic,
                  "q and k already rotated (QkRotated) need the identity map and static "
                  "frequencies; a relative map needs raw q and k (rotate)");
  }
  if (plan != nullptr) {
    STRETCH_CHECK(
        !plan->query_norm && !plan->key_norm && plan->xpos_scale_base <= 0.0 && plan->ssmax.empty(),
        "QueryNorm, KeyNorm, XPOS and SSMax are applied to q and k outside the kernel "
        "when training");
    STRETCH_CHECK(plan->softcap == 0.0, "soft-capped attention (Gemma 2) is not trained");
  }
  STRETCH_CHECK(lse != nullptr && grads.dq.data && grads.dk.data && grads.dv.data);
}

// What each segment scores with (see Backward): the queries rotated per segment (into qrot,
// (segments, T, H, D)), the key slots, and the key tables of the rotated slots.
void PrepareSegments(Backward& b, HeadRows q, HeadRows k, AlignedVector<float>& qrot) {
  const AttentionPlan* plan = b.plan;
  const int D = b.D, pairs = D / 2;
  b.qseg[0] = q;
  b.kseg[0] = k;
  if (b.rotate) {
    const PositionMap& map = plan->map;
    b.map = &map;
    b.segments = map.Segments();
    b.slots = map.KeySlots();
    STRETCH_CHECK(b.segments <= kMaxSegments && b.slots <= kMaxSegments);
    const int64_t rs = int64_t{b.H} * D;
    qrot.resize(static_cast<size_t>(b.segments * b.T * rs));
    for (int seg = 0; seg < b.segments; ++seg) {
      b.slot_of[seg] = map.KeySlot(seg);
      b.qseg[seg] = HeadRows{qrot.data() + seg * b.T * rs, rs, D};
      b.kseg[seg] = b.key_slots[b.slot_of[seg]];
    }
    // qr^seg_i = R(a_seg(p_i)) q_i, with the forward's tables (row i: position q_pos0 + i).
    ParallelFor(b.T, WorkGrain(b.T, b.T * b.segments * rs, 65536), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        for (int seg = 0; seg < b.segments; ++seg) {
          const RopeTable& tab = b.tables->Query(seg);
          for (int h = 0; h < b.H; ++h) {
            const float* src = q.data + i * q.row_stride + h * q.head_stride;
            float* dst = qrot.data() + (seg * b.T + i) * rs + h * D;
            std::copy(src, src + D, dst);
            RotatePairs(dst, pairs, tab.cos.data() + i * pairs, tab.sin.data() + i * pairs);
          }
        }
      }
    });
    // cos/sin of b_slot(j) theta_t for keys 0 .. S-1, per rotated slot.
    b.key_tab.resize(static_cast<size_t>(b.slots));
    for (int slot = 0; slot < b.slots; ++slot) {
      if (map.SlotIsUnrotated(slot)) continue;
      int seg = 0;
      while (map.KeySlot(seg) != slot) ++seg;  // the first segment using it defines it
      std::vector<double> pos(static_cast<size_t>(b.S));
      for (int64_t j = 0; j < b.S; ++j) pos[static_cast<size_t>(j)] = map.KeyPos(seg, j);
      b.key_tab[static_cast<size_t>(slot)] = MakeRopeTableAt(plan->freq.thetas, 0, pos);
    }
  }
}

// Delta_i = do_i . o_i (in double), and the row factors c_i.
void PrepareRows(Backward& b) {
  const int D = b.D;
  b.delta.resize(static_cast<size_t>(b.T * b.H));
  b.row_c.resize(static_cast<size_t>(b.T));
  for (int64_t i = 0; i < b.T; ++i) {
    b.row_c[static_cast<size_t>(i)] =
        b.plan != nullptr ? static_cast<float>(b.plan->LogitScale(b.q_pos0 + i)) : 1.0f;
    for (int h = 0; h < b.H; ++h) {
      const float* d_o = b.dout.data + i * b.dout.row_stride + h * b.dout.head_stride;
      const float* oo = b.o.data + i * b.o.row_stride + h * b.o.head_stride;
      double acc = 0.0;
      for (int d = 0; d < D; ++d) acc += static_cast<double>(d_o[d]) * oo[d];
      b.delta[static_cast<size_t>(i * b.H + h)] = static_cast<float>(acc);
    }
  }
}

// Pass 1: dk, dv per (kv head, key tile); dk per key slot (dkr^slot), then back to raw k.
template <class Mask>
void KeyPass(const Backward& b, const Mask& mask, const AttentionGrads& grads) {
  const int D = b.D, pairs = D / 2;
  const HeadRows dout = b.dout;
  const int64_t n_qt = (b.T + kTile - 1) / kTile, n_kt = (b.S + kTile - 1) / kTile;
  const size_t tile_floats = static_cast<size_t>(kTile) * D;
  const int64_t items1 = b.G * n_kt;
  struct Scratch {
    TileWork w;
    AlignedVector<float> dk, dv;
  };
  std::vector<Scratch> scratch;
  for (int t = 0; t < NumThreads(); ++t) {
    scratch.push_back({TileWork(b.segments),
                       AlignedVector<float>(static_cast<size_t>(b.slots) * tile_floats),
                       AlignedVector<float>(tile_floats)});
  }
  {
    ParallelForEach(items1, [&](int64_t it, int worker) {
      TileWork& w = scratch[static_cast<size_t>(worker)].w;
      AlignedVector<float>& dk = scratch[static_cast<size_t>(worker)].dk;
      AlignedVector<float>& dv = scratch[static_cast<size_t>(worker)].dv;
      const int g = static_cast<int>(it / n_kt);
      const int64_t j0 = (it % n_kt) * kTile;
      const int nk = static_cast<int>(std::min<int64_t>(kTile, b.S - j0));
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int64_t qt = 0; qt < n_qt; ++qt) {
        const int64_t i0 = qt * kTile;
        const int nq = static_cast<int>(std::min<int64_t>(kTile, b.T - i0));
        const int64_t q_lo = b.q_pos0 + i0, q_hi = q_lo + nq - 1;
        if (mask.Classify(q_lo, q_hi, j0, j0 + nk - 1) == TileKind::kEmpty) continue;
        const uint32_t segs = b.Segments(q_lo, q_hi, j0, j0 + nk - 1);
        for (int hh = 0; hh < b.group; ++hh) {
          const int h = g * b.group + hh;
          ComputeTile(b, mask, h, i0, nq, j0, nk, segs, w);
          // dv (nk, D) += P^T (nk, nq) do (nq, D)
          SgemmOneThread(true, false, nk, D, nq, 1.0f, w.p.data(), kTile, b.DoRow(i0, h),
                         static_cast<int>(dout.row_stride), 1.0f, dv.data(), D);
          // dk^slot (nk, D) += G_seg^T (nk, nq) q^seg (nq, D)
          for (int seg = 0; seg < b.segments; ++seg) {
            if (!(segs & (1u << seg))) continue;
            SgemmOneThread(true, false, nk, D, nq, 1.0f, SegmentG(segs, seg, nq, nk, w), kTile,
                           b.QRow(seg, i0, h), static_cast<int>(b.qseg[seg].row_stride), 1.0f,
                           dk.data() + b.slot_of[seg] * tile_floats, D);
          }
        }
      }
      for (int x = 0; x < nk; ++x) {
        const int64_t j = j0 + x;
        float* dkr = grads.dk.data + j * grads.dk.row_stride + g * grads.dk.head_stride;
        float* dvr = grads.dv.data + j * grads.dv.row_stride + g * grads.dv.head_stride;
        std::copy(dv.data() + x * D, dv.data() + (x + 1) * D, dvr);
        if (!b.rotate) {
          std::copy(dk.data() + x * D, dk.data() + (x + 1) * D, dkr);
          continue;
        }
        // dk_j = sum_slot R(b_slot(j))^T dkr^slot_j, slots in a fixed order.
        std::fill(dkr, dkr + D, 0.0f);
        for (int slot = 0; slot < b.slots; ++slot) {
          const float* src = dk.data() + slot * tile_floats + x * D;
          const RopeTable& tab = b.key_tab[static_cast<size_t>(slot)];
          if (tab.n == 0) {  // unrotated slot (far keys, all at position 0)
            for (int d = 0; d < D; ++d) dkr[d] += src[d];
          } else {
            AddRotatedBack(dkr, src, pairs, tab.cos.data() + j * pairs, tab.sin.data() + j * pairs);
          }
        }
      }
    });
  }
}

// Pass 2: dq per (query head, query tile), per segment (dqr^seg) then back to raw q, and the bias
// parameters' gradients per item, summed in a fixed order (deterministic).
template <class Mask>
void QueryPass(const Backward& b, const Mask& mask, const AttentionGrads& grads) {
  const AttentionPlan* plan = b.plan;
  const int D = b.D, pairs = D / 2;
  const int64_t n_qt = (b.T + kTile - 1) / kTile, n_kt = (b.S + kTile - 1) / kTile;
  const size_t tile_floats = static_cast<size_t>(kTile) * D;
  const bool bias_grads =
      plan != nullptr && grads.dbias_a != nullptr &&
      (plan->bias.kind == BiasKind::kKerpleLog || plan->bias.kind == BiasKind::kKerplePower);
  const int64_t items2 = b.H * n_qt;
  std::vector<double> item_da(static_cast<size_t>(items2), 0.0), item_db(item_da.size(), 0.0);
  struct Scratch {
    TileWork w;
    AlignedVector<float> dq;
  };
  std::vector<Scratch> scratch;
  for (int t = 0; t < NumThreads(); ++t) {
    scratch.push_back({TileWork(b.segments),
                       AlignedVector<float>(static_cast<size_t>(b.segments) * tile_floats)});
  }
  {
    ParallelForEach(items2, [&](int64_t it, int worker) {
      TileWork& w = scratch[static_cast<size_t>(worker)].w;
      AlignedVector<float>& dq = scratch[static_cast<size_t>(worker)].dq;
      const int h = static_cast<int>(it / n_qt);
      const int g = h / b.group;
      const int64_t i0 = (it % n_qt) * kTile;
      const int nq = static_cast<int>(std::min<int64_t>(kTile, b.T - i0));
      const int64_t q_lo = b.q_pos0 + i0, q_hi = q_lo + nq - 1;
      std::fill(dq.begin(), dq.end(), 0.0f);
      double da = 0.0, db = 0.0;
      for (int64_t kt = 0; kt < n_kt; ++kt) {
        const int64_t j0 = kt * kTile;
        const int nk = static_cast<int>(std::min<int64_t>(kTile, b.S - j0));
        if (mask.Classify(q_lo, q_hi, j0, j0 + nk - 1) == TileKind::kEmpty) continue;
        const uint32_t segs = b.Segments(q_lo, q_hi, j0, j0 + nk - 1);
        ComputeTile(b, mask, h, i0, nq, j0, nk, segs, w);
        // dq^seg (nq, D) += G_seg (nq, nk) k^slot (nk, D)
        for (int seg = 0; seg < b.segments; ++seg) {
          if (!(segs & (1u << seg))) continue;
          SgemmOneThread(false, false, nq, D, nk, 1.0f, SegmentG(segs, seg, nq, nk, w), kTile,
                         b.KRow(seg, j0, g), static_cast<int>(b.kseg[seg].row_stride), 1.0f,
                         dq.data() + seg * tile_floats, D);
        }
        if (bias_grads) KerpleGradsOfTile(b, h, i0, nq, j0, nk, w, da, db);
      }
      for (int a = 0; a < nq; ++a) {
        const int64_t i = i0 + a;
        float* dqr = grads.dq.data + i * grads.dq.row_stride + h * grads.dq.head_stride;
        if (!b.rotate) {
          std::copy(dq.data() + a * D, dq.data() + (a + 1) * D, dqr);
          continue;
        }
        // dq_i = sum_seg R(a_seg(p_i))^T dqr^seg_i, segments in a fixed order.
        std::fill(dqr, dqr + D, 0.0f);
        for (int seg = 0; seg < b.segments; ++seg) {
          const RopeTable& tab = b.tables->Query(seg);
          AddRotatedBack(dqr, dq.data() + seg * tile_floats + a * D, pairs,
                         tab.cos.data() + i * pairs, tab.sin.data() + i * pairs);
        }
      }
      item_da[static_cast<size_t>(it)] = da;
      item_db[static_cast<size_t>(it)] = db;
    });
  }
  if (bias_grads) {
    for (int64_t it = 0; it < items2; ++it) {
      const int h = static_cast<int>(it / n_qt);
      grads.dbias_a[h] += item_da[static_cast<size_t>(it)];
      if (grads.dbias_b != nullptr) grads.dbias_b[h] += item_db[static_cast<size_t>(it)];
    }
  }
}

}  // namespace

void AttentionBackward(HeadRows q, HeadRows k, HeadRows v, HeadRows out, HeadRows dout,
                       const float* lse, const AttentionDims& dims, const AttentionParams& params,
                       const AttentionGrads& grads) {
  CheckBackwardInputs(lse, dims, params, grads);
  Backward b;
  b.q = q;
  b.v = v;
  b.o = out;
  b.dout = dout;
  b.lse = lse;
  b.T = dims.n_q;
  b.S = dims.n_kv;
  b.q_pos0 = dims.q_pos0;
  b.H = dims.n_heads;
  b.G = dims.n_kv_heads;
  b.D = dims.head_dim;
  b.group = b.H / b.G;
  b.scale = params.scale;
  b.plan = params.plan;
  if (const auto* fixed = std::get_if<QkStaticRotation>(&params.qk)) {
    b.rotate = true;
    b.tables = fixed->tables;
    b.key_slots = fixed->key_slots;
  }
  AlignedVector<float> qrot;
  PrepareSegments(b, q, k, qrot);
  PrepareRows(b);
  // The forward's mask policy (attention_tile.h), chosen once: which tiles are seen, and which
  // pairs of a tile.
  attention_internal::WithMask(b.plan, [&](const auto& mask) {
    KeyPass(b, mask, grads);
    QueryPass(b, mask, grads);
  });
}

}  // namespace stretch
