// `catena bench --recovery`: what recovering a broker costs, by level, under
// traffic. One line per level (JSON with --json):
//   partition  one replica link of a broker that holds eight partitions
//              broken five times (bench_recovery_partition.cpp);
//   process    a broker killed with SIGKILL and started again with the
//              memory it kept (catenad --keep-dir): it rejoins its chain
//              with what it held and copies only what it missed;
//   full-copy  the same kill and restart without kept memory, measured in
//              the same run as the baseline: the node comes back empty and
//              copies the partition from the tail;
//   zone       the killed broker does not come back: on a cluster of 6
//              brokers in zones a, b, c, a, b, c the chain gets a
//              replacement, which the controller takes from the lost
//              member's zone (same_zone says whether it did); recovery_ms
//              runs from the kill to the replacement's promotion.
// process and full-copy run on a fresh local cluster of 3 brokers (failure detector
// timeout: --timeout-ms, at least 300 ms) and one channel of
// one partition with R=3 (so the chain can only get its own member back):
// --recovery-mib MiB are published first (16 KiB records), then a steady
// stream of small records runs while the middle broker is killed, started
// again and brought back to full replication.
//   recovery_ms   from the restart to the node's return to the chain
//                 (promoted from joining);
//   bytes_copied  what the tail wrote to it meanwhile (the tail's
//                 PartitionProgress.forwarded_bytes, before and after);
//   lost, duplicated  the history checker over every acknowledged record,
//                 read by a subscriber throughout.
// The partition line comes first (bench_recovery_partition.cpp: a link
// broken in place, no controller). Not measured here: the datacenter level
// (not built).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include <catena/broker/history.hpp>
#include <catena/control/controller_client.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench_detail::LevelResult;
using bench_detail::steady_ns;
using bench_detail::wait_until;

namespace {

constexpr const char* kRecoveryChannel = "recovery";

// The PartitionProgress of the recovery channel on node `id` (empty if none).
std::optional<control::idl::PartitionProgress> progress_on(control::ControllerClient& admin,
                                                           const std::string& id) {
  auto st = admin.cluster_status();
  if (!st) return std::nullopt;
  for (const auto& n : st->nodes) {
    if (n.info.node_id != id) continue;
    for (const auto& p : n.stats.partitions) {
      if (p.channel == kRecoveryChannel && p.partition == 0) return p;
    }
  }
  return std::nullopt;
}

enum class Level { process, full_copy, zone };

// The zone label of every node (cluster status).
std::map<std::string, std::string> zones_of(control::ControllerClient& admin) {
  std::map<std::string, std::string> out;
  if (auto st = admin.cluster_status()) {
    for (const auto& n : st->nodes) out[n.info.node_id] = n.info.zone;
  }
  return out;
}

LevelResult one_level(const Common& common, const BenchOptions& o, Level level) {
  LevelResult out;
  const bool keep = level == Level::process;
  out.level = level == Level::process ? "process" : level == Level::full_copy ? "full-copy" : "zone";
  ClusterOptions co;
  co.nodes = level == Level::zone ? 6 : 3;
  co.provider = common.provider;
  co.dir = o.dir + "/recovery-" + out.level;
  // A whole partition copied on a small machine starves heartbeats for a
  // while: a detector as tight as --failover's would evict healthy nodes.
  co.heartbeat_timeout_ms = std::max(o.timeout_ms, 300);
  co.heartbeat_interval_ms = co.heartbeat_timeout_ms / 5;
  co.node_id_prefix = "node-";
  co.quiet = true;
  if (keep) co.keep_root = "/dev/shm/catena-bench-recovery-" + std::to_string(getpid());
  LocalCluster cluster(co);
  if (!cluster.start(&out.error)) return out;
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  control::ControllerClient admin(cco);
  control::idl::ChannelConfig cfg;
  cfg.name = kRecoveryChannel;
  cfg.partitions = 1;
  cfg.replication = 3;
  cfg.segment_bytes = o.segment_bytes;
  cfg.ttl_ms = 3600000;
  auto ch = admin.create_channel(cfg);
  if (!ch) {
    out.error = ch.error().describe();
    return out;
  }
  const auto chain = ch->routes[0].replicas;
  const std::string victim_id = chain[1].node_id;
  const std::string tail_id = chain[2].node_id;
  std::size_t victim = 0;
  for (std::size_t i = 0; i < cluster.nodes().size(); ++i) {
    if (cluster.nodes()[i].node_id == victim_id) victim = i;
  }
  auto in_chain = [&](std::size_t members) {
    auto r = admin.get_route(kRecoveryChannel, 0, 0);
    if (!r || r->replicas.size() != members) return false;
    return std::any_of(r->replicas.begin(), r->replicas.end(),
                       [&](const control::idl::Replica& x) { return x.node_id == victim_id; });
  };

  HistoryChecker history(1);
  const std::uint64_t fill_bytes = static_cast<std::uint64_t>(o.recovery_mib) << 20;
  bench_detail::TrafficOptions to;
  to.channel = kRecoveryChannel;
  to.tag = "rc";
  to.client_name = "recovery-bench";
  to.provider = common.provider;
  to.retry_timeout = 60s;
  // Large records until the partition holds --recovery-mib, then a steady
  // stream of small ones through the fault.
  to.record_bytes = [fill_bytes](std::uint64_t acked) { return acked < fill_bytes ? 16384 : 128; };
  to.pause = [fill_bytes](std::uint64_t acked) {
    return acked < fill_bytes ? std::chrono::microseconds(0) : std::chrono::microseconds(200);
  };
  bench_detail::HistoryTraffic traffic(cco, history, to);
  const std::string zone_of_victim = zones_of(admin)[victim_id];
  bool ok = wait_until([&] { return traffic.acked_bytes() >= fill_bytes; }, 120s);
  if (!ok) out.error = "the partition did not take --recovery-mib within 120 s";
  std::int64_t forwarded_before = 0;
  std::uint64_t restarted_ns = 0;
  std::uint64_t killed_ns = 0;
  if (ok) {
    killed_ns = steady_ns();
    cluster.signal_node(victim, SIGKILL);
    ok = wait_until([&] { return !in_chain(3) && !in_chain(2); }, 30s);
    if (!ok) out.error = "the killed node stayed in its chain";
  }
  if (ok && level == Level::zone) {
    // Not restarted: the chain is made whole by a replacement.
    std::string replacement;
    ok = wait_until(
        [&] {
          auto r = admin.get_route(kRecoveryChannel, 0, 0);
          if (!r || r->replicas.size() != 3) return false;
          for (const auto& x : r->replicas) {
            if (x.node_id != chain[0].node_id && x.node_id != tail_id) replacement = x.node_id;
          }
          return true;
        },
        120s);
    if (ok) {
      out.recovery_ms = static_cast<double>(steady_ns() - killed_ns) / 1e6;
      const auto tail = progress_on(admin, tail_id);
      out.bytes_copied = tail ? tail->forwarded_bytes : 0;
      out.retained_records = tail ? tail->end_offset : 0;
      const auto zones = zones_of(admin);
      out.same_zone = zones.count(replacement) != 0 && zones.at(replacement) == zone_of_victim;
    } else {
      out.error = "the chain had no replacement within 120 s";
    }
  } else if (ok) {
    const auto tail = progress_on(admin, tail_id);
    forwarded_before = tail ? tail->forwarded_bytes : 0;
    out.retained_records = tail ? tail->end_offset : 0;
    restarted_ns = steady_ns();
    ok = cluster.restart_node(victim, &out.error);
  }
  if (ok && level != Level::zone) {
    ok = wait_until([&] { return in_chain(3); }, 120s);
    if (ok) {
      out.recovery_ms = static_cast<double>(steady_ns() - restarted_ns) / 1e6;
      const auto tail = progress_on(admin, tail_id);
      out.bytes_copied = tail ? tail->forwarded_bytes - forwarded_before : 0;
      if (const auto back = progress_on(admin, victim_id)) out.recovered_records = back->recovered_records;
    } else {
      out.error = "the restarted node was not back in its chain within 120 s";
    }
  }
  const std::uint64_t settle = traffic.acked();
  wait_until([&] { return traffic.acked() >= settle + 500; }, 10s);
  traffic.finish(40s, 30s);
  if (auto r = admin.get_route(kRecoveryChannel, 0, 0)) out.route_epoch = r->epoch;
  out.history = history.check();
  out.ok = ok;
  return out;
}

}  // namespace

int run_recovery_bench(const Common& common, const BenchOptions& o) {
  std::vector<LevelResult> levels;
  levels.push_back(bench_detail::partition_level(common.provider, 5));
  levels.push_back(one_level(common, o, Level::process));
  levels.push_back(one_level(common, o, Level::full_copy));
  levels.push_back(one_level(common, o, Level::zone));
  const LevelResult& full = levels[2];
  bool all_ok = true;
  for (const auto& r : levels) {
    all_ok = all_ok && r.ok && r.history.ok();
    if (!r.ok)
      std::fprintf(stderr, "catena bench --recovery: level %s: %s\n", r.level.c_str(), r.error.c_str());
    const double copy_ratio =
        full.bytes_copied > 0 ? static_cast<double>(r.bytes_copied) / full.bytes_copied : 0;
    const double time_ratio = full.recovery_ms > 0 ? r.recovery_ms / full.recovery_ms : 0;
    if (o.json) {
      nlohmann::json j{{"system", "catena"},
                       {"mode", "recovery"},
                       {"level", r.level},
                       {"ok", r.ok},
                       {"recovery_ms", r.recovery_ms},
                       {"bytes_copied", r.bytes_copied},
                       {"retained_records", r.retained_records},
                       {"recovered_records", r.recovered_records},
                       {"route_epoch", r.route_epoch},
                       {"same_zone", r.same_zone},
                       {"copy_vs_full_copy", copy_ratio},
                       {"time_vs_full_copy", time_ratio},
                       {"recovery_mib", o.recovery_mib},
                       {"lost", r.history.lost},
                       {"duplicated", r.history.duplicated},
                       {"other_violations", r.history.out_of_order + r.history.corrupted + r.history.phantom +
                                                r.history.offset_conflicts}};
      for (const auto& [name, value] : r.extra) j[name] = value;
      std::cout << j.dump() << std::endl;
    } else if (r.level == "partition") {
      std::printf(
          "%-9s links whole again %.1f ms after a break (median of %lld), re-sent %.1f KiB, other "
          "partitions' links down in %lld samples; lost %llu, duplicated %llu\n",
          r.level.c_str(), r.recovery_ms,
          static_cast<long long>(r.extra.count("breaks") ? r.extra.at("breaks") : 0),
          static_cast<double>(r.bytes_copied) / 1024,
          static_cast<long long>(r.extra.count("others_unlinked") ? r.extra.at("others_unlinked") : 0),
          static_cast<unsigned long long>(r.history.lost),
          static_cast<unsigned long long>(r.history.duplicated));
    } else {
      std::printf(
          "%-9s chain whole again %.0f ms after the %s, copied %.1f MiB (%.0f%% of a full copy), "
          "recovered %lld records%s; lost %llu, duplicated %llu\n",
          r.level.c_str(), r.recovery_ms, r.level == "zone" ? "kill" : "restart",
          static_cast<double>(r.bytes_copied) / (1 << 20), copy_ratio * 100,
          static_cast<long long>(r.recovered_records),
          r.level == "zone"
              ? (r.same_zone ? ", replacement in the lost node's zone" : ", replacement in another zone")
              : "",
          static_cast<unsigned long long>(r.history.lost),
          static_cast<unsigned long long>(r.history.duplicated));
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace catena::cli
