// Hierarchical recovery on the controller's side (controller_rejoin.cpp):
// a node that restarts with the data it kept rejoins the short chains it was
// taken out of, ahead of any other node; a chain waits
// Options::replacement_delay for an evicted member before placement picks
// another; and placement replaces a lost member from its zone, then from
// the chain's datacenter, then (with a warning) from anywhere.
#include <algorithm>
#include <gtest/gtest.h>
#include <memory>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "repair_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::ControllerFixture;
using testing::Ids;
using testing::joining_of;
using testing::Repair;

idl::PartitionProgress kept_copy(const std::string& channel, std::int64_t end_offset) {
  idl::PartitionProgress p;
  p.__set_channel(channel);
  p.__set_partition(0);
  p.__set_epoch(1);
  p.__set_end_offset(end_offset);
  p.__set_commit_offset(end_offset);
  return p;
}

// Keeps what the controller logs while it lives (spdlog's default logger).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  [[nodiscard]] int count(const std::string& text) const {
    const auto lines = sink_->last_formatted();
    return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(text) != std::string::npos;
    }));
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// c's process crashes and restarts with its segments before anyone noticed:
// its new incarnation leaves the chain (epoch 2) and, holding the
// partition, joins behind the tail (epoch 3) instead of d or e; the tail's
// successor_synced report promotes it (epoch 4). A replica it kept of a
// chain that is full is fenced, not joined.
TEST_F(Repair, NodeBackWithItsDataRejoinsItsShortChainAndIsPromoted) {
  LogCapture log;
  auto logs = controller_->create_channel(channel_config("logs", 1, 1));
  ASSERT_TRUE(logs.ok()) << logs.error().describe();
  ASSERT_NE(chain_of(logs->routes[0]), (Ids{id("c")}));
  nodes_["b"].broker->set_synced("orders", 0, false);  // b, the tail, has not synced its successor yet

  register_again("c", {kept_copy("orders", 1234), kept_copy("logs", 7)});
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 2);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b")}));

  run_for(300ms);
  r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b")}));
  ASSERT_EQ(joining_of(r), (Ids{id("c")})) << "the node that kept the data, not a spare";
  EXPECT_EQ(r.joining[0].node_epoch, nodes_["c"].epoch) << "its new incarnation";
  EXPECT_EQ(r.joining[0].admin_addr, nodes_["c"].admin_addr);
  EXPECT_EQ(r.joining[0].fabric_addr, "c.test:9000");
  EXPECT_EQ(nodes_["c"].broker->installed("orders", 0), r);
  EXPECT_TRUE(nodes_["d"].broker->epochs_seen("orders", 0).empty());
  EXPECT_TRUE(nodes_["e"].broker->epochs_seen("orders", 0).empty());
  EXPECT_EQ(
      log.count(fmt::format("orders/0: {} rejoins with the data it kept (held up to offset 1234)", id("c"))),
      1);
  const auto st = controller_->cluster_status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->recoveries.kept_data_rejoins, 1) << "process level";
  EXPECT_EQ(st->recoveries.replaced_in_lost_zone + st->recoveries.replaced_in_other_zone +
                st->recoveries.replaced_in_other_datacenter,
            0)
      << "no replacement was placed";

  nodes_["b"].broker->set_synced("orders", 0, true);
  run_for(300ms);
  r = route("orders");
  EXPECT_EQ(r.epoch, 4);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("c")}));
  EXPECT_TRUE(r.joining.empty());
  expect_settled(r);

  const auto fences = nodes_["c"].broker->fences();
  ASSERT_EQ(fences.size(), 1u) << "only the copy of the full chain is dropped";
  EXPECT_EQ(fences[0].channel, "logs");
  EXPECT_EQ(fences[0].epoch, 1);
}

// The same node without the partition in held is an empty node like any
// other: placement may pick it (it restores the zone the chain lost), but it
// does not rejoin with data, and nothing is fenced.
TEST_F(Repair, NodeBackWithoutThePartitionIsPlacedLikeAnyEmptyNode) {
  LogCapture log;
  register_again("c");
  run_for(300ms);
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("c")}));
  EXPECT_EQ(log.count("rejoins with the data it kept"), 0);
  EXPECT_TRUE(nodes_["c"].broker->fences().empty());
}

// c kept its copy, but the chain was restored (by d) before c was back: its
// copy is fenced, and the chain stays as it is.
TEST_F(Repair, KeptCopyOfAChainRestoredMeanwhileIsFenced) {
  kill_and_repair("c");
  const auto before = route("orders");
  ASSERT_EQ(chain_of(before), (Ids{id("a"), id("b"), id("d")}));
  register_again("c", {kept_copy("orders", 99)});
  run_for(300ms);
  EXPECT_EQ(route("orders"), before);
  const auto fences = nodes_["c"].broker->fences();
  ASSERT_FALSE(fences.empty());
  EXPECT_EQ(fences.back().channel, "orders");
  EXPECT_EQ(fences.back().epoch, before.epoch);
}

class RepairWithDelay : public Repair {
 protected:
  void SetUp() override {
    replacement_delay_ = 5000ms;
    Repair::SetUp();
  }

  // Silences c until it is evicted; the chain is [a, b] from then on.
  void evict_c() {
    kill_broker("c");
    for (int i = 0; i < 50 && state_of("c") != idl::NodeState::DEAD; ++i) run_for(100ms, {"c"});
    ASSERT_EQ(state_of("c"), idl::NodeState::DEAD);
    ASSERT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b")}));
  }
};

TEST_F(RepairWithDelay, EvictedNodeBackWithinTheDelayRejoins) {
  evict_c();
  run_for(2000ms, {"c"});
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 2);
  EXPECT_TRUE(r.joining.empty()) << "no replacement while the chain waits for c";

  nodes_["b"].broker->set_synced("orders", 0, false);
  register_again("c", {kept_copy("orders", 500)});
  run_for(300ms);
  r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(joining_of(r), (Ids{id("c")}));
  nodes_["b"].broker->set_synced("orders", 0, true);
  run_for(300ms);
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("c")}));
  EXPECT_TRUE(nodes_["d"].broker->epochs_seen("orders", 0).empty());
}

TEST_F(RepairWithDelay, WithoutTheNodeAReplacementIsPlacedOnceTheDelayPassed) {
  LogCapture log;
  evict_c();
  run_for(4900ms, {"c"});
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 2);
  EXPECT_TRUE(r.joining.empty()) << "4.9 s after the eviction the chain still waits";
  EXPECT_EQ(log.count("waiting up to"), 1) << "logged once per chain and epoch";

  run_for(100ms, {"c"});  // 5 s after the eviction
  r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(joining_of(r), (Ids{id("d")}));
}

TEST_F(RepairWithDelay, NodeBackWithoutThePartitionEndsTheWait) {
  evict_c();
  run_for(1000ms, {"c"});
  register_again("c");
  run_for(300ms);
  const auto r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("c")}))
      << "the empty c restores z3 at once (like any new node)";
}

// Datacenter "A" has zones a1, a2, a3; "B" has b1. The chain [x1 (a1), x2
// (a2)] loses x1. Spares register in the order that would win on node id
// alone (b1 first), so each pick below is the rule's, not the tie-break's.
class ZoneRepair : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    add_node("x1", "a1", {}, "A");
    add_node("x2", "a2", {}, "A");
    auto ch = controller_->create_channel(channel_config("orders", 1, 2));
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    ASSERT_EQ(chain_of(ch->routes[0]), (Ids{id("x1"), id("x2")}));
  }
  // ClusterStatus.recoveries: {in the lost zone, another zone, another datacenter}.
  std::vector<std::int64_t> replacements_counted() {
    const auto st = controller_->cluster_status();
    EXPECT_TRUE(st.ok());
    if (!st.ok() || !st->__isset.recoveries) return {};
    EXPECT_EQ(st->recoveries.kept_data_rejoins, 0);
    return {st->recoveries.replaced_in_lost_zone, st->recoveries.replaced_in_other_zone,
            st->recoveries.replaced_in_other_datacenter};
  }
  std::string replacement_of_x1() {
    kill_broker("x1");
    run_for(2000ms, {"x1"});
    EXPECT_EQ(state_of("x1"), idl::NodeState::DEAD);
    const auto r = route("orders");
    EXPECT_EQ(r.replicas.size(), 2u);
    return r.replicas.size() == 2 ? r.replicas[1].node_id : std::string();
  }
};

TEST_F(ZoneRepair, ANodeIsReplacedFromItsZone) {
  add_node("b1", "b1", {}, "B");
  add_node("a3", "a3", {}, "A");
  add_node("a1", "a1", {}, "A");
  EXPECT_EQ(replacements_counted(), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(replacement_of_x1(), id("a1"));
  EXPECT_EQ(replacements_counted(), (std::vector<std::int64_t>{1, 0, 0}));
}

TEST_F(ZoneRepair, AZoneDownIsReplacedFromAnotherZoneOfTheDatacenter) {
  add_node("b1", "b1", {}, "B");
  add_node("a3", "a3", {}, "A");
  EXPECT_EQ(replacement_of_x1(), id("a3"));
  EXPECT_EQ(replacements_counted(), (std::vector<std::int64_t>{0, 1, 0}));
}

TEST_F(ZoneRepair, ADatacenterWithoutASpareZoneSendsTheReplicaElsewhereAndWarns) {
  LogCapture log;
  add_node("b1", "b1", {}, "B");
  add_node("y2", "a2", {}, "A");  // datacenter A, but the zone the chain keeps
  EXPECT_EQ(replacement_of_x1(), id("b1"));
  EXPECT_EQ(replacements_counted(), (std::vector<std::int64_t>{0, 0, 1}));
  EXPECT_EQ(log.count(fmt::format("orders/0: no node in datacenter A (in a zone the chain does not use), "
                                  "replacement {} in B",
                                  id("b1"))),
            1);
}

}  // namespace
}  // namespace catena::control
