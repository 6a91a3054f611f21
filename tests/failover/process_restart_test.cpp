// Process-level recovery (issue 13, level 2) with real processes: a broker
// killed with SIGKILL and started again with its kept memory (catenad
// --keep-dir, LocalCluster's keep_root) rejoins its chain with what it held;
// every acknowledged record still reaches both subscribers exactly once, in
// order, and a fresh reader finds each at its acknowledged offset.
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>

#include "failover_fixture.hpp"

namespace catena::testing {
namespace {

class ProcessRestart : public Failover {
 protected:
  void SetUp() override {
    ClusterOptions o = default_options();
    o.nodes = 3;  // R=3 on three nodes: the chain can only get its own member back
    o.keep_root = "/dev/shm/catena-test-" + std::to_string(getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name();
    start_cluster(o);
  }

  // How many records node i said it recovered from kept memory (its log).
  std::uint64_t recovered_records(int i) {
    std::ifstream log(std::string("failover-") +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" +
                      cluster_->nodes()[static_cast<std::size_t>(i)].name + ".log");
    const std::regex line(R"(recovered offsets \[(\d+), (\d+)\) from kept memory \((\d+) records)");
    std::uint64_t records = 0;
    std::string text;
    while (std::getline(log, text)) {
      std::smatch m;
      if (std::regex_search(text, m, line)) records += std::stoull(m[3].str());
    }
    return records;
  }

  bool chain_has(const std::string& node_id, std::size_t members) {
    auto r = admin_->get_route("f", 0, 0);
    if (!r.ok() || r->replicas.size() != members) return false;
    return std::any_of(r->replicas.begin(), r->replicas.end(),
                       [&](const control::idl::Replica& x) { return x.node_id == node_id; });
  }
};

TEST_F(ProcessRestart, AKilledBrokerStartsAgainWithItsDataAndRejoinsItsChain) {
  int victim = -1;
  std::string victim_id;
  run_with_fault([&] {
    victim = node_at(1);
    ASSERT_GE(victim, 0);
    victim_id = cluster_->nodes()[static_cast<std::size_t>(victim)].node_id;
    ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(victim), SIGKILL));
    wait_for([&] { return !chain_has(victim_id, 3) && !chain_has(victim_id, 2); }, 15s,
             "the chain without the killed node");
    std::string err;
    ASSERT_TRUE(cluster_->restart_node(static_cast<std::size_t>(victim), &err)) << err;
    wait_for([&] { return chain_has(victim_id, 3); }, 30s, "the restarted node back in its chain");
  });
  EXPECT_GT(recovered_records(victim), 1000u) << "the restarted node copied its partition again";
  expect_fresh_reader_sees_every_ack();
}

}  // namespace
}  // namespace catena::testing
