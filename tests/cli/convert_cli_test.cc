// `stretch convert`: a llama2.c model to GGUF and back, read by every command like the original.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/cli/cli_run.h"
#include "tests/testing/files.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::Has;
using testing::RunCli;

std::string Temp(const std::string& name) {
  return (testing::ProgramTempDir("stretch_convert_cli_") / name).string();
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

TEST(ConvertCli, Llama2cToGgufAndBackScoresTheSame) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  const std::string tok = testing::SharedPath("models/stories260K/tok512.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const std::string gguf = Temp("s.gguf"), back = Temp("s.bin"), tokens = Temp("tokens.txt");
  {
    FILE* f = std::fopen(tokens.c_str(), "w");
    for (int k = 0; k < 300; ++k) std::fprintf(f, "%d ", 1 + (k * 37) % 500);
    std::fprintf(f, "\n");
    std::fclose(f);
  }
  const auto r =
      RunCli("convert -m " + Quote(bin) + " -t " + Quote(tok) + " --to gguf --out " + Quote(gguf));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "GGUF version 3")) << r.out;
  const auto i = RunCli("inspect -m " + Quote(gguf));
  EXPECT_EQ(i.exit_code, 0) << i.out;
  EXPECT_TRUE(Has(i.out, "GGUF version 3 (llama, F32)")) << i.out;
  const auto b = RunCli("convert -m " + Quote(gguf) + " --to llama2c --out " + Quote(back));
  ASSERT_EQ(b.exit_code, 0) << b.out;
  // The same per-position table from all three files (a score's table prints losses to 4 places
  // and perplexities; equal weights give equal text).
  std::string tables[3];
  const std::string files[3] = {bin, gguf, back};
  for (int k = 0; k < 3; ++k) {
    const auto s = RunCli("score -m " + Quote(files[k]) + " --tokens " + Quote(tokens) +
                          " --ctx 300 --method yarn --no-progress");
    ASSERT_EQ(s.exit_code, 0) << s.out;
    tables[k] = s.out.substr(s.out.find("all"));
  }
  EXPECT_EQ(tables[0], tables[1]);
  EXPECT_EQ(tables[0], tables[2]);
  // Text: the GGUF file's own vocabulary encodes it as tok512.bin does.
  const std::string text = testing::SharedPath("data/tinystories");
  const auto with_file = RunCli("score -m " + Quote(bin) + " -t " + Quote(tok) + " --data " +
                                Quote(text) + " --ctx 256 --windows 4 --no-progress");
  const auto with_own = RunCli("score -m " + Quote(gguf) + " --data " + Quote(text) +
                               " --ctx 256 --windows 4 --no-progress");
  ASSERT_EQ(with_file.exit_code, 0) << with_file.out;
  ASSERT_EQ(with_own.exit_code, 0) << with_own.out;
  EXPECT_EQ(with_file.out.substr(with_file.out.find("all")),
            with_own.out.substr(with_own.out.find("all")));
  for (const std::string& p : {gguf, back, tokens}) std::remove(p.c_str());
}

TEST(ConvertCli, AGgufThatSaysYarnRunsYarnUnlessToldOtherwise) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const std::string gguf = Temp("yarn.gguf"), tokens = Temp("yarn_tokens.txt");
  {
    FILE* f = std::fopen(tokens.c_str(), "w");
    for (int k = 0; k < 700; ++k) std::fprintf(f, "%d ", 1 + (k * 53) % 500);
    std::fprintf(f, "\n");
    std::fclose(f);
  }
  auto r =
      RunCli("convert -m " + Quote(bin) + " --to gguf --method yarn:factor=4 --out " + Quote(gguf));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "method yarn:factor=4")) << r.out;
  const auto i = RunCli("inspect -m " + Quote(gguf));
  ASSERT_EQ(i.exit_code, 0) << i.out;
  EXPECT_TRUE(Has(i.out, "seq_len 512 <- llama.rope.scaling.original_context_length")) << i.out;
  EXPECT_TRUE(Has(i.out, "position method yarn:factor=4 <- llama.rope.scaling.type")) << i.out;
  // The file's method by default, the same table as the method given by hand; --method direct
  // replaces it.
  auto score = [&](const std::string& file, const std::string& flags) {
    const auto s = RunCli("score -m " + Quote(file) + " --tokens " + Quote(tokens) +
                          " --ctx 700 --no-progress" + flags);
    EXPECT_EQ(s.exit_code, 0) << s.out;
    return s;
  };
  const auto own = score(gguf, "");
  EXPECT_TRUE(Has(own.out, "method: yarn:factor=4 (the model file's own")) << own.out;
  const auto by_hand = score(bin, " --method yarn:factor=4");
  const auto direct = score(gguf, " --method direct");
  const auto table = [](const std::string& out) { return out.substr(out.find("all")); };
  EXPECT_EQ(table(own.out), table(by_hand.out));
  EXPECT_NE(table(own.out), table(direct.out));
  // The same through a Hugging Face folder: the GGUF file's method becomes config.json's
  // rope_scaling, which runs by default too.
  const std::string hf = Temp("yarn-hf");
  r = RunCli("convert -m " + Quote(gguf) + " --to hf --out " + Quote(hf));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "method yarn:factor=4")) << r.out;
  const auto from_hf = score(hf, "");
  EXPECT_TRUE(Has(from_hf.out, "config.json rope_scaling")) << from_hf.out;
  EXPECT_EQ(table(from_hf.out), table(by_hand.out));
  std::filesystem::remove_all(hf);
  // inspect names where an HF folder's method came from, its rope_scaling or its absence.
  const std::string plain_hf = Temp("plain-hf");
  r = RunCli("convert -m " + Quote(bin) + " --to hf --out " + Quote(plain_hf));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto plain = RunCli("inspect -m " + Quote(plain_hf));
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_TRUE(Has(plain.out, "position method direct (plain RoPE) <- config.json: no rope_scaling"))
      << plain.out;
  std::filesystem::remove_all(plain_hf);
  // llama2.c files have no place for the method: refused, not dropped silently.
  const std::string back = Temp("yarn_back.bin");
  r = RunCli("convert -m " + Quote(gguf) + " --to llama2c --out " + Quote(back));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "no place for the position method yarn:factor=4")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(back));
  // A method llama.cpp's files cannot express is refused by name.
  r = RunCli("convert -m " + Quote(bin) + " --to gguf --method ntk:factor=4 --out " +
             Quote(Temp("ntk.gguf")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "no GGUF key for ntk")) << r.out;
  for (const std::string& p : {gguf, tokens}) std::remove(p.c_str());
}

// A GGUF file without a vocabulary (llama.cpp loads none) and a llama2.c file from a model with
// its own vocabulary (the format has no place for it) are written, with a warning each; with the
// vocabulary given or kept there is none.
TEST(ConvertCli, WarnsWhereTheOutputLosesOrLacksTheVocabulary) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  const std::string tok = testing::SharedPath("models/stories260K/tok512.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const std::string bare = Temp("bare.gguf"), full = Temp("full.gguf"), back = Temp("back.bin");
  auto r = RunCli("convert -m " + Quote(bin) + " --to gguf --out " + Quote(bare));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, bare + " holds no vocabulary: llama.cpp does not load")) << r.out;
  r = RunCli("convert -m " + Quote(bin) + " -t " + Quote(tok) + " --to gguf --out " + Quote(full));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning")) << r.out;
  r = RunCli("convert -m " + Quote(full) + " --to llama2c --out " + Quote(back));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, full + "'s own vocabulary is not written: llama2.c files carry none"))
      << r.out;
  r = RunCli("convert -m " + Quote(bare) + " --to llama2c --out " + Quote(back));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning")) << r.out;  // nothing to lose
  for (const std::string& p : {bare, full, back}) std::remove(p.c_str());
}

TEST(ConvertCli, RefusesBadRequestsWithoutWriting) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const std::string out = Temp("never.gguf");
  auto r = RunCli("convert -m " + Quote(bin) + " --to safetensors --out " + Quote(out));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--to: found 'safetensors'")) << r.out;
  r = RunCli("convert -m " + Quote(bin) + " --to gguf --type q4_0 --out " + Quote(out));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--type: found 'q4_0'")) << r.out;
  r = RunCli("convert -m " + Quote(bin) + " --to llama2c --out " + Quote(bin));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "same file")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace stretch
