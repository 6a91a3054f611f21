// The rebalance planner (`catena rebalance`): which partition moves even out
// the load of the nodes, as a pure function of the nodes and the chains, so
// it is tested without a controller.
//
// Load is what the chains in the routes put on a node: chain memberships
// (replicas), then heads (a head takes every publisher's appends), then
// tails. Sealed ranges are not load: they are read-only and expire. The
// plan only ever changes chains by replacing one member with another node
// (or, for roles, by swapping two members), so each step is one
// tail-offset handoff (Controller::move_partition) that copies no history.
//
// Rules, in order:
//   1. Replicas: while the most and the least loaded eligible nodes differ
//      by more than one chain, a chain of the most loaded one that the least
//      loaded one is not in has the former replaced by the latter, in the
//      same position, unless that lowers the number of zones the chain
//      spans. Pairs that cannot trade are skipped for the next best pair.
//   2. Heads: the same with head counts, by making another member the head
//      (the chain keeps its members and its zones).
//   3. Tails: the same with tail counts, by making a member in the middle
//      of the chain its tail (so chains of 3 or more; heads do not change).
//      The tail serves subscribers and acknowledges commits.
//   4. A partition changed by several steps is one move, from its chain now
//      to its final chain; a chain that ends as it began is no move.
// RebalanceScope::roles skips rule 1: chains keep their members and only
// their order changes, as Kafka's preferred-leader election moves only
// leadership (the controller's periodic role balance after repairs).
// Nodes that are not eligible (draining, suspect) take nothing and are not
// relieved: their chains only ever lose them by a drain or a repair.
//
// Thread: a pure function; no state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace catena::control {

struct RebalanceNode {
  std::string node_id;
  std::string zone;
  bool eligible = true;  // ALIVE and serving: may gain or lose chains
};

struct RebalanceChain {
  std::string channel;
  std::int32_t partition = 0;
  std::vector<std::string> replicas;  // head first
};

struct RebalanceMove {
  std::string channel;
  std::int32_t partition = 0;
  std::vector<std::string> from;  // head first
  std::vector<std::string> to;
  std::string reason;
};

enum class RebalanceScope : std::uint8_t {
  replicas_and_roles,  // rules 1-3 (`catena rebalance`)
  roles,               // rules 2 and 3 only: no chain gains or loses a member
};

// Members of chains that are not in nodes count as a zone of their own.
[[nodiscard]] std::vector<RebalanceMove> plan_rebalance(
    const std::vector<RebalanceNode>& nodes, const std::vector<RebalanceChain>& chains,
    RebalanceScope scope = RebalanceScope::replicas_and_roles);

}  // namespace catena::control
