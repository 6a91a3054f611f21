#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>

#include <catena/chain/kept_replica.hpp>

namespace catena::chain {
namespace {

std::uint64_t meta_check(const KeptReplicaMeta& m) {
  return XXH64(&m, offsetof(KeptReplicaMeta, check), 0x4b455054u);
}

}  // namespace

std::string keep_name_for(const std::string& channel, std::uint32_t partition, std::uint64_t epoch) {
  return channel + "#" + std::to_string(partition) + "#" + std::to_string(epoch);
}

std::string kept_slot_name(const std::string& keep_name, std::uint32_t slot) {
  return keep_name + "#s" + std::to_string(slot);
}

std::string kept_meta_name(const std::string& keep_name) {
  return keep_name + "#meta";
}

void init_kept_meta(KeptReplicaMeta& m, const std::string& channel, std::uint32_t partition,
                    std::uint32_t slot_count, std::uint32_t segment_bytes, std::uint64_t epoch,
                    std::span<const std::uint8_t, 16> lineage) {
  std::memset(&m, 0, sizeof m);
  m.magic = kKeptMetaMagic;
  m.version = kKeptMetaVersion;
  m.partition = partition;
  m.slot_count = slot_count;
  m.segment_bytes = segment_bytes;
  m.epoch = epoch;
  std::memcpy(m.lineage, lineage.data(), sizeof m.lineage);
  std::memcpy(m.channel, channel.data(), std::min(channel.size(), sizeof m.channel - 1));
  m.check = meta_check(m);
  store_kept_commit(m, 0);
}

bool kept_meta_valid(const KeptReplicaMeta& m) {
  return m.magic == kKeptMetaMagic && m.version == kKeptMetaVersion && m.check == meta_check(m) &&
         m.channel[sizeof m.channel - 1] == '\0';
}

std::uint64_t kept_commit(const KeptReplicaMeta& m) {
  const std::uint64_t c = std::atomic_ref<const std::uint64_t>(m.commit).load(std::memory_order_acquire);
  const std::uint64_t inv =
      std::atomic_ref<const std::uint64_t>(m.commit_inverse).load(std::memory_order_acquire);
  return inv == ~c ? c : 0;  // torn by a crash between the two stores: keep nothing
}

void store_kept_commit(KeptReplicaMeta& m, std::uint64_t commit) {
  // Inverse first, then the value: a crash between them leaves a pair that
  // does not match, which keeps nothing rather than too much.
  std::atomic_ref<std::uint64_t>(m.commit_inverse).store(~commit, std::memory_order_release);
  std::atomic_ref<std::uint64_t>(m.commit).store(commit, std::memory_order_release);
}

KeptInventory list_kept_replicas(fabric::Provider& provider) {
  const auto names = provider.kept_names();
  std::set<std::string> all(names.begin(), names.end());
  std::set<std::string> keep_names;
  for (const auto& n : names) {
    const auto hash = n.rfind('#');
    if (hash != std::string::npos) keep_names.insert(n.substr(0, hash));
  }
  KeptInventory out;
  for (const auto& k : keep_names) {
    auto meta = all.count(kept_meta_name(k)) != 0
                    ? provider.allocate_kept(kept_meta_name(k), kKeptMetaBytes, fabric::kLocalWrite)
                    : fabric::Result<fabric::KeptRegion>(
                          fabric::make_error(fabric::Errc::invalid_argument, "no meta"));
    bool ok = meta.ok() && meta.value().kept;
    KeptPartition p;
    if (ok) {
      KeptReplicaMeta m;
      std::memcpy(&m, meta.value().region->data(), sizeof m);
      ok = kept_meta_valid(m) && m.slot_count >= 2 && m.slot_count <= limits::kMaxSegmentSlots;
      if (ok) {
        p = KeptPartition{k, m.channel, m.partition, m.epoch, kept_commit(m), m.slot_count, m.segment_bytes};
        for (std::uint32_t s = 0; s < m.slot_count && ok; ++s) ok = all.count(kept_slot_name(k, s)) != 0;
      }
    }
    if (ok) {
      out.replicas.push_back(std::move(p));
    } else {
      out.broken.push_back(k);
    }
  }
  return out;
}

void discard_kept_replica(fabric::Provider& provider, const std::string& keep_name) {
  const std::string prefix = keep_name + "#";
  for (const auto& n : provider.kept_names()) {
    if (n.starts_with(prefix) && n.find('#', prefix.size()) == std::string::npos) provider.discard_kept(n);
  }
}

}  // namespace catena::chain
