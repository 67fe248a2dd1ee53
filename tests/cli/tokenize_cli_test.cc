// `stretch tokenize`: the ids of a model's tokenizer, as llama.cpp's llama-tokenize prints them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "src/io/tokenizer/tokenizer.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/files.h"
#include "tests/testing/shared.h"

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

}  // namespace
}  // namespace stretch
