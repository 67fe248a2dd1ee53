#include "src/report/report_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

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

// Sets a cell unless it is already set: the first record read wins, as in ReadLabRecords.
void SetCell(ReportTable& t, const LabRecord& r, size_t column, double value) {
  const size_t row = IndexOf(t.rows, RowOf(r));
  if (row >= t.rows.size() || column >= t.columns.size()) return;
  ReportCell& cell = t.cells[row][column];
  if (cell.present) return;
  cell = {true, value, r.sequences};
}

std::string MarkdownCell(const ReportTable& t, const ReportCell& c) {
  if (!c.present) return "-";
  switch (t.format) {
    case ReportCellFormat::kAccuracy: return fmt::format("{:.2f}%", 100 * c.value);
    case ReportCellFormat::kLoss: return fmt::format("{:.3f}", c.value);
    case ReportCellFormat::kPerplexity: return fmt::format("{:.2f}", c.value);
    case ReportCellFormat::kPasskey: return fmt::format("{:.2f}% ({})", 100 * c.value, c.trials);
  }
  return "?";
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
    return (r.protocol == "nonrepeat" || r.protocol == "repeat") && r.tail == 0 && r.stride == 0;
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
    t.columns.push_back(fmt::format("repeat {}{}", c, suffix));
    t.columns.push_back(fmt::format("non-repeat {}{}", c, suffix));
  }
  SizeCells(t);
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    const double v = loss ? r.loss : r.accuracy;
    if (r.ctx == r.train_len && r.protocol == "nonrepeat") SetCell(t, r, 0, v);
    if (r.ctx > r.train_len) {
      const size_t i = static_cast<size_t>(std::distance(long_ctx.begin(), long_ctx.find(r.ctx)));
      SetCell(t, r, 1 + 2 * i + (r.protocol == "nonrepeat" ? 1 : 0), v);
    }
  }
  const std::string l = one_len ? fmt::format("{}", len) : std::string("L");
  t.note = fmt::format(
      "Rows: model / method. {}: non-repeat at the training length{}. For each longer context "
      "(tokens, and its multiple of L): repeat = a {}-token sample of text repeated until it "
      "fills the context (the answer is always in view); non-repeat = genuine text of that "
      "length. Cells: {}.",
      one_len ? fmt::format("L={}", len) : std::string("L"),
      one_len ? std::string() : std::string(" L of each model"), l,
      loss ? "mean next-token loss in nats (lower is better)"
           : "share of next tokens whose most likely prediction was right");
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
    SetCell(t, r, static_cast<size_t>(std::distance(columns.begin(), at)), r.loss);
  }
  t.note = fmt::format(
      "Rows: model / method. Columns: context C in tokens. Cells: mean loss in nats on the same "
      "last {} tokens of each sample, scored after C - K tokens of context (lower is better: "
      "more context should help).",
      tails.size() == 1 ? fmt::format("K={}", *tails.begin()) : std::string("K"));
  return t;
}

ReportTable PasskeyTable(const std::vector<LabRecord>& records) {
  auto keep = [](const LabRecord& r) { return r.protocol == "passkey"; };
  ReportTable t =
      EmptyTable("passkey", "Passkey retrieval accuracy", ReportCellFormat::kPasskey, records);
  t.rows = RowsWith(records, keep);
  std::set<int64_t> contexts;
  for (const LabRecord& r : records) {
    if (keep(r)) contexts.insert(r.ctx);
  }
  for (const int64_t c : contexts) t.columns.push_back(fmt::format("{}", c));
  SizeCells(t);
  // Weighted by trials: sum(accuracy * trials) / sum(trials), the mean over depths when every
  // depth ran the same number of trials. Records are unique per depth (their key holds it).
  std::vector<std::vector<double>> right(t.rows.size(), std::vector<double>(t.columns.size()));
  for (const LabRecord& r : records) {
    if (!keep(r)) continue;
    const size_t row = IndexOf(t.rows, RowOf(r));
    const size_t col = static_cast<size_t>(std::distance(contexts.begin(), contexts.find(r.ctx)));
    ReportCell& cell = t.cells[row][col];
    cell.present = true;
    cell.trials += r.sequences;
    right[row][col] += r.accuracy * static_cast<double>(r.sequences);
  }
  for (size_t i = 0; i < t.rows.size(); ++i) {
    for (size_t j = 0; j < t.columns.size(); ++j) {
      ReportCell& cell = t.cells[i][j];
      if (cell.present) cell.value = cell.trials > 0 ? right[i][j] / cell.trials : 0.0;
    }
  }
  t.note =
      "Rows: model / method. Columns: length of the input in tokens. Cells: share of trials in "
      "which the model read back every token of a number hidden in filler text, over all depths "
      "(where the number sits), and in brackets the number of trials.";
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
    SetCell(t, r, static_cast<size_t>(std::distance(columns.begin(), at)), std::exp(r.loss));
  }
  t.note =
      "Rows: model / method. Columns: window length in tokens (tokens between window starts). "
      "Cells: perplexity exp(mean loss), every token scored once with at least window - stride "
      "tokens of context (lower is better).";
  return t;
}

std::string RowLabel(const ReportTable& t, const ReportRowKey& row) {
  return t.show_corpus ? fmt::format("{} / {} / {}", row.corpus, row.model, row.method)
                       : fmt::format("{} / {}", row.model, row.method);
}

std::string TableMarkdown(const ReportTable& t) {
  std::string out = fmt::format("## {}\n\n{}\n\n| model / method |", t.title, t.note);
  if (t.show_corpus)
    out = fmt::format("## {}\n\n{}\n\n| corpus / model / method |", t.title, t.note);
  for (const std::string& c : t.columns) out += fmt::format(" {} |", MarkdownEscape(c));
  out += "\n| --- |";
  for (size_t j = 0; j < t.columns.size(); ++j) out += " ---: |";
  out += "\n";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    out += fmt::format("| {} |", MarkdownEscape(RowLabel(t, t.rows[i])));
    for (const ReportCell& c : t.cells[i]) out += fmt::format(" {} |", MarkdownCell(t, c));
    out += "\n";
  }
  return out;
}

std::string TableCsv(const ReportTable& t) {
  std::string out = t.show_corpus ? "corpus,model,method" : "model,method";
  for (const std::string& c : t.columns) {
    if (t.format == ReportCellFormat::kPasskey) {
      out += fmt::format(",{},{}", CsvField(c + " accuracy"), CsvField(c + " trials"));
    } else {
      out += "," + CsvField(c);
    }
  }
  out += "\n";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const ReportRowKey& row = t.rows[i];
    if (t.show_corpus) out += CsvField(row.corpus) + ",";
    out += CsvField(row.model) + "," + CsvField(row.method);
    for (const ReportCell& c : t.cells[i]) {
      if (t.format == ReportCellFormat::kPasskey) {
        out += c.present ? fmt::format(",{},{}", CsvNumber(c.value), c.trials) : ",,";
      } else {
        out += c.present ? "," + CsvNumber(c.value) : ",";
      }
    }
    out += "\n";
  }
  return out;
}

std::string TableHtml(const ReportTable& t) {
  std::string out =
      fmt::format("<h2>{}</h2>\n<p>{}</p>\n<table>\n<thead><tr><th>{}</th>", XmlEscape(t.title),
                  XmlEscape(t.note), t.show_corpus ? "corpus / model / method" : "model / method");
  for (const std::string& c : t.columns) out += fmt::format("<th>{}</th>", XmlEscape(c));
  out += "</tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    out += fmt::format("<tr><th scope=\"row\">{}</th>", XmlEscape(RowLabel(t, t.rows[i])));
    for (const ReportCell& c : t.cells[i]) {
      out += fmt::format("<td>{}</td>", XmlEscape(MarkdownCell(t, c)));
    }
    out += "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
  return out;
}

}  // namespace stretch
