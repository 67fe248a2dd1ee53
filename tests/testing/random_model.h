// A small LLaMA model with random weights, for tests that need a whole model without files.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "src/core/rng.h"
#include "src/model/config.h"

namespace stretch::testing {

inline Model RandomModel(const ModelConfig& config, uint64_t seed) {
  Rng rng(seed);
  auto fill = [&rng](std::vector<float>& v, size_t n, double scale, double mean = 0.0) {
    v.resize(n);
    for (float& x : v) x = static_cast<float>(mean + scale * rng.Normal());
  };
  const ModelConfig& c = config;
  const size_t C = static_cast<size_t>(c.dim), F = static_cast<size_t>(c.hidden_dim),
               KV = static_cast<size_t>(c.kv_dim()), V = static_cast<size_t>(c.vocab_size),
               D = static_cast<size_t>(c.head_dim()), HD = static_cast<size_t>(c.n_heads) * D;
  Model m;
  m.config = c;
  m.source = "random test model";
  fill(m.weights.token_embedding, V * C, 1.0);
  m.weights.layers.resize(static_cast<size_t>(c.n_layers));
  const double sc = 1.0 / std::sqrt(static_cast<double>(C)),
               sf = 1.0 / std::sqrt(static_cast<double>(F));
  for (LayerWeights& l : m.weights.layers) {
    fill(l.attn_norm, C, 0.1, 1.0);
    // Query/key weights scaled up so that attention is sharp enough to test something.
    fill(l.wq, HD * C, 3 * sc);
    fill(l.wk, KV * C, 3 * sc);
    fill(l.wv, KV * C, sc);
    fill(l.wo, C * HD, 1.0 / std::sqrt(static_cast<double>(HD)));
    fill(l.ffn_norm, C, 0.1, 1.0);
    fill(l.w1, F * C, sc);
    fill(l.w2, C * F, sf);
    fill(l.w3, F * C, sc);
    if (c.qkv_bias) {  // Qwen 2's biases, as large as a projection's outputs
      fill(l.bq, HD, 1.0);
      fill(l.bk, KV, 1.0);
      fill(l.bv, KV, 1.0);
    }
    if (c.qk_norm) {  // Qwen 3's per-head gains; unit-RMS heads need larger gains to be sharp
      fill(l.q_norm, D, 0.5, 2.0);
      fill(l.k_norm, D, 0.5, 2.0);
    }
    if (c.post_norms) {  // Gemma's norms of the attention's and feed-forward's outputs
      fill(l.attn_post_norm, C, 0.1, 1.0);
      fill(l.ffn_post_norm, C, 0.1, 1.0);
    }
  }
  fill(m.weights.final_norm, C, 0.1, 1.0);
  if (!c.shared_classifier) fill(m.weights.classifier, V * C, sc);
  return m;
}

// n token ids uniform in [0, vocab).
inline std::vector<int> RandomTokens(int n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& x : t) x = static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab));
  return t;
}

// n token ids uniform in [3, vocab): a text-like stream without llama2.c's special ids 0-2.
inline std::vector<int> RandomStream(int n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& x : t) x = 3 + static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab - 3));
  return t;
}

inline ModelConfig TinyConfig() {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 56;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 40;
  c.seq_len = 64;
  c.shared_classifier = false;
  return c;
}

}  // namespace stretch::testing
