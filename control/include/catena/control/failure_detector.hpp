// Decides which nodes are alive, from heartbeats, failure reports and the
// results of probes the controller sends. It performs no I/O itself: the
// controller asks due_probes(), pings those nodes through the BrokerAdmin
// seam and feeds the answers back to probe_result().
//
//   ALIVE --(no heartbeat for heartbeat_timeout / 2)--> one early probe
//   ALIVE --(no heartbeat for heartbeat_timeout)--> SUSPECT
//   ALIVE --(report)------------------------------> SUSPECT (reported)
//   SUSPECT --(probe answered)--------------------> ALIVE   (fresh timeout window)
//   SUSPECT --(heartbeat, unless reported)--------> ALIVE
//   SUSPECT --(probe_attempts probes in a row fail)-> dead verdict
//   SUSPECT --(probe answered, but no heartbeat for heartbeat_loss)-> unheard verdict
//
// The unheard verdict is the asymmetric cut: the controller reaches the node
// but the node's heartbeats do not reach the controller, so its lease is
// never renewed and its chains stall for as long as that lasts.
//
// The early probe overlaps the second half of the timeout: if it fails, it
// counts as the first of the probe_attempts, so a silent node's dead verdict
// comes about one probe timeout after its heartbeat timeout rather than
// probe_attempts of them. It never makes a node SUSPECT by itself: the
// verdict still waits for the whole timeout, and an answered early probe or
// a heartbeat forgets it.
//
// A report alone never kills a node: only the controller's own failed probes
// do, so one client with a bad link cannot evict a healthy broker. Dead nodes
// are removed with forget(); the controller keeps them (fenced) in its store.
//
// Holds: a verdict that leads to an eviction (dead, crashed, unheard) also
// holds the node, atomically with the verdict: renew() refuses a held node,
// so no heartbeat answered after the verdict renews the lease of a node
// whose chains are being given to others. The controller releases a node
// it decides not to evict; forget() ends it with the node, and a heartbeat
// taken the slow way (heartbeat(), under the controller's lock, once the
// node is known not to be dead) ends it too.
//
// Thread: thread-safe (a lock of its own): the controller's RPC threads
// renew leases through it without the controller's lock, which a metadata
// change may hold while it waits for ZooKeeper.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <catena/control/idl/catena_types.h>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class FailureDetector {
 public:
  struct Options {
    Clock::duration heartbeat_timeout = std::chrono::milliseconds(500);
    int probe_attempts = 2;  // consecutive failed probes before the dead verdict
    // No heartbeat for this long although probes are answered: the unheard
    // verdict. Zero: 4 x heartbeat_timeout.
    Clock::duration heartbeat_loss{0};
    // Probe a node once when it has been silent for half the timeout.
    bool early_probe = true;
  };

  struct Probe {
    std::string node_id;
    std::int64_t node_epoch = 0;
    bool reported = false;  // a peer reported it: a refused connection would be a crash
    bool early = false;     // the probe at half the timeout (the node is still ALIVE)
  };

  // crashed: a peer reported the node and its admin address refuses
  // connections (nothing listens there: the process is gone). Acted on at
  // once, without more probes or waiting out its lease: a process that is
  // gone acknowledges nothing.
  enum class Verdict { alive, suspect, dead, crashed, unheard, ignored };

  FailureDetector(Options options, const Clock& clock) : options_(options), clock_(clock) {}

  // Starts watching a node incarnation as ALIVE with a fresh timeout window.
  void track(const std::string& node_id, std::int64_t node_epoch) EXCLUDES(mu_);
  void forget(const std::string& node_id) EXCLUDES(mu_);

  // A heartbeat from the tracked incarnation (clears a hold: the caller
  // knows the node is not being evicted).
  void heartbeat(const std::string& node_id) EXCLUDES(mu_);
  // A heartbeat that renews the node's lease, if it is the tracked
  // incarnation (node_epoch) and not held: recorded as heartbeat() would,
  // and true. Otherwise nothing changes and false: the caller answers it
  // the slow way (under its lock, from its metadata).
  [[nodiscard]] bool renew(const std::string& node_id, std::int64_t node_epoch) EXCLUDES(mu_);
  // Holds the node (renew() refuses it) until release(), forget() or a
  // heartbeat(): the start of its eviction.
  void hold(const std::string& node_id) EXCLUDES(mu_);
  void release(const std::string& node_id) EXCLUDES(mu_);
  // Someone could not reach node_id: verify it.
  void report(const std::string& node_id, const std::string& reason) EXCLUDES(mu_);

  // Moves nodes whose heartbeats are overdue to SUSPECT and returns every
  // SUSPECT node without a probe in flight, and each ALIVE node silent for
  // half the timeout not yet probed early in this silence; marks them in flight.
  [[nodiscard]] std::vector<Probe> due_probes() EXCLUDES(mu_);
  // The answer (or failure) of a probe from due_probes(). refused: the
  // probe failed because the node's address refused the connection. A
  // dead, crashed or unheard verdict holds the node (hold()).
  Verdict probe_result(const std::string& node_id, std::int64_t node_epoch, bool answered,
                       bool refused = false) EXCLUDES(mu_);
  // Forgets every silence so far: each node is ALIVE (unless a peer reported
  // it) with a fresh timeout window, its failed probes and missed heartbeats
  // forgotten, and answers to probes in flight are ignored. For the end of
  // the controller's own isolation: what the nodes missed was its cut.
  // Holds end too.
  void restart_windows() EXCLUDES(mu_);

  [[nodiscard]] std::optional<idl::NodeState::type> state(const std::string& node_id) const EXCLUDES(mu_);
  [[nodiscard]] std::optional<Clock::duration> since_heartbeat(const std::string& node_id) const
      EXCLUDES(mu_);
  // Since the last heartbeat that actually arrived (answered probes do not count).
  [[nodiscard]] std::optional<Clock::duration> since_heard(const std::string& node_id) const EXCLUDES(mu_);
  [[nodiscard]] bool is_alive(const std::string& node_id) const EXCLUDES(mu_);
  // Nodes being watched, and how many of them the controller has not heard
  // from lately: SUSPECT, or silent past the heartbeat timeout and not yet
  // moved there. Many silent at once points at the controller's own link.
  [[nodiscard]] std::size_t tracked() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return nodes_.size();
  }
  [[nodiscard]] std::size_t silent() const EXCLUDES(mu_);

 private:
  struct Entry {
    std::int64_t node_epoch = 0;
    idl::NodeState::type state = idl::NodeState::ALIVE;
    Clock::time_point last_heartbeat;  // or the last answered probe: the timeout window's start
    Clock::time_point heard;           // the last heartbeat that arrived
    bool reported = false;             // SUSPECT because of a report: heartbeats do not clear it
    bool probing = false;
    bool early_probed = false;  // in this silence (a heartbeat ends it)
    bool held = false;          // hold(): renew() refuses it
    int failed_probes = 0;
  };
  void heartbeat_locked(const std::string& node_id, Entry& e) REQUIRES(mu_);

  Options options_;
  const Clock& clock_;
  mutable Mutex mu_;
  std::map<std::string, Entry> nodes_ GUARDED_BY(mu_);
};

}  // namespace catena::control
