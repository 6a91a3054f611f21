// catenad: one Catena node. Composition root: the broker's data plane
// (catena_broker) plus the control plane's BrokerAdmin service and
// controller client (catena_control), which is why this binary, unlike the
// broker library, links both.
//
// Startup: open the fabric and listen, serve BrokerAdmin, then hand over to
// the NodeAgent (node_agent.hpp): register with the controller (retrying
// until it answers), then heartbeat. Each answered
// heartbeat renews the lease (RegisterReply.lease_ms, from when it was sent)
// under which replicas acknowledge and serve. A heartbeat answered `fenced`
// means the controller declared this node dead: every replica is suspended
// (data kept, nothing acknowledged or served) and the node registers again
// saying what it holds; the controller puts back the partitions it is the
// last copy of and fences the rest. Links the data plane lost are reported
// to the controller, which verifies them before acting. With
// --join-rebalance, once registered, a JoinRebalance thread (on its own
// controller connection) has the controller move partition roles onto the
// node.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <spdlog/spdlog.h>
#include <utility>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/broker_admin_server.hpp>
#include <catena/broker/join_rebalance.hpp>
#include <catena/broker/metrics_server.hpp>
#include <catena/broker/node_agent.hpp>
#include <catena/control/address.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/control/daemon_settings.hpp>
#include <catena/control/service_notify.hpp>
#include <catena/control/tenants.hpp>
#include <catena/fabric/listen_address.hpp>
#include <catena/version.hpp>

#include "catenad_config.hpp"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

}  // namespace

int main(int argc, char** argv) {
  using catena::catenad::Config;
  CLI::App app{"catenad " CATENA_VERSION ": a Catena broker node"};
  app.set_version_flag("--version", CATENA_VERSION);
  std::string config_file;
  std::string ready_file;
  bool print_config = false;
  bool check_config = false;
  // Each setting is a flag and a CATENA_* variable (daemon_settings.hpp);
  // only those given override the file.
  catena::control::DaemonSettings<Config> settings(app);
  auto flag = [&](const std::string& name, auto Config::*field, const char* key, const std::string& help) {
    settings.setting(name, field, key, help);
  };
  settings.option(
      "--config", config_file,
      "TOML config file (flags and CATENA_* variables override it; --print-config shows its layout)");
  flag("--node-id", &Config::node_id, "node.id", "node id (default: assigned by the controller)");
  flag("--zone", &Config::zone, "node.zone", "zone label for replica placement");
  flag("--datacenter", &Config::datacenter, "node.datacenter", "datacenter label");
  flag("--controller", &Config::controller, "controller.address",
       "controller host:port, or several: host:port,host:port");
  flag("--controller-token-file", &Config::controller_token_file, "controller.token_file",
       "file holding the controller's admin token (a controller run with --admin-token-file)");
  flag("--admin-listen", &Config::admin_listen, "admin.listen", "BrokerAdmin Thrift host:port (port 0: any)");
  flag("--metrics-addr", &Config::metrics_listen, "metrics.listen",
       "serve Prometheus metrics on http://host:port/metrics (e.g. 127.0.0.1:9464; default: off)");
  flag("--provider", &Config::provider, "fabric.provider",
       "fabric provider: soft, soft:tcp, soft:shm, verbs:<dev>, verbs:<dev>,oob, dpdk:<port>");
  flag("--fabric-listen", &Config::fabric_listen, "fabric.listen",
       "data-plane host:port (port 0: any); default 127.0.0.1:0 for soft, the device's own address for "
       "verbs:<dev>, which must serve any address given here");
  flag("--link-stall-ms", &Config::link_stall_ms, "fabric.link_stall_ms",
       "a link to a chain successor that completes none of its writes this long is dropped, rebuilt and, "
       "while it cannot be, reported to the controller (keep it above the transport's own retries: ~2 s "
       "on verbs)");
  flag("--segment-slots", &Config::slots, "storage.segment_slots",
       "segment slots per partition replica (memory = slots x segment_bytes)");
  flag("--grace-ms", &Config::grace_ms, "storage.grace_ms",
       "grace for lagging readers after a segment expires");
  flag("--segment-linger-ms", &Config::segment_linger_ms, "storage.segment_linger_ms",
       "an expired segment keeps its memory this long past its grace (at least the grace) for its "
       "partition to reuse in place; shorter gives memory back sooner, at the cost of fresh memory "
       "(page faults, zeroing) when the rate swings back");
  flag("--keep-dir", &Config::keep_dir, "storage.keep_dir",
       "keep segments in this directory on a memory filesystem (e.g. /dev/shm/catena/node-1): a restarted "
       "catenad finds them and catches up only what it missed (soft provider; needs --node-id)");
  flag("--segment-memory-mb", &Config::segment_memory_mb, "storage.segment_memory_mb",
       "registered memory all partitions' segments may hold on this node (0: half the machine's memory, "
       "or 3/4 of the arena with --provider soft:huge=<MiB>); "
       "a segment takes it when it opens and gives it back when it expires; beyond it heads wait "
       "(back-pressure) and the node logs why");
  flag("--min-segment-kb", &Config::min_segment_kb, "storage.min_segment_kb",
       "the smallest segment a head opens: segments are sized by what a partition takes in, from this up "
       "to the channel's segment_bytes (0: every segment is segment_bytes)");
  flag("--session-memory-mb", &Config::session_memory_mb, "limits.session_memory_mb",
       "registered memory all publishers' staging rings may pin on this node; beyond it new publishers "
       "are refused (resource_exhausted)");
  flag("--pin-cpu", &Config::pin_cpu, "cpu.pin_data_plane", "pin the data-plane thread to this CPU (-1: no)");
  flag("--log-level", &Config::log_level, "log.level", "trace, debug, info, warn, error, critical, off");
  settings.switch_setting("--join-rebalance", &Config::join_rebalance, "node.join_rebalance",
                          "once registered, have the controller move partition roles onto this node "
                          "(a rebalance by handoff, as `catena node add`); once per start, never fatal");
  settings.option("--ready-file", ready_file, "write 'node_id admin_addr fabric_addr' here once registered");
  app.add_flag("--print-config", print_config, "print the effective configuration as TOML and exit");
  app.add_flag("--check-config", check_config,
               "check the configuration (file, CATENA_* variables, flags) as a start would, print it as TOML "
               "and exit: 0 if it is good, 2 naming what is wrong; binds and starts nothing");
  app.footer(
      "Precedence: flag > environment (CATENA_<FLAG>, e.g. CATENA_CONTROLLER for --controller) > "
      "--config file > default.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; a bad flag is a bad configuration
  }
  if (auto r = settings.read_environment(); !r) {
    std::fprintf(stderr, "catenad: %s\n", r.error().message.c_str());
    return 2;
  }

  Config s;
  if (!config_file.empty()) {
    if (auto r = catena::catenad::apply_toml_file(config_file, s); !r) {
      std::fprintf(stderr, "catenad: %s\n", r.error().message.c_str());
      return 2;
    }
  }
  settings.apply(s);
  if (auto r = catena::catenad::validate(s); !r) {
    std::fprintf(stderr, "catenad: %s\n", settings.explain(r.error().message).c_str());
    return 2;
  }
  if (print_config) {
    std::fputs(catena::catenad::to_toml(s).c_str(), stdout);
    return 0;
  }
  // A verbs listener on an address its device does not serve (127.0.0.1,
  // another NIC) starts and registers, and then no peer can connect to it.
  auto fabric_listen = catena::fabric::listen_address_for(s.provider, s.fabric_listen);
  if (!fabric_listen) {
    std::fprintf(stderr, "catenad: fabric listen address: %s\n",
                 settings.explain(fabric_listen.error().message).c_str());
    return 2;
  }
  if (check_config) {
    std::fputs(catena::control::checked_config_header("catenad", settings.environment_used()).c_str(),
               stdout);
    std::fputs(catena::catenad::to_toml(s).c_str(), stdout);
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(s.log_level));
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  catena::broker::BrokerConfig bc;
  bc.node_id = s.node_id;
  bc.provider = s.provider;
  bc.fabric_listen = fabric_listen.value();
  bc.slot_count = s.slots;
  bc.grace_ms = s.grace_ms;
  bc.segment_linger_ms = s.segment_linger_ms;
  bc.link_stall_ms = s.link_stall_ms;
  bc.keep_dir = s.keep_dir;
  bc.session_memory_bytes = s.session_memory_mb << 20;
  bc.segment_memory_bytes = s.segment_memory_mb << 20;
  bc.min_segment_bytes = static_cast<std::uint32_t>(s.min_segment_kb << 10);
  bc.pin_cpu = s.pin_cpu;
  auto broker = catena::broker::Broker::start(bc);
  if (!broker) {
    spdlog::error("cannot start the data plane: {}", broker.error().message);
    return 1;
  }
  auto admin_hp = catena::control::parse_host_port(s.admin_listen, /*allow_port_zero=*/true);  // validated
  // Only the controller that registered this node, at the newest
  // controller epoch heard of, may call BrokerAdmin.
  catena::broker::ControllerFence fence;
  catena::broker::BrokerAdminServer admin(*broker.value(), {admin_hp->host, admin_hp->port, &fence});
  if (auto r = admin.start(); !r) {
    spdlog::error("{}", r.error().describe());
    return 1;
  }
  const std::string admin_addr = catena::control::HostPort{admin_hp->host, admin.port()}.to_string();
  std::unique_ptr<catena::broker::MetricsServer> metrics;
  if (!s.metrics_listen.empty()) {
    auto m = catena::broker::MetricsServer::start(*broker.value(), s.metrics_listen);
    if (!m) {
      spdlog::error("{}", m.error().message);
      return 1;
    }
    metrics = std::move(m.value());
    spdlog::info("metrics on http://{}/metrics (port {})", s.metrics_listen, metrics->port());
  }
  const std::string fabric_addr = broker.value()->fabric_address();

  std::string controller_token;
  if (!s.controller_token_file.empty()) {
    auto token = catena::control::read_token_file(s.controller_token_file);
    if (!token) {
      std::fprintf(stderr, "catenad: %s\n", token.error().message.c_str());
      return 2;
    }
    controller_token = std::move(*token);
  }
  catena::control::ControllerClient controller(
      {s.controller, std::chrono::milliseconds(1000), std::chrono::milliseconds(5000), controller_token});
  catena::broker::ControllerCallsOf<catena::control::ControllerClient> calls(controller);
  catena::broker::NodeAgent::Options agent_options;
  agent_options.info.node_id = s.node_id;
  agent_options.info.admin_addr = admin_addr;
  agent_options.info.fabric_addr = fabric_addr;
  agent_options.info.zone = s.zone;
  agent_options.info.datacenter = s.datacenter;
  agent_options.controller = s.controller;
  agent_options.provider = s.provider;
  agent_options.fence = &fence;
  catena::broker::NodeAgent agent(*broker.value(), calls, std::move(agent_options));
  // Its own connection, with room for every move of a rebalance: the
  // agent's stays free for heartbeats.
  catena::control::ControllerClient join_controller(
      {s.controller, std::chrono::milliseconds(1000), std::chrono::milliseconds(120000), controller_token});
  catena::broker::JoinRebalance join_rebalance(
      [&join_controller](const std::string& id) { return join_controller.add_node(id, /*dry_run=*/false); },
      catena::SteadyClock::instance());
  // systemd (Type=notify): READY=1 once registered, with the data plane and
  // BrokerAdmin already listening; STATUS= when the controller fenced this
  // node and it registered again; watchdog pings from the agent's loop.
  catena::control::ServiceNotifier notify;
  notify.status("data plane on " + fabric_addr + ", BrokerAdmin on " + admin_addr +
                "; registering with the controller at " + s.controller);
  std::int64_t epoch = 0;
  auto serving = [&] {
    return "serving as " + agent.node_id() + " (node epoch " + std::to_string(agent.node_epoch()) +
           "): data plane on " + fabric_addr + ", BrokerAdmin on " + admin_addr;
  };
  agent.run(
      g_stop,
      [&] {
        if (!ready_file.empty()) {
          std::ofstream(ready_file) << agent.node_id() << ' ' << admin_addr << ' ' << fabric_addr << '\n';
        }
        if (s.join_rebalance) join_rebalance.start(agent.node_id(), g_stop);
        epoch = agent.node_epoch();
        notify.ready(serving());
      },
      [&] {
        notify.watchdog();
        if (epoch != 0 && agent.node_epoch() != epoch) {  // fenced, and registered again
          epoch = agent.node_epoch();
          notify.status(serving() + "; registered again after the controller fenced it");
        }
      });
  spdlog::info("shutting down");
  notify.stopping("stopping");
  metrics.reset();  // before the broker it reads
  admin.stop();
  broker.value()->stop();
  return 0;
}
