#include "src/train/transformer_train.h"

#include <cmath>
#include <memory>

#include "src/core/error.h"
#include "src/position/rope.h"

namespace stretch {

namespace {
HeadRows Rows(const float* x, int heads, int D) { return {x, int64_t{heads} * D, D}; }
HeadRowsMut RowsMut(float* x, int heads, int D) { return {x, int64_t{heads} * D, D}; }
}  // namespace

void KernelAttention::Forward(const float* q, const float* k, const float* v, float* out,
                              float* lse, const AttentionDims& dims, float scale,
                              const AttentionPlan& plan) {
  AttentionParams params;
  params.scale = scale;
  params.plan = &plan;
  params.lse = lse;
  const int H = dims.n_heads, G = dims.n_kv_heads, D = dims.head_dim;
  // A plan with a relative map takes raw q and k: the kernel rotates q per segment and reads
  // the keys rotated once per key slot.
  std::unique_ptr<KernelRotation> map;
  if (!plan.map.IsIdentity()) {
    STRETCH_CHECK(dims.q_pos0 == 0 && dims.n_q == dims.n_kv, "training: whole sequences");
    map = std::make_unique<KernelRotation>(plan, Rows(k, G, D), dims);
    map->Into(params);
  }
  AttentionForward(Rows(q, H, D), Rows(k, G, D), Rows(v, G, D), RowsMut(out, H, D), dims, params);
}

void KernelAttention::Backward(const float* q, const float* k, const float* v, const float* out,
                               const float* dout, const float* lse, float* dq, float* dk, float* dv,
                               const AttentionDims& dims, float scale, const AttentionPlan& plan,
                               double* dbias_a, double* dbias_b) {
  AttentionParams params;
  params.scale = scale;
  params.plan = &plan;
  const int H = dims.n_heads, G = dims.n_kv_heads, D = dims.head_dim;
  std::unique_ptr<KernelRotation> map;
  if (!plan.map.IsIdentity()) {  // dq, dk come back for the raw q and k
    map = std::make_unique<KernelRotation>(plan, Rows(k, G, D), dims);
    map->Into(params);
  }
  AttentionGrads grads{RowsMut(dq, H, D), RowsMut(dk, G, D), RowsMut(dv, G, D), dbias_a, dbias_b};
  AttentionBackward(Rows(q, H, D), Rows(k, G, D), Rows(v, G, D), Rows(out, H, D), Rows(dout, H, D),
                    lse, dims, params, grads);
}

}  // namespace stretch
