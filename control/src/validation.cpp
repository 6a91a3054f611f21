#include <algorithm>
#include <fmt/format.h>

#include <catena/control/address.hpp>
#include <catena/control/validation.hpp>

namespace catena::control {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

}  // namespace

Result<void> validate_name(std::string_view field, std::string_view name, std::size_t max_length) {
  if (name.empty() || name.size() > max_length || !std::all_of(name.begin(), name.end(), name_char)) {
    return invalid_argument(
        fmt::format("{} must be 1..{} characters of [A-Za-z0-9._-], got '{}' ({} characters)", field,
                    max_length, name.substr(0, 160), name.size()));
  }
  return {};
}

Result<void> validate_channel_config(const idl::ChannelConfig& c) {
  using namespace limits;
  if (auto r = validate_name("channel name", c.name, kMaxChannelNameLength); !r) return r;
  if (c.partitions < 1 || c.partitions > kMaxPartitions) {
    return invalid_argument(fmt::format("partitions must be 1..{}, got {}", kMaxPartitions, c.partitions));
  }
  if (c.replication < 1 || c.replication > kMaxReplication) {
    return invalid_argument(fmt::format("replication must be 1..{}, got {}", kMaxReplication, c.replication));
  }
  if (c.segment_bytes < std::int64_t{kMinSegmentBytes} || c.segment_bytes > std::int64_t{kMaxSegmentBytes} ||
      c.segment_bytes % kSegmentAlignment != 0) {
    return invalid_argument(fmt::format("segment_bytes must be a multiple of {} in [{}, {}], got {}",
                                        kSegmentAlignment, kMinSegmentBytes, kMaxSegmentBytes,
                                        c.segment_bytes));
  }
  return validate_ttl_ms(c.ttl_ms);
}

Result<void> validate_ttl_ms(std::int64_t ttl_ms) {
  using namespace limits;
  if (ttl_ms < kMinTtlMs || ttl_ms > kMaxTtlMs) {
    return invalid_argument(fmt::format("ttl_ms must be {}..{}, got {}", kMinTtlMs, kMaxTtlMs, ttl_ms));
  }
  return {};
}

Result<void> validate_node_info(const idl::NodeInfo& info) {
  if (!info.node_id.empty()) {
    if (auto r = validate_name("node_id", info.node_id, limits::kMaxNodeIdLength); !r) return r;
  }
  if (auto r = parse_host_port(info.admin_addr); !r) {
    return invalid_argument(fmt::format("admin_addr: {}", r.error().message));
  }
  if (info.fabric_addr.empty() || info.fabric_addr.size() > limits::kMaxFabricAddressLength) {
    return invalid_argument(fmt::format("fabric_addr must be 1..{} characters, got {}",
                                        limits::kMaxFabricAddressLength, info.fabric_addr.size()));
  }
  return {};
}

}  // namespace catena::control
