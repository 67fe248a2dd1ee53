// The conformance pack (issue 42): for each model family, a tiny random-weight model written as a
// GGUF file and as a Hugging Face folder, with and without the RoPE scalings the family's files
// can state, a fixed token stream, and the per-token log-probabilities stretch computes from each
// file. Another engine checks itself against it by loading the files, scoring the stream and
// comparing; `stretch conformance --check DIR` does it for stretch (a build checked against the
// pack of another build, or of another machine).
//
// Layout of DIR:
//   tokens.json           {"tokens": [ids...]}: the stream, BOS (1) first, every id of the
//                         vocabulary below
//   CASE/model.gguf       the model, its scaling in the file's keys (as llama.cpp's converters
//                         write them), a vocabulary of <unk>, <s>, </s>, the space and the 256
//                         byte tokens <0x00>..<0xFF> (so that llama.cpp loads it)
//   CASE/hf/              the same model as a transformers folder (config.json's rope_scaling,
//                         model.safetensors, tokenizer.model / tokenizer.json)
//   CASE/logprobs.json    {"case", "family", "architecture", "method" (the file's, canonical),
//                         "ctx", "logprob": [log p(token t+1 | tokens 0..t) for t = 0..n-2],
//                         "gguf_hf_max_abs_diff"}: the GGUF file's, in nats, float64 text
//   text.txt              plain ASCII text, for tools that score text instead of token ids
//   README.md             this layout, in words
// The stream is 4 times the models' trained length, so a scaling is exercised beyond it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stretch {

struct ConformanceCase {
  std::string name;    // "qwen3-yarn": the folder
  std::string family;  // src/model/families/ name
  std::string method;  // spec written to the files; "" plain RoPE
  int64_t window = 0;  // a sliding window on every layer (Mistral)
};

// The pack's cases: every family plain, and with each scaling its files carry.
std::vector<ConformanceCase> ConformanceCases();

struct ConformanceOptions {
  std::string out;       // DIR (created; must not hold a pack already)
  int64_t tokens = 512;  // the stream's length
  uint64_t seed = 1;
};

// Writes the pack; returns the cases written. Each case's GGUF and HF files are read back and
// scored both: their log-probabilities must agree (to 1e-4 nats: the same float32 weights; GGUF
// holds per-pair RoPE factors as float32, config.json as decimals) or
// nothing more is written and Error is thrown.
std::vector<ConformanceCase> WriteConformancePack(const ConformanceOptions& o);

// Scores each case's files in `dir` again and compares with its logprobs.json; returns one line
// per disagreement larger than `tolerance` nats (empty: the build conforms), naming the case, the
// file, the position and both values.
std::vector<std::string> CheckConformancePack(const std::string& dir, double tolerance);

}  // namespace stretch
