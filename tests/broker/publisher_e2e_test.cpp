// Publisher sessions against a real chain (chain_e2e_fixture.hpp): a
// restarted producer id is new data and fences the old instance, records
// failed after the retry timeout do not wedge the sequence, and the tail
// acknowledges watchers (moving off a silent old tail).
#include <chrono>
#include <future>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catena/chain/commit_watch.hpp>
#include <catena/chain/publish.hpp>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

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
      ASSERT_EQ(r.status, PublishStatus::ok) << client::to_string(r.status);
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

// publish(key, payload).get() drives the publisher itself: no poll() or
// flush() anywhere, and each record gets the next offset.
TEST_F(ChainE2E, PublishFutureGetPollsUntilTheAck) {
  configure("fut", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "fut", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  for (std::uint64_t i = 0; i < 10; ++i) {
    const auto r = pub.value()->publish(bytes("k"), bytes("f" + std::to_string(i))).get();
    ASSERT_EQ(r.status, PublishStatus::ok) << client::to_string(r.status);
    EXPECT_EQ(r.offset, i);
    EXPECT_EQ(r.sequence, i);
    EXPECT_EQ(r.partition, 0u);
  }
  // Several in flight, waited for in reverse: get() on the last resolves
  // the earlier ones on the way (ready() without polling).
  std::vector<PublishFuture> futures;
  for (int i = 10; i < 15; ++i) futures.push_back(pub.value()->publish({}, bytes("f" + std::to_string(i))));
  EXPECT_EQ(futures.back().wait_for(10s), std::future_status::ready);
  for (std::size_t i = futures.size(); i-- > 0;) {
    ASSERT_TRUE(futures[i].ready()) << i;
    const auto r = futures[i].get();
    EXPECT_EQ(r.status, PublishStatus::ok);
    EXPECT_EQ(r.offset, 10 + i);
    EXPECT_FALSE(futures[i].valid());
  }
  EXPECT_EQ(PublishFuture().get().status, PublishStatus::invalid_argument);
  const auto got = read_all(routes_, "fut", 15);
  ASSERT_EQ(got.size(), 15u);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].second, "f" + std::to_string(i));
}

// A partition that cannot be reached: get() answers unavailable once the
// retry timeout has passed instead of waiting forever; wait_for() before
// then times out.
TEST_F(ChainE2E, PublishFutureOfAnUnreachablePartitionFailsAfterTheRetryTimeout) {
  configure("unreach", 0, 1, {0}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.retry_timeout = 400ms;
  po.connect_timeout = 200ms;
  std::vector<ClientEvent> events;
  po.on_event = [&](const ClientEvent& e) { events.push_back(e); };
  auto pub = Publisher::create(routes_, "unreach", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  ASSERT_EQ(pub.value()->publish({}, bytes("reached")).get().status, PublishStatus::ok);
  // The route names a node nobody runs, and the head drops the partition.
  Route ghost{"unreach", 0, 2, {{"ghost", "127.0.0.1:1"}}, 0, {}};
  routes_.set(ghost, 1, kSegment);
  ASSERT_EQ(brokers_[0]->fence("unreach", 0, 1).status, broker::ConfigureStatus::applied);
  const auto start = std::chrono::steady_clock::now();
  auto f = pub.value()->publish({}, bytes("lost"));
  EXPECT_EQ(f.wait_for(50ms), std::future_status::timeout);
  EXPECT_TRUE(f.valid());
  const auto r = f.get();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, PublishStatus::unavailable) << client::to_string(r.status);
  EXPECT_EQ(r.error(), client::ErrorCode::unavailable);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 10s);
  // The application was told, once: the partition became unavailable.
  int unavailable = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e.partition, 0u);
    if (e.kind == ClientEvent::Kind::partition_unavailable) {
      ++unavailable;
      EXPECT_NE(e.message.find("1 pending records failed"), std::string::npos) << e.message;
    }
  }
  EXPECT_EQ(unavailable, 1);
}

// A record published while earlier ones still await their acks lingers
// like one published on an idle partition: from its own arrival, not from
// the first record of the partition's busy spell (a publisher under load is
// never idle, and every poll sent what one publish had staged: one write per
// record per partition, whatever the linger).
TEST_F(ChainE2E, ARecordPublishedWhileOthersAwaitAcksStillLingers) {
  configure("linger", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.linger = std::chrono::milliseconds(300);
  po.max_batch_bytes = 1024;  // a record this large goes out at once
  auto created = Publisher::create(routes_, "linger", po);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& pub = *created.value();
  // The first record connects the partition; it and its ack out of the way,
  // the next big record is sent as it is staged, and stays unacknowledged
  // until the publisher polls.
  ASSERT_EQ(pub.publish({}, bytes(std::string(2048, 'w'))).get().status, PublishStatus::ok);
  auto big = pub.publish({}, bytes(std::string(2048, 'a')));
  std::this_thread::sleep_for(400ms);  // longer than the linger since `big`
  const auto staged = std::chrono::steady_clock::now();
  auto small = pub.publish({}, bytes("b"));
  // For the next 150 ms of polling, `big` is acknowledged and `small` waits.
  while (std::chrono::steady_clock::now() - staged < 150ms) {
    pub.poll();
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(big.ready());
  EXPECT_FALSE(small.ready()) << "sent before its linger, on the first poll";
  const auto r = small.get();
  const auto waited = std::chrono::steady_clock::now() - staged;
  ASSERT_EQ(r.status, PublishStatus::ok);
  EXPECT_EQ(r.offset, 2u);
  EXPECT_GE(waited, 300ms);
  EXPECT_EQ(big.get().offset, 1u);
}

// A future outliving its publisher with the record unresolved answers
// unavailable without touching the destroyed publisher.
TEST_F(ChainE2E, PublishFutureOrphanedByItsPublisherAnswersUnavailable) {
  configure("orphan", 0, 1, {0}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.linger = std::chrono::seconds(10);  // nothing leaves before the publisher goes
  po.max_batch_bytes = 1u << 20;
  PublishFuture f;
  {
    auto pub = Publisher::create(routes_, "orphan", po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    f = pub.value()->publish({}, bytes("never-sent"));
    ASSERT_FALSE(f.ready());
  }
  EXPECT_EQ(f.wait_for(1s), std::future_status::ready);
  EXPECT_EQ(f.get().status, PublishStatus::unavailable);
}

// Records published with a key and headers reach the subscriber with
// exactly them, beside records published without (key and headers empty),
// in order; a key or header over its limit is refused before anything is sent.
TEST_F(ChainE2E, KeysAndHeadersReachTheSubscriberExactly) {
  configure("attrs", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "attrs", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  struct Sent {
    std::string key;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string payload;
    bool with_attributes = false;
  };
  std::vector<Sent> sent;
  for (int i = 0; i < 12; ++i) {
    Sent r;
    r.payload = "p" + std::to_string(i);
    r.with_attributes = i % 3 != 2;
    if (r.with_attributes) {
      r.key = i % 4 == 0 ? "" : "key-" + std::to_string(i);
      for (int j = 0; j < i % 4; ++j)
        r.headers.emplace_back("h" + std::to_string(j), std::string(static_cast<std::size_t>(i), '\0') + "v");
    }
    sent.push_back(r);
  }
  sent[1].headers.emplace_back("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const Sent& r = sent[i];
    PublishResult res;
    if (r.with_attributes) {
      std::vector<HeaderField> hs;
      for (const auto& [n, v] : r.headers) hs.push_back({n, v});
      res = pub.value()->publish(Record{bytes(r.key), hs, bytes(r.payload)}).get();
    } else {
      res = pub.value()->publish(bytes("partition-key-not-stored"), bytes(r.payload)).get();
    }
    ASSERT_EQ(res.status, PublishStatus::ok) << i;
    EXPECT_EQ(res.offset, i);
  }
  const std::string too_long(chain::limits::kMaxRecordKeyBytes + 1, 'k');
  EXPECT_EQ(pub.value()->publish(Record{bytes(too_long), {}, bytes("x")}, nullptr),
            client::ErrorCode::invalid_argument);
  const HeaderField nameless[] = {{"", "v"}};
  EXPECT_EQ(pub.value()->publish(Record{{}, nameless, bytes("x")}).get().status,
            PublishStatus::invalid_argument);

  SubscriberOptions so;
  so.provider = provider_spec();
  auto sub = Subscriber::create(routes_, "attrs", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<Sent> got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < sent.size() && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      Sent r;
      r.key.assign(reinterpret_cast<const char*>(m.key.data()), m.key.size());
      for (const HeaderField& h : m.headers) r.headers.emplace_back(h.name, h.value);
      r.payload.assign(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      got.push_back(std::move(r));
    });
  }
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].payload, sent[i].payload) << i;
    EXPECT_EQ(got[i].key, sent[i].key) << i;  // the plain form's key only partitions
    EXPECT_EQ(got[i].headers, sent[i].headers) << i;
  }
}

// The head's broker dies and the chain goes on without it at a new epoch:
// the publisher and a subscriber reading from the head each tell the
// application, for that partition, that the link went down, the route
// changed (those two in either order) and they reconnected, once each, and nothing
// about the partition that did not change.
TEST_F(ChainE2E, AHeadKillGivesDisconnectedRouteChangedAndReconnectedEvents) {
  configure("ev", 0, 2, {0, 1, 2}, 1);
  configure("ev", 1, 2, {1, 2}, 1);  // not on node 0: untouched by the kill
  std::vector<ClientEvent> pub_events;
  std::vector<ClientEvent> sub_events;
  PublisherOptions po;
  po.provider = provider_spec();
  po.on_event = [&](const ClientEvent& e) { pub_events.push_back(e); };
  auto pub = Publisher::create(routes_, "ev", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  SubscriberOptions so;
  so.provider = provider_spec();
  so.read_from = SubscriberOptions::ReadFrom::head;
  so.partitions = {0};
  so.on_event = [&](const ClientEvent& e) { sub_events.push_back(e); };
  auto sub = Subscriber::create(routes_, "ev", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::string> got;
  const auto read_until = [&](std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      sub.value()->poll([&](const Message& m) {
        got.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      });
    }
  };
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(pub.value()->publish_to(0, bytes("a" + std::to_string(i)), nullptr), client::ErrorCode::ok);
  }
  ASSERT_TRUE(pub.value()->flush(10s));
  read_until(5);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_TRUE(pub_events.empty()) << "events before any change: " << pub_events.front().message;
  EXPECT_TRUE(sub_events.empty()) << "events before any change: " << sub_events.front().message;

  brokers_[0].reset();  // the head's process is gone
  configure("ev", 0, 2, {1, 2}, 2);
  int acked = 0;
  for (int i = 5; i < 10; ++i) {
    ASSERT_EQ(
        pub.value()->publish_to(0, bytes("a" + std::to_string(i)),
                                [&](const PublishResult& r) { acked += r.status == PublishStatus::ok; }),
        client::ErrorCode::ok);
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  ASSERT_EQ(acked, 5);
  read_until(10);
  ASSERT_EQ(got.size(), 10u);
  // One more poll each: a reconnect seen as the last records came is told there.
  pub.value()->poll();
  sub.value()->poll([](const Message&) {});

  const auto kinds_of = [](const std::vector<ClientEvent>& events, std::uint32_t partition) {
    std::vector<ClientEvent::Kind> kinds;
    for (const auto& e : events) {
      EXPECT_EQ(e.partition, partition) << "an event for a partition the kill did not touch: " << e.message;
      EXPECT_FALSE(e.message.empty());
      if (e.kind != ClientEvent::Kind::ack_stalled) kinds.push_back(e.kind);
    }
    return kinds;
  };
  using K = ClientEvent::Kind;
  // The broken connection and the new route are two pieces of news that
  // race: on soft the reset comes first, on verbs (rdma_rxe) the route can
  // (a dead peer's queue pair errors only when a post or a timeout finds
  // it). Either order, each once, and the reconnect after both.
  const auto in_order = [](std::vector<K> kinds) {
    if (kinds.size() == 3 && kinds[0] == K::route_changed && kinds[1] == K::disconnected)
      std::swap(kinds[0], kinds[1]);
    return kinds;
  };
  const std::vector<K> want = {K::disconnected, K::route_changed, K::reconnected};
  std::string pub_text, sub_text;
  for (const auto& e : pub_events) pub_text += std::string(to_string(e.kind)) + ": " + e.message + "\n";
  for (const auto& e : sub_events) sub_text += std::string(to_string(e.kind)) + ": " + e.message + "\n";
  EXPECT_EQ(in_order(kinds_of(pub_events, 0)), want) << pub_text;
  EXPECT_EQ(in_order(kinds_of(sub_events, 0)), want) << sub_text;
  for (const auto* events : {&pub_events, &sub_events}) {
    for (const auto& e : *events) {
      if (e.kind == K::route_changed) {
        EXPECT_NE(e.message.find("1 -> 2"), std::string::npos) << e.message;
      }
    }
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], "a" + std::to_string(i));
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
  // A ring that never grows: a grow's new session opens a newer watch of
  // producer 777, which would take the acks from ours.
  po.ring_bytes = chain::kMinRingBytes;
  auto pub = Publisher::create(routes_, "watch", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  producer_epoch = pub.value()->producer_epoch();
  // Its first record brings up the partition's session, and then its own
  // watch of the tail, before ours.
  ASSERT_EQ(pub.value()->publish_to(0, bytes("first"), nullptr), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(10s));
  const auto watched = [&] {
    for (const auto& p : brokers_[2]->stats().partitions) {
      if (p.channel == "watch") return p.replica.watchers;
    }
    return std::uint32_t{0};
  };
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       watched() == 0 && std::chrono::steady_clock::now() < until;) {
    pub.value()->poll();
  }
  ASSERT_EQ(watched(), 1u) << "the publisher did not watch the tail";
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
  // The partition's session (and the watch) come up with its first record.
  ASSERT_EQ(pub.value()->publish_to(0, bytes("first"), nullptr), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(10s));
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

}  // namespace
}  // namespace catena::test
