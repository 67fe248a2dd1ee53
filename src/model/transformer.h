// The LLaMA decoder (Touvron et al. 2023; llama2.c's run.c is the reference forward):
//   x = embed(tokens)
//   per layer:  h = rmsnorm(x) ; q, k, v = h Wq^T, h Wk^T, h Wv^T ; rope(q), rope(k) at their
//               positions ; x += attention(q, k, v) Wo^T
//               h = rmsnorm(x) ; x += (silu(h W1^T) * (h W3^T)) W2^T
//   logits = rmsnorm(x) Wcls^T
// Prefill runs a whole chunk of tokens with matrix products (OpenBLAS) and the tiled attention
// kernel; decode is the same path with one token. Keys and values go into a KvCache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/core/aligned.h"
#include "src/model/config.h"

namespace stretch {

// Keys (after RoPE) and values of every layer for positions 0 .. length-1. Layout per layer:
// (G, capacity, D), so that each kv head's keys are contiguous for the attention kernel.
class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  void Clear() { length_ = 0; }
  // Forgets every position from `length` on (keeps 0 .. length-1).
  void Truncate(int64_t length);
  // Bytes held by the cache.
  int64_t Bytes() const;
  static int64_t BytesFor(const ModelConfig& config, int64_t capacity);

  float* Keys(int layer) { return k_[static_cast<size_t>(layer)].data(); }
  float* Values(int layer) { return v_[static_cast<size_t>(layer)].data(); }

 private:
  friend class Transformer;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<AlignedVector<float>> k_, v_;
};

class Transformer {
 public:
  // Keeps a reference to `model`, which must outlive the Transformer.
  explicit Transformer(const Model& model);

  const ModelConfig& config() const { return model_.config; }

  // Runs `tokens` at positions cache.length() .. cache.length() + T - 1, appends their keys and
  // values to the cache, and writes the final-normed hidden states (T, C) to `hidden`
  // (resized). Long inputs are processed in chunks of `prefill_chunk` tokens so that activation
  // memory stays O(chunk * (C + F)); the result does not depend on the chunk size.
  void Forward(std::span<const int> tokens, KvCache& cache, std::vector<float>& hidden);

  // logits (T, V) = hidden (T, C) Wcls^T.
  void Logits(const float* hidden, int64_t T, float* logits) const;

  static constexpr int64_t kDefaultPrefillChunk = 2048;
  // Tokens per prefill chunk (default kDefaultPrefillChunk).
  void set_prefill_chunk(int64_t chunk) { prefill_chunk_ = chunk; }
  // Activation bytes a chunk of T tokens needs (for `stretch inspect`).
  static int64_t ActivationBytes(const ModelConfig& config, int64_t T);

 private:
  void ForwardChunk(const int* tokens, int64_t T, KvCache& cache, float* hidden);

  const Model& model_;
  std::vector<double> thetas_;
  int64_t prefill_chunk_ = kDefaultPrefillChunk;
  // Scratch, reused across calls (sized for the largest chunk seen).
  AlignedVector<float> x_, xb_, q_, att_, h1_, h3_, kv_tmp_;
};

}  // namespace stretch
