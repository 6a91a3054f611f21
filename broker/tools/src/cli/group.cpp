// `catena group list` and `catena group describe GROUP`: subscriber groups,
// their members, who consumes which partition (and what is being handed
// over), committed offsets and lag.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>

#include <catena/control/controller_client.hpp>

#include "commands.hpp"
#include "output.hpp"

namespace catena::cli {
namespace {

std::string parts(const std::vector<std::int32_t>& ps) {
  std::string out;
  for (const auto p : ps) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out.empty() ? "-" : out;
}

control::ControllerClient::Options options_of(const Common& c) {
  return c.client_options();
}

}  // namespace

GroupCommands add_group_commands(CLI::App& app) {
  GroupCommands c;
  auto* group = app.add_subcommand("group", "subscriber groups (members share a channel's partitions)");
  group->require_subcommand(1);
  c.list = group->add_subcommand("list", "every group with members or committed offsets");
  c.describe = group->add_subcommand(
      "describe", "a group's members, who consumes which partition, committed offsets and lag per partition");
  c.describe->add_option("group", c.group, "group name")->required();
  return c;
}

int group_list(const Common& c) {
  control::ControllerClient client(options_of(c));
  auto groups = client.list_groups();
  if (!groups) return fail("group list", groups.error());
  if (c.json) {
    print_json({{"groups", *groups}});
    return 0;
  }
  for (const auto& g : *groups) std::printf("%s\n", g.c_str());
  return 0;
}

int group_describe(const Common& c, const GroupCommands& o) {
  control::ControllerClient client(options_of(c));
  auto s = client.describe_group(o.group);
  if (!s) {
    // The controller answers INVALID_ARGUMENT for a group it does not know:
    // say not found when the group list confirms it.
    if (s.error().code == control::idl::ErrorCode::INVALID_ARGUMENT) {
      auto groups = client.list_groups();
      if (groups && std::find(groups->begin(), groups->end(), o.group) == groups->end())
        return fail("group describe " + o.group, s.error().describe(), kExitNotFound);
    }
    return fail("group describe " + o.group, s.error());
  }
  if (c.json) {
    print_json(group_json(*s));
    return 0;
  }
  std::printf("group %s  channel %s  generation %lld  members %zu\n", s->group.c_str(),
              s->channel.empty() ? "-" : s->channel.c_str(), static_cast<long long>(s->generation),
              s->members.size());
  for (const auto& m : s->members) {
    std::printf("  member %s (%s)  partitions %s  revoking %s  heard %lld ms ago\n", m.member_id.c_str(),
                m.name.c_str(), parts(m.partitions).c_str(), parts(m.revoking).c_str(),
                static_cast<long long>(m.last_heard_ms_ago));
  }
  std::printf("  %-9s  %-28s  %12s  %12s  %10s\n", "partition", "owner", "committed", "end", "lag");
  for (const auto& p : s->partitions) {
    std::string owner = p.owner.empty() ? "-" : p.owner;
    if (!p.moving_to.empty()) owner += " -> " + p.moving_to;
    const std::string committed = p.committed < 0 ? "-" : std::to_string(p.committed);
    std::printf("  %-9d  %-28s  %12s  %12lld  %10lld\n", p.partition, owner.c_str(), committed.c_str(),
                static_cast<long long>(p.end_offset), static_cast<long long>(p.lag));
  }
  return 0;
}

}  // namespace catena::cli
