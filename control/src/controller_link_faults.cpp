// Controller: data-plane link faults. A predecessor's reports that it cannot
// use its link to a successor which still answers probes; past
// link_fault_timeout the controller evicts the successor (or the reporter,
// if its reports evicted a node shortly before). Runs from tick().
#include <chrono>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <string>

#include <catena/control/controller.hpp>

#include "route_members.hpp"

namespace catena::control {

using route_members::has_node;

void Controller::note_link_fault_locked(const idl::FailureReport& report, const idl::PartitionRoute& route) {
  // Only the suspect's predecessor on this route epoch: the one that writes
  // to it (the tail, for a joining replica).
  auto at = [&](const std::string& id) {
    for (std::size_t i = 0; i < route.replicas.size(); ++i) {
      if (route.replicas[i].node_id == id) return static_cast<int>(i);
    }
    return has_node(route.joining, id) ? static_cast<int>(route.replicas.size()) : -1;
  };
  const int reporter = at(report.reporter);
  const int suspect = at(report.suspect_node_id);
  if (reporter < 0 || suspect != reporter + 1 || report.epoch != route.epoch) return;
  const auto now = clock_.now();
  auto& f = link_faults_[{{route.channel, route.partition}, report.suspect_node_id}];
  // A gap of half the timeout between reports ends a fault: the link came back.
  if (f.reports == 0 || f.reporter != report.reporter || f.epoch != route.epoch ||
      now - f.last > Clock::duration(options_.link_fault_timeout) / 2) {
    f = LinkFault{report.reporter, route.epoch, now, now, 0, {}};
  }
  f.last = now;
  ++f.reports;
  f.reason = report.reason;
}

void Controller::act_on_link_faults_locked() {
  const auto now = clock_.now();
  const auto timeout = Clock::duration(options_.link_fault_timeout);
  for (auto it = link_faults_.begin(); it != link_faults_.end();) {
    const auto& [key, f] = *it;
    const auto& [route_id, suspect] = key;
    auto route = route_locked(route_id.first, route_id.second);
    const auto* node = node_locked(suspect);
    // Over: the chain changed, the suspect is gone, or the reports stopped.
    if (!route || (*route)->epoch != f.epoch || node == nullptr || node->dead || now - f.last > timeout / 2) {
      it = link_faults_.erase(it);
      continue;
    }
    // Not yet: the reports do not span the timeout yet, or the probes have
    // not cleared the suspect (then they decide, as for any other report).
    if (f.last - f.first < timeout || !detector_.is_alive(suspect) || isolated_locked()) {
      ++it;
      continue;
    }
    const auto last_eviction = link_evictions_.find(f.reporter);
    const bool reporter_again =
        last_eviction != link_evictions_.end() && now - last_eviction->second < 10 * timeout;
    const std::string victim = reporter_again ? f.reporter : suspect;
    const auto reason = fmt::format(
        "{}/{}: {} could not use its data-plane link to {} for {} ms ({} reports, last: {}) while {} "
        "answered "
        "every probe{}",
        route_id.first, route_id.second, f.reporter, suspect,
        std::chrono::duration_cast<std::chrono::milliseconds>(f.last - f.first).count(), f.reports, f.reason,
        suspect,
        reporter_again
            ? fmt::format("; {}'s reports evicted a node shortly before, so it is the common factor",
                          f.reporter)
            : std::string());
    link_evictions_[f.reporter] = now;
    it = link_faults_.erase(it);
    if (auto r = evict_locked(victim, reason, /*fence_evicted=*/true); !r) {
      if (!halted_) spdlog::error("could not evict {}: {} (will retry)", victim, r.error().describe());
      return;
    }
    if (halted_) return;
  }
}

}  // namespace catena::control
