// A sweep: the product of position methods x context lengths, scored with one protocol, and its
// report (the table of Su Jianlin's posts: one row per method, one column per length, each cell the mean
// next-token loss and accuracy).
//
// Cells run method-major (every length of the first method, then the next method). Each cell
// resolves its method for fed_len = ctx (once, in PlanSweep; Transformer::SetPlan), so a method given without a
// factor scales to s = ctx / L at each length; the resolved spec is reported per cell. Every
// (method, ctx) pair is resolved and checked (PlanSweep) before the first cell is scored, so a
// bad pair fails in seconds, not after an hour of scoring.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/eval/nbce.h"
#include "src/eval/score.h"
#include "src/position/method.h"

namespace stretch {

struct SweepMethod {
  SweepMethod() = default;
  SweepMethod(std::string spec_, Method method_, std::optional<NbceOptions> nbce_ = std::nullopt)
      : spec(std::move(spec_)), method(std::move(method_)), nbce(std::move(nbce_)) {}
  std::string spec;  // as the user gave it (for labels)
  Method method;     // ParseMethod(spec), or built from llama.cpp / HF flags
  // NBCE (src/eval/nbce.h, `nbce[:...]` specs): the window's context is read as chunks whose rows
  // run under `method`, and only the fixed tail is scored (ScoreOptions::tail > 0).
  std::optional<NbceOptions> nbce;
  // Layers that run another method than `method` (AttentionPlan::layer_methods; `stretch score
  // --layer-method L=SPEC`): set on every cell's plan, and named in its resolved spec.
  std::vector<std::pair<int, Method>> layer_methods;
};
// A spec of `score --methods` / `generate --method`: NBCE's (`nbce[:beta=B,pool=P,chunk=N]`),
// else a position method's (ParseMethod). Throws their errors.
SweepMethod ParseSweepMethod(std::string spec);

// What is scored: a text stream (ScoreStream windows, or ScoreFixedTail when opt.tail > 0), or
// token sequences fed whole (ScoreSequences; one context only).
struct SweepInput {
  std::span<const int> stream;
  const std::vector<std::vector<int>>* sequences = nullptr;  // when set, the stream is unused
};

struct SweepCell {
  size_t method = 0;     // index into the sweep's methods
  int64_t ctx = 0;       // N (the window length; C for the fixed tail)
  std::string resolved;  // CanonicalSpec of the method resolved for ctx
  AttentionPlan plan;    // the method resolved for ctx against the model, once (PlanSweep)
  ScoreSummary summary;  // filled by ScoreSweep
};

// Checks the options for every context (ValidateScoreOptions; the fixed tail needs
// tail <= min(ctx); no length or method spec given twice), and resolves every (method, ctx) pair
// once against the model (MakeAttentionPlan for its geometry; CheckMethodFitsLayout for a trained
// layout). Needs the configuration only (a file's header), not the weights. Returns the cells in
// the order ScoreSweep runs them, summaries empty. Throws stretch::Error naming the method, the
// context and the field on the first bad pair. `opt.ctx` and `opt.sample_len` are ignored (set
// per cell).
std::vector<SweepCell> PlanSweep(const ModelConfig& config, std::span<const SweepMethod> methods,
                                 std::span<const int64_t> contexts, const ScoreOptions& opt,
                                 bool sequences);

// Checks that the input holds at least one window (one sample of max(ctx) for the fixed tail) at
// every context. Throws stretch::Error otherwise.
void CheckSweepInput(const SweepInput& input, std::span<const int64_t> contexts,
                     const ScoreOptions& opt);

// Receives every scored token with its cell.
using SweepTokenSink = std::function<void(const SweepCell& cell, const TokenRecord&)>;
// Called after each cell with its index (0-based) and the number of cells.
using SweepCellDone = std::function<void(const SweepCell& cell, size_t index, size_t cells)>;

// Runs CheckSweepInput, then scores every cell of `cells` (from PlanSweep, with the same methods,
// contexts and options) under its plan. With more than one cell the progress line of each is
// labelled "score [k/n] SPEC @ ctx". The model is left set to the last cell's method.
std::vector<SweepCell> ScoreSweep(Transformer& model, std::span<const SweepMethod> methods,
                                  std::vector<SweepCell> cells, const SweepInput& input,
                                  const ScoreOptions& opt, const SweepTokenSink& sink = {},
                                  const SweepCellDone& done = {});
// PlanSweep for the model, then the above.
std::vector<SweepCell> ScoreSweep(Transformer& model, std::span<const SweepMethod> methods,
                                  std::span<const int64_t> contexts, const SweepInput& input,
                                  const ScoreOptions& opt, const SweepTokenSink& sink = {},
                                  const SweepCellDone& done = {});

// The table as text: one row per method, one column per context, cells "loss / accuracy", then a
// row with the targets scored per column, then each method's resolved spec (per length when the
// lengths resolve it differently).
std::string SweepTableText(std::span<const SweepMethod> methods, std::span<const int64_t> contexts,
                           std::span<const SweepCell> cells);

// One cell's numbers: windows, tokens_scored, loss, perplexity, accuracy, unscored_tail_tokens,
// seconds and by_position (the buckets that hold tokens); with 2 windows or more, loss_ci,
// perplexity_ci and accuracy_ci (95%, over the windows) for the cell and each bucket.
nlohmann::json SummaryJson(const ScoreSummary& s);
// Every cell: {method (the spec given), method_index, ctx, resolved_method, and SummaryJson's
// fields}, in run order.
nlohmann::json SweepCellsJson(std::span<const SweepMethod> methods,
                              std::span<const SweepCell> cells);

}  // namespace stretch
