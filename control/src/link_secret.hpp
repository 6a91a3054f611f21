// Secrets that authenticate replica links: per route epoch, derived from the
// controller's link key with HMAC-SHA256, handed only to the members of that
// route (ChainAssignment.link_secret).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace catena::control {

inline constexpr std::size_t kLinkKeyBytes = 32;
inline constexpr std::size_t kLinkSecretBytes = 16;

// kLinkKeyBytes from the system's random source; nullopt if it failed.
std::optional<std::string> new_link_key();
// The secret of (channel, partition, route epoch) under `key`. Epoch 0 (no
// route has it) is the partition's lineage (ChainAssignment.lineage).
std::string link_secret(const std::string& key, const std::string& channel, std::int32_t partition,
                        std::int64_t epoch);

}  // namespace catena::control
