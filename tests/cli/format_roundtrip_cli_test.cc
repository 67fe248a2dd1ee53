// A model through every file format and back (`stretch convert`): the weights come back bit for
// bit, and every form scores the same tokens to the same per-token losses under every method; a
// model trained here scores the same from its GGUF, Hugging Face and re-written checkpoint forms.
#include <gtest/gtest.h>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "tests/cli/cli_run.h"
#include "tests/testing/files.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::ReadBytes;
using testing::RunCli;

class FormatRoundTrip : public testing::TempDirTest {
 protected:
  FormatRoundTrip() : TempDirTest("stretch_roundtrip_cli_") {}
  static std::string Q(const std::string& s) { return "'" + s + "'"; }
  void Convert(const std::string& args) {
    const auto r = RunCli("convert " + args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.out;
  }
  // The per-token CSV of `score` over `input` (--tokens or --data with its flags).
  std::string PerToken(const std::string& model, const std::string& input,
                       const std::string& flags) {
    const std::string csv = Path("per_token.csv");
    fs::remove(csv);
    const auto r = RunCli("score -m " + model + " " + input + " --no-progress --per-token " +
                          Q(csv) + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << model << "\n" << r.out;
    return ReadBytes(csv);
  }
};

TEST_F(FormatRoundTrip, Stories260KThroughEveryFormatIsBitIdenticalAndScoresTheSame) {
  const std::string bin = testing::SharedPath("models/stories260K/stories260K.bin");
  const std::string tok = testing::SharedPath("models/stories260K/tok512.bin");
  STRETCH_SKIP_IF_MISSING(bin);
  const std::string gguf = Path("s.gguf"), hf = Path("s-hf"), ckpt = Path("s.safetensors"),
                    back = Path("back.bin"), ref = Path("ref.bin"), back2 = Path("back2.bin");
  // .bin -> GGUF -> HF -> .bin, and HF -> stretch checkpoint -> .bin.
  Convert("-m " + Q(bin) + " -t " + Q(tok) + " --to gguf --out " + Q(gguf));
  Convert("-m " + Q(gguf) + " --to hf --out " + Q(hf));
  Convert("-m " + Q(hf) + " --to llama2c --out " + Q(back));
  Convert("-m " + Q(hf) + " --to stretch --out " + Q(ckpt));
  Convert("-m " + Q(ckpt) + " --to llama2c --out " + Q(back2));
  Convert("-m " + Q(bin) + " --to llama2c --out " + Q(ref));
  // The same llama2.c file from the original and from each chain: every weight bit for bit.
  const std::string want = ReadBytes(ref);
  ASSERT_GT(want.size(), 1000000u);
  EXPECT_TRUE(ReadBytes(back) == want) << "GGUF -> HF -> .bin changed the weights";
  EXPECT_TRUE(ReadBytes(back2) == want) << "HF -> checkpoint -> .bin changed the weights";
  EXPECT_TRUE(fs::exists(fs::path(hf) / "tokenizer.model"));
  // What transformers' save_pretrained writes beside them: the generation defaults, the
  // tokenizer's class and special tokens, and the weights' dtype in config.json.
  const nlohmann::json generation =
      nlohmann::json::parse(ReadBytes((fs::path(hf) / "generation_config.json").string()));
  EXPECT_EQ(generation.at("bos_token_id"), 1);
  EXPECT_EQ(generation.at("eos_token_id"), 2);
  const nlohmann::json tok_config =
      nlohmann::json::parse(ReadBytes((fs::path(hf) / "tokenizer_config.json").string()));
  EXPECT_EQ(tok_config.at("bos_token"), "<s>");
  EXPECT_EQ(tok_config.at("eos_token"), "</s>");
  EXPECT_EQ(tok_config.at("add_bos_token"), true);
  EXPECT_TRUE(nlohmann::json::parse(ReadBytes((fs::path(hf) / "config.json").string()))
                  .contains("torch_dtype"));

  // The same tokens scored from each form: identical per-token losses under every method, past
  // the trained length (700 of 512) where the methods differ.
  const std::string tokens = Path("tokens.txt");
  {
    std::ofstream f(tokens);
    Rng rng(3);
    for (int k = 0; k < 700; ++k) f << 3 + rng.NextU64() % 509 << ' ';
    f << '\n';
  }
  const std::string methods =
      "--ctx 700 --methods direct,pi,ntk,ntk-fixed,yarn,llama3,dynamic-ntk,dynamic-yarn,"
      "rerope:window=128,leaky-rerope:window=128,self-extend:group=4,window=128,"
      "window:window=256,lambda:sinks=4,window=256,yarn+logn";
  const std::string base = PerToken(Q(bin), "--tokens " + Q(tokens), methods);
  ASSERT_GT(base.size(), 10000u);
  for (const std::string& form : {gguf, hf, ckpt}) {
    EXPECT_TRUE(PerToken(Q(form), "--tokens " + Q(tokens), methods) == base) << form;
  }
  // Text through each form's own tokenizer (GGUF vocabulary, tokenizer.model through
  // libsentencepiece, the checkpoint's SentencePiece model) as through tok512.bin.
  const std::string text = testing::SharedPath("data/tinystories");
  const std::string data = "--data " + Q(text) + " --ctx 256 --windows 4";
  const std::string with_tok = PerToken(Q(bin) + " -t " + Q(tok), data, "");
  for (const std::string& form : {gguf, hf, ckpt}) {
    EXPECT_TRUE(PerToken(Q(form), data, "") == with_tok) << form;
  }
  // The folder's tokenizer.json alone (LLaMA's kind, as transformers' fast tokenizer reads it)
  // encodes the same.
  const std::string json_only = Path("s-hf-json");
  fs::copy(hf, json_only);
  ASSERT_TRUE(fs::remove(fs::path(json_only) / "tokenizer.model"));
  ASSERT_TRUE(fs::exists(fs::path(json_only) / "tokenizer.json"));
  EXPECT_TRUE(PerToken(Q(json_only), data, "") == with_tok);
}

TEST_F(FormatRoundTrip, ATrainedCheckpointScoresTheSameInEveryFormat) {
  // A tiny model trained here with a SentencePiece BPE vocabulary on pseudo-English.
  const std::string corpus = Path("corpus"), run = Path("run");
  fs::create_directories(corpus);
  const char* words[] = {"the", "cat",  "sat",  "on",  "a",   "mat", "and",  "then",
                         "ran", "away", "from", "dog", "who", "was", "very", "big"};
  Rng rng(5);
  for (int d = 0; d < 4; ++d) {
    std::ofstream f(fs::path(corpus) / ("doc" + std::to_string(d) + ".txt"));
    for (int w = 0; w < 800; ++w) f << words[rng.NextU64() % 16] << (w % 12 == 11 ? ".\n" : " ");
  }
  const auto t = RunCli("train --data " + Q(corpus) + " --out " + Q(run) +
                        " --tokenizer bpe --vocab-size 300 --train-len 32 --steps 20 --batch 4 "
                        "--dim 32 --layers 2 --heads 2 --save-every 20 --eval-every 0 "
                        "--valid-fraction 0.25 --threads 1");
  ASSERT_EQ(t.exit_code, 0) << t.out;
  const std::string gguf = Path("t.gguf"), hf = Path("t-hf"), ckpt = Path("t.safetensors");
  Convert("-m " + Q(run) + " --to gguf --out " + Q(gguf));
  Convert("-m " + Q(run) + " --to hf --out " + Q(hf));
  Convert("-m " + Q(run) + " --to stretch --out " + Q(ckpt));
  // Text through each form's vocabulary, at the trained length and beyond it with a method.
  const std::string data = "--data " + Q(corpus) + " --ctx 32,64 --methods direct,yarn";
  const std::string base = PerToken(Q(run), data, "");
  ASSERT_GT(base.size(), 1000u);
  for (const std::string& form : {gguf, hf, ckpt}) {
    EXPECT_TRUE(PerToken(Q(form), data, "") == base) << form;
  }
  // llama.cpp's and transformers' files cannot hold a model trained with another position
  // scheme: refused by name, nothing written.
  const std::string nope = Path("nope");
  const auto n =
      RunCli("train --data " + Q(corpus) + " --out " + Q(nope) +
             " --position nope --tokenizer bpe --vocab-size 300 --train-len 32 --steps 2 "
             "--batch 4 --dim 32 --layers 2 --heads 2 --save-every 2 --eval-every 0 "
             "--valid-fraction 0.25 --threads 1");
  ASSERT_EQ(n.exit_code, 0) << n.out;
  for (const char* to : {"gguf", "hf"}) {
    const std::string out = Path(std::string("nope.") + to);
    const auto r = RunCli("convert -m " + Q(nope) + " --to " + to + " --out " + Q(out));
    EXPECT_NE(r.exit_code, 0) << to;
    EXPECT_TRUE(Has(r.out, "trained attention layout")) << r.out;
    EXPECT_FALSE(fs::exists(out)) << to;
  }
}

}  // namespace
}  // namespace stretch
