#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <string_view>
#include <tuple>

#include <catena/control/placement.hpp>

namespace catena::control {

void add_roles(const std::vector<std::string>& chain, std::map<std::string, ChainRoles>& into) {
  if (chain.empty()) return;
  ++into[chain.front()].heads;
  ++into[chain.back()].tails;
}

PlacementCandidate& Placement::candidate(const std::string& id) {
  return *std::find_if(candidates_.begin(), candidates_.end(),
                       [&](const PlacementCandidate& c) { return c.node_id == id; });
}

Result<std::vector<std::string>> Placement::choose(int count, std::vector<std::string> member_zones,
                                                   const std::set<std::string>& exclude,
                                                   const PlacementPreference& prefer) {
  auto chosen = pick(count, std::move(member_zones), exclude, prefer, Joins::behind_tail);
  if (chosen && !chosen->empty()) ++candidate(chosen->back()).tails;
  return chosen;
}

Result<std::vector<std::string>> Placement::choose_chain(int count, const std::set<std::string>& exclude,
                                                         const PlacementPreference& prefer) {
  auto chosen = pick(count, {}, exclude, prefer, Joins::new_chain);
  if (!chosen || chosen->empty()) return chosen;
  // The head: fewest heads, then fewest tails, then the earliest pick; the
  // tail, among the others: fewest tails, then fewest heads, then the latest
  // pick (so a chain among equals keeps the pick order).
  std::vector<std::string> order = std::move(*chosen);
  auto roles = [&](const std::string& id, bool heads) {
    const auto& c = candidate(id);
    return heads ? std::make_pair(c.heads, c.tails) : std::make_pair(c.tails, c.heads);
  };
  auto head = order.begin();
  for (auto it = order.begin(); it != order.end(); ++it) {
    if (roles(*it, true) < roles(*head, true)) head = it;
  }
  std::rotate(order.begin(), head, head + 1);
  if (order.size() > 1) {
    auto tail = order.end() - 1;
    for (auto it = order.begin() + 1; it != order.end(); ++it) {
      if (roles(*it, false) <= roles(*tail, false)) tail = it;
    }
    std::rotate(tail, tail + 1, order.end());
  }
  ++candidate(order.front()).heads;
  ++candidate(order.back()).tails;
  return order;
}

Result<std::vector<std::string>> Placement::pick(int count, std::vector<std::string> member_zones,
                                                 const std::set<std::string>& exclude,
                                                 const PlacementPreference& prefer, Joins joins) {
  std::vector<std::size_t> eligible;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    if (exclude.count(candidates_[i].node_id) == 0) eligible.push_back(i);
  }
  if (count < 0 || eligible.size() < static_cast<std::size_t>(count)) {
    return make_error(
        idl::ErrorCode::NOT_ENOUGH_NODES,
        fmt::format("need {} more alive node(s) for this chain, only {} eligible", count, eligible.size()));
  }
  std::map<std::string, int> zone_use;
  for (const auto& z : member_zones) ++zone_use[z];

  std::vector<std::string> chosen;
  for (int k = 0; k < count; ++k) {
    auto key = [&](std::size_t i) {
      const auto& c = candidates_[i];
      const auto it = zone_use.find(c.zone);
      const int use = it == zone_use.end() ? 0 : it->second;
      const bool other_zone = prefer.zones.count(c.zone) == 0;
      const bool other_datacenter =
          !prefer.datacenters.empty() && prefer.datacenters.count(c.datacenter) == 0;
      const std::int64_t roles = joins == Joins::new_chain ? c.heads + c.tails : c.tails;
      return std::make_tuple(use, other_zone, other_datacenter, c.replicas, roles, c.segments, c.bytes,
                             std::string_view(c.node_id));
    };
    const auto best = std::min_element(eligible.begin(), eligible.end(),
                                       [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
    auto& picked = candidates_[*best];
    chosen.push_back(picked.node_id);
    ++zone_use[picked.zone];
    ++picked.replicas;
    eligible.erase(best);
  }
  return chosen;
}

}  // namespace catena::control
