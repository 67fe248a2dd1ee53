#include "src/eval/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/position/method.h"

namespace stretch {
namespace {

// Keys whose values are whole numbers (token counts, group sizes).
bool WholeNumberKey(std::string_view key) {
  return key == "window" || key == "group" || key == "sinks" || key == "chunk" || key == "shift";
}

std::string FormatValue(double v, bool whole) {
  if (whole) return fmt::format("{}", static_cast<int64_t>(std::llround(v)));
  return fmt::format("{:g}", v);
}

struct SpecParts {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;
  std::string suffix;  // "+logn" or ""
};

SpecParts SplitSpec(const std::string& spec) {
  SpecParts p;
  std::string rest = spec;
  if (const size_t plus = rest.find('+'); plus != std::string::npos) {
    p.suffix = rest.substr(plus);
    rest = rest.substr(0, plus);
  }
  const size_t colon = rest.find(':');
  p.name = rest.substr(0, colon);
  if (colon == std::string::npos) return p;
  std::string list = rest.substr(colon + 1);
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    const std::string kv = list.substr(begin, comma - begin);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) p.params.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    begin = comma + 1;
  }
  return p;
}

std::string JoinSpec(const SpecParts& p) {
  std::string s = p.name;
  for (size_t i = 0; i < p.params.size(); ++i) {
    s += (i == 0 ? ":" : ",") + p.params[i].first + "=" + p.params[i].second;
  }
  return s + p.suffix;
}

}  // namespace

std::vector<std::string> TuneGrid(int64_t train_len, int64_t ctx) {
  const int64_t L = train_len;
  const double s = std::max(1.0, static_cast<double>(ctx) / static_cast<double>(L));
  auto f = [](double v) { return fmt::format("{:g}", v); };
  auto w = [](int64_t v) { return fmt::format("{}", std::max<int64_t>(1, v)); };
  std::vector<std::string> grid = {"direct", "pi:factor=" + f(s)};
  for (const double k : {1.0, 2.0, 4.0}) {
    grid.push_back("ntk:factor=" + f(k * s));
    grid.push_back("ntk-fixed:factor=" + f(k * s));
  }
  for (const double k : {1.0, 2.0}) grid.push_back("yarn:factor=" + f(k * s));
  for (const int64_t d : {8, 4, 2}) grid.push_back("rerope:window=" + w(L / d));
  for (const int64_t d : {4, 2}) grid.push_back("leaky-rerope:window=" + w(L / d));
  // Self-Extend's group by where it lands the farthest keys: below 2L/3 (the authors' empirical
  // rule, the default), below L/2, and at L - 1 (the smallest group); fixed groups would land
  // them past L at large s (G = 8 at 8x: 623 of L = 512).
  for (const int64_t d : {4, 8}) {
    for (const char* reach : {"", ",reach=0.5", ",reach=1"}) {
      grid.push_back(fmt::format("self-extend:window={}{}", w(L / d), reach));
    }
  }
  for (const int64_t d : {2, 1}) {
    grid.push_back("window:window=" + w(L / d));
    grid.push_back("lambda:sinks=4,window=" + w(L / d));
  }
  grid.push_back("blockwise");
  return grid;
}

std::vector<std::string> TuneNeighbours(const std::string& spec) {
  const SpecParts parts = SplitSpec(spec);
  std::vector<std::string> out;
  std::set<std::string> seen = {spec};
  for (size_t i = 0; i < parts.params.size(); ++i) {
    const std::string& key = parts.params[i].first;
    double value = 0;
    try {
      size_t used = 0;
      value = std::stod(parts.params[i].second, &used);
      if (used != parts.params[i].second.size()) continue;
    } catch (const std::exception&) {
      continue;  // not a number (e.g. a list of factors)
    }
    for (const double m : {std::sqrt(0.5), std::sqrt(2.0)}) {
      SpecParts next = parts;
      next.params[i].second = FormatValue(value * m, WholeNumberKey(key));
      std::string candidate;
      try {
        candidate = CanonicalSpec(ParseMethod(JoinSpec(next)));
      } catch (const Error&) {
        continue;  // out of the method's range (a factor below 1, ...)
      }
      if (seen.insert(candidate).second) out.push_back(candidate);
    }
  }
  return out;
}

TuneResult RunTune(Transformer& model, std::span<const int> stream, const TuneOptions& options,
                   const std::function<void(const TuneCell&, size_t, size_t)>& progress) {
  if (options.windows < 1) Fail("TuneOptions::windows: found {}, expected >= 1", options.windows);
  if (options.refine_rounds < 0) {
    Fail("TuneOptions::refine_rounds: found {}, expected >= 0", options.refine_rounds);
  }
  if (static_cast<int64_t>(stream.size()) < options.ctx) {
    Fail("the sample has {} tokens, fewer than one window of --ctx {}", stream.size(), options.ctx);
  }
  ScoreOptions so;
  so.ctx = options.ctx;
  so.max_windows = options.windows;
  so.bos = options.bos;
  so.bucket = options.ctx;
  so.progress = false;
  ValidateScoreOptions(so);

  TuneResult result;
  std::set<std::string> scored;
  std::vector<std::string> queue = TuneGrid(model.config().seq_len, options.ctx);
  size_t total = queue.size();
  auto run = [&](const std::vector<std::string>& specs, int round) {
    for (const std::string& given : specs) {
      Method method;
      std::string spec;
      try {
        method = ParseMethod(given);
        spec = CanonicalSpec(method);
        if (!scored.insert(spec).second) continue;
        model.SetMethod(method, options.ctx);
      } catch (const Error&) {
        result.refused++;
        continue;
      }
      TuneCell cell;
      cell.spec = spec;
      cell.round = round;
      cell.window_loss.assign(static_cast<size_t>(options.windows), 0.0);
      cell.window_targets.assign(static_cast<size_t>(options.windows), 0.0);
      cell.summary = ScoreStream(model, stream, so, [&](const TokenRecord& t) {
        const size_t w = static_cast<size_t>(t.window);
        if (w >= cell.window_loss.size()) {
          cell.window_loss.resize(w + 1, 0.0);
          cell.window_targets.resize(w + 1, 0.0);
        }
        cell.window_loss[w] += t.loss;
        cell.window_targets[w] += 1.0;
      });
      cell.window_loss.resize(static_cast<size_t>(cell.summary.windows));
      cell.window_targets.resize(static_cast<size_t>(cell.summary.windows));
      cell.loss = BootstrapRatio(cell.window_loss, cell.window_targets);
      result.cells.push_back(std::move(cell));
      if (progress) progress(result.cells.back(), result.cells.size(), total);
    }
  };
  auto best = [&] {
    size_t b = 0;
    for (size_t i = 1; i < result.cells.size(); ++i) {
      if (result.cells[i].summary.MeanLoss() < result.cells[b].summary.MeanLoss()) b = i;
    }
    return b;
  };
  run(queue, 0);
  if (result.cells.empty()) Fail("no method of the grid could be scored on this model");
  for (int round = 1; round <= options.refine_rounds; ++round) {
    const std::vector<std::string> next = TuneNeighbours(result.cells[best()].spec);
    total += next.size();
    run(next, round);
  }
  result.best = best();
  return result;
}

std::string TuneCell::Family() const {
  const size_t end = std::min(spec.find(':'), spec.find('+'));
  return spec.substr(0, end);
}

std::optional<Interval> TuneCell::FarthestCopy() const {
  if (!retrieval || retrieval->points.empty()) return std::nullopt;
  return retrieval->points.back().result.accuracy_difference;
}

const char* TuneObjectiveName(TuneObjective o) {
  switch (o) {
    case TuneObjective::kLoss: return "loss";
    case TuneObjective::kRetrieval: return "retrieval";
    case TuneObjective::kBoth: return "both";
  }
  return "?";
}

TuneObjective ParseTuneObjective(const std::string& name) {
  for (const TuneObjective o :
       {TuneObjective::kLoss, TuneObjective::kRetrieval, TuneObjective::kBoth}) {
    if (name == TuneObjectiveName(o)) return o;
  }
  Fail("--objective {}: expected loss, retrieval or both", name);
}

TuneRanking RankTune(const TuneResult& r, TuneObjective objective) {
  TuneRanking k;
  const std::vector<TuneCell>& c = r.cells;
  STRETCH_CHECK(!c.empty());
  std::vector<size_t> by_loss(c.size());
  std::iota(by_loss.begin(), by_loss.end(), size_t{0});
  std::stable_sort(by_loss.begin(), by_loss.end(), [&](size_t x, size_t y) {
    return c[x].summary.MeanLoss() < c[y].summary.MeanLoss();
  });
  // Loss ties: the paired difference (the same windows) from the leader holds 0.
  auto loss_tied = [&](size_t i, size_t lead) {
    if (i == lead) return true;
    const Interval d = BootstrapRatioDifference(c[i].window_loss, c[i].window_targets,
                                                c[lead].window_loss, c[lead].window_targets,
                                                /*paired=*/true);
    return d.low <= 0.0 && 0.0 <= d.high;
  };
  // The retrieval leader: the largest copy - control at the longest distance.
  std::optional<size_t> lead;
  for (size_t i : by_loss) {
    const std::optional<Interval> f = c[i].FarthestCopy();
    if (f && (!lead || f->estimate > c[*lead].FarthestCopy()->estimate)) lead = i;
  }
  // Something copies from afar: a cell whose interval lies above 0 (not only the leader's, whose
  // interval may be the widest).
  const bool copies = std::any_of(c.begin(), c.end(), [](const TuneCell& x) {
    const std::optional<Interval> f = x.FarthestCopy();
    return f && f->low > 0.0;
  });
  auto retrieval_tied = [&](size_t i) {
    const std::optional<Interval> f = c[i].FarthestCopy();
    return lead && f && IntervalsOverlap(*f, *c[*lead].FarthestCopy());
  };
  if (objective == TuneObjective::kLoss || !lead) {
    k.order = by_loss;
    k.note =
        lead ? "ranked by loss (--objective loss)" : "ranked by loss: retrieval was not measured";
  } else {
    // Measured cells first: by retrieval (kRetrieval), or the retrieval leader's ties by loss and
    // then the rest by retrieval (kBoth); unmeasured cells after, by loss.
    std::vector<size_t> measured, rest;
    for (size_t i : by_loss) (c[i].FarthestCopy() ? measured : rest).push_back(i);
    auto far = [&](size_t i) { return c[i].FarthestCopy()->estimate; };
    std::stable_sort(measured.begin(), measured.end(),
                     [&](size_t x, size_t y) { return far(x) > far(y); });
    if (objective == TuneObjective::kBoth && copies) {
      std::stable_partition(measured.begin(), measured.end(), retrieval_tied);
      const auto tied_end = std::find_if_not(measured.begin(), measured.end(), retrieval_tied);
      std::stable_sort(measured.begin(), tied_end, [&](size_t x, size_t y) {
        return c[x].summary.MeanLoss() < c[y].summary.MeanLoss();
      });
    }
    if (!copies) {
      measured = by_loss;  // nothing copies from afar: loss decides, and the note says so
      rest.clear();
    }
    k.order = measured;
    k.order.insert(k.order.end(), rest.begin(), rest.end());
    k.retrieval_decided = copies;
    k.note = !copies ? "no method family copies from the longest distance measured (every "
                       "copy - control interval holds 0): ranked by loss alone"
             : objective == TuneObjective::kRetrieval
                 ? "ranked by far copy at the longest distance (copy - control)"
                 : "the families tied for the best far copy at the longest distance, by loss; "
                   "then the others by far copy";
  }
  k.recommended = k.order.front();
  // Tied with rank 1 itself, as the output's legend says: under `both` rank 1 is the lowest loss
  // among the cells whose far copy overlaps the leader's, and a cell can overlap the leader's
  // interval and not rank 1's.
  const std::optional<Interval> first_far = c[k.recommended].FarthestCopy();
  auto far_tied_with_first = [&](size_t i) {
    const std::optional<Interval> f = c[i].FarthestCopy();
    return first_far && f && IntervalsOverlap(*f, *first_far);
  };
  for (size_t i : k.order) {
    k.tied.push_back(objective == TuneObjective::kLoss || !copies
                         ? loss_tied(i, k.order.front())
                         : far_tied_with_first(i) && (objective == TuneObjective::kRetrieval ||
                                                      loss_tied(i, k.order.front())));
  }
  // The first is tied only when another is tied with it.
  k.tied.front() = std::find(k.tied.begin() + 1, k.tied.end(), true) != k.tied.end();
  return k;
}

void MeasureTuneRetrieval(
    Transformer& model, TuneResult& result, const TokenSpans& documents, const TextEncoder& encode,
    const TuneOptions& options, const TuneRetrievalOptions& retrieval,
    const std::function<void(const std::string& spec, size_t done, size_t total)>& progress) {
  // The best-loss cell of each family, in the order the families were first scored.
  std::vector<std::string> families;
  std::vector<size_t> best;
  for (size_t i = 0; i < result.cells.size(); ++i) {
    const std::string f = result.cells[i].Family();
    const auto it = std::find(families.begin(), families.end(), f);
    if (it == families.end()) {
      families.push_back(f);
      best.push_back(i);
    } else {
      size_t& b = best[static_cast<size_t>(it - families.begin())];
      if (result.cells[i].summary.MeanLoss() < result.cells[b].summary.MeanLoss()) b = i;
    }
  }
  const int64_t L = model.config().seq_len;
  const std::vector<int64_t> distances = DefaultCopyDistances(L, options.ctx, retrieval.copy.span);
  for (size_t k = 0; k < best.size(); ++k) {
    TuneCell& cell = result.cells[best[k]];
    if (progress) progress(cell.spec, k, best.size());
    model.SetMethod(ParseMethod(cell.spec), options.ctx);
    cell.retrieval = RunFarCopy(ModelSequenceScorer(model, "", false), documents, encode,
                                options.bos, options.ctx, L, distances, retrieval.trials,
                                retrieval.copy, retrieval.bootstrap);
  }
}

}  // namespace stretch
