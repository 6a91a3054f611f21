// The daemons' operating surface, run as processes (README "Environment",
// "Checking a configuration", "As services (systemd)", "Metrics"):
// - CATENA_* variables set what flags set, below the flags and above the
//   file, and a bad one is refused naming the variable;
// - --check-config prints the effective configuration and exits 0, or 2
//   naming what is wrong, binding and creating nothing.
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

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

// --- CATENA_* variables ---

TEST(DaemonEnv, CatenadTakesFlagThenVariableThenFileThenDefault) {
  const auto file = write_text("env.toml",
                               "[node]\nzone = 'z-file'\ndatacenter = 'dc-file'\n"
                               "[storage]\ngrace_ms = 777\n");
  Outcome r =
      run(env_prefix({"CATENA_ZONE=z-env", "CATENA_DATACENTER=dc-env", "CATENA_SEGMENT_SLOTS=4",
                      "CATENA_CONTROLLER=10.0.0.1:7400,10.0.0.2:7400", "CATENA_JOIN_REBALANCE=true"}) +
          bin("catenad") + " --config " + file + " --zone z-flag --check-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      r.output.starts_with("# catenad: configuration OK; the effective settings, as TOML\n"
                           "# (flag > environment > config file > default); from the environment: "
                           "CATENA_DATACENTER, "
                           "CATENA_CONTROLLER, CATENA_SEGMENT_SLOTS, CATENA_JOIN_REBALANCE\n"))
      << r.output;
  for (const char* line :
       {"zone = 'z-flag'", "datacenter = 'dc-env'", "address = '10.0.0.1:7400,10.0.0.2:7400'",
        "segment_slots = 4", "grace_ms = 777", "join_rebalance = true", "level = 'info'"}) {
    EXPECT_TRUE(has_line(r.output, line)) << line << " in\n" << r.output;
  }
}

TEST(DaemonEnv, ControllerTakesFlagThenVariableThenFileThenDefault) {
  const auto file = write_text("controller-env.toml",
                               "heartbeat_interval_ms = 150\nprobe_attempts = 4\n"
                               "log_level = 'debug'\n");
  Outcome r = run(env_prefix({"CATENA_LISTEN=127.0.0.1:7555", "CATENA_DATA_DIR=" + scratch() + "/env-data",
                              "CATENA_PROBE_ATTEMPTS=3", "CATENA_LOG_LEVEL=error"}) +
                  bin("catena-controller") + " --config " + file + " --log-level warn --check-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      r.output.starts_with("# catena-controller: configuration OK; the effective settings, as TOML\n"
                           "# (flag > environment > config file > default); from the environment: "
                           "CATENA_LISTEN, "
                           "CATENA_DATA_DIR, CATENA_PROBE_ATTEMPTS\n"))
      << r.output;
  for (const std::string& line : std::vector<std::string>{
           "listen = '127.0.0.1:7555'", "data_dir = '" + scratch() + "/env-data'",
           std::string("heartbeat_interval_ms = 150"), std::string("probe_attempts = 3"),
           std::string("heartbeat_timeout_ms = 500"), std::string("log_level = 'warn'")}) {
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
            "catenad: flags and environment: key "
            "'storage.segment_slots': must be in 2..32, got 64 "
            "(storage.segment_slots from CATENA_SEGMENT_SLOTS)\n");
  // The flag wins over the variable, so a good flag hides a bad variable.
  r = run(env_prefix({"CATENA_SEGMENT_SLOTS=64"}) + bin("catenad") + " --segment-slots 4 --check-config");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = run(env_prefix({"CATENA_HEARTBEAT_TIMEOUT_MS=100"}) + bin("catena-controller") + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "catena-controller: heartbeat_timeout_ms (100) must exceed "
            "heartbeat_interval_ms (100) "
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
  ASSERT_GT(listen.port, 0);
  const std::string data = scratch() + "/check-data";
  const auto file =
      write_text("check-controller.toml", "listen = '" + listen.address() + "'\ndata_dir = '" + data + "'\n");
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
            "catena-controller: isolation_percent must be in 1..100, "
            "got 0 (isolation_percent from "
            "--isolation-percent)\n");

  // What only a start used to find: a data directory that is a file.
  const auto not_a_dir = write_text("not-a-dir", "x");
  r = run(env_prefix({"CATENA_DATA_DIR=" + not_a_dir}) + bin("catena-controller") + " --check-config");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "catena-controller: data_dir " + not_a_dir +
                          " is not a directory (data_dir from CATENA_DATA_DIR)\n");
}

}  // namespace
}  // namespace catena::daemon_ops_test
