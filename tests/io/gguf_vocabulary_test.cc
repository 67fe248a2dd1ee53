// Vocabularies in their GGUF form (src/io/tokenizer/gguf_vocabulary.h) encode as their own files
// do: Llama 3's, Qwen 3's and Gemma 3's tokenizer.json (the npm vocabularies of data/vocab) written
// as llama.cpp's converters write them and read back by stretch's GGUF readers give the same ids
// on every Gutenberg book of ../shared; GGUF SentencePiece vocabularies with their own layout
// (Phi-3's EOS 32000, Gemma's <pad> <eos> <bos> <unk> and no leading space, user-defined tokens)
// are read as llama.cpp reads them (its test vectors for Phi-3).
#include "src/io/tokenizer/gguf_vocabulary.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/tokenizer.h"
#include "tests/testing/files.h"
#include "tests/testing/sanitizer.h"
#include "tests/testing/shared.h"
#include "tests/testing/vocab_cases.h"

namespace stretch {
namespace {

using nlohmann::json;

std::string Ids(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += " " + std::to_string(id);
  return s;
}

// llama.cpp's test vectors (../shared/models/ggml_vocab: .inp holds the cases, each followed by
// "\n__ggml_vocab_test__\n"; .out one line of ids per case, no BOS).
using Cases = testing::VocabCases;
Cases ReadCases(const std::string& vocab) { return testing::ReadVocabCases(vocab); }

class GgufVocabularyTest : public testing::TempDirTest {
 protected:
  GgufVocabularyTest() : TempDirTest("stretch_gguf_vocab_") {}
  // A GGUF file holding only `keys` (and an architecture).
  std::string WriteVocabulary(const GgufKeys& keys, const std::string& name) const {
    GgufKeys kv = {{"general.architecture", GgufString("llama")}};
    kv.insert(kv.end(), keys.begin(), keys.end());
    const std::string path = Path(name);
    WriteGguf(path, kv, {});
    return path;
  }
};

// ---- the npm vocabularies: tokenizer.json against its GGUF form ----------------------------

std::string VocabDir(const std::string& name) { return testing::NpmVocabDir(name); }

std::vector<std::string> Books() {
  std::vector<std::string> files;
  const std::string books = testing::SharedPath("data/gutenberg");
  if (!std::filesystem::exists(books)) return files;
  for (const auto& e : std::filesystem::directory_iterator(books)) {
    if (e.path().extension() == ".txt") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Encodes every book and every string of llama.cpp's test vectors with the tokenizer.json of `dir`
// and with its GGUF form; every id must agree.
void ExpectGgufFormEncodesAsTheJson(const std::string& dir, const std::string& gguf_path,
                                    const std::string& label) {
  const BpeTokenizer json = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  const GgufFile g = GgufFile::Open(gguf_path);
  std::unique_ptr<TextTokenizer> from_gguf;
  std::unique_ptr<TextTokenizer> from_json = MakeBpeTextTokenizer(json);
  std::optional<BpeTokenizer> json_again;  // the GGUF form written back as a tokenizer.json
  if (g.String("tokenizer.ggml.model") == "gpt2") {
    const BpeTokenizer b = BpeTokenizer::FromGguf(g);
    EXPECT_EQ(b.merge_count(), json.merge_count());
    from_gguf = MakeBpeTextTokenizer(b);
    const std::filesystem::path dir = std::filesystem::path(gguf_path).parent_path() / "again";
    std::filesystem::create_directories(dir);
    SaveBpeTokenizerFiles(b, dir.string());
    json_again = BpeTokenizer::FromTokenizerJson((dir / "tokenizer.json").string());
    EXPECT_EQ(json_again->bos(), json.bos());
    EXPECT_EQ(json_again->eos(), json.eos());
    EXPECT_EQ(json_again->add_bos(), json.add_bos());
  } else {
    const Tokenizer spm = ReadGgufTokenizer(g);
    from_gguf = MakeLlama2cTextTokenizer(spm);
    if (!spm.add_space_prefix()) {  // Gemma's: written back in its SentencePiece-style form
      DroppedMerges dropped;
      const BpeTokenizer b = SentencePieceStyleBpeFromSpm(spm, &dropped);
      EXPECT_EQ(dropped.count, 0) << dropped.first;
      const std::filesystem::path dir = std::filesystem::path(gguf_path).parent_path() / "again";
      std::filesystem::create_directories(dir);
      SaveBpeTokenizerFiles(b, dir.string());
      json_again = BpeTokenizer::FromTokenizerJson((dir / "tokenizer.json").string());
      EXPECT_TRUE(json_again->options().chars);
      EXPECT_EQ(json_again->vocab_size(), json.vocab_size());
      EXPECT_EQ(json_again->bos(), json.bos());
      EXPECT_EQ(json_again->eos(), json.eos());
      EXPECT_EQ(json_again->add_bos(), json.add_bos());
    }
  }
  EXPECT_EQ(from_gguf->vocab_size(), json.vocab_size());
  EXPECT_EQ(from_gguf->bos(), json.bos());
  EXPECT_EQ(from_gguf->eos(), json.eos());
  EXPECT_EQ(Ids(from_gguf->EncodePrompt("Hello world")),
            Ids(from_json->EncodePrompt("Hello world")));
  const std::vector<std::string> books = Books();
  size_t tokens = 0;
  for (const std::string& book : books) {
    const std::string text = testing::ReadBytes(book);
    const std::vector<int> want = json.Encode(text);
    const TextStream got = from_gguf->EncodeText(book);
    tokens += want.size();
    ASSERT_EQ(got.tokens.size(), want.size()) << book;
    const auto diff = std::mismatch(want.begin(), want.end(), got.tokens.begin());
    EXPECT_TRUE(diff.first == want.end())
        << book << ": first difference at token " << (diff.first - want.begin());
    if (json_again) {
      EXPECT_TRUE(json_again->Encode(text) == want) << book << " (written back)";
    }
  }
  // Every string of llama.cpp's test vectors, whichever vocabulary its file was written for.
  int cases = 0;
  for (const std::string& file :
       testing::VocabCaseFiles(testing::SharedPath("models/ggml_vocab"))) {
    for (const std::string& input : testing::VocabCaseInputs(file)) {
      std::vector<int> got = from_gguf->EncodePrompt(input);
      if (from_gguf->bos() >= 0 && !got.empty() && got[0] == from_gguf->bos()) {
        got.erase(got.begin());
      }
      EXPECT_EQ(Ids(got), Ids(json.Encode(input))) << file << ": \"" << input << "\"";
      ++cases;
    }
  }
  std::printf(
      "%s: GGUF form read back, %zu books (%zu tokens)%s encoded as the tokenizer.json "
      "encodes them\n",
      label.c_str(), books.size(), tokens,
      cases > 0 ? fmt::format(" and {} of llama.cpp's cases", cases).c_str() : "");
}

TEST_F(GgufVocabularyTest, Llama3GgufFormEncodesEveryBookAsItsTokenizerJson) {
  STRETCH_SKIP_UNDER_SANITIZER("26 books");
  const std::string dir = VocabDir("llama3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  const BpeTokenizer json = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  const std::string path = WriteVocabulary(GgufVocabularyKeys(json), "llama3.gguf");
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("tokenizer.ggml.pre"), "llama-bpe");
  ExpectGgufFormEncodesAsTheJson(dir, path, "Llama 3");
}

TEST_F(GgufVocabularyTest, Qwen3GgufFormEncodesEveryBookAsItsTokenizerJson) {
  STRETCH_SKIP_UNDER_SANITIZER("26 books");
  const std::string dir = VocabDir("qwen3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  const BpeTokenizer json = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  const std::string path = WriteVocabulary(GgufVocabularyKeys(json), "qwen3.gguf");
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.String("tokenizer.ggml.pre"), "qwen2");
  // Its non-special added tokens (<think>, <tool_call>, ...) are user-defined, matched in text.
  const BpeTokenizer back = BpeTokenizer::FromGguf(g);
  // Of its 12, the 6 that look special (<|fim_prefix|>, ...) become control tokens.
  EXPECT_EQ(json.options().matched.size(), 12u);
  EXPECT_EQ(back.options().matched.size(), 6u);
  EXPECT_EQ(Ids(back.Encode("a<think>b</think>")), Ids(json.Encode("a<think>b</think>")));
  // <|fim_prefix|> is not special in the tokenizer.json but looks it: a control token, as
  // llama.cpp's converter writes it.
  EXPECT_EQ(back.Kind(151659), BpeTokenKind::kControl);
  EXPECT_EQ(back.Kind(151667), BpeTokenKind::kNormal);  // <think>
  ExpectGgufFormEncodesAsTheJson(dir, path, "Qwen 3");
}

TEST_F(GgufVocabularyTest, Gemma3GgufFormEncodesEveryBookAsItsTokenizerJson) {
  STRETCH_SKIP_UNDER_SANITIZER("26 books");
  const std::string dir = VocabDir("gemma3");
  STRETCH_SKIP_IF_NO_VOCAB(dir);
  const BpeTokenizer json = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  const std::string path = WriteVocabulary(GgufVocabularyKeys(json), "gemma3.gguf");
  const GgufFile g = GgufFile::Open(path);
  // As llama.cpp's converter writes Gemma's: a SentencePiece vocabulary without the leading space.
  EXPECT_EQ(g.String("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(g.Int("tokenizer.ggml.bos_token_id"), 2);
  EXPECT_EQ(g.Int("tokenizer.ggml.unknown_token_id"), 3);
  ASSERT_NE(g.Find("tokenizer.ggml.add_space_prefix"), nullptr);
  EXPECT_EQ(g.Find("tokenizer.ggml.add_space_prefix")->u, 0u);
  const Tokenizer spm = ReadGgufTokenizer(g);
  EXPECT_FALSE(spm.add_space_prefix());
  // Text with a character no piece holds (byte fallback), added tokens and runs of spaces.
  const std::string sample =
      "Hello world,  it's 2026!\n\n\tTabs [multimodal] and \xF0\x9F\xAB\xA0 emoji \xE2\x80\x94 "
      "done   ";
  EXPECT_EQ(Ids(spm.Encode(sample, false, false)), Ids(json.Encode(sample)));
  EXPECT_EQ(spm.Decode(spm.Encode(sample, false, false)), sample);
  // "<unused0>" looks special to llama.cpp's converter: a control token, cut out of a prompt
  // only when special tokens are parsed (Hugging Face matches it in any text).
  EXPECT_EQ(spm.Type(6), SpmTokenType::kControl);      // <unused0>
  EXPECT_EQ(spm.Type(5), SpmTokenType::kUserDefined);  // [multimodal]
  const std::string prompt = "a<unused0>b<start_of_turn>user";
  EXPECT_EQ(Ids(MakeLlama2cTextTokenizer(spm)->EncodePromptParsingSpecial(prompt)),
            Ids(MakeBpeTextTokenizer(json)->EncodePromptParsingSpecial(prompt)));
  ExpectGgufFormEncodesAsTheJson(dir, path, "Gemma 3");
}

// ---- GGUF SentencePiece vocabularies with their own layout ---------------------------------

TEST(GgufSpmLayout, Phi3VocabularyPassesLlamaCppsTestVectors) {
  const std::string gguf = testing::SharedPath("models/ggml_vocab/ggml-vocab-phi-3.gguf");
  STRETCH_SKIP_IF_MISSING(gguf);
  const Tokenizer t = ReadGgufTokenizer(gguf);
  EXPECT_EQ(t.vocab_size(), 32064);
  EXPECT_EQ(t.eos(), 32000);  // <|endoftext|>
  EXPECT_EQ(t.bos(), 1);
  EXPECT_FALSE(t.Llama2cLayout());
  const Cases c = ReadCases(gguf);
  ASSERT_EQ(c.inputs.size(), c.outputs.size());
  ASSERT_GT(c.inputs.size(), 40u);
  int passed = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const std::string got = Ids(t.Encode(c.inputs[k], false, false));
    EXPECT_EQ(got, c.outputs[k]) << "case " << k << ": \"" << c.inputs[k] << "\"";
    passed += got == c.outputs[k];
  }
  std::printf("Phi-3's GGUF vocabulary: %d of %zu llama.cpp test vectors\n", passed,
              c.inputs.size());
  // Its control tokens decode to nothing; a prompt that spells one is that token when parsed,
  // and the whitespace after it is dropped (llama.cpp's RSTRIP for a model named Phi-3; "</s>" is
  // user-defined in the file and control to llama.cpp). The ids are llama-tokenize's (d32676d)
  // on this file, with and without --no-parse-special.
  const std::unique_ptr<TextTokenizer> text = MakeLlama2cTextTokenizer(t);
  const std::string prompt = "<|user|>\n Hi there</s>  ok<|end|>\n<|assistant|>\n";
  EXPECT_EQ(Ids(text->EncodePromptParsingSpecial(prompt)),
            Ids({1, 32010, 6324, 727, 2, 3431, 32007, 32001}));
  EXPECT_EQ(Ids(text->EncodePrompt(prompt)),
            Ids({1,     529,   29989, 1792,  29989, 29958, 13,    6324,  727,
                 829,   29879, 29958, 29871, 3431,  29966, 29989, 355,   29989,
                 29958, 13,    29966, 29989, 465,   22137, 29989, 29958, 13}));
  EXPECT_EQ(t.DecodeToken(5, 32000), "");

  // Written as a Hugging Face tokenizer.json (the legacy LLaMA form, merges from the scores, as
  // `stretch convert --to hf` writes it), read back: the same ids on llama.cpp's cases and on
  // books, the same special tokens.
  DroppedMerges dropped;
  const BpeTokenizer written = SentencePieceStyleBpeFromSpm(t, &dropped);
  EXPECT_EQ(dropped.count, 0) << dropped.first;
  const std::filesystem::path dir = testing::ProgramTempDir("stretch_phi3_vocab_") / "hf";
  std::filesystem::create_directories(dir);
  SaveBpeTokenizerFiles(written, dir.string());
  const BpeTokenizer json = BpeTokenizer::FromTokenizerJson((dir / "tokenizer.json").string());
  EXPECT_TRUE(json.options().prepend_space);
  EXPECT_EQ(json.bos(), 1);
  EXPECT_EQ(json.eos(), 32000);
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    EXPECT_EQ(Ids(json.Encode(c.inputs[k])), c.outputs[k]) << "case " << k;
  }
  const std::unique_ptr<TextTokenizer> from_json = MakeBpeTextTokenizer(json);
  EXPECT_EQ(Ids(from_json->EncodePromptParsingSpecial("<|user|>\nHi<|end|>")),
            Ids(text->EncodePromptParsingSpecial("<|user|>\nHi<|end|>")));
  const std::vector<std::string> books = Books();
  for (size_t k = 0; k < books.size() && k < 3; ++k) {
    const std::string book = testing::ReadBytes(books[k]);
    const std::vector<int> want = t.Encode(book, false, false);
    const std::vector<int> got = json.Encode(book);
    ASSERT_EQ(got.size(), want.size()) << books[k];
    EXPECT_TRUE(got == want) << books[k];
    EXPECT_EQ(json.Decode(got), book) << books[k];
  }
}

// A Gemma-like SentencePiece vocabulary: <pad> <eos> <bos> <unk> at 0..3, a user-defined "\n",
// no leading space, one merge; BOS first; control tokens decode to nothing.
TEST_F(GgufVocabularyTest, ASentencePieceVocabularyWithItsOwnLayoutReadsAndWritesBack) {
  std::vector<std::string> tokens = {"<pad>",
                                     "<eos>",
                                     "<bos>",
                                     "<unk>",
                                     "\n",
                                     "a",
                                     "b",
                                     "ab",
                                     "\xe2\x96\x81",
                                     "\xe2\x96\x81"
                                     "a"};
  for (int b = 0; b < 256; ++b) tokens.push_back(fmt::format("<0x{:02X}>", b));
  std::vector<float> scores(tokens.size(), 0.0f);
  scores[7] = -1.0f;  // "ab"
  scores[9] = -2.0f;  // "▁a"
  std::vector<int32_t> types(tokens.size(), 6);
  const int32_t head[] = {3, 3, 3, 2, 4, 1, 1, 1, 1, 1};
  std::copy(std::begin(head), std::end(head), types.begin());
  const GgufKeys kv = {{"tokenizer.ggml.model", GgufString("llama")},
                       {"tokenizer.ggml.tokens", GgufStringArray(tokens)},
                       {"tokenizer.ggml.scores", GgufF32Array(scores)},
                       {"tokenizer.ggml.token_type", GgufI32Array(types)},
                       {"tokenizer.ggml.bos_token_id", GgufU32(2)},
                       {"tokenizer.ggml.eos_token_id", GgufU32(1)},
                       {"tokenizer.ggml.unknown_token_id", GgufU32(3)},
                       {"tokenizer.ggml.padding_token_id", GgufU32(0)},
                       {"tokenizer.ggml.add_space_prefix", GgufBool(false)}};
  const Tokenizer t = ReadGgufTokenizer(WriteVocabulary(kv, "gemma_like.gguf"));
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 1);
  EXPECT_EQ(t.unk(), 3);
  EXPECT_FALSE(t.add_space_prefix());
  // No leading space ("ab", not "▁a" "b"); "\n" is cut out before the merges; " a" merges into
  // "▁a"; "é" falls back to bytes.
  EXPECT_EQ(Ids(t.Encode("ab\n a b", true, false)), Ids({2, 7, 4, 9, 8, 6}));
  EXPECT_EQ(Ids(t.Encode("\xC3\xA9", false, false)), Ids({10 + 0xC3, 10 + 0xA9}));
  EXPECT_EQ(t.Decode(t.Encode("ab\na b", true, true)), "ab\na b");
  const std::unique_ptr<TextTokenizer> text = MakeLlama2cTextTokenizer(t);
  EXPECT_EQ(text->bos(), 2);
  EXPECT_EQ(text->EncodePrompt("a").front(), 2);
  // Written back, the keys say the same.
  const Tokenizer back = ReadGgufTokenizer(WriteVocabulary(GgufVocabularyKeys(t), "back.gguf"));
  EXPECT_EQ(Ids(back.Encode("ab\na b", true, true)), Ids(t.Encode("ab\na b", true, true)));
  EXPECT_EQ(back.eos(), 1);
  EXPECT_FALSE(back.add_space_prefix());
  // Ids outside the vocabulary are refused by name.
  GgufKeys bad = kv;
  bad[5].second = GgufU32(4000);
  EXPECT_NE(testing::ErrorOf([&] {
              ReadGgufTokenizer(WriteVocabulary(bad, "bad.gguf"));
            }).find("tokenizer.ggml.eos_token_id is 4000"),
            std::string::npos);
}

// What a file can get wrong or leave out is refused by name, and special tokens are found by the
// file's spelling.
TEST_F(GgufVocabularyTest, ASentencePieceLayoutIsCheckedAndSpelledAsTheFileSpellsIt) {
  // Two tokens, no types, no ids: llama.cpp's default EOS id 2 is outside the vocabulary.
  const GgufKeys small = {{"tokenizer.ggml.model", GgufString("llama")},
                          {"tokenizer.ggml.tokens", GgufStringArray({"a", "b"})}};
  EXPECT_NE(testing::ErrorOf([&] {
              ReadGgufTokenizer(WriteVocabulary(small, "small.gguf"));
            }).find("2 tokens: expected at least 3 (<unk>, <s>, </s> at ids 0, 1, 2)"),
            std::string::npos);
  // LLaMA's ids with a control token elsewhere ("▁<SUF>", CodeLlama's; Mistral's [INST]): a
  // prompt finds it only as the file spells it, and the layout is not llama2.c's, so the writers
  // that can hold only llama2.c's refuse it.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(fmt::format("<0x{:02X}>", b));
  for (const char* p : {"\xe2\x96\x81", "x", "y", "<", ">", "S", "U", "F", "\xe2\x96\x81<SUF>"}) {
    tokens.push_back(p);
  }
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  for (size_t i = 3; i < 259; ++i) types[i] = 6;
  types.back() = 3;
  const GgufKeys kv = {{"tokenizer.ggml.model", GgufString("llama")},
                       {"tokenizer.ggml.tokens", GgufStringArray(tokens)},
                       {"tokenizer.ggml.scores", GgufF32Array(std::vector<float>(tokens.size()))},
                       {"tokenizer.ggml.token_type", GgufI32Array(types)}};
  const Tokenizer t = ReadGgufTokenizer(WriteVocabulary(kv, "suf.gguf"));
  EXPECT_FALSE(t.Llama2cLayout());
  const int suf = static_cast<int>(tokens.size()) - 1;
  const std::unique_ptr<TextTokenizer> text = MakeLlama2cTextTokenizer(t);
  const std::vector<int> spaced = text->EncodePromptParsingSpecial("x <SUF>y");
  EXPECT_EQ(std::count(spaced.begin(), spaced.end(), suf), 0) << Ids(spaced);
  const std::vector<int> spelled = text->EncodePromptParsingSpecial("x\xe2\x96\x81<SUF>y");
  EXPECT_EQ(std::count(spelled.begin(), spelled.end(), suf), 1) << Ids(spelled);
  // The same file with llama2.c's types is llama2.c's layout.
  std::vector<int32_t> plain = types;
  plain.back() = 1;
  GgufKeys kv_plain = kv;
  kv_plain[3].second = GgufI32Array(plain);
  EXPECT_TRUE(ReadGgufTokenizer(WriteVocabulary(kv_plain, "plain.gguf")).Llama2cLayout());
  // A vocabulary without an EOS has no GGUF form (llama.cpp would take id 2): refused by name.
  SpmLayout no_eos;
  no_eos.eos = -1;
  no_eos.add_space_prefix = false;
  std::vector<std::string> pieces = tokens;
  for (std::string& p : pieces) {
    if (p.starts_with("\xe2\x96\x81")) p.replace(0, 3, " ");
  }
  const Tokenizer without =
      Tokenizer::FromVocabulary("no-eos", pieces, std::vector<float>(pieces.size()), no_eos);
  EXPECT_NE(testing::ErrorOf([&] {
              GgufVocabularyKeys(without);
            }).find("no-eos: the vocabulary has no EOS token"),
            std::string::npos);
}

// A tiny Gemma-style tokenizer.json (spaces as "▁", byte fallback, merges by rank, an added
// non-special token and added special ones) and its GGUF form agree on random text.
TEST_F(GgufVocabularyTest, ASentencePieceStyleTokenizerJsonAndItsGgufFormAgree) {
  std::vector<std::string> pieces = {"<pad>", "<eos>", "<bos>", "<unk>", "\n"};
  for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
  for (const char* p : {"a", "b", "c", "\xe2\x96\x81", "ab", "bc", "abc",
                        "\xe2\x96\x81"
                        "a",
                        "\xe2\x96\x81"
                        "ab",
                        "ca", "\xe2\x96\x81\xe2\x96\x81"}) {
    pieces.push_back(p);
  }
  // As a conversion from a SentencePiece model lists them: every split of each piece into two
  // pieces, the pieces in the order of their scores.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"b", "c"},
      {"a", "b"},
      {"\xe2\x96\x81", "a"},
      {"a", "bc"},
      {"ab", "c"},
      {"\xe2\x96\x81"
       "a",
       "b"},
      {"\xe2\x96\x81", "ab"},
      {"c", "a"},
      {"\xe2\x96\x81", "\xe2\x96\x81"}};
  json vocab = json::object();
  for (size_t id = 0; id < pieces.size(); ++id) vocab[pieces[id]] = id;
  json m = json::array();
  for (const auto& [l, r] : merges) m.push_back(json::array({l, r}));
  json added = json::array();
  for (int id = 0; id < 5; ++id) {
    added.push_back({{"id", id},
                     {"content", pieces[static_cast<size_t>(id)]},
                     {"special", id < 4},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"single_word", false}});
  }
  const json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}}},
      {"pre_tokenizer",
       {{"type", "Split"},
        {"pattern", {{"String", " "}}},
        {"behavior", "MergedWithPrevious"},
        {"invert", false}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array(
             {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", m}}}};
  const std::string path = File("tokenizer.json", j.dump());
  File("tokenizer_config.json", R"({"bos_token": "<bos>", "eos_token": "<eos>"})");
  const BpeTokenizer bpe = BpeTokenizer::FromTokenizerJson(path);
  const Tokenizer spm = ReadGgufTokenizer(WriteVocabulary(GgufVocabularyKeys(bpe), "form.gguf"));
  EXPECT_EQ(spm.unk(), 3);
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "b", "c", " ", "\n", "\xC3\xA9", "d"};
  int differing = 0;
  for (int k = 0; k < 2000; ++k) {
    std::string text;
    const int len = static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % std::size(alphabet)];
    const std::string want = Ids(bpe.Encode(text));
    const std::string got = Ids(spm.Encode(text, false, false));
    EXPECT_EQ(got, want) << "\"" << text << "\"";
    EXPECT_EQ(spm.Decode(spm.Encode(text, false, false)), text);
    differing += got != want;
    if (differing > 5) break;
  }
  // A perturbed form (the merges' order reversed in the scores) parts from the json: the agreement
  // above is the scores' doing. "cab": "ab" merges first by rank, "ca" when reversed.
  GgufKeys perturbed = GgufVocabularyKeys(bpe);
  for (auto& [key, value] : perturbed) {
    if (key != "tokenizer.ggml.scores") continue;
    for (GgufValue& score : value.array) {
      if (score.f < 0 && score.f > -1e9) score.f = -1e6 - score.f;
    }
  }
  const Tokenizer wrong = ReadGgufTokenizer(WriteVocabulary(perturbed, "wrong.gguf"));
  EXPECT_EQ(Ids(bpe.Encode("cab")), Ids({263, 265}));
  EXPECT_EQ(Ids(spm.Encode("cab", false, false)), Ids({263, 265}));
  EXPECT_EQ(Ids(wrong.Encode("cab", false, false)), Ids({270, 262}));

  // The GGUF form written back as a tokenizer.json (Gemma's form, merges from the scores) reads
  // as the original: the same ids on the same texts, the same special tokens.
  const auto written_back = [&](const Tokenizer& t, const std::string& name) {
    const BpeTokenizer b = SentencePieceStyleBpeFromSpm(t);
    const std::string dir = Path(name);
    std::filesystem::create_directories(dir);
    SaveBpeTokenizerFiles(b, dir);
    return BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  };
  const BpeTokenizer again = written_back(spm, "again");
  EXPECT_TRUE(again.options().chars);
  EXPECT_EQ(again.vocab_size(), bpe.vocab_size());
  EXPECT_EQ(again.bos(), 2);
  EXPECT_EQ(again.eos(), 1);
  EXPECT_EQ(again.options().unk, 3);
  EXPECT_EQ(again.Kind(0), BpeTokenKind::kControl);
  EXPECT_EQ(again.Kind(4), BpeTokenKind::kNormal);  // "\n", matched in the text
  ASSERT_EQ(again.options().matched.size(), 1u);
  EXPECT_EQ(again.options().matched[0], std::pair(std::string("\n"), 4));
  rng.seed(11);
  for (int k = 0; k < 2000; ++k) {
    std::string text;
    const int len = static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % std::size(alphabet)];
    ASSERT_EQ(Ids(again.Encode(text)), Ids(bpe.Encode(text))) << "\"" << text << "\"";
    ASSERT_EQ(again.Decode(again.Encode(text)), text);
  }
  // The merges follow the scores: the perturbed form written back cuts "cab" as it does.
  EXPECT_EQ(Ids(written_back(wrong, "wrong_again").Encode("cab")), Ids({270, 262}));
  // The same vocabulary with a space before the text (Phi-3's and Mistral's kind) is written in
  // the legacy LLaMA form (normalizer Prepend + Replace, decoder with Strip) and reads back with
  // that space before every part of the text between matched tokens, as the score-based encoder
  // puts it; Decode drops the first one.
  const std::vector<std::string> spelled = [&] {
    std::vector<std::string> v(static_cast<size_t>(spm.vocab_size()));
    for (int id = 0; id < spm.vocab_size(); ++id) v[static_cast<size_t>(id)] = spm.Piece(id);
    return v;
  }();
  std::vector<float> scores(static_cast<size_t>(spm.vocab_size()));
  for (int id = 0; id < spm.vocab_size(); ++id) scores[static_cast<size_t>(id)] = spm.Score(id);
  SpmLayout prefixed;
  prefixed.unk = spm.unk();
  prefixed.bos = spm.bos();
  prefixed.eos = spm.eos();
  prefixed.add_space_prefix = true;
  for (int id = 0; id < spm.vocab_size(); ++id) prefixed.types.push_back(spm.Type(id));
  prefixed.matched = spm.user_defined();
  const Tokenizer llama = Tokenizer::FromVocabulary("phi3-like", spelled, scores, prefixed);
  const std::string legacy_dir = Path("legacy");
  std::filesystem::create_directories(legacy_dir);
  SaveBpeTokenizerFiles(SentencePieceStyleBpeFromSpm(llama), legacy_dir);
  const std::string legacy_json = legacy_dir + "/tokenizer.json";
  EXPECT_NE(testing::ReadBytes(legacy_json).find("\"Prepend\""), std::string::npos);
  EXPECT_FALSE(LooksLikeSentencePieceTokenizerJson(legacy_json));  // not llama2.c's layout
  const BpeTokenizer legacy = BpeTokenizer::FromTokenizerJson(legacy_json);
  EXPECT_TRUE(legacy.options().prepend_space);
  EXPECT_EQ(Ids(legacy.Encode("cab")), Ids(llama.Encode("cab", false, false)));
  EXPECT_NE(Ids(legacy.Encode("cab")), Ids(again.Encode("cab")));  // the space changes the cut
  rng.seed(12);
  for (int k = 0; k < 2000; ++k) {
    std::string text;
    const int len = static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % std::size(alphabet)];
    ASSERT_EQ(Ids(legacy.Encode(text)), Ids(llama.Encode(text, false, false)))
        << "\"" << text << "\"";
    if (text.find('\n') == std::string::npos) {
      ASSERT_EQ(legacy.Decode(legacy.Encode(text)), text);
    }
  }
  // Its GGUF form keeps the space before the text.
  EXPECT_TRUE(SpmFromSentencePieceStyleBpe(legacy).add_space_prefix());
}

// A byte-level vocabulary written as a tokenizer.json (and tokenizer_config.json) reads back to the
// same tokenizer: added tokens matched, control ones not, BOS first, NFC kept.
TEST_F(GgufVocabularyTest, AByteLevelVocabularyWrittenAsTokenizerJsonReadsBack) {
  std::vector<std::string> pieces = testing::Gpt2BytePieces();
  for (const char* p : {"ab",
                        "\xC4\xA0"
                        "a",
                        "<tool>", "<|begin|>", "<|end|>"})
    pieces.push_back(p);
  BpeOptions o;
  o.split = BpeSplit::kLlama3;
  o.ignore_merges = true;
  o.nfc = true;
  o.matched = {{"<tool>", 258}};
  o.kinds.assign(pieces.size(), BpeTokenKind::kNormal);
  o.kinds[259] = o.kinds[260] = BpeTokenKind::kControl;
  o.special = {{"<|begin|>", 259}, {"<|end|>", 260}};
  o.add_bos = true;
  o.bos = 259;
  o.eos = 260;
  const BpeTokenizer t =
      BpeTokenizer::FromVocabulary("tiny", pieces, {{"a", "b"}, {"\xC4\xA0", "a"}}, o);
  SaveBpeTokenizerFiles(t, Path(""));
  const BpeTokenizer back = BpeTokenizer::FromTokenizerJson(Path("tokenizer.json"));
  EXPECT_EQ(back.vocab_size(), t.vocab_size());
  EXPECT_EQ(back.bos(), 259);
  EXPECT_EQ(back.eos(), 260);
  EXPECT_TRUE(back.add_bos());
  EXPECT_TRUE(back.options().nfc);
  EXPECT_EQ(back.options().split, BpeSplit::kLlama3);
  const std::string text = "ab a<tool>ab<|end|> caf\x65\xCC\x81";
  EXPECT_EQ(Ids(back.Encode(text)), Ids(t.Encode(text)));
  EXPECT_EQ(Ids(MakeBpeTextTokenizer(back)->EncodePromptParsingSpecial(text)),
            Ids(MakeBpeTextTokenizer(t)->EncodePromptParsingSpecial(text)));
  // A SentencePiece-style vocabulary is written in Gemma's form and reads back as one.
  BpeOptions chars;
  chars.chars = true;
  std::vector<std::string> sp = {"a"};
  for (int b = 0; b < 256; ++b) sp.push_back(fmt::format("<0x{:02X}>", b));
  const std::string sp_dir = Path("sp");
  std::filesystem::create_directories(sp_dir);
  SaveBpeTokenizerFiles(BpeTokenizer::FromVocabulary("sp", sp, {}, chars), sp_dir);
  const BpeTokenizer sp_back = BpeTokenizer::FromTokenizerJson(sp_dir + "/tokenizer.json");
  EXPECT_TRUE(sp_back.options().chars);
  EXPECT_EQ(Ids(sp_back.Encode("a\xC3\xA9")), Ids({0, 1 + 0xC3, 1 + 0xA9}));
}

// A byte-level vocabulary's GGUF form keeps its user-defined tokens, matched in the text.
TEST_F(GgufVocabularyTest, AByteLevelVocabularyWithAnAddedTokenWritesAndReadsBack) {
  std::vector<std::string> pieces = testing::Gpt2BytePieces();
  pieces.push_back("ab");
  pieces.push_back("<think>");
  pieces.push_back("<|endoftext|>");
  BpeOptions o;
  o.matched = {{"<think>", 257}};
  o.special = {{"<|endoftext|>", 258}};
  o.kinds.assign(pieces.size(), BpeTokenKind::kNormal);
  o.kinds[258] = BpeTokenKind::kControl;
  o.bos = o.eos = 258;
  const BpeTokenizer bpe = BpeTokenizer::FromVocabulary("tiny", pieces, {{"a", "b"}}, o);
  const GgufKeys keys = GgufVocabularyKeys(bpe);
  const BpeTokenizer back = BpeTokenizer::FromGguf(WriteVocabulary(keys, "bytes.gguf"));
  EXPECT_EQ(Ids(back.Encode("ab<think>ab")), Ids({256, 257, 256}));
  EXPECT_EQ(Ids(back.Encode("ab<think>ab")), Ids(bpe.Encode("ab<think>ab")));
  EXPECT_EQ(back.Decode(back.Encode("x<think>y")), "x<think>y");
  EXPECT_EQ(back.eos(), 258);
}

}  // namespace
}  // namespace stretch

namespace stretch {
namespace {

// The tokens at which generation ends (EndOfGenerationTokens, what `generate` stops at and
// --ignore-eos bans) for the real vocabularies, from their tokenizer.json and from the GGUF form
// stretch writes, against llama.cpp's own lists: `llama-tokenize -m M.gguf -p hi --ids -v`
// ("printing all EOG tokens") on d32676d, M a one-layer random model of each family with the
// vocabulary, converted by `stretch convert --to gguf`. Qwen 3's "</s>" (128247) is a plain BPE
// piece that llama.cpp makes end generation by its spelling; Gemma 3's </s> (212) an added one.
TEST_F(GgufVocabularyTest, EndOfGenerationTokensAsLlamaCpp) {
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"llama3", {128001, 128009}},
      {"qwen3", {128247, 151643, 151645, 151662, 151663, 151664}},
      {"gemma3", {1, 106, 212}}};
  for (const auto& [name, expected] : cases) {
    const std::string dir = VocabDir(name);
    STRETCH_SKIP_IF_NO_VOCAB(dir);
    const BpeTokenizer json = BpeTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
    EXPECT_EQ(EndOfGenerationTokens(*MakeBpeTextTokenizer(json)), expected) << name;
    const GgufFile g = GgufFile::Open(WriteVocabulary(GgufVocabularyKeys(json), name + ".gguf"));
    const std::unique_ptr<TextTokenizer> from_gguf =
        g.String("tokenizer.ggml.model") == "gpt2" ? MakeBpeTextTokenizer(BpeTokenizer::FromGguf(g))
                                                   : MakeLlama2cTextTokenizer(ReadGgufTokenizer(g));
    EXPECT_EQ(EndOfGenerationTokens(*from_gguf), expected) << name << " as GGUF";
  }
}

}  // namespace
}  // namespace stretch
