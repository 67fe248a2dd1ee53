#include "src/io/tokenizer/text_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/shared.h"

namespace stretch {
namespace {

// llama2.c's tokenizer behind the one text interface: the same ids and text as the Tokenizer it
// wraps (BOS 1, EOS 2; a prompt is BOS then the text; tokens decoded as llama2.c decodes them).
TEST(TextTokenizer, Llama2cIsTheTokenizerItWraps) {
  const std::string path = testing::SharedPath("models/stories260K/tok512.bin");
  STRETCH_SKIP_IF_MISSING(path);
  const Tokenizer plain = Tokenizer::LoadLlama2c(path);
  const std::unique_ptr<TextTokenizer> t = MakeLlama2cTextTokenizer(Tokenizer::LoadLlama2c(path));
  EXPECT_EQ(t->Name(), path);
  EXPECT_EQ(t->vocab_size(), 512);
  EXPECT_EQ(t->bos(), Tokenizer::kBos);
  EXPECT_EQ(t->eos(), Tokenizer::kEos);
  const std::string text = "Once upon a time, there was a little dog.";
  const std::vector<int> prompt = t->EncodePrompt(text);
  EXPECT_EQ(prompt, plain.Encode(text, /*bos=*/true, /*eos=*/false));
  ASSERT_GT(prompt.size(), 3u);
  // Decoding the prompt's tokens after its first one, one at a time, gives the text back.
  const std::unique_ptr<TokenTextDecoder> d = t->Decoder(std::span<const int>(prompt).first(1));
  std::string out;
  int prev = prompt[0];
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::string piece = d->Next(prompt[i]);
    EXPECT_EQ(piece, plain.DecodeToken(prev, prompt[i]));
    prev = prompt[i];
    out += piece;
  }
  out += d->Finish();
  EXPECT_EQ(out, text);
  EXPECT_FALSE(t->ProtocolText().empty());
}

}  // namespace
}  // namespace stretch
