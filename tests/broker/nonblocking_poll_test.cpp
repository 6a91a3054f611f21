// Publisher::poll() and Subscriber::poll() never wait on the network or the
// controller (issue 10): one partition whose head does not answer its dial,
// and a route source whose lookups hang, must not stall the partitions next
// to it. Partition 0's route names a TCP listener that accepts nothing (a
// connect to it waits out connect_timeout), then every route lookup hangs;
// partition 1 is a healthy chain and keeps being acknowledged (delivered)
// meanwhile; then partition 0 comes back, and its records are acknowledged
// (delivered) exactly once.
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <condition_variable>
#include <gtest/gtest.h>
#include <map>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <vector>

#include "../forwarding_routes.hpp"
#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

using Clock = std::chrono::steady_clock;

// What a poll may take: a quarter of the shortest wait the blocking clients
// made (a connect to the silent listener, kConnectTimeout). Generous on a
// loaded 2-core host; a blocking poll takes seconds.
constexpr auto kPollBound = 250ms;
constexpr auto kConnectTimeout = 1000ms;
// How long a hanging lookup blocks unless released first.
constexpr auto kHang = 5s;

// A TCP listener that never accepts: connects to it get no handshake answer
// (or, once its backlog is full, no SYN-ACK) and wait out their timeout.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    std::string host = listen_address();
    host = host.substr(0, host.rfind(':'));
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 1) != 0)
      return;
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    address_ = host + ":" + std::to_string(ntohs(a.sin_port));
  }
  ~SilentListener() { close(); }
  // Stops listening: connections waiting in its backlog are reset.
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  [[nodiscard]] const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

// A route source whose lookups and failure reports hang while armed (a
// controller that takes the calls and answers nothing), up to kHang each.
class HangingRoutes final : public ForwardingRoutes {
 public:
  using ForwardingRoutes::ForwardingRoutes;

  void hang(bool on) {
    {
      MutexLock lk(mu_);
      hanging_ = on;
    }
    cv_.notify_all();
  }

  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override {
    wait_while_hanging();
    return ForwardingRoutes::route(channel, partition, known_epoch);
  }
  void report_unreachable(const std::string& node_id, const Route& route,
                          const std::string& reason) override {
    wait_while_hanging();
    ForwardingRoutes::report_unreachable(node_id, route, reason);
  }

 private:
  void wait_while_hanging() {
    UniqueLock lk(mu_);
    lk.wait_for(cv_, kHang, [&] {
      mu_.assert_held();  // the wait holds it when it asks
      return !hanging_;
    });
  }

  Mutex mu_;
  std::condition_variable cv_;
  bool hanging_ GUARDED_BY(mu_) = false;
};

class NonBlockingPoll : public ChainE2E {
 protected:
  // Partition 0 on node 0, partition 1 on node 1 (one replica each), and
  // partition 0's route pointing at the silent listener.
  void SetUp() override {
    ChainE2E::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_FALSE(silent_.address().empty()) << "cannot listen on " << listen_address();
    configure("nb", 0, 2, {0}, 2);
    configure("nb", 1, 2, {1}, 1);
  }
  void route_partition0_to_silence(std::uint64_t epoch) {
    routes_.set(Route{"nb", 0, epoch, {{"silent", silent_.address()}}, 0, {}}, 2, kSegment);
  }
  void route_partition0_to_node0(std::uint64_t epoch) {
    routes_.set(
        Route{"nb", 0, epoch, {{brokers_[0]->config().node_id, brokers_[0]->fabric_address()}}, 0, {}}, 2,
        kSegment);
  }

  SilentListener silent_;
  HangingRoutes hanging_{routes_};
};

// The longest of the timed calls, for the failure message.
struct Longest {
  Clock::duration max{};
  template <class F>
  auto time(F&& f) {
    const auto t0 = Clock::now();
    auto r = f();
    max = std::max(max, Clock::now() - t0);
    return r;
  }
  [[nodiscard]] long long ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(max).count();
  }
};

TEST_F(NonBlockingPoll, PublisherKeepsAcknowledgingOtherPartitionsWhileOneCannotBeReached) {
  route_partition0_to_silence(1);
  PublisherOptions po;
  po.provider = provider_spec();
  po.connect_timeout = kConnectTimeout;
  auto created = Publisher::create(hanging_, "nb", po);  // setup: may wait for partition 0's dial
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& pub = *created.value();

  std::map<std::uint64_t, int> acked0;  // offset -> times acknowledged
  std::vector<std::uint64_t> acked1;
  int failed = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(pub.publish_to(0, bytes("p0-" + std::to_string(i)),
                             [&](const PublishResult& r) {
                               if (r.status == PublishStatus::ok) {
                                 ++acked0[r.offset];
                               } else {
                                 ++failed;
                               }
                             }),
              client::ErrorCode::ok);
  }
  // Phase 1: partition 0's head does not answer its dial (each connect waits
  // kConnectTimeout); phase 2: route lookups and failure reports hang too.
  // Partition 1 gets a few records in flight at a time, at most 3000 per
  // phase (the fixture's log holds 2 MiB per replica).
  std::size_t sent1 = 0;
  auto run_phase = [&](const char* what) {
    Longest poll;
    const std::size_t acked_before = acked1.size();
    const std::size_t cap = sent1 + 3000;
    const auto end = Clock::now() + 1500ms;
    while (Clock::now() < end) {
      if (sent1 < cap && sent1 - acked1.size() < 8 &&
          pub.publish_to(1, bytes("p1-" + std::to_string(sent1)), [&](const PublishResult& r) {
            if (r.status == PublishStatus::ok) {
              acked1.push_back(r.offset);
            } else {
              ++failed;
            }
          }) == client::ErrorCode::ok) {
        ++sent1;
      }
      poll.time([&] { return pub.poll(); });
    }
    EXPECT_LT(poll.max, kPollBound) << what << ": a poll took " << poll.ms() << " ms";
    EXPECT_GE(acked1.size(), acked_before + 20) << what << ": partition 1 was not acknowledged meanwhile";
    EXPECT_TRUE(acked0.empty()) << what;
  };
  run_phase("head not answering");
  hanging_.hang(true);
  run_phase("head not answering and route lookups hanging");
  EXPECT_TRUE(std::is_sorted(acked1.begin(), acked1.end()));
  EXPECT_EQ(std::adjacent_find(acked1.begin(), acked1.end()), acked1.end()) << "an offset acknowledged twice";

  // Partition 0 comes back (a new chain, the controller answers again).
  route_partition0_to_node0(2);
  hanging_.hang(false);
  Longest poll;
  const auto deadline = Clock::now() + 20s;
  while (pub.in_flight() > 0 && Clock::now() < deadline) poll.time([&] { return pub.poll(); });
  EXPECT_LT(poll.max, kPollBound) << "recovering: a poll took " << poll.ms() << " ms";
  EXPECT_EQ(pub.in_flight(), 0u);
  EXPECT_EQ(failed, 0);
  ASSERT_EQ(acked0.size(), 5u);
  std::uint64_t expect = 0;
  for (const auto& [offset, times] : acked0) {
    EXPECT_EQ(offset, expect++);
    EXPECT_EQ(times, 1) << "offset " << offset << " acknowledged " << times << " times";
  }
  ASSERT_TRUE(committed(*brokers_[0], 5));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(brokers_[0]->stats().partitions[0].replica.end_offset, 5u) << "partition 0 stored a record twice";
}

TEST_F(NonBlockingPoll, SubscriberKeepsDeliveringOtherPartitionsWhileOneCannotBeReached) {
  PublisherOptions po;
  po.provider = provider_spec();
  auto created_pub = Publisher::create(routes_, "nb", po);
  ASSERT_TRUE(created_pub.ok()) << created_pub.error().message;
  Publisher& pub = *created_pub.value();
  auto publish = [&](std::uint32_t partition, int from, int n) {
    for (int i = from; i < from + n; ++i) {
      while (pub.publish_to(partition, bytes(std::to_string(partition) + "-" + std::to_string(i)), nullptr) !=
             client::ErrorCode::ok) {
        pub.poll();
      }
    }
    ASSERT_TRUE(pub.flush(10s));
  };
  publish(0, 0, 50);
  publish(1, 0, 50);

  route_partition0_to_silence(3);
  SubscriberOptions so;
  so.provider = provider_spec();
  so.connect_timeout = kConnectTimeout;
  auto created = Subscriber::create(hanging_, "nb", so);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Subscriber& sub = *created.value();
  std::map<std::uint32_t, std::vector<std::uint64_t>> got;
  auto on_message = [&](const Message& m) { got[m.partition].push_back(m.offset); };

  // Phase 1: partition 0's replica does not answer its dial; phase 2: route
  // lookups and failure reports hang too. Partition 1 gets 50 records more
  // in each phase.
  auto run_phase = [&](const char* what, int from) {
    publish(1, from, 50);
    Longest poll;
    const auto end = Clock::now() + 1500ms;
    while (Clock::now() < end) poll.time([&] { return sub.poll(on_message); });
    EXPECT_LT(poll.max, kPollBound) << what << ": a poll took " << poll.ms() << " ms";
    EXPECT_EQ(got[1].size(), static_cast<std::size_t>(from + 50)) << what << ": partition 1 not delivered";
    EXPECT_TRUE(got[0].empty()) << what;
  };
  run_phase("replica not answering", 50);
  hanging_.hang(true);
  run_phase("replica not answering and route lookups hanging", 100);

  route_partition0_to_node0(4);
  hanging_.hang(false);
  Longest poll;
  const auto deadline = Clock::now() + 20s;
  while (got[0].size() < 50 && Clock::now() < deadline) poll.time([&] { return sub.poll(on_message); });
  EXPECT_LT(poll.max, kPollBound) << "recovering: a poll took " << poll.ms() << " ms";
  for (std::uint32_t p : {0u, 1u}) {
    const std::size_t n = p == 0 ? 50 : 150;
    ASSERT_EQ(got[p].size(), n) << "partition " << p;
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(got[p][i], i) << "partition " << p;
  }
}

// A head stopped (SIGSTOP) while a publisher dials it answers nothing; its
// connect would wait out connect_timeout (seconds) although the controller
// names a new head within milliseconds. A dial that takes longer than
// stall_check re-reads the route, and one that names another head is left
// for it: the records are acknowledged long before the first dial's
// timeout, each once, in order.
TEST_F(NonBlockingPoll, PublisherLeavesAHeadThatDoesNotAnswerWhenTheRouteNamesAnother) {
  route_partition0_to_silence(1);
  // The dial to the silent head would wait this long (and ~Publisher waits
  // for the connect it abandons at most as long).
  constexpr auto kLongConnect = 8s;
  PublisherOptions po;
  po.provider = provider_spec();
  po.connect_timeout = kLongConnect;
  po.retry_timeout = 60s;
  auto created = Publisher::create(routes_, "nb", po);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& pub = *created.value();
  std::map<std::uint64_t, int> acked;  // offset -> times acknowledged
  int failed = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(pub.publish_to(0, bytes("p0-" + std::to_string(i)),
                             [&](const PublishResult& r) {
                               if (r.status == PublishStatus::ok) {
                                 ++acked[r.offset];
                               } else {
                                 ++failed;
                               }
                             }),
              client::ErrorCode::ok);
  }
  // The dial to the silent head is under way (and stays so).
  auto end = Clock::now() + 500ms;
  while (Clock::now() < end) pub.poll();
  EXPECT_TRUE(acked.empty());

  route_partition0_to_node0(2);  // the controller names a new head
  const auto rerouted = Clock::now();
  const auto deadline = rerouted + kLongConnect / 2;
  while (pub.in_flight() > 0 && Clock::now() < deadline) pub.poll();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - rerouted);
  silent_.close();  // may end the connect still waiting on it sooner
  EXPECT_EQ(pub.in_flight(), 0u) << "still waiting for the silent head after " << took.count() << " ms";
  EXPECT_EQ(failed, 0);
  ASSERT_EQ(acked.size(), 5u);
  std::uint64_t expect = 0;
  for (const auto& [offset, times] : acked) {
    EXPECT_EQ(offset, expect++);
    EXPECT_EQ(times, 1) << "offset " << offset << " acknowledged " << times << " times";
  }
  ASSERT_TRUE(committed(*brokers_[0], 5));
}

// The same for a subscriber: a replica that accepts its dial and answers
// nothing is left once the route names others, long before connect_timeout.
TEST_F(NonBlockingPoll, SubscriberLeavesAReplicaThatDoesNotAnswerWhenTheRouteNamesAnother) {
  PublisherOptions po;
  po.provider = provider_spec();
  auto created_pub = Publisher::create(routes_, "nb", po);
  ASSERT_TRUE(created_pub.ok()) << created_pub.error().message;
  Publisher& pub = *created_pub.value();
  for (int i = 0; i < 50; ++i) {
    while (pub.publish_to(0, bytes("0-" + std::to_string(i)), nullptr) != client::ErrorCode::ok) pub.poll();
  }
  ASSERT_TRUE(pub.flush(10s));

  route_partition0_to_silence(3);
  // The dial to the silent replica would wait this long (and ~Subscriber
  // waits for the connect it abandons at most as long).
  constexpr auto kLongConnect = 8s;
  SubscriberOptions so;
  so.provider = provider_spec();
  so.connect_timeout = kLongConnect;
  so.stall_check = 200ms;
  auto created = Subscriber::create(routes_, "nb", so);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Subscriber& sub = *created.value();
  std::vector<std::uint64_t> got;
  auto on_message = [&](const Message& m) {
    if (m.partition == 0) got.push_back(m.offset);
  };
  // The dial to the silent replica is under way (and stays so).
  auto end = Clock::now() + 500ms;
  while (Clock::now() < end) sub.poll(on_message);
  EXPECT_TRUE(got.empty());

  route_partition0_to_node0(4);
  const auto rerouted = Clock::now();
  const auto deadline = rerouted + kLongConnect / 2;
  while (got.size() < 50 && Clock::now() < deadline) sub.poll(on_message);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - rerouted);
  silent_.close();  // may end the connect still waiting on it sooner
  ASSERT_EQ(got.size(), 50u) << "still waiting for the silent replica after " << took.count() << " ms";
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i);
}

// A client destroyed while its dial waits on a peer that answers nothing
// returns at once: the connect is left to end on its own thread (holding
// the provider it runs on), not waited out for connect_timeout.
TEST_F(NonBlockingPoll, APublisherDestroyedWhileItsDialWaitsReturnsAtOnce) {
  route_partition0_to_silence(1);
  constexpr auto kLongConnect = 8s;
  PublisherOptions po;
  po.provider = provider_spec();
  po.connect_timeout = kLongConnect;
  po.retry_timeout = 60s;
  auto created = Publisher::create(routes_, "nb", po);
  ASSERT_TRUE(created.ok()) << created.error().message;
  int resolved = 0;
  ASSERT_EQ(created.value()->publish_to(0, bytes("held"), [&](const PublishResult&) { ++resolved; }),
            client::ErrorCode::ok);
  const auto end = Clock::now() + 500ms;
  while (Clock::now() < end) created.value()->poll();  // the dial to the silent head is under way
  EXPECT_EQ(resolved, 0);
  const auto t0 = Clock::now();
  created.value().reset();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_LT(took, kLongConnect / 4) << "~Publisher waited " << took.count() << " ms for the dial";
  // The provider the abandoned connect runs on outlives the publisher:
  // another client of this process opens and uses it meanwhile.
  route_partition0_to_node0(2);
  auto again = Publisher::create(routes_, "nb", po);
  ASSERT_TRUE(again.ok()) << again.error().message;
  std::uint64_t offset = ~0ull;
  ASSERT_EQ(again.value()->publish_to(0, bytes("after"),
                                      [&](const PublishResult& r) {
                                        if (r.status == PublishStatus::ok) offset = r.offset;
                                      }),
            client::ErrorCode::ok);
  ASSERT_TRUE(again.value()->flush(10s));
  EXPECT_EQ(offset, 0u);
}

TEST_F(NonBlockingPoll, ASubscriberDestroyedWhileItsDialWaitsReturnsAtOnce) {
  route_partition0_to_silence(1);
  constexpr auto kLongConnect = 8s;
  SubscriberOptions so;
  so.provider = provider_spec();
  so.connect_timeout = kLongConnect;
  so.partitions = {0};
  auto created = Subscriber::create(routes_, "nb", so);
  ASSERT_TRUE(created.ok()) << created.error().message;
  const auto end = Clock::now() + 500ms;
  while (Clock::now() < end) created.value()->poll([](const Message&) {});
  const auto t0 = Clock::now();
  created.value().reset();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_LT(took, kLongConnect / 4) << "~Subscriber waited " << took.count() << " ms for the dial";
}

}  // namespace
}  // namespace catena::test
