// Valid binary files for the fuzz targets' seed corpora, made with the project's own writers
// (llama2.c, safetensors, stretch checkpoints, GGUF, Hugging Face folders, tokenizers, token
// caches): written into the build folder when fuzzing starts, so that no binary is committed and
// the seeds always follow the current formats.
#pragma once

#include <string>

#include "src/io/tokenizer/tokenizer.h"

namespace stretch::fuzz {

// The vocabularies the seeds are made with, for targets that need fixed tokenizers: 40 pieces
// (<unk> <s> </s>, characters, a few merges; no byte pieces), and 300 pieces laid out as LLaMA's
// SentencePiece vocabulary (<unk> <s> </s>, the 256 byte pieces, characters, merges).
Tokenizer TinyFuzzTokenizer();
Tokenizer RichFuzzTokenizer();
// A GPT-2 style byte-level BPE tokenizer.json (256 byte pieces, a few merges, <|endoftext|>).
std::string BpeFuzzTokenizerJson();
// The tokenizer.json layouts of current model families on small vocabularies, with the keys their
// real files carry: Llama 3 (Split with its pattern, then ByteLevel without regex; ignore_merges;
// a non-special added token), Qwen 2 / 3 (NFC normalizer, Split with Qwen's pattern, merges as
// pairs) and Gemma 3 (spaces replaced by U+2581, byte fallback, <0xXX> pieces, no pre-tokenizer
// of its own but a Split on spaces, a Replace / ByteFallback / Fuse decoder).
enum class FuzzJsonFamily { kLlama3, kQwen2, kGemma3 };
std::string FamilyFuzzTokenizerJson(FuzzJsonFamily family);

// Writes root/<target>/<seed> for every target that has binary seeds; returns the number of
// files written. Throws what a writer throws (a seed the project cannot write is a bug).
int WriteFuzzSeeds(const std::string& root);

}  // namespace stretch::fuzz
