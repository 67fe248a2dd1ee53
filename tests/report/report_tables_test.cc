// The report's tables: layout (rows, ordered columns, "-" for a missing cell) and exact Markdown
// and CSV text on a small constructed set.
#include "src/report/report_tables.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/report/sample_records.h"

namespace stretch {
namespace {

using testing::SampleCell;

LabRecord Cell(const std::string& model, const std::string& method, const std::string& protocol,
               int64_t ctx, double accuracy, double loss) {
  LabRecord r = SampleCell(model, method, protocol, ctx, 0.5);
  r.accuracy = accuracy;
  r.loss = loss;
  r.key = LabRecordKey(r);
  return r;
}

// rope / direct has every cell but repeat 512; rope / yarn only non-repeat at 128 and 1024. The
// 512 cell comes after the 1024 ones: columns are ordered by length, not by file order.
std::vector<LabRecord> TwoByTwo() {
  return {Cell("rope", "direct", "nonrepeat", 128, 0.5, 2.0),
          Cell("rope", "direct", "repeat", 1024, 0.25, 3.0),
          Cell("rope", "direct", "nonrepeat", 1024, 0.125, 4.0),
          Cell("rope", "yarn", "nonrepeat", 128, 0.5, 2.0),
          Cell("rope", "yarn", "nonrepeat", 1024, 0.4375, 2.25),
          Cell("rope", "direct", "nonrepeat", 512, 0.3, 2.5)};
}

TEST(ReportTablesTest, AccuracyTableMarkdownAndCsv) {
  const ReportTable t = MainTable(TwoByTwo(), /*loss=*/false);
  EXPECT_EQ(t.name, "accuracy");
  EXPECT_NE(t.note.find("repeat = a 128-token sample"), std::string::npos) << t.note;
  // Records of an older build: no intervals, so nothing is ranked, and the table says why.
  EXPECT_NE(t.ranking_note.find("Nothing is marked best"), std::string::npos) << t.ranking_note;
  EXPECT_EQ(TableMarkdown(t),
            "## Next-token accuracy\n\n" + t.note + "\n\n" + t.ranking_note +
                "\n\n"
                "| model / method | L=128 | repeat 512 (4x), period L | non-repeat 512 (4x) | "
                "repeat 1024 (8x), period L | non-repeat 1024 (8x) |\n"
                "| --- | ---: | ---: | ---: | ---: | ---: |\n"
                "| rope / direct | 50.00% | - | 30.00% | 25.00% | 12.50% |\n"
                "| rope / yarn | 50.00% | - | - | - | 43.75% |\n");
  EXPECT_EQ(TableCsv(t),
            "model,method,L=128,\"repeat 512 (4x), period L\",non-repeat 512 (4x),"
            "\"repeat 1024 (8x), period L\",non-repeat 1024 (8x)\n"
            "rope,direct,0.5,,0.3,0.25,0.125\n"
            "rope,yarn,0.5,,,,0.4375\n");
}

TEST(ReportTablesTest, LossTableHasTheSameLayout) {
  const ReportTable t = MainTable(TwoByTwo(), /*loss=*/true);
  EXPECT_EQ(t.name, "loss");
  EXPECT_EQ(TableCsv(t),
            "model,method,L=128,\"repeat 512 (4x), period L\",non-repeat 512 (4x),"
            "\"repeat 1024 (8x), period L\",non-repeat 1024 (8x)\n"
            "rope,direct,2,,2.5,3,4\n"
            "rope,yarn,2,,,,2.25\n");
  const std::string md = TableMarkdown(t);
  EXPECT_NE(md.find("| rope / yarn | 2.000 | - | - | - | 2.250 |\n"), std::string::npos) << md;
}

TEST(ReportTablesTest, RowsGroupByModelInFirstReadOrder) {
  std::vector<LabRecord> rs = {Cell("b", "x", "nonrepeat", 128, 0.5, 2),
                               Cell("a", "x", "nonrepeat", 128, 0.5, 2),
                               Cell("b", "y", "nonrepeat", 128, 0.5, 2)};
  const std::vector<ReportRowKey> rows = ReportRows(rs);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].model + "/" + rows[0].method, "b/x");
  EXPECT_EQ(rows[1].model + "/" + rows[1].method, "b/y");
  EXPECT_EQ(rows[2].model + "/" + rows[2].method, "a/x");
}

TEST(ReportTablesTest, MixedTrainingLengthsDropTheRatio) {
  std::vector<LabRecord> rs = TwoByTwo();
  LabRecord other = Cell("short", "direct", "nonrepeat", 64, 0.4, 2.0);
  other.train_len = 64;
  other.key = LabRecordKey(other);
  rs.push_back(other);
  const ReportTable t = MainTable(rs, /*loss=*/false);
  ASSERT_EQ(t.columns.size(), 5u);
  EXPECT_EQ(t.columns[0], "L (training length)");
  EXPECT_EQ(t.columns[1], "repeat 512, period L");
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_TRUE(t.cells[2][0].present);  // "short" at its own L = 64
  EXPECT_DOUBLE_EQ(t.cells[2][0].value, 0.4);
}

TEST(ReportTablesTest, TailPasskeyAndSlidingTables) {
  std::vector<LabRecord> rs;
  for (const int64_t ctx : {512, 128}) {
    LabRecord r = Cell("rope", "direct", "tail", ctx, 0.5, ctx == 128 ? 2.5 : 2.25);
    r.tail = 64;
    r.key = LabRecordKey(r);
    rs.push_back(r);
  }
  for (const double depth : {0.0, 1.0}) {
    LabRecord r = Cell("rope", "direct", "passkey", 256, depth == 0 ? 1.0 : 0.5, 0);
    r.depth = depth;
    r.sequences = 10;
    r.key = LabRecordKey(r);
    rs.push_back(r);
  }
  LabRecord s = Cell("rope", "yarn", "sliding", 1024, 0.5, std::log(8.0));
  s.stride = 256;
  s.key = LabRecordKey(s);
  rs.push_back(s);

  const ReportTable tail = TailTable(rs);
  EXPECT_EQ(TableCsv(tail), "model,method,C=128,C=512\nrope,direct,2.5,2.25\n");
  EXPECT_NE(tail.note.find("last K=64 tokens"), std::string::npos) << tail.note;
  const ReportTable passkey = PasskeyTable(rs);
  // Passkey: over all depths, with Wilson's interval of 15 in 20 (even for records of older builds:
  // it needs only the counts).
  EXPECT_EQ(TableCsv(passkey),
            "model,method,256 accuracy,256 trials,256_lo,256_hi\nrope,direct,0.75,20,0.531299,"
            "0.888138\n");
  EXPECT_NE(TableMarkdown(passkey).find("| rope / direct | 75.0% (53.1-88.8) of 20 |"),
            std::string::npos)
      << TableMarkdown(passkey);
  const ReportTable sliding = SlidingTable(rs);
  EXPECT_EQ(TableCsv(sliding), "model,method,1024 (stride 256)\nrope,yarn,8\n");
  // No repeat / non-repeat records: the main table has no rows.
  EXPECT_TRUE(MainTable(rs, false).empty());
}

// The first digit alone: trials with it right over every depth, from right_by_place's first
// count (not another place's), by length and layout; records without the count are left out,
// and with none the table is empty.
TEST(ReportTablesTest, PasskeyFirstDigitCountsTheFirstPlaceOverTheDepths) {
  std::vector<LabRecord> rs = {Cell("rope", "direct", "nonrepeat", 128, 0.5, 2.0)};
  for (const std::string layout : {"", "llama"}) {
    for (const double depth : {0.0, 1.0}) {
      LabRecord r = Cell("rope", "rerope", "passkey", 1024, 0.1, 0);
      r.depth = depth;
      r.layout = layout;
      r.sequences = 10;
      // First digit: 3 + 5 = 8 of 20 in stretch's layout, 1 + 0 of 20 in llama.cpp's (Wilson
      // 21.9-61.3% and 0.9-23.6%, computed apart); the other places higher, so a table that read
      // another place would show it.
      r.right_by_place = layout.empty() ? std::vector<int64_t>{depth == 0 ? 3 : 5, 9, 10, 9, 10}
                                        : std::vector<int64_t>{depth == 0 ? 1 : 0, 7, 7, 8, 8};
      // Keys read back: 1 of 10 in each of stretch's cells, none in llama.cpp's.
      if (!layout.empty()) r.accuracy = 0.0;
      // The control's first digit: 1 + 2 = 3 of 20 in stretch's layout; llama.cpp's records
      // carry no control count (an older build), so that column has no control.
      if (layout.empty()) r.control_right_by_place = {depth == 0 ? 1 : 2, 0, 9, 0, 0};
      r.key = LabRecordKey(r);
      rs.push_back(r);
    }
  }
  LabRecord old = Cell("rope", "yarn", "passkey", 1024, 0.5, 0);  // no count: an older build
  old.sequences = 10;
  old.key = LabRecordKey(old);
  rs.push_back(old);
  const ReportTable t = PasskeyFirstDigitTable(rs);
  ASSERT_EQ(t.rows.size(), 1u) << "only the rows whose records carry the count";
  // The control's 3 of 20 (Wilson 5.2-36.0%) beside stretch's column, none beside llama.cpp's.
  EXPECT_EQ(TableCsv(t),
            "model,method,1024 accuracy,1024 trials,1024_lo,1024_hi,1024 control,1024 control_lo,"
            "1024 control_hi,1024 difference,1024 difference_lo,1024 difference_hi,"
            "\"1024, llama.cpp layout accuracy\",\"1024, llama.cpp layout trials\","
            "\"1024, llama.cpp layout_lo\",\"1024, llama.cpp layout_hi\"\n"
            "rope,rerope,0.4,20,0.218807,0.613418,0.15,0.0523687,0.360419,0.25,-0.0276818,0.48469,"
            "0.05,20,0.00888145,0.236131\n");
  EXPECT_NE(t.note.find("lost at their first digit"), std::string::npos) << t.note;
  // Keys lost beyond L: stretch's 18 of 20, 7 + 5 of them at the first digit; llama.cpp's all
  // 20, 9 + 10 at the first digit.
  EXPECT_NE(t.note.find("those lost at their first digit: 12 of 18 in stretch's layout, 19 of 20 "
                        "in llama.cpp's."),
            std::string::npos)
      << t.note;
  rs.erase(rs.begin() + 1, rs.begin() + 5);
  EXPECT_TRUE(PasskeyFirstDigitTable(rs).empty());
}

// A model trained on one passkey layout reads it and not llama.cpp's: the two layouts are never
// pooled into one cell (pooled, 20 of 20 and 0 of 20 would read 50%, neither layout's figure).
TEST(ReportTablesTest, PasskeyLayoutsAreColumnsOfTheirOwn) {
  std::vector<LabRecord> rs = {Cell("rope", "direct", "nonrepeat", 128, 0.5, 2.0),
                               Cell("rope", "direct", "nonrepeat", 1024, 0.4, 2.5)};
  for (const std::string layout : {"llama", ""}) {
    for (const double depth : {0.0, 1.0}) {
      LabRecord r = Cell("rope", "direct", "passkey", 1024, layout.empty() ? 1.0 : 0.0, 0);
      r.depth = depth;
      r.layout = layout;
      r.sequences = 10;
      r.key = LabRecordKey(r);
      rs.push_back(r);
    }
  }
  const ReportTable passkey = PasskeyTable(rs);
  EXPECT_EQ(TableCsv(passkey),
            "model,method,1024 accuracy,1024 trials,1024_lo,1024_hi,"
            "\"1024, llama.cpp layout accuracy\",\"1024, llama.cpp layout trials\","
            "\"1024, llama.cpp layout_lo\",\"1024, llama.cpp layout_hi\"\n"
            "rope,direct,1,20,0.838875,1,0,20,0,0.161125\n");
  EXPECT_NE(passkey.note.find("never see in training"), std::string::npos) << passkey.note;
  const ReportTable summary = SummaryTable(rs);
  ASSERT_EQ(summary.columns.size(), 4u);
  EXPECT_EQ(summary.columns[2], "passkey 1024 (8x), key over 2L back");
  EXPECT_EQ(summary.columns[3], "passkey 1024 (8x), llama.cpp layout, key over 2L back");
  EXPECT_EQ(summary.cells[0][2].value, 1.0);
  EXPECT_EQ(summary.cells[0][3].value, 0.0);
}

// Records with controls where no method reads llama.cpp's layout above its control: the summary
// leaves that column out and names it in its note (the passkey table keeps it); once one method
// reads keys there, the column is back.
TEST(ReportTablesTest, SummaryLeavesOutALayoutNoMethodReads) {
  for (const bool one_reads : {false, true}) {
    std::vector<LabRecord> rs = {Cell("rope", "direct", "nonrepeat", 128, 0.5, 2.0),
                                 Cell("rope", "rerope", "nonrepeat", 128, 0.5, 2.0)};
    for (const std::string method : {"direct", "rerope"}) {
      for (const std::string layout : {"llama", ""}) {
        LabRecord r = Cell("rope", method, "passkey", 1024, 0, 0);
        const bool reads = layout.empty() ? method == "rerope" : one_reads && method == "rerope";
        r.accuracy = reads ? 1.0 : 0.0;
        r.sequences = 20;
        r.accuracy_ci = WilsonInterval(r.accuracy * 20, 20);
        r.has_control = true;
        r.control_accuracy = 0.0;
        r.control_accuracy_ci = WilsonInterval(0, 20);
        r.depth = 0.0;
        r.layout = layout;
        r.key = LabRecordKey(r);
        rs.push_back(r);
      }
    }
    const ReportTable summary = SummaryTable(rs);
    const bool llama_column =
        std::find(summary.columns.begin(), summary.columns.end(),
                  "passkey 1024 (8x), llama.cpp layout, key over 2L back") != summary.columns.end();
    EXPECT_EQ(llama_column, one_reads);
    ASSERT_EQ(summary.columns.size(), one_reads ? 3u : 2u);
    ASSERT_EQ(summary.cells[0].size(), summary.columns.size());
    EXPECT_EQ(summary.columns[1], "passkey 1024 (8x), key over 2L back");
    EXPECT_EQ(summary.note.find("Left out here") != std::string::npos, !one_reads) << summary.note;
    EXPECT_EQ(summary.note.find("): passkey 1024 (8x), llama.cpp layout, key over 2L back.") !=
                  std::string::npos,
              !one_reads)
        << summary.note;
    EXPECT_EQ(PasskeyTable(rs).columns.size(), 2u);
  }
}

// A window reads the key back only at depth 1, where it sits right before the question, inside its
// reach: the summary's passkey column counts the depths whose key lies over 2L back, so the window
// reads 0 there and is not tied with a method that retrieves; the passkey table keeps every depth.
// At 2L no depth lies that far back: the column then counts every depth and says nothing of 2L.
TEST(ReportTablesTest, SummaryPasskeyCountsOnlyKeysBeyondAnyWindow) {
  std::vector<LabRecord> rs = {Cell("rope", "window", "nonrepeat", 128, 0.5, 2.0),
                               Cell("rope", "rerope", "nonrepeat", 128, 0.5, 2.0)};
  for (const int64_t ctx : {256, 1024}) {
    for (const double depth : {0.0, 0.5, 1.0}) {
      for (const std::string method : {"window", "rerope"}) {
        LabRecord r = Cell("rope", method, "passkey", ctx, 0, 0);
        r.accuracy = method == "rerope" ? 0.8 : depth == 1.0 ? 1.0 : 0.0;
        r.accuracy_ci = WilsonInterval(r.accuracy * 5, 5);
        r.depth = depth;
        r.sequences = 5;
        r.key = LabRecordKey(r);
        rs.push_back(r);
      }
    }
  }
  const ReportTable summary = SummaryTable(rs);
  ASSERT_EQ(summary.columns, (std::vector<std::string>{"L=128", "passkey 256 (2x)",
                                                       "passkey 1024 (8x), key over 2L back"}));
  ASSERT_EQ(summary.rows.size(), 2u);
  const size_t window = summary.rows[0].method == "window" ? 0 : 1;
  EXPECT_NEAR(summary.cells[window][1].value, 1.0 / 3.0, 1e-12);  // every depth at 2L
  EXPECT_EQ(summary.cells[window][1].trials, 15);
  EXPECT_EQ(summary.cells[window][2].value, 0.0);  // depths 0 and 0.5 only
  EXPECT_EQ(summary.cells[window][2].trials, 10);
  EXPECT_NEAR(summary.cells[1 - window][2].value, 0.8, 1e-12);
  const ReportTable passkey = PasskeyTable(rs);
  EXPECT_NEAR(passkey.cells[window][1].value, 1.0 / 3.0, 1e-12);  // the table: every depth

  // A model trained at L = 512 merged beside them: at 1024 none of its depths lies over 2L back,
  // so its cell in that column counts every depth rather than standing empty.
  for (const double depth : {0.0, 0.5, 1.0}) {
    LabRecord r = Cell("wide", "rerope", "passkey", 1024, 0.6, 0);
    r.train_len = 512;
    r.depth = depth;
    r.sequences = 5;
    r.key = LabRecordKey(r);
    rs.push_back(r);
  }
  const ReportTable mixed = SummaryTable(rs);
  size_t wide = mixed.rows.size(), column = mixed.columns.size();
  for (size_t i = 0; i < mixed.rows.size(); ++i) {
    if (mixed.rows[i].model == "wide") wide = i;
  }
  for (size_t j = 0; j < mixed.columns.size(); ++j) {
    if (mixed.column_info[j].protocol == "passkey" && mixed.column_info[j].ctx == 1024) column = j;
  }
  ASSERT_LT(wide, mixed.rows.size());
  ASSERT_LT(column, mixed.columns.size());
  EXPECT_TRUE(mixed.cells[wide][column].present);
  EXPECT_EQ(mixed.cells[wide][column].trials, 15);
}

TEST(ReportTablesTest, LabelsAreEscapedForEachFormat) {
  std::vector<LabRecord> rs = {
      Cell("a|b", "yarn:factor=4,beta_fast=\"32\"", "nonrepeat", 128, 0.5, 2),
      Cell("<m&>", "x", "nonrepeat", 128, 0.5, 2)};
  const ReportTable t = MainTable(rs, false);
  EXPECT_NE(TableMarkdown(t).find("| a\\|b / yarn:factor=4,beta_fast=\"32\" |"), std::string::npos);
  EXPECT_NE(TableCsv(t).find("a|b,\"yarn:factor=4,beta_fast=\"\"32\"\"\",0.5\n"), std::string::npos)
      << TableCsv(t);
  const std::string html = TableHtml(t);
  EXPECT_NE(html.find("&lt;m&amp;&gt; / x"), std::string::npos) << html;
  EXPECT_EQ(html.find("<m&>"), std::string::npos);
}

// Two labs of one recipe run with --seed 1 and --seed 2, merged: the seeds table lists each seed's
// copy - control and counts the seeds whose difference lies above 0.
TEST(ReportTablesTest, SeedsTableListsEachSeedsMarginAndCountsThoseAboveControl) {
  std::vector<LabRecord> records;
  for (LabRecord r : testing::SampleRetrievalLab().records) {
    if (r.model != "copier") continue;
    r.seed = 1;
    r.model_id = "1111111111111111";
    r.key = LabRecordKey(r);
    records.push_back(r);
    r.seed = 2;
    r.model_id = "2222222222222222";
    if (r.protocol == "far-copy" && r.distance == 896) {
      if (r.method == "rerope") continue;                          // not scored for seed 2
      if (r.method == "yarn") r = testing::WithCi(r, 0.05, 0.03);  // +2 points: a tie
      if (r.method == "pi") r = testing::WithCi(r, r.control_accuracy - 0.003, 0.03);  // -0.3
    }
    r.key = LabRecordKey(r);
    records.push_back(r);
  }
  const ReportTable t = SeedsTable(records);
  ASSERT_EQ(t.columns, (std::vector<std::string>{"text d=896 (ctx 1024)",
                                                 "passkey (ctx 1024, key over 2L back)"}));
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[0].method, "yarn");
  EXPECT_EQ(t.cells[0][0].text, "+59 / +2 (1 of 2 above control)");
  EXPECT_EQ(t.rows[1].method, "rerope");
  EXPECT_EQ(t.cells[1][0].text, "+63 / - (1 of 2 above control)");
  EXPECT_EQ(t.cells[2][0].text, "+1 / +1 (0 of 2 above control)");  // window: 0.04 vs 0.03
  EXPECT_EQ(t.rows[3].method, "pi");
  EXPECT_TRUE(t.cells[3][0].text.find(" / +0 (") != std::string::npos)  // -0.3 points: not "-0"
      << t.cells[3][0].text;
  EXPECT_EQ(t.cells[0][1].text, "24/40; 24/40");  // depths 0 and 0.5
  EXPECT_NE(t.note.find("in the order of the seeds (copier: 1, 2)"), std::string::npos) << t.note;
  EXPECT_NE(TableMarkdown(t).find("| copier / yarn | +59 / +2 (1 of 2 above control) |"),
            std::string::npos)
      << TableMarkdown(t);

  EXPECT_EQ(SeedsReading(t),
            "Over the 2 training seeds of copier, on far copy of text from 896 tokens back at "
            "1024: in some seeds only: yarn (1 of 2) and rerope (1 of 2); in none: window and "
            "pi. (A seed's model that failed the copy gate part a cell needs counts as not "
            "above.)");

  // One seed per recipe, or records without seeds (older builds): no table.
  std::vector<LabRecord> one_seed;
  for (const LabRecord& r : records) {
    if (r.seed == 1) one_seed.push_back(r);
  }
  EXPECT_TRUE(SeedsTable(one_seed).empty());
  std::vector<LabRecord> unseeded = records;
  for (LabRecord& r : unseeded) r.seed = 0;
  EXPECT_TRUE(SeedsTable(unseeded).empty());

  // A lab resumed across builds: seed 2's cells scored before records had seeds take the seed of
  // the same model's other records (its id).
  std::vector<LabRecord> resumed = records;
  for (LabRecord& r : resumed) {
    if (r.seed == 2 && r.method == "yarn") r.seed = 0;
  }
  EXPECT_EQ(SeedsTable(resumed).cells[0][0].text, "+59 / +2 (1 of 2 above control)");

  // One label, two recipes (trained at 128 and at 256), each with two seeds: rows of their own,
  // never a cell mixing the two; and a second model of one recipe and seed is left out, named.
  std::vector<LabRecord> two = records;
  for (LabRecord r : records) {
    if (r.method != "yarn") continue;
    r.train_len = 256;
    r.model_id = r.seed == 1 ? "5555555555555555" : "6666666666666666";
    r = testing::WithCi(r, r.accuracy + 0.2, 0.03);  // key and copy accuracy of its own
    two.push_back(r);
  }
  LabRecord stray = records.front();
  stray.model_id = "7777777777777777";
  stray.method = "pi";
  stray.key = LabRecordKey(stray);
  two.push_back(stray);
  const ReportTable split = SeedsTable(two);
  ASSERT_EQ(split.rows.size(), 5u);
  EXPECT_EQ(split.rows[0].model, "copier [L=128]");
  EXPECT_EQ(split.rows[4].model, "copier [L=256]");
  EXPECT_EQ(split.cells[4][0].text, "+79 / +22 (2 of 2 above control)");
  EXPECT_EQ(split.cells[0][0].text, "+59 / +2 (1 of 2 above control)");
  EXPECT_NE(split.note.find("Left out, as a second model of one recipe and seed"),
            std::string::npos)
      << split.note;
  EXPECT_NE(split.note.find("7777777777777777"), std::string::npos) << split.note;
}

}  // namespace
}  // namespace stretch
