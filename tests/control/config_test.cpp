// catena-controller configuration: TOML overlay and validation.
#include <gtest/gtest.h>

#include <catena/control/address.hpp>
#include <catena/control/config.hpp>

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

}  // namespace
}  // namespace catena::control
