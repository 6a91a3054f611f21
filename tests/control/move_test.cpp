// Tail-offset partition handoff in the controller (Controller::move_partition):
// the route it commits, what the new head is told, and a failure (or a
// controller crash) at each step either completing the move or leaving the
// old chain in charge, its seal lifted by a new epoch.
#include <algorithm>
#include <gtest/gtest.h>
#include <memory>
#include <set>
#include <string>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <vector>

#include <catena/control/wal.hpp>

#include "controller_fixture.hpp"
#include "test_support.hpp"
#include "zk_server.hpp"

namespace catena::control::testing {
namespace {

// Every test on both metadata stores (/dir, /zk).
class Move : public ControllerFixture, public ::testing::WithParamInterface<Store> {
 protected:
  void SetUp() override {
    if (GetParam() == Store::zk) ZK_METADATA_OR_SKIP(metadata_);
    ControllerFixture::SetUp();
    if (HasFatalFailure()) return;
    for (const char* n : {"a", "b", "c", "d"}) add_node(n, std::string("zone-") + n);
    ASSERT_TRUE(controller_->create_channel(channel_config("mv", 1, 3)).ok());
    run_for(std::chrono::milliseconds(300));  // every member acknowledges epoch 1
    before_ = route("mv");
    ASSERT_EQ(before_.replicas.size(), 3u);
    for (const auto& [name, n] : nodes_) {
      const std::string& node_id = n.id;  // a lambda cannot capture a structured binding (Clang 14)
      if (std::none_of(before_.replicas.begin(), before_.replicas.end(),
                       [&](const idl::Replica& r) { return r.node_id == node_id; })) {
        spare_ = name;
      }
    }
    head_ = name_of(before_.replicas.front().node_id);
    nodes_.at(head_).broker->set_end_offset("mv", 0, 1234);
    idl::ProducerRun run;
    run.__set_first_seq(40);
    run.__set_first_offset(1194);
    run.__set_count(40);
    idl::ProducerSnapshot snap;
    snap.__set_producer_id(7);
    snap.__set_producer_epoch(3);
    snap.__set_last_seq(79);
    snap.__set_runs({run});
    nodes_.at(head_).broker->set_producers("mv", 0, {snap});
    // The new chain: the spare at the head, then the old chain's last two.
    to_ = {id(spare_), before_.replicas[1].node_id, before_.replicas[2].node_id};
  }

  std::string name_of(const std::string& node_id) const {
    for (const auto& [name, n] : nodes_) {
      if (n.id == node_id) return name;
    }
    return {};
  }

  // The old chain goes on: same members, a newer epoch, no sealed range.
  void expect_old_chain_in_charge() {
    const auto r = route("mv");
    EXPECT_GT(r.epoch, before_.epoch);
    ASSERT_EQ(r.replicas.size(), before_.replicas.size());
    for (std::size_t i = 0; i < r.replicas.size(); ++i)
      EXPECT_EQ(r.replicas[i].node_id, before_.replicas[i].node_id);
    EXPECT_EQ(r.start_offset, before_.start_offset);
    EXPECT_TRUE(r.sealed.empty());
    EXPECT_TRUE(controller_->metadata().moves.empty());
    // Its head is told the new epoch (which lifts its seal).
    run_for(std::chrono::milliseconds(300));
    EXPECT_EQ(nodes_.at(head_).broker->installed("mv", 0).value_or(idl::PartitionRoute{}).epoch, r.epoch);
  }

  // Creates a channel of one partition and one replica: its replica's node
  // first, then the other nodes.
  std::vector<std::string> single_replica_channel(const std::string& channel) {
    EXPECT_TRUE(controller_->create_channel(channel_config(channel, 1, 1)).ok());
    run_for(std::chrono::milliseconds(300));
    std::vector<std::string> order{route(channel).replicas.front().node_id};
    for (const auto& [name, n] : nodes_) {
      if (n.id != order.front()) order.push_back(n.id);
    }
    return order;
  }

  idl::PartitionRoute before_;
  std::string spare_, head_;
  std::vector<std::string> to_;
};

TEST_P(Move, CommitsTheNewChainAtTheSealedOffsetAndHandsTheProducersToItsHead) {
  auto moved = controller_->move_partition("mv", 0, to_);
  ASSERT_TRUE(moved.ok()) << moved.error().describe();
  EXPECT_EQ(moved->epoch, before_.epoch + 1);
  EXPECT_EQ(moved->start_offset, 1234);
  ASSERT_EQ(moved->replicas.size(), 3u);
  EXPECT_EQ(moved->replicas[0].node_id, id(spare_));
  ASSERT_EQ(moved->sealed.size(), 1u);
  EXPECT_EQ(moved->sealed[0].start_offset, 0);
  EXPECT_EQ(moved->sealed[0].end_offset, 1234);
  EXPECT_EQ(moved->sealed[0].epoch, before_.epoch);
  EXPECT_EQ(moved->sealed[0].replicas.size(), 3u);
  EXPECT_TRUE(controller_->metadata().moves.empty());

  // The new head got the old head's producer state with its route; nobody
  // else did.
  bool head_told = false;
  for (const auto& a : nodes_.at(spare_).broker->configure_calls()) {
    if (a.route.epoch != moved->epoch) continue;
    ASSERT_EQ(a.producers.size(), 1u);
    EXPECT_EQ(a.producers[0].producer_id, 7);
    EXPECT_EQ(a.producers[0].last_seq, 79);
    ASSERT_EQ(a.producers[0].runs.size(), 1u);
    EXPECT_EQ(a.producers[0].runs[0].first_offset, 1194);
    head_told = true;
  }
  EXPECT_TRUE(head_told);
  for (const auto* other : {&before_.replicas[1], &before_.replicas[2]}) {
    for (const auto& a : nodes_.at(name_of(other->node_id)).broker->configure_calls()) {
      EXPECT_TRUE(a.producers.empty()) << other->node_id;
    }
  }
  // The old head, in no chain now, is told the route: it keeps its range.
  run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(nodes_.at(head_).broker->installed("mv", 0).value_or(idl::PartitionRoute{}).epoch, moved->epoch);

  // The move survives a restart, and the new head still gets the producers
  // when the route is pushed again.
  restart();
  const auto after = route("mv");
  EXPECT_EQ(after.epoch, moved->epoch);
  EXPECT_EQ(after.start_offset, 1234);
  ASSERT_EQ(after.sealed.size(), 1u);
  const auto calls_before = nodes_.at(spare_).broker->configure_calls().size();
  run_for(std::chrono::milliseconds(300));
  const auto calls = nodes_.at(spare_).broker->configure_calls();
  ASSERT_GT(calls.size(), calls_before);
  EXPECT_EQ(calls.back().producers.size(), 1u);
}

// A sealed range whose records expired (ttl after it was sealed, on the
// controller's wall clock) leaves the route at a new epoch; the chain stays.
TEST_P(Move, ExpiredRangesLeaveTheRoute) {
  auto moved = controller_->move_partition("mv", 0, to_);
  ASSERT_TRUE(moved.ok()) << moved.error().describe();
  ASSERT_EQ(moved->sealed.size(), 1u);
  EXPECT_EQ(moved->sealed[0].sealed_at_ms, wall_ms_);
  wall_ms_ += 60000 - 1;  // channel_config's ttl_ms, less one
  run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(route("mv").epoch, moved->epoch);
  ASSERT_EQ(route("mv").sealed.size(), 1u) << "not expired yet";
  wall_ms_ += 1;
  run_for(std::chrono::milliseconds(300));
  const auto r = route("mv");
  EXPECT_EQ(r.epoch, moved->epoch + 1);
  EXPECT_TRUE(r.sealed.empty());
  EXPECT_EQ(r.replicas, moved->replicas);
  EXPECT_EQ(r.start_offset, 1234);
  EXPECT_EQ(nodes_.at(spare_).broker->installed("mv", 0).value_or(idl::PartitionRoute{}).epoch, r.epoch);
}

TEST_P(Move, ASecondMoveKeepsBothRangesInOrder) {
  ASSERT_TRUE(controller_->move_partition("mv", 0, to_).ok());
  run_for(std::chrono::milliseconds(300));
  nodes_.at(spare_).broker->set_end_offset("mv", 0, 2000);
  auto again = controller_->move_partition("mv", 0, {before_.replicas[0].node_id});
  ASSERT_TRUE(again.ok()) << again.error().describe();
  ASSERT_EQ(again->sealed.size(), 2u);
  EXPECT_EQ(again->sealed[0].end_offset, 1234);
  EXPECT_EQ(again->sealed[1].start_offset, 1234);
  EXPECT_EQ(again->sealed[1].end_offset, 2000);
  EXPECT_EQ(again->start_offset, 2000);
  EXPECT_EQ(again->replicas.size(), 1u);
}

// What each node is pushed lists only the sealed ranges it holds (all a
// broker acts on), and a node that holds only older ranges, and already
// confirmed a route in which they were sealed, is not told again: what a
// move sends does not grow with the moves before it. A single-replica
// channel moved a -> b -> c -> d (no repair between the moves).
TEST_P(Move, EachMoveTellsTheNewChainAndTheRangeItSealedOnly) {
  const std::vector<std::string> order = single_replica_channel("one");
  ASSERT_EQ(order.size(), 4u);
  idl::PartitionRoute moved;
  for (std::size_t k = 1; k < order.size(); ++k) {
    nodes_.at(name_of(order[k - 1])).broker->set_end_offset("one", 0, static_cast<std::int64_t>(k) * 100);
    auto r = controller_->move_partition("one", 0, {order[k]});
    ASSERT_TRUE(r.ok()) << "move " << k << ": " << r.error().describe();
    moved = *r;
    run_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(moved.sealed.size(), 3u);
  EXPECT_EQ(route("one").sealed.size(), 3u) << "clients still read every range";
  std::set<std::string> told;
  for (const auto& [name, n] : nodes_) {
    for (const auto& a : n.broker->configure_calls()) {
      if (a.route.channel != "one" || a.route.epoch != moved.epoch) continue;
      told.insert(n.id);
      EXPECT_EQ(a.route.replicas, moved.replicas) << name << ": the chain itself is never trimmed";
      ASSERT_EQ(a.route.sealed.size(), n.id == order[2] ? 1u : 0u) << name << ": only its own range";
      if (n.id == order[2]) {
        EXPECT_EQ(a.route.sealed[0].end_offset, 300);
      }
    }
  }
  EXPECT_EQ(told, (std::set<std::string>{order[2], order[3]}))
      << "the new chain and the range the move sealed; not the nodes of the two older ranges";
}

// The log records of the moves of partition 0 of `channel` in the directory
// store's log, in order: the payload bytes of each that committed a route.
std::vector<std::size_t> move_record_bytes(const std::filesystem::path& wal, const std::string& channel) {
  std::vector<std::size_t> out;
  auto contents = read_wal(wal);
  EXPECT_TRUE(contents.ok());
  if (!contents) return out;
  for (const auto& rec : contents->records) {
    std::string payload = rec.payload;
    auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>(
        reinterpret_cast<std::uint8_t*>(payload.data()), static_cast<std::uint32_t>(payload.size()));
    apache::thrift::protocol::TBinaryProtocol proto(buf);
    meta::MetaRecord r;
    r.read(&proto);
    EXPECT_FALSE(r.__isset.put_routes && !r.put_routes.empty() && r.put_routes.front().channel == channel &&
                 r.__isset.set_handoff)
        << "a move's record carries the whole route";
    if (r.__isset.move_route && r.move_route.channel == channel) out.push_back(payload.size());
  }
  return out;
}

// A move's log record names only what changed (the new chain, the one range
// it sealed, the producer state), so it is the same size however many moves
// came before it within the TTL; replay (and the ZooKeeper store's route
// znode) rebuild the exact route the moves left. A single-replica channel
// moved back and forth over the four nodes.
TEST_P(Move, EachMoveLogsOnlyWhatItChangedAndARestartRestoresTheRoute) {
  const std::vector<std::string> order = single_replica_channel("one");
  ASSERT_EQ(order.size(), 4u);
  constexpr std::size_t kMoves = 8;
  idl::PartitionRoute moved;
  for (std::size_t k = 1; k <= kMoves; ++k) {
    nodes_.at(name_of(order[(k - 1) % 4]))
        .broker->set_end_offset("one", 0, static_cast<std::int64_t>(k) * 100);
    auto r = controller_->move_partition("one", 0, {order[k % 4]});
    ASSERT_TRUE(r.ok()) << "move " << k << ": " << r.error().describe();
    moved = *r;
    run_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(moved.sealed.size(), kMoves);
  for (std::size_t k = 0; k < kMoves; ++k) {
    EXPECT_EQ(moved.sealed[k].start_offset, static_cast<std::int64_t>(k) * 100);
    EXPECT_EQ(moved.sealed[k].end_offset, static_cast<std::int64_t>(k + 1) * 100);
    ASSERT_EQ(moved.sealed[k].replicas.size(), 1u);
    EXPECT_EQ(moved.sealed[k].replicas[0].node_id, order[k % 4]);
  }
  EXPECT_EQ(route("one"), moved);
  if (GetParam() == Store::dir) {
    const auto sizes = move_record_bytes(dir_.path() / "meta" / "wal", "one");
    ASSERT_EQ(sizes.size(), kMoves);
    for (std::size_t k = 0; k < kMoves; ++k) {
      // One chain of one replica and one sealed range of one: ~200 bytes,
      // and no more for the eighth move than for the first (node ids and
      // addresses are the same length here).
      EXPECT_LE(sizes[k], 300u) << "move " << k + 1;
      EXPECT_EQ(sizes[k], sizes[0]) << "move " << k + 1 << " grew with the moves before it";
    }
  }
  restart();
  EXPECT_EQ(route("one"), moved) << "replay rebuilds the route the moves left";
  run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(
      nodes_.at(name_of(order[kMoves % 4])).broker->installed("one", 0).value_or(idl::PartitionRoute{}).epoch,
      moved.epoch);
}

TEST_P(Move, BadTargetsAreRefusedAndChangeNothing) {
  EXPECT_EQ(controller_->move_partition("mv", 0, {}).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->move_partition("mv", 0, {id("a"), id("a")}).code(),
            idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->move_partition("mv", 0, {"node-99"}).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->move_partition("nope", 0, to_).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->move_partition("mv", 3, to_).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(route("mv").epoch, before_.epoch);
  EXPECT_EQ(nodes_.at(head_).broker->seal_calls(), 0u);
}

TEST_P(Move, AHeadThatCannotBeSealedLeavesTheOldChainInCharge) {
  nodes_.at(head_).broker->set_seal_error(true);
  auto moved = controller_->move_partition("mv", 0, to_);
  EXPECT_EQ(moved.code(), idl::ErrorCode::UNAVAILABLE) << moved.error().describe();
  expect_old_chain_in_charge();
}

TEST_P(Move, AChainThatDoesNotCommitInTimeLeavesTheOldChainInCharge) {
  nodes_.at(head_).broker->set_commit_lag(10);  // never catches up
  controller_.reset();
  Controller::Options o = options();
  o.move_commit_timeout = std::chrono::milliseconds(50);
  auto c = Controller::open(o, clock_, admin_);
  ASSERT_TRUE(c.ok());
  controller_ = std::move(*c);
  run_for(std::chrono::milliseconds(300));  // the restarted controller hears every member's epoch again
  auto moved = controller_->move_partition("mv", 0, to_);
  EXPECT_EQ(moved.code(), idl::ErrorCode::UNAVAILABLE) << moved.error().describe();
  EXPECT_GT(nodes_.at(head_).broker->seal_calls(), 1u);  // polled until the deadline
  expect_old_chain_in_charge();
}

TEST_P(Move, ControllerCrashAfterTheIntentGivesTheMoveUpOnRestart) {
  crash_at_ = "move.intent_written";
  EXPECT_FALSE(controller_->move_partition("mv", 0, to_).ok());
  restart();
  expect_old_chain_in_charge();
}

TEST_P(Move, ControllerCrashAfterTheSealGivesTheMoveUpOnRestart) {
  crash_at_ = "move.sealed";
  EXPECT_FALSE(controller_->move_partition("mv", 0, to_).ok());
  EXPECT_EQ(nodes_.at(head_).broker->seal_calls(), 1u);  // the head was sealed
  restart();
  expect_old_chain_in_charge();
}

TEST_P(Move, ControllerCrashAfterTheCommitCompletesTheMoveOnRestart) {
  crash_at_ = "move.committed";
  EXPECT_FALSE(controller_->move_partition("mv", 0, to_).ok());
  restart();
  const auto r = route("mv");
  EXPECT_EQ(r.epoch, before_.epoch + 1);
  EXPECT_EQ(r.start_offset, 1234);
  EXPECT_EQ(r.replicas.front().node_id, id(spare_));
  run_for(std::chrono::milliseconds(300));
  const auto calls = nodes_.at(spare_).broker->configure_calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().route.epoch, r.epoch);
  EXPECT_EQ(calls.back().producers.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Stores, Move, ::testing::Values(Store::dir, Store::zk),
                         [](const auto& info) { return store_name(info.param); });

}  // namespace
}  // namespace catena::control::testing
