// Tail-offset partition handoff end to end (issue 11), with real processes:
// a partition moves twice while a publisher keeps publishing and a live
// subscriber keeps reading. The publisher's records that reach a sealed head
// are answered `moved` and resent to the new head, which holds the old
// head's producer state; the live subscriber crosses each range's end
// without a gap or a duplicate; a fresh subscriber reads the whole history
// across the sealed ranges; no record below the move's offset was copied.
#include <atomic>
#include <chrono>
#include <future>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <spdlog/cfg/env.h>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>

#include "../forwarding_routes.hpp"
#include "../test_env.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;

using test::bytes;

struct Read {
  std::map<std::uint64_t, std::string> by_offset;
  std::uint64_t duplicates = 0;
  std::uint64_t gaps = 0;             // an offset that skipped ahead of the next expected one
  std::atomic<std::size_t> count{0};  // records read so far, for another thread to watch
};

// Reads `want` records from the start; false on timeout.
bool read_all(RouteSource& routes, std::size_t want, Read* out, std::chrono::seconds timeout,
              const std::atomic<bool>* stop = nullptr) {
  SubscriberOptions so;
  so.start = Start::earliest;
  auto sub = Subscriber::create(routes, "mv", so);
  if (!sub) return false;
  std::uint64_t next = 0;
  bool first = true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out->by_offset.size() < want && std::chrono::steady_clock::now() < deadline) {
    if (stop != nullptr && stop->load() && out->by_offset.size() >= want) break;
    const int n = sub.value()->poll([&](const Message& m) {
      if (!first && m.offset != next) ++out->gaps;
      first = false;
      next = m.offset + 1;
      std::string payload(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      if (!out->by_offset.emplace(m.offset, std::move(payload)).second) ++out->duplicates;
      out->count = out->by_offset.size();
    });
    if (n == 0) std::this_thread::sleep_for(200us);
  }
  return out->by_offset.size() >= want;
}

// Channel "mv": one partition, 1 MiB segments, nothing expires during a test.
control::idl::ChannelConfig mv_channel(std::int32_t replication) {
  control::idl::ChannelConfig cfg;
  cfg.name = "mv";
  cfg.partitions = 1;
  cfg.replication = replication;
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  return cfg;
}

// Every record acknowledged once, at a distinct offset, in publishing order.
void expect_acked_once_in_order(const std::map<std::uint64_t, std::uint64_t>& offset_of) {
  std::set<std::uint64_t> offsets;
  std::uint64_t prev = 0;
  for (const auto& [i, off] : offset_of) {
    EXPECT_TRUE(offsets.insert(off).second) << "offset " << off << " acknowledged twice";
    if (i > 0) {
      EXPECT_GT(off, prev) << "record " << i;
    }
    prev = off;
  }
}

TEST(Handoff, PartitionMovesTwiceUnderTrafficAndNothingIsLostOrDuplicated) {
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug shows the clients' moves
  ClusterOptions o;
  o.nodes = 4;
  o.dir = "failover-handoff";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;

  control::ControllerClient::Options co;
  co.address = cluster.controller_address();
  co.rpc_timeout = 30s;
  control::ControllerClient admin(co);
  auto created = admin.create_channel(mv_channel(3));
  ASSERT_TRUE(created.ok()) << created.error().describe();
  const auto first = created->routes.at(0);
  std::vector<std::string> all;
  for (const auto& n : cluster.nodes()) all.push_back(n.node_id);
  std::string spare;
  for (const auto& id : all) {
    if (std::none_of(first.replicas.begin(), first.replicas.end(),
                     [&](const auto& r) { return r.node_id == id; })) {
      spare = id;
    }
  }
  ASSERT_FALSE(spare.empty());
  // Move 1: the spare becomes the head, the old middle and tail stay (each
  // holds its old range beside a new, empty replica). Move 2: onto two of the
  // first chain's nodes, in another order.
  const std::vector<std::string> to1{spare, first.replicas[1].node_id, first.replicas[2].node_id};
  const std::vector<std::string> to2{first.replicas[2].node_id, first.replicas[0].node_id};

  constexpr std::size_t kRecords = 6000;
  broker::ControllerRoutes live_routes(co, "handoff-live");
  std::atomic<bool> stop_live{false};
  Read live;
  auto live_done =
      std::async(std::launch::async, [&] { return read_all(live_routes, kRecords, &live, 90s, &stop_live); });

  broker::ControllerRoutes routes(co, "handoff-pub");
  PublisherOptions po;
  po.retry_timeout = 30s;
  auto pub = Publisher::create(routes, "mv", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<std::uint64_t, std::uint64_t> offset_of;  // record index -> acknowledged offset
  std::uint64_t failed = 0;
  std::future<control::Result<control::idl::PartitionRoute>> moving;
  std::vector<control::idl::PartitionRoute> moved;
  for (std::size_t i = 0; i < kRecords; ++i) {
    if (i == kRecords / 3 || i == 2 * kRecords / 3) {
      const auto& to = i == kRecords / 3 ? to1 : to2;
      moving = std::async(std::launch::async, [&admin, to] { return admin.move_partition("mv", 0, to); });
    }
    const std::string payload = "r" + std::to_string(i);
    for (;;) {
      const auto e = pub.value()->publish_to(0, bytes(payload), [&, i](const PublishResult& r) {
        if (r.status == PublishStatus::ok) {
          offset_of[i] = r.offset;
        } else {
          ++failed;
        }
      });
      if (e == client::ErrorCode::ok) break;
      ASSERT_TRUE(client::retriable(e)) << client::to_string(e);
      pub.value()->poll();
    }
    if (i % 16 == 0) pub.value()->poll();
    if (moving.valid() && moving.wait_for(0s) == std::future_status::ready) {
      auto r = moving.get();
      ASSERT_TRUE(r.ok()) << r.error().describe();
      moved.push_back(r.value());
    }
    std::this_thread::sleep_for(100us);  // steady traffic, not one burst
  }
  if (moving.valid()) {
    auto r = moving.get();
    ASSERT_TRUE(r.ok()) << r.error().describe();
    moved.push_back(r.value());
  }
  ASSERT_TRUE(pub.value()->flush(30s));
  EXPECT_EQ(failed, 0u);
  ASSERT_EQ(offset_of.size(), kRecords);
  ASSERT_EQ(moved.size(), 2u);

  expect_acked_once_in_order(offset_of);
  // The ranges: [0, H1) on the first chain, [H1, H2) on the second, then the third.
  const auto& last = moved.back();
  ASSERT_EQ(last.sealed.size(), 2u);
  EXPECT_EQ(last.sealed[0].start_offset, 0);
  EXPECT_EQ(last.sealed[0].end_offset, last.sealed[1].start_offset);
  EXPECT_EQ(last.sealed[1].end_offset, last.start_offset);
  EXPECT_GT(last.sealed[0].end_offset, 0);
  EXPECT_GT(last.start_offset, last.sealed[0].end_offset);
  ASSERT_EQ(last.replicas.size(), 2u);
  EXPECT_EQ(last.replicas[0].node_id, to2[0]);

  // A fresh subscriber reads the whole history across the ranges.
  broker::ControllerRoutes reader_routes(co, "handoff-reader");
  Read fresh;
  ASSERT_TRUE(read_all(reader_routes, kRecords, &fresh, 60s)) << "read " << fresh.by_offset.size();
  EXPECT_EQ(fresh.duplicates, 0u);
  EXPECT_EQ(fresh.gaps, 0u);
  for (const auto& [i, off] : offset_of) {
    auto it = fresh.by_offset.find(off);
    ASSERT_NE(it, fresh.by_offset.end()) << "record " << i << " at offset " << off << " not read back";
    EXPECT_EQ(it->second, "r" + std::to_string(i)) << "offset " << off;
  }
  // The live subscriber crossed both range ends without a gap or a duplicate.
  stop_live = true;
  ASSERT_TRUE(live_done.get()) << "the live subscriber read " << live.by_offset.size();
  EXPECT_EQ(live.duplicates, 0u);
  EXPECT_EQ(live.gaps, 0u);
  EXPECT_EQ(live.by_offset, fresh.by_offset);

  // No record below a move's offset was copied: the spare, head of the
  // middle range only, holds about a third of the bytes, not the history.
  auto status = admin.cluster_status();
  ASSERT_TRUE(status.ok());
  std::int64_t most = 0, spare_bytes = -1;
  for (const auto& n : status->nodes) {
    most = std::max(most, n.stats.bytes);
    if (n.info.node_id == spare) spare_bytes = n.stats.bytes;
  }
  EXPECT_GE(spare_bytes, 0);
  EXPECT_LT(spare_bytes, most * 2 / 3) << "the spare holds " << spare_bytes << " bytes of " << most;
}

// The controller's routes until cut(): then every route lookup fails as if
// the controller could not be reached (producer ids and reports still pass,
// so only following a move depends on it).
class CutRoutes final : public test::ForwardingRoutes {
 public:
  using ForwardingRoutes::ForwardingRoutes;
  void cut() { cut_ = true; }
  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override {
    if (cut_) {
      ++refused_;
      return client::make_error(client::ErrorCode::controller_unavailable, "cut off by the test");
    }
    return ForwardingRoutes::route(channel, partition, known_epoch);
  }
  std::uint64_t refused() const { return refused_.load(); }

 private:
  std::atomic<bool> cut_{false};
  std::atomic<std::uint64_t> refused_{0};
};

// A `moved` answer carries the new route: the sealed head names the new
// head, the old chain's replicas where the next range is served. A
// publisher and a live subscriber whose route lookups all fail from just
// before the move still follow it (twice), with nothing lost or duplicated.
TEST(Handoff, ClientsFollowAMoveWithoutTheController) {
  spdlog::cfg::load_env_levels();
  ClusterOptions o;
  o.nodes = 4;
  o.dir = "failover-handoff-blind";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  control::ControllerClient::Options co;
  co.address = cluster.controller_address();
  co.rpc_timeout = 30s;
  control::ControllerClient admin(co);
  auto created = admin.create_channel(mv_channel(2));
  ASSERT_TRUE(created.ok()) << created.error().describe();
  const auto first = created->routes.at(0);
  std::vector<std::string> others;
  for (const auto& n : cluster.nodes()) {
    if (std::none_of(first.replicas.begin(), first.replicas.end(),
                     [&](const auto& r) { return r.node_id == n.node_id; })) {
      others.push_back(n.node_id);
    }
  }
  ASSERT_EQ(others.size(), 2u);
  const std::vector<std::string> to1 = others;
  const std::vector<std::string> to2{first.replicas[1].node_id, first.replicas[0].node_id};

  broker::ControllerRoutes pub_inner(co, "blind-pub");
  broker::ControllerRoutes sub_inner(co, "blind-sub");
  CutRoutes pub_routes(pub_inner);
  CutRoutes sub_routes(sub_inner);
  constexpr std::size_t kRecords = 3000;
  std::atomic<bool> stop_live{false};
  Read live;
  auto live_done =
      std::async(std::launch::async, [&] { return read_all(sub_routes, kRecords, &live, 60s, &stop_live); });
  PublisherOptions po;
  po.retry_timeout = 20s;
  auto pub = Publisher::create(pub_routes, "mv", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<std::uint64_t, std::uint64_t> offset_of;
  std::uint64_t failed = 0;
  std::size_t published = 0;
  auto publish = [&](std::size_t n) {
    for (const std::size_t to = published + n; published < to; ++published) {
      const std::size_t i = published;
      const std::string payload = "r" + std::to_string(i);
      for (;;) {
        const auto e = pub.value()->publish_to(0, bytes(payload), [&, i](const PublishResult& r) {
          if (r.status == PublishStatus::ok) {
            offset_of[i] = r.offset;
          } else {
            ++failed;
          }
        });
        if (e == client::ErrorCode::ok) break;
        ASSERT_TRUE(client::retriable(e)) << client::to_string(e);
        pub.value()->poll();
      }
      if (i % 16 == 0) pub.value()->poll();
      std::this_thread::sleep_for(100us);
    }
  };
  publish(kRecords / 3);
  ASSERT_TRUE(pub.value()->flush(20s));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (live.count.load() < kRecords / 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_EQ(live.count.load(), kRecords / 3);
  // Connected, and the controller gone for the clients: every later route
  // comes from `moved` answers only.
  pub_routes.cut();
  sub_routes.cut();
  for (const auto* to : {&to1, &to2}) {
    auto moving = std::async(std::launch::async, [&admin, to] { return admin.move_partition("mv", 0, *to); });
    publish(kRecords / 3);
    auto r = moving.get();
    ASSERT_TRUE(r.ok()) << r.error().describe();
  }
  ASSERT_TRUE(pub.value()->flush(20s)) << "the publisher did not follow the moves";
  EXPECT_EQ(failed, 0u);
  ASSERT_EQ(offset_of.size(), kRecords);
  expect_acked_once_in_order(offset_of);
  stop_live = true;
  ASSERT_TRUE(live_done.get()) << "the live subscriber read " << live.by_offset.size();
  EXPECT_EQ(live.duplicates, 0u);
  EXPECT_EQ(live.gaps, 0u);
  for (const auto& [i, off] : offset_of) {
    auto it = live.by_offset.find(off);
    ASSERT_NE(it, live.by_offset.end()) << "record " << i << " at offset " << off << " not read";
    EXPECT_EQ(it->second, "r" + std::to_string(i));
  }
  EXPECT_GT(pub_routes.refused() + sub_routes.refused(), 0u) << "the clients never needed the controller";
}

TEST(Handoff, MoveToBadTargetsIsRefusedWithAClearError) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = "failover-handoff-bad";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  control::ControllerClient::Options co;
  co.address = cluster.controller_address();
  control::ControllerClient admin(co);
  control::idl::ChannelConfig cfg;
  cfg.name = "mv";
  cfg.partitions = 1;
  cfg.replication = 2;
  ASSERT_TRUE(admin.create_channel(cfg).ok());
  auto r = admin.move_partition("mv", 0, {"node-42"});
  EXPECT_EQ(r.code(), control::idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message.find("node-42 is not an ALIVE node"), std::string::npos)
      << r.error().describe();
  r = admin.move_partition("mv", 7, {"node-1"});
  EXPECT_EQ(r.code(), control::idl::ErrorCode::INVALID_ARGUMENT) << r.error().describe();
  r = admin.move_partition("nope", 0, {"node-1"});
  EXPECT_EQ(r.code(), control::idl::ErrorCode::UNKNOWN_CHANNEL) << r.error().describe();
}

}  // namespace
}  // namespace catena
