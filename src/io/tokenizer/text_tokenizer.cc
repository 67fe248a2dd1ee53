#include "src/io/tokenizer/text_tokenizer.h"

#include <algorithm>
#include <utility>

#include "src/io/tokenizer/gguf_vocabulary.h"

namespace stretch {

std::vector<int> TextTokenizer::TokensSpelled(
    const std::function<bool(std::string_view)>& match) const {
  std::vector<int> ids;
  for (const auto& [text, id] : SpecialTokens()) {
    if (match(text)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int> IdsSpelled(int n, const std::function<std::string(int)>& piece,
                            const std::function<bool(std::string_view)>& match) {
  std::vector<int> ids;
  for (int id = 0; id < n; ++id) {
    if (match(piece(id))) ids.push_back(id);
  }
  return ids;
}

std::vector<int> EndOfGenerationTokens(const TextTokenizer& tokenizer) {
  std::vector<int> ids = tokenizer.TokensSpelled(EndsGenerationToLlamaCpp);
  if (tokenizer.eos() >= 0) ids.push_back(tokenizer.eos());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const auto spelled = [&tokenizer](std::string_view a, std::string_view b = {}) {
    return tokenizer.TokensSpelled(
        [a, b](std::string_view t) { return t == a || (!b.empty() && t == b); });
  };
  const auto drop = [&ids](const std::vector<int>& gone) {
    for (const int id : gone) ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
  };
  // gpt-oss's and Solar Open's <|end|> ends a message, not the generation.
  if (!spelled("<|call|>", "<|calls|>").empty() &&
      !(spelled("<|return|>").empty() && spelled("<|flush|>").empty())) {
    drop(spelled("<|end|>"));
  }
  if (!spelled("<|tool_response>").empty()) drop(spelled("</s>"));  // Gemma 4's </s>
  return ids;
}

std::vector<PromptPart> SplitAtSpecialTokens(
    std::string_view text, const std::vector<std::pair<std::string, int>>& specials,
    const std::vector<int>& rstrip) {
  // llama.cpp's tokenizer_st_partition: each special token in turn splits every piece of text
  // left by the ones before it at each place it occurs, left to right.
  std::vector<PromptPart> parts;
  if (!text.empty()) parts.push_back({text, -1});
  for (const auto& [spelling, id] : specials) {
    if (spelling.empty()) continue;
    const bool strip = std::binary_search(rstrip.begin(), rstrip.end(), id);
    std::vector<PromptPart> next;
    next.reserve(parts.size());
    for (const PromptPart& part : parts) {
      if (part.id >= 0) {
        next.push_back(part);
        continue;
      }
      std::string_view rest = part.text;
      for (size_t at; (at = rest.find(spelling)) != std::string_view::npos;) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({{}, id});
        rest.remove_prefix(at + spelling.size());
        if (strip) {  // C's isspace, as llama.cpp's partition strips
          while (!rest.empty() &&
                 std::string_view(" \t\n\v\f\r").find(rest[0]) != std::string_view::npos) {
            rest.remove_prefix(1);
          }
        }
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    parts = std::move(next);
  }
  return parts;
}

std::vector<int> EncodeAtSpecialTokens(
    std::string_view text, const std::vector<std::pair<std::string, int>>& specials,
    std::vector<int> ids, const std::function<std::vector<int>(std::string_view)>& encode,
    const std::vector<int>& rstrip) {
  for (const PromptPart& part : SplitAtSpecialTokens(text, specials, rstrip)) {
    if (part.id >= 0) {
      ids.push_back(part.id);
    } else {
      const std::vector<int> body = encode(part.text);
      ids.insert(ids.end(), body.begin(), body.end());
    }
  }
  return ids;
}

namespace {

class Llama2cDecoder : public TokenTextDecoder {
 public:
  Llama2cDecoder(const Tokenizer& tokenizer, int prev) : tok_(tokenizer), prev_(prev) {}
  std::string Next(int token) override {
    std::string piece = tok_.DecodeToken(prev_, token);
    prev_ = token;
    return piece;
  }
  std::string Finish() override { return ""; }

 private:
  const Tokenizer& tok_;
  int prev_;
};

class Llama2cTextTokenizer : public TextTokenizer {
 public:
  explicit Llama2cTextTokenizer(Tokenizer tokenizer) : tok_(std::move(tokenizer)) {}
  std::string Name() const override { return tok_.path(); }
  int vocab_size() const override { return tok_.vocab_size(); }
  int bos() const override { return tok_.bos(); }
  int eos() const override { return tok_.eos(); }
  std::vector<int> EncodePrompt(std::string_view text) const override {
    return tok_.Encode(text, /*bos=*/tok_.add_bos(), /*eos=*/false);
  }
  // Each piece between special tokens with its own leading space, as llama.cpp's SentencePiece
  // tokenizer prefixes a piece that starts the text or follows a special token.
  std::vector<int> EncodePromptParsingSpecial(std::string_view text) const override {
    std::vector<int> start;
    if (tok_.add_bos()) start.push_back(tok_.bos());
    return EncodeAtSpecialTokens(
        text, tok_.special_tokens(), std::move(start),
        [this](std::string_view piece) { return tok_.Encode(piece, /*bos=*/false, /*eos=*/false); },
        tok_.rstrip());
  }
  std::vector<std::pair<std::string, int>> SpecialTokens() const override {
    return tok_.special_tokens();
  }
  std::vector<int> TokensSpelled(
      const std::function<bool(std::string_view)>& match) const override {
    // A GGUF SentencePiece vocabulary's pieces are held with a space where the file has U+2581
    // (llama2.c's spelling): matched as the file spells them. llama2.c's own tokenizer.bin
    // spells spaces so; no name matched here holds one.
    return IdsSpelled(
        tok_.vocab_size(),
        [this](int id) { return ReplaceAll(tok_.Piece(id), " ", "\xe2\x96\x81"); }, match);
  }
  TextStream EncodeText(const std::string& path) const override {
    return EncodeTextPath(path, tok_);
  }
  std::string ProtocolText() const override { return TextProtocolText(); }
  std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int> prompt) const override {
    return std::make_unique<Llama2cDecoder>(tok_, prompt.empty() ? tok_.bos() : prompt.back());
  }

 private:
  Tokenizer tok_;
};

}  // namespace

std::unique_ptr<TextTokenizer> MakeLlama2cTextTokenizer(Tokenizer tokenizer) {
  return std::make_unique<Llama2cTextTokenizer>(std::move(tokenizer));
}

}  // namespace stretch
