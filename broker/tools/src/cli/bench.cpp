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
#include "commands.hpp"
#include "floors.hpp"
#include "stats.hpp"

#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/clock.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/broker/controller_routes.hpp>
#include <catena/fabric/idle.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

namespace catena::cli {

using namespace std::chrono_literals;
using bench::now_ns;
using bench::Percentiles;

namespace {

// --- placement -------------------------------------------------------------------

// Where the client thread(s) and each chain position run. -1: unpinned.
struct Placement {
  std::string mode;
  int cpus = 1;
  int client_cpu = -1;
  std::vector<int> stage_cpu;  // by chain position, head first

  [[nodiscard]] std::string describe() const {
    auto cpu = [](int c) { return c < 0 ? std::string("any") : "cpu" + std::to_string(c); };
    std::string s = mode + ": client threads " + cpu(client_cpu);
    for (std::size_t i = 0; i < stage_cpu.size(); ++i) {
      const char* role = i == 0 ? "head" : i + 1 == stage_cpu.size() ? "tail" : "middle";
      s += ", " + std::string(role) + " " + cpu(stage_cpu[i]);
    }
    return s + "; controller unpinned";
  }
};

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(std::thread::hardware_concurrency());
  return CPU_COUNT(&set);
}

// Other work on the machine skews every figure here: say how busy it was.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

// none:   the scheduler places everything.
// spread: client on cpu0, chain position i on cpu (i+1) mod N: neighbours in
//         the chain sit on different cores, so a hand-off can land on an
//         idle core instead of waiting for a time slice.
// split:  client on cpu0, every broker on the other core(s).
std::optional<Placement> plan_placement(const std::string& mode, int replicas) {
  Placement p;
  p.mode = mode;
  p.cpus = usable_cpus();
  p.stage_cpu.assign(static_cast<std::size_t>(replicas), -1);
  if (mode == "none") return p;
  if (mode != "spread" && mode != "split") return std::nullopt;
  p.client_cpu = 0;
  for (int i = 0; i < replicas; ++i) {
    if (mode == "spread") {
      p.stage_cpu[static_cast<std::size_t>(i)] = (i + 1) % p.cpus;
    } else {
      p.stage_cpu[static_cast<std::size_t>(i)] = p.cpus > 1 ? 1 + i % (p.cpus - 1) : 0;
    }
  }
  return p;
}

bool pin_tid(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(tid, sizeof set, &set) == 0;
}

// Pins every thread of a process; threads it starts later inherit the mask.
bool pin_process(pid_t pid, int cpu) {
  if (cpu < 0) return true;
  std::error_code ec;
  bool ok = true;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    ok = pin_tid(static_cast<pid_t>(std::stol(e.path().filename().string())), cpu) && ok;
  }
  return ok && !ec;
}

// The mask this process started with: what "unpinned" means here.
const cpu_set_t& initial_mask() {
  static const cpu_set_t mask = [] {
    cpu_set_t m;
    CPU_ZERO(&m);
    sched_getaffinity(0, sizeof m, &m);
    return m;
  }();
  return mask;
}

// Pins the calling thread, or (cpu < 0) lets it run anywhere again: the
// processes this one forks inherit the mask.
void pin_self(int cpu) {
  if (cpu >= 0) {
    pin_tid(0, cpu);
  } else {
    sched_setaffinity(0, sizeof(cpu_set_t), &initial_mask());
  }
}

// --- the floor -----------------------------------------------------------------------

struct alignas(64) Mailbox {
  std::atomic<std::uint64_t> word;
};

// Process 0 is the client; 1..stages are the chain positions. `route` lists
// the processes the token visits after leaving the client and ends with 0.
// A token is (round << 8 | index in route of its receiver).
struct FloorShape {
  const char* name;
  std::vector<int> route;
};

void floor_stage(Mailbox* boxes, const std::atomic<std::uint32_t>* stop, int me, const std::vector<int>& route) {
  fabric::BackoffIdle idle;
  std::uint64_t last = 0;  // tokens are never 0; the first may arrive before this process runs
  while (stop->load(std::memory_order_relaxed) == 0) {
    const std::uint64_t w = boxes[me].word.load(std::memory_order_acquire);
    if (w == last) {
      idle.idle(0);
      continue;
    }
    last = w;
    const std::uint64_t hop = (w & 0xff) + 1;
    boxes[route[hop]].word.store((w & ~std::uint64_t{0xff}) | hop, std::memory_order_release);
    idle.idle(1);
  }
}

// Round trips in ns (warm-up excluded); empty on failure.
std::vector<std::uint64_t> measure_floor(const FloorShape& shape, int stages, const Placement& place, int iters,
                                         int warmup) {
  const std::size_t bytes = sizeof(Mailbox) * static_cast<std::size_t>(stages + 2);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return {};
  auto* boxes = new (mem) Mailbox[stages + 1]{};
  auto* stop = new (static_cast<char*>(mem) + sizeof(Mailbox) * static_cast<std::size_t>(stages + 1))
      std::atomic<std::uint32_t>{0};
  std::vector<pid_t> children;
  for (int s = 1; s <= stages; ++s) {
    pid_t pid = fork();
    if (pid == 0) {
      pin_self(place.stage_cpu[static_cast<std::size_t>(s - 1)]);  // -1: anywhere, not the client's cpu
      floor_stage(boxes, stop, s, shape.route);
      _exit(0);
    }
    if (pid > 0) children.push_back(pid);
  }
  std::vector<std::uint64_t> samples;
  if (children.size() == static_cast<std::size_t>(stages)) {
    samples.reserve(static_cast<std::size_t>(iters));
    fabric::BackoffIdle idle;
    const std::uint64_t last_hop = shape.route.size() - 1;
    for (int i = 1; i <= iters + warmup; ++i) {
      const std::uint64_t round = static_cast<std::uint64_t>(i) << 8;
      const std::uint64_t t0 = now_ns();
      boxes[shape.route[0]].word.store(round, std::memory_order_release);
      bool lost = false;
      while (boxes[0].word.load(std::memory_order_acquire) != (round | last_hop)) {
        idle.idle(0);
        if (now_ns() - t0 > 5'000'000'000ull) {
          lost = true;  // a stage died: report rather than hang
          break;
        }
      }
      if (lost) {
        samples.clear();
        break;
      }
      const std::uint64_t t1 = now_ns();
      idle.reset();
      if (i > warmup) samples.push_back(t1 - t0);
    }
  }
  stop->store(1, std::memory_order_relaxed);
  for (pid_t c : children) waitpid(c, nullptr, 0);
  munmap(mem, bytes);
  return samples;
}

// --- results -----------------------------------------------------------------------------

struct Row {
  std::string system = "catena";
  std::string mode;
  int replicas = 3;
  std::uint32_t bytes = 64;
  Percentiles pct;
  double msgs_per_s = 0;
  std::uint64_t floor_p50_ns = 0;  // latency rows
  std::string note;
};

struct Report {
  bool json = false;
  int cores = 1;
  std::string pinning;
  std::string provider;

  void emit(const Row& r) const {
    if (json) {
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
      if (r.mode != "throughput") j["floor_p50_ns"] = r.floor_p50_ns;
      if (!r.note.empty()) j["note"] = r.note;
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      return;
    }
    auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e3; };
    if (r.mode == "throughput") {
      std::printf("  %-28s %6u B  %10.0f msg/s  %8.1f MB/s   ack latency p50 %8.1f us  p99 %9.1f us\n", r.mode.c_str(),
                  r.bytes, r.msgs_per_s, r.msgs_per_s * r.bytes / 1e6, us(r.pct.p50), us(r.pct.p99));
    } else {
      std::printf("  %-28s %6u B  p50 %7.1f us  p99 %7.1f us  p99.9 %8.1f us  max %8.1f us", r.mode.c_str(), r.bytes,
                  us(r.pct.p50), us(r.pct.p99), us(r.pct.p999), us(r.pct.max));
      if (r.system != "floor" && r.floor_p50_ns > 0) {
        std::printf("  = %.2fx floor p50", static_cast<double>(r.pct.p50) / static_cast<double>(r.floor_p50_ns));
      }
      std::printf("\n");
    }
    if (!r.note.empty()) std::printf("  %18s %s\n", "", r.note.c_str());
    std::fflush(stdout);
  }
};

double rate(std::size_t n, std::uint64_t elapsed_ns) {
  return elapsed_ns == 0 ? 0 : static_cast<double>(n) * 1e9 / static_cast<double>(elapsed_ns);
}

// --- catena measurements -------------------------------------------------------------------

constexpr std::int64_t kLatencySegment = 4 << 20;  // latency runs write little

std::vector<std::byte> make_payload(std::uint32_t bytes) {
  std::vector<std::byte> p(bytes);
  for (std::uint32_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>('a' + i % 26);
  return p;
}

struct Fail {
  std::string what;
};

struct Throughput {
  std::uint64_t acked = 0;
  std::uint64_t elapsed_ns = 0;
  std::vector<std::uint64_t> ack_ns;
};

// Keeps the pipeline full for `seconds` (or until `max_records` were acked,
// if not 0), then waits for the last acks.
Throughput throughput(Publisher& pub, std::uint32_t bytes, double seconds, std::uint64_t max_records = 0) {
  const auto payload = make_payload(bytes);
  Throughput out;
  out.ack_ns.reserve(1u << 20);
  std::uint64_t failed = 0;
  fabric::BackoffIdle idle;
  const std::uint64_t start = now_ns();
  const std::uint64_t end = start + static_cast<std::uint64_t>(seconds * 1e9);
  std::uint64_t now = start;
  while (now < end && (max_records == 0 || out.acked < max_records)) {
    int work = 0;
    for (int k = 0; k < 256; ++k) {
      const auto e = pub.publish_to(0, payload, [&out, &failed, t0 = now](const PublishResult& r) {
        if (r.status != PublishStatus::ok) {
          ++failed;
          return;
        }
        ++out.acked;
        if (out.ack_ns.size() < out.ack_ns.capacity()) out.ack_ns.push_back(now_ns() - t0);
      });
      if (e == client::ErrorCode::backpressure) break;
      if (e != client::ErrorCode::ok) throw Fail{"publish: " + std::string(client::to_string(e))};
      ++work;
    }
    work += pub.poll();
    idle.idle(work);
    now = now_ns();
  }
  if (!pub.flush(30s)) throw Fail{"flush timed out"};
  out.elapsed_ns = now_ns() - start;
  if (failed > 0) throw Fail{std::to_string(failed) + " records refused"};
  return out;
}

// One lap through every segment slot of a channel's log, pipelined. Until a
// page of the log has been touched in every process that maps it (the
// publisher's image of the head's ring, each replica's slots and its image of
// its successor's, a subscriber's ring), each first touch is a page fault,
// ~20 us each on this kind of VM: a short run would measure the faults, which
// a long-running broker pays once. Returns MB/s of that lap.
double warm_log(Publisher& pub, int slots, std::int64_t segment_bytes, std::uint64_t* bytes_out) {
  const std::uint32_t wb = 64u << 10;
  const std::uint64_t lap = static_cast<std::uint64_t>(slots) * static_cast<std::uint64_t>(segment_bytes);
  Throughput w = throughput(pub, wb, 120.0, lap / wb + 1);
  *bytes_out = w.acked * wb;
  return static_cast<double>(w.acked * wb) * 1e3 / static_cast<double>(std::max<std::uint64_t>(w.elapsed_ns, 1));
}

// publish -> commit ack, one record in flight.
std::vector<std::uint64_t> commit_ack_latency(Publisher& pub, std::uint32_t bytes, int iters, int warmup,
                                              std::uint64_t* elapsed) {
  const auto payload = make_payload(bytes);
  std::vector<std::uint64_t> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  fabric::BackoffIdle idle;
  bool acked = false;
  PublishStatus status = PublishStatus::ok;
  std::uint64_t t1 = 0;
  const std::uint64_t start = now_ns();
  for (int i = 0; i < iters + warmup; ++i) {
    acked = false;
    std::uint64_t t0 = 0;
    client::ErrorCode e;
    // The tail's ack can come before the head returns ring space: a
    // back-pressured publish waits (outside the measurement) and retries.
    while ((t0 = now_ns(), e = pub.publish_to(0, payload, [&](const PublishResult& r) {
              t1 = now_ns();
              status = r.status;
              acked = true;
            })) == client::ErrorCode::backpressure) {
      idle.idle(pub.poll());
    }
    if (e != client::ErrorCode::ok) throw Fail{"publish: " + std::string(client::to_string(e))};
    idle.reset();
    while (!acked) idle.idle(pub.poll());
    if (status != PublishStatus::ok) throw Fail{"publish refused: " + std::string(chain::wire::to_string(status))};
    if (i >= warmup) samples.push_back(t1 - t0);
  }
  *elapsed = now_ns() - start;
  return samples;
}

// publish -> delivery to a subscriber of the tail on another thread, one
// record in flight (the next is published once this one was both delivered
// and acknowledged). Latency from the record's own timestamp (the publisher's
// wall clock, same host) to the subscriber's wall clock on receipt.
std::vector<std::uint64_t> delivery_latency(Publisher& pub, RouteSource& routes, const std::string& channel,
                                            const std::string& provider, int sub_cpu, std::uint32_t bytes, int iters,
                                            int warmup, std::uint64_t* elapsed) {
  SubscriberOptions so;
  so.provider = provider;
  so.start = Start::latest;
  auto sub = Subscriber::create(routes, channel, so);
  if (!sub) throw Fail{"subscriber: " + sub.error().message};
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> stop{false};
  std::vector<std::uint64_t> lat;
  lat.reserve(static_cast<std::size_t>(iters + warmup) + 16);
  // The subscriber thread owns `sub` and `lat` until joined.
  std::thread t([&] {
    pin_self(sub_cpu);
    fabric::BackoffIdle idle;
    while (!stop.load(std::memory_order_relaxed)) {
      idle.idle(sub.value()->poll([&](const Message& m) {
        lat.push_back(chain::wall_clock_ns() - m.timestamp_ns);
        delivered.fetch_add(1, std::memory_order_release);
      }));
    }
  });
  const auto payload = make_payload(bytes);
  fabric::BackoffIdle idle;
  bool acked = false;
  const std::uint64_t start = now_ns();
  std::string error;
  // The subscriber starts at the end of the partition once its connection is
  // up: keep publishing until it sees records, then count from there.
  std::uint64_t base = 0;
  const std::uint64_t connect_deadline = now_ns() + 5'000'000'000ull;
  for (int counted = -1; counted < iters + warmup;) {
    acked = false;
    client::ErrorCode e;
    while ((e = pub.publish_to(0, payload, [&](const PublishResult&) { acked = true; })) ==
           client::ErrorCode::backpressure) {
      idle.idle(pub.poll());
    }
    if (e != client::ErrorCode::ok) {
      error = "publish: " + std::string(client::to_string(e));
      break;
    }
    idle.reset();
    const std::uint64_t deadline = now_ns() + 2'000'000'000ull;
    while (!acked || (counted >= 0 && delivered.load(std::memory_order_acquire) < base + counted + 1)) {
      idle.idle(pub.poll());
      if (now_ns() > deadline) break;
    }
    if (counted < 0) {
      if (delivered.load(std::memory_order_acquire) > 0) {
        // Connected. Warm the subscriber's ring (a lap of it, for the
        // reason warm_log() gives), then let everything drain.
        (void)throughput(pub, 64u << 10, 60.0, SubscriberOptions{}.ring_bytes / (64u << 10) * 5 / 4 + 1);
        for (std::uint64_t seen = ~0ull; seen != delivered.load(std::memory_order_acquire);) {
          seen = delivered.load(std::memory_order_acquire);
          std::this_thread::sleep_for(50ms);
        }
        base = delivered.load(std::memory_order_acquire);
        counted = 0;
      } else if (now_ns() > connect_deadline) {
        error = "the subscriber received nothing in 5 s";
        break;
      }
    } else if (delivered.load(std::memory_order_acquire) < base + counted + 1) {
      error = "a record was not delivered within 2 s";
      break;
    } else {
      ++counted;
    }
  }
  *elapsed = now_ns() - start;
  stop = true;
  t.join();
  if (!error.empty()) throw Fail{error};
  const std::size_t skip = static_cast<std::size_t>(base) + static_cast<std::size_t>(warmup);
  if (lat.size() <= skip) return {};
  return {lat.begin() + static_cast<std::ptrdiff_t>(skip), lat.end()};
}

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
  app.add_option("--latency-sizes", o.latency_sizes, "payload sizes for the latency rows (comma-separated, k = KiB)")
      ->capture_default_str();
  app.add_option("--sizes", o.sizes, "payload sizes for the throughput rows")->capture_default_str();
  app.add_option("--seconds", o.seconds, "duration of each throughput run")->capture_default_str();
  app.add_option("--linger-us", o.linger_us, "publisher linger for throughput runs")->capture_default_str();
  app.add_option("--max-batch-bytes", o.max_batch_bytes, "publisher batch limit for throughput runs")
      ->capture_default_str();
  app.add_option("--window", o.window, "records awaiting their ack, at most, in throughput runs")
      ->capture_default_str();
  app.add_option("--ring-bytes", o.ring_bytes, "publisher staging ring at the head for throughput runs")
      ->capture_default_str();
  app.add_option("--segment-bytes", o.segment_bytes, "segment size of the throughput channel")->capture_default_str();
  app.add_option("--log-slots", o.log_slots,
                 "segment slots per replica (catenad --segment-slots) to warm up before measuring (0: measure cold)")
      ->capture_default_str();
  app.add_option("--pin", o.pin, "none, spread (chain neighbours on different cores) or split (client alone)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON object per line per measurement");
  app.add_flag("--no-floor", o.no_floor, "skip the floor measurement");
  app.add_flag("--no-throughput", o.no_throughput, "latency rows only");
  app.add_flag("--failover", o.failover,
               "measure failover instead: kill -9 the head under traffic, time to the first commit on the new chain");
  app.add_option("--kills", o.kills, "failover rounds (a fresh cluster each)")->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms, "failure detector heartbeat timeout for --failover")
      ->capture_default_str();
}

int run_bench(const Common& c, const BenchOptions& o) {
  if (o.failover) return run_failover_bench(c, o);
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
  std::FILE* info = o.json ? stderr : stdout;
  std::fprintf(info, "catena bench: %d cores (%s), provider %s, %d replicas, load average %.2f\n", place->cpus,
               cpu_model().c_str(), c.provider.c_str(), o.replicas, load_average());
  std::fprintf(info, "  pinning %s\n", rep.pinning.c_str());
  {
    const fabric::BackoffIdle::Config ic = fabric::BackoffIdle{}.config();
    std::fprintf(info,
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
      r.floor_p50_ns = r.pct.p50;
      if (shape == &ring) {
        floor_ring = r.pct;
        r.note = "token client -> " + std::to_string(stages) + " stages -> client, " + std::to_string(stages + 1) +
                 " processes, shm mailboxes";
      } else {
        r.mode = "floor_chain";
        r.note = "token client -> head .. tail -> .. head -> client (" + std::to_string(shape->route.size()) +
                 " hand-offs, the path of a commit ack)";
      }
      rep.emit(r);
    }
    pin_self(-1);
  }

  // The cluster.
  std::unique_ptr<LocalCluster> cluster;
  std::string controller = c.controller;
  if (own_cluster) {
    ClusterOptions copts;
    copts.nodes = std::max(o.nodes, o.replicas);
    copts.provider = c.provider;
    copts.dir = o.dir;
    copts.quiet = true;
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
  control::ControllerClient admin(co);
  const std::string tag = "bench-" + std::to_string(getpid()) + "-" + std::to_string(chain::wall_clock_ns() % 100000);
  auto create = [&](const std::string& name, std::int64_t segment_bytes) -> std::optional<control::idl::ChannelInfo> {
    control::idl::ChannelConfig cfg;
    cfg.name = name;
    cfg.partitions = 1;
    cfg.replication = o.replicas;
    cfg.segment_bytes = segment_bytes;
    cfg.ttl_ms = 1000;  // the minimum: throughput runs recycle segments
    auto ch = admin.create_channel(cfg);
    if (!ch) {
      std::fprintf(stderr, "catena: bench: create channel %s: %s\n", name.c_str(), ch.error().describe().c_str());
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
    control::ControllerRoutes routes(co, "bench");
    PublisherOptions po;
    po.provider = c.provider;
    auto pub = Publisher::create(routes, lat_ch->config.name, po);
    if (!pub) throw Fail{"publisher: " + pub.error().message};
    if (o.log_slots > 0) {
      std::uint64_t bytes = 0;
      const double mbs = warm_log(*pub.value(), o.log_slots, kLatencySegment, &bytes);
      std::fprintf(info, "  warm-up of the latency log: %llu MiB at %.0f MB/s (cold: first-touch page faults)\n",
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
        r.floor_p50_ns = floor_ring.p50;
        rep.emit(r);
      }
    };
    commit_ack_rows(*pub.value(), "commit_ack_latency");
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
      auto s = delivery_latency(*pub.value(), routes, lat_ch->config.name, c.provider, place->client_cpu, bytes,
                                o.iters, o.warmup, &dt);
      r.pct = bench::percentiles(s);
      r.msgs_per_s = rate(s.size(), dt);
      r.floor_p50_ns = floor_ring.p50;
      rep.emit(r);
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
      if (o.log_slots > 0 && !tput_sizes.empty()) {
        std::uint64_t bytes = 0;
        const double mbs = warm_log(*tpub.value(), o.log_slots, o.segment_bytes, &bytes);
        std::fprintf(info, "  warm-up of the throughput log: %llu MiB at %.0f MB/s (cold: first-touch page faults)\n",
                     static_cast<unsigned long long>(bytes >> 20), mbs);
      }
      for (std::uint32_t bytes : tput_sizes) {
        Throughput t = throughput(*tpub.value(), bytes, o.seconds);
        Row r;
        r.replicas = o.replicas;
        r.bytes = bytes;
        r.mode = "throughput";
        r.pct = bench::percentiles(std::move(t.ack_ns));
        r.msgs_per_s = rate(t.acked, t.elapsed_ns);
        rep.emit(r);
      }
    }
  } catch (const Fail& f) {
    std::fprintf(stderr, "catena: bench: %s\n", f.what.c_str());
    rc = 1;
  }
  pin_self(-1);
  if (!o.json && rc == 0 && !o.no_throughput && own_cluster && o.log_slots > 1) {
    // A slot is reused only after ttl (1 s) + the cluster's grace (1 s):
    // the other slots must hold that much traffic.
    std::printf("  (retention caps sustained throughput at %d x %lld MiB per 2 s = %.0f MB/s of frames)\n",
                o.log_slots - 1, static_cast<long long>(o.segment_bytes >> 20),
                static_cast<double>(o.log_slots - 1) * static_cast<double>(o.segment_bytes) / 2e6);
  }
  if (!o.json && rc == 0) {
    std::printf("  (latency rows: one record in flight; throughput: up to %d in flight, linger %d us, batches up to "
                "%d bytes, segments of %lld bytes with a 1 s ttl)\n",
                o.window, o.linger_us, o.max_batch_bytes, static_cast<long long>(o.segment_bytes));
  }
  return rc;
}

}  // namespace catena::cli
