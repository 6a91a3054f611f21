// The publish protocol (publish.hpp), both halves in one thread over a real
// soft-provider connection: the publisher's half writes frames into the
// head's ring, the head's half appends them to a log and acknowledges what
// the commit covers; no replica, broker or process.
#include <chrono>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <catena/chain/delivery.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/fabric/fabric.hpp>

#include "session_test_support.hpp"

namespace catena::chain {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

constexpr std::uint64_t kProducer = 42;
constexpr std::uint32_t kRing = 64 << 10;

using Resolved = std::tuple<std::uint64_t, wire::Status, std::uint64_t>;  // seq, status, offset

class PublishTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = fabric::Provider::open("soft");
    ASSERT_TRUE(p) << p.error().message;
    provider = std::move(p.value());
    auto l = provider->listen("127.0.0.1:0");
    ASSERT_TRUE(l) << l.error().message;
    listener = std::move(l.value());
    gate.epoch = kEpoch;
    gate.head = true;
    gate.head_addr = "10.0.0.1:7000";
    gate.segment_bytes = kSeg;
    gate.budget = &budget;
  }

  PublishClient make_client(std::uint32_t window = 64) {
    auto mirror = provider->allocate(kRing, fabric::kLocalWrite);
    EXPECT_TRUE(mirror);
    return PublishClient(std::move(mirror.value()), kRing, window);
  }

  // The publisher says hello with `producer_epoch`; the head's half answers
  // on this thread. On ok the client is attached (and resends its pending
  // records).
  wire::PublisherWelcome open(PublishClient& client, std::uint64_t producer_epoch = 1,
                              std::uint64_t hello_epoch = kEpoch, std::uint64_t generation = 0) {
    const auto hello =
        PublishClient::hello("ch", 0, hello_epoch, kProducer, producer_epoch, kRing, generation);
    auto dialing =
        Link::Dialing<wire::PublisherWelcome>::start(*provider, listener->address(), hello, 2000ms);
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    auto head_end = accept_hello<wire::PublisherHello>(*provider, *listener, deadline);
    EXPECT_TRUE(head_end.hello);
    if (!head_end.hello) return {};
    server.attach(*provider, std::move(head_end.link), *head_end.hello, gate, producers);
    auto d = finish_dial(dialing, deadline);
    EXPECT_TRUE(d.welcome);
    if (!d.welcome) return {};
    if (d.welcome->status == wire::Status::ok) {
      EXPECT_TRUE(client.attach(std::move(d.link), *d.welcome));
    }
    return *d.welcome;
  }

  void stage(PublishClient& client, int n, std::size_t payload_bytes = 0) {
    for (int i = 0; i < n; ++i) {
      RecordHeader h{};
      h.producer_id = kProducer;
      h.producer_epoch = 1;
      const std::string p = payload_bytes != 0 ? std::string(payload_bytes, 'x')
                                               : "payload-" + std::to_string(client.next_seq());
      ASSERT_EQ(client.stage(h, {reinterpret_cast<const std::byte*>(p.data()), p.size()}), fabric::Errc::ok);
    }
  }

  // Passes of both halves (the head appends and commits up to `commit`)
  // until `want` records resolved or an event came (or `wait` passed).
  std::vector<Resolved> run(PublishClient& client, std::size_t want, std::uint64_t commit,
                            PublishClient::Event* event, std::chrono::milliseconds wait = 2000ms,
                            bool sealed = false, RateBudget* rate = nullptr, std::uint64_t now_ns = 1) {
    std::vector<Resolved> out;
    *event = PublishClient::Event::none;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (out.size() < want && *event == PublishClient::Event::none &&
           std::chrono::steady_clock::now() < deadline) {
      client.flush();
      PublishTarget target{log, producers, now_ns, sealed, &corrupt, rate};
      server.consume(target);
      log.set_commit_offset(std::min(commit, log.end_offset()));
      server.acknowledge(log.commit_offset(), kEpoch);
      client.do_work(event, [&](std::uint64_t seq, wire::Status st, std::uint64_t off) {
        out.emplace_back(seq, st, off);
      });
    }
    return out;
  }

  std::unique_ptr<fabric::Provider> provider;
  std::unique_ptr<fabric::Listener> listener;
  ManualClock clock;
  Slots slots{4, kSeg};
  PartitionLog log{slots.spans(), LogConfig{kSeg, 60'000'000'000ull, 5'000'000'000ull}, clock};
  ProducerState producers;
  SessionBudget budget;
  // A tenant's share (tests that set gate.tenant_*): members before the
  // server, whose sessions give back to them when it is destroyed.
  SessionBudget tenant{kRing, 0};
  SessionSeats seats{1, 0};
  PublishGate gate;
  PublishServer server;
  std::uint64_t corrupt = 0;
};

TEST_F(PublishTest, RecordsAreAcknowledgedInOrderOnceTheCommitCoversTheirRun) {
  PublishClient c = make_client();
  const auto w = open(c);
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.ring_bytes, kRing);
  EXPECT_EQ(w.next_sequence, 0u);
  EXPECT_EQ(budget.ring_bytes_used, kRing);
  stage(c, 10);
  PublishClient::Event ev{};
  // Appended at once as one run, acknowledged only once the commit covers
  // the whole run.
  EXPECT_TRUE(run(c, 10, 4, &ev, 300ms).empty());
  EXPECT_EQ(log.end_offset(), 10u);
  const auto all = run(c, 10, 10, &ev);
  ASSERT_EQ(all.size(), 10u);
  for (std::uint64_t i = 0; i < 10; ++i) EXPECT_EQ(all[i], Resolved(i, wire::Status::ok, i));
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_EQ(corrupt, 0u);
}

// A record's key and headers are stored with it; a record whose attributes
// block does not decode is refused with `corrupt` and nothing is stored.
TEST_F(PublishTest, TheHeadStoresAttributesAndRefusesAMalformedBlock) {
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);
  RecordHeader h{};
  h.producer_id = kProducer;
  h.producer_epoch = 1;
  const std::string key = "user-9";
  const std::string payload = "body";
  const HeaderField hs[] = {{"schema", "3"}};
  const Attributes a{{reinterpret_cast<const std::byte*>(key.data()), key.size()}, hs};
  std::size_t block = 0;
  ASSERT_EQ(attributes_size(a, &block), AttributesCheck::ok);
  ASSERT_EQ(c.stage(h, a, block, {reinterpret_cast<const std::byte*>(payload.data()), payload.size()}),
            fabric::Errc::ok);
  // A frame that claims a block: a key of 9 bytes in a region of 6.
  RecordHeader bad = h;
  bad.flags = kFlagAttributes;
  const std::string lying = "\x09\x00\x00\x00ab";
  ASSERT_EQ(c.stage(bad, {reinterpret_cast<const std::byte*>(lying.data()), lying.size()}), fabric::Errc::ok);
  PublishClient::Event ev{};
  const auto r = run(c, 2, 100, &ev);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], Resolved(0, wire::Status::ok, 0));
  EXPECT_EQ(r[1], Resolved(1, wire::Status::corrupt, 0));
  EXPECT_EQ(log.end_offset(), 1u);
  EXPECT_EQ(corrupt, 0u);  // a refusal, not a garbled session
  Cursor cur = log.seek(0);
  ASSERT_TRUE(cur.valid);
  const ReadResult rr = log.read(cur);
  ASSERT_EQ(rr.status, ReadStatus::record);
  DecodedRecord d;
  ASSERT_EQ(decode_record(rr.header, {rr.frame + sizeof(RecordHeader), rr.header.length}, &d),
            AttributesCheck::ok);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(d.key.data()), d.key.size()), key);
  ASSERT_EQ(d.headers.size(), 1u);
  EXPECT_EQ(*d.headers.begin(), hs[0]);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(d.payload.data()), d.payload.size()), payload);
}

// A reserved frame (Publisher::try_claim) is nothing until committed: not
// sent, not numbered, and one dropped leaves no trace. Committed after the
// ring started over (fail_all), it moves to the ring's start, and is
// stored byte-exact once a new session resends it.
TEST_F(PublishTest, AReservedFrameIsARecordOnlyOnceCommitted) {
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 2);
  PublishClient::Reservation r;
  ASSERT_EQ(c.reserve(100, &r), fabric::Errc::ok);
  std::memset(c.region_at(r), 'z', 100);  // dropped: never a record
  PublishClient::Event ev{};
  ASSERT_EQ(run(c, 2, 100, &ev).size(), 2u);
  EXPECT_EQ(log.end_offset(), 2u);
  EXPECT_EQ(c.next_seq(), 2u);
  stage(c, 1);  // takes the dropped reservation's place
  ASSERT_EQ(c.reserve(3000, &r), fabric::Errc::ok);
  EXPECT_GT(r.pos, 0u);
  std::string want(3000, '\0');
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<char>('a' + i % 26);
  std::memcpy(c.region_at(r), want.data(), want.size());
  const auto failed = [&] {
    std::vector<Resolved> out;
    c.fail_all(wire::Status::unavailable, [&](std::uint64_t seq, wire::Status st, std::uint64_t off) {
      out.emplace_back(seq, st, off);
    });
    return out;
  }();
  ASSERT_EQ(failed.size(), 1u);  // seq 2, never sent: the ring starts over
  RecordHeader h{};
  h.producer_id = kProducer;
  h.producer_epoch = 1;
  ASSERT_EQ(c.commit_reserved(h, r), fabric::Errc::ok);
  EXPECT_EQ(c.pending(), 1u);
  c.drop();
  const auto w = open(c);  // the head expects 2: the claimed record is renumbered to it
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.next_sequence, 2u);
  const auto done = run(c, 1, 100, &ev);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0], Resolved(2, wire::Status::ok, 2));
  ASSERT_EQ(log.end_offset(), 3u);
  Cursor cur = log.seek(2);
  ASSERT_TRUE(cur.valid);
  const ReadResult rr = log.read(cur);
  ASSERT_EQ(rr.status, ReadStatus::record);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(rr.frame + sizeof(RecordHeader)), rr.header.length),
            want);
  EXPECT_EQ(corrupt, 0u);
}

TEST_F(PublishTest, RecordsResentToANewSessionGetTheirOriginalOffsets) {
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 5);
  PublishClient::Event ev{};
  EXPECT_TRUE(run(c, 5, 0, &ev, 200ms).empty());  // appended, not committed
  ASSERT_EQ(log.end_offset(), 5u);
  c.drop();                // the session breaks before any ack
  const auto w = open(c);  // the head knows this producer epoch up to sequence 4
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.next_sequence, 5u);
  stage(c, 1);
  const auto r = run(c, 6, 100, &ev);
  ASSERT_EQ(r.size(), 6u);
  for (std::uint64_t i = 0; i < 6; ++i) EXPECT_EQ(r[i], Resolved(i, wire::Status::ok, i));
  EXPECT_EQ(log.end_offset(), 6u);  // the resent five were not stored twice
}

TEST_F(PublishTest, RecordsTheHeadNeverHadAreRenumberedFromItsNextSequence) {
  // A new head with none of this producer's records: pending records start
  // again at 0, not at 7.
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 7);
  PublishClient::Event ev{};
  auto acked = run(c, 7, 100, &ev);
  ASSERT_EQ(acked.size(), 7u);
  stage(c, 3);  // 7, 8, 9: never sent
  c.drop();
  producers = ProducerState();  // the head that answers next knows nothing
  ASSERT_EQ(open(c).next_sequence, 0u);
  EXPECT_EQ(c.next_seq(), 3u);
  const auto r = run(c, 3, 100, &ev);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], Resolved(0, wire::Status::ok, 7));
  EXPECT_EQ(r[2], Resolved(2, wire::Status::ok, 9));
}

TEST_F(PublishTest, AHeadAheadOfEverythingSentFencesThePublisher) {
  // Another process published sequences 0..3 with this producer epoch; this
  // publisher sent nothing yet, so it must not take the session over.
  PublishClient c = make_client();
  wire::PublisherWelcome w{};
  w.status = wire::Status::ok;
  w.next_sequence = 4;
  EXPECT_FALSE(c.attach(nullptr, w));
  EXPECT_FALSE(c.connected());
}

TEST_F(PublishTest, ASealedHeadStoresNothingAndSaysMoved) {
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 3);
  PublishClient::Event ev{};
  const auto r = run(c, 3, 100, &ev, 2000ms, /*sealed=*/true);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(ev, PublishClient::Event::moved);
  EXPECT_EQ(log.end_offset(), 0u);
  EXPECT_EQ(c.pending(), 3u);  // kept for the next chain's head
  gate.sealed = true;
  PublishClient late = make_client();
  const auto moved = open(late);
  EXPECT_EQ(moved.status, wire::Status::moved);
  EXPECT_FALSE(moved.next.known()) << "sealed, not yet told the new route";
  // Once the route that retires it came, a `moved` welcome says where the
  // next chain's head is, and at which route epoch.
  gate.next_epoch = kEpoch + 1;
  gate.next_head = "10.0.0.9:7000";
  PublishClient later = make_client();
  const auto hinted = open(later);
  EXPECT_EQ(hinted.status, wire::Status::moved);
  EXPECT_EQ(hinted.next.epoch, kEpoch + 1);
  EXPECT_EQ(hinted.next.head_addr(), "10.0.0.9:7000");
}

// A sealed head reads every frame and answers `moved`: none is stored, so
// each stays pending for the next head, and the ring's room is not given
// back for them (the ring holds them again on the next session). Were it
// given back, records staged meanwhile would take more than one ring, and
// the next session could not lay them all out: a sequence gap on every
// reconnect, nothing acknowledged again.
TEST_F(PublishTest, RecordsAHeadAnsweredMovedKeepTheirRoomInTheRingUntilTheNextHeadStoresThem) {
  PublishClient c = make_client(4096);
  ASSERT_EQ(open(c).status, wire::Status::ok);
  RecordHeader h{};
  h.producer_id = kProducer;
  h.producer_epoch = 1;
  const std::string payload(64, 'm');
  const std::span bytes(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
  std::uint64_t staged = 0;
  while (c.stage(h, bytes) == fabric::Errc::ok) ++staged;  // the ring is full
  ASSERT_GT(staged, 100u);
  ASSERT_LT(staged, 4096u) << "the ring, not the window, must be what is full";
  PublishClient::Event ev{};
  EXPECT_TRUE(run(c, 1, 100000, &ev, 2000ms, /*sealed=*/true).empty());
  ASSERT_EQ(ev, PublishClient::Event::moved);
  EXPECT_EQ(log.end_offset(), 0u);
  // Whatever the publisher stages while it follows the move waits in the
  // ring beside them.
  while (c.stage(h, bytes) == fabric::Errc::ok) ++staged;
  EXPECT_EQ(c.pending(), staged);
  EXPECT_EQ(c.next_seq(), staged);
  c.drop();
  // The chain takes appends again (the move given up): every record is
  // stored once, in order.
  const auto w = open(c);
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.next_sequence, 0u);
  const auto r = run(c, staged, 100000, &ev);
  EXPECT_EQ(ev, PublishClient::Event::none);
  ASSERT_EQ(r.size(), staged);
  for (std::uint64_t i = 0; i < staged; ++i) ASSERT_EQ(r[i], Resolved(i, wire::Status::ok, i)) << i;
  EXPECT_EQ(log.end_offset(), staged);
  EXPECT_EQ(corrupt, 0u);
}

// The same for a sequence gap: the head stored none of the run and the
// publisher resends it on a new session; until then the ring keeps its room.
TEST_F(PublishTest, RecordsAHeadAnsweredSequenceGapKeepTheirRoomInTheRing) {
  PublishClient c = make_client(4096);
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 5);
  PublishClient::Event ev{};
  ASSERT_EQ(run(c, 5, 100000, &ev).size(), 5u);
  producers = ProducerState();  // the head no longer knows this producer: 5 is a gap
  RecordHeader h{};
  h.producer_id = kProducer;
  h.producer_epoch = 1;
  const std::string payload(64, 'g');
  const std::span bytes(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
  std::uint64_t staged = 0;
  while (c.stage(h, bytes) == fabric::Errc::ok) ++staged;
  ASSERT_GT(staged, 100u);
  EXPECT_TRUE(run(c, 1, 100000, &ev).empty());
  ASSERT_EQ(ev, PublishClient::Event::resync);
  while (c.stage(h, bytes) == fabric::Errc::ok) ++staged;
  EXPECT_EQ(c.pending(), staged);
  c.drop();
  // The head that answers next holds none of them: renumbered from 0.
  const auto w = open(c);
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.next_sequence, 0u);
  const auto r = run(c, staged, 100000, &ev);
  EXPECT_EQ(ev, PublishClient::Event::none);
  ASSERT_EQ(r.size(), staged);
  for (std::uint64_t i = 0; i < staged; ++i) ASSERT_EQ(r[i], Resolved(i, wire::Status::ok, 5 + i)) << i;
  EXPECT_EQ(log.end_offset(), 5 + staged);
}

TEST_F(PublishTest, AfterTheMarkerAStaleGenerationRunIsRefusedWithRemapAndNothingStored) {
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);  // generation 0, as created
  stage(c, 3);
  PublishClient::Event ev{};
  ASSERT_EQ(run(c, 3, 100, &ev).size(), 3u);  // before the marker: stored at 0..2
  std::uint64_t marker_at = 0;
  ASSERT_EQ(log.append_marker(MarkerSpec{1, 2, 3}, &marker_at), AppendStatus::ok);
  ASSERT_EQ(marker_at, 3u);
  stage(c, 2);  // sequences 3 and 4, mapped by generation 0
  const auto r = run(c, 2, 100, &ev);
  EXPECT_TRUE(r.empty()) << "a refused record is not resolved: the publisher maps it again";
  EXPECT_EQ(ev, PublishClient::Event::remap);
  EXPECT_EQ(log.end_offset(), 4u) << "only the marker follows the records stored before it";
  EXPECT_EQ(c.refused(), 2u);
  EXPECT_EQ(c.pending(), 2u);
  EXPECT_EQ(c.remap_generation(), 1u);
  EXPECT_EQ(c.remap_partitions(), 3u);
  // The producer's state is as before the refused run.
  ASSERT_EQ(producers.entries().count(kProducer), 1u);
  EXPECT_EQ(producers.entries().at(kProducer).last_seq, 2);
  // The refused records come out in order, unchanged; the next sequence
  // goes back to the first of them.
  std::vector<std::pair<std::uint64_t, std::string>> taken;
  c.take_all([&](const RecordHeader& h, std::span<const std::byte> payload) {
    taken.emplace_back(h.sequence,
                       std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
  });
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0], std::make_pair(std::uint64_t{3}, std::string("payload-3")));
  EXPECT_EQ(taken[1], std::make_pair(std::uint64_t{4}, std::string("payload-4")));
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_EQ(c.next_seq(), 3u);
  EXPECT_FALSE(c.connected());
  // A session of the new generation goes on where the head expects.
  gate.marker_generation = log.marker().generation;
  const auto w = open(c, 1, kEpoch, /*generation=*/1);
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.next_sequence, 3u);
  stage(c, 1);
  const auto after = run(c, 1, 100, &ev);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0], Resolved(3, wire::Status::ok, 4));  // above the marker
  EXPECT_EQ(c.refused(), 0u);
}

TEST_F(PublishTest, AfterTheMarkerARetryOfAStoredRecordGetsItsOffsetNotRemap) {
  // A head killed mid-alter: its records reached the next head, which
  // appended its marker after them; the publisher resends them (it had no
  // ack) with more. The stored ones are answered as any retry, with their
  // offsets below the marker; only the rest is refused. Refused, they would
  // be sent again by the new mapping and stored twice.
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 3);
  PublishClient::Event ev{};
  EXPECT_TRUE(run(c, 3, 0, &ev, 200ms).empty());  // appended at 0..2, not committed: no ack
  ASSERT_EQ(log.end_offset(), 3u);
  std::uint64_t marker_at = 0;
  ASSERT_EQ(log.append_marker(MarkerSpec{1, 2, 3}, &marker_at), AppendStatus::ok);
  c.drop();
  const auto w = open(c);  // generation 0: the hello is older than the marker, not newer
  ASSERT_EQ(w.status, wire::Status::ok);
  EXPECT_EQ(w.next_sequence, 3u);
  stage(c, 2);  // sequences 3 and 4: never stored
  auto r = run(c, 3, 100, &ev);
  ASSERT_EQ(r.size(), 3u) << "the three stored records resolve";
  for (std::uint64_t i = 0; i < 3; ++i) EXPECT_EQ(r[i], Resolved(i, wire::Status::ok, i));
  if (ev == PublishClient::Event::none) {
    EXPECT_TRUE(run(c, 1, 100, &ev).empty()) << "the rest is refused, not resolved";
  }
  EXPECT_EQ(ev, PublishClient::Event::remap);
  EXPECT_EQ(c.pending(), 2u);
  EXPECT_EQ(c.refused(), 2u);
  EXPECT_EQ(log.end_offset(), 4u) << "nothing stored after the marker";
}

TEST_F(PublishTest, ASessionSwitchesItsGenerationInBandAndWaitsForTheHeadsMarkerOfIt) {
  PublishClient c = make_client();
  ASSERT_EQ(open(c).status, wire::Status::ok);  // generation 0
  stage(c, 3);
  PublishClient::Event ev{};
  ASSERT_EQ(run(c, 3, 100, &ev).size(), 3u);  // 0..2
  std::uint64_t marker1 = 0;
  ASSERT_EQ(log.append_marker(MarkerSpec{1, 2, 3}, &marker1), AppendStatus::ok);
  stage(c, 2);  // 3, 4: refused, mapped by generation 0
  EXPECT_TRUE(run(c, 2, 100, &ev).empty());
  ASSERT_EQ(ev, PublishClient::Event::remap);
  ASSERT_EQ(c.refused(), 2u);
  // The publisher takes them out and names generation 1 on the same
  // session: no new hello, the ring goes on where it was.
  std::vector<std::uint64_t> taken;
  ASSERT_TRUE(c.take_all_in_band(
      1, [&](const RecordHeader& h, std::span<const std::byte>) { taken.push_back(h.sequence); }));
  EXPECT_EQ(taken, (std::vector<std::uint64_t>{3, 4}));
  EXPECT_TRUE(c.connected());
  EXPECT_EQ(c.next_seq(), 3u);
  stage(c, 2);  // 3, 4 again, mapped by generation 1
  auto r = run(c, 2, 100, &ev);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], Resolved(3, wire::Status::ok, marker1 + 1));  // after the marker
  EXPECT_EQ(r[1], Resolved(4, wire::Status::ok, marker1 + 2));
  EXPECT_EQ(server.size(), 1u) << "the same session";
  // Generation 2, whose marker this head has not appended: its records wait
  // in the ring, unread and unanswered, until the marker is in.
  ASSERT_TRUE(c.take_all_in_band(
      2, [](const RecordHeader&, std::span<const std::byte>) { ADD_FAILURE() << "nothing was pending"; }));
  stage(c, 1);  // 5
  const std::uint64_t end_before = log.end_offset();
  EXPECT_TRUE(run(c, 1, 100, &ev, 200ms).empty());
  EXPECT_EQ(ev, PublishClient::Event::none);
  EXPECT_EQ(log.end_offset(), end_before) << "nothing lands before generation 2's marker";
  std::uint64_t marker2 = 0;
  ASSERT_EQ(log.append_marker(MarkerSpec{2, 3, 4}, &marker2), AppendStatus::ok);
  r = run(c, 1, 100, &ev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], Resolved(5, wire::Status::ok, marker2 + 1));
  // A session never goes back to an older generation.
  ASSERT_TRUE(c.take_all_in_band(1, [](const RecordHeader&, std::span<const std::byte>) {}));
  stage(c, 1);  // 6
  r = run(c, 1, 100, &ev);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], Resolved(6, wire::Status::ok, marker2 + 2));
  EXPECT_EQ(corrupt, 0u);
}

TEST_F(PublishTest, AnyOtherMessageOnAPublisherSessionEndsItWithNothingStored) {
  const auto hello = PublishClient::hello("ch", 0, kEpoch, kProducer, 1, kRing);
  auto dialing = Link::Dialing<wire::PublisherWelcome>::start(*provider, listener->address(), hello, 2000ms);
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  auto head_end = accept_hello<wire::PublisherHello>(*provider, *listener, deadline);
  ASSERT_TRUE(head_end.hello);
  server.attach(*provider, std::move(head_end.link), *head_end.hello, gate, producers);
  auto d = finish_dial(dialing, deadline);
  ASSERT_TRUE(d.welcome);
  ASSERT_EQ(d.welcome->status, wire::Status::ok);
  ASSERT_EQ(server.size(), 1u);
  ASSERT_EQ(d.link->send(wire::SubscriberCredit{4096}), fabric::Errc::ok);  // not a publisher's message
  PublishTarget target{log, producers, 1, false, &corrupt};
  for (auto until = std::chrono::steady_clock::now() + 2s;
       server.size() == 1 && std::chrono::steady_clock::now() < until;) {
    d.link->poll_send();
    server.consume(target);
  }
  EXPECT_EQ(server.size(), 0u);
  EXPECT_EQ(corrupt, 1u);
  EXPECT_EQ(log.end_offset(), 0u);
}

TEST_F(PublishTest, AHelloOfAGenerationWhoseMarkerIsNotInTheLogIsNotReady) {
  // Generation 1's marker is not appended here yet: nothing mapped by it
  // may land before it.
  PublishClient early = make_client();
  EXPECT_EQ(open(early, 1, kEpoch, /*generation=*/1).status, wire::Status::not_ready);
  EXPECT_EQ(server.size(), 0u);
  EXPECT_EQ(budget.ring_bytes_used, 0u);
  std::uint64_t at = 0;
  ASSERT_EQ(log.append_marker(MarkerSpec{1, 2, 3}, &at), AppendStatus::ok);
  gate.marker_generation = log.marker().generation;
  PublishClient later = make_client();
  ASSERT_EQ(open(later, 1, kEpoch, /*generation=*/1).status, wire::Status::ok);
  stage(later, 2);
  PublishClient::Event ev{};
  const auto r = run(later, 2, 100, &ev);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], Resolved(0, wire::Status::ok, at + 1));
  EXPECT_EQ(r[1], Resolved(1, wire::Status::ok, at + 2));
}

TEST_F(PublishTest, RefusesWithTheFirstReasonThatApplies) {
  PublishClient c = make_client();
  EXPECT_EQ(open(c, 1, kEpoch + 1).status, wire::Status::not_ready);
  EXPECT_EQ(open(c, 1, kEpoch - 1).status, wire::Status::stale_epoch);
  gate.head = false;
  const auto not_head = open(c);
  EXPECT_EQ(not_head.status, wire::Status::not_head);
  EXPECT_EQ(std::string(not_head.head_hint), "10.0.0.1:7000");
  gate.head = true;
  budget.ring_bytes_limit = kRing - 1;
  EXPECT_EQ(open(c).status, wire::Status::resource_exhausted);
  budget.ring_bytes_limit = 1ull << 30;
  producers.record(kProducer, 2, 0, 0, 1);  // a newer epoch of this producer exists
  EXPECT_EQ(open(c, 1).status, wire::Status::producer_fenced);
  EXPECT_FALSE(c.connected());
  EXPECT_EQ(server.size(), 0u);
  EXPECT_EQ(budget.ring_bytes_used, 0u);
}

// A tenant's share of the node's publisher ring memory: its next publisher
// is refused while the node as a whole still has room, and what a session
// held is its tenant's again once it ends.
TEST_F(PublishTest, ATenantsRingShareRefusesItsNextPublisherWhileTheNodeHasRoom) {
  gate.tenant_budget = &tenant;
  PublishClient first = make_client();
  ASSERT_EQ(open(first).status, wire::Status::ok);
  EXPECT_EQ(tenant.ring_bytes_used, kRing);
  EXPECT_EQ(budget.ring_bytes_used, kRing);
  PublishClient second = make_client();
  EXPECT_EQ(open(second, 2).status, wire::Status::resource_exhausted);
  EXPECT_LT(budget.ring_bytes_used + kRing, budget.ring_bytes_limit) << "the node had room";
  // Another tenant's publisher (no share of this one's) is welcome.
  gate.tenant_budget = nullptr;
  PublishClient other = make_client();
  EXPECT_EQ(open(other, 3).status, wire::Status::ok);
  server.drop_all();
  EXPECT_EQ(tenant.ring_bytes_used, 0u);
  EXPECT_EQ(budget.ring_bytes_used, 0u);
  gate.tenant_budget = &tenant;
  PublishClient again = make_client();
  EXPECT_EQ(open(again, 4).status, wire::Status::ok);
}

// A tenant's publish rate on the node: the head appends no more than the
// bucket allows (a tenth of a second's worth at once, one frame beyond at
// most), the rest waits in the ring, and goes in as time refills it;
// nothing is lost or reordered.
TEST_F(PublishTest, ATenantsPublishRateHoldsFramesInTheRingUntilTimeAllowsThem) {
  constexpr std::uint64_t kRate = 40960;  // bytes per second: a burst of 4096
  constexpr std::size_t kPayload = 200;
  const std::uint64_t frame = frame_size(kPayload);
  RateBudget rate;
  rate.set_rate(kRate);
  PublishClient c = make_client(256);
  ASSERT_EQ(open(c).status, wire::Status::ok);
  stage(c, 100, kPayload);
  PublishClient::Event ev{};
  std::uint64_t now = 1'000'000'000;
  (void)run(c, 100, ~0ull, &ev, 200ms, false, &rate, now);
  const std::uint64_t first = log.end_offset();
  EXPECT_GT(first, 0u);
  EXPECT_LE(first * frame, 4096 + frame) << "more than the burst went in at once";
  EXPECT_GT(rate.waits(), 0u);
  // Half a second: another 20480 bytes' worth, capped by the burst.
  now += 500'000'000;
  (void)run(c, 100, ~0ull, &ev, 200ms, false, &rate, now);
  const std::uint64_t second = log.end_offset();
  EXPECT_GT(second, first);
  EXPECT_LE((second - first) * frame, 4096 + frame);
  // Time enough for the rest, a bucket at a time.
  std::vector<Resolved> all;
  for (int step = 0; step < 200 && log.end_offset() < 100; ++step) {
    now += 100'000'000;
    (void)run(c, 100, ~0ull, &ev, 50ms, false, &rate, now);
  }
  ASSERT_EQ(log.end_offset(), 100u);
  for (int i = 0; i < 20 && c.pending() > 0; ++i) (void)run(c, 100, ~0ull, &ev, 50ms, false, &rate, now);
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_EQ(corrupt, 0u);
  // Unlimited again: everything at once.
  rate.set_rate(0);
  stage(c, 50, kPayload);
  (void)run(c, 50, ~0ull, &ev, 2000ms, false, &rate, now);
  EXPECT_EQ(log.end_offset(), 150u);
}

// A tenant's sessions on the node: beyond its seats a hello is refused
// while the replica itself has room; a seat comes back when its session
// ends.
TEST_F(PublishTest, ATenantsSessionSeatsRefuseItsNextPublisher) {
  gate.tenant_seats = &seats;
  PublishClient first = make_client();
  ASSERT_EQ(open(first).status, wire::Status::ok);
  EXPECT_EQ(seats.used, 1u);
  PublishClient second = make_client();
  EXPECT_EQ(open(second, 2).status, wire::Status::resource_exhausted);
  EXPECT_EQ(server.size(), 1u);
  server.drop_all();
  EXPECT_EQ(seats.used, 0u);
  PublishClient third = make_client();
  EXPECT_EQ(open(third, 3).status, wire::Status::ok);
  EXPECT_EQ(seats.used, 1u);
}

}  // namespace
}  // namespace catena::chain
