#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catena/control/placement.hpp>
#include <catena/control/rebalance_plan.hpp>

namespace catena::control {
namespace {

struct Planner {
  std::map<std::string, std::string> zone;  // every node we know of
  std::vector<std::string> eligible;        // sorted ids
  std::vector<RebalanceChain> chains;       // the working copy
  std::map<std::size_t, std::vector<std::string>> reasons;
  std::map<std::string, std::int64_t> replicas, heads, tails;

  std::string zone_of(const std::string& id) const {
    auto it = zone.find(id);
    return it == zone.end() ? "\x01" + id : it->second;  // unknown: a zone of its own
  }
  std::size_t spread(const std::vector<std::string>& members) const {
    std::set<std::string> zones;
    for (const auto& m : members) zones.insert(zone_of(m));
    return zones.size();
  }
  void count() {
    replicas.clear();
    heads.clear();
    tails.clear();
    std::map<std::string, ChainRoles> roles;  // as placement counts them
    for (const auto& id : eligible) replicas[id] = heads[id] = tails[id] = 0;
    for (const auto& c : chains) {
      for (const auto& m : c.replicas) {
        if (auto it = replicas.find(m); it != replicas.end()) ++it->second;
      }
      add_roles(c.replicas, roles);
    }
    for (const auto& id : eligible) {
      if (auto it = roles.find(id); it != roles.end()) {
        heads[id] = it->second.heads;
        tails[id] = it->second.tails;
      }
    }
  }
  // Nodes by load, most loaded first (ties: node id).
  std::vector<std::string> by_load(const std::map<std::string, std::int64_t>& load) const {
    std::vector<std::string> out = eligible;
    std::stable_sort(out.begin(), out.end(),
                     [&](const std::string& a, const std::string& b) { return load.at(a) > load.at(b); });
    return out;
  }

  // One step of rule 1: true if a chain was changed.
  bool move_one_replica() {
    count();
    const auto order = by_load(replicas);
    for (const auto& over : order) {
      for (auto u = order.rbegin(); u != order.rend(); ++u) {
        const std::string& under = *u;
        if (replicas.at(over) - replicas.at(under) <= 1) break;
        // Prefer a chain the over-loaded node heads when it also has more heads.
        const bool want_head = heads.at(over) > heads.at(under);
        std::size_t pick = chains.size();
        for (std::size_t i = 0; i < chains.size(); ++i) {
          const auto& members = chains[i].replicas;
          const auto at = std::find(members.begin(), members.end(), over);
          if (at == members.end() || std::find(members.begin(), members.end(), under) != members.end())
            continue;
          auto next = members;
          next[static_cast<std::size_t>(at - members.begin())] = under;
          if (spread(next) < spread(members)) continue;
          if (pick == chains.size()) pick = i;
          if ((at == members.begin()) == want_head) {
            pick = i;
            break;
          }
        }
        if (pick == chains.size()) continue;
        auto& members = chains[pick].replicas;
        *std::find(members.begin(), members.end(), over) = under;
        reasons[pick].push_back(fmt::format("{} holds {} replicas, {} holds {}", over, replicas.at(over),
                                            under, replicas.at(under)));
        return true;
      }
    }
    return false;
  }

  // One step of a role rule: for the most loaded node and the least loaded
  // one two or more below it (by `load`), the first chain where
  // swap(members, over, under) trades the role from one to the other.
  template <class Swap>
  bool move_one_role(const std::map<std::string, std::int64_t>& load, const char* role, Swap&& swap) {
    const auto order = by_load(load);
    for (const auto& over : order) {
      for (auto u = order.rbegin(); u != order.rend(); ++u) {
        const std::string& under = *u;
        if (load.at(over) - load.at(under) <= 1) break;
        for (std::size_t i = 0; i < chains.size(); ++i) {
          if (!swap(chains[i].replicas, over, under)) continue;
          reasons[i].push_back(fmt::format("{} {} {} chains, {} {} {}", over, role, load.at(over), under,
                                           role, load.at(under)));
          return true;
        }
      }
    }
    return false;
  }

  // One step of rule 2: the head trades places with a member that heads fewer.
  bool move_one_head() {
    count();
    return move_one_role(heads, "heads",
                         [](auto& members, const std::string& over, const std::string& under) {
                           if (members.empty() || members.front() != over) return false;
                           const auto at = std::find(members.begin(), members.end(), under);
                           if (at == members.end()) return false;
                           std::iter_swap(members.begin(), at);
                           return true;
                         });
  }

  // One step of rule 3: the tail trades places with a member in the middle
  // of its chain (never the head, so heads stay as rule 2 left them).
  bool move_one_tail() {
    count();
    return move_one_role(tails, "is the tail of",
                         [](auto& members, const std::string& over, const std::string& under) {
                           if (members.size() < 3 || members.back() != over) return false;
                           const auto at = std::find(members.begin() + 1, members.end() - 1, under);
                           if (at == members.end() - 1) return false;
                           std::iter_swap(members.end() - 1, at);
                           return true;
                         });
  }
};

}  // namespace

std::vector<RebalanceMove> plan_rebalance(const std::vector<RebalanceNode>& nodes,
                                          const std::vector<RebalanceChain>& chains, RebalanceScope scope) {
  Planner p;
  for (const auto& n : nodes) {
    p.zone[n.node_id] = n.zone;
    if (n.eligible) p.eligible.push_back(n.node_id);
  }
  std::sort(p.eligible.begin(), p.eligible.end());
  p.eligible.erase(std::unique(p.eligible.begin(), p.eligible.end()), p.eligible.end());
  p.chains = chains;
  // Every step moves one unit of load from a node above the other's by two
  // or more, so the sum of squared loads falls: the loops end. The bound is
  // a guard, not a limit one reaches.
  const std::size_t bound = 1 + chains.size() * 16;
  if (scope == RebalanceScope::replicas_and_roles) {
    for (std::size_t i = 0; i < bound && p.move_one_replica(); ++i) {
    }
  }
  for (std::size_t i = 0; i < bound && p.move_one_head(); ++i) {
  }
  for (std::size_t i = 0; i < bound && p.move_one_tail(); ++i) {
  }
  std::vector<RebalanceMove> out;
  for (std::size_t i = 0; i < chains.size(); ++i) {
    if (p.chains[i].replicas == chains[i].replicas) continue;
    RebalanceMove m;
    m.channel = chains[i].channel;
    m.partition = chains[i].partition;
    m.from = chains[i].replicas;
    m.to = p.chains[i].replicas;
    m.reason = fmt::format("{}", fmt::join(p.reasons[i], "; "));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace catena::control
