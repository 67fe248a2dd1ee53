// One interface for the tokenizer that comes with a model, whatever its file: llama2.c's
// tokenizer.bin (here), or the one a stretch checkpoint carries (bytes or SentencePiece;
// src/io/stretch_checkpoint.h). Commands that read or write text (score --data, generate) use
// only this.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
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
};

// llama2.c's tokenizer: BOS and EOS are llama2.c's 1 and 2; a token's text follows llama2.c's
// decode (DecodeToken(prev, token)).
std::unique_ptr<TextTokenizer> MakeLlama2cTextTokenizer(Tokenizer tokenizer);

}  // namespace stretch
