// Tiled causal grouped-query attention with an online softmax (flash-style), on the CPU.
//
// The math. For query row i (absolute position p_i = q_pos0 + i), query head h, kv head
// g = h / (H/G), and the keys j this row sees (causal: j <= p_i):
//
//   s_ij  = log2(e) * scale * q[i,h,:] . k[j,g,:]          (scores in log2 units, see below)
//   out[i,h,:] = sum_j 2^(s_ij - m_i) v[j,g,:] / sum_j 2^(s_ij - m_i),   m_i = max_j s_ij
//
// computed one key tile at a time without ever holding the (T, S) matrix. Per row the kernel keeps
// the running max m, the running sum l and the unnormalized output o; for each key tile with scores
// s_j (masked ones -inf):
//
//   m' = max(m, max_j s_j);  alpha = 2^(m - m');  p_j = 2^(s_j - m')
//   l' = alpha l + sum_j p_j;  o' = alpha o + sum_j p_j v_j;       and at the end out = o / l.
//
// 2^x instead of e^x: folding log2(e) into the scale that multiplies q when q is packed saves one
// multiply per score, and 2^x is what the exponent field computes (Exp2 in attention_simd.h).
// Anything added to a score (a bias, a log-n factor) must be expressed in log2 units too.
//
// Structure (DESIGN.md, "The attention engine"). A work item is one kv head g and one query tile:
// the rows of all H/G query heads that share g, for rows / (H/G) consecutive positions, stacked
// into one (rows, D) tile, so that each K/V tile is loaded once per group. For each key tile:
//   1. Mask::Classify(query positions, key positions) -> empty (skipped) / full / partial;
//   2. ScoreTile: S = Q K^T for the tile (no mask work);
//   3. ApplyMask, partial tiles only: element mask (e.g. the causal diagonal and the tail of the
//      last tile), scores set to -inf;
//   4. SoftmaxUpdate: the online max/sum update above, scores become probabilities in place;
//   5. AccumulatePV: o = alpha o + P V.
// In a prefill (no bias, one segment), steps 2-5 run per block of kSubRows query rows of the tile
// (K^T packed once for all of them), each block on the keys its rows can see, so that its
// scores stay in L1 and the blocks above the causal diagonal skip the tile.
// The mask is a compile-time policy chosen once at dispatch (WithMask), as is the head dim: they
// act on every score. Relative maps, XPOS, norms and row scales act where Q and K are packed (per
// segment), once per query row of a work item and once per key tile, and biases between steps 2
// and 4, once per tile: these are flags of the Problem, read outside the score loops (steps 2, 4,
// 5 are the same code for every method). Making them template parameters as well would multiply
// the kernel's instantiations (7 head dims x 4 masks today) by their 2^5 combinations, and its
// compile time with them, to remove branches that run once per row or tile.
//
// Layouts and SIMD (Highway, static target). Q is packed once per work item, scaled, as (rows, Dp).
// Each K tile is packed transposed, (D, kBk) (8x8 blocks transposed in registers), so QK^T and the
// softmax vectorize across keys, up to 16 lanes (AVX-512 where the CPU has it) whatever D is, with
// register blocking over query rows (an R x C block of accumulators: per d, C vector loads of K^T
// and R broadcasts of q feed R*C FMAs). P V vectorizes across D (V is read in place, rows
// contiguous in d): an R x C block of output vectors, per key one load of V per vector and one
// broadcast of p per row; D = 8 uses 8-lane vectors there (one V row = one vector). Any D other
// than 8, 16, 32, 48, 64, 128 takes the generic path (runtime D; P V on 8 lanes plus a scalar tail).
// Decode (up to 4 query rows per work item, D >= 32) skips the K^T packing: each key row is read in
// place and dotted with the rows' q (ScoreTileDirect), since with one row the transpose would cost
// more than the products.
// Dynamic plans (dynamic-ntk, dynamic-yarn: every query position has its own frequencies, so every
// key it sees is rotated for it alone): query tiles of kDynamicTileRows stacked rows share the raw
// K^T packing, the softmax and P V; step 2 rotates each position's q once per key tile and its
// keys in registers from a per-position table of kBk key offsets (PrepareDynamicTile,
// ScoreTileRotating): no cos/sin per (query, key) pair.
//
// Tile sizes. QueryTileRows = 240 stacked query rows (60 at D = 8) and kBk = 64 keys
// (128 up to D = 64, measured in Config): the Q and O tiles are then up to 128 KiB each, in L2
// (1-2 MiB), the K^T tile and a block's scores (kSubRows x kBk) in L1 (48 KiB); packing K^T
// costs about 1/rows of the QK^T work; the per-row, per-tile work of the softmax update (one
// scalar exp2, two reductions) is amortized over kBk keys; D = 128 keeps kBk = 64 so K^T
// (32 KiB) fits in L1.
//
// Threads (the pool, src/core/threads.h). Prefill: work items (query tile x kv head), dynamic
// schedule, one kv head after the other (its keys and values stay in cache from one query tile
// to the next), heaviest (last) query tiles of each head first because causal work is
// triangular. Few query rows
// (decode): when there are fewer than two work items per thread, the keys are also split into
// chunks; each chunk leaves a partial (m, l, o) and a merge step combines them (flash-decoding):
//   m = max_c m_c;  l = sum_c 2^(m_c - m) l_c;  out = sum_c 2^(m_c - m) o_c / l.
//
// The kernel's templates are in attention_impl.h; this file instantiates the generic path (any D),
// attention_d*.cc the fixed head dimensions, so that the build compiles them in parallel.
#include "src/kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "src/core/check.h"
#include "src/kernels/attention_impl.h"
#include "src/kernels/attention_simd.h"
#include "src/kernels/attention_tile.h"

namespace stretch {
namespace attention_internal {

namespace {

// y[i] = f(df, x[i]) for n floats on vectors of up to 16; a partial last vector goes through a
// padded copy, so every element is computed by the same code whatever n.
template <class F>
void OnVectors(const float* x, float* y, int64_t n, F f) {
  const hn::CappedTag<float, 16> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(df, hn::LoadU(df, x + i)), df, y + i);
  if (i < n) {
    alignas(64) float buf[16] = {};
    std::copy(x + i, x + n, buf);
    hn::StoreU(f(df, hn::LoadU(df, buf)), df, buf);
    std::copy(buf, buf + (n - i), y + i);
  }
}

}  // namespace

void Exp2Array(const float* x, float* y, int64_t n) {
  OnVectors(x, y, n, [](auto df, auto v) { return Exp2(df, v); });
}

void ExpArray(const float* x, float* y, int64_t n) {
  OnVectors(x, y, n, [](auto df, auto v) { return ExpF(df, v); });
}

void RunHeadDimAny(const Problem& pb) { RunMasked<0>(pb); }

}  // namespace attention_internal

void AttentionForward(HeadRows q, HeadRows k, HeadRows v, HeadRowsMut out,
                      const AttentionDims& dims, const AttentionParams& params) {
  using namespace attention_internal;
  STRETCH_CHECK(dims.n_q >= 0 && dims.n_kv >= 0 && dims.q_pos0 >= 0, "T={} S={} q_pos0={}",
                dims.n_q, dims.n_kv, dims.q_pos0);
  STRETCH_CHECK(dims.n_heads >= 1 && dims.n_kv_heads >= 1 && dims.n_heads % dims.n_kv_heads == 0,
                "H={} G={}", dims.n_heads, dims.n_kv_heads);
  STRETCH_CHECK(dims.head_dim >= 1, "D={}", dims.head_dim);
  // Causal: the last query row sees keys up to its own position, which must exist.
  STRETCH_CHECK(dims.q_pos0 + dims.n_q <= dims.n_kv, "q_pos0={} + T={} > S={}", dims.q_pos0,
                dims.n_q, dims.n_kv);
  if (dims.n_q == 0) return;
  STRETCH_CHECK(q.data && k.data && v.data && out.data);

  Problem pb{};
  std::vector<double> xpos;  // outlives the call's work
  pb.q = q;
  pb.k = k;
  pb.v = v;
  pb.out = out;
  pb.T = dims.n_q;
  pb.S = dims.n_kv;
  pb.q_pos0 = dims.q_pos0;
  pb.G = dims.n_kv_heads;
  pb.D = dims.head_dim;
  pb.dp = (dims.head_dim + 15) / 16 * 16;
  pb.group = dims.n_heads / dims.n_kv_heads;
  pb.H = dims.n_heads;
  pb.lse = params.lse;
  pb.qscale = params.scale * kLog2e;
  pb.plan = params.plan;
  if (const AttentionPlan* plan = params.plan) {
    pb.row_scale = plan->HasRowScale();
    if (!plan->ssmax.empty()) {
      STRETCH_CHECK(static_cast<int>(plan->ssmax.size()) == dims.n_heads, "ssmax {} heads, H={}",
                    plan->ssmax.size(), dims.n_heads);
      pb.ssmax = &plan->ssmax;
    }
    pb.bias = plan->bias.kind == BiasKind::kNone ? nullptr : &plan->bias;
    STRETCH_CHECK(plan->softcap >= 0.0, "softcap {}", plan->softcap);
    pb.softcap = static_cast<float>(plan->softcap * kLog2eD);
    pb.query_norm = plan->query_norm;
    pb.key_norm = plan->key_norm;
    if (plan->xpos_scale_base > 0.0) {
      xpos = plan->XposLog2Decay();
      STRETCH_CHECK(2 * static_cast<int64_t>(xpos.size()) <= dims.head_dim &&
                        xpos.size() <= static_cast<size_t>(kMaxPairsOnStack),
                    "xpos pairs {} D={}", xpos.size(), dims.head_dim);
      pb.xpos = &xpos;
    }
    // QkInput (attention.h): what the caller did to q and k, checked against the plan.
    const auto* fixed = std::get_if<QkStaticRotation>(&params.qk);
    pb.rotate = fixed != nullptr || std::holds_alternative<QkDynamicRotation>(params.qk);
    pb.dynamic = plan->dynamic;
    STRETCH_CHECK(pb.rotate || plan->map.IsIdentity(), "a relative map needs raw q and k (rotate)");
    STRETCH_CHECK(!plan->dynamic || pb.rotate, "dynamic frequencies need raw q and k (rotate)");
    STRETCH_CHECK(!pb.rotate || plan->dynamic == (fixed == nullptr),
                  "QkStaticRotation is for static plans, QkDynamicRotation for dynamic ones");
    if (pb.rotate) {
      STRETCH_CHECK(dims.head_dim % 2 == 0 && dims.head_dim / 2 <= kMaxPairsOnStack, "D={}",
                    dims.head_dim);
      pb.pairs = dims.head_dim / 2;
      STRETCH_CHECK(static_cast<int>(plan->freq.thetas.size()) == pb.pairs, "pairs {} vs {}",
                    plan->freq.thetas.size(), pb.pairs);
    }
    if (fixed != nullptr) {
      STRETCH_CHECK(fixed->tables != nullptr && fixed->tables->pairs() == pb.pairs &&
                        fixed->tables->pos0() == dims.q_pos0 &&
                        fixed->tables->Query(0).n == dims.n_q && fixed->key_slots != nullptr,
                    "rotation tables or key slots not prepared");
      pb.tables = fixed->tables;
      pb.key_slots = fixed->key_slots;
    }
  } else {
    STRETCH_CHECK(std::holds_alternative<QkRotated>(params.qk),
                  "rotating q and k in the kernel needs a plan");
  }
  // Dynamic frequencies differ per query position: fewer positions per query tile, each with its
  // own tables (PrepareDynamicTile).
  pb.tq = std::max(1, (pb.dynamic ? kDynamicTileRows : QueryTileRows(dims.head_dim)) / pb.group);
  if (pb.dynamic) {
    static std::atomic<uint64_t> calls{0};
    pb.call_id = ++calls;
  }
  pb.n_qtiles = (pb.T + pb.tq - 1) / pb.tq;
  pb.rows_max = static_cast<int>(pb.tq) * pb.group;
  switch (dims.head_dim) {
    case 8: return RunHeadDim8(pb);
    case 16: return RunHeadDim16(pb);
    case 32: return RunHeadDim32(pb);
    case 64: return RunHeadDim64(pb);
    case 48: return RunHeadDim48(pb);
    case 128: return RunHeadDim128(pb);
    default: return RunHeadDimAny(pb);
  }
}

}  // namespace stretch
