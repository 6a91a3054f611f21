// `catena bench --partitions 1,16,256`: how throughput and roles grow with
// partitions. For each count a fresh local cluster (--nodes brokers, chains
// of --replicas) gets one channel of that many partitions; one publisher
// sends --sizes' first payload size to every partition in turn (publish_to,
// round robin) for --seconds, keeping up to --window records in flight.
// One row per count: aggregate committed records/s and MB/s, and how many
// chains each node heads and ends (from the channel's routes).
//
// Not reported: resident and registered memory per node. The brokers do not
// report it (NodeStats has segments and bytes, not memory), so the bench
// does not either.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

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
  while (s > (1 << 20) && per_node * std::max(o.log_slots, 1) * s > budget) s /= 2;
  return s;
}

// The publisher's staging ring at each head: --ring-bytes, halved (to 64
// KiB at least) until the rings of all partitions fit in 256 MiB. With 16
// MiB rings, 256 partitions on 3 nodes had partitions whose sessions never
// came up (records failed `unavailable` after the 30 s retry timeout).
int ring_for(const BenchOptions& o, int partitions) {
  std::int64_t r = o.ring_bytes;
  while (r > (64 << 10) && r * partitions > (std::int64_t{256} << 20)) r /= 2;
  return static_cast<int>(r);
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
    const int ring = ring_for(o, partitions);
    try {
      broker::ControllerRoutes routes(cco, "bench-partitions");
      PublisherOptions po;
      po.provider = common.provider;
      po.linger = std::chrono::microseconds(o.linger_us);
      po.max_batch_bytes = o.max_batch_bytes;
      po.ring_bytes = ring;
      po.max_in_flight = static_cast<std::uint32_t>(o.window);
      // Setup, not measured as throughput: the publisher's sessions with
      // every head and tail, then records to every partition in turn until
      // as many are committed as there are partitions.
      const auto t0 = bench_detail::steady_ns();
      auto pub = Publisher::create(routes, cfg.name, po);
      if (!pub) throw Fail{"publisher: " + pub.error().message};
      (void)bench_detail::throughput(*pub.value(), bytes, 60.0, static_cast<std::uint64_t>(partitions),
                                     static_cast<std::uint32_t>(partitions));
      setup_ms = static_cast<double>(bench_detail::steady_ns() - t0) / 1e6;
      t = bench_detail::throughput(*pub.value(), bytes, o.seconds, 0, static_cast<std::uint32_t>(partitions));
    } catch (const Fail& f) {
      std::fprintf(stderr, "catena: bench --partitions: %d partitions: %s\n", partitions, f.what.c_str());
      rc = 1;
      continue;
    }
    const double msgs =
        t.elapsed_ns == 0 ? 0 : static_cast<double>(t.acked) * 1e9 / static_cast<double>(t.elapsed_ns);
    const auto pct = bench::percentiles(std::move(t.ack_ns));
    if (o.json) {
      nlohmann::json j{{"system", "catena"},
                       {"mode", "partitions"},
                       {"partitions", partitions},
                       {"nodes", nodes},
                       {"replicas", o.replicas},
                       {"bytes", bytes},
                       {"segment_bytes", cfg.segment_bytes},
                       {"ring_bytes", ring},
                       {"setup_ms", setup_ms},
                       {"msgs_per_s", msgs},
                       {"mb_per_s", msgs * bytes / 1e6},
                       {"ack_p50_ns", pct.p50},
                       {"ack_p99_ns", pct.p99},
                       {"heads_per_node", heads},
                       {"tails_per_node", tails},
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
      std::printf("  %15s setup %.0f ms (sessions, first records), publisher ring %d KiB\n", "", setup_ms,
                  ring >> 10);
    }
    std::fflush(stdout);
  }
  if (!o.json) {
    std::printf(
        "  (one publisher, round robin over the partitions, up to %d records in flight, linger %d us; "
        "memory per node is not reported: the brokers do not report it)\n",
        o.window, o.linger_us);
  }
  return rc;
}

}  // namespace catena::cli
