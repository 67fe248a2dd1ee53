#include "src/report/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/core/error.h"

namespace stretch {
namespace {

constexpr std::string_view kGrid = "#e6e6e6";
constexpr std::string_view kFrame = "#888888";
constexpr std::string_view kMissing = "#d9d9d9";

// Coordinates with one decimal: a tenth of a pixel is below what a screen shows.
std::string Px(double v) { return fmt::format("{:.1f}", v); }

// Tick positions at 1, 2 or 5 times a power of ten, about `target` of them over [lo, hi].
double NiceStep(double lo, double hi, int target) {
  double span = hi - lo;
  if (!(span > 0)) span = std::max(1.0, std::abs(hi));
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

// Digits after the point that ticks `step` apart need.
int StepDecimals(double step) {
  return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
}

// A linear or log2 axis mapping data values to pixels [p0, p1].
struct Axis {
  double lo = 0, hi = 1;
  bool log2 = false;
  double p0 = 0, p1 = 1;
  std::vector<double> ticks;
  int decimals = 0;
  double Map(double v) const {
    const double t = log2 ? (std::log2(v) - lo) / (hi - lo) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
};

Axis LinearAxis(double min, double max, bool from_zero) {
  if (from_zero) min = std::min(min, 0.0);
  Axis a;
  const double step = NiceStep(min, max, 5);
  a.lo = std::floor(min / step + 1e-9) * step;
  a.hi = std::ceil(max / step - 1e-9) * step;
  if (a.hi <= a.lo) a.hi = a.lo + step;
  for (double v = a.lo; v <= a.hi + step * 1e-6; v += step) a.ticks.push_back(v);
  a.decimals = StepDecimals(step);
  return a;
}

Axis Log2Axis(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  Axis a;
  a.log2 = true;
  a.lo = std::log2(xs.front()) - 0.35;
  a.hi = std::log2(xs.back()) + 0.35;
  a.ticks = xs;
  return a;
}

struct Frame {
  double left, top, right, bottom;
};

// The y axis's grid lines, ticks and their labels, and the frame around the plot area.
void DrawYAxisAndFrame(SvgWriter& svg, const Frame& f, const Axis& y) {
  for (const double v : y.ticks) {
    const double py = y.Map(v);
    svg.Line(f.left, py, f.right, py, kGrid);
    svg.Line(f.left - 5, py, f.left, py, kFrame);
    svg.Text(f.left - 8, py + 4, FormatNumber(v, y.decimals), {.size = 11, .anchor = "end"});
  }
  svg.Rect(f.left, f.top, f.right - f.left, f.bottom - f.top, "none", kFrame);
}

// Title, axis labels, grid, ticks and their labels, the frame.
void DrawAxes(SvgWriter& svg, double width, double height, const Frame& f, const Axis& x,
              const Axis& y, std::string_view title, std::string_view x_label,
              std::string_view y_label) {
  svg.Text(width / 2, 26, title, {.size = 16, .anchor = "middle", .bold = true});
  svg.Text((f.left + f.right) / 2, height - 14, x_label, {.size = 13, .anchor = "middle"});
  svg.Text(18, (f.top + f.bottom) / 2, y_label, {.size = 13, .anchor = "middle", .rotate = -90});
  for (const double v : x.ticks) {
    const double px = x.Map(v);
    svg.Line(px, f.top, px, f.bottom, kGrid);
    svg.Line(px, f.bottom, px, f.bottom + 5, kFrame);
    svg.Text(px, f.bottom + 19, FormatNumber(v, x.decimals), {.size = 11, .anchor = "middle"});
  }
  DrawYAxisAndFrame(svg, f, y);
}

std::string_view SeriesColour(size_t i) { return kPlotPalette[i % std::size(kPlotPalette)]; }
std::string_view SeriesDash(size_t i) {
  static constexpr std::string_view kDashes[] = {"", "8 4", "2 3", "10 3 2 3"};
  return kDashes[(i / std::size(kPlotPalette)) % std::size(kDashes)];
}

constexpr std::string_view kGreyed = "#b0b0b0";

// A control's line (PlotSeries::dashed): dotted, thinner than the series' 2 px.
constexpr std::string_view kControlDash = "2 4";
constexpr double kControlWidth = 1.4;

// A label cut to `n` characters ("..." at the end), so that no legend or axis label widens a
// plot past kPlotMaxWidth; the full label stays in the tables.
std::string Shorten(const std::string& label, size_t n) {
  return label.size() <= n ? label : label.substr(0, n - 3) + "...";
}

// `text` broken at spaces into lines of at most `n` characters (a word longer than `n` cut, on a
// line of its own): a footnote that fits its plot's width instead of running past it.
std::vector<std::string> WrapWords(const std::string& text, size_t n) {
  std::vector<std::string> lines;
  std::string line;
  size_t at = 0;
  while (at < text.size()) {
    const size_t space = text.find(' ', at);
    const std::string word =
        Shorten(text.substr(at, space == std::string::npos ? text.npos : space - at), n);
    at = space == std::string::npos ? text.size() : space + 1;
    if (!line.empty() && line.size() + 1 + word.size() > n) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

size_t LongestLabel(const std::vector<std::string>& labels) {
  size_t n = 0;
  for (const std::string& s : labels) n = std::max(n, s.size());
  return n;
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string FormatNumber(double v, int decimals) {
  if (!std::isfinite(v)) return v != v ? "nan" : v > 0 ? "inf" : "-inf";
  if (std::abs(v - std::round(v)) < 1e-9 * std::max(1.0, std::abs(v))) {
    const double r = std::round(v);
    return fmt::format("{:.0f}", r == 0 ? 0.0 : r);
  }
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

std::string ScaleColour(double v) {
  // viridis at 0, 0.25, 0.5, 0.75, 1.
  static constexpr int kStops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  v = std::clamp(std::isfinite(v) ? v : 0.0, 0.0, 1.0);
  const double t = v * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  int rgb[3];
  for (int c = 0; c < 3; ++c) {
    rgb[c] = static_cast<int>(std::lround(kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c])));
  }
  return fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]);
}

SvgWriter::SvgWriter(double width, double height, std::string_view name, std::string_view title) {
  out_ = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" data-plot=\"{}\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\" style=\"max-width: 100%; height: auto\" "
      "font-family=\"sans-serif\">\n<title>{}</title>\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
      XmlEscape(name), Px(width), Px(height), Px(width), Px(height), XmlEscape(title), Px(width),
      Px(height));
}

void SvgWriter::Line(double x1, double y1, double x2, double y2, std::string_view stroke,
                     double width, std::string_view dash) {
  out_ += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
      Px(x1), Px(y1), Px(x2), Px(y2), XmlEscape(stroke), Px(width),
      dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", XmlEscape(dash)));
}

void SvgWriter::Polyline(const std::vector<double>& xs, const std::vector<double>& ys,
                         std::string_view stroke, double width, std::string_view dash) {
  if (xs.size() != ys.size()) Fail("SvgWriter::Polyline: {} x values, {} y", xs.size(), ys.size());
  std::string points;
  for (size_t i = 0; i < xs.size(); ++i) {
    points += fmt::format("{}{},{}", i ? " " : "", Px(xs[i]), Px(ys[i]));
  }
  out_ += fmt::format(
      "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
      "stroke-linejoin=\"round\"{}/>\n",
      points, XmlEscape(stroke), Px(width),
      dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", XmlEscape(dash)));
}

void SvgWriter::Rect(double x, double y, double w, double h, std::string_view fill,
                     std::string_view stroke) {
  out_ += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"{}\"/>\n", Px(x),
      Px(y), Px(std::max(0.0, w)), Px(std::max(0.0, h)), XmlEscape(fill), XmlEscape(stroke));
}

void SvgWriter::Circle(double cx, double cy, double r, std::string_view fill) {
  out_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>\n", Px(cx), Px(cy), Px(r),
                      XmlEscape(fill));
}

void SvgWriter::Polygon(const std::vector<double>& xs, const std::vector<double>& ys,
                        std::string_view fill, double opacity) {
  if (xs.size() != ys.size()) Fail("SvgWriter::Polygon: {} x values, {} y", xs.size(), ys.size());
  std::string points;
  for (size_t i = 0; i < xs.size(); ++i) {
    points += fmt::format("{}{},{}", i ? " " : "", Px(xs[i]), Px(ys[i]));
  }
  out_ += fmt::format("<polygon points=\"{}\" fill=\"{}\" fill-opacity=\"{}\" stroke=\"none\"/>\n",
                      points, XmlEscape(fill), FormatNumber(std::clamp(opacity, 0.0, 1.0), 2));
}

void SvgWriter::Text(double x, double y, std::string_view text, const TextStyle& s) {
  out_ += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\" fill=\"{}\"{}{}{}>", Px(x),
      Px(y), Px(s.size), XmlEscape(s.anchor), XmlEscape(s.fill),
      s.bold ? " font-weight=\"bold\"" : "",
      s.rotate != 0 ? fmt::format(" transform=\"rotate({} {} {})\"", Px(s.rotate), Px(x), Px(y))
                    : "",
      s.halo ? " stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\"" : "");
  out_ += XmlEscape(text);
  out_ += "</text>\n";
}

void SvgWriter::BeginGroup(std::string_view css_class) {
  out_ += fmt::format("<g class=\"{}\">\n", XmlEscape(css_class));
  ++open_groups_;
}

void SvgWriter::EndGroup() {
  if (open_groups_ == 0) Fail("SvgWriter::EndGroup without BeginGroup");
  out_ += "</g>\n";
  --open_groups_;
}

std::string SvgWriter::Finish() {
  while (open_groups_ > 0) EndGroup();
  out_ += "</svg>\n";
  return std::move(out_);
}

std::string LinePlotSvg(const LinePlotSpec& spec) {
  constexpr size_t kLegendChars = 44;
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min;
  std::vector<double> all_x;
  auto interval = [](const PlotSeries& s, size_t i, double& lo, double& hi) {
    if (i >= s.lo.size() || i >= s.hi.size() || !(s.lo[i] <= s.hi[i])) return false;
    lo = s.lo[i], hi = s.hi[i];
    return std::isfinite(lo) && std::isfinite(hi);
  };
  for (const PlotSeries& s : spec.series) {
    for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i) {
      if (!std::isfinite(s.xs[i]) || !std::isfinite(s.ys[i])) continue;
      if (spec.x_log2 && s.xs[i] <= 0) continue;
      x_min = std::min(x_min, s.xs[i]);
      x_max = std::max(x_max, s.xs[i]);
      y_min = std::min(y_min, s.ys[i]);
      y_max = std::max(y_max, s.ys[i]);
      double lo = 0, hi = 0;
      if (interval(s, i, lo, hi)) y_min = std::min(y_min, lo), y_max = std::max(y_max, hi);
      all_x.push_back(s.xs[i]);
    }
  }
  if (all_x.empty()) x_min = x_max = y_min = y_max = 1, all_x = {1};
  if (spec.x_marker > 0) x_max = std::max(x_max, spec.x_marker);
  for (const PlotXMark& m : spec.x_marks) {
    if (std::isfinite(m.x) && m.x >= 0 && !spec.x_log2) x_max = std::max(x_max, m.x);
  }
  if (spec.y_share) y_min = std::min(y_min, 0.0), y_max = std::max(y_max, 1.0);

  std::vector<std::string> labels;
  size_t entries = 0;
  for (const PlotSeries& s : spec.series) {
    if (!s.in_legend) continue;
    labels.push_back(Shorten(s.label, kLegendChars));
    ++entries;
  }
  if (!spec.legend_extra.empty())
    labels.push_back(Shorten(spec.legend_extra, kLegendChars)), ++entries;
  const double legend_w = std::max(120.0, 7.0 * LongestLabel(labels) + 50);
  const double top = spec.note.empty() ? 44 : 62;
  const double width = 560 + legend_w;
  const double height = std::max(420.0, top + 12 + 22.0 * entries + 62);
  const Frame f{78, top, 560 - 20, height - 62};
  Axis x = spec.x_log2 ? Log2Axis(all_x) : LinearAxis(x_min, x_max, /*from_zero=*/true);
  Axis y = LinearAxis(y_min, y_max, /*from_zero=*/false);
  x.p0 = f.left, x.p1 = f.right;
  y.p0 = f.bottom, y.p1 = f.top;

  SvgWriter svg(width, height, spec.name, spec.title);
  DrawAxes(svg, width, height, f, x, y, spec.title, spec.x_label, spec.y_label);
  if (!spec.note.empty()) {
    svg.Text(width / 2, 46, Shorten(spec.note, 130),
             {.size = 11, .anchor = "middle", .fill = "#666"});
  }
  if (spec.x_marker > 0) {
    const double px = x.Map(spec.x_marker);
    svg.Line(px, f.top, px, f.bottom, "#555555", 1.5, "6 4");
    svg.Text(px + 4, f.top + 14, spec.x_marker_label, {.size = 11, .fill = "#444"});
  }
  // The marks' lines under the data; their labels over it (below).
  for (const PlotXMark& m : spec.x_marks) {
    if (!std::isfinite(m.x) || m.x < 0 || spec.x_log2) continue;
    const double px = x.Map(m.x);
    svg.Line(px, f.top, px, f.bottom, "#555555", 1.2, "6 4");
  }
  auto colour = [&](size_t k) {
    const PlotSeries& s = spec.series[k];
    if (s.greyed) return kGreyed;
    return SeriesColour(s.colour >= 0 ? static_cast<size_t>(s.colour) : k);
  };
  // A control is dotted and thinner than any series, so that it is not taken for the dashed lines
  // of the series past the palette ("8 4" from the ninth on).
  auto dash = [&](size_t k) {
    const PlotSeries& s = spec.series[k];
    if (s.dashed) return kControlDash;
    return SeriesDash(s.colour >= 0 ? static_cast<size_t>(s.colour) : k);
  };
  svg.BeginGroup("data");
  for (size_t k = 0; k < spec.series.size(); ++k) {
    const PlotSeries& s = spec.series[k];
    std::vector<double> px, py;
    std::vector<double> band_x, band_lo, band_hi;  // the band's run of points so far
    auto close_band = [&] {
      if (band_x.size() >= 2) {
        std::vector<double> bx(band_x), by(band_hi);
        bx.insert(bx.end(), band_x.rbegin(), band_x.rend());
        by.insert(by.end(), band_lo.rbegin(), band_lo.rend());
        svg.Polygon(bx, by, colour(k), 0.15);
      } else if (band_x.size() == 1) {  // a lone point: its error bar
        svg.Line(band_x[0], band_lo[0], band_x[0], band_hi[0], colour(k), 1.2);
      }
      band_x.clear(), band_lo.clear(), band_hi.clear();
    };
    for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i) {
      if (!std::isfinite(s.xs[i]) || !std::isfinite(s.ys[i])) continue;
      if (spec.x_log2 && s.xs[i] <= 0) continue;
      px.push_back(x.Map(s.xs[i]));
      py.push_back(y.Map(s.ys[i]));
      double lo = 0, hi = 0;
      const bool known = interval(s, i, lo, hi);
      if (s.band) {
        if (!known) {
          close_band();
          continue;
        }
        band_x.push_back(px.back()), band_lo.push_back(y.Map(lo)), band_hi.push_back(y.Map(hi));
        continue;
      }
      if (known) {  // the error bar, with caps
        const double a = y.Map(lo), b = y.Map(hi);
        svg.Line(px.back(), a, px.back(), b, colour(k), 1.2);
        svg.Line(px.back() - 3, a, px.back() + 3, a, colour(k), 1.2);
        svg.Line(px.back() - 3, b, px.back() + 3, b, colour(k), 1.2);
      }
    }
    close_band();
    svg.Polyline(px, py, colour(k), s.dashed ? kControlWidth : 2, dash(k));
    if (spec.markers || s.markers || px.size() == 1) {  // a control's dots smaller
      for (size_t i = 0; i < px.size(); ++i)
        svg.Circle(px[i], py[i], s.dashed ? 2 : 3.5, colour(k));
    }
  }
  svg.EndGroup();
  // Each mark's label in the first row down where it clears the labels already there (11 px
  // text, about 6.2 px a character), on a white halo: stages a few steps apart neither overprint
  // each other nor vanish under the data (a reviewer found "2: gapped" across "3: small").
  std::vector<double> row_ends;  // per row, where its last label ends
  for (const PlotXMark& m : spec.x_marks) {
    if (!std::isfinite(m.x) || m.x < 0 || spec.x_log2) continue;
    const double px = x.Map(m.x) + 4;
    const std::string label = Shorten(m.label, 30);
    size_t r = 0;
    while (r < row_ends.size() && row_ends[r] > px) ++r;
    if (r == row_ends.size()) row_ends.push_back(0);
    row_ends[r] = px + 6.2 * static_cast<double>(label.size()) + 4;
    svg.Text(px, f.top + 14 + 14 * static_cast<double>(r), label,
             {.size = 11, .fill = "#444", .halo = true});
  }
  svg.BeginGroup("legend");
  size_t row = 0;
  for (size_t k = 0; k < spec.series.size(); ++k) {
    if (!spec.series[k].in_legend) continue;
    const double ly = f.top + 12 + 22 * row++;
    svg.Line(f.right + 16, ly - 4, f.right + 40, ly - 4, colour(k), 2.5, dash(k));
    svg.Text(f.right + 46, ly, Shorten(spec.series[k].label, kLegendChars));
  }
  if (!spec.legend_extra.empty()) {
    const double ly = f.top + 12 + 22 * row;
    svg.Line(f.right + 16, ly - 4, f.right + 40, ly - 4, "#666666", kControlWidth, kControlDash);
    svg.Text(f.right + 46, ly, Shorten(spec.legend_extra, kLegendChars));
  }
  svg.EndGroup();
  return svg.Finish();
}

std::string BarPlotSvg(const BarPlotSpec& spec) {
  constexpr size_t kLabelChars = 52;
  const size_t n = spec.categories.size(), s = spec.series.size();
  const double bar_h = 13, gap = 12;
  const double group_h = s * bar_h + gap;
  std::vector<std::string> labels;
  for (size_t c = 0; c < n; ++c) {
    const bool grey = c < spec.greyed.size() && spec.greyed[c];
    labels.push_back(Shorten(spec.categories[c], kLabelChars) + (grey ? " *" : ""));
  }
  const double label_w = std::max(60.0, 6.4 * LongestLabel(labels) + 16);
  const double plot_w = 520;
  const double legend_top = 44, legend_h = 20.0 * s;
  const double top = legend_top + legend_h + 8;
  const Frame f{label_w + 10, top, label_w + 10 + plot_w,
                top + std::max(1.0, static_cast<double>(n)) * group_h};
  const double width = std::min(kPlotMaxWidth, f.right + 50);
  // The footnotes wrapped to the width (11 px text: about 6.2 px a character), 4 lines each at
  // most; the callers' captions carry the whole text.
  std::vector<std::string> footnote_lines;
  const size_t per_line = static_cast<size_t>((width - 24) / 6.2);
  for (const std::string& note : spec.footnotes) {
    std::vector<std::string> lines = WrapWords(note, per_line);
    if (lines.size() > 4) {
      lines.resize(4);
      lines.back() = Shorten(lines.back() + " ...", per_line);
    }
    footnote_lines.insert(footnote_lines.end(), lines.begin(), lines.end());
  }
  const double height = f.bottom + 56 + 16.0 * footnote_lines.size();
  Axis x = LinearAxis(0, 1, /*from_zero=*/true);
  x.p0 = f.left, x.p1 = f.right;

  SvgWriter svg(width, height, spec.name, spec.title);
  svg.Text(width / 2, 26, spec.title, {.size = 16, .anchor = "middle", .bold = true});
  svg.Text((f.left + f.right) / 2, f.bottom + 40, spec.y_label, {.size = 13, .anchor = "middle"});
  for (const double v : x.ticks) {
    const double px = x.Map(v);
    svg.Line(px, f.top, px, f.bottom, kGrid);
    svg.Line(px, f.bottom, px, f.bottom + 5, kFrame);
    svg.Text(px, f.bottom + 19, FormatNumber(v, x.decimals), {.size = 11, .anchor = "middle"});
  }
  svg.Rect(f.left, f.top, f.right - f.left, f.bottom - f.top, "none", kFrame);
  auto at = [](const std::vector<std::vector<double>>& m, size_t k, size_t c) {
    return k < m.size() && c < m[k].size() ? m[k][c] : std::nan("");
  };
  svg.BeginGroup("data");
  for (size_t c = 0; c < n; ++c) {
    const double gy = f.top + gap / 2 + c * group_h;
    const bool grey = c < spec.greyed.size() && spec.greyed[c];
    for (size_t k = 0; k < s; ++k) {
      const double v = at(spec.values, k, c);
      const double by = gy + k * bar_h;
      if (!(v >= 0) || !std::isfinite(v)) {
        svg.Text(f.left + 4, by + bar_h - 3, "n/a", {.size = 9});
        continue;
      }
      const double right = x.Map(std::min(v, 1.0));
      const std::string_view fill = grey ? kGreyed : SeriesColour(k);
      svg.Rect(f.left, by + 1, right - f.left, bar_h - 2, fill);
      double end = right;
      const double lo = at(spec.lo, k, c), hi = at(spec.hi, k, c);
      if (lo <= hi && std::isfinite(lo) && std::isfinite(hi)) {
        const double a = x.Map(std::clamp(lo, 0.0, 1.0)), b = x.Map(std::clamp(hi, 0.0, 1.0));
        const double my = by + bar_h / 2;
        svg.Line(a, my, b, my, "#222222", 1.2);
        svg.Line(a, my - 3, a, my + 3, "#222222", 1.2);
        svg.Line(b, my - 3, b, my + 3, "#222222", 1.2);
        end = std::max(end, b);
      }
      svg.Text(end + 4, by + bar_h - 3, fmt::format("{:.2f}", v), {.size = 9});
    }
  }
  svg.EndGroup();
  for (size_t c = 0; c < n; ++c) {
    const double cy = f.top + gap / 2 + c * group_h + s * bar_h / 2 + 4;
    svg.Text(f.left - 8, cy, labels[c], {.size = 11, .anchor = "end"});
  }
  svg.BeginGroup("legend");
  for (size_t k = 0; k < s; ++k) {
    const double ly = legend_top + 14 + 20 * k;
    svg.Rect(f.left, ly - 10, 14, 14, SeriesColour(k));
    svg.Text(f.left + 20, ly, spec.series[k]);
  }
  svg.EndGroup();
  for (size_t i = 0; i < footnote_lines.size(); ++i) {
    svg.Text(12, f.bottom + 62 + 16 * i, footnote_lines[i], {.size = 11, .fill = "#555"});
  }
  return svg.Finish();
}

std::string HeatMapSvg(const HeatMapSpec& spec) {
  const size_t nc = spec.columns.size(), nr = spec.rows.size();
  // Cells at least 30 px high, and the map at least 200 px high so that the y label fits.
  // Cells 72 px wide, narrower when there are so many columns that the map would pass
  // kPlotMaxWidth (the colour scale and its labels take 134 px at the right).
  const double cell_w =
      std::clamp((kPlotMaxWidth - 96 - 134) / std::max<size_t>(1, nc), 36.0, 72.0);
  const double cell_h = std::max(30.0, 200.0 / std::max<size_t>(1, nr));
  const double top = spec.note.empty() ? 44 : 60;
  const Frame f{96, top, 96 + nc * cell_w, top + std::max<size_t>(1, nr) * cell_h};
  const double scale_x = f.right + 28, scale_h = std::max(100.0, f.bottom - f.top);
  const double width =
      std::min(kPlotMaxWidth, std::max(scale_x + 16 + 90, 10.0 * spec.title.size() + 40));
  const double height = std::max(f.bottom, f.top + scale_h) + 56;

  SvgWriter svg(width, height, spec.name, spec.title);
  svg.Text(width / 2, 26, Shorten(spec.title, 95), {.size = 16, .anchor = "middle", .bold = true});
  if (!spec.note.empty()) {
    svg.Text(width / 2, 42, Shorten(spec.note, 130),
             {.size = 11, .anchor = "middle", .fill = "#666"});
  }
  svg.Text((f.left + f.right) / 2, height - 14, spec.x_label, {.size = 13, .anchor = "middle"});
  svg.Text(18, (f.top + f.bottom) / 2, spec.y_label,
           {.size = 13, .anchor = "middle", .rotate = -90});
  svg.BeginGroup("data");
  for (size_t r = 0; r < nr; ++r) {
    for (size_t c = 0; c < nc; ++c) {
      const double v = r < spec.values.size() && c < spec.values[r].size() ? spec.values[r][c] : -1;
      const bool missing = v < 0 || !std::isfinite(v);
      const double x = f.left + c * cell_w, y = f.top + r * cell_h;
      svg.Rect(x, y, cell_w, cell_h, missing ? std::string(kMissing) : ScaleColour(v), "#ffffff");
      const std::string label =
          r < spec.labels.size() && c < spec.labels[r].size() ? spec.labels[r][c] : "";
      svg.Text(x + cell_w / 2, y + cell_h / 2 + 4,
               missing         ? std::string("-")
               : label.empty() ? fmt::format("{:.2f}", v)
                               : label,
               {.size = 11, .anchor = "middle", .fill = !missing && v < 0.55 ? "#ffffff" : "#111"});
    }
  }
  svg.EndGroup();
  for (size_t c = 0; c < nc; ++c) {
    svg.Text(f.left + (c + 0.5) * cell_w, f.bottom + 18, spec.columns[c],
             {.size = 11, .anchor = "middle"});
  }
  for (size_t r = 0; r < nr; ++r) {
    svg.Text(f.left - 8, f.top + (r + 0.5) * cell_h + 4, spec.rows[r],
             {.size = 11, .anchor = "end"});
  }
  // The colour scale: 20 steps from 1 (top) to 0 (bottom).
  svg.BeginGroup("legend");
  svg.Text(scale_x + 8, f.top - 8, spec.scale_label, {.size = 11, .anchor = "middle"});
  constexpr int kSteps = 20;
  for (int i = 0; i < kSteps; ++i) {
    const double v = 1.0 - (i + 0.5) / kSteps;
    svg.Rect(scale_x, f.top + i * scale_h / kSteps, 16, scale_h / kSteps + 0.5, ScaleColour(v));
  }
  svg.Rect(scale_x, f.top, 16, scale_h, "none", kFrame);
  for (const double v : {0.0, 0.5, 1.0}) {
    svg.Text(scale_x + 22, f.top + (1 - v) * scale_h + 4, FormatNumber(v, 1), {.size = 11});
  }
  svg.EndGroup();
  return svg.Finish();
}

}  // namespace stretch
