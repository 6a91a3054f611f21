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
//   datacenter a channel of 2 partitions mirrored (catena/broker/mirror.hpp)
//              from one local cluster of 3 brokers to another; keyed
//              records (--recovery-mib of 16 KiB ones, then a steady
//              stream of small ones) while a subscriber reads the source;
//              then every process of the source cluster is killed
//              (SIGKILL), and the subscriber and the publisher fail over to
//              the mirror's cluster (the subscriber at MirrorState::map of
//              its position).
//     recovery_ms   from the kill to the first record published on the
//                   mirror's cluster delivered to the failed-over
//                   subscriber (the mirror's own stop included);
//     bytes_copied  what the mirror copied (payload bytes);
//     rpo_records   the recovery point: what the source held beyond the
//                   mirror's last saved state at the kill (the lag it
//                   reported then, against the source's true end);
//     lost          acknowledged records the mirror's cluster lacks after
//                   the failover (read whole): asynchronous replication
//                   loses at most rpo_records, and lost_beyond_rpo
//                   (records the mirror had reported copied, yet
//                   missing) must be 0; lost_to_subscriber: records the
//                   subscriber (which read the source until the kill)
//                   never got;
//     duplicated    records the subscriber got twice across the failover.
// The partition line comes first (bench_recovery_partition.cpp: a link
// broken in place, no controller).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/history.hpp>
#include <catena/broker/mirror.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench_detail::LevelResult;
using bench_detail::steady_ns;
using bench_detail::tagged_id;
using bench_detail::tagged_record;
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
  co.secure = o.secure;
  LocalCluster cluster(co);
  if (!cluster.start(&out.error)) return out;
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  cco.token = cluster.admin_token();
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
      // The tail's counters come with its heartbeats: a rejoin quicker than
      // one of them (a crash is now repaired in milliseconds) would show no
      // copy yet.
      (void)wait_until(
          [&] {
            const auto t = progress_on(admin, tail_id);
            return t && t->forwarded_bytes > forwarded_before;
          },
          5s);
      const auto tail = progress_on(admin, tail_id);
      out.bytes_copied = tail ? tail->forwarded_bytes - forwarded_before : 0;
      // Its heartbeat may not have said what it recovered yet, either.
      (void)wait_until(
          [&] {
            const auto back = progress_on(admin, victim_id);
            return back && back->recovered_records > 0;
          },
          5s);
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

// The datacenter level (see the top of the file).
LevelResult datacenter_level(const Common& common, const BenchOptions& o) {
  LevelResult out;
  out.level = "datacenter";
  constexpr std::uint32_t kPartitions = 2;
  constexpr int kKeys = 16;
  auto cluster_opts = [&](const std::string& side) {
    ClusterOptions co;
    co.nodes = 3;
    co.provider = common.provider;
    co.dir = o.dir + "/recovery-datacenter-" + side;
    co.heartbeat_timeout_ms = std::max(o.timeout_ms, 300);
    co.heartbeat_interval_ms = co.heartbeat_timeout_ms / 5;
    co.quiet = true;
    co.secure = o.secure;
    return co;
  };
  LocalCluster source(cluster_opts("source"));
  LocalCluster mirror_dc(cluster_opts("mirror"));
  if (!source.start(&out.error) || !mirror_dc.start(&out.error)) return out;
  control::ControllerClient::Options src_co, dst_co;
  src_co.address = source.controller_address();
  src_co.token = source.admin_token();
  dst_co.address = mirror_dc.controller_address();
  dst_co.token = mirror_dc.admin_token();
  {
    control::ControllerClient admin(src_co);
    control::idl::ChannelConfig cfg;
    cfg.name = kRecoveryChannel;
    cfg.partitions = kPartitions;
    cfg.replication = 3;
    cfg.segment_bytes = o.segment_bytes;
    cfg.ttl_ms = 3600000;
    if (auto ch = admin.create_channel(cfg); !ch) {
      out.error = ch.error().describe();
      return out;
    }
  }
  const std::string state_dir = o.dir + "/recovery-datacenter-mirrors";
  std::filesystem::remove_all(state_dir);
  if (auto st = Mirror::create("recovery", kRecoveryChannel, src_co.address, dst_co.address, state_dir,
                               src_co.token, dst_co.token);
      !st) {
    out.error = st.error().describe();
    return out;
  }
  MirrorOptions mo;
  mo.provider = common.provider;
  mo.state_dir = state_dir;
  mo.source_token = src_co.token;
  mo.destination_token = dst_co.token;
  auto mirror = Mirror::open("recovery", mo);
  if (!mirror) {
    out.error = mirror.error().describe();
    return out;
  }
  client::Result<void> mirror_result;
  std::thread mirror_thread([&] { mirror_result = mirror.value()->run(); });

  std::mutex mu;
  std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> acked;  // id -> source partition, offset
  std::vector<std::uint64_t> delivered_ids;                                // in delivery order
  std::vector<std::uint64_t> position(kPartitions, 0);
  const std::uint64_t fill_bytes = static_cast<std::uint64_t>(o.recovery_mib) << 20;
  std::atomic<bool> stop_pub{false}, stop_sub{false};
  std::atomic<std::uint64_t> acked_bytes{0}, acked_count{0}, next_id{0};
  auto key_of = [](std::uint64_t id) { return "k" + std::to_string(id % kKeys); };
  std::thread sub_thread([&] {
    broker::ControllerRoutes routes(src_co, "recovery-dc-sub");
    SubscriberOptions so;
    so.provider = common.provider;
    auto sub = Subscriber::create(routes, kRecoveryChannel, so);
    if (!sub) return;
    while (!stop_sub) {
      if (sub.value()->poll([&](const Message& m) {
            std::lock_guard lock(mu);
            delivered_ids.push_back(tagged_id("dc", m.payload));
          }) == 0) {
        std::this_thread::sleep_for(50us);
      }
    }
    std::lock_guard lock(mu);
    for (std::uint32_t p = 0; p < kPartitions; ++p) position[p] = sub.value()->position(p);
  });
  std::thread pub_thread([&] {
    broker::ControllerRoutes routes(src_co, "recovery-dc-pub");
    PublisherOptions po;
    po.provider = common.provider;
    po.retry_timeout = 2s;
    auto pub = Publisher::create(routes, kRecoveryChannel, po);
    if (!pub) return;
    std::uint64_t id = 0;
    while (!stop_pub) {
      const bool filling = acked_bytes.load() < fill_bytes;
      const std::string p = tagged_record("dc", id, filling ? 16384 : 128);
      const std::string k = key_of(id);
      auto e = pub.value()->publish(std::as_bytes(std::span(k)), std::as_bytes(std::span(p)),
                                    [&, id, size = p.size()](const PublishResult& r) {
                                      if (r.status != PublishStatus::ok) return;
                                      std::lock_guard lock(mu);
                                      acked[id] = {r.partition, r.offset};
                                      acked_count.fetch_add(1);
                                      acked_bytes.fetch_add(size);
                                    });
      if (e == client::ErrorCode::ok) next_id.store(++id);
      pub.value()->poll();
      if (!filling) std::this_thread::sleep_for(200us);
    }
  });
  auto wait = [](auto cond, std::chrono::milliseconds t) {
    auto deadline = std::chrono::steady_clock::now() + t;
    while (!cond() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
    return cond();
  };
  bool ok = wait([&] { return acked_bytes.load() >= fill_bytes; }, 120s);
  if (!ok) out.error = "the source did not take --recovery-mib within 120 s";
  // The mirror catches up with the fill, then the steady stream runs a while.
  const std::uint64_t filled = acked_count.load();
  ok = ok && wait(
                 [&] {
                   const auto st = mirror.value()->state();
                   std::uint64_t mirrored = 0;
                   for (const auto& p : st.partitions) mirrored += p.next.source;
                   return mirrored >= filled;
                 },
                 120s);
  if (!ok && out.error.empty()) out.error = "the mirror did not keep up within 120 s";
  std::this_thread::sleep_for(1s);
  const MirrorState report = mirror.value()->state();  // its last saved state
  const std::uint64_t killed_ns = steady_ns();
  for (std::size_t i = 0; i < source.nodes().size(); ++i) source.signal_node(i, SIGKILL);
  source.signal_controller(0, SIGKILL);
  stop_pub = true;
  stop_sub = true;
  pub_thread.join();
  sub_thread.join();
  mirror.value()->stop();
  mirror_thread.join();
  if (!mirror_result && out.error.empty()) out.error = "mirror: " + mirror_result.error().describe();
  const MirrorState after = mirror.value()->state();

  // Failover, explicit: the subscriber at the mapped offsets, the
  // publisher to the mirror's cluster.
  broker::ControllerRoutes dst_routes(dst_co, "recovery-dc-failover");
  SubscriberOptions so;
  so.provider = common.provider;
  so.start = Start::offset;
  auto sub = Subscriber::create(dst_routes, kRecoveryChannel, so);
  PublisherOptions po;
  po.provider = common.provider;
  auto pub = Publisher::create(dst_routes, kRecoveryChannel, po);
  if (!sub || !pub) {
    out.error = !sub ? sub.error().describe() : pub.error().describe();
    return out;
  }
  for (std::uint32_t p = 0; p < kPartitions; ++p) sub.value()->seek(p, after.map(p, position[p]));
  const std::uint64_t first_new = next_id.load();
  constexpr std::uint64_t kAfter = 100;
  for (std::uint64_t id = first_new; id < first_new + kAfter; ++id) {
    const std::string p = tagged_record("dc", id, 128);
    const std::string k = key_of(id);
    auto f = pub.value()->publish(std::as_bytes(std::span(k)), std::as_bytes(std::span(p)));
    pub.value()->flush(10s);
    const auto r = f.get();
    if (r.status == PublishStatus::ok) acked[id] = {r.partition, ~std::uint64_t{0}};
  }
  std::set<std::uint64_t> seen_new;
  std::uint64_t first_new_seen_ns = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  auto quiet_since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < deadline &&
         (seen_new.size() < kAfter || std::chrono::steady_clock::now() - quiet_since < 300ms)) {
    const int n = sub.value()->poll([&](const Message& m) {
      const auto id = tagged_id("dc", m.payload);
      delivered_ids.push_back(id);
      if (id >= first_new && id < first_new + kAfter) {
        if (seen_new.empty()) first_new_seen_ns = steady_ns();
        seen_new.insert(id);
      }
    });
    if (n > 0) quiet_since = std::chrono::steady_clock::now();
    if (n == 0) std::this_thread::sleep_for(200us);
  }
  if (seen_new.size() < kAfter && out.error.empty())
    out.error = "records published after the failover were not all delivered";

  // Exactly once and per-key order (ids grow in publish order per key).
  std::map<std::uint64_t, int> times;
  std::map<std::uint64_t, std::uint64_t> last_of_key;
  for (const auto id : delivered_ids) {
    if (++times[id] > 1) ++out.history.duplicated;
    const std::uint64_t k = id % kKeys;
    if (last_of_key.count(k) && last_of_key[k] >= id) ++out.history.out_of_order;
    last_of_key[k] = id;
  }
  std::vector<std::uint64_t> source_end(kPartitions, 0);
  // The data lost: acknowledged records the mirror's cluster lacks (read
  // whole, from its earliest offsets).
  std::set<std::uint64_t> in_destination;
  {
    SubscriberOptions all;
    all.provider = common.provider;
    auto whole = Subscriber::create(dst_routes, kRecoveryChannel, all);
    std::uint64_t expected = kAfter;
    for (const auto& p : after.partitions) expected += p.next.destination;
    std::uint64_t read = 0;
    wait(
        [&] {
          if (whole) {
            whole.value()->poll([&](const Message& m) {
              in_destination.insert(tagged_id("dc", m.payload));
              ++read;
            });
          }
          return read >= expected;
        },
        30s);
    if (read != expected && out.error.empty())
      out.error = "the mirror's cluster holds " + std::to_string(read) + " records, its state says " +
                  std::to_string(expected);
  }
  for (const auto& [id, where] : acked) {
    if (where.second != ~std::uint64_t{0})
      source_end[where.first] = std::max(source_end[where.first], where.second + 1);
    if (!times.count(id)) ++out.lost_to_subscriber;
    if (in_destination.count(id)) continue;
    ++out.history.lost;
    if (where.second < report.partitions[where.first].next.source) ++out.lost_beyond_rpo;
  }
  for (std::uint32_t p = 0; p < kPartitions; ++p) {
    const auto m = report.partitions[p].next.source;
    if (source_end[p] > m) out.rpo_records += static_cast<std::int64_t>(source_end[p] - m);
  }
  out.history.acknowledged = acked.size();
  out.history.delivered = delivered_ids.size();
  for (const auto& p : after.partitions) out.bytes_copied += static_cast<std::int64_t>(p.mirrored_bytes);
  for (const auto& p : after.partitions)
    out.retained_records += static_cast<std::int64_t>(p.next.destination);
  if (first_new_seen_ns > killed_ns)
    out.recovery_ms = static_cast<double>(first_new_seen_ns - killed_ns) / 1e6;
  out.ok = ok && out.error.empty();
  return out;
}
}  // namespace

int run_recovery_bench(const Common& common, const BenchOptions& o) {
  std::vector<LevelResult> levels;
  levels.push_back(bench_detail::partition_level(common.provider, 5));
  levels.push_back(one_level(common, o, Level::process));
  levels.push_back(one_level(common, o, Level::full_copy));
  levels.push_back(one_level(common, o, Level::zone));
  levels.push_back(datacenter_level(common, o));
  const LevelResult& full = levels[2];
  bool all_ok = true;
  for (const auto& r : levels) {
    if (r.level == "datacenter") {
      // Asynchronous: what the mirror had not copied is lost, up to the
      // recovery point; nothing it had copied may be.
      all_ok = all_ok && r.ok && r.lost_beyond_rpo == 0 &&
               r.history.lost <= static_cast<std::uint64_t>(r.rpo_records) && r.history.duplicated == 0 &&
               r.history.out_of_order == 0 &&
               r.lost_to_subscriber <= static_cast<std::int64_t>(r.history.lost);
    } else {
      all_ok = all_ok && r.ok && r.history.ok();
    }
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
                       {"rpo_records", r.rpo_records},
                       {"lost_beyond_rpo", r.lost_beyond_rpo},
                       {"lost_to_subscriber", r.lost_to_subscriber},
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
    } else if (r.level == "datacenter") {
      std::printf(
          "%-10s failed over to the mirror %.0f ms after the source cluster was killed, the mirror copied "
          "%.1f MiB; recovery point %lld records, lost %llu (%lld beyond it), duplicated %llu\n",
          r.level.c_str(), r.recovery_ms, static_cast<double>(r.bytes_copied) / (1 << 20),
          static_cast<long long>(r.rpo_records), static_cast<unsigned long long>(r.history.lost),
          static_cast<long long>(r.lost_beyond_rpo), static_cast<unsigned long long>(r.history.duplicated));
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
