// The pre-tokenizers of byte-level BPE vocabularies: how a text is cut into pieces before BPE
// runs on each piece alone (src/io/tokenizer/bpe_tokenizer.h). Each is a regular expression that Hugging
// Face tokenizers runs with Oniguruma (a Split pre-tokenizer, behavior Isolated) and llama.cpp
// names by tokenizer.ggml.pre; each is run here as a scanner over UTF-8 code points that takes, at
// every position, the first alternative that matches, each quantifier greedy with the backtracking
// the pattern needs (the classes \p{L}, \p{N} and \s come from src/io/tokenizer/unicode_class.h).
//
//   gpt-2      GPT-2 (and every vocabulary that copied it):
//                's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama-bpe  LLaMA 3 (Meta's tiktoken pattern, tokenizer.json of Llama 3 / 3.1 / 3.2):
//                (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2      Qwen 2 / 2.5 / 3: LLaMA 3's with one digit a piece (\p{N} for \p{N}{1,3})
//
// What differs from GPT-2's, in words: contractions in any case ("'S"); a letter run takes one
// code point before it that is not a letter, a number or a line break (",world", "\tword",
// " word"); digits come in threes (LLaMA 3) or alone (Qwen); a run of punctuation keeps the line
// breaks that follow it ("!\n\n"); a run of white space up to its last line break is a piece of
// its own ("  \n" of "  \n  x"). Text that is not valid UTF-8 is split anyway: a byte that does not
// begin a valid sequence is a code point of class "other" of its own.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/io/tokenizer/unicode_class.h"

namespace stretch {

enum class BpeSplit : uint8_t { kGpt2, kLlama3, kQwen2 };

// llama.cpp's tokenizer.ggml.pre name of each: "gpt-2", "llama-bpe", "qwen2".
std::string_view BpeSplitName(BpeSplit split);
// The split of a tokenizer.ggml.pre value ("llama3" and "llama-v3" are llama.cpp's aliases of
// "llama-bpe"); nullopt for any other.
std::optional<BpeSplit> BpeSplitOfGgufPre(std::string_view pre);
// The pattern as tokenizer.json files spell it (a Split pre-tokenizer's pattern.Regex).
std::string_view BpeSplitPattern(BpeSplit split);
// The split whose pattern is exactly `regex`; nullopt for any other.
std::optional<BpeSplit> BpeSplitOfPattern(std::string_view regex);

// Calls `emit` with each piece of `text` in order: non-empty views into `text` that together are
// exactly `text`.
void ForEachBpePiece(BpeSplit split, std::string_view text,
                     const std::function<void(std::string_view)>& emit);
// The same, collected.
std::vector<std::string_view> SplitBpePieces(BpeSplit split, std::string_view text);

// One code point of UTF-8 text: its value, its length in bytes and its class.
struct Utf8CodePoint {
  char32_t cp;
  int len;
  UnicodeClass cls;
};
// The code point at s[i] (i < s.size()) under RFC 3629's rules (no overlong forms, no surrogates,
// at most U+10FFFF). A byte that does not begin a valid sequence is one "code point" of its own,
// of class kOther, so that any bytes can be split and encoded.
Utf8CodePoint DecodeUtf8At(std::string_view s, size_t i);
// Appends code point cp (at most U+10FFFF) to out in UTF-8.
void AppendUtf8(char32_t cp, std::string& out);

}  // namespace stretch
