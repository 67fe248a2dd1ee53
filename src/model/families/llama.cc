// LLaMA (Touvron et al. 2023) and the families that share its tensors and block: pre-norm
// RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases. Names as llama.cpp's
// convert_hf_to_gguf.py / gguf-py constants.py (MODEL_TENSOR ... "blk.{bid}.attn_k") and
// transformers' modeling_llama.py (LlamaDecoderLayer: self_attn.{q,k,v,o}_proj, mlp.{gate,up,
// down}_proj, input_layernorm, post_attention_layernorm) write them. Mistral is this family with
// a sliding window on every layer (below).
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;

constexpr const char* kHfNames[] = {"LlamaForCausalLM", "MistralForCausalLM"};
constexpr const char* kHfTypes[] = {"llama", "mistral"};

const FamilyTensor kTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", &M::token_embedding, nullptr, D::kVocab,
     D::kDim},
    {"blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight", nullptr, &L::attn_norm},
    {"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", nullptr, &L::wq, D::kQuery,
     D::kDim, FamilyRopeRows::kQueryHeads},
    {"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", nullptr, &L::wk, D::kKv,
     D::kDim, FamilyRopeRows::kKvHeads},
    {"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", nullptr, &L::wv, D::kKv,
     D::kDim},
    {"blk.{}.attn_output.weight", "model.layers.{}.self_attn.o_proj.weight", nullptr, &L::wo,
     D::kDim, D::kQuery},
    {"blk.{}.ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight", nullptr,
     &L::ffn_norm},
    {"blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", nullptr, &L::w1, D::kHidden,
     D::kDim},
    {"blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", nullptr, &L::w2, D::kDim,
     D::kHidden},
    {"blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", nullptr, &L::w3, D::kHidden,
     D::kDim},
    {"output_norm.weight", "model.norm.weight", &M::final_norm, nullptr},
    {"output.weight", "lm_head.weight", &M::classifier, nullptr, D::kVocab, D::kDim,
     FamilyRopeRows::kNone, FamilyPresence::kUnlessTied},
};

}  // namespace

extern const ModelFamily llama_family;
constinit const ModelFamily llama_family = {
    .name = "llama",
    .hf_architectures = kHfNames,
    .gguf_architecture = "llama",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    // Mistral (Jiang et al. 2023, arXiv 2310.06825, "Sliding Window Attention"): the LLaMA block
    // whose every layer attends to the last W keys. transformers' masking_utils.py,
    // sliding_window_overlay: key kv is seen by query q when kv > q - sliding_window, so W counts
    // the query itself (keys q - W + 1 .. q), as LayerLayout::window; MistralConfig's default
    // sliding_window is 4096.
    .gguf_rope_freqs = true,  // LLaMA 3.1's rule (llama.cpp's llama architecture)
    .hf_window_architecture = 1,
    .hf_default_window = 4096,
    .hf_config_keys =
        R"({"attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false, "pretraining_tp": 1})",
};

}  // namespace stretch::families
