// Where a keyed record goes under a channel generation, and what an alter
// of the partition count touches. Shared by the controller (which partitions
// get a marker) and the clients (which partitions feed which), header-only
// in catena_limits.
//
// A generation of N partitions sends a key whose xxh64 is h to h % N. An
// alter from `from` to `to` partitions moves the keys of h to h % to: there
// is an h with h % from == p and h % to == q exactly when p and q are equal
// modulo gcd(from, to) (the Chinese remainder theorem; 64-bit hashes cover
// every residue pair, as from * to <= 2^20). So with modulo mapping every
// partition below max(from, to) changes its key set: partitions below both
// counts lose some keys and gain others, the ones added are new, the ones
// removed lose all of theirs. Nothing outside the channel is touched.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace catena::chain {

[[nodiscard]] constexpr std::uint32_t partition_of_hash(std::uint64_t key_hash, std::uint32_t partitions) {
  return static_cast<std::uint32_t>(key_hash % partitions);
}

// Partitions whose key set differs between `from` and `to` partitions, in
// order: the ones that get a marker.
[[nodiscard]] inline std::vector<std::int32_t> alter_affected(std::int32_t from, std::int32_t to) {
  std::vector<std::int32_t> out;
  if (from == to) return out;
  for (std::int32_t p = 0; p < std::max(from, to); ++p) out.push_back(p);
  return out;
}

// The partitions of the `from` generation from which some key moves into
// `partition` of the `to` generation (itself included when it existed and
// keeps keys): a subscriber delivers `partition` past its marker only once
// each of these has been delivered up to its own marker.
[[nodiscard]] inline std::vector<std::int32_t> alter_parents(std::int32_t partition, std::int32_t from,
                                                             std::int32_t to) {
  std::vector<std::int32_t> out;
  if (partition < 0 || partition >= to || from <= 0) return out;
  const std::int32_t g = std::gcd(from, to);
  for (std::int32_t p = partition % g; p < from; p += g) out.push_back(p);
  return out;
}

}  // namespace catena::chain
