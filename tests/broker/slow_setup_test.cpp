// Chain links when connection setup is slow. rdma_cm on an emulated or busy
// host takes ~300 ms to connect; a broker re-checks its successor link every
// 200 ms. Every broker here runs on a fault-injecting provider that delays
// each connect by 300 ms (or holds each accepted connection 300 ms before
// the acceptor sees it): the links must come up once and stay up, with no
// failure report and no second connect, and the data must arrive intact.
#include <chrono>
#include <gtest/gtest.h>
#include <map>
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

enum class SlowStep { connect, accept };

class SlowSetup : public ::testing::TestWithParam<SlowStep> {
 protected:
  static constexpr std::uint32_t kSegment = 256u << 10;
  static constexpr auto kSetupDelay = 300ms;

  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      auto inner = fabric::Provider::open(provider_spec());
      ASSERT_TRUE(inner.ok()) << inner.error().message;
      auto faults = std::make_shared<fabric::FaultInjector>();
      if (GetParam() == SlowStep::connect) {
        faults->set_connect_delay(kSetupDelay);
      } else {
        faults->set_accept_delay(kSetupDelay);
      }
      broker::BrokerConfig cfg;
      cfg.node_id = "node-" + std::to_string(i);
      cfg.fabric_listen = test::listen_address();
      cfg.slot_count = 4;
      auto b = broker::Broker::start(
          cfg, std::make_unique<fabric::FaultProvider>(std::move(inner.value()), faults));
      ASSERT_TRUE(b.ok()) << b.error().message;
      brokers_.push_back(std::move(b.value()));
      faults_.push_back(std::move(faults));
    }
  }

  // Configures the chain node-0 -> node-1 -> node-2 at `epoch`, tail first,
  // so each replica's successor already holds the partition when it dials:
  // every connect is answered ok and one connect per link is enough.
  void configure_chain(std::uint64_t epoch) {
    Route route{"slow", 0, epoch, {}, 0, {}};
    for (auto& b : brokers_) route.replicas.push_back({b->node_id(), b->fabric_address()});
    for (int pos = 2; pos >= 0; --pos) {
      const auto p = static_cast<std::size_t>(pos);
      chain::ReplicaConfig rc;
      rc.channel = "slow";
      rc.epoch = epoch;
      rc.position = static_cast<std::uint32_t>(pos);
      rc.chain_length = 3;
      if (pos > 0) rc.predecessor_node = route.replicas[p - 1].node_id;
      if (pos < 2) {
        rc.successor_node = route.replicas[p + 1].node_id;
        rc.successor_addr = route.replicas[p + 1].fabric_addr;
      }
      rc.head_addr = route.replicas[0].fabric_addr;
      rc.log.segment_bytes = kSegment;
      rc.log.ttl_ns = 60'000'000'000ull;
      auto r = brokers_[p]->configure(rc);
      ASSERT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
    }
    routes_.set(route, 1, kSegment);
  }

  bool links_up() {
    auto s = [&](int i) { return brokers_[static_cast<std::size_t>(i)]->stats().partitions; };
    auto p0 = s(0), p1 = s(1), p2 = s(2);
    return p0.size() == 1 && p1.size() == 1 && p2.size() == 1 && p0[0].replica.successor_connected &&
           p1[0].replica.predecessor_connected && p1[0].replica.successor_connected &&
           p2[0].replica.predecessor_connected;
  }

  // Every failure report any broker made so far.
  std::vector<std::string> suspects() {
    std::vector<std::string> all;
    for (auto& b : brokers_) {
      for (auto& r : b->take_link_reports())
        all.push_back(b->node_id() + " reports " + r.suspect + ": " + r.reason);
    }
    return all;
  }

  std::vector<std::shared_ptr<fabric::FaultInjector>> faults_;
  std::vector<std::unique_ptr<broker::Broker>> brokers_;
  StaticRoutes routes_;
};

::testing::AssertionResult no_reports(const std::vector<std::string>& reports) {
  if (reports.empty()) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure() << reports.size() << " failure reports:";
  for (const auto& s : reports) r << "\n  " << s;
  return r;
}

TEST_P(SlowSetup, LinksSettleWithOneConnectEachAndNoFailureReport) {
  configure_chain(1);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!links_up() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(links_up()) << "chain links did not come up within 10 s";

  // Watch for several of the broker's 200 ms link checks: a second connect
  // would replace the first link at the successor and kill both.
  std::vector<std::string> reports;
  for (int i = 0; i < 15; ++i) {
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(links_up()) << "a chain link dropped " << (i + 1) * 100 << " ms after settling";
    for (auto& s : suspects()) reports.push_back(std::move(s));
  }
  EXPECT_TRUE(no_reports(reports));
  EXPECT_EQ(faults_[0]->counters().connects, 1u) << "head dialled its successor more than once";
  EXPECT_EQ(faults_[1]->counters().connects, 1u) << "middle dialled its successor more than once";
  EXPECT_EQ(faults_[2]->counters().connects, 0u) << "the tail has no successor";

  // Data still goes through the settled chain, in order and intact.
  constexpr int kRecords = 2000;
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "slow", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<std::uint64_t, std::string> acked;
  int refused = 0;
  for (int i = 0; i < kRecords; ++i) {
    std::string payload = "slow-" + std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'y');
    while (pub.value()->publish_to(0, bytes(payload), [&, payload](const PublishResult& r) {
      if (r.status == PublishStatus::ok) {
        EXPECT_TRUE(acked.emplace(r.offset, payload).second) << "offset reused: " << r.offset;
      } else {
        ++refused;
      }
    }) != client::ErrorCode::ok) {
      pub.value()->poll();
    }
  }
  ASSERT_TRUE(pub.value()->flush(30s));
  EXPECT_EQ(refused, 0);
  ASSERT_EQ(acked.size(), static_cast<std::size_t>(kRecords));

  SubscriberOptions so;
  so.provider = provider_spec();
  so.read_from = SubscriberOptions::ReadFrom::tail;
  auto sub = Subscriber::create(routes_, "slow", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::pair<std::uint64_t, std::string>> got;
  const auto read_deadline = std::chrono::steady_clock::now() + 30s;
  while (got.size() < acked.size() && std::chrono::steady_clock::now() < read_deadline) {
    if (sub.value()->poll([&](const Message& m) {
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
  std::this_thread::sleep_for(50ms);  // stats are a snapshot the data-plane thread refreshes
  for (auto& b : brokers_) {
    EXPECT_EQ(b->stats().partitions[0].replica.commit_offset, static_cast<std::uint64_t>(kRecords))
        << b->node_id();
  }
  EXPECT_TRUE(no_reports(suspects()));
  EXPECT_EQ(faults_[0]->counters().connects + faults_[1]->counters().connects, 2u) << "links reconnected";
}

INSTANTIATE_TEST_SUITE_P(Delayed, SlowSetup, ::testing::Values(SlowStep::connect, SlowStep::accept),
                         [](const ::testing::TestParamInfo<SlowStep>& info) {
                           return info.param == SlowStep::connect ? "Connect" : "Accept";
                         });

}  // namespace
}  // namespace catena
