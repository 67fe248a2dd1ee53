// `stretch tokenize`: the ids of a model's tokenizer, as llama.cpp's llama-tokenize prints them.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/gguf_vocabulary.h"
#include "src/io/tokenizer/tokenizer.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"
#include "tests/testing/vocab_cases.h"

namespace stretch {
namespace {

using testing::Has;
using testing::RunCli;

std::string Temp(const std::string& name) {
  return (testing::ProgramTempDir("stretch_tokenize_cli_") / name).string();
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string IdList(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t k = 0; k < ids.size(); ++k) s += (k ? ", " : "") + std::to_string(ids[k]);
  return s + "]\n";
}

// `stretch tokenize --ids` on each model in turn; a run that fails is a test failure (and drops
// its output, so the caller's size check stops it).
std::vector<std::string> TokenizeEach(const std::vector<std::string>& models,
                                      const std::string& text) {
  std::vector<std::string> outs;
  for (const std::string& m : models) {
    const auto r = RunCli("tokenize -m " + Quote(m) + " -p " + Quote(text) + " --ids");
    EXPECT_EQ(r.exit_code, 0) << m << ": " << r.out;
    if (r.exit_code == 0) outs.push_back(r.out);
  }
  return outs;
}

TEST(TokenizeCli, AModelsOwnVocabularyAndATokenizerFileGiveTheSameIds) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  const std::string tok = testing::SharedPath("models/stories260K/tok512.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const std::string gguf = Temp("s.gguf");
  const auto c =
      RunCli("convert -m " + Quote(bin) + " -t " + Quote(tok) + " --to gguf --out " + Quote(gguf));
  ASSERT_EQ(c.exit_code, 0) << c.out;
  const std::string text = "Once upon a time, Lily saw a big dog.";
  const std::vector<int> want = Tokenizer::LoadLlama2c(tok).Encode(text, true, false);
  const auto own = RunCli("tokenize -m " + Quote(gguf) + " -p " + Quote(text) + " --ids");
  ASSERT_EQ(own.exit_code, 0) << own.out;
  EXPECT_EQ(own.out, IdList(want));
  const auto file = RunCli("tokenize -m " + Quote(bin) + " -t " + Quote(tok) + " -p " +
                           Quote(text) + " --ids --no-bos");
  ASSERT_EQ(file.exit_code, 0) << file.out;
  EXPECT_EQ(file.out, IdList(std::vector<int>(want.begin() + 1, want.end())));
  // One line per token with its text; the count when asked.
  const auto lines = RunCli("tokenize -m " + Quote(gguf) + " -p 'Once upon' --show-count");
  ASSERT_EQ(lines.exit_code, 0) << lines.out;
  EXPECT_TRUE(Has(lines.out, "     1 -> ''\n")) << lines.out;
  EXPECT_TRUE(Has(lines.out, "Total number of tokens: ")) << lines.out;
  // The text is given once.
  const auto neither = RunCli("tokenize -m " + Quote(gguf));
  EXPECT_NE(neither.exit_code, 0);
  EXPECT_TRUE(Has(neither.out, "give the text as --prompt TEXT or --file FILE (found neither)"))
      << neither.out;
  std::remove(gguf.c_str());
}

// A GGUF file holding only a vocabulary serves as the model: Phi-3's gives llama.cpp's ids for
// its test cases (no BOS, as llama.cpp's test-tokenizer-0 encodes them).
TEST(TokenizeCli, AVocabularyOnlyGgufFileGivesLlamaCppsIds) {
  const std::string gguf = testing::SharedPath("models/ggml_vocab/ggml-vocab-phi-3.gguf");
  STRETCH_SKIP_IF_MISSING(gguf);
  const std::string inp = testing::ReadBytes(gguf + ".inp");
  const std::string out = testing::ReadBytes(gguf + ".out");
  const std::string first_case = inp.substr(0, inp.find("\n__ggml_vocab_test__\n"));
  const std::string first_line = out.substr(0, out.find('\n'));
  const std::string text = Temp("case.txt");
  {
    FILE* f = std::fopen(text.c_str(), "wb");
    std::fwrite(first_case.data(), 1, first_case.size(), f);
    std::fclose(f);
  }
  const auto r = RunCli("tokenize -m " + Quote(gguf) + " -f " + Quote(text) + " --ids --no-bos");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::string want = "[";
  for (size_t at = 1; at < first_line.size();) {  // " 1 2 3" -> "[1, 2, 3]"
    const size_t end = first_line.find(' ', at);
    want += (want.size() > 1 ? ", " : "") + first_line.substr(at, end - at);
    at = end == std::string::npos ? first_line.size() : end + 1;
  }
  EXPECT_EQ(r.out, want + "]\n") << "case: " << first_case;
  std::remove(text.c_str());
}

// A model with a byte-level vocabulary (a user-defined <tool> and a control <|end|>), converted
// GGUF -> Hugging Face folder (tokenizer.json written) -> GGUF again, tokenizes the same each time.
TEST(TokenizeCli, AByteLevelVocabularyGoesThroughConvertBothWays) {
  std::vector<std::string> pieces = testing::Gpt2BytePieces();
  for (const char* p : {"ab",
                        "\xC4\xA0"
                        "a",
                        "<tool>", "<|end|>"})
    pieces.push_back(p);
  BpeOptions o;
  o.split = BpeSplit::kQwen2;
  o.matched = {{"<tool>", 258}};
  o.kinds.assign(pieces.size(), BpeTokenKind::kNormal);
  o.kinds[259] = BpeTokenKind::kControl;
  o.special = {{"<|end|>", 259}};
  o.eos = 259;
  const BpeTokenizer vocab =
      BpeTokenizer::FromVocabulary("tiny", pieces, {{"a", "b"}, {"\xC4\xA0", "a"}}, o);
  ModelConfig c = testing::TinyConfig();
  c.vocab_size = vocab.vocab_size();
  const std::string gguf = Temp("bytes.gguf"), hf = Temp("bytes-hf"), again = Temp("again.gguf");
  const GgufKeys keys = GgufVocabularyKeys(vocab);
  SaveGgufModel(testing::RandomModel(c, 1), gguf, static_cast<uint32_t>(GgmlType::kF32), nullptr,
                nullptr, &keys);
  const auto to_hf = RunCli("convert -m " + Quote(gguf) + " --to hf --out " + Quote(hf));
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.out;
  EXPECT_TRUE(Has(to_hf.out, "byte-level BPE, pre-tokenizer qwen2")) << to_hf.out;
  EXPECT_TRUE(std::filesystem::exists(hf + "/tokenizer_config.json"));
  // config.json and generation_config.json name the vocabulary's own special tokens: EOS 259,
  // and no BOS (null), not llama2.c's 1 and 2.
  for (const char* file : {"/config.json", "/generation_config.json"}) {
    const nlohmann::json j = nlohmann::json::parse(testing::ReadBytes(hf + file));
    EXPECT_EQ(j.at("eos_token_id"), 259) << file;
    EXPECT_TRUE(j.at("bos_token_id").is_null()) << file;
  }
  const auto to_gguf = RunCli("convert -m " + Quote(hf) + " --to gguf --out " + Quote(again));
  ASSERT_EQ(to_gguf.exit_code, 0) << to_gguf.out;
  const std::string text = "ab a<tool> ab<|end|>";
  const std::vector<std::string> outs = TokenizeEach({gguf, hf, again}, text);
  ASSERT_EQ(outs.size(), 3u);
  // <tool> matched in the text, <|end|> parsed as the prompt's.
  EXPECT_EQ(outs[0], IdList(MakeBpeTextTokenizer(vocab)->EncodePromptParsingSpecial(text)));
  EXPECT_TRUE(Has(outs[0], "258, ")) << outs[0];
  EXPECT_TRUE(Has(outs[0], "259]")) << outs[0];
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
  // The other formats have no place for it: refused by name, nothing written.
  const auto bin =
      RunCli("convert -m " + Quote(hf) + " --to llama2c --out " + Quote(Temp("x.bin")));
  EXPECT_EQ(bin.exit_code, 0) << bin.out;  // llama2.c files carry no vocabulary (a note says so)
  const auto ckpt =
      RunCli("convert -m " + Quote(hf) + " --to stretch --out " + Quote(Temp("x.safetensors")));
  EXPECT_NE(ckpt.exit_code, 0);
  EXPECT_TRUE(Has(ckpt.out, "has no form in stretch files")) << ckpt.out;
  EXPECT_FALSE(std::filesystem::exists(Temp("x.safetensors")));
}

// `vocab` in a tiny random model's GGUF file, converted to a Hugging Face folder and from it to
// GGUF again (the three paths, in that order); the folder's tokenizer.json in `json`. Empty when
// a conversion failed (with a test failure).
std::vector<std::string> ThroughConvertBothWays(const Tokenizer& vocab, const std::string& name,
                                                std::string* json) {
  ModelConfig c = testing::TinyConfig();
  c.vocab_size = vocab.vocab_size();
  const std::string gguf = Temp(name + ".gguf"), hf = Temp(name + "-hf"),
                    again = Temp(name + "-again.gguf");
  SaveGgufModel(testing::RandomModel(c, 2), gguf, static_cast<uint32_t>(GgmlType::kF32), &vocab,
                nullptr);
  const auto to_hf = RunCli("convert -m " + Quote(gguf) + " --to hf --out " + Quote(hf));
  EXPECT_EQ(to_hf.exit_code, 0) << to_hf.out;
  EXPECT_TRUE(Has(to_hf.out, "SentencePiece-style")) << to_hf.out;
  if (to_hf.exit_code != 0) return {};
  *json = testing::ReadBytes(hf + "/tokenizer.json");
  EXPECT_TRUE(Has(*json, "\"byte_fallback\": true"));
  const std::string config = testing::ReadBytes(hf + "/tokenizer_config.json");
  EXPECT_TRUE(Has(config, "\"" + vocab.Piece(vocab.bos()) + "\"")) << config;
  EXPECT_TRUE(Has(config, "\"" + vocab.Piece(vocab.eos()) + "\"")) << config;
  for (const char* file : {"/config.json", "/generation_config.json"}) {  // the same ids
    const nlohmann::json j = nlohmann::json::parse(testing::ReadBytes(hf + file));
    EXPECT_EQ(j.at("bos_token_id"), vocab.bos()) << file;
    EXPECT_EQ(j.at("eos_token_id"), vocab.eos()) << file;
  }
  const auto to_gguf = RunCli("convert -m " + Quote(hf) + " --to gguf --out " + Quote(again));
  EXPECT_EQ(to_gguf.exit_code, 0) << to_gguf.out;
  if (to_gguf.exit_code != 0) return {};
  return {gguf, hf, again};
}

// A Gemma-like SentencePiece vocabulary (<pad> <eos> <bos> <unk> at 0..3, a user-defined "\n", no
// leading space), converted GGUF -> Hugging Face folder (Gemma's tokenizer.json form written,
// merges from the scores) -> GGUF again, tokenizes the same each time.
TEST(TokenizeCli, AGemmaLikeVocabularyGoesThroughConvertBothWays) {
  std::vector<std::string> pieces = {"<pad>", "<eos>", "<bos>", "<unk>", "\n",  "a",  "b",
                                     "c",     " ",     "ab",    "bc",    "abc", " a", "ca"};
  std::vector<float> scores = {0, 0, 0, 0, 0, 0, 0, 0, 0, -2, -1, -3, -4, -5};
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0);
  }
  SpmLayout layout;
  layout.unk = 3;
  layout.bos = 2;
  layout.eos = 1;
  layout.add_space_prefix = false;
  layout.types.assign(pieces.size(), SpmTokenType::kByte);
  const SpmTokenType head[] = {SpmTokenType::kControl, SpmTokenType::kControl,
                               SpmTokenType::kControl, SpmTokenType::kUnknown,
                               SpmTokenType::kUserDefined};
  std::copy(std::begin(head), std::end(head), layout.types.begin());
  std::fill(layout.types.begin() + 5, layout.types.begin() + 14, SpmTokenType::kNormal);
  const Tokenizer vocab = Tokenizer::FromVocabulary("gemma-like", pieces, scores, layout);
  std::string json;
  const std::vector<std::string> paths = ThroughConvertBothWays(vocab, "gemma-like", &json);
  ASSERT_EQ(paths.size(), 3u);
  // "cab": "ab" scores above "ca", so c + ab; "\n" cut out first; " a" merges; "é" as bytes.
  const std::string text = "cab\n a bc \xC3\xA9<eos>";
  const std::vector<std::string> outs = TokenizeEach(paths, text);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0], IdList(MakeLlama2cTextTokenizer(vocab)->EncodePromptParsingSpecial(text)));
  EXPECT_EQ(outs[0], "[2, 7, 9, 4, 12, 8, 10, 8, 209, 183, 1]\n") << outs[0];
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
}

// A Phi-3-like SentencePiece vocabulary (<unk> <s> </s> at 0..2, a space before the text, a
// user-defined "<|end|>" and EOS a control token of its own at the end), converted GGUF -> Hugging
// Face folder (the legacy LLaMA form: normalizer Prepend + Replace, decoder with Strip; merges from
// the scores) -> GGUF again, tokenizes the same each time, a space before every part of the text
// between tokens.
TEST(TokenizeCli, APhi3LikeVocabularyGoesThroughConvertBothWays) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "a",  "b",  "c",  " ", "ab",
                                     "bc",    "abc", " a",   " b", "ca", "  ", " c"};
  std::vector<float> scores = {0, 0, 0, 0, 0, 0, 0, -2, -1, -3, -4, -6, -5, -7, -8};
  const size_t n_normal = pieces.size();
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0);
  }
  pieces.push_back("<|end|>");
  pieces.push_back("<|endoftext|>");
  scores.insert(scores.end(), {0, 0});
  SpmLayout layout;
  layout.unk = 0;
  layout.bos = 1;
  layout.eos = static_cast<int>(pieces.size()) - 1;
  layout.add_space_prefix = true;
  layout.types.assign(pieces.size(), SpmTokenType::kByte);
  layout.types[0] = SpmTokenType::kUnknown;
  layout.types[1] = layout.types[2] = SpmTokenType::kControl;
  std::fill(layout.types.begin() + 3, layout.types.begin() + static_cast<ptrdiff_t>(n_normal),
            SpmTokenType::kNormal);
  layout.types[pieces.size() - 2] = SpmTokenType::kUserDefined;
  layout.types[pieces.size() - 1] = SpmTokenType::kControl;
  const Tokenizer vocab = Tokenizer::FromVocabulary("phi3-like", pieces, scores, layout);
  ASSERT_FALSE(vocab.Llama2cLayout());
  std::string json;
  const std::vector<std::string> paths = ThroughConvertBothWays(vocab, "phi3-like", &json);
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_TRUE(Has(json, "\"Prepend\"")) << json.substr(0, 2000);
  EXPECT_TRUE(Has(json, "\"Strip\""));
  // " cab" (the space before the text): " c" then "ab" ("ab" scores above "ca"); "<|end|>"
  // (control in the GGUF, as llama.cpp's converter makes it); " a" (a space before the part after
  // it); " " "bc" ("bc" merges before " b"); "  "; "é" as its bytes; EOS parsed as the special
  // token it is.
  const std::string text = "cab<|end|>a bc  \xC3\xA9<|endoftext|>";
  const std::vector<std::string> outs = TokenizeEach(paths, text);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0], IdList(MakeLlama2cTextTokenizer(vocab)->EncodePromptParsingSpecial(text)));
  EXPECT_EQ(outs[0], "[1, 14, 7, 271, 10, 6, 8, 13, 210, 184, 272]\n") << outs[0];
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
}

}  // namespace
}  // namespace stretch
