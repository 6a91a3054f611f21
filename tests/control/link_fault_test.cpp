// Data-plane link faults (repair_fixture.hpp): a predecessor's reports that
// it cannot reach a successor that still answers probes and heartbeats.
#include <algorithm>
#include <gtest/gtest.h>
#include <set>
#include <string>

#include "repair_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::Ids;
using testing::Repair;

// Issue 8, sequence 7: a fault only the data plane sees. The head reports
// every second that it cannot use its link to the middle, while the middle
// answers every probe and heartbeat. After link_fault_timeout (3 s) of such
// reports the middle is evicted and the chain repaired without it.
class LinkFaults : public Repair {
 protected:
  idl::FailureReport link_report(const std::string& reporter, const std::string& suspect) {
    idl::FailureReport rep;
    rep.__set_reporter(id(reporter));
    rep.__set_suspect_node_id(id(suspect));
    rep.__set_channel("orders");
    rep.__set_partition(0);
    rep.__set_epoch(route("orders").epoch);
    rep.__set_reason("no link to the successor");
    return rep;
  }

  // Runs with every node heartbeating, but those already evicted (a fenced
  // node stops and registers again; not needed here).
  void run_alive(std::chrono::milliseconds total) {
    for (auto t = 0ms; t < total; t += 100ms) {
      std::set<std::string> dead;
      for (const auto& [name, n] : nodes_) {
        if (state_of(name) == idl::NodeState::DEAD) dead.insert(name);
      }
      run_for(100ms, dead);
    }
  }

  // `reporter` reports `suspect` once a second for `total` while the nodes heartbeat.
  void report_for(std::chrono::milliseconds total, const std::string& reporter, const std::string& suspect) {
    for (auto t = 0ms; t < total; t += 1000ms) {
      if (state_of(suspect) == idl::NodeState::DEAD || state_of(reporter) == idl::NodeState::DEAD) return;
      auto r = controller_->report_failure(link_report(reporter, suspect));
      ASSERT_TRUE(r.ok()) << r.error().describe();
      run_alive(1000ms);
    }
  }
};

TEST_F(LinkFaults, APersistentLinkFaultEvictsTheSuccessorThatStillAnswersProbes) {
  report_for(2000ms, "a", "b");
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE) << "evicted before the link fault had lasted its timeout";
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("c")}));
  report_for(3000ms, "a", "b");
  EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
  run_alive(2000ms);
  const auto chain = chain_of(route("orders"));
  EXPECT_EQ(chain.size(), 3u);
  EXPECT_EQ(std::count(chain.begin(), chain.end(), id("b")), 0) << "b is still in the chain";
  EXPECT_EQ(state_of("a"), idl::NodeState::ALIVE);
}

TEST_F(LinkFaults, ReportsFromANodeThatIsNotTheSuspectsPredecessorEvictNobody) {
  // c is b's successor, a is not c's predecessor: neither writes to the
  // suspect, so neither can tell that its link is the problem.
  report_for(6000ms, "c", "b");
  report_for(6000ms, "a", "c");
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE);
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("c")}));
}

TEST_F(LinkFaults, ReportsThatStopAreForgotten) {
  report_for(2000ms, "a", "b");
  run_alive(4000ms);  // the link came back: no reports for longer than the timeout
  report_for(2000ms, "a", "b");
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE) << "two separate short faults added up to an eviction";
}

TEST_F(LinkFaults, AReporterWhoseReportsKeepEvictingIsEvictedItself) {
  // a's own data plane is broken: it cannot reach b, and then cannot reach
  // the replacement either. The second time, a is the common factor.
  report_for(4000ms, "a", "b");
  ASSERT_EQ(state_of("b"), idl::NodeState::DEAD);
  run_alive(2000ms);
  auto r = route("orders");
  ASSERT_EQ(chain_of(r).size(), 3u);
  ASSERT_EQ(chain_of(r)[0], id("a"));
  const std::string next = chain_of(r)[1];
  std::string next_name;
  for (const auto& [name, n] : nodes_) {
    if (n.id == next) next_name = name;
  }
  report_for(4000ms, "a", next_name);
  EXPECT_EQ(state_of("a"), idl::NodeState::DEAD) << "a's reports evicted " << next_name << " too";
  EXPECT_EQ(state_of(next_name), idl::NodeState::ALIVE);
}

}  // namespace
}  // namespace catena::control
