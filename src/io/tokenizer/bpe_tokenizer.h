// BPE tokenizers: the byte-level ones of the GPT-2 family (GPT-2, LLaMA 3, Qwen), as OpenAI's
// GPT-2 (encoder.py), Hugging Face tokenizers (ByteLevel pre-tokenizer and decoder, BPE model) and
// llama.cpp (vocabulary type "gpt2") define them, read from a GGUF file's tokenizer.ggml.* keys or
// a Hugging Face tokenizer.json; and, with BpeOptions::chars, SentencePiece-style ones from a
// tokenizer.json (Gemma 3's form, and the legacy LLaMA form of Phi-3 and Mistral v0.3; see
// BpeOptions::chars and prepend_space).
//
// Encoding, for each piece of the text:
//   1. The pre-tokenizer splits the text with the vocabulary's pattern (src/io/tokenizer/bpe_pretokenizer.h:
//      GPT-2's, LLaMA 3's "llama-bpe" or Qwen 2's), run as a scanner over UTF-8 code points. A run
//      of whitespace before a non-space keeps its last code point for the next piece: "a  b" is
//      "a", " ", " b"; at the end of the text a run stays whole. With ignore_merges (LLaMA 3) a
//      piece that is itself a token is that token, and step 3 does not run on it.
//   2. Each byte of a piece stands for one symbol, spelt as GPT-2's bytes_to_unicode spells it:
//      the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF as the code point of the same value,
//      the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) as U+0100 + n in byte order (so a
//      space is "Ġ" U+0120 and a newline "Ċ" U+010A). Every one of the 256 must be in the
//      vocabulary, so any bytes can be encoded.
//   3. BPE: among the adjacent pairs of symbols that a merge rule names, the one of lowest rank
//      (its position in the merge list) is replaced by its concatenation, the leftmost of equal
//      pairs first, until no pair has a rule (Hugging Face's BPE::merge_word, llama.cpp's
//      llm_tokenizer_bpe_session). A priority queue of candidate pairs keyed (rank, position)
//      makes this O(n log n) per piece.
// Decoding maps every symbol of a token's spelling back to its byte (a token whose spelling is not
// made of the 256 symbols decodes to its spelling as is, as Hugging Face's ByteLevel decoder does);
// control tokens (<|endoftext|>) decode to nothing. Decode(Encode(x)) == x for any bytes x.
//
// Hugging Face's non-special added tokens (Qwen's <think>, <tool_call>, ...) are matched in the raw
// text before anything else, the longest at the leftmost place, and the text between them is
// encoded as above; one with rstrip (Phi-3's </s>) takes the ASCII white space after it along.
// The normalizers read: NFC (Qwen's), and for a SentencePiece-style vocabulary Replace " " -> "▁"
// (Gemma's) or Prepend "▁" then that Replace (the legacy LLaMA form, Phi-3's and Mistral's).
//
// Not done, and refused by name where a file asks for it: other pre-tokenizer patterns, other
// normalizers, added tokens with lstrip / single_word, BPE dropout, unknown-token fallback, subword prefixes and suffixes. Special tokens are not recognised
// inside text: "<|endoftext|>" in a text file is encoded as the 13 characters it is (llama.cpp's
// parse_special=false, which its test-tokenizer-0 and llama-perplexity use; Hugging Face would give
// id 50256). A prompt can have them parsed: TextTokenizer::EncodePromptParsingSpecial.
// Text that is not valid UTF-8 is still encoded: each byte that does not start a valid sequence is
// a code point of class "other" of its own (llama.cpp throws; Hugging Face cannot be given such
// text).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/io/tokenizer/bpe_pretokenizer.h"
#include "src/io/tokenizer/text_tokenizer.h"

namespace stretch {

class GgufFile;

enum class BpeTokenKind : uint8_t {
  kNormal,   // a BPE piece: Encode can give it; decodes to its bytes
  kControl,  // <|endoftext|> and the like: never given by Encode; decodes to ""
};

// What a file says besides its pieces and merges.
struct BpeOptions {
  bool add_prefix_space = false;     // a space before a text that does not begin with one
  BpeSplit split = BpeSplit::kGpt2;  // the pre-tokenizer (src/io/tokenizer/bpe_pretokenizer.h)
  // A piece that is itself a normal token is that token, without merges (Hugging Face's BPE
  // ignore_merges, llama.cpp's for "llama-bpe"; merges alone may reach another split of it).
  bool ignore_merges = false;
  // The text is put in Unicode NFC first (src/io/tokenizer/unicode_nfc.h; a tokenizer.json normalizer
  // {"type": "NFC"}, Qwen's). Decode then gives the NFC text back, not the text given.
  bool nfc = false;
  // The symbols BPE starts from. false: bytes in GPT-2's byte-level spelling (the file's top).
  // true: SentencePiece-style, as Gemma's tokenizer.json (normalizer Replace " " -> "▁",
  // pre_tokenizer Split " " MergedWithPrevious, model.byte_fallback): spaces become "▁", the text
  // between matched tokens is one piece, each character is its own symbol when the vocabulary has
  // it, else its UTF-8 bytes as <0xXX> tokens; a piece decodes with "▁" as a space and <0xXX> as
  // its byte.
  bool chars = false;
  // With chars: "▁" before every non-empty stretch of text between matched tokens, as the legacy
  // LLaMA form of a tokenizer.json writes it (normalizer Prepend "▁" then Replace " " -> "▁";
  // Hugging Face normalizes each part of the text between added tokens on its own) and as
  // llama.cpp's add_space_prefix prefixes a part at the start or after a token (Phi-3, Mistral
  // v0.3). Decode then drops one space at the start of the decoded text (the decoder's Strip), so
  // Decode(Encode(x)) == x for a text without matched tokens.
  bool prepend_space = false;
  // Tokens matched in the raw text before anything else (Hugging Face's non-special added tokens,
  // llama.cpp's user-defined ones): their text and id, the longest first where several match.
  std::vector<std::pair<std::string, int>> matched;
  // Tokens a prompt's text may spell when special tokens are parsed
  // (TextTokenizer::EncodePromptParsingSpecial): llama.cpp's control and unknown tokens (GGUF
  // token types 3 and 2, not 5 unused), Hugging Face's special added tokens; the matched ones
  // above are added to them.
  std::vector<std::pair<std::string, int>> special;
  // The sorted ids of tokens, special or matched, that take the white space after them along
  // (Hugging Face's added token rstrip, llama.cpp's RSTRIP attribute: Phi-3's): C's isspace,
  // as llama.cpp strips; Hugging Face strips any Unicode white space (U+00A0, U+3000, ...).
  std::vector<int> rstrip;
  bool add_bos = false;  // prompts begin with bos (MakeBpeTextTokenizer's EncodePrompt)
  int bos = -1;          // -1: none
  int eos = -1;          // -1: none
  int unk = -1;  // SentencePiece-style: model.unk_token (never given: bytes fall back); -1: none
  std::vector<BpeTokenKind> kinds;  // per id; empty: all kNormal
};

// One merge rule by ids: left and right make result.
struct BpeMerge {
  int left = 0;
  int right = 0;
  int result = 0;
};

class BpeTokenizer {
 public:
  // A GGUF file's vocabulary: tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "gpt-2",
  // "llama-bpe" or "qwen2" (no NFC: llama.cpp does not normalize),
  // tokenizer.ggml.tokens (the pieces, in the byte-level spelling), tokenizer.ggml.merges ("Ġ t":
  // two pieces and one space, rank = index), tokenizer.ggml.token_type (optional: 1 normal;
  // 3 control, 2 unknown and 5 unused become kControl; 4 user-defined are matched in the text as
  // spelt, as llama.cpp matches them), tokenizer.ggml.bos_token_id and
  // eos_token_id (optional), tokenizer.ggml.add_bos_token (optional; absent means false, as
  // llama.cpp decides for the "gpt-2" pre-tokenizer). Throws stretch::Error naming the file and the
  // key for anything else.
  static BpeTokenizer FromGguf(const GgufFile& file);
  static BpeTokenizer FromGguf(const std::string& path);

  // A Hugging Face tokenizer.json: model {"type": "BPE", "vocab": {piece: id}, "merges": ["a b"]
  // or [["a", "b"]]}, pre_tokenizer ByteLevel (use_regex true; add_prefix_space either), or a
  // Sequence of a Split by GPT-2's pattern (behavior Isolated) and a ByteLevel; decoder ByteLevel;
  // normalizer null; post_processor null, ByteLevel or a TemplateProcessing whose single is
  // [$A] or [<special>, $A] (the latter sets add_bos and bos). added_tokens must be special
  // (kControl). bos/eos: tokenizer_config.json's bos_token and eos_token when that file is next
  // to this one, else the post-processor's token for bos, else "<|endoftext|>" when it is a
  // special token (GPT-2's convention: one token ends and begins documents). Throws
  // stretch::Error naming the file and the field (model.merges[12], pre_tokenizer.type, ...).
  static BpeTokenizer FromTokenizerJson(const std::string& path);

  // From parts: `pieces` in the byte-level spelling (id = index), `merges` in rank order.
  // `source` names the vocabulary in messages and as source().
  static BpeTokenizer FromVocabulary(std::string source, std::vector<std::string> pieces,
                                     const std::vector<std::pair<std::string, std::string>>& merges,
                                     BpeOptions options);

  const std::string& source() const { return source_; }
  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int merge_count() const { return static_cast<int>(merges_.size()); }
  int bos() const { return options_.bos; }
  int eos() const { return options_.eos; }
  bool add_bos() const { return options_.add_bos; }
  bool add_prefix_space() const { return options_.add_prefix_space; }
  // What the file said (kinds filled, one per id).
  const BpeOptions& options() const { return options_; }
  // The merge rules in rank order.
  std::vector<BpeMerge> Merges() const;

  // Text -> ids (no BOS/EOS; the prefix space when add_prefix_space()). "" gives no ids.
  std::vector<int> Encode(std::string_view text) const;
  // Ids -> bytes (not necessarily valid UTF-8 when the ids end inside a character).
  std::string Decode(std::span<const int> ids) const;

  // The bytes a token stands for ("" for a control token). id must be in [0, vocab_size).
  const std::string& TokenBytes(int id) const;
  // Its spelling in the file ("Ġthe").
  const std::string& Piece(int id) const;
  BpeTokenKind Kind(int id) const;
  // BpeOptions::special and matched, sorted as SplitAtSpecialTokens claims them.
  std::vector<std::pair<std::string, int>> SpecialTokens() const;

 private:
  BpeTokenizer() = default;  // only the loaders make one
  struct MergeRule {
    int32_t rank;
    int32_t id;  // the concatenation's id
  };
  struct Scratch;  // buffers reused from piece to piece (bpe_tokenizer.cc)
  void EncodePiece(std::string_view piece, Scratch& scratch, std::vector<int>& out) const;
  // BPE on the symbols in scratch.id (appends the result to out).
  void MergeSymbols(Scratch& scratch, std::vector<int>& out) const;
  // Encode of text that holds no matched token.
  std::vector<int> EncodeUnmatched(std::string_view text) const;
  // Checks the parts and builds the tables; messages name `source` and call the pieces and the
  // merges by the file's names for them (pieces_field, merges_field).
  static BpeTokenizer Build(std::string source, std::string_view pieces_field,
                            std::string_view merges_field, std::vector<std::string> pieces,
                            const std::vector<std::pair<std::string, std::string>>& merges,
                            BpeOptions options);

  std::string source_;
  BpeOptions options_;
  std::vector<std::string> pieces_;
  std::vector<std::string> bytes_;  // per id: what it decodes to
  int byte_id_[256] = {};           // the id of each byte's one-symbol piece
  // (left id << 32 | right id) -> the rule merging them.
  std::unordered_map<uint64_t, MergeRule> merges_;
  // With ignore_merges: each normal token's spelling -> its id.
  std::unordered_map<std::string, int> word_id_;
  // BpeOptions::matched by first byte: indices, the longest first.
  std::array<std::vector<uint32_t>, 256> matched_bucket_;
  // With chars: each one-character piece's id, and <0xXX>'s id for each byte.
  std::unordered_map<std::string, int> char_id_;
  int fallback_id_[256] = {};
};

// A vocabulary as the tokenizer.json and tokenizer_config.json of a Hugging Face folder, in the
// form transformers writes (its PreTrainedTokenizerFast):
//   - byte-level (Llama 3, Qwen): model BPE with the vocabulary and the merges as pairs, a
//     Sequence of a Split by the pattern (Isolated) and a ByteLevel without its regex, the
//     ByteLevel decoder, an NFC normalizer when the vocabulary has one;
//   - SentencePiece-style (BpeOptions::chars, Gemma's form): the normalizer Replace " " -> "▁",
//     the pre-tokenizer Split on " " (MergedWithPrevious), the decoder Replace "▁" -> " ",
//     ByteFallback, Fuse, model BPE with byte_fallback and fuse_unk, its unk_token, every token in
//     model.vocab; with BpeOptions::prepend_space the legacy LLaMA form instead (normalizer
//     Prepend "▁" then that Replace, no pre-tokenizer, Strip " " (1, 0) after Fuse);
//     rstrip on the added tokens of BpeOptions::rstrip;
// both with a TemplateProcessing that puts BOS first when add_bos(), the control tokens as
// special added tokens and the matched ones as non-special; tokenizer_config.json names BOS and
// EOS (and the unknown token). FromTokenizerJson reads them back to the same tokenizer. Refused
// by name: add_prefix_space.
std::string SerializeBpeTokenizerJson(const BpeTokenizer& tokenizer);
std::string SerializeBpeTokenizerConfig(const BpeTokenizer& tokenizer);
// Both files into `dir`, each written whole or not at all.
void SaveBpeTokenizerFiles(const BpeTokenizer& tokenizer, const std::string& dir);

// GPT-2's bytes_to_unicode: the code point that spells byte b.
char32_t Gpt2ByteToCodePoint(uint8_t b);

// The TextTokenizer (src/io/tokenizer/text_tokenizer.h) of a byte-level BPE vocabulary:
//   EncodePrompt: bos first only when add_bos() (llama.cpp's add_bos: false for GPT-2's GGUF
//     files unless tokenizer.ggml.add_bos_token says otherwise; Hugging Face: what the
//     post-processor adds), then the text; an empty prompt gives [bos] when there is one, as
//     OpenAI's generate_unconditional_samples.py starts GPT-2 from <|endoftext|>.
//   EncodeText: each file encoded whole (text.h's EncodeTextPath), no BOS/EOS.
//   Decoder: each token's bytes, holding back a UTF-8 sequence that the token leaves incomplete
//     until the next tokens complete it (or Finish); the concatenation of everything it returns
//     is exactly Decode(tokens).
std::unique_ptr<TextTokenizer> MakeBpeTextTokenizer(BpeTokenizer tokenizer);

// How MakeBpeTextTokenizer's EncodeText turns files into tokens, for reports.
std::string BpeTextProtocolText(bool add_prefix_space);

}  // namespace stretch
