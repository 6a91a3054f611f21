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
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/group_subscriber.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/clock.hpp>

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
  std::uint64_t at_ns = 0;  // wall clock, when it was handed over
};

// Per key, a record seen after a later one of the same key (the first 8
// are reported as failures).
class KeyOrder {
 public:
  void see(const Delivery& d, const char* delivered) {
    const int key = d.record % kKeys;
    auto last = last_of_key_.find(key);
    if (last != last_of_key_.end() && d.record < last->second) {
      if (violations_++ < 8) {
        ADD_FAILURE() << "key " << key << ": record " << d.record << " (member " << d.member << ", "
                      << d.partition << "@" << d.offset << ") " << delivered << " after record "
                      << last->second;
      }
    }
    if (last == last_of_key_.end() || d.record > last->second) last_of_key_[key] = d.record;
  }
  [[nodiscard]] int violations() const { return violations_; }

 private:
  std::map<int, int> last_of_key_;  // key -> the last record of it seen
  int violations_ = 0;
};

class GroupAlter : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.nodes = 3;
    o.dir = std::string("failover-group-alter-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.quiet = true;
    o.group_session_timeout_ms = session_timeout_ms_;
    dir_ = o.dir;
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
    stop_publishing_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    for (const pid_t pid : processes_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    cluster_.reset();
  }

  // A member that is a process: `catena subscribe ga --group gg --times
  // --offsets`, printing to process-<i>.out (flushed before each commit).
  pid_t start_process_member(int i) {
    const std::string out = dir_ + "/process-" + std::to_string(i) + ".out";
    const std::string err = dir_ + "/process-" + std::to_string(i) + ".err";
    const std::string bin = self_dir() + "/catena";
    const std::string controller = cluster_->controller_address();
    std::remove(out.c_str());  // not an earlier run's: the test reads it while the member runs
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int efd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(efd, 2);
      execl(bin.c_str(), bin.c_str(), "--controller", controller.c_str(), "subscribe", "ga", "--group", "gg",
            "--from", "earliest", "--times", "--offsets", static_cast<char*>(nullptr));
      _exit(127);
    }
    EXPECT_GT(pid, 0);
    if (pid > 0) processes_.push_back(pid);
    return pid;
  }

  void kill_process(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::erase(processes_, pid);
  }

  // What process member i printed ("published:delivered partition:offset record").
  std::vector<Delivery> read_process_member(int i) const {
    std::vector<Delivery> out;
    std::ifstream in(dir_ + "/process-" + std::to_string(i) + ".out");
    std::string line;
    while (std::getline(in, line)) {
      unsigned long long published = 0, delivered = 0, offset = 0;
      unsigned partition = 0;
      int record = 0, used = 0;
      if (std::sscanf(line.c_str(), "%llu:%llu %u:%llu %d%n", &published, &delivered, &partition, &offset,
                      &record, &used) != 5 ||
          static_cast<std::size_t>(used) != line.size()) {
        continue;  // a line cut by SIGKILL
      }
      out.push_back(Delivery{record, i, partition, offset, delivered});
    }
    return out;
  }

  std::size_t members_in_group() {
    auto g = admin_->describe_group("gg");
    return g.ok() ? g->members.size() : 0;
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
            log_.push_back(Delivery{std::stoi(payload), member, m.partition, m.offset, wall_clock_ns()});
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

  // Returns the new generation's markers (partition -> offset).
  std::map<std::int32_t, std::int64_t> alter(int partitions) {
    auto r = admin_->alter_channel("ga", partitions);
    EXPECT_TRUE(r.ok()) << r.error().describe();
    if (!r.ok()) return {};
    EXPECT_TRUE(r->generations.back().complete);
    std::printf("[ group-alter ] altered to %d partitions with %zu records acknowledged\n", partitions,
                acked());
    return r->generations.back().markers;
  }

  int session_timeout_ms_ = 0;  // the controller's default
  std::string dir_;
  std::vector<pid_t> processes_;
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
  KeyOrder order;
  std::map<int, std::map<std::uint32_t, int>> per_member;
  for (const auto& d : log_) {
    ++times[d.record];
    ++per_member[d.member][d.partition];
    order.see(d, "delivered");
  }
  const int out_of_order = order.violations();
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

// Members killed with SIGKILL: a process member at a grow's markers, and
// another just as it starts reading the partitions its join took (in the
// middle of that rebalance). Each hands over at its last commit, as at any
// time: the partitions go to the member left once the session times out,
// which delivers again what the killed one delivered after that commit.
// The records a killed member printed are counted as delivered (it flushed
// them before each commit, the ones markers and revokes make too: a commit
// never covers a record the process had not written out). So: every
// acknowledged record delivered; a record delivered twice only if a killed
// member delivered it first, on a partition the survivor then took over at
// or below it; and in the order of first deliveries (wall clock, one
// machine), every key's records in publish order across the grow.
class GroupAlterKill : public GroupAlter {
 protected:
  GroupAlterKill() { session_timeout_ms_ = 2000; }
};

TEST_F(GroupAlterKill, AMemberKilledInTheMiddleOfAnAlterOrARebalanceHandsOverAtItsLastCommit) {
  start_member(0, 0us);
  const pid_t first = start_process_member(1);
  for (auto deadline = Steady::now() + 30s; members_in_group() < 2 && Steady::now() < deadline;)
    std::this_thread::sleep_for(20ms);
  ASSERT_EQ(members_in_group(), 2u);
  start_publisher();
  wait_acked(800);
  // Killed once the controller has its commits at the grow's markers: it
  // commits at once there (the group waits for them), while the records it
  // printed before may still sit in its stdout buffer.
  const auto markers = alter(3);
  ASSERT_FALSE(markers.empty());
  auto at_its_markers = [&] {
    auto g = admin_->describe_group("gg");
    if (!g.ok()) return false;
    std::set<std::int32_t> its;
    for (const auto& m : g->members) {
      if (m.name == "catena-cli") its.insert(m.partitions.begin(), m.partitions.end());
    }
    if (its.empty()) return false;
    for (const auto& ps : g->partitions) {
      const auto marker = markers.find(ps.partition);
      if (its.contains(ps.partition) && marker != markers.end() && ps.committed < marker->second)
        return false;
    }
    return true;
  };
  for (auto deadline = Steady::now() + 20s; !at_its_markers() && Steady::now() < deadline;)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(at_its_markers()) << "the process member never committed at its markers";
  kill_process(first);
  wait_acked(1600);
  for (auto deadline = Steady::now() + 20s; members_in_group() > 1 && Steady::now() < deadline;)
    std::this_thread::sleep_for(20ms);
  ASSERT_EQ(members_in_group(), 1u) << "the killed member's session timed out";
  // A second process joins; it is killed as soon as it has printed records
  // of what the join moved to it.
  const pid_t second = start_process_member(2);
  for (auto deadline = Steady::now() + 30s; read_process_member(2).empty() && Steady::now() < deadline;)
    std::this_thread::sleep_for(2ms);
  ASSERT_FALSE(read_process_member(2).empty()) << "the second member read nothing";
  kill_process(second);
  wait_acked(2400);
  stop_publishing_ = true;
  for (auto deadline = Steady::now() + 40s; !publisher_done_ && Steady::now() < deadline;)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(publisher_done_);
  std::map<int, std::pair<std::uint32_t, std::uint64_t>> want;
  {
    std::lock_guard lock(mu_);
    want = acked_;
  }
  const std::vector<Delivery> killed[2] = {read_process_member(1), read_process_member(2)};
  auto all_deliveries = [&] {
    std::vector<Delivery> all;
    {
      std::lock_guard lock(mu_);
      all = log_;
    }
    for (const auto& k : killed) all.insert(all.end(), k.begin(), k.end());
    return all;
  };
  // Every acknowledged record delivered (the member left takes everything over).
  for (auto deadline = Steady::now() + 60s;; std::this_thread::sleep_for(100ms)) {
    std::set<int> seen;
    for (const auto& d : all_deliveries()) seen.insert(d.record);
    std::size_t delivered = 0;
    for (const auto& [i, at] : want) delivered += seen.count(i);
    if (delivered == want.size() || Steady::now() > deadline) break;
  }
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();

  std::vector<Delivery> all = all_deliveries();
  std::stable_sort(all.begin(), all.end(),
                   [](const Delivery& a, const Delivery& b) { return a.at_ns < b.at_ns; });
  std::map<int, const Delivery*> first_of, last_of;  // record -> its first and latest delivery
  KeyOrder order;
  int again = 0;
  for (const auto& d : all) {
    auto [it, first_time] = first_of.emplace(d.record, &d);
    auto& previous = last_of[d.record];
    if (!first_time) {
      ++again;
      // Again only after a member that died had it (then the member that
      // took the partition over resumes at that one's last commit).
      EXPECT_NE(previous->member, 0) << "record " << d.record << ": delivered twice though member 0 lives";
      EXPECT_NE(previous->member, d.member) << "record " << d.record << ": twice by one member";
      EXPECT_EQ(d.partition, previous->partition) << "record " << d.record;
      EXPECT_EQ(d.offset, previous->offset) << "record " << d.record;
      previous = &d;
      continue;
    }
    previous = &d;
    order.see(d, "first delivered");
  }
  const int out_of_order = order.violations();
  std::size_t missing = 0;
  for (const auto& [i, at] : want) missing += first_of.contains(i) ? 0 : 1;
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(missing, 0U) << "of " << want.size() << " acknowledged";
  EXPECT_FALSE(killed[0].empty()) << "the first killed member delivered nothing before the kill";
  std::printf(
      "[ group-alter ] %zu records acknowledged; killed members delivered %zu and %zu; %d delivered "
      "again by the member that took over; %d out of key order\n",
      want.size(), killed[0].size(), killed[1].size(), again, out_of_order);
}

}  // namespace
}  // namespace catena
