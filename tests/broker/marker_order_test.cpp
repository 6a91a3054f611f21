// Per-key order across a channel alter's markers (Subscriber + MarkerGate)
// on real chains: each partition's log is laid out as an alter leaves it
// (records of key hash h in h % from up to the partition's marker, in
// h % to after the new partition's marker; chain/key_map.hpp), written in
// an order chosen so that a partition's new records are there before its
// parents' old ones. A subscriber of every partition must deliver each key's
// records in the order of the generations, none lost or twice.
#include <gtest/gtest.h>
#include <map>
#include <set>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

constexpr std::uint64_t kKeys = 12;   // key k has hash k
constexpr std::uint64_t kRounds = 5;  // records per key and generation

struct Got {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  bool marker = false;
  std::uint64_t key = 0;
  std::uint64_t seq = 0;
};

class MarkerOrder : public ChainE2E {
 protected:
  // Partitions [0, n) of "ord", each a chain over the three brokers.
  void SetUpChannel(std::uint32_t n) {
    for (std::uint32_t p = 0; p < n; ++p) configure("ord", p, n, {0, 1, 2}, 1);
  }

  // A publisher of generation `gen` (its hello names it), so that the heads
  // take its records on the side of their markers the test lays out: a
  // publisher of another generation would be refused there (remap,
  // not_ready) and switch, as real ones do (remap_e2e_test.cpp).
  Publisher* publisher_of(std::uint64_t gen) {
    auto& pub = pubs_[gen];
    if (!pub) {
      routes_.set_generation("ord", gen);
      PublisherOptions po;
      po.provider = provider_spec();
      auto created = Publisher::create(routes_, "ord", po);
      EXPECT_TRUE(created.ok()) << created.error().message;
      if (created.ok()) pub = std::move(created.value());
    }
    return pub.get();
  }

  // Generation `gen`'s records of every key that lives in partition p
  // when the channel has `parts` partitions: "key/seq", seq numbered by
  // generation, so a key's records are in order when their seqs are.
  void write(std::uint32_t p, std::uint32_t parts, std::uint64_t gen) {
    Publisher* pub = publisher_of(gen);
    ASSERT_NE(pub, nullptr);
    std::size_t failed = 0;
    for (std::uint64_t i = 0; i < kRounds; ++i) {
      for (std::uint64_t k = p; k < kKeys; k += parts) {
        const std::string payload = std::to_string(k) + "/" + std::to_string(gen * kRounds + i);
        client::ErrorCode e;
        while ((e = pub->publish_to(p, bytes(payload), [&](const PublishResult& r) {
                 if (r.status != PublishStatus::ok) ++failed;
               })) == client::ErrorCode::backpressure) {
          pub->poll();
        }
        ASSERT_EQ(e, client::ErrorCode::ok) << "partition " << p << " generation " << gen;
        ++written_;
      }
    }
    ASSERT_TRUE(pub->flush(20s));
    ASSERT_EQ(failed, 0u) << "partition " << p << " generation " << gen;
  }

  // p's marker of `spec`, committed.
  void marker(std::uint32_t p, const chain::MarkerSpec& spec) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    for (;;) {
      auto r = brokers_[0]->append_marker("ord", p, 1, spec);
      ASSERT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
      if (r.state.commit_offset > r.state.offset) return;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(1ms);
    }
  }

  std::unique_ptr<Subscriber> subscribe(std::vector<std::uint32_t> partitions = {}) {
    SubscriberOptions so;
    so.provider = provider_spec();
    so.control_records = true;
    so.partitions = std::move(partitions);
    auto sub = Subscriber::create(routes_, "ord", so);
    EXPECT_TRUE(sub.ok());
    return sub.ok() ? std::move(sub.value()) : nullptr;
  }

  // Polls until `count` messages came in all, or `wait` passed.
  static void read(Subscriber& sub, std::vector<Got>* got, std::size_t count,
                   std::chrono::milliseconds wait = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (got->size() < count && std::chrono::steady_clock::now() < deadline) {
      sub.poll([&](const Message& m) {
        Got g{m.partition, m.offset, m.marker, 0, 0};
        if (!m.marker) {
          const std::string s(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
          const auto slash = s.find('/');
          g.key = std::stoull(s.substr(0, slash));
          g.seq = std::stoull(s.substr(slash + 1));
        }
        got->push_back(g);
      });
    }
  }

  // Every key's records, `gens` generations of them, came once each, in
  // order, each from the partition it lived in (parts[gen]).
  static void expect_key_order(const std::vector<Got>& got, const std::vector<std::uint32_t>& parts) {
    std::map<std::uint64_t, std::uint64_t> next;  // key -> next seq
    for (const Got& g : got) {
      if (g.marker) continue;
      EXPECT_EQ(g.seq, next[g.key]) << "key " << g.key << " from partition " << g.partition << " offset "
                                    << g.offset;
      next[g.key] = g.seq + 1;
      EXPECT_EQ(g.partition, g.key % parts[g.seq / kRounds]) << "key " << g.key << " seq " << g.seq;
    }
    for (std::uint64_t k = 0; k < kKeys; ++k) EXPECT_EQ(next[k], parts.size() * kRounds) << "key " << k;
  }

  static std::size_t from_partition(const std::vector<Got>& got, std::uint32_t p) {
    return static_cast<std::size_t>(
        std::count_if(got.begin(), got.end(), [&](const Got& g) { return g.partition == p; }));
  }

  // A 2 -> 4 grow (generation 1) whose added partitions 2 and 3 have their
  // marker and new records before their parents 0 and 1 have any: those get
  // their old records only, no marker yet.
  void added_partitions_first() {
    SetUpChannel(4);
    for (std::uint32_t p : {2u, 3u}) {
      marker(p, kGrow);
      write(p, 4, 1);
    }
    write(0, 2, 0);
    write(1, 2, 0);
  }

  static constexpr chain::MarkerSpec kGrow{1, 2, 4};
  std::map<std::uint64_t, std::unique_ptr<Publisher>> pubs_;
  std::size_t written_ = 0;
};

TEST_F(MarkerOrder, GrowHoldsAddedPartitionsUntilTheirParentsReachTheirMarkers) {
  added_partitions_first();
  auto sub = subscribe();
  ASSERT_NE(sub, nullptr);
  std::vector<Got> got;
  read(*sub, &got, written_ + 4, 500ms);  // cannot all come: polls for the whole wait
  // Partitions 2 and 3 are parked at their markers (offset 0).
  ASSERT_EQ(from_partition(got, 2), 1u);
  ASSERT_EQ(from_partition(got, 3), 1u);
  EXPECT_EQ(from_partition(got, 0), kRounds * kKeys / 2);
  // Partition 0 reaches its marker: 2 (fed by 0) goes on, 3 (fed by 1) waits.
  marker(0, kGrow);
  write(0, 4, 1);
  read(*sub, &got, written_ + 4, 500ms);
  EXPECT_EQ(from_partition(got, 2), 1 + kRounds * kKeys / 4);
  EXPECT_EQ(from_partition(got, 3), 1u);
  marker(1, kGrow);
  write(1, 4, 1);
  read(*sub, &got, written_ + 4);
  ASSERT_EQ(got.size(), written_ + 4);
  expect_key_order(got, {2, 4});
  // Each marker at its position: after its partition's old records.
  for (std::uint32_t p = 0; p < 4; ++p) {
    std::vector<Got> mine;
    std::copy_if(got.begin(), got.end(), std::back_inserter(mine),
                 [&](const Got& g) { return g.partition == p; });
    const std::uint64_t old = p < 2 ? kRounds * kKeys / 2 : 0;
    ASSERT_GT(mine.size(), old);
    EXPECT_TRUE(mine[old].marker) << p;
    for (std::size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i].offset, i) << p;
  }
}

TEST_F(MarkerOrder, ASubsetSubscriberIsNotHeldBackByPartitionsItDoesNotRead) {
  added_partitions_first();
  auto sub = subscribe({2, 3});
  ASSERT_NE(sub, nullptr);
  std::vector<Got> got;
  const std::size_t want = 2 + 2 * kRounds * kKeys / 4;
  read(*sub, &got, want);
  EXPECT_EQ(got.size(), want);
}

TEST_F(MarkerOrder, ShrinkWaitsForEveryParentAndTheRemovedPartitionEnds) {
  SetUpChannel(4);
  const chain::MarkerSpec shrink{1, 4, 3};  // every old partition feeds every new one
  // Partitions 0..2 run ahead with their new records; 3 lags.
  for (std::uint32_t p = 0; p < 3; ++p) {
    write(p, 4, 0);
    marker(p, shrink);
    write(p, 3, 1);
  }
  write(3, 4, 0);
  auto sub = subscribe();
  ASSERT_NE(sub, nullptr);
  std::vector<Got> got;
  const std::size_t old = kRounds * kKeys;
  read(*sub, &got, written_ + 4, 500ms);
  ASSERT_EQ(got.size(), old + 3);  // the old records, and 0..2's markers: nothing new yet
  for (const Got& g : got) EXPECT_TRUE(g.marker || g.seq < kRounds) << g.partition << "@" << g.offset;
  marker(3, shrink);
  read(*sub, &got, written_ + 4);
  ASSERT_EQ(got.size(), written_ + 4);
  expect_key_order(got, {4, 3});
  // The removed partition ends at its marker: its old records, then it.
  EXPECT_EQ(from_partition(got, 3), kRounds * kKeys / 4 + 1);
}

TEST_F(MarkerOrder, TwoAltersInARow) {
  SetUpChannel(4);
  const chain::MarkerSpec grow{1, 2, 4};
  const chain::MarkerSpec shrink{2, 4, 3};
  // Partition 2 goes through both alters before anyone else wrote a thing.
  marker(2, grow);
  write(2, 4, 1);
  marker(2, shrink);
  write(2, 3, 2);
  auto sub = subscribe();
  ASSERT_NE(sub, nullptr);
  std::vector<Got> got;
  read(*sub, &got, written_ + 2, 500ms);
  ASSERT_EQ(got.size(), 1u);  // 2's first marker; it waits for 0
  EXPECT_TRUE(got[0].marker);
  for (std::uint32_t p : {0u, 1u}) {
    write(p, 2, 0);
    marker(p, grow);
  }
  write(0, 4, 1);
  write(1, 4, 1);
  marker(3, grow);
  write(3, 4, 1);
  for (std::uint32_t p : {0u, 1u}) {
    marker(p, shrink);
    write(p, 3, 2);
  }
  read(*sub, &got, written_ + 8, 500ms);
  // Generation 2's records wait for 3's marker; the rest and 7 markers came.
  EXPECT_EQ(got.size(), written_ - kRounds * kKeys + 7);
  for (const Got& g : got) EXPECT_TRUE(g.marker || g.seq < 2 * kRounds) << g.partition << "@" << g.offset;
  marker(3, shrink);
  read(*sub, &got, written_ + 8);
  ASSERT_EQ(got.size(), written_ + 8);
  expect_key_order(got, {2, 4, 3});
  std::set<std::pair<std::uint32_t, std::uint64_t>> seen;
  for (const Got& g : got) EXPECT_TRUE(seen.emplace(g.partition, g.offset).second) << "twice";
}

TEST_F(MarkerOrder, AShrunkPartitionComesBackWithTheNextGrow) {
  SetUpChannel(4);
  const chain::MarkerSpec shrink{1, 4, 3};
  const chain::MarkerSpec grow{2, 3, 4};
  for (std::uint32_t p = 0; p < 4; ++p) {
    write(p, 4, 0);
    marker(p, shrink);
  }
  // Partition 3, removed, takes its generation 2 marker and records first.
  marker(3, grow);
  write(3, 4, 2);
  auto sub = subscribe();
  ASSERT_NE(sub, nullptr);
  std::vector<Got> got;
  read(*sub, &got, written_ + 7, 500ms);
  ASSERT_EQ(got.size(), written_ - kRounds * kKeys / 4 + 5);  // 3's new records wait for 0..2
  for (std::uint32_t p = 0; p < 3; ++p) {
    write(p, 3, 1);
    marker(p, grow);
    write(p, 4, 2);
  }
  read(*sub, &got, written_ + 8);
  ASSERT_EQ(got.size(), written_ + 8);
  expect_key_order(got, {4, 3, 4});
}

// A subscriber of every partition created while the channel has 2 (the
// alter to 4 not complete yet) reads the partitions the grow adds once a
// marker names them, from their first offset, in key order.
TEST_F(MarkerOrder, ASubscriberOfEveryPartitionReadsThePartitionsAGrowAdds) {
  SetUpChannel(4);
  auto r0 = routes_.route("ord", 0, 0);
  ASSERT_TRUE(r0.ok());
  routes_.set(*r0, 2, kSegment);  // the layout says 2 partitions
  auto sub = subscribe();
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->partitions(), (std::vector<std::uint32_t>{0, 1}));
  routes_.set(*r0, 4, kSegment);  // for the publishers
  write(0, 2, 0);
  write(1, 2, 0);
  for (std::uint32_t p = 0; p < 4; ++p) {
    marker(p, kGrow);
    write(p, 4, 1);
  }
  std::vector<Got> got;
  read(*sub, &got, written_ + 4);
  ASSERT_EQ(got.size(), written_ + 4);
  EXPECT_EQ(sub->partitions(), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  expect_key_order(got, {2, 4});
  EXPECT_EQ(from_partition(got, 2), 1 + kRounds * kKeys / 4);
  EXPECT_EQ(from_partition(got, 3), 1 + kRounds * kKeys / 4);
}

}  // namespace
}  // namespace catena::test
