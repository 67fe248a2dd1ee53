// Gemma 3 (Gemma Team 2025, "Gemma 3 Technical Report", arXiv 2503.19786, section 2.1: "5 local
// layers for every global layer ... QK-norm replaces the soft-capping of Gemma 2 ... RoPE base
// frequency 1M on global layers, 10k on local layers"), text model. transformers'
// modeling_gemma3.py:
//   - Gemma3TextScaledWordEmbedding: the embedding rows times hidden_size ** 0.5;
//   - Gemma3RMSNorm: x / rms(x) * (1 + w), in float32 (the checkpoint holds w);
//   - Gemma3DecoderLayer: h = x + post_attention_layernorm(attn(input_layernorm(x))),
//     x' = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
//   - Gemma3MLP: down(act(gate(x)) * up(x)), hidden_activation "gelu_pytorch_tanh";
//   - Gemma3Attention: q_norm and k_norm (Gemma3RMSNorm over head_dim) on each head before RoPE,
//     logits times query_pre_attn_scalar ** -0.5, sliding_window keys on the sliding layers
//     (layer_types; older configs: sliding_window_pattern 6, layer i global when (i + 1) % 6 ==
//     0), whose RoPE runs at rope_local_base_freq without rope_scaling; the global layers at
//     rope_theta with rope_scaling (linear 8 in the 4B-27B models);
//   - no logit soft-capping by default (final_logit_softcapping, attn_logit_softcapping null).
// llama.cpp (src/models/gemma3.cpp; convert_hf_to_gguf.py's Gemma3Model) runs it with NEOX RoPE
// (so the GGUF keeps HF's q/k rows), holds the norms as 1 + w (the converter adds the 1), scales
// queries by 1/sqrt(head_dim) (hidden / heads for the 27B model only), reads the window, the
// pattern (default 6) and the local base (rope.freq_base_swa, default 10000), and applies
// rope.scaling's factor to the global layers only.
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;
using P = FamilyPresence;
using R = FamilyRopeRows;

constexpr const char* kHfNames[] = {"Gemma3ForCausalLM"};
constexpr const char* kHfTypes[] = {"gemma3_text"};

// An RMSNorm gain, kept as w in HF checkpoints (FamilyTensor::hf_plus_one).
constexpr FamilyTensor Gain(const char* gguf, const char* hf, std::vector<float> L::*layer,
                            D rows = D::kDim, R rope_rows = R::kNone) {
  return {gguf, hf, nullptr, layer, rows, D::kNone, rope_rows, P::kAlways, {}, true};
}

const FamilyTensor kTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", &M::token_embedding, nullptr, D::kVocab,
     D::kDim},
    Gain("blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight", &L::attn_norm),
    {"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", nullptr, &L::wq, D::kQuery,
     D::kDim, R::kQueryHeads},
    {"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", nullptr, &L::wk, D::kKv,
     D::kDim, R::kKvHeads},
    {"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", nullptr, &L::wv, D::kKv,
     D::kDim},
    Gain("blk.{}.attn_q_norm.weight", "model.layers.{}.self_attn.q_norm.weight", &L::q_norm,
         D::kHead, R::kOneHead),
    Gain("blk.{}.attn_k_norm.weight", "model.layers.{}.self_attn.k_norm.weight", &L::k_norm,
         D::kHead, R::kOneHead),
    {"blk.{}.attn_output.weight", "model.layers.{}.self_attn.o_proj.weight", nullptr, &L::wo,
     D::kDim, D::kQuery},
    Gain("blk.{}.post_attention_norm.weight", "model.layers.{}.post_attention_layernorm.weight",
         &L::attn_post_norm),
    Gain("blk.{}.ffn_norm.weight", "model.layers.{}.pre_feedforward_layernorm.weight",
         &L::ffn_norm),
    {"blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", nullptr, &L::w1, D::kHidden,
     D::kDim},
    {"blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", nullptr, &L::w2, D::kDim,
     D::kHidden},
    {"blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", nullptr, &L::w3, D::kHidden,
     D::kDim},
    Gain("blk.{}.post_ffw_norm.weight", "model.layers.{}.post_feedforward_layernorm.weight",
         &L::ffn_post_norm),
    {"output_norm.weight",
     "model.norm.weight",
     &M::final_norm,
     nullptr,
     D::kDim,
     D::kNone,
     R::kNone,
     P::kAlways,
     {},
     true},
    {"output.weight", "lm_head.weight", &M::classifier, nullptr, D::kVocab, D::kDim, R::kNone,
     P::kUnlessTied},
};

}  // namespace

extern const ModelFamily gemma3_family;
constinit const ModelFamily gemma3_family = {
    .name = "gemma3",
    .hf_architectures = kHfNames,
    .gguf_architecture = "gemma3",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    .qk_norm = true,
    .gemma_block = true,
    .swa_pattern = 6,
    .swa_local_base = 10000.0,
    .gguf_wide_scale_layers = 62,
    .hf_default_rope_base = 1e6,
    .hf_default_tied = true,
    .hf_default_head_dim = 256,
    .gguf_rope_halves = true,
    .hf_config_keys =
        R"({"attention_bias": false, "attention_dropout": 0.0, "final_logit_softcapping": null, "attn_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh"})",
};

}  // namespace stretch::families
