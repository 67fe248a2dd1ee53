// The SVG plots: well-formed (a small tag checker: balanced tags, quoted attributes, entities
// only), with title, axis labels and a legend entry per series, every label escaped; and the
// report's set of files.
#include "src/report/svg_plot.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <string_view>

#include "src/report/report_html.h"
#include "tests/report/sample_records.h"

namespace stretch {
namespace {

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Whether `s` begins with an XML entity the plots use: &amp; &lt; &gt; &quot; or &#digits;.
// (Not std::regex: GCC 12 warns inside <regex> under the sanitizers, and warnings are errors.)
bool StartsWithEntity(std::string_view s) {
  for (const std::string_view e : {"&amp;", "&lt;", "&gt;", "&quot;"}) {
    if (s.substr(0, e.size()) == e) return true;
  }
  if (s.size() < 4 || s.substr(0, 2) != "&#") return false;
  size_t i = 2;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i > 2 && i < s.size() && s[i] == ';';
}

// "" when `xml` is well formed in the subset the plots use (elements, attributes in double
// quotes, text, entities), else what is wrong and where.
std::string XmlProblem(const std::string& xml) {
  std::vector<std::string> open;
  auto check_text = [&](size_t from, size_t to) -> std::string {
    for (size_t i = from; i < to; ++i) {
      if (xml[i] == '<') return fmt::format("raw '<' at {}", i);
      if (xml[i] == '&' && !StartsWithEntity(std::string_view(xml).substr(i, 12))) {
        return fmt::format("raw '&' at {}", i);
      }
    }
    return "";
  };
  size_t i = 0;
  while (i < xml.size()) {
    const size_t lt = xml.find('<', i);
    if (const std::string p = check_text(i, lt == std::string::npos ? xml.size() : lt);
        !p.empty()) {
      return p;
    }
    if (lt == std::string::npos) break;
    const bool closing = lt + 1 < xml.size() && xml[lt + 1] == '/';
    size_t j = lt + (closing ? 2 : 1);
    const size_t name_begin = j;
    while (j < xml.size() && (std::isalnum(static_cast<unsigned char>(xml[j])) || xml[j] == '-'))
      ++j;
    const std::string name = xml.substr(name_begin, j - name_begin);
    if (name.empty()) return fmt::format("a tag without a name at {}", lt);
    // Attributes: name="value", value free of '<' and of stray '&'.
    while (j < xml.size() && xml[j] != '>' && xml[j] != '/') {
      if (xml[j] == '"') {
        const size_t end = xml.find('"', j + 1);
        if (end == std::string::npos) return fmt::format("unclosed quote at {}", j);
        if (const std::string p = check_text(j + 1, end); !p.empty()) return p;
        j = end + 1;
      } else {
        ++j;
      }
    }
    if (j >= xml.size()) return fmt::format("unclosed tag <{} at {}", name, lt);
    const bool self_closing = xml[j] == '/';
    if (self_closing && (j + 1 >= xml.size() || xml[j + 1] != '>')) {
      return fmt::format("'/' not followed by '>' at {}", j);
    }
    if (closing) {
      if (open.empty() || open.back() != name) {
        return fmt::format("</{}> at {} closes <{}>", name, lt, open.empty() ? "" : open.back());
      }
      open.pop_back();
    } else if (!self_closing) {
      open.push_back(name);
    }
    i = xml.find('>', j) + 1;
  }
  if (!open.empty()) return fmt::format("<{}> never closed", open.back());
  return "";
}

PlotSeries Series(std::string label, std::vector<double> xs, std::vector<double> ys) {
  PlotSeries s;
  s.label = std::move(label);
  s.xs = std::move(xs);
  s.ys = std::move(ys);
  return s;
}

TEST(SvgPlotTest, TheCheckerCatchesBrokenXml) {
  EXPECT_EQ(XmlProblem("<svg><g><text x=\"1\">a &amp; b</text></g><line/></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><g></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text x=\"a&b\">t</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg>"), "");
}

TEST(SvgPlotTest, LinePlotHasTitleAxesLegendAndEscapesLabels) {
  LinePlotSpec spec;
  spec.name = "loss_by_position_m";
  spec.title = "Loss <by> position & \"more\"";
  spec.x_label = "position in the sequence (tokens)";
  spec.y_label = "mean next-token loss (nats)";
  spec.x_marker = 128;
  spec.x_marker_label = "training length";
  spec.series = {Series("direct", {32, 96, 160, 224}, {2.5, 2.2, 3.1, 4.0}),
                 Series("a<b & \"c\"", {32, 96, 160, 224}, {2.5, 2.2, 2.3, 2.4})};
  const std::string svg = LinePlotSvg(spec);
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  EXPECT_TRUE(Has(svg, "class=\"plot\" data-plot=\"loss_by_position_m\""));
  EXPECT_TRUE(Has(svg, "Loss &lt;by&gt; position &amp; &quot;more&quot;"));
  EXPECT_TRUE(Has(svg, ">position in the sequence (tokens)</text>"));
  EXPECT_TRUE(Has(svg, ">mean next-token loss (nats)</text>"));
  EXPECT_TRUE(Has(svg, ">training length</text>"));
  EXPECT_TRUE(Has(svg, ">direct</text>"));
  EXPECT_TRUE(Has(svg, ">a&lt;b &amp; &quot;c&quot;</text>"));
  EXPECT_FALSE(Has(svg, "a<b"));
  EXPECT_TRUE(Has(svg, "<g class=\"data\">\n<polyline"));
  EXPECT_TRUE(Has(svg, "stroke-dasharray=\"6 4\""));  // the training length
  // Tick labels: the y axis from 2 to 4 by 0.5, the x axis from 0 by 50.
  EXPECT_TRUE(Has(svg, ">2.5</text>"));
  EXPECT_TRUE(Has(svg, ">200</text>"));
}

// The labels of training stages a few hundred steps apart (the quick lab's 1,000, 400, 400, 1,500
// and 6,000 steps) are laid out in rows so that no two in a row overlap, over the data, on a halo.
TEST(SvgPlotTest, StageLabelsCloseTogetherDoNotOverprint) {
  LinePlotSpec spec;
  spec.name = "training_loss_m";
  spec.title = "t";
  spec.x_label = "training step";
  spec.y_label = "loss (nats)";
  spec.series = {Series("loss", {0, 4650, 9300}, {5, 2, 1})};
  const double steps[] = {0, 1000, 1400, 1800, 3300};
  const char* names[] = {"1: copy", "2: gapped", "3: small", "4: mixed", "5: prose"};
  for (int i = 0; i < 5; ++i) spec.x_marks.push_back({steps[i], names[i]});
  const std::string svg = LinePlotSvg(spec);
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  struct Label {
    double x, y;
    size_t chars;
  };
  std::vector<Label> labels;
  for (size_t at = svg.find("paint-order=\"stroke\">"); at != std::string::npos;
       at = svg.find("paint-order=\"stroke\">", at + 1)) {
    const size_t open = svg.rfind("<text x=\"", at);
    const double x = std::stod(svg.substr(open + 9));
    const double y = std::stod(svg.substr(svg.find("y=\"", open) + 3));
    const size_t from = at + 21;
    labels.push_back({x, y, svg.find("</text>", from) - from});
  }
  ASSERT_EQ(labels.size(), 5u) << svg;
  EXPECT_GT(svg.find("paint-order"), svg.find("class=\"data\"")) << "labels over the data";
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = i + 1; j < labels.size(); ++j) {
      if (labels[i].y != labels[j].y) continue;
      const Label& a = labels[i].x < labels[j].x ? labels[i] : labels[j];
      const Label& b = labels[i].x < labels[j].x ? labels[j] : labels[i];
      EXPECT_LE(a.x + 6.2 * static_cast<double>(a.chars), b.x) << svg;
    }
  }
}

TEST(SvgPlotTest, LogAxisTicksAtTheContexts) {
  LinePlotSpec spec;
  spec.name = "tail_m";
  spec.title = "t";
  spec.x_label = "context C (tokens, log2 scale)";
  spec.y_label = "tail loss (nats)";
  spec.x_log2 = true;
  spec.markers = true;
  spec.series = {Series("direct", {128, 512, 2048}, {2.2, 2.1, 2.0})};
  const std::string svg = LinePlotSvg(spec);
  EXPECT_EQ(XmlProblem(svg), "");
  for (const char* tick : {">128</text>", ">512</text>", ">2048</text>"}) {
    EXPECT_TRUE(Has(svg, tick)) << tick;
  }
  EXPECT_FALSE(Has(svg, ">256</text>"));
  EXPECT_TRUE(Has(svg, "<circle"));
}

TEST(SvgPlotTest, BarPlotAndHeatMap) {
  BarPlotSpec bars;
  bars.name = "repeat_vs_nonrepeat_1024";
  bars.title = "Accuracy at context 1024 (8x)";
  bars.y_label = "next-token accuracy (share right)";
  bars.categories = {"rope / direct", "rope / <yarn>"};
  bars.series = {"repeat (sample repeated)", "non-repeat (genuine text)"};
  bars.values = {{0.9, -1}, {0.1, 0.35}};
  const std::string b = BarPlotSvg(bars);
  EXPECT_EQ(XmlProblem(b), "") << b;
  EXPECT_TRUE(Has(b, ">repeat (sample repeated)</text>"));
  EXPECT_TRUE(Has(b, ">non-repeat (genuine text)</text>"));
  EXPECT_TRUE(Has(b, ">rope / &lt;yarn&gt;</text>"));
  EXPECT_TRUE(Has(b, ">n/a</text>"));
  EXPECT_TRUE(Has(b, ">0.35</text>"));
  EXPECT_TRUE(Has(b, ">1</text>"));  // the y axis reaches 1

  // A footnote longer than the plot is wide is wrapped at spaces into lines that fit (a reviewer
  // found the copy gate's reason cut off at the plot's edge), and the plot grows to hold them.
  BarPlotSpec noted = bars;
  std::string reason = "* grey: not informative: the model failed the copy gate:";
  for (int i = 0; i < 20; ++i) reason += fmt::format(" word{}", i);
  reason += " far copy of text at L: copy 50.4% - control 50.0% = +0.4 pts < 20 at L (the end)";
  noted.footnotes = {reason};
  const std::string n = BarPlotSvg(noted);
  EXPECT_EQ(XmlProblem(n), "") << n;
  size_t lines = 0;
  for (size_t at = n.find("fill=\"#555\">"); at != std::string::npos;
       at = n.find("fill=\"#555\">", at + 1)) {
    ++lines;
  }
  EXPECT_GT(lines, 1u) << "wrapped over lines: " << n;
  EXPECT_TRUE(Has(n, "(the end)</text>")) << "nothing cut: " << n;
  const double width = std::stod(n.substr(n.find("width=\"") + 7));
  for (size_t at = n.find("fill=\"#555\">"); at != std::string::npos;
       at = n.find("fill=\"#555\">", at + 1)) {
    const size_t from = at + 12, to = n.find("</text>", from);  // 12: fill="#555">
    EXPECT_LE(6.2 * static_cast<double>(to - from), width - 24) << n.substr(from, to - from);
  }

  HeatMapSpec heat;
  heat.name = "passkey_m_x";
  heat.title = "Passkey";
  heat.x_label = "input length (tokens)";
  heat.y_label = "depth of the key (0 start, 1 end)";
  heat.scale_label = "accuracy";
  heat.columns = {"256", "512"};
  heat.rows = {"0", "0.5", "1"};
  heat.values = {{1.0, 0.25}, {0.5, -1}, {0.0, 0.75}};
  const std::string h = HeatMapSvg(heat);
  EXPECT_EQ(XmlProblem(h), "") << h;
  EXPECT_TRUE(Has(h, ">0.25</text>"));
  EXPECT_TRUE(Has(h, ">-</text>"));  // the missing cell
  EXPECT_TRUE(Has(h, ">accuracy</text>"));
  EXPECT_TRUE(Has(h, ">depth of the key (0 start, 1 end)</text>"));
  EXPECT_TRUE(Has(h, ScaleColour(1.0)));
  EXPECT_EQ(ScaleColour(0.0), "#440154");
  EXPECT_EQ(ScaleColour(1.0), "#fde725");
  // Cell texts given: counts in place of the shares (the missing cell stays "-").
  HeatMapSpec counted = heat;
  counted.labels = {{"4/4", "1/4"}, {"2/4", ""}, {"0/4", ""}};
  const std::string k = HeatMapSvg(counted);
  EXPECT_TRUE(Has(k, ">1/4</text>")) << k;
  EXPECT_FALSE(Has(k, ">0.25</text>")) << k;
  EXPECT_TRUE(Has(k, ">0.75</text>")) << "an empty label writes the value: " << k;
  EXPECT_TRUE(Has(k, ">-</text>")) << k;
}

TEST(SvgPlotTest, NumbersAndFileNames) {
  EXPECT_EQ(FormatNumber(1024), "1024");
  EXPECT_EQ(FormatNumber(0.25), "0.25");
  EXPECT_EQ(FormatNumber(2.5000001, 2), "2.5");
  EXPECT_EQ(FormatNumber(-0.0), "0");
  EXPECT_EQ(SanitizeFileName("self-extend:group=8,window=128"), "self-extend_group_8_window_128");
  EXPECT_EQ(SanitizeFileName("../x y"), "_._x_y");
  EXPECT_EQ(SanitizeFileName(""), "_");
}

TEST(SvgPlotTest, ReportWritesEveryTableAndPlot) {
  LabRecordFile records;
  records.records = testing::SampleRecords();
  records.duplicates = 3;
  const Report report = BuildReport(records, {"a.jsonl"});
  std::vector<std::string> names;
  int64_t svgs = 0;
  for (const ReportFile& f : report.files) {
    names.push_back(f.name);
    if (f.name.ends_with(".svg")) {
      ++svgs;
      EXPECT_EQ(XmlProblem(f.content), "") << f.name;
    }
    if (f.name.starts_with("loss_by_position_")) {  // the buckets' intervals, as bands
      EXPECT_TRUE(Has(f.content, "<polygon")) << f.name;
    }
  }
  const std::vector<std::string> expected = {"tables.md",
                                             "summary.csv",
                                             "passkey.csv",
                                             "accuracy.csv",
                                             "loss.csv",
                                             "tail.csv",
                                             "sliding.csv",
                                             "loss_by_position_rope.svg",
                                             "loss_by_position_alibi.svg",
                                             "repeat_vs_nonrepeat_512_rope.svg",
                                             "repeat_vs_nonrepeat_512_alibi.svg",
                                             "repeat_vs_nonrepeat_1024_rope.svg",
                                             "repeat_vs_nonrepeat_1024_alibi.svg",
                                             "tail_rope.svg",
                                             "tail_alibi.svg",
                                             "passkey_rope_direct.svg",
                                             "passkey_rope_self-extend_group_8_window_128.svg",
                                             "passkey_alibi_direct.svg",
                                             "passkey_alibi_self-extend_group_8_window_128.svg",
                                             "report.html"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(report.plots, svgs);
  const std::string& html = report.files.back().content;
  size_t inline_plots = 0;
  for (size_t at = html.find("<svg "); at != std::string::npos; at = html.find("<svg ", at + 1)) {
    ++inline_plots;
  }
  EXPECT_EQ(inline_plots, static_cast<size_t>(svgs));
  // No test scaffolding: the render check is the Chromium test's own (report_cli_test.cc).
  EXPECT_FALSE(Has(html, "Render check"));
  EXPECT_FALSE(Has(html, "<script"));
  // Nothing loaded from elsewhere (the svg's xmlns is a name, not a fetch).
  for (const char* fetch : {"src=", "href=", "url(", "@import", "<link"}) {
    EXPECT_FALSE(Has(html, fetch)) << fetch;
  }
  EXPECT_TRUE(Has(report.files[0].content, "3 duplicate records skipped"));
  EXPECT_TRUE(Has(report.accuracy_markdown, "| rope / direct |"));
  EXPECT_TRUE(Has(report.accuracy_markdown, "## Summary")) << report.accuracy_markdown;
}

TEST(SvgPlotTest, CollidingFileNamesGetASuffix) {
  LabRecordFile records;
  for (const char* model : {"a/b", "a_b"}) {
    records.records.push_back(testing::SampleCell(model, "direct", "nonrepeat", 256, 0.5));
  }
  const Report report = BuildReport(records, {"r.jsonl"});
  std::vector<std::string> svgs;
  for (const ReportFile& f : report.files) {
    if (f.name.ends_with(".svg")) svgs.push_back(f.name);
  }
  EXPECT_EQ(svgs, (std::vector<std::string>{
                      "loss_by_position_a_b.svg", "loss_by_position_a_b-2.svg",
                      "repeat_vs_nonrepeat_256_a_b.svg", "repeat_vs_nonrepeat_256_a_b-2.svg"}));
  EXPECT_TRUE(Has(report.files.back().content, "data-plot=\"loss_by_position_a_b-2\""));
}

}  // namespace
}  // namespace stretch
