// `catena bench --failover`: how long a partition is unavailable when its
// head dies. Each round starts a fresh local cluster (4 brokers: one spare),
// runs a publisher and a subscriber through a 3-replica chain, kills the
// head with SIGKILL and measures the time from the kill to the first
// acknowledgement of a record published after it (the first committed
// publish on the new chain). The history checker then counts lost and
// duplicated records. Reported as p50/p99 over the rounds, with the
// failure detector's timeout.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include <catena/broker/history.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/clock.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"
#include "stats.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench_detail::wait_until;

namespace {

struct Round {
  bool ok = false;
  double failover_ms = 0;
  HistoryReport history;
  std::string error;
};

Round one_round(const Common& common, const BenchOptions& o, int round) {
  Round out;
  ClusterOptions co;
  co.nodes = 4;
  co.provider = common.provider;
  co.dir = o.dir + "/failover-" + std::to_string(round);
  co.heartbeat_timeout_ms = o.timeout_ms;
  co.heartbeat_interval_ms = std::max(5, o.timeout_ms / 5);
  co.quiet = true;
  co.secure = o.secure;
  LocalCluster cluster(co);
  if (!cluster.start(&out.error)) return out;
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  cco.token = cluster.admin_token();
  control::ControllerClient admin(cco);
  control::idl::ChannelConfig cfg;
  cfg.name = "failover";
  cfg.partitions = 1;
  cfg.replication = 3;
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  auto ch = admin.create_channel(cfg);
  if (!ch) {
    out.error = ch.error().describe();
    return out;
  }
  const std::string head_id = ch->routes[0].replicas[0].node_id;
  std::size_t head_index = 0;
  for (std::size_t i = 0; i < cluster.nodes().size(); ++i) {
    if (cluster.nodes()[i].node_id == head_id) head_index = i;
  }

  HistoryChecker history(1);
  std::atomic<std::uint64_t> kill_id{~0ull}, kill_ns{0}, first_after_ns{0};
  bench_detail::TrafficOptions to;
  to.channel = "failover";
  to.tag = "fo";
  to.client_name = "failover-bench";
  to.provider = common.provider;
  to.on_ack = [&](std::uint64_t id) {
    if (id >= kill_id.load() && first_after_ns.load() == 0) first_after_ns.store(catena::wall_clock_ns());
  };
  bench_detail::HistoryTraffic traffic(cco, history, to);
  bool ok = wait_until([&] { return traffic.acked() >= 1000; }, 20s);
  if (ok) {
    kill_id.store(traffic.published());
    kill_ns.store(catena::wall_clock_ns());
    cluster.signal_node(head_index, SIGKILL);
    ok = wait_until([&] { return first_after_ns.load() != 0; }, 30s);
    if (ok) wait_until([&] { return traffic.acked() >= kill_id.load() + 500; }, 10s);
  }
  traffic.finish(40s, 20s);
  out.history = history.check();
  if (!ok) {
    out.error = "no publish committed after the kill within 30 s";
    return out;
  }
  out.failover_ms = static_cast<double>(first_after_ns.load() - kill_ns.load()) / 1e6;
  out.ok = true;
  return out;
}

}  // namespace

int run_failover_bench(const Common& common, const BenchOptions& o) {
  std::vector<double> times;
  std::uint64_t lost = 0, duplicated = 0, other = 0;
  for (int k = 0; k < o.kills; ++k) {
    Round r = one_round(common, o, k);
    lost += r.history.lost;
    duplicated += r.history.duplicated;
    other += r.history.out_of_order + r.history.corrupted + r.history.phantom + r.history.offset_conflicts;
    if (!r.ok) {
      std::fprintf(stderr, "catena bench --failover: round %d: %s\n", k, r.error.c_str());
      continue;
    }
    times.push_back(r.failover_ms);
    if (!o.json) {
      std::printf("kill %d: head killed, first commit on the new chain after %.1f ms (%s)\n", k + 1,
                  r.failover_ms, r.history.ok() ? "history ok" : r.history.summary().c_str());
    }
  }
  std::sort(times.begin(), times.end());
  auto pct = [&](double q) { return bench::quantile_sorted(times, q); };
  if (o.json) {
    nlohmann::json j{{"system", "catena"},
                     {"mode", "failover"},
                     {"replicas", 3},
                     {"kills", times.size()},
                     {"timeout_ms", o.timeout_ms},
                     {"failover_p50_ms", pct(0.5)},
                     {"failover_p99_ms", pct(0.99)},
                     {"failover_max_ms", times.empty() ? 0.0 : times.back()},
                     {"lost", lost},
                     {"duplicated", duplicated},
                     {"other_violations", other}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "failover over %zu kill(s), detector timeout %d ms: p50 %.1f ms, p99 %.1f ms; lost %llu, duplicated "
        "%llu\n",
        times.size(), o.timeout_ms, pct(0.5), pct(0.99), static_cast<unsigned long long>(lost),
        static_cast<unsigned long long>(duplicated));
  }
  return times.size() == static_cast<std::size_t>(o.kills) && lost == 0 && duplicated == 0 && other == 0 ? 0
                                                                                                         : 1;
}

}  // namespace catena::cli
