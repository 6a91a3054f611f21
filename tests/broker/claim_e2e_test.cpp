// Zero-copy publish (Publisher::try_claim, commit, abort) against a real
// chain (chain_e2e_fixture.hpp): claimed records arrive byte-exact, in
// order with publish()'s, with the offsets and sequences their acks named;
// an abort leaves no gap; the errors are publish()'s; a head lost while a
// claim is open is reconnected only after the claim is closed, and nothing
// is lost or garbled.
#include <chrono>
#include <cstring>
#include <gtest/gtest.h>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

// What a subscriber saw of one record.
struct Seen {
  std::uint64_t offset = 0;
  std::uint64_t sequence = 0;
  std::string payload;
  std::string key;
  std::vector<std::pair<std::string, std::string>> headers;
};

std::vector<Seen> read_seen(StaticRoutes& routes, const std::string& channel, std::uint32_t partition,
                            std::size_t count) {
  SubscriberOptions so;
  so.provider = provider_spec();
  so.partitions = {partition};
  auto sub = Subscriber::create(routes, channel, so);
  EXPECT_TRUE(sub.ok());
  std::vector<Seen> got;
  if (!sub.ok()) return got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      Seen s;
      s.offset = m.offset;
      s.sequence = m.sequence;
      s.payload.assign(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      s.key.assign(reinterpret_cast<const char*>(m.key.data()), m.key.size());
      for (const auto& h : m.headers) s.headers.emplace_back(h.name, h.value);
      got.push_back(std::move(s));
    });
  }
  return got;
}

// Bytes that differ at every position and from record to record.
std::string pattern(std::size_t n, std::uint32_t seed) {
  std::string s(n, '\0');
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

void fill_claim(Claim& c, const std::string& data) {
  ASSERT_EQ(c.buffer().size(), data.size());
  if (!data.empty()) std::memcpy(c.buffer().data(), data.data(), data.size());
}

// Claims (polling through backpressure) and fills.
Claim claim_filled(Publisher& pub, std::uint32_t partition, const std::string& data) {
  for (;;) {
    Claim c = pub.try_claim(partition, data.size());
    if (c) {
      fill_claim(c, data);
      return c;
    }
    EXPECT_EQ(c.error(), client::ErrorCode::backpressure);
    if (c.error() != client::ErrorCode::backpressure) return c;
    pub.poll();
  }
}

// Claimed records of 64 B and 64 KiB, a keyed one with headers, and
// copied ones, interleaved: each arrives byte-exact at the offset its ack
// named, in the order they were committed or published.
TEST_F(ChainE2E, ClaimedRecordsArriveByteExactInOrderWithPublishedOnes) {
  configure("claim", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "claim", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Publisher& p = *pub.value();
  std::vector<std::string> want;
  std::vector<PublishResult> acks;
  auto on_ack = [&acks](const PublishResult& r) { acks.push_back(r); };
  for (int round = 0; round < 4; ++round) {
    want.push_back("copied-" + std::to_string(round));
    ASSERT_EQ(p.publish_to(0, bytes(want.back()), on_ack), client::ErrorCode::ok);
    for (const std::size_t n : {std::size_t{64}, std::size_t{64} << 10, std::size_t{0}, std::size_t{13}}) {
      want.push_back(pattern(n, static_cast<std::uint32_t>(want.size())));
      Claim c = claim_filled(p, 0, want.back());
      ASSERT_TRUE(c);
      EXPECT_EQ(c.partition(), 0u);
      ASSERT_EQ(p.commit(c, on_ack), client::ErrorCode::ok);
      EXPECT_FALSE(c);
      EXPECT_TRUE(c.buffer().empty());
    }
  }
  // Keyed, with headers: placed by the key (one partition here), carried.
  const std::string key = "order-17";
  const std::vector<HeaderField> headers{{"traceparent", "00-abc-def-01"}, {"schema", "7"}};
  want.push_back(pattern(100, 99));
  {
    Claim c = p.try_claim(bytes(key), headers, want.back().size());
    ASSERT_TRUE(c) << client::to_string(c.error());
    fill_claim(c, want.back());
    ASSERT_EQ(p.commit(c, on_ack), client::ErrorCode::ok);
  }
  ASSERT_TRUE(p.flush(10s));
  ASSERT_EQ(acks.size(), want.size());
  for (std::size_t i = 0; i < acks.size(); ++i) {
    EXPECT_EQ(acks[i].status, PublishStatus::ok) << i;
    EXPECT_EQ(acks[i].offset, i);
    EXPECT_EQ(acks[i].sequence, i);
  }
  const auto got = read_seen(routes_, "claim", 0, want.size());
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].offset, i);
    EXPECT_EQ(got[i].sequence, i);
    EXPECT_EQ(got[i].payload, want[i]) << "record " << i << " of " << want[i].size() << " bytes";
  }
  EXPECT_EQ(got.back().key, key);
  ASSERT_EQ(got.back().headers.size(), 2u);
  EXPECT_EQ(got.back().headers[0], std::make_pair(std::string("traceparent"), std::string("00-abc-def-01")));
  EXPECT_EQ(got.back().headers[1], std::make_pair(std::string("schema"), std::string("7")));
  EXPECT_TRUE(got.front().key.empty());
}

// An abort, or a claim dropped without a commit, leaves no record and no
// gap: the next record takes the next offset and sequence, and the bytes
// written into the aborted claim never show up.
TEST_F(ChainE2E, AnAbortedClaimLeavesNoRecordAndNoGap) {
  configure("abort", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "abort", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Publisher& p = *pub.value();
  std::vector<PublishResult> acks;
  auto on_ack = [&acks](const PublishResult& r) { acks.push_back(r); };
  ASSERT_EQ(p.publish_to(0, bytes("first"), on_ack), client::ErrorCode::ok);
  {
    Claim c = claim_filled(p, 0, "aborted-one");
    p.abort(c);
    EXPECT_FALSE(c);
    EXPECT_EQ(p.commit(c, on_ack), client::ErrorCode::invalid_argument);  // closed
    p.abort(c);                                                           // closed: nothing
  }
  {
    Claim dropped = claim_filled(p, 0, "dropped-one");  // destroyed open: aborted
  }
  {
    // Moved from, then the target replaced: the first is aborted, the
    // moved-from one is empty.
    Claim a = claim_filled(p, 0, "moved-then-replaced");
    Claim b = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from claim is empty
    ASSERT_TRUE(b);
    b = Claim();
  }
  ASSERT_EQ(p.in_flight(), 1u);
  Claim c = claim_filled(p, 0, "second");
  ASSERT_EQ(p.commit(c, on_ack), client::ErrorCode::ok);
  ASSERT_EQ(p.publish_to(0, bytes("third"), on_ack), client::ErrorCode::ok);
  ASSERT_TRUE(p.flush(10s));
  ASSERT_EQ(acks.size(), 3u);
  for (std::uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(acks[i].status, PublishStatus::ok);
    EXPECT_EQ(acks[i].offset, i);
    EXPECT_EQ(acks[i].sequence, i);
  }
  const auto got = read_seen(routes_, "abort", 0, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "first");
  EXPECT_EQ(got[1].payload, "second");
  EXPECT_EQ(got[2].payload, "third");
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(brokers_[2]->stats().partitions[0].replica.end_offset, 3u);
}

// The errors: a second claim on a partition, publish to it meanwhile, no
// such partition, too large, a bad header, a ring with no room; and
// keyless records go round-robin past a claimed partition.
TEST_F(ChainE2E, ClaimErrorsAreClearAndLoseNothing) {
  configure("cerr", 0, 2, {0, 1}, 1);
  configure("cerr", 1, 2, {1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 64u << 10;                         // the smallest ring: frames up to 32 KiB
  po.linger = std::chrono::microseconds(1'000'000);  // nothing sent until flushed: the ring fills
  po.max_batch_bytes = 1u << 30;
  auto pub = Publisher::create(routes_, "cerr", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Publisher& p = *pub.value();
  std::vector<PublishResult> acks;
  auto on_ack = [&acks](const PublishResult& r) { acks.push_back(r); };

  EXPECT_EQ(p.try_claim(2, 10).error(), client::ErrorCode::invalid_argument);  // no partition 2
  EXPECT_EQ(p.try_claim(0, 40u << 10).error(), client::ErrorCode::too_large);  // over half the ring
  const std::string long_name(chain::limits::kMaxHeaderNameBytes + 1, 'n');
  const std::vector<HeaderField> bad{{long_name, "v"}};
  EXPECT_EQ(p.try_claim(bytes("k"), bad, 10).error(), client::ErrorCode::invalid_argument);
  const std::vector<HeaderField> unnamed{{"", "v"}};
  EXPECT_EQ(p.try_claim(bytes("k"), unnamed, 10).error(), client::ErrorCode::invalid_argument);

  Claim open = p.try_claim(0, 8);
  ASSERT_TRUE(open) << client::to_string(open.error());
  EXPECT_EQ(open.error(), client::ErrorCode::ok);
  EXPECT_EQ(p.try_claim(0, 8).error(), client::ErrorCode::invalid_argument);  // one per partition
  EXPECT_EQ(p.publish_to(0, bytes("x"), on_ack), client::ErrorCode::invalid_argument);
  // Keyless records go round-robin past the claimed partition.
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(p.publish({}, bytes("rr" + std::to_string(i)), on_ack), client::ErrorCode::ok);
  // Another partition's claim is its own.
  Claim other = claim_filled(p, 1, "other-partition");
  ASSERT_TRUE(other);
  fill_claim(open, "open-0-8");
  ASSERT_EQ(p.commit(open, on_ack), client::ErrorCode::ok);
  ASSERT_EQ(p.commit(other, on_ack), client::ErrorCode::ok);
  EXPECT_EQ(p.commit(other, on_ack), client::ErrorCode::invalid_argument);  // closed already
  Claim none;
  EXPECT_EQ(p.commit(none, on_ack), client::ErrorCode::invalid_argument);

  // A ring with no room (nothing is sent while lingering): backpressure,
  // and the claim that found it leaves nothing behind.
  int staged = 0;
  client::ErrorCode last = client::ErrorCode::ok;
  for (int i = 0; i < 4 && last == client::ErrorCode::ok; ++i) {
    Claim c = p.try_claim(0, 30u << 10);
    last = c.error();
    if (!c) break;
    fill_claim(c, pattern(30u << 10, static_cast<std::uint32_t>(i)));
    ASSERT_EQ(p.commit(c, on_ack), client::ErrorCode::ok);
    ++staged;
  }
  EXPECT_EQ(last, client::ErrorCode::backpressure);
  EXPECT_GE(staged, 1);
  ASSERT_TRUE(p.flush(10s));
  Claim after = claim_filled(p, 0, pattern(30u << 10, 1000));  // room again once acked
  ASSERT_EQ(p.commit(after, on_ack), client::ErrorCode::ok);
  ASSERT_TRUE(p.flush(10s));

  // Every record acked ok, each partition's offsets dense in commit order.
  ASSERT_EQ(acks.size(), static_cast<std::size_t>(4 + 2 + staged + 1));
  std::uint64_t next[2] = {0, 0};
  for (const auto& r : acks) {
    EXPECT_EQ(r.status, PublishStatus::ok);
    ASSERT_LT(r.partition, 2u);
    EXPECT_EQ(r.offset, next[r.partition]++);
  }
  EXPECT_EQ(next[0], static_cast<std::uint64_t>(1 + staged + 1));  // open-0-8, the 30 KiB ones
  EXPECT_EQ(next[1], 5u);                                          // 4 round-robin, other-partition
  const auto p0 = read_seen(routes_, "cerr", 0, next[0]);
  ASSERT_EQ(p0.size(), next[0]);
  EXPECT_EQ(p0[0].payload, "open-0-8");
  for (int i = 0; i < staged; ++i)
    EXPECT_EQ(p0[1 + i].payload, pattern(30u << 10, static_cast<std::uint32_t>(i)));
  EXPECT_EQ(p0.back().payload, pattern(30u << 10, 1000));
  const auto p1 = read_seen(routes_, "cerr", 1, next[1]);
  ASSERT_EQ(p1.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p1[i].payload, "rr" + std::to_string(i));
  EXPECT_EQ(p1[4].payload, "other-partition");
}

// A random mix of publish, claim + commit, claim + abort and claims
// dropped open, with sizes from 0 to 60 KiB (wrapping the ring many times)
// and polls in between, checked against a model: the records committed or
// published, in that order, at dense offsets, byte-exact.
TEST_F(ChainE2E, ARandomMixOfClaimsAndPublishesMatchesTheModel) {
  configure("mix", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 128u << 10;
  po.linger = std::chrono::microseconds(50);
  auto pub = Publisher::create(routes_, "mix", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Publisher& p = *pub.value();
  std::mt19937 rng(20261203);
  std::vector<std::string> model;
  std::vector<PublishResult> acks;
  auto on_ack = [&acks](const PublishResult& r) { acks.push_back(r); };
  // Mostly small, one in 16 up to 60 KiB: ~1 MiB in all, within what the
  // fixture's replicas retain (2 MiB), wrapping the 128 KiB ring often.
  const auto size = [&rng]() -> std::size_t {
    const std::uint32_t kind = rng() % 16;
    if (kind < 5) return rng() % 16;
    if (kind < 10) return rng() % 512;
    if (kind < 15) return rng() % (4u << 10);
    return rng() % (60u << 10);
  };
  int aborted = 0;
  for (std::uint32_t op = 0; op < 600; ++op) {
    const std::string data = pattern(size(), op);
    switch (rng() % 5) {
      case 0:
        while (p.publish_to(0, bytes(data), on_ack) == client::ErrorCode::backpressure) p.poll();
        model.push_back(data);
        break;
      case 1: {
        Claim c = claim_filled(p, 0, data);
        ASSERT_TRUE(c);
        p.abort(c);
        ++aborted;
        break;
      }
      case 2: {
        Claim c = claim_filled(p, 0, data);  // dropped open
        ASSERT_TRUE(c);
        ++aborted;
        break;
      }
      default: {
        Claim c = claim_filled(p, 0, data);
        ASSERT_TRUE(c);
        if (rng() % 3 == 0) p.poll();  // acks and sends go on while a claim is open
        ASSERT_EQ(p.commit(c, on_ack), client::ErrorCode::ok);
        model.push_back(data);
        break;
      }
    }
    if (rng() % 8 == 0) p.poll();
  }
  ASSERT_TRUE(p.flush(20s));
  EXPECT_GT(aborted, 150);
  ASSERT_EQ(acks.size(), model.size());
  for (std::size_t i = 0; i < acks.size(); ++i) {
    ASSERT_EQ(acks[i].status, PublishStatus::ok) << i;
    ASSERT_EQ(acks[i].offset, i);
    ASSERT_EQ(acks[i].sequence, i);
  }
  const auto got = read_seen(routes_, "mix", 0, model.size());
  ASSERT_EQ(got.size(), model.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].offset, i);
    ASSERT_EQ(got[i].payload, model[i]) << "record " << i;
  }
}

// The head's broker dies while a claim is open and a record before it is
// unacknowledged. poll() goes on (it notices the loss and dials the new
// head) but takes the new head's welcome only once the claim is closed, so
// the bytes written after those polls land in the frame that is sent: both
// records arrive, in order, byte-exact, on the new chain.
TEST_F(ChainE2E, AHeadLostWhileAClaimIsOpenReconnectsAfterTheCommit) {
  configure("reco", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  std::vector<ClientEvent> events;
  po.on_event = [&](const ClientEvent& e) { events.push_back(e); };
  auto pub = Publisher::create(routes_, "reco", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Publisher& p = *pub.value();
  std::vector<PublishResult> acks;
  auto on_ack = [&acks](const PublishResult& r) { acks.push_back(r); };
  ASSERT_EQ(p.publish_to(0, bytes("before"), on_ack), client::ErrorCode::ok);
  ASSERT_TRUE(p.flush(10s));

  const std::string pending = pattern(3000, 1);
  const std::string claimed = pattern(5000, 2);
  brokers_[0].reset();  // the head's process is gone
  ASSERT_EQ(p.publish_to(0, bytes(pending), on_ack), client::ErrorCode::ok);
  Claim c = p.try_claim(0, claimed.size());
  ASSERT_TRUE(c) << client::to_string(c.error());
  std::memcpy(c.buffer().data(), claimed.data(), claimed.size() / 2);
  configure("reco", 0, 1, {1, 2}, 2);
  const auto deadline = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < deadline) p.poll();
  // Lost, and not reconnected while the claim is open.
  bool disconnected = false;
  for (const auto& e : events) {
    disconnected = disconnected || e.kind == ClientEvent::Kind::disconnected;
    EXPECT_NE(e.kind, ClientEvent::Kind::reconnected) << e.message;
  }
  EXPECT_TRUE(disconnected);
  EXPECT_EQ(acks.size(), 1u);
  std::memcpy(c.buffer().data() + claimed.size() / 2, claimed.data() + claimed.size() / 2,
              claimed.size() - claimed.size() / 2);
  ASSERT_EQ(p.commit(c, on_ack), client::ErrorCode::ok);
  ASSERT_TRUE(p.flush(20s));
  ASSERT_EQ(acks.size(), 3u);
  for (std::uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(acks[i].status, PublishStatus::ok) << client::to_string(acks[i].status);
    EXPECT_EQ(acks[i].offset, i);
  }
  p.poll();
  bool reconnected = false;
  for (const auto& e : events) reconnected = reconnected || e.kind == ClientEvent::Kind::reconnected;
  EXPECT_TRUE(reconnected);
  const auto got = read_seen(routes_, "reco", 0, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "before");
  EXPECT_EQ(got[1].payload, pending);
  EXPECT_EQ(got[2].payload, claimed);
}

// A channel alter (a shrink from 2 partitions to 1) while a claim is open:
// the publisher learns of it and raises its barrier, but switches to the
// new generation only once the claim is committed; the committed record,
// refused at the old generation, is sent again and stored above partition
// 0's marker, byte-exact.
TEST_F(ChainE2E, AChannelAlterSwitchWaitsForAnOpenClaim) {
  configure("calt", 1, 2, {1, 2}, 1);
  configure("calt", 0, 2, {0, 1}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto created = Publisher::create(routes_, "calt", po);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& p = *created.value();
  ASSERT_EQ(p.partitions(), 2u);
  const chain::MarkerSpec spec{1, 2, 1};
  const auto m0 = brokers_[0]->append_marker("calt", 0, 1, spec);
  ASSERT_EQ(m0.status, broker::ConfigureStatus::applied) << m0.message;
  const auto m1 = brokers_[1]->append_marker("calt", 1, 1, spec);
  ASSERT_EQ(m1.status, broker::ConfigureStatus::applied) << m1.message;

  const std::string claimed = pattern(2000, 5);
  Claim c = p.try_claim(0, claimed.size());
  ASSERT_TRUE(c) << client::to_string(c.error());
  std::vector<PublishResult> gone;
  ASSERT_EQ(p.publish_to(1, bytes("gone"), [&](const PublishResult& r) { gone.push_back(r); }),
            client::ErrorCode::ok);
  // Partition 1's head refuses it (remap): the barrier goes up...
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  client::ErrorCode other = client::ErrorCode::ok;
  while (std::chrono::steady_clock::now() < deadline) {
    p.poll();
    Claim probe = p.try_claim(1, 8);
    other = probe.error();
    if (other == client::ErrorCode::backpressure) break;
  }
  ASSERT_EQ(other, client::ErrorCode::backpressure) << "no barrier";
  // ...and stays up while the claim is open.
  for (auto until = std::chrono::steady_clock::now() + 300ms; std::chrono::steady_clock::now() < until;)
    p.poll();
  EXPECT_EQ(p.partitions(), 2u) << "switched under an open claim";
  EXPECT_TRUE(gone.empty());
  fill_claim(c, claimed);
  std::vector<PublishResult> acks;
  ASSERT_EQ(p.commit(c, [&](const PublishResult& r) { acks.push_back(r); }), client::ErrorCode::ok);
  ASSERT_TRUE(p.flush(20s));
  EXPECT_EQ(p.partitions(), 1u);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].status, PublishStatus::invalid_argument);  // publish_to a removed partition
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].status, PublishStatus::ok) << client::to_string(acks[0].status);
  EXPECT_EQ(acks[0].partition, 0u);
  EXPECT_GT(acks[0].offset, m0.state.offset);
  SubscriberOptions so;
  so.provider = provider_spec();
  so.partitions = {0};
  auto sub = Subscriber::create(routes_, "calt", so);
  ASSERT_TRUE(sub.ok());
  std::optional<std::string> at;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!at && std::chrono::steady_clock::now() < until) {
    sub.value()->poll([&](const Message& m) {
      if (m.offset == acks[0].offset)
        at = std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
    });
  }
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(*at, claimed);
}

}  // namespace
}  // namespace catena::test
