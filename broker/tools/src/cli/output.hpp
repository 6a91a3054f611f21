// What the CLI prints for scripts: the controller's state as JSON (one
// document per command with --json; field names in snake_case, numbers as
// numbers, null for "none" or "unlimited"), and records in the formats of
// `catena subscribe --format`. README "Scripting the CLI" documents the
// shapes; tests/broker/cli_script_test.cpp holds them to it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include <catena/control/idl/catena_types.h>

namespace catena {
struct Message;
}

namespace catena::cli {

// The document on stdout, on one line (invalid UTF-8 replaced, never thrown).
void print_json(const nlohmann::json& doc);

[[nodiscard]] nlohmann::json channel_json(const control::idl::ChannelInfo& ch);
[[nodiscard]] nlohmann::json route_json(const control::idl::PartitionRoute& r);
[[nodiscard]] nlohmann::json cluster_status_json(const control::idl::ClusterStatus& s,
                                                 const std::string& controller);
[[nodiscard]] nlohmann::json group_json(const control::idl::GroupStatus& g);
[[nodiscard]] nlohmann::json tenant_json(const control::idl::TenantInfo& t);
[[nodiscard]] nlohmann::json plan_json(const control::idl::RebalancePlan& plan);

// Whether bytes are well-formed UTF-8 (no overlongs, no surrogates, nothing
// past U+10FFFF).
[[nodiscard]] bool valid_utf8(std::span<const std::byte> bytes) noexcept;
// RFC 4648 base64, padded.
[[nodiscard]] std::string base64(std::span<const std::byte> bytes);
// Lower-case hex, two digits a byte.
[[nodiscard]] std::string hex(std::span<const std::byte> bytes);
// A record as one JSON object (`subscribe --format json`): partition,
// offset, timestamp_ns, producer_id, sequence, and payload (valid UTF-8)
// or payload_base64.
[[nodiscard]] nlohmann::json record_json(const Message& m);

}  // namespace catena::cli
