// The SVG plot `catena bench --out-dir` draws from its .hgrm files, parsed
// back with a real XML parser (expat): well-formed, one curve per row,
// named, its points inside the plot and in percentile order.
#include "latency_plot.hpp"

#include <expat.h>

#include <cstdint>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "hgrm.hpp"

namespace catena::bench {
namespace {

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;
  int depth = 0;
  [[nodiscard]] std::string attr(const std::string& key) const {
    const auto it = attrs.find(key);
    return it == attrs.end() ? std::string() : it->second;
  }
};

// Every element of `xml` in document order; false (and `error`) if expat
// finds it malformed.
bool parse_xml(const std::string& xml, std::vector<Element>* out, std::string* error) {
  struct State {
    std::vector<Element>* out;
    std::vector<std::size_t> open;
  } st{out, {}};
  XML_Parser p = XML_ParserCreate("UTF-8");
  XML_SetUserData(p, &st);
  XML_SetElementHandler(
      p,
      [](void* ud, const XML_Char* name, const XML_Char** atts) {
        auto* s = static_cast<State*>(ud);
        Element e;
        e.name = name;
        e.depth = static_cast<int>(s->open.size());
        for (int i = 0; atts[i] != nullptr; i += 2) e.attrs[atts[i]] = atts[i + 1];
        s->open.push_back(s->out->size());
        s->out->push_back(std::move(e));
      },
      [](void* ud, const XML_Char*) { static_cast<State*>(ud)->open.pop_back(); });
  XML_SetCharacterDataHandler(p, [](void* ud, const XML_Char* s, int len) {
    auto* st = static_cast<State*>(ud);
    if (!st->open.empty()) (*st->out)[st->open.back()].text.append(s, static_cast<std::size_t>(len));
  });
  const bool ok = XML_Parse(p, xml.data(), static_cast<int>(xml.size()), 1) == XML_STATUS_OK;
  if (!ok) {
    *error = std::string(XML_ErrorString(XML_GetErrorCode(p))) + " at line " +
             std::to_string(XML_GetCurrentLineNumber(p));
  }
  XML_ParserFree(p);
  return ok;
}

PlotCurve curve(const std::string& name, std::uint64_t base_ns, std::uint64_t spread_ns) {
  std::vector<std::uint64_t> ns;
  for (std::uint64_t i = 0; i < 5000; ++i) ns.push_back(base_ns + (i * 7919) % 5003 * spread_ns / 5003);
  ns.push_back(base_ns * 20);  // one outlier: the maximum
  PlotCurve c{name, {}};
  std::string error;
  EXPECT_TRUE(parse_hgrm(hgrm_text(ns), &c.points, &error)) << error;
  return c;
}

TEST(LatencyPlot, OneNamedCurvePerRowInWellFormedSvg) {
  // Names with characters XML must escape.
  const std::vector<PlotCurve> curves{curve("catena-commit_ack_latency-64B", 20000, 10000),
                                      curve("floor", 8000, 2000),
                                      curve("nats <R=3> & \"64B\"", 90000, 60000)};
  const std::string svg = latency_plot_svg(curves, "catena bench: latency by percentile");
  std::vector<Element> els;
  std::string error;
  ASSERT_TRUE(parse_xml(svg, &els, &error)) << error << "\n" << svg;
  ASSERT_FALSE(els.empty());
  EXPECT_EQ(els[0].name, "svg");
  EXPECT_EQ(els[0].attr("xmlns"), "http://www.w3.org/2000/svg");
  const double width = std::stod(els[0].attr("width")), height = std::stod(els[0].attr("height"));

  std::vector<std::string> names, legend;
  for (std::size_t i = 0; i < els.size(); ++i) {
    const Element& e = els[i];
    if (e.name == "g" && e.attr("class") == "curve") names.push_back(e.attr("data-name"));
    if (e.name == "text" && e.attr("class") == "legend") legend.push_back(e.text);
    if (e.name != "polyline") continue;
    // Points: inside the image, x never going back (percentile order),
    // one per line of the curve's distribution.
    std::istringstream pts(e.attr("points"));
    std::size_t n = 0;
    double last_x = -1;
    for (std::string xy; pts >> xy; ++n) {
      const auto comma = xy.find(',');
      ASSERT_NE(comma, std::string::npos) << xy;
      const double x = std::stod(xy.substr(0, comma)), y = std::stod(xy.substr(comma + 1));
      EXPECT_GE(x, last_x) << xy;
      EXPECT_GT(x, 0);
      EXPECT_LT(x, width);
      EXPECT_GT(y, 0);
      EXPECT_LT(y, height);
      last_x = x;
    }
    EXPECT_EQ(n, curves[names.size() - 1].points.size()) << names.back();
  }
  const std::vector<std::string> want{"catena-commit_ack_latency-64B", "floor", "nats <R=3> & \"64B\""};
  EXPECT_EQ(names, want);
  EXPECT_EQ(legend, want);

  // The x axis: 0%, 90%, 99%, 99.9%, 99.99% (5001 samples reach 99.98%).
  std::vector<std::string> ticks;
  for (const auto& e : els) {
    if (e.name == "text" && !e.text.empty() && e.text.back() == '%') ticks.push_back(e.text);
  }
  EXPECT_EQ(ticks, (std::vector<std::string>{"0%", "90%", "99%", "99.9%", "99.99%"}));
}

TEST(LatencyPlot, NoCurvesStillAnImage) {
  std::vector<Element> els;
  std::string error;
  ASSERT_TRUE(parse_xml(latency_plot_svg({}, "empty"), &els, &error)) << error;
  for (const auto& e : els) EXPECT_NE(e.name, "polyline");
}

}  // namespace
}  // namespace catena::bench
