// The lab on a tiny corpus and tiny models: how the corpus is split, which cells a lab records,
// and that a lab run again skips what it has done and repeats nothing.
#include "src/lab/lab.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;

// Text with some structure (a few hundred distinct words in sentences), deterministic in `seed`.
std::string Prose(uint64_t seed, size_t bytes) {
  static const char* kWords[] = {"the",   "nation", "people", "congress", "law",   "year",
                                 "we",    "must",   "will",   "peace",    "trade", "and",
                                 "of",    "to",     "a",      "in",       "our",   "great",
                                 "state", "union",  "war",    "work",     "new",   "free"};
  Rng rng(seed);
  std::string s;
  while (s.size() < bytes) {
    s += kWords[rng.NextU64() % (sizeof kWords / sizeof kWords[0])];
    s += rng.NextU64() % 9 == 0 ? ".\n" : " ";
  }
  return s;
}

class LabTest : public testing::TempDirTest {
 protected:
  LabTest() : TempDirTest("stretch_lab_") {}

  // A folder of `n` year-named documents, 1990 + i.
  std::string YearCorpus(int n, size_t bytes) {
    const fs::path dir = dir_ / "corpus";
    fs::create_directories(dir);
    for (int i = 0; i < n; ++i) {
      testing::WriteBytes((dir / fmt::format("{}_president_x.txt", 1990 + i)).string(),
                          Prose(static_cast<uint64_t>(i + 1), bytes));
    }
    return dir.string();
  }

  LabOptions Tiny(const std::string& corpus, const std::string& out) {
    LabOptions o;
    o.corpus.path = corpus;
    o.corpus.cutoff_year = 1996;
    o.out = out;
    o.train_len = 16;
    o.steps = 6;
    o.batch = 4;
    o.dim = 16;
    o.layers = 1;
    o.heads = 2;
    o.models = {{"rope", "llama", "rope", "full"}, {"keynorm", "llama", "rope", "keynorm"}};
    o.methods = {"direct", "pi"};
    o.factors = {2, 4};
    o.windows = 2;
    o.tail_samples = 2;
    o.passkey_trials = 0;
    o.passkey_share = 0;
    return o;
  }
};

TEST_F(LabTest, YearNamedFilesSplitAtTheCutoffYear) {
  const std::string corpus = YearCorpus(8, 2000);
  LabCorpusOptions o;
  o.path = corpus;
  o.cutoff_year = 1995;
  const LabCorpus c = PrepareLabCorpus(o, Path("lab"));
  EXPECT_EQ(c.train_documents, 5);  // 1990 .. 1994
  EXPECT_EQ(c.test_documents.size(), 3u);
  EXPECT_EQ(c.test_documents[0], Prose(6, 2000));  // 1995
  EXPECT_TRUE(fs::exists(fs::path(c.train_path) / "1994_president_x.txt"));
  EXPECT_FALSE(fs::exists(fs::path(c.train_path) / "1995_president_x.txt"));
  o.cutoff_year = 1980;  // everything tests: refused
  EXPECT_NE(testing::ErrorOf([&] { PrepareLabCorpus(o, Path("lab2")); }).find("nothing to train"),
            std::string::npos);
}

TEST_F(LabTest, OtherFoldersHoldOutTheirLastFiles) {
  fs::create_directories(dir_ / "books");
  for (int i = 0; i < 20; ++i) {
    testing::WriteBytes((dir_ / "books" / fmt::format("book{:02}.txt", i)).string(),
                        Prose(static_cast<uint64_t>(i + 1), 500));
  }
  LabCorpusOptions o;
  o.path = Path("books");
  const LabCorpus c = PrepareLabCorpus(o, Path("lab"));
  EXPECT_EQ(c.train_documents, 18);
  ASSERT_EQ(c.test_documents.size(), 2u);
  EXPECT_EQ(c.test_documents[1], Prose(20, 500));
}

TEST_F(LabTest, OneFileSplitsByPositionAtALineBreak) {
  const std::string text = Prose(7, 10000);
  LabCorpusOptions o;
  o.path = File("book.txt", text);
  const LabCorpus c = PrepareLabCorpus(o, Path("lab"));
  ASSERT_EQ(c.test_documents.size(), 1u);
  const std::string train = testing::ReadBytes(c.train_path);
  EXPECT_EQ(train + c.test_documents[0], text);  // nothing lost, nothing repeated
  EXPECT_EQ(train.back(), '\n');
  EXPECT_NEAR(static_cast<double>(c.test_bytes) / text.size(), 0.1, 0.02);
  EXPECT_NE(c.split_rule.find("split by position"), std::string::npos);
}

// The records of a file without the time each cell took (which differs run to run).
std::vector<std::string> RecordsWithoutTime(const std::string& path) {
  std::vector<std::string> out;
  for (LabRecord r : ReadLabRecords({path}).records) {
    r.seconds = 0;
    out.push_back(LabRecordJson(r).dump());
  }
  return out;
}

TEST_F(LabTest, RecordsEveryCellOnceAndResumesWithoutRepeating) {
  const std::string corpus = YearCorpus(8, 6000);
  const LabOptions o = Tiny(corpus, Path("lab"));
  const LabResult first = RunLab(o);
  // Per model and method: nonrepeat at L, then nonrepeat + repeat at 2L and 4L, tail at 16, 32,
  // 64: 8 cells; 2 models x 2 methods.
  EXPECT_EQ(first.cells_done, 32);
  EXPECT_EQ(first.cells_refused, 0);
  const std::vector<std::string> records = RecordsWithoutTime(first.records_path);
  ASSERT_EQ(records.size(), 32u);
  for (const LabRecord& r : ReadLabRecords({first.records_path}).records) {
    EXPECT_GT(r.tokens, 0) << r.key;
    EXPECT_TRUE(std::isfinite(r.loss)) << r.key;
    EXPECT_EQ(r.train_len, 16);
    if (r.protocol == "tail") {
      EXPECT_EQ(r.tokens, 2 * 8) << r.key;  // 2 samples x L/2
    }
  }
  const LabResult again = RunLab(o);
  EXPECT_EQ(again.cells_done, 0);
  EXPECT_EQ(again.cells_skipped, 32);
  EXPECT_EQ(RecordsWithoutTime(again.records_path), records);

  // Another folder, the same options: the same records (training and scoring are deterministic).
  const LabResult other = RunLab(Tiny(corpus, Path("lab-other")));
  EXPECT_EQ(RecordsWithoutTime(other.records_path), records);
}

TEST_F(LabTest, ResumesFromItsRecordsAloneWithoutRetraining) {
  // A lab's records copied to another machine, its models' folders left behind: a model whose
  // cells are all recorded (or refused by its layout: `pi` on ALiBi) is neither trained nor
  // loaded again; a model with a cell left is trained again and scores only that cell.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models = {{"rope", "llama", "rope", "full"}, {"alibi", "llama", "alibi", "full"}};
  const LabResult first = RunLab(o);
  EXPECT_EQ(first.cells_done, 24);    // rope: 2 methods x 8 cells; alibi: direct's 8
  EXPECT_EQ(first.cells_refused, 8);  // alibi x pi
  const std::vector<std::string> records = RecordsWithoutTime(first.records_path);

  fs::remove_all(fs::path(o.out) / "models");
  const LabResult again = RunLab(o);
  EXPECT_EQ(again.cells_done, 0);
  EXPECT_EQ(again.cells_skipped, 24);
  EXPECT_EQ(again.cells_refused, 8);
  EXPECT_FALSE(fs::exists(fs::path(o.out) / "models" / "rope"));
  EXPECT_FALSE(fs::exists(fs::path(o.out) / "models" / "alibi"));
  EXPECT_EQ(RecordsWithoutTime(again.records_path), records);

  // One record of the rope model dropped: that model alone trains again (deterministically, so
  // the record comes back the same) and scores that cell alone.
  std::vector<std::string> lines;
  {
    std::ifstream in(first.records_path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 24u);
  const LabRecord dropped = ReadLabRecords({first.records_path}).records.front();
  ASSERT_EQ(dropped.model, "rope");
  lines.erase(lines.begin());
  {
    std::ofstream out(first.records_path, std::ios::trunc);
    for (const std::string& line : lines) out << line << "\n";
  }
  const LabResult third = RunLab(o);
  EXPECT_EQ(third.cells_done, 1);
  EXPECT_TRUE(fs::exists(fs::path(o.out) / "models" / "rope"));
  EXPECT_FALSE(fs::exists(fs::path(o.out) / "models" / "alibi"));
  std::vector<std::string> now = RecordsWithoutTime(third.records_path);
  std::vector<std::string> expected = records;
  std::sort(now.begin(), now.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(now, expected);
}

TEST_F(LabTest, RanksShareTheModelsAndMergeToTheWhole) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  const LabResult whole = RunLab(Tiny(corpus, Path("whole")));
  o.ranks = 2;
  std::vector<std::string> files;
  for (int r = 0; r < 2; ++r) {
    o.rank = r;
    const LabResult part = RunLab(o);
    EXPECT_EQ(part.cells_done, 16) << "rank " << r << " scores one model";
    files.push_back(part.records_path);
  }
  std::vector<std::string> merged;
  for (LabRecord r : ReadLabRecords(files).records) {
    r.seconds = 0;
    merged.push_back(LabRecordJson(r).dump());
  }
  std::sort(merged.begin(), merged.end());
  std::vector<std::string> expected = RecordsWithoutTime(whole.records_path);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(merged, expected);
}

TEST_F(LabTest, ChangedTrainingOptionsAreRefusedNotMixed) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models.resize(1);
  o.methods = {"direct"};
  RunLab(o);
  o.lr = 1e-2;
  const std::string error = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(error.find("lr"), std::string::npos) << error;
  EXPECT_NE(error.find("use another --out"), std::string::npos) << error;
  EXPECT_NE(error.find("lr = 0.002"), std::string::npos) << error;
  const fs::path out(o.out);

  // Without the lab's note of the options (a folder of an older build), the model's checkpoint
  // says it; a refusal writes nothing, so asking for the first options again works.
  fs::remove_all(out / "options");
  const std::string from_checkpoint = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(from_checkpoint.find("lr = 0.002"), std::string::npos) << from_checkpoint;
  EXPECT_NE(from_checkpoint.find(".safetensors"), std::string::npos) << from_checkpoint;
  o.lr = 2e-3;
  EXPECT_EQ(RunLab(o).cells_skipped, 8);
  o.lr = 1e-2;

  // Without the model's folder, only the records and the lab's note of the options are left.
  fs::remove_all(out / "models");
  const std::string from_note = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(from_note.find("lr = 0.002"), std::string::npos) << from_note;
  EXPECT_FALSE(fs::exists(out / "models")) << "refused before any work";

  // The remedy the message gives: delete the model's folder (gone already) and its records.
  fs::remove(out / "results.jsonl");
  const LabResult retrained = RunLab(o);
  EXPECT_EQ(retrained.cells_done, 8);
  EXPECT_TRUE(fs::exists(out / "models" / "rope"));
}

TEST_F(LabTest, ChangedOptionsAreRefusedWhicheverRankWroteTheNote) {
  // Trained as rank 1 of 2 (model index 1), resumed by one process with another --lr.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.methods = {"direct"};
  o.ranks = 2;
  o.rank = 1;
  EXPECT_EQ(RunLab(o).cells_done, 8);
  fs::remove_all(fs::path(o.out) / "models");
  o.ranks = 1;
  o.rank = 0;
  o.lr = 1e-2;
  const std::string error = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(error.find("model keynorm was trained with lr = 0.002"), std::string::npos) << error;
}

TEST_F(LabTest, BadOptionsAreRefusedBeforeAnyWork) {
  LabOptions o = Tiny(YearCorpus(8, 6000), Path("lab"));
  o.methods = {"direct", "nonsense"};
  EXPECT_THROW(ValidateLabOptions(o), Error);
  o = Tiny(o.corpus.path, Path("lab"));
  o.models.push_back(o.models[0]);
  EXPECT_NE(testing::ErrorOf([&] { ValidateLabOptions(o); }).find("twice"), std::string::npos);
  o = Tiny(o.corpus.path, Path("lab"));
  o.models[0].position = "spiral";
  EXPECT_NE(testing::ErrorOf([&] { ValidateLabOptions(o); }).find("model rope"), std::string::npos);
  EXPECT_FALSE(fs::exists(Path("lab")));
}

}  // namespace
}  // namespace stretch
