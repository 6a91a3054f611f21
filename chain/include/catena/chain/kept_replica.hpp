// Kept replicas: a replica whose segment slots are kept memory
// (fabric::Provider::allocate_kept), so that the broker process that held it
// can crash, start again and find its data (process-level recovery).
//
// Names in the provider's keep directory, for a replica created under
// keep name K (ReplicaConfig::keep_name, "<channel>#<partition>#<epoch>"):
// "K#s<slot>" for each slot and "K#meta" for a page that says what the slots
// are (channel, partition, geometry) and how far this replica knew the chain
// committed. The commit word is written as the commit advances (a store into
// mapped memory: no system call); on restart nothing at or past it is kept
// (PartitionLog::recover_st).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <catena/chain/limits.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::chain {

struct KeptReplicaMeta {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t partition;
  std::uint32_t slot_count;
  std::uint32_t segment_bytes;
  std::uint64_t epoch;       // the route epoch the replica was created at
  std::uint8_t lineage[16];  // ReplicaConfig::lineage
  char channel[limits::kMaxChannelNameLength + 8];
  std::uint64_t check;  // of every field above
  // {commit, ~commit}: the first offset this replica knew not committed.
  std::uint64_t commit;
  std::uint64_t commit_inverse;
};
inline constexpr std::uint64_t kKeptMetaMagic = 0x4154454d5450454bull;  // "KEPTMETA"
// 2: frames checked with CRC-32C (record.hpp). Kept memory of another
// version is not trusted: the replica starts empty and its chain refills it.
inline constexpr std::uint32_t kKeptMetaVersion = 2;
inline constexpr std::size_t kKeptMetaBytes = 4096;
static_assert(sizeof(KeptReplicaMeta) <= kKeptMetaBytes);

// "<channel>#<partition>#<epoch>".
[[nodiscard]] std::string keep_name_for(const std::string& channel, std::uint32_t partition,
                                        std::uint64_t epoch);
[[nodiscard]] std::string kept_slot_name(const std::string& keep_name, std::uint32_t slot);
[[nodiscard]] std::string kept_meta_name(const std::string& keep_name);

// Fills the identity fields and the check; commit 0.
void init_kept_meta(KeptReplicaMeta& m, const std::string& channel, std::uint32_t partition,
                    std::uint32_t slot_count, std::uint32_t segment_bytes, std::uint64_t epoch,
                    std::span<const std::uint8_t, 16> lineage);
// The identity fields check and the commit pair is whole.
[[nodiscard]] bool kept_meta_valid(const KeptReplicaMeta& m);
[[nodiscard]] std::uint64_t kept_commit(const KeptReplicaMeta& m);
void store_kept_commit(KeptReplicaMeta& m, std::uint64_t commit);

// A replica the keep directory holds.
struct KeptPartition {
  std::string keep_name;
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;
  std::uint64_t commit = 0;
  std::uint32_t slot_count = 0;
  std::uint32_t segment_bytes = 0;
};
// Every kept replica with a valid meta page and all its slots, and the keep
// names of what is there but incomplete or invalid (to discard). Setup path.
struct KeptInventory {
  std::vector<KeptPartition> replicas;
  std::vector<std::string> broken;
};
[[nodiscard]] KeptInventory list_kept_replicas(fabric::Provider& provider);
// Drops every name of one kept replica.
void discard_kept_replica(fabric::Provider& provider, const std::string& keep_name);

}  // namespace catena::chain
