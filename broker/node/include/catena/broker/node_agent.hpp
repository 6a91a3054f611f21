// The node's side of its conversation with the controller: register, then
// heartbeat at the interval the controller gave, renewing the lease under
// which replicas acknowledge and serve; on `fenced` suspend every replica
// (data kept) and register again saying what is held; report the links the
// data plane lost. What catenad's main loop does, in a class a test drives
// against an in-process Controller (ControllerCallsOf<control::Controller>).
//
// Lifecycle: construct on a running Broker, then run() until the stop flag
// is set, or register_node() once and step() by hand. One thread owns it
// (catenad's main thread); the Broker must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/controller_fence.hpp>
#include <catena/control/idl/catena_types.h>
#include <catena/control/result.hpp>

namespace catena::broker {

// The controller calls a node makes: ControllerClient over Thrift in
// catenad, the Controller object itself in tests.
class ControllerCalls {
 public:
  virtual ~ControllerCalls() = default;
  // held: replicas this process kept after being fenced (see registerNode).
  [[nodiscard]] virtual control::Result<control::idl::RegisterReply> register_node(
      const control::idl::NodeInfo& info, const std::vector<control::idl::PartitionProgress>& held) = 0;
  [[nodiscard]] virtual control::Result<control::idl::HeartbeatReply> heartbeat(
      const control::idl::HeartbeatRequest& request) = 0;
  [[nodiscard]] virtual control::Result<void> report_failure(const control::idl::FailureReport& report) = 0;
};

// ControllerCalls on anything with the controller's signatures
// (control::ControllerClient, control::Controller).
template <class Controller>
class ControllerCallsOf final : public ControllerCalls {
 public:
  explicit ControllerCallsOf(Controller& controller) : controller_(controller) {}
  control::Result<control::idl::RegisterReply> register_node(
      const control::idl::NodeInfo& info, const std::vector<control::idl::PartitionProgress>& held) override {
    return controller_.register_node(info, held);
  }
  control::Result<control::idl::HeartbeatReply> heartbeat(
      const control::idl::HeartbeatRequest& request) override {
    return controller_.heartbeat(request);
  }
  control::Result<void> report_failure(const control::idl::FailureReport& report) override {
    return controller_.report_failure(report);
  }

 private:
  Controller& controller_;
};

// What the node's log says when records wait at a replica: a head's
// partition log full (every segment within ttl + grace, or not committed),
// the node's segment memory spent, the tenant at its publish rate. From the
// replicas' counters (ReplicaCounters), at most once every kEveryNs per
// partition while it lasts; the publishers are told too (ClientEvent).
class HeldBackLog {
 public:
  static constexpr std::uint64_t kEveryNs = 60'000'000'000ull;
  // The lines to log for these stats at now_ns: one per partition whose
  // counters grew since it was last told, if that is kEveryNs ago (or it
  // never was).
  [[nodiscard]] std::vector<std::string> lines(const NodeStats& stats, std::uint64_t now_ns);

 private:
  struct Seen {
    std::uint64_t log_full = 0;  // the counters when it was last told
    std::uint64_t memory = 0;
    std::uint64_t rate = 0;
    std::uint64_t told_ns = 0;
    bool told = false;
  };
  std::map<std::pair<std::string, std::uint32_t>, Seen> seen_;
};

class NodeAgent {
 public:
  struct Options {
    control::idl::NodeInfo info;  // node_id empty: the controller assigns one
    std::string controller;       // for logs: the controller's address
    std::string provider;         // for logs: the fabric provider
    // Told the admin secret and every controller epoch the controller
    // answers with; a heartbeat reply of an older epoch renews nothing.
    // Null: none (tests). Must outlive the agent.
    ControllerFence* fence = nullptr;
  };

  NodeAgent(Broker& broker, ControllerCalls& controller, Options options);

  // Registers once; false (logged) if the controller did not answer. held:
  // what this process kept when it was fenced (nothing at startup).
  bool register_node(const std::vector<control::idl::PartitionProgress>& held = {});
  // What registerNode lists as held: the broker's replicas and the copies
  // kept through a restart that no chain claimed yet.
  [[nodiscard]] std::vector<control::idl::PartitionProgress> held() const;
  // One pass of the loop after registration: heartbeat (skipped while the
  // data plane stalls), re-register if fenced or unknown, send link reports.
  void step();
  // Registers (retrying every 200 ms), calls on_registered, then steps every
  // heartbeat interval until `stop` is set. on_pass runs after every
  // registration attempt and every step (catenad pings systemd's watchdog
  // there: a stuck loop stops the pings).
  void run(const std::atomic<bool>& stop, const std::function<void()>& on_registered = {},
           const std::function<void()>& on_pass = {});

  [[nodiscard]] const std::string& node_id() const { return options_.info.node_id; }
  [[nodiscard]] std::int64_t node_epoch() const { return node_epoch_; }
  [[nodiscard]] std::chrono::milliseconds interval() const { return std::chrono::milliseconds(interval_ms_); }
  // The lease deadline last given to the broker (broker clock, ns); 0 none.
  [[nodiscard]] std::uint64_t lease_deadline_ns() const { return lease_deadline_ns_; }

 private:
  void renew_lease(std::uint64_t sent_ns);
  void set_lease_deadline(std::uint64_t deadline_ns);
  void send_link_reports();

  Broker& broker_;
  ControllerCalls& controller_;
  Options options_;
  std::int64_t node_epoch_ = 0;
  int interval_ms_ = 100;
  int lease_ms_ = 0;  // 0: the controller grants no lease
  std::uint64_t lease_deadline_ns_ = 0;
  bool stall_logged_ = false;
  HeldBackLog held_back_;
};

}  // namespace catena::broker
