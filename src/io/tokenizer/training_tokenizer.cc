#include "src/io/tokenizer/training_tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/io/token_cache.h"

namespace stretch {
namespace {

// Bump when the SentencePiece training settings in TrainSentencePiece change, so that caches (and
// their stored tokenizers) made with the old settings are rebuilt.
constexpr int kTokenizerSettingsVersion = 1;
// SentencePiece drops training sentences longer than its max_sentence_length (in bytes); longer
// lines are cut into pieces of at most this many bytes instead.
constexpr size_t kMaxSentenceBytes = 4096;

constexpr std::string_view kBytesKind = "bytes";
constexpr std::string_view kSentencePieceKind = "sentencepiece";

// The sentences SentencePiece trains on: the documents' non-empty lines, lines longer than
// kMaxSentenceBytes cut at a space (or else a UTF-8 boundary) into pieces that fit.
std::vector<std::string_view> TrainingLines(std::span<const std::string> documents) {
  std::vector<std::string_view> lines;
  for (const std::string& doc : documents) {
    size_t at = 0;
    while (at < doc.size()) {
      const size_t nl = std::min(doc.find('\n', at), doc.size());
      std::string_view line(doc.data() + at, nl - at);
      at = nl + 1;
      while (line.size() > kMaxSentenceBytes) {
        size_t cut = line.rfind(' ', kMaxSentenceBytes);
        if (cut == std::string_view::npos || cut == 0) {
          cut = kMaxSentenceBytes;  // no space: back up to the start of a UTF-8 character
          while (cut > kMaxSentenceBytes - 3 &&
                 (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80)
            --cut;
        }
        lines.push_back(line.substr(0, cut));
        line.remove_prefix(cut);
      }
      if (!line.empty()) lines.push_back(line);
    }
  }
  return lines;
}

class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string_view>& lines) : lines_(lines) { Load(); }
  bool done() const override { return at_ >= lines_.size(); }
  void Next() override {
    ++at_;
    Load();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void Load() {
    if (at_ < lines_.size()) value_.assign(lines_[at_]);
  }
  const std::vector<std::string_view>& lines_;
  size_t at_ = 0;
  std::string value_;
};

TrainingTokenizer TrainSentencePiece(std::span<const std::string> documents,
                                     const TokenizerOptions& options) {
  const std::string_view kind = TokenizerKindName(options.kind);
  if (options.vocab_size <= 259 || options.vocab_size > kTokenCacheMaxVocab) {
    Fail(
        "tokenizer {}: vocab_size={}: expected 260..{} (<unk>, <s>, </s> and the 256 "
        "byte-fallback pieces come first)",
        kind, options.vocab_size, kTokenCacheMaxVocab);
  }
  if (options.max_training_bytes < 1) {
    Fail("tokenizer {}: max_training_bytes={}: expected a positive number of bytes", kind,
         options.max_training_bytes);
  }
  if (options.threads < 1) {
    Fail("tokenizer {}: threads={}: expected at least 1", kind, options.threads);
  }
  std::vector<std::string_view> lines = TrainingLines(documents);
  uint64_t total = 0;
  for (std::string_view l : lines) total += l.size();
  const uint64_t cap = static_cast<uint64_t>(options.max_training_bytes);
  if (total > cap) {
    // Keep line i when floor((i+1) cap / total) > floor(i cap / total): an evenly spread fraction
    // cap / total of the lines, the same ones every time.
    std::vector<std::string_view> kept;
    for (size_t i = 0; i < lines.size(); ++i) {
      const unsigned __int128 a = static_cast<unsigned __int128>(i) * cap / total;
      const unsigned __int128 b = static_cast<unsigned __int128>(i + 1) * cap / total;
      if (b > a) kept.push_back(lines[i]);
    }
    lines = std::move(kept);
  }
  if (lines.empty()) {
    Fail("tokenizer {}: the corpus has no non-empty lines to train SentencePiece on", kind);
  }
  uint64_t used = 0;
  for (std::string_view l : lines) used += l.size();

  // Every setting is explicit, so the model depends on nothing but the text and these:
  // identity normalization and no whitespace removal make Decode(Encode(text)) == text; byte
  // fallback makes nothing unknown; no sampling or shuffling of the input (the cap above is
  // ours), so training is deterministic.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", std::string(kind)},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"split_digits", "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"hard_vocab_limit", "true"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"num_threads", std::to_string(options.threads)},
      {"minloglevel", "2"},  // errors only: SentencePiece logs every training step otherwise
  };
  LineIterator it(lines);
  std::string model;
  const sentencepiece::util::Status status =
      sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  if (!status.ok()) {
    Fail(
        "tokenizer {}: SentencePiece training with vocab_size={} on {} lines ({} bytes) "
        "failed: {}",
        kind, options.vocab_size, lines.size(), used, status.ToString());
  }
  return TrainingTokenizer::Load(kSentencePieceKind, model);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tokenizers

TokenizerKind ParseTokenizerKind(std::string_view name) {
  if (name == "bytes") return TokenizerKind::kBytes;
  if (name == "bpe") return TokenizerKind::kBpe;
  if (name == "unigram") return TokenizerKind::kUnigram;
  Fail("tokenizer \"{}\": expected bytes, bpe or unigram", name);
}

std::string_view TokenizerKindName(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kBytes: return "bytes";
    case TokenizerKind::kBpe: return "bpe";
    case TokenizerKind::kUnigram: return "unigram";
  }
  STRETCH_CHECK(false, "unknown tokenizer kind {}", static_cast<int>(kind));
  return {};
}

std::string TokenizerOptions::Recipe() const {
  if (kind == TokenizerKind::kBytes) return "bytes";
  return fmt::format("{} vocab_size={} max_training_bytes={} threads={} settings={}",
                     TokenizerKindName(kind), vocab_size, max_training_bytes, threads,
                     kTokenizerSettingsVersion);
}

TrainingTokenizer TrainingTokenizer::Bytes() {
  TrainingTokenizer t;
  t.kind_ = kBytesKind;
  t.vocab_size_ = kByteVocab;
  t.bos_id_ = kByteBos;
  t.eos_id_ = kByteEos;
  return t;
}

TrainingTokenizer TrainingTokenizer::Train(std::span<const std::string> documents,
                                           const TokenizerOptions& options) {
  if (options.kind == TokenizerKind::kBytes) return Bytes();
  return TrainSentencePiece(documents, options);
}

TrainingTokenizer TrainingTokenizer::Load(std::string_view kind, std::string_view model) {
  if (kind == kBytesKind) {
    if (!model.empty()) {
      Fail(
          "tokenizer \"bytes\": found a model of {} bytes, expected none (the bytes tokenizer "
          "has no model)",
          model.size());
    }
    return Bytes();
  }
  if (kind != kSentencePieceKind) {
    Fail("tokenizer kind \"{}\": expected \"bytes\" or \"sentencepiece\"", kind);
  }
  auto spm = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = spm->LoadFromSerializedProto(model);
  if (!status.ok()) {
    Fail("tokenizer model ({} bytes): SentencePiece cannot load it: {}", model.size(),
         status.ToString());
  }
  if (spm->bos_id() < 0) {
    Fail(
        "tokenizer model ({} bytes): the SentencePiece model has no BOS piece: expected one "
        "(documents start with BOS)",
        model.size());
  }
  TrainingTokenizer t;
  t.kind_ = kSentencePieceKind;
  t.model_ = std::string(model);
  t.vocab_size_ = spm->GetPieceSize();
  t.bos_id_ = spm->bos_id();
  t.eos_id_ = spm->eos_id();
  t.spm_ = std::move(spm);
  return t;
}

std::vector<int32_t> TrainingTokenizer::Encode(std::string_view text) const {
  if (!spm_) {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::vector<int> ids;
  const sentencepiece::util::Status status = spm_->Encode(text, &ids);
  if (!status.ok())
    Fail("SentencePiece cannot encode {} bytes: {}", text.size(), status.ToString());
  return ids;
}

std::string TrainingTokenizer::Decode(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size_) {
      Fail("token #{} = {}: outside the {} tokenizer's vocabulary, expected 0..{}", i, ids[i],
           kind_, vocab_size_ - 1);
    }
  }
  if (!spm_) {
    std::string text;
    text.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 256) text += static_cast<char>(static_cast<unsigned char>(id));
    }
    return text;
  }
  std::string text;
  const sentencepiece::util::Status status =
      spm_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) Fail("SentencePiece cannot decode {} ids: {}", ids.size(), status.ToString());
  return text;
}

std::string TrainingTokenizer::Piece(int32_t id) const {
  STRETCH_CHECK(id >= 0 && id < vocab_size_, "token {} outside vocabulary {}", id, vocab_size_);
  if (spm_) return spm_->IdToPiece(id);
  if (id == kByteBos) return "<s>";
  if (id == kByteEos) return "</s>";
  if (id > 32 && id < 127) return std::string(1, static_cast<char>(id));
  return fmt::format("<0x{:02X}>", id);
}

}  // namespace stretch
