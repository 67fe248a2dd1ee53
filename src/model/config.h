// The LLaMA-family model: plain configuration and weights, as data. Loaders in src/io fill them;
// src/model runs them. Letters used for shapes throughout src/model:
//   T tokens in a call, S cached positions, C model width (dim), F FFN width (hidden_dim),
//   H query heads, G kv heads (n_kv_heads), D head dim (C / H), V vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stretch {

// How one layer attends, for models trained by `stretch train` (src/train/inference_model.h
// fills it from a checkpoint; the trainer's TrainArch describes the same layers). LLaMA-family
// checkpoints (llama2.c, ...) leave AttentionLayout::layers empty: every layer RoPE at the model's
// base with full causal attention.
enum class LayerPosition {
  kRope,         // q and k rotated by RoPE (base = ModelConfig::rope_base)
  kNone,         // no position information at all (NoPE): causal attention alone
  kAlibi,        // additive -m_h (i - j), ALiBi's fixed slopes m_h = AlibiSlopes(H)
  kKerpleLog,    // additive -a_h log(1 + b_h (i - j)), a_h, b_h: LayerWeights::bias_a, bias_b
  kKerplePower,  // additive -a_h (i - j)^b_h
};

struct LayerAttention {
  LayerPosition position = LayerPosition::kRope;
  int64_t window = 0;  // trained sliding window: query i sees keys i - window + 1 .. i; 0: all
};

// The attention of a trained model: per-layer position and window, and what multiplies q . k.
// The default (no layers, no norms, scale 0) is the LLaMA model, unchanged bit for bit.
struct AttentionLayout {
  std::vector<LayerAttention> layers;  // n_layers entries, or empty: every layer {kRope, 0}
  bool query_norm = false;   // QueryNorm: q / |q| per head before the product
  bool key_norm = false;     // KeyNorm: k / |k| per head; with query_norm, cosine attention
  double logit_scale = 0.0;  // what multiplies q . k; 0: 1/sqrt(D)

  bool IsDefault() const {
    return layers.empty() && !query_norm && !key_norm && logit_scale == 0.0;
  }
  // Layer l's attention (the default when `layers` is empty).
  LayerAttention Layer(int l) const {
    return layers.empty() ? LayerAttention{} : layers[static_cast<size_t>(l)];
  }
};

struct ModelConfig {
  int dim = 0;             // C: width of the residual stream
  int hidden_dim = 0;      // F: inner width of the SwiGLU feed-forward
  int n_layers = 0;        // number of Transformer blocks
  int n_heads = 0;         // H: query heads
  int n_kv_heads = 0;      // G: key/value heads; divides H (grouped-query attention)
  int vocab_size = 0;      // V
  int seq_len = 0;         // L: the context length the model was trained at
  bool shared_classifier = true;  // the output classifier is the token embedding
  float rope_base = 10000.0f;     // RoPE base (theta_t = base^(-2t/D))
  float norm_eps = 1e-5f;         // RMSNorm epsilon
  AttentionLayout attention;      // trained models' layout; default: LLaMA (RoPE, full, 1/sqrt(D))

  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return head_dim() * n_kv_heads; }
  // Number of parameters (the classifier counted once when shared; KERPLE's 2H per layer).
  int64_t ParameterCount() const {
    const int64_t C = dim, F = hidden_dim, V = vocab_size, KV = kv_dim();
    const int64_t per_layer = C /*attn_norm*/ + C * C /*wq*/ + 2 * KV * C /*wk, wv*/ +
                              C * C /*wo*/ + C /*ffn_norm*/ + 3 * F * C /*w1, w2, w3*/;
    int64_t kerple = 0;
    for (const LayerAttention& l : attention.layers) {
      if (l.position == LayerPosition::kKerpleLog || l.position == LayerPosition::kKerplePower) {
        kerple += 2 * int64_t{n_heads};
      }
    }
    return V * C + n_layers * per_layer + C + (shared_classifier ? 0 : V * C) + kerple;
  }
};

// All matrices are row-major (out, in): y = W x, as in llama2.c. Every vector is sized exactly.
struct LayerWeights {
  std::vector<float> attn_norm;  // (C)
  std::vector<float> wq;         // (H*D, C)
  std::vector<float> wk;         // (G*D, C)
  std::vector<float> wv;         // (G*D, C)
  std::vector<float> wo;         // (C, H*D)
  std::vector<float> ffn_norm;   // (C)
  std::vector<float> w1;         // (F, C) gate
  std::vector<float> w2;         // (C, F) down
  std::vector<float> w3;         // (F, C) up
  // KERPLE's learned per-head parameters a_h, b_h (LayerPosition kKerpleLog / kKerplePower):
  // (H) each; empty for every other layer.
  std::vector<float> bias_a, bias_b;
};

struct ModelWeights {
  std::vector<float> token_embedding;  // (V, C)
  std::vector<LayerWeights> layers;    // n_layers
  std::vector<float> final_norm;       // (C)
  std::vector<float> classifier;       // (V, C); empty when the config says shared_classifier

  const float* ClassifierData() const {
    return classifier.empty() ? token_embedding.data() : classifier.data();
  }
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string source;  // where it came from: file path and format, for reports
};

}  // namespace stretch
