// The report as a results section: intervals in every format, the tie rule (cells whose
// intervals overlap are not ranked), not-informative cells marked with their reason, the
// retrieval tables, and the summary's generated reading on made-up labs whose answer is known.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "src/report/report_html.h"
#include "src/report/report_tables.h"
#include "src/report/svg_plot.h"
#include "tests/report/sample_records.h"

namespace stretch {
namespace {

using testing::SampleCell;
using testing::SampleRetrievalLab;

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t Count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// One accuracy column of made-up cells: value and half-width of the interval (< 0: none).
ReportTable Column(const std::vector<std::pair<double, double>>& cells) {
  ReportTable t;
  t.name = "t";
  t.title = "t";
  t.columns = {"c"};
  for (size_t i = 0; i < cells.size(); ++i) {
    t.rows.push_back({"sotu", "m", "method" + std::to_string(i)});
    ReportCell c;
    c.present = true;
    c.value = cells[i].first;
    if (cells[i].second >= 0) {
      c.ci = {true, cells[i].first - cells[i].second, cells[i].first + cells[i].second};
    }
    t.cells.push_back({c});
  }
  return t;
}

std::vector<ReportCell::Mark> Marks(const ReportTable& t) {
  std::vector<ReportCell::Mark> out;
  for (const auto& row : t.cells) out.push_back(row[0].mark);
  return out;
}

using M = ReportCell::Mark;

TEST(ReportReadingTest, OverlappingIntervalsAreTiedNotRanked) {
  // 0.52 is the highest value, but 0.50's interval overlaps it: a tie, neither ranked; 0.40 is
  // clear below both.
  ReportTable t = Column({{0.50, 0.05}, {0.52, 0.05}, {0.40, 0.02}});
  MarkBest(t, /*higher_is_better=*/true);
  EXPECT_EQ(Marks(t), (std::vector<M>{M::kTied, M::kTied, M::kNone}));
  EXPECT_TRUE(Has(t.ranking_note, "tied with it and not ranked"));
  // Disjoint intervals rank: 0.53 is the best alone.
  t = Column({{0.50, 0.01}, {0.53, 0.01}});
  MarkBest(t, true);
  EXPECT_EQ(Marks(t), (std::vector<M>{M::kNone, M::kBest}));
  // Lower is better (loss): the lowest is the best.
  t = Column({{2.0, 0.01}, {1.5, 0.01}, {1.52, 0.05}});
  MarkBest(t, false);
  EXPECT_EQ(Marks(t), (std::vector<M>{M::kNone, M::kTied, M::kTied}));
  // A tie with the best, not a chain: 0.46 overlaps 0.50 but not 0.55, the best.
  t = Column({{0.55, 0.03}, {0.50, 0.03}, {0.46, 0.03}});
  MarkBest(t, true);
  EXPECT_EQ(Marks(t), (std::vector<M>{M::kTied, M::kTied, M::kNone}));
}

TEST(ReportReadingTest, NoIntervalNoRankAndNotInformativeNeverRanked) {
  ReportTable t = Column({{0.50, 0.01}, {0.90, -1}});
  MarkBest(t, true);
  EXPECT_EQ(Marks(t), (std::vector<M>{M::kNone, M::kNone}));
  EXPECT_TRUE(Has(t.ranking_note, "Nothing is marked best")) << t.ranking_note;
  EXPECT_TRUE(Has(t.ranking_note, "no 95% interval")) << t.ranking_note;
  // The not-informative cell has the highest value: it is passed over, not ranked.
  t = Column({{0.50, 0.01}, {0.90, 0.01}, {0.40, 0.01}});
  t.cells[1][0].informative = false;
  t.cells[1][0].not_informative = "copy - control = 3 points < 20 at L";
  MarkBest(t, true);
  EXPECT_EQ(Marks(t), (std::vector<M>{M::kBest, M::kNone, M::kNone}));
}

TEST(ReportReadingTest, IntervalsInMarkdownCsvAndHtml) {
  std::vector<LabRecord> rs;
  for (const auto& [method, acc] : {std::pair("direct", 0.30), std::pair("yarn", 0.471)}) {
    LabRecord r = testing::WithCi(SampleCell("rope", method, "nonrepeat", 1024, 0.5), acc, 0.031);
    rs.push_back(r);
  }
  // A record of an older build: no interval. Shown as before, never as [0, 0].
  rs.push_back(SampleCell("rope", "pi", "nonrepeat", 1024, 0.5));
  ReportTable t = MainTable(rs, /*loss=*/false);
  std::string md = TableMarkdown(t);
  EXPECT_TRUE(Has(md, "| rope / yarn | - | - | 47.1% (44.0-50.2) |")) << md;
  EXPECT_TRUE(Has(md, "| rope / direct | - | - | 30.0% (26.9-33.1) |")) << md;
  EXPECT_TRUE(
      Has(md, "| rope / pi | - | - | " + fmt::format("{:.2f}%", 100 * rs[2].accuracy) + " |"))
      << md;
  EXPECT_FALSE(Has(md, "(0.0-0.0)"));
  // The pi cell has no interval: whether yarn is above it cannot be told, so nothing is bold.
  EXPECT_FALSE(Has(md, "**")) << md;
  EXPECT_TRUE(Has(md, "Nothing is marked best: some cells carry no 95% interval")) << md;
  const std::string csv = TableCsv(t);
  EXPECT_TRUE(Has(csv, ",non-repeat 1024 (8x),non-repeat 1024 (8x)_lo,non-repeat 1024 (8x)_hi\n"))
      << csv;
  EXPECT_TRUE(Has(csv, "rope,yarn,,,,,,,0.471,0.44,0.502\n")) << csv;
  EXPECT_TRUE(Has(csv, "rope,pi,,,,,,," + fmt::format("{:.6g}", rs[2].accuracy) + ",,\n")) << csv;
  // Without the pi cell, the column ranks: yarn's interval is clear of direct's.
  rs.pop_back();
  t = MainTable(rs, /*loss=*/false);
  md = TableMarkdown(t);
  EXPECT_TRUE(Has(md, "| rope / yarn | - | - | **47.1% (44.0-50.2)** |")) << md;
  EXPECT_FALSE(Has(t.ranking_note, "retrieval cells")) << "no retrieval cell: " << t.ranking_note;
  const std::string html = TableHtml(t);
  EXPECT_TRUE(Has(html, "47.1% (44.0-50.2)")) << html;
}

TEST(ReportReadingTest, RetrievalTablesGiveControlDifferenceAndFootnotes) {
  const auto lab = SampleRetrievalLab();
  const std::vector<ReportTable> far = FarCopyTables(lab.records);
  ASSERT_EQ(far.size(), 1u);
  EXPECT_EQ(far[0].name, "far_copy_text");
  EXPECT_EQ(far[0].columns,
            (std::vector<std::string>{"d=32 (ctx 1024)", "d=256 (ctx 1024)", "d=896 (ctx 1024)"}));
  const std::string md = TableMarkdown(far[0]);
  EXPECT_TRUE(Has(md, "62.0% (59.0-65.0); control 3.0% (0.5-5.5); +59.0 pts (55.1 to 62.9)")) << md;
  // Every not-informative cell is marked with the footnote, and the footnote gives the reason.
  EXPECT_EQ(Count(md, "[n1]"), 2u * 3u + 1u) << md;  // 2 rows x 3 distances, and the footnote
  EXPECT_TRUE(Has(md, "[n1] not informative: copy - control = 3 points < 20 at L")) << md;
  const std::string csv = TableCsv(far[0]);
  EXPECT_TRUE(Has(csv, ",d=896 (ctx 1024) control,d=896 (ctx 1024) control_lo,")) << csv;
  EXPECT_TRUE(Has(csv, "d=896 (ctx 1024) difference_lo")) << csv;
  EXPECT_TRUE(Has(csv, "d=896 (ctx 1024) not_informative")) << csv;
  EXPECT_EQ(Count(csv, "copy - control = 3 points < 20 at L"), 6u) << csv;
  const std::string html = TableHtml(far[0]);
  EXPECT_EQ(Count(html, "<td class=\"ni\">"), 6u) << html;
  EXPECT_TRUE(Has(html, "<p class=\"footnote\">[n1] not informative: copy - control")) << html;
  // The page leads a retrieval cell with what it is ranked by, the accuracies below it.
  EXPECT_TRUE(Has(html,
                  "+59.0 pts (55.1 to 62.9)<br><span class=\"detail\">62.0% (59.0-65.0)<br>vs "
                  "control 3.0% (0.5-5.5)</span>"))
      << html;

  const ReportTable repeat = RepeatPeriodTable(lab.records);
  EXPECT_EQ(repeat.columns,
            (std::vector<std::string>{"1024, period 128 (within window)", "1024, period 512"}));
  const ReportTable passkey = PasskeyTable(lab.records);
  // 60 trials, 36 right: Wilson's interval 47.4-71.4.
  EXPECT_TRUE(Has(TableMarkdown(passkey), "60.0% (47.4-71.4) of 60")) << TableMarkdown(passkey);
  const ReportTable gate = GateTable(lab.gates, false);
  const std::string g = TableMarkdown(gate);
  EXPECT_TRUE(Has(g,
                  "| copier | 128 | 93.0% (90.0-96.0) | 3.0% (1.0-5.0) | 95.0% (85.0-99.0) | "
                  "passed |"))
      << g;
  EXPECT_TRUE(Has(g,
                  "| forgetter | 128 | 6.0% (3.0-9.0) | 3.0% (1.0-5.0) | 0.0% (0.0-4.0) | "
                  "failed: copy - control = 3 points < 20 at L |"))
      << g;
}

TEST(ReportReadingTest, WilsonAndDifferenceIntervals) {
  // Wilson's 95% interval of 0 in 20 is [0, 0.161]; of 10 in 20, [0.299, 0.701].
  const LabInterval zero = WilsonInterval(0, 20);
  EXPECT_NEAR(zero.lo, 0.0, 1e-9);
  EXPECT_NEAR(zero.hi, 0.1611, 1e-4);
  const LabInterval half = WilsonInterval(10, 20);
  EXPECT_NEAR(half.lo, 0.2993, 1e-4);
  EXPECT_NEAR(half.hi, 0.7007, 1e-4);
  EXPECT_FALSE(WilsonInterval(0, 0).known);
  // MOVER: 0.6 [0.5, 0.7] - 0.1 [0.05, 0.2] = 0.5 [0.6 - hypot(0.1, 0.1), 0.5 + hypot(0.1, 0.05)].
  const LabInterval d = DifferenceInterval(0.6, {true, 0.5, 0.7}, 0.1, {true, 0.05, 0.2});
  EXPECT_NEAR(d.lo, 0.5 - std::hypot(0.1, 0.1), 1e-12);
  EXPECT_NEAR(d.hi, 0.5 + std::hypot(0.1, 0.05), 1e-12);
  EXPECT_FALSE(DifferenceInterval(0.6, {}, 0.1, {true, 0, 1}).known);
}

TEST(ReportReadingTest, SeesBackIsTheFarthestDistanceWithinTenPointsAndAboveControl) {
  const auto lab = SampleRetrievalLab();
  auto sees = [&](const std::string& model, const std::string& method) {
    return SeesBackOf(lab.records, {"sotu", model, method}, "text");
  };
  EXPECT_EQ(sees("copier", "yarn").tokens, 896);  // 0.62 >= 0.70 - 0.10
  EXPECT_EQ(sees("copier", "yarn").farthest, 896);
  EXPECT_EQ(sees("copier", "window").tokens, 32);  // 0.04 at 256: at control
  EXPECT_EQ(sees("copier", "pi").tokens, 32);
  EXPECT_FALSE(sees("forgetter", "yarn").informative);
  // A drop of more than 10 points stops it even above control: yarn at 0.59 from 256 on.
  std::vector<LabRecord> rs = lab.records;
  for (LabRecord& r : rs) {
    if (r.protocol == "far-copy" && r.model == "copier" && r.method == "yarn" &&
        r.distance == 896) {
      r = testing::WithCi(r, 0.59, 0.03);
    }
  }
  EXPECT_EQ(SeesBackOf(rs, {"sotu", "copier", "yarn"}, "text").tokens, 256);
}

// Sees back at each length on its own: a method that copies from every distance at 8x but from
// none at 16x; and one whose copy at the shortest distance is weak but above its control and
// grows farther back (higher is fine: only a drop of more than 10 points stops it).
TEST(ReportReadingTest, SeesBackIsMeasuredAtEachLength) {
  std::vector<LabRecord> rs;
  auto far = [&](int64_t ctx, int64_t d, double acc, double control) {
    LabRecord r = SampleCell("m", "yarn", "far-copy", ctx, acc);
    r.distance = d;
    r.material = "text";
    rs.push_back(testing::WithControl(testing::WithCi(r, acc, 0.03), control, 0.03));
  };
  for (const int64_t d : {128, 512, 992}) far(1024, d, d == 128 ? 0.40 : 0.70, 0.33);
  for (const int64_t d : {128, 1024, 2016}) far(2048, d, 0.30, 0.30);
  const ReportRowKey row{"sotu", "m", "yarn"};
  EXPECT_EQ(SeesBackOf(rs, row, "text", 1024).tokens, 992);
  EXPECT_EQ(SeesBackOf(rs, row, "text", 2048).tokens, 0);
  EXPECT_EQ(SeesBackOf(rs, row, "text").tokens, 0) << "every distance at its longest length";
  const ReportTable s = SummaryTable(rs);
  std::vector<std::string> sees;
  for (size_t j = 0; j < s.columns.size(); ++j) {
    if (s.column_info[j].protocol == "sees-back") {
      sees.push_back(s.cells[0][j].text + " (" + s.cells[0][j].detail + ")");
    }
  }
  // "none" with why: the copy at the distance the rule starts from is at its control.
  EXPECT_EQ(sees, (std::vector<std::string>{"992 (the farthest tested)",
                                            "none (at d=128: +0.0 pts (-4.2 to 4.2))"}));
  // At its control at the shortest distance (the difference's interval holds 0): none.
  rs.clear();
  for (const int64_t d : {128, 512, 992}) far(1024, d, d == 128 ? 0.35 : 0.70, 0.33);
  EXPECT_EQ(SeesBackOf(rs, row, "text", 1024).tokens, 0);
}

// The records' caveats (YaRN outside its regime) close the reading: each method's once, however
// many of its records carry it; none without them.
TEST(ReportReadingTest, TheRecordsCaveatsCloseTheReadingOncePerMethod) {
  auto lab = SampleRetrievalLab();
  const std::string plain = SummaryReading(SummaryTable(lab.records), lab.records, lab.gates);
  EXPECT_FALSE(Has(plain, "outside the regime")) << plain;
  int marked = 0;
  for (LabRecord& r : lab.records) {
    if (r.method == "yarn" && r.ctx > r.train_len) {
      r.caveat = "no RoPE pair turns beta_fast = 32 times (test)";
      marked++;
    }
  }
  ASSERT_GE(marked, 2);
  const std::string reading = SummaryReading(SummaryTable(lab.records), lab.records, lab.gates);
  const std::string paragraph =
      "\n\nWhere a method ran outside the regime it was made for (the records say):\n- yarn: no "
      "RoPE pair turns beta_fast = 32 times (test)";
  ASSERT_TRUE(Has(reading, paragraph)) << reading;
  EXPECT_EQ(reading.find(paragraph) + paragraph.size(), reading.size()) << "last, and once";
}

// Several models read: the paragraph opens with the verdict over all of them, counted per method
// (the copier twice, its second copy's yarn at its control: yarn keeps in 1 of 2); the forgetter
// failed the gate and is not counted. One model read: no such sentence.
TEST(ReportReadingTest, SummaryOpensWithTheVerdictOverTheModels) {
  auto lab = SampleRetrievalLab();
  const std::string one = SummaryReading(SummaryTable(lab.records), lab.records, lab.gates);
  EXPECT_FALSE(Has(one, "Over the")) << one;
  const std::vector<LabRecord> first = lab.records;
  for (LabRecord r : first) {
    if (r.model != "copier") continue;
    r.model = "copier2";
    r.model_id = "2222222222222222";
    if (r.method == "yarn" && r.ctx > r.train_len && r.has_control) {
      r = testing::WithControl(testing::WithCi(r, 0.05, 0.03), 0.05, 0.03);
    }
    r.key = LabRecordKey(r);
    lab.records.push_back(r);
  }
  for (LabGate g : lab.gates) {
    if (g.model != "copier") continue;
    g.model = "copier2";
    g.model_id = "2222222222222222";
    lab.gates.push_back(g);
    break;
  }
  const std::string two = SummaryReading(SummaryTable(lab.records), lab.records, lab.gates);
  EXPECT_EQ(two.find("Over the 2 models whose retrieval cells can be read"), 0u) << two;
  EXPECT_TRUE(Has(two, "in every model, rerope;")) << two;
  EXPECT_TRUE(Has(two, "in some, yarn (1 of 2); in none, window and pi.")) << two;
  EXPECT_TRUE(Has(two,
                  "Only avoiding blowing up (non-repeat near L's accuracy, retrieval at "
                  "control): yarn (1 of 2) and window (2 of 2)."))
      << two;
  // rerope missing from the second model: kept in the one model it was read in, not "every".
  std::vector<LabRecord> some;
  for (const LabRecord& r : lab.records) {
    if (!(r.model == "copier2" && r.method == "rerope")) some.push_back(r);
  }
  const std::string missing = SummaryReading(SummaryTable(some), some, lab.gates);
  EXPECT_FALSE(Has(missing, "in every model, rerope")) << missing;
  EXPECT_TRUE(Has(missing, "rerope (1 of 1)")) << missing;
}

// Two longer contexts: the page gets one summary table per length, each opening with L's column
// and holding that length's columns alone, with the cells and marks of the whole table.
TEST(ReportReadingTest, SummarySplitsByLengthWithTheSameCells) {
  auto lab = SampleRetrievalLab();
  const ReportTable one = SummaryTable(lab.records);
  const std::vector<ReportTable> whole = TableByLength(one, lab.records);
  ASSERT_EQ(whole.size(), 1u) << "one longer context: the table itself";
  EXPECT_EQ(whole[0].columns, one.columns);
  EXPECT_EQ(whole[0].name, "summary");
  // The same cells at 2048 (16x), the copier's rerope 10 points lower there.
  const std::vector<LabRecord> first = lab.records;
  for (LabRecord r : first) {
    if (r.ctx != 1024) continue;
    r.ctx = 2048;
    if (r.model == "copier" && r.method == "rerope") r.accuracy -= 0.10;
    r.key = LabRecordKey(r);
    lab.records.push_back(r);
  }
  const ReportTable s = SummaryTable(lab.records);
  const std::vector<ReportTable> pieces = TableByLength(s, lab.records);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].name, "summary-1024");
  EXPECT_EQ(pieces[1].name, "summary-2048");
  EXPECT_EQ(pieces[0].title, s.title + " at 1024 tokens (8x)");
  EXPECT_EQ(pieces[1].title, s.title + " at 2048 tokens (16x)");
  EXPECT_EQ(pieces[0].note, s.note);
  size_t seen = 0;  // the source's columns found in the pieces, L's once per piece
  for (size_t k = 0; k < pieces.size(); ++k) {
    const ReportTable& p = pieces[k];
    const int64_t ctx = k == 0 ? 1024 : 2048;
    ASSERT_EQ(p.columns.size(), p.column_info.size());
    ASSERT_GE(p.columns.size(), 4u);
    EXPECT_EQ(p.columns[0], "L=128");
    for (size_t j = 0; j < p.columns.size(); ++j) {
      EXPECT_TRUE(j == 0 ? p.column_info[j].ctx == 0 : p.column_info[j].ctx == ctx) << p.columns[j];
      const size_t at = static_cast<size_t>(
          std::find(s.columns.begin(), s.columns.end(), p.columns[j]) - s.columns.begin());
      ASSERT_LT(at, s.columns.size()) << p.columns[j];
      if (j > 0) ++seen;
      for (size_t i = 0; i < s.rows.size(); ++i) {
        const ReportCell &a = p.cells[i][j], &b = s.cells[i][at];
        EXPECT_EQ(a.present, b.present);
        EXPECT_EQ(a.value, b.value) << p.columns[j];
        EXPECT_EQ(a.text, b.text);
        EXPECT_EQ(a.mark, b.mark) << RowLabel(s, s.rows[i]) << " " << p.columns[j];
      }
    }
  }
  EXPECT_EQ(seen + 1, s.columns.size());
  // The marks are the whole table's: somewhere at 16x a cell is marked and one is not.
  bool marked = false, unmarked = false;
  for (const auto& row : pieces[1].cells) {
    for (size_t j = 1; j < row.size(); ++j) {
      (row[j].mark == ReportCell::Mark::kNone ? unmarked : marked) = true;
    }
  }
  EXPECT_TRUE(marked && unmarked);
}

TEST(ReportReadingTest, SummaryReadsWhichMethodsKeepDistantInformation) {
  const auto lab = SampleRetrievalLab();
  const ReportTable s = SummaryTable(lab.records);
  EXPECT_EQ(s.columns,
            (std::vector<std::string>{"L=128", "non-repeat 1024 (8x)",
                                      "repeat 1024 (8x), period 512", "far copy 1024 (8x), d=896",
                                      "sees back at 1024 (8x) (tokens, far copy of text)",
                                      "passkey 1024 (8x), key over 2L back"}));
  const std::string reading = SummaryReading(s, lab.records, lab.gates);
  EXPECT_TRUE(Has(reading, "\n- Keep distant information: yarn and rerope;")) << reading;
  EXPECT_TRUE(Has(reading, "they are tied (their intervals overlap)")) << reading;
  EXPECT_TRUE(Has(reading, "\n- Only avoid blowing up: window.")) << reading;
  EXPECT_TRUE(Has(reading, "\n- Neither: pi.")) << reading;
  // Each model a paragraph; what the verdicts mean said once, after them, for those used.
  EXPECT_TRUE(Has(reading, "\n\nModel forgetter at 1024 tokens")) << reading;
  EXPECT_TRUE(Has(reading,
                  "\n\nHow each method is read: keep distant information: a retrieval cell "
                  "beyond the window lies above its control by 5 points or more"))
      << reading;
  EXPECT_FALSE(Has(reading, "only a trace:")) << "no trace here: " << reading;
  EXPECT_TRUE(Has(reading,
                  "Model forgetter at 1024 tokens (8x its training length): it failed "
                  "the copy gate (copy - control = 3 points < 20 at L)"))
      << reading;
  EXPECT_TRUE(Has(reading, "On genuine text, yarn and window stay within 5 points of L's"))
      << reading;
  EXPECT_FALSE(Has(reading, "keeps the most")) << reading;
  EXPECT_FALSE(Has(reading, "Every column is a tie")) << reading;
  // The forgetter's yarn copies as well as the copier's, but its cells are not informative:
  // never read as keeping.
  EXPECT_EQ(Count(reading, "Keep distant information:"), 1u) << reading;
}

// A model that failed only the passkey part of the gate (its passkey cells beyond L held back, its
// far copy informative) is still read on far copy, and the reading says which part failed.
TEST(ReportReadingTest, AModelThatFailedOnePartOfTheGateIsReadOnTheOthers) {
  auto lab = SampleRetrievalLab();
  std::vector<LabRecord> rs;
  for (const LabRecord& r : lab.records) {
    if (r.model == "copier" && !(r.protocol == "passkey" && r.ctx > r.train_len)) rs.push_back(r);
  }
  LabGate g = lab.gates[0];
  g.passed = false;
  g.reason = "passkey at L: 0 of 15 keys read back (0.0%) < 80%";
  LabGatePart text;
  text.name = "text";
  text.passed = true;
  LabGatePart passkey;
  passkey.name = "passkey";
  passkey.reason = g.reason;
  g.parts = {text, passkey};
  const ReportTable s = SummaryTable(rs);
  const std::string reading = SummaryReading(s, rs, {g});
  EXPECT_TRUE(Has(reading, "it failed part of the copy gate (passkey at L: 0 of 15")) << reading;
  EXPECT_TRUE(Has(reading, "Keep distant information: yarn and rerope")) << reading;
  EXPECT_FALSE(Has(reading, "none of its methods is read")) << reading;
  // A cell of a part that failed, scored all the same (--score-not-informative), is not evidence:
  // the methods are read on the other cells.
  for (const LabRecord& r : lab.records) {
    if (r.model != "copier" || r.protocol != "passkey" || r.ctx <= r.train_len) continue;
    LabRecord held = r;
    held.informative = false;
    held.not_informative = g.reason;
    rs.push_back(held);
  }
  const std::string scored = SummaryReading(SummaryTable(rs), rs, {g});
  EXPECT_TRUE(Has(scored, "Keep distant information: yarn and rerope")) << scored;
}

// A method's rows of model "m": non-repeat 0.5 at L = 128 and `nonrepeat` at 1024, and far copy
// of text at 1024 from 512 back, `copy` against `control`, each +- `half`.
void AddMethodRows(std::vector<LabRecord>& rs, const std::string& method, double nonrepeat,
                   double copy, double control, double half) {
  rs.push_back(testing::WithCi(SampleCell("m", method, "nonrepeat", 128, 0.5), 0.5, 0.01));
  rs.push_back(testing::WithCi(SampleCell("m", method, "nonrepeat", 1024, 0.5), nonrepeat, 0.01));
  LabRecord far = SampleCell("m", method, "far-copy", 1024, 0.5);
  far.distance = 512;
  far.material = "text";
  rs.push_back(testing::WithControl(testing::WithCi(far, copy, half), control, half));
}

// A repeat with a period of 512 at 1024, beyond L = 128, read at `accuracy` against a control of
// 0.40.
void AddRepeatBeyondL(std::vector<LabRecord>& rs, const std::string& method, double accuracy) {
  LabRecord rep = SampleCell("m", method, "repeat", 1024, 0.5);
  rep.period = 512;
  rs.push_back(testing::WithControl(testing::WithCi(rep, accuracy, 0.005), 0.40, 0.005));
}

// A cell above its control by a little (its interval clear of the control's, the difference under
// 5 points) is a trace, not keeping distant information: the reading says which and cites it.
TEST(ReportReadingTest, SummaryTellsATraceFromKeeping) {
  std::vector<LabRecord> rs;
  AddMethodRows(rs, "keeper", 0.3, 0.50, 0.20, 0.005);
  AddMethodRows(rs, "tracer", 0.3, 0.23, 0.20, 0.005);
  const ReportTable s = SummaryTable(rs);
  const std::string reading = SummaryReading(s, rs, {});
  EXPECT_TRUE(Has(reading, "Keep distant information: keeper")) << reading;
  EXPECT_TRUE(Has(reading, "Only a trace: tracer +3.0 pts")) << reading;
  EXPECT_TRUE(Has(reading,
                  "only a trace: a retrieval cell above its control (copy - control with its "
                  "interval above 0), but by less than 5 points (its whole interval below 5)"))
      << reading;
  EXPECT_EQ(Count(reading, "Keep distant information:"), 1u) << reading;
  EXPECT_FALSE(Has(reading, "the keeping is elsewhere")) << reading;
  // The one keeper's genuine text falls (0.3 against 0.5 at L): said of it alone.
  EXPECT_TRUE(Has(reading,
                  "But on genuine text it falls more than 5 points below L's accuracy of 50.0% "
                  "(49.0-51.0): keeper 30.0% (29.0-31.0)."))
      << reading;

  // A second keeper at control on far copy that keeps on a repeat beyond L: the reading cites
  // that repeat for it.
  rs.push_back(testing::WithCi(SampleCell("m", "repeater", "nonrepeat", 128, 0.5), 0.5, 0.01));
  rs.push_back(testing::WithCi(SampleCell("m", "repeater", "nonrepeat", 1024, 0.5), 0.3, 0.01));
  LabRecord far = SampleCell("m", "repeater", "far-copy", 1024, 0.5);
  far.distance = 512;
  far.material = "text";
  rs.push_back(testing::WithControl(testing::WithCi(far, 0.20, 0.005), 0.20, 0.005));
  for (const std::string method : {"keeper", "tracer", "repeater"}) {
    AddRepeatBeyondL(rs, method, method == "repeater" ? 0.60 : 0.40);
  }
  const ReportTable s2 = SummaryTable(rs);
  const std::string reading2 = SummaryReading(s2, rs, {});
  EXPECT_TRUE(Has(reading2, "Keep distant information: keeper and repeater")) << reading2;
  EXPECT_TRUE(Has(reading2,
                  "the keeping is elsewhere: repeater on repeat with a period of 512, "
                  "+20.0 pts"))
      << reading2;
  EXPECT_TRUE(Has(reading2, "But on genuine text both fall more than 5 points")) << reading2;
}

// Keeping is decided by the interval, not the point estimate: two cells whose intervals overlap,
// one a little above 5 points and one a little under (a review found them read as a keeper and
// a trace), are both "not settled". A keeper whose genuine text falls is said to, and the
// keepers are ranked only among those that keep on the cell compared (one at control there is not
// "tied").
TEST(ReportReadingTest, ReadingDecidesKeepingByTheIntervalAndSaysWhenTextFalls) {
  std::vector<LabRecord> rs;
  AddMethodRows(rs, "above", 0.49, 0.258, 0.20, 0.018);   // +5.8 pts (3.3 to 8.3)
  AddMethodRows(rs, "under", 0.49, 0.246, 0.20, 0.0117);  // +4.6 pts (2.9 to 6.3)
  AddMethodRows(rs, "steady", 0.49, 0.60, 0.20, 0.01);
  AddMethodRows(rs, "faller", 0.30, 0.60, 0.20, 0.01);
  AddMethodRows(rs, "repeater", 0.49, 0.20, 0.20, 0.01);  // far copy at control
  for (const std::string method : {"above", "under", "steady", "faller", "repeater"}) {
    AddRepeatBeyondL(rs, method, method == "repeater" ? 0.60 : 0.40);
  }
  const ReportTable s = SummaryTable(rs);
  const std::string reading = SummaryReading(s, rs, {});
  EXPECT_TRUE(Has(reading, "Keep distant information: steady, faller and repeater;")) << reading;
  // Both intervals reach both sides of 5 points: neither a keeper nor a trace, not settled.
  EXPECT_TRUE(Has(reading,
                  "- Above control, but whether by 5 points is not settled: above +5.8 pts (3.3 "
                  "to 8.3) on far copy from 512 tokens back and under +4.6 pts (2.9 to 6.3) on "
                  "far copy from 512 tokens back."))
      << reading;
  EXPECT_FALSE(Has(reading, "Only a trace:")) << reading;
  EXPECT_TRUE(Has(reading, "; of those that keep on this cell, steady and faller are tied"))
      << reading;
  EXPECT_FALSE(Has(reading, "; they are tied")) << reading;
  EXPECT_TRUE(Has(reading, "the keeping is elsewhere: repeater on repeat with a period of 512"))
      << reading;
  EXPECT_TRUE(Has(reading,
                  "But on genuine text one of them falls more than 5 points below L's accuracy of "
                  "50.0% (49.0-51.0): faller 30.0% (29.0-31.0)."))
      << reading;
}

TEST(ReportReadingTest, SummaryNamesAClearWinnerOnlyWhenTheIntervalsSayIt) {
  auto lab = SampleRetrievalLab();
  for (LabRecord& r : lab.records) {  // rerope far ahead of yarn at 896, intervals apart
    if (r.protocol == "far-copy" && r.method == "rerope" && r.distance == 896) {
      r = testing::WithCi(r, 0.90, 0.02);
    }
  }
  const ReportTable s = SummaryTable(lab.records);
  const std::string reading = SummaryReading(s, lab.records, lab.gates);
  EXPECT_TRUE(Has(reading, "rerope keeps the most, its interval clear of the others'")) << reading;
}

// Everything within the noise: three methods whose every cell overlaps the others'. The reading
// must say that the columns are ties and rank nothing.
// The reading and the marks test "above its control" by the interval of copy - control: a copy
// 7 points above (intervals of copy and control overlapping, their difference's above 0) is
// above its control, not settled as keeping since its interval reaches below 5 points; a cell
// below its control
// is at control, never "not known" (a new-user audit and a review found them read otherwise).
TEST(ReportReadingTest, ReadingJudgesAboveControlByTheDifferencesInterval) {
  std::vector<LabRecord> rs;
  AddMethodRows(rs, "small", 0.5, 0.37, 0.30, 0.04);
  AddMethodRows(rs, "below", 0.5, 0.25, 0.30, 0.01);
  const ReportTable s = SummaryTable(rs);
  const std::string reading = SummaryReading(s, rs, {});
  EXPECT_TRUE(Has(reading,
                  "Above control, but whether by 5 points is not settled: small +7.0 pts "
                  "(1."))
      << reading;  // its interval reaches both sides of 5 points
  EXPECT_FALSE(Has(reading, "Keep distant information:")) << reading;
  EXPECT_TRUE(Has(reading, "Only avoid blowing up: below.")) << reading;
  EXPECT_FALSE(Has(reading, "not known")) << reading;
  // The table's marks by the same test: the +7 cell is the column's best, not "at control".
  EXPECT_FALSE(Has(s.ranking_note, "no cell of theirs lies above its control")) << s.ranking_note;
  // At L both methods are the same model (one tie over the column): no cell bold, the note
  // names the column.
  EXPECT_TRUE(Has(s.ranking_note,
                  "Not marked, as every cell's 95% interval overlaps the best's "
                  "(a tie over the whole column, nothing ranked): L=128"))
      << s.ranking_note;
  EXPECT_TRUE(s.all_tied.at(0));
  EXPECT_EQ(s.cells[0][0].mark, M::kNone);
  for (size_t j = 0; j < s.columns.size(); ++j) {
    if (s.column_info[j].protocol != "far-copy") continue;
    for (size_t i = 0; i < s.rows.size(); ++i) {
      EXPECT_EQ(s.cells[i][j].mark, s.rows[i].method == "small" ? M::kBest : M::kNone)
          << s.rows[i].method;
    }
  }
}

TEST(ReportReadingTest, SummarySaysSoWhenEverythingIsTied) {
  std::vector<LabRecord> rs;
  for (const std::string method : {"a", "b", "c"}) {
    const double nudge = method == "a" ? 0.0 : method == "b" ? 0.01 : 0.02;
    rs.push_back(testing::WithCi(SampleCell("m", method, "nonrepeat", 128, 0.5), 0.5 + nudge, 0.1));
    rs.push_back(
        testing::WithCi(SampleCell("m", method, "nonrepeat", 1024, 0.5), 0.48 + nudge, 0.1));
    LabRecord far = SampleCell("m", method, "far-copy", 1024, 0.5);
    far.distance = 512;
    far.material = "text";
    rs.push_back(testing::WithControl(testing::WithCi(far, 0.05 + nudge, 0.05), 0.04, 0.04));
  }
  const ReportTable s = SummaryTable(rs);
  for (size_t j = 0; j < s.columns.size(); ++j) {
    if (s.column_info[j].protocol == "sees-back") continue;  // text, not ranked
    // No cell is marked: the far-copy column has every cell at its control (a column of zeros
    // marked "tie" in bold would read as a win), the others every cell tied with the best (bold
    // on every row would say nothing).
    const bool far = s.column_info[j].protocol == "far-copy";
    EXPECT_EQ(s.all_tied.at(j), !far) << s.columns[j];
    for (size_t i = 0; i < s.rows.size(); ++i) {
      EXPECT_EQ(s.cells[i][j].mark, M::kNone) << s.columns[j] << " " << s.rows[i].method;
    }
  }
  EXPECT_TRUE(Has(s.ranking_note, "Not marked, as no cell of theirs lies above its control"))
      << s.ranking_note;
  EXPECT_TRUE(Has(s.ranking_note, "Not marked, as every cell's 95% interval overlaps the best's"))
      << s.ranking_note;
  const std::string reading = SummaryReading(s, rs, {});
  EXPECT_TRUE(Has(reading, "Every column is a tie")) << reading;
  EXPECT_TRUE(Has(reading, "no cell lies above its control")) << reading;
  EXPECT_TRUE(Has(reading, "Only avoid blowing up: a, b and c.")) << reading;
  EXPECT_FALSE(Has(reading, "Keep distant information:")) << reading;
  EXPECT_FALSE(Has(reading, "keeps the most")) << reading;
  EXPECT_FALSE(Has(TableMarkdown(s), "**")) << TableMarkdown(s);
  EXPECT_FALSE(Has(s.ranking_note, "Bold:")) << "no cell is bold: " << s.ranking_note;
  // The verdicts' meanings after the model, before the ties.
  const size_t meanings = reading.find("How each method is read:");
  ASSERT_NE(meanings, std::string::npos) << reading;
  EXPECT_LT(reading.find("\n- Only avoid blowing up"), meanings) << reading;
  EXPECT_LT(meanings, reading.find("Every column is a tie")) << reading;
}

TEST(ReportReadingTest, SummaryOfRecordsWithoutIntervalsRanksNothing) {
  std::vector<LabRecord> rs = {
      SampleCell("m", "a", "nonrepeat", 128, 0.5), SampleCell("m", "a", "nonrepeat", 1024, 0.5),
      SampleCell("m", "b", "nonrepeat", 128, 0.9), SampleCell("m", "b", "nonrepeat", 1024, 0.9)};
  const ReportTable s = SummaryTable(rs);
  const std::string reading = SummaryReading(s, rs, {});
  EXPECT_TRUE(Has(reading, "no intervals")) << reading;
  EXPECT_FALSE(Has(TableMarkdown(s), "**")) << TableMarkdown(s);
  EXPECT_FALSE(Has(s.ranking_note, "Bold:")) << "no cell is bold: " << s.ranking_note;
}

// Width of an SVG's root element, from its width="..." attribute.
double SvgWidth(const std::string& svg) {
  const size_t at = svg.find("width=\"");
  return at == std::string::npos ? -1 : std::stod(svg.substr(at + 7));
}

// +logn on a model trained with log-n runs the factor twice: a note names the models and the
// methods and gives the product at the longest length, and says nothing where a model was not
// trained with log-n or the method has no +logn.
TEST(ReportReadingTest, NotesLogNAppliedTwice) {
  LabRecordFile file;
  auto cell = [](const std::string& model, const std::string& variant, const std::string& method,
                 int64_t ctx) {
    LabRecord r = SampleCell(model, method, "nonrepeat", ctx, 0.5);
    r.variant = variant;
    r.key = LabRecordKey(r);
    return r;
  };
  file.records = {
      cell("kn", "llama | rope | keynorm,scale=1,logn (stage 1: full)", "rerope+logn", 1024),
      cell("kn", "llama | rope | keynorm,scale=1,logn (stage 1: full)", "rerope", 1024),
      cell("plain", "llama | rope | full", "rerope+logn", 1024),
      cell("plain", "llama | rope | full", "rerope", 1024),
      // A window of L: the trained log-n counts its keys (a factor of 1), so nothing twice.
      cell("kn", "llama | rope | keynorm,scale=1,logn (stage 1: full)", "window:window=128+logn",
           1024)};
  auto twice = [](const Report& report) {
    for (const std::string& n : report.notes) {
      if (Has(n, "log-n applied twice")) return n;
    }
    return std::string();
  };
  const std::string note = twice(BuildReport(file, {"r.jsonl"}));
  EXPECT_TRUE(Has(note, "Model kn was trained with log-n")) << note;
  EXPECT_TRUE(Has(note, "rerope+logn multiplies them")) << note;
  EXPECT_TRUE(Has(note, "at 1024 tokens, L = 128: 1.43 x 1.43 = 2.04")) << note;
  EXPECT_FALSE(Has(note, "plain")) << note;
  EXPECT_FALSE(Has(note, "window")) << note;
  // Without the trained log-n, or at L, no note.
  file.records[0].variant = "llama | rope | keynorm,scale=1 (stage 1: full)";
  file.records[0].key = LabRecordKey(file.records[0]);
  EXPECT_EQ(twice(BuildReport(file, {"r.jsonl"})), "");
  file.records[0] = cell("kn", "llama | rope | logn", "rerope+logn", 128);
  EXPECT_EQ(twice(BuildReport(file, {"r.jsonl"})), "");
  // Records that say whether the factor ran twice (the lab's, from DoubleLogNNote) are read as
  // they say, whatever the method is called: a mask of another name that the lab found doubled
  // is noted, and a +logn cell it found single is not.
  file.records = {
      cell("kn", "llama | rope | keynorm,scale=1,logn (stage 1: full)", "mymask:window=2048+logn",
           2048),
      cell("kn", "llama | rope | keynorm,scale=1,logn (stage 1: full)", "rerope+logn", 1024)};
  file.records[0].logn_twice = true;
  file.records[1].logn_twice = false;
  const std::string recorded = twice(BuildReport(file, {"r.jsonl"}));
  EXPECT_TRUE(Has(recorded, "mymask:window=2048+logn multiplies them")) << recorded;
  EXPECT_FALSE(Has(recorded, "rerope")) << recorded;
}

TEST(ReportReadingTest, PlotsFitThePageAndNoHeatMapIsAllZero) {
  // Many methods: the bar plot that was 2,975 px wide.
  LabRecordFile file;
  const auto lab = SampleRetrievalLab();
  file.records = lab.records;
  file.gates = lab.gates;
  for (int k = 0; k < 20; ++k) {
    const std::string method = fmt::format("self-extend:group={},window=128-long-name", k + 2);
    for (const char* p : {"nonrepeat", "repeat"}) {
      file.records.push_back(
          testing::WithCi(SampleCell("copier", method, p, 1024, 0.5), 0.4, 0.02));
    }
  }
  const Report report = BuildReport(file, {"r.jsonl"});
  size_t svgs = 0;
  bool far_plot = false;
  for (const ReportFile& f : report.files) {
    if (!f.name.ends_with(".svg")) continue;
    ++svgs;
    EXPECT_LE(SvgWidth(f.content), kPlotMaxWidth) << f.name;
    EXPECT_TRUE(Has(f.content, "viewBox=\"0 0 ")) << f.name;
    EXPECT_TRUE(Has(f.content, "style=\"max-width: 100%; height: auto\"")) << f.name;
    if (f.name.starts_with("passkey_")) {
      // Every heat map drawn has a nonzero cell: window and pi, all zero, have none.
      EXPECT_FALSE(Has(f.name, "window") || Has(f.name, "_pi")) << f.name;
      // Its cells as keys of trials, not shares of a few trials.
      EXPECT_TRUE(std::regex_search(f.content, std::regex(R"(>\d+/\d+</text>)"))) << f.content;
    }
    if (f.name == "far_copy_copier_text.svg") {
      far_plot = true;
      // The control's own line (a polyline; the legend's sample is a line), dotted and thin.
      EXPECT_TRUE(Has(f.content,
                      "stroke-width=\"1.4\" stroke-linejoin=\"round\" stroke-dasharray=\"2 4\"/>"))
          << "the control, dotted: " << f.content;
      EXPECT_TRUE(Has(f.content, ">control (nothing to copy)</text>"));
    }
    if (f.name == "far_copy_forgetter_text.svg") {
      EXPECT_TRUE(Has(f.content,
                      "not informative (the model failed the copy gate): copy - "
                      "control = 3 points &lt; 20 at L"))
          << f.content;
    }
  }
  EXPECT_TRUE(far_plot);
  EXPECT_GT(svgs, 5u);
  const std::string& html = report.files.back().content;
  EXPECT_TRUE(Has(html, "svg.plot { max-width: 100%; height: auto; }"));
  // The methods of the records explained in a line each, for a reader who never read the papers;
  // only those present.
  EXPECT_TRUE(Has(html, "<h2>What the methods are</h2>")) << html;
  // A passkey heat map's caption says what its few trials can tell (Wilson intervals of 0/n, n/n).
  EXPECT_TRUE(std::regex_search(
      html,
      std::regex(R"(Each cell: keys read back of its trials \(k/n\)\. With (\d+) trials, 0/\1 )"
                 R"(is a 95% interval of 0-\d+% and \1/\1 of \d+-100%)")))
      << html;
  EXPECT_TRUE(Has(html, "<li>window: a sliding window: each token sees only the last w tokens"))
      << html;
  EXPECT_TRUE(Has(html, "<li>pi: position interpolation")) << html;
  EXPECT_FALSE(Has(html, "<li>dca:")) << html;
  EXPECT_TRUE(Has(html,
                  "Passkey: every length and depth at 0% (no heat map drawn) for "
                  "copier / window: 1 length x 3 depths, 60 trials"))
      << html;
  // The reading's verdicts as a list under their model's paragraph.
  EXPECT_TRUE(Has(html, "<ul class=\"reading\">\n<li>Keep distant information: ")) << html;
  EXPECT_TRUE(Has(html, "<p class=\"reading\">How each method is read: ")) << html;
  EXPECT_FALSE(Has(html, "\n- Keep")) << "no Markdown item left on the page";
  // The summary and its reading come first, before the other tables.
  const size_t summary = html.find("Summary: next-token accuracy and retrieval");
  ASSERT_NE(summary, std::string::npos);
  EXPECT_LT(summary, html.find("Next-token accuracy</h2>"));
  EXPECT_LT(summary, html.find("<strong>Reading.</strong> Model copier"));
  // No test scaffolding in the page.
  EXPECT_FALSE(Has(html, "Render check"));
  EXPECT_FALSE(Has(html, "render-check"));
  EXPECT_FALSE(Has(html, "<script"));
}

// Two labs merged, each with a model labelled "forgetter": SeparateModels gives each its own label,
// and the gate follows its model (by id), so that the gate table and the reading name the row.
TEST(ReportReadingTest, GatesFollowTheirModelsNewLabel) {
  const auto lab = SampleRetrievalLab();
  LabRecordFile file;
  file.records = lab.records;
  file.gates = lab.gates;
  for (LabRecord& r : file.records) {
    if (r.model == "forgetter") r.model_id = "bbbbbbbb00000000";
    r.key = LabRecordKey(r);
  }
  file.gates[1].model_id = "bbbbbbbb00000000";
  LabRecord other = SampleCell("forgetter", "direct", "nonrepeat", 128, 0.5);
  other.model_id = "cccccccc00000000";
  other.key = LabRecordKey(other);
  file.records.push_back(other);
  const Report report = BuildReport(file, {"a.jsonl", "b.jsonl"});
  const std::string& md = report.files[0].content;
  EXPECT_TRUE(Has(md, "| forgetter [bbbbbbbb] | 128 | 6.0% (3.0-9.0)")) << md;
  EXPECT_TRUE(Has(report.summary_reading,
                  "Model forgetter [bbbbbbbb] at 1024 tokens (8x its "
                  "training length): it failed the copy gate"))
      << report.summary_reading;
}

// Two labs of one recipe run with --seed 1 and --seed 2, merged: each seed's model has rows of
// its own, and the page has the table over seeds (built from the records as read, before their
// labels are told apart: a table built from the relabelled ones would be empty).
TEST(ReportReadingTest, MergedSeedsGetRowsOfTheirOwnAndATableOverSeeds) {
  LabRecordFile file;
  for (const int64_t seed : {1, 2}) {
    for (LabRecord r : SampleRetrievalLab().records) {
      if (r.model != "copier") continue;
      r.seed = seed;
      r.model_id = seed == 1 ? "1111111111111111" : "2222222222222222";
      r.key = LabRecordKey(r);
      file.records.push_back(r);
    }
  }
  const Report report = BuildReport(file, {"s1.jsonl", "s2.jsonl"});
  const std::string& md = report.files[0].content;
  EXPECT_TRUE(Has(md, "Over training seeds")) << md;
  EXPECT_TRUE(Has(md, "| copier / yarn | +59 / +59 (2 of 2 above control) |")) << md;
  EXPECT_TRUE(Has(md, "| copier [seed 2] / yarn |")) << md;
  EXPECT_TRUE(Has(report.summary_reading,
                  "Over the 2 training seeds of copier, on far copy of text from 896 tokens back "
                  "at 1024: yarn and rerope stay above their control in every seed; in none: "
                  "window and pi."))
      << report.summary_reading;
}

// Far copy tested at two contexts: one plot a context, so that no line joins a distance at 1,024
// with the next at 2,048 (a reviewer found 992 at 1,024 and 1,024 at 2,048 on one line, their
// ticks printed over each other as "9924").
TEST(ReportReadingTest, FarCopyIsPlottedOneContextAPlot) {
  LabRecordFile file;
  for (const int64_t ctx : {1024, 2048}) {
    for (const int64_t d : {int64_t{128}, ctx - 32}) {
      LabRecord far = SampleCell("m", "rerope", "far-copy", ctx, 0.5);
      far.distance = d;
      far.material = "text";
      far.key = LabRecordKey(far);
      file.records.push_back(testing::WithControl(testing::WithCi(far, 0.6, 0.05), 0.3, 0.05));
    }
  }
  const Report report = BuildReport(file, {"r.jsonl"});
  std::map<std::string, std::string> plots;
  for (const ReportFile& f : report.files) {
    if (f.name.starts_with("far_copy_") && f.name.ends_with(".svg")) plots[f.name] = f.content;
  }
  ASSERT_EQ(plots.size(), 2u);
  ASSERT_TRUE(plots.count("far_copy_m_text_1024.svg"));
  ASSERT_TRUE(plots.count("far_copy_m_text_2048.svg"));
  EXPECT_TRUE(Has(plots["far_copy_m_text_1024.svg"], ">992</text>"));
  EXPECT_FALSE(Has(plots["far_copy_m_text_1024.svg"], ">2016</text>"));
  EXPECT_TRUE(Has(plots["far_copy_m_text_2048.svg"], ">2016</text>"));
  EXPECT_FALSE(Has(plots["far_copy_m_text_2048.svg"], ">992</text>"));
}

}  // namespace
}  // namespace stretch
