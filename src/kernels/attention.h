// Tiled attention with an online softmax (flash-style): never holds an (T, S) matrix.
//
//   out[i, h, :] = sum_j softmax_j( scale * q[i, h, :] . k[j, g(h), :] ) v[j, g(h), :]
//   over keys j <= q_pos0 + i  (causal),  g(h) = h / (H / G)  (grouped-query attention).
//
// Letters: T query rows in this call, S keys available, H query heads, G kv heads, D head dim.
// Key j sits at absolute position j; query row i at absolute position q_pos0 + i. Positions are
// signed 64-bit so that relative-position maps can go negative without wrapping.
#pragma once

#include <cstdint>
#include <variant>

#include "src/core/aligned.h"
#include "src/position/plan.h"

namespace stretch {

// A (rows, heads, D) float array with arbitrary strides (in floats):
// element (row, head, d) is at data[row * row_stride + head * head_stride + d].
struct HeadRows {
  const float* data = nullptr;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};
struct HeadRowsMut {
  float* data = nullptr;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

struct AttentionDims {
  int64_t n_q = 0;     // T: query rows in this call
  int64_t n_kv = 0;    // S: keys 0..S-1 available; causal needs q_pos0 + T <= S
  int64_t q_pos0 = 0;  // absolute position of query row 0
  int n_heads = 0;     // H
  int n_kv_heads = 0;  // G, divides H
  int head_dim = 0;    // D
};

// With a position plan (src/position/plan.h) the kernel also applies the plan's mask (window,
// Lambda), its per-query logit scale (YaRN's attention factor, log-n) and its relative map:
//   score(i, j) = scale * LogitScale(i) * < R(QueryPos(seg, i)) q_i , R(KeyPos(seg, j)) k_j >
// with seg = map.SegmentOf(i, j) and R(a) the RoPE rotation by a * theta_t per interleaved pair.
//
// How q and k reach the kernel, one type per way (AttentionParams::qk):
//   QkRotated: q and k already rotated by the caller (or never rotated: NoPE, ALiBi, ...). With a
//       plan, its map must be the identity and its frequencies static (a relative map, or
//       frequencies that depend on the query, need the raw q and k).
//   QkStaticRotation: a static plan; q raw, rotated here per segment with `tables` (prepared for
//       this call's T queries at q_pos0); keys already rotated once per key slot of the map:
//       key_slots[map.KeySlot(seg)] (`k` is not read).
//   QkDynamicRotation: a dynamic plan (dynamic-ntk, dynamic-yarn); q and k raw, query i and its
//       keys rotated here with query i's own frequencies.
// A KernelRotation (below) builds the last two from the raw keys of a call.
struct QkRotated {};
struct QkStaticRotation {
  const RotationTables* tables = nullptr;
  const HeadRows* key_slots = nullptr;  // map.KeySlots() entries
};
struct QkDynamicRotation {};
using QkInput = std::variant<QkRotated, QkStaticRotation, QkDynamicRotation>;

struct AttentionParams {
  float scale = 0.0f;  // multiplies q.k before the softmax; usually 1/sqrt(D)
  const AttentionPlan* plan = nullptr;
  QkInput qk = QkRotated{};
  // Optional output (T, H), row-major: the log-sum-exp of each row's final scores (natural log;
  // -inf for a row that sees no key). Training keeps it so the backward can recompute the
  // softmax tile by tile: P_ij = exp(score_ij - lse_i).
  float* lse = nullptr;
};

// Rotates keys in place for key slot `slot` of a static plan's relative map: n rows, row r at the
// position of `tables` row r, G heads D floats apart within a row, rows row_stride floats apart,
// head dim D. A slot the map
// leaves unrotated (far keys that all sit at position 0) is left as it is. A KV cache fills its
// per-slot key rows with it; KernelRotation does it for a whole call.
void RotateKeySlot(const AttentionPlan& plan, const RotationTables& tables, int slot, float* k,
                   int64_t n, int G, int64_t row_stride, int D);

// What the kernel reads besides q, k and v when it rotates (QkStaticRotation, QkDynamicRotation),
// built from the raw keys of the call:
//   static plan:  the query rotation tables for the call's T queries at q_pos0, and the S keys
//                 rotated once per key slot of the plan's relative map (a copy each, laid out
//                 (G, S, D) when each kv head's rows of `k` are contiguous, else (S, G, D); a
//                 slot the map leaves unrotated reads `k` itself);
//   dynamic plan: nothing (the kernel rotates query i and its keys with query i's frequencies).
// Into(params) sets params.qk to them: the object must outlive the AttentionForward /
// AttentionBackward calls that use it.
class KernelRotation {
 public:
  KernelRotation(const AttentionPlan& plan, HeadRows k, const AttentionDims& dims);
  KernelRotation(const KernelRotation&) = delete;
  KernelRotation& operator=(const KernelRotation&) = delete;
  void Into(AttentionParams& params) const;

 private:
  bool dynamic_ = false;
  RotationTables query_tables_;     // the call's queries
  RotationTables key_tables_;       // keys 0..S-1 (unused when the queries are exactly those)
  AlignedVector<float> slot_keys_;  // S x G x D per rotated slot
  HeadRows slots_[kMaxKeySlots];
};

// Parallelizes internally on the thread pool, src/core/threads.h (over kv heads x query tiles;
// for a single query row, over heads and key blocks); call it from single-threaded code.
void AttentionForward(HeadRows q, HeadRows k, HeadRows v, HeadRowsMut out,
                      const AttentionDims& dims, const AttentionParams& params);

// Gradients of AttentionForward (src/kernels/attention_backward.cc, which writes out the math).
struct AttentionGrads {
  HeadRowsMut dq;  // (T, H, D), overwritten
  HeadRowsMut dk;  // (S, G, D), overwritten
  HeadRowsMut dv;  // (S, G, D), overwritten
  // KERPLE's learned per-head parameters (plan->bias.a, .b): gradients added here (H entries
  // each) when non-null and the plan's bias is KERPLE log or power.
  double* dbias_a = nullptr;
  double* dbias_b = nullptr;
};
// For training. The plan (optional) may carry a mask (causal, window, blockwise, Lambda), a
// per-query logit scale and an additive bias; QueryNorm, KeyNorm and XPOS are ops on q and k
// outside the kernel here. `out` and `lse` are the forward's (params.lse set in the forward
// call); dout (T, H, D) is d loss / d out. The same arguments as the forward, two ways:
//   QkRotated: q and k already rotated; the identity map only. dq and dk are with respect to
//       those rotated q and k (the caller then applies RoPE's backward).
//   QkStaticRotation, with any relative map (src/position/maps/, lambda's sinks) or the
//       identity: q raw, the tables and key slots exactly as in the forward call; `k` is not
//       read. dq and dk are with respect to the RAW q and k: the rotations are differentiated
//       here, the caller applies no RoPE backward.
//   QkDynamicRotation is refused with a STRETCH_CHECK (a key's rotation depends on the query).
// Training with a map: a KernelRotation of the raw keys, as for the forward; dq and dk go
// straight to the q and k projections' backward.
// Deterministic: the same inputs give the same bits whatever the thread count.
void AttentionBackward(HeadRows q, HeadRows k, HeadRows v, HeadRows out, HeadRows dout,
                       const float* lse, const AttentionDims& dims, const AttentionParams& params,
                       const AttentionGrads& grads);

}  // namespace stretch
