// Changing a channel's partition count (Controller::alter_channel): the
// generation it records, the markers it has the affected heads append, who
// hears of it, and a failure or a controller crash at each step finishing
// the alter later. The key map itself (chain/key_map.hpp) is checked
// against brute force.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <catena/chain/key_map.hpp>

#include "controller_fixture.hpp"
#include "test_support.hpp"
#include "zk_server.hpp"

namespace catena::control::testing {
namespace {

TEST(KeyMap, ParentsAreExactlyThePartitionsKeysComeFrom) {
  std::mt19937_64 rng(12);
  for (const auto& [from, to] :
       std::vector<std::pair<int, int>>{{4, 8}, {8, 16}, {16, 4}, {4, 6}, {6, 4}, {1, 3}, {5, 1}}) {
    std::map<int, std::set<int>> seen;  // new partition -> old partitions keys came from
    for (int i = 0; i < 20000; ++i) {
      const auto h = rng();
      seen[static_cast<int>(chain::partition_of_hash(h, static_cast<std::uint32_t>(to)))].insert(
          static_cast<int>(chain::partition_of_hash(h, static_cast<std::uint32_t>(from))));
    }
    for (int q = 0; q < to; ++q) {
      const auto parents = chain::alter_parents(q, from, to);
      EXPECT_EQ(std::set<int>(parents.begin(), parents.end()), seen[q]) << from << " -> " << to << ": " << q;
    }
    EXPECT_EQ(chain::alter_affected(from, to).size(), static_cast<std::size_t>(std::max(from, to)));
  }
  EXPECT_EQ(chain::alter_parents(5, 4, 8), std::vector<std::int32_t>{1});
  EXPECT_EQ(chain::alter_parents(1, 8, 4), (std::vector<std::int32_t>{1, 5}));
  EXPECT_TRUE(chain::alter_affected(4, 4).empty());
}

// Every test on both metadata stores (/dir, /zk).
class Alter : public ControllerFixture, public ::testing::WithParamInterface<Store> {
 protected:
  void SetUp() override {
    if (GetParam() == Store::zk) ZK_METADATA_OR_SKIP(metadata_);
    ControllerFixture::SetUp();
    if (HasFatalFailure()) return;
    for (const char* n : {"a", "b", "c", "d"}) add_node(n, std::string("zone-") + n);
    ASSERT_TRUE(controller_->create_channel(channel_config("rs", 2, 2)).ok());
    ASSERT_TRUE(controller_->create_channel(channel_config("other", 2, 2)).ok());
    run_for(std::chrono::milliseconds(300));  // every member acknowledges epoch 1
    // Records already in the old partitions: each marker lands after them.
    for (int p = 0; p < 2; ++p) head_of("rs", p).broker->set_end_offset("rs", p, 100 + p);
    admin_.set_hook([this](const InProcBrokerAdmin::Call& call) {
      std::lock_guard lock(calls_mu_);
      calls_.push_back(call);
      return InProcBrokerAdmin::Fate::deliver;
    });
  }

  Node& head_of(const std::string& channel, int p) {
    const auto r = route(channel, p);
    for (auto& [name, n] : nodes_) {
      if (n.id == r.replicas.front().node_id) return n;
    }
    ADD_FAILURE() << "no head for " << channel << "/" << p;
    return nodes_.begin()->second;
  }

  std::vector<InProcBrokerAdmin::Call> calls(InProcBrokerAdmin::Method m) {
    std::lock_guard lock(calls_mu_);
    std::vector<InProcBrokerAdmin::Call> out;
    std::copy_if(calls_.begin(), calls_.end(), std::back_inserter(out),
                 [&](const InProcBrokerAdmin::Call& c) { return c.method == m; });
    return out;
  }

  // The channel is at `partitions` with a complete newest generation whose
  // every marker is the offset its partition's current head holds.
  void expect_complete(int partitions, int generation) {
    auto info = controller_->describe_channel("rs");
    ASSERT_TRUE(info.ok()) << info.error().describe();
    EXPECT_EQ(info->config.partitions, partitions);
    ASSERT_FALSE(info->generations.empty());
    const auto& g = info->generations.back();
    EXPECT_EQ(g.generation, generation);
    EXPECT_EQ(g.partitions, partitions);
    EXPECT_TRUE(g.complete);
    for (const auto& [p, offset] : g.markers) {
      EXPECT_GE(offset, 0) << p;
      EXPECT_EQ(head_of("rs", p).broker->marker("rs", p), offset) << p;
    }
  }

  std::mutex calls_mu_;
  std::vector<InProcBrokerAdmin::Call> calls_;
};

TEST_P(Alter, GrowPlacesNewChainsAndMarksEveryAffectedPartitionAtItsHead) {
  auto info = controller_->alter_channel("rs", 4);
  ASSERT_TRUE(info.ok()) << info.error().describe();
  ASSERT_EQ(info->routes.size(), 4u);
  ASSERT_EQ(info->generations.size(), 2u);
  EXPECT_EQ(info->generations[0].partitions, 2);
  EXPECT_TRUE(info->generations[0].complete);
  EXPECT_EQ(info->generations[1].markers,
            (std::map<std::int32_t, std::int64_t>{{0, 100}, {1, 101}, {2, 0}, {3, 0}}));
  expect_complete(4, 1);
  // The added partitions' chains are installed at every replica.
  for (int p = 2; p < 4; ++p) {
    const auto r = info->routes[static_cast<std::size_t>(p)];
    EXPECT_EQ(r.replicas.size(), 2u);
    for (const auto& rep : r.replicas) {
      for (auto& [name, n] : nodes_) {
        if (n.id == rep.node_id) {
          EXPECT_TRUE(n.broker->installed("rs", p).has_value()) << name << " " << p;
        }
      }
    }
  }
  // Only the affected subgraph heard of it: one marker call per affected
  // partition, to its head, and configures only for the added chains.
  const auto markers = calls(InProcBrokerAdmin::Method::append_marker);
  ASSERT_EQ(markers.size(), 4u);
  for (const auto& c : markers) {
    EXPECT_EQ(c.channel, "rs");
    EXPECT_EQ(c.marker.generation, 1);
    EXPECT_EQ(c.marker.from_partitions, 2);  // what the marker carries to publishers and subscribers
    EXPECT_EQ(c.marker.to_partitions, 4);
    EXPECT_EQ(c.to.node_id, route("rs", c.partition).replicas.front().node_id);
  }
  const auto configures = calls(InProcBrokerAdmin::Method::configure_chain);
  EXPECT_EQ(configures.size(), 4u);  // 2 added partitions x replication 2
  std::set<std::string> called;
  for (const auto& c : markers) called.insert(c.to.node_id);
  for (const auto& c : configures) {
    EXPECT_EQ(c.assignment.route.channel, "rs");
    EXPECT_GE(c.assignment.route.partition, 2);
    called.insert(c.to.node_id);
  }
  // ... and the generation says so (catena channel describe shows it).
  const auto& g = info->generations.back();
  EXPECT_EQ(g.nodes_told, static_cast<std::int32_t>(called.size()));
  EXPECT_EQ(g.control_messages, static_cast<std::int32_t>(markers.size() + configures.size()));
}

TEST_P(Alter, ShrinkMarksEveryPartitionAndKeepsTheRemovedOnesChains) {
  ASSERT_TRUE(controller_->alter_channel("rs", 4).ok());
  head_of("rs", 3).broker->set_end_offset("rs", 3, 57);
  auto info = controller_->alter_channel("rs", 2);
  ASSERT_TRUE(info.ok()) << info.error().describe();
  EXPECT_EQ(info->routes.size(), 4u);  // partitions 2 and 3 keep their records for subscribers
  ASSERT_EQ(info->generations.size(), 3u);
  EXPECT_EQ(info->generations[2].markers.size(), 4u);
  EXPECT_EQ(info->generations[2].markers.at(3), 57);
  expect_complete(2, 2);
  // Growing again reuses the routes (no new chains are placed).
  const auto configures_before = calls(InProcBrokerAdmin::Method::configure_chain).size();
  ASSERT_TRUE(controller_->alter_channel("rs", 4).ok());
  EXPECT_EQ(calls(InProcBrokerAdmin::Method::configure_chain).size(), configures_before);
  expect_complete(4, 3);
}

TEST_P(Alter, RefusesBadCountsAndChainsUnderRepair) {
  EXPECT_EQ(controller_->alter_channel("rs", 2).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->alter_channel("rs", 0).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->alter_channel("rs", 1025).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->alter_channel("nope", 4).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  // A chain that lost a member and waits for its replacement is refused.
  const std::string victim = route("rs", 0).replicas.back().node_id;
  std::string victim_name;
  for (const auto& [name, n] : nodes_) {
    if (n.id == victim) victim_name = name;
  }
  kill_broker(victim_name);
  run_for(std::chrono::milliseconds(1500), {victim_name});
  auto r = controller_->alter_channel("rs", 4);
  if (r.ok()) {
    // The repair finished within the window: the alter is as good.
    expect_complete(4, 1);
  } else {
    EXPECT_EQ(r.code(), idl::ErrorCode::UNAVAILABLE) << r.error().describe();
    EXPECT_EQ(controller_->describe_channel("rs")->generations.size(), 0u);
  }
}

TEST_P(Alter, AHeadThatCannotAppendLeavesTheGenerationOpenAndTickFinishesIt) {
  head_of("rs", 1).broker->set_marker_error(true);
  auto r = controller_->alter_channel("rs", 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::UNAVAILABLE) << r.error().describe();
  auto info = controller_->describe_channel("rs");
  EXPECT_EQ(info->config.partitions, 2);  // publishers still map by generation 0
  ASSERT_EQ(info->generations.size(), 2u);
  EXPECT_FALSE(info->generations[1].complete);
  EXPECT_EQ(info->generations[1].markers.at(1), -1);
  const bool one_head = head_of("rs", 0).id == head_of("rs", 1).id;
  if (!one_head) {
    EXPECT_EQ(info->generations[1].markers.at(0), 100);
  }
  // Another count is refused while this one is open.
  EXPECT_EQ(controller_->alter_channel("rs", 8).code(), idl::ErrorCode::UNAVAILABLE);
  head_of("rs", 1).broker->set_marker_error(false);
  run_for(std::chrono::milliseconds(200));
  expect_complete(4, 1);
  // Partition 0's marker was asked for once: it was recorded.
  const auto markers = calls(InProcBrokerAdmin::Method::append_marker);
  if (!one_head) {
    EXPECT_EQ(std::count_if(markers.begin(), markers.end(), [](const auto& c) { return c.partition == 0; }),
              1);
  }
}

TEST_P(Alter, AMarkerNotCommittedInTimeIsAskedForAgain) {
  head_of("rs", 0).broker->set_commit_lag(5);
  auto r = controller_->alter_channel("rs", 3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(controller_->describe_channel("rs")->generations[1].markers.at(0), -1);
  head_of("rs", 0).broker->set_commit_lag(0);
  ASSERT_TRUE(controller_->alter_channel("rs", 3).ok());  // the same alter again finishes it
  expect_complete(3, 1);
}

TEST_P(Alter, EveryHeadAppendsItsMarkerBeforeAnyCommitIsWaitedFor) {
  // Publishers hold records back from the first marker to the last, so the
  // markers go in one call per head; only then are commits waited for.
  head_of("rs", 0).broker->set_commit_lag(5);  // partition 0's marker (the first asked) does not commit
  ASSERT_FALSE(controller_->alter_channel("rs", 4).ok());
  const auto markers = calls(InProcBrokerAdmin::Method::append_marker);
  ASSERT_GE(markers.size(), 4u);
  std::set<std::int32_t> first_four;
  for (std::size_t i = 0; i < 4; ++i) first_four.insert(markers[i].partition);
  EXPECT_EQ(first_four, (std::set<std::int32_t>{0, 1, 2, 3}));
  const auto open = controller_->describe_channel("rs")->generations.at(1);
  EXPECT_EQ(open.markers.at(0), -1);
  if (head_of("rs", 1).id != head_of("rs", 0).id) {
    EXPECT_EQ(open.markers.at(1), 101) << "recorded although partition 0's commit was still awaited";
  }
}

TEST_P(Alter, TickAsksForAMarkerOnceAndGoesOnWhileItIsNotCommitted) {
  // A marker that cannot commit yet (its chain waits for a replacement,
  // which tick() places) must not hold tick() up: each tick asks the head
  // once and leaves the marker to the next one. tick() polled until
  // marker_commit_timeout (10 s by default) and a repair waited for it.
  head_of("rs", 0).broker->set_commit_lag(5);
  ASSERT_FALSE(controller_->alter_channel("rs", 3).ok());
  const auto open = controller_->describe_channel("rs")->generations.at(1);
  EXPECT_EQ(open.markers.at(0), -1);
  const auto unset = static_cast<std::size_t>(
      std::count_if(open.markers.begin(), open.markers.end(), [](const auto& m) { return m.second < 0; }));
  const auto before = calls(InProcBrokerAdmin::Method::append_marker).size();
  controller_->tick();
  controller_->tick();
  EXPECT_EQ(calls(InProcBrokerAdmin::Method::append_marker).size(), before + 2 * unset)
      << "each tick asks once for each marker not committed";
  EXPECT_EQ(controller_->describe_channel("rs")->generations.at(1).markers.at(0), -1);
  head_of("rs", 0).broker->set_commit_lag(0);
  controller_->tick();
  expect_complete(3, 1);
}

TEST_P(Alter, ControllerCrashAfterTheRecordIsFinishedAfterRestart) {
  crash_at_ = "alter.begun";
  EXPECT_FALSE(controller_->alter_channel("rs", 4).ok());
  restart();
  auto info = controller_->describe_channel("rs");
  EXPECT_EQ(info->config.partitions, 2);
  ASSERT_EQ(info->generations.size(), 2u);
  EXPECT_FALSE(info->generations[1].complete);
  EXPECT_EQ(info->routes.size(), 4u);
  run_for(std::chrono::milliseconds(300));  // pushes the added chains, then writes the markers
  expect_complete(4, 1);
}

TEST_P(Alter, ControllerCrashBetweenMarkersKeepsTheRecordedOnes) {
  crash_at_ = "alter.marker";
  EXPECT_FALSE(controller_->alter_channel("rs", 4).ok());
  restart();
  const auto open = controller_->describe_channel("rs")->generations.at(1);
  EXPECT_FALSE(open.complete);
  EXPECT_EQ(
      std::count_if(open.markers.begin(), open.markers.end(), [](const auto& m) { return m.second >= 0; }),
      1);
  run_for(std::chrono::milliseconds(300));
  expect_complete(4, 1);
  // Every head was asked before the first was recorded, and each at most
  // once more after the restart; every head holds one marker.
  const auto markers = calls(InProcBrokerAdmin::Method::append_marker);
  EXPECT_LE(markers.size(), 8u);
}

TEST_P(Alter, AHeadKilledMidAlterIsReplacedAndTheNewHeadTakesTheMarker) {
  Node& head = head_of("rs", 0);
  const std::string head_name = [&] {
    for (const auto& [name, n] : nodes_) {
      if (n.id == head.id) return name;
    }
    return std::string{};
  }();
  const auto epoch_before = route("rs", 0).epoch;
  kill_broker(head_name);
  auto r = controller_->alter_channel("rs", 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::UNAVAILABLE);
  // The detector evicts it, repair makes the next replica the head, and
  // tick() has that one append the marker.
  run_for(std::chrono::milliseconds(3000), {head_name});
  EXPECT_GT(route("rs", 0).epoch, epoch_before);
  EXPECT_NE(route("rs", 0).replicas.front().node_id, head.id);
  expect_complete(4, 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, Alter, ::testing::Values(Store::dir, Store::zk),
                         [](const auto& info) { return store_name(info.param); });

}  // namespace
}  // namespace catena::control::testing
