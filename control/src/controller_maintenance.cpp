// Controller: the maintenance tick and failure detection (probes, nodes we
// no longer hear, isolation). Everything here runs from tick() (one
// maintenance thread); the steps it calls live beside it by topic:
// controller_link_faults.cpp, controller_repair.cpp, controller_pushes.cpp.
#include <chrono>
#include <fmt/format.h>
#include <future>
#include <spdlog/spdlog.h>
#include <string>
#include <utility>
#include <vector>

#include <catena/control/controller.hpp>

#include "rpc_pool.hpp"

namespace catena::control {

void Controller::tick() {
  MutexLock tick_lock(tick_mu_);
  {
    MutexLock lock(mu_);
    if (halted_) return;
  }
  run_probes();
  {
    MutexLock lock(mu_);
    if (halted_) return;
    take_heartbeats_locked();  // those answered while another held mu_
    background_commit_locked();
    act_on_link_faults_locked();
    if (halted_) return;
    promote_caught_up_locked();
    if (halted_) return;
    restore_replication_locked();
    if (halted_) return;
    drain_step_locked();
    if (halted_) return;
    drop_expired_ranges_locked();
    groups_tick_locked();
  }
  retry_drops();  // before the pushes that wait for them
  run_pushes();
  {
    MutexLock lock(mu_);
    if (!halted_) close_finished_repairs_locked();
  }
  resume_alters();
}

void Controller::run_probes() {
  std::vector<std::pair<FailureDetector::Probe, BrokerTarget>> probes;
  {
    MutexLock lock(mu_);
    take_heartbeats_locked();  // a failure report queued meanwhile is probed in this round
    (void)isolated_locked();   // logs when the controller loses or regains the cluster
    for (auto& probe : detector_.due_probes()) {
      const auto* node = node_locked(probe.node_id);
      if (node == nullptr) continue;
      probes.emplace_back(probe, broker_target_locked(probe.node_id, node->info.admin_addr));
    }
  }
  if (probes.empty()) return;
  // Probe in parallel: each may take up to the probe timeout.
  // A failed probe of a reported node also asks whether the node's address
  // refuses connections: a process that is gone, not a cut or a stall (only
  // a report makes that a verdict; for a cut node the check would wait out
  // the probe timeout a second time).
  using Answer = std::pair<Result<idl::NodeStats>, bool>;  // the ping's, refused
  std::vector<std::future<Answer>> answers;
  for (const auto& [probe, target] : probes) {
    answers.push_back(rpc_pool_->submit([this, to = target, reported = probe.reported] {
      auto answer = brokers_.ping(to);
      const bool refused = !answer && reported && brokers_.refuses_connections(to);
      return Answer{std::move(answer), refused};
    }));
  }
  // Every answer before the lock: heartbeats and requests are not held up
  // behind a probe that waits out its timeout.
  std::vector<Answer> results;
  results.reserve(answers.size());
  for (auto& a : answers) results.push_back(a.get());
  // An early probe that failed may have ended past the node's timeout (the
  // tick waited for it): its next probe goes out now, not a tick later.
  bool again = false;
  for (std::size_t i = 0; i < probes.size(); ++i)
    again = again || (probes[i].first.early && !results[i].first);
  apply_probe_results(probes, results);
  if (again) run_probes();
}

void Controller::apply_probe_results(
    const std::vector<std::pair<FailureDetector::Probe, BrokerTarget>>& probes,
    std::vector<std::pair<Result<idl::NodeStats>, bool>>& results) {
  MutexLock lock(mu_);
  // Heartbeats that arrived while the probes ran may have ended an
  // isolation: decide that once, before any verdict, so the detector's
  // windows restart (and answers to these probes are ignored) before an
  // answer from the cut could count against a node.
  const bool isolated = isolated_locked();
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const auto& [probe, target] = probes[i];
    auto& [answer, refused] = results[i];
    if (halted_) continue;
    if (!answer) {
      spdlog::warn("probe of {} at {} failed: {}", probe.node_id, target.admin_addr,
                   answer.error().describe());
    } else {
      stats_[probe.node_id] = *answer;
      note_progress_locked(*answer);
    }
    const auto verdict = detector_.probe_result(probe.node_id, probe.node_epoch, answer.ok(), refused);
    if (verdict != FailureDetector::Verdict::unheard && verdict != FailureDetector::Verdict::crashed &&
        verdict != FailureDetector::Verdict::dead) {
      continue;
    }
    // Such a verdict holds the node (no lease renewed from here on); one not
    // acted on releases it. None is acted on while this controller may be
    // the one cut off: the node stays SUSPECT and is probed again, and a
    // heartbeat or an answered probe clears it, as if it had never been
    // silent.
    if (isolated) {
      detector_.release(probe.node_id);
      continue;
    }
    std::string reason;
    if (verdict == FailureDetector::Verdict::unheard) {
      // It answers us, we do not hear it: its lease lapsed long ago and its
      // chains stall until its heartbeats get through. Repair them instead.
      const auto heard = detector_.since_heard(probe.node_id).value_or(Clock::duration{});
      reason = fmt::format(
          "answers probes but none of its heartbeats arrived for {} ms (its lease lapsed): an asymmetric cut",
          std::chrono::duration_cast<std::chrono::milliseconds>(heard).count());
    } else if (verdict == FailureDetector::Verdict::crashed) {
      // Reported by a peer, and nothing listens at its address: the process
      // is gone and acknowledges nothing, so there is no lease to wait out.
      // A chain without it holds every record it committed (README,
      // "Failover").
      reason = fmt::format(
          "reported by a peer, its probe failed ({}) and its admin address refuses connections: the process "
          "is gone",
          answer.error().message);
    } else {
      if (const auto quiet = detector_.since_heartbeat(probe.node_id);
          quiet && *quiet <= Clock::duration(options_.lease + options_.heartbeat_interval)) {
        spdlog::info("{} failed its probes but its lease may still be valid: not evicting it yet",
                     probe.node_id);
        detector_.release(probe.node_id);
        continue;
      }
      reason = fmt::format("failed {} probe(s) in a row, last: {}", options_.probe_attempts,
                           answer.error().message);
    }
    if (auto r = evict_locked(probe.node_id, reason, /*fence_evicted=*/true); !r && !halted_) {
      spdlog::error("could not evict {}: {} (will retry)", probe.node_id, r.error().describe());
    }
  }
}

bool Controller::isolated_locked() {
  const auto tracked = detector_.tracked();
  const auto silent = detector_.silent();
  const bool isolated =
      tracked > 0 && silent * 100 > static_cast<std::size_t>(options_.isolation_percent) * tracked;
  if (isolated && !isolated_) {
    spdlog::error(
        "{} of {} nodes went silent at once (more than {}%): this controller is most likely the one cut "
        "off; evicting nobody until they are heard from again",
        silent, tracked, options_.isolation_percent);
  } else if (!isolated && isolated_) {
    // Nodes come back one by one as the cut heals; those not heard yet
    // failed their probes to the controller's cut, not their own. Each gets
    // one fresh detector window before anything counts against it.
    detector_.restart_windows();
    spdlog::warn("{} of {} nodes silent now: evictions allowed again, each node's detector window restarts",
                 silent, tracked);
  }
  isolated_ = isolated;
  return isolated;
}

}  // namespace catena::control
