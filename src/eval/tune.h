// `stretch tune`: which training-free method, with which parameters, for this model at this
// length? Scores the method families over a grid of their parameters on a held-out text sample
// (windows of the target length, ScoreStream), then refines around the best cell, and returns
// every cell scored with the best one marked.
//
// The coarse grid, for a model trained at L and a target length N (s = N / L, at least 1):
//   direct; pi at s; ntk and ntk-fixed at s, 2s, 4s; yarn at s, 2s; rerope with windows L/8, L/4,
//   L/2; leaky-rerope with windows L/4, L/2; self-extend with groups 2, 4, 8 x neighbour windows
//   L/4, L/2; window and lambda (4 sinks) with windows L/2, L; blockwise.
// Refinement (`refine_rounds` times): every numeric parameter of the best spec so far is tried at
// x 2^-1/2 and x 2^1/2 of its value (whole numbers for windows and groups), one parameter at a
// time; cells that a method refuses (say, a window longer than the context) are left out and
// counted. The winner is the lowest mean loss; ties go to the cell scored first.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

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
};

struct TuneResult {
  std::vector<TuneCell> cells;  // in the order scored
  size_t best = 0;              // index into cells
  int64_t refused = 0;          // grid points the method refused for this model and length
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

}  // namespace stretch
