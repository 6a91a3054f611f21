// Memory a replica held is zeroed when it stops being that replica's
// (README, "Tenants"): a kept replica dropped from its chain (a
// configureChain that no longer names the node, a fence) leaves only zeros
// in the keep directory's arena file, even to an fd opened before the drop,
// its names are gone, memory the provider hands out again to another
// partition reads as zeros, and the broker counts what it zeroed
// (NodeStats::zeroed_bytes). A real Broker with the soft provider's kept
// memory, a real Publisher, and BrokerAdmin over Thrift.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/broker_admin_server.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/chain/kept_replica.hpp>
#include <catena/control/thrift_broker_admin.hpp>

#include "../control/test_support.hpp"
#include "../test_env.hpp"

namespace catena::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kSegment = 64u << 10;
constexpr std::uint32_t kSlots = 2;
constexpr std::uint64_t kNodeEpoch = 7;
// What a kept replica holds: its slots and its meta page.
constexpr std::uint64_t kHeld = std::uint64_t{kSlots} * kSegment + chain::kKeptMetaBytes;

struct KeptRange {
  std::string name;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

class Zeroing : public ::testing::Test {
 protected:
  void SetUp() override {
    if (provider_spec() != "soft") GTEST_SKIP() << "kept memory is the soft provider's";
    start_broker();
    if (HasFatalFailure()) return;
    arena_fd_ = ::open((dir_.path() / "keep" / "arena").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(arena_fd_, 0);
  }

  // A broker on the keep directory (again: a restarted process finds what
  // the last one kept).
  void start_broker() {
    broker_.reset();
    broker::BrokerConfig cfg;
    cfg.node_id = "node-z";
    cfg.provider = "soft";
    cfg.fabric_listen = listen_address();
    cfg.slot_count = kSlots;
    cfg.keep_dir = (dir_.path() / "keep").string();
    auto b = broker::Broker::start(cfg);
    ASSERT_TRUE(b.ok()) << b.error().message;
    broker_ = std::move(b.value());
    broker_->set_node_epoch(kNodeEpoch);
  }

  void TearDown() override {
    if (admin_) admin_->stop();
    if (arena_fd_ >= 0) ::close(arena_fd_);
  }

  // A one-replica chain of `channel` on this broker, configured as the
  // controller would (by hand or through BrokerAdmin).
  chain::ReplicaConfig replica_config(const std::string& channel, std::uint64_t epoch) const {
    chain::ReplicaConfig rc;
    rc.channel = channel;
    rc.partition = 0;
    rc.epoch = epoch;
    rc.position = 0;
    rc.chain_length = 1;
    rc.head_addr = broker_->fabric_address();
    rc.log.segment_bytes = kSegment;
    rc.log.ttl_ns = 60'000'000'000ull;
    return rc;
  }

  control::idl::ChainAssignment assignment(const std::string& channel, std::uint64_t epoch,
                                           const std::string& node, const std::string& fabric_addr) const {
    control::idl::ChainAssignment a;
    a.route.channel = channel;
    a.route.partition = 0;
    a.route.epoch = static_cast<std::int64_t>(epoch);
    control::idl::Replica r;
    r.node_id = node;
    r.fabric_addr = fabric_addr;
    r.node_epoch = static_cast<std::int64_t>(kNodeEpoch);
    a.route.replicas.push_back(r);
    a.segment_bytes = kSegment;
    a.ttl_ms = 60'000;
    a.channel_partitions = 1;
    return a;
  }

  void start_admin() {
    admin_ = std::make_unique<broker::BrokerAdminServer>(*broker_, broker::BrokerAdminServer::Options{});
    ASSERT_TRUE(admin_->start().ok());
    target_.node_id = "node-z";
    target_.admin_addr = "127.0.0.1:" + std::to_string(admin_->port());
  }

  // Publishes `n` records "<secret><i>" to the one-replica chain of `channel`
  // and waits for their acknowledgements.
  void publish(const std::string& channel, std::uint64_t epoch, const std::string& secret, int n) {
    StaticRoutes routes;
    Route route{channel, 0, epoch, {}, 0, {}};
    route.replicas.push_back({broker_->config().node_id, broker_->fabric_address()});
    routes.set(route, 1, kSegment);
    PublisherOptions po;
    po.provider = "soft";
    auto pub = Publisher::create(routes, channel, po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    std::map<int, PublishResult> results;
    for (int i = 0; i < n; ++i) {
      const std::string payload = secret + std::to_string(i);
      while (pub.value()->publish_to(0, bytes(payload), [&results, i](const PublishResult& r) {
        results[i] = r;
      }) != client::ErrorCode::ok) {
        pub.value()->poll();
      }
    }
    ASSERT_TRUE(pub.value()->flush(20s));
    ASSERT_EQ(results.size(), static_cast<std::size_t>(n));
    for (const auto& [i, r] : results) ASSERT_EQ(r.status, PublishStatus::ok) << i;
  }

  // The keep directory's named ranges whose name starts with `prefix`.
  std::vector<KeptRange> kept_ranges(const std::string& prefix) const {
    std::vector<KeptRange> out;
    std::ifstream in(dir_.path() / "keep" / "regions");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      KeptRange r;
      if (fields >> r.offset >> r.bytes >> r.name && r.name.starts_with(prefix)) out.push_back(r);
    }
    return out;
  }

  // The bytes of the arena file at [offset, offset + len), read through
  // the fd opened at the start.
  std::string read_arena(std::uint64_t offset, std::uint64_t len) const {
    std::string buf(len, '\0');
    std::size_t got = 0;
    while (got < len) {
      const ssize_t n = ::pread(arena_fd_, buf.data() + got, len - got, static_cast<off_t>(offset + got));
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    buf.resize(got);
    return buf;
  }

  static bool all_zero(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c == '\0'; });
  }

  std::uint64_t zeroed_bytes() const { return broker_->stats().zeroed_bytes; }

  // Waits until the stats say at least `want` bytes were zeroed.
  bool zeroed_reaches(std::uint64_t want) const {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (zeroed_bytes() >= want) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }

  // Publishes a secret into `channel`'s kept replica and checks it is in the
  // arena file; returns the replica's ranges.
  std::vector<KeptRange> write_secret(const std::string& channel, std::uint64_t epoch,
                                      const std::string& secret) {
    publish(channel, epoch, secret, 50);
    auto ranges = kept_ranges(chain::keep_name_for(channel, 0, epoch) + "#");
    EXPECT_EQ(ranges.size(), kSlots + 1u) << "the slots and the meta page";
    std::uint64_t held = 0;
    bool seen = false;
    for (const auto& r : ranges) {
      held += r.bytes;
      seen = seen || read_arena(r.offset, r.bytes).find(secret) != std::string::npos;
    }
    EXPECT_EQ(held, kHeld);
    EXPECT_TRUE(seen) << "the records are not where the keep directory says: the test reads the wrong bytes";
    return ranges;
  }

  // After the drop: every byte the replica held reads as zero through the
  // old fd, and no name of it is left.
  void expect_gone(const std::string& channel, std::uint64_t epoch, const std::vector<KeptRange>& ranges) {
    for (const auto& r : ranges) {
      const std::string after = read_arena(r.offset, r.bytes);
      EXPECT_EQ(after.size(), r.bytes) << r.name;
      EXPECT_TRUE(all_zero(after)) << r.name << " still holds bytes after the replica was dropped";
    }
    EXPECT_TRUE(kept_ranges(chain::keep_name_for(channel, 0, epoch) + "#").empty())
        << "the dropped replica's names are still in the keep directory";
  }

  control::testing::TempDir dir_;
  std::unique_ptr<broker::Broker> broker_;
  std::unique_ptr<broker::BrokerAdminServer> admin_;
  control::BrokerTarget target_;
  int arena_fd_ = -1;
};

TEST_F(Zeroing, AFencedKeptReplicaLeavesOnlyZerosAndNoNames) {
  ASSERT_EQ(broker_->configure(replica_config("ta.fenced", 1)).status, broker::ConfigureStatus::applied);
  const auto ranges = write_secret("ta.fenced", 1, "SECRET-OF-TENANT-A-");
  const std::uint64_t before = zeroed_bytes();

  ASSERT_EQ(broker_->fence("ta.fenced", 0, 1).status, broker::ConfigureStatus::applied);
  expect_gone("ta.fenced", 1, ranges);  // the fence returns once the replica is gone
  ASSERT_TRUE(zeroed_reaches(before + kHeld)) << "zeroed_bytes " << zeroed_bytes() << ", before " << before;
  EXPECT_EQ(zeroed_bytes(), before + kHeld) << "zeroed_bytes grows by what the replica held";
}

TEST_F(Zeroing, AKeptReplicaLeftOutOfItsChainByConfigureChainLeavesOnlyZeros) {
  start_admin();
  control::ThriftBrokerAdmin client(control::ThriftBrokerAdmin::Options{});
  auto r = client.configure_chain(target_, assignment("ta.moved", 1, "node-z", broker_->fabric_address()));
  ASSERT_TRUE(r.ok()) << r.error().describe();
  const auto ranges = write_secret("ta.moved", 1, "SECRET-OF-TENANT-A-");
  const std::uint64_t before = zeroed_bytes();

  // The chain goes on elsewhere: this node is named nowhere in the route.
  r = client.configure_chain(target_, assignment("ta.moved", 2, "node-elsewhere", "127.0.0.1:1"));
  ASSERT_TRUE(r.ok()) << r.error().describe();
  expect_gone("ta.moved", 1, ranges);
  ASSERT_TRUE(zeroed_reaches(before + kHeld)) << "zeroed_bytes " << zeroed_bytes() << ", before " << before;
  EXPECT_EQ(zeroed_bytes(), before + kHeld);
  // What the controller sees of it (probes and heartbeats carry NodeStats).
  auto stats = client.ping(target_);
  ASSERT_TRUE(stats.ok()) << stats.error().describe();
  ASSERT_TRUE(stats->__isset.zeroed_bytes);
  EXPECT_EQ(static_cast<std::uint64_t>(stats->zeroed_bytes), before + kHeld);
}

// Other tenants' replicas are given the arena ranges the dropped one held
// (the soft provider hands freed ranges out again, lowest first; ranges
// freed earlier, a connection's buffers, may be taken first): they find only
// zeros there, and what they write is theirs alone.
TEST_F(Zeroing, MemoryHandedOutAgainToAnotherTenantReadsAsZeros) {
  ASSERT_EQ(broker_->configure(replica_config("ta.first", 1)).status, broker::ConfigureStatus::applied);
  const auto old_ranges = write_secret("ta.first", 1, "SECRET-OF-TENANT-A-");
  ASSERT_EQ(broker_->fence("ta.first", 0, 1).status, broker::ConfigureStatus::applied);

  std::string reused;  // the first replica of tenant B given some of A's memory
  for (int i = 0; i < 4 && reused.empty(); ++i) {
    const std::string channel = "tb.c" + std::to_string(i);
    ASSERT_EQ(broker_->configure(replica_config(channel, 1)).status, broker::ConfigureStatus::applied);
    const auto ranges = kept_ranges(chain::keep_name_for(channel, 0, 1) + "#");
    ASSERT_EQ(ranges.size(), kSlots + 1u);
    for (const auto& n : ranges) {
      for (const auto& o : old_ranges) {
        if (n.offset < o.offset + o.bytes && o.offset < n.offset + n.bytes) reused = channel;
      }
      if (n.name.ends_with("#meta")) continue;  // written at creation: the new replica's identity
      EXPECT_TRUE(all_zero(read_arena(n.offset, n.bytes))) << n.name << " was handed out with old bytes";
    }
  }
  ASSERT_FALSE(reused.empty())
      << "the provider never handed out the freed ranges again: the test proves nothing";
  publish(reused, 1, "DATA-OF-TENANT-B-", 50);
  for (const auto& n : kept_ranges(chain::keep_name_for(reused, 0, 1) + "#")) {
    const std::string now = read_arena(n.offset, n.bytes);
    EXPECT_EQ(now.find("SECRET-OF-TENANT-A-"), std::string::npos) << n.name;
  }
}

// A sealed range the route no longer lists (drop_retired) is zeroed too.
TEST_F(Zeroing, ARetiredRangeLetGoIsZeroed) {
  ASSERT_EQ(broker_->configure(replica_config("ta.retired", 1)).status, broker::ConfigureStatus::applied);
  const auto ranges = write_secret("ta.retired", 1, "SECRET-OF-TENANT-A-");
  ASSERT_EQ(broker_->retire("ta.retired", 0, 1, 50, {}).status, broker::ConfigureStatus::applied);
  const std::uint64_t before = zeroed_bytes();
  broker_->drop_retired("ta.retired", 0, {});
  expect_gone("ta.retired", 1, ranges);
  ASSERT_TRUE(zeroed_reaches(before + kHeld)) << "zeroed_bytes " << zeroed_bytes() << ", before " << before;
  EXPECT_EQ(zeroed_bytes(), before + kHeld);
}

// A copy kept through a restart that no chain takes back (the controller
// fences it) is zeroed like a replica.
TEST_F(Zeroing, AKeptCopyNoChainWantsIsZeroedAfterARestart) {
  ASSERT_EQ(broker_->configure(replica_config("ta.restart", 1)).status, broker::ConfigureStatus::applied);
  const auto ranges = write_secret("ta.restart", 1, "SECRET-OF-TENANT-A-");
  start_broker();
  ASSERT_EQ(broker_->stats().kept.size(), 1u) << "the restarted broker did not find its kept copy";
  EXPECT_EQ(zeroed_bytes(), 0u);
  ASSERT_EQ(broker_->fence("ta.restart", 0, 2).status, broker::ConfigureStatus::applied);
  expect_gone("ta.restart", 1, ranges);
  ASSERT_TRUE(zeroed_reaches(kHeld)) << "zeroed_bytes " << zeroed_bytes();
  EXPECT_EQ(zeroed_bytes(), kHeld);
}

}  // namespace
}  // namespace catena::test
