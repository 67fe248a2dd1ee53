// `stretch report`: everything written from the lab's records, built in memory (the command
// writes the files, each through AtomicFile): tables.md and one CSV per table, one SVG per plot,
// and report.html, a self-contained page holding the tables and every plot inline.
//
// Plots (each one SVG file, and inline in report.html with class="plot" and data-plot=its stem):
//   loss_by_position_<model>.svg    loss by position at the model's longest non-repeat context,
//                                   one line per method, the training length marked
//   repeat_vs_nonrepeat_<ctx>.svg   accuracy at ctx, repeat vs non-repeat bars per model / method
//   tail_<model>.svg                fixed-tail loss by context C (log2 axis), one line per method
//   passkey_<model>_<method>.svg    heat map: length x depth, cell = accuracy (one per method)
// File names keep [A-Za-z0-9._-] of the labels (anything else becomes '_'); a name that would
// repeat gets "-2", "-3", ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/report/records.h"

namespace stretch {

struct ReportFile {
  std::string name;     // file name inside the output directory
  std::string content;  // the whole file
};

struct Report {
  std::vector<ReportFile> files;  // tables.md, the CSVs, the SVGs, report.html last
  std::string accuracy_markdown;  // the main accuracy table, for the terminal
  int64_t plots = 0;              // SVG files among `files`
  // What a reader must know about the records: labels that named several models (SeparateModels)
  // and lines skipped as torn. Also on the page and in tables.md.
  std::vector<std::string> notes;
};

// `inputs`: the records files, as the user named them (for the page's header). Models that share
// a label but are different models get labels of their own (SeparateModels), and the page says
// which files each model's rows came from. Throws stretch::Error when there are no records.
Report BuildReport(const LabRecordFile& records, const std::vector<std::string>& inputs);

// `label` with every character outside [A-Za-z0-9._-] replaced by '_' (and a leading '.' too,
// so that no name is hidden); "_" for an empty label.
std::string SanitizeFileName(std::string_view label);

}  // namespace stretch
