// Subscriber groups, the coordinator's side (controller_groups.hpp), on a
// ManualClock: membership, sticky incremental reassignment, revoke before
// assign, generation fencing of commits, batch commits, a controller
// restart in the middle of a reassignment, and whom each change told.
#include <algorithm>
#include <future>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller_fixture.hpp"
#include "zk_server.hpp"

namespace catena::control {
namespace {

using testing::channel_config;
using Parts = std::vector<std::int32_t>;

class Groups : public testing::ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    add_node("a", "z1");
  }
  void make_channel(int partitions) {
    auto c = controller_->create_channel(channel_config("c", partitions, 1));
    ASSERT_TRUE(c.ok()) << c.error().describe();
  }
  idl::GroupAssignment join(const std::string& name, const Parts& owned = {}) {
    auto a = controller_->join_group("g", "c", name, owned);
    EXPECT_TRUE(a.ok()) << a.error().describe();
    return a ? *a : idl::GroupAssignment{};
  }
  idl::GroupAssignment beat(const std::string& id, const Parts& released = {}) {
    auto a = controller_->group_heartbeat("g", id, released);
    EXPECT_TRUE(a.ok()) << a.error().describe();
    return a ? *a : idl::GroupAssignment{};
  }
  Result<void> commit(const idl::GroupAssignment& a, const std::map<std::int32_t, std::int64_t>& offsets) {
    std::vector<idl::PartitionOffset> batch;
    for (const auto& [p, o] : offsets) {
      idl::PartitionOffset po;
      po.__set_partition(p);
      po.__set_offset(o);
      batch.push_back(po);
    }
    return controller_->commit_offsets("g", "c", a.member_id, a.generation, batch);
  }
  std::set<std::string> last_told() {
    auto changes = controller_->group_changes();
    if (changes.empty()) return {};
    return {changes.back().told.begin(), changes.back().told.end()};
  }
};

TEST_F(Groups, SecondMemberGetsPartitionsOnlyAfterTheOwnerCommittedAndReleasedThem) {
  make_channel(4);
  auto a = join("a");
  EXPECT_EQ(a.partitions, (Parts{0, 1, 2, 3}));
  EXPECT_TRUE(a.start_offsets.empty()) << "nothing committed yet";
  ASSERT_TRUE(commit(a, {{0, 10}, {1, 11}, {2, 12}, {3, 13}}).ok());

  auto b = join("b");
  EXPECT_TRUE(b.partitions.empty()) << "2 and 3 are still a's: revoke comes first";
  EXPECT_EQ(last_told(), std::set<std::string>{a.member_id}) << "only a's assignment changed";
  a = beat(a.member_id);
  EXPECT_EQ(a.partitions, (Parts{0, 1}));
  EXPECT_EQ(a.revoke, (Parts{2, 3}));
  // While a still holds them, b gets nothing, however often it asks.
  clock_.advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(beat(b.member_id).partitions.empty());
  EXPECT_TRUE(beat(b.member_id).revoke.empty());

  // a commits its position in the revoked partitions (the handoff point),
  // in one batch with the others, then releases them.
  ASSERT_TRUE(commit(a, {{0, 20}, {1, 21}, {2, 22}, {3, 23}}).ok());
  a = beat(a.member_id, {2, 3});
  EXPECT_EQ(a.partitions, (Parts{0, 1}));
  EXPECT_TRUE(a.revoke.empty());
  EXPECT_EQ(last_told(), std::set<std::string>{b.member_id}) << "a released them itself: only b hears";
  b = beat(b.member_id);
  EXPECT_EQ(b.partitions, (Parts{2, 3}));
  EXPECT_EQ(b.start_offsets, (std::map<std::int32_t, std::int64_t>{{2, 22}, {3, 23}}));

  // a lost 2: it can no longer commit it, and the whole batch is refused.
  auto stale = commit(a, {{0, 30}, {2, 40}});
  EXPECT_EQ(stale.code(), idl::ErrorCode::NOT_OWNER) << stale.error().describe();
  EXPECT_EQ(*controller_->fetch_offset("g", "c", 0), 20) << "nothing of a refused batch is written";
  EXPECT_EQ(*controller_->fetch_offset("g", "c", 2), 22);
  ASSERT_TRUE(commit(b, {{2, 25}}).ok());
  EXPECT_EQ(*controller_->fetch_offset("g", "c", 2), 25);
}

TEST_F(Groups, AJoinMovesOnlyTheSurplusAndTellsOnlyTheMembersWhoseAssignmentChanges) {
  make_channel(4);
  auto a = join("a");
  auto b = join("b");
  a = beat(a.member_id);
  ASSERT_TRUE(commit(a, {{2, 0}, {3, 0}}).ok());
  a = beat(a.member_id, a.revoke);
  b = beat(b.member_id);
  ASSERT_EQ(a.partitions, (Parts{0, 1}));
  ASSERT_EQ(b.partitions, (Parts{2, 3}));

  // 4 partitions over 3 members: shares 2, 1, 1. One partition moves, one
  // owner is told; the other keeps consuming without hearing anything.
  auto c = join("c");
  const auto told = last_told();
  ASSERT_EQ(told.size(), 1U);
  const std::string& giver = *told.begin();
  const std::string& keeper = giver == a.member_id ? b.member_id : a.member_id;
  const auto keeper_before = keeper == a.member_id ? a.partitions : b.partitions;
  auto g = beat(giver);
  ASSERT_EQ(g.revoke.size(), 1U);
  EXPECT_EQ(g.partitions.size(), 1U);
  auto k = beat(keeper);
  EXPECT_EQ(k.partitions, keeper_before);
  EXPECT_TRUE(k.revoke.empty());

  const std::int32_t moving = g.revoke.front();
  ASSERT_TRUE(commit(g, {{moving, 7}}).ok());
  beat(giver, {moving});
  EXPECT_EQ(last_told(), std::set<std::string>{c.member_id});
  c = beat(c.member_id);
  EXPECT_EQ(c.partitions, Parts{moving});
  EXPECT_EQ(c.start_offsets.at(moving), 7);

  auto status = controller_->describe_group("g");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->members.size(), 3U);
  ASSERT_EQ(status->partitions.size(), 4U);
  EXPECT_EQ(status->partitions[static_cast<std::size_t>(moving)].owner, c.member_id);
  EXPECT_EQ(status->partitions[static_cast<std::size_t>(moving)].committed, 7);
}

TEST_F(Groups, ASilentMembersPartitionsGoToTheOthersFromItsLastCommit) {
  make_channel(2);
  auto a = join("a");
  auto b = join("b");
  a = beat(a.member_id);
  ASSERT_EQ(a.revoke, Parts{1});
  ASSERT_TRUE(commit(a, {{0, 5}, {1, 6}}).ok());
  // a dies before it releases 1 (it was revoking it): its session expires.
  for (int i = 0; i < 11; ++i) {
    clock_.advance(std::chrono::milliseconds(1000));
    b = beat(b.member_id);
    controller_->tick();
  }
  b = beat(b.member_id);
  EXPECT_EQ(b.partitions, (Parts{0, 1}));
  EXPECT_EQ(b.start_offsets, (std::map<std::int32_t, std::int64_t>{{0, 5}, {1, 6}}));
  EXPECT_EQ(controller_->group_heartbeat("g", a.member_id, {}).code(), idl::ErrorCode::UNKNOWN_MEMBER);
  EXPECT_EQ(commit(a, {{0, 9}}).code(), idl::ErrorCode::UNKNOWN_MEMBER);
  EXPECT_EQ(*controller_->fetch_offset("g", "c", 0), 5);
}

TEST_F(Groups, ACommitFromAnEarlierOwnershipIsRefusedAndNoCommitMovesBackwards) {
  make_channel(2);
  auto a = join("a");
  ASSERT_TRUE(commit(a, {{0, 100}, {1, 100}}).ok());
  const auto first = a;
  auto b = join("b");
  a = beat(a.member_id);
  a = beat(a.member_id, a.revoke);  // releases 1
  ASSERT_TRUE(controller_->leave_group("g", b.member_id).ok());
  a = beat(a.member_id);  // gets 1 back, at a newer generation
  ASSERT_EQ(a.partitions, (Parts{0, 1}));
  ASSERT_GT(a.assigned_at.at(1), first.generation);
  EXPECT_EQ(commit(first, {{1, 150}}).code(), idl::ErrorCode::NOT_OWNER)
      << "a position from the first ownership";
  ASSERT_TRUE(commit(a, {{1, 150}}).ok());
  ASSERT_TRUE(commit(a, {{1, 120}, {0, 130}}).ok()) << "a late retry is not an error";
  EXPECT_EQ(*controller_->fetch_offset("g", "c", 1), 150) << "but it does not move the offset back";
  EXPECT_EQ(*controller_->fetch_offset("g", "c", 0), 130);
  EXPECT_EQ(controller_->join_group("g", "other", "x", {}).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  ASSERT_TRUE(controller_->create_channel(channel_config("other", 1, 1)).ok());
  EXPECT_EQ(controller_->join_group("g", "other", "x", {}).code(), idl::ErrorCode::INVALID_ARGUMENT)
      << "a group reads one channel";
  EXPECT_EQ(controller_->join_group("g", "c", "bad name", {}).code(), idl::ErrorCode::INVALID_ARGUMENT);
}

// The controller restarts after a has been told to revoke 1 but before it
// released it. Membership was in memory: both members rejoin naming what
// they still consume and get exactly that back; a newcomer gets nothing a
// member from before the restart may still be consuming until the claim
// window (one session timeout) has passed.
TEST_F(Groups, AControllerRestartMidRebalanceGivesMembersBackWhatTheyConsume) {
  make_channel(3);
  auto a = join("a");
  ASSERT_TRUE(commit(a, {{0, 1}, {1, 2}, {2, 3}}).ok());
  auto b = join("b");
  a = beat(a.member_id);
  ASSERT_EQ(a.partitions, (Parts{0, 1}));
  ASSERT_EQ(a.revoke, Parts{2});
  restart();

  EXPECT_EQ(controller_->group_heartbeat("g", a.member_id, {2}).code(), idl::ErrorCode::UNKNOWN_MEMBER);
  // a had stopped 2 (it was revoking it) and still consumes 0 and 1.
  auto a2 = join("a", {0, 1});
  EXPECT_EQ(a2.partitions, (Parts{0, 1}));
  EXPECT_NE(a2.member_id, a.member_id);
  auto c = join("c");
  EXPECT_TRUE(c.partitions.empty()) << "2 may be consumed by someone who has not rejoined yet";
  clock_.advance(std::chrono::milliseconds(4000));
  controller_->tick();
  EXPECT_TRUE(beat(c.member_id).partitions.empty());
  // b never comes back (it had nothing); after the claim window 2 is handed
  // out from its committed offset.
  for (int i = 0; i < 7; ++i) {
    clock_.advance(std::chrono::milliseconds(1000));
    beat(a2.member_id);
    beat(c.member_id);
    controller_->tick();
  }
  c = beat(c.member_id);
  a2 = beat(a2.member_id);
  std::set<std::int32_t> all(c.partitions.begin(), c.partitions.end());
  all.insert(a2.partitions.begin(), a2.partitions.end());
  EXPECT_EQ(all, (std::set<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(c.partitions, Parts{2});
  EXPECT_EQ(c.start_offsets.at(2), 3);
}

// A partition-count change (issue 12 part 1 grows channels) reaches the
// coordinator with the next heartbeat or tick: only the new partitions are
// handed out, to the members below their share, and nothing anyone
// consumes moves.
TEST(GroupCoordinator, NewPartitionsGoToMembersBelowTheirShareAndNothingElseMoves) {
  ManualClock clock;
  GroupCoordinator c({}, clock, {});
  auto a = c.join("g", "c", "a", {}, 2);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->partitions, (Parts{0, 1}));
  auto b = c.join("g", "c", "b", {}, 2);
  ASSERT_TRUE(b.ok());
  a = c.heartbeat("g", a->member_id, {}, 2);
  ASSERT_EQ(a->revoke, Parts{1});
  a = c.heartbeat("g", a->member_id, {1}, 2);
  b = c.heartbeat("g", b->member_id, {}, 2);
  ASSERT_EQ(b->partitions, Parts{1});

  c.tick({{"g", 5}});  // 5 partitions: shares 3 and 2
  EXPECT_EQ(c.changes().back().told.size(), 2U) << "both get new partitions";
  a = c.heartbeat("g", a->member_id, {}, 5);
  b = c.heartbeat("g", b->member_id, {}, 5);
  EXPECT_TRUE(a->revoke.empty());
  EXPECT_TRUE(b->revoke.empty());
  std::set<std::int32_t> all(a->partitions.begin(), a->partitions.end());
  all.insert(b->partitions.begin(), b->partitions.end());
  EXPECT_EQ(all, (std::set<std::int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(a->partitions.front(), 0) << "a keeps 0";
  EXPECT_NE(std::find(b->partitions.begin(), b->partitions.end(), 1), b->partitions.end()) << "b keeps 1";
  EXPECT_EQ(a->partitions.size() + b->partitions.size(), 5U);
  const auto before = c.changes().size();
  c.tick({{"g", 5}});
  EXPECT_EQ(c.changes().size(), before) << "no change, nobody told";
}

// On ZooKeeper, a group's offset commit is answered once ZooKeeper took it,
// and is waited for without the controller's lock: a ZooKeeper that stops
// answering (here SIGSTOP) holds up the commits sent meanwhile, not every
// other call (heartbeats: the brokers' leases). The same offsets committed
// again while the first commit is unanswered wait for it too.
class GroupsOnZooKeeper : public Groups {
 protected:
  void SetUp() override {
    std::string why;
    zk_ = testing::ZkServer::start(&why);
    ZK_OR_SKIP(zk_.get(), why);
    metadata_ = zk_->uri(testing::unique_chroot("groups"));
    Groups::SetUp();
  }
  void TearDown() override {
    if (zk_) zk_->resume();
    controller_.reset();  // before its server goes
  }
  std::int64_t fetched(std::int32_t partition) {
    auto o = controller_->fetch_offset("g", "c", partition);
    EXPECT_TRUE(o.ok()) << o.error().describe();
    return o ? *o : -1;
  }
  std::unique_ptr<testing::ZkServer> zk_;
};

TEST_F(GroupsOnZooKeeper, ACommitWaitsForZooKeeperWithoutHoldingUpOtherCalls) {
  make_channel(2);
  auto a = join("a");
  ASSERT_TRUE(commit(a, {{0, 10}}).ok());
  EXPECT_EQ(fetched(0), 10);

  zk_->pause();
  auto first = std::async(std::launch::async, [&] { return commit(a, {{0, 20}, {1, 21}}); });
  auto again = std::async(std::launch::async, [&] { return commit(a, {{0, 20}}); });
  // Other calls go on meanwhile: a member's heartbeat, a broker's.
  auto others = std::async(std::launch::async, [&] {
    beat(a.member_id);
    idl::HeartbeatRequest hb;
    hb.__set_node_id(id("a"));
    hb.__set_node_epoch(nodes_.at("a").epoch);
    return controller_->heartbeat(hb).ok();
  });
  ASSERT_EQ(others.wait_for(std::chrono::seconds(3)), std::future_status::ready)
      << "a heartbeat waited for the stopped ZooKeeper";
  EXPECT_TRUE(others.get());
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "a commit answered before ZooKeeper took it";
  EXPECT_EQ(again.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the same offsets committed again were answered before ZooKeeper took the first";
  // Each waiting call holds a server thread: at most 8 wait, the next is
  // answered at once (queued, not yet taken).
  std::vector<std::future<Result<void>>> more;
  for (std::int64_t o = 30; o < 36; ++o) {
    more.push_back(std::async(std::launch::async, [&, o] { return commit(a, {{1, o}}); }));
  }
  for (int i = 0; i < 300 && controller_->offset_commits_waiting() < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(controller_->offset_commits_waiting(), 8);
  auto ninth = std::async(std::launch::async, [&] { return commit(a, {{1, 40}}); });
  ASSERT_EQ(ninth.wait_for(std::chrono::seconds(3)), std::future_status::ready);
  auto r = ninth.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, idl::ErrorCode::UNAVAILABLE) << r.error().describe();

  zk_->resume();
  r = first.get();
  EXPECT_TRUE(r.ok()) << r.error().describe();
  r = again.get();
  EXPECT_TRUE(r.ok()) << r.error().describe();
  for (auto& m : more) {
    r = m.get();
    EXPECT_TRUE(r.ok()) << r.error().describe();
  }
  EXPECT_EQ(controller_->offset_commits_waiting(), 0);
  EXPECT_EQ(fetched(0), 20);
  EXPECT_EQ(fetched(1), 40) << "the commit answered at once was queued, and taken";
  // An older commit still never moves them back.
  ASSERT_TRUE(commit(a, {{0, 15}}).ok());
  EXPECT_EQ(fetched(0), 20);
  // Durable: a controller opening the same metadata finds them.
  restart();
  EXPECT_EQ(fetched(0), 20);
  EXPECT_EQ(fetched(1), 40);
}

}  // namespace
}  // namespace catena::control
