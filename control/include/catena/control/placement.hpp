// Where chain replicas go.
//
// Rules, in priority order, for each replica picked:
//   1. only ALIVE nodes not already in the chain (the caller passes just
//      those as candidates, plus an exclude set);
//   2. zone spread: a node in a zone the chain does not use yet beats any
//      node in a used zone, so two replicas share a zone only when no other
//      zone has an eligible node;
//   3. a repair's preference (PlacementPreference, empty when a chain is
//      created): among nodes that are equal on zone spread, first a node in
//      the zone of the member the chain lost (the one a node of that zone
//      replaces best: same failure domain, same distances), then a node in
//      a datacenter the chain's remaining members are in, then anywhere
//      (the caller warns: the chain now crosses datacenters). So a dead
//      node is replaced from its own zone when that zone has a spare; a
//      whole zone down is replaced from another zone of the same
//      datacenter; only a datacenter without an eligible node in a zone the
//      chain does not use sends the replica to another datacenter. Zone
//      spread (rule 2) comes before all of this: a chain never doubles up in
//      a zone to stay in its datacenter while another zone has a node;
//   4. least loaded: fewest chain memberships, then fewest roles (heads
//      and tails for a new chain, tails for nodes joining behind a tail),
//      then segments, then bytes (the last two from heartbeats), then node
//      id for determinism.
//
// Roles (see ChainRoles): a new chain (choose_chain) is then ordered so the
// roles spread: its head is the chosen node with the fewest heads, its tail
// the remaining one with the fewest tails, the others in between in pick
// order. Without that, the chain order was the pick order and a
// 64-partition channel on 3 nodes had all 64 heads on one node. Nodes added
// to an existing chain (choose) join behind its tail in pick order, as the
// chain protocol needs; the last becomes the tail.
//
// A Placement accumulates the replicas and roles it hands out, so placing
// the many partitions of one channel spreads them instead of piling them on
// the node that was least loaded at the start. The caller seeds the counts
// from the routes that exist (Controller::candidates_locked), so a later
// channel, or a repair, makes up for the roles an earlier one left uneven.
//
// Thread: a Placement is a short-lived value used under the controller lock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catena/control/result.hpp>

namespace catena::control {

struct PlacementCandidate {
  std::string node_id;
  std::string zone;
  std::int64_t replicas = 0;  // chain memberships
  std::int64_t segments = 0;
  std::int64_t bytes = 0;
  std::string datacenter;
  std::int64_t heads = 0;  // chains it heads
  std::int64_t tails = 0;  // chains it is (or, joining, will be) the tail of
};

// The roles a node holds across chains. A chain's head takes every
// publisher's appends, its tail acknowledges every commit and serves the
// reads; the members between only forward. Placement and the rebalance
// planner (rebalance_plan.hpp) count them alike, with add_roles().
struct ChainRoles {
  std::int64_t heads = 0;
  std::int64_t tails = 0;
};

// Counts the roles of one chain, head first: the first member heads it, the
// last is its tail (one member is both). An empty chain has no roles.
void add_roles(const std::vector<std::string>& chain, std::map<std::string, ChainRoles>& into);

// What a repair prefers for a chain's replacements (rule 3 above).
struct PlacementPreference {
  std::set<std::string> zones;        // of the members the chain lost
  std::set<std::string> datacenters;  // of its remaining members; empty: any
};

class Placement {
 public:
  explicit Placement(std::vector<PlacementCandidate> candidates) : candidates_(std::move(candidates)) {}

  // Picks count nodes to add to a chain whose current members are in
  // member_zones (one entry per member) and whose ids are in exclude.
  // NOT_ENOUGH_NODES if fewer than count eligible candidates exist.
  // The picks join behind the chain's tail in the order returned; the last
  // is the chain's new tail.
  [[nodiscard]] Result<std::vector<std::string>> choose(int count, std::vector<std::string> member_zones,
                                                        const std::set<std::string>& exclude,
                                                        const PlacementPreference& prefer = {});

  // Picks the count members of a new chain (it has none yet) and orders
  // them head first so the roles spread (see above).
  [[nodiscard]] Result<std::vector<std::string>> choose_chain(int count,
                                                              const std::set<std::string>& exclude = {},
                                                              const PlacementPreference& prefer = {});

  [[nodiscard]] const std::vector<PlacementCandidate>& candidates() const noexcept { return candidates_; }

 private:
  enum class Joins { new_chain, behind_tail };
  Result<std::vector<std::string>> pick(int count, std::vector<std::string> member_zones,
                                        const std::set<std::string>& exclude,
                                        const PlacementPreference& prefer, Joins joins);
  PlacementCandidate& candidate(const std::string& id);

  std::vector<PlacementCandidate> candidates_;
};

}  // namespace catena::control
