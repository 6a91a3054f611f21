// One deterministic simulation of a partition: five broker nodes (a chain
// of three plus spares for replacements), the real controller with its
// failure detector and chain repair, a publisher and a subscriber, all
// stepped from the calling thread on one SimClock, over the soft provider
// (shared memory) wrapped in fault-injecting providers. A seeded RNG picks
// every step: publishes, which components run, how far time moves, and the
// faults: lost completions, late completions (one provider's come after
// others' that happened later: the reordering a single RC queue never
// does, across queues), a failed Nth post, a node silent on the data plane,
// a node killed (destroyed) and later restarted empty as a new incarnation.
// At the end the faults heal, the run drains, and the checker compares what
// was acknowledged and delivered with the surviving replicas' logs.
//
// The same seed gives the same run: SimResult::trace_hash covers every
// event, and a test runs seeds twice to hold that.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace catena::sim {

struct SimOptions {
  std::uint64_t seed = 1;
  int steps = 3000;          // steps with traffic and faults; then the faults heal and the run drains
  bool corrupt_ack = false;  // test-only: the publisher reports its first ack one offset off
  bool verbose = false;      // print every event as it happens
};

struct SimResult {
  std::vector<std::string> violations;  // empty: every invariant held
  std::uint64_t trace_hash = 0;
  std::uint64_t events = 0;
  std::string trace_tail;  // the last events, for a failure report
  std::uint64_t published = 0;
  std::uint64_t acked = 0;
  std::uint64_t delivered = 0;
  int kills = 0;
  int silences = 0;
  int lossy_faults = 0;  // dropped completions: the run's liveness is not checked
  std::int64_t final_epoch = 0;
  double sim_seconds = 0;

  [[nodiscard]] bool ok() const { return violations.empty(); }
};

SimResult run_simulation(const SimOptions& options);

}  // namespace catena::sim
