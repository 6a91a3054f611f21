// catenad settings: defaults, a TOML file, command-line flags (flag > file >
// default). Read with the controller's strict reader (control/toml_config.hpp):
// an unknown key, a wrong type or a bad value is refused naming the key and
// the file, and catenad exits with code 2. `--print-config` prints the
// effective settings in the file's own layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <catena/control/result.hpp>

namespace catena::catenad {

struct Config {
  std::string node_id;  // [node] id; empty: assigned by the controller
  std::string zone = "zone-a";
  std::string datacenter = "dc-1";
  std::string controller = "127.0.0.1:7400";  // [controller] address
  // [controller] token_file: the admin token, for a controller that
  // requires authentication (catena-controller --admin-token-file).
  std::string controller_token_file;
  std::string admin_listen = "127.0.0.1:0";  // [admin] listen
  std::string metrics_listen;                // [metrics] listen: Prometheus host:port; empty: off
  std::string provider = "soft";             // [fabric] provider
  std::string
      fabric_listen;  // [fabric] listen; empty: 127.0.0.1:0 (soft), the RDMA device's own address (verbs)
  // [fabric] link_stall_ms: a successor link that completes none of its
  // writes this long is dropped and rebuilt (BrokerConfig::link_stall_ms).
  std::uint64_t link_stall_ms = 6000;
  std::uint32_t slots = 8;                 // [storage] segment_slots
  std::uint64_t grace_ms = 5000;           // [storage] grace_ms
  std::uint64_t segment_linger_ms = 1000;  // [storage] segment_linger_ms
  // [storage] keep_dir: kept memory (a memory filesystem: /dev/shm/...), so
  // that a restarted catenad finds the segments it held; needs [node] id.
  std::string keep_dir;
  std::uint64_t session_memory_mb = 1024;  // [limits] session_memory_mb
  // [storage] segment_memory_mb: segment memory all replicas may hold (0:
  // broker::default_segment_memory_bytes).
  std::uint64_t segment_memory_mb = 0;
  // [storage] min_segment_kb: the smallest segment a head opens (segments
  // are sized by what the partition takes in); 0: every segment is the
  // channel's segment_bytes.
  std::uint64_t min_segment_kb = 64;
  int pin_cpu = -1;                // [cpu] pin_data_plane
  std::string log_level = "info";  // [log] level
  // [node] join_rebalance: once registered, have the controller rebalance
  // partition roles onto this node (Controller.addNode), once per start.
  bool join_rebalance = false;
};

// Overlays the keys present in TOML text onto config; nothing changes on error.
[[nodiscard]] control::Result<void> apply_toml(std::string_view text, std::string_view source,
                                               Config& config);
[[nodiscard]] control::Result<void> apply_toml_file(const std::filesystem::path& path, Config& config);
// Every key's rule on the current values (flags included).
[[nodiscard]] control::Result<void> validate(const Config& config);
[[nodiscard]] std::string to_toml(const Config& config);

}  // namespace catena::catenad
