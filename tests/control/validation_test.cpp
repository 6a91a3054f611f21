// Request validation: every bad field is INVALID_ARGUMENT naming the field.
#include <gtest/gtest.h>

#include <catena/control/validation.hpp>

#include "test_support.hpp"

namespace catena::control {
namespace {

using testing::channel_config;
using namespace chain::limits;

void expect_invalid(const idl::ChannelConfig& c, const std::string& mentions) {
  auto r = validate_channel_config(c);
  ASSERT_FALSE(r.ok()) << "accepted " << c;
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message.find(mentions), std::string::npos) << r.error().message;
}

TEST(Validation, ChannelNames) {
  EXPECT_TRUE(validate_channel_config(channel_config("orders.eu-1_v2")).ok());
  EXPECT_TRUE(validate_channel_config(channel_config(std::string(kMaxChannelNameLength, 'n'))).ok());
  expect_invalid(channel_config(""), "channel name");
  expect_invalid(channel_config(std::string(kMaxChannelNameLength + 1, 'n')),
                 "channel name must be 1..128 characters of [A-Za-z0-9._-]");
  expect_invalid(channel_config(std::string(kMaxChannelNameLength + 1, 'n')), "129 characters");
  expect_invalid(channel_config("a/b"), "[A-Za-z0-9._-]");
  expect_invalid(channel_config("with space"), "channel name");
  expect_invalid(channel_config("caf\xc3\xa9"), "channel name");
}

TEST(Validation, PartitionsAndReplication) {
  EXPECT_TRUE(validate_channel_config(channel_config("c", kMaxPartitions, kMaxReplication)).ok());
  expect_invalid(channel_config("c", 0, 3), "partitions must be 1..1024, got 0");
  expect_invalid(channel_config("c", 1025, 3), "got 1025");
  expect_invalid(channel_config("c", 1, 0), "replication must be 1..7, got 0");
  expect_invalid(channel_config("c", 1, 8), "got 8");
}

TEST(Validation, SegmentBytes) {
  auto c = channel_config("c");
  for (std::int64_t ok : {std::int64_t{4096}, std::int64_t{8192}, std::int64_t{kMaxSegmentBytes}}) {
    c.__set_segment_bytes(ok);
    EXPECT_TRUE(validate_channel_config(c).ok()) << ok;
  }
  // 1 GiB was accepted once, and every replica refused it: a full segment's
  // end does not fit the forward immediate.
  for (std::int64_t bad :
       {std::int64_t{0}, std::int64_t{4095}, std::int64_t{6000}, std::int64_t{kMaxSegmentBytes} + 4096,
        std::int64_t{1} << 30, std::int64_t{-4096}}) {
    c.__set_segment_bytes(bad);
    expect_invalid(c, "segment_bytes must be a multiple of 4096");
  }
}

TEST(Validation, Ttl) {
  auto c = channel_config("c");
  c.__set_ttl_ms(100);
  EXPECT_TRUE(validate_channel_config(c).ok());
  c.__set_ttl_ms(99);
  expect_invalid(c, "ttl_ms must be 100..1000000000000, got 99");
  c.__set_ttl_ms(1'000'000'000'000);
  EXPECT_TRUE(validate_channel_config(c).ok());
  c.__set_ttl_ms(1'000'000'000'001);
  expect_invalid(c, "ttl_ms must be 100..1000000000000, got 1000000000001");
}

TEST(Validation, IdlDefaultsAreValid) {
  idl::ChannelConfig c;
  c.__set_name("defaults");
  EXPECT_TRUE(validate_channel_config(c).ok());
  EXPECT_EQ(c.replication, 3);
}

TEST(Validation, NodeInfo) {
  idl::NodeInfo n;
  n.__set_admin_addr("10.0.0.1:7000");
  n.__set_fabric_addr("10.0.0.1:9000");
  EXPECT_TRUE(validate_node_info(n).ok());  // empty id: the controller assigns one
  n.__set_admin_addr("[::1]:7000");
  EXPECT_TRUE(validate_node_info(n).ok());
  for (const char* bad : {"", "host", "host:", ":7000", "host:0", "host:70000", "::1:7000", "host:7x"}) {
    n.__set_admin_addr(bad);
    auto r = validate_node_info(n);
    EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT) << bad;
  }
  n.__set_admin_addr("h:1");
  n.__set_node_id("bad id");
  EXPECT_EQ(validate_node_info(n).code(), idl::ErrorCode::INVALID_ARGUMENT);
  n.__set_node_id("ok-id");
  n.__set_fabric_addr("");
  EXPECT_EQ(validate_node_info(n).code(), idl::ErrorCode::INVALID_ARGUMENT);
}

// Node ids and fabric addresses travel in data-plane hellos: exactly at the
// limit they are accepted, one over they are refused, saying why.
TEST(Validation, NodeInfoAtTheLimits) {
  idl::NodeInfo n;
  n.__set_admin_addr("h:1");
  n.__set_node_id(std::string(kMaxNodeIdLength, 'n'));
  n.__set_fabric_addr(std::string(kMaxFabricAddressLength - 5, 'f') + ":9000");
  EXPECT_TRUE(validate_node_info(n).ok());

  n.__set_node_id(std::string(kMaxNodeIdLength + 1, 'n'));
  auto r = validate_node_info(n);
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message.find("node_id must be 1..128 characters"), std::string::npos)
      << r.error().message;

  n.__set_node_id("ok-id");
  n.__set_fabric_addr(std::string(kMaxFabricAddressLength - 4, 'f') + ":9000");
  r = validate_node_info(n);
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message.find("fabric_addr must be 1..64 characters, got 65"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace catena::control
