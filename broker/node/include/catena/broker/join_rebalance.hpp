// catenad --join-rebalance: once this node registered, it asks the
// controller to rebalance with it counted (Controller.addNode), so that
// partition roles move onto it by tail-offset handoff (no history copied).
//
// Once per process start, on a thread and a controller connection of its
// own: the moves take as long as they take, and the NodeAgent's heartbeats,
// which renew the lease, must never wait behind them. The controller is
// the one that says whether it counts the node live: while it answers
// UNAVAILABLE (the node SUSPECT or DEAD, the controller restarting) or does
// not answer, the call is retried every retry_every until give_up_after.
// A refusal, a move that failed or giving up is logged; none is fatal: the
// node serves whatever it is given, and `catena rebalance` can run later.
//
// Lifecycle: start() once, from NodeAgent::run's on_registered (catenad's
// main thread); the destructor waits for the thread, which ends when the
// call in flight returns (the client's rpc timeout bounds it) or at its
// next retry once `stop` is set.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include <catena/control/idl/catena_types.h>
#include <catena/control/result.hpp>
#include <catena/fabric/clock.hpp>

namespace catena::broker {

class JoinRebalance {
 public:
  // Controller.addNode(node_id, dry_run = false), e.g. ControllerClient::add_node.
  using AddNode = std::function<control::Result<control::idl::RebalancePlan>(const std::string& node_id)>;
  struct Options {
    std::chrono::milliseconds retry_every{200};
    std::chrono::milliseconds give_up_after{30000};
  };
  enum class Outcome {
    rebalanced,  // the controller answered with a plan (it may be empty, or name failed moves)
    refused,     // an answer that retrying does not change (the node drains, is unknown...)
    gave_up,     // still unavailable or unanswered after give_up_after, or stopped
  };

  JoinRebalance(AddNode add_node, const Clock& clock, Options options);
  JoinRebalance(AddNode add_node, const Clock& clock)
      : JoinRebalance(std::move(add_node), clock, Options{}) {}
  ~JoinRebalance();
  JoinRebalance(const JoinRebalance&) = delete;
  JoinRebalance& operator=(const JoinRebalance&) = delete;

  // Runs run() on its own thread; call once. `stop` must outlive this object.
  void start(const std::string& node_id, const std::atomic<bool>& stop);
  // What the thread does, on the caller's thread: asks, retries, logs.
  [[nodiscard]] Outcome run(const std::string& node_id, const std::atomic<bool>& stop) const;

 private:
  AddNode add_node_;
  const Clock& clock_;
  Options options_;
  std::thread thread_;
};

}  // namespace catena::broker
