// Per-key order across a channel alter's markers, for one Subscriber.
//
// An alter to generation G has every affected partition append a marker
// (MarkerSpec{G, from, to}); a key lives in its partition under `from` up to
// that partition's marker and in its partition under `to` after the new
// partition's marker (chain/key_map.hpp). So a partition p that reached its
// marker of G **parks**: nothing of p past it is delivered until each of its
// parents (chain::alter_parents(p, from, to)) that this subscriber reads has
// itself delivered its marker of G. A partition not in `to` (removed by a
// shrink) is not held: no key goes there any more, and a later grow that
// brings it back must reach its next marker.
//
// A parent holds a partition back only while the gate **tracks** it: it was
// read from its first offset (offset 0, before any marker) or has delivered
// a marker since the subscriber last jumped over part of it (a seek, an
// expired position, data lost, a start elsewhere). An untracked parent's
// generation is not known, and waiting on it could park a partition for
// good; so a subscriber that starts elsewhere than earliest (latest, an
// offset, the group's committed offsets) keeps per-key order from each
// parent's first marker it delivers on, and one that reads a subset of the
// partitions keeps it only among those.
//
// With `released_by_caller` (a group member's subscriber, which reads one
// partition and cannot see its parents), a partition also parks at every
// marker of a generation newer than release() named for it: the group's
// coordinator, which sees every member's commits, releases it.
//
// Single-threaded (the subscriber's polling thread). Whether a partition is
// parked is a flag read per poll; it is recomputed, with allocation, only
// when a marker is delivered or tracking changes (rare: once per alter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <catena/chain/record.hpp>

namespace catena::client_detail {

class MarkerGate {
 public:
  // `partitions`: what the subscriber reads; index i is its i-th session.
  // `tracked`: whether partition i is read from its first offset.
  MarkerGate(const std::vector<std::uint32_t>& partitions, const std::vector<bool>& tracked,
             bool released_by_caller = false);

  // The subscriber reads one more partition from now on (index: the next
  // one), added by a grow; `tracked` as the constructor's.
  void add(std::uint32_t partition, bool tracked);
  // Partition i delivered a marker (decoded).
  void on_marker(std::size_t i, const chain::MarkerSpec& spec);
  // Partition i's position jumped (seek, expired, data lost): its generation
  // is no longer known; `from_start`: it now reads from offset 0.
  void jumped(std::size_t i, bool from_start);
  // Partition i may pass markers up to this generation (released_by_caller).
  void release(std::size_t i, std::uint64_t generation);

  // Nothing of partition i past its last marker may be delivered yet.
  [[nodiscard]] bool parked(std::size_t i) const { return parts_[i].parked; }
  // The generation of the last marker partition i delivered (0: none).
  [[nodiscard]] std::uint64_t reached(std::size_t i) const { return parts_[i].reached; }

 private:
  struct Part {
    std::uint32_t partition = 0;
    std::uint64_t reached = 0;  // the last marker's generation delivered
    bool tracked = false;
    bool parked = false;
    std::uint64_t released = 0;  // released_by_caller: markers up to this generation pass
  };
  const chain::MarkerSpec* spec_of(std::uint64_t generation) const;
  void recompute();

  bool released_by_caller_ = false;
  std::vector<Part> parts_;
  std::vector<int> index_of_;             // partition -> index in parts_, -1: not read
  std::vector<chain::MarkerSpec> specs_;  // by generation, of the generations some partition reached
};

}  // namespace catena::client_detail
