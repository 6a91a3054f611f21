#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <string_view>
#include <tuple>

#include <catena/control/placement.hpp>

namespace catena::control {

Result<std::vector<std::string>> Placement::choose(int count, std::vector<std::string> member_zones,
                                                   const std::set<std::string>& exclude,
                                                   const PlacementPreference& prefer) {
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
      return std::make_tuple(use, other_zone, other_datacenter, c.replicas, c.segments, c.bytes,
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
