// Several controllers (`catena cluster up --controllers 3`): a ZooKeeper
// server keeps the metadata and elects one leader; the leader dies by
// SIGKILL under publish/subscribe traffic. The brokers keep serving the data
// path meanwhile; once a candidate takes over (after the dead leader's
// ZooKeeper session expires) control calls succeed again through the same
// address list, the metadata written by the old leader is there, and every
// acknowledged record reaches both subscribers.
// ControllerHaBench runs `catena bench --controller-failover` with two
// stops so that it cannot rot.
#include <filesystem>

#include "bench_run.hpp"
#include "failover_fixture.hpp"

// Without ZooKeeper's jar (the Debian zookeeper package) the tests skip,
// unless CATENA_REQUIRE_ZK=1.
#define CONTROLLER_HA_ZK_OR_SKIP()                                                                      \
  do {                                                                                                  \
    const char* classpath_ = std::getenv("CATENA_ZK_CLASSPATH");                                        \
    const char* require_ = std::getenv("CATENA_REQUIRE_ZK");                                            \
    if ((classpath_ == nullptr || *classpath_ == '\0') &&                                               \
        !std::filesystem::exists("/usr/share/java/zookeeper.jar")) {                                    \
      if (require_ != nullptr && std::string(require_) == "1") FAIL() << "CATENA_REQUIRE_ZK=1: no jar"; \
      GTEST_SKIP() << "needs ZooKeeper (the Debian zookeeper package)";                                 \
    }                                                                                                   \
  } while (false)

namespace catena::testing {
namespace {

class ControllerHa : public Failover {
 protected:
  void SetUp() override {
    CONTROLLER_HA_ZK_OR_SKIP();
    ClusterOptions o = default_options();
    o.controllers = 3;
    start_cluster(o);
  }

  // The controller that answers control calls now (-1: none answers).
  int leader() {
    auto st = admin_->cluster_status();
    if (!st.ok()) return -1;
    const std::string at = admin_->address();
    for (std::size_t i = 0; i < cluster_->controller_count(); ++i) {
      if (cluster_->controller_address(i) == at) return static_cast<int>(i);
    }
    return -1;
  }
};

TEST_F(ControllerHa, LeaderKilledAckedRecordsDeliveredAndChannelsCreatedAfterTakeover) {
  ASSERT_EQ(cluster_->controller_count(), 3u);
  const std::string addresses = cluster_->controller_address();
  EXPECT_EQ(std::count(addresses.begin(), addresses.end(), ','), 2) << addresses;
  int killed = -1;
  std::chrono::milliseconds takeover{0};
  run_with_fault([&] {
    killed = leader();
    ASSERT_GE(killed, 0) << "no controller answers";
    ASSERT_TRUE(cluster_->signal_controller(static_cast<std::size_t>(killed), SIGKILL));
    const auto killed_at = Clock::now();
    // A control call that writes metadata: refused (or unanswered) until a
    // candidate took over, then it succeeds on the new leader.
    control::idl::ChannelConfig cfg;
    cfg.name = "after-takeover";
    cfg.partitions = 2;
    cfg.replication = 3;
    cfg.segment_bytes = 1 << 20;
    cfg.ttl_ms = 600000;
    // (wait_for asks again once met: the call must not run twice.)
    bool created = false;
    EXPECT_TRUE(wait_for([&] { return created = created || admin_->create_channel(cfg).ok(); }, 60s,
                         "a new leader creating a channel"));
    takeover = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at);
  });
  std::printf("controller takeover after SIGKILL: %lld ms\n", static_cast<long long>(takeover.count()));
  const int now = leader();
  EXPECT_GE(now, 0);
  EXPECT_NE(now, killed);
  // What the old leader wrote, and what the new one did.
  auto f = admin_->describe_channel("f");
  ASSERT_TRUE(f.ok()) << f.error().describe();
  EXPECT_EQ(f->routes.size(), static_cast<std::size_t>(partitions_));
  auto after = admin_->describe_channel("after-takeover");
  ASSERT_TRUE(after.ok()) << after.error().describe();
  ASSERT_EQ(after->routes.size(), 2u);
  for (const auto& r : after->routes) EXPECT_EQ(r.replicas.size(), 3u);
  // Every broker is still a member.
  auto st = admin_->cluster_status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->nodes.size(), static_cast<std::size_t>(kNodes));
  for (const auto& n : st->nodes) EXPECT_EQ(n.state, control::idl::NodeState::ALIVE) << n.info.node_id;
  expect_fresh_reader_sees_every_ack();
}

// Two leader stops (SIGKILL, with a chain member, then SIGTERM) under
// traffic: each reported, a new leader each time, the chain repaired,
// nothing lost or duplicated.
TEST(ControllerHaBench, TwoLeaderStopsReportTakeoverAndLoseNothing) {
  CONTROLLER_HA_ZK_OR_SKIP();
  std::string out;
  int status = 0;
  const auto j = test::run_bench_json("--controller-failover --kills 2 --dir controller-bench-test",
                                      "controller-bench-test.log", &status, &out);
  std::filesystem::remove_all("controller-bench-test");
  ASSERT_FALSE(out.empty()) << "no output; see controller-bench-test.log";
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(j.value("stops", -1), 2) << out;
  EXPECT_EQ(j.value("sigkill_stops", -1), 1) << out;
  EXPECT_EQ(j.value("sigterm_stops", -1), 1) << out;
  EXPECT_EQ(j.value("lost", -1), 0) << out;
  EXPECT_EQ(j.value("duplicated", -1), 0) << out;
  EXPECT_EQ(j.value("other_violations", -1), 0) << out;
  EXPECT_GT(j.value("acknowledged", 0), 1000) << out;
  // A clean stop hands over at once; a crash waits for the ZooKeeper
  // session to expire. Both bounded.
  EXPECT_GT(j.value("sigterm_takeover_max_ms", 0.0), 0.0) << out;
  EXPECT_LT(j.value("sigterm_takeover_max_ms", 1e9), 10000.0) << out;
  EXPECT_LT(j.value("sigkill_takeover_max_ms", 1e9), 40000.0) << out;
  // The SIGKILL stop took a chain member with it: the next leader repaired
  // the chain (after it took over).
  EXPECT_EQ(j.value("broker_kills", -1), 1) << out;
  EXPECT_GE(j.value("repair_ms_max", 0.0), j.value("sigkill_takeover_max_ms", 1e9)) << out;
  EXPECT_LT(j.value("repair_ms_max", 1e9), 60000.0) << out;
}

}  // namespace
}  // namespace catena::testing
