// A model's training, read back from its training logs for the report: the training loss at each
// logged step, and at each evaluation the held-out loss and the copy readout with its 95% Wilson
// interval. Report layer: it reads the logs' JSON lines (the format is src/train/run.h's
// RunTrainingLoop: one object per step, {step, loss, lr, ...}, and at evaluations val_loss (with
// val_loss_ci, its 95% interval [lo, hi] over the held-out windows, where written) and
// the readout's copy_accuracy, copy_control, textcopy_accuracy, textcopy_control,
// randcopy_accuracy, randcopy_control, passkey_digits, passkey_keys, each with its count <key>_n,
// for the kinds its probe holds), never the training code.
//
// Layouts of a model's folder (the lab's OUT/models/<label>):
//   one run     <folder>/train_log.jsonl
//   stages      <folder>/<i>-<name>/train_log.jsonl for i = 1, 2, ... (a model trained in
//               stages, each from the last one's checkpoint): read in the order of i, each
//               stage beginning where the one before it ended. A stage whose steps start again
//               at 1 is shifted by the steps done before it; a stage whose steps go on from the
//               last one's (the trainer's step carried over in the checkpoint) is taken as is.
// Stage folders win when there are both (the folder's own log is then named in a note).
//
// Damage is never a failure: a last line without its newline (a run killed, or still writing)
// is skipped and counted; a line that is not JSON, or JSON without a numeric step and loss, is
// skipped and counted, and a note says so. A run resumed from a checkpoint after its log went
// past it writes those steps again: a step at or below the last one read replaces the records
// from that step on. A folder without any log gives no curves and a note.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/report/records.h"

namespace stretch {

inline constexpr const char* kTrainCurvesLogName = "train_log.jsonl";

// One share of the copy readout at one evaluation.
struct TrainShare {
  bool known = false;  // false: the line has no such key (the probe holds no rows of that kind)
  double value = 0;    // share of the scored targets right (passkey keys: of trials)
  int64_t n = 0;       // scored targets (tokens; passkey keys: trials); 0 when not logged
  // 95% Wilson interval over n. The scored tokens of one row are not independent of each other,
  // so for token shares this interval is narrower than the truth: read it as a lower bound on
  // the noise.
  LabInterval ci;
};

struct TrainEval {
  int64_t step = 0;  // counted across stages
  bool has_val_loss = false;
  double val_loss = 0;  // mean held-out loss, nats
  // Its 95% interval over the held-out windows (val_loss_ci in the log; logs before 2026-12-07
  // have none).
  LabInterval val_loss_ci;
  TrainShare copy, copy_control, textcopy, textcopy_control, randcopy, randcopy_control;
  TrainShare passkey_digits, passkey_keys;
  bool HasReadout() const {
    return copy.known || copy_control.known || textcopy.known || textcopy_control.known ||
           randcopy.known || randcopy_control.known || passkey_keys.known;
  }
};

struct TrainStep {
  int64_t step = 0;  // counted across stages
  double loss = 0;   // training loss of the step's batch, nats
};

struct TrainStage {
  int index = 0;           // i of <i>-<name>; 0 for a single run
  std::string name;        // <name>; "" for a single run
  std::string log;         // the log read
  int64_t start_step = 0;  // steps done before the stage began (counted across stages)
  int64_t offset = 0;      // added to the log's own step numbers
};

struct ModelCurves {
  std::string model;  // the label the records give the model
  // The records files that named the model (ReadCurvesOfRecords): the report matches the curves
  // to the model's rows through them. Empty: any records of that label.
  std::vector<std::string> sources;
  std::string folder;              // where the logs were looked for
  std::vector<TrainStage> stages;  // in order; one for a single run; empty when no log
  std::vector<TrainStep> steps;    // every logged step, in step order
  std::vector<TrainEval> evals;    // every evaluation, in step order
  int64_t partial_lines = 0;       // last lines without their newline, skipped
  int64_t bad_lines = 0;           // not JSON, or without a numeric step and loss, skipped
  std::vector<std::string> notes;  // missing logs, skipped lines: for the report's page
  bool staged() const { return !stages.empty() && stages.front().index > 0; }
  bool empty() const { return steps.empty() && evals.empty(); }
};

// Reads the logs of the model folder `folder` (layouts above) for the model labelled `model`.
// Never throws for what it finds on disk: a missing folder or log gives empty curves and a note.
ModelCurves ReadModelCurves(const std::string& folder, const std::string& model);

// The curves of every model the records name: for each records file and each label in it, the
// folder <models_dir>/<label>, where models_dir is `models_dir` when given and otherwise the
// folder "models" next to the records file (OUT/models for OUT/results*.jsonl). A folder named
// from several records files is read once (its `sources` lists them all). When the models folder
// itself is missing, one ModelCurves per model still comes back, empty, with a note saying where
// it was looked for.
std::vector<ModelCurves> ReadCurvesOfRecords(const LabRecordFile& records,
                                             const std::string& models_dir = "");

}  // namespace stretch
