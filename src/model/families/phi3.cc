// Phi-3 (Abdin et al. 2024, "Phi-3 Technical Report", arXiv 2404.14219): the LLaMA block with
// fused projections. transformers' modeling_phi3.py: Phi3Attention.qkv_proj holds q, k and v one
// after another by rows (query_pos = heads * head_dim; then kv_heads * head_dim rows of k and as
// many of v), Phi3MLP.gate_up_proj the gate's rows then the up projection's (`gate, up_states =
// up_states.chunk(2, dim=-1)`; up_states * act(gate)); no biases; RMSNorm; RoPE in rotate-half
// layout; LongRoPE (rope_scaling "longrope", short_factor / long_factor) for the 128k models, and
// sliding_window (Phi3Config's default none; Phi-3-mini-4k: 2047) on every layer, W keys counting
// the query itself as for Mistral (src/model/families/llama.cc). llama.cpp (convert_hf_to_gguf.py
// via conversion/phi.py, Phi3MiniModel; src/models/phi3.cpp) keeps both fusions (attn_qkv,
// ffn_up of 2 x intermediate rows, split by its SwiGLU as silu(first half) * second half), runs
// phi3 with NEOX RoPE so q and k keep HF's rows, writes LongRoPE's lists as the tensors
// rope_factors_long/short.weight with the attention factor as rope.scaling.attn_factor, and reads
// but turns off the sliding window.
#include "src/model/family.h"

namespace stretch::families {
namespace {

using D = FamilyDim;
using L = LayerWeights;
using M = ModelWeights;
using P = FamilyPresence;
using R = FamilyRopeRows;

constexpr const char* kHfNames[] = {"Phi3ForCausalLM"};
constexpr const char* kHfTypes[] = {"phi3"};

constexpr FamilyPart kQkv[] = {
    {&L::wq, D::kQuery, R::kQueryHeads}, {&L::wk, D::kKv, R::kKvHeads}, {&L::wv, D::kKv}};
constexpr FamilyPart kGateUp[] = {{&L::w1, D::kHidden}, {&L::w3, D::kHidden}};

const FamilyTensor kTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", &M::token_embedding, nullptr, D::kVocab,
     D::kDim},
    {"blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight", nullptr, &L::attn_norm},
    {"blk.{}.attn_qkv.weight", "model.layers.{}.self_attn.qkv_proj.weight", nullptr, nullptr,
     D::kNone, D::kDim, R::kNone, P::kAlways, kQkv},
    {"blk.{}.attn_output.weight", "model.layers.{}.self_attn.o_proj.weight", nullptr, &L::wo,
     D::kDim, D::kQuery},
    {"blk.{}.ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight", nullptr,
     &L::ffn_norm},
    {"blk.{}.ffn_up.weight", "model.layers.{}.mlp.gate_up_proj.weight", nullptr, nullptr, D::kNone,
     D::kDim, R::kNone, P::kAlways, kGateUp},
    {"blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", nullptr, &L::w2, D::kDim,
     D::kHidden},
    {"output_norm.weight", "model.norm.weight", &M::final_norm, nullptr},
    {"output.weight", "lm_head.weight", &M::classifier, nullptr, D::kVocab, D::kDim, R::kNone,
     P::kUnlessTied},
};

}  // namespace

extern const ModelFamily phi3_family;
constinit const ModelFamily phi3_family = {
    .name = "phi3",
    .hf_architectures = kHfNames,
    .gguf_architecture = "phi3",
    .hf_model_types = kHfTypes,
    .tensors = kTensors,
    .gguf_longrope = true,
    .gguf_rope_halves = true,
    .hf_window_architecture = 0,
    .hf_config_keys =
        R"({"attention_dropout": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "sliding_window": null})",
};

}  // namespace stretch::families
