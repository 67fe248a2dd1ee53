// Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size", arXiv
// 2408.00118, section 2: "we alternate between a local sliding window attention and global
// attention in every other layer ... we cap logits in each attention layer and the final layer
// such that the value of the logits stays between -soft_cap and +soft_cap"), as transformers'
// modeling_gemma2.py runs it:
//   - Gemma 3's block without the q/k norms: the embedding times hidden_size ** 0.5, RMSNorms as
//     x / rms(x) * (1 + w), post_attention_layernorm and post_feedforward_layernorm on the
//     attention's and feed-forward's outputs, a GeGLU feed-forward (gelu_pytorch_tanh);
//   - eager_attention_forward: scores times query_pre_attn_scalar ** -0.5, then
//     attn_logit_softcapping * tanh(scores / attn_logit_softcapping), then the mask;
//   - layer_types (older configs: layer i sliding when i is even) with one sliding_window, every
//     layer at rope_theta under one rotary embedding (no base of the local layers' own);
//   - the classifier's logits: final_logit_softcapping * tanh(logits / final_logit_softcapping);
//   - Gemma2Config's defaults: softcaps 50 and 30, sliding_window 4096, query_pre_attn_scalar 256,
//     head_dim 256, rope_theta 10000, tied embeddings.
// llama.cpp (src/models/gemma2.cpp; convert_hf_to_gguf.py's Gemma2Model) runs it with NEOX RoPE
// (the GGUF keeps HF's q/k rows), holds the norms as 1 + w (the converter adds the 1), always
// soft-caps (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping, defaults 50 and 30),
// reads the window (default 4096) and the period (default 2), scales queries by
// 1/sqrt(head_dim) (hidden / heads for the 46-layer 27B model) and reads no output.weight: its
// classifier is always the embedding.
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;

constexpr const char* kHfNames[] = {"Gemma2ForCausalLM"};
constexpr const char* kHfTypes[] = {"gemma2"};

// An RMSNorm gain, kept as w in HF checkpoints (FamilyTensor::hf_plus_one).
constexpr FamilyTensor Gain(const char* gguf, const char* hf, std::vector<float> L::*layer) {
  return {
      gguf, hf,  nullptr, layer, D::kDim, D::kNone, FamilyRopeRows::kNone, FamilyPresence::kAlways,
      {},   true};
}

const FamilyTensor kTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", &M::token_embedding, nullptr, D::kVocab,
     D::kDim},
    Gain("blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight", &L::attn_norm),
    {"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", nullptr, &L::wq, D::kQuery,
     D::kDim, FamilyRopeRows::kQueryHeads},
    {"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", nullptr, &L::wk, D::kKv,
     D::kDim, FamilyRopeRows::kKvHeads},
    {"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", nullptr, &L::wv, D::kKv,
     D::kDim},
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
     FamilyRopeRows::kNone,
     FamilyPresence::kAlways,
     {},
     true},
    // HF folders of untied models only: llama.cpp's gemma2 reads no output.weight
    // (ModelFamily::gguf_tied).
    {"output.weight", "lm_head.weight", &M::classifier, nullptr, D::kVocab, D::kDim,
     FamilyRopeRows::kNone, FamilyPresence::kUnlessTied},
};

}  // namespace

extern const ModelFamily gemma2_family;
constinit const ModelFamily gemma2_family = {
    .name = "gemma2",
    .hf_architectures = kHfNames,
    .gguf_architecture = "gemma2",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    .gemma_block = true,
    .swa_pattern = 2,
    .swa_local_base = 0.0,  // the model's RoPE on every layer
    .gguf_default_window = 4096,
    .gguf_wide_scale_layers = 46,
    .softcaps = true,
    .gguf_tied = true,
    .hf_default_tied = true,
    .hf_default_head_dim = 256,
    .gguf_rope_halves = true,
    .hf_config_keys =
        R"({"attention_bias": false, "attention_dropout": 0.0, "hidden_activation": "gelu_pytorch_tanh"})",
};

}  // namespace stretch::families
