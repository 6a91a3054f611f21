// catena: the command line for people. See `catena --help`.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <catena/broker/local_cluster.hpp>
#include <catena/version.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  using namespace catena::cli;
  std::signal(SIGPIPE, SIG_IGN);
  // Logs go to stderr: stdout carries records (`catena subscribe`) and JSON.
  spdlog::set_default_logger(spdlog::stderr_color_mt("catena"));
  spdlog::set_level(spdlog::level::warn);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug: the clients' connection events too
  CLI::App app{"catena " CATENA_VERSION ": replicated publish/subscribe over RDMA chains"};
  app.set_version_flag("--version", CATENA_VERSION);
  app.require_subcommand(1);
  Common common;
  app.add_option("--controller", common.controller,
                 "controller host:port[,host:port...] (default: $CATENA_CONTROLLER or "
                 "the local cluster in ./catena-cluster, else 127.0.0.1:7400)");
  app.add_option("--token", common.token,
                 "token to authenticate with (the admin's or a tenant's; default: $CATENA_TOKEN); "
                 "needed when the controller runs with --admin-token-file");
  app.add_option("--provider", common.provider, "fabric provider for clients: soft, soft:tcp, verbs:<dev>")
      ->capture_default_str();

  // cluster ------------------------------------------------------------------
  auto* cluster = app.add_subcommand("cluster", "run a local cluster (controller + brokers as processes)");
  cluster->require_subcommand(1);
  ClusterOptions copts;
  bool detach = false;
  auto* up =
      cluster->add_subcommand("up", "start a controller and N brokers on this host; Ctrl-C stops them");
  up->add_option("--nodes", copts.nodes, "brokers to start")->capture_default_str()->check(CLI::Range(1, 64));
  up->add_option("--dir", copts.dir, "state and logs directory")->capture_default_str();
  up->add_option("--controller-port", copts.controller_port, "controller port (0: any)")
      ->capture_default_str();
  up->add_option("--heartbeat-timeout-ms", copts.heartbeat_timeout_ms, "failure detector timeout")
      ->capture_default_str();
  up->add_option("--controllers", copts.controllers,
                 "controllers (more than 1: one leader, the others take over; their metadata on a ZooKeeper "
                 "server started for the cluster, which needs the zookeeper package)")
      ->capture_default_str()
      ->check(CLI::Range(1, 9));
  up->add_option("--zookeeper-servers", copts.zookeeper_servers,
                 "ZooKeeper servers for the controllers: 1, or an ensemble of 3, 5, 7 or 9 on loopback that "
                 "outlives the loss of a minority (more than 1 also puts a single controller on ZooKeeper)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& v) {
            int n = 0;
            try {
              n = std::stoi(v);
            } catch (const std::exception&) {
              return std::string("not a number");
            }
            return LocalCluster::check_zookeeper_servers(n);
          },
          "1|3|5|7|9"));
  up->add_flag("--detach", detach, "leave the cluster running and return");
  up->add_flag("--secure", copts.secure,
               "a closed cluster: a new admin token in <dir>/admin.token (mode 0600) that the controllers "
               "require and the brokers use; the CLI run beside it finds it (see \"Tenants\")");
  bool no_keep = false;
  up->add_flag("--no-keep-memory", no_keep,
               "brokers keep no segments across a restart (default with the soft provider: kept in "
               "/dev/shm, so a crashed broker, restarted by `cluster up`, catches up only what it missed; "
               "not kept on huge pages, soft:huge=<MiB>)");
  // Also accepted after the subcommand: `catena cluster up --provider verbs:rxe0`.
  auto add_fabric_options = [&](CLI::App& cmd) {
    cmd.add_option("--provider", common.provider,
                   "fabric provider for brokers and clients: soft, soft:tcp, "
                   "verbs:<dev>");
    cmd.add_option(
        "--fabric-listen", copts.fabric_host,
        "host the brokers' fabric listeners bind (default: 127.0.0.1 for soft, the RDMA device's own "
        "address for verbs:<dev>)");
  };
  add_fabric_options(*up);
  auto* down = cluster->add_subcommand("down", "stop a cluster started with --detach");
  down->add_option("--dir", copts.dir, "state directory")->capture_default_str();
  DemoOptions demo;
  auto* demo_cmd =
      cluster->add_subcommand("demo", "start a cluster, publish and subscribe through it, report");
  demo_cmd->add_option("--nodes", copts.nodes, "brokers")->capture_default_str()->check(CLI::Range(1, 64));
  demo_cmd->add_option("--dir", copts.dir, "state and logs directory")->capture_default_str();
  demo_cmd->add_option("--records", demo.records, "records to publish")->capture_default_str();
  demo_cmd->add_option("--bytes", demo.bytes, "payload bytes")->capture_default_str();
  demo_cmd->add_option("--partitions", demo.partitions, "partitions of the demo channel")
      ->capture_default_str();
  demo_cmd->add_flag("--kill", demo.kill, "kill -9 a broker in the middle of the traffic");
  add_fabric_options(*demo_cmd);

  // channels -------------------------------------------------------------------
  auto* channel = app.add_subcommand("channel", "create, list, describe, alter and delete channels");
  channel->require_subcommand(1);
  ChannelSpec spec;
  auto* create = channel->add_subcommand("create", "create a channel");
  create->add_option("name", spec.name, "channel name")->required();
  create->add_option("--partitions", spec.partitions, "partitions")->capture_default_str();
  create->add_option("--replication", spec.replication, "chain length R")->capture_default_str();
  create->add_option("--segment-bytes", spec.segment_bytes, "segment size")->capture_default_str();
  create->add_option("--ttl-ms", spec.ttl_ms, "segment time-to-live")->capture_default_str();
  auto* list = channel->add_subcommand("list", "list channels");
  std::string describe_name;
  auto* describe = channel->add_subcommand("describe", "show a channel's partitions and chains");
  describe->add_option("name", describe_name, "channel name")->required();
  std::string alter_name;
  std::int32_t alter_partitions = 0;
  std::int64_t alter_ttl_ms = 0;
  auto* alter = channel->add_subcommand(
      "alter",
      "change a channel live: its partition count (a marker in every affected partition cuts the old "
      "key mapping from the new one) and/or its retention (--ttl-ms, applied to data already stored)");
  alter->add_option("name", alter_name, "channel name")->required();
  auto* alter_partitions_opt = alter->add_option("--partitions", alter_partitions, "the new partition count")
                                   ->check(CLI::PositiveNumber);
  auto* alter_ttl_opt = alter->add_option(
      "--ttl-ms", alter_ttl_ms,
      "the new segment time-to-live in ms (100..10^12): segments not yet expired expire by it, those "
      "already sealed included");
  alter->callback([alter_partitions_opt, alter_ttl_opt] {
    if (alter_partitions_opt->count() == 0 && alter_ttl_opt->count() == 0)
      throw CLI::ValidationError("channel alter", "give --partitions, --ttl-ms or both");
  });

  std::string delete_name;
  bool delete_yes = false;
  auto* remove = channel->add_subcommand(
      "delete", "delete a channel and every record in it, on every node (the name may be used again)");
  remove->add_option("name", delete_name, "channel name")->required();
  remove->add_flag("--yes", delete_yes, "do not ask (needed when stdin is not a terminal)");

  // partitions -------------------------------------------------------------------
  auto* partition = app.add_subcommand("partition", "operator actions on one partition");
  partition->require_subcommand(1);
  std::string lost_channel;
  std::int32_t lost_partition = 0;
  bool lost_yes = false;
  auto* declare_lost = partition->add_subcommand(
      "declare-lost",
      "give up a partition whose every replica is DEAD for good: it is rebuilt empty above every "
      "offset ever handed out, and its subscribers are told which offsets were lost");
  declare_lost->add_option("channel", lost_channel, "channel")->required();
  declare_lost->add_option("partition", lost_partition, "partition")
      ->required()
      ->check(CLI::NonNegativeNumber);
  declare_lost->add_flag("--yes", lost_yes, "confirm: the records it held are gone")->required();
  std::string move_channel;
  std::int32_t move_partition = 0;
  std::vector<std::string> move_to;
  auto* move = partition->add_subcommand(
      "move",
      "move a partition's appends to a new chain at its tail offset, copying nothing: earlier offsets "
      "stay readable where they are until they expire");
  move->add_option("channel", move_channel, "channel")->required();
  move->add_option("partition", move_partition, "partition")->required()->check(CLI::NonNegativeNumber);
  move->add_option("--to", move_to, "the new chain's nodes, head first (node-1,node-4,node-5)")
      ->required()
      ->delimiter(',');

  // data -------------------------------------------------------------------------
  PublishOptions pub;
  auto* publish = app.add_subcommand("publish", "publish stdin, one record per line; prints offsets");
  publish->add_option("channel", pub.channel, "channel")->required();
  publish->add_option("--key", pub.key, "key (records with one key go to one partition)");
  publish->add_option("--header", pub.headers,
                      "name=value header carried by every record (repeatable); with any, the records also "
                      "carry --key (subscribers see both)");
  publish->add_option("--partition", pub.partition, "explicit partition");
  publish->add_flag("--quiet", pub.quiet, "print only the summary");
  SubscribeOptions sub;
  auto* subscribe = app.add_subcommand("subscribe", "print committed records, one per line");
  subscribe->add_option("channel", sub.channel, "channel")->required();
  subscribe->add_option("--from", sub.from, "earliest, latest, committed or an offset")
      ->capture_default_str();
  subscribe->add_option("--count", sub.count, "exit after this many records (0: never)");
  subscribe->add_option("--group", sub.group,
                        "join this subscriber group as a member: consume the partitions it assigns, commit "
                        "positions (--from then says where a never-committed partition starts)");
  subscribe->add_option("--timeout-ms", sub.timeout_ms, "exit after this long without a record (0: never)");
  subscribe
      ->add_option("--format", sub.format,
                   "how a record is printed: raw (its bytes), hex, base64, or json (one object a line: "
                   "partition, offset, timestamp_ns, producer_id, sequence, payload or payload_base64)")
      ->capture_default_str()
      ->check(CLI::IsMember({"raw", "hex", "base64", "json"}));
  subscribe->add_flag("--offsets", sub.show_offsets, "prefix each line with partition:offset");
  subscribe->add_flag("--attributes", sub.show_attributes,
                      "prefix each line with [key=K name=value ...] (records published with headers)");
  subscribe->add_flag(
      "--times", sub.show_times,
      "prefix each line with published_ns:delivered_ns (wall clock; before --offsets' prefix)");

  auto* status = app.add_subcommand("status", "show the cluster's nodes and their state");
  auto* cluster_status_cmd = cluster->add_subcommand("status", "the same as `catena status`");
  StatOptions stat_opts;
  auto* stat = app.add_subcommand("stat", "live view of nodes and partitions (rates, lag), every second");
  add_stat_options(*stat, stat_opts);
  const NodeCommands node_cmds = add_node_commands(app);
  const GroupCommands group_cmds = add_group_commands(app);
  const MirrorCommands mirror_cmds = add_mirror_commands(app);
  const TenantCommands tenant_cmds = add_tenant_commands(app);

  BenchOptions bench;
  auto* bench_cmd = app.add_subcommand("bench",
                                       "latency and throughput of a replicated channel, against this "
                                       "machine's floor (starts its own cluster unless --controller)");
  add_bench_options(*bench_cmd, bench);

  ChaosOptions chaos;
  auto* chaos_cmd = app.add_subcommand("chaos",
                                       "soak a local cluster under random faults (kill -9, pause, "
                                       "controller restart, publisher restart) and check the history");
  add_chaos_options(*chaos_cmd, chaos);

  // --json on every command that prints state: one JSON document on stdout.
  for (CLI::App* cmd : {create, list, describe, alter, declare_lost, move, status, cluster_status_cmd,
                        node_cmds.add, node_cmds.drain, node_cmds.rebalance, group_cmds.list,
                        group_cmds.describe, mirror_cmds.status, tenant_cmds.list}) {
    cmd->add_flag("--json", common.json,
                  "print one JSON document on stdout instead of text (README \"Scripting the CLI\")");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every mistake on the command line exits
    // kExitUsage, whichever of CLI11's own codes it carries.
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  copts.provider = common.provider;
  if (up->parsed()) {
    if (!no_keep) copts.keep_root = default_keep_root(copts);
    return cluster_up(copts, detach);
  }
  if (down->parsed()) return cluster_down(copts);
  if (demo_cmd->parsed()) return cluster_demo(copts, demo, common);
  if (create->parsed()) return channel_create(common, spec);
  if (list->parsed()) return channel_list(common);
  if (describe->parsed()) return channel_describe(common, describe_name);
  if (alter->parsed()) {
    return channel_alter(common, alter_name, alter_partitions,
                         alter_ttl_opt->count() != 0 ? std::optional(alter_ttl_ms) : std::nullopt);
  }
  if (remove->parsed()) return channel_delete(common, delete_name, delete_yes);
  if (declare_lost->parsed()) return partition_declare_lost(common, lost_channel, lost_partition);
  if (move->parsed()) return partition_move(common, move_channel, move_partition, move_to);
  if (publish->parsed()) return publish_stdin(common, pub);
  if (subscribe->parsed()) return subscribe_stdout(common, sub);
  if (status->parsed() || cluster_status_cmd->parsed()) return cluster_status(common);
  if (stat->parsed()) return cluster_stat(common, stat_opts);
  if (node_cmds.add->parsed()) return node_add(common, node_cmds);
  if (node_cmds.drain->parsed()) return node_drain(common, node_cmds);
  if (node_cmds.rebalance->parsed()) return rebalance(common, node_cmds);
  if (group_cmds.list->parsed()) return group_list(common);
  if (group_cmds.describe->parsed()) return group_describe(common, group_cmds);
  if (mirror_cmds.create->parsed()) return mirror_create(common, mirror_cmds);
  if (mirror_cmds.run_cmd->parsed()) return mirror_run(common, mirror_cmds);
  if (mirror_cmds.status->parsed()) return mirror_status(common, mirror_cmds);
  if (mirror_cmds.map->parsed()) return mirror_map(common, mirror_cmds);
  if (tenant_cmds.create->parsed()) return tenant_create(common, tenant_cmds);
  if (tenant_cmds.list->parsed()) return tenant_list(common);
  if (tenant_cmds.remove->parsed()) return tenant_delete(common, tenant_cmds);
  if (tenant_cmds.rotate->parsed()) return tenant_rotate(common, tenant_cmds);
  if (tenant_cmds.alter->parsed()) return tenant_alter(common, tenant_cmds);
  if (bench_cmd->parsed()) return run_bench(common, bench);
  if (chaos_cmd->parsed()) return run_chaos(common, chaos);
  return kExitUsage;
}
