// Three brokers in one process (each with its own fabric provider, as
// separate nodes would have), a chain configured by hand through the same
// Broker::configure() the control plane uses, and real Publisher/Subscriber
// clients: every acknowledged record is delivered exactly once, in order,
// with its offset and payload, on every replica.
#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/wire.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using test::bytes;
using test::provider_spec;

using namespace std::chrono_literals;

class ChainE2E : public ::testing::Test {
 protected:
  static constexpr std::uint32_t kSegment = 512u << 10;  // 4 slots: 2 MiB retained per replica

  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      broker::BrokerConfig cfg;
      cfg.node_id = "node-" + std::to_string(i);
      cfg.provider = provider_spec();
      cfg.fabric_listen = test::listen_address();
      cfg.slot_count = 4;
      cfg.grace_ms = 100;
      auto b = broker::Broker::start(cfg);
      ASSERT_TRUE(b.ok()) << b.error().message;
      brokers_.push_back(std::move(b.value()));
    }
  }

  // Configures partition `p` of `channel` on brokers `order` (head first).
  void configure(const std::string& channel, std::uint32_t p, std::uint32_t partitions,
                 const std::vector<int>& order, std::uint64_t epoch, std::uint64_t ttl_ms = 60000,
                 std::uint64_t start_offset = 0) {
    Route route{channel, p, epoch, {}, start_offset, {}};
    for (int i : order)
      route.replicas.push_back({brokers_[i]->config().node_id, brokers_[i]->fabric_address()});
    for (std::size_t pos = 0; pos < order.size(); ++pos) {
      chain::ReplicaConfig rc;
      rc.channel = channel;
      rc.partition = p;
      rc.epoch = epoch;
      rc.position = static_cast<std::uint32_t>(pos);
      rc.chain_length = static_cast<std::uint32_t>(order.size());
      if (pos > 0) rc.predecessor_node = route.replicas[pos - 1].node_id;
      if (pos + 1 < order.size()) {
        rc.successor_node = route.replicas[pos + 1].node_id;
        rc.successor_addr = route.replicas[pos + 1].fabric_addr;
      }
      rc.head_addr = route.replicas[0].fabric_addr;
      rc.log.segment_bytes = kSegment;
      rc.log.ttl_ns = ttl_ms * 1'000'000ull;
      rc.start_offset = start_offset;
      auto r = brokers_[order[pos]]->configure(rc);
      ASSERT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
    }
    routes_.set(route, partitions, kSegment);
  }

  std::vector<std::unique_ptr<broker::Broker>> brokers_;
  StaticRoutes routes_;
};

TEST_F(ChainE2E, AcknowledgedRecordsReachEverySubscriberOnceInOrder) {
  constexpr int kRecords = 5000;
  configure("orders", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "orders", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;

  std::vector<std::unique_ptr<Subscriber>> subs;
  for (auto from : {SubscriberOptions::ReadFrom::tail, SubscriberOptions::ReadFrom::head}) {
    SubscriberOptions so;
    so.provider = provider_spec();
    so.read_from = from;
    auto s = Subscriber::create(routes_, "orders", so);
    ASSERT_TRUE(s.ok()) << s.error().message;
    subs.push_back(std::move(s.value()));
  }

  std::map<std::uint64_t, std::string> acked;  // offset -> payload
  int failed = 0;
  for (int i = 0; i < kRecords; ++i) {
    std::string payload = "order-" + std::to_string(i) + std::string(i % 300, 'x');
    for (;;) {
      auto e = pub.value()->publish_to(0, bytes(payload), [&, payload](const PublishResult& r) {
        if (r.status == PublishStatus::ok) {
          EXPECT_TRUE(acked.emplace(r.offset, payload).second) << "offset reused: " << r.offset;
        } else {
          ++failed;
        }
      });
      if (e == client::ErrorCode::ok) break;
      ASSERT_EQ(e, client::ErrorCode::backpressure);
      pub.value()->poll();
    }
  }
  ASSERT_TRUE(pub.value()->flush(30s));
  EXPECT_EQ(failed, 0);
  ASSERT_EQ(acked.size(), static_cast<std::size_t>(kRecords));
  EXPECT_EQ(acked.begin()->first, 0u);
  EXPECT_EQ(acked.rbegin()->first, static_cast<std::uint64_t>(kRecords - 1));

  for (auto& sub : subs) {
    std::vector<std::pair<std::uint64_t, std::string>> got;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (got.size() < acked.size() && std::chrono::steady_clock::now() < deadline) {
      if (sub->poll([&](const Message& m) {
            got.emplace_back(m.offset,
                             std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
          }) == 0) {
        std::this_thread::sleep_for(100us);
      }
    }
    ASSERT_EQ(got.size(), acked.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, i) << "delivery out of order";
      ASSERT_EQ(got[i].second, acked[i]) << "payload mismatch at offset " << i;
    }
  }
  // Every replica holds and has committed everything.
  std::this_thread::sleep_for(20ms);
  for (auto& b : brokers_) {
    auto st = b->stats();
    ASSERT_EQ(st.partitions.size(), 1u);
    EXPECT_EQ(st.partitions[0].replica.end_offset, static_cast<std::uint64_t>(kRecords));
    EXPECT_EQ(st.partitions[0].replica.commit_offset, static_cast<std::uint64_t>(kRecords));
  }
}

// Reads partition 0 of `channel` from the tail until `count` records came.
std::vector<std::pair<std::uint64_t, std::string>> read_all(StaticRoutes& routes, const std::string& channel,
                                                            std::size_t count) {
  SubscriberOptions so;
  so.provider = provider_spec();
  auto sub = Subscriber::create(routes, channel, so);
  EXPECT_TRUE(sub.ok());
  std::vector<std::pair<std::uint64_t, std::string>> got;
  if (!sub.ok()) return got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      got.emplace_back(m.offset,
                       std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    });
  }
  return got;
}

// Publishes payloads "<prefix><i>" for i in [from, from + n), recording each
// result in *results (index i).
void publish_range(Publisher& pub, const std::string& prefix, int from, int n,
                   std::map<int, PublishResult>* results) {
  for (int i = from; i < from + n; ++i) {
    const std::string payload = prefix + std::to_string(i);
    while (pub.publish_to(0, bytes(payload), [results, i](const PublishResult& r) { (*results)[i] = r; }) !=
           client::ErrorCode::ok) {
      pub.poll();
    }
  }
}

// Waits until broker b's replica of the only partition committed `offset`.
bool committed(broker::Broker& b, std::uint64_t offset) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto st = b.stats();
    if (!st.partitions.empty() && st.partitions[0].replica.commit_offset >= offset) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// Without a valid lease a chain keeps replicating and committing, but
// nobody is told: acks and deliveries stall (they do not fail), and resume
// with the same offsets once the lease is renewed.
TEST_F(ChainE2E, LapsedLeaseStallsAcksAndReadsUntilRenewed) {
  configure("lease", 0, 1, {0, 1, 2}, 1);
  for (auto& b : brokers_) b->set_lease_deadline(0);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "lease", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  SubscriberOptions so;
  so.provider = provider_spec();
  auto sub = Subscriber::create(routes_, "lease", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::pair<std::uint64_t, std::string>> got;
  auto drain = [&] {
    return sub.value()->poll([&](const Message& m) {
      got.emplace_back(m.offset,
                       std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    });
  };

  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "l", 0, 100, &results);
  ASSERT_TRUE(committed(*brokers_[2], 100)) << "the chain stopped replicating without a lease";
  // The tail committed everything: without the gate the acks and the
  // deliveries would be on their way now. Give them every chance to arrive.
  for (int i = 0; i < 2000; ++i) {
    pub.value()->poll();
    drain();
    std::this_thread::sleep_for(100us);
  }
  EXPECT_TRUE(results.empty()) << results.size() << " record(s) acknowledged without a lease";
  EXPECT_TRUE(got.empty()) << got.size() << " record(s) delivered without a lease";

  for (auto& b : brokers_) b->set_lease_deadline(b->clock().now_ns() + 3'600'000'000'000ull);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 100u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, static_cast<std::uint64_t>(i));
  }
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < 100 && std::chrono::steady_clock::now() < deadline) {
    if (drain() == 0) std::this_thread::sleep_for(100us);
  }
  ASSERT_EQ(got.size(), 100u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, i);
    EXPECT_EQ(got[i].second, "l" + std::to_string(i));
  }
}

// A fenced node suspends its replicas: they keep their data and act on
// nothing until the controller configures them at a newer epoch.
TEST_F(ChainE2E, SuspendedReplicasKeepTheirDataAndActAgainAtANewerEpoch) {
  configure("susp", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "susp", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "s", 0, 50, &results);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 50u);

  for (auto& b : brokers_) b->suspend_all();
  publish_range(*pub.value(), "s", 50, 50, &results);
  ASSERT_TRUE(committed(*brokers_[2], 100));
  for (int i = 0; i < 2000; ++i) {
    pub.value()->poll();
    std::this_thread::sleep_for(100us);
  }
  EXPECT_EQ(results.size(), 50u) << "a suspended head acknowledged";
  for (auto& b : brokers_) {
    auto st = b->stats();
    ASSERT_EQ(st.partitions.size(), 1u);
    EXPECT_EQ(st.partitions[0].replica.end_offset, 100u) << "a suspended replica lost its data";
  }

  configure("susp", 0, 1, {0, 1, 2}, 2);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 100u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, static_cast<std::uint64_t>(i));
  }
}

// A kept copy is resumed only in the same chain: configured into a chain
// rebuilt at a new offset generation, a suspended replica starts empty there
// instead of continuing its old offsets.
TEST_F(ChainE2E, SuspendedCopyIsNotCarriedIntoARebuiltChain) {
  configure("gen", 0, 1, {0}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  {
    auto pub = Publisher::create(routes_, "gen", po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    std::map<int, PublishResult> results;
    publish_range(*pub.value(), "old", 0, 10, &results);
    ASSERT_TRUE(pub.value()->flush(30s));
    ASSERT_EQ(results.size(), 10u);
  }
  brokers_[0]->suspend_all();
  constexpr std::uint64_t kStart = std::uint64_t{1} << 32;
  configure("gen", 0, 1, {0}, 3, 60000, kStart);
  auto pub = Publisher::create(routes_, "gen", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "new", 0, 5, &results);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 5u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, kStart + static_cast<std::uint64_t>(i)) << "the old copy's offsets continued";
  }
}

// A chain the controller rebuilt after its data was lost starts at the
// route's start_offset (a new offset generation, 2^32 here): records are
// acknowledged and delivered from there, never at offsets already used.
TEST_F(ChainE2E, ChainRebuiltAtANewOffsetGenerationContinuesThere) {
  constexpr std::uint64_t kStart = std::uint64_t{1} << 32;
  configure("rebuilt", 0, 1, {0, 1, 2}, 3, 60000, kStart);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "rebuilt", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "g", 0, 20, &results);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 20u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, kStart + static_cast<std::uint64_t>(i));
  }
  SubscriberOptions so;
  so.provider = provider_spec();
  so.read_from = SubscriberOptions::ReadFrom::tail;
  auto sub = Subscriber::create(routes_, "rebuilt", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::uint64_t> offsets;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (offsets.size() < 20 && std::chrono::steady_clock::now() < deadline) {
    if (sub.value()->poll([&](const Message& m) { offsets.push_back(m.offset); }) == 0) {
      std::this_thread::sleep_for(100us);
    }
  }
  ASSERT_EQ(offsets.size(), 20u);
  for (std::size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(offsets[i], kStart + i);
}

// A publisher restarted with the same producer id gets a new epoch from its
// route source, so its new records (different payloads, the same sequence
// numbers) are stored, not taken for retries of the old ones; the old
// instance, still running, is fenced.
TEST_F(ChainE2E, RestartedPublisherWithTheSameIdIsNewDataAndFencesTheOldOne) {
  configure("idem", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.producer_id = 4242;
  auto publish_all = [](Publisher& pub, const std::string& prefix, std::vector<std::uint64_t>* offsets) {
    for (int i = 0; i < 10; ++i) {
      auto f = pub.publish({}, bytes(prefix + std::to_string(i)));
      ASSERT_TRUE(pub.flush(10s));
      auto r = f.get();
      ASSERT_EQ(r.status, PublishStatus::ok) << chain::wire::to_string(r.status);
      EXPECT_EQ(r.sequence, static_cast<std::uint64_t>(i));
      offsets->push_back(r.offset);
    }
  };
  std::vector<std::uint64_t> first, second;
  auto old_run = Publisher::create(routes_, "idem", po);
  ASSERT_TRUE(old_run.ok()) << old_run.error().message;
  publish_all(*old_run.value(), "old-", &first);
  auto new_run = Publisher::create(routes_, "idem", po);
  ASSERT_TRUE(new_run.ok()) << new_run.error().message;
  EXPECT_EQ(new_run.value()->producer_id(), 4242u);
  EXPECT_GT(new_run.value()->producer_epoch(), old_run.value()->producer_epoch());
  publish_all(*new_run.value(), "new-", &second);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(first[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(i));
    EXPECT_EQ(second[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(10 + i))
        << "new data taken for a retry";
  }
  // The old incarnation is a zombie now.
  auto zombie = old_run.value()->publish({}, bytes("zombie"));
  ASSERT_TRUE(old_run.value()->flush(10s));
  EXPECT_EQ(zombie.get().status, PublishStatus::producer_fenced);

  const auto got = read_all(routes_, "idem", 20);
  ASSERT_EQ(got.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(got[static_cast<std::size_t>(i)].first, static_cast<std::uint64_t>(i));
    EXPECT_EQ(got[static_cast<std::size_t>(i)].second, (i < 10 ? "old-" : "new-") + std::to_string(i % 10));
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(brokers_[2]->stats().partitions[0].replica.end_offset, 20u);
}

// Records that failed after the retry timeout were never stored; the
// publisher's next records must not be refused as a sequence gap forever:
// it follows the head's next sequence and keeps publishing.
TEST_F(ChainE2E, PublisherRecoversFromRecordsThatFailedAfterTheRetryTimeout) {
  configure("gap", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.retry_timeout = 300ms;
  auto pub = Publisher::create(routes_, "gap", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<std::uint64_t, std::string> acked;
  std::vector<PublishStatus> failures;
  auto publish = [&](const std::string& payload) {
    for (;;) {
      auto e = pub.value()->publish_to(0, bytes(payload), [&, payload](const PublishResult& r) {
        if (r.status == PublishStatus::ok) {
          EXPECT_TRUE(acked.emplace(r.offset, payload).second) << "offset " << r.offset << " acked twice";
        } else {
          failures.push_back(r.status);
        }
      });
      if (e == client::ErrorCode::ok) return;
      ASSERT_TRUE(e == client::ErrorCode::backpressure || e == client::ErrorCode::unavailable)
          << static_cast<int>(e);
      pub.value()->poll();
      std::this_thread::sleep_for(1ms);
    }
  };
  for (int i = 0; i < 5; ++i) publish("a" + std::to_string(i));
  ASSERT_TRUE(pub.value()->flush(10s));
  ASSERT_EQ(acked.size(), 5u);

  // The partition becomes unreachable: its route names a node nobody runs,
  // and the head drops the partition.
  Route ghost{"gap", 0, 2, {{"ghost", "127.0.0.1:1"}}, 0, {}};
  routes_.set(ghost, 1, kSegment);
  ASSERT_EQ(brokers_[0]->fence("gap", 0, 1).status, broker::ConfigureStatus::applied);
  for (int i = 0; i < 5; ++i) publish("lost" + std::to_string(i));
  ASSERT_TRUE(pub.value()->flush(5s));  // resolved: every one failed
  ASSERT_EQ(failures.size(), 5u);
  for (auto st : failures) EXPECT_EQ(st, PublishStatus::unavailable);

  // The chain comes back without the old head: nodes 1 and 2 hold the five
  // acknowledged records and know this producer up to sequence 4.
  configure("gap", 0, 1, {1, 2}, 3);
  for (int i = 0; i < 20; ++i) publish("b" + std::to_string(i));
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(failures.size(), 5u) << "records after the failed ones were refused";
  ASSERT_EQ(acked.size(), 25u);
  for (std::uint64_t off = 0; off < 25; ++off) {
    ASSERT_TRUE(acked.count(off)) << "offset " << off << " missing";
    EXPECT_EQ(acked[off], off < 5 ? "a" + std::to_string(off) : "b" + std::to_string(off - 5));
  }
  const auto got = read_all(routes_, "gap", 25);
  ASSERT_EQ(got.size(), 25u);
  for (const auto& [off, payload] : got) EXPECT_EQ(payload, acked[off]);
}

TEST_F(ChainE2E, MiddleReplicaReplacedMidStreamLosesNothing) {
  configure("repair", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "repair", po);
  ASSERT_TRUE(pub.ok());
  std::map<std::uint64_t, std::string> acked;
  auto publish_n = [&](int from, int n) {
    for (int i = from; i < from + n; ++i) {
      std::string payload = "r" + std::to_string(i);
      while (pub.value()->publish_to(0, bytes(payload), [&, payload](const PublishResult& r) {
        if (r.status == PublishStatus::ok) acked.emplace(r.offset, payload);
      }) != client::ErrorCode::ok) {
        pub.value()->poll();
      }
    }
  };
  publish_n(0, 500);
  ASSERT_TRUE(pub.value()->flush(10s));
  // Drop the middle: head links straight to the tail, which must be caught up.
  configure("repair", 0, 1, {0, 2}, 2);
  publish_n(500, 500);
  ASSERT_TRUE(pub.value()->flush(20s));
  ASSERT_EQ(acked.size(), 1000u);
  // Add node 1 back as a fresh tail: it is caught up from the segments.
  ASSERT_EQ(brokers_[1]->fence("repair", 0, 2).status, broker::ConfigureStatus::applied);
  configure("repair", 0, 1, {0, 2, 1}, 3);
  publish_n(1000, 100);
  ASSERT_TRUE(pub.value()->flush(20s));
  ASSERT_EQ(acked.size(), 1100u);
  SubscriberOptions so;
  so.provider = provider_spec();
  auto sub = Subscriber::create(routes_, "repair", so);  // reads from the new tail
  ASSERT_TRUE(sub.ok());
  sub.value()->on_notice([](const Notice& n) {
    ADD_FAILURE() << "notice " << chain::wire::to_string(n.status) << " at " << n.next_offset;
  });
  std::uint64_t next = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (next < 1100 && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      ASSERT_EQ(m.offset, next);
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()), acked[next]);
      ++next;
    });
  }
  EXPECT_EQ(next, 1100u);
}

// The tail acknowledges a watching producer's records with the offsets the
// head gave them; only the tail of a chain of two or more accepts a watch.
TEST_F(ChainE2E, TailAcknowledgesWatchersWithTheHeadsOffsets) {
  configure("watch", 0, 1, {0, 1, 2}, 1);
  auto provider = fabric::Provider::open(provider_spec());
  ASSERT_TRUE(provider.ok()) << provider.error().message;
  std::uint64_t producer_epoch = 0;  // set once the publisher has its issued epoch
  auto watch = [&](int node, const std::string& channel, std::uint64_t epoch, std::uint64_t producer) {
    chain::wire::CommitWatchHello h{};
    h.ref.set(channel, 0, epoch);
    h.producer_id = producer;
    h.producer_epoch = producer_epoch;
    return chain::Link::dial<chain::wire::CommitWatchWelcome>(**provider, brokers_[node]->fabric_address(), h,
                                                              3s);
  };
  for (int node : {0, 1}) {
    auto d = watch(node, "watch", 1, 99);
    ASSERT_TRUE(d.welcome.has_value()) << d.error.message;
    EXPECT_EQ(d.welcome->status, chain::wire::Status::not_tail) << "node " << node;
  }
  auto unknown = watch(2, "no-such-channel", 1, 99);
  ASSERT_TRUE(unknown.welcome.has_value());
  EXPECT_EQ(unknown.welcome->status, chain::wire::Status::unknown_channel);
  auto stale = watch(2, "watch", 0, 99);
  ASSERT_TRUE(stale.welcome.has_value());
  EXPECT_EQ(stale.welcome->status, chain::wire::Status::stale_epoch);

  PublisherOptions po;
  po.provider = provider_spec();
  po.producer_id = 777;
  auto pub = Publisher::create(routes_, "watch", po);  // opens its own watch first
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  producer_epoch = pub.value()->producer_epoch();
  auto mine = watch(2, "watch", 1, 777);  // the newest watch of producer 777 gets the acks
  ASSERT_TRUE(mine.welcome.has_value()) << mine.error.message;
  ASSERT_EQ(mine.welcome->status, chain::wire::Status::ok);
  // Another producer's records interleave and must not show up in 777's acks.
  PublisherOptions other_opts = po;
  other_opts.producer_id = 888;
  auto other = Publisher::create(routes_, "watch", other_opts);
  ASSERT_TRUE(other.ok());

  constexpr std::uint32_t kRecords = 2000;
  std::map<std::uint64_t, std::uint64_t> offset_of_seq;
  std::map<std::uint64_t, std::uint64_t> tail_said;
  auto drain_watch = [&] {
    mine.link->poll_recv(
        [&](const std::byte* msg, std::uint32_t len) {
          auto ack = chain::wire::decode<chain::wire::PublishAck>(msg, len);
          ASSERT_TRUE(ack.has_value());
          EXPECT_EQ(ack->status, chain::wire::Status::ok);
          EXPECT_EQ(ack->ring_consumed, 0u);
          for (std::uint32_t i = 0; i < ack->count; ++i) {
            EXPECT_TRUE(tail_said.emplace(ack->first_seq + i, ack->first_offset + i).second) << "acked twice";
          }
        },
        [](std::uint32_t, std::uint32_t) {});
  };
  for (std::uint32_t i = 0; i < kRecords; ++i) {
    const std::string payload = "w" + std::to_string(i);
    while (pub.value()->publish_to(0, bytes(payload), [&](const PublishResult& r) {
      ASSERT_EQ(r.status, PublishStatus::ok);
      offset_of_seq[r.sequence] = r.offset;
    }) != client::ErrorCode::ok) {
      pub.value()->poll();
    }
    if (i % 3 == 0) (void)other.value()->publish_to(0, bytes(payload), nullptr);
    drain_watch();  // as a publisher would: keeps the watch's receives posted
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  ASSERT_TRUE(other.value()->flush(20s));
  ASSERT_EQ(offset_of_seq.size(), kRecords);

  const std::uint64_t last_seq = offset_of_seq.rbegin()->first;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!tail_said.contains(last_seq) && std::chrono::steady_clock::now() < deadline) drain_watch();
  // The tail's acks are advisory: one that finds the watch's send queue full
  // is dropped (the head's ack covers the same records), so on a slow host
  // the tail may skip some. Every one it does send names the head's offset,
  // none repeats, and the last record is acknowledged.
  ASSERT_TRUE(tail_said.contains(last_seq)) << "the tail said " << tail_said.size() << " of " << kRecords;
  for (const auto& [seq, offset] : tail_said) {
    ASSERT_TRUE(offset_of_seq.contains(seq)) << "the tail acknowledged seq " << seq << " nobody published";
    EXPECT_EQ(offset, offset_of_seq[seq]) << "seq " << seq;
  }
  RecordProperty("tail_acked", static_cast<int>(tail_said.size()));
}

// A tail that leaves the chain without its connections breaking (cut off:
// silent) keeps the publisher's watch open; the publisher notices that only
// the head acknowledges and moves its watch to the new tail.
TEST_F(ChainE2E, PublisherMovesItsWatchOffASilentOldTail) {
  configure("moving", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "moving", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  auto watchers = [&](int node) -> std::uint32_t {
    for (const auto& p : brokers_[node]->stats().partitions) {
      if (p.channel == "moving") return p.replica.watchers;
    }
    return 0;
  };
  auto wait_watchers = [&](int node, std::uint32_t want) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (watchers(node) != want && std::chrono::steady_clock::now() < deadline) {
      pub.value()->poll();
      std::this_thread::sleep_for(1ms);
    }
    return watchers(node) == want;
  };
  ASSERT_TRUE(wait_watchers(2, 1)) << "the publisher did not watch the tail";
  // Node 2 is dropped from the chain but never told: its sessions stay open.
  configure("moving", 0, 1, {0, 1}, 2);
  int acked = 0;
  for (int i = 0; i < 3000; ++i) {
    while (pub.value()->publish_to(0, bytes("m" + std::to_string(i)), [&](const PublishResult& r) {
      if (r.status == PublishStatus::ok) ++acked;
    }) != client::ErrorCode::ok) {
      pub.value()->poll();
    }
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(acked, 3000);
  EXPECT_TRUE(wait_watchers(1, 1)) << "the watch did not move to the new tail";
  ASSERT_EQ(brokers_[2]->stats().partitions.size(), 1u);
  EXPECT_EQ(brokers_[2]->stats().partitions[0].epoch, 1u) << "node 2 was reconfigured: not a silent old tail";
}

TEST_F(ChainE2E, UnknownChannelAndOversizedRecordsAreClearErrors) {
  configure("small", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto missing = Publisher::create(routes_, "no-such-channel", po);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no-such-channel"), std::string::npos);
  auto pub = Publisher::create(routes_, "small", po);
  ASSERT_TRUE(pub.ok());
  std::string big(kSegment, 'b');
  EXPECT_EQ(pub.value()->publish_to(0, bytes(big), nullptr), client::ErrorCode::too_large);
  auto f = pub.value()->publish({}, bytes("fine"));
  ASSERT_TRUE(pub.value()->flush(10s));
  EXPECT_EQ(f.get().status, PublishStatus::ok);
}

// A client's hello goes out the moment its connect returns. The broker posts
// its receives before it accepts the connection, so no hello ever waits on
// RNR retries (a device may limit them; rdma_rxe counts the NAKs it sends).
TEST_F(ChainE2E, HellosNeverWaitOnRnrRetries) {
  configure("rnr", 0, 1, {0, 1, 2}, 1);
  const auto rnr_before = test::rnr_naks_sent();
  auto provider = fabric::Provider::open(provider_spec());
  ASSERT_TRUE(provider.ok()) << provider.error().message;
  for (int i = 0; i < 20; ++i) {
    chain::wire::PublisherHello hello{};
    hello.ref.set("no-such-channel", 0, 1);
    auto d = chain::Link::dial<chain::wire::PublisherWelcome>(*provider.value(),
                                                              brokers_[0]->fabric_address(), hello, 5000ms);
    ASSERT_TRUE(d.welcome) << "hello " << i << ": " << d.error.message;
    EXPECT_EQ(d.welcome->status, chain::wire::Status::unknown_channel);
  }
  if (!rnr_before)
    GTEST_SKIP() << "no RNR counter for provider " << provider_spec() << " (verbs on rxe has one)";
  EXPECT_EQ(test::rnr_naks_sent().value_or(0) - *rnr_before, 0u) << "hellos met no posted receive";
}

}  // namespace
}  // namespace catena
