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

// llama.cpp's llama_token_type, as GGUF files store it per token (tokenizer.ggml.token_type).
enum class SpmTokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <s>, </s>, Gemma's <bos>: decodes to nothing
  kUserDefined = 4,  // matched in the text before the merges, always (llama.cpp's partition)
  kUnused = 5,
  kByte = 6,  // "<0xAB>": the byte fallback
};

// What a SentencePiece vocabulary says besides its pieces and scores, as llama.cpp reads it from
// a GGUF file (llama_vocab::impl::load for type SPM: special ids, tokenizer.ggml.add_space_prefix,
// add_bos_token, token types). The defaults are llama2.c's layout: <unk>, <s>, </s> at 0, 1, 2, a
// leading space before the text, BOS first, the types llama.cpp's convert-llama2c gives.
struct SpmLayout {
  int unk = 0;
  int bos = 1;
  int eos = 2;  // -1: none
  bool add_space_prefix = true;
  bool add_bos = true;
  // One per token, or empty for llama2.c's: 2 for unk, 3 for bos, eos and empty pieces, 6 for
  // "<0xXX>", 1 otherwise.
  std::vector<SpmTokenType> types;
  // The text each user-defined token matches, as the file spells it (llama.cpp matches the
  // spelling, where its pieces spell a space "▁"); empty: each one's piece.
  std::vector<std::pair<std::string, int>> matched;
  // The control and unknown tokens as the file spells them, for prompts that parse special tokens;
  // empty: their pieces.
  std::vector<std::pair<std::string, int>> special_spelling;
  // Tokens after which whitespace is dropped when the text is cut at them (llama.cpp's RSTRIP
  // attribute: Phi-3's special tokens but <unk>, <s>, <|endoftext|>).
  std::vector<int> rstrip;
};

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
  // With `layout`: a GGUF file's (src/io/gguf_model.h's ReadGgufTokenizer).
  static Tokenizer FromVocabulary(std::string source, std::vector<std::string> pieces,
                                  std::vector<float> scores, SpmLayout layout = {});

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  const std::string& path() const { return path_; }
  int unk() const { return layout_.unk; }
  int bos() const { return layout_.bos; }
  int eos() const { return layout_.eos; }  // -1: none
  bool add_space_prefix() const { return layout_.add_space_prefix; }
  bool add_bos() const { return layout_.add_bos; }
  SpmTokenType Type(int id) const { return layout_.types.at(static_cast<size_t>(id)); }
  // True for llama2.c's layout (SpmLayout's ids and flags, the token types it implies, no
  // RSTRIP): what the SentencePiece-model and LLaMA tokenizer.json writers can hold.
  bool Llama2cLayout() const { return llama2c_layout_; }

  // Text -> ids. bos/eos add bos() / eos(). The text is cut at user-defined tokens first (each one
  // its id); every other part gets a leading space when add_space_prefix(), as llama.cpp prefixes
  // a piece of text that starts the text or follows a token.
  std::vector<int> Encode(std::string_view text, bool bos, bool eos) const;

  // The text of one token that follows `prev` (as llama2.c's decode: the leading space of the first
  // piece after BOS is dropped when add_space_prefix(), "<0xAB>" becomes the raw byte, control
  // tokens (<s> and </s>) give "").
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
  // The user-defined tokens as the text each matches, longest first.
  const std::vector<std::pair<std::string, int>>& user_defined() const { return user_defined_; }
  // SpmLayout::rstrip, sorted.
  const std::vector<int>& rstrip() const { return layout_.rstrip; }

 private:
  std::string path_;
  SpmLayout layout_;  // types always filled, one per piece
  bool llama2c_layout_ = true;
  std::vector<std::pair<std::string, int>> user_defined_;  // matched in Encode, longest first
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
  // Encode of text without user-defined tokens (the leading space included by the caller).
  void EncodePart(std::string_view text, std::vector<int>& out) const;
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
