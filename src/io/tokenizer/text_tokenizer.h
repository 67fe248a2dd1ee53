// One interface for the tokenizer that comes with a model, whatever its file: llama2.c's
// tokenizer.bin (here), or the one a stretch checkpoint carries (bytes or SentencePiece;
// src/io/stretch_checkpoint.h). Commands that read or write text (score --data, generate) use
// only this.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"

namespace stretch {

// Turns generated tokens into text as they come (each call returns the new text).
class TokenTextDecoder {
 public:
  virtual ~TokenTextDecoder() = default;
  virtual std::string Next(int token) = 0;
  virtual std::string Finish() = 0;  // whatever was held back
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // For reports: the file, or "the checkpoint's bytes tokenizer (vocabulary 259)".
  virtual std::string Name() const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos() const = 0;
  virtual int eos() const = 0;  // -1 when the tokenizer has none
  // BOS when the tokenizer adds one (every SentencePiece one does; a GPT-2 vocabulary when its
  // file says so), then the text's tokens (what generation starts from).
  virtual std::vector<int> EncodePrompt(std::string_view text) const = 0;
  // A text file or a directory of *.txt files as one token stream (no BOS/EOS inside).
  virtual TextStream EncodeText(const std::string& path) const = 0;
  // How EncodeText turns text into tokens, for reports.
  virtual std::string ProtocolText() const = 0;
  // A decoder for the tokens that follow `prompt` (the tokenizer outlives it).
  virtual std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int> prompt) const = 0;
  // EncodePrompt with special tokens parsed, as llama.cpp encodes a prompt for llama-completion
  // and llama-tokenize (llama_vocab::tokenize with parse_special; its tokenizer_st_partition):
  // every place the text spells one of SpecialTokens() is that token, the longer spellings
  // claimed first, and the text between them is encoded piece by piece (a SentencePiece
  // vocabulary's dummy prefix before each piece, as llama.cpp prefixes a piece that follows a
  // special token). BOS first as EncodePrompt puts it. "<s>Hi" -> [BOS, BOS, ...]: the text's own
  // BOS is kept, as llama.cpp keeps it (with a warning). Default: EncodePrompt.
  virtual std::vector<int> EncodePromptParsingSpecial(std::string_view text) const {
    return EncodePrompt(text);
  }
  // The tokens EncodePromptParsingSpecial finds by their spelling (llama.cpp's control, unknown
  // and user-defined tokens; Hugging Face's added tokens), longest spelling first; empty for a
  // tokenizer without any (llama2.c's).
  virtual std::vector<std::pair<std::string, int>> SpecialTokens() const { return {}; }
  // The ids of the tokens whose spelling in the vocabulary (as a GGUF file lists it: a byte-level
  // BPE piece in its byte-level spelling, an added token as its text) satisfies `match`, in id
  // order. Default: among SpecialTokens().
  virtual std::vector<int> TokensSpelled(const std::function<bool(std::string_view)>& match) const;
};

// The tokens at which generation ends, as llama.cpp decides them (llama_vocab::is_eog; its
// list in llama-vocab.cpp d32676d, llama_vocab::impl::load): EOS and every token whose spelling
// EndsGenerationToLlamaCpp (src/io/tokenizer/gguf_vocabulary.h; normal tokens too, as llama.cpp
// finds Qwen's "</s>", a plain BPE piece, and makes it end generation),
// less llama.cpp's two exceptions: <|end|> where the vocabulary also has <|return|> and <|call|>
// (or <|calls|> and <|flush|>), and </s> where it has <|tool_response>. Sorted, no repeats.
// Where stretch departs from it: llama.cpp also adds the ids of a GGUF file's
// tokenizer.ggml.eot_token_id, eom_token_id and fim_pad / fim_rep / fim_sep_token_id keys, which
// stretch does not read (in the files seen they name one of these tokens); and of the FIM pad,
// repository and separator names it takes one token of each kind (the first its hash map gives),
// where stretch takes every token so spelled (a vocabulary holding two of one kind, such as both
// <|fim_pad|> and [PAD], is the only case where they differ).
std::vector<int> EndOfGenerationTokens(const TextTokenizer& tokenizer);
// The body of every TokensSpelled that searches a whole vocabulary: the ids in [0, n) whose
// piece(id) satisfies `match`.
std::vector<int> IdsSpelled(int n, const std::function<std::string(int)>& piece,
                            const std::function<bool(std::string_view)>& match);

// A prompt cut at its special tokens (TextTokenizer::EncodePromptParsingSpecial): the pieces of
// text between them (id -1) and the tokens (their id), in order; no empty piece. `specials`:
// spelling and id, claimed in the order given (SortSpecialTokens' in tokenizer.h).
struct PromptPart {
  std::string_view text;
  int id = -1;
};
// `rstrip`: the sorted ids of tokens after which whitespace is dropped (llama.cpp's RSTRIP
// attribute, which it gives Phi-3's special tokens).
std::vector<PromptPart> SplitAtSpecialTokens(
    std::string_view text, const std::vector<std::pair<std::string, int>>& specials,
    const std::vector<int>& rstrip = {});
// `ids` (BOS, or nothing) then text cut at `specials`: each token's id, each piece of text as
// encode(piece) gives it. The body of every EncodePromptParsingSpecial.
std::vector<int> EncodeAtSpecialTokens(
    std::string_view text, const std::vector<std::pair<std::string, int>>& specials,
    std::vector<int> ids, const std::function<std::vector<int>(std::string_view)>& encode,
    const std::vector<int>& rstrip = {});

// A SentencePiece vocabulary run by score (src/io/tokenizer/tokenizer.h: llama2.c's, or a GGUF
// file's with its own layout): BOS and EOS are the vocabulary's, prompts begin with BOS when
// add_bos(); a token's text follows DecodeToken(prev, token).
std::unique_ptr<TextTokenizer> MakeLlama2cTextTokenizer(Tokenizer tokenizer);

}  // namespace stretch
