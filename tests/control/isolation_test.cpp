// A controller that loses the network must not take the cluster apart: when
// more than isolation_percent of the nodes go silent at once it assumes it
// is the one cut off and evicts nobody; it still evicts a minority. The
// partition's high-water mark, learnt from reports, survives restarts.
#include <gtest/gtest.h>

#include "controller_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using Fate = InProcBrokerAdmin::Fate;
using Method = InProcBrokerAdmin::Method;
using Ids = std::vector<std::string>;

// Five nodes in three zones; the chain of "orders" is [a, b, c].
class Isolation : public testing::ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    add_nodes();
  }
  void add_nodes() {
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
    auto ch = controller_->create_channel(channel_config("orders"));
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    ASSERT_EQ(chain_of(ch->routes[0]), (Ids{id("a"), id("b"), id("c")}));
    add_node("d", "z1");
    add_node("e", "z2");
  }

  // The controller's own link fails: every call it makes is lost, and no
  // heartbeat reaches it. Counts the probes that went out.
  void cut_controller_off() {
    admin_.set_hook([this](const InProcBrokerAdmin::Call& call) {
      if (call.method == Method::ping) ++probes_;
      return Fate::drop_request;
    });
  }
  void heal() { admin_.set_hook({}); }

  std::size_t fences_sent() {
    std::size_t n = 0;
    for (const auto& [name, node] : nodes_) n += node.broker->fences().size();
    return n;
  }

  std::atomic<int> probes_{0};
};

TEST_F(Isolation, ControllerCutOffFromEveryNodeEvictsNobody) {
  const auto before = route("orders");
  cut_controller_off();
  // Ten detector timeouts in silence: every node is suspected and fails
  // every probe, many times over.
  clock_.advance(5000ms);
  for (int i = 0; i < 20; ++i) {
    clock_.advance(100ms);
    controller_->tick();
  }
  EXPECT_GE(probes_.load(), 5 * 2) << "every node was probed to a dead verdict";
  for (const auto& name : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(state_of(name), idl::NodeState::SUSPECT) << name;
  }
  EXPECT_EQ(route("orders"), before) << "a route changed while the controller was cut off";
  EXPECT_TRUE(controller_->metadata().intents.empty());
  EXPECT_EQ(fences_sent(), 0u);

  heal();
  run_for(300ms);  // heartbeats arrive again
  for (const auto& name : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(state_of(name), idl::NodeState::ALIVE) << name;
  }
  EXPECT_EQ(route("orders"), before);
  // Nobody was fenced: every node's heartbeat under its epoch is accepted.
  heartbeat_all_but();
}

// Healing is not instantaneous: the nodes are heard from again one by one
// (a heartbeat client in a reconnect backoff, a probe answered before the
// first heartbeat). Once most are heard the controller is no longer
// isolated, but the probes the others failed and the heartbeats they missed
// were the controller's own cut: each gets a fresh detector window, and
// nobody is evicted or fenced for the cut.
TEST_F(Isolation, NodesHeardAgainOneByOneAfterACutAreNotEvictedForIt) {
  const auto before = route("orders");
  cut_controller_off();
  clock_.advance(5000ms);
  for (int i = 0; i < 20; ++i) {
    clock_.advance(100ms);
    controller_->tick();
  }
  // a, b and c come back first; d and e stay cut a little longer (less
  // than one detector timeout), their probes still lost.
  std::set<std::string> late_addrs{nodes_.at("d").admin_addr, nodes_.at("e").admin_addr};
  admin_.set_hook([late_addrs](const InProcBrokerAdmin::Call& call) {
    return late_addrs.count(call.to.admin_addr) != 0 ? Fate::drop_request : Fate::deliver;
  });
  run_for(300ms, {"d", "e"});
  heal();
  run_for(300ms);
  for (const auto& name : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(state_of(name), idl::NodeState::ALIVE) << name;
  }
  EXPECT_EQ(route("orders"), before);
  EXPECT_EQ(fences_sent(), 0u);

  // A node that really died during the cut is still found: it gets one
  // fresh window and no more.
  kill_broker("e");
  run_for(3000ms, {"e"});
  EXPECT_EQ(state_of("e"), idl::NodeState::DEAD);
  EXPECT_EQ(state_of("d"), idl::NodeState::ALIVE);
}

// The heal lands while the controller's probes are out: four nodes'
// heartbeats arrive during the probe round and c answers its probe before
// its own first heartbeat. The answer must not count as c's asymmetric cut
// (no heartbeat for seconds, the controller's own silence): the isolation
// ends first, then the answers are weighed.
TEST_F(Isolation, ProbeAnsweredAsTheCutHealsIsNotAnAsymmetricCut) {
  const auto before = route("orders");
  cut_controller_off();
  clock_.advance(5000ms);
  for (int i = 0; i < 20; ++i) {
    clock_.advance(100ms);
    controller_->tick();
  }
  std::atomic<bool> healed{false};
  const auto c_addr = nodes_.at("c").admin_addr;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == Method::ping && call.to.admin_addr == c_addr && !healed.exchange(true)) {
      heartbeat_all_but({"c"});
    }
    return Fate::deliver;
  });
  clock_.advance(100ms);
  controller_->tick();
  ASSERT_TRUE(healed.load()) << "c was not probed";
  heal();
  run_for(300ms);
  for (const auto& name : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(state_of(name), idl::NodeState::ALIVE) << name;
  }
  EXPECT_EQ(route("orders"), before);
  EXPECT_EQ(fences_sent(), 0u);
}

// Two of five silent is not the controller's own problem: they are evicted
// and the chain repaired as always.
TEST_F(Isolation, MinoritySilentIsStillEvicted) {
  kill_broker("c");
  kill_broker("e");
  run_for(3000ms, {"c", "e"});
  EXPECT_EQ(state_of("c"), idl::NodeState::DEAD);
  EXPECT_EQ(state_of("e"), idl::NodeState::DEAD);
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("d")}));
}

// Three of five silent at once is more than half: nothing happens until
// they are heard from, even though their probes fail. With
// isolation_percent = 100 the controller never assumes it is cut off and
// evicts them, but the chain keeps its last member.
TEST_F(Isolation, MajoritySilentIsEvictedOnlyWhenIsolationIsOff) {
  for (const auto& name : {"a", "b", "c"}) kill_broker(name);
  run_for(3000ms, {"a", "b", "c"});
  for (const auto& name : {"a", "b", "c"}) EXPECT_EQ(state_of(name), idl::NodeState::SUSPECT) << name;
  EXPECT_EQ(route("orders").epoch, 1);

  isolation_percent_ = 100;
  restart();
  run_for(3000ms, {"a", "b", "c"});
  for (const auto& name : {"a", "b", "c"}) EXPECT_EQ(state_of(name), idl::NodeState::DEAD) << name;
  const auto r = route("orders");
  ASSERT_EQ(r.replicas.size(), 1u) << "the chain was emptied";
  EXPECT_EQ(r.start_offset, 0);
  EXPECT_TRUE(r.joining.empty()) << "nothing can copy from a dead chain";
}

TEST_F(Isolation, OptionsAreChecked) {
  auto o = options();
  o.data_dir = dir_.path() / "other";
  o.isolation_percent = 0;
  EXPECT_EQ(Controller::open(o, clock_, admin_).code(), idl::ErrorCode::INVALID_ARGUMENT);
  o.isolation_percent = 50;
  o.lease = o.heartbeat_timeout;
  EXPECT_EQ(Controller::open(o, clock_, admin_).code(), idl::ErrorCode::INVALID_ARGUMENT)
      << "a lease as long as the detector's timeout";
  o.lease = o.heartbeat_interval;
  EXPECT_EQ(Controller::open(o, clock_, admin_).code(), idl::ErrorCode::INVALID_ARGUMENT)
      << "a lease that lapses between two heartbeats";
  o.lease = {};
  o.replacement_delay = std::chrono::milliseconds(-1);
  auto negative = Controller::open(o, clock_, admin_);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(negative.error().message, "replacement_delay must be >= 0 ms, got -1 ms");
}

TEST_F(Isolation, RegistrationTellsTheLease) {
  idl::NodeInfo info;
  info.__set_admin_addr("f.test:7000");
  info.__set_fabric_addr("f.test:9000");
  auto r = controller_->register_node(info);
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(r->lease_ms, 250) << "heartbeat_timeout / 2 by default";
  EXPECT_EQ(r->heartbeat_interval_ms, 100);
}

TEST_F(Isolation, HighWaterMarkIsLearntFromReportsAndSurvivesRestarts) {
  nodes_["a"].broker->set_end_offset("orders", 0, 700);
  nodes_["c"].broker->set_end_offset("orders", 0, 650);
  run_for(200ms);
  nodes_["a"].broker->set_end_offset("orders", 0, 40);  // never lowers it
  run_for(200ms);
  EXPECT_EQ(controller_->metadata().high_water["orders"][0], 700);
  restart();
  EXPECT_EQ(controller_->metadata().high_water["orders"][0], 700);
}

// The variant: only one chain's nodes lose the controller (three of six, not
// more than half), while they may still reach their clients. They are
// evicted one by one, but the chain keeps its last member, so no second
// chain is ever configured for the partition; their leases lapsed before
// any of it. On heal they are answered `fenced` and register again with
// what they kept: the last member is the chain again, and the others, whose
// older copies are of a chain short of replicas, rejoin behind it.
TEST_F(Isolation, OneChainCutOffFromTheControllerIsNeverReplacedByAnotherChain) {
  add_node("f", "z3");
  const Ids chain_nodes{id("a"), id("b"), id("c")};
  const std::set<std::string> cut{"a", "b", "c"};
  std::set<std::string> cut_addrs;
  for (const auto& name : cut) cut_addrs.insert(nodes_.at(name).admin_addr);
  admin_.set_hook([cut_addrs](const InProcBrokerAdmin::Call& call) {
    return cut_addrs.count(call.to.admin_addr) != 0 ? Fate::drop_request : Fate::deliver;
  });
  run_for(3000ms, cut);
  for (const auto& name : cut) EXPECT_EQ(state_of(name), idl::NodeState::DEAD) << name;
  auto r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("c")})) << "the last member left the chain";
  EXPECT_TRUE(r.joining.empty());
  for (const auto& name : {"d", "e", "f"}) {
    EXPECT_TRUE(nodes_[name].broker->epochs_seen("orders", 0).empty()) << name << " was given the partition";
  }

  admin_.set_hook({});
  idl::PartitionProgress kept;
  kept.__set_channel("orders");
  kept.__set_partition(0);
  kept.__set_epoch(1);
  for (const auto& name : {"a", "b", "c"}) register_again(name, {kept});
  run_for(2000ms);
  r = route("orders");
  ASSERT_EQ(r.replicas.size(), 3u);
  EXPECT_EQ(r.replicas[0].node_id, id("c")) << "the copy that holds every acknowledged record leads";
  EXPECT_EQ(r.start_offset, 0);
  // a and b kept older copies of a chain short of replicas: they rejoin it
  // behind c (copying what they lack from it), and are not fenced.
  EXPECT_EQ(chain_of(r), (Ids{id("c"), id("a"), id("b")}));
  for (const auto& name : {"a", "b", "c"}) {
    EXPECT_TRUE(nodes_[name].broker->fences().empty()) << name;
  }
  // Every configuration ever sent for the partition names c: there was
  // never a chain without the records only c held.
  for (const auto& [name, n] : nodes_) {
    for (const auto& a : n.broker->configure_calls()) {
      if (a.route.channel != "orders") continue;
      EXPECT_TRUE(std::any_of(a.route.replicas.begin(), a.route.replicas.end(),
                              [&](const idl::Replica& rep) { return rep.node_id == id("c"); }))
          << name << " got epoch " << a.route.epoch << " without c";
    }
  }
}

// What keeps a partition from starting over is durable: after a controller
// restart the dead last member is still the chain, and the rebuild that
// follows its proven loss still starts at the high-water mark learnt before
// the restart.
TEST_F(Isolation, KeptLastMemberAndHighWaterMarkSurviveAControllerRestart) {
  ASSERT_TRUE(controller_->create_channel(channel_config("solo", 1, 1)).ok());
  ASSERT_EQ(chain_of(route("solo")), (Ids{id("d")}));
  nodes_["d"].broker->set_end_offset("solo", 0, 500);
  run_for(200ms);
  kill_broker("d");
  run_for(2000ms, {"d"});
  ASSERT_EQ(state_of("d"), idl::NodeState::DEAD);

  restart();
  run_for(2000ms, {"d"});
  auto r = route("solo");
  EXPECT_EQ(r.epoch, 1);
  EXPECT_EQ(chain_of(r), (Ids{id("d")}));

  register_again("d");  // restarted empty: the loss is proven
  run_for(500ms, {});
  r = route("solo");
  ASSERT_EQ(r.replicas.size(), 1u);
  EXPECT_EQ(r.start_offset, std::int64_t{1} << 32);
}

TEST(OffsetGeneration, RebuiltChainsStartAtTheNextGenerationAboveTheMark) {
  constexpr std::int64_t g = Controller::kOffsetGeneration;
  EXPECT_EQ(Controller::rebuilt_start_offset(0), g);
  EXPECT_EQ(Controller::rebuilt_start_offset(1000), g);
  EXPECT_EQ(Controller::rebuilt_start_offset(g - 1), g);
  EXPECT_EQ(Controller::rebuilt_start_offset(g), 2 * g) << "a rebuilt chain that lost its data again";
  EXPECT_EQ(Controller::rebuilt_start_offset(g + 5), 2 * g);
}

}  // namespace
}  // namespace catena::control
