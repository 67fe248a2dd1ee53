// `stretch lab`: train short, test long, in one command.
//
// A lab is a sweep: models x methods x lengths x protocols. Each model is trained at the training
// length L on the lab's corpus (src/lab/corpus.h) with a pre-training variant (position scheme,
// attention, block), in one run or in stages (LabStage: the presets' copy curriculum, synthetic
// copy rows first, so that the models retrieve at all); then every training-free method
// (--method specs, src/position/method.h) is run on it at k x L for each factor k, with the
// protocols of src/eval/protocols.h and src/eval/passkey.h (passkey in stretch's layout, against
// its control) and the retrieval protocols of src/eval/retrieval.h (far copy of text and random
// spans by distance, repeat with periods of 2L and 4L, passkey in llama.cpp's layout), each
// retrieval cell against a control with nothing to retrieve. Every
// cell (one model, method, protocol, length, passkey depth / period / distance and material /
// layout) becomes one record (src/report/records.h) appended to OUT/results.jsonl the moment it is
// done, with 95% intervals (a bootstrap over sequences; Wilson's for passkeys read back).
//
// The copy gate (src/lab/gate.h). Before any cell of a model beyond L is scored, the model is
// measured at L (far copy of text and of random strings, passkey, each against its control) and a
// gate line is written to the records; on a resume it is read back, never measured again. A part
// that fails marks the cells that need it not informative, with the reason and numbers, and the
// far-copy and passkey cells beyond L that need it are left unscored, with no record (they cannot
// tell keeping from forgetting, and they are most of such a model's scoring time; the repeat
// cells, the seeds' own column, are scored); LabOptions::score_not_informative scores them.
//
// One process at a time (src/core/dir_lock.h): a lab takes OUT's lock before it writes anything
// there, so a second lab into the same OUT is refused with the holder's pid and command line;
// the ranks of one MPI lab share OUT's lock and each takes its own records file's. A records file
// damaged by an earlier crash is repaired at the start (RepairLabRecords).
//
// Resuming. A lab run again with the same OUT skips every cell whose key is already in a
// results*.jsonl file of OUT, and every model whose (last stage's) run holds its last checkpoint;
// a model whose training was cut short continues from its newest checkpoint (bit for bit,
// src/train/run.h), stage by stage (a finished stage is kept, the next started from it). So
// a lab killed at any point and started again ends with the records of one that never stopped.
// A cell (or gate) recorded by an earlier build whose scoring rules score it otherwise now
// (LabCellRescored) is not done: its old record is voided (a "void" line; the record stays in its
// file, unread) and the cell scored again, unless the copy gate now holds it back. A model whose
// checkpoint this build refuses (trained under such rules) stops the lab with the folder to
// delete for it to be trained again.
// A model with no cell left to score (every cell recorded, or refused by its layout) is neither
// trained nor loaded: the records files and OUT/options/ (each model's training options, checked
// on every resume), copied into a new OUT, resume a lab elsewhere.
//
// Several processes (MPI or not): with `ranks` = n and `rank` = r, this process trains and
// evaluates the models whose index i has i mod n == r, and writes OUT/results-rank<r>.jsonl;
// `stretch report OUT/results*.jsonl` merges them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/lab/corpus.h"
#include "src/model/config.h"
#include "src/report/records.h"
#include "src/report/report_html.h"
#include "src/train/copy_data.h"

namespace stretch {

// A pre-training variant: one model of the lab.
struct LabModel {
  std::string label;               // unique in the lab; names its run folder OUT/models/<label>
  std::string block = "llama";     // `stretch train --block`
  std::string position = "rope";   // `stretch train --position`
  std::string attention = "full";  // `stretch train --attention`
  // The first stage's `--attention` when it is not `attention` ("": the same), with two stages or
  // more: the later stages start from its checkpoint with `attention` (TrainRunOptions::init
  // replaces it). The quick lab's KeyNorm model: trained from scratch with unit-length keys it
  // never finds the induction circuit in the copy stage (docs/training.md, fourth and sixth
  // rounds); trained there with plain keys and with KeyNorm from the second stage on, it copies.
  std::string first_stage_attention = {};
  // A stage's MIX for this model when it is not the lab's (stage name -> MIX as --stage writes
  // it, alphabet and span entries included); the stage's steps and learning rate stay the lab's.
  // No preset gives one now: the quick lab's KeyNorm model had its own prose MIX (more passkey
  // rows) from the seventh round to the twentieth, dropped when the curriculum's read far copy
  // better with passkeys at L as high (docs/training.md, twenty-first round).
  std::map<std::string, std::string> stage_mix = {};
  // The attention of run i of a lab with `stages` stages (0: one run).
  const std::string& AttentionOfRun(size_t i, size_t stages) const {
    return i == 0 && stages >= 2 && !first_stage_attention.empty() ? first_stage_attention
                                                                   : attention;
  }
};

// One stage of a staged training recipe: `steps` optimizer steps at peak learning rate `lr`
// (warm-up and cosine decay within the stage), the training rows drawn by `mix`
// (src/train/copy_data.h: periodic, gapped and textcopy copy rows, passkey documents, text for the
// rest), starting from the previous stage's last checkpoint (TrainRunOptions::init).
struct LabStage {
  std::string name;  // names its folder OUT/models/<label>/<i>-<name>, i = 1, 2, ...
  int64_t steps = 0;
  double lr = 0.0;
  CopyMix mix;  // its `passkey` share is the stage's TrainRunOptions::passkey_share
  // TrainRunOptions::copy_alphabet_min and copy_strings (`stretch train --copy-alphabet-min`,
  // `--copy-strings`): 0 / "" for the defaults.
  int64_t alphabet_min = 0;
  std::string strings;
  // TrainRunOptions::copy_span_min / copy_span_max (`--copy-span-min`, `--copy-span-max`): the
  // copied strings' lengths in tokens; 0 for the defaults (L / 16 .. 5 L / 16).
  int64_t span_min = 0;
  int64_t span_max = 0;
  // TrainRunOptions::passkey_phrasings (`stretch train --passkey-phrasings`): "" or "varied".
  std::string passkey_phrasings = "";
  // TrainRunOptions::passkey_filler (`stretch train --passkey-filler`): "" or "mixed".
  std::string passkey_filler = "";
  // TrainRunOptions::passkey_decoys (`stretch train --passkey-decoys`): 0 for none.
  int passkey_decoys = 0;
};

// Parses a stage as `stretch lab --stage` reads it: NAME:STEPS:LR:MIX, MIX as `stretch train
// --mix` (e.g. copy:2500:3e-3:periodic=0.5,gapped=0.5), whose list may also hold
// alphabet-min=N, strings=CHARS, span=A..B, phrasings=varied, filler=mixed and decoys=N
// (`stretch train --copy-alphabet-min`, `--copy-strings`, `--copy-span-min`/`--copy-span-max`,
// `--passkey-phrasings`, `--passkey-filler`, `--passkey-decoys`). Throws stretch::Error naming
// `what` (the flag), the piece at fault and what was expected.
LabStage ParseLabStage(std::string_view text, const std::string& what);
// The text ParseLabStage reads back ("copy:2500:0.003:periodic=0.5,gapped=0.5").
std::string LabStageText(const LabStage& stage);

// Whether a training run's copy readout says the copy across a gap has not come: the gapped
// rows read less than 0.25 above their control. Over 16 runs of the quick lab's first two stages
// (8 seeds, the copy stage at lr 1e-3 and at 3e-3; docs/training.md, nineteenth round) a copy
// that had come read 0.36-0.70 above after the periodic stage and 0.94 or more after the gapped
// one; one that had not read 0.04-0.14 above, and only one of those six came in the next stage.
// Returns the warning the lab prints after such a run (with what to do, so that a user need not
// wait for the copy gate), or nothing; `last`: the model's last run, after which no stage can
// bring it.
std::optional<std::string> CopyNotComeWarning(const CopyReadout& r, bool last);

struct LabOptions {
  LabCorpusOptions corpus;
  std::string out = "lab";  // the lab's folder: corpus copy, model runs, results, report

  // Training (the same for every model).
  int64_t train_len = 128;  // L
  int64_t steps = 600;
  int64_t batch = 16;
  int dim = 128, layers = 4, heads = 4;
  double lr = 2e-3;
  std::string tokenizer = "bytes";  // bytes | bpe | unigram (trained on the corpus)
  int vocab_size = 2048;            // of a bpe / unigram tokenizer
  double passkey_share = 0.05;      // share of training windows that are passkey documents
  // Every training row begins with BOS, as every scored window does (TrainRunOptions::bos_rows);
  // false: the rows of labs from before it (their text windows begin anywhere).
  bool bos_rows = true;
  uint64_t seed = 1;
  // > 0: the seconds a training step takes, for the first ETA, instead of timing a few steps at
  // the start (the tests give an absurd one to check that the ETA follows the steps as they run).
  double step_seconds = 0;
  // Staged training (the copy curriculum). Empty: each model is one run in OUT/models/<label> of
  // `steps` steps at `lr` with `passkey_share` (labs from before stages resume unchanged). Given:
  // each model is trained stage by stage in OUT/models/<label>/<i>-<name>, each stage from the
  // previous one's last checkpoint, each resumable as a single run is (a finished stage is
  // skipped, one cut short continues); `steps`, `lr` and `passkey_share` are then unused. The
  // model scored is the last stage's. A model's id (its records' key) covers every stage.
  std::vector<LabStage> stages;

  std::vector<LabModel> models;
  std::vector<std::string> methods;        // training-free method specs
  std::vector<int64_t> factors = {8, 16};  // test lengths k x L (nonrepeat also runs at L)

  // Protocols.
  int64_t windows = 8;       // sequences per nonrepeat / repeat cell (64 at L)
  int64_t tail_samples = 8;  // samples of the fixed tail; the tail is L/2 tokens
  bool tail = true;
  std::vector<double> passkey_depths = {0.0, 0.5, 1.0};
  int64_t passkey_trials = 5;  // per (length, depth); the copy gate at L takes at least
                               // kGateMinPasskeyTrials (src/lab/gate.h)
  // > 0: also sliding-window perplexity at k x L, windows every this many tokens over the longest
  // test document (each token scored once, with at least k x L - stride tokens of context).
  int64_t sliding_stride = 0;
  // Retrieval protocols (src/eval/retrieval.h), each with its control and 95% intervals.
  // Far copy at k x L: text and random spans of `copy_span` tokens at every distance of
  // DefaultCopyDistances(L, k x L, span) that is >= L; `copy_trials` copies per (distance,
  // material); 0: no far-copy cells. `text_copy_trials` (> 0) replaces it for the text material
  // beyond L: prose is copied far less surely than random letters (a copy - control margin of
  // 20-35 points against 60-90), so its cells need more trials to tell a margin from the 25
  // points the issue asks (16 trials: about +-7 points; 48: about +-4.5).
  int64_t copy_trials = 16;
  int64_t text_copy_trials = 0;
  int64_t copy_span = 0;  // tokens; 0: min(32, L / 4), as `stretch score --protocol far-copy`'s 32
                          // at L >= 128
  // Repeat with a period of p x L for each p here (besides period L, the within-window control
  // the repeat cells have always had), at every k x L longer than the period.
  std::vector<int64_t> repeat_periods = {2, 4};
  // Passkey cells in llama.cpp's llama-passkey layout too (layout "llama"), besides stretch's.
  bool passkey_llama = true;
  // The copy gate (src/lab/gate.h): each model measured at L, once, before its cells beyond L;
  // a part failed marks the retrieval cells that need it not informative. Measured when far copy
  // (copy_trials) or passkey (passkey_trials) cells are planned.
  bool gate = true;
  // Score the far-copy and passkey cells beyond L of a model that failed the gate part they need
  // (not informative whatever they read, and most of a model's scoring time); false: leave them
  // unscored, with no record (the report shows "-"; the gate's line says why).
  bool score_not_informative = false;

  int rank = 0, ranks = 1;  // this process's share (see the top of this file)

  // The build that runs the lab (`stretch --version`'s id; the command sets it), written into
  // each cell and gate line it scores (LabRecord::build), so that records and the report name the
  // build behind every figure; "" writes none. Not a training option: a lab resumed by another
  // build keeps its models and records, and the records say which build scored what.
  std::string build;

  // Only the plan and its time estimate (which times a training step and a few scoring passes),
  // then return: nothing trained or scored; the folder keeps its corpus split.
  bool plan_only = false;
};

// The presets: --quick (the README's main job: RoPE and KeyNorm, both with log-n, dim 128, 2
// layers, the seeds' methods) and --full (the seeds' experiments; hours). Both train the copy
// curriculum (CopyCurriculum in lab.cc: stages copy, gapped, mixed), the one place its numbers
// live.
LabOptions QuickLab();
LabOptions FullLab();

// Throws stretch::Error naming the option when one is out of range, a label repeats, a method
// spec does not parse, or a model spec is refused by `stretch train`'s spec parser.
void ValidateLabOptions(const LabOptions& options);

struct LabCallbacks {
  std::function<void(const std::string&)> note;  // plan, training notes, skipped cells
  // Called often: the whole sweep's progress and ETA, in one line.
  std::function<void(const std::string&)> progress;
};

struct LabResult {
  std::string records_path;     // what this process wrote to
  int64_t cells_done = 0;       // scored now
  int64_t cells_skipped = 0;    // found already done
  int64_t cells_refused = 0;    // method does not apply to the model (e.g. RoPE scaling on ALiBi)
  int64_t cells_held_back = 0;  // unscored: the model failed the gate part they need
  double seconds = 0;
};

// Whether a cell of `method` at `ctx` on a model of `config`, recorded under the scoring rules
// `scoring` (LabRecord::scoring), would be scored otherwise by this build: then a resumed lab voids
// that record and scores the cell again. The gate is measured with "direct" at L.
// kLabScoringRevision (src/report/records.h) lists the revisions and the cells each moved.
bool LabCellRescored(const ModelConfig& config, const std::string& method, int64_t ctx,
                     int scoring);

// Trains what is missing and scores every cell not yet done (resuming rules above).
LabResult RunLab(const LabOptions& options, const LabCallbacks& callbacks = {});

// The report of records files (src/report/report_html.h) written into `dir` (created when
// missing), each file whole or not at all (AtomicFile). Every output path is checked against the
// inputs before `dir` is made, so a refusal leaves nothing behind. The models' training curves
// come from their logs (ReadCurvesOfRecords, src/report/train_curves.h): in `models_dir`/<label>
// when given, else in the folder "models" next to each records file (OUT/models for
// OUT/results*.jsonl); a model without logs gets a note, never an error. Throws stretch::Error
// for records that cannot be read, an output over an input, or `dir` that is not a directory.
struct WrittenReport {
  LabRecordFile records;
  Report report;
  std::vector<std::string> paths;  // the files written, in the order of report.files
};
WrittenReport WriteLabReport(const std::vector<std::string>& inputs, const std::string& dir,
                             const std::string& models_dir = "");

// Moves the lines of a lab's records file that are not JSON (torn by a crash, or by two labs
// writing one folder before the lock kept the second out) into PATH.torn (appended), and rewrites
// the file without them (AtomicFile), so that a damaged file costs the cells on those lines, never
// every later run. A last line without its newline goes too. Returns a note for the user when it
// moved something; nothing for a missing or whole file. The caller holds the folder's lock.
std::optional<std::string> RepairLabRecords(const std::string& path);

// The results files of a lab's folder (results.jsonl and results-rank<r>.jsonl), in name order.
std::vector<std::string> LabResultFiles(const std::string& out);

}  // namespace stretch
