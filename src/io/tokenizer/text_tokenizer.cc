#include "src/io/tokenizer/text_tokenizer.h"

#include <utility>

namespace stretch {
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
  int bos() const override { return Tokenizer::kBos; }
  int eos() const override { return Tokenizer::kEos; }
  std::vector<int> EncodePrompt(std::string_view text) const override {
    return tok_.Encode(text, /*bos=*/true, /*eos=*/false);
  }
  TextStream EncodeText(const std::string& path) const override {
    return EncodeTextPath(path, tok_);
  }
  std::string ProtocolText() const override { return TextProtocolText(); }
  std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int> prompt) const override {
    return std::make_unique<Llama2cDecoder>(tok_, prompt.empty() ? Tokenizer::kBos : prompt.back());
  }

 private:
  Tokenizer tok_;
};

}  // namespace

std::unique_ptr<TextTokenizer> MakeLlama2cTextTokenizer(Tokenizer tokenizer) {
  return std::make_unique<Llama2cTextTokenizer>(std::move(tokenizer));
}

}  // namespace stretch
