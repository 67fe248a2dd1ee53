// The lab's records: JSON round trip, the key check, and the reading rules (a cut last line
// skipped and counted, the first record of a key kept across files, the writer cutting an
// unfinished line before it appends).
#include "src/report/records.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/report/sample_records.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

using testing::ErrorOf;
using testing::ReadBytes;
using testing::SampleCell;

class RecordsTest : public testing::TempDirTest {
 protected:
  RecordsTest() : TempDirTest("records_test_") {}
};

std::string Line(const LabRecord& r) { return LabRecordJson(r).dump() + "\n"; }

void ExpectSameRecord(const LabRecord& a, const LabRecord& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.corpus, b.corpus);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.variant, b.variant);
  EXPECT_EQ(a.train_len, b.train_len);
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.resolved_method, b.resolved_method);
  EXPECT_EQ(a.protocol, b.protocol);
  EXPECT_EQ(a.ctx, b.ctx);
  EXPECT_EQ(a.tail, b.tail);
  EXPECT_EQ(a.stride, b.stride);
  EXPECT_EQ(a.depth, b.depth);
  EXPECT_EQ(a.sequences, b.sequences);
  EXPECT_EQ(a.tokens, b.tokens);
  // nlohmann writes doubles with enough digits to read them back exactly.
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.accuracy, b.accuracy);
  EXPECT_EQ(a.token_accuracy, b.token_accuracy);
  EXPECT_EQ(a.seconds, b.seconds);
  EXPECT_EQ(a.right_by_place, b.right_by_place);
  EXPECT_EQ(a.control_right_by_place, b.control_right_by_place);
  ASSERT_EQ(a.by_position.size(), b.by_position.size());
  for (size_t i = 0; i < a.by_position.size(); ++i) {
    EXPECT_EQ(a.by_position[i].begin, b.by_position[i].begin);
    EXPECT_EQ(a.by_position[i].end, b.by_position[i].end);
    EXPECT_EQ(a.by_position[i].count, b.by_position[i].count);
    EXPECT_EQ(a.by_position[i].loss, b.by_position[i].loss);
    EXPECT_EQ(a.by_position[i].accuracy, b.by_position[i].accuracy);
    EXPECT_EQ(a.by_position[i].loss_ci.known, b.by_position[i].loss_ci.known);
    EXPECT_EQ(a.by_position[i].loss_ci.lo, b.by_position[i].loss_ci.lo);
    EXPECT_EQ(a.by_position[i].loss_ci.hi, b.by_position[i].loss_ci.hi);
    EXPECT_EQ(a.by_position[i].accuracy_ci.known, b.by_position[i].accuracy_ci.known);
    EXPECT_EQ(a.by_position[i].accuracy_ci.lo, b.by_position[i].accuracy_ci.lo);
    EXPECT_EQ(a.by_position[i].accuracy_ci.hi, b.by_position[i].accuracy_ci.hi);
  }
}

TEST_F(RecordsTest, RoundTripThroughJsonAndFile) {
  LabRecord passkey = SampleCell("rope", "yarn:factor=8", "passkey", 1024, 0.5);
  passkey.depth = 0.25;
  passkey.accuracy = 1.0 / 3.0;  // not exact in decimal
  passkey.right_by_place = {0, 4, 3, 4, 4};
  passkey.control_right_by_place = {1, 0, 0, 1, 0};
  passkey.key = LabRecordKey(passkey);
  EXPECT_EQ(passkey.key, "sotu/rope/yarn:factor=8/passkey/1024/depth=0.25");
  LabRecord tail = SampleCell("rope", "direct", "tail", 512, 0.5);
  tail.tail = 64;
  tail.key = LabRecordKey(tail);
  EXPECT_EQ(tail.key, "sotu/rope/direct/tail/512/tail=64");

  ExpectSameRecord(LabRecordFromJson(LabRecordJson(passkey)), passkey);
  const std::string path = Path("r.jsonl");
  {
    LabRecordWriter writer(path);
    writer.Append(passkey);
    writer.Append(tail);
  }
  const LabRecordFile read = ReadLabRecords({path});
  ASSERT_EQ(read.records.size(), 2u);
  ExpectSameRecord(read.records[0], passkey);
  ExpectSameRecord(read.records[1], tail);
  EXPECT_EQ(read.duplicates, 0);
  EXPECT_EQ(read.partial_lines, 0);
}

// The retrieval fields (intervals, the control, far copy's distance and material, the repeat
// period, the gate's verdict) go through JSON and a file unchanged, are part of the key where they
// tell cells apart, and read as "not known" in records that lack them.
TEST_F(RecordsTest, RetrievalFieldsAndTheGateRoundTrip) {
  LabRecord far = SampleCell("rope", "rerope", "far-copy", 1024, 0.5);
  far.distance = 700;
  far.material = "random";
  far.accuracy_ci = {true, 0.61, 0.72};
  far.loss_ci = {true, 1.1, 1.3};
  far.has_control = true;
  far.control_accuracy = 0.04;
  far.control_loss = 3.9;
  far.control_accuracy_ci = {true, 0.02, 0.07};
  far.informative = false;
  far.not_informative = "copy - control = 3 points < 20 at L";
  far.logn_twice = true;
  far.build = "33d992a1e485-dirty";
  far.caveat = "no RoPE pair turns beta_fast = 32 times within the original length";
  far.key = LabRecordKey(far);
  EXPECT_EQ(far.key, "sotu/rope/rerope/far-copy/1024/distance=700/material=random");
  LabRecord repeat = SampleCell("rope", "direct", "repeat", 1024, 0.5);
  repeat.period = 256;
  repeat.key = LabRecordKey(repeat);
  EXPECT_EQ(repeat.key, "sotu/rope/direct/repeat/1024/period=256");
  LabGate gate;
  gate.corpus = "sotu";
  gate.model = "rope";
  gate.model_id = "00000000000000aa";
  gate.train_len = 128;
  gate.copy_accuracy = 0.9;
  gate.copy_ci = {true, 0.85, 0.94};
  gate.control_accuracy = 0.05;
  gate.control_ci = {true, 0.02, 0.09};
  gate.copy_trials = 32;
  gate.passkey_accuracy = 0.5;
  gate.passkey_ci = {true, 0.3, 0.7};
  gate.passkey_trials = 20;
  gate.passed = false;
  gate.reason = "passkey 50% < 80% at L";
  gate.build = "33d992a1e485";
  const std::string path = Path("r.jsonl");
  {
    LabRecordWriter writer(path);
    writer.Append(far);
    writer.Append(gate);
    writer.Append(repeat);
  }
  const LabRecordFile read = ReadLabRecords({path});
  ASSERT_EQ(read.records.size(), 2u);
  const LabRecord& r = read.records[0];
  ExpectSameRecord(r, far);
  EXPECT_EQ(r.distance, 700);
  EXPECT_EQ(r.material, "random");
  EXPECT_TRUE(r.accuracy_ci.known);
  EXPECT_EQ(r.accuracy_ci.lo, 0.61);
  EXPECT_EQ(r.loss_ci.hi, 1.3);
  EXPECT_TRUE(r.has_control);
  EXPECT_EQ(r.control_accuracy, 0.04);
  EXPECT_EQ(r.control_accuracy_ci.hi, 0.07);
  EXPECT_FALSE(r.informative);
  EXPECT_EQ(r.not_informative, far.not_informative);
  EXPECT_EQ(r.logn_twice, std::optional<bool>(true));
  EXPECT_EQ(r.build, far.build);
  EXPECT_EQ(r.caveat, far.caveat);
  EXPECT_EQ(read.records[1].caveat, "");
  EXPECT_EQ(read.records[1].build, "") << "absent: the build is not known";
  EXPECT_EQ(read.records[1].period, 256);
  EXPECT_FALSE(read.records[1].logn_twice.has_value()) << "absent: not known, never false";
  EXPECT_FALSE(read.records[1].accuracy_ci.known) << "absent: not known, never [0, 0]";
  EXPECT_FALSE(read.records[1].has_control);
  EXPECT_TRUE(read.records[1].informative);
  ASSERT_EQ(read.gates.size(), 1u);
  EXPECT_EQ(read.gates[0].model_id, gate.model_id);
  EXPECT_EQ(read.gates[0].passkey_ci.lo, 0.3);
  EXPECT_FALSE(read.gates[0].passed);
  EXPECT_EQ(read.gates[0].reason, gate.reason);
  EXPECT_EQ(read.gates[0].build, gate.build);
  EXPECT_EQ(read.gates[0].source, path);

  nlohmann::json j = LabRecordJson(far);
  j["accuracy_ci"] = {0.8, 0.7};
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("lo <= hi"), std::string::npos);
  j = LabRecordJson(far);
  j["material"] = "prose";
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("expected \"text\" or \"random\""),
            std::string::npos);
  j = LabRecordJson(far);
  j["logn_twice"] = 1;
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("expected true or false"),
            std::string::npos);
  // Intervals that overlap are a tie; disjoint ones rank; unknown ones never tie.
  EXPECT_TRUE((LabInterval{true, 0.2, 0.4}).Overlaps({true, 0.35, 0.6}));
  EXPECT_FALSE((LabInterval{true, 0.2, 0.4}).Overlaps({true, 0.45, 0.6}));
  EXPECT_FALSE((LabInterval{}).Overlaps({true, 0.0, 1.0}));
}

TEST_F(RecordsTest, KeyThatDoesNotMatchTheFieldsIsRefused) {
  nlohmann::json j = LabRecordJson(SampleCell("rope", "direct", "nonrepeat", 512, 0.5));
  j["ctx"] = 1024;  // the key still says 512
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("does not match"), std::string::npos);
  const std::string path = File("bad.jsonl", j.dump() + "\n");
  const std::string message = ErrorOf([&] { ReadLabRecords({path}); });
  EXPECT_NE(message.find(path + ":1: key"), std::string::npos) << message;
}

TEST_F(RecordsTest, UnknownProtocolAndVersionAreRefused) {
  nlohmann::json j = LabRecordJson(SampleCell("rope", "direct", "nonrepeat", 512, 0.5));
  j["version"] = 99;
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("version 99"), std::string::npos);
  j["version"] = kLabRecordVersion;
  j.erase("loss");
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("\"loss\" is missing"), std::string::npos);
  j["loss"] = 2.0;
  j["ctx"] = 512.5;  // a length must be whole, not rounded down to match the key
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("\"ctx\" is not an integer: 512.5"),
            std::string::npos);
  // A count by place is of trials: whole, and at most the cell's sequences (4).
  j["ctx"] = 512;
  j["right_by_place"] = {1, 2.5};
  std::string e = ErrorOf([&] { LabRecordFromJson(j); });
  EXPECT_NE(e.find("\"right_by_place\" holds 2.5: expected whole numbers"), std::string::npos) << e;
  j["right_by_place"] = {1, 5};
  e = ErrorOf([&] { LabRecordFromJson(j); });
  EXPECT_NE(e.find("\"right_by_place\" holds 5: expected counts of trials in [0, 4]"),
            std::string::npos)
      << e;
  j["right_by_place"] = {1, 4};
  EXPECT_EQ(LabRecordFromJson(j).right_by_place, (std::vector<int64_t>{1, 4}));
  j.erase("right_by_place");
  EXPECT_TRUE(LabRecordFromJson(j).right_by_place.empty()) << "absent: not known";
  // The control's count, by the same rule.
  j["control_right_by_place"] = {0, -1};
  e = ErrorOf([&] { LabRecordFromJson(j); });
  EXPECT_NE(e.find("\"control_right_by_place\" holds -1: expected counts of trials in [0, 4]"),
            std::string::npos)
      << e;
  j["control_right_by_place"] = "1,0";
  e = ErrorOf([&] { LabRecordFromJson(j); });
  EXPECT_NE(e.find("\"control_right_by_place\" is not an array"), std::string::npos) << e;
  j["control_right_by_place"] = {0, 4};
  EXPECT_EQ(LabRecordFromJson(j).control_right_by_place, (std::vector<int64_t>{0, 4}));
}

TEST_F(RecordsTest, CutLastLineIsSkippedAndCounted) {
  const LabRecord a = SampleCell("rope", "direct", "nonrepeat", 128, 0.5);
  const LabRecord b = SampleCell("rope", "direct", "nonrepeat", 512, 0.5);
  const std::string whole = Line(a) + Line(b);
  const std::string path = File("cut.jsonl", whole + Line(a).substr(0, 40));
  const LabRecordFile read = ReadLabRecords({path});
  ASSERT_EQ(read.records.size(), 2u);
  EXPECT_EQ(read.records[1].ctx, 512);
  EXPECT_EQ(read.partial_lines, 1);
  EXPECT_EQ(read.duplicates, 0);
}

// A line torn in the middle of a file (two writers at once, before the lab's lock; a crash on a
// file system that does not append whole lines) used to stop every later lab and report on that
// folder for good. It is skipped and listed; a line that is JSON but not a record is still refused.
TEST_F(RecordsTest, TornLineInTheMiddleIsSkippedAndListed) {
  const LabRecord a = SampleCell("rope", "direct", "nonrepeat", 128, 0.5);
  const LabRecord b = SampleCell("rope", "direct", "nonrepeat", 512, 0.5);
  const std::string path = File("torn.jsonl", Line(a) + "{\"record\": \"cell\", oops\n" + Line(b));
  const LabRecordFile read = ReadLabRecords({path});
  ASSERT_EQ(read.records.size(), 2u);
  EXPECT_EQ(read.records[1].ctx, 512);
  EXPECT_EQ(read.records[1].source, path);
  ASSERT_EQ(read.torn_lines.size(), 1u);
  EXPECT_EQ(read.torn_lines[0], path + ":2");
  const std::string bad = File("bad.jsonl", Line(a) + "{\"record\": \"cell\", \"version\": 1}\n");
  const std::string message = ErrorOf([&] { ReadLabRecords({bad}); });
  EXPECT_NE(message.find(bad + ":2: field"), std::string::npos) << message;
}

// A file in which no line is a record is no results file: a text file, or `stretch score --json`'s
// report (an indented object over many lines). It was read as torn lines and reported as "no cell
// records", or refused at a line deep inside with no word of what the file is.
TEST_F(RecordsTest, AFileWithoutARecordIsToldAsNotAResultsFile) {
  const std::string text = File("notes.txt", "my notes\nmore notes\n");
  std::string message = ErrorOf([&] { ReadLabRecords({text}); });
  EXPECT_NE(message.find(text + ": not a lab results file: none of its lines is a lab record (" +
                         text + ":1 is not JSON)"),
            std::string::npos)
      << message;
  // The records stored in docs/results are gzip files: told so, with what to do.
  const std::string gz = File("results.jsonl.gz", std::string("\x1f\x8b\x08\x00rest", 8));
  message = ErrorOf([&] { ReadLabRecords({gz}); });
  EXPECT_NE(message.find(gz + ": a gzip-compressed file, and results files are read "
                              "uncompressed; found the gzip magic bytes 1f 8b"),
            std::string::npos)
      << message;
  const std::string plain = gz.substr(0, gz.size() - 3);  // results.jsonl beside it
  EXPECT_NE(message.find("zcat " + gz + " > " + plain), std::string::npos) << message;
  const std::string report = File("score.json", "{\n  \"input\": [\n    1,\n    2\n  ]\n}\n");
  message = ErrorOf([&] { ReadLabRecords({report}); });
  EXPECT_NE(message.find(report + ":4: not a lab record (no \"record\" field), nor is any line "
                                  "before it: expected the JSON lines `stretch lab` writes"),
            std::string::npos)
      << message;
  // A results file whose every line is torn, one of them a piece of a record, is a damaged
  // results file: read, its torn lines listed, never refused.
  const std::string damaged = File("damaged.jsonl", "{\"record\": \"cell\", oo\nps\n");
  const LabRecordFile read = ReadLabRecords({damaged});
  EXPECT_TRUE(read.records.empty());
  EXPECT_EQ(read.torn_lines.size(), 2u);
  // Among records, a torn line is skipped (above) and a line of JSON that is no record refused as
  // before.
  const LabRecord a = SampleCell("rope", "direct", "nonrepeat", 128, 0.5);
  const std::string mixed = File("mixed.jsonl", Line(a) + "2\n");
  message = ErrorOf([&] { ReadLabRecords({mixed}); });
  EXPECT_NE(message.find(mixed + ":2: not a lab record (no \"record\" field)"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("nor is any line"), std::string::npos) << message;
}

// Two labs on one corpus with a model of the same label (trained at other lengths, say): their
// cells have different model ids, so neither is dropped as a duplicate of the other.
TEST_F(RecordsTest, TheModelIdKeepsModelsOfOneLabelApart) {
  LabRecord a = SampleCell("rope", "direct", "nonrepeat", 512, 0.5);
  LabRecord b = a;
  a.model_id = "00000000000000aa";
  b.model_id = "00000000000000bb";
  a.key = LabRecordKey(a);
  b.key = LabRecordKey(b);
  EXPECT_NE(a.key, b.key);
  const std::string path = File("two.jsonl", Line(a) + Line(b));
  const LabRecordFile read = ReadLabRecords({path});
  ASSERT_EQ(read.records.size(), 2u);
  EXPECT_EQ(read.duplicates, 0);
  EXPECT_EQ(read.records[0].model_id, "00000000000000aa");
  EXPECT_EQ(read.records[1].model_id, "00000000000000bb");
  // A record without an id keeps the key it always had.
  EXPECT_EQ(LabRecordKey(SampleCell("rope", "direct", "nonrepeat", 512, 0.5)),
            "sotu/rope/direct/nonrepeat/512");
}

// Issue 40 item 3: two labs on the same corpus, each with a model labelled "rope" (trained at 32
// and at 64 tokens), merged into one report: the row "rope / direct" took columns from both, and a
// cell of one was dropped as a duplicate of the other's. Each model now keeps its own rows.
TEST_F(RecordsTest, OneLabelOfTwoModelsBecomesTwoLabelsNamingTheirFiles) {
  LabRecord a = SampleCell("rope", "direct", "nonrepeat", 256, 0.5);
  a.train_len = 32;
  a.model_id = "1111111111111111";
  a.key = LabRecordKey(a);
  LabRecord b = SampleCell("rope", "direct", "nonrepeat", 256, 0.5);
  b.train_len = 64;
  b.model_id = "2222222222222222";
  b.key = LabRecordKey(b);
  const LabRecord other = SampleCell("keynorm", "direct", "nonrepeat", 256, 0.5);
  const std::string fa = File("a.jsonl", Line(a) + Line(other));
  const std::string fb = File("b.jsonl", Line(b));
  LabRecordFile read = ReadLabRecords({fa, fb});
  ASSERT_EQ(read.records.size(), 3u);
  EXPECT_EQ(read.duplicates, 0);
  const std::vector<std::string> notes = SeparateModels(read.records);
  EXPECT_EQ(read.records[0].model, "rope [L=32]");
  EXPECT_EQ(read.records[1].model, "keynorm") << "a label of one model stays as it is";
  EXPECT_EQ(read.records[2].model, "rope [L=64]");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("rope (corpus sotu): 2 different models carry this label; shown as "
                          "'rope [L=32]' (id 1111111111111111, from " +
                          fa + ") and 'rope [L=64]' (id 2222222222222222, from " + fb + ")"),
            std::string::npos)
      << notes[0];
  const std::vector<ModelSources> sources = SourcesOfModels(read.records);
  ASSERT_EQ(sources.size(), 3u);
  EXPECT_EQ(sources[2].model, "rope [L=64]");
  EXPECT_EQ(sources[2].files, std::vector<std::string>{fb});

  // Records of older versions (no id) are told apart by what they were trained with.
  LabRecord c = SampleCell("rope", "direct", "nonrepeat", 256, 0.5);
  LabRecord d = c;
  d.variant = "alibi | full";
  std::vector<LabRecord> old = {c, d};
  EXPECT_EQ(SeparateModels(old).size(), 1u);
  EXPECT_EQ(old[0].model, "rope [rope | full]");
  EXPECT_EQ(old[1].model, "rope [alibi | full]");

  // Two labs of one recipe run with --seed 1 and --seed 2: the seed tells them apart, and it
  // survives the records file.
  LabRecord s1 = SampleCell("rope", "direct", "nonrepeat", 256, 0.5);
  s1.model_id = "1111111111111111";
  s1.seed = 1;
  s1.key = LabRecordKey(s1);
  LabRecord s2 = s1;
  s2.model_id = "3333333333333333";
  s2.seed = 2;
  s2.key = LabRecordKey(s2);
  LabRecordFile seeds = ReadLabRecords({File("s1.jsonl", Line(s1)), File("s2.jsonl", Line(s2))});
  ASSERT_EQ(seeds.records.size(), 2u);
  EXPECT_EQ(seeds.records[1].seed, 2);
  EXPECT_EQ(SeparateModels(seeds.records).size(), 1u);
  EXPECT_EQ(seeds.records[0].model, "rope [seed 1]");
  EXPECT_EQ(seeds.records[1].model, "rope [seed 2]");
  // Without seeds (older records), or with one model of an older build among them, the id's
  // first digits do.
  std::vector<LabRecord> unseeded = {s1, s2};
  unseeded[0].seed = unseeded[1].seed = 0;
  SeparateModels(unseeded);
  EXPECT_EQ(unseeded[1].model, "rope [33333333]");
  std::vector<LabRecord> mixed = {s1, s2};
  mixed[0].seed = 0;
  SeparateModels(mixed);
  EXPECT_EQ(mixed[0].model, "rope [11111111]");
  // A model whose first cells were scored before records had seeds takes its later cells' seed.
  LabRecord s2_later = s2;
  s2_later.method = "yarn";
  s2_later.key = LabRecordKey(s2_later);
  std::vector<LabRecord> resumed = {s1, s2, s2_later};
  resumed[1].seed = 0;
  SeparateModels(resumed);
  EXPECT_EQ(resumed[1].model, "rope [seed 2]");
}

TEST_F(RecordsTest, DuplicatesAcrossFilesKeepTheFirst) {
  LabRecord first = SampleCell("rope", "direct", "nonrepeat", 512, 0.5);
  LabRecord second = first;
  second.loss = 9.0;  // same key, other numbers: a rerun
  const LabRecord other = SampleCell("rope", "direct", "repeat", 512, 0.5);
  const std::string a = File("a.jsonl", Line(first));
  const std::string b = File("b.jsonl", Line(second) + "\n" + Line(other) + Line(second));
  const LabRecordFile read = ReadLabRecords({a, b});
  ASSERT_EQ(read.records.size(), 2u);
  EXPECT_EQ(read.records[0].loss, first.loss);
  EXPECT_EQ(read.records[1].protocol, "repeat");
  EXPECT_EQ(read.duplicates, 2);
  // Other kinds of record are skipped, not refused.
  const std::string c = File("c.jsonl", "{\"record\": \"sweep\", \"anything\": 1}\n" + Line(first));
  EXPECT_EQ(ReadLabRecords({c}).records.size(), 1u);
}

TEST_F(RecordsTest, ACellScoredUnderLaterRulesSupersedesTheEarlierWhereverItLies) {
  LabRecord old_rules = SampleCell("rope", "window", "nonrepeat", 512, 0.5);
  ASSERT_EQ(old_rules.scoring, 1);
  EXPECT_FALSE(LabRecordJson(old_rules).contains("scoring"));  // as older builds wrote it
  LabRecord later = old_rules;
  later.scoring = kLabScoringRevision;
  later.loss = 2.5;
  EXPECT_EQ(LabRecordFromJson(LabRecordJson(later)).scoring, kLabScoringRevision);
  const LabRecord other = SampleCell("rope", "direct", "repeat", 512, 0.5);
  // The later rules' record read whether it comes after the older one (a resumed lab appends
  // it) or before (files merged in another order), in the first one's place.
  for (const bool later_first : {false, true}) {
    const std::string a =
        File("a.jsonl", later_first ? Line(later) + Line(other) : Line(old_rules) + Line(other));
    const std::string b = File("b.jsonl", later_first ? Line(old_rules) : Line(later));
    const LabRecordFile read = ReadLabRecords({a, b});
    ASSERT_EQ(read.records.size(), 2u);
    EXPECT_EQ(read.records[0].loss, 2.5) << later_first;
    EXPECT_EQ(read.records[0].scoring, kLabScoringRevision);
    EXPECT_EQ(read.records[1].protocol, "repeat");
    EXPECT_EQ(read.superseded, 1);
    EXPECT_EQ(read.duplicates, 0);
  }
  // Rules this build does not know are refused by name.
  nlohmann::json j = LabRecordJson(later);
  j["scoring"] = kLabScoringRevision + 1;
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("field \"scoring\""), std::string::npos);
  j["scoring"] = 0;
  EXPECT_NE(ErrorOf([&] { LabRecordFromJson(j); }).find("expected 1 to"), std::string::npos);
}

TEST_F(RecordsTest, AVoidLineDropsTheEarlierRulesRecordsOfItsKeyWhereverItLies) {
  const LabRecord old_rules = SampleCell("rope", "window", "nonrepeat", 512, 0.5);
  LabRecord later = old_rules;
  later.scoring = kLabScoringRevision;
  later.loss = 2.5;
  const LabRecord other = SampleCell("rope", "direct", "repeat", 512, 0.5);
  const std::string void_line = fmt::format(
      "{{\"record\": \"void\", \"version\": {}, \"key\": \"{}\", \"scoring\": {}}}\n",
      kLabRecordVersion, old_rules.key.empty() ? LabRecordKey(old_rules) : old_rules.key,
      kLabScoringRevision);
  {
    LabRecordWriter w(Path("w.jsonl"));
    w.Append(old_rules);
    w.AppendVoid(LabRecordKey(old_rules), kLabScoringRevision);
  }
  EXPECT_TRUE(ReadLabRecords({Path("w.jsonl")}).records.empty());
  // Before or after the record, in another file: the record of earlier rules is left out, a
  // record of the void's rules kept, another key untouched.
  for (const bool void_first : {false, true}) {
    const std::string a = File("a.jsonl", void_first ? void_line + Line(other) : Line(old_rules));
    const std::string b = File("b.jsonl", void_first ? Line(old_rules) : Line(other) + void_line);
    const LabRecordFile read = ReadLabRecords({a, b});
    ASSERT_EQ(read.records.size(), 1u) << void_first;
    EXPECT_EQ(read.records[0].protocol, "repeat");
    EXPECT_EQ(read.superseded, 1);
    const std::string c = File("c.jsonl", Line(old_rules) + void_line + Line(later));
    const LabRecordFile with_later = ReadLabRecords({c});
    ASSERT_EQ(with_later.records.size(), 1u);
    EXPECT_EQ(with_later.records[0].loss, 2.5);
  }
  // A void line of rules this build does not know is refused with its file and line.
  const std::string bad = File(
      "bad.jsonl", Line(other) + fmt::format("{{\"record\": \"void\", \"version\": {}, \"key\": "
                                             "\"x\", \"scoring\": {}}}\n",
                                             kLabRecordVersion, kLabScoringRevision + 1));
  const std::string error = ErrorOf([&] { ReadLabRecords({bad}); });
  EXPECT_NE(error.find("bad.jsonl:2"), std::string::npos) << error;
  EXPECT_NE(error.find("\"scoring\""), std::string::npos) << error;
}

TEST_F(RecordsTest, WriterCutsAnUnfinishedLastLineBeforeAppending) {
  const LabRecord a = SampleCell("rope", "direct", "nonrepeat", 128, 0.5);
  const LabRecord b = SampleCell("rope", "direct", "nonrepeat", 512, 0.5);
  const std::string path = File("w.jsonl", Line(a) + Line(b).substr(0, 30));
  {
    LabRecordWriter writer(path);
    writer.Append(b);
  }
  EXPECT_EQ(ReadBytes(path), Line(a) + Line(b));
  const LabRecordFile read = ReadLabRecords({path});
  EXPECT_EQ(read.records.size(), 2u);
  EXPECT_EQ(read.partial_lines, 0);
  // A file holding only a cut line is emptied.
  const std::string only_cut = File("only.jsonl", Line(a).substr(0, 10));
  { LabRecordWriter writer(only_cut); }
  EXPECT_EQ(ReadBytes(only_cut), "");
}

TEST_F(RecordsTest, MissingFileIsAnErrorNamingIt) {
  const std::string path = Path("absent.jsonl");
  const std::string message = ErrorOf([&] { ReadLabRecords({path}); });
  EXPECT_NE(message.find(path + ": cannot open"), std::string::npos) << message;
}

}  // namespace
}  // namespace stretch
