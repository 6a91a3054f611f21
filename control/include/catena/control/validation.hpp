// Argument checks for requests the controller accepts. Each failure is
// INVALID_ARGUMENT with a message naming the field, the rule and the value.
// The limits are the data plane's own (catena/chain/limits.hpp): whatever the
// controller accepts fits the wire.
#pragma once

#include <cstdint>
#include <string_view>

#include <catena/chain/limits.hpp>
#include <catena/control/result.hpp>

namespace catena::control {

namespace limits = chain::limits;

// Consumer group names never reach the data plane: a controller-only limit.
inline constexpr std::size_t kMaxGroupNameLength = 128;

// A channel or node name: 1..max_length characters of [A-Za-z0-9._-].
[[nodiscard]] Result<void> validate_name(std::string_view field, std::string_view name,
                                         std::size_t max_length);

[[nodiscard]] Result<void> validate_channel_config(const idl::ChannelConfig& config);
// A channel's ttl_ms (createChannel, alterRetention): kMinTtlMs..kMaxTtlMs.
[[nodiscard]] Result<void> validate_ttl_ms(std::int64_t ttl_ms);

[[nodiscard]] Result<void> validate_node_info(const idl::NodeInfo& info);

}  // namespace catena::control
