// A replacement replica joins behind the tail: the chain keeps committing and
// acknowledging while the joining replica copies the history and the live
// writes, the joining replica commits and serves nothing, and once promoted
// to tail it holds every record. Brokers in one process (each with its own
// fabric provider), configured from controller routes through the same seam
// catenad uses (broker::replica_config_for), with real Publisher and
// Subscriber clients on the routes clients get (ControllerRoutes::to_route).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/broker_admin_server.hpp>
#include <catena/broker/controller_routes.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/broker/subscriber.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using test::bytes;
using test::provider_spec;

using namespace std::chrono_literals;

class Joining : public ::testing::Test {
 protected:
  // 8 slots of 256 KiB: the history below spans several segments.
  static constexpr std::int64_t kSegment = 256 << 10;
  static constexpr const char* kChannel = "join";

  void SetUp() override {
    brokers_.resize(3);
    for (int i = 0; i < 3; ++i) start_broker(i, config(i));
  }

  // Broker i's configuration: 8 slots, the defaults otherwise.
  static broker::BrokerConfig config(int i) {
    broker::BrokerConfig cfg;
    cfg.node_id = "node-" + std::to_string(i);
    cfg.provider = provider_spec();
    cfg.fabric_listen = test::listen_address();
    cfg.slot_count = 8;
    return cfg;
  }

  // (Re)starts broker i with `cfg`.
  void start_broker(int i, const broker::BrokerConfig& cfg) {
    brokers_[static_cast<std::size_t>(i)].reset();
    auto b = broker::Broker::start(cfg);
    ASSERT_TRUE(b.ok()) << b.error().message;
    brokers_[static_cast<std::size_t>(i)] = std::move(b.value());
  }

  // (Re)starts broker i, with kept memory in `keep_dir` if not empty.
  void start_broker(int i, const std::string& keep_dir) {
    broker::BrokerConfig cfg = config(i);
    cfg.keep_dir = keep_dir;
    start_broker(i, cfg);
  }

  control::idl::Replica replica(int i) {
    control::idl::Replica r;
    r.__set_node_id(brokers_[static_cast<std::size_t>(i)]->config().node_id);
    r.__set_fabric_addr(brokers_[static_cast<std::size_t>(i)]->fabric_address());
    return r;
  }

  control::idl::PartitionRoute make_route(std::int64_t epoch, const std::vector<int>& chain,
                                          const std::vector<int>& joining) {
    control::idl::PartitionRoute route;
    route.__set_channel(kChannel);
    route.__set_partition(0);
    route.__set_epoch(epoch);
    route.__set_start_offset(0);
    for (int i : chain) route.replicas.push_back(replica(i));
    for (int i : joining) route.joining.push_back(replica(i));
    return route;
  }

  // Installs `route` on the listed brokers, as the controller's pushes
  // would, and gives clients the route they would get.
  void install(const control::idl::PartitionRoute& route, const std::vector<int>& on) {
    control::idl::ChainAssignment a;
    a.__set_route(route);
    a.__set_segment_bytes(kSegment);
    a.__set_ttl_ms(ttl_ms_);
    a.__set_channel_partitions(1);
    if (!lineage_.empty()) a.__set_lineage(lineage_);
    for (int i : on) {
      chain::ReplicaConfig rc;
      ASSERT_TRUE(
          broker::replica_config_for(brokers_[static_cast<std::size_t>(i)]->config().node_id, a, &rc));
      auto r = brokers_[static_cast<std::size_t>(i)]->configure(rc);
      ASSERT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
    }
    client_route_ = broker::ControllerRoutes::to_route(route);
    routes_.set(client_route_, 1, static_cast<std::uint32_t>(kSegment));
  }

  chain::ReplicaStats stats_of(int i) {
    auto st = brokers_[static_cast<std::size_t>(i)]->stats();
    EXPECT_EQ(st.partitions.size(), 1u) << "node " << i;
    return st.partitions.empty() ? chain::ReplicaStats{} : st.partitions[0].replica;
  }

  bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (cond()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return cond();
  }

  // Publishes records [from, from + n) and waits for every acknowledgement.
  void publish(Publisher& pub, int from, int n) {
    for (int i = from; i < from + n; ++i) {
      std::string payload =
          "rec-" + std::to_string(i) + ":" + std::string(static_cast<std::size_t>(i % 400), 'p');
      for (;;) {
        auto e = pub.publish_to(0, bytes(payload), [this, payload](const PublishResult& r) {
          if (r.status != PublishStatus::ok) {
            if (failed_++ == 0) ADD_FAILURE() << "refused: " << client::to_string(r.status);
            return;
          }
          EXPECT_TRUE(acked_.emplace(r.offset, payload).second) << "offset acknowledged twice: " << r.offset;
        });
        if (e == client::ErrorCode::ok) break;
        ASSERT_EQ(e, client::ErrorCode::backpressure);
        pub.poll();
      }
    }
    ASSERT_TRUE(pub.flush(30s)) << "records " << from << ".." << from + n << " not all acknowledged";
    ASSERT_EQ(failed_, 0);
    ASSERT_EQ(acked_.size(), static_cast<std::size_t>(from + n));
  }

  // Reads everything from the tail of `routes` and checks it against acked_.
  void expect_tail_serves_everything(RouteSource& routes) {
    SubscriberOptions so;
    so.provider = provider_spec();
    so.read_from = SubscriberOptions::ReadFrom::tail;
    auto sub = Subscriber::create(routes, kChannel, so);
    ASSERT_TRUE(sub.ok()) << sub.error().message;
    sub.value()->on_notice([](const Notice& n) {
      ADD_FAILURE() << "notice " << client::to_string(n.status) << " at " << n.next_offset;
    });
    std::uint64_t next = 0;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (next < acked_.size() && std::chrono::steady_clock::now() < deadline) {
      const int n = sub.value()->poll([&](const Message& m) {
        ASSERT_EQ(m.offset, next) << "delivery out of order or with a gap";
        ASSERT_EQ(std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()),
                  acked_[next])
            << "payload mismatch at offset " << next;
        ++next;
      });
      if (n == 0) std::this_thread::sleep_for(100us);
    }
    EXPECT_EQ(next, acked_.size());
  }

  // Nothing reaches a subscriber pointed straight at node i within `wait`.
  void expect_serves_nothing(int i, std::chrono::milliseconds wait) {
    StaticRoutes direct;
    Route r = client_route_;
    r.replicas = {{brokers_[static_cast<std::size_t>(i)]->config().node_id,
                   brokers_[static_cast<std::size_t>(i)]->fabric_address()}};
    direct.set(r, 1, static_cast<std::uint32_t>(kSegment));
    SubscriberOptions so;
    so.provider = provider_spec();
    auto sub = Subscriber::create(direct, kChannel, so);
    ASSERT_TRUE(sub.ok()) << sub.error().message;
    int got = 0;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      if (sub.value()->poll([&](const Message&) { ++got; }) == 0) std::this_thread::sleep_for(1ms);
    }
    EXPECT_EQ(got, 0) << "a joining replica served records it has not committed";
  }

  // `chain` runs and takes a history; `joiner` joins behind its tail while
  // records keep being published, is promoted, and must then hold and serve
  // every record.
  void join_and_promote(const std::vector<int>& chain, int joiner) {
    const std::uint64_t all = 7000;
    std::vector<int> members = chain;
    install(make_route(1, chain, {}), chain);
    PublisherOptions po;
    po.provider = provider_spec();
    auto pub = Publisher::create(routes_, kChannel, po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    publish(*pub.value(), 0, 3000);
    const int tail = chain.back();

    // Epoch 2: `joiner` joins behind the tail. Its broker does not have the
    // route yet, so the tail has a successor it cannot reach: it must keep
    // committing and acknowledging on its own.
    const auto joining = make_route(2, chain, {joiner});
    install(joining, chain);
    for (const auto& r : client_route_.replicas) {
      ASSERT_NE(r.node_id, brokers_[static_cast<std::size_t>(joiner)]->config().node_id)
          << "clients must never be routed to a joining replica";
    }
    ASSERT_EQ(client_route_.replicas.size(), chain.size());
    publish(*pub.value(), 3000, 1000);
    ASSERT_TRUE(eventually([&] { return stats_of(tail).commit_offset == 4000; }));
    EXPECT_EQ(stats_of(tail).successor_backlog_bytes, -1) << "no link to the joining replica yet";

    // The joining replica gets its route: the tail copies 4000 records of
    // history to it while 2000 more are published and acknowledged.
    install(joining, {joiner});
    publish(*pub.value(), 4000, 2000);
    EXPECT_TRUE(eventually([&] { return stats_of(tail).commit_offset == 6000; }))
        << "the tail commits what both hold once it syncs the joining replica";
    ASSERT_TRUE(eventually([&] {
      const auto t = stats_of(tail);
      return t.successor_backlog_bytes == 0 && stats_of(joiner).end_offset == 6000;
    })) << "tail backlog "
        << stats_of(tail).successor_backlog_bytes << ", joining replica holds "
        << stats_of(joiner).end_offset;
    const auto j = stats_of(joiner);
    EXPECT_EQ(j.commit_offset, 0u) << "a joining replica never commits";
    EXPECT_TRUE(j.predecessor_connected);
    EXPECT_EQ(j.successor_backlog_bytes, -1);
    EXPECT_EQ(j.watchers, 0u);
    EXPECT_EQ(stats_of(tail).commit_offset, 6000u);
    EXPECT_TRUE(eventually([&] { return stats_of(tail).successor_synced; }))
        << "a tail owing little syncs its joining replica";
    expect_serves_nothing(joiner, 300ms);

    // Epoch 3: promoted. The old tail is a middle now and takes its commit
    // from the new tail over the link that already exists.
    members.push_back(joiner);
    install(make_route(3, members, {}), members);
    EXPECT_TRUE(eventually([&] { return stats_of(joiner).commit_offset == 6000; }))
        << "the new tail commits what it holds";
    publish(*pub.value(), 6000, 1000);
    ASSERT_TRUE(eventually([&] {
      for (int m : members) {
        const auto s = stats_of(m);
        if (s.end_offset != all || s.commit_offset != all) return false;
      }
      return true;
    })) << "every replica holds and has committed all records";
    EXPECT_GE(stats_of(tail).successor_backlog_bytes, 0) << "the old tail keeps its link to the new tail";
    expect_tail_serves_everything(routes_);
  }

  std::vector<std::unique_ptr<broker::Broker>> brokers_;
  std::int64_t ttl_ms_ = 600000;  // ChainAssignment.ttl_ms
  std::string lineage_;           // ChainAssignment.lineage from now on (empty: none)
  StaticRoutes routes_;
  Route client_route_;
  std::map<std::uint64_t, std::string> acked_;  // offset -> payload
  int failed_ = 0;
};

// Once the tail syncs its joining replica, the commit counts it: a joining
// replica that stops taking writes holds the chain's commit back (the
// controller drops it, as it would a member), so the tail never commits a
// record the replica it may promote lacks. Before the sync (issue 8) the
// tail committed on, and a promoted replica could lack acknowledged records.
TEST_F(Joining, SyncedJoiningReplicaHoldsTheTailsCommitBack) {
  install(make_route(1, {0, 1}, {}), {0, 1});
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, kChannel, po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  publish(*pub.value(), 0, 1000);
  const auto joining = make_route(2, {0, 1}, {2});
  install(joining, {0, 1, 2});
  ASSERT_TRUE(eventually([&] { return stats_of(1).successor_synced; }))
      << "tail backlog " << stats_of(1).successor_backlog_bytes;
  ASSERT_EQ(stats_of(1).commit_offset, 1000u);

  brokers_[2].reset();  // the joining replica's process goes away
  int acks = 0;
  for (int i = 1000; i < 1200; ++i) {
    const std::string payload = "late-" + std::to_string(i);
    while (pub.value()->publish_to(0, bytes(payload), [&](const PublishResult& r) {
      if (r.status == PublishStatus::ok) ++acks;
    }) == client::ErrorCode::backpressure) {
      pub.value()->poll();
    }
  }
  ASSERT_TRUE(eventually([&] {
    pub.value()->poll();
    return stats_of(1).end_offset == 1200;
  })) << "the tail stores what the head forwards";
  const auto deadline = std::chrono::steady_clock::now() + 300ms;
  while (std::chrono::steady_clock::now() < deadline) pub.value()->poll();
  EXPECT_EQ(stats_of(1).commit_offset, 1000u) << "committed beyond what the synced joining replica holds";
  EXPECT_EQ(acks, 0) << "acknowledged records the joining replica may not hold";

  // The controller drops the dead joining replica: the chain commits on.
  install(make_route(3, {0, 1}, {}), {0, 1});
  EXPECT_TRUE(eventually([&] {
    pub.value()->poll();
    return acks == 200;
  })) << acks
      << " of 200 acknowledged after the joining replica left";
  EXPECT_TRUE(eventually([&] { return stats_of(1).commit_offset == 1200; }));  // stats are snapshots
}

// Process-level recovery (issue 13): a replica whose node kept its segments
// in memory that outlives the process comes back, finds what it held, and
// joins its chain again copying only what it missed.
class KeptJoining : public Joining {
 protected:
  void SetUp() override {
    Joining::SetUp();
    keep_ = std::filesystem::temp_directory_path() / ("catena-kept-join-" + std::to_string(getpid()));
    std::filesystem::remove_all(keep_);
    start_broker(2, keep_.string());
  }
  void TearDown() override {
    brokers_.clear();
    std::filesystem::remove_all(keep_);
  }

  // Chain {0, 1, 2} takes 3000 records; node 2's process goes (its memory
  // stays in the keep directory) while {0, 1} take 1000 more; `damage`
  // runs on the directory; node 2 starts again and joins behind the tail.
  // Then promoted, it must serve every acknowledged record.
  void crash_restart_and_rejoin(const std::function<void()>& damage) {
    install(make_route(1, {0, 1, 2}, {}), {0, 1, 2});
    PublisherOptions po;
    po.provider = provider_spec();
    auto pub = Publisher::create(routes_, kChannel, po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    publish(*pub.value(), 0, 3000);
    ASSERT_TRUE(eventually([&] { return stats_of(2).commit_offset == 3000; }));
    brokers_[2].reset();  // the process goes; the keep directory stays
    install(make_route(2, {0, 1}, {}), {0, 1});
    publish(*pub.value(), 3000, 1000);
    damage();
    start_broker(2, keep_.string());
    const auto kept = brokers_[2]->stats().kept;
    ASSERT_EQ(kept.size(), 1u) << "the restarted node reports what it kept";
    EXPECT_EQ(kept[0].channel, kChannel);
    EXPECT_EQ(kept[0].epoch, 1u);
    EXPECT_EQ(kept[0].replica.commit_offset, 3000u) << "what it knew committed";

    const std::uint64_t forwarded_before = stats_of(1).forwarded_bytes;
    const auto joining = make_route(3, {0, 1}, {2});
    install(joining, {0, 1, 2});
    ASSERT_TRUE(eventually([&] { return stats_of(1).successor_synced && stats_of(2).end_offset == 4000; }))
        << "joiner holds " << stats_of(2).end_offset;
    recovered_ = stats_of(2).recovered_records;
    copied_ = stats_of(1).forwarded_bytes - forwarded_before;
    held_ = stats_of(1).bytes;
    EXPECT_TRUE(brokers_[2]->stats().kept.empty()) << "claimed by its chain";
    install(make_route(4, {0, 1, 2}, {}), {0, 1, 2});
    publish(*pub.value(), 4000, 500);
    ASSERT_TRUE(eventually([&] { return stats_of(2).commit_offset == 4500; }));
    expect_tail_serves_everything(routes_);  // node 2 is the tail: every payload checked
  }

  std::filesystem::path keep_;
  std::uint64_t recovered_ = 0;
  std::uint64_t copied_ = 0;
  std::uint64_t held_ = 0;
};

TEST_F(KeptJoining, ARestartedReplicaKeepsItsDataAndCopiesOnlyWhatItMissed) {
  crash_restart_and_rejoin([] {});
  EXPECT_EQ(recovered_, 3000u) << "every record it held and knew committed is kept";
  EXPECT_GT(copied_, 0u);
  // 1000 of 4000 records were missed: a full copy would be all of held_.
  EXPECT_LT(copied_ * 2, held_) << "copied " << copied_ << " of " << held_ << " bytes";
  std::printf("rejoin copied %llu of the %llu bytes the tail holds\n",
              static_cast<unsigned long long>(copied_), static_cast<unsigned long long>(held_));
}

// A kept record that no longer checks (a flipped bit) is not served: the
// kept prefix ends before it and the tail sends the rest.
TEST_F(KeptJoining, ADamagedKeptRecordEndsWhatIsKeptAndTheTailSendsTheRest) {
  crash_restart_and_rejoin([&] {
    // The arena file and its directory of named ranges (soft provider).
    std::ifstream dir(keep_ / "regions");
    std::uint64_t offset = 0, bytes = 0;
    std::string name;
    bool found = false;
    while (dir >> offset >> bytes >> name) found = found || name == std::string(kChannel) + "#0#1#s0";
    ASSERT_TRUE(found);
    dir.clear();
    dir.seekg(0);
    while (dir >> offset >> bytes >> name && name != std::string(kChannel) + "#0#1#s0") {
    }
    std::fstream arena(keep_ / "arena", std::ios::in | std::ios::out | std::ios::binary);
    // A record's bytes in the middle of slot 0's segment: the partition's
    // first, of the smallest size (64 KiB: BrokerConfig::min_segment_bytes).
    const std::uint64_t at = offset + 32 * 1024;
    arena.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    arena.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    arena.seekp(static_cast<std::streamoff>(at));
    arena.write(&c, 1);
  });
  EXPECT_GT(recovered_, 0u);
  EXPECT_LT(recovered_, 3000u) << "nothing at or after the damaged record is kept";
}

// Kept memory is taken back only for the lineage it was written under: a
// partition of the same name in another cluster (the controller's metadata
// started over) is another partition.
TEST_F(KeptJoining, AKeptCopyOfAnotherLineageIsNeverTakenBack) {
  crash_restart_and_rejoin([&] { lineage_ = std::string(16, 'z'); });
  EXPECT_EQ(recovered_, 0u);
  EXPECT_GT(copied_ * 2, held_) << "joined empty: the tail sent it everything";
}

TEST_F(Joining, ReplacementCopiesBehindTheTailWhileItCommitsAndHoldsEverythingOncePromoted) {
  join_and_promote({0, 1}, 2);
}

// The same with a chain of one: the head is the tail and forwards to the
// joining replica while it commits on its own.
TEST_F(Joining, ReplacementJoinsBehindAChainOfOne) {
  join_and_promote({0}, 1);
}

// Segment memory follows what a node retains (issue 17): no segment memory
// before a segment opens, a segment's worth for each segment a replica holds,
// all of it given back once the segments expired past their grace; the
// successors' slots are granted as segments open, again after a release.
class SegmentMemory : public Joining {
 protected:
  // Restarts the three brokers with a grace of 100 ms and, if not 0, a
  // segment budget of `segments` segments each.
  void restart(std::uint64_t segments) {
    for (int i = 0; i < 3; ++i) {
      broker::BrokerConfig cfg = config(i);
      cfg.grace_ms = 100;
      cfg.segment_memory_bytes = segments * kSegment;
      start_broker(i, cfg);
    }
  }
  broker::NodeStats node(int i) { return brokers_[static_cast<std::size_t>(i)]->stats(); }

  // Reads [from, acked_.size()) from the tail and checks every payload.
  void expect_tail_serves_from(std::uint64_t from) {
    SubscriberOptions so;
    so.provider = provider_spec();
    so.read_from = SubscriberOptions::ReadFrom::tail;
    so.start = Start::offset;
    so.start_offset = from;
    auto sub = Subscriber::create(routes_, kChannel, so);
    ASSERT_TRUE(sub.ok()) << sub.error().message;
    std::uint64_t next = from;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (next < acked_.size() && std::chrono::steady_clock::now() < deadline) {
      if (sub.value()->poll([&](const Message& m) {
            ASSERT_EQ(m.offset, next) << "delivery out of order or with a gap";
            ASSERT_EQ(std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()),
                      acked_[next]);
            ++next;
          }) == 0) {
        std::this_thread::sleep_for(100us);
      }
    }
    EXPECT_EQ(next, acked_.size());
  }
};

TEST_F(SegmentMemory, ANodeHoldsMemoryForTheSegmentsItRetainsAndGivesItBackAsTheyExpire) {
  restart(0);
  ttl_ms_ = 400;
  install(make_route(1, {0, 1, 2}, {}), {0, 1, 2});
  std::this_thread::sleep_for(50ms);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(node(i).segment_memory_bytes, 0u) << "node " << i << " took memory before a segment opened";
    EXPECT_GT(node(i).segment_memory_limit_bytes, 0u) << "the default budget: half the machine";
  }
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, kChannel, po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  publish(*pub.value(), 0, 3000);  // about three 256 KiB segments
  ASSERT_TRUE(eventually([&] { return stats_of(2).commit_offset == 3000; }));
  // A successor grants the slot for the next segment as the head opens it,
  // a moment before its own replica counts that segment: sample once the
  // counts have caught up with the memory (they must, with traffic stopped).
  const auto held_within_segments = [&] {
    for (int i = 0; i < 3; ++i) {
      const auto st = node(i);
      if (st.partitions.size() != 1) return false;
      if (st.segment_memory_bytes > st.partitions[0].replica.segments * std::uint64_t{kSegment}) return false;
    }
    return true;
  };
  EXPECT_TRUE(eventually(held_within_segments, 2s));
  for (int i = 0; i < 3; ++i) {
    const auto st = node(i);
    ASSERT_EQ(st.partitions.size(), 1u);
    EXPECT_GE(st.partitions[0].replica.segments, 1u) << "node " << i;
    // Segments are sized by need (64 KiB and up), at most kSegment each.
    EXPECT_GT(st.segment_memory_bytes, 0u) << "node " << i;
    EXPECT_LE(st.segment_memory_bytes, st.partitions[0].replica.segments * std::uint64_t{kSegment})
        << "node " << i << ": at most a segment's worth for each segment held";
  }
  // Quiet: the open segment rolls at its ttl, and every segment expires and
  // gives its memory back after the grace, on every replica.
  ASSERT_TRUE(eventually(
      [&] {
        for (int i = 0; i < 3; ++i) {
          if (node(i).segment_memory_bytes != 0) return false;
        }
        return true;
      },
      10s))
      << "held " << node(0).segment_memory_bytes << ", " << node(1).segment_memory_bytes << ", "
      << node(2).segment_memory_bytes;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(node(i).segments, 0u) << "node " << i;
    EXPECT_GE(node(i).zeroed_bytes, 3000u * 200) << "node " << i << ": what it gave back was zeroed";
  }
  // Traffic again: segments open in slots whose memory went, on every
  // replica (the successors grant them again), in order and whole.
  publish(*pub.value(), 3000, 1500);
  ASSERT_TRUE(eventually([&] { return stats_of(2).commit_offset == 4500; }));
  for (int i = 0; i < 3; ++i) EXPECT_GT(node(i).segment_memory_bytes, 0u) << "node " << i;
  expect_tail_serves_from(3000);
}

// Every node may hold two segments: the head waits to open a third, and a
// successor refuses its predecessor a third slot, until retention gives one
// back. Publishes are held back, never refused, lost or reordered.
TEST_F(SegmentMemory, ASpentBudgetHoldsPublishesBackUntilRetentionGivesMemoryBack) {
  restart(2);
  ttl_ms_ = 300;
  install(make_route(1, {0, 1, 2}, {}), {0, 1, 2});
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, kChannel, po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  publish(*pub.value(), 0, 6000);  // about six segments: three laps of the budget
  ASSERT_TRUE(eventually([&] { return stats_of(2).commit_offset == 6000; }));
  std::uint64_t refusals = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_LE(node(i).segment_memory_bytes, 2u * kSegment) << "node " << i << " went past its budget";
    refusals += node(i).segment_memory_refusals;
  }
  EXPECT_GT(node(0).segment_memory_refusals, 0u) << "the head waited for memory";
  EXPECT_GT(refusals, 0u);
  // acked_ holds offsets 0..5999 once each (publish() checks): nothing lost,
  // nothing twice; the newest records are served whole and in order.
  EXPECT_EQ(acked_.begin()->first, 0u);
  EXPECT_EQ(acked_.rbegin()->first, 5999u);
  expect_tail_serves_from(stats_of(2).start_offset);
}

}  // namespace
}  // namespace catena
