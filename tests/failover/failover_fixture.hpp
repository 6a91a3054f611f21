// The failover tests' fixture: a controller and five brokers on loopback as
// child processes, a channel "f" with R=3, a publisher and two subscribers
// running continuously, and a fault in the middle (run_with_fault).
// Afterwards the history checker verifies that every acknowledged record
// reached both subscribers exactly once, in order, intact, and that
// publishing made progress after the fault. The scenarios, by family:
// failover_test.cpp (processes killed, paused, restarted), network_cut_test.cpp
// (a broker cut off the network), partial_cut_test.cpp (the controller, or
// one path of a node, cut off).
#pragma once

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/history.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>

#include "netns_link.hpp"

// Without ZooKeeper's jar (the Debian zookeeper package) the tests skip,
// unless CATENA_REQUIRE_ZK=1 (ci/test.sh) makes that a failure. For the tests
// whose clusters run several controllers on ZooKeeper.
#define FAILOVER_ZK_OR_SKIP()                                                                           \
  do {                                                                                                  \
    const char* classpath_ = std::getenv("CATENA_ZK_CLASSPATH");                                        \
    const char* require_ = std::getenv("CATENA_REQUIRE_ZK");                                            \
    if ((classpath_ == nullptr || *classpath_ == '\0') &&                                               \
        !std::filesystem::exists("/usr/share/java/zookeeper.jar")) {                                    \
      if (require_ != nullptr && std::string(require_) == "1") FAIL() << "CATENA_REQUIRE_ZK=1: no jar"; \
      GTEST_SKIP() << "needs ZooKeeper (the Debian zookeeper package)";                                 \
    }                                                                                                   \
  } while (false)

namespace catena::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline std::string payload_for(std::uint64_t id) {
  std::string s = "rec:" + std::to_string(id) + ":";
  s.resize(64, static_cast<char>('a' + id % 26));
  return s;
}

inline std::uint64_t id_of(std::span<const std::byte> p) {
  const char* c = reinterpret_cast<const char*>(p.data());
  if (p.size() < 5 || std::strncmp(c, "rec:", 4) != 0) return ~0ull;
  return std::strtoull(c + 4, nullptr, 10);
}

class Failover : public ::testing::Test {
 protected:
  static constexpr int kNodes = 5;

  void SetUp() override { start_cluster(default_options()); }

  static ClusterOptions default_options() {
    ClusterOptions o;
    o.nodes = kNodes;
    o.dir = std::string("failover-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.heartbeat_timeout_ms = 300;
    o.heartbeat_interval_ms = 50;
    o.quiet = true;
    return o;
  }

  // Starts the cluster and creates channel "f" on it.
  void start_cluster(const ClusterOptions& o) {
    cluster_ = std::make_unique<LocalCluster>(o);
    std::string err;
    ASSERT_TRUE(cluster_->start(&err)) << err;
    control::ControllerClient::Options co;
    co.address = cluster_->controller_address();
    admin_ = std::make_unique<control::ControllerClient>(co);
    control::idl::ChannelConfig cfg;
    cfg.name = "f";
    cfg.partitions = partitions_;
    cfg.replication = replication_;
    cfg.segment_bytes = segment_bytes_;
    cfg.ttl_ms = 600000;
    auto ch = admin_->create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }

  void TearDown() override {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
    cluster_.reset();
  }

  // Index in cluster_->nodes() of the replica at `pos` of partition 0's chain.
  int node_at(int pos) {
    auto r = admin_->get_route("f", 0, 0);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return -1;
    const auto& reps = r->replicas;
    const std::string& id = pos >= 0 ? reps[static_cast<std::size_t>(pos)].node_id : reps.back().node_id;
    for (std::size_t i = 0; i < cluster_->nodes().size(); ++i) {
      if (cluster_->nodes()[i].node_id == id) return static_cast<int>(i);
    }
    return -1;
  }

  void start_traffic() {
    control::ControllerClient::Options co;
    co.address = cluster_->controller_address();
    for (int s = 0; s < 2; ++s) {
      threads_.emplace_back([this, co, s] {
        broker::ControllerRoutes routes(co, "sub-" + std::to_string(s));
        SubscriberOptions so;
        so.provider = client_provider_;
        so.read_from = s == 0 ? SubscriberOptions::ReadFrom::tail : SubscriberOptions::ReadFrom::head;
        auto sub = Subscriber::create(routes, "f", so);
        if (!sub) {
          ADD_FAILURE() << sub.error().message;
          return;
        }
        sub.value()->on_notice([this, s](const Notice& n) {
          if (n.status != client::ErrorCode::data_lost) return;
          history_.declare_lost(s, n.partition, n.lost_from, n.next_offset);
          data_lost_notices_.fetch_add(1);
        });
        while (!stop_) {
          int n = sub.value()->poll([&](const Message& m) {
            history_.delivered(s, m.partition, m.offset, id_of(m.payload), m.payload);
            delivered_[s].fetch_add(1);
          });
          if (n == 0) std::this_thread::sleep_for(100us);
        }
      });
    }
    threads_.emplace_back([this, co] {
      broker::ControllerRoutes routes(co, "publisher");
      PublisherOptions po;
      po.provider = client_provider_;
      po.retry_timeout = 60s;
      auto pub = Publisher::create(routes, "f", po);
      if (!pub) {
        ADD_FAILURE() << pub.error().message;
        return;
      }
      std::uint64_t id = 0;
      while (!stop_publishing_) {
        const std::string p = payload_for(id);
        const auto bytes = std::span(reinterpret_cast<const std::byte*>(p.data()), p.size());
        const auto partition = static_cast<std::uint32_t>(id % static_cast<std::uint64_t>(partitions_));
        auto e = pub.value()->publish_to(partition, bytes, [this, id](const PublishResult& r) {
          if (r.status == PublishStatus::ok) {
            history_.acknowledged(id, r.partition, r.offset);
            {
              std::lock_guard lock(acks_mu_);
              ack_offsets_[id] = r.offset;
            }
            acked_.fetch_add(1);
            if (id > max_acked_id_.load()) max_acked_id_.store(id);
            if (id >= mark_id_.load() && mark_acked_at_.load() == Clock::time_point{}) {
              mark_acked_at_.store(Clock::now());
            }
          } else {
            history_.failed(id);
          }
        });
        if (e == client::ErrorCode::ok) {
          history_.published(id, bytes);
          next_id_.store(++id);
        } else if (e != client::ErrorCode::backpressure) {
          history_.published(id, bytes);
          history_.failed(id);
          ++id;
        }
        pub.value()->poll();
        if (id % 64 == 0) std::this_thread::sleep_for(publish_pause_);  // ~ a steady stream, not a flood
      }
      pub.value()->flush(30s);
      publisher_done_ = true;
    });
  }

  // Runs traffic, applies `fault` once some records are acknowledged, checks
  // progress after it and the whole history at the end.
  void run_with_fault(const std::function<void()>& fault) {
    start_traffic();
    wait_for([&] { return acked_.load() >= 2000; }, 20s, "initial traffic");
    fault();
    // Progress means records published after the fault get acknowledged
    // (records already committed before it may be acknowledged late).
    const std::uint64_t at_fault = acked_.load();
    const std::uint64_t first_after = next_id_.load();
    wait_for([&] { return max_acked_id_.load() >= first_after + 2000; }, 30s, "progress after the fault");
    stop_publishing_ = true;
    wait_for([&] { return publisher_done_.load(); }, 40s, "publisher flush");
    const auto acked = acked_.load();
    if (expect_data_loss_) {
      // Records in a range a data_lost notice named never arrive: caught up
      // means every acknowledged record was delivered or declared lost.
      wait_for([&] { return history_.check().lost == 0; }, 30s, "subscribers catching up");
    } else {
      wait_for([&] { return delivered_[0].load() >= acked && delivered_[1].load() >= acked; }, 30s,
               "subscribers catching up");
    }
    std::this_thread::sleep_for(300ms);  // let duplicates, if any, arrive
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
    HistoryReport r = history_.check();
    report_ = r;
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_GE(r.acknowledged, at_fault + 2000) << r.summary();
    EXPECT_GE(max_acked_id_.load(), first_after + 2000);
    if (!expect_data_loss_) {
      EXPECT_EQ(data_lost_notices_.load(), 0u) << "a fault with R-1 or fewer failures lost data";
      EXPECT_EQ(r.declared_lost, 0u);
    }
  }

  bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout, const char* what) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!cond() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    const bool met = cond();
    EXPECT_TRUE(met) << "timed out waiting for " << what << " (acked " << acked_.load() << ", delivered "
                     << delivered_[0].load() << "/" << delivered_[1].load() << ")";
    return met;
  }

  // Offsets are never reused and follow publishing order: one producer, one
  // partition (partitions_ == 1), so a later record always has a higher offset.
  void expect_offsets_follow_publishing() {
    std::lock_guard lock(acks_mu_);
    ASSERT_FALSE(ack_offsets_.empty());
    std::uint64_t prev_id = 0, prev_offset = 0;
    bool first = true;
    std::uint64_t out_of_place = 0;
    for (const auto& [id, offset] : ack_offsets_) {
      if (!first && offset <= prev_offset && out_of_place++ < 5) {
        ADD_FAILURE() << "record " << id << " acknowledged at offset " << offset << ", record " << prev_id
                      << " before it at " << prev_offset;
      }
      first = false;
      prev_id = id;
      prev_offset = offset;
    }
    EXPECT_EQ(out_of_place, 0u);
  }

  // A subscriber that joins after the run and reads the partition from its
  // earliest record, through the route the controller gives now, finds
  // every acknowledged record at its acknowledged offset: what was
  // acknowledged is held by the chain that exists now, not only by one the
  // live subscribers happened to follow.
  void expect_fresh_reader_sees_every_ack() {
    std::map<std::uint64_t, std::uint64_t> expected;
    {
      std::lock_guard lock(acks_mu_);
      expected = ack_offsets_;
    }
    ASSERT_FALSE(expected.empty());
    control::ControllerClient::Options co;
    co.address = cluster_->controller_address();
    broker::ControllerRoutes routes(co, "fresh-reader");
    SubscriberOptions so;
    so.provider = client_provider_;
    auto sub = Subscriber::create(routes, "f", so);
    ASSERT_TRUE(sub.ok()) << sub.error().message;
    std::map<std::uint64_t, std::uint64_t> seen;  // id -> offset
    const auto deadline = Clock::now() + 30s;
    auto found_all = [&] {
      return std::all_of(expected.begin(), expected.end(),
                         [&](const auto& e) { return seen.count(e.first) != 0; });
    };
    while (Clock::now() < deadline && (seen.size() < expected.size() || !found_all())) {
      if (sub.value()->poll([&](const Message& m) { seen.emplace(id_of(m.payload), m.offset); }) == 0) {
        std::this_thread::sleep_for(200us);
      }
    }
    std::uint64_t missing = 0, moved = 0;
    for (const auto& [id, offset] : expected) {
      auto it = seen.find(id);
      if (it == seen.end()) {
        if (missing++ < 3)
          ADD_FAILURE() << "acknowledged record " << id << " (offset " << offset << ") is gone";
      } else if (it->second != offset) {
        if (moved++ < 3) {
          ADD_FAILURE() << "acknowledged record " << id << " is at offset " << it->second << ", acked at "
                        << offset;
        }
      }
    }
    EXPECT_EQ(missing, 0u) << "of " << expected.size() << " acknowledged";
    EXPECT_EQ(moved, 0u);
  }

  // Records published from now on; mark_acked_at_ becomes the time the first
  // of them is acknowledged. The publisher may be sending next_id_ at this
  // moment, so the mark starts after it.
  void mark_next_publish() {
    mark_acked_at_.store(Clock::time_point{});
    mark_id_.store(next_id_.load() + 1);
  }

  // For the network-cut tests: a namespace (with a second veth pair if
  // asked) in *out, or the test skipped (failed under
  // CATENA_REQUIRE_NETNS=1). Call from SetUp() and return if *out is null.
  static void open_netns(bool second_link, std::unique_ptr<testing::NetnsLink>* out) {
    std::string why;
    auto netns = testing::NetnsLink::create(&why);
    if (!netns) {
      const char* require = std::getenv("CATENA_REQUIRE_NETNS");
      if (require != nullptr && std::string(require) == "1") FAIL() << "CATENA_REQUIRE_NETNS=1: " << why;
      GTEST_SKIP() << "needs a network namespace (root and iproute2): " << why;
    }
    if (second_link) {
      ASSERT_TRUE(netns->add_second_link(&why)) << why;
    }
    *out = std::move(netns);
  }

  std::optional<control::idl::NodeStatus> status_of(const std::string& node_id) {
    auto st = admin_->cluster_status();
    if (!st.ok()) return std::nullopt;
    for (const auto& n : st->nodes) {
      if (n.info.node_id == node_id) return n;
    }
    return std::nullopt;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<control::ControllerClient> admin_;
  HistoryChecker history_{2};
  std::atomic<bool> stop_{false};
  std::atomic<bool> stop_publishing_{false};
  std::atomic<bool> publisher_done_{false};
  std::atomic<std::uint64_t> acked_{0};
  std::atomic<std::uint64_t> next_id_{0};
  std::atomic<std::uint64_t> max_acked_id_{0};
  std::atomic<std::uint64_t> delivered_[2] = {0, 0};
  std::atomic<std::uint64_t> mark_id_{~0ull};
  std::atomic<std::uint64_t> data_lost_notices_{0};
  bool expect_data_loss_ = false;  // only a fault that kills every replica may lose data
  std::atomic<Clock::time_point> mark_acked_at_{};
  HistoryReport report_;  // of the last run_with_fault()
  std::mutex acks_mu_;
  std::map<std::uint64_t, std::uint64_t> ack_offsets_;  // record id -> acknowledged offset (in its partition)
  std::string client_provider_ = "soft";
  // Retention: 8 slots of this per replica (~140k records of 64 bytes), and
  // the TTL outlasts every test, so with the publisher's pace (a pause every
  // 64 records) it bounds how long a test can publish before the head pushes
  // back (log_full).
  std::int64_t segment_bytes_ = 2 << 20;
  int replication_ = 3;
  // Partitions of "f"; the publisher sends record i to partition i % partitions_.
  int partitions_ = 1;
  std::chrono::microseconds publish_pause_ = 200us;
  std::vector<std::thread> threads_;
};

}  // namespace catena::testing
