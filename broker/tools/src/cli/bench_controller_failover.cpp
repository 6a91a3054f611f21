// `catena bench --controller-failover`: what a controller failover costs.
// One local cluster with 3 controllers (one leader; metadata and election on
// a ZooKeeper server started for it) and --nodes brokers, a publisher and a
// subscriber on a 3-replica channel. The leader is stopped --kills times,
// SIGKILL and SIGTERM alternately; per stop: the time until a control call
// (clusterStatus, through the client's address list) succeeds on a new
// leader, and the longest gap between two publisher acknowledgements from
// the stop until a second after the takeover (the data path does not go
// through the controller: brokers keep serving). The stopped controller is
// started again before the next stop. A SIGKILL stop also SIGKILLs a member
// of the channel's chain just before the leader: the chain is repaired by
// the next leader (repair_ms: from the broker's kill until the route has
// three replicas again, none of them the killed one), and the broker is
// started again (a new, empty incarnation) before the next stop, so the
// ack gap of such a stop includes the repair. The history checker then
// counts lost and duplicated records over the whole run. One JSON line
// with --json.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include <catena/broker/history.hpp>
#include <catena/control/controller_client.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"
#include "stats.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench_detail::steady_ns;
using bench_detail::wait_until;

namespace {

// The index of the controller that answers control calls now, -1 if none.
int answering_controller(control::ControllerClient& admin, const LocalCluster& cluster) {
  if (!admin.cluster_status().ok()) return -1;
  const std::string at = admin.address();
  for (std::size_t i = 0; i < cluster.controller_count(); ++i) {
    if (cluster.controller_address(i) == at) return static_cast<int>(i);
  }
  return -1;
}

struct LeaderStop {
  int sig = 0;
  double takeover_ms = 0;
  double ack_gap_ms = 0;
  double repair_ms = -1;  // a SIGKILL stop's chain member: killed -> repaired
};

// The index in cluster.nodes() of the broker with this node id, -1 if none.
int node_index(const LocalCluster& cluster, const std::string& node_id) {
  const auto& nodes = cluster.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].node_id == node_id) return static_cast<int>(i);
  }
  return -1;
}

// The route has `replication` replicas, none joining, and none is `gone`.
bool repaired_without(control::ControllerClient& admin, const std::string& channel, std::size_t replication,
                      const std::string& gone) {
  auto route = admin.get_route(channel, 0, 0);
  if (!route || route->replicas.size() != replication || !route->joining.empty()) return false;
  return std::none_of(route->replicas.begin(), route->replicas.end(),
                      [&](const control::idl::Replica& r) { return r.node_id == gone; });
}

}  // namespace

int run_controller_failover_bench(const Common& common, const BenchOptions& o) {
  ClusterOptions co;
  co.nodes = std::max(4, o.nodes);  // a spare: a killed chain member's replacement
  co.controllers = 3;
  co.zk_session_timeout_ms = o.zk_session_timeout_ms;
  co.provider = common.provider;
  co.dir = o.dir + "/controller-failover";
  co.quiet = true;
  co.secure = o.secure;
  LocalCluster cluster(co);
  std::string err;
  if (!cluster.start(&err)) return fail("bench --controller-failover", err);
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  cco.token = cluster.admin_token();
  control::ControllerClient admin(cco);
  control::idl::ChannelConfig cfg;
  cfg.name = "controller-failover";
  cfg.partitions = 1;
  cfg.replication = 3;
  cfg.segment_bytes = 16 << 20;
  cfg.ttl_ms = 600000;
  if (auto ch = admin.create_channel(cfg); !ch)
    return fail("bench --controller-failover", ch.error().describe());

  HistoryChecker history(1);
  // The longest gap between two acknowledgements since window_ns (the
  // publisher thread runs the callbacks: one writer).
  std::atomic<std::uint64_t> window_ns{~0ull}, max_gap_ns{0}, last_ack_ns{steady_ns()};
  bench_detail::TrafficOptions to;
  to.channel = cfg.name;
  to.tag = "cf";
  to.client_name = "controller-failover";
  to.provider = common.provider;
  to.retry_timeout = 60s;
  to.on_ack = [&](std::uint64_t) {
    const std::uint64_t now = steady_ns();
    if (now >= window_ns.load(std::memory_order_relaxed)) {
      const std::uint64_t from =
          std::max(last_ack_ns.load(std::memory_order_relaxed), window_ns.load(std::memory_order_relaxed));
      max_gap_ns.store(std::max(max_gap_ns.load(std::memory_order_relaxed), now - from),
                       std::memory_order_relaxed);
    }
    last_ack_ns.store(now, std::memory_order_relaxed);
  };
  bench_detail::HistoryTraffic traffic(cco, history, to);

  std::vector<LeaderStop> stops;
  bool ok = wait_until([&] { return traffic.acked() >= 1000; }, 20s);
  if (!ok) err = "no traffic acknowledged within 20 s";
  for (int k = 0; ok && k < o.kills; ++k) {
    const int leader = answering_controller(admin, cluster);
    if (leader < 0) {
      ok = false;
      err = "no controller answers";
      break;
    }
    LeaderStop s;
    s.sig = k % 2 == 0 ? SIGKILL : SIGTERM;
    // A SIGKILL stop takes the chain's tail with it (the middle of a
    // three-node chain would do as well; the head would also move the
    // publisher).
    std::string member;
    int member_index = -1;
    if (s.sig == SIGKILL) {
      auto route = admin.get_route(cfg.name, 0, 0);
      if (!route || route->replicas.empty()) {
        ok = false;
        err = "no route before stop " + std::to_string(k + 1);
        break;
      }
      member = route->replicas.back().node_id;
      member_index = node_index(cluster, member);
    }
    max_gap_ns.store(0);
    const std::uint64_t stopped_ns = steady_ns();
    window_ns.store(stopped_ns);
    if (member_index >= 0) cluster.signal_node(static_cast<std::size_t>(member_index), SIGKILL);
    cluster.signal_controller(static_cast<std::size_t>(leader), s.sig);
    if (s.sig == SIGTERM) cluster.wait_controller_exit(static_cast<std::size_t>(leader), 10s);
    int now = -1;
    if (!wait_until([&] { return (now = answering_controller(admin, cluster)) >= 0 && now != leader; },
                    60s)) {
      ok = false;
      err = "no new leader answered within 60 s of stop " + std::to_string(k + 1);
      break;
    }
    s.takeover_ms = static_cast<double>(steady_ns() - stopped_ns) / 1e6;
    if (member_index >= 0) {
      if (!wait_until([&] { return repaired_without(admin, cfg.name, 3, member); }, 60s)) {
        ok = false;
        err = "the chain was not repaired within 60 s of stop " + std::to_string(k + 1);
        break;
      }
      s.repair_ms = static_cast<double>(steady_ns() - stopped_ns) / 1e6;
    }
    std::this_thread::sleep_for(1s);
    // The longest acknowledgement gap in the window, or the one still open.
    window_ns.store(~0ull);
    const std::uint64_t open = steady_ns() - std::max(last_ack_ns.load(), stopped_ns);
    s.ack_gap_ms = static_cast<double>(std::max(max_gap_ns.load(), open)) / 1e6;
    stops.push_back(s);
    if (!o.json) {
      std::printf(
          "stop %d (%s): controller-%d -> controller-%d answers after %.1f ms; longest ack gap %.2f ms\n",
          k + 1, s.sig == SIGKILL ? "SIGKILL" : "SIGTERM", leader, now, s.takeover_ms, s.ack_gap_ms);
      if (s.repair_ms >= 0)
        std::printf("  chain member %s killed with it: chain repaired after %.1f ms\n", member.c_str(),
                    s.repair_ms);
      std::fflush(stdout);
    }
    if (member_index >= 0 && !cluster.restart_node(static_cast<std::size_t>(member_index), &err)) {
      ok = false;
      break;
    }
    if (!cluster.restart_controller(&err, static_cast<std::size_t>(leader))) {
      ok = false;
      break;
    }
  }
  traffic.finish(40s, 20s);
  const HistoryReport h = history.check();
  if (!ok) std::fprintf(stderr, "catena bench --controller-failover: %s\n", err.c_str());

  auto figures = [&](int sig, double LeaderStop::*field) {
    std::vector<double> v;
    for (const auto& s : stops) {
      if (sig == 0 || s.sig == sig) v.push_back(s.*field);
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto kill_t = figures(SIGKILL, &LeaderStop::takeover_ms);
  const auto term_t = figures(SIGTERM, &LeaderStop::takeover_ms);
  const auto gaps = figures(0, &LeaderStop::ack_gap_ms);
  const auto repairs = figures(SIGKILL, &LeaderStop::repair_ms);
  auto pct = [](const std::vector<double>& v, double q) { return bench::quantile_sorted(v, q); };
  auto max_of = [](const std::vector<double>& v) { return v.empty() ? 0.0 : v.back(); };
  const std::uint64_t other = h.out_of_order + h.corrupted + h.phantom + h.offset_conflicts;
  if (o.json) {
    nlohmann::json j{{"system", "catena"},
                     {"mode", "controller_failover"},
                     {"controllers", 3},
                     {"zk_session_timeout_ms", o.zk_session_timeout_ms},
                     {"nodes", co.nodes},
                     {"stops", stops.size()},
                     {"sigkill_stops", kill_t.size()},
                     {"sigkill_takeover_p50_ms", pct(kill_t, 0.5)},
                     {"sigkill_takeover_p99_ms", pct(kill_t, 0.99)},
                     {"sigkill_takeover_max_ms", max_of(kill_t)},
                     {"sigterm_stops", term_t.size()},
                     {"sigterm_takeover_p50_ms", pct(term_t, 0.5)},
                     {"sigterm_takeover_p99_ms", pct(term_t, 0.99)},
                     {"sigterm_takeover_max_ms", max_of(term_t)},
                     {"ack_gap_p50_ms", pct(gaps, 0.5)},
                     {"ack_gap_p99_ms", pct(gaps, 0.99)},
                     {"ack_gap_max_ms", max_of(gaps)},
                     {"broker_kills", repairs.size()},
                     {"repair_ms_p50", pct(repairs, 0.5)},
                     {"repair_ms_p99", pct(repairs, 0.99)},
                     {"repair_ms_max", max_of(repairs)},
                     {"acknowledged", h.acknowledged},
                     {"lost", h.lost},
                     {"duplicated", h.duplicated},
                     {"other_violations", other}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "controller failover over %zu stop(s), ZooKeeper sessions of %d ms: SIGKILL takeover p50 %.1f ms "
        "max %.1f ms; SIGTERM takeover p50 %.1f ms max %.1f ms; longest ack gap p50 %.2f ms max %.2f ms; "
        "chain repaired (a member killed with the leader) p50 %.1f ms max %.1f ms; "
        "%llu acknowledged, lost %llu, duplicated %llu\n",
        stops.size(), o.zk_session_timeout_ms, pct(kill_t, 0.5), max_of(kill_t), pct(term_t, 0.5),
        max_of(term_t), pct(gaps, 0.5), max_of(gaps), pct(repairs, 0.5), max_of(repairs),
        static_cast<unsigned long long>(h.acknowledged), static_cast<unsigned long long>(h.lost),
        static_cast<unsigned long long>(h.duplicated));
  }
  return ok && stops.size() == static_cast<std::size_t>(o.kills) && h.lost == 0 && h.duplicated == 0 &&
                 other == 0
             ? 0
             : 1;
}

}  // namespace catena::cli
