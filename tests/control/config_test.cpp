// catena-controller configuration: TOML overlay and validation.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <catena/control/address.hpp>
#include <catena/control/config.hpp>
#include <catena/control/toml_config.hpp>

namespace catena::control {
namespace {

TEST(Config, DefaultsAreValidAndDocumented) {
  ControllerConfig c;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.listen, "127.0.0.1:7400");
  EXPECT_EQ(c.data_dir, "./catena-controller-data");
  EXPECT_EQ(c.heartbeat_timeout_ms, 500);
  EXPECT_EQ(c.heartbeat_interval_ms, 100);
  const auto s = c.server_options();
  EXPECT_EQ(s.thrift.host, "127.0.0.1");
  EXPECT_EQ(s.thrift.port, 7400);
}

TEST(Config, TomlOverridesOnlyTheKeysItHas) {
  ControllerConfig c;
  ASSERT_TRUE(
      apply_toml("listen = '0.0.0.0:0'\nheartbeat_timeout_ms = 900\nlog_level = 'debug'\n", "t", c).ok());
  EXPECT_EQ(c.listen, "0.0.0.0:0");
  EXPECT_EQ(c.heartbeat_timeout_ms, 900);
  EXPECT_EQ(c.heartbeat_interval_ms, 100);
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.controller_options().heartbeat_timeout, std::chrono::milliseconds(900));
}

TEST(Config, MetadataIsTheDirectoryOrAZooKeeperAddress) {
  ControllerConfig c;
  EXPECT_EQ(c.metadata, "") << "the directory store by default";
  ASSERT_TRUE(apply_toml("metadata = 'zk://zk1:2181,zk2:2181/prod'\n", "t", c).ok());
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.controller_options().metadata, "zk://zk1:2181,zk2:2181/prod");
  c.metadata = "zk1:2181";
  auto bad = c.validate();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error().message.find("zk://host:port"), std::string::npos) << bad.error().message;
}

TEST(Config, RoundTripsThroughToml) {
  ControllerConfig c;
  c.listen = "[::1]:7401";
  c.probe_attempts = 5;
  ControllerConfig back;
  ASSERT_TRUE(apply_toml(c.to_toml(), "dump", back).ok());
  EXPECT_EQ(back.listen, c.listen);
  EXPECT_EQ(back.probe_attempts, 5);
}

TEST(Config, RejectsTyposWrongTypesAndBadValues) {
  ControllerConfig c;
  auto typo = apply_toml("heartbeat_timout_ms = 900\n", "f.toml", c);
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.error().message.find("unknown key 'heartbeat_timout_ms'"), std::string::npos);
  EXPECT_FALSE(apply_toml("heartbeat_timeout_ms = '900'\n", "f.toml", c).ok());
  EXPECT_FALSE(apply_toml("listen = 7400\n", "f.toml", c).ok());
  auto syntax = apply_toml("listen = \n", "f.toml", c);
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.error().message.find("f.toml:1"), std::string::npos) << syntax.error().message;
  EXPECT_EQ(c.listen, "127.0.0.1:7400") << "a failed overlay changes nothing";

  c.heartbeat_timeout_ms = 100;
  EXPECT_FALSE(c.validate().ok()) << "timeout must exceed the interval";
  c = {};
  c.listen = "nohost";
  EXPECT_FALSE(c.validate().ok());
  c = {};
  c.log_level = "loud";
  EXPECT_FALSE(c.validate().ok());
  c = {};
  c.probe_attempts = 0;
  EXPECT_FALSE(c.validate().ok());
}

TEST(Config, LeaseAndIsolationAreChecked) {
  ControllerConfig c;
  EXPECT_EQ(c.lease_ms, 0) << "0: half the heartbeat timeout";
  EXPECT_EQ(c.isolation_percent, 50);
  ASSERT_TRUE(apply_toml("lease_ms = 300\nisolation_percent = 100\n", "t", c).ok());
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.controller_options().lease, std::chrono::milliseconds(300));
  EXPECT_EQ(c.controller_options().isolation_percent, 100);
  ControllerConfig back;
  ASSERT_TRUE(apply_toml(c.to_toml(), "dump", back).ok());
  EXPECT_EQ(back.lease_ms, 300);
  EXPECT_EQ(back.isolation_percent, 100);

  c.lease_ms = 500;  // == heartbeat_timeout_ms: the detector could act while it holds
  EXPECT_FALSE(c.validate().ok());
  c.lease_ms = 100;  // == heartbeat_interval_ms: lapses between two heartbeats
  EXPECT_FALSE(c.validate().ok());
  c = {};
  c.heartbeat_timeout_ms = 150;  // a default lease of 75 ms would lapse between 100 ms heartbeats
  EXPECT_FALSE(c.validate().ok());
  c.lease_ms = 120;
  EXPECT_TRUE(c.validate().ok());
  c = {};
  c.isolation_percent = 0;
  EXPECT_FALSE(c.validate().ok());
  c.isolation_percent = 101;
  EXPECT_FALSE(c.validate().ok());
}

TEST(Config, ReplacementDelayIsReadAndChecked) {
  ControllerConfig c;
  EXPECT_EQ(c.replacement_delay_ms, 0) << "0: replace at once";
  EXPECT_EQ(c.controller_options().replacement_delay, std::chrono::milliseconds(0));
  ASSERT_TRUE(apply_toml("replacement_delay_ms = 30000\n", "t", c).ok());
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.controller_options().replacement_delay, std::chrono::milliseconds(30000));
  ControllerConfig back;
  ASSERT_TRUE(apply_toml(c.to_toml(), "dump", back).ok());
  EXPECT_EQ(back.replacement_delay_ms, 30000);
  c.replacement_delay_ms = -1;
  auto r = c.validate();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "replacement_delay_ms must be in 0..2^31, got -1");
}

TEST(Config, RoleBalanceIntervalIsReadAndChecked) {
  ControllerConfig c;
  EXPECT_EQ(c.server_options().role_balance_interval, std::chrono::minutes(5));
  ASSERT_TRUE(apply_toml("role_balance_interval_ms = 0\n", "t", c).ok());
  EXPECT_TRUE(c.validate().ok()) << "0: never";
  EXPECT_EQ(c.server_options().role_balance_interval, std::chrono::milliseconds(0));
  c.role_balance_interval_ms = 60000;
  ControllerConfig back;
  ASSERT_TRUE(apply_toml(c.to_toml(), "dump", back).ok());
  EXPECT_EQ(back.role_balance_interval_ms, 60000);
  c.role_balance_interval_ms = -5;
  auto r = c.validate();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "role_balance_interval_ms must be in 0..2^31 (0: never), got -5");
}

TEST(Config, LinkFaultTimeoutIsReadAndChecked) {
  ControllerConfig c;
  EXPECT_EQ(c.controller_options().link_fault_timeout, std::chrono::seconds(10));
  ASSERT_TRUE(apply_toml("link_fault_timeout_ms = 3000\n", "t", c).ok());
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.controller_options().link_fault_timeout, std::chrono::milliseconds(3000));
  ControllerConfig back;
  ASSERT_TRUE(apply_toml(c.to_toml(), "dump", back).ok());
  EXPECT_EQ(back.link_fault_timeout_ms, 3000);
  // Brokers report a broken link every second, and a gap of half the
  // timeout ends a fault: below 3 s one late report would reset it.
  c.link_fault_timeout_ms = 2999;
  auto r = c.validate();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.error().message,
      "link_fault_timeout_ms must be in 3000..2^31 (brokers report a broken link every second), got 2999");
}

TEST(Address, ParsesHostPortForms) {
  auto v4 = parse_host_port("10.1.2.3:7400");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "10.1.2.3");
  EXPECT_EQ(v4->port, 7400);
  auto v6 = parse_host_port("[fe80::1]:1");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "fe80::1");
  EXPECT_EQ(v6->to_string(), "[fe80::1]:1");
  EXPECT_FALSE(parse_host_port("h:0").ok());
  EXPECT_TRUE(parse_host_port("h:0", true).ok());
  EXPECT_FALSE(parse_host_port("[::1]7400").ok());
}

// The strict reader both daemons share (toml_config.hpp), on a layout with
// tables as catenad's.
struct Sample {
  std::string name = "a";
  std::uint32_t slots = 8;
  bool on = false;
  std::string level = "info";
};

const TomlSchema<Sample>& sample_schema() {
  static const TomlSchema<Sample> s = [] {
    TomlSchema<Sample> k;
    k.text("node.name", &Sample::name)
        .integer("storage.slots", &Sample::slots, 2, 32)
        .boolean("on", &Sample::on)
        .text("log.level", &Sample::level, log_level_rule());
    return k;
  }();
  return s;
}

TEST(TomlSchema, ReadsTablesAndRefusesWhatItDoesNotKnowNamingKeyAndFile) {
  Sample c;
  ASSERT_TRUE(
      sample_schema().apply("on = true\n[node]\nname = 'b'\n[storage]\nslots = 32\n", "s.toml", c).ok());
  EXPECT_EQ(c.name, "b");
  EXPECT_EQ(c.slots, 32u);
  EXPECT_TRUE(c.on);

  auto expect_refused = [&](const std::string& text, const std::string& mentions) {
    Sample before = c;
    auto r = sample_schema().apply(text, "s.toml", c);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
    EXPECT_NE(r.error().message.find(mentions), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("s.toml"), std::string::npos) << r.error().message;
    EXPECT_EQ(c.name, before.name) << "a refused file changes nothing";
    EXPECT_EQ(c.slots, before.slots);
  };
  expect_refused("[node]\nname = 'x'\nnmae = 'y'\n", "unknown key 'node.nmae'");
  expect_refused("[nodes]\nname = 'x'\n", "unknown key 'nodes'");
  expect_refused("name = 'x'\n", "unknown key 'name'");
  expect_refused("[node]\nname = 'x'\n[storage]\nslots = 33\n",
                 "key 'storage.slots': must be in 2..32, got 33");
  expect_refused("[storage]\nslots = '8'\n", "key 'storage.slots': expected an integer");
  expect_refused("on = 1\n", "key 'on': expected a boolean");
  expect_refused("[log]\nlevel = 'loud'\n", "key 'log.level': 'loud' is not one of trace, debug");
}

TEST(TomlSchema, PrintedConfigurationReadsBackToTheSameValues) {
  Sample c;
  c.name = "n-1";
  c.slots = 2;
  c.on = true;
  c.level = "debug";
  const std::string printed = sample_schema().to_toml(c);
  Sample back;
  ASSERT_TRUE(sample_schema().apply(printed, "printed", back).ok()) << printed;
  EXPECT_EQ(back.name, "n-1");
  EXPECT_EQ(back.slots, 2u);
  EXPECT_TRUE(back.on);
  EXPECT_EQ(back.level, "debug");
  EXPECT_EQ(sample_schema().to_toml(back), printed);
}

TEST(TomlSchema, CheckAppliesTheRulesToValuesSetOtherwise) {
  Sample c;
  EXPECT_TRUE(sample_schema().check(c).ok());
  c.level = "loud";  // as a flag would set it
  auto r = sample_schema().check(c, "command line");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("command line: key 'log.level': 'loud'"), std::string::npos)
      << r.error().message;
}

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run(const std::string& command) {
  Outcome r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int status = pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

std::filesystem::path write_file(const std::string& name, const std::string& text) {
  const auto path =
      std::filesystem::temp_directory_path() / ("catena-config-test-" + std::to_string(getpid()) + name);
  std::ofstream(path) << text;
  return path;
}

TEST(ControllerBinary, RefusesUnknownKeysAndBadValuesWithExitCode2) {
  const auto file = write_file("typo.toml", "listen = '127.0.0.1:0'\nheartbeat_timout_ms = 900\n");
  Outcome typo = run(std::string(CATENA_CONTROLLER_BIN) + " --config " + file.string() + " --print-config");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find(file.string() + ": unknown key 'heartbeat_timout_ms'"), std::string::npos)
      << typo.output;

  Outcome level = run(std::string(CATENA_CONTROLLER_BIN) + " --log-level loud --print-config");
  EXPECT_EQ(level.exit_code, 2) << level.output;
  EXPECT_NE(level.output.find("'loud' is not one of"), std::string::npos) << level.output;

  Outcome not_a_number = run(std::string(CATENA_CONTROLLER_BIN) + " --probe-attempts many --print-config");
  EXPECT_EQ(not_a_number.exit_code, 2) << not_a_number.output;
  std::filesystem::remove(file);
}

TEST(ControllerBinary, PrintConfigRoundTrips) {
  Outcome first =
      run(std::string(CATENA_CONTROLLER_BIN) + " --listen 127.0.0.1:7499 --lease-ms 200 --print-config");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("lease_ms = 200"), std::string::npos) << first.output;
  const auto file = write_file("printed.toml", first.output);
  Outcome second = run(std::string(CATENA_CONTROLLER_BIN) + " --config " + file.string() + " --print-config");
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(second.output, first.output);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace catena::control
