#include "src/report/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "src/core/error.h"
#include "src/report/report_tables.h"
#include "src/report/svg_plot.h"

namespace stretch {
namespace {

struct Plot {
  std::string name;  // the file's stem and data-plot
  std::string caption;
  std::string svg;
};

// What each protocol is, in one line each, for readers who never read the papers.
constexpr std::string_view kGlossary[] = {
    "non-repeat: genuine text cut into windows of the context length, every position scored.",
    "repeat: a sample as long as the training length, repeated until it fills the context: the "
    "model can copy from earlier in the window, so failing here shows it cannot use positions "
    "beyond training at all.",
    "tail: the same last K tokens of each sample scored with more and more context before them.",
    "passkey: a number hidden in filler text at some depth (0 = start, 1 = end), asked for at "
    "the end.",
    "sliding: sliding-window perplexity, each token scored once with a long context before it.",
};

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
      for (const LabPositionBucket& b : r.by_position) {
        if (b.count == 0) continue;
        s.xs.push_back(0.5 * static_cast<double>(b.begin + b.end));
        s.ys.push_back(b.loss);
      }
      any = any || !s.xs.empty();
      spec.series.push_back(std::move(s));
    }
    if (!any) continue;  // records without buckets: nothing to draw
    plots.push_back({spec.name,
                     fmt::format("Model {}: mean next-token loss (nats) by position in {}-token "
                                 "windows of genuine text, one line per method; the dashed line "
                                 "marks the training length {}. Lower is better; a line that "
                                 "rises after the dashed line shows the method failing to "
                                 "extrapolate.",
                                 model, ctx, train_len),
                     LinePlotSvg(spec)});
  }
  return plots;
}

std::vector<Plot> RepeatPlots(const ReportTable& accuracy) {
  std::vector<Plot> plots;
  // Columns: L, then (repeat C, non-repeat C) per longer context, ascending.
  for (size_t j = 1; j + 1 < accuracy.columns.size(); j += 2) {
    const std::string& header = accuracy.columns[j];  // "repeat 1024 (8x)"
    const std::string ctx = header.substr(7);
    BarPlotSpec spec;
    spec.name = "repeat_vs_nonrepeat_" + SanitizeFileName(ctx.substr(0, ctx.find(' ')));
    spec.title = fmt::format("Accuracy at context {}: repeat vs non-repeat", ctx);
    spec.y_label = "next-token accuracy (share right)";
    spec.series = {"repeat (sample repeated)", "non-repeat (genuine text)"};
    spec.values.assign(2, {});
    for (size_t i = 0; i < accuracy.rows.size(); ++i) {
      const ReportCell& rep = accuracy.cells[i][j];
      const ReportCell& non = accuracy.cells[i][j + 1];
      if (!rep.present && !non.present) continue;
      spec.categories.push_back(RowLabel(accuracy, accuracy.rows[i]));
      spec.values[0].push_back(rep.present ? rep.value : -1);
      spec.values[1].push_back(non.present ? non.value : -1);
    }
    plots.push_back(
        {spec.name,
         fmt::format("Next-token accuracy at context {} (0 to 1, higher is better), per model / "
                     "method: repeat (a training-length sample repeated, so the answer is in "
                     "view) next to non-repeat (genuine text).",
                     ctx),
         BarPlotSvg(spec)});
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
    std::map<std::string, std::vector<std::pair<double, double>>> points;
    for (const LabRecord& r : records) {
      if (r.protocol != "tail" || r.model != model) continue;
      std::string label = r.method;
      if (tails.size() > 1) label += fmt::format(", K={}", r.tail);
      if (corpora) label += fmt::format(" ({})", r.corpus);
      labels.push_back(label);
      points[label].push_back({static_cast<double>(r.ctx), r.loss});
    }
    for (const std::string& label : Unique(labels)) {
      std::vector<std::pair<double, double>>& p = points[label];
      std::sort(p.begin(), p.end());
      PlotSeries s;
      s.label = label;
      for (const auto& [x, y] : p) s.xs.push_back(x), s.ys.push_back(y);
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

std::vector<Plot> PasskeyPlots(const std::vector<LabRecord>& records, bool corpora) {
  std::vector<Plot> plots;
  for (const ReportRowKey& row : ReportRows(records)) {
    std::set<int64_t> contexts;
    std::set<double> depths;
    for (const LabRecord& r : records) {
      if (r.protocol != "passkey" || r.corpus != row.corpus || r.model != row.model ||
          r.method != row.method) {
        continue;
      }
      contexts.insert(r.ctx);
      depths.insert(r.depth);
    }
    if (contexts.empty()) continue;
    HeatMapSpec spec;
    spec.name = "passkey_" + (corpora ? SanitizeFileName(row.corpus) + "_" : std::string()) +
                SanitizeFileName(row.model) + "_" + SanitizeFileName(row.method);
    const std::string label = corpora
                                  ? fmt::format("{} / {} / {}", row.corpus, row.model, row.method)
                                  : fmt::format("{} / {}", row.model, row.method);
    spec.title = fmt::format("Passkey retrieval: {}", label);
    spec.x_label = "input length (tokens)";
    spec.y_label = "depth of the key (0 start, 1 end)";
    spec.scale_label = "accuracy";
    for (const int64_t c : contexts) spec.columns.push_back(fmt::format("{}", c));
    for (const double d : depths) spec.rows.push_back(FormatNumber(d, 2));
    spec.values.assign(depths.size(), std::vector<double>(contexts.size(), -1));
    for (const LabRecord& r : records) {
      if (r.protocol != "passkey" || r.corpus != row.corpus || r.model != row.model ||
          r.method != row.method) {
        continue;
      }
      const auto i = std::distance(depths.begin(), depths.find(r.depth));
      const auto j = std::distance(contexts.begin(), contexts.find(r.ctx));
      spec.values[i][j] = r.accuracy;
    }
    plots.push_back({spec.name,
                     fmt::format("{}: share of trials (0 to 1) in which the number hidden at "
                                 "each depth was read back right, by input length.",
                                 label),
                     HeatMapSvg(spec)});
  }
  return plots;
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
    R"(body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td { text-align: right; font-variant-numeric: tabular-nums; }
thead th { background: #f0f0f0; }
tbody th { text-align: left; font-weight: normal; }
figure { margin: 1.5em 0; }
figcaption { max-width: 60em; font-size: 0.9em; color: #444; }
pre { background: #f6f6f6; padding: 0.5em; }
)";

// On load: PLOT-OK / PLOT-EMPTY per svg.plot (its data marks have a nonzero bounding box), then
// PLOTS n, into <pre id="render-check">.
constexpr std::string_view kRenderCheck = R"(window.addEventListener('load', function () {
  var plots = document.querySelectorAll('svg.plot');
  var lines = [];
  for (var i = 0; i < plots.length; i++) {
    var svg = plots[i], ok = false;
    try {
      var all = svg.getBBox();
      var data = svg.querySelector('g.data');
      var box = data ? data.getBBox() : null;
      ok = all.width > 0 && all.height > 0 && box !== null && (box.width > 0 || box.height > 0);
    } catch (e) {
      ok = false;
    }
    lines.push((ok ? 'PLOT-OK ' : 'PLOT-EMPTY ') + svg.getAttribute('data-plot'));
  }
  lines.push('PLOTS ' + plots.length);
  document.getElementById('render-check').textContent = lines.join('\n');
});
)";

std::string SourceLine(const LabRecordFile& records, const std::vector<std::string>& inputs) {
  std::string files;
  for (const std::string& in : inputs) files += (files.empty() ? "" : ", ") + in;
  return fmt::format(
      "{} records read from {}; {} duplicate records skipped (the first of each key kept), {} cut "
      "last lines skipped.",
      records.records.size(), files, records.duplicates, records.partial_lines);
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

Report BuildReport(const LabRecordFile& records, const std::vector<std::string>& inputs) {
  if (records.records.empty()) Fail("no cell records in the records files: nothing to report");
  std::vector<LabRecord> rs = records.records;
  Report report;
  report.notes = SeparateModels(rs);
  if (!records.torn_lines.empty()) {
    std::string where;
    for (const std::string& t : records.torn_lines) where += (where.empty() ? "" : ", ") + t;
    report.notes.push_back(fmt::format(
        "{} torn line{} skipped (not JSON: a record cut by a crash or by two writers at once): {}",
        records.torn_lines.size(), records.torn_lines.size() == 1 ? "" : "s", where));
  }
  const bool corpora = SeveralCorpora(rs);

  std::vector<ReportTable> tables = {MainTable(rs, /*loss=*/false), MainTable(rs, /*loss=*/true),
                                     TailTable(rs), PasskeyTable(rs), SlidingTable(rs)};
  std::vector<Plot> plots = LossByPositionPlots(rs, corpora);
  for (Plot& p : RepeatPlots(tables[0])) plots.push_back(std::move(p));
  for (Plot& p : TailPlots(rs, corpora)) plots.push_back(std::move(p));
  for (Plot& p : PasskeyPlots(rs, corpora)) plots.push_back(std::move(p));
  MakeNamesUnique(plots);

  std::string md = "# stretch report\n\n" + SourceLine(records, inputs) + "\n\n";
  for (const std::string& n : report.notes) md += fmt::format("**Note:** {}\n\n", n);
  for (const std::string_view g : kGlossary) md += fmt::format("- {}\n", g);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>stretch report</title>\n<style>\n{}</style>\n</head>\n<body>\n"
      "<h1>stretch report: length extrapolation</h1>\n<p>{}</p>\n<ul>\n",
      kStyle, XmlEscape(SourceLine(records, inputs)));
  for (const std::string_view g : kGlossary) html += fmt::format("<li>{}</li>\n", XmlEscape(g));
  html += "</ul>\n";
  for (const std::string& n : report.notes) {
    html += fmt::format("<p><strong>Note:</strong> {}</p>\n", XmlEscape(n));
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
  std::vector<ReportFile> csvs;
  for (const ReportTable& t : tables) {
    if (t.empty()) continue;
    md += "\n" + TableMarkdown(t);
    html += TableHtml(t);
    csvs.push_back({t.name + ".csv", TableCsv(t)});
  }
  if (!tables[0].empty()) report.accuracy_markdown = TableMarkdown(tables[0]);
  report.files.push_back({"tables.md", md});
  for (ReportFile& f : csvs) report.files.push_back(std::move(f));

  html += "<h2>Plots</h2>\n";
  for (const Plot& p : plots) {
    html += fmt::format("<figure>\n{}<figcaption>{} ({}.svg)</figcaption>\n</figure>\n", p.svg,
                        XmlEscape(p.caption), XmlEscape(p.name));
    report.files.push_back({p.name + ".svg", p.svg});
  }
  report.plots = static_cast<int64_t>(plots.size());
  html += fmt::format(
      "<h2>Render check</h2>\n<p>Filled in by the page's script: whether each plot drew.</p>\n"
      "<pre id=\"render-check\">not run</pre>\n<script>\n{}</script>\n</body>\n</html>\n",
      kRenderCheck);
  report.files.push_back({"report.html", html});
  return report;
}

}  // namespace stretch
