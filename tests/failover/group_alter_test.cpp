// A subscriber group across channel alters, with real processes (controller
// and brokers): two GroupSubscriber members, one of them slow, read a
// channel while a keyed publisher publishes and the channel grows from 2 to
// 3 partitions and shrinks back to 2. Each member reads its partitions
// with a Subscriber of its own and cannot see the partitions a key came
// from; the controller holds a partition at its marker until the group has
// committed its parents up to theirs. So, in the order the two members
// delivered (one counter across both), every key's records come in publish
// order, each acknowledged record once, and the partition the shrink
// removed is read to its marker before the group lets it go.
#include <atomic>
#include <chrono>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/group_subscriber.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/control/controller_client.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;
using test::bytes;

constexpr int kKeys = 12;

struct Delivery {
  int record = 0;  // publish order (the payload)
  int member = 0;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
};

class GroupAlter : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.nodes = 3;
    o.dir = "failover-group-alter";
    o.quiet = true;
    cluster_ = std::make_unique<LocalCluster>(o);
    std::string err;
    ASSERT_TRUE(cluster_->start(&err)) << err;
    co_.address = cluster_->controller_address();
    admin_ = std::make_unique<control::ControllerClient>(co_);
    control::idl::ChannelConfig cfg;
    cfg.name = "ga";
    cfg.partitions = 2;
    cfg.replication = 2;
    cfg.segment_bytes = 1 << 20;
    cfg.ttl_ms = 600000;
    auto ch = admin_->create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }

  void TearDown() override {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    cluster_.reset();
  }

  // A member polling in its own thread until stop_; `per_record`: how long
  // it takes over each record (a slow consumer lags behind).
  void start_member(int member, std::chrono::microseconds per_record) {
    threads_.emplace_back([this, member, per_record] {
      broker::ControllerRoutes routes(co_, "member-" + std::to_string(member));
      GroupSubscriberOptions go;
      go.controller = co_.address;
      go.group = "gg";
      go.member_name = "m" + std::to_string(member);
      go.subscriber.start = Start::earliest;
      go.commit_interval = 200ms;
      auto sub = GroupSubscriber::create(routes, "ga", go);
      if (!sub) {
        ADD_FAILURE() << "member " << member << ": " << sub.error().message;
        return;
      }
      ++joined_;
      while (!stop_) {
        const int n = sub.value()->poll([&](const Message& m) {
          const std::string payload(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
          {
            std::lock_guard lock(mu_);
            log_.push_back(Delivery{std::stoi(payload), member, m.partition, m.offset});
          }
          if (per_record.count() > 0) std::this_thread::sleep_for(per_record);
        });
        if (n == 0) std::this_thread::sleep_for(200us);
      }
    });
  }

  void start_publisher() {
    threads_.emplace_back([this] {
      broker::ControllerRoutes routes(co_, "publisher");
      PublisherOptions po;
      po.retry_timeout = 60s;
      auto pub = Publisher::create(routes, "ga", po);
      if (!pub) {
        ADD_FAILURE() << pub.error().message;
        return;
      }
      for (int i = 0; !stop_publishing_; ++i) {
        const std::string key = "key-" + std::to_string(i % kKeys);
        const std::string payload = std::to_string(i);
        const auto e = pub.value()->publish(bytes(key), bytes(payload), [this, i](const PublishResult& r) {
          std::lock_guard lock(mu_);
          if (r.status == PublishStatus::ok) acked_[i] = {r.partition, r.offset};
        });
        if (e != client::ErrorCode::ok) --i;  // backpressure: the same record again
        pub.value()->poll();
        std::this_thread::sleep_for(400us);
      }
      EXPECT_TRUE(pub.value()->flush(30s));
      publisher_done_ = true;
    });
  }

  std::size_t acked() {
    std::lock_guard lock(mu_);
    return acked_.size();
  }

  void wait_acked(std::size_t n) {
    const auto deadline = Steady::now() + 60s;
    while (acked() < n && Steady::now() < deadline) std::this_thread::sleep_for(20ms);
    ASSERT_GE(acked(), n);
  }

  void alter(int partitions) {
    auto r = admin_->alter_channel("ga", partitions);
    ASSERT_TRUE(r.ok()) << r.error().describe();
    ASSERT_TRUE(r->generations.back().complete);
    std::printf("[ group-alter ] altered to %d partitions with %zu records acknowledged\n", partitions,
                acked());
  }

  control::ControllerClient::Options co_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<control::ControllerClient> admin_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false}, stop_publishing_{false}, publisher_done_{false};
  std::atomic<int> joined_{0};
  std::mutex mu_;
  std::vector<Delivery> log_;                                     // in delivery order, both members
  std::map<int, std::pair<std::uint32_t, std::uint64_t>> acked_;  // record -> partition, offset
};

TEST_F(GroupAlter, EachKeysRecordsReachTheGroupInOrderAcrossAGrowAndAShrink) {
  start_member(0, 1500us);  // slow: partition 0's backlog grows while member 1 keeps up
  start_member(1, 0us);
  for (auto deadline = Steady::now() + 30s; joined_ < 2 && Steady::now() < deadline;)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(joined_, 2);
  start_publisher();
  wait_acked(600);
  alter(3);
  wait_acked(1400);
  alter(2);
  wait_acked(2200);
  stop_publishing_ = true;
  for (auto deadline = Steady::now() + 40s; !publisher_done_ && Steady::now() < deadline;)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(publisher_done_);
  std::map<int, std::pair<std::uint32_t, std::uint64_t>> want;
  {
    std::lock_guard lock(mu_);
    want = acked_;
  }
  // Every acknowledged record delivered (the slow member catches up).
  for (auto deadline = Steady::now() + 60s;; std::this_thread::sleep_for(100ms)) {
    std::size_t delivered = 0;
    {
      std::lock_guard lock(mu_);
      std::map<int, int> seen;
      for (const auto& d : log_) seen[d.record] = 1;
      for (const auto& [i, at] : want) delivered += seen.count(i);
    }
    if (delivered == want.size() || Steady::now() > deadline) break;
  }
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();

  std::map<int, int> times;
  std::map<int, int> last_of_key;  // key -> the last record of it delivered
  int out_of_order = 0, shown = 0;
  std::map<int, std::map<std::uint32_t, int>> per_member;
  for (const auto& d : log_) {
    ++times[d.record];
    ++per_member[d.member][d.partition];
    const int key = d.record % kKeys;
    auto last = last_of_key.find(key);
    if (last != last_of_key.end() && d.record < last->second) {
      ++out_of_order;
      if (shown++ < 8) {
        ADD_FAILURE() << "key " << key << ": record " << d.record << " (member " << d.member << ", "
                      << d.partition << "@" << d.offset << ") delivered after record " << last->second;
      }
    }
    if (last == last_of_key.end() || d.record > last->second) last_of_key[key] = d.record;
  }
  std::size_t missing = 0, twice = 0;
  for (const auto& [i, at] : want) {
    const auto t = times.find(i);
    if (t == times.end()) {
      ++missing;
    } else if (t->second > 1) {
      ++twice;
    }
  }
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(missing, 0U) << "of " << want.size() << " acknowledged";
  EXPECT_EQ(twice, 0U) << "no member died: each record once";
  for (const auto& [member, parts] : per_member) {
    for (const auto& [p, n] : parts)
      std::printf("[ group-alter ] member %d read %d records of partition %u\n", member, n, p);
  }
  std::printf("[ group-alter ] %zu records acknowledged, %zu deliveries, %d out of key order\n", want.size(),
              log_.size(), out_of_order);
  // The group committed every partition to its end, the removed one too.
  auto status = admin_->describe_group("gg");
  ASSERT_TRUE(status.ok()) << status.error().describe();
  std::map<std::uint32_t, std::uint64_t> end;
  for (const auto& [i, at] : want) end[at.first] = std::max(end[at.first], at.second + 1);
  EXPECT_EQ(end.size(), 3U) << "records went to partition 2 while it existed";
  for (const auto& ps : status->partitions) {
    const auto p = static_cast<std::uint32_t>(ps.partition);
    if (!end.contains(p)) continue;
    EXPECT_GE(ps.committed, static_cast<std::int64_t>(end[p])) << "partition " << p;
  }
}

}  // namespace
}  // namespace catena
