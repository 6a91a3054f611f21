// The commit watch protocol (commit_watch.hpp), both halves in one thread
// over a real soft-provider connection: no replica, no broker, no process.
#include <chrono>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include <catena/chain/commit_watch.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/fabric/fabric.hpp>

#include "session_test_support.hpp"

namespace catena::chain {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

struct Ack {
  std::uint64_t first_seq;
  std::uint32_t count;
  std::uint64_t first_offset;
  bool operator==(const Ack&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Ack& a) {
  return os << "{seq " << a.first_seq << " x" << a.count << " @" << a.first_offset << "}";
}

class CommitWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = fabric::Provider::open("soft");
    ASSERT_TRUE(p) << p.error().message;
    provider = std::move(p.value());
    auto l = provider->listen("127.0.0.1:0");
    ASSERT_TRUE(l) << l.error().message;
    listener = std::move(l.value());
  }

  // Appends a record of `producer` with `seq`; returns its offset.
  std::uint64_t append(std::uint64_t producer, std::uint64_t seq) {
    RecordHeader h{};
    h.producer_id = producer;
    h.producer_epoch = 1;
    h.sequence = seq;
    const std::string payload = "r" + std::to_string(producer) + "-" + std::to_string(seq);
    std::uint64_t off = 0;
    EXPECT_EQ(log.append(h, {reinterpret_cast<const std::byte*>(payload.data()), payload.size()}, &off),
              AppendStatus::ok);
    return off;
  }

  // The publisher dials, the tail answers through `server`, on this thread.
  // Returns the welcome's status; on ok `client` holds the watch.
  wire::Status open_watch(CommitWatchClient& client, std::uint64_t producer, const WatchGate& gate,
                          std::uint64_t hello_epoch = kEpoch) {
    const auto hello = CommitWatchClient::hello("ch", 0, hello_epoch, producer, 1);
    auto dialing =
        Link::Dialing<wire::CommitWatchWelcome>::start(*provider, listener->address(), hello, 2000ms);
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    auto tail_end = accept_hello<wire::CommitWatchHello>(*provider, *listener, deadline);
    EXPECT_TRUE(tail_end.link);
    if (!tail_end.link) return wire::Status::unavailable;
    EXPECT_TRUE(tail_end.hello);
    if (!tail_end.hello) return wire::Status::bad_request;
    server.attach(std::move(tail_end.link), *tail_end.hello, gate, log);
    auto d = finish_dial(dialing, deadline, [&] { server.poll_events(); });
    EXPECT_TRUE(d.welcome);
    if (!d.welcome) return wire::Status::unavailable;
    EXPECT_EQ(d.welcome->epoch, kEpoch);
    if (d.welcome->status == wire::Status::ok) client.attach(std::move(d.link));
    return d.welcome->status;
  }

  // Passes of the tail until `client` got `want` acks (or `wait` passed).
  std::vector<Ack> acks_of(CommitWatchClient& client, std::size_t want,
                           std::chrono::milliseconds wait = 2000ms) {
    std::vector<Ack> out;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (out.size() < want && std::chrono::steady_clock::now() < deadline) {
      server.do_work(log, kEpoch);
      client.do_work([&](const wire::PublishAck& a) {
        EXPECT_EQ(a.status, wire::Status::ok);
        EXPECT_EQ(a.ring_consumed, 0u);  // credit is the head's
        EXPECT_EQ(a.epoch, kEpoch);
        out.push_back(Ack{a.first_seq, a.count, a.first_offset});
      });
    }
    return out;
  }

  static WatchGate tail_gate() {
    WatchGate g;
    g.epoch = kEpoch;
    g.tail_of_two_or_more = true;
    return g;
  }

  std::unique_ptr<fabric::Provider> provider;
  std::unique_ptr<fabric::Listener> listener;
  ManualClock clock;
  Slots slots{4, kSeg};
  PartitionLog log{slots.spans(), LogConfig{kSeg, 60'000'000'000ull, 5'000'000'000ull}, clock};
  CommitWatchServer server;
};

TEST_F(CommitWatchTest, AcknowledgesEachProducersCommittedRecordsInContiguousRuns) {
  // Committed before the watch opened: the head acknowledges those.
  append(1, 0);
  log.set_commit_offset(log.end_offset());
  CommitWatchClient a, b;
  ASSERT_EQ(open_watch(a, 1, tail_gate()), wire::Status::ok);
  ASSERT_EQ(open_watch(b, 2, tail_gate()), wire::Status::ok);
  EXPECT_EQ(server.size(), 2u);

  // 1:1 1:2 2:0 1:3 2:1, then 1:4 held but not committed.
  const std::uint64_t o1 = append(1, 1);
  append(1, 2);
  const std::uint64_t o3 = append(2, 0);
  const std::uint64_t o4 = append(1, 3);
  append(2, 1);
  log.set_commit_offset(log.end_offset());
  append(1, 4);

  // Producer 1's offsets are not contiguous across 2:0: two runs.
  EXPECT_EQ(acks_of(a, 2), (std::vector<Ack>{{1, 2, o1}, {3, 1, o4}}));
  EXPECT_EQ(acks_of(b, 2), (std::vector<Ack>{{0, 1, o3}, {1, 1, o3 + 2}}));

  // Nothing more until the commit covers 1:4; then exactly it.
  EXPECT_TRUE(acks_of(a, 1, 200ms).empty());
  log.set_commit_offset(log.end_offset());
  EXPECT_EQ(acks_of(a, 1), (std::vector<Ack>{{4, 1, o4 + 2}}));
}

TEST_F(CommitWatchTest, RefusesWithTheFirstReasonThatApplies) {
  CommitWatchClient c;
  // The hello names a newer epoch than the tail's: not yet.
  EXPECT_EQ(open_watch(c, 1, tail_gate(), kEpoch + 1), wire::Status::not_ready);
  WatchGate retired = tail_gate();
  retired.retired = true;
  EXPECT_EQ(open_watch(c, 1, retired), wire::Status::moved);
  WatchGate middle = tail_gate();
  middle.tail_of_two_or_more = false;
  EXPECT_EQ(open_watch(c, 1, middle), wire::Status::not_tail);
  EXPECT_EQ(open_watch(c, 1, tail_gate(), kEpoch - 1), wire::Status::stale_epoch);
  WatchGate full = tail_gate();
  full.max_watchers = 0;
  EXPECT_EQ(open_watch(c, 1, full), wire::Status::resource_exhausted);
  EXPECT_FALSE(c.connected());
  EXPECT_TRUE(server.empty());
}

TEST_F(CommitWatchTest, ANewerWatchOfTheSameProducerGetsTheAcks) {
  CommitWatchClient old_watch, new_watch;
  ASSERT_EQ(open_watch(old_watch, 1, tail_gate()), wire::Status::ok);
  ASSERT_EQ(open_watch(new_watch, 1, tail_gate()), wire::Status::ok);
  const std::uint64_t o = append(1, 0);
  log.set_commit_offset(log.end_offset());
  EXPECT_EQ(acks_of(new_watch, 1), (std::vector<Ack>{{0, 1, o}}));
  EXPECT_TRUE(acks_of(old_watch, 1, 200ms).empty());
}

TEST_F(CommitWatchTest, ThePublisherDropsAWatchTheHeadKeepsBeating) {
  CommitWatchClient c;
  ASSERT_EQ(open_watch(c, 1, tail_gate()), wire::Status::ok);
  c.head_resolved(CommitWatchClient::kStaleAfter - 1);
  EXPECT_TRUE(c.do_work([](const wire::PublishAck&) {}));
  // One ack from the tail: it is alive, the count starts again.
  append(1, 0);
  log.set_commit_offset(log.end_offset());
  ASSERT_EQ(acks_of(c, 1).size(), 1u);
  c.head_resolved(CommitWatchClient::kStaleAfter - 1);
  EXPECT_TRUE(c.do_work([](const wire::PublishAck&) {}));
  c.head_resolved(1);
  EXPECT_FALSE(c.do_work([](const wire::PublishAck&) {}));
  EXPECT_FALSE(c.connected());
}

TEST_F(CommitWatchTest, AWatchDroppedByTheTailIsDroppedByThePublisher) {
  CommitWatchClient c;
  ASSERT_EQ(open_watch(c, 1, tail_gate()), wire::Status::ok);
  server.drop_all();  // no longer the tail
  EXPECT_TRUE(server.empty());
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  bool up = true;
  while (up && std::chrono::steady_clock::now() < deadline) up = c.do_work([](const wire::PublishAck&) {});
  EXPECT_FALSE(up);
  EXPECT_FALSE(c.connected());
}

}  // namespace
}  // namespace catena::chain
