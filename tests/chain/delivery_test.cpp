// The delivery protocol (delivery.hpp), both halves in one thread over a
// real soft-provider connection: the replica's half writes frames from
// registered segment memory into the subscriber's ring; no replica, broker
// or process.
#include <chrono>
#include <gtest/gtest.h>
#include <optional>
#include <string>
#include <vector>

#include <catena/chain/delivery.hpp>
#include <catena/chain/link.hpp>
#include <catena/fabric/fabric.hpp>

#include "session_test_support.hpp"

namespace catena::chain {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

constexpr std::uint32_t kSlots = 4;

std::string payload_of(std::uint64_t i) {
  return "record-" + std::to_string(i) + std::string(900, 'x');
}

class DeliveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = fabric::Provider::open("soft");
    ASSERT_TRUE(p) << p.error().message;
    provider = std::move(p.value());
    auto l = provider->listen("127.0.0.1:0");
    ASSERT_TRUE(l) << l.error().message;
    listener = std::move(l.value());
    std::vector<std::span<std::byte>> spans;
    for (std::uint32_t i = 0; i < kSlots; ++i) {
      auto mr = provider->allocate(kSeg, fabric::kLocalWrite);
      ASSERT_TRUE(mr);
      spans.emplace_back(mr.value()->data(), kSeg);
      slots.push_back(std::move(mr.value()));
    }
    log = std::make_unique<PartitionLog>(spans, LogConfig{kSeg, 10'000'000'000ull, 1'000'000'000ull}, clock);
    auto sc = ScratchRing::create(*provider);
    ASSERT_TRUE(sc);
    scratch = std::move(sc.value());
    gate.epoch = kEpoch;
    gate.segment_bytes = kSeg;
  }

  DeliveryClient make_client(std::uint32_t ring_bytes = 2 * kSeg) {
    auto ring = provider->allocate(ring_bytes, fabric::kLocalWrite | fabric::kRemoteWrite);
    EXPECT_TRUE(ring);
    return DeliveryClient(std::move(ring.value()), ring_bytes);
  }

  void append(std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      RecordHeader h{};
      h.producer_id = 1;
      h.producer_epoch = 1;
      h.sequence = log->end_offset();
      const std::string p = payload_of(log->end_offset());
      std::uint64_t off = 0;
      ASSERT_EQ(log->append(h, {reinterpret_cast<const std::byte*>(p.data()), p.size()}, &off),
                AppendStatus::ok);
    }
  }

  // The subscriber dials with `hello`; the replica's half answers, on this
  // thread. On ok the client is attached at the welcome's start offset (or
  // at `attach_at`, to see what it does with records it did not expect).
  wire::SubscriberWelcome open(DeliveryClient& client, wire::SubscriberHello hello,
                               std::optional<std::uint64_t> attach_at = std::nullopt) {
    auto dialing = Link::Dialing<wire::SubscriberWelcome>::start(
        *provider, listener->address(), hello, 2000ms,
        [&](fabric::Endpoint& e, wire::SubscriberHello& h) { return client.grant(e, h); });
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    auto replica_end = accept_hello<wire::SubscriberHello>(*provider, *listener, deadline);
    EXPECT_TRUE(replica_end.hello);
    if (!replica_end.hello) return {};
    server.attach(std::move(replica_end.link), *replica_end.hello, gate, *log);
    auto d = finish_dial(dialing, deadline);
    EXPECT_TRUE(d.welcome);
    if (!d.welcome) return {};
    if (d.welcome->status == wire::Status::ok)
      client.attach(std::move(d.link), attach_at.value_or(d.welcome->start_offset));
    return *d.welcome;
  }

  struct Read {
    std::vector<std::uint64_t> offsets;
    std::vector<std::pair<wire::Status, std::uint64_t>> notices;
    std::vector<wire::NextChainHint> hints;  // each notice's
    DeliveryClient::Fault fault = DeliveryClient::Fault::none;
  };
  // Passes of both halves until `want` records came, a notice or a fault
  // (or `wait` passed).
  Read read(DeliveryClient& client, std::size_t want, std::chrono::milliseconds wait = 2000ms,
            std::uint64_t range_end = DeliveryGate::kOpenRange, std::uint64_t next_epoch = 0,
            std::string_view next_head = {}) {
    Read r;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (r.offsets.size() < want && r.notices.empty() && r.fault == DeliveryClient::Fault::none &&
           std::chrono::steady_clock::now() < deadline) {
      server.do_work(DeliverySource{*log, slots, scratch, range_end, next_epoch, next_head});
      client.do_work(
          64, &r.fault,
          [&](wire::Status st, std::uint64_t next, const wire::NextChainHint& hint) {
            r.notices.emplace_back(st, next);
            r.hints.push_back(hint);
          },
          [&](const RecordHeader& h, std::span<const std::byte> payload) {
            EXPECT_EQ(std::string(reinterpret_cast<const char*>(payload.data()), payload.size()),
                      payload_of(h.offset));
            r.offsets.push_back(h.offset);
          });
    }
    return r;
  }

  std::unique_ptr<fabric::Provider> provider;
  std::unique_ptr<fabric::Listener> listener;
  ManualClock clock;
  std::vector<std::unique_ptr<fabric::MemoryRegion>> slots;
  std::unique_ptr<PartitionLog> log;
  ScratchRing scratch;
  DeliveryGate gate;
  DeliveryServer server;
};

std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

TEST_F(DeliveryTest, DeliversCommittedRecordsInOrderAcrossRingWrapsAndSegments) {
  append(150);  // about 140 KiB: three segments, more than the ring holds
  log->set_commit_offset(100);
  DeliveryClient c = make_client();
  const auto w = open(c, c.hello("ch", 0, 0, wire::StartMode::earliest, 0));
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.start_offset, 0u);
  EXPECT_EQ(w.commit_offset, 100u);
  EXPECT_EQ(w.epoch, kEpoch);
  // Only what is committed; the ring wraps (credit flows back) on the way.
  const Read r = read(c, 100);
  EXPECT_EQ(r.fault, DeliveryClient::Fault::none);
  EXPECT_EQ(r.offsets, range(0, 100));
  EXPECT_TRUE(read(c, 1, 200ms).offsets.empty());
  log->set_commit_offset(150);
  EXPECT_EQ(read(c, 50).offsets, range(100, 150));
  EXPECT_EQ(c.expected(), 150u);
}

TEST_F(DeliveryTest, StartsAtTheOffsetOrTheCommitAsAsked) {
  append(20);
  log->set_commit_offset(20);
  DeliveryClient at = make_client();
  ASSERT_EQ(open(at, at.hello("ch", 0, 0, wire::StartMode::offset, 12)).status, wire::Status::ok);
  EXPECT_EQ(read(at, 8).offsets, range(12, 20));
  DeliveryClient latest = make_client();
  const auto w = open(latest, latest.hello("ch", 0, 0, wire::StartMode::latest, 0));
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.start_offset, 20u);
  append(3);
  log->set_commit_offset(23);
  EXPECT_EQ(read(latest, 3).offsets, range(20, 23));
}

TEST_F(DeliveryTest, RefusesWithTheFirstReasonThatApplies) {
  append(10);
  log->set_commit_offset(10);
  DeliveryClient c = make_client();
  EXPECT_EQ(open(c, c.hello("ch", 0, kEpoch + 1, wire::StartMode::earliest, 0)).status,
            wire::Status::not_ready);
  DeliveryClient small = make_client(kSeg / 2);  // cannot hold a segment's largest frame
  EXPECT_EQ(open(small, small.hello("ch", 0, 0, wire::StartMode::earliest, 0)).status,
            wire::Status::bad_request);
  EXPECT_EQ(open(c, c.hello("ch", 0, 0, wire::StartMode::offset, 11)).status, wire::Status::bad_request);
  gate.range_end = 8;
  gate.next_epoch = kEpoch + 1;
  gate.next_head = "10.0.0.9:7000";
  const auto moved = open(c, c.hello("ch", 0, 0, wire::StartMode::offset, 8));
  EXPECT_EQ(moved.status, wire::Status::moved);
  EXPECT_EQ(moved.start_offset, 8u);  // where the next chain takes over
  EXPECT_EQ(moved.next.epoch, kEpoch + 1);
  EXPECT_EQ(moved.next.head_addr(), "10.0.0.9:7000");
  gate.range_end = DeliveryGate::kOpenRange;
  gate.max_subscribers = 0;
  EXPECT_EQ(open(c, c.hello("ch", 0, 0, wire::StartMode::earliest, 0)).status,
            wire::Status::resource_exhausted);
  EXPECT_FALSE(c.connected());
  EXPECT_EQ(server.size(), 0u);
}

TEST_F(DeliveryTest, ASealedRangeEndsWithAMovedNoticeAtItsEnd) {
  // A replica that keeps the sealed range [0, 6) of a partition that moved on.
  append(6);
  log->set_commit_offset(6);
  DeliveryClient c = make_client();
  ASSERT_EQ(open(c, c.hello("ch", 0, 0, wire::StartMode::earliest, 0)).status, wire::Status::ok);
  const Read r = read(c, 6, 2000ms, /*range_end=*/6);
  EXPECT_EQ(r.offsets, range(0, 6));
  const Read end = read(c, 1, 2000ms, 6, kEpoch + 1, "10.0.0.9:7000");
  ASSERT_EQ(end.notices.size(), 1u);
  EXPECT_EQ(end.notices[0], std::make_pair(wire::Status::moved, std::uint64_t{6}));
  ASSERT_EQ(end.hints.size(), 1u);
  EXPECT_EQ(end.hints[0].epoch, kEpoch + 1) << "where the range after it is served";
  EXPECT_EQ(end.hints[0].head_addr(), "10.0.0.9:7000");
  EXPECT_TRUE(end.offsets.empty());
}

TEST_F(DeliveryTest, AnExpiredPositionIsToldAndNothingIsSkippedSilently) {
  append(150);  // three segments
  log->set_commit_offset(150);
  DeliveryClient c = make_client();
  ASSERT_EQ(open(c, c.hello("ch", 0, 0, wire::StartMode::offset, 0)).status, wire::Status::ok);
  // The first segments expire, and are reused, before the subscriber reads
  // them (a reader already there may finish a segment until it is reused).
  clock.advance(std::chrono::seconds(20));
  log->tick();
  append(200);
  log->set_commit_offset(log->end_offset());
  ASSERT_GT(log->start_offset(), 0u);
  const Read r = read(c, 1);
  ASSERT_EQ(r.notices.size(), 1u) << r.offsets.size() << " records came instead";
  EXPECT_EQ(r.notices[0].first, wire::Status::position_expired);
  EXPECT_EQ(r.notices[0].second, log->start_offset());
  EXPECT_TRUE(r.offsets.empty());
}

TEST_F(DeliveryTest, TheSubscriberRefusesAnOffsetOtherThanTheNext) {
  append(5);
  log->set_commit_offset(5);
  DeliveryClient c = make_client();
  // The replica sends from 2; the subscriber expects 0.
  ASSERT_EQ(open(c, c.hello("ch", 0, 0, wire::StartMode::offset, 2), /*attach_at=*/0).status,
            wire::Status::ok);
  const Read r = read(c, 1);
  EXPECT_EQ(r.fault, DeliveryClient::Fault::out_of_order);
  EXPECT_TRUE(r.offsets.empty());
  EXPECT_EQ(c.expected(), 0u);
}

}  // namespace
}  // namespace catena::chain
