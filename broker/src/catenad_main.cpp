// catenad: one Catena node. Composition root: the broker's data plane
// (catena_broker) plus the control plane's BrokerAdmin service and
// controller client (catena_control), which is why this binary, unlike the
// broker library, links both.
//
// Startup: open the fabric and listen, serve BrokerAdmin, register with the
// controller (retrying until it answers), then heartbeat. Each answered
// heartbeat renews the lease (RegisterReply.lease_ms, from when it was sent)
// under which replicas acknowledge and serve. A heartbeat answered `fenced`
// means the controller declared this node dead: every replica is suspended
// (data kept, nothing acknowledged or served) and the node registers again
// saying what it holds; the controller puts back the partitions it is the
// last copy of and fences the rest. Links the data plane lost are reported
// to the controller, which verifies them before acting.
#include <catena/broker/broker.hpp>
#include <catena/control/broker_admin_server.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/listen_address.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct Settings {
  std::string config_file;
  std::string node_id;
  std::string zone = "zone-a";
  std::string datacenter = "dc-1";
  std::string controller = "127.0.0.1:7400";
  std::string admin_listen = "127.0.0.1:0";
  std::string provider = "soft";
  std::string fabric_listen;  // empty: 127.0.0.1:0 (soft), the RDMA device's own address (verbs)
  std::uint32_t slots = 8;
  std::uint64_t grace_ms = 5000;
  std::uint64_t session_memory_mb = 1024;
  int pin_cpu = -1;
  std::string log_level = "info";
  std::string ready_file;
};

// TOML first, flags override (CLI11 only assigns flags that were given, so
// parse the file into defaults and re-run the parser).
void apply_toml(const std::string& path, Settings& s) {
  toml::table t = toml::parse_file(path);
  s.node_id = t["node"]["id"].value_or(s.node_id);
  s.zone = t["node"]["zone"].value_or(s.zone);
  s.datacenter = t["node"]["datacenter"].value_or(s.datacenter);
  s.controller = t["controller"]["address"].value_or(s.controller);
  s.admin_listen = t["admin"]["listen"].value_or(s.admin_listen);
  s.provider = t["fabric"]["provider"].value_or(s.provider);
  s.fabric_listen = t["fabric"]["listen"].value_or(s.fabric_listen);
  s.slots = t["storage"]["segment_slots"].value_or(s.slots);
  s.grace_ms = t["storage"]["grace_ms"].value_or(s.grace_ms);
  s.session_memory_mb = t["limits"]["session_memory_mb"].value_or(s.session_memory_mb);
  s.pin_cpu = t["cpu"]["pin_data_plane"].value_or(s.pin_cpu);
  s.log_level = t["log"]["level"].value_or(s.log_level);
}

std::pair<std::string, std::uint16_t> split_host_port(const std::string& hp) {
  auto colon = hp.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("expected host:port, got '" + hp + "'");
  return {hp.substr(0, colon), static_cast<std::uint16_t>(std::stoi(hp.substr(colon + 1)))};
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"catenad: a Catena broker node"};
  auto add_flags = [&](CLI::App& a) {
    a.add_option("--config", s.config_file, "TOML config file (flags override it)");
    a.add_option("--node-id", s.node_id, "node id (default: assigned by the controller)");
    a.add_option("--zone", s.zone, "zone label for replica placement")->capture_default_str();
    a.add_option("--datacenter", s.datacenter, "datacenter label")->capture_default_str();
    a.add_option("--controller", s.controller, "controller host:port")->capture_default_str();
    a.add_option("--admin-listen", s.admin_listen, "BrokerAdmin Thrift host:port (port 0: any)")->capture_default_str();
    a.add_option("--provider", s.provider, "fabric provider: soft, soft:tcp, soft:shm, verbs:<dev>")->capture_default_str();
    a.add_option("--fabric-listen", s.fabric_listen,
                 "data-plane host:port (port 0: any); default 127.0.0.1:0 for soft, the device's own address for "
                 "verbs:<dev>, which must serve any address given here");
    a.add_option("--segment-slots", s.slots, "segment slots per partition replica (memory = slots x segment_bytes)")
        ->capture_default_str();
    a.add_option("--grace-ms", s.grace_ms, "grace for lagging readers after a segment expires")->capture_default_str();
    a.add_option("--session-memory-mb", s.session_memory_mb,
                 "registered memory all publishers' staging rings may pin on this node; beyond it new publishers "
                 "are refused (resource_exhausted)")
        ->capture_default_str();
    a.add_option("--pin-cpu", s.pin_cpu, "pin the data-plane thread to this CPU (-1: no)")->capture_default_str();
    a.add_option("--log-level", s.log_level, "trace, debug, info, warn, error")->capture_default_str();
    a.add_option("--ready-file", s.ready_file, "write 'node_id admin_addr fabric_addr' here once registered");
  };
  add_flags(app);
  CLI11_PARSE(app, argc, argv);
  if (!s.config_file.empty()) {
    try {
      Settings from_file = s;
      apply_toml(s.config_file, from_file);
      s = from_file;
      CLI::App again{"catenad"};
      add_flags(again);
      again.parse(argc, argv);  // flags win over the file
    } catch (const std::exception& e) {
      std::fprintf(stderr, "catenad: config %s: %s\n", s.config_file.c_str(), e.what());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::from_str(s.log_level));
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  // A verbs listener on an address its device does not serve (127.0.0.1,
  // another NIC) starts and registers, and then no peer can connect to it.
  auto fabric_listen = catena::fabric::listen_address_for(s.provider, s.fabric_listen);
  if (!fabric_listen) {
    std::fprintf(stderr, "catenad: fabric listen address: %s\n", fabric_listen.error().message.c_str());
    return 2;
  }

  catena::broker::BrokerConfig bc;
  bc.node_id = s.node_id;
  bc.provider = s.provider;
  bc.fabric_listen = fabric_listen.value();
  bc.slot_count = s.slots;
  bc.grace_ms = s.grace_ms;
  bc.session_memory_bytes = s.session_memory_mb << 20;
  bc.pin_cpu = s.pin_cpu;
  auto broker = catena::broker::Broker::start(bc);
  if (!broker) {
    spdlog::error("cannot start the data plane: {}", broker.error().message);
    return 1;
  }
  std::pair<std::string, std::uint16_t> admin_hp;
  try {
    admin_hp = split_host_port(s.admin_listen);
  } catch (const std::exception& e) {
    spdlog::error("--admin-listen: {}", e.what());
    return 2;
  }
  catena::control::BrokerAdminServer admin(*broker.value(), {admin_hp.first, admin_hp.second});
  if (auto r = admin.start(); !r) {
    spdlog::error("{}", r.error().describe());
    return 1;
  }
  const std::string admin_addr = admin_hp.first + ":" + std::to_string(admin.port());
  const std::string fabric_addr = broker.value()->fabric_address();

  catena::control::ControllerClient controller({s.controller, std::chrono::milliseconds(1000),
                                                std::chrono::milliseconds(5000)});
  catena::control::idl::NodeInfo info;
  info.node_id = s.node_id;
  info.admin_addr = admin_addr;
  info.fabric_addr = fabric_addr;
  info.zone = s.zone;
  info.datacenter = s.datacenter;

  std::int64_t node_epoch = 0;
  int interval_ms = 100;
  int lease_ms = 0;  // 0: the controller grants no lease
  const auto& clock = broker.value()->clock();
  // An answered call renews the lease from when it was sent: the controller
  // waits longer than the lease after it last heard from us before it acts,
  // so our lease has lapsed by then, whatever the call's delay.
  auto renew_lease = [&](std::uint64_t sent_ns) {
    if (lease_ms > 0) broker.value()->set_lease_deadline(sent_ns + static_cast<std::uint64_t>(lease_ms) * 1'000'000);
  };
  // held: what this process kept when it was fenced (nothing at startup).
  auto register_node = [&](const std::vector<catena::control::idl::PartitionProgress>& held) -> bool {
    const std::uint64_t sent = clock.now_ns();
    auto r = controller.register_node(info, held);
    if (!r) {
      spdlog::warn("register with controller {}: {}", s.controller, r.error().describe());
      return false;
    }
    info.node_id = r->node_id;
    node_epoch = r->node_epoch;
    interval_ms = std::max(10, r->heartbeat_interval_ms);
    lease_ms = r->lease_ms;
    if (lease_ms <= 0) broker.value()->set_lease_deadline(~std::uint64_t{0});
    renew_lease(sent);
    broker.value()->set_node_id(r->node_id);
    broker.value()->set_node_epoch(static_cast<std::uint64_t>(r->node_epoch));
    spdlog::info("registered as {} (node epoch {}), admin {}, fabric {} ({})", r->node_id, node_epoch, admin_addr,
                 fabric_addr, s.provider);
    return true;
  };
  while (!g_stop && !register_node({})) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (!s.ready_file.empty() && !g_stop) {
    std::ofstream(s.ready_file) << info.node_id << ' ' << admin_addr << ' ' << fabric_addr << '\n';
  }

  bool stall_logged = false;
  while (!g_stop) {
    if (const auto stalled = broker.value()->data_plane_stalled_ms(); stalled > 0) {
      // No heartbeat for a node that cannot move data: the controller's
      // detector then probes it, the probe fails, and its chains are repaired.
      if (!stall_logged) spdlog::error("data plane silent for {} ms: heartbeats stopped", stalled);
      stall_logged = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      continue;
    }
    if (stall_logged) spdlog::warn("data plane running again");
    stall_logged = false;
    catena::control::idl::HeartbeatRequest hb;
    hb.node_id = info.node_id;
    hb.node_epoch = node_epoch;
    // Load and per-partition progress: the controller promotes a joining
    // replica once its tail reports it caught up.
    hb.stats = catena::control::node_stats_of(broker.value()->stats());
    const std::uint64_t sent = clock.now_ns();
    auto reply = controller.heartbeat(hb);
    if (reply && !reply->fenced) renew_lease(sent);
    if (reply && reply->fenced) {
      // The controller acted without us. Stop acting at once, but keep the
      // data: if we hold the last copy of a partition, the controller puts
      // it back; what it no longer wants here it fences.
      spdlog::warn("controller fenced node epoch {}: suspending every replica (data kept) and registering again",
                   node_epoch);
      broker.value()->set_lease_deadline(0);
      broker.value()->suspend_all();
      // Links the retired incarnation lost say nothing about its old
      // neighbours: they dropped it. Reported now, under the new
      // registration, they would have the controller suspect and probe
      // healthy nodes (seen after a network cut healed).
      (void)broker.value()->take_link_reports();
      const auto held = catena::control::node_stats_of(broker.value()->stats()).partitions;
      register_node(held);
    } else if (!reply && reply.code() == catena::control::idl::ErrorCode::UNKNOWN_NODE) {
      register_node(catena::control::node_stats_of(broker.value()->stats()).partitions);
    }
    for (const auto& link : broker.value()->take_link_reports()) {
      catena::control::idl::FailureReport rep;
      rep.reporter = info.node_id;
      rep.suspect_node_id = link.suspect;
      rep.channel = link.channel;
      rep.partition = static_cast<std::int32_t>(link.partition);
      rep.epoch = static_cast<std::int64_t>(link.epoch);
      rep.reason = link.reason;
      if (auto r = controller.report_failure(rep); !r) {
        spdlog::debug("report about {} on {}/{} not taken: {}", link.suspect, link.channel, link.partition,
                      r.error().describe());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  spdlog::info("shutting down");
  admin.stop();
  broker.value()->stop();
  return 0;
}
