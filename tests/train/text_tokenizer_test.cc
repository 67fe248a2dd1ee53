// A checkpoint's tokenizer behind the one text interface (src/io/tokenizer/text_tokenizer.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/io/stretch_checkpoint.h"

namespace stretch {
namespace {

TEST(CheckpointTextTokenizer, BytesPromptAndDecoding) {
  const std::unique_ptr<TextTokenizer> t = MakeCheckpointTextTokenizer(TrainingTokenizer::Bytes());
  EXPECT_EQ(t->vocab_size(), 258);
  EXPECT_EQ(t->bos(), 256);
  EXPECT_EQ(t->eos(), 257);
  EXPECT_NE(t->Name().find("bytes"), std::string::npos) << t->Name();
  const std::vector<int> prompt = t->EncodePrompt("hi");
  EXPECT_EQ(prompt, (std::vector<int>{256, 'h', 'i'}));
  EXPECT_EQ(t->EncodePrompt(""), std::vector<int>{256});
  // Generated tokens come back as the new text after the prompt's.
  const std::unique_ptr<TokenTextDecoder> d = t->Decoder(prompt);
  EXPECT_EQ(d->Next(' '), " ");
  EXPECT_EQ(d->Next('y'), "y");
  EXPECT_EQ(d->Finish(), "");
}

}  // namespace
}  // namespace stretch
