// The tokenizers `stretch train` makes and its checkpoints carry.
//
// "bytes": ids 0..255 are the bytes, 256 is BOS, 257 is EOS (vocabulary 258), exact
// for any input. "bpe" and "unigram": SentencePiece trained in-process on the corpus (see
// TokenizerOptions), stored as its serialized model (bytes that a checkpoint can carry). They are
// exact (Decode(Encode(text)) == text) for valid UTF-8; SentencePiece replaces malformed UTF-8
// with U+FFFD, so only the bytes tokenizer round-trips arbitrary bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace stretch {

enum class TokenizerKind { kBytes, kBpe, kUnigram };

// "bytes", "bpe", "unigram"; anything else throws stretch::Error listing these.
TokenizerKind ParseTokenizerKind(std::string_view name);
std::string_view TokenizerKindName(TokenizerKind kind);

struct TokenizerOptions {
  TokenizerKind kind = TokenizerKind::kBytes;
  // SentencePiece only (bytes has 258): the vocabulary, including <unk>, <s>, </s> and the 256
  // byte-fallback pieces, so it must be well above 259.
  int vocab_size = 4096;
  // SentencePiece trains on the corpus's lines (lines over 4096 bytes cut into pieces of at most
  // 4096 at a space or a UTF-8 boundary). When they hold more bytes than this, an evenly spread
  // subset of lines is used: line i is kept when floor((i+1) f) > floor(i f), f = cap / total
  // bytes, about `max_training_bytes` in all, the same lines every time.
  int64_t max_training_bytes = int64_t{64} << 20;
  // SentencePiece training threads. The trained model is a function of the corpus and of all
  // these options, threads included.
  int threads = 1;

  // The cache key's tokenizer part, e.g. "bpe vocab_size=4096 max_training_bytes=67108864
  // threads=1 settings=1".
  std::string Recipe() const;
};

// A tokenizer for training: bytes, or a SentencePiece model. Immutable once made; copies share the
// SentencePiece processor.
class TrainingTokenizer {
 public:
  static constexpr int32_t kByteBos = 256;
  static constexpr int32_t kByteEos = 257;
  static constexpr int32_t kByteVocab = 258;

  // The bytes tokenizer.
  static TrainingTokenizer Bytes();
  // Bytes, or SentencePiece trained on `documents` with `options` (deterministic: the same
  // documents and options give the same model bytes). Throws stretch::Error when SentencePiece
  // refuses (e.g. a vocabulary too large for the text), with its message.
  static TrainingTokenizer Train(std::span<const std::string> documents,
                                 const TokenizerOptions& options);
  // From what kind() and model() returned (a checkpoint's or a cache's copy): "bytes" with an
  // empty model, or "sentencepiece" with a serialized SentencePiece ModelProto. Throws
  // stretch::Error for another kind, or a model SentencePiece cannot load or that has no BOS.
  static TrainingTokenizer Load(std::string_view kind, std::string_view model);

  std::string_view kind() const { return kind_; }      // "bytes" or "sentencepiece"
  const std::string& model() const { return model_; }  // serialized model; empty for bytes
  int32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }

  // Text -> ids, no BOS or EOS. Deterministic.
  std::vector<int32_t> Encode(std::string_view text) const;
  // Ids -> text; BOS and EOS give "". Throws stretch::Error for an id outside the vocabulary.
  std::string Decode(std::span<const int32_t> ids) const;
  // A printable form of one token: "e", "<0x0A>", "<s>", "▁the".
  std::string Piece(int32_t id) const;

 private:
  TrainingTokenizer() = default;
  std::string kind_;
  std::string model_;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> spm_;  // null for bytes
};

}  // namespace stretch
