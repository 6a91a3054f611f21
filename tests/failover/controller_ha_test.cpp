// Several controllers (`catena cluster up --controllers 3`): a ZooKeeper
// server keeps the metadata and elects one leader; the leader dies by
// SIGKILL under publish/subscribe traffic. The brokers keep serving the data
// path meanwhile; once a candidate takes over (after the dead leader's
// ZooKeeper session expires) control calls succeed again through the same
// address list, the metadata written by the old leader is there, and every
// acknowledged record reaches both subscribers.
// ControllerHaBench runs `catena bench --controller-failover` with two
// stops so that it cannot rot.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "bench_run.hpp"
#include "failover_fixture.hpp"

namespace catena::testing {
namespace {

class ControllerHa : public Failover {
 protected:
  void SetUp() override {
    FAILOVER_ZK_OR_SKIP();
    ClusterOptions o = default_options();
    o.controllers = 3;
    // A dead leader is replaced once its ZooKeeper session expires: 5 s
    // here instead of the default 10 s (one standalone server that never
    // restarts; ZkEnsemble, which restarts servers, needs 20 s).
    o.zk_session_timeout_ms = 5000;
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

// The leader crashes (SIGKILL, by its own hand) at a chosen step of a
// metadata change: every controller runs with CATENA_CONTROLLER_CRASH_DIR,
// and a file there named after a crash point arms it once
// (controller_main.cpp).
class ControllerHaCrash : public ControllerHa {
 protected:
  void SetUp() override {
    crash_dir_ = std::filesystem::absolute(std::string("failover-crash-") +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(crash_dir_);
    std::filesystem::create_directories(crash_dir_);
    // Only the controllers started now inherit it (no other thread runs yet).
    ::setenv("CATENA_CONTROLLER_CRASH_DIR", crash_dir_.c_str(), 1);
    ControllerHa::SetUp();
    ::unsetenv("CATENA_CONTROLLER_CRASH_DIR");
  }
  void TearDown() override {
    ControllerHa::TearDown();
    std::filesystem::remove_all(crash_dir_);
  }

  void arm(const std::string& point) { std::ofstream(crash_dir_ / point).flush(); }
  [[nodiscard]] bool armed(const std::string& point) const {
    return std::filesystem::exists(crash_dir_ / point);
  }

  // Waits until a controller other than `old` answers control calls.
  int wait_for_new_leader(int old) {
    int now = -1;
    wait_for(
        [&] {
          now = leader();
          return now >= 0 && now != old;
        },
        60s, "a new leader");
    return now;
  }

  std::filesystem::path crash_dir_;
};

// The leader records a new channel and dies before telling any broker. The
// caller hears of no success; the next leader finds the channel in the
// metadata and configures its chains: it takes records and delivers them.
// Meanwhile the data plane of channel "f" keeps committing.
TEST_F(ControllerHaCrash, LeaderKilledAfterRecordingAChannelTheNextLeaderFinishesTheCreate) {
  control::idl::ChannelConfig cfg;
  cfg.name = "late";
  cfg.partitions = 2;
  cfg.replication = 3;
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  int old = -1;
  run_with_fault([&] {
    old = leader();
    ASSERT_GE(old, 0) << "no controller answers";
    arm("create.committed");
    const auto created = admin_->create_channel(cfg);
    EXPECT_FALSE(created.ok()) << "the leader died in the call, yet it answered";
    EXPECT_FALSE(armed("create.committed")) << "the crash point was never reached";
    EXPECT_TRUE(cluster_->wait_controller_exit(static_cast<std::size_t>(old), 10s));
    EXPECT_GE(wait_for_new_leader(old), 0);
  });
  // The record survived the crash, and asking again does not create twice.
  auto late = admin_->describe_channel("late");
  ASSERT_TRUE(late.ok()) << late.error().describe();
  ASSERT_EQ(late->routes.size(), 2u);
  for (const auto& r : late->routes) EXPECT_EQ(r.replicas.size(), 3u);
  EXPECT_EQ(admin_->create_channel(cfg).code(), control::idl::ErrorCode::CHANNEL_EXISTS);

  // Its chains were configured by the next leader: records go in and out.
  control::ControllerClient::Options co;
  co.address = cluster_->controller_address();
  broker::ControllerRoutes routes(co, "late-pub");
  PublisherOptions po;
  po.provider = client_provider_;
  po.retry_timeout = 30s;
  auto pub = Publisher::create(routes, "late", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  constexpr std::uint64_t kRecords = 200;
  std::uint64_t acked = 0, failed = 0;
  for (std::uint64_t id = 0; id < kRecords;) {
    const std::string p = payload_for(id);
    const auto e = pub.value()->publish_to(
        static_cast<std::uint32_t>(id % 2), std::span(reinterpret_cast<const std::byte*>(p.data()), p.size()),
        [&](const PublishResult& r) { ++(r.status == PublishStatus::ok ? acked : failed); });
    if (e == client::ErrorCode::ok)
      ++id;
    else
      ASSERT_TRUE(client::retriable(e)) << client::to_string(e);
    pub.value()->poll();
  }
  ASSERT_TRUE(pub.value()->flush(30s));
  EXPECT_EQ(acked, kRecords);
  EXPECT_EQ(failed, 0u);
  broker::ControllerRoutes sub_routes(co, "late-sub");
  SubscriberOptions so;
  so.provider = client_provider_;
  auto sub = Subscriber::create(sub_routes, "late", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::set<std::uint64_t> seen;
  std::uint64_t duplicates = 0;
  const auto deadline = Clock::now() + 30s;
  while (seen.size() < kRecords && Clock::now() < deadline) {
    if (sub.value()->poll(
            [&](const Message& m) { duplicates += seen.insert(id_of(m.payload)).second ? 0 : 1; }) == 0) {
      std::this_thread::sleep_for(200us);
    }
  }
  EXPECT_EQ(seen.size(), kRecords);
  EXPECT_EQ(duplicates, 0u);
  expect_fresh_reader_sees_every_ack();
}

// The leader seals the head of f's partition for a move and dies before the
// move is recorded. The next leader gives the move up (the old chain at a
// new epoch, which lifts the seal): publishing goes on on the old chain, and
// the same move asked of the new leader then succeeds. Every acknowledged
// record is read back across the sealed range.
TEST_F(ControllerHaCrash, LeaderKilledWithTheHeadSealedTheNextLeaderGivesTheMoveUp) {
  control::ControllerClient::Options co;
  co.address = cluster_->controller_address();
  co.rpc_timeout = 30s;
  control::ControllerClient mover(co);
  auto before = admin_->get_route("f", 0, 0);
  ASSERT_TRUE(before.ok()) << before.error().describe();
  std::vector<std::string> to;
  for (const auto& n : cluster_->nodes()) {
    if (std::none_of(before->replicas.begin(), before->replicas.end(),
                     [&](const auto& r) { return r.node_id == n.node_id; })) {
      to.push_back(n.node_id);  // two nodes outside the chain, then its tail
    }
  }
  ASSERT_GE(to.size(), 2u);
  to.resize(2);
  to.push_back(before->replicas.back().node_id);
  int old = -1;
  run_with_fault([&] {
    old = leader();
    ASSERT_GE(old, 0) << "no controller answers";
    arm("move.sealed");
    const auto moved = mover.move_partition("f", 0, to);
    EXPECT_FALSE(moved.ok()) << "the leader died in the call, yet it answered";
    EXPECT_FALSE(armed("move.sealed")) << "the crash point was never reached";
    EXPECT_TRUE(cluster_->wait_controller_exit(static_cast<std::size_t>(old), 10s));
    ASSERT_GE(wait_for_new_leader(old), 0);
    // Given up: the same chain, a newer epoch, nothing sealed.
    auto after = admin_->get_route("f", 0, 0);
    ASSERT_TRUE(after.ok()) << after.error().describe();
    EXPECT_GT(after->epoch, before->epoch);
    EXPECT_TRUE(after->sealed.empty());
    ASSERT_EQ(after->replicas.size(), before->replicas.size());
    for (std::size_t i = 0; i < after->replicas.size(); ++i) {
      EXPECT_EQ(after->replicas[i].node_id, before->replicas[i].node_id) << i;
    }
    // The old chain takes records again before anything else is asked.
    const std::uint64_t next = next_id_.load();
    wait_for([&] { return max_acked_id_.load() >= next + 500; }, 30s, "the old chain acknowledging again");
    // The new leader holds no half-done move: the same move now succeeds.
    const auto retried = mover.move_partition("f", 0, to);
    ASSERT_TRUE(retried.ok()) << retried.error().describe();
    EXPECT_EQ(retried->replicas.front().node_id, to.front());
    ASSERT_EQ(retried->sealed.size(), 1u);
    EXPECT_EQ(retried->sealed[0].end_offset, retried->start_offset);
  });
  expect_fresh_reader_sees_every_ack();
}

// Two leader stops (SIGKILL, with a chain member, then SIGTERM) under
// traffic: each reported, a new leader each time, the chain repaired,
// nothing lost or duplicated.
TEST(ControllerHaBench, TwoLeaderStopsReportTakeoverAndLoseNothing) {
  FAILOVER_ZK_OR_SKIP();
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
