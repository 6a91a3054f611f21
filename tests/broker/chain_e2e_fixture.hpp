// The end-to-end chain tests' fixture: three brokers in one process (each
// with its own fabric provider, as separate nodes would have), a chain
// configured by hand through the same Broker::configure() the control plane
// uses, and real Publisher/Subscriber clients. The scenarios, by family:
// chain_e2e_test.cpp (delivery, a replica replaced mid-stream, errors,
// hellos), chain_epochs_test.cpp (leases, suspended replicas, rebuilt
// chains), publisher_e2e_test.cpp (producer epochs, resyncs, watches).
#pragma once

#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/wire.hpp>

#include "../test_env.hpp"

namespace catena::test {

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

// Reads partition 0 of `channel` from the tail until `count` records came.
inline std::vector<std::pair<std::uint64_t, std::string>> read_all(StaticRoutes& routes,
                                                                   const std::string& channel,
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
inline void publish_range(Publisher& pub, const std::string& prefix, int from, int n,
                          std::map<int, PublishResult>* results) {
  for (int i = from; i < from + n; ++i) {
    const std::string payload = prefix + std::to_string(i);
    while (pub.publish_to(0, bytes(payload), [results, i](const PublishResult& r) { (*results)[i] = r; }) !=
           client::ErrorCode::ok) {
      pub.poll();
    }
  }
}

// Waits until broker b's replica of the only partition committed `offset`,
// polling `pub` meanwhile if given (a partition's session comes up from
// poll(), with its first record).
inline bool committed(broker::Broker& b, std::uint64_t offset, Publisher* pub = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto st = b.stats();
    if (!st.partitions.empty() && st.partitions[0].replica.commit_offset >= offset) return true;
    if (pub != nullptr) pub->poll();
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

}  // namespace catena::test
