// Where a listener can be reached: the rule that keeps a verbs node from
// listening on an address no RDMA device serves, and picks the device's own
// address by default. The rule is checked on made-up device addresses (so
// it runs on a host without RDMA); the system lookup on a device that does
// not exist must fail with a clear error.
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include <catena/fabric/host_port.hpp>
#include <catena/fabric/listen_address.hpp>

namespace catena::fabric {
namespace {

const std::vector<std::string> kServed = {"10.0.2.15", "fd00::5"};

std::string chosen(std::string_view requested) {
  auto r = choose_verbs_listen_address("rxe0", kServed, requested);
  EXPECT_TRUE(r.ok()) << requested << ": " << r.error().message;
  return r.ok() ? r.value() : "";
}

Error refused(std::string_view requested, const std::vector<std::string>& served = kServed) {
  auto r = choose_verbs_listen_address("rxe0", served, requested);
  EXPECT_EQ(r.code(), Errc::invalid_argument) << requested << " was accepted";
  return r.ok() ? Error{} : r.error();
}

TEST(ListenAddress, VerbsDefaultsToTheDevicesFirstAddress) {
  EXPECT_EQ(chosen(""), "10.0.2.15:0");
}

TEST(ListenAddress, VerbsAcceptsTheDevicesOwnAddressesWithOrWithoutAPort) {
  EXPECT_EQ(chosen("10.0.2.15:7000"), "10.0.2.15:7000");
  EXPECT_EQ(chosen("10.0.2.15"), "10.0.2.15:0");
  EXPECT_EQ(chosen("[fd00::5]:9"), "[fd00::5]:9");
  EXPECT_EQ(chosen("[fd00:0::5]"), "[fd00::5]:0");
  EXPECT_EQ(chosen("fd00:0:0::5"), "[fd00::5]:0");
}

TEST(ListenAddress, VerbsRefusesLoopbackWildcardAndOtherAddressesNamingTheDevicesOwn) {
  Error e = refused("127.0.0.1:0");
  EXPECT_NE(e.message.find("loopback"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("10.0.2.15, fd00::5"), std::string::npos) << e.message;
  EXPECT_NE(refused("[::1]:0").message.find("loopback"), std::string::npos);
  EXPECT_NE(refused("0.0.0.0:0").message.find("wildcard"), std::string::npos);
  e = refused("192.168.7.1:4000");
  EXPECT_NE(e.message.find("does not serve"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("rxe0"), std::string::npos) << e.message;
  EXPECT_NE(refused("node-a:4000").message.find("not an IP address"), std::string::npos);
}

TEST(ListenAddress, VerbsDeviceWithoutAnAddressIsRefusedWithTheReason) {
  EXPECT_NE(refused("", {}).message.find("has no IP address"), std::string::npos);
}

TEST(ListenAddress, SoftListensWhereAskedAndOnLoopbackByDefault) {
  EXPECT_EQ(listen_address_for("soft", "").value(), "127.0.0.1:0");
  EXPECT_EQ(listen_address_for("soft:tcp", "10.1.1.1:5").value(), "10.1.1.1:5");
  EXPECT_EQ(listen_address_for("fault:soft", "").value(), "127.0.0.1:0");
}

TEST(ListenAddress, FindsTheDeviceInsideAFaultWrapper) {
  EXPECT_EQ(verbs_device_of("verbs:rxe0"), "rxe0");
  EXPECT_EQ(verbs_device_of("verbs:rxe0,oob"), "rxe0");
  EXPECT_EQ(verbs_device_of("fault:verbs:rxe0,oob"), "rxe0");
  EXPECT_EQ(verbs_device_of("fault:verbs:mlx5_0"), "mlx5_0");
  EXPECT_EQ(verbs_device_of("fault(connect_delay_ms=3):verbs:rxe1"), "rxe1");
  EXPECT_EQ(verbs_device_of("fault:soft:tcp"), "");
  EXPECT_EQ(verbs_device_of("soft"), "");
}

// What the bench sizes a broker's retention by (soft:huge=<MiB>).
TEST(ProviderSpec, SoftHugeArenaBytesAreReadFromTheSpec) {
  EXPECT_EQ(soft_huge_arena_bytes("soft:huge=2048"), std::uint64_t{2048} << 20);
  EXPECT_EQ(soft_huge_arena_bytes("soft:shm,huge=100"), std::uint64_t{100} << 20);
  EXPECT_EQ(soft_huge_arena_bytes("soft:shm,huge=65"), std::uint64_t{66} << 20);  // whole 2 MiB pages
  EXPECT_EQ(soft_huge_arena_bytes("fault(connect_delay_ms=3):soft:huge=64"), std::uint64_t{64} << 20);
  EXPECT_EQ(soft_huge_arena_bytes("soft"), 0u);
  EXPECT_EQ(soft_huge_arena_bytes("soft:shm"), 0u);
  EXPECT_EQ(soft_huge_arena_bytes("soft:huge=1"), 0u);  // invalid: the open says why
  EXPECT_EQ(soft_huge_arena_bytes("verbs:rxe0"), 0u);
}

TEST(ListenAddress, MissingDeviceIsAClearError) {
  auto r = listen_address_for("verbs:nosuchdev9", "127.0.0.1:0");
  ASSERT_EQ(r.code(), Errc::no_device);
  EXPECT_NE(r.error().message.find("no RDMA device 'nosuchdev9'"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace catena::fabric

// The one host:port parser every layer uses (host_port.hpp).
namespace catena {
namespace {

TEST(HostPort, SplitsHostsAndPortsAndSaysWhatIsWrong) {
  std::string why;
  auto v4 = split_host_port("10.1.2.3:7400", &why);
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->host, "10.1.2.3");
  EXPECT_EQ(v4->port, 7400);
  auto v6 = split_host_port("[fe80::1]:80", &why);
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "fe80::1");
  EXPECT_EQ(v6->to_string(), "[fe80::1]:80");
  auto name = split_host_port("node-a.example:1", &why);
  ASSERT_TRUE(name);
  EXPECT_EQ(name->host, "node-a.example");

  const std::pair<const char*, const char*> bad[] = {
      {"::1:80", "IPv6 hosts need brackets"},
      {"[::1", "unterminated IPv6 bracket"},
      {"[::1]80", "unexpected text after the IPv6 bracket"},
      {"h", "missing ':port'"},
      {":80", "empty host"},
      {"h:", "port must be 0..65535"},
      {"h:65536", "port must be 0..65535"},
      {"h:8x", "port must be 0..65535"},
      {"h:0", "port 0"},
      {"a b:1", "bad character in host"},
  };
  for (const auto& [text, reason] : bad) {
    why.clear();
    EXPECT_FALSE(split_host_port(text, &why)) << text;
    EXPECT_EQ(why, reason) << text;
  }
}

TEST(HostPort, PortRulesForListenAddresses) {
  std::string why;
  EXPECT_FALSE(split_host_port("h:0", &why, PortRule::required));
  auto zero = split_host_port("h:0", &why, PortRule::zero_allowed);
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->port, 0);
  EXPECT_FALSE(split_host_port("h", &why, PortRule::zero_allowed));
  auto bare = split_host_port("10.0.0.1", &why, PortRule::optional_zero_ok);
  ASSERT_TRUE(bare);
  EXPECT_FALSE(bare->has_port);
  auto bare6 = split_host_port("[fe80::2]", &why, PortRule::optional_zero_ok);
  ASSERT_TRUE(bare6);
  EXPECT_EQ(bare6->host, "fe80::2");
  EXPECT_FALSE(bare6->has_port);
}

}  // namespace
}  // namespace catena
