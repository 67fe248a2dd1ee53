// The llama2.c tokenizer file (tok512.bin, tokenizer.bin): int32 max_token_length, then for each
// token: float32 merge score, int32 byte length, the bytes. Ids 0/1/2 are <unk>/<s>/</s>; byte
// fallback tokens "<0x00>".."<0xFF>" follow when the vocabulary has them (ids 3..258 in LLaMA's).
//
// Encoding is SentencePiece BPE as llama2.c runs it: a dummy-prefix space before non-empty text,
// each UTF-8 code point looked up (unknown ones fall back to their bytes' tokens), then repeatedly
// merge the adjacent pair whose concatenation is a vocabulary entry with the highest score (the
// leftmost one on ties) until none is left. The output is identical to run.c's encode(), which
// rescans all pairs after each merge (O(n^2)); this runs in O(n log n) (see tokenizer.cc), fast
// enough for a whole book in one call. Where run.c reads text as a C string, a NUL byte here is
// encoded like any other byte.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stretch {

// Special tokens (spelling, id) in the order a prompt's text is searched for them (llama.cpp's
// tokenizer_st_partition): longer spellings first, then by id; empty spellings dropped.
void SortSpecialTokens(std::vector<std::pair<std::string, int>>& specials);

class Tokenizer {
 public:
  static constexpr int kUnk = 0;
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;

  // Reads a llama2.c tokenizer file; the vocabulary size is the number of records in the file.
  // Throws stretch::Error (file, field, found, expected) on a truncated or malformed file.
  static Tokenizer LoadLlama2c(const std::string& path);
  // The same tokenizer from a vocabulary held elsewhere (a GGUF file's, src/io/gguf_model.h), in
  // llama2.c's spelling (a space is ' ', ids 0/1/2 are <unk>/<s>/</s>); `source` names it in
  // messages and as path().
  static Tokenizer FromVocabulary(std::string source, std::vector<std::string> pieces,
                                  std::vector<float> scores);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  const std::string& path() const { return path_; }

  // Text -> ids. bos/eos add <s> / </s>.
  std::vector<int> Encode(std::string_view text, bool bos, bool eos) const;

  // The text of one token that follows `prev` (as llama2.c's decode: the leading space of the first
  // piece after BOS is dropped, "<0xAB>" becomes the raw byte, <s> and </s> give "").
  std::string DecodeToken(int prev, int token) const;
  // Ids -> text, concatenating DecodeToken over the sequence.
  std::string Decode(std::span<const int> ids) const;

  const std::string& Piece(int id) const { return pieces_.at(static_cast<size_t>(id)); }
  float Score(int id) const { return scores_.at(static_cast<size_t>(id)); }

  // The tokens a prompt may spell when special tokens are parsed (TextTokenizer::
  // EncodePromptParsingSpecial), as llama.cpp finds them: "<unk>", "<s>" and "</s>" at 0, 1, 2 (the
  // token types llama.cpp's convert-llama2c gives them), or, set from a GGUF file's
  // tokenizer.ggml.token_type, its unknown, control and user-defined tokens.
  const std::vector<std::pair<std::string, int>>& special_tokens() const { return special_; }
  void SetSpecialTokens(std::vector<std::pair<std::string, int>> special);

 private:
  std::string path_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> piece_to_id_;
  int byte_token_[256] = {};         // id of "<0xXX>", or -1 when the vocabulary has none
  std::vector<int16_t> piece_byte_;  // per id: the byte of a "<0xXX>" piece, or -1
  int one_byte_piece_[256] = {};     // id of the one-byte piece "\xXX", or -1 (a fast path)
  std::vector<std::pair<std::string, int>> special_;  // special_tokens(), longest first
  // Every merge the vocabulary allows: (left id << 32 | right id) -> id of the concatenated
  // piece, for concatenations that are pieces scored above llama2.c's -1e10 floor.
  std::unordered_map<uint64_t, int> merges_;
  std::vector<uint8_t> mergeable_;  // per id: 1 when the id is a side of some entry of merges_

  // The id of `piece`, or -1; `scratch` is reused across calls to avoid allocations.
  int Lookup(std::string_view piece, std::string& scratch) const;
  // Runs the greedy merges on one run of mergeable symbols and appends the result to `out`.
  struct MergeState;  // buffers reused from run to run (tokenizer.cc)
  void MergeRun(std::span<const int> run, MergeState& state, std::vector<int>& out) const;
};

// Throws stretch::Error when the tokenizer's vocabulary size differs from the model's, naming both
// files and both sizes.
void CheckVocabMatches(const std::string& model_path, int model_vocab, const Tokenizer& tokenizer);

// True when `head` (the first bytes of a file) reads as the start of a llama2.c tokenizer file: a
// max_token_length in 1..65536, then records whose lengths stay within it. For telling file kinds
// apart by content (src/io/model_file.cc); a random file passes with odds about 1 in 65536.
bool LooksLikeLlama2cTokenizer(std::string_view head);

}  // namespace stretch
