// The files `catena bench` leaves next to its JSON (bench_parts.hpp,
// BenchFiles): .hgrm distributions and their SVG plot.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_parts.hpp"
#include "hgrm.hpp"
#include "latency_plot.hpp"

namespace catena::cli::bench_detail {

namespace fs = std::filesystem;

namespace {

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The curves of the named .hgrm files in `dir`; a file that is not a
// distribution is left out and said on stderr.
std::vector<bench::PlotCurve> curves_of(const fs::path& dir, const std::vector<std::string>& names) {
  std::vector<bench::PlotCurve> curves;
  for (const auto& name : names) {
    const fs::path path = dir / (name + ".hgrm");
    auto text = read_file(path);
    bench::PlotCurve c{name, {}};
    std::string error;
    if (!text) {
      std::fprintf(stderr, "catena: bench: cannot read %s\n", path.c_str());
    } else if (!bench::parse_hgrm(*text, &c.points, &error)) {
      std::fprintf(stderr, "catena: bench: %s: %s (left out of the plot)\n", path.c_str(), error.c_str());
    } else {
      curves.push_back(std::move(c));
    }
  }
  return curves;
}

std::string draw(const fs::path& dir, const std::vector<std::string>& names, const std::string& title) {
  const fs::path svg = dir / "latency.svg";
  if (!write_file(svg, bench::latency_plot_svg(curves_of(dir, names), title))) {
    std::fprintf(stderr, "catena: bench: cannot write %s\n", svg.c_str());
    return "";
  }
  return svg.string();
}

}  // namespace

std::string BenchFiles::open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    return "--out-dir " + dir + ": " + (ec ? ec.message() : std::string("not a directory"));
  }
  if (!write_file(fs::path(dir) / "bench.jsonl", ""))
    return "--out-dir " + dir + ": cannot write bench.jsonl";
  dir_ = dir;
  return "";
}

std::string BenchFiles::write_hgrm(const std::string& name, const std::vector<std::uint64_t>& samples_ns) {
  if (dir_.empty()) return "";
  const fs::path path = fs::path(dir_) / (name + ".hgrm");
  if (!write_file(path, bench::hgrm_text(samples_ns))) {
    std::fprintf(stderr, "catena: bench: cannot write %s\n", path.c_str());
    return "";
  }
  if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.push_back(name);
  return path.string();
}

void BenchFiles::append_json(const std::string& line) {
  if (dir_.empty()) return;
  std::ofstream out(fs::path(dir_) / "bench.jsonl", std::ios::app);
  out << line << "\n";
}

std::string BenchFiles::plot(const std::string& title) {
  if (dir_.empty() || names_.empty()) return "";
  return draw(dir_, names_, title);
}

int replot(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "catena: bench --replot: %s is not a directory\n", dir.c_str());
    return 2;
  }
  std::vector<std::string> names;
  int rc = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".samples") continue;
    const fs::path hgrm = fs::path(e.path()).replace_extension(".hgrm");
    if (fs::exists(hgrm)) continue;
    std::ifstream in(e.path());
    std::vector<std::uint64_t> ns;
    std::string tok;
    bool bad = false;
    while (in >> tok) {
      std::size_t used = 0;
      try {
        ns.push_back(std::stoull(tok, &used));
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != tok.size()) {
        std::fprintf(stderr, "catena: bench --replot: %s: '%s' is not a sample in ns\n", e.path().c_str(),
                     tok.c_str());
        bad = true;
        break;
      }
    }
    if (bad) {
      rc = 1;  // the others are still plotted
      continue;
    }
    if (!write_file(hgrm, bench::hgrm_text(ns))) {
      std::fprintf(stderr, "catena: bench --replot: cannot write %s\n", hgrm.c_str());
      return 1;
    }
    std::printf("%s (%zu samples)\n", hgrm.c_str(), ns.size());
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".hgrm") names.push_back(e.path().stem().string());
  }
  if (ec) {
    std::fprintf(stderr, "catena: bench --replot: %s: %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    std::fprintf(stderr, "catena: bench --replot: no .hgrm or .samples files in %s\n", dir.c_str());
    return 1;
  }
  const std::string svg = draw(dir, names, "latency by percentile (" + dir + ")");
  if (svg.empty()) return 1;
  std::printf("%s (%zu curves)\n", svg.c_str(), names.size());
  return rc;
}

}  // namespace catena::cli::bench_detail
