// One command-line dialect (issue 40, item 9): every subcommand's --help offers one name for one
// idea, llama.cpp's spellings are accepted where they do not collide, and an old spelling still
// works for a release with a note. Flags that have no effect in the combination given say so
// (item 8): one test per warning, each with a control that does not warn.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;
using testing::RunResult;

constexpr const char* kSubcommands[] = {"generate", "score",    "inspect",    "bench",
                                        "train",    "lab",      "report",     "tune",
                                        "convert",  "tokenize", "conformance"};

// One idea, the name every subcommand that takes it gives it, and the other spellings.
struct Idea {
  const char* canonical;           // the option's main (first long) name in --help
  std::vector<std::string> also;   // names the same option offers too (short, llama.cpp's)
  std::vector<std::string> old;    // former names: hidden, never offered by --help
  std::vector<std::string> where;  // the subcommands that take it
};

const std::vector<Idea>& Ideas() {
  static const std::vector<Idea> ideas = {
      {"--data", {}, {"--corpus"}, {"score", "train", "lab", "tune"}},  // the text read
      {"--train-len", {}, {"--seq-len"}, {"train", "lab"}},             // training length
      {"--windows", {}, {"--max-windows"}, {"score", "lab", "tune"}},   // windows per cell
      {"--out",
       {"-o"},
       {},
       {"train", "lab", "report", "convert", "conformance"}},  // what is written
      {"--ctx", {"-c", "--ctx-size"}, {}, {"score", "inspect", "tune"}},
      {"--temperature", {"--temp"}, {}, {"generate"}},
      {"--n-predict", {"-n"}, {"--steps"}, {"generate"}},  // tokens to write
      {"--steps", {}, {}, {"train", "lab"}},               // optimizer steps
      {"--model",
       {"-m"},
       {},
       {"generate", "score", "inspect", "bench", "tune", "convert", "tokenize"}},
  };
  return ideas;
}

// The names of each option line of a --help text. CLI11 writes an option line as two spaces and
// its names joined by ',' ("  -c,--ctx,--ctx-size INT ..."); lines that continue a description
// are indented further.
std::vector<std::vector<std::string>> OptionNames(const std::string& help) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  -", 0) != 0) continue;
    std::istringstream names(line.substr(2, line.find(' ', 2) - 2));
    std::vector<std::string> row;
    for (std::string name; std::getline(names, name, ',');) row.push_back(name);
    lines.push_back(row);
  }
  return lines;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// `stretch --help` lists every subcommand, each on a line of its own with what it does.
TEST(Cli, TheTopHelpNamesEverySubcommand) {
  const RunResult r = RunCli("--help");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string list = r.out.substr(0, r.out.find("Run `stretch SUBCOMMAND --help`"));
  for (const char* sub : kSubcommands) {
    EXPECT_TRUE(Has(list, "\n  " + std::string(sub) + " ")) << sub << " missing from:\n" << list;
  }
}

TEST(Cli, EveryIdeaHasOneNameAcrossSubcommands) {
  for (const char* sub : kSubcommands) {
    const RunResult r = RunCli(std::string(sub) + " --help");
    ASSERT_EQ(r.exit_code, 0) << sub << ": " << r.out;
    const std::vector<std::vector<std::string>> options = OptionNames(r.out);
    ASSERT_FALSE(options.empty()) << sub << ": " << r.out;
    for (const Idea& idea : Ideas()) {
      const bool takes = Contains(idea.where, sub);
      int offered = 0;
      for (const std::vector<std::string>& names : options) {
        if (!Contains(names, idea.canonical)) continue;
        ++offered;
        const auto main = std::find_if(names.begin(), names.end(),
                                       [](const std::string& n) { return n.rfind("--", 0) == 0; });
        EXPECT_EQ(*main, idea.canonical) << sub << " offers " << idea.canonical << " as an alias";
        for (const std::string& other : idea.also) {
          EXPECT_TRUE(Contains(names, other))
              << sub << ": " << idea.canonical << " without " << other;
        }
      }
      EXPECT_EQ(offered, takes ? 1 : 0) << sub << ": " << idea.canonical;
      // A former name is never offered, unless another idea owns it here (train's --steps).
      for (const std::string& old : idea.old) {
        const bool owned = std::any_of(Ideas().begin(), Ideas().end(), [&](const Idea& other) {
          return other.canonical == old && Contains(other.where, sub);
        });
        if (owned) continue;
        for (const std::vector<std::string>& names : options) {
          EXPECT_FALSE(Contains(names, old)) << sub << " offers the former name " << old;
        }
      }
    }
  }
}

// A folder for this test program's outputs.
std::string Dir(const std::string& name) {
  const fs::path dir = testing::ProgramTempDir("stretch_flags_cli_") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Two documents for a tiny training run.
std::string Corpus() {
  const std::string dir = Dir("corpus");
  for (int d = 0; d < 2; ++d) {
    std::ofstream f(dir + "/doc" + std::to_string(d) + ".txt");
    for (int w = 0; w < 300; ++w)
      f << (w % 3 == 0 ? "the cat " : w % 3 == 1 ? "sat on " : "a mat. ");
  }
  return dir;
}

const std::string kTiny =
    "--steps 2 --batch 2 --dim 16 --layers 1 --heads 2 --save-every 2 "
    "--log-every 1 --valid-fraction 0.5 --threads 1";

std::string TinyModel() {
  const testing::TinyFiles& f = testing::Files();
  return "-m '" + f.model + "' -t '" + f.tok + "'";
}

std::string Note(const std::string& old_name, const std::string& now) {
  return "note: " + old_name + " is now " + now + "; " + old_name +
         " will be removed in a later release";
}

TEST(Cli, FormerNamesStillWorkWithANote) {
  const testing::TinyFiles& f = testing::Files();
  // score --max-windows: the count applies.
  RunResult r = RunCli("score " + TinyModel() + " --data '" + f.text +
                       "' --ctx 64 --max-windows 2 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, Note("--max-windows", "--windows"))) << r.out;
  EXPECT_TRUE(Has(r.out, "2 windows of 64 positions")) << r.out;
  r = RunCli("score " + TinyModel() + " --data '" + f.text +
             "' --ctx 64 --windows 2 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "note:")) << r.out;
  EXPECT_TRUE(Has(r.out, "2 windows of 64 positions")) << r.out;
  r = RunCli("score " + TinyModel() + " --data '" + f.text + "' --windows 2 --max-windows 3");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--max-windows: the former name of --windows; give one of them, not both"))
      << r.out;
  // A former name keeps the new one's checks.
  r = RunCli("score " + TinyModel() + " --data '" + f.text + "' --max-windows 0");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "found 0")) << r.out;

  // generate --steps: the number of tokens to write (prompt 1 + 5 = 6 positions).
  r = RunCli("generate " + TinyModel() + " --steps 5 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, Note("--steps", "--n-predict"))) << r.out;
  EXPECT_TRUE(Has(r.out, "decode: 5 tokens generated")) << r.out;

  // lab --corpus: the path reaches the lab (which then finds no such text).
  r = RunCli("lab --corpus /nonexistent/corpus --out '" + Dir("lab") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, Note("--corpus", "--data"))) << r.out;
  EXPECT_TRUE(Has(r.out, "/nonexistent/corpus")) << r.out;

  // train --seq-len: the training length, stored as seq_len; --resume reads the stored key back.
  const std::string out = Dir("train");
  r = RunCli("train --data '" + Corpus() + "' -o '" + out + "' --seq-len 16 " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, Note("--seq-len", "--train-len"))) << r.out;
  r = RunCli("inspect -m '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t row = r.out.find("trained context length (seq_len)");
  ASSERT_NE(row, std::string::npos) << r.out;
  const std::string line = r.out.substr(row, r.out.find('\n', row) - row);
  EXPECT_TRUE(line.ends_with(" 16")) << line;
  r = RunCli("train --out '" + out + "' --resume --train-len 32 --threads 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "--train-len 32: the run in")) << r.out;
  EXPECT_TRUE(Has(r.out, "started with --train-len 16")) << r.out;
  r = RunCli("train --out '" + out + "' --resume --steps 3 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "note: --seq-len")) << "the stored key is not the user's spelling";
}

TEST(Cli, LlamaCppSpellingsAreAccepted) {
  const testing::TinyFiles& f = testing::Files();
  for (const char* ctx : {"-c 32", "--ctx-size 32"}) {
    const RunResult r = RunCli("score " + TinyModel() + " --data '" + f.text + "' " + ctx +
                               " --windows 1 --no-progress");
    ASSERT_EQ(r.exit_code, 0) << ctx << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "1 windows of 32 positions")) << r.out;
  }
  RunResult r = RunCli("inspect -m '" + f.model + "' -c 256");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "memory at context 256")) << r.out;
  for (const char* n : {"-n 4", "--n-predict 4"}) {
    r = RunCli("generate " + TinyModel() + " " + n + " --temp 0.8 --seed 7 --ignore-eos");
    ASSERT_EQ(r.exit_code, 0) << n << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "decode: 4 tokens generated")) << r.out;
    EXPECT_FALSE(Has(r.out, "warning:")) << "sampling at 0.8 uses --seed: " << r.out;
  }
}

// --- Flags with no effect: a warning each, and the run goes on.

TEST(Cli, GenerateWarnsOfTopPAndSeedAtTemperatureZero) {
  RunResult r = RunCli("generate " + TinyModel() + " -n 3 --top-p 0.9");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --top-p 0.9 has no effect at --temperature 0")) << r.out;
  r = RunCli("generate " + TinyModel() + " -n 3 --temperature 0 --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --seed 5 has no effect at --temperature 0")) << r.out;
  r = RunCli("generate " + TinyModel() + " -n 3 --temperature 1 --top-p 0.9 --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning:")) << r.out;
}

TEST(Cli, TrainWarnsOfVocabSizeWithTheBytesTokenizer) {
  RunResult r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("vocab") +
                       "' --train-len 16 --vocab-size 300 " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --vocab-size 300 has no effect with the bytes tokenizer"))
      << r.out;
  r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("novocab") + "' --train-len 16 " +
             kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning:")) << r.out;
}

TEST(Cli, TrainWarnsOfEvalWindowsWithoutValidation) {
  const RunResult r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("eval") +
                             "' --train-len 16 --eval-every 0 --eval-windows 4 " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --eval-windows 4 has no effect with --eval-every 0")) << r.out;
}

// The passkey documents' options without passkey documents: a warning; with them, none. An
// unknown value is refused by name.
TEST(Cli, TrainWarnsOfPasskeyOptionsWithoutPasskeyDocuments) {
  RunResult r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("filler") +
                       "' --train-len 16 --passkey-filler mixed " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --passkey-filler has no effect without passkey documents"))
      << r.out;
  r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("filler2") +
             "' --train-len 128 --passkey-share 0.2 --passkey-filler mixed "
             "--passkey-phrasings varied --passkey-decoys 1 " +
             kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning:")) << r.out;
  EXPECT_TRUE(Has(r.out, "each in one of 6 phrasings, half of them with a block of text repeated"))
      << r.out;
  EXPECT_TRUE(Has(r.out, "up to 1 decoy sentence(s) in each")) << r.out;
  r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("decoys") +
             "' --train-len 16 --passkey-decoys 1 " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --passkey-decoys has no effect without passkey documents"))
      << r.out;
  r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("decoys2") +
             "' --train-len 128 --passkey-share 0.2 --passkey-decoys 9 " + kTiny);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--passkey-decoys")) << r.out;
  r = RunCli("train --data '" + Corpus() + "' --out '" + Dir("filler3") +
             "' --train-len 128 --passkey-share 0.2 --passkey-filler junk " + kTiny);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "--passkey-filler: \"junk\": expected text or mixed")) << r.out;
}

TEST(Cli, LabWarnsOfVocabSizeWithTheBytesTokenizer) {
  // The warning comes before the lab reads its text: a missing one ends the run cheaply here.
  RunResult r =
      RunCli("lab --data /nonexistent/corpus --vocab-size 300 --out '" + Dir("lab2") + "'");
  EXPECT_TRUE(Has(r.out, "warning: --vocab-size 300 has no effect with the bytes tokenizer"))
      << r.out;
  r = RunCli("lab --data /nonexistent/corpus --tokenizer bpe --vocab-size 300 --out '" +
             Dir("lab3") + "'");
  EXPECT_FALSE(Has(r.out, "warning:")) << r.out;
}

TEST(Cli, ScoreWarnsOfBucketWhenNoBucketIsShown) {
  const testing::TinyFiles& f = testing::Files();
  const std::string args = "score " + TinyModel() + " --data '" + f.text +
                           "' --ctx 32,64 --windows 1 --bucket 8 --no-progress";
  RunResult r = RunCli(args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out,
                  "warning: --bucket 8: the table of several methods or lengths shows no "
                  "position buckets"))
      << r.out;
  r = RunCli(args + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning:")) << r.out;
}

// A mistyped subcommand is named, with the nearest one; a flag value CLI11 refuses reads like every
// other error ("stretch: error: ..."), with where the options are; both exit 2 (usage).
TEST(Cli, UsageErrorsNameWhatWasWrongAndExit2) {
  RunResult r = RunCli("scor --help");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "stretch: error: unknown subcommand \"scor\" (did you mean \"score\"?)"))
      << r.out;
  EXPECT_TRUE(Has(r.out, "expected one of: generate, score,")) << r.out;
  r = RunCli("frobnicate");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "unknown subcommand \"frobnicate\" (expected one of:")) << r.out;
  r = RunCli("sc");  // begins one name: score
  EXPECT_TRUE(Has(r.out, "unknown subcommand \"sc\" (did you mean \"score\"?)")) << r.out;
  r = RunCli("t");  // begins train, tune and tokenize: no guess
  EXPECT_TRUE(Has(r.out, "unknown subcommand \"t\" (expected one of:")) << r.out;
  r = RunCli("help");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "unknown subcommand \"help\" (did you mean --help?)")) << r.out;
  r = RunCli("");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "stretch: error: no subcommand given (expected one of: generate,"))
      << r.out;
  for (const char* help : {"--help", "--help-all"}) {
    r = RunCli(help);
    EXPECT_EQ(r.exit_code, 0) << help << r.out;
    EXPECT_TRUE(Has(r.out, "Subcommands:")) << help << r.out;
  }
  r = RunCli("score " + TinyModel() + " --ctx 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "stretch: error: --ctx")) << r.out;
  EXPECT_TRUE(Has(r.out, "Run `stretch score --help` for the options.")) << r.out;
  r = RunCli("score " + TinyModel() + " --ctx 2 --no-such-flag");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "stretch: error: The following argument was not expected: --no-such-flag"))
      << r.out;
  r = RunCli("--version");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "stretch ")) << r.out;
}

TEST(Cli, ConvertWarnsThatLlama2cFilesCarryNoVocabulary) {
  const std::string out = Dir("convert") + "/tiny.bin";
  RunResult r = RunCli("convert " + TinyModel() + " --to llama2c -o '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "warning: --tokenizer")) << r.out;
  EXPECT_TRUE(Has(r.out, "llama2.c files carry no vocabulary")) << r.out;
  r = RunCli("convert -m '" + testing::Files().model + "' --to llama2c -o '" + out + "2'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning:")) << r.out;
}

}  // namespace
}  // namespace stretch
