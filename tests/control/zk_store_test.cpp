// The metadata stores as one contract (every record type survives a reopen,
// on the directory store and on ZooKeeper), and what is ZooKeeper's own:
// the controller-epoch fence, the 1 MiB limit, a lost server. Against a
// real ZooKeeper server (zk_server.hpp).
#include <gtest/gtest.h>
#include <spdlog/cfg/env.h>
#include <thread>

#include <catena/control/metadata_store.hpp>
#include <catena/control/zk_metadata_store.hpp>

#include "test_support.hpp"
#include "zk_server.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

idl::PartitionRoute route_of(const std::string& channel, int partition, std::int64_t epoch,
                             std::vector<std::string> chain) {
  idl::PartitionRoute route;
  route.__set_channel(channel);
  route.__set_partition(partition);
  route.__set_epoch(epoch);
  for (auto& id : chain) {
    idl::Replica r;
    r.__set_node_id(id);
    r.__set_admin_addr(id + ".test:7000");
    r.__set_fabric_addr(id + ".test:9000");
    r.__set_node_epoch(1);
    route.replicas.push_back(r);
  }
  return route;
}

meta::MetaRecord put_node(const std::string& id, std::int64_t epoch, bool dead = false) {
  meta::NodeRecord n;
  n.info.__set_node_id(id);
  n.info.__set_admin_addr(id + ".test:7000");
  n.info.__set_fabric_addr(id + ".test:9000");
  n.info.__set_zone("z1");
  n.__set_node_epoch(epoch);
  n.__set_dead(dead);
  meta::MetaRecord r;
  r.__set_put_node(n);
  r.__set_next_node_seq(epoch + 1);
  r.__set_next_node_epoch(epoch + 1);
  return r;
}

// One record of every kind MetaRecord has, some combined as the controller
// combines them; commits each, checking the state against apply_record().
void write_every_record_type(MetadataStore& store) {
  meta::MetaState expect = store.state();
  auto commit = [&](const meta::MetaRecord& r) {
    auto res = store.commit(r);
    ASSERT_TRUE(res.ok()) << res.error().describe();
    apply_record(expect, r);
    ASSERT_EQ(store.state(), expect);
  };
  for (int i = 1; i <= 3; ++i) commit(put_node("node-" + std::to_string(i), i));
  commit(put_node("node-2", 2, /*dead=*/true));
  {
    meta::MetaRecord link;
    link.__set_set_link_key(std::string(32, '\x5a'));
    link.__set_producer_numbers_reserved(1024);
    commit(link);
  }
  {
    meta::ChannelRecord ch;
    ch.config = testing::channel_config("orders", 3, 2);
    for (int p = 0; p < 3; ++p) ch.routes.push_back(route_of("orders", p, 1, {"node-1", "node-3"}));
    meta::MetaRecord r;
    r.__set_put_channel(ch);
    // A later field of the same record changes a route the first created.
    r.__set_put_routes({route_of("orders", 2, 2, {"node-3"})});
    commit(r);
  }
  {
    meta::RepairIntent intent;
    intent.__set_id(7);
    intent.__set_node_id("node-2");
    intent.__set_node_epoch(2);
    intent.__set_reason("heartbeats stopped");
    meta::RouteKey k;
    k.__set_channel("orders");
    k.__set_partition(1);
    intent.__set_routes({k});
    meta::MetaRecord r;
    r.__set_begin_repair(intent);
    r.__set_next_intent_id(8);
    commit(r);
    meta::MetaRecord moved;
    moved.__set_put_routes(
        {route_of("orders", 1, 2, {"node-1"}), route_of("orders", 0, 3, {"node-3", "node-1"})});
    commit(moved);
    meta::MetaRecord end;
    end.__set_end_repair(7);
    commit(end);
  }
  {
    meta::OffsetCommit c;
    c.__set_group("billing");
    c.__set_channel("orders");
    c.__set_partition(1);
    c.__set_offset(42);
    meta::MetaRecord r;
    r.__set_commit_offset(c);
    commit(r);
    c.__set_partition(2);
    r.__set_commit_offset(c);
    commit(r);
  }
  {
    meta::MetaRecord r;
    r.__set_raise_high_water({{"orders", {{0, 100}, {2, 7}}}});
    commit(r);
    r.__set_raise_high_water({{"orders", {{0, 50}, {1, 9}}}});  // max(): 0 stays at 100
    commit(r);
  }
  {
    meta::MoveIntent m;
    m.__set_channel("orders");
    m.__set_partition(0);
    m.__set_from_epoch(3);
    m.__set_to({"node-1", "node-3"});
    meta::MetaRecord begin;
    begin.__set_begin_move(m);
    commit(begin);
    m.__set_partition(1);
    begin.__set_begin_move(m);
    commit(begin);
    meta::Handoff h;
    h.__set_epoch(4);
    idl::ProducerSnapshot p;
    p.__set_producer_id(5);
    p.__set_producer_epoch(6);
    h.__set_producers({p});
    meta::RouteKey key;
    key.__set_channel("orders");
    key.__set_partition(0);
    meta::MetaRecord done;
    done.__set_end_move(key);
    done.__set_handoff_key(key);
    done.__set_set_handoff(h);
    done.__set_put_routes({route_of("orders", 0, 4, {"node-1", "node-3"})});
    commit(done);
    // A committed move as it is logged now: only what changed.
    meta::RouteMove change;
    change.__set_channel("orders");
    change.__set_partition(0);
    change.__set_epoch(5);
    change.__set_replicas(route_of("orders", 0, 5, {"node-3"}).replicas);
    change.__set_start_offset(700);
    idl::SealedRange range;
    range.__set_start_offset(0);
    range.__set_end_offset(700);
    range.__set_epoch(4);
    range.__set_replicas(route_of("orders", 0, 4, {"node-1", "node-3"}).replicas);
    range.__set_sealed_at_ms(1234);
    change.__set_sealed(range);
    meta::MetaRecord next;
    next.__set_move_route(change);
    commit(next);
  }
  {
    meta::ChannelRecord ch;
    ch.config = testing::channel_config("a.b-c_d", 1, 1);
    ch.routes.push_back(route_of("a.b-c_d", 0, 4, {"node-1"}));
    ch.__set_first_epoch(4);  // created after a delete
    meta::MetaRecord r;
    r.__set_put_channel(ch);
    commit(r);
  }
  {
    // Tenants: two created, one given a new token, the other deleted.
    meta::TenantRecord t;
    t.__set_name("team-a");
    idl::TenantQuotas q;
    q.__set_max_channels(4);
    q.__set_max_partitions(16);
    q.__set_max_groups(-1);
    t.__set_quotas(q);
    t.__set_token_sha256(std::string(32, '\x01'));
    t.__set_created_at_ms(1234);
    meta::MetaRecord r;
    r.__set_put_tenant(t);
    commit(r);
    t.__set_name("team_b");
    r.__set_put_tenant(t);
    commit(r);
    t.__set_token_sha256(std::string(32, '\x02'));
    r.__set_put_tenant(t);
    commit(r);
    meta::MetaRecord gone;
    gone.__set_delete_tenant("team-a");
    commit(gone);
  }
  {
    // A channel with something under every name it has (routes, a sealed
    // range, high-water marks, a move, a handoff, two groups' offsets),
    // deleted: nothing of it is left, and the epoch floor is one above its
    // highest epoch (the sealed range's, 9). Another group's offsets stay.
    meta::ChannelRecord ch;
    ch.config = testing::channel_config("doomed", 2, 1);
    ch.routes.push_back(route_of("doomed", 0, 3, {"node-1"}));
    auto sealed = route_of("doomed", 1, 5, {"node-3"});
    idl::SealedRange range;
    range.__set_start_offset(0);
    range.__set_end_offset(10);
    range.__set_epoch(9);
    range.__set_replicas(route_of("doomed", 1, 9, {"node-1"}).replicas);
    sealed.__set_sealed({range});
    ch.routes.push_back(sealed);
    meta::MetaRecord r;
    r.__set_put_channel(ch);
    r.__set_raise_high_water({{"doomed", {{0, 12}}}});
    commit(r);
    meta::OffsetCommit c;
    c.__set_group("billing");
    c.__set_channel("doomed");
    c.__set_partition(0);
    c.__set_offset(3);
    meta::OffsetCommit other = c;
    other.__set_group("only-doomed");
    meta::MetaRecord offsets;
    offsets.__set_commit_offsets({c, other});
    commit(offsets);
    meta::MoveIntent m;
    m.__set_channel("doomed");
    m.__set_partition(1);
    m.__set_from_epoch(5);
    m.__set_to({"node-1"});
    meta::MetaRecord begin;
    begin.__set_begin_move(m);
    meta::RouteKey key;
    key.__set_channel("doomed");
    key.__set_partition(0);
    meta::Handoff h;
    h.__set_epoch(3);
    begin.__set_handoff_key(key);
    begin.__set_set_handoff(h);
    commit(begin);
    // Its drops owed to two nodes go with the delete; one confirmed later.
    std::vector<meta::PendingDrop> drops;
    for (const auto& [node, p] : {std::pair<std::string, int>{"node-1", 0}, {"node-3", 1}}) {
      meta::PendingDrop d;
      d.__set_node_id(node);
      d.__set_route(route_of("doomed", p, 10, {}));
      d.__set_segment_bytes(1 << 20);
      d.__set_ttl_ms(60000);
      d.__set_channel_partitions(2);
      drops.push_back(d);
    }
    meta::MetaRecord del;
    del.__set_delete_channel("doomed");
    del.__set_add_drops(drops);
    commit(del);
    ASSERT_EQ(store.state().pending_drops, drops);
    meta::MetaRecord delivered;
    delivered.__set_end_drops({drops[0]});
    commit(delivered);
    const auto& st = store.state();
    ASSERT_EQ(st.pending_drops.size(), 1U);
    EXPECT_EQ(st.pending_drops[0], drops[1]);
    EXPECT_EQ(st.channels.count("doomed"), 0U);
    EXPECT_EQ(st.high_water.count("doomed"), 0U);
    EXPECT_EQ(st.moves.count("doomed"), 0U);
    EXPECT_EQ(st.handoffs.count("doomed"), 0U);
    EXPECT_EQ(st.group_offsets.count("only-doomed"), 0U);
    ASSERT_EQ(st.group_offsets.count("billing"), 1U);
    EXPECT_EQ(st.group_offsets.at("billing").count("doomed"), 0U);
    EXPECT_EQ(st.group_offsets.at("billing").count("orders"), 1U);
    EXPECT_EQ(st.channel_epoch_floor, 10);
  }
  {
    // alterRetention: the channel's record again, its ttl changed, its
    // routes as they were.
    meta::ChannelRecord ch = store.state().channels.at("orders");
    const auto routes = ch.routes;
    ch.config.__set_ttl_ms(1500);
    meta::MetaRecord r;
    r.__set_put_channel(ch);
    commit(r);
    EXPECT_EQ(store.state().channels.at("orders").config.ttl_ms, 1500);
    EXPECT_EQ(store.state().channels.at("orders").routes, routes);
  }
}

// ------------------------------------------------------------------ contract

enum class Kind { dir, zk };

class StoreContract : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::zk) {
      std::string why;
      zk_ = testing::shared_zk(&why);
      ZK_OR_SKIP(zk_, why);
      location_ =
          zk_->uri(testing::unique_chroot(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    }
  }
  std::unique_ptr<MetadataStore> open() {
    auto s = open_metadata_store(location_, {dir_.path() / "meta", 1000});
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().describe());
    return s.ok() ? std::move(*s) : nullptr;
  }

  TempDir dir_;
  testing::ZkServer* zk_ = nullptr;
  std::string location_;  // empty: the directory store
};

TEST_P(StoreContract, EveryRecordTypeSurvivesAReopen) {
  auto store = open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->state(), meta::MetaState{});
  write_every_record_type(*store);
  if (HasFatalFailure()) return;
  const meta::MetaState written = store->state();
  store.reset();
  store = open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->state(), written);
  // And it goes on from there.
  ASSERT_TRUE(store->commit(put_node("node-4", 4)).ok());
  const meta::MetaState more = store->state();
  store.reset();
  store = open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->state(), more);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values(Kind::dir, Kind::zk),
                         [](const auto& info) { return info.param == Kind::dir ? "dir" : "zk"; });

// ------------------------------------------------------------- ZooKeeper's own

class ZkStore : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    zk_ = testing::shared_zk(&why);
    ZK_OR_SKIP(zk_, why);
    chroot_ = testing::unique_chroot(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  ZkMetadataStore::Options options() const {
    ZkMetadataStore::Options o;
    o.location.hosts = zk_->hosts();
    o.location.root = chroot_;
    return o;
  }
  std::unique_ptr<ZkMetadataStore> open() {
    auto s = ZkMetadataStore::open(options());
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().describe());
    return s.ok() ? std::move(*s) : nullptr;
  }

  testing::ZkServer* zk_ = nullptr;
  std::string chroot_;
};

TEST_F(ZkStore, AStoreWithAnOlderEpochIsFenced) {
  auto old_leader = open();
  ASSERT_NE(old_leader, nullptr);
  ASSERT_TRUE(old_leader->commit(put_node("node-1", 1)).ok());
  auto new_leader = open();
  ASSERT_NE(new_leader, nullptr);
  EXPECT_GT(new_leader->controller_epoch(), old_leader->controller_epoch());
  EXPECT_EQ(new_leader->state(), old_leader->state());

  const meta::MetaState before = old_leader->state();
  auto refused = old_leader->commit(put_node("node-2", 2));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, idl::ErrorCode::NOT_LEADER);
  EXPECT_NE(refused.error().message.find("fenced: another controller is leader"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(old_leader->state(), before) << "a refused change is not applied";
  // Broken for good: even a change the new leader would accept is refused.
  EXPECT_EQ(old_leader->commit(put_node("node-3", 3)).error().code, idl::ErrorCode::NOT_LEADER);

  ASSERT_TRUE(new_leader->commit(put_node("node-4", 4)).ok());
  const meta::MetaState final_state = new_leader->state();
  new_leader.reset();
  old_leader.reset();
  auto reopened = open();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->state(), final_state);
  EXPECT_EQ(reopened->state().nodes.count("node-2"), 0U);
  EXPECT_EQ(reopened->state().nodes.count("node-4"), 1U);
}

TEST_F(ZkStore, AZnodeOverOneMebibyteIsRefusedAndNothingApplied) {
  auto store = open();
  ASSERT_NE(store, nullptr);
  auto big = put_node("node-1", 1);
  big.put_node.info.__set_zone(std::string(1100 * 1024, 'z'));
  auto r = store->commit(big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message.find("1 MiB"), std::string::npos) << r.error().message;
  EXPECT_TRUE(store->state().nodes.empty());
  // Many small znodes that together pass the limit are one transaction too many.
  meta::MetaRecord many;
  for (int i = 0; i < 3; ++i) {
    auto n = put_node("node-" + std::to_string(i), 1).put_node;
    n.info.__set_zone(std::string(400 * 1024, 'z'));
    many.__set_put_node(n);
  }
  meta::ChannelRecord ch;
  ch.config = testing::channel_config("wide", 1, 1);
  auto route = route_of("wide", 0, 1, {"node-1"});
  route.replicas[0].__set_fabric_addr(std::string(700 * 1024, 'f'));
  ch.routes.push_back(route);
  many.__set_put_channel(ch);
  r = store->commit(many);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("1 MiB"), std::string::npos) << r.error().message;
  EXPECT_TRUE(store->state().channels.empty());
  // The store is not broken by it.
  ASSERT_TRUE(store->commit(put_node("node-1", 1)).ok());
}

TEST_F(ZkStore, AChrootHoldingSomethingElseIsRefused) {
  ASSERT_NE(open(), nullptr);
  // <root>/counters holds data, and not Catena's root marker.
  ZkMetadataStore::Options o = options();
  o.location.root = chroot_ + "/counters";
  auto wrong = ZkMetadataStore::open(o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("something other than Catena's metadata"), std::string::npos)
      << wrong.error().message;
}

// A server of its own, killed and restarted under the store.
class ZkStoreServerLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    zk_ = testing::ZkServer::start(&why);
    ZK_OR_SKIP(zk_.get(), why);
  }
  Result<std::unique_ptr<ZkMetadataStore>> open(std::chrono::milliseconds connect_timeout) {
    ZkMetadataStore::Options o;
    o.location.hosts = zk_->hosts();
    o.location.root = "/loss";
    o.connect_timeout = connect_timeout;
    return ZkMetadataStore::open(o);
  }
  std::unique_ptr<testing::ZkServer> zk_;
};

TEST_F(ZkStoreServerLoss, ACommitWithNoServerFailsClearlyAndBreaksTheStore) {
  auto store = open(1000ms);
  ASSERT_TRUE(store.ok()) << store.error().describe();
  ASSERT_TRUE((*store)->commit(put_node("node-1", 1)).ok());
  zk_->kill();
  auto r = (*store)->commit(put_node("node-2", 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, idl::ErrorCode::UNAVAILABLE);
  EXPECT_NE(r.error().message.find("lost the connection to ZooKeeper"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("outcome is unknown"), std::string::npos) << r.error().message;
  EXPECT_EQ((*store)->state().nodes.count("node-2"), 0U);
  EXPECT_TRUE((*store)->broken().has_value());
  store->reset();

  std::string why;
  ASSERT_TRUE(zk_->restart(&why)) << why;
  auto reopened = open(30000ms);
  ASSERT_TRUE(reopened.ok()) << reopened.error().describe();
  EXPECT_EQ((*reopened)->state().nodes.count("node-1"), 1U);
  EXPECT_EQ((*reopened)->state().nodes.count("node-2"), 0U);
}

TEST_F(ZkStoreServerLoss, ACommitRidesOutAServerRestartWithinTheSession) {
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug: the client library's lines
  auto store = open(60000ms);
  ASSERT_TRUE(store.ok()) << store.error().describe();
  ASSERT_TRUE((*store)->commit(put_node("node-1", 1)).ok());
  zk_->kill();
  // Sent while the server is down or starting: the client reconnects to
  // the same session (the server keeps sessions in its data), the store
  // finds the fence untouched and sends the change again.
  Result<void> r;
  std::thread committer([&] { r = (*store)->commit(put_node("node-2", 2)); });
  std::this_thread::sleep_for(300ms);
  std::string why;
  const bool restarted = zk_->restart(&why);  // from this thread: see ZkServer
  committer.join();
  ASSERT_TRUE(restarted) << why;
  ASSERT_TRUE(r.ok()) << r.error().describe();
  const meta::MetaState written = (*store)->state();
  store->reset();
  auto reopened = open(30000ms);
  ASSERT_TRUE(reopened.ok()) << reopened.error().describe();
  EXPECT_EQ((*reopened)->state(), written);
}

// The leader's high-water marks go as background commits: applied to the
// state at once, answered later, one at a time, and a commit() takes the
// answer first.
TEST_F(ZkStore, ABackgroundCommitIsAppliedAtOnceAndAnsweredLater) {
  using Background = MetadataStore::BackgroundCommit;
  auto store = open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->background_commit(), Background::none);
  ASSERT_TRUE(store->commit_in_background(put_node("node-1", 1)).ok());
  EXPECT_EQ(store->state().nodes.count("node-1"), 1U);
  // A second while the first may be unanswered is refused, nothing applied.
  Background first = store->background_commit();
  if (first == Background::in_flight) {
    auto refused = store->commit_in_background(put_node("node-2", 2));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, idl::ErrorCode::UNAVAILABLE) << refused.error().describe();
    EXPECT_EQ(store->state().nodes.count("node-2"), 0U);
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (first == Background::in_flight && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    first = store->background_commit();
  }
  EXPECT_EQ(first, Background::applied);
  EXPECT_EQ(store->background_commit(), Background::none) << "said once";
  // A commit() right behind a background one waits for its answer first.
  ASSERT_TRUE(store->commit_in_background(put_node("node-2", 2)).ok());
  ASSERT_TRUE(store->commit(put_node("node-3", 3)).ok());
  EXPECT_EQ(store->background_commit(), Background::applied);
  const meta::MetaState written = store->state();
  store.reset();
  auto reopened = open();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->state(), written);
  EXPECT_EQ(reopened->state().nodes.size(), 3U);
}

// A background commit sent to a server that answers nothing (stopped) does
// not wait for it: it stays in flight, and is applied once the server goes
// on. Sent to one that then crashes before taking it, it is undone once the
// store learns (from the restarted server) that it was not applied.
TEST_F(ZkStoreServerLoss, ABackgroundCommitToAStoppedServerWaitsForNobody) {
  using Background = MetadataStore::BackgroundCommit;
  auto store = open(60000ms);
  ASSERT_TRUE(store.ok()) << store.error().describe();
  auto& s = **store;
  ASSERT_TRUE(s.commit(put_node("node-1", 1)).ok());
  auto settle = [&](std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    Background b = s.background_commit();
    while (b == Background::in_flight && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
      b = s.background_commit();
    }
    return b;
  };

  zk_->pause();
  ASSERT_TRUE(s.commit_in_background(put_node("node-2", 2)).ok());
  EXPECT_EQ(s.state().nodes.count("node-2"), 1U);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(s.background_commit(), Background::in_flight);
  zk_->resume();
  EXPECT_EQ(settle(30s), Background::applied);

  zk_->pause();
  ASSERT_TRUE(s.commit_in_background(put_node("node-3", 3)).ok());
  std::this_thread::sleep_for(300ms);
  zk_->kill();  // never took it
  EXPECT_EQ(s.background_commit(), Background::in_flight) << "the outcome needs the server back";
  EXPECT_EQ(s.state().nodes.count("node-3"), 1U);
  std::string why;
  ASSERT_TRUE(zk_->restart(&why)) << why;
  EXPECT_EQ(settle(30s), Background::not_applied);
  EXPECT_EQ(s.state().nodes.count("node-3"), 0U) << "undone";
  EXPECT_FALSE(s.broken().has_value());
  // The store goes on: its fence follows the outcome.
  ASSERT_TRUE(s.commit(put_node("node-4", 4)).ok());
  const meta::MetaState written = s.state();
  store->reset();
  auto reopened = open(30000ms);
  ASSERT_TRUE(reopened.ok()) << reopened.error().describe();
  EXPECT_EQ((*reopened)->state(), written);
  EXPECT_EQ((*reopened)->state().nodes.count("node-2"), 1U);
  EXPECT_EQ((*reopened)->state().nodes.count("node-3"), 0U);
}

TEST(ZkLocation, ParsesHostsAndChroot) {
  auto a = parse_zk_location("zk://10.0.0.1:2181,zk-b:2182/prod/catena");
  ASSERT_TRUE(a.ok()) << a.error().describe();
  EXPECT_EQ(a->hosts, "10.0.0.1:2181,zk-b:2182");
  EXPECT_EQ(a->root, "/prod/catena");
  auto b = parse_zk_location("zk://localhost:2181");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->root, "/catena");
  EXPECT_EQ(parse_zk_location("zk://localhost:2181/")->root, "/catena");
  for (const char* bad : {"localhost:2181", "zk://", "zk://host", "zk://host:/x", "zk://host:21x1",
                          "zk://a:1,,b:2/x", "zk://a:1/x/", "zk://a:1//x"}) {
    auto r = parse_zk_location(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, idl::ErrorCode::INVALID_ARGUMENT) << bad;
    }
  }
}

TEST(ZkStoreUnreachable, OpeningWithNoServerIsAClearError) {
  ZkMetadataStore::Options o;
  o.location.hosts = "127.0.0.1:1";  // nothing listens on port 1
  o.connect_timeout = 500ms;
  auto r = ZkMetadataStore::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, idl::ErrorCode::UNAVAILABLE);
  EXPECT_NE(r.error().message.find("cannot reach ZooKeeper at 127.0.0.1:1"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace catena::control
