// Qwen 3 (Qwen Team 2025, "Qwen3 Technical Report", arXiv 2505.09388, section 2: "we remove QKV-bias
// used in Qwen2 and introduce QK-Norm to the attention mechanism"): the LLaMA block without
// biases, with an RMSNorm over each head of q and k before RoPE (transformers' modeling_qwen3.py,
// Qwen3Attention: q_norm and k_norm, Qwen3RMSNorm(head_dim), applied to the projections' output
// viewed as (heads, head_dim), then apply_rotary_pos_emb), and a head width given apart from the
// model's (config.json `head_dim`: 128 in every size, where hidden_size / num_attention_heads is
// 64 for the 0.6B model). Names as llama.cpp's convert_hf_to_gguf.py (Qwen3Model, on Qwen2Model)
// and gguf-py's constants.py (MODEL_ARCH.QWEN3: attn_q_norm, attn_k_norm beside LLaMA's) write
// them; llama.cpp's src/models/qwen3.cpp runs it with LLAMA_ROPE_TYPE_NEOX (rotate-half), so the
// GGUF file keeps HF's row layout, and the norms' gains follow the rows they scale.
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;
using P = FamilyPresence;
using R = FamilyRopeRows;

constexpr const char* kHfNames[] = {"Qwen3ForCausalLM"};
constexpr const char* kHfTypes[] = {"qwen3"};

// Qwen3Config's use_sliding_window: layers from max_window_layers on attend to the last
// sliding_window keys (transformers' modeling_qwen3.py, layer_types); the released models ship
// it false, and stretch does not read those layers from HF folders.
constexpr FamilyUnreadSwitch kUnread[] = {
    {"use_sliding_window", "windowed layers (from max_window_layers on)"}};

const FamilyTensor kTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", &M::token_embedding, nullptr, D::kVocab,
     D::kDim},
    {"blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight", nullptr, &L::attn_norm},
    {"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", nullptr, &L::wq, D::kQuery,
     D::kDim, R::kQueryHeads},
    {"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", nullptr, &L::wk, D::kKv,
     D::kDim, R::kKvHeads},
    {"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", nullptr, &L::wv, D::kKv,
     D::kDim},
    {"blk.{}.attn_q_norm.weight", "model.layers.{}.self_attn.q_norm.weight", nullptr, &L::q_norm,
     D::kHead, D::kNone, R::kOneHead},
    {"blk.{}.attn_k_norm.weight", "model.layers.{}.self_attn.k_norm.weight", nullptr, &L::k_norm,
     D::kHead, D::kNone, R::kOneHead},
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
    {"output.weight", "lm_head.weight", &M::classifier, nullptr, D::kVocab, D::kDim, R::kNone,
     P::kUnlessTied},
};

}  // namespace

extern const ModelFamily qwen3_family;
constinit const ModelFamily qwen3_family = {
    .name = "qwen3",
    .hf_architectures = kHfNames,
    .gguf_architecture = "qwen3",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    .qk_norm = true,
    .hf_unread_switches = kUnread,
    .gguf_rope_halves = true,
    .hf_config_keys =
        R"({"attention_bias": false, "attention_dropout": 0.0, "use_sliding_window": false, "sliding_window": null})",
};

}  // namespace stretch::families
