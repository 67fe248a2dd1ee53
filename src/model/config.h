// The LLaMA-family model: plain configuration and weights, as data. Loaders in src/io fill them;
// src/model runs them. Letters used for shapes throughout src/model:
//   T tokens in a call, S cached positions, C model width (dim), F FFN width (hidden_dim),
//   H query heads, G kv heads (n_kv_heads), D head dim (C / H), V vocabulary.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/error.h"
#include "src/kernels/packed.h"

namespace stretch {

// Where one layer's attention gets its positions from. LLaMA-family checkpoints (llama2.c, ...)
// are kRope everywhere; models trained by `stretch train` may use any of these.
enum class LayerPosition {
  kRope,         // q and k rotated by RoPE (base = ModelConfig::rope_base)
  kNone,         // no position information at all (NoPE): causal attention alone
  kAlibi,        // additive -m_h (i - j), ALiBi's fixed slopes m_h = AlibiSlopes(H)
  kKerpleLog,    // additive -a_h log(1 + b_h (i - j)), a_h, b_h: LayerWeights::bias_a, bias_b
  kKerplePower,  // additive -a_h (i - j)^b_h
  kSandwich,     // additive lambda p_i . p_j of sinusoidal embeddings (AttentionLayout::sandwich_*)
};

inline std::string_view LayerPositionName(LayerPosition position) {  // "rope", "nope", ...
  switch (position) {
    case LayerPosition::kRope: return "rope";
    case LayerPosition::kNone: return "nope";
    case LayerPosition::kAlibi: return "alibi";
    case LayerPosition::kKerpleLog: return "kerple-log";
    case LayerPosition::kKerplePower: return "kerple-power";
    case LayerPosition::kSandwich: return "sandwich";
  }
  return "?";
}

// One layer as stored: whether it uses the model's position scheme (false: NoPE for this layer,
// as HWFA's last layer), which keys it sees, its own RoPE, and the temperature tuning. Layouts of
// current models are lists of these (src/train/arch_spec.h: gemma3=W/K, llama4=C/K, layers=...):
//   Gemma 3 (HF modeling_gemma3: sliding_window_pattern, rope_local_base_freq): five local layers
//     with a window and base 10,000 for every global one at the model's base and linear scaling;
//   Llama 4 iRoPE (HF modeling_llama4: no_rope_layers, attention_chunk_size): chunked RoPE layers
//     and every fourth layer full attention without RoPE, with the temperature tuning.
struct LayerLayout {
  bool position = true;
  int64_t window = 0;  // trained window: query i sees keys i - window + 1 .. i; 0: all
  int64_t chunk = 0;  // chunked attention: query i sees keys floor(i / chunk) * chunk .. i; 0: none
                      // (at most one of window and chunk)
  double rope_base = 0.0;    // this layer's RoPE base; 0: the model's (ModelConfig::rope_base)
  double rope_pi = 0.0;      // this layer's trained position interpolation (positions divided by
                             // it, HF's "linear" rope_scaling); 0: the model's rope_interpolation
  bool temperature = false;  // the temperature tuning of AttentionLayout::temperature_floor
  bool operator==(const LayerLayout&) const = default;
  // Sees only nearby keys (a window or a chunk): it keeps that at inference (LayerMethodUse).
  bool Local() const { return window > 0 || chunk > 0; }
  // Rotates with the model's RoPE as it is (no base or interpolation of its own).
  bool ModelRope() const { return rope_base == 0.0 && rope_pi == 0.0; }
};

// One layer as it runs: its position (the model's scheme, or kNone), the keys it sees and whether
// the temperature tuning applies (its RoPE: ModelConfig::LayerRopeBase, LayerRopePi).
struct LayerAttention {
  LayerPosition position = LayerPosition::kRope;
  int64_t window = 0;
  int64_t chunk = 0;
  bool temperature = false;
  bool Local() const { return window > 0 || chunk > 0; }
};

// How the model attends: one description for training (src/train) and inference (src/model).
// The default (RoPE, no layers, no norms, scale 0) is the LLaMA model, unchanged bit for bit.
struct AttentionLayout {
  LayerPosition position = LayerPosition::kRope;  // the model's scheme (every layer that has one)
  std::vector<LayerLayout> layers;  // n_layers entries, or empty: every layer {true, 0}
  bool query_norm = false;          // QueryNorm: q / |q| per head before the product
  bool key_norm = false;            // KeyNorm: k / |k| per head; with query_norm, cosine attention
  double logit_scale = 0.0;         // what multiplies q . k; 0: 1/sqrt(D) (ModelConfig::LogitScale)
  // p-RoPE (Barbero et al. 2024, arXiv 2410.06205): the share of RoPE's frequency pairs that
  // rotate (the first, fastest ones; the rest keep theta 0), for every RoPE layer. 1: all.
  double rope_fraction = 1.0;
  // XPOS: the scale base gamma of the per-pair decay zeta_t^((i - j) / gamma) on every RoPE
  // layer (plan.h). 0: off.
  double xpos_scale_base = 0.0;
  // Sandwich layers: the sinusoids' dimension and lambda (the same for every head).
  int sandwich_dim = 0;
  double sandwich_lambda = 0.0;
  // Cosine attention's per-position lambda: query i's logits also times ln(n_i / 2), n_i the keys
  // it sees (AttentionPlan::VisibleKeys: i + 1, at most the window on a local layer or a mask).
  bool position_log_scale = false;
  // SSMax (arXiv 2501.19399): query i's logits in head h times s_h ln(n_i), s_h =
  // LayerWeights::ssmax[h], learned per layer and head; n_i the keys query i sees
  // (AttentionPlan::VisibleKeys: i + 1, at most the window on a local layer or under a mask).
  bool ssmax = false;
  // Trained log-n (Su 2021, "entropy invariance", kexue.fm/archives/8823; the seeds' "-log n"
  // models): query i's logits times ln(n_i) / ln L, L = seq_len, n_i the keys query i sees (i + 1;
  // at most the window on a local layer or under a masked method), at every position, in training
  // and at inference alike (below 1 inside the trained length, above 1 beyond it). Not the
  // inference-time +logn of a method, max(1, ln(i + 1) / ln L), which is 1 at every trained
  // position and so cannot be learned.
  bool log_length_scale = false;
  // Llama 4's attention temperature tuning on the layers that ask for it (LayerLayout::
  // temperature; Llama 4: its NoPE layers): query i's logits times
  // ln(floor((i + 1) / temperature_floor) + 1) * temperature_scale + 1 (Llama 4: floor_scale
  // 8192, attn_scale 0.1), in training and at inference. 1 below the floor: a model trained
  // shorter than the floor never sees it change.
  double temperature_floor = 0.0;
  double temperature_scale = 0.0;
  // How it was trained, beyond the above: it does not change the model at the positions it was
  // trained on in a way inference must repeat (it scores with whatever --method is given).
  // A relative position map at training time (kRope, full-attention layers): a method spec of
  // src/position/method.h with a map of src/position/maps/ (its spec name and keys, e.g.
  // "name:window=64"); "" for plain RoPE. Windowed layers keep plain RoPE inside their window.
  std::string rope_map;

  bool IsDefault() const {
    return position == LayerPosition::kRope && layers.empty() && !query_norm && !key_norm &&
           logit_scale == 0.0 && rope_fraction == 1.0 && xpos_scale_base == 0.0 &&
           sandwich_dim == 0 && !position_log_scale && !ssmax && !log_length_scale &&
           temperature_floor == 0.0 && temperature_scale == 0.0;
  }
  // The LLaMA attention, as IsDefault, also when `layers` lists every layer as {position, no
  // window} (a run trained with the plain layout stores it so): what GGUF and Hugging Face files
  // can express.
  bool IsPlain() const {
    for (const LayerLayout& l : layers) {
      if (!(l == LayerLayout{})) return false;
    }
    AttentionLayout without_layers = *this;
    without_layers.layers.clear();
    return without_layers.IsDefault();
  }
  // W when every layer is the LLaMA layer with the same sliding window of W keys (query i sees
  // keys i - W + 1 .. i) and nothing else differs from the default: Mistral's layout (config.json
  // `sliding_window`), which LLaMA-family files can hold. 0 otherwise.
  int64_t UniformWindow() const {
    if (layers.empty()) return 0;
    const int64_t W = layers.front().window;
    for (const LayerLayout& l : layers) {
      if (!(l == LayerLayout{.window = W})) return 0;
    }
    AttentionLayout without_layers = *this;
    without_layers.layers.clear();
    return without_layers.IsDefault() ? W : 0;
  }
  // p-RoPE: how many of the head_dim / 2 pairs rotate, round(rope_fraction * pairs).
  int RotatedPairs(int head_dim) const {
    return static_cast<int>(std::lround(rope_fraction * (head_dim / 2)));
  }
  // Layer l's attention (every layer {position, 0} when `layers` is empty).
  LayerAttention Layer(int l) const {
    if (layers.empty()) return LayerAttention{position};
    const LayerLayout& s = layers[static_cast<size_t>(l)];
    return LayerAttention{s.position ? position : LayerPosition::kNone, s.window, s.chunk,
                          s.temperature};
  }
  // Whether the model's layers carry KERPLE's learned a_h, b_h (every layer does, and the layers
  // with position use them).
  bool Kerple() const {
    return position == LayerPosition::kKerpleLog || position == LayerPosition::kKerplePower;
  }
};

// The feed-forward's gate activation: h = act(x W1^T) * (x W3^T).
enum class FfnActivation {
  kSilu,      // SwiGLU (LLaMA): silu(g) = g / (1 + exp(-g))
  kGeluTanh,  // GeGLU with GELU's tanh approximation (Gemma's hidden_activation
              // "gelu_pytorch_tanh"): 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
};

// What one layer is.
enum class ModelBlock {
  kLlama,  // pre-norm attention + SwiGLU feed-forward (the file's top)
  // The single-head Gated Attention Unit with post-norm (src/train/gau_layer.h defines it):
  //   x = RMSNorm(embed(tokens)) (no gain); per layer x = RMSNorm(x + GAU(x)) (no gain);
  //   GAU(x) = (U * (A V)) Wo, U = silu(x Wu), V = silu(x Wv), Z = silu(x Wz),
  //   Q = gamma_q Z + beta_q, K = gamma_k Z + beta_k; logits = RMSNorm(x) Wcls^T (with gain).
  // Sizes: hidden_dim is the expansion width E, key_dim the width S of Z, Q, K (and the rotary
  // dim). The attention runs as R = E / S heads (n_heads = n_kv_heads = R, head_dim() = S) whose
  // queries and keys are copies of Q and K and whose values are V's R slices of width S, exactly
  // as the trainer runs it; the KV cache holds the R copies of each key.
  kGau,
};

struct ModelConfig {
  int dim = 0;                    // C: width of the residual stream
  int hidden_dim = 0;             // F: inner width of the SwiGLU feed-forward
  int n_layers = 0;               // number of Transformer blocks
  int n_heads = 0;                // H: query heads
  int n_kv_heads = 0;             // G: key/value heads; divides H (grouped-query attention)
  int vocab_size = 0;             // V
  int seq_len = 0;                // L: the context length the model was trained at
  bool shared_classifier = true;  // the output classifier is the token embedding
  float rope_base = 10000.0f;     // RoPE base (theta_t = base^(-2t/D))
  // Positions divided by this (PI, linear RoPE scaling, as HF rope_scaling type "linear"),
  // trained into the model (stretch train --position rope:pi=F); 1: none.
  float rope_interpolation = 1.0f;
  float norm_eps = 1e-5f;     // RMSNorm epsilon
  AttentionLayout attention;  // trained models' layout; default: LLaMA (RoPE, full, 1/sqrt(D))
  ModelBlock block = ModelBlock::kLlama;
  // The q, k and v projections add a bias (Qwen 2: HF Qwen2Attention's q/k/v_proj have
  // bias=True, o_proj none): LayerWeights::bq, bk, bv. LLaMA block only.
  bool qkv_bias = false;
  // Per-head RMSNorm of q and k before RoPE (Qwen 3: transformers' Qwen3Attention applies q_norm
  // and k_norm, RMSNorms over head_dim whose gains all heads share, to the projections' output,
  // then RoPE): LayerWeights::q_norm, k_norm. LLaMA block only.
  bool qk_norm = false;
  // D when the family gives it apart from dim / n_heads (Qwen 3's head_dim: 128 at hidden 1024
  // and 16 heads, so q is 2048 wide); 0: dim / n_heads. LLaMA block only.
  int explicit_head_dim = 0;
  int key_dim = 0;  // kGau: S
  // Gemma's sandwich of norms (transformers' modeling_gemma3.py, Gemma3DecoderLayer): the
  // attention's and the feed-forward's outputs each RMS-normalized (post_attention_layernorm,
  // post_feedforward_layernorm) before their residual add: LayerWeights::attn_post_norm,
  // ffn_post_norm. LLaMA block only; stretch runs it, does not train it.
  bool post_norms = false;
  FfnActivation activation = FfnActivation::kSilu;
  // The embedding rows times this before the first layer (Gemma: sqrt(hidden_size), in the
  // weights' type: Gemma3TextScaledWordEmbedding; llama.cpp's gemma3 scales by sqrtf(n_embd));
  // 0: none.
  float embed_scale = 0.0f;
  // Gemma 2's soft-capping (transformers' modeling_gemma2.py; Gemma Team 2024, "Gemma 2", arXiv
  // 2408.00118, section 2): x -> cap tanh(x / cap), on every attention logit after its scale and
  // before the mask (attn_logit_softcapping, 50 in Gemma 2) and on the classifier's logits
  // (final_logit_softcapping, 30). 0: off. LLaMA block only; stretch runs it, does not train it.
  double attn_softcap = 0.0;
  double final_softcap = 0.0;
  // The model family it was read as (src/model/family.h: "phi3"), so that it is written back as
  // that family where another has the same block (LLaMA); "" for stretch's own models. Not part
  // of what the model computes.
  std::string family;

  bool Gau() const { return block == ModelBlock::kGau; }
  // What of the block stretch runs but neither trains nor keeps in its own checkpoints or
  // llama2.c files (Gemma's norms, GeGLU, embedding scale), for messages; "" when none.
  std::string UntrainedBlock() const {
    std::string out;
    const auto add = [&](const char* what) {
      out += (out.empty() ? "" : ", ") + std::string(what);
    };
    if (post_norms) add("norms on the attention's and feed-forward's outputs (Gemma)");
    if (activation == FfnActivation::kGeluTanh) add("a GeGLU feed-forward (Gemma)");
    if (embed_scale != 0.0f) add("a scaled embedding (Gemma)");
    if (attn_softcap != 0.0 || final_softcap != 0.0) add("soft-capped logits (Gemma 2)");
    return out;
  }
  // Layer l's RoPE base and trained interpolation: its own (LayerLayout), else the model's.
  double LayerRopeBase(int l) const {
    const double own = attention.layers.empty() ? 0.0 : attention.layers[size_t(l)].rope_base;
    return own != 0.0 ? own : static_cast<double>(rope_base);
  }
  double LayerRopePi(int l) const {
    const double own = attention.layers.empty() ? 0.0 : attention.layers[size_t(l)].rope_pi;
    return own != 0.0 ? own : static_cast<double>(rope_interpolation);
  }
  int head_dim() const {
    return Gau() ? key_dim : explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads;
  }
  // What multiplies q . k, in double (the attention kernel rounds it to float once).
  double LogitScale() const {
    return attention.logit_scale > 0.0 ? attention.logit_scale
                                       : 1.0 / std::sqrt(static_cast<double>(head_dim()));
  }
  // Makes every layer a GAU of key width S (hidden_dim, the expansion E, set first): R = E / S
  // kernel heads of width S.
  void SetGau(int S) {
    block = ModelBlock::kGau;
    key_dim = S;
    n_heads = n_kv_heads = S > 0 ? hidden_dim / S : 0;
  }
  // Heads with their own position parameters (ALiBi's slope, KERPLE's a and b, SSMax's s): the
  // GAU has one, shared by its R kernel heads.
  int position_heads() const { return Gau() ? 1 : n_heads; }
  int kv_dim() const { return head_dim() * n_kv_heads; }
  // Number of parameters (the classifier counted once when shared; KERPLE's 2H and SSMax's H
  // per layer).
  int64_t ParameterCount() const {
    const int64_t C = dim, F = hidden_dim, V = vocab_size, KV = kv_dim(), S = key_dim,
                  HD = int64_t{n_heads} * head_dim();
    const int64_t per_layer =
        Gau() ? 2 * F * C /*wu, wv*/ + S * C /*wz*/ + C * F /*wo*/ + 4 * S /*gamma, beta*/
              : C /*attn_norm*/ + HD * C /*wq*/ + 2 * KV * C /*wk, wv*/ + C * HD /*wo*/ +
                    C /*ffn_norm*/ + 3 * F * C /*w1, w2, w3*/ +
                    (qkv_bias ? HD + 2 * KV : 0) /*bq, bk, bv*/ +
                    (qk_norm ? 2 * int64_t{head_dim()} : 0) /*q_norm, k_norm*/ +
                    (post_norms ? 2 * C : 0) /*attn_post_norm, ffn_post_norm*/;
    int64_t per_head = 0;  // KERPLE's a_h, b_h; SSMax's s_h
    for (int l = 0; l < n_layers; ++l) {
      const LayerPosition p = attention.Layer(l).position;
      if (p == LayerPosition::kKerpleLog || p == LayerPosition::kKerplePower) {
        per_head += 2 * int64_t{position_heads()};
      }
    }
    if (attention.ssmax) per_head += int64_t{n_layers} * position_heads();
    return V * C + n_layers * per_layer + C + (shared_classifier ? 0 : V * C) + per_head;
  }
};

// What `--position xpos` and `sandwich` take when the spec gives no value: XPOS's scale base gamma
// (torchscale's default 512), Sandwich's sinusoid dimension and lambda.
inline constexpr double kXposDefaultGamma = 512.0;
inline constexpr int kSandwichDefaultDim = 128;
inline constexpr double kSandwichDefaultLambda = 1.0;

// What `stretch train` trains and its checkpoints store: the model's configuration (the one
// description that inference runs too) and how its RoPE base came about.
struct TrainArch {
  // Sizes and attention; model.seq_len is the training length L. GAU (ModelConfig::SetGau):
  // model.hidden_dim is the expansion width E, key_dim the width S of Z, Q, K, and the R = E / S
  // kernel heads are n_heads = n_kv_heads.
  ModelConfig model;
  // NTK-aware RoPE (`--position rope:ntk=F`; bloc97 2023, HF _compute_ntk_parameters): exactly a
  // new base, model.rope_base = rope_ntk_base * F^(D / (D - 2)) with D = head_dim(), set by
  // FinalizeArch once the sizes are known. 1: none (rope_ntk_base then unused). Position
  // interpolation (`rope:pi=F`) is model.rope_interpolation, which inference reads too.
  double rope_ntk = 1.0;
  float rope_ntk_base = 0.0f;  // the base F scales (the spec's base=, or the one before)

  const AttentionLayout& layout() const { return model.attention; }
  AttentionLayout& layout() { return model.attention; }
};

// The weights, one struct for inference (float) and training (float parameters and gradients;
// double in the tests' reference model): ModelWeights = ModelWeightsOf<float>. All matrices are
// row-major (out, in): y = W x, as in llama2.c. Every vector is sized exactly (ZeroWeights).
// A GAU layer (ModelBlock::kGau) holds wo and the gau_* tensors; the LLaMA ones stay empty, and
// the other way round.
template <typename Real>
struct LayerWeightsOf {
  std::vector<Real> attn_norm;  // (C)
  std::vector<Real> wq;         // (H*D, C)
  std::vector<Real> wk;         // (G*D, C)
  std::vector<Real> wv;         // (G*D, C)
  std::vector<Real> wo;         // (C, H*D); GAU: (C, E)
  // The projections' biases (ModelConfig::qkv_bias): (H*D), (G*D), (G*D); empty otherwise.
  std::vector<Real> bq, bk, bv;
  // Per-head RMSNorm gains of q and k (ModelConfig::qk_norm): (D) each; empty otherwise.
  std::vector<Real> q_norm, k_norm;
  // The norms of the attention's and the feed-forward's outputs (ModelConfig::post_norms): (C)
  // each; empty otherwise.
  std::vector<Real> attn_post_norm, ffn_post_norm;
  std::vector<Real> ffn_norm;  // (C)
  std::vector<Real> w1;        // (F, C) gate
  std::vector<Real> w2;        // (C, F) down
  std::vector<Real> w3;        // (F, C) up
  // KERPLE's learned per-head parameters a_h, b_h (LayerPosition kKerpleLog / kKerplePower):
  // (position_heads()) each. Training keeps them on every layer of a KERPLE model (a layer
  // without position leaves them unused); the inference model only on the layers that use them.
  std::vector<Real> bias_a, bias_b;
  // SSMax's learned per-head s_h (AttentionLayout::ssmax): (H); empty otherwise.
  std::vector<Real> ssmax;
  // GAU: gau_u, gau_v (E, C), gau_z (S, C); gamma_q, beta_q, gamma_k, beta_k (S).
  std::vector<Real> gau_u, gau_v, gau_z;
  std::vector<Real> gamma_q, beta_q, gamma_k, beta_k;

  // Float inference from a file whose matrices keep their type (src/kernels/packed.h;
  // LoadGgufModel with WeightStorage::kAsStored): the packed matrices, each with the member it
  // stands for, whose vector is then empty. Empty otherwise (always in training).
  std::vector<std::pair<std::vector<Real> LayerWeightsOf::*, PackedMatrix>> packed;

  bool Gau() const { return !gau_u.empty(); }
  // The matrix behind member `v` of this layer, for the products: its packed form or its values.
  WeightRef<Real> Matrix(const std::vector<Real>& v) const {
    for (const auto& [member, m] : packed) {
      if (&(this->*member) == &v) return WeightRef<Real>(&m);
    }
    return WeightRef<Real>(v.data());
  }
};

// The tensors of a layer of stretch's block, in one table that ModelWeightsOf::ForEach,
// ZeroWeights and WeightShape loop over: each with its name in stretch's checkpoints ("layers.N."
// before it), its member, its shape from the configuration (matrices (out, in)), when a layer has
// it, and whether weight decay applies. The file formats' names are the families' tables
// (src/model/family.h); these are stretch's own, with the tensors no family has (the GAU's,
// KERPLE's and SSMax's). A new tensor of the block is one row here.
enum class BlockDim { kNone, kDim, kQuery, kKv, kHidden, kHead, kKeyDim, kPositionHeads, kHeads };
enum class BlockWhen {
  kLlama,      // every LLaMA layer
  kQkvBias,    // LLaMA layers with ModelConfig::qkv_bias
  kQkNorm,     // ... with qk_norm
  kPostNorms,  // ... with post_norms
  kSsmax,      // ... with AttentionLayout::ssmax
  kGau,        // every GAU layer
  kKerple,     // every layer of a KERPLE model (training keeps a_h, b_h on all of them)
};

template <typename Real>
struct LayerTensorOf {
  const char* name;
  std::vector<Real> LayerWeightsOf<Real>::*member;
  BlockDim rows;
  BlockDim cols;  // kNone: a vector
  BlockWhen when;
  bool decay;
};

template <typename Real>
inline constexpr LayerTensorOf<Real> kLayerTensors[] = {
    {"attn_norm", &LayerWeightsOf<Real>::attn_norm, BlockDim::kDim, BlockDim::kNone,
     BlockWhen::kLlama, false},
    {"wq", &LayerWeightsOf<Real>::wq, BlockDim::kQuery, BlockDim::kDim, BlockWhen::kLlama, true},
    {"wk", &LayerWeightsOf<Real>::wk, BlockDim::kKv, BlockDim::kDim, BlockWhen::kLlama, true},
    {"wv", &LayerWeightsOf<Real>::wv, BlockDim::kKv, BlockDim::kDim, BlockWhen::kLlama, true},
    {"bq", &LayerWeightsOf<Real>::bq, BlockDim::kQuery, BlockDim::kNone, BlockWhen::kQkvBias,
     false},
    {"bk", &LayerWeightsOf<Real>::bk, BlockDim::kKv, BlockDim::kNone, BlockWhen::kQkvBias, false},
    {"bv", &LayerWeightsOf<Real>::bv, BlockDim::kKv, BlockDim::kNone, BlockWhen::kQkvBias, false},
    {"q_norm", &LayerWeightsOf<Real>::q_norm, BlockDim::kHead, BlockDim::kNone, BlockWhen::kQkNorm,
     false},
    {"k_norm", &LayerWeightsOf<Real>::k_norm, BlockDim::kHead, BlockDim::kNone, BlockWhen::kQkNorm,
     false},
    {"wo", &LayerWeightsOf<Real>::wo, BlockDim::kDim, BlockDim::kQuery, BlockWhen::kLlama, true},
    {"attn_post_norm", &LayerWeightsOf<Real>::attn_post_norm, BlockDim::kDim, BlockDim::kNone,
     BlockWhen::kPostNorms, false},
    {"ffn_norm", &LayerWeightsOf<Real>::ffn_norm, BlockDim::kDim, BlockDim::kNone,
     BlockWhen::kLlama, false},
    {"w1", &LayerWeightsOf<Real>::w1, BlockDim::kHidden, BlockDim::kDim, BlockWhen::kLlama, true},
    {"w2", &LayerWeightsOf<Real>::w2, BlockDim::kDim, BlockDim::kHidden, BlockWhen::kLlama, true},
    {"w3", &LayerWeightsOf<Real>::w3, BlockDim::kHidden, BlockDim::kDim, BlockWhen::kLlama, true},
    {"ffn_post_norm", &LayerWeightsOf<Real>::ffn_post_norm, BlockDim::kDim, BlockDim::kNone,
     BlockWhen::kPostNorms, false},
    // The GAU (E = hidden_dim, S = key_dim); its output matrix is wo, named apart.
    {"gau_u", &LayerWeightsOf<Real>::gau_u, BlockDim::kHidden, BlockDim::kDim, BlockWhen::kGau,
     true},
    {"gau_v", &LayerWeightsOf<Real>::gau_v, BlockDim::kHidden, BlockDim::kDim, BlockWhen::kGau,
     true},
    {"gau_z", &LayerWeightsOf<Real>::gau_z, BlockDim::kKeyDim, BlockDim::kDim, BlockWhen::kGau,
     true},
    {"gau_o", &LayerWeightsOf<Real>::wo, BlockDim::kDim, BlockDim::kHidden, BlockWhen::kGau, true},
    {"gamma_q", &LayerWeightsOf<Real>::gamma_q, BlockDim::kKeyDim, BlockDim::kNone, BlockWhen::kGau,
     false},
    {"beta_q", &LayerWeightsOf<Real>::beta_q, BlockDim::kKeyDim, BlockDim::kNone, BlockWhen::kGau,
     false},
    {"gamma_k", &LayerWeightsOf<Real>::gamma_k, BlockDim::kKeyDim, BlockDim::kNone, BlockWhen::kGau,
     false},
    {"beta_k", &LayerWeightsOf<Real>::beta_k, BlockDim::kKeyDim, BlockDim::kNone, BlockWhen::kGau,
     false},
    {"bias_a", &LayerWeightsOf<Real>::bias_a, BlockDim::kPositionHeads, BlockDim::kNone,
     BlockWhen::kKerple, false},
    {"bias_b", &LayerWeightsOf<Real>::bias_b, BlockDim::kPositionHeads, BlockDim::kNone,
     BlockWhen::kKerple, false},
    {"ssmax", &LayerWeightsOf<Real>::ssmax, BlockDim::kHeads, BlockDim::kNone, BlockWhen::kSsmax,
     false},
};

// Whether a layer holding `layer` lists tensor `t` (ForEach): a GAU layer its GAU tensors, a LLaMA
// layer its LLaMA ones; the optional ones (biases, norms, KERPLE's, SSMax's) where they are held.
template <typename Real>
bool LayerLists(const LayerTensorOf<Real>& t, const LayerWeightsOf<Real>& layer) {
  switch (t.when) {
    case BlockWhen::kLlama: return !layer.Gau();
    case BlockWhen::kGau: return layer.Gau();
    default: return !(layer.*t.member).empty();
  }
}

template <typename Real>
struct ModelWeightsOf {
  std::vector<Real> token_embedding;         // (V, C)
  std::vector<LayerWeightsOf<Real>> layers;  // n_layers
  std::vector<Real> final_norm;              // (C)
  std::vector<Real> classifier;              // (V, C); empty when the config says shared_classifier
  // Float inference with packed matrices (LayerWeightsOf::packed): the embedding's and the
  // classifier's, when packed (their vectors are then empty); else empty.
  PackedMatrix packed_embedding, packed_classifier;

  const Real* ClassifierData() const {
    return classifier.empty() ? token_embedding.data() : classifier.data();
  }
  // The classifier for the products, packed or not (the embedding's when it is shared).
  WeightRef<Real> ClassifierMatrix() const {
    if (!packed_classifier.empty()) return WeightRef<Real>(&packed_classifier);
    if (classifier.empty() && !packed_embedding.empty()) return WeightRef<Real>(&packed_embedding);
    return WeightRef<Real>(ClassifierData());
  }
  // Whether any matrix is packed: such weights serve inference only (no training, no writing).
  bool HasPacked() const {
    if (!packed_embedding.empty() || !packed_classifier.empty()) return true;
    for (const LayerWeightsOf<Real>& l : layers) {
      if (!l.packed.empty()) return true;
    }
    return false;
  }

  // Every tensor with its name and whether weight decay applies (not to norms, to the GAU's
  // per-dim scales and offsets, or to the KERPLE and SSMax scalars), in one fixed order (the
  // embedding, each layer's in kLayerTensors' order, the final norm, the classifier): the
  // optimizer, the checkpoint and the tests walk this list. A GAU layer lists its tensors (wo as
  // "gau_o") instead of the LLaMA ones. fn(const std::string& name, std::vector<Real>&, bool).
  template <class Fn>
  void ForEach(Fn&& fn) {
    fn("token_embedding", token_embedding, true);
    for (size_t l = 0; l < layers.size(); ++l) {
      LayerWeightsOf<Real>& L = layers[l];
      const std::string p = "layers." + std::to_string(l) + ".";
      for (const LayerTensorOf<Real>& t : kLayerTensors<Real>) {
        if (LayerLists(t, L)) fn(p + t.name, L.*t.member, t.decay);
      }
    }
    fn("final_norm", final_norm, false);
    if (!classifier.empty()) fn("classifier", classifier, true);
  }
};

using LayerWeights = LayerWeightsOf<float>;
using ModelWeights = ModelWeightsOf<float>;

// How a loader holds a file's matrices: every one converted to float32 (what training, `stretch
// convert` and the double references need: the exact path), or, for inference, those whose type
// the products read as it is (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K: src/kernels/packed.h) kept
// in that type where the file's mapping holds them (a GGUF file's, a Hugging Face folder's F16 and
// BF16; q and k rows that go back from HF's rotate-half order in a copy); the other tensors are
// float32 either way.
enum class WeightStorage { kFloat32, kAsStored };

// What a loader holds with WeightStorage::kAsStored: the bytes of the weights (matrices the
// products read as they are, at the file's size; the rest as float32) and the types kept.
struct StoredWeights {
  int64_t bytes = 0;
  std::string types;  // "Q4_K, Q6_K"
};

// A tensor's length along `d` for configuration `m` (1 for kNone).
inline int64_t BlockDimSize(const ModelConfig& m, BlockDim d) {
  switch (d) {
    case BlockDim::kNone: return 1;
    case BlockDim::kDim: return m.dim;
    case BlockDim::kQuery: return int64_t{m.n_heads} * m.head_dim();
    case BlockDim::kKv: return m.kv_dim();
    case BlockDim::kHidden: return m.hidden_dim;
    case BlockDim::kHead: return m.head_dim();
    case BlockDim::kKeyDim: return m.key_dim;
    case BlockDim::kPositionHeads: return m.position_heads();
    case BlockDim::kHeads: return m.n_heads;
  }
  return 0;
}

// Whether every layer of a model of configuration `m` holds the tensors of `when` (the layout of
// training and of ZeroWeights).
inline bool ConfigHas(const ModelConfig& m, BlockWhen when) {
  switch (when) {
    case BlockWhen::kLlama: return !m.Gau();
    case BlockWhen::kQkvBias: return !m.Gau() && m.qkv_bias;
    case BlockWhen::kQkNorm: return !m.Gau() && m.qk_norm;
    case BlockWhen::kPostNorms: return !m.Gau() && m.post_norms;
    case BlockWhen::kSsmax: return !m.Gau() && m.attention.ssmax;
    case BlockWhen::kGau: return m.Gau();
    case BlockWhen::kKerple: return m.attention.Kerple();
  }
  return false;
}

// The shape of layer tensor `t` for `m`: {rows} or {rows, cols}.
template <typename Real>
std::vector<int64_t> LayerTensorShape(const ModelConfig& m, const LayerTensorOf<Real>& t) {
  if (t.cols == BlockDim::kNone) return {BlockDimSize(m, t.rows)};
  return {BlockDimSize(m, t.rows), BlockDimSize(m, t.cols)};
}

// Zero-filled weights of the configuration's shapes, as training holds them (KERPLE's a_h, b_h on
// every layer of a KERPLE model).
template <typename Real>
ModelWeightsOf<Real> ZeroWeights(const ModelConfig& m) {
  const size_t C = m.dim, V = m.vocab_size;
  ModelWeightsOf<Real> p;
  p.token_embedding.assign(V * C, Real(0));
  p.layers.resize(static_cast<size_t>(m.n_layers));
  for (LayerWeightsOf<Real>& L : p.layers) {
    for (const LayerTensorOf<Real>& t : kLayerTensors<Real>) {
      if (!ConfigHas(m, t.when)) continue;
      const auto n = static_cast<size_t>(BlockDimSize(m, t.rows) * BlockDimSize(m, t.cols));
      (L.*t.member).assign(n, Real(0));
    }
  }
  p.final_norm.assign(C, Real(0));
  if (!m.shared_classifier) p.classifier.assign(V * C, Real(0));
  return p;
}

// The shape of a tensor named as ModelWeightsOf::ForEach names it: matrices (out, in). Throws
// stretch::Error for a name that is not one.
inline std::vector<int64_t> WeightShape(const ModelConfig& m, const std::string& name) {
  if (name == "token_embedding" || name == "classifier") return {m.vocab_size, m.dim};
  if (name == "final_norm") return {m.dim};
  if (name.starts_with("layers.")) {
    const size_t dot = name.find('.', 7);
    const std::string_view index =
        std::string_view(name).substr(7, dot == std::string::npos ? 0 : dot - 7);
    const bool digits =
        !index.empty() && index.find_first_not_of("0123456789") == std::string_view::npos;
    if (digits) {
      const std::string_view tensor = std::string_view(name).substr(dot + 1);
      for (const LayerTensorOf<float>& t : kLayerTensors<float>) {
        if (tensor == t.name) return LayerTensorShape(m, t);
      }
    }
  }
  Fail("model weights: no tensor is named \"{}\"", name);
}

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string source;  // where it came from: file path and format, for reports
};

}  // namespace stretch
