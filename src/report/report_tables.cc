#include "src/report/report_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "src/core/sees_back.h"
#include "src/core/words.h"
#include "src/report/svg_plot.h"

namespace stretch {
namespace {

ReportRowKey RowOf(const LabRecord& r) { return {r.corpus, r.model, r.method}; }

size_t IndexOf(const std::vector<ReportRowKey>& rows, const ReportRowKey& key) {
  return static_cast<size_t>(std::find(rows.begin(), rows.end(), key) - rows.begin());
}

bool SeveralCorpora(const std::vector<LabRecord>& records) {
  for (const LabRecord& r : records) {
    if (r.corpus != records.front().corpus) return true;
  }
  return false;
}

// The shared rows that have at least one record `keep` accepts.
template <typename Keep>
std::vector<ReportRowKey> RowsWith(const std::vector<LabRecord>& records, Keep keep) {
  std::vector<ReportRowKey> rows;
  for (const ReportRowKey& row : ReportRows(records)) {
    for (const LabRecord& r : records) {
      if (keep(r) && RowOf(r) == row) {
        rows.push_back(row);
        break;
      }
    }
  }
  return rows;
}

ReportTable EmptyTable(std::string name, std::string title, ReportCellFormat format,
                       const std::vector<LabRecord>& records) {
  ReportTable t;
  t.name = std::move(name);
  t.title = std::move(title);
  t.format = format;
  t.show_corpus = !records.empty() && SeveralCorpora(records);
  return t;
}

void SizeCells(ReportTable& t) {
  t.cells.assign(t.rows.size(), std::vector<ReportCell>(t.columns.size()));
}

// A cell from one record: `value` with its interval `ci`, the record's control (accuracy cells
// only: `control`), and whether the record is informative.
ReportCell CellOf(const LabRecord& r, double value, const LabInterval& ci, bool control) {
  ReportCell c;
  c.present = true;
  c.value = value;
  c.ci = ci;
  c.trials = r.sequences;
  if (control && r.has_control) {
    c.has_control = true;
    c.control = r.control_accuracy;
    c.control_ci = r.control_accuracy_ci;
    c.difference = value - r.control_accuracy;
    c.difference_ci = DifferenceInterval(value, ci, r.control_accuracy, r.control_accuracy_ci);
  }
  c.informative = r.informative;
  c.not_informative = r.not_informative;
  return c;
}

// Sets a cell unless it is already set: the first record read wins, as in ReadLabRecords.
void SetCell(ReportTable& t, const LabRecord& r, size_t column, const ReportCell& value) {
  const size_t row = IndexOf(t.rows, RowOf(r));
  if (row >= t.rows.size() || column >= t.columns.size()) return;
  ReportCell& cell = t.cells[row][column];
  if (cell.present) return;
  cell = value;
}

std::string Percent(double v, int decimals) { return fmt::format("{:.{}f}%", 100 * v, decimals); }

// "47.1% (44.0-50.2)" with an interval, "47.31%" (as before intervals were) without.
std::string AccuracyText(double v, const LabInterval& ci) {
  if (!ci.known) return Percent(v, 2);
  return fmt::format("{:.1f}% ({:.1f}-{:.1f})", 100 * v, 100 * ci.lo, 100 * ci.hi);
}

// "+59.0 pts (52.0 to 66.0)": a difference of two accuracies, in percentage points ("to": the
// bounds may be negative).
std::string PointsText(double v, const LabInterval& ci) {
  // One decimal, never "-0.0": what rounds to 0 reads 0.0 (signed, +0.0).
  auto one = [](double x, bool sign) {
    if (std::fabs(x) < 0.05) x = 0.0;
    return sign ? fmt::format("{:+.1f}", x) : fmt::format("{:.1f}", x);
  };
  std::string out = one(100 * v, true) + " pts";
  if (ci.known) out += fmt::format(" ({} to {})", one(100 * ci.lo, false), one(100 * ci.hi, false));
  return out;
}

// A text cell's text with its detail in parentheses after it.
std::string TextWithDetail(const ReportCell& c) {
  return c.detail.empty() ? c.text : fmt::format("{} ({})", c.text, c.detail);
}

// A cell's text without its marks; with `with_control`, a retrieval cell's control and
// difference after it.
std::string CellText(const ReportTable& t, size_t column, const ReportCell& c,
                     bool with_control = true) {
  if (!c.present) return "-";
  std::string out;
  switch (t.FormatOf(column)) {
    case ReportCellFormat::kAccuracy: out = AccuracyText(c.value, c.ci); break;
    case ReportCellFormat::kLoss:
      out = c.ci.known ? fmt::format("{:.3f} ({:.3f}-{:.3f})", c.value, c.ci.lo, c.ci.hi)
                       : fmt::format("{:.3f}", c.value);
      break;
    case ReportCellFormat::kPerplexity:
      out = c.ci.known ? fmt::format("{:.2f} ({:.2f}-{:.2f})", c.value, c.ci.lo, c.ci.hi)
                       : fmt::format("{:.2f}", c.value);
      break;
    case ReportCellFormat::kPasskey:
      out = c.ci.known ? fmt::format("{} of {}", AccuracyText(c.value, c.ci), c.trials)
                       : fmt::format("{:.2f}% ({})", 100 * c.value, c.trials);
      break;
    case ReportCellFormat::kTokens: out = fmt::format("{:.0f}", c.value); break;
    case ReportCellFormat::kText: out = TextWithDetail(c); break;
  }
  if (c.has_control && with_control) {
    out += fmt::format("; control {}; {}", AccuracyText(c.control, c.control_ci),
                       PointsText(c.difference, c.difference_ci));
  }
  return out;
}

// A cell as the page shows it, without its marks: a retrieval cell leads with copy - control,
// what it is ranked by, the two accuracies on a smaller line below (the markdown and CSV give
// the same numbers in one line).
std::string CellHtml(const ReportTable& t, size_t column, const ReportCell& c) {
  if (c.present && t.FormatOf(column) == ReportCellFormat::kText && !c.detail.empty()) {
    return fmt::format("{}<br><span class=\"detail\">{}</span>", XmlEscape(c.text),
                       XmlEscape(c.detail));
  }
  if (!c.present || !c.has_control) return XmlEscape(CellText(t, column, c));
  return fmt::format("{}<br><span class=\"detail\">{}<br>vs control {}</span>",
                     XmlEscape(PointsText(c.difference, c.difference_ci)),
                     XmlEscape(CellText(t, column, c, /*with_control=*/false)),
                     XmlEscape(AccuracyText(c.control, c.control_ci)));
}

// The reasons of a table's not-informative cells, in the order first met: footnote i is
// reasons[i - 1].
std::vector<std::string> Footnotes(const ReportTable& t) {
  std::vector<std::string> reasons;
  for (const auto& row : t.cells) {
    for (const ReportCell& c : row) {
      if (c.present && !c.informative &&
          std::find(reasons.begin(), reasons.end(), c.not_informative) == reasons.end()) {
        reasons.push_back(c.not_informative);
      }
    }
  }
  return reasons;
}

size_t FootnoteOf(const std::vector<std::string>& reasons, const std::string& reason) {
  return static_cast<size_t>(std::find(reasons.begin(), reasons.end(), reason) - reasons.begin()) +
         1;
}

std::string FootnoteLine(size_t i, const std::string& reason) {
  return fmt::format(
      "[n{}] not informative: {} (the model failed the copy gate: this cell cannot tell keeping "
      "distant information from forgetting it; never ranked)",
      i, reason);
}

void SetCell(ReportTable& t, const LabRecord& r, size_t column, double value,
             const LabInterval& ci = {}) {
  SetCell(t, r, column, CellOf(r, value, ci, /*control=*/false));
}

std::string MarkdownEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '|' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string CsvNumber(double v) { return fmt::format("{:.6g}", v); }

std::string Ratio(int64_t ctx, int64_t train_len) {
  return FormatNumber(static_cast<double>(ctx) / static_cast<double>(train_len), 2) + "x";
}

}  // namespace

LabInterval WilsonInterval(double successes, double n) {
  if (!(n > 0)) return {};
  // p +- z sqrt(p(1-p)/n + z^2/(4n^2)), centred on (p + z^2/2n), over 1 + z^2/n; n may be an
  // effective count (not a whole number).
  constexpr double z = 1.959963984540054;
  const double nn = n;
  const double p = std::clamp(successes / nn, 0.0, 1.0);
  const double denom = 1 + z * z / nn;
  const double centre = (p + z * z / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / denom;
  return {true, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

LabInterval DifferenceInterval(double a, const LabInterval& a_ci, double b,
                               const LabInterval& b_ci) {
  if (!a_ci.known || !b_ci.known) return {};
  const double d = a - b;
  return {true, d - std::hypot(a - a_ci.lo, b_ci.hi - b), d + std::hypot(a_ci.hi - a, b - b_ci.lo)};
}

namespace {

// What a cell is ranked by: copy - control for retrieval cells, else its value.
double RankValue(const ReportCell& c) { return c.has_control ? c.difference : c.value; }
const LabInterval& RankInterval(const ReportCell& c) {
  return c.has_control ? c.difference_ci : c.ci;
}

}  // namespace

void MarkBest(ReportTable& t, bool higher_is_better) {
  std::vector<std::string> unranked, nothing_above, every_tied;
  bool ranked_any = false, marked_any = false;
  t.all_tied.assign(t.columns.size(), false);
  for (size_t j = 0; j < t.columns.size(); ++j) {
    const ReportCellFormat format = t.FormatOf(j);
    if (format == ReportCellFormat::kText || format == ReportCellFormat::kTokens) continue;
    std::vector<size_t> rows;
    for (size_t i = 0; i < t.rows.size(); ++i) {
      ReportCell& c = t.cells[i][j];
      c.mark = ReportCell::Mark::kNone;
      if (c.present && c.informative) rows.push_back(i);
    }
    if (rows.size() < 2) continue;
    const bool all_known = std::all_of(rows.begin(), rows.end(),
                                       [&](size_t i) { return RankInterval(t.cells[i][j]).known; });
    if (!all_known) {
      unranked.push_back(t.columns[j]);
      continue;
    }
    ranked_any = true;
    size_t best = rows[0];
    for (const size_t i : rows) {
      const double v = RankValue(t.cells[i][j]), b = RankValue(t.cells[best][j]);
      if (higher_is_better ? v > b : v < b) best = i;
    }
    // A retrieval column whose best cell does not lie above its own control (a passkey no method
    // reads, say) has no best: every cell is at chance, and marking them all tied would read as
    // a win.
    const ReportCell& top = t.cells[best][j];
    if (top.has_control && !(top.difference_ci.known && top.difference_ci.lo > 0.0)) {
      nothing_above.push_back(t.columns[j]);
      continue;
    }
    std::vector<size_t> group;
    for (const size_t i : rows) {
      if (i == best || RankInterval(t.cells[i][j]).Overlaps(RankInterval(t.cells[best][j]))) {
        group.push_back(i);
      }
    }
    if (group.size() == rows.size()) {  // every cell inside the best's noise: nothing to mark
      t.all_tied[j] = true;
      every_tied.push_back(t.columns[j]);
      continue;
    }
    marked_any = true;
    for (const size_t i : group) {
      t.cells[i][j].mark = group.size() == 1 ? ReportCell::Mark::kBest : ReportCell::Mark::kTied;
    }
  }
  std::string note;
  if (marked_any) {  // what the bold cells mean, where there are any
    auto any_cell = [&](const auto& pred) {
      return std::any_of(t.cells.begin(), t.cells.end(), [&](const auto& row) {
        return std::any_of(row.begin(), row.end(), pred);
      });
    };
    const bool retrieval = any_cell([](const ReportCell& c) { return c.has_control; });
    const bool not_informative =
        any_cell([](const ReportCell& c) { return c.present && !c.informative; });
    note = fmt::format(
        "Bold: the best cell of its column{}; bold and \"tie\": the cells whose 95% intervals "
        "overlap the best's, tied with it and not ranked among themselves.{}",
        retrieval ? " (retrieval cells: by copy - control)" : "",
        not_informative ? " Not-informative cells are never ranked." : "");
  }
  if (!unranked.empty() && !ranked_any) {
    note =
        "Nothing is marked best: some cells carry no 95% interval (records of an older build), "
        "and a difference inside the noise cannot be told from a real one.";
  }
  // "<why>: col, col." after the note so far, for a non-empty list of columns.
  const auto add = [&note](const std::vector<std::string>& columns, std::string_view why) {
    if (columns.empty()) return;
    std::string cols;
    for (const std::string& c : columns) cols += (cols.empty() ? "" : ", ") + c;
    note += fmt::format("{}{}: {}.", note.empty() ? "" : " ", why, cols);
  };
  if (ranked_any) {
    add(unranked,
        "Not ranked, as some of their cells carry no interval (records of an older build) and a "
        "difference inside the noise cannot be told from a real one");
  }
  add(nothing_above,
      "Not marked, as no cell of theirs lies above its control (copy - control has its interval "
      "at 0 or below)");
  add(every_tied,
      "Not marked, as every cell's 95% interval overlaps the best's (a tie over the whole "
      "column, nothing ranked)");
  t.ranking_note = note;
}

int64_t RepeatPeriod(const LabRecord& r) { return r.period > 0 ? r.period : r.train_len; }

std::vector<ReportRowKey> ReportRows(const std::vector<LabRecord>& records) {
  std::vector<std::string> corpora, models;
  std::vector<ReportRowKey> first_seen;
  for (const LabRecord& r : records) {
    if (std::find(corpora.begin(), corpora.end(), r.corpus) == corpora.end()) {
      corpora.push_back(r.corpus);
    }
    if (std::find(models.begin(), models.end(), r.model) == models.end()) {
      models.push_back(r.model);
    }
    if (IndexOf(first_seen, RowOf(r)) == first_seen.size()) first_seen.push_back(RowOf(r));
  }
  auto rank = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) - v.begin();
  };
  std::stable_sort(first_seen.begin(), first_seen.end(),
                   [&](const ReportRowKey& a, const ReportRowKey& b) {
                     return std::pair(rank(corpora, a.corpus), rank(models, a.model)) <
                            std::pair(rank(corpora, b.corpus), rank(models, b.model));
                   });
  return first_seen;
}

ReportTable MainTable(const std::vector<LabRecord>& records, bool loss) {
  auto keep = [](const LabRecord& r) {
    // Repeat at the training length's period only: the seeds' column. Longer periods (the real
    // test of keeping distant information) are in RepeatPeriodTable and the summary.
    return (r.protocol == "nonrepeat" ||
            (r.protocol == "repeat" && RepeatPeriod(r) == r.train_len)) &&
           r.tail == 0 && r.stride == 0;
  };
  ReportTable t =
      loss ? EmptyTable("loss", "Next-token loss (nats)", ReportCellFormat::kLoss, records)
           : EmptyTable("accuracy", "Next-token accuracy", ReportCellFormat::kAccuracy, records);
  t.rows = RowsWith(records, keep);
  std::set<int64_t> train_lens, long_ctx;
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    train_lens.insert(r.train_len);
    if (r.ctx > r.train_len) long_ctx.insert(r.ctx);
  }
  const bool one_len = train_lens.size() == 1;
  const int64_t len = one_len ? *train_lens.begin() : 0;
  t.columns.push_back(one_len ? fmt::format("L={}", len) : std::string("L (training length)"));
  for (const int64_t c : long_ctx) {
    const std::string suffix = one_len ? fmt::format(" ({})", Ratio(c, len)) : std::string();
    // Period L: the seeds' repeat, within a window of L (the longer periods: the summary).
    t.columns.push_back(fmt::format("repeat {}{}, period L", c, suffix));
    t.columns.push_back(fmt::format("non-repeat {}{}", c, suffix));
  }
  SizeCells(t);
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    const double v = loss ? r.loss : r.accuracy;
    const LabInterval& ci = loss ? r.loss_ci : r.accuracy_ci;
    if (r.ctx == r.train_len && r.protocol == "nonrepeat") SetCell(t, r, 0, v, ci);
    if (r.ctx > r.train_len) {
      const size_t i = static_cast<size_t>(std::distance(long_ctx.begin(), long_ctx.find(r.ctx)));
      SetCell(t, r, 1 + 2 * i + (r.protocol == "nonrepeat" ? 1 : 0), v, ci);
    }
  }
  const std::string l = one_len ? fmt::format("{}", len) : std::string("L");
  t.note = fmt::format(
      "Rows: model / method. {}: non-repeat at the training length{}. For each longer context "
      "(tokens, and its multiple of L): repeat = a {}-token sample of text repeated until it "
      "fills the context (the answer is always in view: a within-window control; repeats with "
      "longer periods are in the repeat-by-period table); non-repeat = genuine text of that "
      "length. Cells: {}.",
      one_len ? fmt::format("L={}", len) : std::string("L"),
      one_len ? std::string() : std::string(" L of each model"), l,
      loss ? "mean next-token loss in nats (lower is better), with its 95% interval in brackets "
             "where the records carry one"
           : "share of next tokens whose most likely prediction was right, with its 95% interval "
             "in brackets where the records carry one");
  MarkBest(t, /*higher_is_better=*/!loss);
  return t;
}

ReportTable TailTable(const std::vector<LabRecord>& records) {
  auto keep = [](const LabRecord& r) { return r.protocol == "tail"; };
  ReportTable t = EmptyTable("tail", "Fixed tail: loss on the same last tokens (nats)",
                             ReportCellFormat::kLoss, records);
  t.rows = RowsWith(records, keep);
  std::set<std::pair<int64_t, int64_t>> columns;  // (K, C)
  std::set<int64_t> tails;
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    columns.insert({r.tail, r.ctx});
    tails.insert(r.tail);
  }
  for (const auto& [k, c] : columns) {
    t.columns.push_back(tails.size() == 1 ? fmt::format("C={}", c)
                                          : fmt::format("C={} K={}", c, k));
  }
  SizeCells(t);
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    const auto at = columns.find({r.tail, r.ctx});
    SetCell(t, r, static_cast<size_t>(std::distance(columns.begin(), at)), r.loss, r.loss_ci);
  }
  t.note = fmt::format(
      "Rows: model / method. Columns: context C in tokens. Cells: mean loss in nats on the same "
      "last {} tokens of each sample, scored after C - K tokens of context (lower is better: "
      "more context should help).",
      tails.size() == 1 ? fmt::format("K={}", *tails.begin()) : std::string("K"));
  MarkBest(t, /*higher_is_better=*/false);
  return t;
}

ReportTable SlidingTable(const std::vector<LabRecord>& records) {
  auto keep = [](const LabRecord& r) { return r.protocol == "sliding"; };
  ReportTable t =
      EmptyTable("sliding", "Sliding-window perplexity", ReportCellFormat::kPerplexity, records);
  t.rows = RowsWith(records, keep);
  std::set<std::pair<int64_t, int64_t>> columns;  // (ctx, stride)
  for (const LabRecord& r : records) {
    if (keep(r)) columns.insert({r.ctx, r.stride});
  }
  for (const auto& [c, s] : columns) t.columns.push_back(fmt::format("{} (stride {})", c, s));
  SizeCells(t);
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    const auto at = columns.find({r.ctx, r.stride});
    const LabInterval ci = r.loss_ci.known
                               ? LabInterval{true, std::exp(r.loss_ci.lo), std::exp(r.loss_ci.hi)}
                               : LabInterval{};
    SetCell(t, r, static_cast<size_t>(std::distance(columns.begin(), at)), std::exp(r.loss), ci);
  }
  t.note =
      "Rows: model / method. Columns: window length in tokens (tokens between window starts). "
      "Cells: perplexity exp(mean loss), every token scored once with at least window - stride "
      "tokens of context (lower is better).";
  MarkBest(t, /*higher_is_better=*/false);
  return t;
}

namespace {

bool InRow(const LabRecord& r, const ReportRowKey& row) { return RowOf(r) == row; }

std::string MaterialOf(const LabRecord& r) { return r.material.empty() ? "text" : r.material; }

// A passkey record whose key sits far back: (1 - depth) x ctx > 2L. The key then lies more than
// L tokens before the answer (the filler after it is (1 - depth) x F tokens, and F is above
// ctx / 2 at the lab's lengths of 8L and more: the rest of a trial takes 53 tokens in stretch's
// layout with the bytes tokenizer, 251 in llama.cpp's, against 1,024 at 8 x 128), beyond every
// window the training length allows: a method that sees only the last L tokens cannot read it
// back. Depth 1 never is (the key right before the question, inside any window).
bool KeyFarBack(const LabRecord& r) {
  return (1.0 - r.depth) * static_cast<double>(r.ctx) > 2.0 * static_cast<double>(r.train_len);
}

// Passkey trials pooled over the records in_cell accepts: right_of(r) and control_of(r) give a
// record's count of trials right in the test and in its control (std::nullopt: no control), so
// the cell's share is weighted by trials, its Wilson interval over all of them (each trial is
// right or not), the control likewise where every record has one. Not informative when any of
// its records is not.
template <class InCell, class RightOf, class ControlOf>
ReportCell PooledPasskeyCell(const std::vector<LabRecord>& records, const InCell& in_cell,
                             const RightOf& right_of, const ControlOf& control_of) {
  ReportCell c;
  double right = 0, control_right = 0;
  bool control = true;
  for (const LabRecord& r : records) {
    if (!in_cell(r)) continue;
    c.present = true;
    c.trials += r.sequences;
    right += right_of(r);
    const std::optional<double> control_count = control_of(r);
    control = control && control_count.has_value();
    if (control) control_right += *control_count;
    if (!r.informative && c.informative) {
      c.informative = false;
      c.not_informative = r.not_informative;
    }
  }
  if (!c.present) return c;
  c.value = c.trials > 0 ? right / static_cast<double>(c.trials) : 0.0;
  c.ci = WilsonInterval(right, c.trials);
  if (control && c.trials > 0) {
    c.has_control = true;
    c.control = control_right / static_cast<double>(c.trials);
    c.control_ci = WilsonInterval(control_right, c.trials);
    c.difference = c.value - c.control;
    c.difference_ci = DifferenceInterval(c.value, c.ci, c.control, c.control_ci);
  }
  return c;
}

// Passkey over the depths at one length in one layout (every depth, or with far_only those of
// KeyFarBack): keys read back whole, pooled by PooledPasskeyCell. Layouts are never pooled: a
// model trained on one layout may read it and not another, and a pooled cell would read neither.
ReportCell PasskeyCell(const std::vector<LabRecord>& records, const ReportRowKey& row, int64_t ctx,
                       const std::string& layout, bool far_only = false) {
  auto in_cell = [&](const LabRecord& r) {
    return r.protocol == "passkey" && r.ctx == ctx && r.layout == layout && InRow(r, row);
  };
  // A row whose own L leaves no depth that far back at this length (records of labs with other
  // training lengths merged): every depth of it, rather than an empty cell.
  far_only = far_only && std::any_of(records.begin(), records.end(), [&](const LabRecord& r) {
               return in_cell(r) && KeyFarBack(r);
             });
  return PooledPasskeyCell(
      records, [&](const LabRecord& r) { return in_cell(r) && (!far_only || KeyFarBack(r)); },
      [](const LabRecord& r) { return r.accuracy * static_cast<double>(r.sequences); },
      [](const LabRecord& r) {
        return r.has_control
                   ? std::optional<double>(r.control_accuracy * static_cast<double>(r.sequences))
                   : std::nullopt;
      });
}

// What a passkey column adds to its length for a layout: nothing for stretch's own.
std::string LayoutLabel(const std::string& layout) {
  if (layout.empty()) return "";
  return layout == "llama" ? ", llama.cpp layout" : fmt::format(", layout {}", layout);
}

std::string Multiple(int64_t ctx, const std::set<int64_t>& train_lens) {
  return train_lens.size() == 1 ? fmt::format(" ({})", Ratio(ctx, *train_lens.begin())) : "";
}

std::set<int64_t> TrainLens(const std::vector<LabRecord>& records) {
  std::set<int64_t> out;
  for (const LabRecord& r : records) out.insert(r.train_len);
  return out;
}

// The rows and (length, layout) columns of a passkey table over the records keep accepts, named
// and sized in t; returns the columns, stretch's own layout (the empty name) first at each length.
template <class Keep>
std::set<std::pair<int64_t, std::string>> PasskeyLayoutColumns(
    ReportTable& t, const std::vector<LabRecord>& records, const Keep& keep) {
  t.rows = RowsWith(records, keep);
  std::set<std::pair<int64_t, std::string>> columns;
  for (const LabRecord& r : records) {
    if (keep(r)) columns.insert({r.ctx, r.layout});
  }
  for (const auto& [c, layout] : columns) {
    t.columns.push_back(fmt::format("{}{}", c, LayoutLabel(layout)));
  }
  SizeCells(t);
  return columns;
}

constexpr std::string_view kRetrievalCell =
    "copy accuracy (share of the copied tokens predicted right) with its 95% interval; the "
    "control (the same positions where there is nothing to copy); and copy - control in "
    "percentage points, its interval from the two (Newcombe's MOVER, treating them as "
    "independent)";

}  // namespace

ReportTable PasskeyTable(const std::vector<LabRecord>& records) {
  auto keep = [](const LabRecord& r) { return r.protocol == "passkey"; };
  ReportTable t =
      EmptyTable("passkey", "Passkey retrieval accuracy", ReportCellFormat::kPasskey, records);
  const std::set<std::pair<int64_t, std::string>> columns = PasskeyLayoutColumns(t, records, keep);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    size_t j = 0;
    for (const auto& [c, layout] : columns) {
      t.cells[i][j++] = PasskeyCell(records, t.rows[i], c, layout);
    }
  }
  const bool llama = std::any_of(columns.begin(), columns.end(),
                                 [](const auto& col) { return col.second == "llama"; });
  t.note = fmt::format(
      "Rows: model / method. Columns: length of the input in tokens{}. Cells: share of trials in "
      "which the model read back every token of a number hidden in filler text, over all depths "
      "(where the number sits), with its 95% Wilson interval and the number of trials; where "
      "the records have one, the control (no number in the text) and the difference.{}",
      llama ? ", and the document's layout" : "",
      llama ? " Layouts: stretch's own (a short needle in held-out text, the layout the lab's "
              "models see in training) and llama.cpp's `llama-passkey` prompt (a task sentence, "
              "five junk sentences repeated, the key said twice), which the lab's models never "
              "see in training: a method's cell there tells whether the retrieval carries over "
              "to a layout the model was not taught."
            : "");
  MarkBest(t, /*higher_is_better=*/true);
  return t;
}

ReportTable PasskeyFirstDigitTable(const std::vector<LabRecord>& records) {
  auto keep = [](const LabRecord& r) {
    return r.protocol == "passkey" && !r.right_by_place.empty();
  };
  ReportTable t = EmptyTable("passkey_first_digit", "Passkey: the key's first digit",
                             ReportCellFormat::kPasskey, records);
  const std::set<std::pair<int64_t, std::string>> columns = PasskeyLayoutColumns(t, records, keep);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    size_t j = 0;
    for (const std::pair<int64_t, std::string>& col : columns) {
      t.cells[i][j++] = PooledPasskeyCell(
          records,
          [&](const LabRecord& r) {
            return keep(r) && r.ctx == col.first && r.layout == col.second && InRow(r, t.rows[i]);
          },
          [](const LabRecord& r) { return static_cast<double>(r.right_by_place.front()); },
          [](const LabRecord& r) {
            return r.control_right_by_place.empty()
                       ? std::nullopt
                       : std::optional<double>(r.control_right_by_place.front());
          });
    }
  }
  t.note =
      "Rows: model / method. Columns: length of the input in tokens, and the document's layout. "
      "Cells: share of the passkey trials (over all depths) whose first digit the model predicted "
      "right, with its 95% Wilson interval and the number of trials. Beside the passkey table: "
      "where this share is about the whole key's, the keys are lost at their first digit (the one "
      "the model must find by the question's words; the later digits follow the digit before); "
      "where it is much higher, they are lost later. Where the records have it, the control: "
      "the first digit of the same question with no key in the text, a guess, right about 1 time "
      "in 10 for a model that answers the question with a number; near 0 when the model no longer "
      "reads the question's end as asking for one (then the key is lost before any search for it "
      "could fail).";
  // Of the keys not read back beyond L, how many went wrong at the first digit, by layout (a
  // trial whose first digit is wrong has lost its key; rounding guards a key count stored as an
  // accuracy).
  std::map<std::string, std::pair<int64_t, int64_t>> lost;  // layout: (first digit, all)
  for (const LabRecord& r : records) {
    if (!keep(r) || r.ctx <= r.train_len) continue;
    const auto keys =
        static_cast<int64_t>(std::llround(r.accuracy * static_cast<double>(r.sequences)));
    lost[r.layout].first += r.sequences - r.right_by_place.front();
    lost[r.layout].second += r.sequences - keys;
  }
  std::vector<std::string> parts;
  for (const auto& [layout, n] : lost) {
    if (n.second <= 0) continue;
    parts.push_back(fmt::format("{} of {} in {}", n.first, n.second,
                                layout.empty()      ? std::string("stretch's layout")
                                : layout == "llama" ? std::string("llama.cpp's")
                                                    : "layout " + layout));
  }
  if (!parts.empty()) {
    t.note += fmt::format(
        " Beyond the training length, of the keys not read back, those lost at their first "
        "digit: {}.",
        fmt::join(parts, ", "));
  }
  MarkBest(t, /*higher_is_better=*/true);
  return t;
}

std::vector<ReportTable> FarCopyTables(const std::vector<LabRecord>& records) {
  std::vector<std::string> materials;
  for (const LabRecord& r : records) {
    if (r.protocol == "far-copy" &&
        std::find(materials.begin(), materials.end(), MaterialOf(r)) == materials.end()) {
      materials.push_back(MaterialOf(r));
    }
  }
  std::sort(materials.begin(), materials.end(), std::greater<>());  // text first
  std::vector<ReportTable> tables;
  for (const std::string& material : materials) {
    auto keep = [&](const LabRecord& r) {
      return r.protocol == "far-copy" && MaterialOf(r) == material;
    };
    ReportTable t =
        EmptyTable("far_copy_" + material, fmt::format("Far copy by distance ({})", material),
                   ReportCellFormat::kAccuracy, records);
    t.rows = RowsWith(records, keep);
    std::set<std::pair<int64_t, int64_t>> columns;  // (ctx, distance)
    for (const LabRecord& r : records) {
      if (keep(r)) columns.insert({r.ctx, r.distance});
    }
    for (const auto& [c, d] : columns) {
      t.columns.push_back(fmt::format("d={} (ctx {})", d, c));
      t.column_info.push_back({"far-copy", c, d, ""});
    }
    SizeCells(t);
    for (const LabRecord& r : records) {
      if (!keep(r)) continue;
      const auto at = columns.find({r.ctx, r.distance});
      SetCell(t, r, static_cast<size_t>(std::distance(columns.begin(), at)),
              CellOf(r, r.accuracy, r.accuracy_ci, /*control=*/true));
    }
    t.note = fmt::format(
        "Rows: model / method. Columns: distance d in tokens from a span early in the context to "
        "its copy at the end, and the context length. The span is {}. Cells: {}.",
        material == "random" ? "a random string" : "a piece of the test text", kRetrievalCell);
    MarkBest(t, /*higher_is_better=*/true);
    tables.push_back(std::move(t));
  }
  return tables;
}

ReportTable RepeatPeriodTable(const std::vector<LabRecord>& records) {
  auto keep = [](const LabRecord& r) { return r.protocol == "repeat"; };
  ReportTable t =
      EmptyTable("repeat_by_period", "Repeat by period", ReportCellFormat::kAccuracy, records);
  // Only when some record has a period other than its training length: otherwise the main table
  // says it all.
  const bool periods = std::any_of(records.begin(), records.end(), [&](const LabRecord& r) {
    return keep(r) && RepeatPeriod(r) != r.train_len;
  });
  if (!periods) return t;
  t.rows = RowsWith(records, keep);
  const std::set<int64_t> lens = TrainLens(records);
  std::set<std::pair<int64_t, int64_t>> columns;  // (ctx, period)
  for (const LabRecord& r : records) {
    if (keep(r) && r.ctx > r.train_len) columns.insert({r.ctx, RepeatPeriod(r)});
  }
  for (const auto& [c, p] : columns) {
    const bool control = lens.size() == 1 && p == *lens.begin();
    t.columns.push_back(control ? fmt::format("{}, period {} (within window)", c, p)
                                : fmt::format("{}, period {}", c, p));
    t.column_info.push_back({"repeat", c, p, ""});
  }
  SizeCells(t);
  for (const LabRecord& r : records) {
    if (!keep(r) || r.ctx <= r.train_len) continue;
    const auto at = columns.find({r.ctx, RepeatPeriod(r)});
    SetCell(t, r, static_cast<size_t>(std::distance(columns.begin(), at)),
            CellOf(r, r.accuracy, r.accuracy_ci, /*control=*/true));
  }
  t.note = fmt::format(
      "Rows: model / method. Columns: context length in tokens and the period P: a sample of P "
      "tokens repeated until it fills the context. With P = L (the training length, \"within "
      "window\") the copy's source is always within reach of a window of L: a control, not the "
      "test; longer periods are the test of keeping distant information. Cells: {}, or the "
      "accuracy alone where the records carry no control.",
      kRetrievalCell);
  MarkBest(t, /*higher_is_better=*/true);
  return t;
}

SeesBack SeesBackOf(const std::vector<LabRecord>& records, const ReportRowKey& row,
                    const std::string& material, int64_t ctx) {
  // distance -> the record at `ctx`, or (ctx 0) at the longest context.
  std::map<int64_t, const LabRecord*> at;
  for (const LabRecord& r : records) {
    if (r.protocol != "far-copy" || MaterialOf(r) != material || !InRow(r, row)) continue;
    if (ctx != 0 && r.ctx != ctx) continue;
    const LabRecord*& x = at[r.distance];
    if (x == nullptr || r.ctx > x->ctx) x = &r;
  }
  SeesBack out;
  if (at.empty()) return out;
  out.farthest = at.rbegin()->first;
  for (const auto& [d, r] : at) {
    if (!r->informative) {
      out.informative = false;
      out.not_informative = r->not_informative;
    }
    if (!r->has_control || !r->accuracy_ci.known || !r->control_accuracy_ci.known) return out;
  }
  // The rule of `score --protocol far-copy` and `tune` (src/core/sees_back.h): from the distance
  // closest to L from below, while copy - control has its interval above 0 (as the tables mark
  // it) and the accuracy stays no more than 10 points below the reference's.
  std::vector<CopyAtDistance> points;
  for (const auto& [d, r] : at) {
    const LabInterval diff = DifferenceInterval(r->accuracy, r->accuracy_ci, r->control_accuracy,
                                                r->control_accuracy_ci);
    points.push_back({d, r->accuracy, diff.lo > 0.0});
  }
  const int64_t train_len = at.begin()->second->train_len;
  const std::optional<int64_t> sees = SeesBackDistance(points, train_len);
  out.known = sees.has_value();
  out.tokens = sees.value_or(0);
  out.reference = SeesBackReference(points, train_len);
  if (const auto ref = at.find(out.reference); ref != at.end()) {
    const LabRecord& r = *ref->second;
    out.reference_gain = r.accuracy - r.control_accuracy;
    out.reference_ci =
        DifferenceInterval(r.accuracy, r.accuracy_ci, r.control_accuracy, r.control_accuracy_ci);
  }
  return out;
}

ReportTable SeedsTable(const std::vector<LabRecord>& records) {
  // A model's seed: its records' own, or, for the cells an older build scored before a resume,
  // the seed its other records give the same model (a model id is one set of training options,
  // the seed among them).
  std::map<std::string, int64_t> seed_of_id;
  for (const LabRecord& r : records) {
    if (r.seed > 0 && !r.model_id.empty()) seed_of_id.emplace(r.model_id, r.seed);
  }
  using Recipe = std::tuple<std::string, std::string, std::string, int64_t>;
  auto recipe = [](const LabRecord& r) {
    return Recipe{r.corpus, r.model, r.variant, r.train_len};
  };
  // Each recipe's seeds, each seed's model (the first id read); a second model of one recipe and
  // seed (the same seed trained with other options) is left out and named in the note.
  std::map<Recipe, std::map<int64_t, std::string>> recipes;
  std::vector<std::string> left_out;
  std::vector<LabRecord> seeded;
  for (LabRecord r : records) {
    if (r.seed == 0 && seed_of_id.count(r.model_id) != 0) r.seed = seed_of_id[r.model_id];
    if (r.seed <= 0) continue;
    auto [it, added] = recipes[recipe(r)].emplace(r.seed, r.model_id);
    if (!added && it->second != r.model_id) {
      const std::string line =
          fmt::format("{} seed {}: id {} (id {} shown)", r.model, r.seed, r.model_id, it->second);
      if (std::find(left_out.begin(), left_out.end(), line) == left_out.end()) {
        left_out.push_back(line);
      }
      continue;
    }
    seeded.push_back(std::move(r));
  }
  // Recipes of two seeds or more; a label that holds several such recipes gets the training
  // length or the variant after it, as SeparateModels does.
  std::map<std::pair<std::string, std::string>, std::vector<Recipe>> by_label;
  for (const auto& [rc, seeds] : recipes) {
    if (seeds.size() >= 2) by_label[{std::get<0>(rc), std::get<1>(rc)}].push_back(rc);
  }
  std::vector<LabRecord> kept;
  std::map<std::string, std::vector<int64_t>> seeds_of_label;  // shown label -> its seeds
  for (LabRecord& r : seeded) {
    const auto it = by_label.find({r.corpus, r.model});
    if (it == by_label.end()) continue;
    const std::vector<Recipe>& several = it->second;
    if (std::find(several.begin(), several.end(), recipe(r)) == several.end()) continue;
    const Recipe rc = recipe(r);
    if (several.size() > 1) {
      bool lengths_differ = false;
      for (const Recipe& o : several) lengths_differ |= std::get<3>(o) != r.train_len;
      r.model += lengths_differ ? fmt::format(" [L={}]", r.train_len) : " [" + r.variant + "]";
    }
    std::vector<int64_t>& seeds = seeds_of_label[r.corpus + "\n" + r.model];
    if (seeds.empty()) {
      for (const auto& [seed, id] : recipes[rc]) seeds.push_back(seed);
    }
    kept.push_back(std::move(r));
  }
  ReportTable t = EmptyTable("seeds", "Over training seeds", ReportCellFormat::kText, kept);
  if (kept.empty()) return t;
  // Columns: far copy by material (text first), then context, at the farthest distance there;
  // then passkey by context.
  std::map<std::pair<std::string, int64_t>, int64_t> farthest;  // (material, ctx) -> distance
  std::map<int64_t, bool> passkey_ctx;  // ctx -> any key far back (KeyFarBack)
  for (const LabRecord& r : kept) {
    if (r.ctx <= r.train_len) continue;
    if (r.protocol == "far-copy") {
      int64_t& d = farthest[{MaterialOf(r), r.ctx}];
      d = std::max(d, r.distance);
    } else if (r.protocol == "passkey" && r.layout.empty()) {
      passkey_ctx[r.ctx] |= KeyFarBack(r);
    }
  }
  struct Column {
    std::string material;  // "" for passkey
    int64_t ctx = 0, distance = 0;
    bool far_back = false;  // passkey: only the depths whose key lies far back, as the summary
  };
  std::vector<Column> columns;
  for (const auto& [key, d] : farthest) columns.push_back({key.first, key.second, d});
  std::stable_sort(columns.begin(), columns.end(), [](const Column& a, const Column& b) {
    return a.material != b.material ? a.material > b.material : a.ctx < b.ctx;
  });
  for (const auto& [c, far_back] : passkey_ctx) columns.push_back({"", c, 0, far_back});
  for (const Column& c : columns) {
    t.columns.push_back(
        c.material.empty()
            ? fmt::format("passkey (ctx {}{})", c.ctx, c.far_back ? ", key over 2L back" : "")
            : fmt::format("{} d={} (ctx {})", c.material, c.distance, c.ctx));
    t.column_info.push_back({c.material.empty() ? "passkey" : "far-copy", c.ctx,
                             c.material.empty() ? (c.far_back ? 1 : 0) : c.distance, ""});
  }
  t.rows = RowsWith(kept, [](const LabRecord&) { return true; });
  SizeCells(t);
  std::string seed_lists;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const ReportRowKey& row = t.rows[i];
    const std::vector<int64_t>& seeds = seeds_of_label[row.corpus + "\n" + row.model];
    if (i == 0 || t.rows[i - 1].model != row.model || t.rows[i - 1].corpus != row.corpus) {
      std::string list;
      for (const int64_t seed : seeds) list += (list.empty() ? "" : ", ") + std::to_string(seed);
      seed_lists += fmt::format("{}{}: {}", seed_lists.empty() ? "" : "; ", row.model, list);
    }
    for (size_t j = 0; j < columns.size(); ++j) {
      const Column& col = columns[j];
      std::string text;
      int above = 0, any = 0;
      for (const int64_t seed : seeds) {
        std::string part = "-";
        if (col.material.empty()) {  // passkey in stretch's layout: its depths as the summary's
          double read = 0.0;
          int64_t trials = 0;
          auto in_cell = [&](const LabRecord& r) {
            return RowOf(r) == row && r.seed == seed && r.protocol == "passkey" &&
                   r.layout.empty() && r.ctx == col.ctx;
          };
          // As PasskeyCell: a row whose L leaves no depth that far back counts every depth.
          const bool far_only =
              col.far_back && std::any_of(kept.begin(), kept.end(), [&](const LabRecord& r) {
                return in_cell(r) && KeyFarBack(r);
              });
          for (const LabRecord& r : kept) {
            if (in_cell(r) && (!far_only || KeyFarBack(r))) {
              read += r.accuracy * static_cast<double>(r.sequences);
              trials += r.sequences;
            }
          }
          if (trials > 0) {
            part = fmt::format("{}/{}", std::lround(read), trials);
            any++;
          }
        } else {
          for (const LabRecord& r : kept) {
            if (RowOf(r) == row && r.seed == seed && r.protocol == "far-copy" &&
                MaterialOf(r) == col.material && r.ctx == col.ctx && r.distance == col.distance) {
              const ReportCell c = CellOf(r, r.accuracy, r.accuracy_ci, /*control=*/true);
              if (!c.has_control) break;
              // Rounded first, then + 0.0: -0.3 points reads "+0", not "-0" (-0.0 + 0.0 is +0.0).
              part = fmt::format("{:+.0f}", std::round(100 * c.difference) + 0.0);
              any++;
              if (c.difference_ci.known && c.difference_ci.lo > 0.0) above++;
              break;
            }
          }
        }
        text += (text.empty() ? "" : col.material.empty() ? "; " : " / ") + part;
      }
      if (any == 0) continue;
      if (!col.material.empty()) {
        text += fmt::format(" ({} of {} above control)", above, seeds.size());
      }
      t.cells[i][j].present = true;
      t.cells[i][j].text = text;
      // For SeedsReading: the seeds above control, of how many.
      t.cells[i][j].value = static_cast<double>(above);
      t.cells[i][j].trials = static_cast<int64_t>(seeds.size());
    }
  }
  t.note = fmt::format(
      "The same recipe trained with several seeds (stretch lab --seed N), one model per seed; the "
      "intervals of the other tables cover the draws of one trained model, not the training. "
      "Rows: model / method. Far-copy cells: copy - control in points for each seed, in the "
      "order of the seeds ({}), and how many seeds' differences have a 95% interval above 0. "
      "Passkey cells: keys read back for each seed, in the same order, over the depths whose key "
      "lies over 2L back where there are some (as in the summary). '-': no record for that "
      "seed (a model that failed the copy gate part a cell needs is not scored there). A "
      "difference between methods that does not hold in every seed is a property of the draw, "
      "not of the method.",
      seed_lists);
  if (!left_out.empty()) {
    std::string list;
    for (const std::string& l : left_out) list += (list.empty() ? "" : "; ") + l;
    t.note += fmt::format(
        " Left out, as a second model of one recipe and seed (trained with other options): {}.",
        list);
  }
  return t;
}

ReportTable GateTable(const std::vector<LabGate>& gates, bool show_corpus) {
  ReportTable t;
  t.name = "gate";
  t.title = "The copy gate";
  t.format = ReportCellFormat::kAccuracy;
  t.show_corpus = show_corpus;
  t.model_rows = true;
  t.columns = {"train length", "copy at L", "control at L", "passkey at L", "gate"};
  t.column_formats = {ReportCellFormat::kTokens, ReportCellFormat::kAccuracy,
                      ReportCellFormat::kAccuracy, ReportCellFormat::kAccuracy,
                      ReportCellFormat::kText};
  for (const LabGate& g : gates) {
    t.rows.push_back({g.corpus, g.model, ""});
    std::vector<ReportCell> row(t.columns.size());
    auto cell = [](double value, const LabInterval& ci) {
      ReportCell c;
      c.present = true;
      c.value = value;
      c.ci = ci;
      return c;
    };
    row[0] = cell(static_cast<double>(g.train_len), {});
    row[1] = cell(g.copy_accuracy, g.copy_ci);
    row[2] = cell(g.control_accuracy, g.control_ci);
    row[3] = cell(g.passkey_accuracy, g.passkey_ci);
    row[4].present = true;
    row[4].text = g.passed ? std::string("passed") : "failed: " + g.reason;
    t.cells.push_back(std::move(row));
  }
  t.note =
      "Rows: models. Before any cell beyond the training length L is read, the lab measures each "
      "model at L: far copy within L against its control (nothing to copy), and passkey, each "
      "with its 95% interval. A model that fails cannot show whether a method keeps distant "
      "information (it does not retrieve even at L): its retrieval cells are marked not "
      "informative in every table and plot, and its far-copy and passkey cells beyond L are "
      "left unscored (-) unless the lab ran with --score-not-informative.";
  return t;
}

ReportTable SummaryTable(const std::vector<LabRecord>& records) {
  ReportTable t = EmptyTable("summary", "Summary: next-token accuracy and retrieval",
                             ReportCellFormat::kAccuracy, records);
  auto plain = [](const LabRecord& r) { return r.tail == 0 && r.stride == 0; };
  auto keep = [&](const LabRecord& r) {
    return plain(r) && (r.protocol == "nonrepeat" || r.protocol == "repeat" ||
                        r.protocol == "far-copy" || r.protocol == "passkey");
  };
  t.rows = RowsWith(records, keep);
  if (t.rows.empty()) return t;
  const std::set<int64_t> lens = TrainLens(records);
  const bool one_len = lens.size() == 1;
  // The far-copy material shown: text where there is some (the seeds' question is about text).
  const bool any_text = std::any_of(records.begin(), records.end(), [](const LabRecord& r) {
    return r.protocol == "far-copy" && MaterialOf(r) == "text";
  });
  const std::string material = any_text ? "text" : "random";
  std::set<int64_t> long_ctx;
  for (const LabRecord& r : records) {
    if (keep(r) && r.ctx > r.train_len) long_ctx.insert(r.ctx);
  }
  t.columns.push_back(one_len ? fmt::format("L={}", *lens.begin()) : "L (training length)");
  t.column_info.push_back({"nonrepeat", 0, 0, ""});
  for (const int64_t c : long_ctx) {
    const std::string x = Multiple(c, lens);
    int64_t period = 0, distance = 0;
    bool nonrepeat = false;
    std::map<std::string, bool> passkey_layouts;  // stretch's own ("") first -> any key far back
    for (const LabRecord& r : records) {
      if (!keep(r) || r.ctx != c) continue;
      if (r.protocol == "nonrepeat") nonrepeat = true;
      if (r.protocol == "repeat") period = std::max(period, RepeatPeriod(r));
      if (r.protocol == "far-copy" && MaterialOf(r) == material) {
        distance = std::max(distance, r.distance);
      }
      if (r.protocol == "passkey") passkey_layouts[r.layout] |= KeyFarBack(r);
    }
    if (nonrepeat) {
      t.columns.push_back(fmt::format("non-repeat {}{}", c, x));
      t.column_info.push_back({"nonrepeat", c, 0, ""});
    }
    if (period > 0) {
      const bool within = one_len && period <= *lens.begin();
      t.columns.push_back(within ? fmt::format("repeat {}{}, period L (within window)", c, x)
                                 : fmt::format("repeat {}{}, period {}", c, x, period));
      t.column_info.push_back({"repeat", c, period, ""});
    }
    if (distance > 0) {
      t.columns.push_back(fmt::format("far copy {}{}, d={}", c, x, distance));
      t.column_info.push_back({"far-copy", c, distance, ""});
      // How far back at this length: a method can see back the whole window at 8x and not at
      // 16x (YaRN on the quick lab's models), which one column over every length hid.
      t.columns.push_back(
          fmt::format("sees back at {}{} (tokens, far copy of {})", c, x, material));
      t.column_info.push_back({"sees-back", c, 0, ""});
    }
    // Only the depths whose key lies beyond L where there are some: at depth 1 the key sits
    // right before the question, inside a window's reach, and a window that reads it there
    // would otherwise be tied with the methods that retrieve (5 of 15 against 11 of 15).
    for (const auto& [layout, far_back] : passkey_layouts) {
      t.columns.push_back(fmt::format("passkey {}{}{}{}", c, x, LayoutLabel(layout),
                                      far_back ? ", key over 2L back" : ""));
      t.column_info.push_back({"passkey", c, far_back ? 1 : 0, layout});
    }
  }
  const bool far = std::any_of(records.begin(), records.end(),
                               [](const LabRecord& r) { return r.protocol == "far-copy"; });
  const bool any_passkey = std::any_of(records.begin(), records.end(),
                                       [](const LabRecord& r) { return r.protocol == "passkey"; });
  t.column_formats.assign(t.columns.size(), ReportCellFormat::kAccuracy);
  SizeCells(t);
  for (size_t j = 0; j < t.columns.size(); ++j) {
    const ReportTable::Column& col = t.column_info[j];
    if (col.protocol == "passkey") {
      t.column_formats[j] = ReportCellFormat::kPasskey;
      for (size_t i = 0; i < t.rows.size(); ++i) {
        t.cells[i][j] = PasskeyCell(records, t.rows[i], col.ctx, col.layout, col.param == 1);
      }
      continue;
    }
    if (col.protocol == "sees-back") {
      t.column_formats[j] = ReportCellFormat::kText;
      for (size_t i = 0; i < t.rows.size(); ++i) {
        const SeesBack s = SeesBackOf(records, t.rows[i], material, col.ctx);
        ReportCell& c = t.cells[i][j];
        if (s.farthest == 0) continue;
        c.present = true;
        c.informative = s.informative;
        c.not_informative = s.not_informative;
        c.value = static_cast<double>(s.tokens);
        // "none" says why: its copy at the distance the rule starts from is not above control
        // (a row can copy from farther back and still see back none: the rule asks for every
        // distance from there on).
        c.text = !s.known        ? std::string("not known")
                 : s.tokens == 0 ? std::string("none")
                                 : fmt::format("{}", s.tokens);
        if (s.known && s.tokens == 0) {
          c.detail =
              fmt::format("at d={}: {}", s.reference, PointsText(s.reference_gain, s.reference_ci));
        } else if (s.known && s.tokens == s.farthest) {
          c.detail = "the farthest tested";
        }
      }
      continue;
    }
    for (const LabRecord& r : records) {
      if (!keep(r) || r.protocol != col.protocol) continue;
      const bool at_l = col.ctx == 0;
      if (at_l ? r.ctx != r.train_len : r.ctx != col.ctx) continue;
      if (col.protocol == "repeat" && RepeatPeriod(r) != col.param) continue;
      if (col.protocol == "far-copy" && (r.distance != col.param || MaterialOf(r) != material)) {
        continue;
      }
      SetCell(t, r, j,
              CellOf(r, r.accuracy, r.accuracy_ci, /*control=*/col.protocol != "nonrepeat"));
    }
  }
  // A passkey column in a layout other than stretch's own (llama.cpp's, which the lab's models
  // are not taught) where no method reads a key above its control says one thing for every row;
  // it stays in the passkey table and is named in the note instead of widening this one.
  std::vector<std::string> left_out;
  for (size_t j = t.columns.size(); j-- > 0;) {
    const ReportTable::Column& col = t.column_info[j];
    if (col.protocol != "passkey" || col.layout.empty()) continue;
    bool read = false, above = false;
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const ReportCell& c = t.cells[i][j];
      if (!c.present || !c.informative) continue;
      read = true;
      // No control or no interval: not known to be at control.
      if (!c.has_control || !c.difference_ci.known || c.difference_ci.lo > 0.0) above = true;
    }
    if (!read || above) continue;
    left_out.insert(left_out.begin(), t.columns[j]);
    t.columns.erase(t.columns.begin() + static_cast<std::ptrdiff_t>(j));
    t.column_info.erase(t.column_info.begin() + static_cast<std::ptrdiff_t>(j));
    t.column_formats.erase(t.column_formats.begin() + static_cast<std::ptrdiff_t>(j));
    for (std::vector<ReportCell>& row : t.cells) {
      row.erase(row.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
  t.note = fmt::format(
      "Rows: model / method. Columns, as in the tables of Su Jianlin's posts on length "
      "extrapolation that the lab reproduces (kexue.fm/archives/9859): non-repeat accuracy at the "
      "training length L, then at each longer context: non-repeat (genuine text), repeat at the "
      "longest period tested (a period longer than L is the test of keeping distant "
      "information; period L is only a within-window control){}{}. Cells: next-token accuracy "
      "with its 95% interval where the records carry one; retrieval cells also give their "
      "control (nothing to copy) and copy - control in points.{}",
      far ? fmt::format(", far copy of {} from the longest distance tested", material) : "",
      any_passkey ? ", passkey (one column per layout: stretch's own, which the lab's models "
                    "are trained on; and llama.cpp's, where it was scored) over the depths whose "
                    "key lies over 2L back ((1 - depth) x length > 2L, so more than L tokens "
                    "before the answer: beyond any window of L; the passkey table has every "
                    "depth), or over every depth at a length (or for a row's L) where none does"
                  : "",
      far ? " Sees back at each length: the farthest far-copy distance d such that at every "
            "distance tested up to d, at that length, copy - control has its interval above 0 and "
            "the copy accuracy stays no more than 10 points below its value at the distance "
            "closest to L from below (\"none\": not even there); the rule of `stretch score "
            "--protocol far-copy` and `stretch tune`."
          : "");
  if (!left_out.empty()) {
    std::string names;
    for (size_t k = 0; k < left_out.size(); ++k) {
      names += (k == 0 ? "" : k + 1 == left_out.size() ? " and " : ", ") + left_out[k];
    }
    t.note += fmt::format(
        " Left out here, as no method reads a key there above its control (copy - control has "
        "its interval at 0 or below in every informative row; the passkey table has those "
        "cells): {}.",
        names);
  }
  MarkBest(t, /*higher_is_better=*/true);
  return t;
}

std::vector<ReportTable> TableByLength(const ReportTable& t,
                                       const std::vector<LabRecord>& records) {
  std::vector<int64_t> long_ctx;  // in the order of the columns
  for (const ReportTable::Column& col : t.column_info) {
    if (col.ctx != 0 && std::find(long_ctx.begin(), long_ctx.end(), col.ctx) == long_ctx.end()) {
      long_ctx.push_back(col.ctx);
    }
  }
  if (long_ctx.size() <= 1 || t.column_info.size() != t.columns.size()) {
    return {t};
  }
  const std::set<int64_t> lens = TrainLens(records);
  std::vector<ReportTable> pieces;
  for (const int64_t c : long_ctx) {
    ReportTable p = t;
    p.name = fmt::format("{}-{}", t.name, c);
    p.title = fmt::format("{} at {} tokens{}", t.title, c, Multiple(c, lens));
    if (!pieces.empty()) {
      // The note and the ranking note (which names the unranked columns of every length) once.
      p.note = fmt::format("As in the table above (at {} tokens), at {} tokens.", long_ctx[0], c);
      p.ranking_note.clear();
    }
    p.columns.clear();
    p.column_info.clear();
    p.column_formats.clear();
    p.all_tied.clear();
    for (std::vector<ReportCell>& row : p.cells) row.clear();
    for (size_t j = 0; j < t.columns.size(); ++j) {
      const ReportTable::Column& col = t.column_info[j];
      if (col.ctx != 0 && col.ctx != c) continue;
      p.columns.push_back(t.columns[j]);
      p.column_info.push_back(col);
      p.column_formats.push_back(t.FormatOf(j));
      if (j < t.all_tied.size()) p.all_tied.push_back(t.all_tied[j]);
      for (size_t i = 0; i < p.cells.size(); ++i) p.cells[i].push_back(t.cells[i][j]);
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}

namespace {

// How far above its control a retrieval cell must lie for the reading to say a method keeps
// distant information (a share: 5 points); a cell above its control by less is read as a trace,
// and one whose interval reaches both sides of 5 points as not settled.
constexpr double kKeepPoints = 0.05;

// Above its control: copy - control has its 95% interval above 0, the test the tables' ranking,
// `score` and "sees back" use.
bool Above(const ReportCell& c) { return c.difference_ci.known && c.difference_ci.lo > 0.0; }

// Keeps distant information: copy - control has its whole 95% interval at kKeepPoints or more.
// Decided by the interval, not the point estimate, so that two cells whose intervals overlap
// (+5.8 (3.3 to 8.4) and +4.6 (2.9 to 6.2), say) are not read as a keeper and a trace.
bool Keeps(const ReportCell& c) {
  return c.difference_ci.known && c.difference_ci.lo >= kKeepPoints;
}

std::string RetrievalName(const ReportTable::Column& col) {
  if (col.protocol == "far-copy") return fmt::format("far copy from {} tokens back", col.param);
  if (col.protocol == "repeat") return fmt::format("repeat with a period of {}", col.param);
  const std::string far = col.param == 1 ? " with the key over 2L back" : "";
  return col.layout.empty() ? "passkey" + far
                            : fmt::format("passkey ({}){}", LayoutLabel(col.layout).substr(2), far);
}

}  // namespace

std::string SummaryReading(const ReportTable& s, const std::vector<LabRecord>& records,
                           const std::vector<LabGate>& gates) {
  if (s.empty() || s.column_info.size() != s.columns.size()) return "";
  bool any_interval = false;
  for (const auto& row : s.cells) {
    for (const ReportCell& c : row) any_interval = any_interval || (c.present && c.ci.known);
  }
  if (!any_interval) {
    return "The records carry no intervals (they were written by an older build): no cell is "
           "ranked, and whether a method keeps distant information is not read from them.";
  }
  std::vector<std::string> out;
  std::vector<std::string> unknown_models;  // models none of whose methods can be read
  // The verdicts said of some model: keep, trace, not settled, avoid, neither, not known (their
  // meanings follow the models, once).
  std::array<bool, 6> used = {};
  // Over the models: per method, in row order, the models it keeps distant information in, only
  // avoids blowing up in, and is read in at all (its retrieval cells informative and settled).
  struct Tally {
    int keeps = 0, avoids = 0, read = 0;
  };
  std::vector<std::string> method_order;
  std::map<std::string, Tally> tally;
  int models_read = 0;
  std::vector<std::pair<std::string, std::string>> models;  // (corpus, model), in row order
  for (const ReportRowKey& r : s.rows) {
    if (std::find(models.begin(), models.end(), std::pair(r.corpus, r.model)) == models.end()) {
      models.push_back({r.corpus, r.model});
    }
  }
  for (const auto& corpus_model : models) {
    const std::string& corpus = corpus_model.first;  // not a binding: captured below (clang 14)
    const std::string& model = corpus_model.second;
    std::vector<size_t> rows;
    for (size_t i = 0; i < s.rows.size(); ++i) {
      if (s.rows[i].corpus == corpus && s.rows[i].model == model) rows.push_back(i);
    }
    int64_t train_len = 0;
    for (const LabRecord& r : records) {
      if (r.corpus == corpus && r.model == model) train_len = r.train_len;
    }
    // The longest context with any cell of this model.
    int64_t ctx = 0;
    for (size_t j = 0; j < s.columns.size(); ++j) {
      for (const size_t i : rows) {
        if (s.cells[i][j].present && s.column_info[j].ctx > ctx) ctx = s.column_info[j].ctx;
      }
    }
    const std::string name = s.show_corpus ? corpus + " / " + model : model;
    if (ctx == 0 || train_len == 0) continue;
    size_t nonrepeat = s.columns.size();
    std::vector<size_t> retrieval;  // far copy first, then repeat beyond L, then passkey
    for (const char* p : {"far-copy", "repeat", "passkey"}) {
      for (size_t j = 0; j < s.columns.size(); ++j) {
        const ReportTable::Column& c = s.column_info[j];
        if (c.ctx != ctx || c.protocol != p) continue;
        if (c.protocol == "repeat" && c.param <= train_len) continue;  // within window: control
        retrieval.push_back(j);
      }
    }
    for (size_t j = 0; j < s.columns.size(); ++j) {
      if (s.column_info[j].ctx == ctx && s.column_info[j].protocol == "nonrepeat") nonrepeat = j;
    }
    std::vector<std::string> keep, avoid, neither, unknown;
    // Above control somewhere, never settled at kKeepPoints: below it for sure (a trace), or
    // its largest cell's interval reaching both sides (not settled); each with its figures.
    std::vector<std::string> trace, trace_figures, unsettled_figures;
    std::vector<std::string> gate_stable, gate_fall;  // a failed gate: non-repeat only
    std::vector<size_t> keep_rows;
    // Keepers whose genuine text falls: the method with its accuracy there, and L's accuracy.
    std::vector<std::pair<std::string, std::string>> keep_falls;
    std::string failed;
    for (const size_t i : rows) {
      const std::string& method = s.rows[i].method;
      std::vector<const ReportCell*> evidence;
      // The informative cells only: a model that failed one part of the gate (passkey, say) is
      // still read on the columns the other parts cover (far copy, say).
      std::string not_informative;
      for (const size_t j : retrieval) {
        const ReportCell& c = s.cells[i][j];
        if (!c.present || !c.has_control) continue;
        if (!c.informative) {
          not_informative = c.not_informative;
          continue;
        }
        evidence.push_back(&c);
      }
      const ReportCell& at_l = s.cells[i][0];
      const bool stable = nonrepeat < s.columns.size() && s.cells[i][nonrepeat].present &&
                          at_l.present &&
                          (s.cells[i][nonrepeat].value >= at_l.value - 0.05 ||
                           s.cells[i][nonrepeat].ci.Overlaps(at_l.ci));
      if (evidence.empty() && !not_informative.empty()) {
        failed = not_informative;
        (stable ? gate_stable : gate_fall).push_back(method);
        continue;
      }
      const bool keeps = std::any_of(evidence.begin(), evidence.end(),
                                     [](const ReportCell* c) { return Keeps(*c); });
      // Above its control only by a little (a repeat read 1-3 points better than fresh text,
      // say): the largest such cell, to cite.
      const ReportCell* above = nullptr;
      size_t above_column = 0;
      for (const size_t j : retrieval) {
        const ReportCell& c = s.cells[i][j];
        if (c.present && c.has_control && c.informative && Above(c) &&
            (above == nullptr || c.difference_ci.hi > above->difference_ci.hi)) {
          above = &c;
          above_column = j;
        }
      }
      // At (or below) its control everywhere: no difference interval above 0.
      const bool at_control =
          !evidence.empty() &&
          std::all_of(evidence.begin(), evidence.end(),
                      [](const ReportCell* c) { return c->difference_ci.known && !Above(*c); });
      if (keeps || above != nullptr || at_control) {
        if (!tally.count(method)) method_order.push_back(method);
        Tally& t = tally[method];
        t.read++;
        t.keeps += keeps ? 1 : 0;
        t.avoids += !keeps && above == nullptr && stable ? 1 : 0;
      }
      if (keeps) {
        keep.push_back(method);
        keep_rows.push_back(i);
        if (!stable && nonrepeat < s.columns.size() && s.cells[i][nonrepeat].present &&
            at_l.present) {
          keep_falls.push_back(
              {fmt::format("{} {}", method,
                           AccuracyText(s.cells[i][nonrepeat].value, s.cells[i][nonrepeat].ci)),
               AccuracyText(at_l.value, at_l.ci)});
        }
      } else if (above != nullptr) {
        trace.push_back(method);
        (above->difference_ci.hi < kKeepPoints ? trace_figures : unsettled_figures)
            .push_back(fmt::format("{} {} on {}", method,
                                   PointsText(above->difference, above->difference_ci),
                                   RetrievalName(s.column_info[above_column])));
      } else if (at_control) {
        (stable ? avoid : neither).push_back(method);
      } else {
        unknown.push_back(method);
      }
    }
    std::string text = fmt::format("Model {} at {} tokens ({}):", name, ctx,
                                   Ratio(ctx, train_len) + " its training length");
    const auto gate = std::find_if(gates.begin(), gates.end(), [&](const LabGate& g) {
      return g.corpus == corpus && g.model == model && !g.passed;
    });
    if (failed.empty() && gate != gates.end()) {
      // Only parts of the gate that the read cells do not need failed: those parts' cells are
      // not informative (and beyond L not scored); the rest is read below.
      text += fmt::format(
          " it failed part of the copy gate ({}): the retrieval cells that need that part are "
          "not informative (beyond L they are not scored), and its other retrieval cells are "
          "read.",
          gate->reason);
    } else if (!failed.empty() || gate != gates.end()) {
      text += fmt::format(
          " it failed the copy gate ({}), so its retrieval cells cannot tell keeping distant "
          "information from forgetting it, and none of its methods is read either way on "
          "retrieval.",
          gate != gates.end() ? gate->reason : failed);
      if (!gate_stable.empty()) {
        text += fmt::format(
            " On genuine text, {} {} within 5 points of L's accuracy (or within "
            "its interval).",
            JoinNames(gate_stable), gate_stable.size() == 1 ? "stays" : "stay");
      }
      if (!gate_fall.empty()) {
        text += fmt::format(" On genuine text, {} {} more than 5 points below L's accuracy.",
                            JoinNames(gate_fall), gate_fall.size() == 1 ? "falls" : "fall");
      }
    }
    if (!keep.empty()) {
      // Compare the keepers on the first retrieval column where each has a ranked difference.
      std::string evidence;
      for (const size_t j : retrieval) {
        const bool all = std::all_of(keep_rows.begin(), keep_rows.end(), [&](size_t i) {
          return s.cells[i][j].present && s.cells[i][j].difference_ci.known;
        });
        if (!all) continue;
        // Ranked among themselves: only the keepers that keep on this cell (one at or near its
        // control here is cited with its own cell below, not tied with the others).
        std::vector<size_t> here;
        for (const size_t i : keep_rows) {
          if (s.cells[i][j].informative && Keeps(s.cells[i][j])) here.push_back(i);
        }
        std::vector<std::string> top, figures;
        for (const size_t i : keep_rows) {
          const ReportCell& c = s.cells[i][j];
          figures.push_back(
              fmt::format("{} {}", s.rows[i].method, PointsText(c.difference, c.difference_ci)));
        }
        if (!here.empty()) {
          size_t best = here[0];
          for (const size_t i : here) {
            if (s.cells[i][j].difference > s.cells[best][j].difference) best = i;
          }
          for (const size_t i : here) {
            if (i == best || s.cells[i][j].difference_ci.Overlaps(s.cells[best][j].difference_ci)) {
              top.push_back(s.rows[i].method);
            }
          }
        }
        evidence = fmt::format(" on {}, copy - control is {}", RetrievalName(s.column_info[j]),
                               JoinNames(figures));
        const std::string among =
            here.size() == keep.size() ? "" : "; of those that keep on this cell,";
        if (here.size() < 2) {
          evidence += ".";
        } else if (top.size() == here.size()) {
          evidence += among.empty() ? "; they are tied (their intervals overlap)."
                                    : fmt::format("{} {} are tied (their intervals overlap).",
                                                  among, JoinNames(top));
        } else if (top.size() == 1) {
          evidence += fmt::format("{} {} keeps the most, its interval clear of the others'.",
                                  among.empty() ? ";" : among, top[0]);
        } else {
          evidence += fmt::format("{} {} are tied for the most (their intervals overlap).",
                                  among.empty() ? ";" : among, JoinNames(top));
        }
        // A keeper whose cell here is not clear of its control keeps it on another cell: cite
        // its largest, so that the figures above do not read as a contradiction.
        std::vector<std::string> elsewhere;
        for (const size_t i : keep_rows) {
          const ReportCell& here = s.cells[i][j];
          if (here.informative && Keeps(here)) continue;
          const ReportCell* top_cell = nullptr;
          size_t top_column = 0;
          for (const size_t k : retrieval) {
            const ReportCell& c = s.cells[i][k];
            if (c.present && c.has_control && c.informative && Keeps(c) &&
                (top_cell == nullptr || c.difference > top_cell->difference)) {
              top_cell = &c;
              top_column = k;
            }
          }
          if (top_cell == nullptr) continue;
          elsewhere.push_back(fmt::format(
              "{} on {}, {}", s.rows[i].method, RetrievalName(s.column_info[top_column]),
              PointsText(top_cell->difference, top_cell->difference_ci)));
        }
        if (!elsewhere.empty()) {
          evidence.pop_back();  // the sentence's full stop
          evidence += fmt::format(
              "; where this cell is not clearly 5 points or more above its control, the "
              "keeping is elsewhere: {}.",
              JoinNames(elsewhere));
        }
        break;
      }
      text += fmt::format("\n- Keep distant information: {}{}", JoinNames(keep),
                          evidence.empty() ? "." : ";" + evidence);
      if (!keep_falls.empty()) {
        // Keeping is one half of the question: a keeper whose next-token accuracy on genuine
        // text collapses does not avoid blowing up, and the verdict must not hide it.
        const bool one_l = std::all_of(keep_falls.begin(), keep_falls.end(), [&](const auto& f) {
          return f.second == keep_falls[0].second;
        });
        std::vector<std::string> figures;
        for (const auto& [figure, at_l] : keep_falls) {
          figures.push_back(one_l ? figure : fmt::format("{} against {} at L", figure, at_l));
        }
        const std::string who = keep.size() == 1         ? "it falls"
                                : keep_falls.size() == 1 ? "one of them falls"
                                : keep_falls.size() == keep.size()
                                    ? (keep.size() == 2 ? std::string("both fall")
                                                        : fmt::format("all {} fall", keep.size()))
                                    : fmt::format("{} of them fall", keep_falls.size());
        text += fmt::format(" But on genuine text {} more than 5 points below L's accuracy{}: {}.",
                            who, one_l ? " of " + keep_falls[0].second : "", JoinNames(figures));
      }
      used[0] = true;
    }
    if (!trace_figures.empty()) {
      text += fmt::format("\n- Only a trace: {}.", JoinNames(trace_figures));
      used[1] = true;
    }
    if (!unsettled_figures.empty()) {
      text += fmt::format("\n- Above control, but whether by 5 points is not settled: {}.",
                          JoinNames(unsettled_figures));
      used[2] = true;
    }
    if (!avoid.empty()) {
      text += fmt::format("\n- Only avoid blowing up: {}.", JoinNames(avoid));
      used[3] = true;
    }
    if (!neither.empty()) {
      text += fmt::format("\n- Neither: {}.", JoinNames(neither));
      used[4] = true;
    }
    if (!unknown.empty() && keep.empty() && trace.empty() && avoid.empty() && neither.empty()) {
      if (failed.empty() && gate == gates.end()) unknown_models.push_back(name);
      if (failed.empty() && gate == gates.end()) continue;
    } else if (!unknown.empty()) {
      text += fmt::format("\n- Not known: {}.", JoinNames(unknown));
      used[5] = true;
    }
    if (!keep.empty() || !trace.empty() || !avoid.empty() || !neither.empty()) models_read++;
    out.push_back(text);
  }
  // The verdict over every model first, when there are several: the per-model sentences after
  // it give the figures.
  if (models_read >= 2) {
    std::vector<std::string> every, some, none, avoiders;
    for (const std::string& m : method_order) {
      const Tally& t = tally[m];
      // "Every model" only when read in every one; a method read in fewer (missing from some
      // labs, or not settled there) says in how many.
      if (t.keeps == t.read && t.read == models_read) {
        every.push_back(m);
      } else if (t.keeps > 0) {
        some.push_back(fmt::format("{} ({} of {})", m, t.keeps, t.read));
      } else {
        none.push_back(t.read == models_read ? m : fmt::format("{} (0 of {})", m, t.read));
      }
      if (t.avoids > 0) avoiders.push_back(fmt::format("{} ({} of {})", m, t.avoids, t.read));
    }
    std::vector<std::string> parts;
    if (!every.empty()) parts.push_back("in every model, " + JoinNames(every));
    if (!some.empty()) parts.push_back("in some, " + JoinNames(some));
    if (!none.empty()) parts.push_back("in none, " + JoinNames(none));
    std::string joined;
    for (const std::string& part : parts) joined += (joined.empty() ? "" : "; ") + part;
    std::string overview = fmt::format(
        "Over the {} models whose retrieval cells can be read, at each one's longest length, the "
        "methods that keep distant information (on at least one retrieval cell beyond the "
        "window: far copy, a repeat beyond L or passkey; each model's paragraph says which): {}.",
        models_read, joined);
    if (!avoiders.empty()) {
      overview += fmt::format(
          " Only avoiding blowing up (non-repeat near L's accuracy, retrieval at control): {}.",
          JoinNames(avoiders));
    }
    out.insert(out.begin(), overview);
  }
  if (!unknown_models.empty()) {
    out.push_back(fmt::format(
        "For {} {}, the records hold no retrieval cell beyond the window with intervals and a "
        "control (far copy, or repeat with a period longer than L; records of builds before "
        "them have none): whether {} distant information cannot be read from them.",
        unknown_models.size() == models.size() ? "every model" : "model",
        unknown_models.size() == models.size() ? std::string("here") : JoinNames(unknown_models),
        "a method keeps"));
  }
  // Ties over the whole table: every ranked column one tied group.
  bool ranked = false, all_tied = true, unranked = false;
  int at_control_columns = 0;  // retrieval columns with no cell above its control: all at chance
  for (size_t j = 0; j < s.columns.size(); ++j) {
    if (j < s.all_tied.size() && s.all_tied[j]) {  // one tied group, left unmarked
      ranked = true;
      continue;
    }
    bool marked = false, unmarked = false, at_control = true;
    for (size_t i = 0; i < s.rows.size(); ++i) {
      const ReportCell& c = s.cells[i][j];
      if (!c.present || !c.informative) continue;
      if (c.mark == ReportCell::Mark::kBest) all_tied = false;
      (c.mark == ReportCell::Mark::kNone ? unmarked : marked) = true;
      if (!c.has_control || !c.ci.known || !c.control_ci.known || Above(c)) at_control = false;
    }
    if (marked) ranked = true;
    if (marked && unmarked) all_tied = false;
    const ReportCellFormat f = s.FormatOf(j);
    if (!marked && unmarked && f != ReportCellFormat::kText && f != ReportCellFormat::kTokens) {
      if (at_control) {
        ++at_control_columns;  // MarkBest left it: every cell at its control, a tie at chance
        ranked = true;
      } else {
        unranked = true;  // MarkBest left it: some cell without an interval
      }
    }
  }
  if (ranked && all_tied && !unranked) {
    out.push_back(fmt::format(
        "Every column is a tie: in each, every cell's 95% interval overlaps the best's{}, so "
        "these records rank no method above another.",
        at_control_columns == 0 ? ""
                                : " (or, in a retrieval column, no cell lies above its control)"));
  } else if (ranked && all_tied) {
    out.push_back(
        "Every column that carries intervals is a tie (every cell's 95% interval overlaps the "
        "best's); the others carry none and are not ranked.");
  }
  // What each verdict means, once, for those used.
  const std::string kMeaning[] = {
      fmt::format("keep distant information: a retrieval cell beyond the window lies above its "
                  "control by {:.0f} points or more (copy - control with its whole 95% interval "
                  "at {:.0f} points or more)",
                  100 * kKeepPoints, 100 * kKeepPoints),
      fmt::format("only a trace: a retrieval cell above its control (copy - control with its "
                  "interval above 0), but by less than {:.0f} points (its whole interval below "
                  "{:.0f})",
                  100 * kKeepPoints, 100 * kKeepPoints),
      fmt::format("above control, not settled: a retrieval cell above its control whose "
                  "interval reaches both sides of {:.0f} points (more trials would say whether "
                  "it keeps)",
                  100 * kKeepPoints),
      "only avoid blowing up: non-repeat accuracy within 5 points of L's (or within its "
      "interval) while retrieval beyond the window is at control (copy - control with its "
      "interval at 0, or below)",
      "neither: retrieval at control and non-repeat accuracy more than 5 points below L's",
      "not known: the records hold no retrieval cell beyond the window with intervals and a "
      "control that settles it"};
  std::string meaning;
  for (size_t k = 0; k < used.size(); ++k) {
    if (used[k]) meaning += fmt::format("{}{}", meaning.empty() ? "" : "; ", kMeaning[k]);
  }
  if (!meaning.empty()) {
    // Before the closing tie sentences, after the models.
    const auto models_end = std::find_if(
        out.begin(), out.end(), [](const std::string& t) { return t.starts_with("Every column"); });
    out.insert(models_end, "How each method is read: " + meaning + ".");
  }
  // The records' caveats (LabRecord::caveat): each method's, once, in record order, after the
  // rest.
  std::vector<std::string> caveats;
  std::set<std::string> seen;
  for (const LabRecord& r : records) {
    if (!r.caveat.empty() && seen.insert(r.method + "\n" + r.caveat).second) {
      caveats.push_back(fmt::format("- {}: {}", r.method, r.caveat));
    }
  }
  if (!caveats.empty()) {
    out.push_back("Where a method ran outside the regime it was made for (the records say):\n" +
                  fmt::format("{}", fmt::join(caveats, "\n")));
  }
  // Paragraphs apart (a blank line), each model's verdicts one item a line.
  std::string paragraphs;
  for (const std::string& t : out) paragraphs += (paragraphs.empty() ? "" : "\n\n") + t;
  return paragraphs;
}

std::string RowLabel(const ReportTable& t, const ReportRowKey& row) {
  if (t.model_rows)
    return t.show_corpus ? fmt::format("{} / {}", row.corpus, row.model) : row.model;
  return t.show_corpus ? fmt::format("{} / {} / {}", row.corpus, row.model, row.method)
                       : fmt::format("{} / {}", row.model, row.method);
}

namespace {

std::string RowHeader(const ReportTable& t) {
  if (t.model_rows) return t.show_corpus ? "corpus / model" : "model";
  return t.show_corpus ? "corpus / model / method" : "model / method";
}

bool AnyCell(const ReportTable& t, size_t column, bool (*test)(const ReportCell&)) {
  for (const auto& row : t.cells) {
    if (column < row.size() && row[column].present && test(row[column])) return true;
  }
  return false;
}

}  // namespace

std::string TableMarkdown(const ReportTable& t) {
  std::string out = fmt::format("## {}\n\n{}\n\n", t.title, t.note);
  if (!t.ranking_note.empty()) out += t.ranking_note + "\n\n";
  out += fmt::format("| {} |", RowHeader(t));
  for (const std::string& c : t.columns) out += fmt::format(" {} |", MarkdownEscape(c));
  out += "\n| --- |";
  for (size_t j = 0; j < t.columns.size(); ++j) out += " ---: |";
  out += "\n";
  const std::vector<std::string> notes = Footnotes(t);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    out += fmt::format("| {} |", MarkdownEscape(RowLabel(t, t.rows[i])));
    for (size_t j = 0; j < t.cells[i].size(); ++j) {
      const ReportCell& c = t.cells[i][j];
      std::string text = MarkdownEscape(CellText(t, j, c));
      if (c.mark != ReportCell::Mark::kNone) text = "**" + text + "**";
      if (c.mark == ReportCell::Mark::kTied) text += " tie";
      if (c.present && !c.informative) {
        text += fmt::format(" [n{}]", FootnoteOf(notes, c.not_informative));
      }
      out += fmt::format(" {} |", text);
    }
    out += "\n";
  }
  if (!notes.empty()) out += "\n";
  for (size_t k = 0; k < notes.size(); ++k) {
    out += MarkdownEscape(FootnoteLine(k + 1, notes[k])) + "\n";
  }
  return out;
}

std::string TableCsv(const ReportTable& t) {
  std::string out = t.model_rows ? (t.show_corpus ? "corpus,model" : "model")
                                 : (t.show_corpus ? "corpus,model,method" : "model,method");
  // Per column: which extra fields it has.
  struct Extra {
    bool interval = false, control = false, informative = false;
  };
  std::vector<Extra> extra(t.columns.size());
  bool any_interval = false;
  for (size_t j = 0; j < t.columns.size(); ++j) {
    any_interval = any_interval || AnyCell(t, j, [](const ReportCell& c) { return c.ci.known; });
  }
  for (size_t j = 0; j < t.columns.size(); ++j) {
    const ReportCellFormat f = t.FormatOf(j);
    extra[j].interval =
        any_interval && f != ReportCellFormat::kText && f != ReportCellFormat::kTokens;
    extra[j].control = AnyCell(t, j, [](const ReportCell& c) { return c.has_control; });
    extra[j].informative = AnyCell(t, j, [](const ReportCell& c) { return !c.informative; });
  }
  for (size_t j = 0; j < t.columns.size(); ++j) {
    const std::string& c = t.columns[j];
    if (t.FormatOf(j) == ReportCellFormat::kPasskey) {
      out += fmt::format(",{},{}", CsvField(c + " accuracy"), CsvField(c + " trials"));
    } else {
      out += "," + CsvField(c);
    }
    if (extra[j].interval) out += fmt::format(",{},{}", CsvField(c + "_lo"), CsvField(c + "_hi"));
    if (extra[j].control) {
      for (const char* f : {" control", " control_lo", " control_hi", " difference",
                            " difference_lo", " difference_hi"}) {
        out += "," + CsvField(c + f);
      }
    }
    if (extra[j].informative) out += "," + CsvField(c + " not_informative");
  }
  out += "\n";
  auto number = [](bool known, double v) { return known ? "," + CsvNumber(v) : std::string(","); };
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const ReportRowKey& row = t.rows[i];
    if (t.show_corpus) out += CsvField(row.corpus) + ",";
    out += CsvField(row.model);
    if (!t.model_rows) out += "," + CsvField(row.method);
    for (size_t j = 0; j < t.cells[i].size(); ++j) {
      const ReportCell& c = t.cells[i][j];
      const ReportCellFormat f = t.FormatOf(j);
      if (f == ReportCellFormat::kPasskey) {
        out += c.present ? fmt::format(",{},{}", CsvNumber(c.value), c.trials) : ",,";
      } else if (f == ReportCellFormat::kText) {
        out += "," + (c.present ? CsvField(TextWithDetail(c)) : std::string());
      } else {
        out += number(c.present, c.value);
      }
      if (extra[j].interval) {
        out += number(c.present && c.ci.known, c.ci.lo) + number(c.present && c.ci.known, c.ci.hi);
      }
      if (extra[j].control) {
        const bool k = c.present && c.has_control;
        out += number(k, c.control) + number(k && c.control_ci.known, c.control_ci.lo) +
               number(k && c.control_ci.known, c.control_ci.hi) + number(k, c.difference) +
               number(k && c.difference_ci.known, c.difference_ci.lo) +
               number(k && c.difference_ci.known, c.difference_ci.hi);
      }
      if (extra[j].informative) {
        out += "," + (c.present && !c.informative ? CsvField(c.not_informative) : std::string());
      }
    }
    out += "\n";
  }
  return out;
}

std::string TableHtml(const ReportTable& t) {
  std::string out = fmt::format("<h2 id=\"{}\">{}</h2>\n<p>{}</p>\n", XmlEscape(t.name),
                                XmlEscape(t.title), XmlEscape(t.note));
  if (!t.ranking_note.empty()) {
    out += fmt::format("<p class=\"ranking\">{}</p>\n", XmlEscape(t.ranking_note));
  }
  out += fmt::format("<table>\n<thead><tr><th>{}</th>", RowHeader(t));
  for (const std::string& c : t.columns) out += fmt::format("<th>{}</th>", XmlEscape(c));
  out += "</tr></thead>\n<tbody>\n";
  const std::vector<std::string> notes = Footnotes(t);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    out += fmt::format("<tr><th scope=\"row\">{}</th>", XmlEscape(RowLabel(t, t.rows[i])));
    for (size_t j = 0; j < t.cells[i].size(); ++j) {
      const ReportCell& c = t.cells[i][j];
      std::string text = CellHtml(t, j, c);
      std::string cls;
      if (c.mark != ReportCell::Mark::kNone) text = "<strong>" + text + "</strong>";
      if (c.mark == ReportCell::Mark::kBest) cls = "best";
      if (c.mark == ReportCell::Mark::kTied) {
        cls = "tied";
        text += " <span class=\"tie\">tie</span>";
      }
      if (c.present && !c.informative) {
        cls += cls.empty() ? "ni" : " ni";
        text += fmt::format("<sup>n{}</sup>", FootnoteOf(notes, c.not_informative));
      }
      out += cls.empty() ? fmt::format("<td>{}</td>", text)
                         : fmt::format("<td class=\"{}\">{}</td>", cls, text);
    }
    out += "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
  for (size_t k = 0; k < notes.size(); ++k) {
    out += fmt::format("<p class=\"footnote\">{}</p>\n", XmlEscape(FootnoteLine(k + 1, notes[k])));
  }
  return out;
}

std::string SeedsReading(const ReportTable& seeds) {
  auto JoinParts = [](const std::vector<std::string>& parts) {
    std::string joined;
    for (const std::string& p : parts) joined += (joined.empty() ? "" : "; ") + p;
    return joined;
  };
  std::string out;
  std::vector<std::pair<std::string, std::string>> models;  // (corpus, model), in row order
  for (const ReportRowKey& r : seeds.rows) {
    if (std::find(models.begin(), models.end(), std::pair(r.corpus, r.model)) == models.end()) {
      models.push_back({r.corpus, r.model});
    }
  }
  for (const auto& [corpus, model] : models) {
    // The text column of the longest context this model has a cell in.
    size_t column = seeds.columns.size();
    for (size_t j = 0; j < seeds.columns.size(); ++j) {
      if (seeds.column_info[j].protocol != "far-copy" || !seeds.columns[j].starts_with("text ")) {
        continue;
      }
      for (size_t i = 0; i < seeds.rows.size(); ++i) {
        if (seeds.rows[i].corpus == corpus && seeds.rows[i].model == model &&
            seeds.cells[i][j].present &&
            (column == seeds.columns.size() ||
             seeds.column_info[j].ctx > seeds.column_info[column].ctx)) {
          column = j;
        }
      }
    }
    if (column == seeds.columns.size()) continue;
    std::vector<std::string> every, some, none;
    int64_t n = 0;
    for (size_t i = 0; i < seeds.rows.size(); ++i) {
      const ReportCell& c = seeds.cells[i][column];
      if (seeds.rows[i].corpus != corpus || seeds.rows[i].model != model || !c.present) continue;
      n = c.trials;
      const auto above = static_cast<int64_t>(c.value);
      if (above == c.trials) {
        every.push_back(seeds.rows[i].method);
      } else if (above > 0) {
        some.push_back(fmt::format("{} ({} of {})", seeds.rows[i].method, above, c.trials));
      } else {
        none.push_back(seeds.rows[i].method);
      }
    }
    const ReportTable::Column& col = seeds.column_info[column];
    std::string text = fmt::format(
        "Over the {} training seeds of {}{}, on far copy of text from {} tokens back at {}: ", n,
        seeds.show_corpus ? corpus + " / " : "", model, col.param, col.ctx);
    std::vector<std::string> parts;
    if (!every.empty()) {
      parts.push_back(fmt::format("{} {} above {} control in every seed", JoinNames(every),
                                  every.size() == 1 ? "stays" : "stay",
                                  every.size() == 1 ? "its" : "their"));
    }
    if (!some.empty()) parts.push_back(fmt::format("in some seeds only: {}", JoinNames(some)));
    if (!none.empty()) {
      parts.push_back(fmt::format("in none: {}", JoinNames(none)));
    }
    out += (out.empty() ? "" : " ") + text + JoinParts(parts) + ".";
  }
  if (!out.empty()) {
    out += " (A seed's model that failed the copy gate part a cell needs counts as not above.)";
  }
  return out;
}

}  // namespace stretch
