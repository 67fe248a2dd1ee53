// The lab on a tiny corpus and tiny models: how the corpus is split, which cells a lab records,
// and that a lab run again skips what it has done and repeats nothing.
#include "src/lab/lab.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/core/stop.h"
#include "src/core/threads.h"
#include "src/io/model_file.h"
#include "src/io/stretch_checkpoint.h"
#include "src/lab/gate.h"
#include "src/train/arch_spec.h"
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
    o.copy_trials = 0;  // the retrieval cells and the gate: the tests of their own below
    o.repeat_periods = {};
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
  LabOptions o = Tiny(corpus, Path("lab"));
  o.build = "1111aaaa2222";
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
    EXPECT_EQ(r.build, o.build) << r.key;
    if (r.protocol == "tail") {
      EXPECT_EQ(r.tokens, 2 * 8) << r.key;  // 2 samples x L/2
    }
  }
  // Resumed by another build: the build is no training option, so the models and records stand
  // (and still name the build that scored them).
  o.build = "3333bbbb4444";
  const LabResult again = RunLab(o);
  EXPECT_EQ(again.cells_done, 0);
  EXPECT_EQ(again.cells_skipped, 32);
  EXPECT_EQ(RecordsWithoutTime(again.records_path), records);
  o.build = "1111aaaa2222";

  // Another folder, the same options: the same records (training and scoring are deterministic).
  LabOptions other_options = Tiny(corpus, Path("lab-other"));
  other_options.build = o.build;
  const LabResult other = RunLab(other_options);
  EXPECT_EQ(RecordsWithoutTime(other.records_path), records);
}

TEST_F(LabTest, ModelsTrainedSideBySideEqualModelsTrainedOneAtATime) {
  // Two threads: the two models train at once, one thread each (TrainModels). One thread: one
  // after the other. The same records either way, and both notes say which happened.
  const std::string corpus = YearCorpus(8, 6000);
  const int threads = NumThreads();
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  auto side_by_side = [&] {
    return std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return n.find("training 2 models side by side, 1 thread each") != std::string::npos;
    });
  };
  SetNumThreads(1);
  const LabResult one = RunLab(Tiny(corpus, Path("lab-one")), cb);
  EXPECT_FALSE(side_by_side());
  notes.clear();
  SetNumThreads(2);
  const LabResult two = RunLab(Tiny(corpus, Path("lab-two")), cb);
  EXPECT_EQ(NumThreads(), 2) << "restored after training";
  SetNumThreads(threads);
  EXPECT_TRUE(side_by_side());
  EXPECT_EQ(RecordsWithoutTime(two.records_path), RecordsWithoutTime(one.records_path));
}

// The first ETA comes from a few steps timed at the start, which can be far off (a lab at nice
// 19 beside a build timed 2.68 s a step for a real 0.08). Once the first model's steps run, the
// models waiting behind it are counted at that pace: with a calibration of 1,000 s a step, three
// models of 6 steps one after the other would read hours.
TEST_F(LabTest, TheEtaFollowsTheStepsOnceTheyRun) {
  const std::string corpus = YearCorpus(8, 6000);
  const int threads = NumThreads();
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models.push_back({"alibi", "llama", "alibi", "full"});
  o.step_seconds = 1000;
  std::vector<std::string> lines, notes;
  LabCallbacks cb;
  cb.progress = [&](const std::string& line) { lines.push_back(line); };
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  SetNumThreads(1);
  RunLab(o, cb);
  SetNumThreads(threads);
  // The plan's estimate is the calibration's: hours.
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("estimated time: about") != std::string::npos &&
           n.find(" h (") != std::string::npos;
  })) << fmt::format("{}", fmt::join(notes, "\n"));
  // The first model's first step: the two waiting models at its pace, seconds.
  const auto first = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("model rope (1/3)") != std::string::npos &&
           l.find("training step 1/") != std::string::npos;
  });
  ASSERT_NE(first, lines.end()) << fmt::format("{}", fmt::join(lines, "\n"));
  const size_t eta = first->find("ETA ");
  ASSERT_NE(eta, std::string::npos) << *first;
  const std::string value = first->substr(eta + 4, first->find(']', eta) - eta - 4);
  EXPECT_TRUE(value.ends_with(" s")) << *first;
}

TEST_F(LabTest, SaysWhenItsFolderHoldsOtherModelsRecords) {
  // A folder run with one model, then with another (a preset whose models were renamed, say):
  // the second run names the first's model and its records, which its report will show too.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models = {{"rope", "llama", "rope", "full"}};
  const LabResult first = RunLab(o);
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  RunLab(o, cb);
  auto told = [&] {
    return std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return n.find("also holds the records of models this run does not train") !=
             std::string::npos;
    });
  };
  EXPECT_FALSE(told()) << "the same models again: nothing to say";
  notes.clear();
  o.models = {{"alibi", "llama", "alibi", "full"}};
  RunLab(o, cb);
  const std::string expected = fmt::format(
      "also holds the records of models this run does not train: rope ({});", first.cells_done);
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
    return n.find(expected) != std::string::npos;
  })) << fmt::format("{}", fmt::join(notes, "\n"));
}

TEST_F(LabTest, ResumesFromItsRecordsAloneWithoutRetraining) {
  // A lab's records copied to another machine, its models' folders left behind: a model whose
  // cells are all recorded (or refused by its layout: `pi` on ALiBi) is neither trained nor
  // loaded again; a model with a cell left is trained again and scores only that cell.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models = {{"rope", "llama", "rope", "full"}, {"alibi", "llama", "alibi", "full"}};
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  const LabResult first = RunLab(o, cb);
  EXPECT_EQ(first.cells_done, 24);    // rope: 2 methods x 8 cells; alibi: direct's 8
  EXPECT_EQ(first.cells_refused, 8);  // alibi x pi
  // The refusal is told once for the method, with its count and reason, not once a cell.
  const auto refusal_notes = std::count_if(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("not scored") != std::string::npos && n.find("pi") != std::string::npos;
  });
  EXPECT_EQ(refusal_notes, 1);
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find(
               "model alibi (2/2): 8 cells not scored, their method or length unable to run them: "
               "pi (8 "
               "cells): method \"pi:factor=") == 0;
  })) << fmt::format("{}", fmt::join(notes, "\n"));
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

// Each line of a records file with `edit` applied to its JSON.
void EditRecords(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::vector<std::string> lines;
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  std::ofstream out(path, std::ios::trunc);
  for (const std::string& line : lines) {
    nlohmann::json j = nlohmann::json::parse(line);
    edit(j);
    out << j.dump() << "\n";
  }
}

TEST_F(LabTest, CellsWhoseScoringRulesChangedAreScoredAgainAndTheRestKept) {
  // Records as an older build wrote them (no "scoring" field: rules 1, before a trained log-n
  // counted the keys a query sees). Resumed, the lab scores again exactly the cells those rules
  // scored otherwise (the log-n model under `window` beyond its width) and keeps the others.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models = {{"logn", "llama", "rope", "logn"}, {"rope", "llama", "rope", "full"}};
  o.methods = {"direct", "window"};
  const LabResult first = RunLab(o);
  ASSERT_EQ(first.cells_done, 32);
  const LabRecordFile fresh = ReadLabRecords({first.records_path});
  for (const LabRecord& r : fresh.records) EXPECT_EQ(r.scoring, kLabScoringRevision) << r.key;
  // An old build's records: no scoring field, and a loss no build writes, to see which are read.
  EditRecords(first.records_path, [](nlohmann::json& j) {
    j.erase("scoring");
    j["loss"] = 99.0;
  });
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  const LabResult again = RunLab(o, cb);
  // The log-n model under `window` (width L = 16) at 32 and 64: nonrepeat, repeat, tail.
  EXPECT_EQ(again.cells_done, 6);
  EXPECT_EQ(again.cells_skipped, 26);
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("scored again: logn (6)") != std::string::npos;
  })) << fmt::format("{}", fmt::join(notes, "\n"));
  const LabRecordFile read = ReadLabRecords({again.records_path});
  EXPECT_EQ(read.records.size(), 32u);
  EXPECT_EQ(read.superseded, 6);
  EXPECT_EQ(read.duplicates, 0);
  std::map<std::string, LabRecord> before;
  for (const LabRecord& r : fresh.records) before[r.key] = r;
  for (const LabRecord& r : read.records) {
    const bool moved = r.model == "logn" && r.method == "window" && r.ctx > o.train_len;
    EXPECT_EQ(r.scoring, moved ? kLabScoringRevision : 1) << r.key;
    // Read: the new record where the cell was scored again (the same as the first run's, the lab
    // being deterministic), else the old one kept.
    EXPECT_EQ(r.loss, moved ? before.at(r.key).loss : 99.0) << r.key;
  }
  // A third run has nothing left to do.
  const LabResult third = RunLab(o);
  EXPECT_EQ(third.cells_done, 0);
  EXPECT_EQ(third.cells_skipped, 32);
}

TEST(LabCellRescored, OnlyWhereAKeyCountingScaleMeetsAMask) {
  auto config = [](const std::string& attention) {
    TrainArch a;
    a.model.dim = 16;
    a.model.n_heads = 2;
    a.model.n_kv_heads = 2;
    a.model.n_layers = 2;
    a.model.seq_len = 16;
    ApplyAttentionSpec(attention, a);
    return a.model;
  };
  const ModelConfig logn = config("logn"), plain = config("full"), ssmax = config("ssmax");
  const ModelConfig hybrid_logn = config("logn,hwfa=8");
  // Under the rules of the records before "scoring" (1):
  EXPECT_TRUE(LabCellRescored(logn, "window", 64, 1));
  EXPECT_TRUE(LabCellRescored(ssmax, "lambda", 64, 1));
  EXPECT_FALSE(LabCellRescored(logn, "window", 16, 1));  // the window holds every key at L
  EXPECT_FALSE(LabCellRescored(logn, "direct", 64, 1));
  EXPECT_FALSE(LabCellRescored(logn, "yarn", 64, 1));
  EXPECT_FALSE(LabCellRescored(plain, "window", 64, 1));       // no scale counts keys
  EXPECT_TRUE(LabCellRescored(hybrid_logn, "direct", 16, 1));  // a window layer
  // Revision 3: Self-Extend's defaults, on any model, unless both group and window are given.
  EXPECT_TRUE(LabCellRescored(plain, "self-extend", 64, 2));
  EXPECT_TRUE(LabCellRescored(plain, "self-extend:reach=1", 64, 2));
  EXPECT_TRUE(LabCellRescored(plain, "self-extend:group=4+logn", 64, 2));
  EXPECT_TRUE(LabCellRescored(logn, "self-extend:window=8", 64, 1));
  EXPECT_FALSE(LabCellRescored(plain, "self-extend:group=4,window=8", 64, 2));
  EXPECT_FALSE(LabCellRescored(plain, "rerope", 64, 2));
  EXPECT_FALSE(LabCellRescored(logn, "window", 64, 2));  // revision 2's cells are current
  // Records of the current rules are never scored again.
  EXPECT_FALSE(LabCellRescored(plain, "self-extend", 64, kLabScoringRevision));
  EXPECT_FALSE(LabCellRescored(logn, "window", 64, kLabScoringRevision));
  EXPECT_FALSE(LabCellRescored(hybrid_logn, "direct", 16, kLabScoringRevision));
}

// YaRN on models trained this short (L = 16, head dim 8: the fastest pair turns 2.5 times within
// L, none the 32 times its ramp keeps) is said to run outside its regime, once, whatever the
// models and lengths; other methods are not.
TEST_F(LabTest, SaysOnceWhereYarnRunsOutsideItsRegime) {
  LabOptions o = Tiny(YearCorpus(8, 6000), Path("lab"));
  o.methods = {"direct", "pi", "yarn"};
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  const LabResult run = RunLab(o, cb);
  int yarn = 0, others = 0;
  for (const std::string& n : notes) {
    if (n.find("no RoPE pair turns beta_fast") == std::string::npos) continue;
    (n.find(": yarn: ") != std::string::npos ? yarn : others)++;
    EXPECT_NE(n.find("the fastest turns 2.5 times"), std::string::npos) << n;
  }
  EXPECT_EQ(yarn, 1) << "two models, two lengths: told once" << ::testing::PrintToString(notes);
  EXPECT_EQ(others, 0);
  // Each YaRN record beyond L carries the sentence (the report's reading repeats it); no other.
  int with = 0;
  for (const LabRecord& r : ReadLabRecords({run.records_path}).records) {
    const bool yarn_beyond = r.method == "yarn" && r.ctx > r.train_len;
    EXPECT_EQ(!r.caveat.empty(), yarn_beyond) << r.key;
    with += yarn_beyond ? 1 : 0;
  }
  EXPECT_GT(with, 0);
}

// Each record says whether its method's +logn ran on top of the model's own trained log-n (the
// factor twice, DoubleLogNNote): beyond L on the log-n model with a +logn method that sees every
// key, never at L, never without +logn or a trained log-n, never under a window of L.
TEST_F(LabTest, RecordsSayWhereLogNRanTwice) {
  LabOptions o = Tiny(YearCorpus(8, 6000), Path("lab"));
  o.models = {{"logn", "llama", "rope", "logn"}, {"rope", "llama", "rope", "full"}};
  o.methods = {"direct", "direct+logn", "window:window=16+logn"};
  o.factors = {4};
  const LabResult run = RunLab(o);
  const LabRecordFile read = ReadLabRecords({run.records_path});
  ASSERT_FALSE(read.records.empty());
  int twice = 0;
  for (const LabRecord& r : read.records) {
    ASSERT_TRUE(r.logn_twice.has_value()) << r.key;
    const bool expected = r.model == "logn" && r.method == "direct+logn" && r.ctx > o.train_len;
    EXPECT_EQ(*r.logn_twice, expected) << r.key;
    twice += expected;
  }
  EXPECT_GT(twice, 0);
}

TEST_F(LabTest, ARunCutShortKeepsTheRecordsOfEveryModelItFinished) {
  // One thread: one model at a time, each scored before the next trains. A run stopped as the
  // second model starts training has recorded every cell of the first; a resume from those
  // records alone (the models' folders gone, as on another machine) trains only the second.
  const std::string corpus = YearCorpus(8, 6000);
  const LabOptions o = Tiny(corpus, Path("lab"));
  const int threads = NumThreads();
  SetNumThreads(1);
  LabCallbacks cut;
  cut.note = [](const std::string& line) {
    if (line.find("model keynorm (2/2)") != std::string::npos) throw std::runtime_error("cut");
  };
  EXPECT_THROW(RunLab(o, cut), std::runtime_error);
  SetNumThreads(threads);
  std::map<std::string, int> by_model;
  for (const LabRecord& r : ReadLabRecords(LabResultFiles(o.out)).records) by_model[r.model]++;
  EXPECT_EQ(by_model["rope"], 16);
  EXPECT_EQ(by_model["keynorm"], 0);
  fs::remove_all(fs::path(o.out) / "models");
  const LabResult rest = RunLab(o);
  EXPECT_EQ(rest.cells_skipped, 16);
  EXPECT_EQ(rest.cells_done, 16);
  EXPECT_FALSE(fs::exists(fs::path(o.out) / "models" / "rope"));
  EXPECT_TRUE(fs::exists(fs::path(o.out) / "models" / "keynorm"));
}

TEST_F(LabTest, AStoppedRunTellsTheRefusalsItMetBeforeTheStop) {
  // At L = 16 the passkey cells of 32 tokens fit neither layout (stretch's needs 61 tokens with a
  // 5-digit key, llama.cpp's more): they are refused as they come up (not a stop of the whole
  // lab), and told once the model's cells are done. A run stopped (Ctrl-C) at a later cell of
  // that model (stretch's layout at 64) tells them before it stops, not never.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models.resize(1);
  o.methods = {"direct"};
  o.passkey_trials = 1;
  o.passkey_depths = {0.0};
  o.passkey_llama = true;
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  cb.progress = [](const std::string& line) {
    if (line.find("passkey @ 64") != std::string::npos) SetStopSignalForTest(SIGINT);
  };
  EXPECT_THROW(RunLab(o, cb), Stopped);
  SetStopSignalForTest(0);
  const auto told = std::count_if(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("not scored, their method or length unable to run them") != std::string::npos;
  });
  EXPECT_EQ(told, 1) << fmt::format("{}", fmt::join(notes, "\n"));
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
  // A lab trained before every row began with BOS is named as such, with the flag that resumes it.
  o.lr = 2e-3;
  o.bos_rows = false;
  const std::string bos = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(bos.find("bos_rows = true"), std::string::npos) << bos;
  EXPECT_NE(bos.find("drop --no-bos-rows"), std::string::npos) << bos;
  o.bos_rows = true;
  o.lr = 1e-2;

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
  // Passkey documents in rows too short for them: refused here, so that `stretch lab --plan`
  // says so too (it planned and estimated such a lab, and only the run refused it). With the
  // bytes tokenizer a document needs 61 tokens (TrainRunOptions::passkey_share).
  o = Tiny(o.corpus.path, Path("lab"));
  o.passkey_share = 0.05;
  const std::string short_rows = testing::ErrorOf([&] { ValidateLabOptions(o); });
  EXPECT_NE(short_rows.find("model rope: TrainRunOptions::seq_len 16: too short for passkey"),
            std::string::npos)
      << short_rows;
  EXPECT_NE(short_rows.find(">= 61"), std::string::npos) << short_rows;
  o.train_len = 61;
  EXPECT_NO_THROW(ValidateLabOptions(o));
  o.train_len = 60;
  EXPECT_NE(testing::ErrorOf([&] { ValidateLabOptions(o); }).find("seq_len 60: too short"),
            std::string::npos);
  // In stages the share is a stage's MIX (the lab refuses --passkey-share with stages): the
  // message names the stage and its share; a stage without passkey documents is not checked.
  o = Tiny(o.corpus.path, Path("lab"));
  o.stages = {ParseLabStage("copy:3:3e-3:periodic=1", "test"),
              ParseLabStage("mixed:3:1e-3:text=0.8,passkey=0.2", "test")};
  const std::string staged = testing::ErrorOf([&] { ValidateLabOptions(o); });
  EXPECT_NE(staged.find("model rope: stage mixed: passkey=0.2 in its MIX: LabOptions::train_len "
                        "16 is too short"),
            std::string::npos)
      << staged;
  EXPECT_NE(staged.find(">= 61"), std::string::npos) << staged;
  EXPECT_EQ(staged.find("passkey_share"), std::string::npos) << staged;
  o.stages.pop_back();
  EXPECT_NO_THROW(ValidateLabOptions(o));
  EXPECT_FALSE(fs::exists(Path("lab")));
}

// ---- The copy gate ----

Interval Iv(double estimate, double low, double high) { return {estimate, low, high}; }

GateCopyMeasurement Copy(const char* material, double copy, double control, double diff_low) {
  return {material, 48, Iv(copy, copy - 0.05, copy + 0.05),
          Iv(control, control - 0.05, control + 0.05),
          Iv(copy - control, diff_low, copy - control + 0.1)};
}

TEST(CopyGate, PassesOnlyACopyTwentyPointsAboveItsControlAndPasskeysAtEightyPercent) {
  GateMeasurements m;
  m.copy = {Copy("text", 0.62, 0.10, 0.40), Copy("random", 0.90, 0.04, 0.80)};
  GatePasskeyMeasurement k;
  k.trials = 20;
  k.retrieved = 17;
  k.exact = WilsonInterval(17, 20);
  k.control = WilsonInterval(0, 20);
  k.difference = NewcombeDifference(17, 20, 0, 20);
  m.passkey = k;
  GateVerdict v = DecideCopyGate(m);
  EXPECT_TRUE(v.passed) << v.reason;
  EXPECT_EQ(v.reason, "");
  ASSERT_EQ(v.parts.size(), 3u);
  EXPECT_EQ(v.parts[2].name, "passkey");

  // 19 points: below the threshold, however narrow the interval.
  m.copy[0] = Copy("text", 0.29, 0.10, 0.15);
  v = DecideCopyGate(m);
  EXPECT_FALSE(v.passed);
  EXPECT_FALSE(v.parts[0].passed);
  EXPECT_TRUE(v.parts[1].passed);
  EXPECT_NE(v.reason.find("far copy of text at L: copy 29.0% - control 10.0% = +19.0 points < 20"),
            std::string::npos)
      << v.reason;
  // 30 points whose interval reaches 0: noise, not copying.
  m.copy[0] = Copy("text", 0.40, 0.10, -0.02);
  v = DecideCopyGate(m);
  EXPECT_FALSE(v.parts[0].passed);
  EXPECT_NE(v.reason.find("not above 0"), std::string::npos) << v.reason;
  // Passkey: 15 of 20 is 75%.
  m.copy[0] = Copy("text", 0.62, 0.10, 0.40);
  m.passkey->retrieved = 15;
  m.passkey->exact = WilsonInterval(15, 20);
  v = DecideCopyGate(m);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.reason, "passkey at L: 15 of 20 keys read back (75.0%) < 80%");

  // The gate line keeps each part, and a cell needs only its own part.
  const LabGate g = GateLineOf(v, m);
  EXPECT_NEAR(g.copy_accuracy, 0.62, 1e-12);  // text's far copy: the line's own columns
  LabRecord cell;
  cell.protocol = "far-copy";
  cell.material = "text";
  EXPECT_EQ(NotInformativeReason(g, cell), "");
  cell.protocol = "passkey";
  cell.material = "";
  EXPECT_NE(NotInformativeReason(g, cell).find("15 of 20"), std::string::npos);
  cell.protocol = "nonrepeat";
  EXPECT_EQ(NotInformativeReason(g, cell), "");
  // A line of an older build (no parts) holds for every part.
  LabGate old;
  old.passed = false;
  old.reason = "copy - control = 3 points < 20 at L";
  cell.protocol = "repeat";
  EXPECT_NE(NotInformativeReason(old, cell).find("3 points"), std::string::npos);
  // Round trip through JSON.
  LabGate read = LabGateFromJson(LabGateJson(g));
  ASSERT_EQ(read.parts.size(), 3u);
  EXPECT_EQ(read.parts[2].reason, g.parts[2].reason);
  EXPECT_FALSE(read.PartPassed("passkey"));
  EXPECT_TRUE(read.PartPassed("random"));
}

// Bytes as tokens, BOS 256.
constexpr int kBos = 256;
std::vector<int> Bytes(std::string_view text) {
  std::vector<int> out;
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// A scorer that copies perfectly: position p predicts the token that followed the most recent
// earlier occurrence of the last 3 tokens (the context of retrieval.h's 4-gram leak rule), or
// nothing when they never occurred.
void OracleScorer(const std::vector<std::vector<int>>& sequences, int64_t, const TokenSink& sink) {
  constexpr int64_t n = 3;
  for (size_t w = 0; w < sequences.size(); ++w) {
    const std::vector<int>& s = sequences[w];
    for (int64_t p = 0; p + 1 < static_cast<int64_t>(s.size()); ++p) {
      int predicted = -1;
      for (int64_t q = p - 1; q >= n - 1 && p >= n - 1 && predicted < 0; --q) {
        bool same = true;
        for (int64_t k = 0; k < n && same; ++k) same = s[q - k] == s[p - k];
        if (same) predicted = s[q + 1];
      }
      const int target = s[p + 1];
      sink({static_cast<int64_t>(w), p, target, predicted == target ? 0.0 : std::log(257.0),
            predicted == target});
    }
  }
}

// A model that copies nothing: always the same guess.
void ConstantScorer(const std::vector<std::vector<int>>& sequences, int64_t,
                    const TokenSink& sink) {
  for (size_t w = 0; w < sequences.size(); ++w) {
    for (int64_t p = 0; p + 1 < static_cast<int64_t>(sequences[w].size()); ++p) {
      const int target = sequences[w][p + 1];
      sink({static_cast<int64_t>(w), p, target, std::log(257.0), target == 'e'});
    }
  }
}

class CopyGateMeasure : public ::testing::Test {
 protected:
  CopyGateMeasure() {
    for (uint64_t i = 0; i < 3; ++i) text_.push_back(Bytes(Prose(100 + i, 20000)));
    for (const std::vector<int>& t : text_) docs_.emplace_back(t);
    options_.train_len = 64;
    options_.span = 16;
    options_.copy_trials = 8;
    options_.passkey_trials = 5;
    options_.passkey_depths = {0.0, 1.0};
    options_.bootstrap.resamples = 500;
  }
  std::vector<std::vector<int>> text_;
  TokenSpans docs_;
  CopyGateOptions options_;
  const TextEncoder encode_ = [](std::string_view t) { return Bytes(t); };
};

TEST_F(CopyGateMeasure, AModelThatDoesNotCopyFailsAndAPerfectCopierPassesFarCopy) {
  const GateMeasurements none = MeasureCopyGate(ConstantScorer, docs_, encode_, kBos, options_);
  ASSERT_EQ(none.copy.size(), 2u);
  ASSERT_TRUE(none.passkey.has_value()) << "L = 64 holds a passkey";
  EXPECT_EQ(none.copy[0].trials, 24) << "8 trials at each of L/4, L/2 and L - span";
  const GateVerdict failed = DecideCopyGate(none);
  EXPECT_FALSE(failed.passed);
  for (const LabGatePart& p : failed.parts) EXPECT_FALSE(p.passed) << p.name;
  EXPECT_NE(failed.reason.find("far copy of text"), std::string::npos) << failed.reason;
  EXPECT_NE(failed.reason.find("far copy of random"), std::string::npos) << failed.reason;
  EXPECT_NE(failed.reason.find("passkey at L: 0 of 10"), std::string::npos) << failed.reason;

  const GateMeasurements oracle = MeasureCopyGate(OracleScorer, docs_, encode_, kBos, options_);
  const GateVerdict passed = DecideCopyGate(oracle);
  for (const GateCopyMeasurement& c : oracle.copy) {
    // The controls hold no copy of what is scored: the copier finds nothing to copy there.
    EXPECT_EQ(c.control.estimate, 0.0) << c.material;
    EXPECT_GT(c.copy.estimate, 0.6) << c.material;
  }
  ASSERT_EQ(passed.parts.size(), 3u);
  EXPECT_TRUE(passed.parts[0].passed) << passed.parts[0].reason;
  EXPECT_TRUE(passed.parts[1].passed) << passed.parts[1].reason;
}

TEST_F(CopyGateMeasure, TheControlsNeverHoldTheAnswer) {
  // Far copy: no scored target of a control has its 4-gram (3 tokens and itself) earlier in the
  // control, for either material; the copy arm does (that is what it tests).
  for (const CopySource source : {CopySource::kText, CopySource::kRandom}) {
    FarCopyOptions fo;
    fo.source = source;
    fo.span = 16;
    for (const FarCopyTrial& t : MakeFarCopyTrials(docs_, encode_, kBos, 64, 32, 8, fo)) {
      const std::vector<int>& s = t.control.tokens;
      for (const int64_t p : t.control.scored) {
        for (int64_t q = 2; q + 1 < p + 1; ++q) {
          const bool leak = s[q - 2] == s[p - 2] && s[q - 1] == s[p - 1] && s[q] == s[p] &&
                            s[q + 1] == s[p + 1] && q < p;
          ASSERT_FALSE(leak) << CopySourceName(source) << ": target at " << p + 1
                             << " occurs after the same 3 tokens at " << q + 1;
        }
      }
      EXPECT_EQ(t.copy.scored, t.control.scored);
    }
  }
  // Passkey: the control's key appears nowhere before its answer.
  for (const PasskeyProbeTrial& t :
       MakePasskeyProbe(docs_, encode_, kBos, 64, 0.5, 5, 7, PasskeyFormat{})) {
    const std::vector<int> key = Bytes(t.control.key);
    const auto answer = t.control.tokens.begin() + t.control.key_positions.front() + 1;
    EXPECT_EQ(std::search(t.control.tokens.begin(), answer, key.begin(), key.end()), answer)
        << t.control.key;
    const auto test_answer = t.trial.tokens.begin() + t.trial.key_positions.front() + 1;
    EXPECT_NE(std::search(t.trial.tokens.begin(), test_answer, key.begin(), key.end()), test_answer)
        << "the test arm holds its key in the needle";
  }
}

// ---- The lab's retrieval cells, gate and stages ----

// One model of 6 steps (it copies nothing: it fails every part of the gate), every retrieval
// protocol at 8 L.
LabOptions RetrievalLab(LabOptions o) {
  o.train_len = 64;  // a passkey fits at L (the gate's)
  o.models.resize(1);
  o.methods = {"direct"};
  o.factors = {8};  // 512: llama.cpp's passkey layout fits
  o.tail = false;
  o.copy_trials = 4;
  o.text_copy_trials = 6;  // text cells beyond L: their own count
  o.copy_span = 16;
  o.repeat_periods = {2, 4};
  o.passkey_trials = 2;
  o.passkey_depths = {0.5};
  o.sliding_stride = 128;  // its interval too: a bootstrap over its windows
  return o;
}

TEST_F(LabTest, RetrievalCellsCarryControlsIntervalsAndTheGatesVerdict) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = RetrievalLab(Tiny(corpus, Path("lab")));
  o.score_not_informative = true;  // the far-copy and passkey cells too, marked
  o.build = "5555cccc6666";
  const LabResult first = RunLab(o);
  const LabRecordFile read = ReadLabRecords({first.records_path});
  ASSERT_EQ(read.gates.size(), 1u);
  const LabGate& gate = read.gates[0];
  EXPECT_EQ(gate.model, "rope");
  EXPECT_EQ(gate.build, o.build);
  EXPECT_FALSE(gate.passed) << "6 steps teach no copying";
  ASSERT_EQ(gate.parts.size(), 3u);
  EXPECT_EQ(gate.parts[0].name, "text");
  EXPECT_EQ(gate.parts[1].name, "random");
  EXPECT_EQ(gate.parts[2].name, "passkey");
  EXPECT_EQ(gate.passkey_trials, kGateMinPasskeyTrials)
      << "one depth: the gate's own count at L, not the 2 trials of a cell beyond it";

  std::map<std::string, int> count;
  std::set<int64_t> distances, periods;
  for (const LabRecord& r : read.records) {
    std::string kind = r.protocol;
    if (!r.material.empty()) kind += "/" + r.material;
    if (!r.layout.empty()) kind += "/" + r.layout;
    if (r.period > 0) kind += "/period";
    count[kind]++;
    EXPECT_TRUE(r.accuracy_ci.known) << r.key;
    EXPECT_LE(r.accuracy_ci.lo, r.accuracy + 1e-12) << r.key;
    EXPECT_GE(r.accuracy_ci.hi, r.accuracy - 1e-12) << r.key;
    // Each position bucket of a non-repeat cell with its own intervals (a bootstrap over the
    // windows), around its value.
    if (r.protocol == "nonrepeat") {
      ASSERT_FALSE(r.by_position.empty()) << r.key;
      for (const LabPositionBucket& b : r.by_position) {
        EXPECT_TRUE(b.loss_ci.known && b.accuracy_ci.known) << r.key << " at " << b.begin;
        EXPECT_LE(b.loss_ci.lo, b.loss + 1e-12) << r.key << " at " << b.begin;
        EXPECT_GE(b.loss_ci.hi, b.loss - 1e-12) << r.key << " at " << b.begin;
        EXPECT_LT(b.loss_ci.lo, b.loss_ci.hi) << r.key << " at " << b.begin;
        EXPECT_LE(b.accuracy_ci.lo, b.accuracy + 1e-12) << r.key << " at " << b.begin;
        EXPECT_GE(b.accuracy_ci.hi, b.accuracy - 1e-12) << r.key << " at " << b.begin;
      }
    }
    const bool retrieval =
        r.protocol == "far-copy" || r.protocol == "passkey" || r.protocol == "repeat";
    if (r.protocol == "far-copy" || r.period > 0 || r.protocol == "passkey") {  // both layouts
      EXPECT_TRUE(r.has_control) << r.key;
      EXPECT_TRUE(r.control_accuracy_ci.known) << r.key;
    }
    if (r.protocol == "passkey") {  // both layouts, byte tokens: one count per digit
      ASSERT_EQ(r.right_by_place.size(), 5u) << r.key;
      ASSERT_EQ(r.control_right_by_place.size(), 5u) << r.key;
      for (const int64_t n : r.control_right_by_place) EXPECT_LE(n, r.sequences) << r.key;
      int64_t right = 0;
      for (const int64_t n : r.right_by_place) {
        EXPECT_LE(n, r.sequences) << r.key;
        right += n;
      }
      EXPECT_NEAR(static_cast<double>(right) / static_cast<double>(5 * r.sequences),
                  r.token_accuracy, 1e-12)
          << r.key;
    } else {
      EXPECT_TRUE(r.right_by_place.empty()) << r.key;
    }
    if (r.protocol == "far-copy") {
      distances.insert(r.distance);
      EXPECT_EQ(r.sequences, r.material == "text" ? 6 : 4) << r.key;
      EXPECT_NE(r.key.find("/distance="), std::string::npos) << r.key;
    }
    if (r.period > 0) periods.insert(r.period);
    // The gate failed every part: every retrieval cell says so, with the numbers.
    EXPECT_EQ(r.informative, !retrieval) << r.key;
    if (retrieval) {
      EXPECT_NE(r.not_informative.find("failed the copy gate"), std::string::npos) << r.key;
    }
  }
  EXPECT_EQ(distances, (std::set<int64_t>{64, 128, 256, 496}));  // >= L, up to 8L - span
  EXPECT_EQ(periods, (std::set<int64_t>{128, 256}));
  EXPECT_EQ(count["far-copy/text"], 4);
  EXPECT_EQ(count["far-copy/random"], 4);
  EXPECT_EQ(count["repeat"], 1) << "period L, keyed as before periods";
  EXPECT_EQ(count["repeat/period"], 2);
  EXPECT_EQ(count["passkey"], 1);
  EXPECT_EQ(count["passkey/llama"], 1);
  EXPECT_EQ(count["sliding"], 1);
  EXPECT_EQ(first.cells_done, static_cast<int64_t>(read.records.size()));

  // Resumed: nothing scored again, and the gate is read back, not measured again.
  const LabResult again = RunLab(o);
  EXPECT_EQ(again.cells_done, 0);
  const LabRecordFile reread = ReadLabRecords({first.records_path});
  EXPECT_EQ(reread.records.size(), read.records.size());
  std::ifstream in(first.records_path);
  int gate_lines = 0;
  for (std::string line; std::getline(in, line);) {
    gate_lines += line.find("\"record\":\"gate\"") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(gate_lines, 1);
}

// By default a model that fails the gate part a far-copy or passkey cell beyond L needs leaves
// that cell unscored (no record), on the first run and on a resume; its other cells (repeat
// included) are scored; asked for, the held-back cells are scored on a later run.
TEST_F(LabTest, AGateMeasuredUnderRulesThatChangedIsMeasuredAgain) {
  // A log-n model with a window layer: rules 1 scored every cell of it otherwise, its gate too.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = RetrievalLab(Tiny(corpus, Path("lab")));
  o.layers = 2;
  o.models = {{"hwfa-logn", "llama", "rope", "logn,hwfa=32"}};
  o.score_not_informative = true;  // the first run records the cells its failed gate marks
  const LabResult first = RunLab(o);
  ASSERT_GT(first.cells_done, 0);
  ASSERT_EQ(first.cells_held_back, 0);
  EditRecords(first.records_path, [](nlohmann::json& j) { j.erase("scoring"); });
  ASSERT_EQ(ReadLabRecords({first.records_path}).gates.at(0).scoring, 1);
  // Resumed without scoring what the gate fails: the gate measured again (6 steps teach no
  // copying: it fails again) holds the retrieval cells back, and their old records are voided.
  o.score_not_informative = false;
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  const LabResult again = RunLab(o, cb);
  EXPECT_GT(again.cells_held_back, 0);
  EXPECT_EQ(again.cells_done + again.cells_held_back, first.cells_done);
  EXPECT_EQ(again.cells_skipped, 0);  // every cell: its window layer counts keys
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("copy gate measured again") != std::string::npos;
  })) << fmt::format("{}", fmt::join(notes, "\n"));
  const LabRecordFile read = ReadLabRecords({again.records_path});
  ASSERT_EQ(read.gates.size(), 1u);
  EXPECT_EQ(read.gates[0].scoring, kLabScoringRevision);
  EXPECT_FALSE(read.gates[0].passed);
  EXPECT_EQ(read.superseded, first.cells_done);
  EXPECT_EQ(read.records.size(), static_cast<size_t>(again.cells_done));
  for (const LabRecord& r : read.records) EXPECT_EQ(r.scoring, kLabScoringRevision) << r.key;
  // Nothing is left to do, and nothing is voided twice.
  const LabResult third = RunLab(o);
  EXPECT_EQ(third.cells_done, 0);
  EXPECT_EQ(ReadLabRecords({again.records_path}).records.size(), read.records.size());
}

// A gate read back with fewer passkeys at L than this build reads (records of a build before
// kGateMinPasskeyTrials rose) is measured again when the model is loaded for cells left to score.
TEST_F(LabTest, AGateThatReadFewerPasskeysIsMeasuredAgain) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = RetrievalLab(Tiny(corpus, Path("lab")));
  const LabResult first = RunLab(o);
  ASSERT_EQ(ReadLabRecords({first.records_path}).gates.at(0).passkey_trials,
            kGateMinPasskeyTrials);  // one depth
  EditRecords(first.records_path, [](nlohmann::json& j) {
    if (j["record"] == "gate") j["passkey_trials"] = kGateMinPasskeyTrials / 4;
  });
  o.methods = {"direct", "pi"};  // cells left: the model is loaded
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  RunLab(o, cb);
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find(fmt::format("copy gate measured again: the one read back (")) !=
               std::string::npos &&
           n.find(fmt::format("read {} passkeys at L, this build reads {}",
                              kGateMinPasskeyTrials / 4, kGateMinPasskeyTrials)) !=
               std::string::npos;
  })) << fmt::format("{}", fmt::join(notes, "\n"));
  const LabRecordFile read = ReadLabRecords({first.records_path});
  ASSERT_FALSE(read.gates.empty());
  EXPECT_EQ(read.gates.back().passkey_trials, kGateMinPasskeyTrials);
}

TEST_F(LabTest, AModelCheckpointThisBuildRefusesNamesTheFolderToDelete) {
  // The checkpoint of a log-n HWFA model as an earlier build wrote it (no "log_n_keys" in its
  // config, the key's name changed in place, and no checksum, as in checkpoints older still):
  // refused, with the folder that trains it again; the model is not trained over.
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.layers = 2;
  o.models = {{"hwfa-logn", "llama", "rope", "logn,hwfa=8"}};
  o.methods = {"direct"};
  RunLab(o);
  int edited = 0;
  std::vector<std::string> checkpoints;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(o.out) / "models")) {
    if (entry.path().extension() != ".safetensors") continue;
    std::string bytes = testing::ReadBytes(entry.path().string());
    for (size_t at = bytes.find("log_n_keys"); at != std::string::npos;
         at = bytes.find("log_n_keys", at)) {
      bytes.replace(at, 10, "log_n_keyz");
      ++edited;
    }
    const std::string checksum(kCheckpointChecksumKey);
    const size_t at = bytes.find(checksum);
    ASSERT_NE(at, std::string::npos);
    bytes[at + checksum.size() - 1] = 'X';
    testing::WriteBytes(entry.path().string(), bytes);
    checkpoints.push_back(entry.path().string());
  }
  ASSERT_GT(edited, 0);
  fs::remove(fs::path(o.out) / "results.jsonl");  // its cells to score again
  const std::string error = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(error.find("Train the model again"), std::string::npos) << error;
  EXPECT_NE(error.find("delete " + (fs::path(o.out) / "models" / "hwfa-logn").string()),
            std::string::npos)
      << error;
  for (const std::string& path : checkpoints) EXPECT_TRUE(fs::exists(path)) << path;
}

TEST_F(LabTest, AModelThatFailsTheGateLeavesItsFarCopyAndPasskeyCellsUnscored) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = RetrievalLab(Tiny(corpus, Path("lab")));
  const LabResult first = RunLab(o);
  const LabRecordFile read = ReadLabRecords({first.records_path});
  ASSERT_EQ(read.gates.size(), 1u);
  ASSERT_FALSE(read.gates[0].passed) << "6 steps teach no copying";
  std::map<std::string, int> count;
  for (const LabRecord& r : read.records) count[r.protocol]++;
  EXPECT_EQ(count["far-copy"], 0);
  EXPECT_EQ(count["passkey"], 0);
  EXPECT_EQ(count["repeat"], 3) << "the seeds' repeat column is scored whatever the gate says";
  EXPECT_EQ(count["nonrepeat"], 2);      // at L and 8 L
  EXPECT_EQ(first.cells_held_back, 10);  // 4 distances x 2 materials, 2 passkey layouts
  EXPECT_EQ(first.cells_done, static_cast<int64_t>(read.records.size()));

  const LabResult again = RunLab(o);  // the gate read back holds them back again
  EXPECT_EQ(again.cells_done, 0);
  EXPECT_EQ(again.cells_held_back, 10);

  o.score_not_informative = true;
  const LabResult scored = RunLab(o);
  EXPECT_EQ(scored.cells_done, 10);
  for (const LabRecord& r : ReadLabRecords({first.records_path}).records) {
    if (r.protocol == "far-copy" || r.protocol == "passkey") {
      EXPECT_FALSE(r.informative) << r.key;
    }
  }
}

TEST_F(LabTest, StagesChainTheirCheckpointsAndCoverTheModelsId) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models.resize(1);
  o.methods = {"direct"};
  o.stages = {ParseLabStage("copy:4:3e-3:periodic=0.5,gapped=0.5", "test"),
              ParseLabStage("mixed:4:1e-3:text=0.6,textcopy=0.2,gapped=0.2", "test")};
  std::vector<std::string> notes;
  LabCallbacks cb;
  cb.note = [&](const std::string& line) { notes.push_back(line); };
  const LabResult first = RunLab(o, cb);
  EXPECT_EQ(first.cells_done, 8);
  const fs::path models = fs::path(o.out) / "models" / "rope";
  EXPECT_TRUE(fs::exists(models / "1-copy"));
  EXPECT_TRUE(fs::exists(models / "2-mixed"));
  auto noted = [&](const std::string& what) {
    return std::any_of(notes.begin(), notes.end(),
                       [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(noted("stage 2/2 (mixed): starting from the last checkpoint of")) << notes.size();
  // After each stage, its copy readout; 4 steps do not teach a copy, and the lab says so.
  EXPECT_TRUE(noted("stage 1/2 (copy): copy readout at the last evaluation")) << notes.size();
  EXPECT_TRUE(noted("stage 1/2 (copy): warning: the copy across a gap has not come yet"))
      << notes.size();
  EXPECT_TRUE(noted("stage 2/2 (mixed): warning: the copy across a gap has not come ("))
      << notes.size();
  const std::vector<std::string> records = RecordsWithoutTime(first.records_path);

  // The model's id covers every stage (the same lab without stages, below, has another).
  LabOptions one = o;
  one.stages.clear();
  const std::string staged_key = ReadLabRecords({first.records_path}).records[0].model_id;
  EXPECT_EQ(staged_key.size(), 16u);

  // Killed between the stages: the first is kept, the second trained from it, to the same model.
  fs::remove_all(models / "2-mixed");
  fs::remove(first.records_path);
  notes.clear();
  const LabResult resumed = RunLab(o, cb);
  EXPECT_EQ(resumed.cells_done, 8);
  EXPECT_TRUE(noted("stage 1/2 (copy): trained already"));
  // The stage passed over shows its readout again, read from its training log, and its warning.
  EXPECT_TRUE(noted("stage 1/2 (copy): copy readout at the last evaluation, from its training log"))
      << notes.size();
  EXPECT_TRUE(noted("stage 1/2 (copy): warning: the copy across a gap has not come yet"))
      << notes.size();
  EXPECT_EQ(RecordsWithoutTime(resumed.records_path), records);

  // A stage's options changed: refused, naming the stage and the option.
  o.stages[1].lr = 2e-3;
  const std::string error = testing::ErrorOf([&] { RunLab(o); });
  EXPECT_NE(error.find("2-mixed.lr"), std::string::npos) << error;

  // Asked for in one run, the staged model is refused with what to give instead.
  const std::string one_run = testing::ErrorOf([&] { RunLab(one); });
  EXPECT_NE(one_run.find("was trained in stages"), std::string::npos) << one_run;

  // The same lab without stages is another model.
  one.out = Path("lab-one");
  notes.clear();
  const LabResult single = RunLab(one, cb);
  EXPECT_NE(ReadLabRecords({single.records_path}).records[0].model_id, staged_key);
  // Trained on text alone (no gapped or periodic rows): its readout warns of nothing.
  EXPECT_FALSE(noted("warning: the copy across a gap")) << notes.size();
  EXPECT_FALSE(fs::exists(fs::path(one.out) / "models" / "rope" / "1-copy")) << "one run";
}

// A model's own MIX for one stage (the quick lab's KeyNorm: more passkey rows in its prose stage)
// is part of what the model is: the same lab without it is another model, refused on resume by
// the key that differs; a MIX for a stage the lab has not is refused by name.
TEST_F(LabTest, AModelsOwnStageMixIsPartOfTheModel) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab-mix"));
  o.models = {{"rope", "llama", "rope", "full"}};
  o.methods = {"direct"};
  o.factors = {2};
  o.stages = {ParseLabStage("copy:3:3e-3:periodic=1", "test"),
              ParseLabStage("mixed:3:1e-3:text=0.8,gapped=0.2", "test")};
  o.models[0].stage_mix["mixed"] = "text=0.5,gapped=0.4,textcopy=0.1";
  RunLab(o);
  LabOptions plain = o;
  plain.models[0].stage_mix.clear();
  const std::string changed = testing::ErrorOf([&] { RunLab(plain); });
  EXPECT_NE(changed.find("2-mixed.mix = \"gapped=0.4,textcopy=0.1\""), std::string::npos)
      << changed;

  LabOptions bad = o;
  bad.out = Path("lab-mix-bad");
  bad.models[0].stage_mix = {{"prose", "passkey=0.3"}};
  const std::string missing = testing::ErrorOf([&] { RunLab(bad); });
  EXPECT_NE(missing.find("model rope gives a MIX for stage prose"), std::string::npos) << missing;
  bad.models[0].stage_mix = {{"mixed", "passkey=2"}};
  const std::string wrong = testing::ErrorOf([&] { RunLab(bad); });
  EXPECT_NE(wrong.find("model rope's stage_mix"), std::string::npos) << wrong;

  // The presets: every model trains the lab's stages as they are (KeyNorm's own prose MIX read
  // far copy of prose worse; docs/training.md, twenty-first round).
  for (const LabOptions& preset : {QuickLab(), FullLab()}) {
    for (const LabModel& m : preset.models) EXPECT_TRUE(m.stage_mix.empty()) << m.label;
    EXPECT_EQ(preset.stages.back().name, "prose");
  }
}

// A model whose first stage has its own attention (the quick lab's KeyNorm: its copy stage with
// plain keys): that stage's checkpoint is without KeyNorm, the next one's with it; without a
// second stage the model keeps its attention throughout (it is scored as what it is named).
TEST_F(LabTest, AFirstStageAttentionHoldsForTheFirstStageOnly) {
  const std::string corpus = YearCorpus(8, 6000);
  LabOptions o = Tiny(corpus, Path("lab"));
  o.models = {{"keynorm", "llama", "rope", "keynorm", "full"}};
  o.methods = {"direct"};
  o.factors = {2};
  o.stages = {ParseLabStage("copy:3:3e-3:periodic=1", "test"),
              ParseLabStage("mixed:3:1e-3:text=0.8,gapped=0.2", "test")};
  RunLab(o);
  const fs::path models = fs::path(o.out) / "models" / "keynorm";
  const auto key_norm = [](const fs::path& run) {
    return LoadModelFile(run.string(), ModelFileOptions{"", true}).model.config.attention.key_norm;
  };
  EXPECT_FALSE(key_norm(models / "1-copy"));
  EXPECT_TRUE(key_norm(models / "2-mixed"));

  o.out = Path("lab-one-stage");
  o.stages.resize(1);
  RunLab(o);
  EXPECT_TRUE(key_norm(fs::path(o.out) / "models" / "keynorm" / "1-copy"));

  const LabModel quick = QuickLab().models.at(1);
  EXPECT_EQ(quick.label, "keynorm-logn");
  EXPECT_EQ(quick.AttentionOfRun(0, QuickLab().stages.size()), "full");
  EXPECT_EQ(quick.AttentionOfRun(1, QuickLab().stages.size()), "keynorm,scale=1,logn");
}

// The warning after a training run whose gapped copies read less than 0.25 above their control;
// none above that, and none without gapped rows in the readout.
TEST(LabCopyWarning, FiresBelowAQuarterAboveTheControlOnly) {
  CopyReadout r;
  EXPECT_FALSE(CopyNotComeWarning(r, false));  // no gapped rows read
  r.copy = Proportion{99, 100, {}, {}};
  r.copy_control = Proportion{3, 100, {}, {}};
  EXPECT_FALSE(CopyNotComeWarning(r, false));
  r.copy = Proportion{30, 100, {}, {}};  // 0.27 above: the copy has come
  EXPECT_FALSE(CopyNotComeWarning(r, false));
  r.copy = Proportion{27, 100, {}, {}};
  const auto warning = CopyNotComeWarning(r, false);
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("gapped copies read 0.270 against 0.030"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--seed"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("a later stage may still bring it"), std::string::npos) << *warning;
  // After the model's last run, no later stage is promised.
  const auto last = CopyNotComeWarning(r, true);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->find("later stage"), std::string::npos) << *last;
  EXPECT_NE(last->find("has not come (gapped"), std::string::npos) << *last;
}

TEST(LabStage, ParsesAndPrintsBack) {
  const LabStage st =
      ParseLabStage("mixed:2000:1e-3:text=0.3,textcopy=0.3,gapped=0.3,passkey=0.1", "--stage");
  EXPECT_EQ(st.name, "mixed");
  EXPECT_EQ(st.steps, 2000);
  EXPECT_DOUBLE_EQ(st.lr, 1e-3);
  EXPECT_DOUBLE_EQ(st.mix.passkey, 0.1);
  EXPECT_DOUBLE_EQ(st.mix.textcopy, 0.3);
  EXPECT_EQ(ParseLabStage(LabStageText(st), "--stage").mix, st.mix);
  // The alphabet options ride in the list, and print back.
  const LabStage small = ParseLabStage(
      "prose:10:1e-3:textperiodic=0.2,alphabet-min=3,strings=abc012,passkey=0.2", "--stage");
  EXPECT_EQ(small.alphabet_min, 3);
  EXPECT_EQ(small.strings, "abc012");
  EXPECT_DOUBLE_EQ(small.mix.textperiodic, 0.2);
  EXPECT_DOUBLE_EQ(small.mix.passkey, 0.2);
  const LabStage again = ParseLabStage(LabStageText(small), "--stage");
  EXPECT_EQ(again.alphabet_min, 3);
  EXPECT_EQ(again.strings, "abc012");
  EXPECT_EQ(again.mix, small.mix);
  // So do the copied strings' lengths.
  const LabStage spans = ParseLabStage("copy:800:3e-3:periodic=1,span=4..12", "--stage");
  EXPECT_EQ(spans.span_min, 4);
  EXPECT_EQ(spans.span_max, 12);
  const LabStage spans_again = ParseLabStage(LabStageText(spans), "--stage");
  EXPECT_EQ(spans_again.span_min, 4);
  EXPECT_EQ(spans_again.span_max, 12);
  // And the passkey documents' phrasings ("one", the default, prints as nothing).
  const LabStage varied = ParseLabStage("mixed:10:1e-3:passkey=0.2,phrasings=varied", "--stage");
  EXPECT_EQ(varied.passkey_phrasings, "varied");
  EXPECT_EQ(ParseLabStage(LabStageText(varied), "--stage").passkey_phrasings, "varied");
  EXPECT_EQ(ParseLabStage("mixed:10:1e-3:passkey=0.2,phrasings=one", "--stage").passkey_phrasings,
            "");
  const LabStage filler = ParseLabStage("mixed:10:1e-3:passkey=0.2,filler=mixed", "--stage");
  EXPECT_EQ(filler.passkey_filler, "mixed");
  EXPECT_EQ(ParseLabStage(LabStageText(filler), "--stage").passkey_filler, "mixed");
  const LabStage decoys = ParseLabStage("mixed:10:1e-3:passkey=0.2,decoys=2", "--stage");
  EXPECT_EQ(decoys.passkey_decoys, 2);
  EXPECT_EQ(ParseLabStage(LabStageText(decoys), "--stage").passkey_decoys, 2);
  EXPECT_EQ(ParseLabStage("mixed:10:1e-3:passkey=0.2", "--stage").passkey_decoys, 0);
  // Every preset stage prints back to itself.
  for (const LabStage& p : QuickLab().stages) {
    const LabStage q = ParseLabStage(LabStageText(p), "--stage");
    EXPECT_EQ(q.mix, p.mix) << LabStageText(p);
    EXPECT_EQ(q.alphabet_min, p.alphabet_min) << LabStageText(p);
    EXPECT_EQ(q.strings, p.strings) << LabStageText(p);
    EXPECT_EQ(q.span_min, p.span_min) << LabStageText(p);
    EXPECT_EQ(q.span_max, p.span_max) << LabStageText(p);
    EXPECT_EQ(q.passkey_phrasings, p.passkey_phrasings) << LabStageText(p);
    EXPECT_EQ(q.passkey_filler, p.passkey_filler) << LabStageText(p);
    EXPECT_EQ(q.passkey_decoys, p.passkey_decoys) << LabStageText(p);
  }
  EXPECT_EQ(QuickLab().stages.back().passkey_filler, "mixed");
  EXPECT_EQ(QuickLab().stages.back().passkey_decoys, 0);
  for (const char* bad :
       {"x", "x:1:1e-3", "x:0:1e-3:gapped=1", "x:1:0:gapped=1", "x:1:1e-3:", "x:1:1e-3:bogus=1",
        ":1:1e-3:gapped=1", "x:1:1e-3:gapped=1,alphabet-min=1", "x:1:1e-3:gapped=1,strings=a",
        "x:1:1e-3:gapped=1,span=4", "x:1:1e-3:gapped=1,span=1..4", "x:1:1e-3:gapped=1,span=9..4",
        "x:1:1e-3:gapped=1,span=a..9", "x:1:1e-3:passkey=0.2,phrasings=many",
        "x:1:1e-3:passkey=0.2,filler=junk"}) {
    const std::string error = testing::ErrorOf([&] { ParseLabStage(bad, "--stage"); });
    EXPECT_NE(error.find("--stage"), std::string::npos) << bad << ": " << error;
    EXPECT_NE(error.find("NAME:STEPS:LR:MIX"), std::string::npos) << bad << ": " << error;
  }
}

// The full preset's layouts of current models (Gemma 3's local windows with a global layer, Llama
// 4's chunks with a NoPE layer, HWFA) keep both kinds of layer at the preset's depth: with a
// global layer every K-th and fewer than K layers, the model would be local only.
TEST(LabPresets, FullPresetLayoutsKeepAGlobalAndALocalLayerAtItsDepth) {
  const LabOptions o = FullLab();
  int mixed = 0;
  for (const LabModel& m : o.models) {
    const bool local_global = m.attention.find("gemma3=") != std::string::npos ||
                              m.attention.find("llama4=") != std::string::npos ||
                              m.attention.find("hwfa=") != std::string::npos;
    if (!local_global) continue;
    TrainArch a;
    a.model.n_layers = o.layers;
    ApplyAttentionSpec(m.attention, a);
    const std::vector<LayerLayout>& layers = a.model.attention.layers;
    ASSERT_EQ(layers.size(), static_cast<size_t>(o.layers)) << m.label;
    const auto local =
        std::count_if(layers.begin(), layers.end(), [](const LayerLayout& l) { return l.Local(); });
    EXPECT_GT(local, 0) << m.label;
    EXPECT_LT(local, o.layers) << m.label << ": no global layer at " << o.layers << " layers";
    ++mixed;
  }
  EXPECT_GE(mixed, 3);  // hwfa, gemma3, llama4
}

// A model whose attention normalises queries or keys (QueryNorm, KeyNorm, cosine) trains its copy
// stage with plain attention in both presets: from scratch with unit-length keys a 2-layer model
// never found the induction circuit (docs/training.md, sixth round), and then every retrieval
// cell of it reads "not informative". Each preset's specs parse, and labels are unique (they name
// the run folders).
TEST(LabPresets, NormalisedAttentionTrainsItsCopyStageWithPlainAttention) {
  for (const LabOptions& o : {QuickLab(), FullLab()}) {
    std::set<std::string> labels;
    int normalised = 0;
    for (const LabModel& m : o.models) {
      EXPECT_TRUE(labels.insert(m.label).second) << m.label << " twice";
      TrainArch a;
      a.model.n_layers = o.layers;
      a.model.seq_len = o.train_len;
      ApplyAttentionSpec(m.attention, a);
      const bool norm = m.attention.find("norm") != std::string::npos ||
                        m.attention.find("cosine") != std::string::npos;
      if (!norm) continue;
      ++normalised;
      EXPECT_EQ(m.AttentionOfRun(0, o.stages.size()), "full") << m.label;
      EXPECT_EQ(m.AttentionOfRun(1, o.stages.size()), m.attention) << m.label;
    }
    EXPECT_GE(normalised, 1);
  }
}

}  // namespace
}  // namespace stretch
