#include "latency_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace catena::bench {
namespace {

constexpr double kWidth = 1060, kHeight = 540;
constexpr double kLeft = 80, kRight = 330, kTop = 50, kBottom = 60;  // right: the legend
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// x = log10(1 / (1 - p)): 0 at 0%, 1 at 90%, 2 at 99%...
double log_x(const HgrmPoint& p) {
  if (p.percentile >= 1.0) return std::log10(std::max<double>(1.0, static_cast<double>(p.total_count)));
  return std::log10(1.0 / (1.0 - p.percentile));
}

// "0%", "90%", "99%", "99.9%", ... for x = k.
std::string percent_label(int k) {
  if (k == 0) return "0%";
  if (k == 1) return "90%";
  return "99" + (k > 2 ? "." + std::string(static_cast<std::size_t>(k - 2), '9') : std::string()) + "%";
}

// The smallest 1, 2 or 5 x 10^n at or above v.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double decade = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * decade >= v * (1 - 1e-12)) return m * decade;
  }
  return 10 * decade;
}

}  // namespace

std::string latency_plot_svg(const std::vector<PlotCurve>& curves, std::string_view title,
                             std::string_view unit) {
  double max_x = 1, max_y = 0;
  for (const auto& c : curves) {
    for (const auto& p : c.points) {
      max_x = std::max(max_x, log_x(p));
      max_y = std::max(max_y, p.value);
    }
  }
  const int decades = static_cast<int>(std::ceil(max_x - 1e-9));
  const double y_top = nice_ceiling(max_y);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + plot_w * x / decades; };
  auto py = [&](double y) { return kTop + plot_h * (1 - y / y_top); };

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" + num(kHeight) +
       "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + escape(title) + "</title>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kLeft) + "\" y=\"28\" font-size=\"15\">" + escape(title) + "</text>\n";
  // Grid and axes.
  s += "<g class=\"axes\" stroke=\"#cccccc\" stroke-width=\"1\">\n";
  for (int k = 0; k <= decades; ++k) {
    s += "<line x1=\"" + num(px(k)) + "\" y1=\"" + num(py(0)) + "\" x2=\"" + num(px(k)) + "\" y2=\"" +
         num(py(y_top)) + "\"/>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double y = y_top * i / 5;
    s += "<line x1=\"" + num(px(0)) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(px(decades)) + "\" y2=\"" +
         num(py(y)) + "\"/>\n";
  }
  s += "</g>\n<g class=\"labels\" fill=\"black\">\n";
  for (int k = 0; k <= decades; ++k) {
    s += "<text x=\"" + num(px(k)) + "\" y=\"" + num(py(0) + 18) + "\" text-anchor=\"middle\">" +
         escape(percent_label(k)) + "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", y_top * i / 5);
    s += "<text x=\"" + num(px(0) - 6) + "\" y=\"" + num(py(y_top * i / 5) + 4) + "\" text-anchor=\"end\">" +
         v + "</text>\n";
  }
  s += "<text x=\"" + num(kLeft + plot_w / 2) + "\" y=\"" + num(kHeight - 15) +
       "\" text-anchor=\"middle\">percentile</text>\n";
  s += "<text x=\"18\" y=\"" + num(kTop + plot_h / 2) +
       "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " + num(kTop + plot_h / 2) + ")\">latency (" +
       escape(unit) + ")</text>\n";
  s += "</g>\n";
  // One curve each, then its legend entry.
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const auto& c = curves[i];
    const char* color = kColors[i % std::size(kColors)];
    s += "<g class=\"curve\" data-name=\"" + escape(c.name) + "\">\n<title>" + escape(c.name) + "</title>\n";
    s += "<polyline class=\"curve\" fill=\"none\" stroke=\"" + std::string(color) +
         "\" stroke-width=\"2\" points=\"";
    double last_x = 0;
    for (std::size_t j = 0; j < c.points.size(); ++j) {
      last_x = std::max(last_x, log_x(c.points[j]));
      if (j > 0) s += " ";
      s += num(px(last_x)) + "," + num(py(c.points[j].value));
    }
    s += "\"/>\n";
    const double ly = kTop + 10 + 20 * static_cast<double>(i);
    const double lx = kWidth - kRight + 15;
    s += "<line class=\"legend\" x1=\"" + num(lx) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(lx + 25) +
         "\" y2=\"" + num(ly) + "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
    s += "<text class=\"legend\" x=\"" + num(lx + 32) + "\" y=\"" + num(ly + 4) + "\">" + escape(c.name) +
         "</text>\n</g>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace catena::bench
