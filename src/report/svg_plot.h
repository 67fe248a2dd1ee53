// Plots for `stretch report`, as standalone SVG text: a small SVG builder (lines, polylines,
// rectangles, text, every label XML-escaped) and the three kinds of plot the report draws (lines,
// grouped bars, a heat map). Each plot reads on its own: a title, axis labels with units, tick
// labels and a legend (or a colour scale).
//
// Every plot's root is <svg class="plot" data-plot="NAME" ...>, with a viewBox and the style
// max-width: 100% so that it scales down to the page, and the marks that show data are drawn
// inside <g class="data">, so a render check (tests/report/report_cli_test.cc) can tell an empty
// plot (axes only) from a drawn one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace stretch {

// &, <, >, " and ' written as entities: safe in XML/HTML text and in quoted attributes.
std::string XmlEscape(std::string_view text);

// A number for a label: integers without decimals ("1024"), others with `decimals` digits after
// the point, trailing zeros dropped ("0.25", "1.5").
std::string FormatNumber(double v, int decimals = 3);

// The fixed palette: Okabe and Ito's colour-blind-safe colours (yellow left out: unreadable on
// white), in the order series take them; series beyond it cycle with a dash pattern.
inline constexpr std::string_view kPlotPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                    "#E69F00", "#56B4E9", "#000000"};

// A colour for a value in [0, 1] on a perceptually even dark-blue .. yellow scale (viridis'
// stops, linearly interpolated); values outside are clamped.
std::string ScaleColour(double v);

class SvgWriter {
 public:
  // `name` goes into data-plot, `title` into <title> (the tooltip and the accessible name).
  SvgWriter(double width, double height, std::string_view name, std::string_view title);

  struct TextStyle {
    double size = 12;
    std::string_view anchor = "start";  // start, middle, end
    bool bold = false;
    std::string_view fill = "#222";
    double rotate = 0;  // degrees, about (x, y)
    bool halo = false;  // a white outline under the letters: readable over lines
  };
  void Line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = "");
  void Polyline(const std::vector<double>& xs, const std::vector<double>& ys,
                std::string_view stroke, double width = 2, std::string_view dash = "");
  void Rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view stroke = "none");
  void Circle(double cx, double cy, double r, std::string_view fill);
  // A closed shape filled with `fill` at `opacity` (0..1), no outline: an interval band.
  void Polygon(const std::vector<double>& xs, const std::vector<double>& ys, std::string_view fill,
               double opacity);
  void Text(double x, double y, std::string_view text, const TextStyle& style);
  void Text(double x, double y, std::string_view text) { Text(x, y, text, TextStyle{}); }
  void BeginGroup(std::string_view css_class);
  void EndGroup();
  // The whole document; the writer is spent afterwards.
  std::string Finish();

 private:
  std::string out_;
  int open_groups_ = 0;
};

struct PlotSeries {
  std::string label;
  std::vector<double> xs, ys;  // same length; drawn in x order as given
  // Optional error bars: the 95% interval of each y (same length as ys, or empty). A point whose
  // lo > hi has none.
  std::vector<double> lo, hi;
  int colour = -1;        // index into the palette; -1: the series' own index
  bool dashed = false;    // a control: dotted and thinner, whatever the series' index
  bool greyed = false;    // grey, not a palette colour (a not-informative series)
  bool in_legend = true;  // false: no legend entry of its own (a control: see legend_extra)
  bool markers = false;   // a dot on every point of this series (LinePlotSpec::markers: all)
  // The intervals drawn as a shaded band between lo and hi (broken where a point has none)
  // instead of error bars: for series with many points close together.
  bool band = false;
};

// A dashed vertical line across a line plot at x, labelled (a stage of training beginning).
struct PlotXMark {
  double x = 0;
  std::string label;
};

struct LinePlotSpec {
  std::string name;  // data-plot attribute (the file's stem)
  std::string title;
  std::string x_label, y_label;    // with units, e.g. "position in the sequence (tokens)"
  bool x_log2 = false;             // log2 x axis with ticks at the data's x values
  bool markers = false;            // a dot on every point
  double x_marker = -1;            // > 0: a dashed vertical line there...
  std::string x_marker_label;      // ...with this label
  std::vector<PlotXMark> x_marks;  // more such lines (x >= 0), labels staggered down the plot
  bool y_share = false;            // y is a share: the axis spans 0 to 1 whatever the data
  std::vector<PlotSeries> series;
  std::string legend_extra;  // a last legend entry drawn as a grey dotted line ("control")
  std::string note;          // a line under the title (why a plot is greyed), "" for none
};
std::string LinePlotSvg(const LinePlotSpec& spec);

struct BarPlotSpec {
  std::string name, title, y_label;     // y_label: the value axis's label
  std::vector<std::string> categories;  // groups, one below the other
  std::vector<std::string> series;      // bars within a group (legend entries)
  // values[series][category] in [0, 1]; a negative value is missing: no bar, "n/a" written.
  std::vector<std::vector<double>> values;
  // Optional: the 95% interval of each value, same shape as values (or empty); lo > hi: none.
  std::vector<std::vector<double>> lo, hi;
  std::vector<bool> greyed;            // per category (or empty): bars grey, label marked "*"
  std::vector<std::string> footnotes;  // lines under the plot (what "*" means)
};
// Grouped horizontal bars: categories down the page, values from 0 to 1 across it, each bar's
// value written after it, error bars where known. Laid out this way the width is fixed
// (kPlotMaxWidth at most) however many categories there are: only the height grows.
std::string BarPlotSvg(const BarPlotSpec& spec);

// No plot is wider than this at its natural size (px); every plot also scales down to the width
// of the page (viewBox, and max-width: 100% in its style).
inline constexpr double kPlotMaxWidth = 1000;

struct HeatMapSpec {
  std::string name, title, x_label, y_label;
  std::vector<std::string> columns, rows;  // tick labels along x, along y (top to bottom)
  // values[row][column] in [0, 1]; negative: missing (grey, "-").
  std::vector<std::vector<double>> values;
  // Optional, same shape: the text written in each cell instead of its value ("3/5": counts
  // say how few trials a share rests on); an empty one writes the value.
  std::vector<std::vector<std::string>> labels;
  std::string scale_label;  // the colour scale's title, e.g. "accuracy"
  std::string note;         // a line under the title, "" for none
};
// Cells coloured by ScaleColour, the value written in each, a colour scale at the right.
std::string HeatMapSvg(const HeatMapSpec& spec);

}  // namespace stretch
