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
  int64_t trials = 0;  // passkey: trials over all depths
};

enum class ReportCellFormat {
  kAccuracy,    // Markdown "47.31%", CSV 0.4731
  kLoss,        // nats: Markdown "1.930", CSV 1.93
  kPerplexity,  // Markdown "6.89", CSV 6.89
  kPasskey,     // accuracy and trials: Markdown "85.00% (40)", CSV two columns
};

struct ReportTable {
  std::string name;   // file stem of its CSV: "accuracy" -> accuracy.csv
  std::string title;  // Markdown heading
  std::string note;   // one line saying what the rows, columns and cells are
  ReportCellFormat format = ReportCellFormat::kAccuracy;
  bool show_corpus = false;          // several corpora: the corpus leads each row's label
  std::vector<std::string> columns;  // the value columns' headers
  std::vector<ReportRowKey> rows;
  std::vector<std::vector<ReportCell>> cells;  // [row][column]
  bool empty() const { return rows.empty() || columns.empty(); }
};

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
// Sliding window: perplexity exp(loss) by ctx ("1024 (stride 256)").
ReportTable SlidingTable(const std::vector<LabRecord>& records);

// "model / method", or "corpus / model / method" with show_corpus.
std::string RowLabel(const ReportTable& t, const ReportRowKey& row);

// Heading, note, then the table; "-" for a missing cell.
std::string TableMarkdown(const ReportTable& t);
// Header row then one row per table row: corpus (with show_corpus), model, method, then the
// values (passkey: "<col> accuracy", "<col> trials"); an empty field for a missing cell.
std::string TableCsv(const ReportTable& t);
// <h2>, <p> note and <table>, every text escaped.
std::string TableHtml(const ReportTable& t);

}  // namespace stretch
