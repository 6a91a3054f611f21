#include <spdlog/spdlog.h>

#include <catena/control/failure_detector.hpp>

namespace catena::control {

void FailureDetector::track(const std::string& node_id, std::int64_t node_epoch) {
  MutexLock lock(mu_);
  Entry e;
  e.node_epoch = node_epoch;
  e.last_heartbeat = e.heard = clock_.now();
  nodes_[node_id] = e;
}

void FailureDetector::forget(const std::string& node_id) {
  MutexLock lock(mu_);
  nodes_.erase(node_id);
}

void FailureDetector::heartbeat(const std::string& node_id) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  it->second.held = false;
  heartbeat_locked(node_id, it->second);
}

bool FailureDetector::renew(const std::string& node_id, std::int64_t node_epoch) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.node_epoch != node_epoch || it->second.held) return false;
  heartbeat_locked(node_id, it->second);
  return true;
}

void FailureDetector::hold(const std::string& node_id) {
  MutexLock lock(mu_);
  if (auto it = nodes_.find(node_id); it != nodes_.end()) it->second.held = true;
}

void FailureDetector::release(const std::string& node_id) {
  MutexLock lock(mu_);
  if (auto it = nodes_.find(node_id); it != nodes_.end()) it->second.held = false;
}

void FailureDetector::heartbeat_locked(const std::string& node_id, Entry& e) {
  e.last_heartbeat = e.heard = clock_.now();
  if (e.state == idl::NodeState::SUSPECT && !e.reported) {
    spdlog::info("node {} is heartbeating again", node_id);
    e.state = idl::NodeState::ALIVE;
  }
  if (e.state == idl::NodeState::ALIVE) {
    e.failed_probes = 0;  // an early probe that failed is forgotten with the silence
    e.early_probed = false;
  }
}

void FailureDetector::report(const std::string& node_id, const std::string& reason) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  auto& e = it->second;
  if (e.state == idl::NodeState::ALIVE) {
    spdlog::info("node {} reported unreachable ({}): probing it", node_id, reason);
  }
  e.state = idl::NodeState::SUSPECT;
  e.reported = true;
}

std::vector<FailureDetector::Probe> FailureDetector::due_probes() {
  MutexLock lock(mu_);
  const auto now = clock_.now();
  std::vector<Probe> out;
  for (auto& [id, e] : nodes_) {
    if (e.state == idl::NodeState::ALIVE && options_.early_probe && !e.early_probed && !e.probing &&
        now - e.last_heartbeat > options_.heartbeat_timeout / 2) {
      e.early_probed = true;
      e.probing = true;
      out.push_back(Probe{id, e.node_epoch, e.reported, /*early=*/true});
      continue;
    }
    if (e.state == idl::NodeState::ALIVE && now - e.last_heartbeat > options_.heartbeat_timeout) {
      spdlog::warn("node {} missed heartbeats for {} ms: suspect, probing it", id,
                   std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last_heartbeat).count());
      e.state = idl::NodeState::SUSPECT;
    }
    if (e.state == idl::NodeState::SUSPECT && !e.probing) {
      e.probing = true;
      out.push_back(Probe{id, e.node_epoch, e.reported});
    }
  }
  return out;
}

FailureDetector::Verdict FailureDetector::probe_result(const std::string& node_id, std::int64_t node_epoch,
                                                       bool answered, bool refused) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.node_epoch != node_epoch) return Verdict::ignored;
  auto& e = it->second;
  e.probing = false;
  if (e.state == idl::NodeState::ALIVE) {
    // An early probe (or one a heartbeat overtook): a failure counts toward
    // the verdict only while the silence lasts (heartbeat() forgets it).
    if (!answered && e.early_probed && clock_.now() - e.last_heartbeat > options_.heartbeat_timeout / 2) {
      ++e.failed_probes;
    }
    return Verdict::ignored;
  }
  if (e.state != idl::NodeState::SUSPECT) return Verdict::ignored;
  if (answered) {
    const auto loss =
        options_.heartbeat_loss.count() > 0 ? options_.heartbeat_loss : 4 * options_.heartbeat_timeout;
    if (clock_.now() - e.heard > loss) {
      e.held = true;
      return Verdict::unheard;  // stays SUSPECT: the controller decides
    }
    spdlog::info("node {} answered its probe: alive", node_id);
    e.state = idl::NodeState::ALIVE;
    e.reported = false;
    e.held = false;
    e.failed_probes = 0;
    e.last_heartbeat = clock_.now();  // a fresh window before it can be suspected again
    return Verdict::alive;
  }
  ++e.failed_probes;
  // A heartbeat timeout alone with a refused connection still takes every
  // probe: only a peer's report says that the node failed just now.
  if (refused && e.reported) {
    e.held = true;
    return Verdict::crashed;
  }
  if (e.failed_probes >= options_.probe_attempts) {
    e.held = true;
    return Verdict::dead;
  }
  return Verdict::suspect;
}

void FailureDetector::restart_windows() {
  MutexLock lock(mu_);
  const auto now = clock_.now();
  for (auto& [id, e] : nodes_) {
    e.last_heartbeat = e.heard = now;
    e.held = false;
    e.failed_probes = 0;
    e.early_probed = false;
    if (!e.reported) e.state = idl::NodeState::ALIVE;
  }
}

std::optional<idl::NodeState::type> FailureDetector::state(const std::string& node_id) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.state;
}

std::optional<Clock::duration> FailureDetector::since_heartbeat(const std::string& node_id) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return std::nullopt;
  return clock_.now() - it->second.last_heartbeat;
}

std::optional<Clock::duration> FailureDetector::since_heard(const std::string& node_id) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return std::nullopt;
  return clock_.now() - it->second.heard;
}

std::size_t FailureDetector::silent() const {
  MutexLock lock(mu_);
  const auto now = clock_.now();
  std::size_t n = 0;
  for (const auto& [id, e] : nodes_) {
    if (e.state == idl::NodeState::SUSPECT || now - e.last_heartbeat > options_.heartbeat_timeout) ++n;
  }
  return n;
}

bool FailureDetector::is_alive(const std::string& node_id) const {
  auto s = state(node_id);
  return s && *s == idl::NodeState::ALIVE;
}

}  // namespace catena::control
