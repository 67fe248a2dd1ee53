// Special tokens in a prompt (TextTokenizer::EncodePromptParsingSpecial): the spellings of a
// vocabulary's control, unknown and user-defined tokens are those tokens, the longer claimed first,
// and the text between them is encoded piece by piece, as llama.cpp reads a prompt for
// llama-completion and llama-tokenize (llama_vocab::tokenize with parse_special,
// tokenizer_st_partition); without parsing, EncodePrompt gives llama.cpp's parse_special=false
// ids. The expected ids are llama.cpp's (d32676d), from
//   llama-tokenize -m ../shared/models/ggml_vocab/ggml-vocab-NAME.gguf -p TEXT --ids [--no-parse-special]
// on the vocabularies of ../shared (skipped without it).
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/tokenizer.h"
#include "tests/testing/files.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

std::vector<std::pair<std::string, int>> Sorted(std::vector<std::pair<std::string, int>> s) {
  SortSpecialTokens(s);
  return s;
}

std::vector<int> Ids(const std::vector<PromptPart>& parts) {
  std::vector<int> out;
  for (const PromptPart& p : parts) out.push_back(p.id);
  return out;
}

std::vector<std::string> Texts(const std::vector<PromptPart>& parts) {
  std::vector<std::string> out;
  for (const PromptPart& p : parts) out.emplace_back(p.id < 0 ? p.text : "#");
  return out;
}

TEST(SplitAtSpecialTokens, CutsAtEverySpellingLongestFirst) {
  const auto specials = Sorted({{"<s>", 1}, {"</s>", 2}, {"<|a", 6}, {"<|a|>", 5}, {"", 9}});
  ASSERT_EQ(specials.size(), 4u) << "an empty spelling is dropped";
  EXPECT_EQ(specials[0].first, "<|a|>");
  const auto parts = SplitAtSpecialTokens("x<|a|>y<|az<s><s>b</s>", specials);
  EXPECT_EQ(Ids(parts), (std::vector<int>{-1, 5, -1, 6, -1, 1, 1, -1, 2}));
  EXPECT_EQ(Texts(parts), (std::vector<std::string>{"x", "#", "y", "#", "z", "#", "#", "b", "#"}));
  EXPECT_TRUE(SplitAtSpecialTokens("", specials).empty());
  EXPECT_EQ(Texts(SplitAtSpecialTokens("plain", specials)), std::vector<std::string>{"plain"});
  // Without the length order "<|a" would claim "<|a|>"'s start.
  const auto unsorted = SplitAtSpecialTokens("<|a|>", {{"<|a", 6}, {"<|a|>", 5}});
  EXPECT_EQ(Ids(unsorted), (std::vector<int>{6, -1}));
}

struct Case {
  const char* text;
  std::vector<int> parsed;  // llama-tokenize's ids
  std::vector<int> plain;   // with --no-parse-special
};

void ExpectLlamaCppIds(const TextTokenizer& tok, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(tok.EncodePromptParsingSpecial(c.text), c.parsed) << c.text;
    EXPECT_EQ(tok.EncodePrompt(c.text), c.plain) << c.text;
  }
}

const char* const kHello = "Hello<s> world</s>!";
const char* const kUnk = "<unk>x<s>";
const char* const kEndOfText = " <|endoftext|>a<|endoftext|><|endoftext|> b";

// LLaMA's SentencePiece vocabulary: <unk>, <s>, </s> are special; each piece of text gets its
// leading space ("▁world" after <s>: 29871 3186).
TEST(PromptSpecialTokens, LlamaSentencePieceVocabularyAsLlamaCpp) {
  STRETCH_REQUIRE_SHARED("models/ggml_vocab/ggml-vocab-llama-spm.gguf");
  const std::string path = testing::SharedPath("models/ggml_vocab/ggml-vocab-llama-spm.gguf");
  const auto tok = MakeLlama2cTextTokenizer(ReadGgufTokenizer(path));
  const std::vector<int> eot_plain = {1,     29871, 529,   29989, 355, 974,   726,   29989,
                                      29958, 29874, 29966, 29989, 355, 974,   726,   29989,
                                      5299,  29989, 355,   974,   726, 29989, 29958, 289};
  ExpectLlamaCppIds(*tok,
                    {{kHello,
                      {1, 15043, 1, 29871, 3186, 2, 1738},
                      {1, 15043, 29966, 29879, 29958, 3186, 829, 29879, 29958, 29991}},
                     {kUnk, {1, 0, 921, 1}, {1, 529, 2960, 29958, 29916, 29966, 29879, 29958}},
                     {kEndOfText, eot_plain, eot_plain}});
}

// The GGUF file's token types say which tokens are special: its unknown (2), control (3) and
// user-defined (4) ones; a copy with one more control token has it too.
class PromptSpecialGguf : public testing::TempDirTest {
 protected:
  PromptSpecialGguf() : TempDirTest("stretch_special_") {}
};

TEST_F(PromptSpecialGguf, GgufTokenTypesSayWhichTokensAreSpecial) {
  STRETCH_REQUIRE_SHARED("models/ggml_vocab/ggml-vocab-llama-spm.gguf");
  const std::string path = testing::SharedPath("models/ggml_vocab/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(ReadGgufTokenizer(path).special_tokens(),
            (std::vector<std::pair<std::string, int>>{{"<unk>", 0}, {"</s>", 2}, {"<s>", 1}}));
  const GgufFile in = GgufFile::Open(path);
  std::vector<std::pair<std::string, GgufValue>> kv(in.metadata().begin(), in.metadata().end());
  for (auto& [key, value] : kv) {
    if (key == "tokenizer.ggml.token_type") value.array[3].i = value.array[3].u = 3;  // <0x00>
  }
  WriteGguf(Path("v.gguf"), kv, {});
  const Tokenizer t = ReadGgufTokenizer(Path("v.gguf"));
  EXPECT_EQ(t.special_tokens().front(), (std::pair<std::string, int>{"<0x00>", 3}));
  EXPECT_EQ(MakeLlama2cTextTokenizer(t)->EncodePromptParsingSpecial("a<0x00>"),
            (std::vector<int>{1, 263, 3}));
}

// GPT-2's byte-level BPE: <|endoftext|> is its one special token; no BOS; no space added.
TEST(PromptSpecialTokens, Gpt2VocabularyAsLlamaCpp) {
  STRETCH_REQUIRE_SHARED("models/ggml_vocab/ggml-vocab-gpt-2.gguf");
  const std::string path = testing::SharedPath("models/ggml_vocab/ggml-vocab-gpt-2.gguf");
  const auto tok = MakeBpeTextTokenizer(BpeTokenizer::FromGguf(path));
  const std::vector<int> hello = {15496, 27, 82, 29, 995, 3556, 82, 29, 0};
  const std::vector<int> unk = {27, 2954, 29, 87, 27, 82, 29};
  ExpectLlamaCppIds(*tok, {{kHello, hello, hello},
                           {kUnk, unk, unk},
                           {kEndOfText,
                            {220, 50256, 64, 50256, 50256, 275},
                            {1279, 91,   437, 1659, 5239, 91,  29,   64,   27, 91, 437,
                             1659, 5239, 91,  6927, 91,   437, 1659, 5239, 91, 29, 275}}});
}

// A llama2.c tokenizer has no types: <unk>, <s>, </s> at 0, 1, 2, as llama.cpp's convert-llama2c
// marks them.
TEST(PromptSpecialTokens, Llama2cVocabularyKnowsItsThreeSpecialTokens) {
  const Tokenizer t = Tokenizer::FromVocabulary("test", {"<unk>", "\n<s>\n", "\n</s>\n", " ", "a"},
                                                {0, 0, 0, 0, 0});
  const auto tok = MakeLlama2cTextTokenizer(t);
  EXPECT_EQ(tok->SpecialTokens().size(), 3u);
  EXPECT_EQ(tok->EncodePromptParsingSpecial("a</s>a"), (std::vector<int>{1, 3, 4, 2, 3, 4}));
  EXPECT_EQ(tok->EncodePromptParsingSpecial(""), std::vector<int>{1});
}

}  // namespace
}  // namespace stretch

namespace stretch {
namespace {

// The end-of-generation tokens of ../shared's llama.cpp vocabularies, as llama.cpp lists them
// (`llama-tokenize -m ggml-vocab-NAME.gguf -p hi --ids -v`, "printing all EOG tokens", d32676d):
// Phi-3's <|end|> and <|endoftext|> beside EOS.
TEST(EndOfGeneration, LlamaCppVocabulariesAsLlamaCpp) {
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"phi-3", {2, 32000, 32007}}, {"gpt-2", {50256}}, {"llama-spm", {2}}};
  for (const auto& [name, expected] : cases) {
    const std::string relative = "models/ggml_vocab/ggml-vocab-" + name + ".gguf";
    STRETCH_REQUIRE_SHARED(relative);
    const std::string path = testing::SharedPath(relative);
    const auto tok = name == "gpt-2" ? MakeBpeTextTokenizer(BpeTokenizer::FromGguf(path))
                                     : MakeLlama2cTextTokenizer(ReadGgufTokenizer(path));
    EXPECT_EQ(EndOfGenerationTokens(*tok), expected) << name;
  }
}

// llama2.c's vocabulary, and a GGUF SentencePiece one as stretch holds it (a space where the file
// has U+2581): normal tokens spelled as end-of-generation names end it, matched as the file
// spells them (DeepSeek's <｜end▁of▁sentence｜>).
TEST(EndOfGeneration, Llama2cVocabularySearchedWhole) {
  const std::string deepseek_end =
      "<\xef\xbd\x9c"
      "end of sentence\xef\xbd\x9c>";
  const Tokenizer t = Tokenizer::FromVocabulary(
      "test",
      {"<unk>", "\n<s>\n", "\n</s>\n", " ", "a", "<|im_end|>", deepseek_end, "<|im_start|>"},
      {0, 0, 0, 0, 0, 0, 0, 0});
  const auto tok = MakeLlama2cTextTokenizer(t);
  EXPECT_EQ(EndOfGenerationTokens(*tok), (std::vector<int>{2, 5, 6}));
}

// A vocabulary of given spellings, its specials those in <...> or [...], EOS given.
class Spelled : public TextTokenizer {
 public:
  Spelled(std::vector<std::string> pieces, int eos) : pieces_(std::move(pieces)), eos_(eos) {}
  std::string Name() const override { return "test"; }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos() const override { return -1; }
  int eos() const override { return eos_; }
  std::vector<int> EncodePrompt(std::string_view) const override { return {}; }
  TextStream EncodeText(const std::string&) const override { return {}; }
  std::string ProtocolText() const override { return {}; }
  std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int>) const override { return nullptr; }
  std::vector<std::pair<std::string, int>> SpecialTokens() const override {
    std::vector<std::pair<std::string, int>> s;
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i].starts_with("<") || pieces_[i].starts_with("[")) {
        s.emplace_back(pieces_[i], static_cast<int>(i));
      }
    }
    return s;
  }

 private:
  std::vector<std::string> pieces_;
  int eos_;
};

// llama.cpp's rules (llama-vocab.cpp, d32676d): the names; EOS always; <|end|> not where
// <|return|> and <|call|> (gpt-oss) or <|calls|> and <|flush|> are; </s> not beside
// <|tool_response>, even as EOS. Each case fails if its rule is left out.
TEST(EndOfGeneration, FollowsLlamaCppsNamesAndExceptions) {
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"a", "<|im_end|>", "<|im_start|>", "<eos>"}, -1)),
            (std::vector<int>{1, 3}));
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"<x>", "b", "<|end|>"}, 0)), (std::vector<int>{0, 2}));
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"<|end|>", "<|return|>", "<|call|>"}, -1)),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"<|end|>", "<|calls|>", "<|flush|>"}, -1)),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"<|end|>", "<|call|>"}, -1)), (std::vector<int>{0, 1}))
      << "<|call|> alone is no reason to drop <|end|>";
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"</s>", "<|tool_response>", "<turn|>"}, 0)),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(EndOfGenerationTokens(Spelled({"<|fim_pad|>", "<|fim_prefix|>", "<|file_sep|>"}, -1)),
            (std::vector<int>{0, 2}))
      << "the FIM pad and file separator end generation, the prefix does not";
}

}  // namespace
}  // namespace stretch
