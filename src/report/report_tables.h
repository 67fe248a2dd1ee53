// The tables of `stretch report`, built from the lab's cell records (src/report/records.h) and
// written as Markdown, CSV and HTML.
//
// Rows are (model, method) pairs, labelled "model / method" (prefixed by the corpus when the
// records hold several), in the order the records first name them, grouped by model. The main
// tables follow Su Jianlin's "Transformer upgrade road" posts: the non-repeat score at the
// training length L, then for each longer context present, ascending, the repeat and the
// non-repeat score at that context.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/report/records.h"

namespace stretch {

struct ReportRowKey {
  std::string corpus, model, method;
  bool operator==(const ReportRowKey&) const = default;
};

struct ReportCell {
  bool present = false;
  double value = 0.0;
  LabInterval ci;      // 95% interval of value; !known: records of an older build
  int64_t trials = 0;  // passkey: trials over the depths the cell counts
  // Retrieval cells (far copy, repeat with a period, passkey): the same positions in a control
  // with nothing to copy, and copy - control. The difference's interval is Newcombe's MOVER
  // interval from the two (DifferenceInterval).
  bool has_control = false;
  double control = 0.0;
  LabInterval control_ci;
  double difference = 0.0;
  LabInterval difference_ci;
  // False when the model failed the lab's copy gate: the cell cannot tell keeping distant
  // information from forgetting it. Shown greyed with a footnote giving the reason; never ranked.
  bool informative = true;
  std::string not_informative;
  // Set by MarkBest: the best cell of its column, or one whose interval overlaps the best's
  // (none in a column where every cell overlaps it: ReportTable::all_tied).
  enum class Mark { kNone, kBest, kTied };
  Mark mark = Mark::kNone;
  std::string text;  // kText cells: shown as is
  // kText cells: what follows the text in parentheses ("none (at d=128: ...)"), on a line of its
  // own on the page so that the column stays narrow.
  std::string detail;
};

enum class ReportCellFormat {
  kAccuracy,    // Markdown "47.1% (44.0-50.2)" ("47.31%" without an interval), CSV 0.4731
  kLoss,        // nats: Markdown "1.930 (1.880-1.990)", CSV 1.93
  kPerplexity,  // Markdown "6.89", CSV 6.89
  kPasskey,     // accuracy and trials: Markdown "85.0% (71.0-93.0) of 40", CSV with trials
  kTokens,      // a count of tokens ("sees back"): Markdown "512"
  kText,        // ReportCell::text
};

struct ReportTable {
  std::string name;   // file stem of its CSV: "accuracy" -> accuracy.csv
  std::string title;  // Markdown heading
  std::string note;   // what the rows, columns and cells are
  ReportCellFormat format = ReportCellFormat::kAccuracy;
  // Per column, the format when it differs from `format` (empty: all `format`).
  std::vector<ReportCellFormat> column_formats;
  bool show_corpus = false;          // several corpora: the corpus leads each row's label
  bool model_rows = false;           // rows name a model only (the gate table)
  std::vector<std::string> columns;  // the value columns' headers
  std::vector<ReportRowKey> rows;
  std::vector<std::vector<ReportCell>> cells;  // [row][column]
  // What each column holds, for readers of the table in code (SummaryReading): its protocol
  // ("nonrepeat", "repeat", "far-copy", "passkey", "sees-back", ...), context, and the period
  // (repeat) or distance (far copy).
  struct Column {
    std::string protocol;
    int64_t ctx = 0;
    // repeat: the period; far-copy: the distance; passkey: 1 when the column counts only the
    // depths whose key lies far back (KeyFarBack in report_tables.cc), 0 when every depth
    int64_t param = 0;
    std::string layout;  // passkey: the document's layout ("" stretch's own, "llama")
  };
  std::vector<Column> column_info;  // empty, or one per column
  // Filled by MarkBest: what the marks mean, and which columns were not ranked and why.
  std::string ranking_note;
  // Filled by MarkBest: per column, whether every cell ties with the best (then none is marked:
  // bold on every row would say nothing; the note names the column).
  std::vector<bool> all_tied;
  bool empty() const { return rows.empty() || columns.empty(); }
  ReportCellFormat FormatOf(size_t column) const {
    return column < column_formats.size() ? column_formats[column] : format;
  }
};

// The interval Wilson's score method gives a binomial proportion of `successes` in `n` trials,
// at 95% (z = 1.96). !known when n == 0.
LabInterval WilsonInterval(double successes, double n);
// An interval of a - b from the intervals of a and of b (Newcombe's MOVER, "method 10" of his
// 1998 paper): lo = d - sqrt((a - a.lo)^2 + (b.hi - b)^2), hi = d + sqrt((a.hi - a)^2 +
// (b - b.lo)^2). It treats the two as independent; a copy and its control are scored on the
// same positions of different texts, so that is an approximation. !known unless both are known.
LabInterval DifferenceInterval(double a, const LabInterval& a_ci, double b,
                               const LabInterval& b_ci);

// Marks, in each column of `t`, the best present, informative cell (highest value, or lowest with
// !higher_is_better; retrieval cells by copy - control) and every cell whose interval overlaps the
// best's (LabInterval::Overlaps: those are tied, not ranked). A column in which some such cell has
// no interval is not ranked at all, and ranking_note says so; so is a column of one cell. A column
// where every cell overlaps the best's is left unmarked (all_tied; ranking_note names it), and so
// is a retrieval column whose best cell does not lie above its control.
void MarkBest(ReportTable& t, bool higher_is_better);

// The row order shared by every table: models in the order first read, each model's methods in
// the order first read; several corpora one after the other.
std::vector<ReportRowKey> ReportRows(const std::vector<LabRecord>& records);

// Next-token accuracy (or loss, with `loss`) of nonrepeat at ctx == train_len, then repeat and
// nonrepeat at each longer ctx. Headers "L=128", "repeat 1024 (8x)", "non-repeat 1024 (8x)" when
// every row has the same training length; "L (training length)", "repeat 1024", ... otherwise.
ReportTable MainTable(const std::vector<LabRecord>& records, bool loss);
// Fixed tail: loss on the last K tokens by context C ascending ("C=512"; "C=512 K=64" when
// several K).
ReportTable TailTable(const std::vector<LabRecord>& records);
// Passkey: accuracy over every depth (weighted by trials) and the trials, by ctx.
ReportTable PasskeyTable(const std::vector<LabRecord>& records);
// Passkey, the first digit alone: the share of trials whose first digit was right (the records'
// right_by_place), over every depth, by ctx and layout as PasskeyTable. Only records that carry
// the count (builds from 2026-12-06 on, keys of one token a digit); empty when none do.
ReportTable PasskeyFirstDigitTable(const std::vector<LabRecord>& records);
// Sliding window: perplexity exp(loss) by ctx ("1024 (stride 256)").
ReportTable SlidingTable(const std::vector<LabRecord>& records);

// A repeat record's period: `period`, or train_len when it is 0 (records of older builds, and
// the within-window control).
int64_t RepeatPeriod(const LabRecord& r);

// Far copy by distance, one table per material present ("far_copy_text", "far_copy_random"):
// columns "d=D (ctx C)" by context, then distance; retrieval cells (copy, control, difference).
std::vector<ReportTable> FarCopyTables(const std::vector<LabRecord>& records);
// Repeat by period: columns "C, period P" by context then period, the period of L labelled
// "(within window)": a control whose source is always in view, not the test.
ReportTable RepeatPeriodTable(const std::vector<LabRecord>& records);

// How far back a row sees on far copy of one material at context `ctx`, by the rule of
// src/core/sees_back.h (that of `score --protocol far-copy` and `tune`): from the distance closest
// to L from below, the farthest distance d such that at every tested distance up to d copy -
// control has its 95% interval above 0 and the copy accuracy stays no more than 10 points below
// its value at that reference. With ctx 0, a distance tested at several contexts counts at the
// longest. `tokens` 0: not even at the reference.
struct SeesBack {
  bool known = false;       // far-copy records with intervals and controls for this row
  int64_t tokens = 0;       // the farthest such distance
  int64_t farthest = 0;     // the farthest distance tested
  bool informative = true;  // false: the model failed the copy gate (reason)
  std::string not_informative;
  // The distance the rule starts from (closest to L from below) and copy - control there: why
  // a row sees back "none" (its copy there not above its control), told beside it.
  int64_t reference = 0;
  double reference_gain = 0.0;
  LabInterval reference_ci;
};
SeesBack SeesBackOf(const std::vector<LabRecord>& records, const ReportRowKey& row,
                    const std::string& material, int64_t ctx = 0);

// Over training seeds. Where the records hold one recipe (corpus, model label, variant, L) trained
// with several seeds (labs run with --seed N, merged; records without a seed are left out), one
// row per (model, method) with far copy of each material at the farthest distance of each longer
// context and passkey at each longer context (stretch's layout, the summary's depths). A far-copy cell lists
// each seed's copy - control in points, in seed order, and how many seeds' differences have a
// 95% interval above 0 ("+35 / +22 / +7 (3 of 3 above control)"); a passkey cell each seed's keys
// read back ("15/15 / 9/15"); "-" where a seed has no record (its model failed the copy gate part
// the cell needs, so the cell was not scored). Call it on the records as read, before
// SeparateModels gives each seed's model a label of its own. Empty (no rows) when no recipe has
// two seeds.
ReportTable SeedsTable(const std::vector<LabRecord>& records);
// What the table over seeds says, in sentences: for each model, on far copy of text at its
// longest context (the farthest distance there), which methods stay above their control in every
// seed, which in some, which in none. "" for an empty table or one without such a column.
std::string SeedsReading(const ReportTable& seeds);

// The copy gate: one row per model (label "model"), columns copy at L, control at L, passkey at
// L (with intervals), passed, and why.
ReportTable GateTable(const std::vector<LabGate>& gates, bool show_corpus);

// The summary table, in the seeds' layout (rows model / method): non-repeat at L, then for each
// longer context non-repeat, repeat at the longest period, far copy at the longest distance and
// passkey over the depths whose key lies over 2L back; last, how far back each row sees. Best cells marked (MarkBest).
ReportTable SummaryTable(const std::vector<LabRecord>& records);
// A table whose columns carry their context (column_info: the summary, far copy by distance,
// repeat by period) as one table per context beyond L, each opening with the columns at L (ctx 0)
// if it has any, for the page: with two lengths the quick lab's summary read about 2,600 px wide
// as one table, its far copy 2,350. Cells, marks and intervals are those of `t` (MarkBest ranks
// each column on its own, so each piece marks the same cells); names "NAME-CTX", titles "TITLE
// at CTX tokens (8x)", the first piece with the table's note. A table with at most one such
// context, or without column_info, comes back whole.
std::vector<ReportTable> TableByLength(const ReportTable& t, const std::vector<LabRecord>& records);
// One paragraph reading the summary: for each model, at its longest context, which methods keep
// distant information (a retrieval cell beyond the window whose interval lies above its
// control's), which only avoid blowing up (non-repeat within 5 points of L, or its interval
// overlapping L's, while retrieval stays at control), which do neither; ties said as ties. It
// states only what the intervals support: without them it says that nothing is ranked.
std::string SummaryReading(const ReportTable& summary, const std::vector<LabRecord>& records,
                           const std::vector<LabGate>& gates);

// "model / method", or "corpus / model / method" with show_corpus.
std::string RowLabel(const ReportTable& t, const ReportRowKey& row);

// Heading, note, ranking note, then the table; "-" for a missing cell; best cells in bold ("tie"
// after each of a tied group), not-informative cells followed by a footnote mark, the footnotes
// (the reasons) under the table.
std::string TableMarkdown(const ReportTable& t);
// Header row then one row per table row: corpus (with show_corpus), model, method, then the
// values (passkey: "<col> accuracy", "<col> trials"); an empty field for a missing cell. When
// the table holds any: "<col>_lo", "<col>_hi" (the interval), "<col> control" and "<col>
// difference" (each with _lo, _hi), "<col> not_informative" (the reason).
std::string TableCsv(const ReportTable& t);
// <h2>, <p> note and <table>, every text escaped; best cells <strong>, not-informative cells
// greyed (class "ni") with a footnote mark, the footnotes under the table.
std::string TableHtml(const ReportTable& t);

}  // namespace stretch
