#include "sim_world.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <catena/chain/record.hpp>
#include <catena/control/controller.hpp>

#include "sim_clients.hpp"
#include "sim_clock.hpp"
#include "sim_log.hpp"
#include "sim_node.hpp"

namespace catena::sim {
namespace {

namespace idl = control::idl;

constexpr int kNodes = 5;
constexpr int kReplication = 3;
constexpr int kMaxKills = 4;
// Small, so segments roll during a run; the 8 slots of a replica (the TTL is
// longer than any run) hold about 1500 records, more than a run publishes:
// a full log back-pressures the publisher for good.
constexpr std::uint32_t kSegmentBytes = 32 << 10;
constexpr std::size_t kMaxPending = 48;  // the publisher's window
const std::string kChannel = "sim";

class World {
 public:
  explicit World(const SimOptions& o) : opts_(o), rng_(o.seed) { net_.trace.set_verbose(o.verbose); }

  ~World() {
    sub_.reset();
    pub_.reset();
    nodes_.clear();
    net_.controller = nullptr;
    controller_.reset();
  }

  SimResult run() {
    SimResult res;
    if (setup()) {
      for (int i = 0; i < opts_.steps; ++i) step(true);
      drain();
      final_checks();
    }
    res.violations = violations_;
    res.trace_hash = net_.trace.hash();
    res.events = net_.trace.events();
    res.trace_tail = net_.trace.tail();
    res.published = next_id_ - 1;
    res.acked = acked_.size();
    res.delivered = delivered_.size();
    res.kills = kills_;
    res.silences = silences_;
    res.lossy_faults = lossy_;
    res.final_epoch = final_epoch_;
    res.sim_seconds = static_cast<double>(net_.clock.now_ns() - start_ns_) / 1e9;
    return res;
  }

 private:
  void violation(const std::string& what) {
    net_.log("VIOLATION " + what);
    violations_.push_back(what);
  }

  bool setup() {
    start_ns_ = net_.clock.now_ns();
    control::Controller::Options o;
    o.data_dir = dir_.path() / "meta";
    o.heartbeat_interval = std::chrono::milliseconds(100);
    o.heartbeat_timeout = std::chrono::milliseconds(500);
    o.probe_attempts = 2;
    o.push_retry_initial = std::chrono::milliseconds(50);
    o.push_retry_max = std::chrono::milliseconds(400);
    o.link_fault_timeout = std::chrono::milliseconds(1000);
    auto c = control::Controller::open(o, net_.clock, admin_);
    if (!c.ok()) {
      violations_.push_back("setup: controller: " + c.error().describe());
      return false;
    }
    controller_ = std::move(*c);
    net_.controller = controller_.get();
    for (int i = 0; i < kNodes; ++i) {
      const std::string name = "n" + std::to_string(i + 1);
      nodes_.push_back(std::make_unique<SimNode>(net_, admin_, name, "zone-" + name));
      if (!nodes_.back()->start()) {
        violations_.push_back("setup: node " + name + " did not start");
        return false;
      }
    }
    idl::ChannelConfig cfg;
    cfg.__set_name(kChannel);
    cfg.__set_partitions(1);
    cfg.__set_replication(kReplication);
    cfg.__set_segment_bytes(kSegmentBytes);
    cfg.__set_ttl_ms(600'000);
    if (auto r = controller_->create_channel(cfg); !r.ok()) {
      violations_.push_back("setup: create_channel: " + r.error().describe());
      return false;
    }
    apply_admin();
    pub_ = std::make_unique<SimPublisher>(
        net_, kChannel, [this](std::uint64_t id, std::uint64_t seq, std::uint64_t off, std::uint64_t epoch) {
          on_ack(id, seq, off, epoch);
        });
    sub_ = std::make_unique<SimSubscriber>(
        net_, kChannel, kSegmentBytes, opts_.seed ^ 0x5eed,
        [this](std::uint64_t off, std::uint64_t id) { on_record(off, id); },
        [this](const std::string& v) { violation(v); });
    if (!pub_->start() || !sub_->start()) {
      violations_.push_back("setup: clients did not start");
      return false;
    }
    if (opts_.corrupt_ack) pub_->corrupt_first_ack();
    net_.settle(true);
    return true;
  }

  std::uint64_t pick(std::uint64_t n) { return rng_() % n; }

  // --- one step ------------------------------------------------------------------
  // Every component's turn ends with SimNet::settle(): a connection it
  // ended is seen ended by every other component from their next turn on,
  // never sooner (the connection managers could be faster) nor later.
  void step(bool faults) {
    if (faults) act();
    net_.settle();
    net_.clock.advance(std::chrono::microseconds(pick(1000)));
    for (auto& n : nodes_) {
      if (pick(10) < 9) n->step();
      net_.settle();
    }
    if (pick(10) < 8) pub_->step();
    net_.settle();
    if (pick(10) < 8) sub_->step(behind());
    net_.settle();
    maintenance();
    check_members();
  }

  void act() {
    const std::uint64_t roll = pick(1000);
    if (roll < 300) {
      if (pub_->pending() < kMaxPending) {
        if (pub_->publish(next_id_, static_cast<std::uint32_t>(pick(200)))) {
          ++next_id_;
        } else {
          net_.log("publisher back-pressured");
        }
      }
    } else if (roll < 305) {
      const auto ms = 20 + pick(180);
      net_.log("time jumps " + std::to_string(ms) + " ms");
      net_.clock.advance(std::chrono::milliseconds(ms));
    } else if (roll < 307) {
      auto& [name, f] = target();
      const auto n = 1 + pick(2);
      net_.log("fault: " + name + " loses its next " + std::to_string(n) + " completions");
      f->drop_completions(n);
      ++lossy_;
    } else if (roll < 310) {
      auto& [name, f] = target();
      const auto us = 50 + pick(3000);
      net_.log("fault: " + name + " completions late by " + std::to_string(us) + " us");
      f->set_completion_delay(std::chrono::microseconds(us));
    } else if (roll < 313) {
      auto& [name, f] = target();
      const auto nth = 1 + pick(40);
      net_.log("fault: " + name + " fails post #" + std::to_string(nth) + " from now");
      f->fail_post(nth);
    } else if (roll < 315) {
      silence();
    } else if (roll < 317) {
      kill();
    } else if (roll < 319) {
      restart();
    } else if (roll < 325) {
      auto& [name, f] = target();
      if (name != silent_) {
        net_.log("heal: " + name);
        f->set_completion_delay(std::chrono::nanoseconds(0));
      }
    }
    if (!silent_.empty() && net_.clock.now_ns() >= unsilence_at_ns_) unsilence();
  }

  // A node or client to arm a fault on.
  std::pair<std::string, fabric::FaultInjector*>& target() {
    targets_.clear();
    for (auto& n : nodes_) {
      if (n->alive()) targets_.emplace_back(n->name(), &n->faults());
    }
    targets_.emplace_back("publisher", &pub_->faults());
    targets_.emplace_back("subscriber", &sub_->faults());
    return targets_[pick(targets_.size())];
  }

  // The chain has its full length, nobody joining, every member up and heard.
  bool healthy() {
    auto r = controller_->get_route(kChannel, 0, 0);
    if (!r || r->replicas.size() != kReplication || !r->joining.empty()) return false;
    for (const auto& rep : r->replicas) {
      SimNode* n = node_by_id(rep.node_id);
      if (n == nullptr || !n->alive() || n->name() == silent_ || n->node_epoch() != rep.node_epoch)
        return false;
    }
    return true;
  }

  SimNode* node_by_id(const std::string& id) {
    for (auto& n : nodes_) {
      if (n->node_id() == id) return n.get();
    }
    return nullptr;
  }

  int alive_nodes() const {
    return static_cast<int>(
        std::count_if(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->alive(); }));
  }

  void kill() {
    if (kills_ >= kMaxKills || alive_nodes() <= kReplication || !healthy()) return;
    std::vector<SimNode*> alive;
    for (auto& n : nodes_) {
      if (n->alive()) alive.push_back(n.get());
    }
    SimNode* victim = alive[pick(alive.size())];
    net_.log("fault: kill " + victim->name());
    if (victim->name() == silent_) unsilence();
    victim->kill();
    ++kills_;
  }

  // A killed node's process starts again: empty, a new incarnation under
  // its old id, at a new address.
  void restart() {
    std::vector<SimNode*> dead;
    for (auto& n : nodes_) {
      if (!n->alive()) dead.push_back(n.get());
    }
    if (dead.empty()) return;
    SimNode* n = dead[pick(dead.size())];
    net_.log("restart " + n->name());
    if (!n->start()) violation("restart: " + n->name() + " did not start");
    if (!silent_addr_.empty()) n->faults().silence_peer(silent_addr_);
  }

  void silence() {
    if (!silent_.empty() || alive_nodes() <= kReplication || !healthy()) return;
    std::vector<SimNode*> alive;
    for (auto& n : nodes_) {
      if (n->alive()) alive.push_back(n.get());
    }
    SimNode* victim = alive[pick(alive.size())];
    silent_ = victim->name();
    silent_addr_ = victim->fabric_addr();
    unsilence_at_ns_ = net_.clock.now_ns() + (1500 + pick(2500)) * kMs;
    net_.log("fault: " + silent_ + " falls silent on the data plane");
    victim->faults().set_silent(true);
    for (const auto& [p, f] : net_.providers()) {
      if (f != &victim->faults()) f->silence_peer(silent_addr_);
    }
    ++silences_;
  }

  void unsilence() {
    net_.log("heal: " + silent_ + " speaks again");
    for (auto& n : nodes_) {
      if (n->alive() && n->name() == silent_) n->faults().set_silent(false);
    }
    for (const auto& [p, f] : net_.providers()) f->unsilence_peer(silent_addr_);
    silent_.clear();
    silent_addr_.clear();
  }

  void maintenance() {
    const std::uint64_t now = net_.clock.now_ns();
    for (auto& n : nodes_) {
      if (n->alive() && now >= n->next_housekeeping_ns()) n->housekeeping();
      net_.settle();
    }
    for (auto& n : nodes_) {
      if (n->alive() && now >= n->next_heartbeat_ns()) n->heartbeat();
      net_.settle();
    }
    if (now >= next_tick_ns_) {
      next_tick_ns_ = now + 50 * kMs;
      controller_->tick();
      const auto r = controller_->get_route(kChannel, 0, 0);
      if (r && r->epoch != last_epoch_) {
        last_epoch_ = r->epoch;
        std::string line = "route epoch " + std::to_string(r->epoch) + ":";
        for (const auto& rep : r->replicas) line += " " + rep.node_id;
        for (const auto& rep : r->joining) line += " +" + rep.node_id;
        net_.log(line);
      }
    }
    apply_admin();
  }

  void apply_admin() {
    for (auto& n : nodes_) {
      n->apply_admin_calls();
      net_.settle();
    }
  }

  // --- the checker ---------------------------------------------------------------
  // A chain changes only to members that hold every acknowledged record of
  // its range (a joining replica becomes one only once it holds all that was
  // committed): each live member of the current route holds the highest
  // acknowledged offset at or above the route's start.
  void check_members() {
    if (acked_offsets_.empty()) return;
    const auto r = controller_->get_route(kChannel, 0, 0);
    if (!r) return;
    const std::uint64_t top = acked_offsets_.rbegin()->first;
    if (top < static_cast<std::uint64_t>(r->start_offset)) return;
    for (const auto& m : r->replicas) {
      SimNode* n = node_by_id(m.node_id);
      if (n == nullptr || !n->alive() || n->node_epoch() != m.node_epoch) continue;
      const chain::Replica* rep = n->replica(kChannel, 0);
      if (rep == nullptr || rep->config().start_offset != static_cast<std::uint64_t>(r->start_offset))
        continue;
      if (rep->log().end_offset() > top) continue;
      const std::string key = n->name() + "@" + std::to_string(r->epoch);
      if (!short_members_.insert(key).second) continue;
      violation(n->name() + " is in the chain at epoch " + std::to_string(r->epoch) +
                " but holds offsets below " + std::to_string(rep->log().end_offset()) + " only; offset " +
                std::to_string(top) + " is acknowledged");
    }
  }

  bool behind() const {
    return !acked_offsets_.empty() && acked_offsets_.rbegin()->first >= sub_->next_offset();
  }

  void on_ack(std::uint64_t id, std::uint64_t seq, std::uint64_t offset, std::uint64_t epoch) {
    if (acked_.contains(id)) violation("#" + std::to_string(id) + " acknowledged twice");
    acked_[id] = offset;
    if (offset == ~0ull) return;
    if (auto it = acked_offsets_.find(offset); it != acked_offsets_.end()) {
      violation("offset " + std::to_string(offset) + " acknowledged for #" + std::to_string(it->second) +
                " and #" + std::to_string(id));
    }
    acked_offsets_[offset] = id;
    // One producer publishes in id order: its acknowledged offsets follow.
    auto it = acked_.find(id);
    for (auto p = std::make_reverse_iterator(it); p != acked_.rend(); ++p) {
      if (p->second == ~0ull) continue;
      if (p->second >= offset) {
        violation("#" + std::to_string(id) + " at offset " + std::to_string(offset) + " but earlier #" +
                  std::to_string(p->first) + " at " + std::to_string(p->second));
      }
      break;
    }
    // Acknowledged means committed: a tail held it. The tail of the ack's
    // epoch, if still there to ask (a joining replica is promoted only once
    // it holds every committed record); otherwise some tail before it.
    const auto routes = admin_.routes();
    if (!routes.contains(static_cast<std::int64_t>(epoch))) {
      violation("ack of #" + std::to_string(id) + " at epoch " + std::to_string(epoch) +
                ", a route never assigned");
      return;
    }
    std::string asked;
    for (auto r = routes.upper_bound(static_cast<std::int64_t>(epoch)); r != routes.begin();) {
      --r;
      if (r->second.replicas.empty()) continue;
      const auto& tail = r->second.replicas.back();
      SimNode* n = node_by_id(tail.node_id);
      if (n == nullptr || !n->alive() || n->node_epoch() != tail.node_epoch) continue;  // gone since
      const chain::Replica* rep = n->replica(kChannel, 0);
      if (rep == nullptr || rep->config().start_offset != static_cast<std::uint64_t>(r->second.start_offset))
        continue;
      if (rep->log().end_offset() > offset) return;
      if (r->first == static_cast<std::int64_t>(epoch)) {
        violation("#" + std::to_string(id) + " acknowledged at offset " + std::to_string(offset) + " epoch " +
                  std::to_string(epoch) + " but that epoch's tail " + n->name() + " holds offsets below " +
                  std::to_string(rep->log().end_offset()) + " only");
        return;
      }
      asked +=
          " " + n->name() + "@" + std::to_string(r->first) + "<" + std::to_string(rep->log().end_offset());
    }
    if (!asked.empty()) {
      violation("#" + std::to_string(id) + " (seq " + std::to_string(seq) + ") acknowledged at offset " +
                std::to_string(offset) + " epoch " + std::to_string(epoch) +
                " but no tail holds it (tail@epoch<end:" + asked + ")");
    }
  }

  void on_record(std::uint64_t offset, std::uint64_t id) {
    if (!delivered_.empty() && offset != delivered_.back().first + 1) {
      violation("subscriber got offset " + std::to_string(offset) + " after " +
                std::to_string(delivered_.back().first) +
                (offset <= delivered_.back().first ? " (duplicate)" : " (gap)"));
    }
    if (auto it = acked_offsets_.find(offset); it != acked_offsets_.end() && it->second != id) {
      violation("subscriber got #" + std::to_string(id) + " at offset " + std::to_string(offset) +
                ", acknowledged for #" + std::to_string(it->second));
    }
    delivered_.emplace_back(offset, id);
  }

  // Faults heal; the run goes on without new ones until the publisher's
  // records are acknowledged and delivered and the chain is whole again.
  void drain() {
    net_.log("heal: every fault");
    if (!silent_.empty()) unsilence();
    for (const auto& [p, f] : net_.providers()) f->clear();
    // Repairs take a few seconds of simulated time (detection, probes, the
    // lease, catch-up); a run with lost completions may never finish, so it
    // stops once nothing moved for a while.
    const std::uint64_t deadline = net_.clock.now_ns() + 15'000 * kMs;
    std::uint64_t moved_at = net_.clock.now_ns();
    std::size_t seen = acked_.size() + delivered_.size();
    while (net_.clock.now_ns() < deadline) {
      step(false);
      if (pub_->pending() == 0 && !behind() && healthy()) break;
      if (acked_.size() + delivered_.size() != seen) {
        seen = acked_.size() + delivered_.size();
        moved_at = net_.clock.now_ns();
      }
      if (lossy_ > 0 && net_.clock.now_ns() - moved_at > 3'000 * kMs && healthy()) break;
    }
    if (lossy_ > 0) return;  // a lost completion may wedge a session for good: liveness is not asked for
    if (pub_->pending() > 0)
      violation("liveness: " + std::to_string(pub_->pending()) + " records never acknowledged");
    if (behind())
      violation("liveness: the subscriber stopped at offset " + std::to_string(sub_->next_offset()));
    if (!healthy()) violation("liveness: the chain was not repaired");
  }

  void final_checks() {
    auto route = controller_->get_route(kChannel, 0, 0);
    if (!route) return violation("final: no route");
    final_epoch_ = route->epoch;
    std::vector<std::pair<std::string, std::map<std::uint64_t, Stored>>> logs;
    for (const auto& r : route->replicas) {
      SimNode* n = node_by_id(r.node_id);
      if (n == nullptr || !n->alive()) continue;
      const chain::Replica* rep = n->replica(kChannel, 0);
      if (rep == nullptr) {
        violation("final: " + n->name() + " is in the chain and holds no replica");
        continue;
      }
      std::vector<std::string> errors;
      logs.emplace_back(n->name(), read_log(rep->log(), &errors));
      for (const auto& e : errors) violation("final: " + n->name() + ": " + e);
    }
    std::map<std::uint64_t, std::vector<std::string>> missing;  // lossy runs: id -> logs without it
    for (const auto& [name, log] : logs) {
      // Exactly once, in producer order, at consecutive offsets.
      std::map<std::uint64_t, std::uint64_t> offset_of;
      std::uint64_t prev_offset = 0;
      std::uint64_t prev_id = 0;
      std::uint64_t prev_seq = 0;
      bool first = true;
      for (const auto& [offset, rec] : log) {
        if (!first && offset != prev_offset + 1)
          violation("final: " + name + " skips from offset " + std::to_string(prev_offset) + " to " +
                    std::to_string(offset));
        if (!offset_of.emplace(rec.id, offset).second) {
          violation("final: " + name + " holds #" + std::to_string(rec.id) + " twice (offsets " +
                    std::to_string(offset_of[rec.id]) + " and " + std::to_string(offset) + ")");
        }
        if (!first && rec.id <= prev_id) {
          violation("final: " + name + " holds #" + std::to_string(rec.id) + " at offset " +
                    std::to_string(offset) + " after #" + std::to_string(prev_id));
        }
        if (!first && rec.sequence <= prev_seq) {
          violation("final: " + name + " holds sequence " + std::to_string(rec.sequence) + " at offset " +
                    std::to_string(offset) + " after sequence " + std::to_string(prev_seq));
        }
        if (rec.producer_id != pub_->producer_id()) {
          violation("final: " + name + " holds a record of producer " + std::to_string(rec.producer_id) +
                    " at offset " + std::to_string(offset));
        }
        prev_offset = offset;
        prev_id = rec.id;
        prev_seq = rec.sequence;
        first = false;
      }
      for (const auto& [id, offset] : acked_) {
        auto at = offset_of.find(id);
        if (at == offset_of.end()) {
          // A lost completion may be the last doorbell a replica ever gets
          // (nothing repeats it once traffic stops): with one, a record
          // need only be on some survivor.
          if (lossy_ == 0) {
            violation("final: acknowledged #" + std::to_string(id) + " is missing from " + name);
          } else {
            missing[id].push_back(name);
          }
        } else if (offset != ~0ull && at->second != offset) {
          violation("final: acknowledged #" + std::to_string(id) + " at offset " + std::to_string(offset) +
                    " is at " + std::to_string(at->second) + " in " + name);
        }
      }
      for (const auto& [offset, id] : delivered_) {
        auto at = log.find(offset);
        if (at != log.end() && at->second.id != id) {
          violation("final: the subscriber got #" + std::to_string(id) + " at offset " +
                    std::to_string(offset) + " where " + name + " holds #" + std::to_string(at->second.id));
        }
      }
    }
    for (const auto& [id, where] : missing) {
      if (where.size() == logs.size()) {
        violation("final: acknowledged #" + std::to_string(id) + " is on no surviving replica");
      }
    }
  }

  SimOptions opts_;
  std::mt19937_64 rng_;
  SimNet net_;
  SimAdmin admin_;
  TempDir dir_;
  std::unique_ptr<control::Controller> controller_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::unique_ptr<SimPublisher> pub_;
  std::unique_ptr<SimSubscriber> sub_;
  std::vector<std::pair<std::string, fabric::FaultInjector*>> targets_;
  std::uint64_t start_ns_ = 0;
  std::uint64_t next_tick_ns_ = 0;
  std::int64_t last_epoch_ = 0;
  std::int64_t final_epoch_ = 0;
  std::uint64_t next_id_ = 1;
  int kills_ = 0;
  int silences_ = 0;
  int lossy_ = 0;
  std::string silent_;
  std::string silent_addr_;
  std::uint64_t unsilence_at_ns_ = 0;
  std::map<std::uint64_t, std::uint64_t> acked_;          // publish id -> offset (~0: unknown)
  std::map<std::uint64_t, std::uint64_t> acked_offsets_;  // offset -> publish id
  std::set<std::string> short_members_;                   // node@epoch already reported by check_members()
  std::vector<std::pair<std::uint64_t, std::uint64_t>> delivered_;  // (offset, id) in delivery order
  std::vector<std::string> violations_;
};

}  // namespace

SimResult run_simulation(const SimOptions& options) {
  World w(options);
  return w.run();
}

}  // namespace catena::sim
