// Subscriber groups with real processes: members are `catena subscribe
// --group` processes (each prints partition:offset per record to its own
// file) consuming a 4-partition channel while a publisher keeps
// publishing. Members join, one is killed with SIGKILL, one leaves with
// SIGINT, and the controller is killed and restarted in the middle of a
// reassignment. Afterwards: every acknowledged record reached the group;
// each member saw each partition in offset order; a record reached two
// members only if one of them was the killed one (delivered after its last
// commit: at-least-once, as the README says); and the group's committed
// offsets are the partitions' ends.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <memory>
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

#include "../child_process.hpp"
#include "../forwarding_routes.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;
using Record = std::pair<std::uint32_t, std::uint64_t>;  // partition, offset

constexpr int kPartitions = 4;

class Groups : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.nodes = 3;
    o.dir = std::string("failover-groups-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.quiet = true;
    o.group_session_timeout_ms = 3000;
    cluster_ = std::make_unique<LocalCluster>(o);
    std::string err;
    ASSERT_TRUE(cluster_->start(&err)) << err;
    dir_ = o.dir;
    control::ControllerClient::Options co;
    co.address = cluster_->controller_address();
    admin_ = std::make_unique<control::ControllerClient>(co);
    control::idl::ChannelConfig cfg;
    cfg.name = "g";
    cfg.partitions = kPartitions;
    cfg.replication = 2;
    cfg.segment_bytes = 4 << 20;
    cfg.ttl_ms = 600000;
    auto ch = admin_->create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }

  void TearDown() override {
    stop_publishing_ = true;
    if (publisher_.joinable()) publisher_.join();
    members_.clear();  // SIGKILLs and reaps the members still running
    cluster_.reset();
  }

  // A member: `catena subscribe g --group grp --offsets` printing to member-<i>.out.
  void start_member(int i) {
    const std::string stem = dir_ + "/member-" + std::to_string(i);
    auto member = std::make_unique<test::ChildProcess>(
        std::vector<std::string>{self_dir() + "/catena", "--controller", cluster_->controller_address(),
                                 "subscribe", "g", "--group", "grp", "--offsets", "--from", "earliest"},
        stem + ".out", stem + ".err");
    ASSERT_TRUE(member->running());
    members_[i] = std::move(member);
  }

  void stop_member(int i, int sig) {
    const auto status = members_.at(i)->signal_and_wait(sig);
    if (sig == SIGINT) {
      ASSERT_TRUE(status.has_value()) << "member " << i << " did not end within 20 s of SIGINT";
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "member " << i << " status " << *status;
    }
    members_.erase(i);
  }

  // What member i printed, in order.
  std::vector<Record> read_member(int i) const {
    std::vector<Record> out;
    std::ifstream in(dir_ + "/member-" + std::to_string(i) + ".out");
    std::string line;
    while (std::getline(in, line)) {
      const auto colon = line.find(':');
      const auto space = line.find(' ');
      if (colon == std::string::npos || space == std::string::npos) continue;  // a line cut by SIGKILL
      out.emplace_back(std::stoul(line.substr(0, colon)),
                       std::stoull(line.substr(colon + 1, space - colon - 1)));
    }
    return out;
  }

  void start_publisher() {
    publisher_ = std::thread([this] {
      control::ControllerClient::Options co;
      co.address = cluster_->controller_address();
      broker::ControllerRoutes routes(co, "publisher");
      PublisherOptions po;
      po.retry_timeout = 60s;
      auto pub = Publisher::create(routes, "g", po);
      if (!pub) {
        ADD_FAILURE() << pub.error().message;
        return;
      }
      for (std::uint64_t id = 0; !stop_publishing_; ++id) {
        const std::string p = "id-" + std::to_string(id);
        const auto bytes = std::span(reinterpret_cast<const std::byte*>(p.data()), p.size());
        const auto e = pub.value()->publish_to(static_cast<std::uint32_t>(id % kPartitions), bytes,
                                               [this](const PublishResult& r) {
                                                 if (r.status != PublishStatus::ok) return;
                                                 std::lock_guard lock(mu_);
                                                 acked_.insert({r.partition, r.offset});
                                               });
        if (e != client::ErrorCode::ok) --id;
        pub.value()->poll();
        std::this_thread::sleep_for(500us);  // a steady stream, ~2000 records a second
      }
      EXPECT_TRUE(pub.value()->flush(30s));
    });
  }

  std::size_t acked() {
    std::lock_guard lock(mu_);
    return acked_.size();
  }

  void wait_acked(std::size_t n) {
    const auto deadline = Steady::now() + 30s;
    while (acked() < n && Steady::now() < deadline) std::this_thread::sleep_for(20ms);
    ASSERT_GE(acked(), n);
  }

  // Stops publishing, waits until the members printed every acknowledged
  // record, stops the members left with SIGINT (they commit and leave).
  std::set<Record> finish(const std::vector<int>& members) {
    stop_publishing_ = true;
    publisher_.join();
    std::set<Record> want;
    {
      std::lock_guard lock(mu_);
      want = acked_;
    }
    std::set<Record> seen;
    const auto deadline = Steady::now() + 40s;
    for (;;) {
      seen.clear();
      for (int i : members) {
        for (const auto& r : read_member(i)) seen.insert(r);
      }
      if (std::includes(seen.begin(), seen.end(), want.begin(), want.end()) || Steady::now() > deadline)
        break;
      std::this_thread::sleep_for(200ms);
    }
    std::vector<int> running;
    for (const auto& [i, member] : members_) running.push_back(i);
    for (int i : running) stop_member(i, SIGINT);
    return want;
  }

  // The checks every scenario shares; `killed`: members killed with SIGKILL.
  void check(const std::vector<int>& members, const std::set<int>& killed, const std::set<Record>& want) {
    std::map<Record, std::vector<int>> by_record;
    for (int i : members) {
      std::map<std::uint32_t, std::uint64_t> next;
      for (const auto& [p, o] : read_member(i)) {
        if (auto n = next.find(p); n != next.end()) {
          EXPECT_GE(o, n->second) << "member " << i << " partition " << p << " went back";
        }
        next[p] = o + 1;
        by_record[{p, o}].push_back(i);
      }
    }
    std::size_t missing = 0, duplicates = 0;
    for (const auto& r : want) {
      if (!by_record.contains(r)) ++missing;
    }
    for (const auto& [r, who] : by_record) {
      if (who.size() < 2) continue;
      ++duplicates;
      const bool from_killed = std::any_of(who.begin(), who.end(), [&](int i) { return killed.contains(i); });
      EXPECT_TRUE(from_killed) << "partition " << r.first << " offset " << r.second << " delivered "
                               << who.size() << " times, by live members only";
      EXPECT_LE(who.size(), 2U);
    }
    EXPECT_EQ(missing, 0U) << "of " << want.size() << " acknowledged records";
    if (killed.empty()) {
      EXPECT_EQ(duplicates, 0U);
    }
    std::printf("[ groups ] %zu records acknowledged, all delivered; %zu delivered twice (killed member)\n",
                want.size(), duplicates);
    // Every member committed where it stopped: the group's offsets are the
    // partitions' ends.
    std::map<std::uint32_t, std::uint64_t> end;
    for (const auto& [p, o] : want) end[p] = std::max(end[p], o + 1);
    auto status = admin_->describe_group("grp");
    ASSERT_TRUE(status.ok()) << status.error().describe();
    EXPECT_TRUE(status->members.empty()) << "every member left";
    for (const auto& ps : status->partitions) {
      EXPECT_EQ(ps.committed, static_cast<std::int64_t>(end[static_cast<std::uint32_t>(ps.partition)]))
          << "partition " << ps.partition;
    }
  }

  // `catena --controller ... ARGS`'s stdout.
  std::string run_cli(const std::string& args) const {
    const std::string cmd =
        self_dir() + "/catena --controller " + cluster_->controller_address() + " " + args + " 2>/dev/null";
    std::string out;
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (std::size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
      pclose(f);
    }
    return out;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<control::ControllerClient> admin_;
  std::string dir_;
  std::map<int, std::unique_ptr<test::ChildProcess>> members_;
  std::thread publisher_;
  std::atomic<bool> stop_publishing_{false};
  std::mutex mu_;
  std::set<Record> acked_;
};

TEST_F(Groups, MembersJoinDieAndLeaveUnderTrafficAndTheGroupGetsEveryRecord) {
  start_member(0);
  start_member(1);
  start_publisher();
  wait_acked(2000);
  start_member(2);  // takes partitions from 0 and 1 by revoke, commit, release
  wait_acked(acked() + 3000);
  stop_member(1, SIGKILL);  // its partitions move after the session timeout, from its last commit
  start_member(3);
  wait_acked(acked() + 8000);
  stop_member(0, SIGINT);  // leaves: its partitions move at once, from the offsets it committed
  wait_acked(acked() + 3000);
  const auto want = finish({0, 1, 2, 3});
  check({0, 1, 2, 3}, {1}, want);
  // What `catena group` shows of it.
  const std::string list = run_cli("group list");
  EXPECT_NE(list.find("grp"), std::string::npos) << list;
  const std::string described = run_cli("group describe grp");
  EXPECT_NE(described.find("group grp  channel g"), std::string::npos) << described;
  EXPECT_NE(described.find("committed"), std::string::npos) << described;
  EXPECT_EQ(run_cli("group describe nosuch").find("nosuch"), std::string::npos) << "an error, on stderr";
}

TEST_F(Groups, AControllerRestartInTheMiddleOfAReassignmentDeliversEveryRecordOnce) {
  start_member(0);
  start_member(1);
  start_publisher();
  wait_acked(2000);
  start_member(2);
  // Restart once the controller has member 2 (a sanitizer build starts a
  // process slower than the 150 ms this once slept): its join has moved
  // partitions, so revokes are under way.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto status = admin_->describe_group("grp");
    if (status.ok() && status->members.size() == 3) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "member 2 never joined";
    std::this_thread::sleep_for(5ms);
  }
  std::string err;
  ASSERT_TRUE(cluster_->restart_controller(&err)) << err;
  wait_acked(acked() + 8000);
  const auto want = finish({0, 1, 2});
  check({0, 1, 2}, {}, want);
}

// A RouteSource whose channel layouts take `delay` to answer (a controller
// far away, or busy): each Subscriber a group member starts asks for one.
class SlowLayouts final : public test::ForwardingRoutes {
 public:
  SlowLayouts(RouteSource& inner, std::chrono::milliseconds delay) : ForwardingRoutes(inner), delay_(delay) {}
  client::Result<ChannelLayout> layout(const std::string& channel) override {
    std::this_thread::sleep_for(delay_);
    return ForwardingRoutes::layout(channel);
  }

 private:
  const std::chrono::milliseconds delay_;
};

// A member assigned many partitions at once starts a Subscriber for each
// on its worker thread, between heartbeats. 24 partitions whose layouts
// take 200 ms each (4.8 s) held its heartbeats up past the 3 s session: the
// controller dropped the member, which joined again. It must stay the
// member it joined as, and come to consume all 24.
TEST_F(Groups, AMemberAssignedManyPartitionsAtOnceStaysInTheGroup) {
  control::idl::ChannelConfig cfg;
  cfg.name = "many";
  cfg.partitions = 24;
  cfg.replication = 2;
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  ASSERT_TRUE(admin_->create_channel(cfg).ok());
  control::ControllerClient::Options co;
  co.address = cluster_->controller_address();
  broker::ControllerRoutes routes(co, "many");
  SlowLayouts slow(routes, 200ms);
  GroupSubscriberOptions go;
  go.controller = cluster_->controller_address();
  go.group = "grp-many";
  go.member_name = "m";
  auto member = GroupSubscriber::create(slow, "many", go);
  ASSERT_TRUE(member.ok()) << member.error().message;
  const auto deadline = Steady::now() + 30s;
  while (Steady::now() < deadline && (*member)->partitions().size() < 24) {
    (*member)->poll_for([](const Message&) {}, 50ms);
  }
  EXPECT_EQ((*member)->partitions().size(), 24u);
  // And it stays: a few more sessions' worth of polling.
  const auto until = Steady::now() + 4s;
  while (Steady::now() < until) (*member)->poll_for([](const Message&) {}, 50ms);
  EXPECT_EQ((*member)->stats().joins, 1u) << "the member was dropped and joined again";
  auto group = admin_->describe_group("grp-many");
  ASSERT_TRUE(group.ok()) << group.error().describe();
  EXPECT_EQ(group->members.size(), 1u);
}

}  // namespace
}  // namespace catena
