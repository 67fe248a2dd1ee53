// The reference attention (double, full matrices, reference/attention_backward.h) behind the
// Attn interface of TrainTransformer and of the GAU layer (src/train/gau_layer.h), for the
// gradient checks of tests/train.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/attention_backward.h"
#include "reference/position.h"
#include "src/kernels/attention.h"
#include "src/position/plan.h"

namespace stretch::testing {

// The reference attention (double, full matrices) behind TrainTransformer's Attn interface.
struct RefAttention {
  static ref::TrainAttentionOptions<double> Options(const AttentionPlan& plan, double scale) {
    ref::TrainAttentionOptions<double> o;
    o.scale = scale;
    o.visible = [&plan](int64_t i, int64_t j) { return ref::MethodVisible(plan.method, i, j); };
    o.row_factor = [&plan](int64_t i) { return ref::MethodLogitFactor(plan, i); };
    o.bias = [&plan](int h, int64_t i, int64_t j) { return ref::BiasValue(plan.bias, h, i - j); };
    if (!plan.map.IsIdentity()) {  // raw q and k, rotated by the map's r_ij
      o.rope_thetas = plan.freq.thetas;
      o.rel_pos = [&plan](int64_t i, int64_t j) { return ref::MethodRelPos(plan.method, i, j); };
    }
    return o;
  }
  static ref::AttentionShape Shape(const AttentionDims& d) {
    return {d.n_q, d.n_kv, d.q_pos0, d.n_heads, d.n_kv_heads, d.head_dim};
  }
  static void Forward(const double* q, const double* k, const double* v, double* out, double* lse,
                      const AttentionDims& dims, double scale, const AttentionPlan& plan) {
    const int64_t nq = dims.n_q * dims.n_heads * dims.head_dim;
    const int64_t nk = dims.n_kv * dims.n_kv_heads * dims.head_dim;
    const ref::TrainAttention<double> f = ref::TrainAttentionForward(
        std::vector<double>(q, q + nq), std::vector<double>(k, k + nk),
        std::vector<double>(v, v + nk), Shape(dims), Options(plan, scale));
    std::copy(f.out.begin(), f.out.end(), out);
    std::copy(f.lse.begin(), f.lse.end(), lse);
  }
  static void Backward(const double* q, const double* k, const double* v, const double* /*out*/,
                       const double* dout, const double* /*lse*/, double* dq, double* dk,
                       double* dv, const AttentionDims& dims, double scale,
                       const AttentionPlan& plan, double* dbias_a, double* dbias_b) {
    const int64_t nq = dims.n_q * dims.n_heads * dims.head_dim;
    const int64_t nk = dims.n_kv * dims.n_kv_heads * dims.head_dim;
    const ref::TrainAttentionGrads<double> g = ref::TrainAttentionBackward(
        std::vector<double>(q, q + nq), std::vector<double>(k, k + nk),
        std::vector<double>(v, v + nk), std::vector<double>(dout, dout + nq), Shape(dims),
        Options(plan, scale));
    std::copy(g.dq.begin(), g.dq.end(), dq);
    std::copy(g.dk.begin(), g.dk.end(), dk);
    std::copy(g.dv.begin(), g.dv.end(), dv);
    if (dbias_a == nullptr) return;
    // KERPLE: d bias / d a and d b (log: -log(1 + b d), -a d / (1 + b d); power: -d^b,
    // -a d^b ln d), times d loss / d s.
    for (int h = 0; h < dims.n_heads; ++h) {
      const double a = plan.bias.a[h], b = plan.bias.b[h];
      for (int64_t i = 0; i < dims.n_q; ++i) {
        for (int64_t j = 0; j < dims.n_kv; ++j) {
          const double ds = g.ds[(h * dims.n_q + i) * dims.n_kv + j];
          const double d = static_cast<double>(dims.q_pos0 + i - j);
          if (ds == 0 || d < 0) continue;
          if (plan.bias.kind == BiasKind::kKerpleLog) {
            dbias_a[h] += ds * -std::log1p(b * d);
            dbias_b[h] += ds * (-a * d / (1 + b * d));
          } else if (d > 0) {
            dbias_a[h] += ds * -std::pow(d, b);
            dbias_b[h] += ds * (-a * std::pow(d, b) * std::log(d));
          }
        }
      }
    }
  }
};

}  // namespace stretch::testing
