// catena-controller: the Catena control plane as a daemon.
//
//   catena-controller [--config FILE] [--listen HOST:PORT] [--data-dir DIR | --metadata zk://...] ...
//
// Settings come from defaults, then the TOML file, then flags (see
// catena/control/config.hpp for every key). SIGINT or SIGTERM stops it
// cleanly: the server stops accepting, open calls finish, the metadata
// store is closed.
//
// With --metadata zk://..., several controllers may share the location:
// they elect a leader (ControllerCandidate); the others answer NOT_LEADER
// naming it. A leader that loses its ZooKeeper session exits at once
// (status 3); restart it and it rejoins as a candidate.
//
// Fault injection for the failover tests, in a real process: with
// CATENA_CONTROLLER_CRASH_DIR=DIR set, a controller that reaches a crash
// point P (Controller::Options::crash_point lists them) and removes the file
// DIR/P kills itself there with SIGKILL, as a crash would. Creating DIR/P
// arms P once for every controller sharing DIR: whichever gets there first
// dies, and its successor passes.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <spdlog/spdlog.h>
#include <string_view>
#include <utility>
#include <vector>

#include <catena/control/address.hpp>
#include <catena/control/config.hpp>
#include <catena/control/controller.hpp>
#include <catena/control/controller_candidate.hpp>
#include <catena/control/controller_metrics.hpp>
#include <catena/control/controller_server.hpp>
#include <catena/control/daemon_settings.hpp>
#include <catena/control/service_notify.hpp>
#include <catena/control/thrift_broker_admin.hpp>
#include <catena/version.hpp>

namespace {

using catena::control::ControllerConfig;

// Writes the bound port so a parent process that asked for port 0 can find it.
bool write_port_file(const std::string& path, std::uint16_t port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// See the top: CATENA_CONTROLLER_CRASH_DIR.
void arm_crash_points(catena::control::Controller::Options& options) {
  const char* dir = std::getenv("CATENA_CONTROLLER_CRASH_DIR");
  if (dir == nullptr || *dir == '\0') return;
  spdlog::warn("fault injection armed: a file in {} named after a crash point kills this controller there",
               dir);
  options.crash_point = [dir = std::string(dir)](std::string_view point) {
    const std::string armed = dir + "/" + std::string(point);
    if (::unlink(armed.c_str()) != 0) return false;
    spdlog::critical("injected crash at {} ({})", point, armed);
    spdlog::default_logger()->flush();
    ::raise(SIGKILL);
    return true;
  };
}

// What a start would refuse that validate() does not see: --advertise, and
// a data directory that is not one (it is created at start if missing).
// Opens nothing.
catena::control::Result<void> check_start(const ControllerConfig& config, const std::string& advertise) {
  if (!advertise.empty()) {
    if (!config.metadata.starts_with("zk://")) {
      return catena::control::invalid_argument("advertise is only for zk:// metadata (several controllers)");
    }
    if (auto r = catena::control::parse_host_port(advertise, /*allow_port_zero=*/false); !r) {
      return catena::control::invalid_argument("advertise: " + r.error().message);
    }
  }
  if (config.metadata.empty()) {
    std::error_code ec;
    const auto st = std::filesystem::status(config.data_dir, ec);
    if (std::filesystem::exists(st) && !std::filesystem::is_directory(st)) {
      return catena::control::invalid_argument("data_dir " + config.data_dir + " is not a directory");
    }
  }
  return {};
}

// What the daemon tells systemd (service_notify.hpp) and needs while it
// serves: the notifier, the call counts the metrics endpoint reads.
struct Service {
  catena::control::ServiceNotifier notify;
  std::shared_ptr<catena::control::RpcStats> rpc = std::make_shared<catena::control::RpcStats>();
  std::unique_ptr<catena::control::ControllerMetrics> metrics;
};

// Serves GET /metrics if the configuration says where; false (logged) if
// it cannot bind.
bool start_metrics(const ControllerConfig& config, Service& service,
                   catena::control::ControllerMetrics::Leading leading) {
  if (config.metrics_addr.empty()) return true;
  auto m = catena::control::ControllerMetrics::start(config.metrics_addr, std::move(leading), service.rpc);
  if (!m) {
    spdlog::critical("{}", m.error().message);
    return false;
  }
  service.metrics = std::move(*m);
  spdlog::info("metrics on http://{}/metrics (port {})", config.metrics_addr, service.metrics->port());
  return true;
}

// Waits for SIGINT or SIGTERM. Meanwhile, every half watchdog period (at
// most 500 ms), pings systemd's watchdog and sends `state()` as STATUS=
// when it changed (a candidate elected, a leader named).
void wait_for_signal(sigset_t& signals, Service& service, const std::function<std::string()>& state) {
  using namespace std::chrono;
  microseconds period = 500ms;
  if (service.notify.watchdog_period().count() > 0)
    period = std::min(period, service.notify.watchdog_period());
  const auto s = duration_cast<seconds>(period);
  const timespec wait{static_cast<time_t>(s.count()),
                      static_cast<long>(duration_cast<nanoseconds>(period - s).count())};
  std::string last = state();
  for (;;) {
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      service.notify.stopping("stopping");
      return;
    }
    service.notify.watchdog();
    if (std::string now = state(); now != last) {
      spdlog::info("{}", now);
      service.notify.status(now);
      last = std::move(now);
    }
  }
}

// One of several controllers on a zk:// location (see the top).
int run_candidate(const ControllerConfig& config, const std::string& advertise, const std::string& port_file,
                  const catena::Clock& clock, catena::control::BrokerAdminClient& brokers, sigset_t& signals,
                  Service& service) {
  catena::control::ControllerCandidate::Options options;
  options.controller = config.controller_options();
  arm_crash_points(options.controller);
  options.server = config.server_options();
  options.server.rpc_stats = service.rpc;
  options.advertise = advertise;
  options.session_timeout = std::chrono::milliseconds(config.zk_session_timeout_ms);
  options.on_lost = [](const catena::control::ControlError& why) {
    spdlog::critical("exiting: {}", why.describe());
    spdlog::default_logger()->flush();
    std::_Exit(3);  // at once: no more ticks, no more answers
  };
  auto candidate = catena::control::ControllerCandidate::start(std::move(options), clock, brokers);
  if (!candidate) {
    spdlog::critical("cannot start the controller: {}", candidate.error().describe());
    return 1;
  }
  const auto& c = **candidate;
  spdlog::info("catena-controller candidate {} listening on port {} (metadata on {}, {})", c.address(),
               c.port(), config.metadata, c.controller() ? "leading" : "following");
  if (!port_file.empty() && !write_port_file(port_file, c.port())) {
    spdlog::critical("cannot write port file {}", port_file);
    return 1;
  }
  if (!start_metrics(config, service, [&c] { return c.controller(); })) return 1;
  auto state = [&c] {
    if (c.controller()) return "leading: serving on " + c.address();
    const std::string leader = c.leader_address();
    return "standing by on " + c.address() + ": " +
           (leader.empty() ? std::string("no leader elected yet") : "the leader is " + leader);
  };
  service.notify.ready(state());
  wait_for_signal(signals, service, state);
  service.metrics.reset();
  (*candidate)->stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"catena-controller " CATENA_VERSION
               ": Catena's control plane (membership, routes, epochs, chain repair)"};
  app.set_version_flag("--version", CATENA_VERSION);
  std::string config_path;
  std::string port_file;
  std::string advertise;
  bool print_config = false;
  bool check_config = false;
  // Each setting is a flag and a CATENA_* variable (daemon_settings.hpp);
  // only those given override the file. A flag's TOML key is its name with '_'.
  catena::control::DaemonSettings<ControllerConfig> settings(app);
  auto flag = [&](const std::string& names, auto ControllerConfig::*field, const std::string& help) {
    std::string key = names.substr(names.rfind("--") + 2);
    std::replace(key.begin(), key.end(), '-', '_');
    settings.setting(names, field, std::move(key), help);
  };
  settings.option("-c,--config", config_path, "TOML config file (keys as the long flags, with '_')")
      ->check(CLI::ExistingFile);
  flag("-l,--listen", &ControllerConfig::listen, "Thrift listen address host:port (port 0: any free port)");
  flag("-d,--data-dir", &ControllerConfig::data_dir, "metadata directory (WAL, snapshot)");
  flag("--metadata", &ControllerConfig::metadata,
       "zk://host:port[,host:port...][/chroot]: keep the metadata on ZooKeeper instead of --data-dir");
  flag("--heartbeat-interval-ms", &ControllerConfig::heartbeat_interval_ms,
       "heartbeat period told to brokers");
  flag("--heartbeat-timeout-ms", &ControllerConfig::heartbeat_timeout_ms, "silence before a node is SUSPECT");
  flag("--broker-rpc-threads", &ControllerConfig::broker_rpc_threads,
       "BrokerAdmin calls (pushes, probes) run on this many threads (1..1024)");
  flag("--probe-timeout-ms", &ControllerConfig::probe_timeout_ms, "BrokerAdmin.ping timeout");
  flag("--probe-attempts", &ControllerConfig::probe_attempts, "failed probes in a row before DEAD");
  flag("--lease-ms", &ControllerConfig::lease_ms,
       "brokers acknowledge and serve this long after a heartbeat (0: heartbeat timeout / 2)");
  flag("--isolation-percent", &ControllerConfig::isolation_percent,
       "more nodes than this % silent at once: assume the controller is cut off, evict nobody");
  flag("--broker-connect-timeout-ms", &ControllerConfig::broker_connect_timeout_ms,
       "connect timeout to brokers");
  flag("--broker-rpc-timeout-ms", &ControllerConfig::broker_rpc_timeout_ms, "configureChain/fence timeout");
  flag("--push-retry-initial-ms", &ControllerConfig::push_retry_initial_ms,
       "first retry delay of a failed push");
  flag("--push-retry-max-ms", &ControllerConfig::push_retry_max_ms, "retry delay cap");
  flag("--tick-interval-ms", &ControllerConfig::tick_interval_ms, "maintenance loop period");
  flag("--role-balance-interval-ms", &ControllerConfig::role_balance_interval_ms,
       "even out head and tail roles (reordering chains, one handoff each) this often; 0: never");
  flag("--idle-timeout-ms", &ControllerConfig::idle_timeout_ms, "close client connections idle this long");
  flag("--max-connections", &ControllerConfig::max_connections, "concurrent client connections");
  flag("--snapshot-every-records", &ControllerConfig::snapshot_every_records,
       "WAL records between snapshots");
  flag("--group-session-timeout-ms", &ControllerConfig::group_session_timeout_ms,
       "a subscriber-group member not heard from this long is dropped (its partitions move)");
  flag("--group-heartbeat-interval-ms", &ControllerConfig::group_heartbeat_interval_ms,
       "heartbeat period told to subscriber-group members");
  flag("--zk-session-timeout-ms", &ControllerConfig::zk_session_timeout_ms,
       "with zk:// metadata: each controller's ZooKeeper session; a dead leader is replaced after about "
       "this long");
  flag("--replacement-delay-ms", &ControllerConfig::replacement_delay_ms,
       "a chain that lost a member waits this long for it to come back with its data before placing "
       "a replacement (0: at once)");
  flag("--link-fault-timeout-ms", &ControllerConfig::link_fault_timeout_ms,
       "a node whose predecessor in a chain reported their data-plane link broken this long, while it "
       "answers every probe, is evicted from the cluster (at least 3000: brokers report every second)");
  flag("--log-level", &ControllerConfig::log_level, "trace|debug|info|warn|error|critical|off");
  flag("--metrics-addr", &ControllerConfig::metrics_addr,
       "serve Prometheus metrics on http://host:port/metrics (e.g. 127.0.0.1:9465; port 0: any; default: "
       "off)");
  flag("--admin-token-file", &ControllerConfig::admin_token_file,
       "file holding the admin token: every client must authenticate (tenants); unset: open cluster");
  settings.option("--advertise", advertise,
                  "with zk:// metadata: the host:port other controllers name as the leader's "
                  "(default: the bound listen address)");
  settings.option("--port-file", port_file, "write the bound port to this file once listening");
  app.add_flag("--print-config", print_config, "print the effective configuration as TOML and exit");
  app.add_flag("--check-config", check_config,
               "check the configuration (file, CATENA_* variables, flags) as a start would, print it as TOML "
               "and exit: 0 if it is good, 2 naming what is wrong; binds, opens and starts nothing");
  app.footer(
      "Precedence: flag > environment (CATENA_<FLAG>, e.g. CATENA_DATA_DIR for --data-dir) > --config "
      "file > default.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; a bad flag is a bad configuration, as a bad file is
  }
  if (auto r = settings.read_environment(); !r) {
    std::cerr << "catena-controller: " << r.error().message << "\n";
    return 2;
  }

  ControllerConfig config;
  if (!config_path.empty()) {
    if (auto r = catena::control::apply_toml_file(config_path, config); !r) {
      std::cerr << "catena-controller: " << r.error().message << "\n";
      return 2;
    }
  }
  settings.apply(config);
  if (auto r = config.validate(); !r) {
    std::cerr << "catena-controller: " << settings.explain(r.error().message) << "\n";
    return 2;
  }
  if (print_config) {
    std::cout << config.to_toml();
    return 0;
  }
  if (auto r = check_start(config, advertise); !r) {
    std::cerr << "catena-controller: " << settings.explain(r.error().message) << "\n";
    return 2;
  }
  if (check_config) {
    std::cout << catena::control::checked_config_header("catena-controller", settings.environment_used())
              << config.to_toml();
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));

  // Signals are taken synchronously by the main thread; block them before
  // any other thread exists so none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a peer closing mid-write is an error value, not a death
  catena::control::route_thrift_logs_to_spdlog();

  catena::SteadyClock clock;
  catena::control::ThriftBrokerAdmin brokers(config.broker_admin_options());
  Service service;
  if (config.metadata.starts_with("zk://")) {
    return run_candidate(config, advertise, port_file, clock, brokers, signals, service);
  }
  auto controller_options = config.controller_options();
  arm_crash_points(controller_options);
  auto opened = catena::control::Controller::open(std::move(controller_options), clock, brokers);
  if (!opened) {
    spdlog::critical("cannot open the controller: {}", opened.error().describe());
    return 1;
  }
  const std::shared_ptr<catena::control::Controller> controller = std::move(*opened);
  auto server_options = config.server_options();
  server_options.rpc_stats = service.rpc;
  catena::control::ControllerServer server(*controller, server_options);
  if (auto r = server.start(); !r) {
    spdlog::critical("{}", r.error().message);
    return 1;
  }
  const std::string where = config.metadata.empty() ? "in " + config.data_dir : "on " + config.metadata;
  spdlog::info("catena-controller listening on {}:{} (metadata {})", server_options.thrift.host,
               server.port(), where);
  if (!port_file.empty() && !write_port_file(port_file, server.port())) {
    spdlog::critical("cannot write port file {}", port_file);
    server.stop();
    return 1;
  }
  if (!start_metrics(config, service, [controller] { return controller; })) {
    server.stop();
    return 1;
  }
  const std::string serving = "serving on " + server.address() + " (metadata " + where + ")";
  service.notify.ready(serving);
  wait_for_signal(signals, service, [&serving] { return serving; });
  service.metrics.reset();
  server.stop();
  spdlog::info("stopped");
  return 0;
}
