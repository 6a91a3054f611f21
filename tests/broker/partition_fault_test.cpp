// Partition-level recovery (issue 13, level 1): one partition's replica link
// of a broker that holds many breaks with a transport error, under traffic
// on every partition. The partition is rebuilt in place on the node's
// data-plane thread: the predecessor redials, the successor says what it
// holds, the predecessor re-sends the rest. The other partitions are not
// disturbed, and nothing reaches the controller: no link report (the only
// way the data plane tells the controller of a link) and no route epoch
// change.
//
// Three brokers in this process, each on a fault-injecting provider
// (fault_provider.hpp), and eight partitions of one channel (R=3) configured
// by hand. The chains are laid out so that exactly one partition's link runs
// from node-2 to node-0, so a fault armed on node-2 for node-0's address
// hits that link alone: FaultInjector::break_peer (a transport error: the
// post fails, the connection goes to error, the peer sees a disconnect) or
// FaultInjector::corrupt_next_write (a bad frame: node-0 refuses it and
// drops the link).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/fabric/fault_provider.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using test::bytes;
using test::provider_spec;
using namespace std::chrono_literals;
using SteadyTime = std::chrono::steady_clock;

constexpr const char* kPartChannel = "pf";
constexpr std::uint32_t kPartitions = 8;
constexpr std::uint32_t kFaulted = 7;
constexpr std::uint32_t kPartSegment = 512u << 10;
constexpr int kBreaks = 5;

// Head first. Only partition 7 has a node-2 -> node-0 link.
constexpr std::array<std::array<int, 3>, kPartitions> kChains = {{
    {0, 1, 2},
    {1, 0, 2},
    {2, 1, 0},
    {0, 2, 1},
    {0, 1, 2},
    {1, 0, 2},
    {2, 1, 0},
    {1, 2, 0},
}};
constexpr int kBreaker = 2;  // the faulted link's predecessor
constexpr int kTarget = 0;   // and its successor

std::string part_payload(std::uint32_t partition, std::uint64_t n) {
  std::string s = "pf:" + std::to_string(partition) + ":" + std::to_string(n) + ":";
  // A multiple of 8: frames carry no padding, so every byte a link carries
  // is covered by a checksum (a corrupted one is always caught).
  s.resize(48 + (n % 8) * 8, static_cast<char>('a' + n % 26));
  return s;
}

// The fault on partition 7's node-2 -> node-0 link.
enum class LinkFaultKind {
  transport_error,  // FaultInjector::break_peer: the connection goes to error
  bad_frame,        // FaultInjector::corrupt_next_write: a forwarded byte is garbled
};

class PartitionFault : public ::testing::TestWithParam<LinkFaultKind> {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      auto inner = fabric::Provider::open(provider_spec());
      ASSERT_TRUE(inner.ok()) << inner.error().message;
      auto faults = std::make_shared<fabric::FaultInjector>();
      broker::BrokerConfig cfg;
      cfg.node_id = "node-" + std::to_string(i);
      cfg.fabric_listen = test::listen_address();
      cfg.slot_count = 8;
      auto b = broker::Broker::start(
          cfg, std::make_unique<fabric::FaultProvider>(std::move(inner.value()), faults));
      ASSERT_TRUE(b.ok()) << b.error().message;
      brokers_.push_back(std::move(b.value()));
      faults_.push_back(std::move(faults));
    }
    for (std::uint32_t p = 0; p < kPartitions; ++p) configure(p);
  }

  void TearDown() override {
    for (auto& b : brokers_) b->stop();
  }

  // Tail first, so each replica's successor holds the partition when it dials.
  void configure(std::uint32_t p) {
    const auto& order = kChains[p];
    Route route{kPartChannel, p, 1, {}, 0, {}};
    for (int i : order)
      route.replicas.push_back({brokers_[idx(i)]->node_id(), brokers_[idx(i)]->fabric_address()});
    for (int pos = 2; pos >= 0; --pos) {
      const auto at = static_cast<std::size_t>(pos);
      chain::ReplicaConfig rc;
      rc.channel = kPartChannel;
      rc.partition = p;
      rc.epoch = 1;
      rc.position = static_cast<std::uint32_t>(pos);
      rc.chain_length = 3;
      if (pos > 0) rc.predecessor_node = route.replicas[at - 1].node_id;
      if (pos < 2) {
        rc.successor_node = route.replicas[at + 1].node_id;
        rc.successor_addr = route.replicas[at + 1].fabric_addr;
      }
      rc.head_addr = route.replicas[0].fabric_addr;
      rc.log.segment_bytes = kPartSegment;
      rc.log.ttl_ns = 600'000'000'000ull;
      auto r = brokers_[idx(order[at])]->configure(rc);
      ASSERT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
    }
    routes_.set(route, kPartitions, kPartSegment);
  }

  static std::size_t idx(int i) { return static_cast<std::size_t>(i); }

  // The replica of `p` on broker b in a stats snapshot of the three.
  static std::optional<broker::PartitionStats> replica_in(const std::array<broker::NodeStats, 3>& s, int b,
                                                          std::uint32_t p) {
    for (const auto& ps : s[idx(b)].partitions) {
      if (ps.channel == kPartChannel && ps.partition == p) return ps;
    }
    return std::nullopt;
  }

  // Every link of partition p is up, as its replicas saw it.
  static bool linked(const std::array<broker::NodeStats, 3>& s, std::uint32_t p) {
    const auto& order = kChains[p];
    for (std::size_t pos = 0; pos < 3; ++pos) {
      auto ps = replica_in(s, order[pos], p);
      if (!ps) return false;
      if (pos < 2 && !ps->replica.successor_connected) return false;
      if (pos > 0 && !ps->replica.predecessor_connected) return false;
    }
    return true;
  }

  std::vector<std::shared_ptr<fabric::FaultInjector>> faults_;
  std::vector<std::unique_ptr<broker::Broker>> brokers_;
  StaticRoutes routes_;
};

using Snapshot = std::array<broker::NodeStats, 3>;

// Transport error: node-2's endpoint fails and node-0 sees a disconnect.
// Bad frame: node-0 finds a forwarded frame does not validate, refuses it
// and drops the link. Either way node-2 redials and re-sends from what
// node-0 holds (validated frames only).
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

TEST_P(PartitionFault, LinkIsRebuiltInPlaceAndOtherPartitionsSeeNothing) {
  // What is tested is the chain's, not the provider's. Under
  // ThreadSanitizer, three brokers with eight chains on the in-process dpdk
  // emulation move too few records for this traffic (seen: 300 records per
  // partition not acknowledged in 30 s); it runs there under ASan, and on
  // the soft provider under both.
  if (kThreadSanitizer && provider_spec().starts_with("dpdk")) {
    GTEST_SKIP() << "too slow on dpdk under ThreadSanitizer";
  }
  const bool bad_frame = GetParam() == LinkFaultKind::bad_frame;
  auto snapshot = [&] {
    Snapshot s;
    for (std::size_t i = 0; i < 3; ++i) s[i] = brokers_[i]->stats();
    return s;
  };
  const auto wait_until = [](const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
    const auto deadline = SteadyTime::now() + timeout;
    while (!cond() && SteadyTime::now() < deadline) std::this_thread::sleep_for(1ms);
    return cond();
  };
  ASSERT_TRUE(wait_until(
      [&] {
        const Snapshot s = snapshot();
        for (std::uint32_t p = 0; p < kPartitions; ++p) {
          if (!linked(s, p)) return false;
        }
        return true;
      },
      10s))
      << "chain links did not come up";
  // A link slower than 1 s to come up the first time (seen on soft-RoCE in
  // the emulated VM, on a loaded host, 2026-12-02) is reported like any
  // other: that is setup, not the faults below.
  for (auto& b : brokers_) (void)b->take_link_reports();

  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, kPartChannel, po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::array<std::unique_ptr<Subscriber>, 2> subs;
  for (std::size_t s = 0; s < 2; ++s) {
    SubscriberOptions so;
    so.provider = provider_spec();
    so.read_from = s == 0 ? SubscriberOptions::ReadFrom::tail : SubscriberOptions::ReadFrom::head;
    auto sub = Subscriber::create(routes_, kPartChannel, so);
    ASSERT_TRUE(sub.ok()) << sub.error().message;
    subs[s] = std::move(sub.value());
  }

  std::array<std::map<std::uint64_t, std::string>, kPartitions> acked;  // offset -> payload
  std::array<std::uint64_t, kPartitions> published{};
  std::array<std::array<std::vector<std::pair<std::uint64_t, std::string>>, kPartitions>, 2> delivered;
  int refused = 0, offset_reused = 0;
  bool publishing = true;
  // One pass of traffic: a record to every partition, then the clients' polls.
  auto pump = [&] {
    for (std::uint32_t p = 0; p < kPartitions && publishing; ++p) {
      const std::string payload = part_payload(p, published[p]);
      const auto e = pub.value()->publish_to(p, bytes(payload), [&, payload](const PublishResult& r) {
        if (r.status != PublishStatus::ok) {
          ++refused;
        } else if (!acked[r.partition].emplace(r.offset, payload).second) {
          ++offset_reused;
        }
      });
      if (e == client::ErrorCode::ok) ++published[p];
    }
    pub.value()->poll();
    for (std::size_t s = 0; s < 2; ++s) {
      subs[s]->poll([&](const Message& m) {
        delivered[s][m.partition].emplace_back(
            m.offset, std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
      });
    }
    std::this_thread::sleep_for(50us);
  };
  // Samples in which another partition had a link down (stats every ~2 ms).
  int others_unlinked = 0;
  auto pump_until = [&](const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
    const auto deadline = SteadyTime::now() + timeout;
    while (!cond() && SteadyTime::now() < deadline) {
      pump();
      const Snapshot s = snapshot();
      for (std::uint32_t p = 0; p < kPartitions; ++p) {
        if (p != kFaulted && !linked(s, p)) ++others_unlinked;
      }
    }
    return cond();
  };
  auto all_acked_at_least = [&](std::size_t n) {
    return std::all_of(acked.begin(), acked.end(), [n](const auto& a) { return a.size() >= n; });
  };

  ASSERT_TRUE(pump_until([&] { return all_acked_at_least(300); }, 30s)) << "initial traffic";
  std::array<fabric::FaultCounters, 3> before;
  for (std::size_t i = 0; i < 3; ++i) before[i] = faults_[i]->counters();

  struct Recovery {
    double dial_ms = 0, accept_ms = 0, linked_ms = 0;
  };
  std::vector<Recovery> recoveries;
  const std::string target = brokers_[idx(kTarget)]->fabric_address();
  for (int k = 0; k < kBreaks; ++k) {
    const std::size_t acked_before = acked[kFaulted].size();
    const auto c = faults_[idx(kBreaker)]->counters().connects;
    const auto a = faults_[idx(kTarget)]->counters().accepts;
    const auto t0 = SteadyTime::now();
    auto ms_since = [&] { return std::chrono::duration<double, std::milli>(SteadyTime::now() - t0).count(); };
    if (bad_frame) {
      faults_[idx(kBreaker)]->corrupt_next_write(target);
    } else {
      faults_[idx(kBreaker)]->break_peer(target);
    }
    Recovery r;
    ASSERT_TRUE(pump_until([&] { return faults_[idx(kBreaker)]->counters().connects > c; }, 10s))
        << "break " << k << ": node-" << kBreaker << " never redialled";
    r.dial_ms = ms_since();
    ASSERT_TRUE(pump_until([&] { return faults_[idx(kTarget)]->counters().accepts > a; }, 10s))
        << "break " << k << ": node-" << kTarget << " never accepted the redial";
    r.accept_ms = ms_since();
    // The stats snapshot is refreshed every ~2 ms: one taken from now on
    // shows the new link, not the one the fault broke.
    const auto fresh = SteadyTime::now() + 5ms;
    ASSERT_TRUE(pump_until([&] { return SteadyTime::now() >= fresh && linked(snapshot(), kFaulted); }, 10s))
        << "break " << k << ": partition " << kFaulted << " did not link again";
    r.linked_ms = ms_since();
    recoveries.push_back(r);
    ASSERT_TRUE(pump_until([&] { return acked[kFaulted].size() >= acked_before + 300; }, 20s))
        << "break " << k << ": the faulted partition made no progress after it";
  }
  const std::size_t final_target = acked[kFaulted].size() + 300;
  ASSERT_TRUE(pump_until([&] { return all_acked_at_least(final_target); }, 20s))
      << "traffic after the faults";
  publishing = false;
  ASSERT_TRUE(pub.value()->flush(30s));
  auto caught_up = [&] {
    for (std::size_t s = 0; s < 2; ++s) {
      for (std::uint32_t p = 0; p < kPartitions; ++p) {
        if (delivered[s][p].size() < acked[p].size()) return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(pump_until(caught_up, 30s)) << "subscribers did not catch up";
  const auto settle = SteadyTime::now() + 200ms;  // let duplicates, if any, arrive
  pump_until([&] { return SteadyTime::now() >= settle; }, 1s);

  for (const auto& r : recoveries) {
    std::printf("partition %u %s -> redialled %.2f ms, accepted %.2f ms, linked (stats) %.2f ms\n", kFaulted,
                bad_frame ? "bad frame" : "link broken", r.dial_ms, r.accept_ms, r.linked_ms);
  }

  // Every acknowledged record on every partition, exactly once, in order,
  // intact, to both subscribers; nothing refused.
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(offset_reused, 0);
  for (std::size_t s = 0; s < 2; ++s) {
    for (std::uint32_t p = 0; p < kPartitions; ++p) {
      const auto& got = delivered[s][p];
      std::vector<std::pair<std::uint64_t, std::string>> want(acked[p].begin(), acked[p].end());
      EXPECT_EQ(got.size(), want.size()) << "subscriber " << s << ", partition " << p;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()))
          << "subscriber " << s << ", partition " << p
          << ": delivered records differ from the acknowledged ones";
      EXPECT_EQ(published[p], acked[p].size()) << "partition " << p << ": published records not acknowledged";
    }
  }

  // The fault hit that one link, once per break, and only it was redialled.
  const auto after = std::array{faults_[0]->counters(), faults_[1]->counters(), faults_[2]->counters()};
  EXPECT_EQ(after[idx(kBreaker)].broken_links, bad_frame ? 0u : static_cast<std::uint64_t>(kBreaks));
  EXPECT_EQ(after[idx(kBreaker)].corrupted_writes, bad_frame ? static_cast<std::uint64_t>(kBreaks) : 0u);
  EXPECT_EQ(after[idx(kBreaker)].connects,
            before[idx(kBreaker)].connects + static_cast<std::uint64_t>(kBreaks));
  for (int i : {0, 1}) {
    EXPECT_EQ(after[idx(i)].broken_links, 0u);
    EXPECT_EQ(after[idx(i)].connects, before[idx(i)].connects) << "node-" << i << " redialled a link";
  }
  EXPECT_EQ(others_unlinked, 0) << "another partition's link was seen down";
  // The node counts what it rebuilt (NodeStats.link_rebuilds, `catena
  // status`): the breaker one per break, the others none.
  for (int i : {0, 1, 2}) {
    EXPECT_EQ(snapshot()[idx(i)].link_rebuilds, i == kBreaker ? static_cast<std::uint64_t>(kBreaks) : 0u)
        << "node-" << i;
  }

  // Rebuilt in place: same chain, same epoch, every replica holds and
  // committed the same records; no frame refused.
  const Snapshot s = snapshot();
  for (std::uint32_t p = 0; p < kPartitions; ++p) {
    std::uint64_t end = 0;
    for (std::size_t pos = 0; pos < 3; ++pos) {
      auto ps = replica_in(s, kChains[p][pos], p);
      ASSERT_TRUE(ps.has_value()) << "partition " << p;
      EXPECT_EQ(ps->epoch, 1u) << "partition " << p;
      EXPECT_EQ(ps->position, pos) << "partition " << p;
      // The tail of partition 7 refused each garbled write, nobody else
      // any. It counts every write-with-immediate it refused, and those the
      // link carried after the bad one (already polled in the same batch)
      // are refused too: at least one per fault.
      if (bad_frame && p == kFaulted && kChains[p][pos] == kTarget) {
        EXPECT_GE(ps->replica.corrupt_frames, static_cast<std::uint64_t>(kBreaks));
      } else {
        EXPECT_EQ(ps->replica.corrupt_frames, 0u) << "partition " << p << " position " << pos;
      }
      EXPECT_EQ(ps->replica.commit_offset, ps->replica.end_offset) << "partition " << p;
      if (pos == 0) end = ps->replica.end_offset;
      EXPECT_EQ(ps->replica.end_offset, end) << "partition " << p << " position " << pos;
    }
    EXPECT_EQ(end, acked[p].empty() ? 0 : acked[p].rbegin()->first + 1) << "partition " << p;
  }

  // Nothing for the controller: no broker reported a link (the only way the
  // data plane tells the controller of one).
  for (auto& b : brokers_) {
    for (const auto& r : b->take_link_reports()) {
      ADD_FAILURE() << b->node_id() << " reported " << r.suspect << " on " << r.channel << "/" << r.partition
                    << ": " << r.reason;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, PartitionFault,
                         ::testing::Values(LinkFaultKind::transport_error, LinkFaultKind::bad_frame),
                         [](const ::testing::TestParamInfo<LinkFaultKind>& info) {
                           return info.param == LinkFaultKind::bad_frame ? std::string("BadFrame")
                                                                         : std::string("TransportError");
                         });

}  // namespace
}  // namespace catena
