// Publisher rings sized by need (PublisherOptions::ring_bytes and
// ring_budget_bytes): a partition gets its staging ring (at the publisher,
// and registered at its head) with its first record, 64 KiB to start; the
// ring doubles when records find it full, or to hold a larger record, with
// a new session once its records are resolved; the sum stays within the
// budget. Every record is acknowledged once, at contiguous offsets in
// publish order, and stored once, across grows and head failovers.
#include <chrono>
#include <condition_variable>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catena/chain/frame_ring.hpp>
#include <catena/chain/record.hpp>

#include "../forwarding_routes.hpp"
#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

constexpr std::uint64_t kMin = chain::kMinRingBytes;
// What a publisher's session registers at its head besides its ring (the
// link's message buffers), with room to spare; far below the 4 MiB ring a
// partition used to pin.
constexpr std::int64_t kLinkSlack = 1 << 20;

// A payload that says which record it is: "<i>:" then `size` bytes in all.
std::string payload_of(std::size_t i, std::size_t size) {
  std::string p = std::to_string(i) + ":";
  p.resize(std::max(size, p.size()), static_cast<char>('a' + i % 26));
  return p;
}

// Each node's registered memory other than its segments' (which follow
// what it retains: partition_log.hpp): rings and link buffers.
std::vector<std::int64_t> registered(const std::vector<std::unique_ptr<broker::Broker>>& brokers) {
  std::vector<std::int64_t> out;
  for (const auto& b : brokers) {
    if (!b) {
      out.push_back(-1);
      continue;
    }
    const auto st = b->stats();
    out.push_back(static_cast<std::int64_t>(st.registered_bytes) -
                  static_cast<std::int64_t>(st.segment_memory_bytes));
  }
  return out;
}

// The nodes' registered bytes once they hold still (replicas set up their
// memory on their agent after configure() returns): the same twice, 100 ms
// apart (5 s at most).
std::vector<std::int64_t> settled(const std::vector<std::unique_ptr<broker::Broker>>& brokers) {
  auto last = registered(brokers);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    auto now = registered(brokers);
    if (now == last) break;
    last = std::move(now);
  }
  return last;
}

// Publishes to one partition, records what was sent and each result, and
// checks after every call that the rings stay within `budget`.
// How much more node 0 (the head) registers than `before` says, once that
// is below `limit` (a ring goes with its session: 5 s at most), or at 5 s.
std::int64_t head_growth_once_below(const std::vector<std::unique_ptr<broker::Broker>>& brokers,
                                    const std::vector<std::int64_t>& before, std::int64_t limit) {
  std::int64_t growth = 0;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  do {
    growth = registered(brokers)[0] - before[0];
    if (growth < limit) break;
    std::this_thread::sleep_for(10ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return growth;
}

struct Sender {
  explicit Sender(Publisher& p, std::uint64_t b = ~0ull) : pub(p), budget(b) {}
  Publisher& pub;
  std::uint64_t budget;
  std::vector<std::string> sent;
  std::map<std::size_t, PublishResult> results;

  // ok, or the first answer that is neither ok nor backpressure.
  client::ErrorCode send(std::uint32_t partition, std::size_t size) {
    const std::size_t i = sent.size();
    const std::string p = payload_of(i, size);
    for (;;) {
      const auto e =
          pub.publish_to(partition, bytes(p), [this, i](const PublishResult& r) { results[i] = r; });
      EXPECT_LE(pub.ring_bytes_in_use(), budget);
      if (e == client::ErrorCode::ok) {
        sent.push_back(p);
        return e;
      }
      if (e != client::ErrorCode::backpressure) return e;
      pub.poll();
    }
  }
};

// Every record ok, at offsets from `first` on, one after another in publish order.
void expect_contiguous(const Sender& s, const std::vector<std::size_t>& which, std::uint64_t first) {
  for (std::size_t k = 0; k < which.size(); ++k) {
    const auto it = s.results.find(which[k]);
    ASSERT_NE(it, s.results.end()) << "record " << which[k] << " was never answered";
    EXPECT_EQ(it->second.status, PublishStatus::ok) << "record " << which[k];
    EXPECT_EQ(it->second.offset, first + k) << "record " << which[k];
  }
}

// The log of partition 0 from `routes`' tail: exactly `sent`, in order, once.
void expect_log(StaticRoutes& routes, const std::string& channel, const std::vector<std::string>& sent) {
  const auto got = read_all(routes, channel, sent.size());
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].first, i);
    EXPECT_TRUE(got[i].second == sent[i])
        << "offset " << i << " holds record " << got[i].second.substr(0, got[i].second.find(':'));
  }
}

TEST_F(ChainE2E, APublisherPinsRingsOnlyForThePartitionsItPublishesTo) {
  constexpr std::uint32_t kParts = 64;
  for (std::uint32_t p = 0; p < kParts; ++p) configure("wide", p, kParts, {static_cast<int>(p % 3)}, 1);
  const auto before = settled(brokers_);
  PublisherOptions po;
  po.provider = provider_spec();  // ring_bytes 4 MiB: 256 MiB a side if every partition pinned one
  auto pub = Publisher::create(routes_, "wide", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 0u);

  // Partition 5's head is node 2, partition 40's node 1; node 0 leads neither.
  std::map<std::uint32_t, std::vector<std::uint64_t>> offsets;
  for (int i = 0; i < 50; ++i) {
    for (std::uint32_t p : {5u, 40u}) {
      ASSERT_EQ(pub.value()->publish_to(p, bytes("r" + std::to_string(i)),
                                        [&offsets, p](const PublishResult& r) {
                                          EXPECT_EQ(r.status, PublishStatus::ok);
                                          offsets[p].push_back(r.offset);
                                        }),
                client::ErrorCode::ok);
    }
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  for (std::uint32_t p : {5u, 40u}) {
    ASSERT_EQ(offsets[p].size(), 50u) << "partition " << p;
    for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(offsets[p][i], i) << "partition " << p;
  }
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 2 * kMin);
  const auto after = settled(brokers_);
  EXPECT_EQ(after[0], before[0]) << "node 0 leads no partition the publisher used";
  for (int b : {1, 2}) {
    const std::int64_t growth = after[b] - before[b];
    EXPECT_GE(growth, static_cast<std::int64_t>(kMin)) << "node " << b;
    EXPECT_LT(growth, static_cast<std::int64_t>(kMin) + kLinkSlack) << "node " << b;
  }
}

TEST_F(ChainE2E, ABurstGrowsTheRingAndEveryRecordArrivesOnceInOrder) {
  configure("burst", 0, 1, {0, 1}, 1);
  const auto before = settled(brokers_);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  auto pub = Publisher::create(routes_, "burst", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value());
  // 16 KiB records: three fill the first ring, which then doubles.
  for (int i = 0; i < 40; ++i) ASSERT_EQ(s.send(0, 16u << 10), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  const std::uint64_t after_burst = pub.value()->ring_bytes_in_use();
  EXPECT_GT(after_burst, kMin);
  EXPECT_LE(after_burst, po.ring_bytes);
  // A 200 KiB record needs a 512 KiB ring (a frame takes half a ring at most).
  for (int i = 0; i < 2; ++i) ASSERT_EQ(s.send(0, 200u << 10), client::ErrorCode::ok);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  // (Or larger: a full ring doubles too, up to ring_bytes.)
  EXPECT_GE(pub.value()->ring_bytes_in_use(), 512u << 10);
  EXPECT_LE(pub.value()->ring_bytes_in_use(), po.ring_bytes);
  // Larger than half the largest ring: too_large, and nothing staged.
  EXPECT_EQ(pub.value()->publish_to(0, bytes(payload_of(99, 600u << 10)), nullptr),
            client::ErrorCode::too_large);

  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes_, "burst", s.sent);
  ASSERT_TRUE(committed(*brokers_[1], s.sent.size()));
  const auto tail = brokers_[1]->stats();
  ASSERT_FALSE(tail.partitions.empty());
  EXPECT_EQ(tail.partitions[0].replica.end_offset, s.sent.size()) << "a record stored twice";
  // The head registers the ring the publisher has now; the smaller ones
  // went with their sessions.
  const std::int64_t growth = head_growth_once_below(
      brokers_, before, static_cast<std::int64_t>(pub.value()->ring_bytes_in_use()) + kLinkSlack);
  EXPECT_GE(growth, static_cast<std::int64_t>(pub.value()->ring_bytes_in_use()));
  EXPECT_LT(growth, static_cast<std::int64_t>(pub.value()->ring_bytes_in_use()) + kLinkSlack);
}

// Routes whose lookups, once stall() is called, wait until resume(): a
// controller that holds its lock while a metadata change waits for
// ZooKeeper.
class StallingRoutes final : public ForwardingRoutes {
 public:
  using ForwardingRoutes::ForwardingRoutes;
  ~StallingRoutes() override { resume(); }
  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override {
    {
      std::unique_lock lock(mu_);
      if (stalled_) ++waited_;
      cv_.wait(lock, [this] { return !stalled_; });
    }
    return ForwardingRoutes::route(channel, partition, known_epoch);
  }
  void stall() {
    std::lock_guard lock(mu_);
    stalled_ = true;
  }
  void resume() {
    {
      std::lock_guard lock(mu_);
      stalled_ = false;
    }
    cv_.notify_all();
  }
  int waited() {
    std::lock_guard lock(mu_);
    return waited_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_ = false;
  int waited_ = 0;
};

// A grow is a new session with the same head, for the new ring: the route
// the publisher holds is as current as a moment before, so it dials that
// head again without asking the controller. It used to ask: a controller
// busy with a metadata change (waiting for ZooKeeper) then held up the
// partition's records until it answered (seen in
// ZkEnsemble.AChannelCreateWhileZooKeeperIsPaused, 1.0-1.1 s without
// acknowledgements).
TEST_F(ChainE2E, AGrowingRingDoesNotWaitForTheController) {
  configure("grow-stalled", 0, 1, {0, 1}, 1);
  StallingRoutes routes(routes_);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  auto pub = Publisher::create(routes, "grow-stalled", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  // Lookups go on before the publisher goes (its end waits for the lookup
  // in progress), also when an assertion ends the test early.
  struct ResumeFirst {
    StallingRoutes& routes;
    ~ResumeFirst() { routes.resume(); }
  } resume_first{routes};
  Sender s(*pub.value());
  ASSERT_EQ(s.send(0, 100), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));  // the session is up
  routes.stall();
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(s.send(0, 16u << 10), client::ErrorCode::ok)
        << "record " << s.sent.size() << ": its partition waited for the stalled controller";
  }
  EXPECT_TRUE(pub.value()->flush(10s)) << "records waited for the stalled controller";
  EXPECT_GT(pub.value()->ring_bytes_in_use(), kMin) << "the burst did not grow the ring";
  routes.resume();
  ASSERT_TRUE(pub.value()->flush(20s));
  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes_, "grow-stalled", s.sent);
}

// A ring a burst grew is halved (a new session with the head, as a grow)
// each ring_shrink_after in which its records took at most a quarter of
// it, down to 64 KiB, so that the memory the burst took, here and
// registered at the head, goes back; it grows again for the next burst.
// Every record is acknowledged once, in order, across the resizes.
TEST_F(ChainE2E, AGrownRingShrinksBackOnceTrafficIsLightAndGrowsAgainForTheNextBurst) {
  configure("shrink", 0, 1, {0, 1}, 1);
  const auto before = settled(brokers_);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  po.ring_shrink_after = 150ms;
  auto pub = Publisher::create(routes_, "shrink", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value());
  // (All of it within the fixture's 2 MiB of retention.)
  auto burst = [&] {
    for (int i = 0; i < 40; ++i) ASSERT_EQ(s.send(0, 16u << 10), client::ErrorCode::ok);
    ASSERT_TRUE(pub.value()->flush(20s));
  };
  ASSERT_NO_FATAL_FAILURE(burst());
  const std::uint64_t grown = pub.value()->ring_bytes_in_use();
  EXPECT_GE(grown, 4 * kMin) << "the burst did not grow the ring";
  // Light traffic: a 500-byte record every 5 ms, at most a few in the ring.
  std::uint64_t smallest = grown;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until && smallest > kMin) {
    ASSERT_EQ(s.send(0, 500), client::ErrorCode::ok);
    const auto next = std::chrono::steady_clock::now() + 5ms;
    while (std::chrono::steady_clock::now() < next) pub.value()->poll();
    smallest = std::min(smallest, pub.value()->ring_bytes_in_use());
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), kMin) << "grown to " << grown;
  // The head lets the larger rings go with their sessions.
  const std::int64_t growth =
      head_growth_once_below(brokers_, before, static_cast<std::int64_t>(kMin) + kLinkSlack);
  EXPECT_LT(growth, static_cast<std::int64_t>(kMin) + kLinkSlack) << "the head still holds the grown ring";
  // The next burst grows it again.
  ASSERT_NO_FATAL_FAILURE(burst());
  EXPECT_GE(pub.value()->ring_bytes_in_use(), 4 * kMin);

  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes_, "shrink", s.sent);
}

TEST_F(ChainE2E, RingsStayWithinTheBudgetAndEveryPartitionStillGetsOne) {
  constexpr std::uint32_t kParts = 8;
  for (std::uint32_t p = 0; p < kParts; ++p) configure("budget", p, kParts, {static_cast<int>(p % 3)}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  po.ring_budget_bytes = kParts * kMin - 1;
  auto refused = Publisher::create(routes_, "budget", po);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, client::ErrorCode::invalid_argument);
  EXPECT_NE(refused.error().message.find("ring_budget_bytes"), std::string::npos) << refused.error().message;

  po.ring_budget_bytes = kParts * kMin + (256u << 10);
  auto pub = Publisher::create(routes_, "budget", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value(), po.ring_budget_bytes);
  // Bursts to partitions 0 and 1 grow their rings as far as the budget
  // lets them while leaving 64 KiB for each of the other six.
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(s.send(0, 16u << 10), client::ErrorCode::ok);
    ASSERT_EQ(s.send(1, 16u << 10), client::ErrorCode::ok);
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_GT(pub.value()->ring_bytes_in_use(), 2 * kMin);
  EXPECT_LE(pub.value()->ring_bytes_in_use() + 6 * kMin, po.ring_budget_bytes);
  // A record that needs a 512 KiB ring cannot have one within the budget.
  EXPECT_EQ(pub.value()->publish_to(2, bytes(payload_of(99, 200u << 10)), nullptr),
            client::ErrorCode::too_large);
  // Every other partition still gets its ring.
  std::vector<std::size_t> small;
  for (std::uint32_t p = 2; p < kParts; ++p) {
    small.push_back(s.sent.size());
    ASSERT_EQ(s.send(p, 100), client::ErrorCode::ok) << "partition " << p;
  }
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_LE(pub.value()->ring_bytes_in_use(), po.ring_budget_bytes);
  for (std::size_t i : small) {
    EXPECT_EQ(s.results[i].status, PublishStatus::ok) << "record " << i;
    EXPECT_EQ(s.results[i].offset, 0u) << "record " << i;
  }
  std::vector<std::size_t> to0, to1;
  for (std::size_t i = 0; i < 80; ++i) (i % 2 == 0 ? to0 : to1).push_back(i);
  expect_contiguous(s, to0, 0);
  expect_contiguous(s, to1, 0);
}

TEST_F(ChainE2E, RingsGrowAcrossHeadFailoversAndLoseNothing) {
  configure("fo", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  auto pub = Publisher::create(routes_, "fo", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  ASSERT_EQ(pub.value()->ring_bytes_in_use(), kMin);

  // The head dies with records in flight; a record that needs a larger ring
  // waits for them (resent to the new head), then for the grown session.
  for (int i = 0; i < 20; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  brokers_[0].reset();
  const std::string big = payload_of(s.sent.size(), 200u << 10);
  bool reconfigured = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const auto e = pub.value()->publish_to(
        0, bytes(big), [&s, i = s.sent.size()](const PublishResult& r) { s.results[i] = r; });
    if (e == client::ErrorCode::ok) break;
    ASSERT_EQ(e, client::ErrorCode::backpressure);
    pub.value()->poll();
    if (!reconfigured && std::chrono::steady_clock::now() - t0 > 50ms) {
      configure("fo", 0, 1, {1, 2}, 2);
      reconfigured = true;
    }
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 20s);
  }
  s.sent.push_back(big);
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 512u << 10);

  // No head at all when the ring grows: every record resolved, the grown
  // session waits for the next chain.
  brokers_[1].reset();
  const std::string bigger = payload_of(s.sent.size(), 400u << 10);
  reconfigured = false;
  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    const auto e = pub.value()->publish_to(
        0, bytes(bigger), [&s, i = s.sent.size()](const PublishResult& r) { s.results[i] = r; });
    if (!reconfigured && std::chrono::steady_clock::now() - t1 > 100ms) {
      EXPECT_EQ(pub.value()->ring_bytes_in_use(), 1u << 20) << "the ring grows while no head is there";
      configure("fo", 0, 1, {2}, 3);
      reconfigured = true;
    }
    if (e == client::ErrorCode::ok) break;
    ASSERT_EQ(e, client::ErrorCode::backpressure);
    pub.value()->poll();
    ASSERT_LT(std::chrono::steady_clock::now() - t1, 20s);
  }
  s.sent.push_back(bigger);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 1u << 20);

  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes_, "fo", s.sent);
  const auto tail = brokers_[2]->stats();
  ASSERT_FALSE(tail.partitions.empty());
  EXPECT_EQ(tail.partitions[0].replica.end_offset, s.sent.size()) << "a record stored twice";
}

// Publishes record after record of `size` bytes to partition 0 for `how_long`
// without waiting on backpressure (polling instead), as an application
// does while the head is sealed; returns how many were taken.
std::size_t publish_for(Publisher& pub, Sender& s, std::size_t size, std::chrono::milliseconds how_long) {
  std::size_t taken = 0;
  const auto until = std::chrono::steady_clock::now() + how_long;
  while (std::chrono::steady_clock::now() < until) {
    const std::size_t i = s.sent.size();
    std::string p = payload_of(i, size);
    const auto e = pub.publish_to(0, bytes(p), [&s, i](const PublishResult& r) { s.results[i] = r; });
    if (e == client::ErrorCode::ok) {
      s.sent.push_back(std::move(p));
      ++taken;
      continue;
    }
    EXPECT_EQ(e, client::ErrorCode::backpressure);
    pub.poll();
    std::this_thread::sleep_for(100us);
  }
  return taken;
}

// The head is sealed for a move while records keep coming: it reads every
// frame of the full ring and answers `moved`, storing none. The move is then
// given up (the same chain at a new epoch, which lifts the seal, as a new
// controller leader does with a half-done move). What waited meanwhile is
// at most one ring, and every record is stored once, in order.
// (The rings merge was reverted for this: the ring's room came back with
// the `moved` answers, a second ring's worth of records was staged behind
// the first, the next session could not lay them out, and the head answered
// sequence_gap to every resend, for good.)
TEST_F(ChainE2E, ASealedHeadsFullRingWaitsForTheChainAndLosesNothing) {
  configure("seal", 0, 1, {0, 1}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = kMin;  // no grow: the ring stays full while the head is sealed
  auto pub = Publisher::create(routes_, "seal", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));

  const auto sealed = brokers_[0]->seal("seal", 0, 1);
  ASSERT_EQ(sealed.status, broker::ConfigureStatus::applied) << sealed.message;
  const std::size_t before = s.sent.size();
  const std::size_t waiting = publish_for(*pub.value(), s, 1000, 500ms);
  EXPECT_GT(waiting, 0u);
  // One ring holds what waits: frames of 1000 bytes and their headers.
  EXPECT_LE(waiting * chain::frame_size(1000), kMin)
      << waiting << " records wait in a " << kMin << " byte ring";
  EXPECT_EQ(pub.value()->in_flight(), waiting);
  for (std::size_t i = before; i < s.sent.size(); ++i) EXPECT_EQ(s.results.count(i), 0u) << "record " << i;

  configure("seal", 0, 1, {0, 1}, 2);  // given up: the same chain, a newer epoch
  ASSERT_TRUE(pub.value()->flush(20s)) << pub.value()->in_flight() << " records still in flight";
  for (int i = 0; i < 20; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes_, "seal", s.sent);
  ASSERT_TRUE(committed(*brokers_[1], s.sent.size()));
  EXPECT_EQ(brokers_[1]->stats().partitions[0].replica.end_offset, s.sent.size()) << "a record stored twice";
}

// A grow racing a move: the record that needs a larger ring comes while the
// head is sealed. Every record was resolved, so the ring grows at once; the
// grown session meets the seal (`moved`) and follows the partition like any
// other session, and takes the larger ring from the chain that takes
// appends next. Records wait (backpressure) meanwhile; nothing is lost.
TEST_F(ChainE2E, AGrowThatMeetsASealedHeadFinishesOnTheNextChain) {
  configure("gseal", 0, 1, {0, 1}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  auto pub = Publisher::create(routes_, "gseal", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  ASSERT_EQ(pub.value()->ring_bytes_in_use(), kMin);

  const auto sealed = brokers_[0]->seal("gseal", 0, 1);
  ASSERT_EQ(sealed.status, broker::ConfigureStatus::applied) << sealed.message;
  // 200 KiB needs a 512 KiB ring: grown at once (nothing in flight), then
  // waiting for a head that takes it.
  const std::size_t big = s.sent.size();
  const std::string p = payload_of(big, 200u << 10);
  const auto t0 = std::chrono::steady_clock::now();
  bool reconfigured = false;
  for (;;) {
    const auto e =
        pub.value()->publish_to(0, bytes(p), [&s, big](const PublishResult& r) { s.results[big] = r; });
    if (e == client::ErrorCode::ok) break;
    ASSERT_EQ(e, client::ErrorCode::backpressure);
    pub.value()->poll();
    if (!reconfigured && std::chrono::steady_clock::now() - t0 > 300ms) {
      EXPECT_EQ(pub.value()->ring_bytes_in_use(), 512u << 10) << "the ring grows while the head is sealed";
      configure("gseal", 0, 1, {0, 1}, 2);  // the move given up
      reconfigured = true;
    }
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 20s);
  }
  EXPECT_TRUE(reconfigured) << "a sealed head took a record";
  s.sent.push_back(p);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(s.send(0, 1000), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 512u << 10);
  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes_, "gseal", s.sent);
}

// A head whose ring budget (catenad --session-memory-mb) holds 192 KiB:
// the ring grows to 128 KiB, the head refuses 256 KiB, and the partition
// stays at 128 KiB: records that need more are too_large, the rest flow.
TEST(RingSize, AHeadThatRefusesAGrownRingLeavesThePartitionOnTheSmallerOne) {
  constexpr std::uint32_t kSegment = 512u << 10;
  broker::BrokerConfig cfg;
  cfg.node_id = "node-0";
  cfg.provider = provider_spec();
  cfg.fabric_listen = listen_address();
  cfg.slot_count = 4;
  cfg.grace_ms = 100;
  cfg.session_memory_bytes = 3 * kMin;
  auto b = broker::Broker::start(cfg);
  ASSERT_TRUE(b.ok()) << b.error().message;
  Route route{"tight", 0, 1, {{cfg.node_id, b.value()->fabric_address()}}, 0, {}};
  chain::ReplicaConfig rc;
  rc.channel = "tight";
  rc.partition = 0;
  rc.epoch = 1;
  rc.position = 0;
  rc.chain_length = 1;
  rc.head_addr = route.replicas[0].fabric_addr;
  rc.log.segment_bytes = kSegment;
  rc.log.ttl_ns = 60'000'000'000ull;
  ASSERT_EQ(b.value()->configure(rc).status, broker::ConfigureStatus::applied);
  StaticRoutes routes;
  routes.set(route, 1, kSegment);

  PublisherOptions po;
  po.provider = provider_spec();
  po.ring_bytes = 1u << 20;
  auto pub = Publisher::create(routes, "tight", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  Sender s(*pub.value());
  // 40 KiB records need a 128 KiB ring; a full one asks for 256 KiB.
  for (int i = 0; i < 12; ++i) ASSERT_EQ(s.send(0, 40u << 10), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  // 100 KiB needs 256 KiB, which the head refuses (if no full ring asked
  // already): too_large, after the try.
  EXPECT_EQ(s.send(0, 100u << 10), client::ErrorCode::too_large);
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 2 * kMin);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(s.send(0, 40u << 10), client::ErrorCode::ok);
  ASSERT_TRUE(pub.value()->flush(20s));
  EXPECT_EQ(pub.value()->ring_bytes_in_use(), 2 * kMin);

  std::vector<std::size_t> all(s.sent.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  expect_contiguous(s, all, 0);
  expect_log(routes, "tight", s.sent);
}

}  // namespace
}  // namespace catena::test
