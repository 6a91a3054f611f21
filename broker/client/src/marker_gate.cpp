#include "marker_gate.hpp"

#include <algorithm>
#include <utility>

#include <catena/chain/key_map.hpp>

namespace catena::client_detail {

MarkerGate::MarkerGate(const std::vector<std::uint32_t>& partitions, const std::vector<bool>& tracked,
                       bool released_by_caller)
    : released_by_caller_(released_by_caller) {
  std::uint32_t top = 0;
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    parts_.push_back(Part{partitions[i], 0, i < tracked.size() && tracked[i], false});
    top = std::max(top, partitions[i] + 1);
  }
  index_of_.assign(top, -1);
  for (std::size_t i = 0; i < parts_.size(); ++i) index_of_[parts_[i].partition] = static_cast<int>(i);
}

void MarkerGate::add(std::uint32_t partition, bool tracked) {
  parts_.push_back(Part{partition, 0, tracked, false});
  if (index_of_.size() <= partition) index_of_.resize(partition + 1, -1);
  index_of_[partition] = static_cast<int>(parts_.size() - 1);
  recompute();
}

void MarkerGate::on_marker(std::size_t i, const chain::MarkerSpec& spec) {
  Part& p = parts_[i];
  p.reached = spec.generation;
  p.tracked = true;  // its markers come one generation after another from here
  auto it = std::lower_bound(specs_.begin(), specs_.end(), spec.generation,
                             [](const chain::MarkerSpec& s, std::uint64_t g) { return s.generation < g; });
  if (it == specs_.end() || it->generation != spec.generation) specs_.insert(it, spec);
  recompute();
}

void MarkerGate::jumped(std::size_t i, bool from_start) {
  Part& p = parts_[i];
  p.reached = 0;
  p.tracked = from_start;
  recompute();
}

void MarkerGate::release(std::size_t i, std::uint64_t generation) {
  Part& p = parts_[i];
  if (generation <= p.released) return;
  p.released = generation;
  recompute();
}

const chain::MarkerSpec* MarkerGate::spec_of(std::uint64_t generation) const {
  auto it = std::lower_bound(specs_.begin(), specs_.end(), generation,
                             [](const chain::MarkerSpec& s, std::uint64_t g) { return s.generation < g; });
  return it != specs_.end() && it->generation == generation ? &*it : nullptr;
}

void MarkerGate::recompute() {
  for (Part& p : parts_) {
    p.parked = false;
    if (p.reached == 0) continue;
    const chain::MarkerSpec* spec = spec_of(p.reached);
    if (spec == nullptr) continue;
    const auto from = static_cast<std::int32_t>(spec->from_partitions);
    const auto to = static_cast<std::int32_t>(spec->to_partitions);
    const auto self = static_cast<std::int32_t>(p.partition);
    if (self >= to) continue;  // removed by a shrink: no key comes, only a later grow's marker
    if (released_by_caller_ && p.reached > p.released) {
      p.parked = true;
      continue;
    }
    for (std::int32_t parent : chain::alter_parents(self, from, to)) {
      if (parent == self || static_cast<std::size_t>(parent) >= index_of_.size()) continue;
      const int j = index_of_[static_cast<std::size_t>(parent)];
      if (j < 0) continue;  // not read here: does not hold it back
      const Part& q = parts_[static_cast<std::size_t>(j)];
      if (q.tracked && q.reached < p.reached) {
        p.parked = true;
        break;
      }
    }
  }
  // Keep only the specs some partition still stands at.
  std::erase_if(specs_, [&](const chain::MarkerSpec& s) {
    return std::none_of(parts_.begin(), parts_.end(),
                        [&](const Part& p) { return p.reached == s.generation; });
  });
}

}  // namespace catena::client_detail
