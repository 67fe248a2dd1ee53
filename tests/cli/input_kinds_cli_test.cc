// Issue 40, items 4, 5 and 7: inputs that are not regular files, tokenizer scores that are not
// finite, and files given where another kind is expected. Each case was reproduced on the code
// before the fix (a hang, a wrong encoding, or a message about another format's fields); each
// command runs under a timeout, so that a hang comes back as a failure (exit 137), never as a
// test that does not end.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Files;
using testing::Has;
using testing::ReadBytes;
using testing::RunCliWithin;
using testing::RunResult;

std::string Q(const std::string& path) { return "'" + path + "'"; }

// Every command that fails here fails at once: 60 s is the margin of a busy 2-core machine.
constexpr int kSeconds = 60;

class InputKindsCli : public testing::TempDirTest {
 protected:
  InputKindsCli() : TempDirTest("stretch_input_kinds_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    model_ = Files().model;
    tok_ = Files().tok;
    text_ = Files().text;
  }
  // The model, tokenizer and text flags of `score` with one of them replaced.
  std::string ScoreWith(const std::string& model, const std::string& tok,
                        const std::string& data) const {
    return "score --model " + Q(model) + " --tokenizer " + Q(tok) + " --data " + Q(data) +
           " --ctx 64 --max-windows 1 --no-progress";
  }
  // Every subcommand's every input flag, with `bad` in its place.
  std::vector<std::pair<std::string, std::string>> CommandsReading(const std::string& bad) {
    const std::string out = Path("out");
    return {
        {"score --data", ScoreWith(model_, tok_, bad)},
        {"score --tokens", "score --model " + Q(model_) + " --tokens " + Q(bad) + " --ctx 64"},
        {"score --model", ScoreWith(bad, tok_, text_)},
        {"score --tokenizer", ScoreWith(model_, bad, text_)},
        {"tune --data", "tune --model " + Q(model_) + " --tokenizer " + Q(tok_) + " --data " +
                            Q(bad) + " --ctx 128"},
        {"lab --data", "lab --quick --data " + Q(bad) + " --out " + Q(out)},
        {"train --data", "train --data " + Q(bad) + " --out " + Q(out) + " --steps 2"},
        {"train --config",
         "train --config " + Q(bad) + " --data " + Q(text_) + " --out " + Q(out) + " --steps 2"},
        {"report", "report " + Q(bad) + " --out " + Q(out)},
        {"inspect --model", "inspect --model " + Q(bad)},
        {"generate --model", "generate --model " + Q(bad) + " --tokenizer " + Q(tok_)},
        {"convert --model", "convert --model " + Q(bad) + " --to gguf --out " + Q(out + ".gguf")},
    };
  }
  void ExpectAllRefused(const std::string& bad, const std::string& kind) {
    for (const auto& [what, args] : CommandsReading(bad)) {
      const RunResult r = RunCliWithin(kSeconds, args);
      EXPECT_EQ(r.exit_code, 1) << what << " " << bad << (r.exit_code == 137 ? ": hangs" : "")
                                << "\n"
                                << r.out;
      EXPECT_TRUE(Has(r.out, bad + ": " + kind + ", not a regular file: expected ")) << what << "\n"
                                                                                     << r.out;
      EXPECT_FALSE(fs::exists(Path("out"))) << what << ": work began before the check";
    }
  }
  std::string model_, tok_, text_;
};

TEST_F(InputKindsCli, EveryInputRefusesACharacterDevice) {
  ExpectAllRefused("/dev/zero", "a character device");
}

TEST_F(InputKindsCli, EveryInputRefusesAFifoWithNoWriter) {
  const std::string fifo = Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  ExpectAllRefused(fifo, "a FIFO");
}

TEST_F(InputKindsCli, FlagsNameTheirPath) {
  RunResult r = RunCliWithin(kSeconds, ScoreWith(model_, tok_, "/dev/zero"));
  EXPECT_TRUE(Has(r.out,
                  "--data /dev/zero: a character device, not a regular file: expected a text file "
                  "or a directory of *.txt files"))
      << r.out;
  r = RunCliWithin(kSeconds, "lab --quick --data /dev/zero --out " + Q(Path("out")));
  EXPECT_TRUE(Has(r.out, "--data /dev/zero: a character device")) << r.out;
}

TEST_F(InputKindsCli, ADirectoryWhereAFileIsExpectedIsRefused) {
  const std::string dir = Path("dir");
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"score --tokenizer", ScoreWith(model_, dir, text_)},
      {"score --tokens", "score --model " + Q(model_) + " --tokens " + Q(dir) + " --ctx 64"},
      {"train --config",
       "train --config " + Q(dir) + " --data " + Q(text_) + " --out " + Q(Path("out"))},
      {"report", "report " + Q(dir) + " --out " + Q(Path("out"))},
  };
  for (const auto& [what, args] : cases) {
    const RunResult r = RunCliWithin(kSeconds, args);
    EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.out;
    EXPECT_TRUE(Has(r.out, dir + ": a directory, not a regular file: expected ")) << what << "\n"
                                                                                  << r.out;
  }
}

TEST_F(InputKindsCli, ASymlinkToARegularFileIsRead) {
  const std::string link = Path("text_link.txt");
  fs::create_symlink(text_, link);
  const RunResult r = RunCliWithin(kSeconds, ScoreWith(model_, tok_, link));
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

// Item 5: a llama2.c tokenizer whose scores are NaN or infinite: refused with the token's id,
// where it was accepted and encoded the text into other tokens (all NaN: one token per character).
void WriteTokenizerWithScores(const std::string& path, float (*score)(int id)) {
  std::ofstream out(path, std::ios::binary);
  auto i32 = [&out](int32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto f32 = [&out](float v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  i32(5);
  int id = 0;
  for (const char* special : {"<unk>", "<s>", "</s>"}) {
    f32(score(id++));
    i32(static_cast<int32_t>(std::strlen(special)));
    out.write(special, static_cast<std::streamsize>(std::strlen(special)));
  }
  for (size_t i = 0; i + 1 < sizeof(testing::kChars); ++i) {
    f32(score(id++));
    i32(1);
    out.write(&testing::kChars[i], 1);
  }
}

TEST_F(InputKindsCli, ALlama2cTokenizerWithNonFiniteScoresIsRefusedByTokenId) {
  const std::string all_nan = Path("nan_tok.bin"), one_inf = Path("inf_tok.bin");
  WriteTokenizerWithScores(all_nan, [](int) { return std::numeric_limits<float>::quiet_NaN(); });
  WriteTokenizerWithScores(one_inf, [](int id) {
    return id == 7 ? std::numeric_limits<float>::infinity() : -static_cast<float>(id);
  });
  RunResult r = RunCliWithin(kSeconds, ScoreWith(model_, all_nan, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, all_nan + ": token #0 has score=nan (at offset 4): expected a finite "
                                   "number"))
      << r.out;
  r = RunCliWithin(kSeconds, ScoreWith(model_, one_inf, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, one_inf + ": token #7 has score=inf")) << r.out;
}

// A SentencePiece tokenizer.model whose first piece is scored NaN, written by hand: field 1 of
// the ModelProto (a piece: field 1 the string, field 2 the float32 score, field 3 the type).
TEST_F(InputKindsCli, ASentencePieceModelWithANanScoreIsRefusedByPiece) {
  std::string piece;
  piece += '\x0A';
  piece += '\x05';
  piece += "<unk>";
  piece += '\x15';
  const float nan = std::numeric_limits<float>::quiet_NaN();
  piece.append(reinterpret_cast<const char*>(&nan), 4);
  piece += '\x18';
  piece += '\x02';
  std::string model;
  model += '\x0A';
  model += static_cast<char>(piece.size());
  model += piece;
  const std::string path = Path("tokenizer.model");
  std::ofstream(path, std::ios::binary) << model;
  const RunResult r = RunCliWithin(kSeconds, ScoreWith(model_, path, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, path + ": pieces[0].score at offset")) << r.out;
  EXPECT_TRUE(Has(r.out, "is nan: expected a finite number")) << r.out;
}

// Item 7: the kind of a file is told by its content before any reader of one kind says what it
// made of another kind's bytes.
class FileKindCli : public InputKindsCli {
 protected:
  void SetUp() override {
    InputKindsCli::SetUp();
    gguf_ = Path("tiny.gguf");
    const RunResult r = RunCliWithin(
        kSeconds, "convert -m " + Q(model_) + " -t " + Q(tok_) + " --to gguf --out " + Q(gguf_));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // `gguf_` with `bytes` written at `offset`, as a new file.
  std::string Damaged(const std::string& name, size_t offset, const std::string& bytes) {
    std::string content = ReadBytes(gguf_);
    content.replace(offset, bytes.size(), bytes);
    const std::string path = Path(name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string gguf_;
};

TEST_F(FileKindCli, AGgufWithADamagedMagicIsToldAsOne) {
  const std::string path = Damaged("damaged.bin", 0, "XGUF");
  const RunResult r = RunCliWithin(kSeconds, "inspect --model " + Q(path));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, path + ": looks like a GGUF file (version 3, first key "
                                "\"general.architecture\") whose magic is damaged: starts with "
                                "58 47 55 46 (\"XGUF\"), expected \"GGUF\""))
      << r.out;
  // Named *.gguf, with nothing else to go by: the name is said.
  const std::string named = Path("zeros.gguf");
  std::ofstream(named, std::ios::binary) << std::string(300, '\0');
  const RunResult n = RunCliWithin(kSeconds, "inspect --model " + Q(named));
  EXPECT_EQ(n.exit_code, 1) << n.out;
  EXPECT_TRUE(Has(n.out, named + ": named *.gguf but starts with 00 00")) << n.out;
}

TEST_F(FileKindCli, AGgufWithAnUnknownVersionSaysItStartsWithGguf) {
  const std::string path = Damaged("v9.gguf", 4, std::string("\x09\x00\x00\x00", 4));
  const RunResult r = RunCliWithin(kSeconds, "inspect --model " + Q(path));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, path + ": starts with \"GGUF\" but has version 9: expected 2 or 3"))
      << r.out;
}

TEST_F(FileKindCli, AGgufGivenAsTheTokenizerIsToldAsOne) {
  const RunResult r = RunCliWithin(kSeconds, ScoreWith(model_, gguf_, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, gguf_ + ": a GGUF file given as --tokenizer: a GGUF file carries its own "
                                 "vocabulary (give it as the model)"))
      << r.out;
  EXPECT_FALSE(Has(r.out, "max_token_length")) << r.out;
}

TEST_F(FileKindCli, AnEmptyOrRandomTokenizerModelIsNotCalledALlama2cTokenizer) {
  const std::string empty = Path("empty/tokenizer.model"), random = Path("random/tokenizer.model");
  fs::create_directories(Path("empty"));
  fs::create_directories(Path("random"));
  std::ofstream(empty, std::ios::binary).flush();
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += static_cast<char>((i * 7919 + 13) % 251 + 3);
  std::ofstream(random, std::ios::binary) << bytes;
  RunResult r = RunCliWithin(kSeconds, ScoreWith(model_, empty, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, empty + ": empty file: expected a tokenizer file")) << r.out;
  EXPECT_FALSE(Has(r.out, "llama2.c tokenizer (int32")) << r.out;
  r = RunCliWithin(kSeconds, ScoreWith(model_, random, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, random + ": not a llama2.c tokenizer, a SentencePiece model or a "
                                  "tokenizer.json: starts with 10 9a 29 b3"))
      << r.out;
  EXPECT_FALSE(Has(r.out, "max_token_length")) << r.out;
}

// A tokenizer given as the model and a model given as the tokenizer: said as such, where the
// llama2.c readers reported "hidden_dim=0" and "max_token_length=1634415666".
TEST_F(FileKindCli, ATokenizerAsTheModelAndAModelAsTheTokenizerAreToldAsSuch) {
  RunResult r = RunCliWithin(kSeconds, "inspect --model " + Q(tok_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, tok_ + ": a llama2.c tokenizer given as the model: expected a model"))
      << r.out;
  EXPECT_TRUE(Has(r.out, "(a tokenizer goes to --tokenizer)")) << r.out;
  r = RunCliWithin(kSeconds, ScoreWith(model_, model_, text_));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, model_ + ": a llama2.c version 1 checkpoint (magic \"ak42\") given as "
                                  "--tokenizer: give it as the model"))
      << r.out;
}

// A llama2.c legacy checkpoint cut short, down to its 28-byte header: the header's small counts
// also pass for a llama2.c tokenizer's records, and the message called the file "a llama2.c
// tokenizer given as the model"; it is a damaged checkpoint, and the size is what is wrong.
TEST_F(FileKindCli, ALegacyCheckpointCutShortIsToldAsTruncatedNotAsATokenizer) {
  // stories260K's header (../shared/models): dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads,
  // vocabulary 512, seq_len 512; its first 28 bytes read as max_token_length 64 and two records.
  const int32_t header[7] = {64, 172, 5, 8, 4, 512, 512};
  std::string full(reinterpret_cast<const char*>(header), sizeof(header));
  full.append(64, '\0');
  for (const size_t size : {size_t{28}, size_t{32}, size_t{40}, size_t{92}}) {
    const std::string path = Path("cut" + std::to_string(size) + ".bin");
    testing::WriteBytes(path, full.substr(0, size));
    const RunResult r = RunCliWithin(kSeconds, "inspect --model " + Q(path));
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(Has(r.out, path + ": truncated: found " + std::to_string(size) + " bytes"))
        << r.out;
    EXPECT_TRUE(Has(r.out, "llama2.c legacy header: dim=64")) << r.out;
    EXPECT_FALSE(Has(r.out, "tokenizer")) << r.out;
    EXPECT_FALSE(Has(r.out, "not a GGUF file")) << r.out;  // the cause first, not last
  }
  // Named *.gguf, the same bytes are a GGUF file without its magic; a version 1 checkpoint (its
  // magic "ak42") cut short is truncated whatever its name.
  const std::string gguf = Path("cut.gguf");
  testing::WriteBytes(gguf, full.substr(0, 40));
  RunResult r = RunCliWithin(kSeconds, "inspect --model " + Q(gguf));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, gguf + ": named *.gguf but starts with")) << r.out;
  const std::string v1 = Path("v1.gguf");
  testing::WriteBytes(v1, ReadBytes(model_).substr(0, 300));
  r = RunCliWithin(kSeconds, "inspect --model " + Q(v1));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, v1 + ": truncated: found 300 bytes")) << r.out;
}

}  // namespace
}  // namespace stretch
