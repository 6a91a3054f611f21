// The catena CLI's commands. Each returns a process exit code (ExitCode)
// and prints errors as `catena: <what>: <why>` on stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <catena/broker/client_error.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/control/controller_client.hpp>

namespace CLI {
class App;
}

namespace catena::cli {

using catena::ClusterOptions;
using catena::LocalCluster;

// The CLI's exit codes, for scripts (README "Scripting the CLI"). Every
// error is mapped here, from the controller's codes and the client API's,
// in exit_code_of.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,        // the call failed for another reason (see stderr), or partly failed
  kExitUsage = 2,        // bad arguments: the command line's, or refused as invalid by the cluster
  kExitNotFound = 3,     // no such channel, group, tenant, node or mirror
  kExitRefused = 4,      // unauthenticated, permission denied, or past a tenant's quota
  kExitUnavailable = 5,  // the controller or a broker could not be reached, or timed out: retry
  kExitExists = 6,       // it exists already (channel create)
};
[[nodiscard]] int exit_code_of(const control::ControlError& e) noexcept;
[[nodiscard]] int exit_code_of(client::ErrorCode code) noexcept;

struct Common {
  bool json = false;       // --json: one JSON document on stdout instead of text
  std::string controller;  // empty: $CATENA_CONTROLLER, ./catena-cluster, 127.0.0.1:7400
  std::string provider = "soft";
  std::string token;  // empty: $CATENA_TOKEN, else none (README "Tenants")
  [[nodiscard]] std::string controller_address() const;
  [[nodiscard]] std::string token_value() const;
  // The controller's address(es) and the token.
  [[nodiscard]] control::ControllerClient::Options client_options() const;
};

struct ChannelSpec {
  std::string name;
  int partitions = 1;
  int replication = 3;
  std::int64_t segment_bytes = 4 << 20;
  std::int64_t ttl_ms = 600000;
};

struct PublishOptions {
  std::string channel;
  std::string key;
  std::vector<std::string> headers;  // name=value; with any, records carry the key and these
  int partition = -1;
  bool quiet = false;
};

struct SubscribeOptions {
  std::string channel;
  std::string from = "earliest";
  std::string format = "raw";  // raw, hex, base64, json (one object per record)
  std::uint64_t count = 0;
  std::string group;
  int timeout_ms = 0;
  bool show_offsets = false;
  bool show_times = false;       // prefix: published_ns:delivered_ns (wall clock)
  bool show_attributes = false;  // prefix: [key=K name=value ...] (records published with --header)
};

struct DemoOptions {
  int records = 20000;
  int bytes = 64;
  int partitions = 2;
  bool kill = false;
};

struct BenchOptions {
  int nodes = 3;
  int replicas = 3;
  int iters = 5000;
  int warmup = 500;
  std::string latency_sizes = "64";
  std::string sizes = "64,1024,16384,65536";
  double seconds = 2.0;
  int window = 4096;
  int linger_us = 20;
  int max_batch_bytes = 256 << 10;
  // The publisher ring's most (it grows to it), PublisherOptions' default.
  // It was 64 MiB: the ring then filled in the throughput runs and held
  // ~10 ms of records queued before the head, and records written to
  // memory the head read back long after, out of cache (README, "A ring
  // the size of what is in flight").
  int ring_bytes = static_cast<int>(PublisherOptions{}.ring_bytes);
  std::int64_t segment_bytes = 64 << 20;
  // Segment slots per replica: the bench's own cluster runs with them
  // (catenad --segment-slots), and all are warmed up before measuring.
  // 0: sized so that retention does not cap the throughput rows (8 with a
  // cluster it did not start).
  int log_slots = 0;
  bool cold = false;  // measure without warming the logs up first
  std::string pin = "spread";
  bool json = false;
  bool secure = false;  // its own cluster closed with an admin token (LocalCluster::secure)
  bool no_floor = false;
  bool no_fabric_bw = false;  // skip catena-perf's write bandwidth rows
  bool no_throughput = false;
  bool failover = false;
  bool controller_failover = false;
  int kills = 5;
  int zk_session_timeout_ms = 1500;  // --controller-failover: the controllers' ZooKeeper sessions
  int timeout_ms = 50;
  int probe_timeout_ms = 0;  // --failover: the controller's probe timeout (0: timeout_ms / 4)
  std::string failover_kinds = "crash,silent";  // --failover: SIGKILL and/or SIGSTOP rounds
  int hog = 0;                                  // --failover: busy threads beside the cluster
  bool move = false;
  int moves = 5;
  int retained_mib = 4;
  bool rescale = false;
  bool recovery = false;
  int recovery_mib = 64;
  int partitions = 2;            // --rescale: before the first alter
  std::string partition_counts;  // --partitions as given: "1,16,256" (a single count for --rescale)
  bool head_acks_only = false;   // --partitions: the publisher runs with tail_acks off
  int rounds = 8;                // --partitions: rounds over the partitions between two polls, at most
  std::string alters = "4,3,6,2";
  int keys = 64;
  int members = 2;  // --rescale's subscriber group (0: none)
  std::string fault = "none";
  std::string dir = "catena-bench";
  // Latency rows' .hgrm distributions, their plot and the JSON lines
  // (bench_report.cpp); --replot redraws the plot from what is there.
  std::string out_dir = "catena-bench-results";
  bool replot = false;
};

struct ChaosOptions {
  int faults = 30;
  double seconds = 0;
  std::uint64_t seed = 0;
  int nodes = 5;
  int partitions = 4;
  int producers = 3;
  int interval_ms = 500;
  int timeout_ms = 300;
  std::string dir = "catena-chaos";
  bool json = false;
  bool secure = false;  // its own cluster closed with an admin token (LocalCluster::secure)
  // What a network cut isolates: "broker" (the last broker runs in its own
  // network namespace), "controller", or "none". Cuts need root and
  // iproute2, and every process on soft:tcp.
  std::string cut = "broker";
};

// Prints `catena: <what>: <why>` on stderr; returns `code`.
int fail(const std::string& what, const std::string& why, int code = kExitError);
// The same for an error from the controller or the client API, with its exit code.
int fail(const std::string& what, const control::ControlError& e);
int fail(const std::string& what, const client::Error& e);

// Where `cluster up` keeps brokers' memory by default: a directory in
// /dev/shm named after the cluster's directory; empty where it cannot (not
// the soft provider, no /dev/shm).
std::string default_keep_root(const ClusterOptions& opts);
int cluster_up(ClusterOptions opts, bool detach);
int cluster_down(const ClusterOptions& opts);
int cluster_demo(ClusterOptions opts, const DemoOptions& demo, const Common& common);
int channel_create(const Common& c, const ChannelSpec& spec);
int channel_list(const Common& c);
int channel_describe(const Common& c, const std::string& name);
// Changes the retention (Controller.alterRetention) if ttl_ms is set, then the
// partition count (Controller.alterChannel) if partitions > 0, and prints
// the channel.
int channel_alter(const Common& c, const std::string& name, std::int32_t partitions,
                  std::optional<std::int64_t> ttl_ms);
// Deletes the channel and its records (Controller.deleteChannel); without
// yes, asks on a terminal and refuses elsewhere.
int channel_delete(const Common& c, const std::string& name, bool yes);
int partition_declare_lost(const Common& c, const std::string& channel, std::int32_t partition);
// Tail-offset handoff to the chain `to` (node ids, head first).
int partition_move(const Common& c, const std::string& channel, std::int32_t partition,
                   const std::vector<std::string>& to);
int publish_stdin(const Common& c, const PublishOptions& o);
int subscribe_stdout(const Common& c, const SubscribeOptions& o);
int cluster_status(const Common& c);

void add_bench_options(CLI::App& app, BenchOptions& o);
int run_bench(const Common& c, const BenchOptions& o);
// `catena bench --failover` (bench_failover.cpp).
int run_failover_bench(const Common& c, const BenchOptions& o);
// `catena bench --controller-failover` (bench_controller_failover.cpp).
int run_controller_failover_bench(const Common& c, const BenchOptions& o);
// `catena bench --move` (bench_move.cpp).
int run_move_bench(const Common& c, const BenchOptions& o);
// `catena bench --rescale` (bench_rescale.cpp).
int run_rescale_bench(const Common& c, const BenchOptions& o);
// `catena bench --recovery` (bench_recovery.cpp).
int run_recovery_bench(const Common& c, const BenchOptions& o);
// `catena bench --partitions 1,16,256` (bench_partitions.cpp).
int run_partitions_bench(const Common& c, const BenchOptions& o);

// `catena node drain` and `catena rebalance` (node.cpp).
struct NodeCommands {
  CLI::App* add = nullptr;
  CLI::App* drain = nullptr;
  CLI::App* rebalance = nullptr;
  std::string node_id;
  bool no_wait = false;
  int timeout_s = 600;
  int timeout_ms = 30000;  // node add: how long to wait for the node to be ALIVE
  bool dry_run = false;
};
NodeCommands add_node_commands(CLI::App& app);
int node_add(const Common& c, const NodeCommands& o);
int node_drain(const Common& c, const NodeCommands& o);
int rebalance(const Common& c, const NodeCommands& o);

// `catena group list|describe` (group.cpp).
struct GroupCommands {
  CLI::App* list = nullptr;
  CLI::App* describe = nullptr;
  std::string group;
};
GroupCommands add_group_commands(CLI::App& app);
int group_list(const Common& c);
int group_describe(const Common& c, const GroupCommands& o);

// `catena mirror create|run|status|map` (mirror.cpp).
struct MirrorCommands {
  CLI::App* create = nullptr;
  CLI::App* run_cmd = nullptr;
  CLI::App* status = nullptr;
  CLI::App* map = nullptr;
  std::string state_dir;
  std::string channel;
  std::string to;
  std::string to_token_file;  // the destination cluster's token ($CATENA_MIRROR_TO_TOKEN)
  std::string name;
  bool run = false;
  int save_interval_ms = 100;
  int partition = 0;
  std::uint64_t offset = 0;
};
MirrorCommands add_mirror_commands(CLI::App& app);
int mirror_create(const Common& c, const MirrorCommands& o);
int mirror_run(const Common& c, const MirrorCommands& o);
int mirror_status(const Common& c, const MirrorCommands& o);
int mirror_map(const Common& c, const MirrorCommands& o);
// `catena tenant create|list|alter|delete|rotate-token` (tenant.cpp).
struct TenantCommands {
  CLI::App* create = nullptr;
  CLI::App* list = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* rotate = nullptr;
  CLI::App* alter = nullptr;
  std::string name;
  std::int64_t max_channels = -1;
  std::int64_t max_partitions = -1;
  std::int64_t max_groups = -1;
  std::int64_t max_segment_bytes = -1;
  std::int64_t max_publisher_ring_bytes = -1;
  std::int64_t max_publish_rate = -1;
  std::int64_t max_sessions = -1;
  std::int64_t max_producer_ids_per_minute = -1;
  std::vector<std::string> zones;
  bool any_zone = false;  // tenant alter --any-zone
};
TenantCommands add_tenant_commands(CLI::App& app);
int tenant_create(const Common& c, const TenantCommands& o);
int tenant_list(const Common& c);
int tenant_delete(const Common& c, const TenantCommands& o);
int tenant_rotate(const Common& c, const TenantCommands& o);
int tenant_alter(const Common& c, const TenantCommands& o);

// `catena stat` (stat.cpp): a live view of the cluster from clusterStatus.
struct StatOptions {
  bool once = false;  // one frame (after one interval, for the rates), then exit
  bool json = false;  // with --once: the frame as JSON
  int interval_ms = 1000;
};
void add_stat_options(CLI::App& cmd, StatOptions& o);
int cluster_stat(const Common& c, const StatOptions& o);

// `catena chaos` (chaos.cpp).
void add_chaos_options(CLI::App& app, ChaosOptions& o);
int run_chaos(const Common& c, const ChaosOptions& o);

}  // namespace catena::cli
