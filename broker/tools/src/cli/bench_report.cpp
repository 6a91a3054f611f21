// The files `catena bench` leaves next to its JSON (bench_parts.hpp,
// BenchFiles): .hgrm distributions.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_parts.hpp"
#include "hgrm.hpp"

namespace catena::cli::bench_detail {

namespace fs = std::filesystem;

namespace {

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

}  // namespace

std::string BenchFiles::open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
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
  return path.string();
}

void BenchFiles::append_json(const std::string& line) {
  if (dir_.empty()) return;
  std::ofstream out(fs::path(dir_) / "bench.jsonl", std::ios::app);
  out << line << "\n";
}

}  // namespace catena::cli::bench_detail
