// The token cache: a corpus tokenized once, stored with what it was made from, so that a training
// run reuses it instead of tokenizing (and training a tokenizer) again.
//
// File layout, version 1. Every integer is little-endian; offsets after the first strings depend
// on their lengths.
//
//   size     field
//   4        magic: the bytes "STKC" ("stretch token cache")
//   4        u32 version = 1
//   4        u32 vocab_size, 1..2^24
//   4        u32 token_bytes: 2 (uint16 tokens) when vocab_size <= 65536, else 4 (uint32)
//   4 + n    u32 n, n bytes: corpus (what was tokenized: files, sizes, mtimes, split rule)
//   4 + n    u32 n, n bytes: recipe (how the tokenizer was made, or "given")
//   4 + n    u32 n <= 64, n bytes: tokenizer_kind (e.g. "bytes", "sentencepiece")
//   4 + n    u32 n, n bytes: tokenizer_model (the tokenizer's serialized form; may be empty)
//   8        u64 n_documents
//   8 x D    u64 token count of each document
//   w x N    the tokens, all documents concatenated, w = token_bytes, N = the counts' sum
//   8        u64 checksum: FNV-1a 64 of every byte before it
//
// The file's size must be exactly what these fields imply. The strings are opaque here: src/train
// writes and compares them (see src/train/data.h for the rule that decides when a cache is reused).
// Documents are stored as the tokenizer encoded them, without BOS; the dataset adds BOS on load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stretch {

inline constexpr uint32_t kTokenCacheVersion = 1;
inline constexpr int32_t kTokenCacheMaxVocab = 1 << 24;
inline constexpr int64_t kTokenCacheMaxKindBytes = 64;

// Everything in a cache file but the tokens.
struct TokenCacheMeta {
  int32_t vocab_size = 0;
  std::string corpus;               // what was tokenized (opaque bytes, compared by src/train)
  std::string recipe;               // how the tokenizer was made (opaque bytes)
  std::string tokenizer_kind;       // at most 64 bytes
  std::string tokenizer_model;      // the tokenizer's serialized form
  std::vector<int64_t> doc_tokens;  // per document: its number of tokens

  int64_t n_tokens() const;  // the sum of doc_tokens
};

struct TokenCache {
  TokenCacheMeta meta;
  std::vector<int32_t> tokens;  // (n_tokens) every document's tokens, concatenated, in order
};

// 2 when vocab_size <= 65536 (uint16 tokens), else 4.
int TokenCacheTokenBytes(int32_t vocab_size);

// The version of the token cache at `path`, or nullopt when the file does not begin with the magic
// "STKC" (not a token cache, or shorter than 8 bytes). Throws stretch::Error when the file cannot
// be opened. Lets a caller tell "a cache of another version" (rebuild it) from "some other file"
// (leave it alone).
std::optional<uint32_t> PeekTokenCacheVersion(const std::string& path);

// Reads and validates everything up to the tokens: magic, version, vocab size, token width, the
// strings and the document counts, and that the file's size is exactly what they imply. Nothing is
// allocated from a count before the count is bounded by the bytes left in the file. Throws
// stretch::Error naming the file, the field, what was found and what was expected.
TokenCacheMeta ReadTokenCacheMeta(const std::string& path);

// Reads a whole cache: everything ReadTokenCacheMeta checks, then every token (< vocab_size) and
// the checksum.
TokenCache ReadTokenCache(const std::string& path);

// Throws stretch::Error unless the cache at `path` (whose meta is `meta`) was made with the
// tokenizer (kind, model): the message names both tokenizers by kind, model size and FNV-1a hash.
void RequireTokenCacheTokenizer(const std::string& path, const TokenCacheMeta& meta,
                                std::string_view kind, std::string_view model);

// Writes `cache` atomically (AtomicFile, src/io/output_file.h), so `path` holds either the old file
// or the complete new one. Throws stretch::Error when the file cannot be written. A cache whose
// counts do not add up to its tokens, or with a token outside the vocabulary, is a programming
// error (STRETCH_CHECK).
void WriteTokenCache(const std::string& path, const TokenCache& cache);

// FNV-1a 64 of `bytes` continuing from `hash` (start with kFnvOffset): the cache's checksum, and a
// short fingerprint of a tokenizer in messages.
inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
uint64_t Fnv1a64(std::string_view bytes, uint64_t hash = kFnvOffset);

}  // namespace stretch
