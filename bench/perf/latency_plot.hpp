// Latency by percentile, several curves in one SVG image: the plot
// HdrHistogram's own plotter draws from .hgrm files (x: percentile on the
// 1/(1-p) log scale, 0% 90% 99% 99.9% ...; y: latency), drawn here so that
// `catena bench` needs no external program.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hgrm.hpp"

namespace catena::bench {

struct PlotCurve {
  std::string name;  // the legend's label, and the curve's <title>
  std::vector<HgrmPoint> points;
};

// A standalone SVG document: one <polyline class="curve"> per curve (in a
// <g> whose data-name is the curve's name), a legend naming each, axes
// labelled in percent and `unit`. The 100% point (the maximum) is drawn at
// 1/(1-p) = its total count, where the last of that many samples sits.
std::string latency_plot_svg(const std::vector<PlotCurve>& curves, std::string_view title,
                             std::string_view unit = "us");

}  // namespace catena::bench
