// The dpdk provider beyond the conformance suite: its port specs, that the
// loss shim really loses frames the RC engine then recovers, a smaller path
// MTU, a peer endpoint going away in the same process, and that an idle
// port's progress thread backs off instead of spinning a core.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <thread>

#include <catena/fabric/fabric.hpp>

#include "dpdk/dpdk_port.hpp"
#include "fabric_test_util.hpp"

namespace catena::fabric::test {
namespace {

using namespace std::chrono_literals;

TEST(DpdkProvider, BadPortSpecsAreInvalidArguments) {
  for (const char* spec :
       {"dpdk:", "dpdk:ring,loss=200", "dpdk:ring,mtu=1000", "dpdk:eth9", "dpdk:ring,color=red"}) {
    auto p = Provider::open(spec);
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_EQ(p.code(), Errc::invalid_argument) << spec;
    EXPECT_FALSE(p.error().message.empty());
  }
}

std::uint64_t cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (static_cast<std::uint64_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1'000'000 +
          static_cast<std::uint64_t>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec)) *
         1000;
}

// Streams writes with immediate through a port that drops, duplicates and
// reorders frames; checks every payload and that the shim did drop.
void stream_over(const std::string& spec, std::uint32_t expect_min_drops) {
  auto p = Provider::open(spec);
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto port = dpdk::Port::open(dpdk::parse_port_spec(spec.substr(5)).value());
  ASSERT_TRUE(port.ok());
  const auto drops_before = port.value()->counters().dropped_by_shim.load();
  auto pair = connect_pair(*p.value(), *p.value());
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  Endpoint& c = *pair.value().client;
  Endpoint& s = *pair.value().server;
  constexpr std::uint32_t kLen = 10000;
  constexpr int kOps = 200;
  auto src = p.value()->allocate(kLen * 4, kLocalWrite);
  auto dst = p.value()->allocate(kLen * 4, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src.ok() && dst.ok());
  auto key = s.expose(*dst.value());
  ASSERT_TRUE(key.ok());
  for (int i = 0; i < kOps; ++i) {
    const std::uint32_t slot = static_cast<std::uint32_t>(i % 4) * kLen;
    for (std::uint32_t b = 0; b < kLen; b += 997)
      src.value()->data()[slot + b] = std::byte(static_cast<std::uint8_t>(i));
    ASSERT_EQ(s.post_recv(i, {dst.value().get(), 0, 0}), Errc::ok);
    ASSERT_EQ(c.post_write_imm(i, {src.value().get(), slot, kLen}, {key.value(), slot}, i), Errc::ok);
    Completion rc = wait_recv(s);
    ASSERT_EQ(rc.status, WcStatus::success);
    ASSERT_EQ(rc.imm, static_cast<std::uint32_t>(i));
    for (std::uint32_t b = 0; b < kLen; b += 997) {
      ASSERT_EQ(dst.value()->data()[slot + b], std::byte(static_cast<std::uint8_t>(i))) << i << " " << b;
    }
    ASSERT_EQ(wait_send(c).status, WcStatus::success);
  }
  EXPECT_GE(port.value()->counters().dropped_by_shim.load() - drops_before, expect_min_drops);
}

TEST(DpdkProvider, LossyPortLosesFramesAndEveryWriteStillLands) {
  stream_over("dpdk:ring,loss=5,dup=2,reorder=2,seed=11", 20);
}

TEST(DpdkProvider, SmallPathMtuSegments) {
  stream_over("dpdk:ring,mtu=256", 0);
}

TEST(DpdkProvider, DestroyedPeerEndpointIsADisconnect) {
  auto p = Provider::open("dpdk:ring");
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto pair = connect_pair(*p.value(), *p.value());
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  auto src = p.value()->allocate(64, kLocalWrite);
  ASSERT_TRUE(src.ok());
  pair.value().server.reset();
  Endpoint& c = *pair.value().client;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (c.poll_event() != EndpointEvent::disconnected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(c.state(), EndpointState::disconnected);
  ASSERT_EQ(c.post_send(1, {src.value().get(), 0, 8}), Errc::ok);
  EXPECT_EQ(wait_send(c).status, WcStatus::flushed);
}

TEST(DpdkProvider, IdlePortDoesNotSpin) {
  auto p = Provider::open("dpdk:ring");
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto pair = connect_pair(*p.value(), *p.value());
  ASSERT_TRUE(pair.ok());
  std::this_thread::sleep_for(50ms);  // past the spin and yield phases
  const std::uint64_t before = cpu_ns();
  std::this_thread::sleep_for(300ms);
  const std::uint64_t used = cpu_ns() - before;
  EXPECT_LT(used, 60'000'000u) << "the idle progress thread used " << used / 1000 << " us of CPU in 300 ms";
}

}  // namespace
}  // namespace catena::fabric::test
