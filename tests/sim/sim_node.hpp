// The simulated cluster's pieces: the network (SimNet), a broker node
// driven step by step (SimNode), and the controller's BrokerAdmin seam into
// those nodes (SimAdmin).
//
// A SimNode is what catenad is (the Broker's data-plane, acceptor and
// connector threads, the NodeAgent's heartbeats and reports), unrolled into
// functions the simulation thread calls: step() is one data-plane pass,
// housekeeping() the broker's 2 ms pass, heartbeat() the agent's. Replicas
// are the real chain::Replica over a real soft provider (shared memory)
// wrapped in a fault-injecting one.
//
// Determinism: the soft provider sets connections up and notices a peer's
// hang-up on its connection manager's thread. The simulation never lets
// that thread's timing show: a connection is set up in one go (connect, then
// the target accepts at once, then both providers settle), and whenever an
// endpoint ended (FaultCounters::closes moved) every provider settles before
// the next step (Provider::settle), so each hang-up is seen at the same step
// in every run of a seed.
//
// Threading: the simulation thread only, except SimAdmin, which the
// controller calls from its probe and push tasks while that thread waits in
// Controller::tick().
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <catena/chain/link.hpp>
#include <catena/chain/replica.hpp>
#include <catena/control/broker_admin.hpp>
#include <catena/control/controller.hpp>
#include <catena/fabric/fault_provider.hpp>

#include "sim_clock.hpp"
#include "sim_trace.hpp"

namespace catena::sim {

class SimNode;

// A call the controller made to a node, applied on the simulation thread
// right after the controller call that made it returns.
struct AdminCall {
  enum class Kind { configure, fence } kind = Kind::configure;
  control::idl::ChainAssignment assignment;  // configure
  std::string channel;                       // fence
  std::int32_t partition = 0;
  std::int64_t epoch = 0;
};

// The BrokerAdmin seam, answering as a broker's BrokerAdminServer does
// (stale epochs refused, the same epoch a no-op, an assignment naming
// another incarnation FENCED), and queueing what is to be applied.
class SimAdmin final : public control::BrokerAdminClient {
 public:
  void add(const std::string& admin_addr);
  void set_identity(const std::string& admin_addr, const std::string& node_id, std::int64_t node_epoch);
  void set_reachable(const std::string& admin_addr, bool reachable);
  void set_stats(const std::string& admin_addr, control::idl::NodeStats stats);
  std::deque<AdminCall> take(const std::string& admin_addr);
  // Every route an assignment carried, by epoch (the checker looks up who
  // was the tail at an acknowledgement's epoch).
  [[nodiscard]] std::map<std::int64_t, control::idl::PartitionRoute> routes() const;

  control::Result<void> configure_chain(const control::BrokerTarget& to,
                                        const control::idl::ChainAssignment& a) override;
  control::Result<void> fence(const control::BrokerTarget& to, const std::string& channel,
                              std::int32_t partition, std::int64_t epoch) override;
  control::Result<control::idl::NodeStats> ping(const control::BrokerTarget& to) override;
  // Never: an unreachable node may be cut off rather than gone, so the
  // controller takes every probe and waits out the lease, as for a cut.
  bool refuses_connections(const control::BrokerTarget&) override { return false; }
  // The simulation moves no partition (Controller::move_partition is tested elsewhere).
  control::Result<control::idl::SealReply> seal(const control::BrokerTarget& to, const std::string& channel,
                                                std::int32_t partition, std::int64_t epoch) override;
  // Nor does it alter a channel (Controller::alter_channel is tested elsewhere).
  control::Result<control::idl::MarkerReply> append_marker(const control::BrokerTarget& to,
                                                           const std::string& channel, std::int32_t partition,
                                                           std::int64_t epoch,
                                                           const control::MarkerRequest& marker) override;

 private:
  struct Handle {
    bool reachable = false;
    std::string node_id;
    std::int64_t node_epoch = 0;
    std::map<std::pair<std::string, std::int32_t>, std::int64_t> installed;
    std::deque<AdminCall> inbox;
    control::idl::NodeStats stats;
  };
  mutable std::mutex mu_;
  std::map<std::string, Handle> nodes_;
  std::map<std::int64_t, control::idl::PartitionRoute> routes_;
};

// What nodes and clients share: time, the event log, the controller, and
// the network's rules for setting up a connection.
class SimNet {
 public:
  SimNet();
  ~SimNet();
  SimNet(const SimNet&) = delete;
  SimNet& operator=(const SimNet&) = delete;

  SimClock clock;
  Trace trace;
  control::Controller* controller = nullptr;

  // Logs a line; fabric addresses in it (ports differ from run to run) are
  // replaced by the name of the node that listened there.
  void log(const std::string& line);

  // Listening nodes by fabric address.
  void listen(const std::string& addr, SimNode* node, const std::string& name) {
    listeners_[addr] = node;
    names_[addr] = name;
  }
  void unlisten(const std::string& addr) { listeners_.erase(addr); }

  // Providers that settle together (nodes' and clients').
  void add_provider(fabric::Provider* p, fabric::FaultInjector* f) { providers_.push_back({p, f}); }
  void remove_provider(fabric::Provider* p) {
    std::erase_if(providers_, [&](const auto& e) { return e.first == p; });
    settle_due_ = true;
  }
  [[nodiscard]] const std::vector<std::pair<fabric::Provider*, fabric::FaultInjector*>>& providers() const {
    return providers_;
  }
  // Settles every provider if a connection was set up or ended since the
  // last call (or `force`).
  void settle(bool force = false);

  // Starts a handshake from `from` to the node listening at `addr`: connect,
  // the target accepts the connection at once, both sides settle; the hello
  // waits there for the target's next step.
  template <class Welcome, class Hello, class Grant = chain::Link::NoGrant>
  chain::Link::Dialing<Welcome> dial(fabric::Provider& from, const std::string& addr, const Hello& hello,
                                     Grant&& grant = {}) {
    // A dead node's address goes nowhere, whoever on this host may have
    // taken its port since.
    const std::string& to = listeners_.contains(addr) ? addr : dead_addr_;
    auto d =
        chain::Link::Dialing<Welcome>::start(from, to, hello, kConnectTimeout, std::forward<Grant>(grant));
    if (!d.unreachable()) accept_at(to);
    settle(true);
    return d;
  }

  static constexpr std::chrono::milliseconds kConnectTimeout{200};

  // Whether a node ever listened at `addr` in this run (a new node must not
  // reuse the port: routes, silences and the log name nodes by address).
  [[nodiscard]] bool used(const std::string& addr) const { return names_.contains(addr); }

 private:
  void accept_at(const std::string& addr);

  std::map<std::string, SimNode*> listeners_;
  std::map<std::string, std::string> names_;  // every address ever listened on
  int dead_fd_ = -1;                          // bound, never listening: connects to it are refused
  std::string dead_addr_;
  std::vector<std::pair<fabric::Provider*, fabric::FaultInjector*>> providers_;
  std::uint64_t closes_seen_ = 0;
  bool settle_due_ = false;
};

class SimNode {
 public:
  SimNode(SimNet& net, SimAdmin& admin, std::string name, std::string zone);
  ~SimNode();
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  // Opens the provider and listener and registers with the controller.
  [[nodiscard]] bool start();
  // The process dies: every replica, link and registered region goes at once.
  void kill();

  // One data-plane pass: hellos, replicas, successor dials.
  int step();
  // The broker's slow pass: replica ticks, link faults, dials to start.
  void housekeeping();
  // The agent: heartbeat (re-registering when fenced) and link reports.
  void heartbeat();
  // Applies what the controller asked (configureChain / fence).
  void apply_admin_calls();
  // The listener's next connection, set up by SimNet::dial.
  void accept_one();

  [[nodiscard]] bool alive() const { return provider_ != nullptr; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] const std::string& node_id() const { return node_id_; }
  [[nodiscard]] std::int64_t node_epoch() const { return node_epoch_; }
  [[nodiscard]] const std::string& fabric_addr() const { return addr_; }
  [[nodiscard]] fabric::FaultInjector& faults() { return *faults_; }
  [[nodiscard]] const chain::Replica* replica(const std::string& channel, std::uint32_t partition) const;
  [[nodiscard]] std::uint64_t next_heartbeat_ns() const { return next_heartbeat_ns_; }
  [[nodiscard]] std::uint64_t next_housekeeping_ns() const { return next_housekeeping_ns_; }

 private:
  using Key = std::pair<std::string, std::uint32_t>;
  struct Incoming {
    std::unique_ptr<chain::Link> link;
    std::uint64_t deadline_ns = 0;
  };
  struct Outgoing {
    std::uint64_t epoch = 0;
    chain::Link::Dialing<chain::wire::ReplicaWelcome> dial;
    std::uint64_t deadline_ns = 0;
  };
  struct Unlinked {
    std::uint64_t epoch = 0;
    std::uint64_t since_ns = 0;
    std::uint64_t report_at_ns = 0;
  };

  void register_node();
  void dispatch(std::unique_ptr<chain::Link> link, const std::byte* msg, std::uint32_t len);
  void configure(const control::idl::ChainAssignment& a);
  void fence(const std::string& channel, std::uint32_t partition, std::uint64_t epoch);
  [[nodiscard]] control::idl::NodeStats stats() const;
  void log(const std::string& line) { net_.log(name_ + " " + line); }

  SimNet& net_;
  SimAdmin& admin_;
  std::string name_;
  std::string zone_;
  std::string admin_addr_;
  std::string node_id_;
  std::int64_t node_epoch_ = 0;
  std::int64_t lease_ms_ = 0;
  std::uint64_t lease_deadline_ns_ = 0;
  std::uint64_t next_heartbeat_ns_ = 0;
  std::uint64_t next_housekeeping_ns_ = 0;
  std::string addr_;
  std::shared_ptr<fabric::FaultInjector> faults_;
  // Declared before what it registers: destroyed last.
  std::unique_ptr<fabric::Provider> provider_;
  std::unique_ptr<fabric::Listener> listener_;
  chain::Link::Buffers spare_;
  chain::SessionBudget budget_;
  std::map<Key, std::unique_ptr<chain::Replica>> replicas_;
  std::vector<Incoming> incoming_;
  std::map<Key, Outgoing> dialing_;
  std::map<Key, std::uint64_t> redial_at_;
  std::map<Key, Unlinked> unlinked_;
  std::vector<control::idl::FailureReport> reports_;
};

}  // namespace catena::sim
