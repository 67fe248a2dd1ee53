// A training run's loop: steps a Trainer to a given step, evaluates on held-out windows, appends a
// record per step to OUT/train_log.jsonl and saves checkpoints (OUT/step-NNNNNNNN.safetensors),
// reporting each step to a callback. RunTraining (src/train/train_run.h) prepares a whole run from
// its options (data, architecture, trainer, checkpoint to continue from) and runs this loop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/io/passkey.h"
#include "src/train/checkpoint.h"
#include "src/train/copy_data.h"
#include "src/train/data.h"
#include "src/train/trainer.h"

namespace stretch {

// The tokens a run trains and evaluates on: the training documents with their window sampler,
// the held-out documents with their evaluation windows (ValidationWindows). The sampler keeps a
// pointer to `split.train`: keep the struct where it is built.
//
// Passkey documents (src/io/passkey.h) mixed into training: each row of a batch is, with
// probability passkey_share, a passkey trial of T + 1 tokens instead of a window (T = the
// sampler's seq_len): its filler is the last tokens of a window drawn as usual (the last, so that
// a document's leading BOS is never filler), its depth uniform in [0, 1). Small models trained on
// prose alone cannot retrieve a passkey at all; a small share teaches the task at the training
// length, and the evaluation asks whether it survives at longer ones.
//
// Copy rows (src/train/copy_data.h: periodic, gapped and textcopy documents, the mix's rule there)
// replace text windows with the shares of `copy_mix`, whose `passkey` share is passkey_share's. A
// textcopy row pastes a span inside its window. `probe` holds the copy readout's fixed held-out
// rows (MakeCopyProbe), read at each evaluation; it is built apart from the training stream, so
// reading it changes nothing of the run.
struct TrainingData {
  const DataSplit* split = nullptr;
  const WindowSampler* sampler = nullptr;
  std::vector<Window> valid;
  double passkey_share = 0.0;  // in [0, 1]; 0: no passkey rows, and no draws for them
  PasskeyPieces passkey = {};  // encoded with the run's tokenizer; used when passkey_share > 0
  // Not empty: each passkey row in one of these phrasings, drawn uniformly (one more draw per
  // passkey row, after its window), instead of `passkey` (TrainRunOptions::passkey_phrasings).
  std::vector<PasskeyPieces> passkey_variants = {};
  // true: each passkey row draws a UniformDouble() (after the phrasing), and when it is below 0.5
  // a block length 16 + UniformBelow(3T/8 - 15): its filler is then the window's first tokens of
  // that length, repeated, as llama.cpp's layout repeats its junk (TrainRunOptions::passkey_filler
  // "mixed"). The block is the window's head, not its tail as the plain filler is: in the rare row
  // whose window starts a document (about one in 40,000 on the lab's addresses), the document's
  // BOS is in the block. Kept so that the lab's records of 2026-12-06 stay reproducible.
  bool passkey_repeated_filler = false;
  // > 0: each passkey row then takes AddPasskeyDecoys(..., passkey_decoys, rng) with `decoys`,
  // after its key's draws (TrainRunOptions::passkey_decoys).
  int passkey_decoys = 0;
  PasskeyDecoys decoys = {};
  int32_t bos = 0;               // the tokenizer's BOS, which begins a passkey or copy row
  bool bos_rows = false;         // every row begins with BOS (TrainRunOptions::bos_rows)
  CopyMix copy_mix = {};         // periodic, gapped, textcopy shares (its passkey share unused)
  CopyAlphabets alphabets = {};  // used when copy_mix has periodic or gapped rows
  CopySpans spans = {};          // used when copy_mix has copy rows
  std::optional<CopyProbe> probe = std::nullopt;  // the copy readout's rows; none: no readout
};

// Fills `tokens` with B sequences of T + 1 tokens (T inputs, then the last target), drawing from
// rng only. Per row: with passkey_share > 0, first a UniformDouble() that makes it a passkey row
// when below the share (then a window, the phrasing and the filler's draws where those options
// are on, the depth and the key's digits); otherwise a window. With
// passkey_share 0 and no copy rows this is SampleBatch's draws and windows exactly. With copy rows
// the first draw picks the row's kind (RowKindOf, passkey first, so a draw that made a passkey row
// before still does), the window follows as always, then the kind's own draws.
void SampleTrainingBatch(const TrainingData& data, Rng& rng, int64_t B, std::vector<int>& tokens);

struct TrainLoopOptions {
  std::string out;           // the run's directory (it exists)
  int64_t steps = 0;         // train until this step (the trainer may start beyond 0: resume)
  int64_t eval_every = 0;    // evaluate every this many steps and at the last; 0: never
  int64_t eval_windows = 0;  // held-out windows per evaluation (at most those there are)
  int64_t log_every = 1;     // TrainProgress::report every this many steps (see below)
  int64_t save_every = 0;    // a checkpoint every this many steps; always one at the last
  CheckpointExtras extras;   // stored in every checkpoint (tokenizer, arguments)
  // Seconds on a steady clock, for tokens/s and the ETA; empty: the real one (tests set a clock
  // of their own to stage a pause).
  std::function<double()> clock;
};

struct TrainProgress {
  StepStats stats;
  int64_t steps = 0;          // TrainLoopOptions::steps
  double tokens_per_s = 0.0;  // since the loop began, pauses (below) left out
  // Seconds left: the steps left at the median time of the last few steps (a pause, a suspended
  // machine, is one long step and leaves it alone; a change of pace shows within a few steps),
  // plus the evaluations left at their mean time so far.
  double eta_seconds = 0.0;
  // Seconds of this loop counted as a pause so far: what a step took beyond 8 times the median of
  // the last steps, and an evaluation beyond 8 times the mean of those before it.
  double paused_seconds = 0.0;
  std::optional<EvalStats> eval;
  std::optional<CopyReadout> copy;  // at each evaluation, when the data has a probe
  // Whether a person should see this step: every log_every steps, each evaluation, and the
  // first step of the loop.
  bool report = false;
};

struct TrainLoopResult {
  int64_t steps_done = 0;  // the trainer's step at the end
  std::string last_saved;  // the last checkpoint written, "" when none
  std::string log_path;    // OUT/train_log.jsonl
};

// Keeps the records of steps <= `step` in the training log at `path` (a missing log is left
// missing): a run resumed from the checkpoint of `step` redoes the steps after it, and their
// records written before it stopped would otherwise appear twice. A torn last line goes too.
void TrimTrainLog(const std::string& path, int64_t step);

// The copy readout of the last record that holds one in the training log at `path` (written by
// RunTrainingLoop), or nothing (no log, or no readout in it). Each kind's hits are its share times
// its count, as the log stores them; the rows behind them are not stored, so its intervals are
// those of independent trials. For a run trained already, whose progress is not printed again.
std::optional<CopyReadout> LastCopyReadout(const std::string& path);

// Runs the loop. Each step's record ({step, loss, lr, grad_norm, tokens_per_s} and val_loss,
// val_accuracy when evaluated, with the readout's copy_accuracy, copy_control, textcopy_accuracy,
// textcopy_control, passkey_digits, passkey_keys: shares of the scored targets (keys: of trials),
// each with its count <key>_n, for the kinds the probe holds) goes to the log, flushed before the
// step's checkpoint is written: a run stopped anywhere leaves a log matching its checkpoints up
// to the last step saved; the log is first trimmed to the trainer's step (TrimTrainLog), and a
// failed write to it stops the run. Throws stretch::Error (trainer, data, checkpoint writer).
TrainLoopResult RunTrainingLoop(Trainer& trainer, const TrainingData& data,
                                const TrainLoopOptions& options,
                                const std::function<void(const TrainProgress&)>& progress = {});

// Evaluates the trainer on the first `windows` held-out windows: the mean loss and accuracy over
// their targets, and the loss's 95% interval over the windows (2 or more); nullopt when there is
// no held-out window (or `windows` is 0).
std::optional<EvalStats> EvaluateHeldOut(Trainer& trainer, const TrainingData& data,
                                         int64_t windows);

// The 95% interval of a mean loss over windows, each window (its mean loss, its scored targets)
// one sample (RatioMeanInterval, src/core/mean_interval.h: the tokens of a window are not
// independent). {lo, hi}; nullopt for fewer than 2 windows or no scored target.
std::optional<std::pair<double, double>> HeldOutLossInterval(
    std::span<const double> window_loss, std::span<const int64_t> window_scored);

}  // namespace stretch
