// Publisher sessions against a real chain (chain_e2e_fixture.hpp): a
// restarted producer id is new data and fences the old instance, records
// failed after the retry timeout do not wedge the sequence, and the tail
// acknowledges watchers (moving off a silent old tail).
#include <chrono>
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

}  // namespace
}  // namespace catena::test
