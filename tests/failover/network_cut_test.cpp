// Failover when a broker is cut off the network (failover_fixture.hpp): the
// middle replica, the head, or a partition's only replica in its own network
// namespace, its veth pair cut and healed. They need root and iproute2 and
// skip otherwise (fail under CATENA_REQUIRE_NETNS=1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "failover_fixture.hpp"

namespace catena::testing {
namespace {

// The same cluster with one broker, node-1, in its own network namespace,
// joined to the host by a veth pair, so that cutting the pair cuts that node
// off everything: its data-plane links, its heartbeats and the controller's
// probes. Every process talks TCP (soft:tcp): the soft provider's shared
// memory would cross a namespace boundary untouched. The namespace is torn
// down after the cluster, whatever the outcome.
class NetworkCut : public Failover {
 protected:
  // Placement picks node-0, node-1, node-2 on a fresh cluster (zones a, b, c
  // in registration order): node-i is at position i of the chain. The test
  // checks that. NetworkCut isolates the middle; NetworkCutHead the head.
  virtual std::size_t isolated() const { return 1; }

  void SetUp() override {
    open_netns(/*second_link=*/false, &netns_);
    if (!netns_) return;
    ClusterOptions o = default_options();
    o.provider = "soft:tcp";
    o.host = netns_->host_addr();
    o.node_launch[static_cast<int>(isolated())] =
        NodeLaunch{netns_->exec_prefix(), netns_->inner_addr(), {}, {}};
    client_provider_ = "soft:tcp";
    // Room for ~300k records at ~6k/s at most: the longest cut and the
    // slowest re-registration the waits below allow, with margin.
    segment_bytes_ = 4 << 20;
    publish_pause_ = 10ms;
    start_cluster(o);
  }

  void TearDown() override {
    Failover::TearDown();  // stops and reaps every broker, the isolated one included
    netns_.reset();
  }

  static bool in_chain(const control::idl::PartitionRoute& route, const std::string& node_id) {
    return std::any_of(route.replicas.begin(), route.replicas.end(),
                       [&](const control::idl::Replica& r) { return r.node_id == node_id; });
  }

  // A replica (the middle, or the head) loses its network link under traffic, for at least
  // `hold`. Nothing resets a connection, so only the controller's failure
  // detector can notice (missed heartbeats, then failed probes): it must
  // declare the node dead, retire its node epoch and repair the chain
  // without it, and publishing must resume. When the link comes back the
  // node, still running, is answered `fenced` and must register again as a
  // fresh incarnation that holds no replica; its old epoch stays retired.
  void cut_replica_then_heal(std::chrono::milliseconds hold) {
    const std::size_t idx = isolated();  // position in the chain and index in the cluster
    const std::string victim = cluster_->nodes()[idx].node_id;
    // ip netns exec must have run catenad in place: the pid the cluster
    // signals and reaps is the broker's, not a wrapper's.
    std::error_code ec;
    const auto exe =
        std::filesystem::read_symlink("/proc/" + std::to_string(cluster_->nodes()[idx].pid) + "/exe", ec);
    ASSERT_EQ(exe.filename(), "catenad") << exe;
    auto before = admin_->get_route("f", 0, 0);
    ASSERT_TRUE(before.ok()) << before.error().describe();
    ASSERT_EQ(before->replicas.size(), 3u);
    ASSERT_EQ(before->replicas[idx].node_id, victim) << "the isolated node is not at position " << idx;
    ASSERT_EQ(before->replicas[idx].fabric_addr.rfind(netns_->inner_addr() + ":", 0), 0u)
        << "the isolated node's fabric address is not in its namespace: "
        << before->replicas[idx].fabric_addr;
    const auto registered = status_of(victim);
    ASSERT_TRUE(registered.has_value());
    const std::int64_t old_node_epoch = registered->node_epoch;

    Clock::duration to_dropped{}, to_restored{}, to_first_ack{}, cut_for{}, to_registered{};
    run_with_fault([&] {
      std::string err;
      const auto cut_at = Clock::now();
      ASSERT_TRUE(netns_->cut(&err)) << err;
      mark_next_publish();  // nothing published from here on can commit through the cut node

      std::optional<control::idl::PartitionRoute> route;
      auto route_now = [&] {
        auto r = admin_->get_route("f", 0, 0);
        if (r.ok()) route = *r;
        return route.has_value();
      };
      ASSERT_TRUE(wait_for([&] { return route_now() && !in_chain(*route, victim); }, 20s,
                           "the cut node to be dropped from the chain"));
      to_dropped = Clock::now() - cut_at;
      ASSERT_TRUE(wait_for([&] { return route_now() && route->replicas.size() == 3; }, 20s,
                           "the chain to be back at three replicas"));
      to_restored = Clock::now() - cut_at;
      EXPECT_FALSE(in_chain(*route, victim));
      EXPECT_GE(route->epoch, before->epoch + 2);  // one epoch without the node, one with its replacement
      const auto dead = status_of(victim);
      ASSERT_TRUE(dead.has_value());
      EXPECT_EQ(dead->state, control::idl::NodeState::DEAD);

      const std::uint64_t first_after_cut = mark_id_.load();
      ASSERT_TRUE(wait_for([&] { return max_acked_id_.load() >= first_after_cut + 1000; }, 30s,
                           "progress while the node is cut off"));
      to_first_ack = mark_acked_at_.load() - cut_at;
      // The length of the partition is part of the fault, not a wait for
      // something to happen.
      std::this_thread::sleep_until(cut_at + hold);
      cut_for = Clock::now() - cut_at;

      const auto healed_at = Clock::now();
      ASSERT_TRUE(netns_->heal(&err)) << err;
      std::optional<control::idl::NodeStatus> again;
      ASSERT_TRUE(wait_for(
          [&] {
            again = status_of(victim);
            return again && again->node_epoch > old_node_epoch &&
                   again->state == control::idl::NodeState::ALIVE;
          },
          20s, "the healed node to register again"));
      to_registered = Clock::now() - healed_at;
      EXPECT_TRUE(cluster_->node_running(idx)) << "catenad exited after being fenced";
      EXPECT_EQ(again->replicas, 0) << "the new incarnation must start empty";
      ASSERT_TRUE(route_now());
      EXPECT_FALSE(in_chain(*route, victim)) << "the old incarnation is back in the chain";

      // The retired epoch stays retired: a heartbeat under it is refused.
      control::idl::HeartbeatRequest stale;
      stale.node_id = victim;
      stale.node_epoch = old_node_epoch;
      auto reply = admin_->heartbeat(stale);
      ASSERT_TRUE(reply.ok()) << reply.error().describe();
      EXPECT_TRUE(reply->fenced);
    });

    auto ms = [](Clock::duration d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    if (HasFailure()) return;
    std::printf(
        "[ measured ] cut -> node dropped from the chain %lld ms, -> chain back at R=3 %lld ms, -> first "
        "ack of a record published after the cut %lld ms; healed after %lld ms; heal -> node registered "
        "again %lld ms\n",
        static_cast<long long>(ms(to_dropped)), static_cast<long long>(ms(to_restored)),
        static_cast<long long>(ms(to_first_ack)), static_cast<long long>(ms(cut_for)),
        static_cast<long long>(ms(to_registered)));
  }

  std::unique_ptr<testing::NetnsLink> netns_;
};

class NetworkCutHead : public NetworkCut {
 protected:
  std::size_t isolated() const override { return 0; }
};

// Healed within about a second: what the node sent into the cut (its
// heartbeat, data-plane writes) may still be in TCP retransmission and arrive
// after the heal, from an incarnation the cluster has already retired.
TEST_F(NetworkCut, MiddleReplicaCutOffBrieflyThenHealed) {
  cut_replica_then_heal(0ms);
}

// Cut for longer than the node's controller calls wait (5 s): it gives up its
// connections while cut off and must dial the controller again after the heal.
TEST_F(NetworkCut, MiddleReplicaCutOffPastItsTimeoutsThenHealed) {
  cut_replica_then_heal(7s);
}

// The head goes silent: nothing breaks the publisher's connection to it, so
// the publisher must notice that its acks stalled, find the new head in the
// route and re-send there; subscribers reading from the head move too.
TEST_F(NetworkCutHead, HeadCutOffThenHealed) {
  cut_replica_then_heal(0ms);
}

// A partition with one replica, on node-0 in its own namespace: cutting it
// off makes the controller evict the only node holding the partition's
// acknowledged records. The chain must keep it (the partition is
// unavailable, not reset), and on heal the node, answered `fenced`, must
// keep its data and register again holding it, and the controller must put
// it back as the chain at a new epoch: nothing acknowledged is lost, and
// offsets continue where they were.
class LastCopyCut : public NetworkCut {
 protected:
  std::size_t isolated() const override { return 0; }
  void SetUp() override {
    replication_ = 1;
    NetworkCut::SetUp();
  }
};

TEST_F(LastCopyCut, OnlyReplicaCutOffThenHealedComesBackWithItsData) {
  const std::string victim = cluster_->nodes()[isolated()].node_id;
  auto before = admin_->get_route("f", 0, 0);
  ASSERT_TRUE(before.ok()) << before.error().describe();
  ASSERT_EQ(before->replicas.size(), 1u);
  ASSERT_EQ(before->replicas[0].node_id, victim);
  run_with_fault([&] {
    std::string err;
    const auto cut_at = Clock::now();
    ASSERT_TRUE(netns_->cut(&err)) << err;
    ASSERT_TRUE(wait_for(
        [&] {
          auto st = status_of(victim);
          return st && st->state == control::idl::NodeState::DEAD;
        },
        20s, "the controller to declare the only replica dead"));
    auto during = admin_->get_route("f", 0, 0);
    ASSERT_TRUE(during.ok()) << during.error().describe();
    ASSERT_EQ(during->replicas.size(), 1u) << "the chain was emptied";
    EXPECT_EQ(during->replicas[0].node_id, victim);
    EXPECT_EQ(during->epoch, before->epoch) << "the chain changed while its only member was away";
    EXPECT_TRUE(during->joining.empty());
    std::this_thread::sleep_until(cut_at + 1500ms);
    ASSERT_TRUE(netns_->heal(&err)) << err;
    ASSERT_TRUE(wait_for(
        [&] {
          auto r = admin_->get_route("f", 0, 0);
          return r.ok() && r->epoch > before->epoch;
        },
        20s, "the node to be put back"));
  });
  auto after = admin_->get_route("f", 0, 0);
  ASSERT_TRUE(after.ok()) << after.error().describe();
  ASSERT_EQ(after->replicas.size(), 1u);
  EXPECT_EQ(after->replicas[0].node_id, victim) << "the partition moved off its only copy";
  EXPECT_EQ(after->start_offset, 0) << "the partition started over";
  expect_offsets_follow_publishing();
  expect_fresh_reader_sees_every_ack();
}

}  // namespace
}  // namespace catena::testing
