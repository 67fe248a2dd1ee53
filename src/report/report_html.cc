#include "src/report/report_html.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "src/core/error.h"
#include "src/core/words.h"
#include "src/report/report_tables.h"
#include "src/report/svg_plot.h"
#include "src/report/train_curves.h"

namespace stretch {
namespace {

struct Plot {
  std::string name;  // the file's stem and data-plot
  std::string caption;
  std::string svg;
  int training = -1;  // >= 0: drawn in the Training section under that model, not under Plots
};

// Whether a record's model was trained with log-n: the lab writes its variant as "block |
// position | attention", the attention a comma list whose piece "logn" is the trained log-n
// (AttentionConfig::log_length_scale, src/train/arch_spec.cc), with what a first stage trained
// with in brackets after it ("keynorm,logn (stage 1: full)").
bool TrainedWithLogN(const std::string& variant) {
  const size_t bar = variant.rfind(" | ");
  if (bar == std::string::npos) return false;
  std::string_view rest = std::string_view(variant).substr(bar + 3);
  rest = rest.substr(0, rest.find(" ("));
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == "logn") return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

// A note where a method's +logn ran on a model trained with log-n beyond L: its logits took the
// factor ln(n) / ln L twice (src/model/transformer.h DoubleLogNNote), which these rows should be
// read with (docs/training.md, thirtieth round).
std::string DoubleLogNReportNote(const std::vector<LabRecord>& rs) {
  std::set<std::string> models, methods;
  const LabRecord* longest = nullptr;
  for (const LabRecord& r : rs) {
    if (r.logn_twice) {  // the lab said so when it scored the cell
      if (!*r.logn_twice) continue;
    } else {  // records of builds before the field: told from the names
      if (r.ctx <= r.train_len || !r.method.ends_with("+logn") || !TrainedWithLogN(r.variant)) {
        continue;
      }
      // Under a mask the trained log-n counts only the keys the mask lets a query see (a window
      // of at most L: a factor of 1 at most), so the masks' +logn is the only factor beyond 1.
      const std::string name = r.method.substr(0, r.method.find_first_of(":+"));
      if (name == "window" || name == "lambda" || name == "blockwise" || name == "streaming") {
        continue;
      }
    }
    models.insert(r.model);
    methods.insert(r.method);
    if (longest == nullptr || r.ctx * longest->train_len > longest->ctx * r.train_len) longest = &r;
  }
  if (longest == nullptr) return "";
  const double f = std::log(static_cast<double>(longest->ctx)) /
                   std::log(static_cast<double>(longest->train_len));
  return fmt::format(
      "{} {} {} trained with log-n (logits times ln(n) / ln L at every position, n the keys a "
      "query sees); {} multipl{} them by that factor again, so beyond L they take about its square "
      "(at {} tokens, L = {}: {:.2f} x {:.2f} = {:.2f}). Read those rows as log-n applied twice; "
      "the method without +logn runs the trained factor alone.",
      models.size() == 1 ? "Model" : "Models",
      JoinNames(std::vector<std::string>(models.begin(), models.end())),
      models.size() == 1 ? "was" : "were",
      JoinNames(std::vector<std::string>(methods.begin(), methods.end())),
      methods.size() == 1 ? "ies" : "y", longest->ctx, longest->train_len, f, f, f * f);
}

// What each protocol is, in one line each, for readers who never read the papers.
constexpr std::string_view kGlossary[] = {
    "non-repeat: genuine text cut into windows of the context length, every position scored.",
    "repeat: a sample of P tokens repeated until it fills the context. With P = L, the training "
    "length, the source of every copy is within a window of L: a within-window control. With P "
    "longer than every window a method uses, only a model that keeps distant information can "
    "copy: the test.",
    "far copy: a span early in the context and the same span again at the end, d tokens later; "
    "only the copy is scored, against a control whose last span appears nowhere before it.",
    "passkey: a number hidden in filler text at some depth (0 = start, 1 = end), asked for at "
    "the end; a trial counts when every digit is read back.",
    "tail: the same last K tokens of each sample scored with more and more context before them.",
    "sliding: sliding-window perplexity, each token scored once with a long context before it.",
    "Intervals: 95%, in brackets after each number where the records carry them (a Wilson "
    "interval for passkey, a bootstrap over sequences otherwise). Two cells whose intervals "
    "overlap are tied: neither is ranked above the other. Numbers without brackets come from "
    "records of an older build, whose interval is not known.",
    "The copy gate: each model is measured at L on far copy and passkey before anything beyond "
    "L is read; a model that fails cannot show whether a method keeps distant information, and "
    "its retrieval cells are marked not informative (footnotes, grey).",
};

// What each method (the rows' second name) does, in one line each, for readers who never read
// the papers (README.md "Methods" has the specs and their keys). RoPE turns each pair of numbers
// in a query and a key by an angle proportional to the token's position, one "clock hand" a pair.
constexpr std::pair<std::string_view, std::string_view> kMethodGlossary[] = {
    {"direct",
     "plain RoPE at the true positions: the baseline, which meets positions it never "
     "saw beyond L"},
    {"pi",
     "position interpolation: every position divided by s = context / L, so that all fit "
     "within the trained range (neighbours crowded closer)"},
    {"ntk",
     "NTK-aware scaling: a larger RoPE base, so the slow hands slow down and the fast ones "
     "stay almost as trained"},
    {"ntk-fixed", "RoPE's base multiplied by s"},
    {"yarn",
     "YaRN: each hand either kept (fast ones), interpolated like pi (slow ones) or a "
     "blend, plus a sharper softmax"},
    {"llama3", "the Llama 3.1 rule: slow hands interpolated, fast ones kept, a blend between"},
    {"longrope", "per-hand factors given by the model (LongRoPE)"},
    {"dynamic-ntk", "ntk whose scale grows with each query's own position"},
    {"dynamic-yarn", "yarn whose scale grows with each query's own position"},
    {"dynamic-longrope", "longrope's lists chosen per position"},
    {"rerope", "ReRoPE: distances up to a window w seen as they are, every longer one seen as w"},
    {"leaky-rerope", "as rerope, but distances beyond w keep growing, k times slower"},
    {"self-extend",
     "Self-Extend: neighbours within a window at their true distance, farther "
     "tokens in groups of G positions that share one, G chosen so that the farthest "
     "land less than R x L back, rounded down (by default R = 2/3, the authors' rule; "
     "reach=1: the smallest group, the farthest at L - 1); no group within L"},
    {"string", "STRING: far distances shifted back onto well-trained ones"},
    {"dca",
     "Dual Chunk Attention: positions counted within chunks, the keys of earlier chunks "
     "still seen, at positions capped below the chunk size"},
    {"window",
     "a sliding window: each token sees only the last w tokens (w = L by default), so "
     "it cannot retrieve anything farther back"},
    {"lambda", "a sliding window plus the first few tokens (\"attention sinks\"; LM-Infinite)"},
    {"blockwise",
     "blockwise causal attention (XPOS): each token sees its own half-block and the "
     "one before"},
    {"chunked",
     "each token sees only the earlier tokens of its own chunk (Llama 4's local "
     "layers)"},
    {"streaming",
     "StreamingLLM's cache: the first few tokens and the last w, numbered by their "
     "place in the cache"},
    {"nbce",
     "naive-Bayes context extension: the context read as chunks that each fit L, their "
     "predictions pooled"},
    {"+logn",
     "log-n scaling on top of a method: each query's logits multiplied by ln(i + 1) / "
     "ln L beyond L, so attention does not spread thinner as the context grows"},
};

// The glossary lines of the methods the records hold, in the glossary's order.
std::vector<std::string> MethodGlossary(const std::vector<LabRecord>& records) {
  std::set<std::string> names;
  bool logn = false;
  for (const LabRecord& r : records) {
    names.insert(r.method.substr(0, r.method.find_first_of(":+")));
    logn = logn || r.method.find("+logn") != std::string::npos;
  }
  std::vector<std::string> lines;
  for (const auto& [name, what] : kMethodGlossary) {
    if (names.count(std::string(name)) || (name == "+logn" && logn)) {
      lines.push_back(fmt::format("{}: {}.", name, what));
    }
  }
  return lines;
}

std::vector<std::string> Unique(std::vector<std::string> v) {
  std::vector<std::string> out;
  for (std::string& s : v) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  }
  return out;
}

bool SeveralCorpora(const std::vector<LabRecord>& records) {
  for (const LabRecord& r : records) {
    if (r.corpus != records.front().corpus) return true;
  }
  return false;
}

// "not informative (the model failed the copy gate): WHY", without saying it twice where WHY
// says it already (the lab's reasons begin "the model failed the copy gate: ...").
std::string NotInformativeNote(const std::string& why) {
  if (why.find("copy gate") != std::string::npos) return "not informative: " + why;
  return "not informative (the model failed the copy gate): " + why;
}

std::vector<Plot> LossByPositionPlots(const std::vector<LabRecord>& records, bool corpora) {
  std::vector<std::string> models;
  for (const LabRecord& r : records) models.push_back(r.model);
  std::vector<Plot> plots;
  for (const std::string& model : Unique(models)) {
    int64_t ctx = 0, train_len = 0;
    for (const LabRecord& r : records) {
      if (r.model == model && r.protocol == "nonrepeat" && r.ctx > ctx) {
        ctx = r.ctx;
        train_len = r.train_len;
      }
    }
    if (ctx == 0) continue;
    LinePlotSpec spec;
    spec.name = "loss_by_position_" + SanitizeFileName(model);
    spec.title = fmt::format("Loss by position: model {}, non-repeat text, {} tokens", model, ctx);
    spec.x_label = "position in the sequence (tokens)";
    spec.y_label = "mean next-token loss (nats)";
    spec.x_marker = static_cast<double>(train_len);
    spec.x_marker_label = "training length";
    bool any = false;
    for (const LabRecord& r : records) {
      if (r.model != model || r.protocol != "nonrepeat" || r.ctx != ctx) continue;
      PlotSeries s;
      s.label = corpora ? fmt::format("{} ({})", r.method, r.corpus) : r.method;
      s.band = true;  // the buckets' intervals, where the records carry them
      for (const LabPositionBucket& b : r.by_position) {
        if (b.count == 0) continue;
        s.xs.push_back(0.5 * static_cast<double>(b.begin + b.end));
        s.ys.push_back(b.loss);
        s.lo.push_back(b.loss_ci.known ? b.loss_ci.lo : 1);  // lo > hi: none
        s.hi.push_back(b.loss_ci.known ? b.loss_ci.hi : 0);
      }
      any = any || !s.xs.empty();
      spec.series.push_back(std::move(s));
    }
    if (!any) continue;  // records without buckets: nothing to draw
    plots.push_back({spec.name,
                     fmt::format("Model {}: mean next-token loss (nats) by position in {}-token "
                                 "windows of genuine text, one line per method, shaded: its 95% "
                                 "interval (a bootstrap over the windows, where the records "
                                 "carry it); the dashed line marks the training length {}. Lower "
                                 "is better; a line that rises after the dashed line shows the "
                                 "method failing to extrapolate.",
                                 model, ctx, train_len),
                     LinePlotSvg(spec)});
  }
  return plots;
}

std::string ModelLabel(const std::string& corpus, const std::string& model, bool corpora) {
  return corpora ? corpus + " / " + model : model;
}

std::string ModelStem(const std::string& corpus, const std::string& model, bool corpora) {
  return (corpora ? SanitizeFileName(corpus) + "_" : std::string()) + SanitizeFileName(model);
}

// (corpus, model) pairs in the order first read.
std::vector<std::pair<std::string, std::string>> Models(const std::vector<LabRecord>& records) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const LabRecord& r : records) {
    if (std::find(out.begin(), out.end(), std::pair(r.corpus, r.model)) == out.end()) {
      out.push_back({r.corpus, r.model});
    }
  }
  return out;
}

// One bar plot per longer context and model: non-repeat, repeat within the window (period L),
// and repeat at the longest period beyond it where there is one, per method, with error bars.
// One plot per model keeps each at a readable height (the bars run across the page, so the width
// is fixed whatever the number of methods).
std::vector<Plot> RepeatPlots(const std::vector<LabRecord>& records, bool corpora) {
  std::vector<Plot> plots;
  std::set<int64_t> contexts;
  for (const LabRecord& r : records) {
    if ((r.protocol == "repeat" || r.protocol == "nonrepeat") && r.tail == 0 && r.stride == 0 &&
        r.ctx > r.train_len) {
      contexts.insert(r.ctx);
    }
  }
  for (const int64_t ctx : contexts) {
    for (const auto& corpus_model : Models(records)) {
      // Named, not a structured binding: clang 14 cannot capture those in a lambda.
      const std::string& corpus = corpus_model.first;
      const std::string& model = corpus_model.second;
      auto at = [&](const LabRecord& r) {
        return r.corpus == corpus && r.model == model && r.ctx == ctx && r.tail == 0 &&
               r.stride == 0;
      };
      int64_t train_len = 0, period = 0;
      for (const LabRecord& r : records) {
        if (!at(r) || (r.protocol != "repeat" && r.protocol != "nonrepeat")) continue;
        train_len = r.train_len;
        if (r.protocol == "repeat" && RepeatPeriod(r) > r.train_len) {
          period = std::max(period, RepeatPeriod(r));
        }
      }
      if (train_len == 0) continue;
      BarPlotSpec spec;
      spec.name = fmt::format("repeat_vs_nonrepeat_{}_{}", ctx, ModelStem(corpus, model, corpora));
      spec.title = fmt::format("Model {}, context {}: repeat vs non-repeat",
                               ModelLabel(corpus, model, corpora), ctx);
      spec.y_label = "next-token accuracy (share right; bars: 95% interval)";
      spec.series = {"non-repeat (genuine text)",
                     fmt::format("repeat, period {} (L: within window)", train_len)};
      if (period > 0) spec.series.push_back(fmt::format("repeat, period {}", period));
      const size_t ns = spec.series.size();
      spec.values.assign(ns, {});
      spec.lo.assign(ns, {});
      spec.hi.assign(ns, {});
      std::vector<std::string> reasons;
      for (const ReportRowKey& row : ReportRows(records)) {
        if (row.corpus != corpus || row.model != model) continue;
        std::vector<const LabRecord*> cell(ns, nullptr);
        for (const LabRecord& r : records) {
          if (!at(r) || r.method != row.method) continue;
          size_t k = ns;
          if (r.protocol == "nonrepeat") k = 0;
          if (r.protocol == "repeat" && RepeatPeriod(r) == r.train_len) k = 1;
          if (r.protocol == "repeat" && period > 0 && RepeatPeriod(r) == period) k = 2;
          if (k < ns && cell[k] == nullptr) cell[k] = &r;
        }
        if (std::all_of(cell.begin(), cell.end(), [](const LabRecord* r) { return !r; })) continue;
        spec.categories.push_back(row.method);
        bool grey = false;
        for (size_t k = 0; k < ns; ++k) {
          const LabRecord* r = cell[k];
          spec.values[k].push_back(r ? r->accuracy : -1);
          const bool known = r && r->accuracy_ci.known;
          spec.lo[k].push_back(known ? r->accuracy_ci.lo : 1);
          spec.hi[k].push_back(known ? r->accuracy_ci.hi : 0);
          if (r && !r->informative) {
            grey = true;
            if (std::find(reasons.begin(), reasons.end(), r->not_informative) == reasons.end()) {
              reasons.push_back(r->not_informative);
            }
          }
        }
        spec.greyed.push_back(grey);
      }
      if (spec.categories.empty()) continue;
      std::string greyed;  // the footnotes whole, in the caption: the plot may cut them
      for (const std::string& why : reasons) {
        spec.footnotes.push_back("* grey: " + NotInformativeNote(why));
        greyed += " Grey (*): " + NotInformativeNote(why) + ".";
      }
      plots.push_back(
          {spec.name,
           fmt::format(
               "Model {}, next-token accuracy at context {} (0 to 1, higher is better), per "
               "method: genuine text; a {}-token sample repeated (its source always within "
               "a window of L: a control){}. Error bars: 95% intervals, where the records "
               "carry them.{}",
               ModelLabel(corpus, model, corpora), ctx, train_len,
               period > 0 ? fmt::format("; a {}-token sample repeated (the test of keeping "
                                        "information from beyond the window)",
                                        period)
                          : std::string(),
               greyed),
           BarPlotSvg(spec)});
    }
  }
  return plots;
}

// Far copy accuracy by distance, per model, material and context length: a line per method with
// error bars, its control (nothing to copy) dotted in the same colour. One plot a context: a
// line through the distances of two contexts (992 at 1,024, then 1,024 at 2,048) would join two
// tests and put their ticks on top of each other. With one context the file has no suffix.
std::vector<Plot> FarCopyPlots(const std::vector<LabRecord>& records, bool corpora) {
  std::vector<Plot> plots;
  for (const auto& corpus_model : Models(records)) {
    const std::string& corpus = corpus_model.first;  // not a binding: captured below (clang 14)
    const std::string& model = corpus_model.second;
    for (const std::string material : {"text", "random"}) {
      auto of_model = [&](const LabRecord& r) {
        return r.protocol == "far-copy" && r.corpus == corpus && r.model == model &&
               (r.material.empty() ? std::string("text") : r.material) == material;
      };
      std::set<int64_t> contexts;
      for (const LabRecord& r : records) {
        if (of_model(r)) contexts.insert(r.ctx);
      }
      for (const int64_t ctx : contexts) {
        auto keep = [&](const LabRecord& r) { return of_model(r) && r.ctx == ctx; };
        LinePlotSpec spec;
        spec.name = fmt::format("far_copy_{}_{}{}", ModelStem(corpus, model, corpora), material,
                                contexts.size() > 1 ? fmt::format("_{}", ctx) : std::string());
        spec.title = fmt::format("Far copy by distance: model {}, {}, context {}",
                                 ModelLabel(corpus, model, corpora), material, ctx);
        spec.x_label = "distance from the span to its copy (tokens, log2 scale)";
        spec.y_label = "copy accuracy (share right)";
        spec.x_log2 = true;
        spec.markers = true;
        spec.legend_extra = "control (nothing to copy)";
        std::string reason;
        int colour = 0;
        for (const ReportRowKey& row : ReportRows(records)) {
          if (row.corpus != corpus || row.model != model) continue;
          std::map<int64_t, const LabRecord*> at;
          for (const LabRecord& r : records) {
            if (!keep(r) || r.method != row.method) continue;
            const LabRecord*& x = at[r.distance];
            if (x == nullptr) x = &r;
          }
          if (at.empty()) continue;
          PlotSeries copy, control;
          copy.label = row.method;
          copy.colour = control.colour = colour++;
          control.label = row.method + " (control)";
          control.dashed = true;
          control.in_legend = false;
          for (const auto& [d, r] : at) {
            copy.xs.push_back(static_cast<double>(d));
            copy.ys.push_back(r->accuracy);
            copy.lo.push_back(r->accuracy_ci.known ? r->accuracy_ci.lo : 1);
            copy.hi.push_back(r->accuracy_ci.known ? r->accuracy_ci.hi : 0);
            if (!r->informative) reason = r->not_informative;
            if (r->has_control) {
              control.xs.push_back(static_cast<double>(d));
              control.ys.push_back(r->control_accuracy);
            }
          }
          copy.greyed = control.greyed = !reason.empty();
          spec.series.push_back(std::move(copy));
          if (!control.xs.empty()) spec.series.push_back(std::move(control));
        }
        if (!reason.empty()) {
          spec.note = "grey: " + NotInformativeNote(reason);
        }
        plots.push_back(
            {spec.name,
             fmt::format("Model {}, context {}: accuracy on a copied span of {} by the distance "
                         "back to its source (log2 axis), one line per method with 95% error "
                         "bars; dotted, thinner, in the same colour: the control, where there is "
                         "nothing to copy. A method that keeps distant information stays above its "
                         "control as the distance grows.{}",
                         ModelLabel(corpus, model, corpora), ctx,
                         material == "random" ? "random characters" : "text",
                         reason.empty() ? std::string() : " Greyed: " + spec.note + "."),
             LinePlotSvg(spec)});
      }
    }
  }
  return plots;
}

std::vector<Plot> TailPlots(const std::vector<LabRecord>& records, bool corpora) {
  std::vector<std::string> models;
  std::set<int64_t> tails;
  for (const LabRecord& r : records) {
    if (r.protocol != "tail") continue;
    models.push_back(r.model);
    tails.insert(r.tail);
  }
  std::vector<Plot> plots;
  for (const std::string& model : Unique(models)) {
    LinePlotSpec spec;
    spec.name = "tail_" + SanitizeFileName(model);
    spec.title =
        tails.size() == 1
            ? fmt::format("Fixed tail: model {}, loss on the last {} tokens", model, *tails.begin())
            : fmt::format("Fixed tail: model {}, loss on the last K tokens", model);
    spec.x_label = "context C (tokens, log2 scale)";
    spec.y_label = "tail loss (nats)";
    spec.x_log2 = true;
    spec.markers = true;
    std::vector<std::string> labels;
    // label -> (C, loss, interval)
    std::map<std::string, std::vector<std::tuple<double, double, LabInterval>>> points;
    for (const LabRecord& r : records) {
      if (r.protocol != "tail" || r.model != model) continue;
      std::string label = r.method;
      if (tails.size() > 1) label += fmt::format(", K={}", r.tail);
      if (corpora) label += fmt::format(" ({})", r.corpus);
      labels.push_back(label);
      points[label].push_back({static_cast<double>(r.ctx), r.loss, r.loss_ci});
    }
    for (const std::string& label : Unique(labels)) {
      auto& p = points[label];
      std::sort(p.begin(), p.end(),
                [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
      PlotSeries s;
      s.label = label;
      for (const auto& [x, y, ci] : p) {
        s.xs.push_back(x), s.ys.push_back(y);
        s.lo.push_back(ci.known ? ci.lo : 1), s.hi.push_back(ci.known ? ci.hi : 0);
      }
      spec.series.push_back(std::move(s));
    }
    plots.push_back({spec.name,
                     fmt::format("Model {}: mean loss (nats) on the same last tokens of each "
                                 "sample, by the context C before them (log2 axis), one line "
                                 "per method. A method that uses long context well goes down "
                                 "as C grows.",
                                 model),
                     LinePlotSvg(spec)});
  }
  return plots;
}

struct PasskeyPlotSet {
  std::vector<Plot> plots;
  // Rows whose every cell is 0: one line each instead of a heat map ("rope / direct: 2 lengths x
  // 3 depths, 60 trials").
  std::vector<std::string> all_zero;
};

PasskeyPlotSet PasskeyPlots(const std::vector<LabRecord>& records, bool corpora) {
  PasskeyPlotSet out;
  for (const ReportRowKey& row : ReportRows(records)) {
    auto keep = [&](const LabRecord& r) {
      return r.protocol == "passkey" && r.corpus == row.corpus && r.model == row.model &&
             r.method == row.method;
    };
    std::set<int64_t> contexts;
    std::set<std::pair<std::string, double>> depths;  // (layout, depth)
    std::set<double> depth_values;
    std::set<std::string> layouts;
    bool all_zero = true;
    int64_t trials = 0;
    std::string reason;
    for (const LabRecord& r : records) {
      if (!keep(r)) continue;
      contexts.insert(r.ctx);
      depths.insert({r.layout, r.depth});
      depth_values.insert(r.depth);
      layouts.insert(r.layout);
      all_zero = all_zero && r.accuracy == 0;
      trials += r.sequences;
      if (!r.informative) reason = r.not_informative;
    }
    if (contexts.empty()) continue;
    const std::string label = corpora
                                  ? fmt::format("{} / {} / {}", row.corpus, row.model, row.method)
                                  : fmt::format("{} / {}", row.model, row.method);
    if (all_zero) {
      // Depths per layout, when every layout has as many (3 depths x 2 layouts, not 6 x 2).
      const auto n_layouts = static_cast<int64_t>(layouts.size());
      const auto n_depths = static_cast<int64_t>(depths.size());
      std::map<std::string, int64_t> per_layout;
      for (const auto& [layout, depth] : depths) per_layout[layout]++;
      const bool even = std::all_of(per_layout.begin(), per_layout.end(), [&](const auto& x) {
        return x.second * n_layouts == n_depths;
      });
      out.all_zero.push_back(fmt::format(
          "{}: {} x {}{}, {}{}", label, Counted(static_cast<int64_t>(contexts.size()), "length"),
          Counted(even ? n_depths / n_layouts : n_depths, "depth"),
          n_layouts == 1 ? std::string()
          : even         ? fmt::format(" x {}", Counted(n_layouts, "layout"))
                         : fmt::format(" (over {})", Counted(n_layouts, "layout")),
          Counted(trials, "trial"), reason.empty() ? "" : " (not informative: " + reason + ")"));
      continue;
    }
    HeatMapSpec spec;
    spec.name = "passkey_" + (corpora ? SanitizeFileName(row.corpus) + "_" : std::string()) +
                SanitizeFileName(row.model) + "_" + SanitizeFileName(row.method);
    spec.title = fmt::format("Passkey retrieval: {}", label);
    spec.x_label = "input length (tokens)";
    spec.y_label = "depth of the key (0 start, 1 end)";
    spec.scale_label = "accuracy";
    if (!reason.empty()) {
      spec.note = NotInformativeNote(reason);
    }
    for (const int64_t c : contexts) spec.columns.push_back(fmt::format("{}", c));
    for (const auto& [layout, d] : depths) {
      spec.rows.push_back(FormatNumber(d, 2) + (layout.empty() ? "" : " (" + layout + ")"));
    }
    spec.values.assign(depths.size(), std::vector<double>(contexts.size(), -1));
    spec.labels.assign(depths.size(), std::vector<std::string>(contexts.size()));
    int64_t fewest = 0;  // the fewest trials of a cell
    for (const LabRecord& r : records) {
      if (!keep(r)) continue;
      const auto i = std::distance(depths.begin(), depths.find({r.layout, r.depth}));
      const auto j = std::distance(contexts.begin(), contexts.find(r.ctx));
      spec.values[i][j] = r.accuracy;
      if (r.sequences > 0) {
        spec.labels[i][j] = fmt::format(
            "{}/{}", std::lround(r.accuracy * static_cast<double>(r.sequences)), r.sequences);
        fewest = fewest == 0 ? r.sequences : std::min(fewest, r.sequences);
      }
    }
    // What so few trials can tell: the 95% Wilson intervals of none and of all of them.
    const std::string noise =
        fewest == 0 ? std::string()
                    : fmt::format(
                          " Each cell: keys read back of its trials (k/n). With {} trials, 0/{} "
                          "is a 95% interval of 0-{:.0f}% and {}/{} of {:.0f}-100%: cells a key "
                          "or two apart are within the noise.",
                          fewest, fewest, 100 * WilsonInterval(0, fewest).hi, fewest, fewest,
                          100 * WilsonInterval(fewest, fewest).lo);
    out.plots.push_back({spec.name,
                         fmt::format("{}: share of trials (0 to 1) in which the number hidden at "
                                     "each depth was read back right, by input length.{}{}",
                                     label, noise, reason.empty() ? "" : " " + spec.note + "."),
                         HeatMapSvg(spec)});
  }
  return out;
}

// "47.1% (44.0-50.2)": a share of the copy readout with its Wilson interval; "-" when not logged.
std::string ShareText(const TrainShare& s, bool count) {
  if (!s.known) return "-";
  return fmt::format("{:.1f}% ({:.1f}-{:.1f}){}", 100 * s.value, 100 * s.ci.lo, 100 * s.ci.hi,
                     count ? fmt::format(" of {}", s.n) : "");
}

// The stages' beginnings as marks on a plot over steps; none for a single run.
std::vector<PlotXMark> StageMarks(const ModelCurves& c) {
  std::vector<PlotXMark> marks;
  if (!c.staged()) return marks;
  for (const TrainStage& s : c.stages) {
    marks.push_back({static_cast<double>(s.start_step), fmt::format("{}: {}", s.index, s.name)});
  }
  return marks;
}

// At most this many points on the training loss's line: a run logs every step, and a line of
// thousands of points draws no more than one of a few hundred at this width.
constexpr size_t kTrainLossPoints = 200;

// The training loss as means over bins of consecutive steps (no bin crosses a stage's
// beginning), and how many steps a bin holds.
PlotSeries TrainLossSeries(const ModelCurves& c, int64_t& bin) {
  bin = static_cast<int64_t>((c.steps.size() + kTrainLossPoints - 1) / kTrainLossPoints);
  bin = std::max<int64_t>(1, bin);
  PlotSeries s;
  size_t stage = 0;
  double sum = 0, step_sum = 0;
  int64_t n = 0;
  auto flush = [&] {
    if (n == 0) return;
    s.xs.push_back(step_sum / static_cast<double>(n));
    s.ys.push_back(sum / static_cast<double>(n));
    sum = step_sum = 0;
    n = 0;
  };
  for (const TrainStep& p : c.steps) {
    bool new_stage = false;
    while (stage + 1 < c.stages.size() && p.step > c.stages[stage + 1].start_step) {
      ++stage;
      new_stage = true;
    }
    if (new_stage || n == bin) flush();
    sum += p.loss;
    step_sum += static_cast<double>(p.step);
    ++n;
  }
  flush();
  s.label = bin == 1 ? "training loss" : fmt::format("training loss (mean of {} steps)", bin);
  s.colour = 0;
  return s;
}

// The Training section's plots of one model: the loss, and the copy readout when logged.
std::vector<Plot> TrainingPlots(const ModelCurves& c, const std::string& label) {
  std::vector<Plot> plots;
  const std::string stages =
      c.staged() ? fmt::format(" Dashed vertical lines: where each of its {} stages begins.",
                               c.stages.size())
                 : std::string();
  LinePlotSpec loss;
  loss.name = "training_loss_" + SanitizeFileName(label);
  loss.title = fmt::format("Training: model {}, loss", label);
  loss.x_label = "training step";
  loss.y_label = "next-token loss (nats)";
  loss.x_marks = StageMarks(c);
  int64_t bin = 1;
  if (!c.steps.empty()) loss.series.push_back(TrainLossSeries(c, bin));
  PlotSeries held_out;
  held_out.label = "held-out loss";
  held_out.colour = 1;
  held_out.markers = true;
  for (const TrainEval& e : c.evals) {
    if (!e.has_val_loss) continue;
    held_out.xs.push_back(static_cast<double>(e.step));
    held_out.ys.push_back(e.val_loss);
    held_out.lo.push_back(e.val_loss_ci.known ? e.val_loss_ci.lo : 1);  // lo > hi: no bar
    held_out.hi.push_back(e.val_loss_ci.known ? e.val_loss_ci.hi : 0);
  }
  if (!held_out.xs.empty()) loss.series.push_back(std::move(held_out));
  if (!loss.series.empty()) {
    plots.push_back(
        {loss.name,
         fmt::format("Model {}: training loss{} and the loss on held-out text at each "
                     "evaluation (dots, with the 95% interval over the held-out windows where "
                     "the log has it), by training step.{}",
                     label, bin > 1 ? fmt::format(" (mean over each {} steps)", bin) : "", stages),
         LinePlotSvg(loss)});
  }

  LinePlotSpec copy;
  copy.name = "training_copy_" + SanitizeFileName(label);
  copy.title = fmt::format("Training: model {}, copy readout", label);
  copy.x_label = "training step";
  copy.y_label = "share right (bands: 95% Wilson interval)";
  copy.x_marks = StageMarks(c);
  copy.y_share = true;
  struct Kind {
    const char* label;
    TrainShare TrainEval::*share;
    int colour;
    bool dashed;
  };
  const Kind kinds[] = {
      {"copy (gapped rows)", &TrainEval::copy, 0, false},
      {"copy: control", &TrainEval::copy_control, 0, true},
      {"textcopy", &TrainEval::textcopy, 1, false},
      {"textcopy: control", &TrainEval::textcopy_control, 1, true},
      {"randcopy", &TrainEval::randcopy, 3, false},
      {"randcopy: control", &TrainEval::randcopy_control, 3, true},
      {"passkey: whole keys", &TrainEval::passkey_keys, 2, false},
  };
  for (const Kind& k : kinds) {
    PlotSeries s;
    s.label = k.label;
    s.colour = k.colour;
    s.dashed = k.dashed;
    s.markers = true;
    s.band = true;
    for (const TrainEval& e : c.evals) {
      const TrainShare& v = e.*k.share;
      if (!v.known) continue;
      s.xs.push_back(static_cast<double>(e.step));
      s.ys.push_back(v.value);
      s.lo.push_back(v.ci.lo);
      s.hi.push_back(v.ci.hi);
    }
    if (!s.xs.empty()) copy.series.push_back(std::move(s));
  }
  if (!copy.series.empty()) {
    plots.push_back(
        {copy.name,
         fmt::format("Model {}: the copy readout at each evaluation during training, a dot per "
                     "evaluation with its 95% Wilson interval (shaded): copy on gapped rows, "
                     "copy on text and of random strings in text (randcopy, where logged), each "
                     "against its control (dotted, same colour: the same "
                     "positions with nothing to copy), and passkey keys read back whole. A "
                     "model that learns to copy rises above its control. The token shares' "
                     "intervals treat the tokens of a row as independent, so they are too "
                     "narrow.{}",
                     label, stages),
         LinePlotSvg(copy)});
  }
  return plots;
}

// The table of one model's evaluations: Markdown and HTML.
std::pair<std::string, std::string> TrainingTable(const ModelCurves& c) {
  bool val = false, cp = false, cpc = false, tc = false, tcc = false, rc = false, rcc = false;
  bool pk = false;
  for (const TrainEval& e : c.evals) {
    val = val || e.has_val_loss;
    cp = cp || e.copy.known;
    cpc = cpc || e.copy_control.known;
    tc = tc || e.textcopy.known;
    tcc = tcc || e.textcopy_control.known;
    rc = rc || e.randcopy.known;
    rcc = rcc || e.randcopy_control.known;
    pk = pk || e.passkey_keys.known;
  }
  std::vector<std::string> head = {"step"};
  if (val) head.push_back("held-out loss (nats)");
  if (cp) head.push_back("copy");
  if (cpc) head.push_back("copy control");
  if (tc) head.push_back("textcopy");
  if (tcc) head.push_back("textcopy control");
  if (rc) head.push_back("randcopy");
  if (rcc) head.push_back("randcopy control");
  if (pk) head.push_back("passkey keys");
  std::vector<std::vector<std::string>> rows;
  for (const TrainEval& e : c.evals) {
    std::vector<std::string> row = {fmt::format("{}", e.step)};
    if (val) {
      row.push_back(!e.has_val_loss       ? "-"
                    : e.val_loss_ci.known ? fmt::format("{:.3f} ({:.3f}-{:.3f})", e.val_loss,
                                                        e.val_loss_ci.lo, e.val_loss_ci.hi)
                                          : fmt::format("{:.3f}", e.val_loss));
    }
    if (cp) row.push_back(ShareText(e.copy, false));
    if (cpc) row.push_back(ShareText(e.copy_control, false));
    if (tc) row.push_back(ShareText(e.textcopy, false));
    if (tcc) row.push_back(ShareText(e.textcopy_control, false));
    if (rc) row.push_back(ShareText(e.randcopy, false));
    if (rcc) row.push_back(ShareText(e.randcopy_control, false));
    if (pk) row.push_back(ShareText(e.passkey_keys, true));
    rows.push_back(std::move(row));
  }
  // On the page the table is folded under its plots (a line per evaluation: 50 and more a model);
  // tables.md keeps it open, as data.
  std::string md = "|", html = fmt::format(
                            "<details><summary>The evaluations as a table ({} row{})</summary>\n"
                            "<table class=\"training\">\n<thead><tr>",
                            rows.size(), rows.size() == 1 ? "" : "s");
  for (const std::string& h : head) {
    md += " " + h + " |";
    html += "<th>" + XmlEscape(h) + "</th>";
  }
  md += "\n|";
  for (size_t i = 0; i < head.size(); ++i) md += "---:|";
  md += "\n";
  html += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    md += "|";
    html += "<tr>";
    for (const std::string& v : row) {
      md += " " + v + " |";
      html += "<td>" + XmlEscape(v) + "</td>";
    }
    md += "\n";
    html += "</tr>\n";
  }
  html += "</tbody>\n</table>\n</details>\n";
  return {md, html};
}

// Gives each plot a file name no other plot has ("-2", "-3", ... appended), rewriting the
// data-plot attribute to match.
void MakeNamesUnique(std::vector<Plot>& plots) {
  std::set<std::string> used;
  for (Plot& p : plots) {
    std::string name = p.name;
    for (int n = 2; !used.insert(name).second; ++n) name = fmt::format("{}-{}", p.name, n);
    if (name != p.name) {
      const std::string from = fmt::format("data-plot=\"{}\"", XmlEscape(p.name));
      const size_t at = p.svg.find(from);
      if (at != std::string::npos) {
        p.svg.replace(at, from.size(), fmt::format("data-plot=\"{}\"", XmlEscape(name)));
      }
      p.name = name;
    }
  }
}

constexpr std::string_view kStyle =
    R"(body { font-family: sans-serif; margin: 2em; color: #222; }
h1, h2, h3, p, ul { max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.ni { color: #999; background: #f4f4f4; }
td.best, td.tied { background: #eef6ee; }
.tie { font-size: 0.8em; color: #555; }
.detail { font-size: 0.8em; color: #555; font-weight: normal; }
p.footnote, p.ranking { font-size: 0.9em; color: #444; }
thead th { background: #f0f0f0; }
tbody th { text-align: left; font-weight: normal; }
figure { margin: 1.5em 0; }
svg.plot { max-width: 100%; height: auto; }
figcaption { max-width: 60em; font-size: 0.9em; color: #444; }
pre { background: #f6f6f6; padding: 0.5em; }
)";

// The builds that scored the records (LabRecord::build), so that a reader can tell which build
// each figure comes from: " Scored by stretch X." for one, each with its count (most first) for
// several; records of builds from before records named theirs are counted apart; "" when no
// record names a build.
std::string BuildsText(const LabRecordFile& records) {
  std::map<std::string, int64_t> count;
  for (const LabRecord& r : records.records) {
    // Read from a file: anything but printable ASCII is shown as '?' (tables.md is not escaped).
    count[PrintableAscii(r.build, '?')]++;
  }
  const auto unnamed = count.find("");
  const int64_t before = unnamed == count.end() ? 0 : unnamed->second;
  if (before > 0) count.erase(unnamed);
  if (count.empty()) return "";
  if (count.size() == 1 && before == 0) {
    return fmt::format(" Scored by stretch {}.", count.begin()->first);
  }
  std::vector<std::pair<std::string, int64_t>> builds(count.begin(), count.end());
  std::stable_sort(builds.begin(), builds.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> parts;
  for (const auto& [build, n] : builds) {
    parts.push_back(fmt::format("stretch {} ({} record{})", build, n, n == 1 ? "" : "s"));
  }
  if (before > 0) {
    parts.push_back(fmt::format("{} record{} of builds from before records named theirs", before,
                                before == 1 ? "" : "s"));
  }
  const std::string how_many =
      builds.size() == 1 ? std::string() : fmt::format("{} builds: ", builds.size());
  return fmt::format(" Scored by {}{}.", how_many, fmt::join(parts, ", "));
}

std::string SourceLine(const LabRecordFile& records, const std::vector<std::string>& inputs) {
  std::string files;
  for (const std::string& in : inputs) files += (files.empty() ? "" : ", ") + in;
  std::string superseded;
  if (records.superseded > 0) {
    superseded = fmt::format(
        " {} records of earlier scoring rules superseded (a lab resumed by a later build found "
        "that its rules score those cells otherwise, voided the records and scored the cells "
        "again); they stay in their files, unread.",
        records.superseded);
  }
  return fmt::format(
      "{} records read from {}; {} duplicate records skipped (the first of each key kept), {} cut "
      "last lines skipped.{}{}",
      records.records.size(), files, records.duplicates, records.partial_lines, BuildsText(records),
      superseded);
}

// `text` cut at each `separator` (the pieces, empty ones too).
std::vector<std::string_view> SplitAt(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + separator.size();
  }
}

// The summary's reading on the page: its paragraphs (apart by a blank line) as <p>, the lines
// of a paragraph that begin "- " as the items of a list after it; "Reading." before the first.
std::string ReadingHtml(const std::string& reading) {
  std::string html;
  bool first = true;
  for (const std::string_view paragraph : SplitAt(reading, "\n\n")) {
    std::string items;
    bool lead = true;
    for (const std::string_view line : SplitAt(paragraph, "\n")) {
      if (!lead && line.starts_with("- ")) {
        items += fmt::format("<li>{}</li>\n", XmlEscape(std::string(line.substr(2))));
      } else if (!line.empty()) {
        html +=
            fmt::format("<p class=\"reading\">{}{}</p>\n",
                        first ? "<strong>Reading.</strong> " : "", XmlEscape(std::string(line)));
        first = false;
      }
      lead = false;
    }
    if (!items.empty()) html += "<ul class=\"reading\">\n" + items + "</ul>\n";
  }
  return html;
}

}  // namespace

std::string SanitizeFileName(std::string_view label) {
  std::string out;
  for (const char c : label) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty()) return "_";
  if (out[0] == '.') out[0] = '_';
  return out;
}

Report BuildReport(const LabRecordFile& records, const std::vector<std::string>& inputs,
                   const std::vector<ModelCurves>& curves) {
  if (records.records.empty()) Fail("no cell records in the records files: nothing to report");
  std::vector<LabRecord> rs = records.records;
  Report report;
  report.notes = SeparateModels(rs);
  // A gate names its model by label and id; where SeparateModels gave the label's records a label
  // of their own, the gate follows its model's records (by id), so that its line and the
  // reading match the rows.
  std::vector<LabGate> gates = records.gates;
  for (LabGate& g : gates) {
    for (const LabRecord& r : rs) {
      if (r.corpus == g.corpus && !g.model_id.empty() && r.model_id == g.model_id) {
        g.model = r.model;
        break;
      }
    }
  }
  if (!records.torn_lines.empty()) {
    std::string where;
    for (const std::string& t : records.torn_lines) where += (where.empty() ? "" : ", ") + t;
    report.notes.push_back(fmt::format(
        "{} torn line{} skipped (not JSON: a record cut by a crash or by two writers at once): {}",
        records.torn_lines.size(), records.torn_lines.size() == 1 ? "" : "s", where));
  }
  if (std::string n = DoubleLogNReportNote(rs); !n.empty()) report.notes.push_back(std::move(n));
  const bool corpora = SeveralCorpora(rs);

  const ReportTable summary = SummaryTable(rs);
  std::string reading = SummaryReading(summary, rs, gates);
  std::vector<ReportTable> tables;
  if (!gates.empty()) tables.push_back(GateTable(gates, corpora));
  if (ReportTable seeds = SeedsTable(records.records); !seeds.empty()) {
    if (const std::string over = SeedsReading(seeds); !over.empty()) {
      reading += (reading.empty() ? "" : "\n\n") + over;
    }
    tables.push_back(std::move(seeds));
  }
  for (ReportTable& t : FarCopyTables(rs)) tables.push_back(std::move(t));
  tables.push_back(RepeatPeriodTable(rs));
  tables.push_back(PasskeyTable(rs));
  const size_t passkey_table = tables.size() - 1;
  tables.push_back(PasskeyFirstDigitTable(rs));  // empty (not shown) for records without counts
  tables.push_back(MainTable(rs, /*loss=*/false));
  const size_t accuracy_table = tables.size() - 1;
  tables.push_back(MainTable(rs, /*loss=*/true));
  tables.push_back(TailTable(rs));
  tables.push_back(SlidingTable(rs));

  std::vector<Plot> plots = LossByPositionPlots(rs, corpora);
  for (Plot& p : FarCopyPlots(rs, corpora)) plots.push_back(std::move(p));
  for (Plot& p : RepeatPlots(rs, corpora)) plots.push_back(std::move(p));
  for (Plot& p : TailPlots(rs, corpora)) plots.push_back(std::move(p));
  PasskeyPlotSet passkey = PasskeyPlots(rs, corpora);
  for (Plot& p : passkey.plots) plots.push_back(std::move(p));
  // Training: each model's curves under the name its rows carry (SeparateModels may have given
  // its label a suffix: the curves' records files tell which model of the label they are).
  struct TrainingEntry {
    std::string label;
    const ModelCurves* curves;
  };
  std::vector<TrainingEntry> training;
  for (const ModelCurves& c : curves) {
    std::string label = c.model;
    for (size_t i = 0; i < records.records.size(); ++i) {
      const LabRecord& r = records.records[i];
      if (r.model == c.model && (c.sources.empty() || std::find(c.sources.begin(), c.sources.end(),
                                                                r.source) != c.sources.end())) {
        label = ModelLabel(rs[i].corpus, rs[i].model, corpora);
        break;
      }
    }
    for (const std::string& n : c.notes) report.training_notes.push_back(n);
    if (c.empty()) continue;
    for (Plot& p : TrainingPlots(c, label)) {
      p.training = static_cast<int>(training.size());
      plots.push_back(std::move(p));
    }
    training.push_back({label, &c});
  }
  MakeNamesUnique(plots);
  // Passkey rows with every cell 0 get one line here instead of a heat map of zeros.
  std::string zero_note;
  if (!passkey.all_zero.empty()) {
    zero_note = "Passkey: every length and depth at 0% (no heat map drawn) for ";
    for (size_t i = 0; i < passkey.all_zero.size(); ++i) {
      zero_note += (i == 0 ? "" : "; ") + passkey.all_zero[i];
    }
    zero_note += ".";
  }

  std::string md = "# stretch report\n\n" + SourceLine(records, inputs) + "\n\n";
  for (const std::string& n : report.notes) md += fmt::format("**Note:** {}\n\n", n);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>stretch report</title>\n<style>\n{}</style>\n</head>\n<body>\n"
      "<h1>stretch report: length extrapolation</h1>\n<p>{}</p>\n",
      kStyle, XmlEscape(SourceLine(records, inputs)));
  for (const std::string& n : report.notes) {
    html += fmt::format("<p><strong>Note:</strong> {}</p>\n", XmlEscape(n));
  }
  std::vector<ReportFile> csvs;
  // The summary and its reading first, as a paper's results section opens.
  if (!summary.empty()) {
    // On the page and in tables.md one table per length (the whole is twice a page wide); the
    // CSV keeps every column in one file.
    std::string table;
    for (const ReportTable& piece : TableByLength(summary, rs)) {
      table += (table.empty() ? "" : "\n") + TableMarkdown(piece);
      html += TableHtml(piece);
    }
    md += table;
    if (!reading.empty()) md += "\n**Reading.** " + reading + "\n";
    if (!reading.empty()) html += ReadingHtml(reading);
    csvs.push_back({summary.name + ".csv", TableCsv(summary)});
    report.accuracy_markdown = table + (reading.empty() ? "" : "\nReading. " + reading + "\n");
  }
  md += "\n## What the protocols are\n\n";
  for (const std::string_view g : kGlossary) md += fmt::format("- {}\n", g);
  html += "<h2>What the protocols are</h2>\n<ul>\n";
  for (const std::string_view g : kGlossary) html += fmt::format("<li>{}</li>\n", XmlEscape(g));
  html += "</ul>\n";
  if (const std::vector<std::string> methods = MethodGlossary(rs); !methods.empty()) {
    md += "\n## What the methods are\n\n";
    html += "<h2>What the methods are</h2>\n<ul>\n";
    for (const std::string& g : methods) {
      md += fmt::format("- {}\n", g);
      html += fmt::format("<li>{}</li>\n", XmlEscape(g));
    }
    html += "</ul>\n";
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    const ReportTable& t = tables[i];
    if (t.empty()) continue;
    for (const ReportTable& piece : TableByLength(t, rs)) {
      md += "\n" + TableMarkdown(piece);
      html += TableHtml(piece);
    }
    if (i == passkey_table && !zero_note.empty()) {
      md += "\n" + zero_note + "\n";
      html += fmt::format("<p class=\"note\">{}</p>\n", XmlEscape(zero_note));
    }
    csvs.push_back({t.name + ".csv", TableCsv(t)});
  }
  if (report.accuracy_markdown.empty() && !tables[accuracy_table].empty()) {
    report.accuracy_markdown = TableMarkdown(tables[accuracy_table]);
  }
  // Where each model's rows come from: records of several labs or ranks merged into one report.
  md += "\n## Models and their records files\n\n";
  html += "<h2>Models and their records files</h2>\n<ul>\n";
  for (const ModelSources& m : SourcesOfModels(rs)) {
    std::string files;
    for (const std::string& f : m.files) files += (files.empty() ? "" : ", ") + f;
    const std::string name = corpora ? m.corpus + " / " + m.model : m.model;
    md += fmt::format("- {}: {}\n", name, files);
    html += fmt::format("<li>{}: {}</li>\n", XmlEscape(name), XmlEscape(files));
  }
  html += "</ul>\n";
  report.summary_reading = reading;

  // Training, after the results tables: each model's loss and copy readout over its steps.
  if (!training.empty() || !report.training_notes.empty()) {
    md += "\n## Training\n\n";
    html += "<h2>Training</h2>\n";
    md +=
        "Each model's training, from its training logs: the loss over the steps, and at each "
        "evaluation the held-out loss (with its 95% interval over the held-out windows, in "
        "logs written since 2026-12-07) and the copy readout (share right, with its 95% Wilson "
        "interval; passkey: whole keys of the trials).\n";
    html +=
        "<p>Each model's training, from its training logs: the loss over the steps, and at "
        "each evaluation the held-out loss (with its 95% interval over the held-out windows, "
        "in logs written since 2026-12-07) and the copy readout (share right, with its 95% "
        "Wilson interval; passkey: whole keys of the trials).</p>\n";
    for (const std::string& n : report.training_notes) {
      md += fmt::format("\n**Note:** {}\n", n);
      html += fmt::format("<p class=\"note\">{}</p>\n", XmlEscape(n));
    }
    for (size_t ti = 0; ti < training.size(); ++ti) {
      const TrainingEntry& t = training[ti];
      const ModelCurves& c = *t.curves;
      std::string stages;
      for (const TrainStage& st : c.stages) {
        if (c.staged()) {
          stages += fmt::format("{}stage {} ({}) from step {}", stages.empty() ? "" : ", ",
                                st.index, st.name, st.start_step + 1);
        }
      }
      const std::string head =
          fmt::format("Model {}: {} steps logged, {} evaluations{}", t.label,
                      c.steps.empty() ? 0 : c.steps.back().step, c.evals.size(),
                      stages.empty() ? std::string() : "; " + stages);
      md += fmt::format("\n### Training: {}\n\n{}.\n\n", t.label, head);
      html +=
          fmt::format("<h3>Training: {}</h3>\n<p>{}.</p>\n", XmlEscape(t.label), XmlEscape(head));
      for (const Plot& p : plots) {
        if (p.training != static_cast<int>(ti)) continue;
        html += fmt::format("<figure>\n{}<figcaption>{} ({}.svg)</figcaption>\n</figure>\n", p.svg,
                            XmlEscape(p.caption), XmlEscape(p.name));
        md += fmt::format("Plot: {}.svg\n\n", p.name);
      }
      if (!c.evals.empty()) {
        const auto [table_md, table_html] = TrainingTable(c);
        md += table_md;
        html += table_html;
      }
    }
  }

  report.files.push_back({"tables.md", md});
  for (ReportFile& f : csvs) report.files.push_back(std::move(f));

  html += "<h2>Plots</h2>\n";
  for (const Plot& p : plots) {
    if (p.training < 0) {
      html += fmt::format("<figure>\n{}<figcaption>{} ({}.svg)</figcaption>\n</figure>\n", p.svg,
                          XmlEscape(p.caption), XmlEscape(p.name));
    }
    report.files.push_back({p.name + ".svg", p.svg});
  }
  report.plots = static_cast<int64_t>(plots.size());
  html += "</body>\n</html>\n";
  report.files.push_back({"report.html", html});
  return report;
}

}  // namespace stretch
