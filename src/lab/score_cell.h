// One planned cell of a lab (CellPlan) and its scoring (ScoreLabCell): the cell's protocol's
// sequences built from the held-out text, scored through the model under the cell's method, the
// numbers put into the cell's record with their 95% intervals. RunLab (src/lab/lab.h) plans the
// cells, sets each one's method on the model, and writes the records; a new lab protocol is a kind
// of cell planned there (PlanCells) and a branch of ScoreLabCell here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "src/eval/interval.h"
#include "src/eval/protocols.h"
#include "src/eval/sweep.h"
#include "src/lab/lab.h"
#include "src/model/transformer.h"
#include "src/report/records.h"

namespace stretch {

// One cell of the sweep, before it is scored.
struct CellPlan {
  size_t model = 0;
  std::string method;
  std::string protocol;
  int64_t ctx = 0, tail = 0, stride = 0;
  double depth = -1;
  int64_t period = 0;    // repeat: the sample's length; 0: L (the key of the cells before periods)
  int64_t distance = 0;  // far-copy
  std::string material;  // far-copy: text or random
  std::string layout;    // passkey: "" (stretch's) or "llama"
  int64_t sequences = 0;
  int arms = 1;       // sequences are scored this many times (a test and its control: 2)
  double weight = 0;  // relative cost, for the ETA
  std::string key;
  // The key of the same cell in records written before they carried the model's id: such a
  // record counts as done (the options book has checked that the model is the one asked for).
  std::string legacy_key;
  // The key of its record scored under earlier rules that score it otherwise now
  // (LabCellRescored): voided before the cell is scored again; "" when none.
  std::string stale_key;
  std::optional<std::string> refusal;  // why the model's layout refuses the method (CellRefusal)
  bool held_back = false;  // not scored: the model failed the gate part it needs (GateHoldsBack)
};

// The far-copy span of the lab's cells, tokens: --copy-span, or L / 4 up to 32.
int64_t CopySpan(const LabOptions& o);

// What the cells of one model are scored on.
struct CellText {
  const TokenSpans& docs;            // the held-out documents in the model's tokens, without BOS
  std::span<const int> longest_doc;  // the longest of them (sliding-window cells)
  int64_t longest_ctx = 0;           // the lab's longest length (fixed-tail cells: the same tail)
  const TextEncoder& encode;         // text to the model's tokens, without BOS
  const TextEncoder& mid_text;       // text as met mid-document (MidTextEncoder of encode)
  int bos = 0;
};

// Scores cell `c` into `r` (whose identifying fields the caller has set; ScoreLabCell sets the
// numbers, their intervals, the cell's period / distance / material / layout and `seconds`),
// with `model` carrying the cell's method (`method`; NBCE rows built on `weights`). Returns why
// the cell cannot be scored (a length too short for its passkey layout's fixed text and key),
// `r` then unscored; throws stretch::Error for anything else (too little held-out text).
std::optional<std::string> ScoreLabCell(const LabOptions& o, const CellPlan& c,
                                        const SweepMethod& method, Transformer& model,
                                        const Model& weights, const CellText& text,
                                        const BootstrapOptions& boot, LabRecord& r);

}  // namespace stretch
