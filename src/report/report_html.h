// `stretch report`: everything written from the lab's records, built in memory (the command
// writes the files, each through AtomicFile): tables.md and one CSV per table, one SVG per plot,
// and report.html, a self-contained page holding the tables and every plot inline. The page
// reads like a paper's results section: the summary table (the seeds' layout, with the
// retrieval columns) and a paragraph generated from its numbers first, then the copy gate, the
// retrieval tables, the seeds' accuracy and loss tables, the others, the models' records files,
// Training (when curves are given: each model's two training plots and a table of its
// evaluations, with the notes of logs missing or damaged), and the plots. It holds no script:
// the render check of tests/report/report_cli_test.cc injects its own into a copy.
//
// Plots (each one SVG file, and inline in report.html with class="plot" and data-plot=its stem;
// none wider than kPlotMaxWidth, all scaling down to the page):
//   loss_by_position_<model>.svg    loss by position at the model's longest non-repeat context,
//                                   one line per method, the training length marked
//   far_copy_<model>_<material>[_<ctx>].svg  far copy accuracy by distance at one context (the
//                                   suffix where several were tested), a line per method with
//                                   error bars, its control dotted
//   repeat_vs_nonrepeat_<ctx>_<model>.svg  accuracy at ctx, bars per method: non-repeat, repeat
//                                   within the window, repeat at the longest period
//   tail_<model>.svg                fixed-tail loss by context C (log2 axis), one line per method
//   passkey_<model>_<method>.svg    heat map: length x depth, cell = accuracy (one per method);
//                                   a method whose every cell is 0 gets a line under the passkey
//                                   table instead
//   training_loss_<model>.svg       (in Training) the training loss over the steps (a mean over
//                                   bins of steps, at most 200 points) and the held-out loss, a
//                                   dot per evaluation; a dashed vertical line labelled
//                                   "<i>: <name>" where each stage begins (staged models)
//   training_copy_<model>.svg       (in Training) the copy readout at each evaluation, a dot per
//                                   evaluation and a band for its 95% Wilson interval: copy,
//                                   textcopy, randcopy (each with its control dotted in its
//                                   colour; those logged) and passkey keys, y from 0 to 1,
//                                   stages marked as above
// Two files per model rather than one of two panels: each is an ordinary line plot, within
// kPlotMaxWidth like every other. tables.md holds, per model, the table of its evaluations (step,
// held-out loss, copy, textcopy and randcopy each with its control, passkey keys: the columns
// logged, each share with its interval); no CSV of it.
// File names keep [A-Za-z0-9._-] of the labels (anything else becomes '_'); a name that would
// repeat gets "-2", "-3", ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/report/records.h"
#include "src/report/train_curves.h"

namespace stretch {

struct ReportFile {
  std::string name;     // file name inside the output directory
  std::string content;  // the whole file
};

struct Report {
  std::vector<ReportFile> files;  // tables.md, the CSVs, the SVGs, report.html last
  // For the terminal: the summary table and its reading (the main accuracy table when there is no
  // summary).
  std::string accuracy_markdown;
  std::string summary_reading;  // the summary's generated paragraph (SummaryReading)
  int64_t plots = 0;            // SVG files among `files`
  // What a reader must know about the records: labels that named several models (SeparateModels)
  // and lines skipped as torn. Also on the page and in tables.md.
  std::vector<std::string> notes;
  // The training curves' notes (src/report/train_curves.h: logs missing, lines skipped), in the
  // Training section of the page and of tables.md.
  std::vector<std::string> training_notes;
};

// `inputs`: the records files, as the user named them (for the page's header). Models that share
// a label but are different models get labels of their own (SeparateModels), and the page says
// which files each model's rows came from. `curves`: the models' training curves
// (ReadCurvesOfRecords, or made in memory), each shown under the name its model's rows carry;
// none: no Training section. Throws stretch::Error when there are no records.
Report BuildReport(const LabRecordFile& records, const std::vector<std::string>& inputs,
                   const std::vector<ModelCurves>& curves = {});

// `label` with every character outside [A-Za-z0-9._-] replaced by '_' (and a leading '.' too,
// so that no name is hidden); "_" for an empty label.
std::string SanitizeFileName(std::string_view label);

}  // namespace stretch
