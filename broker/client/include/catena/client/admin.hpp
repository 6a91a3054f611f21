// catena::Admin: channel and tenant administration for programs, what
// `catena channel ...` and `catena tenant ...` do. Public: the standard
// library only.
//
//   auto admin = catena::Admin::connect("h1:7400,h2:7400");
//   auto ch = (*admin)->create_channel({.name = "orders", .partitions = 8});
//   if (!ch) { ch.error().describe(); ... }      // invalid_argument: "channel exists: orders"
//
// Every call is one request to the controllers (any of the list; it follows
// the leader) and waits for its answer. Calls are never retried behind the
// caller's back: controller_unavailable means the request may or may not
// have been carried out (create_channel, for one, is not idempotent: look
// with describe_channel). With a tenant's token, the names are the
// tenant's own (README "Tenants").
//
// Thread: thread-safe; calls are serialised on one connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catena/client/api.hpp>
#include <catena/client/connect.hpp>
#include <catena/client/error.hpp>

namespace catena {

// What a channel is created with (the controller's defaults here).
struct ChannelSettings {
  std::string name;                       // [A-Za-z0-9._-]{1,128}
  std::int32_t partitions = 1;            // 1..1024
  std::int32_t replication = 3;           // 1..7: the chain's length
  std::int64_t segment_bytes = 64 << 20;  // 4 KiB..512 MiB, a multiple of 4096
  std::int64_t ttl_ms = 3'600'000;        // retention, 1000..10^12
};

// One partition's chain as the controller routes it now.
struct PartitionChain {
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;         // the route's epoch: a new chain, a new epoch
  std::uint64_t start_offset = 0;  // the chain's first offset (records below are in sealed ranges)
  std::vector<std::string> chain;  // node ids, head first, tail last
};

struct ChannelInfo {
  ChannelSettings settings;  // partitions: the count keyed records map over
  // Every partition with a route, by number: after a shrink also those at
  // or above settings.partitions, which take no new records and keep their
  // routes while subscribers may still read them.
  std::vector<PartitionChain> partitions;
  bool altering = false;  // a change of the partition count is under way
};

// A tenant's quotas (README "Tenants"); -1: no limit.
struct TenantQuotas {
  std::int64_t max_channels = -1;
  std::int64_t max_partitions = -1;     // the sum of its channels' partition counts
  std::int64_t max_groups = -1;         // groups with members or committed offsets
  std::vector<std::string> zones;       // where its replicas may be placed; empty: anywhere
  std::int64_t max_segment_bytes = -1;  // the sum over its partitions of replication x segment_bytes
  // Per node, each broker enforcing its own:
  std::int64_t max_publisher_ring_bytes = -1;   // staging rings its publishers may pin there
  std::int64_t max_publish_bytes_per_sec = -1;  // bytes per second its publishers may append there
  std::int64_t max_sessions = -1;               // client sessions it may hold there
  // Cluster-wide: new producer ids (or epochs) per minute.
  std::int64_t max_producer_ids_per_minute = -1;
};

struct TenantInfo {
  std::string name;
  TenantQuotas quotas;
  // Current use.
  std::int64_t channels = 0;
  std::int64_t partitions = 0;
  std::int64_t groups = 0;
  std::int64_t segment_bytes = 0;
  std::int64_t created_at_ms = 0;  // Unix time
};

class CATENA_API Admin {
 public:
  // Checks the address list now (invalid_argument); dials on the first call.
  [[nodiscard]] static client::Result<std::unique_ptr<Admin>> connect(const std::string& controllers,
                                                                      const ConnectOptions& options = {});
  ~Admin();
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  [[nodiscard]] client::Result<ChannelInfo> create_channel(const ChannelSettings& settings);
  [[nodiscard]] client::Result<ChannelInfo> describe_channel(const std::string& name);
  [[nodiscard]] client::Result<std::vector<ChannelInfo>> list_channels();
  // Changes the partition count under traffic (markers through the data,
  // README "Changing a channel's partition count"); waits until every marker is
  // committed, up to max(rpc_timeout, 30 s).
  [[nodiscard]] client::Result<ChannelInfo> alter_partitions(const std::string& name,
                                                             std::int32_t partitions);
  // Changes the retention of records stored and to come.
  [[nodiscard]] client::Result<ChannelInfo> alter_retention(const std::string& name, std::int64_t ttl_ms);
  // The channel and every record in it, on every node.
  [[nodiscard]] client::Result<void> delete_channel(const std::string& name);

  // Tenants: the admin's calls (with a tenant's token, unauthenticated).
  // create_tenant and rotate_tenant_token return the tenant's token, which
  // the controller keeps only as a hash: it cannot be shown again.
  [[nodiscard]] client::Result<std::string> create_tenant(const std::string& name,
                                                          const TenantQuotas& quotas = {});
  [[nodiscard]] client::Result<std::vector<TenantInfo>> list_tenants();
  // Replaces every quota (read them with list_tenants to change one).
  [[nodiscard]] client::Result<void> alter_tenant(const std::string& name, const TenantQuotas& quotas);
  // A new token; the old one stops working, on connections that used it too.
  [[nodiscard]] client::Result<std::string> rotate_tenant_token(const std::string& name);
  // Refused while the tenant owns channels.
  [[nodiscard]] client::Result<void> delete_tenant(const std::string& name);

 private:
  struct Impl;
  explicit Admin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace catena
