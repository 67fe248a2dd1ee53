#include "src/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/kernels/attention.h"
#include "src/kernels/ops.h"
#include "src/position/rope.h"

namespace stretch {

KvCache::KvCache(const ModelConfig& config, int64_t capacity) : capacity_(capacity) {
  STRETCH_CHECK(capacity > 0, "capacity={}", capacity);
  const size_t per_layer = static_cast<size_t>(capacity) * config.kv_dim();
  k_.resize(static_cast<size_t>(config.n_layers));
  v_.resize(static_cast<size_t>(config.n_layers));
  for (int l = 0; l < config.n_layers; ++l) {
    k_[static_cast<size_t>(l)].resize(per_layer);
    v_[static_cast<size_t>(l)].resize(per_layer);
  }
}

void KvCache::Truncate(int64_t length) {
  STRETCH_CHECK(length >= 0 && length <= length_, "truncate to {} of {}", length, length_);
  length_ = length;
}

int64_t KvCache::BytesFor(const ModelConfig& config, int64_t capacity) {
  return 2 * static_cast<int64_t>(config.n_layers) * capacity * config.kv_dim() *
         static_cast<int64_t>(sizeof(float));
}

int64_t KvCache::Bytes() const {
  int64_t bytes = 0;
  for (size_t l = 0; l < k_.size(); ++l) {
    bytes += static_cast<int64_t>((k_[l].size() + v_[l].size()) * sizeof(float));
  }
  return bytes;
}

Transformer::Transformer(const Model& model)
    : model_(model), thetas_(RopeThetas(model.config.rope_base, model.config.head_dim())) {}

int64_t Transformer::ActivationBytes(const ModelConfig& c, int64_t T) {
  // x, xb, q, att (T, C) each; h1, h3 (T, F); k, v staging (T, 2 * G * D).
  return T * (4 * int64_t{c.dim} + 2 * int64_t{c.hidden_dim} + 2 * int64_t{c.kv_dim()}) *
         static_cast<int64_t>(sizeof(float));
}

void Transformer::Forward(std::span<const int> tokens, KvCache& cache,
                          std::vector<float>& hidden) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int C = model_.config.dim;
  if (cache.length() + T > cache.capacity()) {
    Fail("KV cache: {} cached + {} new tokens exceed its capacity of {} positions",
         cache.length(), T, cache.capacity());
  }
  // All ids are checked before any chunk runs, so an error leaves the cache as it was.
  for (int64_t t = 0; t < T; ++t) {
    const int tok = tokens[static_cast<size_t>(t)];
    if (tok < 0 || tok >= model_.config.vocab_size) {
      Fail("token id {} at position {} is outside the vocabulary (0..{})", tok,
           cache.length() + t, model_.config.vocab_size - 1);
    }
  }
  hidden.resize(static_cast<size_t>(T) * C);
  const int64_t chunk = std::max<int64_t>(1, prefill_chunk_);
  for (int64_t start = 0; start < T; start += chunk) {
    const int64_t n = std::min(chunk, T - start);
    ForwardChunk(tokens.data() + start, n, cache, hidden.data() + start * C);
  }
}

void Transformer::ForwardChunk(const int* tokens, int64_t T, KvCache& cache, float* hidden) {
  const ModelConfig& c = model_.config;
  const ModelWeights& w = model_.weights;
  const int C = c.dim, F = c.hidden_dim, H = c.n_heads, G = c.n_kv_heads, D = c.head_dim();
  const int KV = c.kv_dim();
  const int64_t pos0 = cache.length_;
  const size_t TC = static_cast<size_t>(T) * C;
  if (x_.size() < TC) {
    x_.resize(TC);
    xb_.resize(TC);
    q_.resize(TC);
    att_.resize(TC);
  }
  if (h1_.size() < static_cast<size_t>(T) * F) {
    h1_.resize(static_cast<size_t>(T) * F);
    h3_.resize(static_cast<size_t>(T) * F);
  }
  if (kv_tmp_.size() < 2 * static_cast<size_t>(T) * KV) kv_tmp_.resize(2 * static_cast<size_t>(T) * KV);

  // Embedding lookup.
  for (int64_t t = 0; t < T; ++t) {
    const int tok = tokens[t];  // checked in Forward
    std::memcpy(x_.data() + t * C, w.token_embedding.data() + static_cast<size_t>(tok) * C,
                sizeof(float) * C);
  }

  const RopeTable rope = MakeRopeTable(thetas_, pos0, T);
  float* k_new = kv_tmp_.data();                                // (T, G*D)
  float* v_new = kv_tmp_.data() + static_cast<size_t>(T) * KV;  // (T, G*D)
  const int64_t cap = cache.capacity_;

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    RmsNorm(x_.data(), lw.attn_norm.data(), xb_.data(), T, C, c.norm_eps);
    MatMulRows(xb_.data(), lw.wq.data(), q_.data(), T, C, C);
    MatMulRows(xb_.data(), lw.wk.data(), k_new, T, C, KV);
    MatMulRows(xb_.data(), lw.wv.data(), v_new, T, C, KV);
    RopeInterleaved(q_.data(), T, H, C, D, rope);
    RopeInterleaved(k_new, T, G, KV, D, rope);

    // Scatter the new rows into the cache's (G, capacity, D) layout.
    float* kc = cache.Keys(l);
    float* vc = cache.Values(l);
    for (int g = 0; g < G; ++g) {
      for (int64_t t = 0; t < T; ++t) {
        const size_t dst = (static_cast<size_t>(g) * cap + pos0 + t) * D;
        const size_t src = static_cast<size_t>(t) * KV + static_cast<size_t>(g) * D;
        std::memcpy(kc + dst, k_new + src, sizeof(float) * D);
        std::memcpy(vc + dst, v_new + src, sizeof(float) * D);
      }
    }

    AttentionDims dims;
    dims.n_q = T;
    dims.n_kv = pos0 + T;
    dims.q_pos0 = pos0;
    dims.n_heads = H;
    dims.n_kv_heads = G;
    dims.head_dim = D;
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(D));
    AttentionForward(HeadRows{q_.data(), C, D}, HeadRows{kc, D, cap * D},
                     HeadRows{vc, D, cap * D}, HeadRowsMut{att_.data(), C, D}, dims, params);

    MatMulRows(att_.data(), lw.wo.data(), xb_.data(), T, C, C);
    AddInPlace(x_.data(), xb_.data(), static_cast<int64_t>(TC));

    RmsNorm(x_.data(), lw.ffn_norm.data(), xb_.data(), T, C, c.norm_eps);
    MatMulRows(xb_.data(), lw.w1.data(), h1_.data(), T, C, F);
    MatMulRows(xb_.data(), lw.w3.data(), h3_.data(), T, C, F);
    SwiGlu(h1_.data(), h3_.data(), T * F);
    MatMulRows(h1_.data(), lw.w2.data(), xb_.data(), T, F, C);
    AddInPlace(x_.data(), xb_.data(), static_cast<int64_t>(TC));
  }
  RmsNorm(x_.data(), w.final_norm.data(), hidden, T, C, c.norm_eps);
  cache.length_ = pos0 + T;
}

void Transformer::Logits(const float* hidden, int64_t T, float* logits) const {
  const ModelConfig& c = model_.config;
  MatMulRows(hidden, model_.weights.ClassifierData(), logits, T, c.dim, c.vocab_size);
}

}  // namespace stretch
