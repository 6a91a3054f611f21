// The simulation's event log: every decision the schedule takes and every
// outcome it observes (acks, deliveries, routes, faults) goes in as one
// line. The log is hashed as it grows, so two runs of one seed are compared
// by their hashes; the last lines are kept to print with a failure.
//
// Threading: the simulation thread only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>
#include <string_view>

namespace catena::sim {

class Trace {
 public:
  explicit Trace(std::size_t keep = 60) : keep_(keep) {}

  void add(std::uint64_t now_ns, std::string_view line) {
    std::string entry = std::to_string(now_ns / 1000) + "us " + std::string(line);
    for (unsigned char c : entry) hash_ = (hash_ ^ c) * 0x100000001b3ull;  // FNV-1a
    hash_ = (hash_ ^ '\n') * 0x100000001b3ull;
    ++events_;
    if (verbose_) std::fprintf(stderr, "  %s\n", entry.c_str());
    tail_.push_back(std::move(entry));
    if (tail_.size() > keep_) tail_.pop_front();
  }

  [[nodiscard]] std::uint64_t hash() const { return hash_; }
  [[nodiscard]] std::uint64_t events() const { return events_; }
  [[nodiscard]] std::string tail() const {
    std::string out;
    for (const auto& l : tail_) out += "  " + l + "\n";
    return out;
  }
  void set_verbose(bool v) { verbose_ = v; }

 private:
  std::size_t keep_;
  std::deque<std::string> tail_;
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
  std::uint64_t events_ = 0;
  bool verbose_ = false;
};

}  // namespace catena::sim
