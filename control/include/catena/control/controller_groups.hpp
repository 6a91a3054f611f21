// Subscriber groups: which member of a group consumes which partition of the
// group's channel, with heartbeats, a session timeout, and sticky,
// incremental reassignment.
//
// A partition changes owner in two steps, so that no live owner and its
// successor ever consume it at once:
//   1. the owner is told to revoke it (GroupAssignment.revoke): it stops
//      consuming it, commits its position (the handoff point) and reports it
//      released in its next heartbeat;
//   2. only then is it assigned to the new owner, which starts from the
//      committed offset.
// An owner that leaves or whose session expires releases everything at
// once: its last committed offsets are the handoff points (records it
// delivered after its last commit are delivered again: at-least-once).
// A membership change moves only the partitions whose owner must change:
// every member keeps up to its fair share (P / M, the first P % M members
// by current load one more) of what it owns, and only the surplus moves to
// members below theirs. Each change of any member's assignment is one new
// generation; a partition remembers the generation it was assigned at, and
// a commit naming an older one is refused (the member lost it meanwhile).
//
// Membership lives in memory only. After a controller restart members'
// heartbeats get UNKNOWN_MEMBER; they join again naming the partitions they
// still consume (`owned`) and get them back. For one session timeout after
// the coordinator starts (the claim window), a group that had committed
// offsets before (`known_groups`) hands out no partition nobody claimed: an
// owner from before the restart either claims it in that time or has
// stopped consuming it (a member stops when it has not been heard for a
// session timeout). A member commits its start offset as soon as it gets a
// partition, so every group that consumed anything is known.
//
// Thread: not thread-safe; the Controller calls it under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catena/control/idl/catena_types.h>
#include <catena/control/result.hpp>
#include <catena/fabric/clock.hpp>

namespace catena::control {

class GroupCoordinator {
 public:
  struct Options {
    std::chrono::milliseconds session_timeout{10000};
    std::chrono::milliseconds heartbeat_interval{1000};
  };

  // One assignment change: the members whose assignment the controller
  // changed (their next heartbeat answer says something new; nobody else
  // hears of it). A member releasing a revoked partition changed its own:
  // it is not counted.
  struct Change {
    std::string group;
    std::int64_t generation = 0;
    std::string why;
    std::vector<std::string> told;
    std::size_t members = 0;
  };

  struct Member {
    std::string id;
    std::string name;
    Clock::time_point last_heard{};
    std::map<std::int32_t, std::int64_t> owned;  // partition -> generation it was assigned at
    std::set<std::int32_t> revoking;             // owned, to be released
  };

  struct Group {
    std::string channel;
    std::int32_t partitions = 0;
    std::int64_t generation = 0;
    std::map<std::string, Member> members;
    std::map<std::int32_t, std::string> owner;   // partition -> member id
    std::map<std::int32_t, std::string> target;  // partition -> member id it moves to
    Clock::time_point claims_until{};            // hands out unclaimed partitions from then on
  };

  // known_groups: groups with committed offsets, which may have had members
  // before this coordinator started (the claim window applies to them).
  GroupCoordinator(Options options, const Clock& clock, std::set<std::string> known_groups);

  // partitions: how many of the channel's partitions the group is assigned
  // now (0..partitions-1): the channel's count, more while a shrink's
  // removed partitions still have records for it.
  [[nodiscard]] Result<idl::GroupAssignment> join(const std::string& group, const std::string& channel,
                                                  const std::string& name,
                                                  const std::vector<std::int32_t>& owned,
                                                  std::int32_t partitions);
  [[nodiscard]] Result<idl::GroupAssignment> heartbeat(const std::string& group, const std::string& member_id,
                                                       const std::vector<std::int32_t>& released,
                                                       std::int32_t partitions);
  [[nodiscard]] Result<void> leave(const std::string& group, const std::string& member_id);
  // Whether member_id may commit these offsets (see commitOffsets).
  [[nodiscard]] Result<void> check_commit(const std::string& group, const std::string& channel,
                                          const std::string& member_id, std::int64_t generation,
                                          const std::vector<idl::PartitionOffset>& offsets) const;
  // Drops members silent for a session timeout, follows partition-count
  // changes (partitions: group -> count, as join's) and hands out what the
  // claim window held back.
  void tick(const std::map<std::string, std::int32_t>& partitions);

  [[nodiscard]] const Group* find(const std::string& group) const;
  [[nodiscard]] const std::map<std::string, Group>& groups() const { return groups_; }
  // The latest changes, oldest first (at most kKeptChanges).
  [[nodiscard]] const std::deque<Change>& changes() const { return changes_; }
  static constexpr std::size_t kKeptChanges = 64;

 private:
  [[nodiscard]] idl::GroupAssignment assignment_of(const Group& g, const Member& m) const;
  [[nodiscard]] Result<Group*> group_of(const std::string& group);
  // Recomputes who should own what and moves what must move (see above).
  void rebalance(const std::string& name, Group& g, const std::string& why);
  void drop_member(Group& g, const std::string& member_id);

  Options options_;
  const Clock& clock_;
  Clock::time_point started_;
  std::set<std::string> known_groups_;
  std::string id_prefix_;  // unique per coordinator, so ids are never reused across restarts
  std::uint64_t next_member_ = 1;
  std::map<std::string, Group> groups_;
  std::deque<Change> changes_;
};

}  // namespace catena::control
