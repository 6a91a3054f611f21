// Argument checks for requests the controller accepts. Each failure is
// INVALID_ARGUMENT with a message naming the field, the rule and the value.
#pragma once

#include <catena/control/result.hpp>
#include <cstdint>
#include <string_view>

namespace catena::control {

inline constexpr std::size_t kMaxNameLength = 128;
inline constexpr std::int32_t kMaxPartitions = 1024;
inline constexpr std::int32_t kMaxReplication = 7;
inline constexpr std::int64_t kSegmentAlignment = 4096;
inline constexpr std::int64_t kMinSegmentBytes = 4096;
inline constexpr std::int64_t kMaxSegmentBytes = std::int64_t{1} << 30;
inline constexpr std::int64_t kMinTtlMs = 1000;

static_assert(kMinSegmentBytes % kSegmentAlignment == 0 && kMaxSegmentBytes % kSegmentAlignment == 0,
              "segment size bounds must themselves be valid sizes");

// A channel or node name: 1..128 characters of [A-Za-z0-9._-].
[[nodiscard]] Result<void> validate_name(std::string_view field, std::string_view name);

[[nodiscard]] Result<void> validate_channel_config(const idl::ChannelConfig& config);

[[nodiscard]] Result<void> validate_node_info(const idl::NodeInfo& info);

}  // namespace catena::control
