// `catena bench --failover`: how long a partition is unavailable when its
// head fails. Each round starts a fresh local cluster (4 brokers: one spare),
// runs a publisher and a subscriber through a 3-replica chain, fails the
// head and measures the time from the failure to the first acknowledgement
// of a record published after it (the first committed publish on the new
// chain). Two kinds of failure: a crash (SIGKILL: the publisher and the
// successor see their connections close and report it) and a silent node
// (SIGSTOP: nothing breaks, only the detector's timeout notices). The
// history checker then counts lost and duplicated records, and every other
// node whose incarnation changed (or that is DEAD) at the end of a round
// counts as a false eviction. --hog starts busy threads beside the cluster
// for the whole run. Reported as p50/p99 per kind over the rounds, with the
// failure detector's timeout.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <map>
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
  std::uint64_t false_evictions = 0;
  std::string error;
};

// Node id -> incarnation (node epoch), or -1 for a DEAD node.
std::map<std::string, std::int64_t> incarnations(control::ControllerClient& admin) {
  std::map<std::string, std::int64_t> out;
  if (auto st = admin.cluster_status()) {
    for (const auto& n : st->nodes) {
      out[n.info.node_id] = n.state == control::idl::NodeState::DEAD ? -1 : n.node_epoch;
    }
  }
  return out;
}

// Whether the process is stopped (SIGSTOP), a zombie or gone: it runs no
// more code. /proc/<pid>/stat's third field is its state.
bool stopped_or_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state == 'T' || state == 't' || state == 'Z' || state == 'X';
}

// Busy threads that compete with the cluster for the cores (--hog).
class CpuHog {
 public:
  explicit CpuHog(int threads) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        std::uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
        sink_.store(x, std::memory_order_relaxed);
      });
    }
  }
  ~CpuHog() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }
  CpuHog(const CpuHog&) = delete;
  CpuHog& operator=(const CpuHog&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

int probe_timeout_ms(const BenchOptions& o) {
  return o.probe_timeout_ms > 0 ? o.probe_timeout_ms : std::max(5, o.timeout_ms / 4);
}

Round one_round(const Common& common, const BenchOptions& o, int round, int sig) {
  Round out;
  ClusterOptions co;
  co.nodes = 4;
  co.provider = common.provider;
  co.dir = o.dir + "/failover-" + std::string(sig == SIGKILL ? "crash-" : "silent-") + std::to_string(round);
  co.heartbeat_timeout_ms = o.timeout_ms;
  co.heartbeat_interval_ms = std::max(5, o.timeout_ms / 5);
  // Detection scaled to the timeout (the controller's defaults suit its
  // 500 ms one): a maintenance tick every heartbeat interval, and probes
  // that give up after a quarter of the timeout (the first goes out at half
  // of it: FailureDetector's early probe).
  co.controller_args = {"--tick-interval-ms", std::to_string(co.heartbeat_interval_ms), "--probe-timeout-ms",
                        std::to_string(probe_timeout_ms(o))};
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
  // A silent head breaks no connection: the publisher re-reads the route
  // once acknowledgements stall this long.
  to.stall_check = std::chrono::milliseconds(std::max(5, o.timeout_ms / 2));
  to.provider = common.provider;
  to.on_ack = [&](std::uint64_t id) {
    if (id >= kill_id.load() && first_after_ns.load() == 0) first_after_ns.store(catena::wall_clock_ns());
  };
  bench_detail::HistoryTraffic traffic(cco, history, to);
  bool ok = wait_until([&] { return traffic.acked() >= 1000; }, 20s);
  const auto before = incarnations(admin);
  if (ok) {
    const pid_t pid = cluster.nodes()[head_index].pid;
    kill_ns.store(catena::wall_clock_ns());
    cluster.signal_node(head_index, sig);
    // The signal is only queued: the head may still take and forward a few
    // records. The first record that counts is one published once it is
    // stopped (or gone).
    (void)wait_until([&] { return stopped_or_gone(pid); }, 5s);
    kill_id.store(traffic.published());
    ok = wait_until([&] { return first_after_ns.load() != 0; }, 30s);
    if (ok) wait_until([&] { return traffic.acked() >= kill_id.load() + 500; }, 10s);
  }
  traffic.finish(40s, 20s);
  out.history = history.check();
  for (const auto& [id, epoch] : incarnations(admin)) {
    if (id == head_id) continue;
    const auto was = before.find(id);
    if (epoch < 0 || (was != before.end() && was->second != epoch)) ++out.false_evictions;
  }
  if (sig == SIGSTOP) cluster.signal_node(head_index, SIGCONT);  // it is fenced and registers again
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
  struct Kind {
    const char* name;
    int sig;
    std::vector<double> times;
  };
  std::vector<Kind> kinds;
  if (o.failover_kinds.find("crash") != std::string::npos) kinds.push_back({"crash", SIGKILL, {}});
  if (o.failover_kinds.find("silent") != std::string::npos) kinds.push_back({"silent", SIGSTOP, {}});
  std::uint64_t lost = 0, duplicated = 0, other = 0, false_evictions = 0;
  bool all_ok = true;
  {
    CpuHog hog(o.hog);
    for (auto& kind : kinds) {
      for (int k = 0; k < o.kills; ++k) {
        Round r = one_round(common, o, k, kind.sig);
        lost += r.history.lost;
        duplicated += r.history.duplicated;
        other +=
            r.history.out_of_order + r.history.corrupted + r.history.phantom + r.history.offset_conflicts;
        false_evictions += r.false_evictions;
        if (!r.ok) {
          all_ok = false;
          std::fprintf(stderr, "catena bench --failover: %s round %d: %s\n", kind.name, k, r.error.c_str());
          continue;
        }
        kind.times.push_back(r.failover_ms);
        if (!o.json) {
          std::printf("%s %d: head %s, first commit on the new chain after %.1f ms (%s%s)\n", kind.name,
                      k + 1, kind.sig == SIGKILL ? "killed (SIGKILL)" : "stopped (SIGSTOP)", r.failover_ms,
                      r.history.ok() ? "history ok" : r.history.summary().c_str(),
                      r.false_evictions == 0
                          ? ""
                          : fmt::format(", {} other node(s) evicted", r.false_evictions).c_str());
        }
      }
    }
  }
  nlohmann::json j{{"system", "catena"},
                   {"mode", "failover"},
                   {"replicas", 3},
                   {"timeout_ms", o.timeout_ms},
                   {"probe_timeout_ms", probe_timeout_ms(o)},
                   {"hog_threads", o.hog},
                   {"false_evictions", false_evictions},
                   {"lost", lost},
                   {"duplicated", duplicated},
                   {"other_violations", other}};
  for (auto& kind : kinds) {
    std::sort(kind.times.begin(), kind.times.end());
    auto pct = [&](double q) { return bench::quantile_sorted(kind.times, q); };
    // The crash rows keep the names they had before silent rounds existed.
    const std::string prefix = kind.sig == SIGKILL ? "failover" : "silent_failover";
    j[kind.sig == SIGKILL ? "kills" : "silent_kills"] = kind.times.size();
    j[prefix + "_p50_ms"] = pct(0.5);
    j[prefix + "_p99_ms"] = pct(0.99);
    j[prefix + "_max_ms"] = kind.times.empty() ? 0.0 : kind.times.back();
    if (!o.json) {
      std::printf("%s failover over %zu round(s), detector timeout %d ms: p50 %.1f ms, p99 %.1f ms\n",
                  kind.name, kind.times.size(), o.timeout_ms, pct(0.5), pct(0.99));
    }
  }
  if (o.json) {
    std::cout << j.dump() << std::endl;
  } else {
    std::printf("lost %llu, duplicated %llu, false evictions %llu (%d hog thread(s))\n",
                static_cast<unsigned long long>(lost), static_cast<unsigned long long>(duplicated),
                static_cast<unsigned long long>(false_evictions), o.hog);
  }
  return all_ok && lost == 0 && duplicated == 0 && other == 0 && false_evictions == 0 ? 0 : 1;
}

}  // namespace catena::cli
