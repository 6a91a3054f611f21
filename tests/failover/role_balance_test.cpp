// The controller's periodic role balance with real processes: a repair
// leaves one node the tail of every chain, and the balance (every second
// here, `--role-balance-interval-ms`) reorders the chains under traffic
// without a record lost or delivered twice (failover_fixture.hpp's history
// checker).
#include <algorithm>
#include <csignal>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "failover_fixture.hpp"

namespace catena::testing {
namespace {

class RoleBalance : public Failover {
 protected:
  // Three brokers hold every chain of three partitions (R=3); a fourth
  // waits as a spare, so a repair puts it at the tail of all of them.
  void SetUp() override {
    partitions_ = 3;
    ClusterOptions o = default_options();
    o.nodes = 3;
    o.controller_args = {"--role-balance-interval-ms", "1000"};
    dir_ = o.dir;
    start_cluster(o);
    std::string err;
    ASSERT_TRUE(cluster_->add_node(&err)) << err;
  }

  std::string dir_;  // the cluster's: its processes' logs

  struct Roles {
    bool settled = true;  // every chain has its three members, none joining
    std::map<std::string, int> heads, tails;
    std::set<std::string> members;
  };
  Roles roles() {
    Roles out;
    for (int p = 0; p < partitions_; ++p) {
      auto r = admin_->get_route("f", p, 0);
      if (!r.ok() || !r->joining.empty() || r->replicas.size() != 3) {
        out.settled = false;
        continue;
      }
      ++out.heads[r->replicas.front().node_id];
      ++out.tails[r->replicas.back().node_id];
      for (const auto& m : r->replicas) out.members.insert(m.node_id);
    }
    return out;
  }
  static int spread(const std::map<std::string, int>& count, const std::set<std::string>& nodes) {
    int lo = 1 << 30, hi = 0;
    for (const auto& n : nodes) {
      const auto it = count.find(n);
      const int c = it == count.end() ? 0 : it->second;
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
    return hi - lo;
  }
};

TEST_F(RoleBalance, TheControllerEvensOutTheTailsARepairPiledOnTheSpareWhileTrafficFlows) {
  std::string victim, spare;
  run_with_fault([&] {
    const int v = node_at(0);
    ASSERT_GE(v, 0);
    victim = cluster_->nodes()[static_cast<std::size_t>(v)].node_id;
    spare = cluster_->nodes().back().node_id;
    ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(v), SIGKILL));
    // The repair: the spare takes the victim's place in every chain, at the tail.
    ASSERT_TRUE(wait_for(
        [&] {
          const Roles r = roles();
          return r.settled && !r.members.contains(victim) && r.members.contains(spare);
        },
        30s, "the chains repaired onto the spare"));
    // The balance: heads and tails at most one apart over the live nodes.
    ASSERT_TRUE(wait_for(
        [&] {
          const Roles r = roles();
          return r.settled && r.members.size() == 3 && !r.members.contains(victim) &&
                 spread(r.heads, r.members) <= 1 && spread(r.tails, r.members) <= 1;
        },
        30s, "heads and tails balanced over the live nodes"));
  });
  const Roles r = roles();
  EXPECT_LE(spread(r.tails, r.members), 1)
      << "tails on the spare: " << (r.tails.contains(spare) ? r.tails.at(spare) : 0);
  EXPECT_LE(spread(r.heads, r.members), 1);
  // The repair left the spare the tail of all three chains (as
  // Rebalance.BalanceRolesEvensOutWhatARepairSkewedWithoutChangingMembers
  // shows with a simulated cluster): the periodic balance moved roles.
  std::ifstream log(dir_ + "/controller.log");
  std::stringstream text;
  text << log.rdbuf();
  const std::string all = text.str();
  std::smatch m;
  EXPECT_TRUE(std::regex_search(all, m, std::regex(R"(role balance: [1-9][0-9]* move\(s\))")))
      << "no role balance with moves in the controller's log";
}

}  // namespace
}  // namespace catena::testing
