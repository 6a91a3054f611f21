// The daemons' operating surface, run as processes (README "Environment",
// "Checking a configuration", "As services (systemd)", "Metrics"):
// - CATENA_* variables set what flags set, below the flags and above the
//   file, and a bad one is refused naming the variable;
// - --check-config prints the effective configuration and exits 0, or 2
//   naming what is wrong, binding and creating nothing;
// - sd_notify over a NOTIFY_SOCKET this test owns: READY=1 only once the
//   daemon answers (the controller a Thrift call, catenad registered),
//   WATCHDOG=1 while WATCHDOG_USEC is set, STOPPING=1 on SIGTERM;
// - the controller's Prometheus endpoint, whose numbers move with what the
//   controller does.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <optional>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/broker/local_cluster.hpp>
#include <catena/control/controller_client.hpp>

#include "http_scrape.hpp"
#include "run_command.hpp"

extern char** environ;

namespace catena::daemon_ops_test {
namespace {

using namespace std::chrono_literals;
using test::Outcome;
using test::run;

const std::string& scratch();

// Removes scratch() when the test program ends.
struct ScratchRemover {
  ScratchRemover() { (void)scratch(); }  // the path is destroyed after this
  ~ScratchRemover() {
    std::error_code ec;
    std::filesystem::remove_all(scratch(), ec);
  }
} const kScratchRemover;

const std::string& scratch() {
  static const std::string dir = [] {
    const std::string d = "/tmp/catena-daemon-ops-" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = scratch() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string bin(const std::string& name) {
  return self_dir() + "/" + name;
}

bool ours(std::string_view var) {
  return var.starts_with("CATENA_") || var.starts_with("NOTIFY_SOCKET=") || var.starts_with("WATCHDOG_");
}

// `env` clearing every CATENA_* variable this test inherited (CI sets
// CATENA_PROVIDER), then setting `vars`: the command sees only ours.
std::string env_prefix(const std::vector<std::string>& vars) {
  std::string cmd = "env";
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    if (var.starts_with("CATENA_")) cmd += " -u " + std::string(var.substr(0, var.find('=')));
  }
  for (const auto& v : vars) cmd += " '" + v + "'";
  return cmd + " ";
}

// A TCP listener on a free loopback port, held for the test: a daemon that
// tried to bind it would fail.
struct HeldPort {
  int fd = -1;
  int port = 0;
  HeldPort() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd, 4) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
  }
  ~HeldPort() { close(fd); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

// A daemon as a child process: our environment without CATENA_* and
// NOTIFY_SOCKET/WATCHDOG_*, plus `vars`; output to `log`. Killed (SIGKILL)
// if the test ends first.
class Daemon {
 public:
  Daemon(std::vector<std::string> args, const std::vector<std::string>& vars, std::string log)
      : log_(std::move(log)) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!ours(*e)) env.emplace_back(*e);
    }
    env.insert(env.end(), vars.begin(), vars.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
    if (posix_spawn(&pid_, argv[0], &files, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&files);
  }
  ~Daemon() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  [[nodiscard]] bool spawned() const { return pid_ > 0; }
  void signal(int sig) const { kill(pid_, sig); }
  // Exit status (128 + signal if killed), or -1 if still running after `timeout`.
  int wait_exit(std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  [[nodiscard]] std::string output() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

// The systemd end of sd_notify: a unix datagram socket whose path goes to
// the daemon as NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& name) : path_(scratch() + "/" + name) {
    std::filesystem::remove(path_);
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~NotifySocket() {
    close(fd_);
    std::filesystem::remove(path_);
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  [[nodiscard]] bool bound() const { return bound_; }
  [[nodiscard]] std::string variable() const { return "NOTIFY_SOCKET=" + path_; }
  // The next datagram, or nullopt after `timeout`.
  std::optional<std::string> next(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
  }
  // Datagrams until one holds `line` as a whole line (that one last), or
  // nullopt after `timeout`; every one received goes to `seen`.
  std::optional<std::string> until(const std::string& line, std::chrono::milliseconds timeout,
                                   std::vector<std::string>* seen = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto m = next(left);
      if (!m) return std::nullopt;
      if (seen != nullptr) seen->push_back(*m);
      if (("\n" + *m + "\n").find("\n" + line + "\n") != std::string::npos) return m;
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

std::string read_port_file(const std::string& path) {
  std::ifstream in(path);
  std::string port;
  in >> port;
  return port;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

// --- CATENA_* variables ---

TEST(DaemonEnv, CatenadTakesFlagThenVariableThenFileThenDefault) {
  const auto file = write_text("env.toml",
                               "[node]\nzone = 'z-file'\ndatacenter = 'dc-file'\n"
                               "[storage]\ngrace_ms = 777\nsegment_linger_ms = 2500\n"
                               "[fabric]\nlink_stall_ms = 2000\n");
  Outcome r =
      run(env_prefix({"CATENA_ZONE=z-env", "CATENA_DATACENTER=dc-env", "CATENA_SEGMENT_SLOTS=4",
                      "CATENA_CONTROLLER=10.0.0.1:7400,10.0.0.2:7400", "CATENA_JOIN_REBALANCE=true"}) +
          bin("catenad") + " --config " + file + " --zone z-flag --check-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output.starts_with(
      "# catenad: configuration OK; the effective settings, as TOML\n"
      "# (flag > environment > config file > default); from the environment: CATENA_DATACENTER, "
      "CATENA_CONTROLLER, CATENA_SEGMENT_SLOTS, CATENA_JOIN_REBALANCE\n"))
      << r.output;
  for (const char* line :
       {"zone = 'z-flag'", "datacenter = 'dc-env'", "address = '10.0.0.1:7400,10.0.0.2:7400'",
        "segment_slots = 4", "grace_ms = 777", "segment_linger_ms = 2500", "link_stall_ms = 2000",
        "join_rebalance = true", "level = 'info'"}) {
    EXPECT_TRUE(has_line(r.output, line)) << line << " in\n" << r.output;
  }
  // A link stall shorter than the transports' own retries is refused.
  Outcome bad = run(bin("catenad") + " --link-stall-ms 100 --check-config");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("fabric.link_stall_ms"), std::string::npos) << bad.output;
}

TEST(DaemonEnv, ControllerTakesFlagThenVariableThenFileThenDefault) {
  const auto file = write_text("controller-env.toml",
                               "heartbeat_interval_ms = 150\nprobe_attempts = 4\n"
                               "log_level = 'debug'\n");
  Outcome r = run(env_prefix({"CATENA_LISTEN=127.0.0.1:7555", "CATENA_DATA_DIR=" + scratch() + "/env-data",
                              "CATENA_PROBE_ATTEMPTS=3", "CATENA_LOG_LEVEL=error",
                              "CATENA_METRICS_ADDR=127.0.0.1:9465"}) +
                  bin("catena-controller") + " --config " + file + " --log-level warn --check-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output.starts_with(
      "# catena-controller: configuration OK; the effective settings, as TOML\n"
      "# (flag > environment > config file > default); from the environment: CATENA_LISTEN, "
      "CATENA_DATA_DIR, CATENA_PROBE_ATTEMPTS, CATENA_METRICS_ADDR\n"))
      << r.output;
  for (const std::string& line :
       std::vector<std::string>{"listen = '127.0.0.1:7555'", "data_dir = '" + scratch() + "/env-data'",
                                std::string("heartbeat_interval_ms = 150"), std::string("probe_attempts = 3"),
                                std::string("heartbeat_timeout_ms = 500"), std::string("log_level = 'warn'"),
                                std::string("metrics_addr = '127.0.0.1:9465'")}) {
    EXPECT_TRUE(has_line(r.output, line)) << line << " in\n" << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(scratch() + "/env-data"))
      << "--check-config created the data directory";
}

TEST(DaemonEnv, ABadVariableIsRefusedNamingIt) {
  Outcome r = run(env_prefix({"CATENA_SEGMENT_SLOTS=lots"}) + bin("catenad") + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(r.output.starts_with("catenad: CATENA_SEGMENT_SLOTS=lots: ")) << r.output;

  r = run(env_prefix({"CATENA_SEGMENT_SLOTS=64"}) + bin("catenad") + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "catenad: flags and environment: key 'storage.segment_slots': must be in 2..32, got 64 "
            "(storage.segment_slots from CATENA_SEGMENT_SLOTS)\n");
  // The flag wins over the variable, so a good flag hides a bad variable.
  r = run(env_prefix({"CATENA_SEGMENT_SLOTS=64"}) + bin("catenad") + " --segment-slots 4 --check-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = run(env_prefix({"CATENA_HEARTBEAT_TIMEOUT_MS=100"}) + bin("catena-controller") + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "catena-controller: heartbeat_timeout_ms (100) must exceed heartbeat_interval_ms (100) "
            "(heartbeat_timeout_ms from CATENA_HEARTBEAT_TIMEOUT_MS)\n");
  r = run(env_prefix({"CATENA_CONFIG=" + scratch() + "/no-such.toml"}) + bin("catena-controller") +
          " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(r.output.starts_with("catena-controller: CATENA_CONFIG=" + scratch() + "/no-such.toml: "))
      << r.output;
}

// --- --check-config ---

TEST(CheckConfig, CatenadChecksWithoutBindingOrRegistering) {
  HeldPort admin;
  HeldPort metrics;
  ASSERT_GT(admin.port, 0);
  ASSERT_GT(metrics.port, 0);
  const auto file = write_text("check.toml", "[node]\nid = 'node-7'\n[admin]\nlisten = '" + admin.address() +
                                                 "'\n[metrics]\nlisten = '" + metrics.address() + "'\n");
  // A start would fail to bind the held ports, and wait for a controller
  // that is not there (port 1): --check-config does neither.
  Outcome r = run("timeout 20 " + env_prefix({}) + bin("catenad") + " --config " + file +
                  " --controller 127.0.0.1:1 --check-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& line : std::vector<std::string>{
           "id = 'node-7'", "listen = '" + admin.address() + "'", "listen = '" + metrics.address() + "'",
           std::string("address = '127.0.0.1:1'")}) {
    EXPECT_TRUE(has_line(r.output, line)) << line << " in\n" << r.output;
  }

  const auto unknown = write_text("check-unknown.toml", "[storage]\nsegment_slotz = 4\n");
  r = run(env_prefix({}) + bin("catenad") + " --config " + unknown + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "catenad: " + unknown + ": unknown key 'storage.segment_slotz'\n");

  const auto bad = write_text("check-bad.toml", "[admin]\nlisten = 'nowhere'\n");
  r = run(env_prefix({}) + bin("catenad") + " --config " + bad + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(bad + ": key 'admin.listen': "), std::string::npos) << r.output;

  // What only a start used to find: a verbs device that is not there.
  r = run(env_prefix({}) + bin("catenad") + " --provider verbs:nosuchdev9 --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("catenad: fabric listen address: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no RDMA device 'nosuchdev9'"), std::string::npos) << r.output;
}

TEST(CheckConfig, ControllerChecksWithoutBindingOrOpeningTheMetadata) {
  HeldPort listen;
  HeldPort metrics;
  ASSERT_GT(listen.port, 0);
  const std::string data = scratch() + "/check-data";
  const auto file =
      write_text("check-controller.toml", "listen = '" + listen.address() + "'\ndata_dir = '" + data +
                                              "'\nmetrics_addr = '" + metrics.address() + "'\n");
  Outcome r = run("timeout 20 " + env_prefix({}) + bin("catena-controller") + " --config " + file +
                  " --check-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has_line(r.output, "listen = '" + listen.address() + "'")) << r.output;
  EXPECT_TRUE(has_line(r.output, "data_dir = '" + data + "'")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(data)) << "--check-config created the data directory";

  const auto unknown = write_text("check-controller-unknown.toml", "heartbeat_timout_ms = 900\n");
  r = run(env_prefix({}) + bin("catena-controller") + " --config " + unknown + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "catena-controller: " + unknown + ": unknown key 'heartbeat_timout_ms'\n");

  r = run(env_prefix({}) + bin("catena-controller") + " --isolation-percent 0 --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "catena-controller: isolation_percent must be in 1..100, got 0 (isolation_percent from "
            "--isolation-percent)\n");

  // What only a start used to find: a data directory that is a file.
  const auto not_a_dir = write_text("not-a-dir", "x");
  r = run(env_prefix({"CATENA_DATA_DIR=" + not_a_dir}) + bin("catena-controller") + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "catena-controller: data_dir " + not_a_dir +
                          " is not a directory (data_dir from CATENA_DATA_DIR)\n");
}

// --- sd_notify ---

TEST(Notify, ControllerIsReadyOnceItAnswersPingsTheWatchdogAndSaysStopping) {
  NotifySocket notify("controller.notify");
  ASSERT_TRUE(notify.bound());
  const std::string port_file = scratch() + "/notify-controller.port";
  Daemon controller({bin("catena-controller"), "--listen", "127.0.0.1:0", "--port-file", port_file,
                     "--data-dir", scratch() + "/notify-controller-data", "--log-level", "warn"},
                    {notify.variable(), "WATCHDOG_USEC=400000"}, scratch() + "/notify-controller.log");
  ASSERT_TRUE(controller.spawned());
  std::vector<std::string> seen;
  auto ready = notify.until("READY=1", 15s, &seen);
  ASSERT_TRUE(ready) << controller.output();
  // At READY=1 it answers: the port is written and a call succeeds at once.
  const std::string port = read_port_file(port_file);
  ASSERT_FALSE(port.empty());
  control::ControllerClient client({"127.0.0.1:" + port, 1000ms, 2000ms, ""});
  auto channels = client.list_channels();
  ASSERT_TRUE(channels.ok()) << channels.error().describe();
  EXPECT_TRUE(channels->empty());
  EXPECT_TRUE(has_line(*ready, "STATUS=serving on 127.0.0.1:" + port + " (metadata in " + scratch() +
                                   "/notify-controller-data)"))
      << *ready;
  EXPECT_EQ(seen.size(), 1U) << "nothing before READY=1";
  // WATCHDOG_USEC=400000: a ping at least every 200 ms.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(notify.until("WATCHDOG=1", 2s)) << "ping " << i;

  controller.signal(SIGTERM);
  auto stopping = notify.until("STOPPING=1", 10s);
  ASSERT_TRUE(stopping) << controller.output();
  EXPECT_EQ(controller.wait_exit(), 0) << controller.output();
}

TEST(Notify, CatenadIsReadyOnlyOnceRegisteredAndSaysStopping) {
  NotifySocket notify("catenad.notify");
  ASSERT_TRUE(notify.bound());
  const int controller_port = test::free_port();
  ASSERT_GT(controller_port, 0);
  const std::string controller_addr = "127.0.0.1:" + std::to_string(controller_port);
  const std::string ready_file = scratch() + "/notify-catenad.ready";
  // catenad first: no controller yet, so it cannot register.
  Daemon node({bin("catenad"), "--controller", controller_addr, "--provider", "soft", "--admin-listen",
               "127.0.0.1:0", "--ready-file", ready_file, "--log-level", "warn"},
              {notify.variable()}, scratch() + "/notify-catenad.log");
  ASSERT_TRUE(node.spawned());
  auto registering = notify.next(10s);
  ASSERT_TRUE(registering) << node.output();
  EXPECT_NE(registering->find("; registering with the controller at " + controller_addr), std::string::npos)
      << *registering;
  EXPECT_EQ(registering->find("READY=1"), std::string::npos) << *registering;
  EXPECT_FALSE(notify.until("READY=1", 1500ms)) << "ready with no controller to register with";

  Daemon controller(
      {bin("catena-controller"), "--listen", controller_addr, "--data-dir",
       scratch() + "/notify-catenad-controller", "--log-level", "warn", "--heartbeat-timeout-ms", "60000"},
      {}, scratch() + "/notify-catenad-controller.log");
  ASSERT_TRUE(controller.spawned());
  auto ready = notify.until("READY=1", 20s);
  ASSERT_TRUE(ready) << node.output() << controller.output();
  // At READY=1 the controller knows the node, and the ready file names it.
  std::ifstream in(ready_file);
  std::string node_id;
  in >> node_id;
  ASSERT_FALSE(node_id.empty());
  EXPECT_NE(ready->find("STATUS=serving as " + node_id + " (node epoch "), std::string::npos) << *ready;
  control::ControllerClient client({controller_addr, 1000ms, 2000ms, ""});
  auto status = client.cluster_status();
  ASSERT_TRUE(status.ok()) << status.error().describe();
  ASSERT_EQ(status->nodes.size(), 1U);
  EXPECT_EQ(status->nodes[0].info.node_id, node_id);
  EXPECT_EQ(status->nodes[0].state, control::idl::NodeState::ALIVE);

  node.signal(SIGTERM);
  EXPECT_TRUE(notify.until("STOPPING=1", 10s)) << node.output();
  EXPECT_EQ(node.wait_exit(), 0) << node.output();
}

// Candidates on ZooKeeper: READY=1 once each serves, its STATUS= saying
// whether it leads or stands by (and for whom); the survivor of a killed
// leader says it leads once elected.
TEST(Notify, ZooKeeperCandidatesSayWhetherTheyLeadOrStandBy) {
  const char* classpath = std::getenv("CATENA_ZK_CLASSPATH");
  if ((classpath == nullptr || *classpath == '\0') &&
      !std::filesystem::exists("/usr/share/java/zookeeper.jar")) {
    const char* require = std::getenv("CATENA_REQUIRE_ZK");
    if (require != nullptr && std::string(require) == "1") FAIL() << "CATENA_REQUIRE_ZK=1: no jar";
    GTEST_SKIP() << "needs ZooKeeper (the Debian zookeeper package)";
  }
  NotifySocket notify("candidates.notify");
  ASSERT_TRUE(notify.bound());
  ClusterOptions o;
  o.nodes = 0;
  o.controllers = 2;
  o.zk_session_timeout_ms = 2000;
  o.dir = scratch() + "/candidates";
  o.quiet = true;
  LocalCluster cluster(o);
  // The cluster starts its candidates with this process's environment.
  const std::string socket = notify.variable().substr(std::strlen("NOTIFY_SOCKET="));
  setenv("NOTIFY_SOCKET", socket.c_str(), 1);
  std::string err;
  const bool started = cluster.start(&err);
  unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(started) << err;

  std::vector<std::string> ready;
  while (ready.size() < 2) {
    auto m = notify.until("READY=1", 20s);
    ASSERT_TRUE(m) << "READY=1 from " << ready.size() << " of 2 candidates";
    ready.push_back(*m);
  }
  const std::string lead = "READY=1\nSTATUS=leading: serving on ";
  const std::size_t leader = ready[0].starts_with(lead) ? 0 : 1;
  ASSERT_TRUE(ready[leader].starts_with(lead)) << ready[0] << "\n" << ready[1];
  const std::string leader_addr = ready[leader].substr(lead.size());
  const std::string standby = ready[1 - leader];
  std::size_t leader_index = 0;
  while (leader_index < 2 && cluster.controller_address(leader_index) != leader_addr) ++leader_index;
  ASSERT_LT(leader_index, 2U) << leader_addr << " is not " << cluster.controller_address();
  const std::string standby_addr = cluster.controller_address(1 - leader_index);
  EXPECT_EQ(standby, "READY=1\nSTATUS=standing by on " + standby_addr + ": the leader is " + leader_addr);

  ASSERT_TRUE(cluster.signal_controller(leader_index, SIGKILL));
  EXPECT_TRUE(notify.until("STATUS=leading: serving on " + standby_addr, 20s))
      << "the standby did not say it leads";
}

// --- the controller's metrics ---

// The value of the sample `name` (with its labels, as printed), if present.
std::optional<double> sample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
  }
  return std::nullopt;
}

TEST(ControllerMetrics, NumbersMoveWithWhatTheControllerDoes) {
  const int metrics_port = test::free_port();
  ASSERT_GT(metrics_port, 0);
  const std::string port_file = scratch() + "/metrics-controller.port";
  Daemon controller({bin("catena-controller"), "--listen", "127.0.0.1:0", "--port-file", port_file,
                     "--data-dir", scratch() + "/metrics-controller-data", "--log-level", "warn",
                     "--metrics-addr", "127.0.0.1:" + std::to_string(metrics_port)},
                    {}, scratch() + "/metrics-controller.log");
  ASSERT_TRUE(controller.spawned());
  ASSERT_TRUE(eventually([&] { return !read_port_file(port_file).empty(); })) << controller.output();
  const std::string addr = "127.0.0.1:" + read_port_file(port_file);
  auto value = [&](const std::string& name) { return sample(test::scrape(metrics_port), name); };
  auto wait_for = [&](const std::string& name, double want) {
    std::optional<double> got;
    const bool ok = eventually([&] {
      got = value(name);
      return got == want;
    });
    EXPECT_TRUE(ok) << name << " is " << (got ? std::to_string(*got) : "absent") << ", want " << want << "\n"
                    << test::scrape(metrics_port);
  };
  wait_for("catena_controller_is_leader", 1);
  EXPECT_EQ(value("catena_controller_channels"), 0);
  EXPECT_EQ(value("catena_controller_nodes{state=\"alive\"}"), 0);

  std::vector<std::unique_ptr<Daemon>> nodes;
  for (int i = 1; i <= 2; ++i) {
    nodes.push_back(std::make_unique<Daemon>(
        std::vector<std::string>{bin("catenad"), "--controller", addr, "--provider", "soft", "--admin-listen",
                                 "127.0.0.1:0", "--node-id", "node-" + std::to_string(i), "--log-level",
                                 "warn"},
        std::vector<std::string>{}, scratch() + "/metrics-node-" + std::to_string(i) + ".log"));
    wait_for("catena_controller_nodes{state=\"alive\"}", i);
  }

  control::ControllerClient client({addr, 1000ms, 5000ms, ""});
  auto create = [&](const std::string& name, int partitions, int replication) {
    control::idl::ChannelConfig config;
    config.__set_name(name);
    config.__set_partitions(partitions);
    config.__set_replication(replication);
    config.__set_segment_bytes(std::int64_t{1} << 20);  // 8 slots x 1 MiB per replica
    return client.create_channel(config);
  };
  ASSERT_TRUE(create("orders", 2, 2).ok());
  ASSERT_TRUE(create("events", 3, 1).ok());
  EXPECT_FALSE(create("orders", 2, 2).ok()) << "a second channel of the same name";
  wait_for("catena_controller_channels", 2);
  EXPECT_EQ(value("catena_controller_partitions"), 5);
  EXPECT_EQ(value("catena_controller_rpcs_total{method=\"createChannel\"}"), 3);
  EXPECT_EQ(value("catena_controller_rpc_errors_total{method=\"createChannel\"}"), 1);
  EXPECT_EQ(value("catena_controller_evictions_total"), 0);
  EXPECT_EQ(value("catena_controller_route_epoch_bumps_total"), 0);
  auto epochs = [&] {
    std::int64_t sum = 0;
    auto list = client.list_channels();
    EXPECT_TRUE(list.ok());
    if (list) {
      for (const auto& ch : *list) {
        for (const auto& route : ch.routes) sum += route.epoch;
      }
    }
    return sum;
  };
  const std::int64_t epochs_before = epochs();

  // node-2 dies: evicted, and every chain it was in gets a new route epoch.
  nodes[1].reset();
  wait_for("catena_controller_evictions_total", 1);
  wait_for("catena_controller_nodes{state=\"dead\"}", 1);
  EXPECT_EQ(value("catena_controller_nodes{state=\"alive\"}"), 1);
  const double bumps = value("catena_controller_route_epoch_bumps_total").value_or(-1);
  EXPECT_GE(bumps, 2) << "both partitions of orders had node-2 in their chain";
  EXPECT_EQ(bumps, static_cast<double>(epochs() - epochs_before));
  EXPECT_GE(value("catena_controller_rpcs_total{method=\"registerNode\"}").value_or(0), 2);

  controller.signal(SIGTERM);
  EXPECT_EQ(controller.wait_exit(), 0) << controller.output();
}

}  // namespace
}  // namespace catena::daemon_ops_test
