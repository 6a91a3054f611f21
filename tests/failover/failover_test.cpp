// Fault injection with real processes: a controller and five brokers on
// loopback, a channel with R=3, a publisher and two subscribers running
// continuously, and a fault in the middle (kill -9 of the head, a middle
// replica, the tail, two nodes, the controller; SIGSTOP past the detector
// timeout). Afterwards the history checker verifies that every acknowledged
// record reached both subscribers exactly once, in order, intact, and that
// publishing made progress after the fault.
#include <catena/broker/history.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/control/controller_routes.hpp>

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

namespace catena {
namespace {

using namespace std::chrono_literals;

std::string payload_for(std::uint64_t id) {
  std::string s = "rec:" + std::to_string(id) + ":";
  s.resize(64, static_cast<char>('a' + id % 26));
  return s;
}

std::uint64_t id_of(std::span<const std::byte> p) {
  const char* c = reinterpret_cast<const char*>(p.data());
  if (p.size() < 5 || std::strncmp(c, "rec:", 4) != 0) return ~0ull;
  return std::strtoull(c + 4, nullptr, 10);
}

class Failover : public ::testing::Test {
 protected:
  static constexpr int kNodes = 5;

  void SetUp() override {
    ClusterOptions o;
    o.nodes = kNodes;
    o.dir = std::string("failover-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.heartbeat_timeout_ms = 300;
    o.heartbeat_interval_ms = 50;
    o.quiet = true;
    cluster_ = std::make_unique<LocalCluster>(o);
    std::string err;
    ASSERT_TRUE(cluster_->start(&err)) << err;
    control::ControllerClient::Options co;
    co.address = cluster_->controller_address();
    admin_ = std::make_unique<control::ControllerClient>(co);
    control::idl::ChannelConfig cfg;
    cfg.name = "f";
    cfg.partitions = 1;
    cfg.replication = 3;
    cfg.segment_bytes = 1 << 20;
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
        control::ControllerRoutes routes(co, "sub-" + std::to_string(s));
        SubscriberOptions so;
        so.read_from = s == 0 ? SubscriberOptions::ReadFrom::tail : SubscriberOptions::ReadFrom::head;
        auto sub = Subscriber::create(routes, "f", so);
        if (!sub) {
          ADD_FAILURE() << sub.error().message;
          return;
        }
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
      control::ControllerRoutes routes(co, "publisher");
      PublisherOptions po;
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
        auto e = pub.value()->publish_to(0, bytes, [this, id](const PublishResult& r) {
          if (r.status == PublishStatus::ok) {
            history_.acknowledged(id, r.partition, r.offset);
            acked_.fetch_add(1);
            if (id > max_acked_id_.load()) max_acked_id_.store(id);
          } else {
            history_.failed(id);
          }
        });
        if (e == fabric::Errc::ok) {
          history_.published(id, bytes);
          next_id_.store(++id);
        } else if (e != fabric::Errc::backpressure) {
          history_.published(id, bytes);
          history_.failed(id);
          ++id;
        }
        pub.value()->poll();
        if (id % 64 == 0) std::this_thread::sleep_for(200us);  // ~ a steady stream, not a flood
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
    wait_for([&] { return delivered_[0].load() >= acked && delivered_[1].load() >= acked; }, 30s,
             "subscribers catching up");
    std::this_thread::sleep_for(300ms);  // let duplicates, if any, arrive
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
    HistoryReport r = history_.check();
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_GE(r.acknowledged, at_fault + 2000) << r.summary();
    EXPECT_GE(max_acked_id_.load(), first_after + 2000);
  }

  void wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout, const char* what) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!cond() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(cond()) << "timed out waiting for " << what << " (acked " << acked_.load() << ", delivered "
                        << delivered_[0].load() << "/" << delivered_[1].load() << ")";
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
  std::vector<std::thread> threads_;
};

TEST_F(Failover, KillHead) {
  run_with_fault([&] { ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(node_at(0)), SIGKILL)); });
}

TEST_F(Failover, KillMiddle) {
  run_with_fault([&] { ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(node_at(1)), SIGKILL)); });
}

TEST_F(Failover, KillTail) {
  run_with_fault([&] { ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(node_at(-1)), SIGKILL)); });
}

TEST_F(Failover, KillTwoNodesOneAfterTheOther) {
  run_with_fault([&] {
    ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(node_at(0)), SIGKILL));
    const auto first_after = next_id_.load();
    wait_for([&] { return max_acked_id_.load() >= first_after + 1000; }, 30s, "progress after the first kill");
    ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(node_at(1)), SIGKILL));
  });
}

TEST_F(Failover, RestartController) {
  run_with_fault([&] {
    std::string err;
    ASSERT_TRUE(cluster_->restart_controller(&err)) << err;
  });
}

TEST_F(Failover, PauseNodePastTimeoutThenResume) {
  run_with_fault([&] {
    const auto victim = static_cast<std::size_t>(node_at(1));
    ASSERT_TRUE(cluster_->signal_node(victim, SIGSTOP));
    std::this_thread::sleep_for(1500ms);  // 5x the detector timeout
    ASSERT_TRUE(cluster_->signal_node(victim, SIGCONT));
  });
}

}  // namespace
}  // namespace catena
