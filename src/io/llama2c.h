// llama2.c checkpoints (Karpathy, MIT): the legacy format and the "version 1" float32 export.
//
// Legacy: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
//   seq_len), then float32 tensors: token embedding (V,C), attention RMSNorm (n_layers,C),
//   wq (n_layers,C,C), wk (n_layers,KV,C), wv (n_layers,KV,C), wo (n_layers,C,C),
//   FFN RMSNorm (n_layers,C), w1 (n_layers,F,C), w2 (n_layers,C,F), w3 (n_layers,F,C),
//   final RMSNorm (C), two unused RoPE tables (seq_len, D/2) each, then the classifier (V,C)
//   only when vocab_size was negative (the sign is the legacy in-band flag for "not shared").
// Version 1 (llama2.c export.py, version1_export): uint32 magic 0x616b3432 ("ak42"), int32
//   version 1, the same 7 int32, uint8 shared_classifier, zero padding to 256 bytes; then
//   float32: attention norms (all layers), FFN norms (all layers), final norm, token embedding,
//   wq, wk, wv, wo, w1, w2, w3 (all layers each), classifier (V,C) when not shared.
#pragma once

#include <string>

#include "src/core/error.h"
#include "src/model/config.h"

namespace stretch {

// Reads only the header: config and format name. Validates every field (see LoadLlama2c).
struct Llama2cHeader {
  ModelConfig config;
  std::string format;          // "llama2.c legacy" or "llama2.c version 1"
  int64_t expected_bytes = 0;  // the exact file size the header implies
};
Llama2cHeader ReadLlama2cHeader(const std::string& path);

// What ReadLlama2cHeader and LoadLlama2c throw when the header is valid, every field in range,
// and only the file's size differs from the one it implies (cut short, or bytes after the last
// tensor): the file is a llama2.c checkpoint, damaged, and the message says so first, whatever
// else its first bytes might look like (a cut checkpoint's small counts also read as a llama2.c
// tokenizer's records).
class Llama2cSizeError : public Error {
 public:
  using Error::Error;
};

// Loads a whole checkpoint. Every count and size is checked before anything is allocated; a
// truncated, oversized or inconsistent file throws stretch::Error naming the file, the field, what
// was found and what was expected.
Model LoadLlama2c(const std::string& path);

// Writes `model` as a llama2.c version 1 (float32) checkpoint, byte for byte the layout of
// llama2.c export.py's version1_export (llama2.c's run.c itself reads only the legacy format).
// Written atomically (AtomicFile, src/io/output_file.h): `path` never holds a partial file. Throws stretch::Error
// when the file cannot be written or the model is not a plain LLaMA model (a trained attention
// layout, the GAU block, a trained RoPE interpolation: the format cannot hold them); weights whose
// sizes differ from the config are a programming error (STRETCH_CHECK).
void SaveLlama2cVersion1(const Model& model, const std::string& path);

}  // namespace stretch
