// LLaMA-family models as Hugging Face folders (transformers' save_pretrained layout), read and
// written: config.json plus model.safetensors, or safetensors shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> file name in the folder).
//
// Architectures read: those of the model families (src/model/families/, docs/formats.md):
// "architectures" ["LlamaForCausalLM"] (model_type "llama") and ["MistralForCausalLM"]
// (model_type "mistral"), the LLaMA block (RMSNorm, RoPE attention with grouped-query heads and no
// biases, SwiGLU), ["Qwen2ForCausalLM"] (model_type "qwen2"), the same block with q/k/v biases,
// and ["Qwen3ForCausalLM"] (model_type "qwen3"), the same block with an RMSNorm over each head of
// q and k, and ["Phi3ForCausalLM"] (model_type "phi3"), the LLaMA block with q, k and v fused into
// qkv_proj and the gate and up projections into gate_up_proj. Any other is refused by name (Gemma scales its norms by 1 + w and its embedding by
// sqrt(hidden_size), Phi-3 fuses qkv_proj, Mixtral and Qwen 3 MoE route experts ...).
//
// config.json -> ModelConfig, every field type-checked (a count is a JSON integer within bounds;
// a string, a fraction, zero, a negative or a huge value is refused naming the key):
//   hidden_size -> dim, intermediate_size -> hidden_dim, num_hidden_layers -> n_layers,
//   num_attention_heads -> n_heads, num_key_value_heads -> n_kv_heads (absent or null: n_heads),
//   vocab_size, rms_norm_eps -> norm_eps, rope_theta -> rope_base (absent: 10000; transformers 5
//   may put it in rope_parameters instead; both given must agree), tie_word_embeddings ->
//   shared_classifier (absent: false), max_position_embeddings -> seq_len, except as below.
//   head_dim (absent or null: hidden_size / heads) is the heads' width, which may differ from
//   hidden_size / num_attention_heads (Qwen 3, Mistral Nemo): q is then heads x head_dim wide. hidden_act must be "silu" (or "swish", the same function
//   in transformers' ACT2FN); attention_bias and mlp_bias, when present, false; a
//   partial_rotary_factor, when present, 1.
//   Mistral's sliding_window (absent: MistralConfig's default 4096; null: none) becomes a window
//   of W keys on every layer (LayerLayout::window: query i sees keys i - W + 1 .. i, as
//   transformers' masking_utils.py sliding_window_overlay, kv_idx > q_idx - sliding_window); such
//   a model is written back as MistralForCausalLM with its sliding_window. A window of at least
//   max_position_embeddings is read as none (no key within the trained length is outside it). A
//   window with rope_scaling is refused (windowed layers keep plain RoPE in stretch). Phi-3's
//   sliding_window is read the same way (Phi3Config's default: none).
// rope_scaling (or transformers 5's rope_parameters, whose rope_theta and partial_rotary_factor
// are taken out first): null, absent or of rope_type "default" means the model's own RoPE;
// otherwise its JSON comes back in HfModelHeader::rope_scaling_json (as nlohmann dumps it: the
// same keys and values, keys sorted) and the caller maps it onto a position method with
// MethodFromHfRopeScaling (src/position/method.h). The loader decides nothing about it, not even
// for "linear" (which ModelConfig::rope_interpolation could hold: rope_linear_factor carries its
// factor for a caller that wants that), except the trained length:
//   seq_len = rope_scaling.original_max_position_embeddings for "yarn" (when given; transformers
//   otherwise assumes max_position_embeddings is the pre-YaRN length), "llama3" (required there:
//   _compute_llama3_parameters reads it as old_context_len) and "longrope" (also the top-level
//   original_max_position_embeddings of Phi-3's configs), as transformers' modeling_rope_utils.py
//   defines them (its _validate_yarn_parameters: "Models should set
//   config.rope_scaling["original_max_position_embeddings"] to their original (pre-yarn) context
//   length, with config.max_position_embeddings corresponding to their post-yarn context
//   length"); max_position_embeddings for every other type ("linear": the length the
//   interpolated model was tuned at; "dynamic": transformers scales from max_position_embeddings).
//
// Tensors (row-major (out, in), as nn.Linear stores them), each F32, F16 or BF16 and converted to
// float32 on load: model.embed_tokens.weight (V, C); per layer N model.layers.N.input_layernorm
// (C), self_attn.q_proj (H*D, C), k_proj and v_proj (G*D, C), o_proj (C, H*D),
// post_attention_layernorm (C), mlp.gate_proj (F, C) -> w1, up_proj (F, C) -> w3, down_proj
// (C, F) -> w2 (all with ".weight"); model.norm.weight (C); lm_head.weight (V, C), absent when
// tie_word_embeddings. Refused by name: a missing tensor, another shape or dtype, a tensor the
// model does not have (a bias, lm_head.weight of a tied model), a tensor in two shards, an index
// entry whose shard lacks the tensor, a shard tensor the index does not list, a shard name that
// is not a plain file name inside the folder ("../x", "/x", "a/b": shards may be symbolic links,
// as in the Hugging Face cache, but are named by file name only). Older checkpoints'
// model.layers.N.self_attn.rotary_emb.inv_freq buffers are skipped (transformers recomputes them
// from rope_theta and ignores the stored ones too). A folder holding both model.safetensors and an
// index is refused (which one is meant?); so is one with only pytorch_model.bin (a pickle).
//
// RoPE layout: transformers' Llama rotates the "half" pairs (x[i], x[i + D/2]) of each head
// (rotate_half), stretch (like Meta's original checkpoints, llama2.c and GGUF) the adjacent pairs
// (x[2i], x[2i+1]). transformers' own converter from Meta's layout,
// models/llama/convert_llama_weights_to_hf.py, permutes the rows of wq and wk per head:
//   permute(w) = w.view(n_heads, D / 2, 2, C).transpose(1, 2).reshape(n_heads * D, C)
// i.e. Meta row (h, 2i + j), viewed as (h, i, j), lands at (h, j, i): HF row h*D + j*D/2 + i.
// So loading (HF -> stretch) takes stretch's row h*D + 2i + j from HF's row h*D + j*D/2 + i
// (row 2i <- HF row i, row 2i+1 <- HF row i + D/2), and writing does the converse, which is that
// permute itself. q and k are permuted alike (k with the G key heads), so every q . k is the same
// and the rotation by pos * theta_i acts on the same pair of numbers in both layouts
// (tests/io/hf_model_test.cc checks this with numbers).
//
// Memory: tensors are read one at a time, F32 straight into the model's vectors (q and k then
// permuted in place through one head's rows), F16 and BF16 through a temporary of one tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/io/safetensors.h"
#include "src/model/config.h"

namespace stretch {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfGenerationConfigFile = "generation_config.json";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

// True when `path` is a directory holding a file config.json (a training run's directory holds
// none). Says nothing about whether the folder can be read.
bool LooksLikeHfFolder(const std::string& path);

struct HfModelHeader {
  ModelConfig config;        // rope_interpolation stays 1: rope_scaling is the caller's to map
  std::string format;        // "Hugging Face folder (LlamaForCausalLM, BF16, 2 shards)"
  std::string architecture;  // "LlamaForCausalLM" or "MistralForCausalLM"
  int64_t max_position_embeddings = 0;  // config.json's; seq_len may differ (see above)
  // rope_scaling's (or rope_parameters') JSON text; "" when the model has none (null, absent,
  // "default"). rope_type: its rope_type (or "type"), "" when none.
  std::string rope_scaling_json;
  std::string rope_type;
  double rope_linear_factor = 1.0;        // rope_type "linear": its factor (>= 1); 1 otherwise
  std::vector<std::string> weight_files;  // file names in the folder: one, or the shards in order
};
// Reads config.json and every weight file's header; checks every key, tensor name, shape and
// dtype (no weights are read). Throws stretch::Error naming the file, the key or tensor, what was
// found and what was expected.
HfModelHeader ReadHfModelHeader(const std::string& dir);

// Loads the whole model, q/k permuted into stretch's RoPE layout. Every tensor is converted to
// float32, except with WeightStorage::kAsStored the F16 and BF16 matrices: used where a mapping
// of their safetensors file holds them (2 bytes a weight; q and k rows in a copy, put back from
// rotate-half order; never expanded whole) and multiplied as they are (src/kernels/packed.h), for
// inference only. Model::source is "<dir> (<format>)".
Model LoadHfModel(const std::string& dir, WeightStorage storage = WeightStorage::kFloat32);
// What LoadHfModel(dir, WeightStorage::kAsStored) holds (no weights are read).
StoredWeights HfStoredWeightBytes(const std::string& dir);

// Writes `model` as a LlamaForCausalLM folder `dir`: model.safetensors (every tensor in `dtype`:
// F32, F16 or BF16, norms included, as save_pretrained stores a model of that torch_dtype;
// metadata {"format": "pt"}, which transformers' loader requires) and then config.json (the keys
// above, torch_dtype, bos/eos ids 1/2, max_position_embeddings = seq_len, rope_scaling
// {"factor": F, "type": "linear"} when rope_interpolation F != 1: "type" rather than
// "rope_type", as transformers' LlamaConfig before rope_type (2024) accepts exactly {"type",
// "factor"}, and later versions and MethodFromHfRopeScaling read "type" too), each file atomically
// (AtomicFile). config.json comes last, so a folder that LooksLikeHfFolder is complete.
// The tokenizer files are the caller's: it writes them into `dir` afterwards and lists their names
// in `caller_files`. The folder may exist, but holding nothing other than config.json,
// model.safetensors, `caller_files` and hidden partial files of interrupted writes: anything else
// is refused by name (a user's files are never overwritten or mixed with a model's), as is a
// path that is not a directory.
// Refused by name: models the format cannot express (as SaveGgufModel: the GAU block, a trained
// attention layout: per-layer positions or windows, norms, logit scale ...), a dtype other than
// F32, F16 and BF16, and a weight that would round to infinity in F16 (beyond 65504).
// With `method` (may be null), config.json's rope_scaling asks for that position method (yarn,
// llama3, longrope with their keys and original_max_position_embeddings = seq_len, and then
// max_position_embeddings = seq_len x factor; pi:factor=F as linear; dynamic-ntk as HF's dynamic
// with factor 1); anything else is refused by name before a file is written.
// `special` gives config.json's and generation_config.json's bos_token_id and eos_token_id: the
// ids of the vocabulary written beside the model (Llama 3's 128000 / 128001, not llama2.c's 1 /
// 2); an id of -1 (no vocabulary, or one without that token) is written as null, as transformers
// writes a token it does not know.
struct Method;
struct HfSpecialIds {
  int bos = -1;
  int eos = -1;
};
void SaveHfModel(const Model& model, const std::string& dir, SafetensorsDtype dtype,
                 const std::vector<std::string>& caller_files = {}, const Method* method = nullptr,
                 HfSpecialIds special = {});

}  // namespace stretch
