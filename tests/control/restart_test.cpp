// Controller restarts: state reloads exactly, epochs are never reissued, and
// a repair interrupted at any step finishes after the restart. Each test runs
// on both metadata stores: the directory (/dir) and ZooKeeper (/zk).
#include <algorithm>
#include <gtest/gtest.h>

#include "controller_fixture.hpp"
#include "zk_server.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::joining_of;
using Ids = std::vector<std::string>;

using testing::Store;

class Restart : public testing::ControllerFixture, public ::testing::WithParamInterface<Store> {
 protected:
  void SetUp() override {
    if (GetParam() == Store::zk) {
      std::string why;
      auto* zk = testing::shared_zk(&why);
      ZK_OR_SKIP(zk, why);
      metadata_ =
          zk->uri(testing::unique_chroot(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    }
    ControllerFixture::SetUp();
    if (HasFatalFailure()) return;
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
    ASSERT_TRUE(controller_->create_channel(channel_config("orders", 2, 3)).ok());
    add_node("d", "z2");
    run_for(200ms);
  }

  // Kills b and runs the controller until it halts at point.
  void crash_during_repair_at(const std::string& point) {
    crash_at_ = point;
    kill_broker("b");
    for (int i = 0; i < 30 && !controller_->halted(); ++i) {
      clock_.advance(100ms);
      heartbeat_all_but({"b"});
      controller_->tick();
    }
    ASSERT_TRUE(controller_->halted()) << "never reached " << point;
    EXPECT_EQ(controller_->cluster_status().code(), idl::ErrorCode::INTERNAL);
  }

  void expect_repaired() {
    for (int p = 0; p < 2; ++p) {
      const auto r = route("orders", p);
      // Placement spread the roles: partition 0 was a, b, c and partition 1
      // b, c, a; without b, d joins behind each tail.
      EXPECT_EQ(chain_of(r), p == 0 ? (Ids{id("a"), id("c"), id("d")}) : (Ids{id("c"), id("a"), id("d")}))
          << "partition " << p;
      EXPECT_EQ(r.epoch, 4) << "one epoch to drop b, one for d to join, one to promote it: a resumed repair "
                               "repeats none";
      EXPECT_TRUE(r.joining.empty());
      for (const auto& name : {"a", "c", "d"}) {
        auto installed = nodes_[name].broker->installed("orders", p);
        ASSERT_TRUE(installed.has_value()) << name;
        EXPECT_EQ(*installed, r) << name;
      }
    }
    EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
    EXPECT_EQ(controller_->cluster_status()->repairs_in_progress, 0);
  }
};

// The state a restart reloads is the one it left, except the directory
// store's controller epoch, which every open takes anew (+1).
void expect_same_but_the_epoch(meta::MetaState after, meta::MetaState before) {
  if (before.controller_epoch != 0) {
    EXPECT_EQ(after.controller_epoch, before.controller_epoch + 1);
  } else {
    EXPECT_EQ(after.controller_epoch, 0);  // ZooKeeper's is in its own znode
  }
  after.controller_epoch = before.controller_epoch = 0;
  EXPECT_EQ(after, before);
}

TEST_P(Restart, ReloadsTheSameStateAndKeepsNodesTheirEpochs) {
  const auto before = controller_->metadata();
  const auto channels = *controller_->list_channels();
  restart();
  expect_same_but_the_epoch(controller_->metadata(), before);
  EXPECT_EQ(*controller_->list_channels(), channels);
  // Brokers keep heartbeating with the epochs they had: none is fenced.
  heartbeat_all_but();
  // Nobody is judged on silence that happened while the controller was down.
  for (const auto& name : {"a", "b", "c", "d"}) EXPECT_EQ(state_of(name), idl::NodeState::ALIVE);
}

TEST_P(Restart, EpochsAreNeverReissued) {
  const auto last = nodes_["d"].epoch;
  restart();
  EXPECT_GT(add_node("e", "z3").epoch, last);
  EXPECT_EQ(nodes_["e"].id, "node-5");
}

TEST_P(Restart, EveryRouteIsPushedAgainAfterARestart) {
  restart();
  run_for(100ms);
  for (const auto& name : {"a", "b", "c"}) {
    EXPECT_EQ(nodes_[name].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{1, 1})) << name;
  }
}

// A create whose record was written but whose chains were never told: the
// call fails, the channel exists after the restart, and the restarted
// controller configures every member of every new chain.
TEST_P(Restart, AChannelCreateCutOffAfterItsCommitIsPushedByTheRestartedController) {
  crash_at_ = "create.committed";
  const auto created = controller_->create_channel(channel_config("late", 2, 3));
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.code(), idl::ErrorCode::INTERNAL);
  for (const auto& name : {"a", "b", "c", "d"}) {
    EXPECT_FALSE(nodes_[name].broker->installed("late", 0).has_value())
        << name << " was told before the crash";
  }
  restart();
  run_for(200ms);
  const auto info = controller_->describe_channel("late");
  ASSERT_TRUE(info.ok()) << info.error().describe();
  ASSERT_EQ(info->routes.size(), 2u);
  for (int p = 0; p < 2; ++p) {
    const auto r = route("late", p);
    ASSERT_EQ(r.replicas.size(), 3u);
    int told = 0;
    for (const auto& [name, node] : nodes_) {
      const std::string& node_id = node.id;  // (Clang 14 lambdas cannot capture a structured binding)
      const bool member = std::any_of(r.replicas.begin(), r.replicas.end(),
                                      [&](const idl::Replica& m) { return m.node_id == node_id; });
      if (!member) continue;
      auto installed = node.broker->installed("late", p);
      ASSERT_TRUE(installed.has_value()) << name << " never told of partition " << p;
      EXPECT_EQ(*installed, r) << name;
      ++told;
    }
    EXPECT_EQ(told, 3);
  }
  // Asked again, the create is refused as a duplicate, not done twice.
  EXPECT_EQ(controller_->create_channel(channel_config("late", 2, 3)).code(), idl::ErrorCode::CHANNEL_EXISTS);
}

TEST_P(Restart, RepairResumesAfterCrashOnceTheIntentIsWritten) {
  crash_during_repair_at("repair.intent_written");
  // Crashed before any chain changed.
  EXPECT_EQ(controller_->metadata().channels.at("orders").routes[0].epoch, 1);
  restart();
  // The removal is redone while opening, before any request is served.
  EXPECT_EQ(chain_of(route("orders", 0)), (Ids{id("a"), id("c")}));
  EXPECT_EQ(controller_->cluster_status()->repairs_in_progress, 1);
  run_for(500ms, {"b"});
  expect_repaired();
}

TEST_P(Restart, RepairResumesAfterCrashOnceTheNodeIsRemoved) {
  crash_during_repair_at("repair.removed");
  EXPECT_EQ(controller_->metadata().channels.at("orders").routes[1].epoch, 2);
  EXPECT_EQ(nodes_["a"].broker->epochs_seen("orders", 1), (std::vector<std::int64_t>{1}))
      << "crashed before pushing epoch 2";
  restart();
  run_for(500ms, {"b"});
  expect_repaired();
  EXPECT_EQ(nodes_["a"].broker->epochs_seen("orders", 1), (std::vector<std::int64_t>{1, 2, 3, 4}));
}

TEST_P(Restart, RepairResumesAfterCrashOnceTheReplacementIsChosen) {
  crash_during_repair_at("repair.restored");
  const auto before = controller_->metadata().channels.at("orders").routes[0];
  EXPECT_EQ(before.epoch, 3);
  EXPECT_EQ(chain_of(before), (Ids{id("a"), id("c")}));
  EXPECT_EQ(joining_of(before), (Ids{id("d")}));
  EXPECT_FALSE(nodes_["d"].broker->installed("orders", 0).has_value()) << "crashed before pushing epoch 3";
  restart();
  // The joining stage is durable: the restarted controller has d joining.
  const auto after = controller_->metadata().channels.at("orders").routes[0];
  EXPECT_EQ(after, before);
  EXPECT_EQ(joining_of(route("orders", 0)), (Ids{id("d")}));
  run_for(500ms, {"b"});
  expect_repaired();
  EXPECT_EQ(nodes_["d"].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{3, 4}));
}

TEST_P(Restart, JoiningNodeStaysJoiningAcrossARestartUntilTheTailReportsItCaughtUp) {
  // The tails once b is gone: c of partition 0 (a, c), a of partition 1 (c, a).
  const char* tail_of[] = {"c", "a"};
  for (int p = 0; p < 2; ++p) nodes_[tail_of[p]].broker->set_backlog("orders", p, 64 << 20);
  kill_broker("b");
  run_for(2000ms, {"b"});
  ASSERT_EQ(joining_of(route("orders", 0)), (Ids{id("d")}));
  const auto before = controller_->metadata();
  restart();
  expect_same_but_the_epoch(controller_->metadata(), before);
  run_for(1000ms, {"b"});
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(route("orders", p).epoch, 3) << "still joining: the tail still reports a backlog";
    EXPECT_EQ(joining_of(route("orders", p)), (Ids{id("d")}));
  }
  for (int p = 0; p < 2; ++p) nodes_[tail_of[p]].broker->set_backlog("orders", p, 0);
  run_for(500ms, {"b"});
  expect_repaired();
}

TEST_P(Restart, RepairResumesAfterCrashOnceTheJoiningNodeIsPromoted) {
  crash_during_repair_at("repair.promoted");
  EXPECT_EQ(controller_->metadata().channels.at("orders").routes[0].epoch, 4);
  EXPECT_EQ(nodes_["d"].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{3}))
      << "crashed before pushing epoch 4";
  restart();
  run_for(500ms, {"b"});
  expect_repaired();
}

TEST_P(Restart, DeadNodeStaysFencedAcrossARestart) {
  kill_broker("b");
  run_for(1500ms, {"b"});
  ASSERT_EQ(state_of("b"), idl::NodeState::DEAD);
  restart();
  idl::HeartbeatRequest hb;
  hb.__set_node_id(id("b"));
  hb.__set_node_epoch(nodes_["b"].epoch);
  auto r = controller_->heartbeat(hb);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->fenced);
  EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
}

TEST_P(Restart, SnapshotsDoNotChangeWhatARestartSees) {
  // A tiny snapshot interval forces several snapshots and log resets.
  controller_.reset();
  auto o = options();
  o.snapshot_every_records = 2;
  auto c = Controller::open(o, clock_, admin_);
  ASSERT_TRUE(c.ok());
  controller_ = std::move(*c);
  add_node("e", "z3");
  ASSERT_TRUE(controller_->create_channel(channel_config("more", 3, 2)).ok());
  kill_broker("a");
  run_for(1500ms, {"a"});
  const auto before = controller_->metadata();
  restart();
  expect_same_but_the_epoch(controller_->metadata(), before);
}

INSTANTIATE_TEST_SUITE_P(Stores, Restart, ::testing::Values(Store::dir, Store::zk),
                         [](const auto& info) { return testing::store_name(info.param); });

}  // namespace
}  // namespace catena::control
