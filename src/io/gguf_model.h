// LLaMA-family models from GGUF files (general.architecture "llama": LLaMA 1-3, Mistral and the
// other models llama.cpp's converters write under that name).
//
// Config from the llama.* keys:
//   llama.embedding_length -> dim, llama.block_count -> n_layers, llama.feed_forward_length ->
//   hidden_dim, llama.attention.head_count -> n_heads, llama.attention.head_count_kv -> n_kv_heads
//   (default: n_heads), llama.context_length -> seq_len, llama.rope.freq_base -> rope_base
//   (default 10000), llama.attention.layer_norm_rms_epsilon -> norm_eps (default 1e-5),
//   llama.rope.scaling.type "linear" with llama.rope.scaling.factor -> rope_interpolation.
//   The vocabulary size is token_embd.weight's row count (llama.vocab_size, when present, must
//   agree). llama.rope.dimension_count, llama.attention.key_length and value_length, when present,
//   must equal dim / n_heads (stretch rotates every pair of a head).
// Tensors (ggml order: ne = {cols, rows} for a row-major (rows, cols) matrix):
//   token_embd.weight (V, C); output_norm.weight (C); output.weight (V, C), absent when the
//   classifier is the embedding; per block N: blk.N.attn_norm.weight, attn_q (C, C), attn_k and
//   attn_v (KV, C), attn_output (C, C), ffn_norm, ffn_gate (F, C), ffn_down (C, F), ffn_up (F, C).
//   Each is converted to float32 on load (GgufFile::ReadFloats: F32, F16, BF16, Q8_0, Q4_K, Q6_K).
// RoPE layout: llama.cpp's "llama" architecture rotates adjacent pairs (x[2t], x[2t+1]), the
// layout of Meta's and llama2.c's checkpoints and of stretch; its converter from Hugging Face
// folders permutes q and k from HF's rotate-half layout into it, so the weights are used as they
// are.
// Refused by name: another architecture, a tensor stretch does not use (rope_freqs.weight of
// LLaMA 3.1's frequency scaling among them), RoPE scaling other than none or linear (YaRN and
// LongRoPE files: their mapping onto --method is not built yet).
#pragma once

#include <string>

#include "src/io/tokenizer.h"
#include "src/model/config.h"

namespace stretch {

struct GgufModelHeader {
  ModelConfig config;
  std::string format;  // "GGUF version 3 (llama, F32)": the version, architecture, tensor types
};
// Reads the header and the tensor list; checks every key and shape (no weights are read).
GgufModelHeader ReadGgufModelHeader(const std::string& path);

// Loads the whole model, every tensor converted to float32.
Model LoadGgufModel(const std::string& path);

// The vocabulary a GGUF file carries, when it is a SentencePiece one (tokenizer.ggml.model
// "llama": tokenizer.ggml.tokens, .scores), as the llama2.c-style Tokenizer (src/io/tokenizer.h),
// whose encoding is the same SentencePiece BPE llama.cpp runs for these vocabularies (start from
// code points, byte fallback to "<0xXX>", merge the best-scoring adjacent pair, leftmost on ties,
// a leading space before the text): pieces are turned from SentencePiece's spelling (U+2581 for a
// space) into llama2.c's. Refused by name: no vocabulary, another kind (byte-level BPE,
// tokenizer.ggml.model "gpt2": not built yet), <unk>/<s>/</s> at ids other than 0/1/2, or
// tokenizer.ggml.add_space_prefix false.
bool GgufHasVocabulary(const std::string& path);
Tokenizer ReadGgufTokenizer(const std::string& path);

// Writes `model` as a GGUF version 3 file of the "llama" architecture, atomically: the llama.*
// keys above, the matrices in `matrix_type` (F32, F16, BF16 or Q8_0; the embedding and the
// classifier too; with Q8_0 a matrix whose rows are not a multiple of 32 long stays F32), the
// norms always in F32 (as llama.cpp's converters keep them). With a llama2.c
// tokenizer (`tokenizer`, may be null) its vocabulary goes in as llama.cpp's SentencePiece
// vocabulary (tokenizer.ggml.model "llama": tokens, scores, token types; <unk> 0, <s> 1, </s> 2),
// which llama.cpp needs to load the file. Refused by name: models the format cannot express (the
// GAU block, a trained attention layout: per-layer positions or windows, norms, logit scale).
void SaveGgufModel(const Model& model, const std::string& path, uint32_t matrix_type,
                   const Tokenizer* tokenizer);

}  // namespace stretch
