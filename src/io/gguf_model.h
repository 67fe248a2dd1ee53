// LLaMA-family models from GGUF files (general.architecture "llama": LLaMA 1-3, Mistral and the
// other models llama.cpp's converters write under that name).
//
// Config from the llama.* keys:
//   llama.embedding_length -> dim, llama.block_count -> n_layers, llama.feed_forward_length ->
//   hidden_dim, llama.attention.head_count -> n_heads, llama.attention.head_count_kv -> n_kv_heads
//   (default: n_heads), llama.context_length -> seq_len (llama.rope.scaling.original_context_length
//   when the file has one), llama.rope.freq_base -> rope_base (default 10000),
//   llama.attention.layer_norm_rms_epsilon -> norm_eps (default 1e-5),
//   llama.rope.scaling.* and the tensors rope_freqs.weight, rope_factors_{short,long}.weight ->
//   rope_interpolation (linear scaling) or the method the file asks for (YaRN, LongRoPE, LLaMA
//   3.1's per-pair factors; RopeScalingFromGguf in gguf_model.cc says how each key is read),
//   llama.attention.sliding_window -> a window of W keys on every layer (Mistral's, as stretch
//   writes it; llama.cpp's llama architecture ignores the key and attends to every key, so it
//   agrees with such a file only up to W tokens).
//   The vocabulary size is token_embd.weight's row count (llama.vocab_size, when present, must
//   agree). The head width is llama.attention.key_length when present (it may differ from
//   dim / n_heads: Qwen 3), else dim / n_heads; llama.rope.dimension_count and
//   llama.attention.value_length, when present, must equal it (stretch rotates every pair of a
//   head, and its values are as wide as its keys).
// Tensors (ggml order: ne = {cols, rows} for a row-major (rows, cols) matrix):
//   token_embd.weight (V, C); output_norm.weight (C); output.weight (V, C), absent when the
//   classifier is the embedding; per block N: blk.N.attn_norm.weight, attn_q (C, C), attn_k and
//   attn_v (KV, C), attn_output (C, C), ffn_norm, ffn_gate (F, C), ffn_down (C, F), ffn_up (F, C).
//   Each is converted to float32 on load (GgufFile::ReadFloats: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
//   Q5_K, Q6_K).
// RoPE layout: llama.cpp's "llama" architecture rotates adjacent pairs (x[2t], x[2t+1]), the
// layout of Meta's and llama2.c's checkpoints and of stretch; its converter from Hugging Face
// folders permutes q and k from HF's rotate-half layout into it, so the weights are used as they
// are. Its "qwen2" architecture rotates HF's halves (NEOX), its converter leaves q and k (and
// their biases) in HF's rows, and stretch permutes them on reading and writing
// (ModelFamily::gguf_rope_halves).
// Other families: general.architecture names the family (src/model/families/) and prefixes its
// keys ("qwen2.context_length"); "qwen2" adds blk.N.attn_q/k/v.bias, "qwen3" blk.N.attn_q_norm and
// attn_k_norm (one head's width each, in HF's rows as q and k). The keys above are named for
// "llama".
// Refused by name: another architecture, a tensor stretch does not use, RoPE scaling of another
// type or with settings stretch's methods do not express (YaRN's ext_factor other than 1).
#pragma once

#include <string>
#include <vector>

#include "src/io/gguf.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/config.h"

namespace stretch {

struct GgufModelHeader {
  ModelConfig config;
  std::string format;  // "GGUF version 3 (llama, F32)": the version, architecture, tensor types
  // The position method the file asks for (a canonical spec of src/position/method.h, e.g.
  // "yarn:factor=4"), "" for plain RoPE, and what in the file says so.
  std::string method_spec;
  std::string method_source;
  // Where each setting came from: "dim 288 <- llama.embedding_length", one line per setting.
  std::vector<std::string> provenance;
};
// Reads the header and the tensor list; checks every key and shape (no weights are read).
// Each function also takes the file already opened (one mapping and parse for a whole load).
class GgufFile;
GgufModelHeader ReadGgufModelHeader(const std::string& path);
GgufModelHeader ReadGgufModelHeader(const GgufFile& file);

// Loads the whole model, every tensor converted to float32; with WeightStorage::kAsStored, the
// matrices of types the products read (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) stay in the file's
// mapping, each checked (size, finite block scales) and refused by name when corrupt.
Model LoadGgufModel(const std::string& path, WeightStorage storage = WeightStorage::kFloat32);
Model LoadGgufModel(const GgufFile& file, WeightStorage storage = WeightStorage::kFloat32);

// What LoadGgufModel(file, WeightStorage::kAsStored) holds.
StoredWeights GgufStoredWeightBytes(const GgufFile& file);

// The vocabulary a GGUF file carries, when it is a SentencePiece one (tokenizer.ggml.model
// "llama": tokenizer.ggml.tokens, .scores), as the Tokenizer of src/io/tokenizer/tokenizer.h,
// whose encoding is the same SentencePiece BPE llama.cpp runs for these vocabularies (start from
// code points, byte fallback to "<0xXX>", merge the best-scoring adjacent pair, leftmost on ties),
// with the file's layout as llama.cpp reads it (SpmLayout): the unknown, BOS and EOS ids
// (defaults 0, 1, 2), tokenizer.ggml.add_space_prefix (default true: a leading space before the
// text), add_bos_token (default true), the token types (control tokens decode to nothing,
// user-defined ones are matched in the text first, as spelt in the file). Pieces are turned from
// SentencePiece's spelling (U+2581 for a space) into llama2.c's. So LLaMA's, Phi-3's (EOS 32000)
// and Gemma's (<pad> <eos> <bos> <unk> at 0..3, no leading space) are read. Refused by name: no
// vocabulary, another kind (byte-level BPE, tokenizer.ggml.model "gpt2":
// BpeTokenizer::FromGguf in src/io/tokenizer/bpe_tokenizer.h reads those), ids out of range.
bool GgufHasVocabulary(const std::string& path);
bool GgufHasVocabulary(const GgufFile& file);
Tokenizer ReadGgufTokenizer(const std::string& path);
Tokenizer ReadGgufTokenizer(const GgufFile& file);

// Writes `model` as a GGUF version 3 file of its family's architecture (FamilyOf: "llama", or
// "qwen2" for a model with q/k/v biases), atomically: the keys above under that prefix, the matrices in `matrix_type` (F32, F16, BF16 or Q8_0; the embedding and the
// classifier too; with Q8_0 a matrix whose rows are not a multiple of 32 long stays F32), the
// norms always in F32 (as llama.cpp's converters keep them). With a SentencePiece
// tokenizer (`tokenizer`, may be null) its vocabulary goes in as llama.cpp's SentencePiece
// vocabulary (GgufVocabularyKeys, src/io/tokenizer/gguf_vocabulary.h), which llama.cpp needs to
// load the file. Refused by name: models the format cannot express (the
// GAU block, a trained attention layout: per-layer positions or windows, norms, logit scale).
// With `method` (may be null) the file also says which position method to run, as llama.cpp
// reads it: pi:factor=F as linear scaling, yarn:factor=F as rope.scaling.type yarn with the
// model's seq_len as original_context_length and F times it as llama.context_length,
// llama3:factor=F as the per-pair divisors rope_freqs.weight; any other method, or one of these
// with keys llama.cpp does not read, is refused by name.
// With `vocabulary_keys` (may be null; not with `tokenizer`) those keys are written as they are
// (GgufTokenizerKeys: a GGUF file converted to GGUF keeps its vocabulary of any kind;
// GgufVocabularyKeys of src/io/tokenizer/gguf_vocabulary.h: a byte-level BPE vocabulary).
struct Method;
void SaveGgufModel(const Model& model, const std::string& path, uint32_t matrix_type,
                   const Tokenizer* tokenizer, const Method* method = nullptr,
                   const GgufKeys* vocabulary_keys = nullptr);

// Every tokenizer.* key of a GGUF file, as it is.
GgufKeys GgufTokenizerKeys(const GgufFile& file);

}  // namespace stretch
