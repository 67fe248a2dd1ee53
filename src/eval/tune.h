// `stretch tune`: which training-free method, with which parameters, for this model at this
// length? Scores the method families over a grid of their parameters on a held-out text sample
// (windows of the target length, ScoreStream), then refines around the best cell, and returns
// every cell scored with the best one marked.
//
// The coarse grid, for a model trained at L and a target length N (s = N / L, at least 1):
//   direct; pi at s; ntk and ntk-fixed at s, 2s, 4s; yarn at s, 2s; rerope with windows L/8, L/4,
//   L/2; leaky-rerope with windows L/4, L/2; self-extend with neighbour windows L/4, L/8 x its
//   default group (the authors' rule), reach=0.5 and reach=1; window and lambda (4 sinks) with
//   windows L/2, L; blockwise.
// Refinement (`refine_rounds` times): every numeric parameter of the best spec so far is tried at
// x 2^-1/2 and x 2^1/2 of its value (whole numbers for windows and groups), one parameter at a
// time; cells that a method refuses (say, a window longer than the context) are left out and
// counted. The winner is the lowest mean loss; ties go to the cell scored first.
//
// Loss alone rewards methods that only avoid blowing up: a sliding window of 181 tokens predicts
// text at 4,096 tokens as well as anything, and never looks further back than 181 tokens. So the
// tuner also measures retrieval (MeasureTuneRetrieval): for the best-loss cell of each method
// family, far copy (src/eval/retrieval.h) at distances from L/4 to the whole context, against its
// control; each such cell then says how far back it sees. RankTune orders the cells by the
// objective:
//   loss       mean loss; cells whose paired bootstrap difference from the first's holds 0 are
//              tied with it (same windows, so the difference is paired);
//   retrieval  far copy at the longest distance, copy minus control; ties by overlapping
//              intervals; cells without a retrieval measurement come after, by loss;
//   both       (the default) the cells tied for the best retrieval, then by loss: retrieval first,
//              since a method that cannot reach the text is no extension of the context at all;
//              when no family copies from the longest distance (every interval holds 0), by loss,
//              and the result says so.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/eval/interval.h"
#include "src/eval/retrieval.h"
#include "src/eval/score.h"

namespace stretch {

struct TuneOptions {
  int64_t ctx = 0;        // N: the target length
  int64_t windows = 8;    // windows of N scored per cell (the first ones of the sample)
  int refine_rounds = 1;  // rounds of refinement around the best cell
  int bos = kScoreBos;    // the tokenizer's BOS
};

struct TuneCell {
  std::string spec;  // the method spec scored (CanonicalSpec of the parsed spec)
  int round = 0;     // 0: coarse grid; 1..: refinement round
  ScoreSummary summary;
  // Per window scored: summed loss and targets, for the intervals (a bootstrap over windows).
  std::vector<double> window_loss, window_targets;
  Interval loss;  // mean loss with its 95% interval
  // Far copy by distance (MeasureTuneRetrieval), for the best cell of each family only.
  std::optional<FarCopyResult> retrieval;
  // The family: the spec's name before ':' and '+' ("self-extend", "ntk-fixed", "window").
  std::string Family() const;
  // Far copy at the longest distance measured: copy minus control, with its interval.
  std::optional<Interval> FarthestCopy() const;
};

enum class TuneObjective { kLoss, kRetrieval, kBoth };
// "loss", "retrieval", "both"; ParseTuneObjective throws stretch::Error for anything else.
const char* TuneObjectiveName(TuneObjective o);
TuneObjective ParseTuneObjective(const std::string& name);

struct TuneResult {
  std::vector<TuneCell> cells;  // in the order scored
  size_t best = 0;              // index into cells: the lowest mean loss
  int64_t refused = 0;          // grid points the method refused for this model and length
};

struct TuneRanking {
  std::vector<size_t> order;       // indices into cells, best first
  std::vector<bool> tied;          // (order) tied with the first: its interval overlaps the first's
  size_t recommended = 0;          // index into cells
  bool retrieval_decided = false;  // false: no cell copies from afar, ranked by loss alone
  std::string note;                // why, in one line, for a person
};
TuneRanking RankTune(const TuneResult& result, TuneObjective objective);

struct TuneRetrievalOptions {
  int64_t trials = 8;  // far-copy trials per distance
  FarCopyOptions copy;
  BootstrapOptions bootstrap;
};

// The coarse grid for a model trained at `train_len` and a target length `ctx` (rule above).
std::vector<std::string> TuneGrid(int64_t train_len, int64_t ctx);

// The specs one refinement step tries around `spec` (rule above), parsed and canonical, without
// `spec` itself.
std::vector<std::string> TuneNeighbours(const std::string& spec);

// `progress(done, total_so_far, cell)` after each cell. Throws stretch::Error when the stream
// holds fewer than one window of ctx, or when no cell could be scored.
TuneResult RunTune(
    Transformer& model, std::span<const int> stream, const TuneOptions& options,
    const std::function<void(const TuneCell&, size_t done, size_t total)>& progress = {});

// Far copy (at DefaultCopyDistances of the model's L and options.ctx) for the best-loss cell of
// each family, filling TuneCell::retrieval. `documents`: held-out text for the copies and their
// filler (the tuning sample); `encode`: for random strings (unused with text). `progress(spec,
// done, total)` before each family. Throws stretch::Error when the text is too short for the
// trials (naming how much is needed).
void MeasureTuneRetrieval(
    Transformer& model, TuneResult& result, const TokenSpans& documents, const TextEncoder& encode,
    const TuneOptions& options, const TuneRetrievalOptions& retrieval,
    const std::function<void(const std::string& spec, size_t done, size_t total)>& progress = {});

}  // namespace stretch
