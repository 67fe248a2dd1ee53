// The rotated inputs of the attention kernel (attention.h: RotateKeySlot, KernelRotation).
#include <algorithm>

#include "src/core/check.h"
#include "src/kernels/attention.h"
#include "src/kernels/ops.h"

namespace stretch {

void RotateKeySlot(const AttentionPlan& plan, const RotationTables& tables, int slot, float* k,
                   int64_t n, int G, int64_t row_stride, int D) {
  STRETCH_CHECK(slot >= 0 && slot < plan.map.KeySlots(), "key slot {} of {}", slot,
                plan.map.KeySlots());
  if (plan.map.SlotIsUnrotated(slot)) return;
  RopeInterleaved(k, n, G, row_stride, D, tables.Key(slot));
}

KernelRotation::KernelRotation(const AttentionPlan& plan, HeadRows k, const AttentionDims& dims)
    : dynamic_(plan.dynamic) {
  if (dynamic_) return;
  const int G = dims.n_kv_heads, D = dims.head_dim;
  const int64_t S = dims.n_kv;
  const int slots = plan.map.KeySlots();
  STRETCH_CHECK(slots >= 1 && slots <= kMaxKeySlots, "{} key slots", slots);
  query_tables_.Prepare(plan, dims.q_pos0, dims.n_q);
  const bool same_rows = dims.q_pos0 == 0 && dims.n_q == S;
  if (!same_rows) key_tables_.Prepare(plan, 0, S);
  const RotationTables& key_tables = same_rows ? query_tables_ : key_tables_;

  const size_t slot_floats = static_cast<size_t>(S) * G * D;
  int rotated = 0;
  for (int slot = 0; slot < slots; ++slot) rotated += plan.map.SlotIsUnrotated(slot) ? 0 : 1;
  slot_keys_.resize(slot_floats * static_cast<size_t>(rotated));
  float* next = slot_keys_.data();
  for (int slot = 0; slot < slots; ++slot) {
    if (plan.map.SlotIsUnrotated(slot)) {
      slots_[slot] = k;
      continue;
    }
    // A dense copy of the keys rotated for this slot: (G, S, D) when each kv head's rows come
    // contiguous (laid out as a model's KV cache holds keys, e.g. `stretch bench`'s attention
    // cases), else (S, G, D), so that the kernel reads the copy as it would read the keys.
    const bool head_major = k.row_stride == D && G > 1;
    const int64_t rs = head_major ? D : int64_t{G} * D, hs = head_major ? S * D : D;
    if (head_major) {  // head by head: one contiguous run of S rows each
      for (int g = 0; g < G; ++g) {
        const float* src = k.data + g * k.head_stride;
        std::copy(src, src + S * D, next + g * hs);
        RotateKeySlot(plan, key_tables, slot, next + g * hs, S, 1, rs, D);
      }
    } else {
      for (int64_t j = 0; j < S; ++j) {
        for (int g = 0; g < G; ++g) {
          const float* src = k.data + j * k.row_stride + g * k.head_stride;
          std::copy(src, src + D, next + j * rs + g * hs);
        }
      }
      RotateKeySlot(plan, key_tables, slot, next, S, G, rs, D);
    }
    slots_[slot] = HeadRows{next, rs, hs};
    next += slot_floats;
  }
}

void KernelRotation::Into(AttentionParams& params) const {
  if (dynamic_) {
    params.qk = QkDynamicRotation{};
  } else {
    params.qk = QkStaticRotation{&query_tables_, slots_};
  }
}

}  // namespace stretch
