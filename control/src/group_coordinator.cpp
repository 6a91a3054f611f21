#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <random>
#include <spdlog/spdlog.h>
#include <utility>

#include <catena/control/controller_groups.hpp>

namespace catena::control {
namespace {

// What a member is told: what it consumes and what it must revoke.
using Visible = std::pair<std::set<std::int32_t>, std::set<std::int32_t>>;

Visible visible(const GroupCoordinator::Member& m) {
  Visible v;
  for (const auto& [p, gen] : m.owned) {
    if (!m.revoking.contains(p)) v.first.insert(p);
  }
  v.second = m.revoking;
  return v;
}

std::string random_prefix() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

}  // namespace

GroupCoordinator::GroupCoordinator(Options options, const Clock& clock, std::set<std::string> known_groups)
    : options_(options),
      clock_(clock),
      started_(clock.now()),
      known_groups_(std::move(known_groups)),
      id_prefix_(random_prefix()) {}

const GroupCoordinator::Group* GroupCoordinator::find(const std::string& group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? nullptr : &it->second;
}

Result<GroupCoordinator::Group*> GroupCoordinator::group_of(const std::string& group) {
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    return make_error(idl::ErrorCode::UNKNOWN_MEMBER,
                      fmt::format("group '{}' has no members: join it", group));
  }
  return &it->second;
}

idl::GroupAssignment GroupCoordinator::assignment_of(const Group& g, const Member& m) const {
  idl::GroupAssignment a;
  a.__set_member_id(m.id);
  a.__set_generation(g.generation);
  const auto [consume, revoke] = visible(m);
  a.__set_partitions({consume.begin(), consume.end()});
  a.__set_revoke({revoke.begin(), revoke.end()});
  std::map<std::int32_t, std::int64_t> at;
  for (const auto& [p, gen] : m.owned) at[p] = gen;
  a.__set_assigned_at(at);
  a.__set_session_timeout_ms(options_.session_timeout.count());
  a.__set_heartbeat_interval_ms(options_.heartbeat_interval.count());
  a.__isset.start_offsets = true;  // the controller fills them from the committed offsets
  return a;
}

Result<idl::GroupAssignment> GroupCoordinator::join(const std::string& group, const std::string& channel,
                                                    const std::string& name,
                                                    const std::vector<std::int32_t>& owned,
                                                    std::int32_t partitions) {
  auto [it, created] = groups_.try_emplace(group);
  Group& g = it->second;
  if (created || g.members.empty()) {
    g.channel = channel;
    g.partitions = partitions;
    if (created && known_groups_.contains(group)) g.claims_until = started_ + options_.session_timeout;
  } else if (g.channel != channel) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("group '{}' reads channel '{}', not '{}'", group, g.channel, channel));
  }
  g.partitions = partitions;
  Member m;
  m.id = fmt::format("{}-{}-{}", name, id_prefix_, next_member_++);
  m.name = name;
  m.last_heard = clock_.now();
  // Partitions it still consumes from an earlier membership, that no one
  // else owns: it goes on with them (its position is ahead of the commit).
  for (const std::int32_t p : owned) {
    if (p < 0 || p >= partitions || g.owner.contains(p)) continue;
    g.owner[p] = m.id;
    m.owned[p] = g.generation + 1;
    g.target.erase(p);
  }
  const std::string id = m.id;
  const bool claimed = !m.owned.empty();
  g.members.emplace(id, std::move(m));
  if (claimed) ++g.generation;  // rebalance() may bump it again: the claim stays at or below
  rebalance(group, g, fmt::format("{} joined{}", id, claimed ? " (claiming what it consumes)" : ""));
  return assignment_of(g, g.members.at(id));
}

Result<idl::GroupAssignment> GroupCoordinator::heartbeat(const std::string& group,
                                                         const std::string& member_id,
                                                         const std::vector<std::int32_t>& released,
                                                         std::int32_t partitions) {
  auto g = group_of(group);
  if (!g) return g.error();
  Group& grp = **g;
  auto it = grp.members.find(member_id);
  if (it == grp.members.end()) {
    return make_error(idl::ErrorCode::UNKNOWN_MEMBER,
                      fmt::format("group '{}' has no member '{}' (its session expired, it left, or the "
                                  "controller restarted): stop consuming and join again",
                                  group, member_id));
  }
  Member& m = it->second;
  m.last_heard = clock_.now();
  std::vector<std::int32_t> freed;
  for (const std::int32_t p : released) {
    if (!m.revoking.contains(p)) continue;  // a repeat, or never asked: ignored
    m.revoking.erase(p);
    m.owned.erase(p);
    grp.owner.erase(p);
    freed.push_back(p);
  }
  grp.partitions = partitions;
  rebalance(group, grp,
            freed.empty() ? "heartbeat" : fmt::format("{} released [{}]", member_id, fmt::join(freed, ",")));
  return assignment_of(grp, grp.members.at(member_id));
}

void GroupCoordinator::drop_member(Group& g, const std::string& member_id) {
  auto it = g.members.find(member_id);
  if (it == g.members.end()) return;
  for (const auto& [p, gen] : it->second.owned) g.owner.erase(p);
  g.members.erase(it);
}

Result<void> GroupCoordinator::leave(const std::string& group, const std::string& member_id) {
  auto g = group_of(group);
  if (!g) return g.error();
  if (!(*g)->members.contains(member_id)) {
    return make_error(idl::ErrorCode::UNKNOWN_MEMBER,
                      fmt::format("group '{}' has no member '{}'", group, member_id));
  }
  drop_member(**g, member_id);
  rebalance(group, **g, fmt::format("{} left", member_id));
  return {};
}

Result<void> GroupCoordinator::check_commit(const std::string& group, const std::string& channel,
                                            const std::string& member_id, std::int64_t generation,
                                            const std::vector<idl::PartitionOffset>& offsets) const {
  const Group* g = find(group);
  const auto it = g == nullptr ? std::map<std::string, Member>::const_iterator{} : g->members.find(member_id);
  if (g == nullptr || it == g->members.end()) {
    return make_error(idl::ErrorCode::UNKNOWN_MEMBER,
                      fmt::format("group '{}' has no member '{}': join again", group, member_id));
  }
  if (g->channel != channel) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("group '{}' reads channel '{}', not '{}'", group, g->channel, channel));
  }
  for (const auto& o : offsets) {
    const auto owned = it->second.owned.find(o.partition);
    if (owned == it->second.owned.end()) {
      return make_error(
          idl::ErrorCode::NOT_OWNER,
          fmt::format("partition {} of group '{}' is not member '{}''s", o.partition, group, member_id));
    }
    if (generation < owned->second) {
      return make_error(
          idl::ErrorCode::NOT_OWNER,
          fmt::format("member '{}' got partition {} at generation {}; a commit from generation {} "
                      "is from an earlier ownership",
                      member_id, o.partition, owned->second, generation));
    }
  }
  return {};
}

void GroupCoordinator::tick(const std::map<std::string, std::int32_t>& partitions) {
  const auto now = clock_.now();
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = it->second;
    std::vector<std::string> expired;
    for (const auto& [id, m] : g.members) {
      if (now - m.last_heard > options_.session_timeout) expired.push_back(id);
    }
    for (const auto& id : expired) drop_member(g, id);
    if (auto p = partitions.find(it->first); p != partitions.end()) g.partitions = p->second;
    rebalance(it->first, g,
              expired.empty() ? "tick" : fmt::format("session expired: {}", fmt::join(expired, ", ")));
    if (g.members.empty()) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

void GroupCoordinator::rebalance(const std::string& name, Group& g, const std::string& why) {
  std::map<std::string, Visible> before;
  for (const auto& [id, m] : g.members) before[id] = visible(m);
  // Partitions beyond the span: a shrink's, once the group read them to
  // their last marker (Controller::group_span_locked).
  for (auto& [id, m] : g.members) {
    std::erase_if(m.owned, [&](const auto& e) { return e.first >= g.partitions; });
    std::erase_if(m.revoking, [&](std::int32_t p) { return p >= g.partitions; });
  }
  std::erase_if(g.owner, [&](const auto& e) { return e.first >= g.partitions; });
  g.target.clear();
  if (!g.members.empty()) {
    // Fair shares: the members that own most keep the larger shares.
    std::vector<Member*> order;
    for (auto& [id, m] : g.members) order.push_back(&m);
    std::stable_sort(order.begin(), order.end(), [](const Member* a, const Member* b) {
      return a->owned.size() - a->revoking.size() > b->owned.size() - b->revoking.size();
    });
    const auto count = static_cast<std::int32_t>(order.size());
    std::map<std::string, std::int32_t> quota, load;
    for (std::int32_t i = 0; i < count; ++i) {
      quota[order[static_cast<std::size_t>(i)]->id] =
          g.partitions / count + (i < g.partitions % count ? 1 : 0);
    }
    // Each keeps up to its share of what it consumes; the rest is revoked.
    std::set<std::int32_t> kept;
    for (Member* m : order) {
      for (const auto& [p, gen] : m->owned) {
        if (m->revoking.contains(p)) continue;
        if (load[m->id] < quota[m->id]) {
          ++load[m->id];
          kept.insert(p);
        } else {
          m->revoking.insert(p);
        }
      }
    }
    // Everything else goes to members below their share.
    for (std::int32_t p = 0; p < g.partitions; ++p) {
      if (kept.contains(p)) continue;
      Member* to = nullptr;
      for (Member* m : order) {
        if (load[m->id] < quota[m->id]) {
          to = m;
          break;
        }
      }
      if (to == nullptr) break;  // cannot happen: the shares add up to the count
      ++load[to->id];
      g.target[p] = to->id;
    }
    // Free ones are assigned now (revoked ones once released), except those
    // the claim window holds for owners from before a controller restart.
    if (clock_.now() >= g.claims_until) {
      for (auto it = g.target.begin(); it != g.target.end();) {
        if (g.owner.contains(it->first)) {
          ++it;
          continue;
        }
        g.owner[it->first] = it->second;
        g.members.at(it->second).owned[it->first] = g.generation + 1;
        it = g.target.erase(it);
      }
    }
  }
  Change change{name, g.generation + 1, why, {}, g.members.size()};
  for (const auto& [id, m] : g.members) {
    auto was = before.find(id);
    const Visible now = visible(m);
    if (was == before.end() ? !(now.first.empty() && now.second.empty()) : was->second != now) {
      change.told.push_back(id);
    }
  }
  if (change.told.empty()) return;
  ++g.generation;
  spdlog::info("group {}: generation {} ({}): {} of {} members told of a new assignment{}{}", name,
               g.generation, why, change.told.size(), g.members.size(), change.told.empty() ? "" : ": ",
               fmt::join(change.told, ", "));
  changes_.push_back(std::move(change));
  if (changes_.size() > kKeptChanges) changes_.pop_front();
}

}  // namespace catena::control
