// Seed-OSS (ByteDance Seed 2025, Seed-OSS-36B): Qwen 2's block, the LLaMA block with biases on the
// q, k and v projections and none on o (transformers' modeling_seed_oss.py, SeedOssAttention:
// q_proj, k_proj, v_proj with bias=config.attention_bias, True in its models; o_proj with
// bias=config.attention_out_bias, False; SeedOssMLP without biases), RMSNorm, SwiGLU, RoPE,
// grouped-query attention with head_dim given in config.json. Names as llama.cpp's converter
// (conversion/olmo.py, SeedOssModel) and gguf-py's constants.py (MODEL_ARCH.SEED_OSS) write
// them: Qwen 2's, except that HF's post_attention_layernorm, the norm before the feed-forward, is
// blk.N.post_attention_norm (MODEL_TENSOR.ATTN_POST_NORM; llama.cpp's seed-oss.cpp uses it
// there). llama.cpp runs seed_oss with LLAMA_ROPE_TYPE_NEOX and its converter leaves q and k
// unpermuted: the GGUF file keeps HF's rotate-half rows, as for Qwen 2.
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;
using P = FamilyPresence;
using R = FamilyRopeRows;

constexpr const char* kHfNames[] = {"SeedOssForCausalLM"};
constexpr const char* kHfTypes[] = {"seed_oss"};

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
    {"blk.{}.post_attention_norm.weight", "model.layers.{}.post_attention_layernorm.weight",
     nullptr, &L::ffn_norm},
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

extern const ModelFamily seed_oss_family;
constinit const ModelFamily seed_oss_family = {
    .name = "seed_oss",
    .hf_architectures = kHfNames,
    .gguf_architecture = "seed_oss",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    .qkv_bias = true,
    .gguf_rope_halves = true,
    .hf_config_keys = R"({"attention_bias": true, "attention_out_bias": false, "mlp_bias": false})",
};

}  // namespace stretch::families
