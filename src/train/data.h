// The training data pipeline: corpus -> tokenizer -> token cache -> documents -> held-out split ->
// random training windows and fixed validation windows.
//
// Corpus. A path is a file, or a directory whose *.txt files are read in name order. A document
// is one file (a Gutenberg book), unless CorpusOptions::separator is set: then a line equal to it
// ends a document and starts the next (the line itself belongs to neither), e.g. "" to split on
// blank lines. Files are bytes; nothing needs to be UTF-8. Empty files are skipped and counted.
// The whole corpus is held in memory while it is tokenized (meant for corpora up to a few hundred
// MB, like ../shared/data).
//
// Tokenizers: src/io/tokenizer/training_tokenizer.h.
//
// Documents. Each document is its encoded text with BOS in front; documents are never joined, so
// no window crosses from one into another.
//
// The token cache (file layout in src/io/token_cache.h). LoadCorpusData reuses the cache at
// DataOptions::cache_path when
//   1. it is a token cache of the current version,
//   2. its `corpus` string equals CorpusFingerprint (every file's absolute path, size and
//      modification time in ns, and the separator): touching or editing a file rebuilds it, and
//   3. its tokenizer matches: with a tokenizer to train, the cache's recipe equals
//      TokenizerOptions::Recipe() (kind, vocabulary size, training cap, threads, and the version
//      of this file's training settings), and the tokenizer is then the one stored in the cache,
//      so SentencePiece is not trained again; with a given tokenizer (from a checkpoint), the
//      cache's tokenizer kind and model bytes equal the given one's.
// Otherwise it rebuilds the cache (corpus read, tokenizer trained, corpus encoded, file written
// atomically) and says why in CorpusData::cache_note. A file at cache_path that is not a token
// cache is never overwritten (error); a token cache of the current version that fails validation
// (truncated, corrupt) is an error that names the problem, not silently rebuilt.
//
// Random numbers. Everything random takes a stretch::Rng from the caller and keeps no state of its
// own, so a trainer that saves and restores its Rng resumes bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "src/core/rng.h"
#include "src/io/tokenizer/training_tokenizer.h"

namespace stretch {

// Tokens are int32_t here, `int` in src/model: the same type.
static_assert(std::is_same_v<int32_t, int>);

// ---------------------------------------------------------------------------------------------
// Corpus

struct CorpusOptions {
  std::string path = {};  // a file, or a directory of *.txt files (read in name order)
  // When set, a line equal to this string (compared without its '\n' and a trailing '\r') ends
  // one document and starts the next; "" splits on blank lines. Unset: one document per file.
  std::optional<std::string> separator = std::nullopt;
};

struct CorpusFile {
  std::string path;      // absolute, normalized
  int64_t size = 0;      // bytes
  int64_t mtime_ns = 0;  // modification time, ns since the epoch
};

// The files a corpus path names, with sizes and times, in reading order. Throws stretch::Error for
// a missing path or a directory without *.txt files.
std::vector<CorpusFile> ListCorpusFiles(const std::string& path);

// The cache key's corpus part: one line per file ("<path>\t<size>\t<mtime_ns>") and the split
// rule. Stats the files; reads none.
std::string CorpusFingerprint(const CorpusOptions& options);

struct Corpus {
  std::vector<CorpusFile> files;       // every file read, in order, empty ones included
  std::vector<std::string> documents;  // each document's bytes, in file order
  std::vector<int64_t> document_file;  // (documents) the index in `files` of its file
  int64_t empty_files = 0;             // files with no bytes: skipped
  int64_t empty_pieces = 0;            // empty pieces between separator lines: dropped
  int64_t bytes = 0;                   // bytes in documents
};

// Throws stretch::Error for a missing path, a directory without *.txt files, an unreadable file,
// or a corpus without a single non-empty document.
Corpus ReadCorpus(const CorpusOptions& options);

// ---------------------------------------------------------------------------------------------
// Documents

// Token documents, stored back to back. Invariant: every document starts with the BOS it was
// added with.
class TokenDocuments {
 public:
  // Appends one document: `bos`, then `body`.
  void Add(int32_t bos, std::span<const int32_t> body);

  int64_t size() const { return static_cast<int64_t>(starts_.size()) - 1; }  // documents
  int64_t n_tokens() const { return static_cast<int64_t>(tokens_.size()); }  // BOS included
  std::span<const int32_t> Document(int64_t d) const;
  std::span<const int32_t> tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  std::vector<int64_t> starts_{0};  // (size + 1): document d is tokens_[starts_[d], starts_[d+1])
};

// What identifies a tokenized corpus: its documents, its tokens (BOS included) and a 64-bit
// FNV-1a hash of every document's length and tokens. A run stores it in each checkpoint, and a
// resumed run refuses a corpus whose fingerprint differs (another corpus, or the same files
// edited), whatever the paths and dates of its files.
struct TokenFingerprint {
  int64_t documents = 0;
  int64_t tokens = 0;
  uint64_t hash = 0;
  bool operator==(const TokenFingerprint&) const = default;
  std::string Text() const;  // "4 documents, 68808 tokens, fingerprint 0123456789abcdef"
};
TokenFingerprint FingerprintOf(const TokenDocuments& documents);

struct DataOptions {
  CorpusOptions corpus;
  TokenizerOptions tokenizer;  // used when no tokenizer is given
  // Unset: no cache, the corpus is tokenized each time.
  std::optional<std::string> cache_path = std::nullopt;
  // The corpus a resumed run was trained on: another one is refused (stretch::Error naming both),
  // before the cache is written, so the run's cache stays that of its corpus.
  std::optional<TokenFingerprint> expected = std::nullopt;
};

enum class CacheUse { kNone, kReused, kBuilt };

struct CorpusData {
  TrainingTokenizer tokenizer = TrainingTokenizer::Bytes();
  TokenDocuments documents;
  std::vector<CorpusFile> files;
  int64_t empty_files = 0;  // files skipped for having no bytes
  CacheUse cache = CacheUse::kNone;
  std::string cache_note;  // why the cache was reused or rebuilt, for the log
};

// Reads and tokenizes the corpus, training the tokenizer of options.tokenizer, or reuses the cache
// (rule at the top of this file).
CorpusData LoadCorpusData(const DataOptions& options);
// The same with a given tokenizer (e.g. a checkpoint's): options.tokenizer is unused.
CorpusData LoadCorpusData(const DataOptions& options, const TrainingTokenizer& tokenizer);

// ---------------------------------------------------------------------------------------------
// Held-out split

struct SplitOptions {
  // Held-out documents: exactly `valid_documents` when set (1..n-1), else round(valid_fraction n)
  // clamped to 1..n-1, with valid_fraction in (0, 1).
  double valid_fraction = 0.1;
  std::optional<int64_t> valid_documents = std::nullopt;
  uint64_t seed = 1;  // the split is a function of (number of documents, count, seed) alone
};

struct DataSplit {
  TokenDocuments train, valid;
  std::vector<int64_t> train_ids, valid_ids;  // indices of the input documents, ascending
};

// Shuffles the document indices with Rng(seed) (Fisher-Yates) and holds out the first n_valid,
// each side then kept in corpus order. Documents are never split, but for a corpus of a single
// document (one text file, a book): its last round(valid_fraction x tokens) tokens are held out
// and the rest trains, each part with the document's BOS in front (train_ids and valid_ids are
// then both {0}). Throws stretch::Error for an empty corpus, a single document with
// valid_documents set or shorter than 3 tokens, or for a count or fraction out of range.
DataSplit SplitDocuments(const TokenDocuments& documents, const SplitOptions& options);

// ---------------------------------------------------------------------------------------------
// Windows

// Inputs are tokens [offset, offset + length) of a document, targets [offset + 1, offset + length
// + 1): a window reads length + 1 tokens, all inside the document.
struct Window {
  int64_t document = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

// Uniform over every (document, offset) where a window of seq_len + 1 tokens fits, so a document
// of n tokens is drawn with weight n - seq_len, and every window start is equally likely.
// Documents shorter than seq_len + 1 tokens are skipped (counted; no padding). Keeps a pointer to
// `documents`, which must outlive it. Throws stretch::Error for seq_len < 1, or when no document
// is long enough (naming the longest).
class WindowSampler {
 public:
  WindowSampler(const TokenDocuments& documents, int64_t seq_len);

  // Draws from `rng` only: one or more NextU64() per window (rejection sampling for an unbiased
  // index), so a restored Rng gives the same windows.
  Window Sample(Rng& rng) const;

  int64_t seq_len() const { return seq_len_; }
  int64_t n_windows() const { return window_starts_.back(); }
  int64_t skipped_documents() const { return skipped_documents_; }

 private:
  const TokenDocuments* documents_;
  int64_t seq_len_;
  std::vector<int64_t> window_starts_;  // (n_documents + 1): windows before document d
  int64_t skipped_documents_ = 0;
};

// A uniform integer in [0, n) from rng (rejection sampling, no modulo bias). n >= 1.
uint64_t UniformIndex(Rng& rng, uint64_t n);

// B windows of T = sampler.seq_len() tokens: inputs and targets (B, T), row b from windows[b].
struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
  std::vector<Window> windows;   // (B)
};
Batch SampleBatch(const TokenDocuments& documents, const WindowSampler& sampler, Rng& rng,
                  int64_t batch_size);

// Copies window w: inputs (w.length) and targets (w.length).
void CopyWindow(const TokenDocuments& documents, const Window& w, std::span<int32_t> inputs,
                std::span<int32_t> targets);

enum class TailWindow { kDrop, kKeep };

// The held-out documents in fixed, non-overlapping windows, in order: document by document,
// offsets 0, T, 2T, ... of full windows (length T). A document of n tokens has n - 1 targets; with
// kKeep the last n - 1 - T floor((n-1)/T) of them form one shorter window, so every target is
// scored exactly once; with kDrop they are not scored. Throws stretch::Error for seq_len < 1.
std::vector<Window> ValidationWindows(const TokenDocuments& documents, int64_t seq_len,
                                      TailWindow tail);

// ---------------------------------------------------------------------------------------------
// Unigram entropy

// H = -sum_v p(v) log p(v) of the empirical token distribution (the plug-in estimate), in nats and
// in bits per token: the loss of the best context-free model of these tokens, the floor a
// language model must beat.
struct Entropy {
  double nats = 0.0;
  double bits = 0.0;
  int64_t tokens = 0;    // tokens counted
  int64_t distinct = 0;  // distinct ids among them
};
// Over `tokens`; every id must be in [0, vocab_size) (STRETCH_CHECK).
Entropy UnigramEntropy(std::span<const int32_t> tokens, int32_t vocab_size);
// Over every token a model predicts: each document's tokens after its BOS.
Entropy UnigramEntropy(const TokenDocuments& documents, int32_t vocab_size);

}  // namespace stretch
