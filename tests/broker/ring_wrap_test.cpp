// The frame rings end to end: a publisher's staging ring and subscribers'
// delivery rings small enough to wrap many times, first with frames that
// divide the rings exactly (every wrap falls on the ring's end, no pad),
// then with sizes that leave pads and implicit wraps. Every record is
// acknowledged once at its offset and delivered once, in order, intact,
// from the head and from the tail. The ring's rules themselves are specified
// in tests/chain/frame_ring_test.cpp.
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
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/record.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;

// Small segments and rings, many slots: 2 MiB retained per replica, and a
// delivery ring's end falls in the middle of a segment on most laps.
constexpr std::uint32_t kSegment = 64u << 10;
constexpr std::uint32_t kSlots = 32;
constexpr std::uint32_t kDeliveryRing = 2 * kSegment;

TEST(RingWrap, RecordsCrossWrappingRingsOnceInOrder) {
  std::vector<std::unique_ptr<broker::Broker>> brokers;
  for (int i = 0; i < 2; ++i) {
    broker::BrokerConfig cfg;
    cfg.node_id = "node-" + std::to_string(i);
    cfg.provider = test::provider_spec();
    cfg.fabric_listen = test::listen_address();
    cfg.slot_count = kSlots;
    cfg.grace_ms = 100;
    auto b = broker::Broker::start(cfg);
    ASSERT_TRUE(b.ok()) << b.error().message;
    brokers.push_back(std::move(b.value()));
  }
  Route route{"wrap", 0, 1, {}, 0, {}};
  for (auto& b : brokers) route.replicas.push_back({b->config().node_id, b->fabric_address()});
  for (std::uint32_t pos = 0; pos < 2; ++pos) {
    chain::ReplicaConfig rc;
    rc.channel = "wrap";
    rc.partition = 0;
    rc.epoch = 1;
    rc.position = pos;
    rc.chain_length = 2;
    if (pos == 0) {
      rc.successor_node = route.replicas[1].node_id;
      rc.successor_addr = route.replicas[1].fabric_addr;
    } else {
      rc.predecessor_node = route.replicas[0].node_id;
    }
    rc.head_addr = route.replicas[0].fabric_addr;
    rc.log.segment_bytes = kSegment;
    rc.log.ttl_ns = 60'000'000'000ull;
    auto r = brokers[pos]->configure(rc);
    ASSERT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
  }
  StaticRoutes routes;
  routes.set(route, 1, kSegment);

  PublisherOptions po;
  po.provider = test::provider_spec();
  po.ring_bytes = chain::kMinRingBytes;
  po.linger = 500us;  // batches: the chain commits, and the head delivers, runs of frames
  auto pub = Publisher::create(routes, "wrap", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;

  // Frames of 1 KiB divide both rings: the delivery ring's first lap ends
  // exactly at its end. Then sizes that do not, which need pads.
  const std::uint32_t exact = 1024 - sizeof(chain::RecordHeader);
  static_assert(kDeliveryRing % 1024 == 0 && chain::kMinRingBytes % 1024 == 0);
  std::vector<std::string> payloads;
  for (std::uint32_t i = 0; i < 8 * kDeliveryRing / 1024 + 40; ++i) {
    payloads.push_back(std::to_string(i) + std::string(exact - std::to_string(i).size(), 'e'));
  }
  for (std::uint32_t i = 0; i < 600; ++i)
    payloads.push_back("odd-" + std::to_string(i) + std::string(i * 37 % 900, 'o'));

  std::map<std::uint64_t, std::size_t> acked;  // offset -> index into payloads
  int failed = 0;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    for (;;) {
      auto e = pub.value()->publish_to(0, test::bytes(payloads[i]), [&, i](const PublishResult& r) {
        if (r.status == PublishStatus::ok) {
          EXPECT_TRUE(acked.emplace(r.offset, i).second) << "offset reused: " << r.offset;
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
  ASSERT_EQ(acked.size(), payloads.size());
  for (const auto& [offset, index] : acked) ASSERT_EQ(offset, index) << "acknowledged out of order";

  // Everything is committed before the subscribers come, and they take 40
  // records per poll (40 KiB, credit each time) and pause: the head
  // delivers into whatever each credit frees, so its runs often reach the
  // ring's end with free space and more frames of the same segment behind.
  for (auto from : {SubscriberOptions::ReadFrom::tail, SubscriberOptions::ReadFrom::head}) {
    SubscriberOptions so;
    so.provider = test::provider_spec();
    so.read_from = from;
    so.ring_bytes = kDeliveryRing;
    auto sub = Subscriber::create(routes, "wrap", so);
    ASSERT_TRUE(sub.ok()) << sub.error().message;
    std::vector<std::pair<std::uint64_t, std::string>> got;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (got.size() < payloads.size() && std::chrono::steady_clock::now() < deadline) {
      const int n = sub.value()->poll(
          [&](const Message& m) {
            got.emplace_back(m.offset,
                             std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
          },
          40);
      // Give the head a pass per credit, so it fills each freed part alone.
      std::this_thread::sleep_for(n == 0 ? 100us : 1ms);
    }
    ASSERT_EQ(got.size(), payloads.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, i) << "delivery out of order";
      ASSERT_EQ(got[i].second, payloads[i]) << "payload mismatch at offset " << i;
    }
  }
  // Nothing was recovered by reconnecting: a write that overran a ring
  // would have broken the connection, and the clients report that.
  EXPECT_TRUE(routes.unreachable_reports().empty()) << routes.unreachable_reports().front();
}

}  // namespace
}  // namespace catena
