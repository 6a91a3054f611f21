// catena-controller settings: defaults, a TOML file, command-line flags.
// Precedence: flag > file > default. Every TOML key is the field name below;
// unknown keys are errors, so a typo cannot silently leave a default in place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <catena/control/controller.hpp>
#include <catena/control/controller_server.hpp>
#include <catena/control/result.hpp>
#include <catena/control/thrift_broker_admin.hpp>

namespace catena::control {

struct ControllerConfig {
  std::string listen = "127.0.0.1:7400";  // host:port; port 0 picks a free one
  std::string data_dir = "./catena-controller-data";
  // Empty: the metadata is a log + snapshots in data_dir. Or
  // zk://host:port[,host:port...][/chroot]: znodes on ZooKeeper.
  std::string metadata;
  std::int64_t heartbeat_interval_ms = 100;  // told to brokers at registration
  std::int64_t heartbeat_timeout_ms = 500;   // silence before SUSPECT
  std::int64_t probe_timeout_ms = 200;       // one BrokerAdmin.ping, connect included
  std::int64_t probe_attempts = 2;           // failed probes in a row before DEAD
  std::int64_t lease_ms = 0;                 // brokers act this long after a heartbeat; 0: timeout / 2
  std::int64_t isolation_percent = 50;       // more silent at once: evict nobody (100: never)
  std::int64_t broker_connect_timeout_ms = 200;
  std::int64_t broker_rpc_timeout_ms = 1000;  // configureChain, fence
  std::int64_t broker_rpc_threads = 16;       // BrokerAdmin calls of a push or probe round at once
  std::int64_t push_retry_initial_ms = 100;
  std::int64_t push_retry_max_ms = 5000;
  std::int64_t tick_interval_ms = 50;  // maintenance loop period
  // Head and tail roles evened out by reordering chains this often (0: never).
  std::int64_t role_balance_interval_ms = 300000;
  std::int64_t idle_timeout_ms = 60000;  // idle client connections are closed
  std::int64_t max_connections = 1024;
  std::int64_t snapshot_every_records = 1000;
  std::int64_t group_session_timeout_ms = 10000;    // a silent subscriber-group member is dropped
  std::int64_t group_heartbeat_interval_ms = 1000;  // told to group members
  // With zk:// metadata: the ZooKeeper session of each controller (its
  // election and its store). A leader that dies is replaced once its
  // session expires: this long, about. The server clamps it to
  // [2, 20] x its tickTime.
  std::int64_t zk_session_timeout_ms = 10000;
  // A chain that lost a member waits this long for it to come back with its
  // data before placing a replacement (0: replace at once).
  std::int64_t replacement_delay_ms = 0;
  // A successor whose predecessor has reported its data-plane link broken
  // for this long, while the successor answers every probe, is evicted
  // (Controller::Options::link_fault_timeout). Brokers report every second,
  // so at least 3000.
  std::int64_t link_fault_timeout_ms = 10000;
  std::string log_level = "info";  // trace, debug, info, warn, error, critical, off
  // A file holding the admin token (README "Tenants"): set, every client
  // must authenticate; empty, the cluster is open (no authentication).
  std::string admin_token_file;
  // host:port of the Prometheus endpoint (controller_metrics.hpp); empty: off.
  std::string metrics_addr;

  [[nodiscard]] Result<void> validate() const;
  [[nodiscard]] std::string to_toml() const;

  [[nodiscard]] Controller::Options controller_options() const;
  [[nodiscard]] ThriftBrokerAdmin::Options broker_admin_options() const;
  // listen must have been validated.
  [[nodiscard]] ControllerServer::Options server_options() const;
};

// Overlays the keys present in TOML text onto config.
[[nodiscard]] Result<void> apply_toml(std::string_view text, std::string_view source,
                                      ControllerConfig& config);
[[nodiscard]] Result<void> apply_toml_file(const std::filesystem::path& path, ControllerConfig& config);

}  // namespace catena::control
