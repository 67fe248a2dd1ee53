#include "src/eval/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/plan.h"

namespace stretch {
namespace {

ScoreOptions CellOptions(const ScoreOptions& opt, int64_t ctx, int64_t longest) {
  ScoreOptions o = opt;
  o.ctx = ctx;
  o.sample_len = opt.tail > 0 ? longest : 0;
  return o;
}

}  // namespace

std::vector<SweepCell> PlanSweep(const ModelConfig& config, std::span<const SweepMethod> methods,
                                 std::span<const int64_t> contexts, const ScoreOptions& opt,
                                 bool sequences) {
  if (methods.empty()) Fail("PlanSweep methods: no method given");
  if (contexts.empty()) Fail("PlanSweep contexts: no context length given");
  for (size_t k = 0; k < contexts.size(); ++k) {
    if (contexts[k] < 2)
      Fail("PlanSweep contexts: found {}, expected at least 2 positions", contexts[k]);
    if (std::find(contexts.begin(), contexts.begin() + k, contexts[k]) != contexts.begin() + k) {
      Fail("PlanSweep contexts: {} given twice (expected each length once)", contexts[k]);
    }
  }
  for (size_t k = 0; k < methods.size(); ++k) {
    for (size_t e = 0; e < k; ++e) {
      if (methods[e].spec == methods[k].spec) {
        Fail("PlanSweep methods: \"{}\" given twice (expected each method once)", methods[k].spec);
      }
    }
  }
  const int64_t shortest = *std::min_element(contexts.begin(), contexts.end());
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  if (sequences) {
    if (contexts.size() > 1) {
      Fail(
          "PlanSweep contexts: found {} lengths, expected one for token sequences (sequences "
          "are fed whole; the context bounds their length)",
          contexts.size());
    }
    if (opt.tail > 0) Fail("ScoreOptions::tail applies to text streams, not to token sequences");
  }
  if (opt.tail > 0 && opt.tail > shortest) {
    Fail(
        "ScoreOptions::tail: found {}, expected 1..{} (the shortest of PlanSweep contexts): every "
        "context must hold the scored tail",
        opt.tail, shortest);
  }
  for (const int64_t c : contexts) ValidateScoreOptions(CellOptions(opt, c, longest));

  const RopeGeometry geo = ModelGeometry(config);
  std::vector<SweepCell> cells;
  for (size_t m = 0; m < methods.size(); ++m) {
    const std::optional<NbceOptions>& nbce = methods[m].nbce;
    if (nbce && !methods[m].layer_methods.empty()) {
      Fail(
          "method \"{}\": NBCE runs its chunks' rows under one method on every layer (expected no "
          "--layer-method with nbce)",
          methods[m].spec);
    }
    if (nbce && (sequences || opt.tail < 1)) {
      Fail(
          "method \"{}\": NBCE scores the fixed tail of a text (expected --tail K: the last K "
          "positions are the question, the context before them is read in chunks)",
          methods[m].spec);
    }
    for (const int64_t c : contexts) {
      try {
        // NBCE's rows run at most a chunk plus the tail (the trained length by default).
        const int64_t fed =
            nbce ? std::min(c, NbceChunkLength(config, *nbce, opt.tail) + 1 + opt.tail) : c;
        if (nbce && c - opt.tail < 2) {
          Fail("no context token is left before a tail of {} (expected ctx >= tail + 2)", opt.tail);
        }
        AttentionPlan plan = MakeAttentionPlan(methods[m].method, geo, fed);
        plan.layer_methods = methods[m].layer_methods;
        CheckMethodFitsLayout(config, plan);
        std::string resolved = CanonicalSpec(plan.method) + LayerMethodsText(config, plan);
        if (nbce) {
          resolved = fmt::format("{} (chunks of {}, rows {})", NbceSpecText(*nbce),
                                 NbceChunkLength(config, *nbce, opt.tail), resolved);
        }
        cells.push_back({m, c, std::move(resolved), std::move(plan), {}});
      } catch (const Error& e) {
        Fail("method \"{}\" at ScoreOptions::ctx {}: {}", methods[m].spec, c, e.what());
      }
    }
  }
  return cells;
}

SweepMethod ParseSweepMethod(std::string spec) {
  const std::string_view name = std::string_view(spec).substr(0, spec.find_first_of(":+"));
  if (name == "nbce") {
    NbceOptions nbce = ParseNbceSpec(spec);
    return {std::move(spec), Method{}, nbce};
  }
  Method m = ParseMethod(spec, "nbce");
  return {std::move(spec), std::move(m), std::nullopt};
}

void CheckSweepInput(const SweepInput& input, std::span<const int64_t> contexts,
                     const ScoreOptions& opt) {
  if (contexts.empty()) return;
  if (input.sequences != nullptr) {  // as ScoreSequences checks, before any cell starts
    int64_t longest = 0;
    for (size_t i = 0; i < input.sequences->size(); ++i) {
      const int64_t n = static_cast<int64_t>((*input.sequences)[i].size());
      if (n > contexts.front()) {
        Fail(
            "sequence {} has {} tokens, more than ScoreOptions::ctx {}: raise it or split the "
            "sequence",
            i + 1, n, contexts.front());
      }
      longest = std::max(longest, n);
    }
    if (longest < 2) Fail("no sequence has 2 or more tokens: nothing to score");
    return;
  }
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  const int64_t total = static_cast<int64_t>(input.stream.size());
  if (total < longest) {
    if (opt.tail > 0) {
      Fail(
          "the token stream has {} tokens, fewer than one sample of {} (the longest of PlanSweep "
          "contexts)",
          total, longest);
    }
    Fail("the token stream has {} tokens, fewer than one window of ScoreOptions::ctx {}", total,
         longest);
  }
}

std::vector<SweepCell> ScoreSweep(Transformer& model, std::span<const SweepMethod> methods,
                                  std::span<const int64_t> contexts, const SweepInput& input,
                                  const ScoreOptions& opt, const SweepTokenSink& sink,
                                  const SweepCellDone& done) {
  return ScoreSweep(model, methods,
                    PlanSweep(model.config(), methods, contexts, opt, input.sequences != nullptr),
                    input, opt, sink, done);
}

std::vector<SweepCell> ScoreSweep(Transformer& model, std::span<const SweepMethod> methods,
                                  std::vector<SweepCell> cells, const SweepInput& input,
                                  const ScoreOptions& opt, const SweepTokenSink& sink,
                                  const SweepCellDone& done) {
  std::vector<int64_t> contexts;
  for (const SweepCell& cell : cells) {
    STRETCH_CHECK(cell.method < methods.size(), "cell of method {} in a sweep of {}", cell.method,
                  methods.size());
    if (std::find(contexts.begin(), contexts.end(), cell.ctx) == contexts.end()) {
      contexts.push_back(cell.ctx);
    }
  }
  if (cells.empty()) return cells;
  CheckSweepInput(input, contexts, opt);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  for (size_t k = 0; k < cells.size(); ++k) {
    SweepCell& cell = cells[k];
    const SweepMethod& method = methods[cell.method];
    model.SetPlan(cell.plan);
    ScoreOptions o = CellOptions(opt, cell.ctx, longest);
    if (cells.size() > 1) {
      o.progress_label = fmt::format("{} [{}/{}] {} @ {}", opt.progress_label, k + 1, cells.size(),
                                     method.spec, cell.ctx);
    }
    // Every token tallied by window, for the intervals (FillIntervals), and passed on.
    WindowTally tally(o.bucket);
    const TokenSink cell_sink = [&](const TokenRecord& r) {
      tally.Add(r);
      if (sink) sink(cell, r);
    };
    if (input.sequences != nullptr) {
      cell.summary = ScoreSequences(model, *input.sequences, o, cell_sink);
    } else if (method.nbce) {
      if (!(model.kv_types() == KvCacheTypes{})) {
        Fail("{}: NBCE keeps its chunks' keys and values in float32 (allowed: --cache-type f32)",
             method.spec);
      }
      cell.summary = ScoreFixedTailNbce(model.model(), input.stream, o, *method.nbce, method.method,
                                        cell_sink);
    } else if (opt.tail > 0) {
      cell.summary = ScoreFixedTail(model, input.stream, o, cell_sink);
    } else {
      cell.summary = ScoreStream(model, input.stream, o, cell_sink);
    }
    tally.CoverWindows(static_cast<size_t>(cell.summary.windows));
    FillIntervals(cell.summary, tally);
    if (done) done(cell, k, cells.size());
  }
  return cells;
}

std::string SweepTableText(std::span<const SweepMethod> methods, std::span<const int64_t> contexts,
                           std::span<const SweepCell> cells) {
  auto find = [&](size_t m, int64_t c) -> const SweepCell* {
    for (const SweepCell& cell : cells) {
      if (cell.method == m && cell.ctx == c) return &cell;
    }
    return nullptr;
  };
  size_t name_w = std::string_view("method").size();
  for (const SweepMethod& m : methods) name_w = std::max(name_w, m.spec.size());
  constexpr int kCellW = 31;  // "12.3456+-0.0123 / 0.1234+-0.0123"
  std::string out = fmt::format("{:<{}}", "method", name_w);
  for (const int64_t c : contexts) out += fmt::format("  {:>{}}", fmt::format("ctx {}", c), kCellW);
  out += "\n";
  for (size_t m = 0; m < methods.size(); ++m) {
    out += fmt::format("{:<{}}", methods[m].spec, name_w);
    for (const int64_t c : contexts) {
      const SweepCell* cell = find(m, c);
      // With the half widths of the 95% intervals over the windows (the larger side, where an
      // accuracy's interval is clipped at 0 or 1).
      std::string text = "-";
      if (cell != nullptr) {
        const ScoreSummary& s = cell->summary;
        const MeanIntervals& ci = s.ci;
        text =
            ci.known
                ? fmt::format(
                      "{:.4f}+-{:.4f} / {:.4f}+-{:.4f}", s.MeanLoss(),
                      std::max(s.MeanLoss() - ci.loss_lo, ci.loss_hi - s.MeanLoss()), s.Accuracy(),
                      std::max(s.Accuracy() - ci.accuracy_lo, ci.accuracy_hi - s.Accuracy()))
                : fmt::format("{:.4f} / {:.4f}", s.MeanLoss(), s.Accuracy());
      }
      out += fmt::format("  {:>{}}", text, kCellW);
    }
    out += "\n";
  }
  out += fmt::format("{:<{}}", "targets", name_w);
  for (const int64_t c : contexts) {
    const SweepCell* cell = find(0, c);
    out += fmt::format("  {:>{}}", cell ? fmt::format("{}", cell->summary.scored) : "-", kCellW);
  }
  out += "\n";
  // The resolved spec of each method: one line when every length resolves it the same way.
  out += "\nresolved methods (every default filled in for the length):\n";
  for (size_t m = 0; m < methods.size(); ++m) {
    std::vector<const SweepCell*> mine;
    for (const SweepCell& cell : cells) {
      if (cell.method == m) mine.push_back(&cell);
    }
    if (mine.empty()) continue;
    const bool same = std::all_of(mine.begin(), mine.end(), [&](const SweepCell* c) {
      return c->resolved == mine.front()->resolved;
    });
    std::string text;
    if (same) {
      text = mine.front()->resolved + (mine.size() > 1 ? " (every length)" : "");
    } else {
      for (const SweepCell* c : mine) {
        text += fmt::format("{}{}: {}", text.empty() ? "" : "; ", c->ctx, c->resolved);
      }
    }
    out += fmt::format("  {:<{}}  {}\n", methods[m].spec, name_w, text);
  }
  return out;
}

namespace {
// loss_ci, perplexity_ci (exp of the loss's) and accuracy_ci, [lo, hi] each, where known.
void AddIntervalsJson(nlohmann::json& j, const MeanIntervals& ci) {
  if (!ci.known) return;
  j["loss_ci"] = {ci.loss_lo, ci.loss_hi};
  j["perplexity_ci"] = {std::exp(ci.loss_lo), std::exp(ci.loss_hi)};
  j["accuracy_ci"] = {ci.accuracy_lo, ci.accuracy_hi};
}
}  // namespace

nlohmann::json SummaryJson(const ScoreSummary& s) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const PositionBucket& b : s.buckets) {
    if (b.count == 0) continue;  // the fixed tail scores only the last positions of a window
    nlohmann::json o = {{"begin", b.begin},
                        {"end", b.end},
                        {"tokens", b.count},
                        {"loss", b.MeanLoss()},
                        {"perplexity", std::exp(b.MeanLoss())},
                        {"accuracy", b.Accuracy()}};
    AddIntervalsJson(o, b.ci);
    buckets.push_back(std::move(o));
  }
  nlohmann::json out = {{"windows", s.windows},     {"tokens_scored", s.scored},
                        {"loss", s.MeanLoss()},     {"perplexity", s.Perplexity()},
                        {"accuracy", s.Accuracy()}, {"unscored_tail_tokens", s.unscored_tail},
                        {"seconds", s.seconds},     {"by_position", buckets}};
  AddIntervalsJson(out, s.ci);
  return out;
}

nlohmann::json SweepCellsJson(std::span<const SweepMethod> methods,
                              std::span<const SweepCell> cells) {
  nlohmann::json out = nlohmann::json::array();
  for (const SweepCell& cell : cells) {
    nlohmann::json j = {{"method", methods[cell.method].spec},
                        {"method_index", cell.method},
                        {"ctx", cell.ctx},
                        {"resolved_method", cell.resolved}};
    j.update(SummaryJson(cell.summary));
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace stretch
