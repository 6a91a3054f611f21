// `catena bench`: end-to-end figures of a replicated channel, each set
// against this machine's floor for the same path, measured in the same run.
//
//   commit_ack_latency  publish -> acknowledgement (the tail holds it), one
//                       record in flight
//   delivery_latency    publish -> a subscriber reading from the tail (another
//                       thread) receives it, one record in flight
//   throughput          records/s and MB/s with pipelining and batching
//                       (linger, max_batch_bytes), per payload size
//   floor               a token passed client -> 3 stages -> client through 4
//                       processes over shared-memory mailboxes, each polling
//                       with the idle strategy the brokers use (BackoffIdle):
//                       what any same-host 3-replica commit round trip costs
//                       here, whatever the transport
//
// Threads and processes are pinned by chain position (--pin), and the floor's
// processes are placed exactly like the client and the brokers, so the ratio
// compares like with like. On a 2-core box the brokers, the client and the
// floor's stages share cores; the output says how.
//
// Runs its own LocalCluster (in --dir) unless --controller names one; with an
// external cluster the brokers cannot be pinned from here.
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/limits.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/idle.hpp>
#include <catena/fabric/listen_address.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"
#include "floors.hpp"
#include "stats.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench::now_ns;
using bench::Percentiles;
using namespace bench_detail;

namespace {

// --- results -----------------------------------------------------------------------------

struct Row {
  std::string system = "catena";
  std::string mode;
  int replicas = 3;
  std::uint32_t bytes = 64;
  Percentiles pct;
  double msgs_per_s = 0;
  Percentiles floor;                  // latency rows: the floor ring's, same run
  double fabric_mb_per_s = 0;         // throughput rows: the fabric_bw row's at this size, same run
  double fabric_stream_mb_per_s = 0;  // and the fabric_bw_stream row's
  std::string note;
};

// A latency row's name: its .hgrm file's and its curve's in the plot.
std::string row_name(const Row& r) {
  if (r.system == "floor") return r.mode;  // floor, floor_chain: no payload
  return r.system + "-" + r.mode + "-" + std::to_string(r.bytes) + "B";
}

struct Report {
  bool json = false;
  int cores = 1;
  std::string pinning;
  std::string provider;
  BenchFiles* files = nullptr;

  // `samples`: a latency row's, written as <row>.hgrm in --out-dir.
  void emit(const Row& r, const std::vector<std::uint64_t>* samples = nullptr) const {
    std::string hgrm;
    if (files != nullptr && samples != nullptr) hgrm = files->write_hgrm(row_name(r), *samples);
    {
      nlohmann::json j{{"system", r.system},
                       {"replicas", r.replicas},
                       {"bytes", r.bytes},
                       {"mode", r.mode},
                       {"p50_ns", r.pct.p50},
                       {"p99_ns", r.pct.p99},
                       {"p999_ns", r.pct.p999},
                       {"max_ns", r.pct.max},
                       {"samples", r.pct.count},
                       {"msgs_per_s", r.msgs_per_s},
                       {"mb_per_s", r.msgs_per_s * r.bytes / 1e6},
                       {"cores", cores},
                       {"pinning", pinning},
                       {"provider", provider},
                       {"loadavg_1m", load_average()}};
      if (r.mode != "throughput" && !r.mode.starts_with("fabric_bw")) {
        j["floor_p50_ns"] = r.floor.p50;
        j["floor_p99_ns"] = r.floor.p99;
        j["floor_p999_ns"] = r.floor.p999;
      }
      if (r.fabric_mb_per_s > 0) {
        j["fabric_mb_per_s"] = r.fabric_mb_per_s;
        j["fabric_ratio"] = r.msgs_per_s * r.bytes / 1e6 / r.fabric_mb_per_s;
      }
      if (r.fabric_stream_mb_per_s > 0) {
        j["fabric_stream_mb_per_s"] = r.fabric_stream_mb_per_s;
        j["fabric_stream_ratio"] = r.msgs_per_s * r.bytes / 1e6 / r.fabric_stream_mb_per_s;
      }
      if (!r.note.empty()) j["note"] = r.note;
      if (!hgrm.empty()) j["hgrm"] = hgrm;
      if (files != nullptr) files->append_json(j.dump());
      if (json) {
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
        return;
      }
    }
    auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e3; };
    if (r.mode.starts_with("fabric_bw")) {
      std::printf("  %-28s %6u B  %10.0f msg/s  %8.1f MB/s\n", r.mode.c_str(), r.bytes, r.msgs_per_s,
                  r.msgs_per_s * r.bytes / 1e6);
    } else if (r.mode == "throughput") {
      std::printf("  %-28s %6u B  %10.0f msg/s  %8.1f MB/s   ack latency p50 %8.1f us  p99 %9.1f us",
                  r.mode.c_str(), r.bytes, r.msgs_per_s, r.msgs_per_s * r.bytes / 1e6, us(r.pct.p50),
                  us(r.pct.p99));
      if (r.fabric_mb_per_s > 0) {
        std::printf("  = 1/%.0f of fabric_bw",
                    r.fabric_mb_per_s / std::max(1e-9, r.msgs_per_s * r.bytes / 1e6));
      }
      if (r.fabric_stream_mb_per_s > 0) {
        std::printf(", 1/%.1f of fabric_bw_stream",
                    r.fabric_stream_mb_per_s / std::max(1e-9, r.msgs_per_s * r.bytes / 1e6));
      }
      std::printf("\n");
    } else {
      std::printf("  %-28s %6u B  p50 %7.1f us  p99 %7.1f us  p99.9 %8.1f us  max %8.1f us", r.mode.c_str(),
                  r.bytes, us(r.pct.p50), us(r.pct.p99), us(r.pct.p999), us(r.pct.max));
      if (r.system != "floor" && r.floor.p50 > 0) {
        std::printf(
            "  = %.2fx floor p50, %.2fx floor p99, %.2fx floor p99.9",
            static_cast<double>(r.pct.p50) / static_cast<double>(r.floor.p50),
            static_cast<double>(r.pct.p99) / static_cast<double>(std::max<std::uint64_t>(1, r.floor.p99)),
            static_cast<double>(r.pct.p999) / static_cast<double>(std::max<std::uint64_t>(1, r.floor.p999)));
      }
      std::printf("\n");
    }
    if (!r.note.empty()) std::printf("  %18s %s\n", "", r.note.c_str());
    std::fflush(stdout);
  }
};

// Where the commit-ack rows' time went: for each position of the latency
// channel's chain, the age of the traced records as they reached it (from
// the node that holds it, NodeStats.stage_latency, once its heartbeat
// counted all `traced`, at most 5 s). Cumulative from the publish: position
// 0 is appended at the head, k received k hops down; the commit-ack row
// adds the tail's ack back to the publisher. Warm-up records included.
std::vector<Row> stage_rows(control::ControllerClient& admin, const control::idl::ChannelInfo& ch,
                            std::uint64_t traced) {
  std::vector<Row> rows;
  if (ch.routes.empty()) return rows;
  const auto& reps = ch.routes[0].replicas;
  std::vector<std::optional<control::idl::StageLatency>> at(reps.size());
  bench_detail::wait_until(
      [&] {
        auto st = admin.cluster_status();
        if (!st) return false;
        for (std::size_t k = 0; k < reps.size(); ++k) {
          for (const auto& n : st->nodes) {
            if (n.info.node_id != reps[k].node_id || !n.stats.__isset.stage_latency) continue;
            for (const auto& sl : n.stats.stage_latency) {
              if (sl.position == static_cast<std::int32_t>(k)) at[k] = sl;
            }
          }
        }
        return std::all_of(at.begin(), at.end(),
                           [&](const auto& a) { return a && a->count >= static_cast<std::int64_t>(traced); });
      },
      std::chrono::seconds(5));
  for (std::size_t k = 0; k < at.size(); ++k) {
    if (!at[k]) continue;
    Row r;
    r.replicas = static_cast<int>(reps.size());
    r.mode = "commit_ack_at_position_" + std::to_string(k);
    r.pct.p50 = static_cast<std::uint64_t>(at[k]->p50_ns);
    r.pct.p99 = static_cast<std::uint64_t>(at[k]->p99_ns);
    r.pct.p999 = static_cast<std::uint64_t>(at[k]->p999_ns);
    r.pct.max = static_cast<std::uint64_t>(at[k]->max_ns);
    r.pct.count = static_cast<std::size_t>(at[k]->count);
    r.note = std::string(k == 0 ? "publish -> appended at the head"
                                : "publish -> received at position " + std::to_string(k)) +
             " (" + reps[k].node_id + "; traced records, every latency size, warm-up included; within 6%)";
    rows.push_back(std::move(r));
  }
  return rows;
}

// The fabric's own bandwidth for one-sided writes of `bytes` between two
// processes, in MB/s: catena-perf (installed beside this binary) writing for
// `seconds` on `provider`, all at offset 0 (span 0) or walking `span` bytes
// at both ends (--bw-span). 0, with *why set, if it is missing or failed.
double fabric_bw_mb_per_s(const std::string& provider, std::uint32_t bytes, double seconds,
                          std::uint64_t span, std::string* why) {
  const std::string perf = self_dir() + "/catena-perf";
  if (access(perf.c_str(), X_OK) != 0) {
    *why = perf + " not found";
    return 0;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    *why = "pipe failed";
    return 0;
  }
  const std::vector<std::string> args{perf,
                                      "--provider",
                                      provider,
                                      "--lat-sizes",
                                      "8",
                                      "--iters",
                                      "100",
                                      "--bw-sizes",
                                      std::to_string(bytes),
                                      "--bw-seconds",
                                      std::to_string(seconds),
                                      "--bw-span",
                                      std::to_string(span),
                                      "--json"};
  std::vector<char*> argv;  // built before the fork: the child only calls what is async-signal-safe
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("op", "") == "write_bw") return j.value("gbps", 0.0) * 1e3 / 8.0;
  }
  *why = "catena-perf " + std::string(pid < 0 ? "did not start" : "gave no write_bw line") +
         " (exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
  return 0;
}

// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    std::uint64_t kib = 0;
    in >> kib;
    if (key == "MemAvailable:") return kib << 10;
    in.ignore(256, '\n');
  }
  return 0;
}

// The bench cluster's retention: a slot is reused only ttl + grace after
// it was sealed, so the other slots hold what is written meanwhile: slots -
// 1 of them per (ttl + grace) is the most a replica can take sustained.
// Short, so that the slots catenad takes (at most 32) and a third of free
// memory are not what the throughput rows measure.
constexpr int kBenchTtlMs = 250;
constexpr int kBenchGraceMs = 250;
// How long an expired segment keeps its memory past the grace: catenad's
// own default grace (5 s) makes it 5 s; with the bench's short grace it
// would be 1 s, and the throughput rows' rate, which swings between the
// warm-up's rounds, gave memory back and took it fresh (page faults and
// zeroing) on every swing.
constexpr int kBenchLingerMs = 5000;
constexpr double kRetentionSpanS = (kBenchTtlMs + kBenchGraceMs) / 1000.0;
// The throughput log's warm-up (rounds of 2 x kRetentionSpanS): at most this
// many rounds, done once this many in a row took no new segment memory.
constexpr int kThroughputWarmRounds = 90;
constexpr int kThroughputFlatRounds = 3;
constexpr double kRetentionTargetBytesPerS = 4e9;
// What the latency channels' segments may take at a broker.
constexpr std::int64_t kLatencyReserve = std::int64_t{64} << 20;

// `huge_arena`: each broker's whole arena on huge pages (soft:huge=<MiB>),
// or 0.
int retention_slots(const BenchOptions& o, bool own_cluster, std::uint64_t huge_arena) {
  if (o.log_slots > 0) return o.log_slots;
  if (!own_cluster || o.no_throughput) return 8;
  double want = kRetentionTargetBytesPerS * kRetentionSpanS;
  if (huge_arena > 0) {
    // The arena is reserved already (and not in MemAvailable). A broker's
    // segments may take 3/4 of it (broker::default_segment_memory_bytes):
    // every slot of the throughput replica must fit there beside the
    // latency channels' segments.
    const double budget = static_cast<double>(huge_arena) * 0.75 - static_cast<double>(kLatencyReserve);
    const int fit = static_cast<int>(budget / static_cast<double>(o.segment_bytes));
    const int slots = 1 + static_cast<int>(want / static_cast<double>(o.segment_bytes));
    return std::clamp(std::min(slots, fit), 8, static_cast<int>(chain::limits::kMaxSegmentSlots));
  }
  if (const std::uint64_t avail = mem_available(); avail > 0) {
    // Every replica of the throughput channel holds its slots (the soft
    // provider's memory is shared memory): a third of what is free, at most.
    want = std::min(want, static_cast<double>(avail) / 3.0 / std::max(1, o.replicas));
  }
  const int slots = 1 + static_cast<int>(want / static_cast<double>(o.segment_bytes));
  return std::clamp(slots, 8, static_cast<int>(chain::limits::kMaxSegmentSlots));
}

double rate(std::size_t n, std::uint64_t elapsed_ns) {
  return elapsed_ns == 0 ? 0 : static_cast<double>(n) * 1e9 / static_cast<double>(elapsed_ns);
}
constexpr std::int64_t kLatencySegment = 4 << 20;  // latency runs write little

std::vector<std::uint32_t> parse_sizes(const std::string& s) {
  std::vector<std::uint32_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    std::uint32_t v = static_cast<std::uint32_t>(std::stoul(item));
    if (!item.empty() && (item.back() == 'k' || item.back() == 'K')) v *= 1024;
    out.push_back(v);
  }
  return out;
}
}  // namespace

void add_bench_options(CLI::App& app, BenchOptions& o) {
  app.add_option("--dir", o.dir, "state and logs of the cluster it starts")->capture_default_str();
  app.add_option("--nodes", o.nodes, "brokers to start")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--replicas", o.replicas, "chain length R")->capture_default_str()->check(CLI::Range(1, 7));
  app.add_option("--iters", o.iters, "round trips per latency measurement")->capture_default_str();
  app.add_option("--warmup", o.warmup, "round trips discarded before each latency measurement")
      ->capture_default_str();
  app.add_option("--latency-sizes", o.latency_sizes,
                 "payload sizes for the latency rows (comma-separated, k = KiB)")
      ->capture_default_str();
  app.add_option("--sizes", o.sizes, "payload sizes for the throughput rows")->capture_default_str();
  app.add_option("--seconds", o.seconds, "duration of each throughput run")->capture_default_str();
  app.add_option("--linger-us", o.linger_us, "publisher linger for throughput runs")->capture_default_str();
  app.add_option("--max-batch-bytes", o.max_batch_bytes, "publisher batch limit for throughput runs")
      ->capture_default_str();
  app.add_option("--window", o.window,
                 "records awaiting their ack, at most, per partition, in throughput runs")
      ->capture_default_str();
  app.add_option("--ring-bytes", o.ring_bytes, "publisher staging ring at the head for throughput runs")
      ->capture_default_str();
  app.add_option("--segment-bytes", o.segment_bytes, "segment size of the throughput channel")
      ->capture_default_str();
  app.add_option(
         "--log-slots", o.log_slots,
         "segment slots per replica: the cluster the bench starts runs with them (catenad "
         "--segment-slots), and all are warmed up before measuring; 0: as many as keep retention (ttl "
         "0.25 s + grace 0.25 s) from capping the throughput rows at 4 GB/s, within a third of free memory "
         "(within 3/4 of each broker's arena with --provider soft:huge=<MiB>; 8 with --controller)")
      ->capture_default_str()
      ->check(CLI::Range(0, static_cast<int>(chain::limits::kMaxSegmentSlots)));
  app.add_flag("--cold", o.cold,
               "measure without warming the logs up first (first-touch page faults included)");
  app.add_option("--pin", o.pin, "none, spread (chain neighbours on different cores) or split (client alone)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON object per line per measurement");
  app.add_option(
         "--out-dir", o.out_dir,
         "directory (created if missing) for each latency row's HdrHistogram percentile distribution "
         "(<row>.hgrm, microseconds), their plot (latency.svg) and the rows as JSON lines (bench.jsonl); "
         "relative to the current directory")
      ->capture_default_str();
  app.add_flag("--replot", o.replot,
               "only redraw <out-dir>/latency.svg from every .hgrm there (other systems' too: "
               "bench/peers/compare.sh adds NATS's), first turning each <name>.samples file (ns, one a line) "
               "without a .hgrm into one");
  app.add_flag("--secure", o.secure,
               "the clusters it starts require an admin token, as `cluster up --secure`, in every mode "
               "(the measured publish and subscribe paths authenticate once per connection)");
  app.add_flag("--no-floor", o.no_floor, "skip the floor measurement");
  app.add_flag(
      "--no-fabric-bw", o.no_fabric_bw,
      "skip the fabric_bw and fabric_bw_stream rows (catena-perf's one-sided write bandwidth at each "
      "throughput size of 4 KiB to 1 MiB, at one offset and through 64 MiB, which each throughput row is "
      "compared with)");
  app.add_flag("--no-throughput", o.no_throughput, "latency rows only");
  app.add_flag(
      "--failover", o.failover,
      "measure failover instead: kill -9 the head under traffic, time to the first commit on the new chain");
  app.add_flag(
      "--controller-failover", o.controller_failover,
      "measure controller failover instead: 3 controllers under publish traffic, stop the leader "
      "--kills times (SIGKILL and SIGTERM alternately); time until a new leader answers, the longest "
      "acknowledgement gap, records lost (needs the zookeeper package)");
  app.add_option("--kills", o.kills,
                 "failover rounds (a fresh cluster each); leader stops for --controller-failover")
      ->capture_default_str();
  app.add_option("--zk-session-timeout-ms", o.zk_session_timeout_ms,
                 "the controllers' ZooKeeper session for --controller-failover (a SIGKILLed leader is "
                 "replaced once it expires; catena-controller's default is 10000)")
      ->capture_default_str()
      ->check(CLI::Range(1000, 120000));
  app.add_option("--timeout-ms", o.timeout_ms, "failure detector heartbeat timeout for --failover")
      ->capture_default_str();
  app.add_option(
         "--probe-timeout-ms", o.probe_timeout_ms,
         "--failover: how long the controller's probe of a silent node waits (0: a quarter of --timeout-ms)")
      ->capture_default_str()
      ->check(CLI::Range(0, 60000));
  app.add_option("--failover-kinds", o.failover_kinds,
                 "--failover: which heads to fail, comma-separated: crash (SIGKILL: its neighbours see the "
                 "connection close) and silent (SIGSTOP: only the detector's timeout notices)")
      ->capture_default_str()
      ->check([](const std::string& v) {
        for (const auto& k : {std::string("crash,silent"), std::string("silent,crash"), std::string("crash"),
                              std::string("silent")}) {
          if (v == k) return std::string();
        }
        return std::string("expected crash, silent or crash,silent");
      });
  app.add_option("--hog", o.hog,
                 "--failover: this many threads spin beside the cluster for the whole run (a CPU hog on "
                 "the same cores); healthy nodes evicted meanwhile are counted as false_evictions")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_flag("--move", o.move,
               "measure partition moves instead: move a partition N times under traffic (tail-offset "
               "handoff), the pause in acknowledgements and the bytes each move sends");
  app.add_option("--moves", o.moves, "moves for --move")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--retained-mib", o.retained_mib,
                 "MiB the partition holds before the first move, for --move (uses --segment-bytes)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  app.add_flag(
      "--recovery", o.recovery,
      "measure broker recovery instead: kill -9 a chain member and start it again, with the memory it "
      "kept and (the baseline, same run) without; time back to full replication and bytes copied");
  app.add_option("--recovery-mib", o.recovery_mib, "MiB the partition holds before the kill, for --recovery")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_flag("--rescale", o.rescale,
               "measure channel alters instead: change the partition count to each of --alters under keyed "
               "traffic; the pauses in acknowledgements and deliveries, and per-key order");
  app.add_option("--partitions", o.partition_counts,
                 "partition counts (comma-separated, 1..1024): measure each on a fresh cluster (aggregate "
                 "throughput from one publisher over all partitions, heads and tails per node); with "
                 "--rescale: one count, the partitions before the first alter (default 2)");
  app.add_flag(
      "--head-acks-only", o.head_acks_only,
      "for --partitions: the publisher takes its acks from the heads only (PublisherOptions::tail_acks "
      "off, no commit watch with the tails): less work per record, each ack later by the commit's "
      "way back up the chain");
  app.add_option("--rounds", o.rounds,
                 "for --partitions: records published to each partition between two polls of the publisher, "
                 "at most (a poll flushes each partition's batch and visits every partition's session)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--alters", o.alters, "partition counts to alter to in turn, for --rescale")
      ->capture_default_str();
  app.add_option("--fault", o.fault,
                 "for --rescale: none, kill-broker (SIGKILL partition 0's head 20 ms into each alter) or "
                 "restart-controller (20 ms into each alter)")
      ->capture_default_str();
  app.add_option("--keys", o.keys, "distinct keys published, for --rescale")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--members", o.members,
                 "for --rescale: members of a subscriber group reading the channel (one joins or leaves "
                 "after each alter: a rebalance); 0: no group")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
}

int run_bench(const Common& c, const BenchOptions& o) {
  if (o.replot) return replot(o.out_dir);
  if (o.failover) return run_failover_bench(c, o);
  if (o.controller_failover) return run_controller_failover_bench(c, o);
  if (o.move) return run_move_bench(c, o);
  if (o.rescale) {
    BenchOptions r = o;
    if (!o.partition_counts.empty()) {
      std::size_t used = 0;
      try {
        r.partitions = std::stoi(o.partition_counts, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != o.partition_counts.size() || r.partitions < 1 || r.partitions > 1024) {
        std::fprintf(stderr, "catena: bench --rescale: --partitions takes one count from 1 to 1024\n");
        return 2;
      }
    }
    return run_rescale_bench(c, r);
  }
  if (o.recovery) return run_recovery_bench(c, o);
  if (!o.partition_counts.empty()) return run_partitions_bench(c, o);
  (void)initial_mask();  // before anything is pinned
  auto place = plan_placement(o.pin, o.replicas);
  if (!place) {
    std::fprintf(stderr, "catena: bench: --pin must be none, spread or split\n");
    return 2;
  }
  const bool own_cluster = c.controller.empty();
  if (!own_cluster && o.pin != "none") {
    place->mode += " (client only: the brokers of an external cluster are not pinned)";
    std::fill(place->stage_cpu.begin(), place->stage_cpu.end(), -1);
  }
  Report rep;
  rep.json = o.json;
  rep.cores = place->cpus;
  rep.pinning = place->describe();
  rep.provider = c.provider;
  BenchFiles files;
  if (const std::string err = files.open(o.out_dir); !err.empty()) {
    std::fprintf(stderr, "catena: bench: %s\n", err.c_str());
    return 2;
  }
  rep.files = &files;
  std::FILE* info = o.json ? stderr : stdout;
  std::fprintf(info, "catena bench: %d cores (%s), provider %s, %d replicas, load average %.2f\n",
               place->cpus, cpu_model().c_str(), c.provider.c_str(), o.replicas, load_average());
  std::fprintf(info, "  pinning %s\n", rep.pinning.c_str());
  {
    const fabric::BackoffIdle::Config ic = fabric::BackoffIdle{}.config();
    std::fprintf(
        info,
        "  every polling loop (brokers, client, floor stages) backs off: spin %.0f us, yield until %.0f us, "
        "then park %.0f us..%.0f ms\n",
        ic.spin_ns / 1e3, static_cast<double>(ic.yield_ns) / 1e3, ic.min_park_ns / 1e3, ic.max_park_ns / 1e6);
  }

  std::vector<std::uint32_t> lat_sizes, tput_sizes;
  try {
    lat_sizes = parse_sizes(o.latency_sizes);
    tput_sizes = parse_sizes(o.sizes);
  } catch (const std::exception&) {
    std::fprintf(stderr, "catena: bench: sizes must be comma-separated byte counts\n");
    return 2;
  }

  // The floor first, before any broker runs: the machine at its quietest.
  Percentiles floor_ring;
  if (!o.no_floor) {
    const int stages = o.replicas;
    FloorShape ring{"ring", {}};
    for (int s = 1; s <= stages; ++s) ring.route.push_back(s);
    ring.route.push_back(0);
    FloorShape chain{"chain", {}};
    for (int s = 1; s <= stages; ++s) chain.route.push_back(s);
    for (int s = stages - 1; s >= 1; --s) chain.route.push_back(s);
    chain.route.push_back(0);
    pin_self(place->client_cpu);
    for (const FloorShape* shape : {&ring, &chain}) {
      const std::uint64_t t0 = now_ns();
      auto samples = measure_floor(*shape, stages, *place, o.iters, o.warmup);
      const std::uint64_t dt = now_ns() - t0;
      if (samples.empty()) {
        std::fprintf(stderr, "catena: bench: floor: a stage did not start or did not answer\n");
        return 1;
      }
      Row r;
      r.system = "floor";
      r.mode = "floor";
      r.replicas = o.replicas;
      r.pct = bench::percentiles(samples);
      r.msgs_per_s = rate(samples.size(), dt);
      r.floor = r.pct;
      if (shape == &ring) {
        floor_ring = r.pct;
        r.note = "token client -> " + std::to_string(stages) + " stages -> client, " +
                 std::to_string(stages + 1) + " processes, shm mailboxes";
      } else {
        r.mode = "floor_chain";
        r.note = "token client -> head .. tail -> .. head -> client (" + std::to_string(shape->route.size()) +
                 " hand-offs, the path of a commit ack)";
      }
      rep.emit(r, &samples);
    }
    pin_self(-1);
  }

  // The fabric's bandwidth at each throughput size, before any broker runs:
  // what the data path's MB/s compares with (one-sided writes, 2 processes).
  // fabric_bw writes from and to one place, as perftest's ib_write_bw (on a
  // soft provider a copy within the cache); fabric_bw_stream walks a
  // segment's 64 MiB at both ends, as the data path does, so its copies go
  // to and from memory not in cache.
  std::map<std::uint32_t, double> fabric_mb, fabric_stream_mb;
  if (!o.no_throughput && !o.no_fabric_bw) {
    constexpr std::uint64_t kStreamSpan = 64ull << 20;
    for (std::uint32_t bytes : tput_sizes) {
      if (bytes < 4096 || bytes > (1u << 20)) continue;
      for (const std::uint64_t span : {std::uint64_t{0}, kStreamSpan}) {
        const char* mode = span == 0 ? "fabric_bw" : "fabric_bw_stream";
        std::string why;
        const double mb = fabric_bw_mb_per_s(c.provider, bytes, 0.5, span, &why);
        if (mb <= 0) {
          std::fprintf(info, "  %s %u B: not measured: %s\n", mode, bytes, why.c_str());
          continue;
        }
        (span == 0 ? fabric_mb : fabric_stream_mb)[bytes] = mb;
        Row r;
        r.system = "fabric";
        r.mode = mode;
        r.replicas = 1;
        r.bytes = bytes;
        r.msgs_per_s = mb * 1e6 / bytes;
        r.note = "catena-perf: one-sided writes between 2 processes, " + c.provider +
                 ", cpu0 -> cpu1, 64 in flight" +
                 (span == 0 ? ", all at offset 0" : ", walking 64 MiB at both ends");
        rep.emit(r);
      }
    }
  }

  // The cluster, with retention sized for the throughput rows.
  const std::uint64_t huge_arena = fabric::soft_huge_arena_bytes(c.provider);
  const int slots = retention_slots(o, own_cluster, huge_arena);
  const double retention_cap_mb = (slots - 1) * static_cast<double>(o.segment_bytes) / kRetentionSpanS / 1e6;
  if (own_cluster) {
    std::fprintf(info,
                 "  retention: %d slots x %lld MiB per replica, ttl %.2f s + grace %.2f s: at most %.0f MB/s "
                 "sustained (--log-slots%s); expired segments keep their memory %.0f s for reuse\n",
                 slots, static_cast<long long>(o.segment_bytes >> 20), kBenchTtlMs / 1000.0,
                 kBenchGraceMs / 1000.0, retention_cap_mb,
                 o.log_slots > 0   ? ""
                 : huge_arena > 0  ? "; 0: within 3/4 of each broker's huge-page arena"
                 : o.no_throughput ? ""
                                   : "; 0: within a third of free memory",
                 kBenchLingerMs / 1000.0);
  }
  std::unique_ptr<LocalCluster> cluster;
  std::string controller = c.controller;
  if (own_cluster) {
    ClusterOptions copts;
    copts.nodes = std::max(o.nodes, o.replicas);
    copts.provider = c.provider;
    copts.dir = o.dir;
    copts.quiet = true;
    copts.secure = o.secure;
    copts.grace_ms = kBenchGraceMs;
    copts.node_args = {"--segment-slots", std::to_string(slots), "--segment-linger-ms",
                       std::to_string(kBenchLingerMs)};
    cluster = std::make_unique<LocalCluster>(copts);
    std::string err;
    if (!cluster->start(&err)) {
      std::fprintf(stderr, "catena: bench: %s\n", err.c_str());
      return 1;
    }
    controller = cluster->controller_address();
  }
  control::ControllerClient::Options co;
  co.address = controller;
  co.token = cluster ? cluster->admin_token() : c.token_value();
  control::ControllerClient admin(co);
  const std::string tag =
      "bench-" + std::to_string(getpid()) + "-" + std::to_string(catena::wall_clock_ns() % 100000);
  auto create = [&](const std::string& name,
                    std::int64_t segment_bytes) -> std::optional<control::idl::ChannelInfo> {
    control::idl::ChannelConfig cfg;
    cfg.name = name;
    cfg.partitions = 1;
    cfg.replication = o.replicas;
    cfg.segment_bytes = segment_bytes;
    cfg.ttl_ms = kBenchTtlMs;  // throughput runs recycle segments
    auto ch = admin.create_channel(cfg);
    if (!ch) {
      std::fprintf(stderr, "catena: bench: create channel %s: %s\n", name.c_str(),
                   ch.error().describe().c_str());
      return std::nullopt;
    }
    return ch.value();
  };
  // Pins the brokers of a channel's chain by position.
  auto pin_chain = [&](const control::idl::ChannelInfo& ch) {
    if (!cluster || ch.routes.empty()) return;
    const auto& reps = ch.routes[0].replicas;
    for (std::size_t i = 0; i < reps.size() && i < place->stage_cpu.size(); ++i) {
      for (const auto& n : cluster->nodes()) {
        if (n.node_id == reps[i].node_id && !pin_process(n.pid, place->stage_cpu[i])) {
          std::fprintf(stderr, "catena: bench: cannot pin %s (pid %d)\n", n.node_id.c_str(), n.pid);
        }
      }
    }
  };

  int rc = 0;
  try {
    pin_self(place->client_cpu);
    // Latency: one channel; each replica's log is small.
    auto lat_ch = create(tag + "-lat", kLatencySegment);
    if (!lat_ch) return 1;
    pin_chain(*lat_ch);
    broker::ControllerRoutes routes(co, "bench");
    PublisherOptions po;
    po.provider = c.provider;
    auto pub = Publisher::create(routes, lat_ch->config.name, po);
    if (!pub) throw Fail{"publisher: " + pub.error().message};
    if (!o.cold) {
      std::uint64_t bytes = 0;
      const double mbs = warm_log(*pub.value(), std::min(slots, 8), kLatencySegment, &bytes);
      std::fprintf(info,
                   "  warm-up of the latency log: %llu MiB at %.0f MB/s (cold: first-touch page faults)\n",
                   static_cast<unsigned long long>(bytes >> 20), mbs);
    }
    auto commit_ack_rows = [&](Publisher& p, const char* mode) {
      for (std::uint32_t bytes : lat_sizes) {
        Row r;
        r.replicas = o.replicas;
        r.bytes = bytes;
        r.mode = mode;
        std::uint64_t dt = 0;
        auto s = commit_ack_latency(p, bytes, o.iters, o.warmup, &dt);
        r.pct = bench::percentiles(s);
        r.msgs_per_s = rate(s.size(), dt);
        r.floor = floor_ring;
        rep.emit(r, &s);
      }
    };
    {
      // Traced (PublisherOptions::trace_stages): every replica adds each
      // record's age to its position's histogram, reported below.
      PublisherOptions tpo = po;
      tpo.trace_stages = true;
      auto tpub = Publisher::create(routes, lat_ch->config.name, tpo);
      if (!tpub) throw Fail{"publisher: " + tpub.error().message};
      commit_ack_rows(*tpub.value(), "commit_ack_latency");
      const auto traced = static_cast<std::uint64_t>(o.iters + o.warmup) * lat_sizes.size();
      for (const Row& r : stage_rows(admin, *lat_ch, traced)) rep.emit(r);
    }
    if (o.replicas >= 2) {
      // The same path with only the head acknowledging (the commit travels
      // back up the chain first): what the tail's direct acks save.
      PublisherOptions hpo = po;
      hpo.tail_acks = false;
      auto hpub = Publisher::create(routes, lat_ch->config.name, hpo);
      if (!hpub) throw Fail{"publisher: " + hpub.error().message};
      commit_ack_rows(*hpub.value(), "commit_ack_latency_head_only");
    }
    for (std::uint32_t bytes : lat_sizes) {
      Row r;
      r.replicas = o.replicas;
      r.bytes = bytes;
      r.mode = "delivery_latency";
      std::uint64_t dt = 0;
      auto s = delivery_latency(*pub.value(), routes, lat_ch->config.name, c.provider, place->client_cpu,
                                bytes, o.iters, o.warmup, &dt);
      r.pct = bench::percentiles(s);
      r.msgs_per_s = rate(s.size(), dt);
      r.floor = floor_ring;
      rep.emit(r, &s);
    }
    pub.value().reset();

    if (!o.no_throughput) {
      auto tput_ch = create(tag + "-tput", o.segment_bytes);
      if (!tput_ch) return 1;
      pin_chain(*tput_ch);
      PublisherOptions tpo;
      tpo.provider = c.provider;
      tpo.linger = std::chrono::microseconds(o.linger_us);
      tpo.max_batch_bytes = o.max_batch_bytes;
      tpo.ring_bytes = o.ring_bytes;
      tpo.max_in_flight = static_cast<std::uint32_t>(o.window);
      auto tpub = Publisher::create(routes, tput_ch->config.name, tpo);
      if (!tpub) throw Fail{"publisher: " + tpub.error().message};
      if (!o.cold && !tput_sizes.empty()) {
        // Rounds of twice ttl + grace: each cycles the slots in use twice,
        // until the rate stopped rising and three rounds in a row took no
        // new memory. A partition takes a slot it never used whenever its
        // warm ones are all within ttl + grace; the page faults of that
        // slot (three replicas' 64 MiB) stall the chain for 0.2-0.4 s on
        // 2 cores, and the burst that follows takes the next one. So from
        // cold the slots in use grow by about one every 2 s for a minute:
        // a warm-up that stopped at the first round without new memory
        // measured that ratchet (ack p99 0.2-0.3 s, a new stall every ~20
        // segments), not the data path.
        const WarmUp w = warm_until_steady(
            *tpub.value(), 2 * kRetentionSpanS, kThroughputWarmRounds,
            [&] { return segment_memory_taken(admin); }, 64u << 10, 1, 8, kThroughputFlatRounds);
        const std::string how = !w.steady               ? "not settled: " + w.unsettled + " at the last round"
                                : w.segment_memory >= 0 ? "the rate stopped rising and the last " +
                                                              std::to_string(kThroughputFlatRounds) +
                                                              " rounds took no new segment memory"
                                                        : std::string("the rate stopped rising");
        std::fprintf(info,
                     "  warm-up of the throughput log: %llu MiB in %.1f s, %d rounds, the last at %.0f MB/s "
                     "(first-touch page faults of the slots in use; %s)\n",
                     static_cast<unsigned long long>(w.bytes >> 20), w.seconds, w.rounds, w.last_mb_per_s,
                     how.c_str());
      }
      for (std::uint32_t bytes : tput_sizes) {
        Throughput t = throughput(*tpub.value(), bytes, o.seconds);
        Row r;
        r.replicas = o.replicas;
        r.bytes = bytes;
        r.mode = "throughput";
        r.pct = bench::percentiles(std::move(t.ack_ns));
        r.msgs_per_s = rate(t.acked, t.elapsed_ns);
        if (auto f = fabric_mb.find(bytes); f != fabric_mb.end()) r.fabric_mb_per_s = f->second;
        if (auto f = fabric_stream_mb.find(bytes); f != fabric_stream_mb.end())
          r.fabric_stream_mb_per_s = f->second;
        if (own_cluster) {
          r.note = "retention (" + std::to_string(slots) + " slots) caps this at " +
                   std::to_string(static_cast<long long>(retention_cap_mb)) + " MB/s of frames";
        }
        rep.emit(r);
      }
    }
  } catch (const Fail& f) {
    std::fprintf(stderr, "catena: bench: %s\n", f.what.c_str());
    rc = 1;
  }
  pin_self(-1);
  if (const std::string svg = files.plot("catena bench: latency by percentile, " +
                                         std::to_string(o.replicas) + " replicas, provider " + c.provider);
      !svg.empty()) {
    std::fprintf(info, "  latency distributions: %s/<row>.hgrm, plotted in %s\n", o.out_dir.c_str(),
                 svg.c_str());
  }
  if (!o.json && rc == 0) {
    std::printf(
        "  (latency rows: one record in flight; throughput: up to %d in flight, linger %d us, batches up to "
        "%d bytes, segments of %lld bytes with a %d ms ttl)\n",
        o.window, o.linger_us, o.max_batch_bytes, static_cast<long long>(o.segment_bytes), kBenchTtlMs);
  }
  return rc;
}

}  // namespace catena::cli
