// `catena bench --partitions 1,16,256`: how throughput and roles grow with
// partitions. For each count a fresh local cluster (--nodes brokers, chains
// of --replicas) gets one channel of that many partitions; one publisher
// sends --sizes' first payload size to every partition in turn (publish_to,
// round robin) for --seconds, keeping up to --window records in flight on
// each partition (PublisherOptions::max_in_flight),
// after a warm-up at that rate until segments are reused in place (unless
// --cold).
// One row per count: aggregate committed records/s and MB/s, how many
// chains each node heads and ends (from the channel's routes), and each
// node's memory after the run: resident (VmRSS in /proc/<pid>/status of its
// catenad) and registered (the fabric regions its provider holds, from the
// node stats its heartbeats carry: NodeStats.registered_bytes); and the CPU
// each record cost over the measured run: the catenads' (utime + stime in
// /proc/<pid>/stat) and this process's, where the publisher runs
// (getrusage), divided by the records acknowledged.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/resource.h>

#include <catena/broker/controller_routes.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/clock.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"
#include "stats.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench_detail::Fail;

namespace {

// The segment size for `partitions`: --segment-bytes, halved (to 1 MiB at
// least) until every slot of every replica a node holds fits in 32 GiB of
// the soft provider's 64 GiB arena.
std::int64_t segment_for(const BenchOptions& o, int nodes, int partitions) {
  const std::int64_t per_node = (std::int64_t{partitions} * o.replicas + nodes - 1) / nodes;
  const std::int64_t budget = std::int64_t{32} << 30;
  std::int64_t s = o.segment_bytes;
  while (s > (1 << 20) && per_node * (o.log_slots > 0 ? o.log_slots : 8) * s > budget) s /= 2;
  return s;
}

// The publisher's largest staging ring at each head: --ring-bytes, halved
// (to 64 KiB at least) until the rings of all partitions fit in 256 MiB
// (the publisher's ring_budget_bytes is that sum). With 16 MiB rings, 256
// partitions on 3 nodes had partitions whose sessions never came up
// (records failed `unavailable` after the 30 s retry timeout). Rings start
// at 64 KiB and grow to this only when they fill (PublisherOptions).
int ring_for(const BenchOptions& o, int partitions) {
  std::int64_t r = o.ring_bytes;
  while (r > (64 << 10) && r * partitions > (std::int64_t{256} << 20)) r /= 2;
  return static_cast<int>(r);
}

// A process's resident memory (VmRSS), or -1 if /proc does not say.
std::int64_t resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream f(line.substr(6));
    std::int64_t kib = -1;
    std::string unit;
    if (f >> kib >> unit && unit == "kB") return kib * 1024;
    return -1;
  }
  return -1;
}

// CPU time a process has used (user + system, ns), or -1 if /proc does
// not say. The fields after the command name (which may hold spaces and
// parentheses) start after its last ')': utime and stime are the 12th and
// 13th of them, in clock ticks.
std::int64_t cpu_ns_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream f(all.substr(close + 1));
  std::string field;
  std::int64_t utime = -1, stime = -1;
  for (int i = 1; i <= 13 && f >> field; ++i) {
    if (i == 12) utime = std::atoll(field.c_str());
    if (i == 13) stime = std::atoll(field.c_str());
  }
  const long hz = sysconf(_SC_CLK_TCK);
  if (utime < 0 || stime < 0 || hz <= 0) return -1;
  return (utime + stime) * (1'000'000'000 / hz);
}

// This process's CPU time (every thread: the publisher's and the bench's).
std::int64_t own_cpu_ns() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  auto ns = [](const timeval& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_usec * 1000; };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

// The CPU the brokers and the publisher spent over a measured run.
struct CpuUse {
  std::int64_t brokers_ns = 0;
  std::int64_t publisher_ns = 0;
  bool known = true;
};

CpuUse cpu_now(const LocalCluster& cluster) {
  CpuUse c;
  for (const auto& n : cluster.nodes()) {
    const std::int64_t ns = cpu_ns_of(n.pid);
    if (ns < 0) c.known = false;
    c.brokers_ns += ns;
  }
  c.publisher_ns = own_cpu_ns();
  if (c.publisher_ns < 0) c.known = false;
  return c;
}

// What each node said of its memory in its last heartbeat (the
// controller's view), once every node has reported some (at most 5 s); -1
// where a node did not.
struct NodeMemory {
  std::map<std::string, std::int64_t> registered;  // every region it registered
  std::map<std::string, std::int64_t> segments;    // of which its segments' (taken as they open)
  std::map<std::string, std::int64_t> retained;    // bytes of records its replicas hold
  std::map<std::string, std::int64_t> warm;        // given back, kept ready (Provider::warm_bytes)
};
NodeMemory node_memory(control::ControllerClient& admin, const std::vector<NodeProcess>& nodes) {
  NodeMemory out;
  for (const auto& n : nodes)
    out.registered[n.node_id] = out.segments[n.node_id] = out.retained[n.node_id] = out.warm[n.node_id] = -1;
  bench_detail::wait_until(
      [&] {
        auto st = admin.cluster_status();
        if (!st) return false;
        for (const auto& n : st->nodes) {
          const std::string& id = n.info.node_id;
          if (out.registered.count(id) == 0 || !n.stats.__isset.registered_bytes) continue;
          out.registered[id] = n.stats.registered_bytes;
          out.segments[id] = n.stats.__isset.segment_memory_bytes ? n.stats.segment_memory_bytes : -1;
          out.retained[id] = n.stats.bytes;
          out.warm[id] = n.stats.__isset.warm_bytes ? n.stats.warm_bytes : -1;
        }
        return std::all_of(out.registered.begin(), out.registered.end(),
                           [](const auto& kv) { return kv.second > 0; });
      },
      std::chrono::seconds(5));
  return out;
}

// What each node holds open now (NodeStats.connections: publisher,
// subscriber and commit-watch sessions, and chain links counted at both
// ends), from the first heartbeat of each that the controller got after
// this call began (the one before may predate sessions opened since); -1
// where none came within 5 s.
std::map<std::string, std::int64_t> node_connections(control::ControllerClient& admin,
                                                     const std::vector<NodeProcess>& nodes) {
  std::map<std::string, std::int64_t> out;
  for (const auto& n : nodes) out[n.node_id] = -1;
  const std::uint64_t asked = bench_detail::steady_ns();
  bench_detail::wait_until(
      [&] {
        auto st = admin.cluster_status();
        if (!st) return false;
        const auto since_ms = static_cast<std::int64_t>((bench_detail::steady_ns() - asked) / 1'000'000);
        for (const auto& n : st->nodes) {
          // A heartbeat at most since_ms - 1 ago came after `asked`.
          if (out.count(n.info.node_id) != 0 && n.last_heartbeat_ms_ago < since_ms)
            out[n.info.node_id] = n.stats.connections;
        }
        return std::all_of(out.begin(), out.end(), [](const auto& kv) { return kv.second >= 0; });
      },
      std::chrono::seconds(5));
  return out;
}

std::string mib_text(std::int64_t bytes) {
  if (bytes < 0) return "?";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}

}  // namespace

int run_partitions_bench(const Common& common, const BenchOptions& o) {
  std::vector<int> counts;
  std::uint32_t bytes = 0;
  try {
    counts = bench_detail::parse_partition_counts(o.partition_counts, "--partitions");
    std::stringstream sizes(o.sizes);
    std::string first;
    std::getline(sizes, first, ',');
    bytes = static_cast<std::uint32_t>(std::stoul(first));
  } catch (const Fail& f) {
    std::fprintf(stderr, "catena: bench: %s\n", f.what.c_str());
    return 2;
  } catch (const std::exception&) {
    std::fprintf(
        stderr,
        "catena: bench: --partitions takes comma-separated counts from 1 to 1024, --sizes byte counts\n");
    return 2;
  }
  if (counts.empty() || bytes == 0) {
    std::fprintf(stderr, "catena: bench: --partitions needs at least one count and a payload size\n");
    return 2;
  }
  if (!common.controller.empty()) {
    std::fprintf(stderr, "catena: bench --partitions runs its own clusters (no --controller)\n");
    return 2;
  }
  std::FILE* info = o.json ? stderr : stdout;
  const int nodes = std::max(o.nodes, o.replicas);
  std::fprintf(info,
               "catena bench --partitions: %d brokers, chains of %d, %u B records, %.1f s per count, "
               "provider %s, a fresh cluster per count\n",
               nodes, o.replicas, bytes, o.seconds, common.provider.c_str());
  int rc = 0;
  for (const int partitions : counts) {
    ClusterOptions co;
    co.nodes = nodes;
    // Zones of equal size, so that spreading chains over zones keeps every
    // node's share of replicas equal: three when they divide the brokers,
    // else one per broker.
    co.zones = nodes % 3 == 0 ? 3 : nodes;
    co.provider = common.provider;
    co.dir = o.dir + "/partitions-" + std::to_string(partitions);
    co.quiet = true;
    co.secure = o.secure;
    LocalCluster cluster(co);
    std::string err;
    if (!cluster.start(&err)) {
      std::fprintf(stderr, "catena: bench --partitions: %s\n", err.c_str());
      return 1;
    }
    control::ControllerClient::Options cco;
    cco.address = cluster.controller_address();
    cco.token = cluster.admin_token();
    cco.rpc_timeout = 30s;
    control::ControllerClient admin(cco);
    control::idl::ChannelConfig cfg;
    cfg.name = "partitions";
    cfg.partitions = partitions;
    cfg.replication = o.replicas;
    cfg.segment_bytes = segment_for(o, nodes, partitions);
    cfg.ttl_ms = 1000;  // the minimum: segments are recycled
    auto ch = admin.create_channel(cfg);
    if (!ch) {
      std::fprintf(stderr, "catena: bench --partitions: create %d partitions: %s\n", partitions,
                   ch.error().describe().c_str());
      return 1;
    }
    std::map<std::string, int> heads, tails;
    for (const auto& n : cluster.nodes()) heads[n.node_id] = tails[n.node_id] = 0;
    for (const auto& r : ch->routes) {
      if (r.replicas.empty()) continue;
      ++heads[r.replicas.front().node_id];
      ++tails[r.replicas.back().node_id];
    }
    bench_detail::Throughput t;
    double setup_ms = 0;
    bench_detail::WarmUp warm;
    std::uint64_t rings_in_use = 0;
    std::map<std::string, std::int64_t> connections;  // while the publisher is up
    CpuUse cpu_before, cpu_after;
    const int ring = ring_for(o, partitions);
    try {
      broker::ControllerRoutes routes(cco, "bench-partitions");
      PublisherOptions po;
      po.provider = common.provider;
      po.linger = std::chrono::microseconds(o.linger_us);
      po.max_batch_bytes = o.max_batch_bytes;
      po.ring_bytes = ring;
      po.ring_budget_bytes = static_cast<std::uint64_t>(ring) * static_cast<std::uint64_t>(partitions);
      po.max_in_flight = static_cast<std::uint32_t>(o.window);
      po.tail_acks = !o.head_acks_only;
      // Setup, not measured as throughput: the publisher's sessions with
      // every head and tail, then records to every partition in turn until
      // as many are committed as there are partitions.
      const auto t0 = bench_detail::steady_ns();
      auto pub = Publisher::create(routes, cfg.name, po);
      if (!pub) throw Fail{"publisher: " + pub.error().message};
      (void)bench_detail::throughput(*pub.value(), bytes, 60.0, static_cast<std::uint64_t>(partitions),
                                     static_cast<std::uint32_t>(partitions));
      setup_ms = static_cast<double>(bench_detail::steady_ns() - t0) / 1e6;
      if (!o.cold) {
        // Until segments are reused in place: every slot a partition cycles
        // through at this rate has had its first-touch page faults (which a
        // long-running node pays once), and segment sizes follow the rate.
        // Rounds of twice ttl + grace, until a round took no new segment
        // memory.
        warm = bench_detail::warm_until_steady(
            *pub.value(), 2 * (cfg.ttl_ms + co.grace_ms) / 1000.0, 6,
            [&] { return bench_detail::segment_memory_taken(admin); }, bytes,
            static_cast<std::uint32_t>(partitions), static_cast<std::uint32_t>(o.rounds));
      }
      cpu_before = cpu_now(cluster);
      t = bench_detail::throughput(*pub.value(), bytes, o.seconds, 0, static_cast<std::uint32_t>(partitions),
                                   static_cast<std::uint32_t>(o.rounds));
      cpu_after = cpu_now(cluster);
      rings_in_use = pub.value()->ring_bytes_in_use();
      connections = node_connections(admin, cluster.nodes());
    } catch (const Fail& f) {
      std::fprintf(stderr, "catena: bench --partitions: %d partitions: %s\n", partitions, f.what.c_str());
      rc = 1;
      continue;
    }
    // Memory after the run, while every replica and session is still up.
    std::map<std::string, std::int64_t> rss;
    for (const auto& n : cluster.nodes()) rss[n.node_id] = resident_bytes(n.pid);
    const NodeMemory memory = node_memory(admin, cluster.nodes());
    const auto& registered = memory.registered;
    // What every slot of every replica would register if taken up front
    // (catenad's default 8 slots: this bench does not pass --segment-slots).
    constexpr std::int64_t slots = 8;
    std::map<std::string, std::int64_t> all_slots;
    for (const auto& r : ch->routes) {
      for (const auto& rep : r.replicas) all_slots[rep.node_id] += slots * cfg.segment_bytes;
    }
    const double msgs =
        t.elapsed_ns == 0 ? 0 : static_cast<double>(t.acked) * 1e9 / static_cast<double>(t.elapsed_ns);
    const auto pct = bench::percentiles(std::move(t.ack_ns));
    // CPU per acknowledged record, in us; -1 where /proc did not say.
    const bool cpu_known = cpu_before.known && cpu_after.known && t.acked > 0;
    auto per_record_us = [&](std::int64_t before, std::int64_t after) {
      return cpu_known ? static_cast<double>(after - before) / 1e3 / static_cast<double>(t.acked) : -1.0;
    };
    const double broker_cpu_us = per_record_us(cpu_before.brokers_ns, cpu_after.brokers_ns);
    const double publisher_cpu_us = per_record_us(cpu_before.publisher_ns, cpu_after.publisher_ns);
    const double cores_busy = cpu_known && t.elapsed_ns > 0
                                  ? static_cast<double>(cpu_after.brokers_ns - cpu_before.brokers_ns +
                                                        cpu_after.publisher_ns - cpu_before.publisher_ns) /
                                        static_cast<double>(t.elapsed_ns)
                                  : -1.0;
    if (o.json) {
      nlohmann::json j{{"system", "catena"},
                       {"mode", "partitions"},
                       {"partitions", partitions},
                       {"nodes", nodes},
                       {"replicas", o.replicas},
                       {"bytes", bytes},
                       {"segment_bytes", cfg.segment_bytes},
                       {"ring_bytes", ring},
                       {"publisher_ring_bytes", rings_in_use},
                       {"setup_ms", setup_ms},
                       {"warmup_s", warm.seconds},
                       {"warmup_steady", warm.steady},
                       {"warmup_unsettled", warm.unsettled},
                       {"msgs_per_s", msgs},
                       {"mb_per_s", msgs * bytes / 1e6},
                       {"ack_p50_ns", pct.p50},
                       {"ack_p99_ns", pct.p99},
                       {"broker_cpu_us_per_msg", broker_cpu_us},
                       {"publisher_cpu_us_per_msg", publisher_cpu_us},
                       {"cores_busy", cores_busy},
                       {"tail_acks", !o.head_acks_only},
                       {"rounds", o.rounds},
                       {"connections_per_node", connections},
                       {"heads_per_node", heads},
                       {"tails_per_node", tails},
                       {"rss_bytes", rss},
                       {"registered_bytes", registered},
                       {"segment_memory_bytes", memory.segments},
                       {"retained_bytes", memory.retained},
                       {"warm_bytes", memory.warm},
                       {"all_slots_bytes", all_slots},
                       {"provider", common.provider},
                       {"loadavg_1m", bench_detail::load_average()}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf(
          "  %4d partitions  %10.0f msg/s  %8.1f MB/s  ack p50 %8.1f us  p99 %9.1f us  segments %lld MiB\n",
          partitions, msgs, msgs * bytes / 1e6, static_cast<double>(pct.p50) / 1e3,
          static_cast<double>(pct.p99) / 1e3, static_cast<long long>(cfg.segment_bytes >> 20));
      std::string h, tl;
      for (const auto& [id, n] : heads) h += " " + id + "=" + std::to_string(n);
      for (const auto& [id, n] : tails) tl += " " + id + "=" + std::to_string(n);
      std::printf("  %15s heads:%s  tails:%s\n", "", h.c_str(), tl.c_str());
      if (cpu_known) {
        std::printf(
            "  %15s cpu per record: brokers %.2f us, publisher %.2f us (%.2f cores busy of %ld online)\n", "",
            broker_cpu_us, publisher_cpu_us, cores_busy, sysconf(_SC_NPROCESSORS_ONLN));
      }
      std::printf(
          "  %15s setup %.0f ms (sessions, first records), publisher rings %s (%d KiB at most each)\n", "",
          setup_ms, mib_text(static_cast<std::int64_t>(rings_in_use)).c_str(), ring >> 10);
      if (!o.cold) {
        std::printf("  %15s warm-up %.1f s, %d rounds (%s)\n", "", warm.seconds, warm.rounds,
                    warm.steady ? "the rate stopped rising and the last round took no new segment memory"
                                : ("not settled: " + warm.unsettled +
                                   " at the last round; a longer --seconds measures past it")
                                      .c_str());
      }
      auto at = [](const std::map<std::string, std::int64_t>& m, const std::string& id) {
        return m.count(id) != 0 ? m.at(id) : std::int64_t{-1};
      };
      for (const auto& [id, bytes] : rss) {
        std::printf(
            "  %15s %s: resident %s, registered %s (segments %s for %s retained; all slots would be %s), "
            "warm %s\n",
            "", id.c_str(), mib_text(bytes).c_str(), mib_text(at(registered, id)).c_str(),
            mib_text(at(memory.segments, id)).c_str(), mib_text(at(memory.retained, id)).c_str(),
            mib_text(at(all_slots, id)).c_str(), mib_text(at(memory.warm, id)).c_str());
      }
    }
    std::fflush(stdout);
  }
  if (!o.json) {
    std::printf(
        "  (one publisher, round robin over the partitions, up to %d rounds between two polls, up to %d "
        "records in flight per partition, linger %d us, acks from %s; resident: the catenad's VmRSS, "
        "registered: the fabric regions it holds, after the run)\n",
        o.rounds, o.window, o.linger_us,
        o.head_acks_only ? "the heads only" : "the tails' commit watches and the heads");
  }
  return rc;
}

}  // namespace catena::cli
