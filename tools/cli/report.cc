// stretch report: tables, plots and one HTML page from the lab's results (JSON lines).
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/output_file.h"
#include "src/lab/lab.h"
#include "src/report/records.h"
#include "src/report/report_html.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string out;
  std::string models;  // --models: the models' folders; "" for "models" next to each input
};

void RunReport(const ReportArgs& args) {
  for (const std::string& path : args.inputs) {
    CheckRegularInput(path, "a lab results file (JSON lines, results*.jsonl)");
  }
  if (!args.models.empty() && InputKindOf(args.models) != "a directory") {
    const std::string kind = InputKindOf(args.models);
    Fail("--models {}: {}: expected the folder of the models' run folders (a lab's OUT/models)",
         args.models, kind.empty() ? "no such directory" : kind + ", not a directory");
  }
  const WrittenReport w = WriteLabReport(args.inputs, args.out, args.models);
  const LabRecordFile& records = w.records;
  fmt::print(
      "read {} records from {} file{}: {} duplicate{} skipped (first of each key kept), {} "
      "cut last line{} skipped\n",
      records.records.size(), args.inputs.size(), args.inputs.size() == 1 ? "" : "s",
      records.duplicates, records.duplicates == 1 ? "" : "s", records.partial_lines,
      records.partial_lines == 1 ? "" : "s");
  if (records.superseded > 0) {
    fmt::print(
        "{} record{} of earlier scoring rules superseded (a lab resumed by a later build found "
        "that its rules score the cell otherwise, voided the record and scored the cell again); "
        "they stay in their files, unread\n",
        records.superseded, records.superseded == 1 ? "" : "s");
  }
  for (const std::string& n : w.report.notes) fmt::print("note: {}\n", n);
  for (const std::string& n : w.report.training_notes) fmt::print("training note: {}\n", n);
  if (!w.report.accuracy_markdown.empty()) {
    fmt::print("\n{}\n", w.report.accuracy_markdown);
  } else {
    fmt::print("\n(no repeat / non-repeat / retrieval records: no summary table)\n\n");
  }
  fmt::print("wrote {} files ({} plots):\n", w.paths.size(), w.report.plots);
  for (const std::string& p : w.paths) fmt::print("  {}\n", p);
}

}  // namespace

void RegisterReport(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* sub = app.add_subcommand(
      "report",
      "Turn the lab's results into tables, plots and one HTML page.\n"
      "Reads: one or more results files written by the lab, JSON lines with one record per "
      "cell (a model, a training-free method, a protocol and a context length in tokens). "
      "Files are merged in the order given; when two records name the same cell, the first "
      "is kept; a last line cut short by a killed run, and any line that is not JSON (torn), "
      "is skipped and named; a JSON line that is not a record is an error naming file:line. "
      "Models are told apart by what they were trained with, not by their label alone: "
      "records of two labs on the same text with a model of the same label get two rows "
      "('rope [L=32]', 'rope [L=64]'), and the page lists the files each model's rows came "
      "from.\n"
      "Protocols: the models were trained on texts of length L (tokens) and are tested "
      "longer.\n"
      "  non-repeat  genuine text cut into windows of the context length: can the model "
      "predict real text that long?\n"
      "  repeat      a text of L tokens repeated until it fills the context: the answer is "
      "always in view, so failing here means the model cannot use positions beyond L at "
      "all. With a period P longer than L (records that give one), only a model that keeps "
      "information from beyond its window can copy; period L is then a within-window control.\n"
      "  far-copy    a span early in the context and again at the end, d tokens later; the copy "
      "is scored against a control with nothing to copy.\n"
      "  tail        the same last K tokens scored with more and more context before them.\n"
      "  passkey     a number hidden at some depth of filler text, asked for at the end; "
      "against a control with no number in the text.\n"
      "  sliding     sliding-window perplexity: each token scored once, with a long context.\n"
      "Every number carries its 95% interval where the records hold one ('47.1% (44.0-50.2)'; "
      "passkey: Wilson's interval over its trials); numbers of records from older builds are "
      "shown as before, their interval not known. The best cell of each column is bold, and "
      "every cell whose interval overlaps the best's is bold and marked 'tie': cells inside "
      "each other's noise are not ranked; a column where every cell ties with the best is left "
      "unmarked (the note above the table names it). Cells of a model that failed the lab's "
      "copy gate are "
      "marked not informative, with the reason in a footnote (grey on the page).\n"
      "Writes into --out DIR (created if missing; files of the same names are replaced):\n"
      "  tables.md                      every table in Markdown, the summary first: rows model "
      "/ method; non-repeat at L, then at each longer context non-repeat, repeat at the longest "
      "period, far copy at the longest distance and passkey (the depths whose key lies over 2L "
      "back, beyond any window of L; every depth at a length that has none, such as 2L), and "
      "how far back each method sees; "
      "then a reading generated from the numbers (over every model, which methods keep "
      "distant information; then for each model its methods by verdict: keep distant "
      "information, only a trace, only avoid blowing up, neither; what each verdict means; ties "
      "said as ties); then the copy gate, far copy by "
      "distance, repeat by period, passkey, accuracy and loss (the seeds' layout), fixed tail, "
      "sliding\n"
      "  summary.csv gate.csv far_copy_MATERIAL.csv repeat_by_period.csv passkey.csv "
      "accuracy.csv loss.csv tail.csv sliding.csv   the same tables as CSV (those with data), "
      "each value with COLUMN_lo and COLUMN_hi (its interval) where any is known, and the "
      "control, difference and not-informative reason of retrieval cells\n"
      "  loss_by_position_MODEL.svg     loss by position at the model's longest non-repeat "
      "context, one line per method, the training length marked\n"
      "  far_copy_MODEL_MATERIAL.svg    far copy accuracy by distance, one line per method with "
      "error bars, its control dashed\n"
      "  repeat_vs_nonrepeat_CTX_MODEL.svg  accuracy bars with error bars per method: "
      "non-repeat, repeat within the window, repeat at the longest period\n"
      "  tail_MODEL.svg                 fixed-tail loss by context length, one line per "
      "method\n"
      "  passkey_MODEL_METHOD.svg       passkey accuracy, length x depth heat map (a method "
      "at 0 everywhere gets a line under the passkey table instead)\n"
      "  training_loss_MODEL.svg        the model's training loss over its steps and its held-out "
      "loss at each evaluation, a dashed line where each stage of a staged model begins\n"
      "  training_copy_MODEL.svg        the copy readout at each evaluation (copy, textcopy, each "
      "with its control dashed, passkey keys) with 95% Wilson bands, stages marked\n"
      "  report.html                    one self-contained page: the tables and every plot "
      "(open it in any browser, offline; every plot scales to the page)\n"
      "Training curves: for each model the records name, its training logs are read from "
      "MODELS/LABEL/train_log.jsonl, or, for a model trained in stages, from "
      "MODELS/LABEL/<i>-<name>/train_log.jsonl in the order of i, the steps counted on across "
      "stages. MODELS is --models when given, else the folder 'models' next to each results file "
      "(the lab's OUT/models for OUT/results.jsonl). The page's Training section holds the two "
      "plots and a table of each model's evaluations (also in tables.md); a model without logs, "
      "or a log with damaged lines, gets a note, never an error.\n"
      "The summary table and its reading are also printed. Loss is in nats (natural log); "
      "accuracy is the share of next tokens whose most likely prediction was right.\n"
      "Example: stretch report results.jsonl more.jsonl --out report/");
  sub->add_option("results", args->inputs, "Results files (JSON lines written by the lab)")
      ->required();
  sub->add_option("--out,-o", args->out, "Directory to write the report into")->required();
  sub->add_option("--models", args->models,
                  "Folder holding the models' run folders (LABEL/train_log.jsonl), for the "
                  "training curves; default: 'models' next to each results file");
  sub->callback([args] { RunReport(*args); });
}

}  // namespace stretch::cli
