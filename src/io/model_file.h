// One entry point for every model file stretch reads, told apart by content, not by name:
//   a llama2.c checkpoint (legacy or version 1 export; its tokenizer is a separate llama2.c
//     tokenizer file, tokenizer_path),
//   a stretch checkpoint (safetensors written by `stretch train`; it carries its own tokenizer,
//     so tokenizer_path must be empty),
//   a training run's directory (its newest complete checkpoint, NewestCheckpointIn),
//   a GGUF file of a family's architecture, "llama" or "qwen2" (src/io/gguf_model.h; told by
//     its magic; its tokenizer is the vocabulary it carries: SentencePiece, or byte-level BPE
//     (src/io/tokenizer/bpe_tokenizer.h); or a llama2.c tokenizer file given in tokenizer_path,
//     which then takes precedence),
//   a Hugging Face folder (src/io/hf_model.h: config.json of LlamaForCausalLM,
//     MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or Phi3ForCausalLM and its safetensors; its tokenizer
//     is the folder's tokenizer.model or
//     tokenizer.json, or the file given in tokenizer_path; config.json's rope_scaling is the
//     method it asks for).
// The tokenizer comes back behind the one text interface (src/io/tokenizer/text_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/io/tokenizer/text_tokenizer.h"
#include "src/model/config.h"

namespace stretch {

// What a model file says about itself, from its header alone.
struct ModelFileHeader {
  std::string path;    // the file (a directory resolved to its newest checkpoint)
  std::string format;  // "llama2.c legacy", "llama2.c version 1", "stretch checkpoint",
                       // "GGUF version 3 (llama, F32)"
  ModelConfig config;  // with the attention layout for a checkpoint
  bool checkpoint = false;
  int64_t step = 0;            // checkpoints: the training step
  std::string tokenizer_kind;  // checkpoints: "bytes", "sentencepiece" or ""
  // The file carries its own tokenizer or vocabulary (a stretch checkpoint, a GGUF file with
  // tokenizer.ggml.tokens): text can be given without a tokenizer file.
  bool own_tokenizer = false;
  // The position method the file asks for (GGUF rope.scaling.* keys, a Hugging Face config's
  // rope_scaling): a canonical --method spec, "" for plain RoPE; what in the file says so. The
  // commands run it unless the user selects a method.
  std::string method_spec;
  std::string method_source;
  // Where each setting came from, one line each ("dim 288 <- llama.embedding_length"); empty for
  // formats whose header is the config itself (llama.c, stretch checkpoints).
  std::vector<std::string> provenance;
  // The bytes the model's weights take when loaded with WeightStorage::kAsStored: a GGUF file's
  // matrices of the types the products read, and a Hugging Face folder's F16 and BF16 ones, in
  // their own size, everything else as float32; 0 for the formats that always load as float32.
  int64_t stored_weight_bytes = 0;
  // The types of those matrices, "Q4_K, Q6_K" ("" when none is kept).
  std::string stored_types;
};

// `notes` (optional) receives a line for each newer checkpoint of a directory passed over, with
// the reason. Throws stretch::Error naming the file, the field, what was found and expected.
ModelFileHeader ReadModelFileHeader(const std::string& model,
                                    std::vector<std::string>* notes = nullptr);

struct ModelFileOptions {
  // A tokenizer file for a llama2.c or GGUF model (LoadTokenizerFile; its vocabulary must equal
  // the model's); refused with a stretch checkpoint, which has its own. Empty: none.
  std::string tokenizer_path;
  // The caller turns text into tokens: a model without a tokenizer is then an error.
  bool tokenizer_needed = false;
  // How a GGUF file's or a Hugging Face folder's matrices are held (src/model/config.h); other
  // formats load as float32.
  WeightStorage storage = WeightStorage::kFloat32;
};

struct LoadedModel {
  ModelFileHeader header;
  Model model;
  // The llama2.c tokenizer file's, or the checkpoint's own; null when there is none (a llama2.c
  // model without tokenizer_path, a checkpoint that carries none) and none was needed.
  std::unique_ptr<TextTokenizer> tokenizer;
};
LoadedModel LoadModelFile(const std::string& model, const ModelFileOptions& options,
                          std::vector<std::string>* notes = nullptr);
// Only the tokenizer LoadModelFile would give (tokenizer_needed), without the weights where the
// format allows: a GGUF file's vocabulary, a Hugging Face folder's tokenizer file, or
// `tokenizer_path`, checked against the vocabulary size in the model's header. A llama2.c model
// or a stretch checkpoint is loaded whole (they are small).
std::unique_ptr<TextTokenizer> LoadModelTokenizer(const std::string& model,
                                                  const std::string& tokenizer_path);

// A tokenizer file, told by content: a SentencePiece model (tokenizer.model, through
// libsentencepiece: src/io/tokenizer/spm_model.h), a Hugging Face tokenizer.json of LLaMA's kind
// (SentencePiece BPE as transformers converts it: src/io/tokenizer/hf_tokenizer_json.h) or of byte-level
// BPE (src/io/tokenizer/bpe_tokenizer.h), else a llama2.c tokenizer (tok512.bin, tokenizer.bin). Throws
// stretch::Error when its vocabulary size is not `model_vocab` (naming both files).
std::unique_ptr<TextTokenizer> LoadTokenizerFile(const std::string& path,
                                                 const std::string& model_path, int model_vocab);

}  // namespace stretch
