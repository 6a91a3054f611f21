// A chain of three brokers end to end (chain_e2e_fixture.hpp): every
// acknowledged record is delivered exactly once, in order, with its offset
// and payload, on every replica, also while a replica is replaced
// mid-stream; bad channels and sizes are clear errors; hellos never wait on
// RNR retries.
#include <chrono>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

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
    ADD_FAILURE() << "notice " << client::to_string(n.status) << " at " << n.next_offset;
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

// A partition whose every segment still holds records within the ttl takes
// no more: the head holds the publisher's records back in its ring until
// the oldest segment expires. The publisher is told why (a log_full event
// naming the ttl), is not taken for a stalled head while the head says it
// holds them (no ack_stalled, no route re-reads), and loses nothing: once
// segments expire every record is appended, in order.
TEST_F(ChainE2E, APublisherHeldBackByAFullLogIsToldWhyAndLosesNothing) {
  constexpr std::uint64_t kTtlMs = 2000;
  configure("full", 0, 1, {0, 1, 2}, 1, kTtlMs);
  PublisherOptions po;
  po.provider = provider_spec();
  std::vector<ClientEvent> events;
  po.on_event = [&](const ClientEvent& e) { events.push_back(e); };
  auto pub = Publisher::create(routes_, "full", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  // 4 slots of at most 512 KiB: 2 MiB, about 60 records of 32 KiB within a ttl.
  constexpr int kRecords = 96;
  const std::string payload(32u << 10, 'f');
  std::map<int, PublishResult> results;
  for (int i = 0; i < kRecords; ++i) {
    for (;;) {
      const auto e = pub.value()->publish_to(0, bytes(payload),
                                             [&results, i](const PublishResult& r) { results[i] = r; });
      if (e == client::ErrorCode::ok) break;
      ASSERT_EQ(e, client::ErrorCode::backpressure);
      pub.value()->poll();
    }
  }
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), static_cast<std::size_t>(kRecords));
  for (int i = 0; i < kRecords; ++i) {
    ASSERT_EQ(results[i].status, PublishStatus::ok) << "record " << i;
    ASSERT_EQ(results[i].offset, static_cast<std::uint64_t>(i)) << "record " << i;
  }
  int held = 0;
  for (const auto& e : events) {
    EXPECT_NE(to_string(e.kind), "ack_stalled") << e.message;
    if (to_string(e.kind) != "log_full") continue;
    ++held;
    EXPECT_EQ(e.partition, 0u);
    EXPECT_NE(e.message.find("log is full"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("ttl 2000 ms"), std::string::npos) << e.message;
  }
  EXPECT_GE(held, 1) << "the publisher was never told why its records waited";
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
}  // namespace catena::test
