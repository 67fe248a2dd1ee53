// Qwen 2 and Qwen 2.5 (Qwen Team 2024, "Qwen2 Technical Report", arXiv 2407.10671): the LLaMA
// block with biases on the q, k and v projections (transformers' modeling_qwen2.py,
// Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj without), RMSNorm, SwiGLU, RoPE,
// grouped-query attention, tied embeddings in the small models. Names as llama.cpp's
// convert_hf_to_gguf.py (Qwen2Model) and gguf-py's constants.py (MODEL_ARCH.QWEN2: token_embd,
// output_norm, output, attn_norm, attn_q/k/v (weight and bias), attn_output, ffn_norm,
// ffn_gate/down/up) write them. llama.cpp runs qwen2 with LLAMA_ROPE_TYPE_NEOX (rotate-half), and
// its converter leaves q and k unpermuted for it: the GGUF file keeps HF's row layout.
// config.json's use_sliding_window is refused when true (kUnread below).
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;
using P = FamilyPresence;
using R = FamilyRopeRows;

constexpr const char* kHfNames[] = {"Qwen2ForCausalLM"};
constexpr const char* kHfTypes[] = {"qwen2"};

// Qwen2Config's use_sliding_window: layers from max_window_layers on attend to the last
// sliding_window keys (transformers' modeling_qwen2.py, layer_types); the released models ship
// it false, and stretch does not read those layers from HF folders.
constexpr FamilyUnreadSwitch kUnread[] = {
    {"use_sliding_window", "windowed layers (from max_window_layers on)"}};

const FamilyTensor kTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", &M::token_embedding, nullptr, D::kVocab,
     D::kDim},
    {"blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight", nullptr, &L::attn_norm},
    {"blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", nullptr, &L::wq, D::kQuery,
     D::kDim, R::kQueryHeads},
    {"blk.{}.attn_q.bias", "model.layers.{}.self_attn.q_proj.bias", nullptr, &L::bq, D::kQuery,
     D::kNone, R::kQueryHeads, P::kQkvBias},
    {"blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", nullptr, &L::wk, D::kKv,
     D::kDim, R::kKvHeads},
    {"blk.{}.attn_k.bias", "model.layers.{}.self_attn.k_proj.bias", nullptr, &L::bk, D::kKv,
     D::kNone, R::kKvHeads, P::kQkvBias},
    {"blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", nullptr, &L::wv, D::kKv,
     D::kDim},
    {"blk.{}.attn_v.bias", "model.layers.{}.self_attn.v_proj.bias", nullptr, &L::bv, D::kKv,
     D::kNone, R::kNone, P::kQkvBias},
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

extern const ModelFamily qwen2_family;
constinit const ModelFamily qwen2_family = {
    .name = "qwen2",
    .hf_architectures = kHfNames,
    .gguf_architecture = "qwen2",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    .qkv_bias = true,
    .hf_unread_switches = kUnread,
    .gguf_rope_halves = true,
    .hf_config_keys =
        R"({"attention_dropout": 0.0, "use_sliding_window": false, "sliding_window": null})",
};

}  // namespace stretch::families
