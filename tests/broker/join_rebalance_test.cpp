// JoinRebalance (catenad --join-rebalance) against a scripted controller on
// a ManualClock: it retries while the controller does not count the node
// live (UNAVAILABLE), stops at an answer, gives up at its deadline, and a
// refusal ends it at once. Never fatal: every outcome is a return value.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <gtest/gtest.h>
#include <string>
#include <utility>
#include <vector>

#include <catena/broker/join_rebalance.hpp>
#include <catena/fabric/clock.hpp>

namespace catena {
namespace {

using namespace std::chrono_literals;
using broker::JoinRebalance;

// Answers each call with the next scripted code (ok: a plan with one move
// onto the caller); the last one repeats.
struct ScriptedController {
  explicit ScriptedController(std::vector<control::ErrorCode> codes) : script(std::move(codes)) {}
  std::vector<control::ErrorCode> script;
  std::vector<std::string> asked;

  control::Result<control::idl::RebalancePlan> operator()(const std::string& node_id) {
    asked.push_back(node_id);
    const auto code = script.at(std::min(asked.size(), script.size()) - 1);
    if (code != control::idl::ErrorCode::OK) return control::make_error(code, node_id + " is scripted");
    control::idl::PlannedMove m;
    m.__set_channel("ch");
    m.__set_current({"a", "b", "c"});
    m.__set_to({node_id, "b", "c"});
    control::idl::RebalancePlan plan;
    plan.__set_moves({m});
    return plan;
  }
};

TEST(JoinRebalance, RetriesWhileTheNodeIsNotLiveThenRebalancesOnce) {
  ManualClock clock;
  ScriptedController controller({control::idl::ErrorCode::UNAVAILABLE, control::idl::ErrorCode::UNAVAILABLE,
                                 control::idl::ErrorCode::OK});
  JoinRebalance join([&](const std::string& id) { return controller(id); }, clock, {200ms, 30s});
  std::atomic<bool> stop{false};
  EXPECT_EQ(join.run("node-4", stop), JoinRebalance::Outcome::rebalanced);
  EXPECT_EQ(controller.asked, (std::vector<std::string>{"node-4", "node-4", "node-4"}));
}

TEST(JoinRebalance, ARefusalEndsItAtOnce) {
  ManualClock clock;
  ScriptedController controller({control::idl::ErrorCode::INVALID_ARGUMENT});
  JoinRebalance join([&](const std::string& id) { return controller(id); }, clock, {200ms, 30s});
  std::atomic<bool> stop{false};
  EXPECT_EQ(join.run("node-4", stop), JoinRebalance::Outcome::refused);
  EXPECT_EQ(controller.asked.size(), 1u);
}

TEST(JoinRebalance, GivesUpAtItsDeadlineOrWhenStopped) {
  ManualClock clock;
  ScriptedController controller({control::idl::ErrorCode::UNAVAILABLE});
  JoinRebalance join([&](const std::string& id) { return controller(id); }, clock, {200ms, 2s});
  std::atomic<bool> stop{false};
  const auto started = clock.now();
  EXPECT_EQ(join.run("node-4", stop), JoinRebalance::Outcome::gave_up);
  EXPECT_EQ(controller.asked.size(), 11u) << "at 0, 200, ..., 2000 ms";
  EXPECT_LE(clock.now() - started, 2s);

  controller.asked.clear();
  stop = true;
  EXPECT_EQ(join.run("node-4", stop), JoinRebalance::Outcome::gave_up);
  EXPECT_EQ(controller.asked.size(), 1u);
}

TEST(JoinRebalance, StartRunsItOnItsOwnThreadOnce) {
  ScriptedController controller({control::idl::ErrorCode::OK});
  std::atomic<bool> stop{false};
  {
    JoinRebalance join([&](const std::string& id) { return controller(id); }, SteadyClock::instance());
    join.start("node-4", stop);
    join.start("node-4", stop);
  }  // the destructor waits for the thread
  EXPECT_EQ(controller.asked.size(), 1u);
}

}  // namespace
}  // namespace catena
