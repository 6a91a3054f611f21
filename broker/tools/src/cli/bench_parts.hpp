// The parts of `catena bench` (bench.cpp runs them): placement and the
// floor (bench_placement.cpp), the catena measurements (bench_measure.cpp),
// what a partition move sends (bench_move_bytes.cpp, for bench_move.cpp), a
// subscriber group under alters (bench_rescale_group.cpp, for
// bench_rescale.cpp), traffic through a fault (bench_traffic.cpp, for the
// failover and recovery benches), the files left next to the JSON
// (bench_report.cpp).
// Private to the CLI.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <vector>

#include <catena/broker/history.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control::idl {
class PartitionRoute;
}

namespace catena::cli::bench_detail {

// The steady clock in nanoseconds, for timing acknowledgements and deliveries.
inline std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// --- placement and the floor (bench_placement.cpp) ---------------------------

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

int usable_cpus();
// Other work on the machine skews every figure here: say how busy it was.
double load_average();
std::string cpu_model();
// none:   the scheduler places everything.
// spread: client on cpu0, chain position i on cpu (i+1) mod N.
// split:  client on cpu0, every broker on the other core(s).
std::optional<Placement> plan_placement(const std::string& mode, int replicas);
// Pins every thread of a process; threads it starts later inherit the mask.
bool pin_process(pid_t pid, int cpu);
// The mask this process started with: what "unpinned" means here.
const cpu_set_t& initial_mask();
// Pins the calling thread, or (cpu < 0) lets it run anywhere again.
void pin_self(int cpu);

// Process 0 is the client; 1..stages are the chain positions. `route` lists
// the processes the token visits after leaving the client and ends with 0.
// A token is (round << 8 | index in route of its receiver).
struct FloorShape {
  const char* name;
  std::vector<int> route;
};

// Round trips in ns (warm-up excluded); empty on failure.
std::vector<std::uint64_t> measure_floor(const FloorShape& shape, int stages, const Placement& place,
                                         int iters, int warmup);

// --- catena measurements (bench_measure.cpp) ---------------------------------

struct Fail {
  std::string what;
};

// "4,8,16" -> {4, 8, 16}: partition counts (1..1024), comma-separated.
// Throws Fail naming `flag` and the item that is not one.
inline std::vector<int> parse_partition_counts(const std::string& list, const std::string& flag) {
  std::vector<int> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1 || v > 1024) {
      throw Fail{flag + ": '" + item + "' is not a partition count (1..1024)"};
    }
    out.push_back(v);
  }
  return out;
}

struct Throughput {
  std::uint64_t acked = 0;
  std::uint64_t elapsed_ns = 0;
  std::vector<std::uint64_t> ack_ns;
};

std::vector<std::byte> make_payload(std::uint32_t bytes);
// A payload a bench can tell its own records by: "<tag>:<id>:" padded with
// 'x' to `bytes`. tagged_id() reads the id back (~0: not such a payload).
std::string tagged_record(std::string_view tag, std::uint64_t id, std::size_t bytes);
std::uint64_t tagged_id(std::string_view tag, std::span<const std::byte> payload);
// Keeps the pipeline full for `seconds` (or until `max_records` were acked,
// if not 0), then waits for the last acks. Records go to partitions 0 ..
// partitions-1 in turn (0 partitions: Fail), up to `rounds` rounds over
// them (at least 256 records) between two polls.
Throughput throughput(Publisher& pub, std::uint32_t bytes, double seconds, std::uint64_t max_records = 0,
                      std::uint32_t partitions = 1, std::uint32_t rounds = 8);
// One lap through every segment slot of a channel's log (first touches of
// its pages are page faults a long-running broker pays once). MB/s of it.
double warm_log(Publisher& pub, int slots, std::int64_t segment_bytes, std::uint64_t* bytes_out);
// A log warmed at full rate: a partition reuses the memory of the segments
// it cycles through (as many as it fills in a ttl plus grace), so the
// pages to touch first are those of the slots it uses at the rate it will
// run at, which grows as they warm. Rounds of `round_seconds` of `bytes`
// records (round robin over partitions 0 .. `partitions`-1), at least 3,
// until a round is less than 1.05x faster than the best before it and
// (when `segment_memory` knows: the bytes of segment memory the nodes
// hold, -1 if unknown) the nodes took no segment memory in it nor in the
// `flat_rounds` - 1 rounds before: it touched only warm pages at the rate
// the run will reach. At most `max_rounds`.
struct WarmUp {
  std::uint64_t bytes = 0;
  double seconds = 0;
  double last_mb_per_s = 0;  // of the last round
  int rounds = 0;
  std::int64_t segment_memory = -1;  // after the last round
  bool steady = false;               // stopped by the rule, not by max_rounds
  std::string unsettled;             // if not steady: what the last round still did
};
// The segment memory a cluster's nodes have taken so far (what they hold
// and what they gave back, from their node stats; -1 if unknown): a round
// of traffic that took none touched no new page.
std::int64_t segment_memory_taken(control::ControllerClient& admin);
WarmUp warm_until_steady(Publisher& pub, double round_seconds, int max_rounds,
                         const std::function<std::int64_t()>& segment_memory, std::uint32_t bytes = 64u << 10,
                         std::uint32_t partitions = 1, std::uint32_t rounds = 8, int flat_rounds = 1);
// publish -> commit ack, one record in flight.
std::vector<std::uint64_t> commit_ack_latency(Publisher& pub, std::uint32_t bytes, int iters, int warmup,
                                              std::uint64_t* elapsed);
// publish -> delivery to a subscriber of the tail on another thread.
std::vector<std::uint64_t> delivery_latency(Publisher& pub, RouteSource& routes, const std::string& channel,
                                            const std::string& provider, int sub_cpu, std::uint32_t bytes,
                                            int iters, int warmup, std::uint64_t* elapsed);

// --- what one partition move sends (bench_move_bytes.cpp) --------------------

// Bytes of one move, by kind; see bench_move_bytes.cpp for what is counted.
struct MoveBytes {
  bool found = false;            // its records were in the controller's log
  std::int64_t data = 0;         // records copied to the new chain (measured: bench_move.cpp)
  std::int64_t seal = 0;         // seal call + reply (the producer snapshot)
  std::int64_t metadata = 0;     // the move's records in the controller's log
  std::int64_t assignments = 0;  // configureChain calls + replies, to every node the route names
  std::int64_t route = 0;        // the new route, as each client fetches it (not in total())
  std::size_t producers = 0;     // producers in the handoff's snapshot
  std::size_t pushes = 0;        // nodes pushed the new route
  [[nodiscard]] std::int64_t total() const { return data + seal + metadata + assignments; }
};

// Reads the controller's write-ahead log (<cluster dir>/controller-data/wal)
// as it grows, one move at a time.
class MoveLog {
 public:
  explicit MoveLog(std::string wal_path) : path_(std::move(wal_path)) {}
  // The records since the last call that belong to the move that left
  // `route` (what movePartition returned), and what the move sent.
  MoveBytes next_move(const control::idl::PartitionRoute& route, std::int64_t segment_bytes,
                      std::int64_t ttl_ms, std::int32_t partitions);

 private:
  std::string path_;
  std::uint64_t last_lsn_ = 0;
};

// --- a subscriber group under channel alters (bench_rescale_group.cpp) -------

// The keyed records of `catena bench --rescale`: "rs:<id>:<key>:<seq>:"
// (bench_rescale.cpp). False if the payload is not one.
bool parse_keyed(std::span<const std::byte> payload, int* key, std::uint64_t* seq);

// A live subscriber group reading the rescale bench's channel: members
// (GroupSubscriber, each polling on a thread of its own) join and leave
// while the channel is altered. Every delivery is checked as it happens,
// under one lock, so "order" is the group's delivery order across members.
class RescaleGroup {
 public:
  RescaleGroup(control::ControllerClient::Options controller, std::string provider, std::string channel,
               std::size_t max_records, int keys);
  ~RescaleGroup();
  RescaleGroup(const RescaleGroup&) = delete;
  RescaleGroup& operator=(const RescaleGroup&) = delete;

  // Starts one more member and waits for its first assignment; "" or why not.
  std::string join();
  // The oldest member commits where it is and leaves.
  void leave_oldest();
  void leave_all();
  [[nodiscard]] std::size_t members() const { return members_.size(); }
  [[nodiscard]] std::uint64_t delivered() const;

  struct Result {
    std::uint64_t lost = 0;        // acknowledged, never delivered to the group
    std::uint64_t duplicated = 0;  // delivered to the group more than once
    std::uint64_t order_violations = 0;
    std::vector<std::string> anomalies;  // the first few, for the report
  };
  // After leave_all(): `acked[id]` is 1 for each acknowledged record.
  [[nodiscard]] Result check(const std::vector<std::uint8_t>& acked, std::uint64_t published) const;

 private:
  struct Member;
  void deliver(const Message& m);

  const control::ControllerClient::Options controller_;
  const std::string provider_, channel_;
  const int keys_;
  int next_member_ = 0;
  std::vector<std::unique_ptr<Member>> members_;
  mutable Mutex mu_;
  std::vector<std::uint8_t> times_ GUARDED_BY(mu_);     // by record id: deliveries
  std::vector<std::int64_t> last_seq_ GUARDED_BY(mu_);  // by key: the highest sequence delivered
  std::uint64_t delivered_ GUARDED_BY(mu_) = 0;
  std::uint64_t order_violations_ GUARDED_BY(mu_) = 0;
  std::uint64_t foreign_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> anomalies_ GUARDED_BY(mu_);
};

// --- traffic through a fault, with its history (bench_traffic.cpp) -----------

// Polls `cond` every millisecond until it holds or `timeout` passed; its last value.
bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

// What the failover and recovery benches run while they break something: one
// publisher and one subscriber on partition 0 of a channel, each on a thread
// of its own with its own controller connection. Every record is tagged
// (tagged_record) and goes into `history`: published, acknowledged or
// failed, delivered.
struct TrafficOptions {
  std::string channel;
  std::string tag;          // tagged_record's tag
  std::string client_name;  // the routes' client names: <client_name>-pub, <client_name>-sub
  std::string provider;
  std::chrono::milliseconds retry_timeout{0};  // 0: the publisher's default
  std::chrono::milliseconds stall_check{0};    // 0: the publisher's default
  // The next record's size, given the bytes acknowledged so far.
  std::function<std::size_t(std::uint64_t acked_bytes)> record_bytes = [](std::uint64_t) { return 64; };
  // The publisher's pause after each record (a steady stream), given the same.
  std::function<std::chrono::microseconds(std::uint64_t acked_bytes)> pause = [](std::uint64_t) {
    return std::chrono::microseconds(20);
  };
  // Called on the publisher thread for each acknowledged record, by id.
  std::function<void(std::uint64_t id)> on_ack;
};

class HistoryTraffic {
 public:
  // Starts both threads.
  HistoryTraffic(const control::ControllerClient::Options& controller, HistoryChecker& history,
                 TrafficOptions options);
  ~HistoryTraffic();  // finish()
  HistoryTraffic(const HistoryTraffic&) = delete;
  HistoryTraffic& operator=(const HistoryTraffic&) = delete;

  [[nodiscard]] std::uint64_t published() const { return published_.load(); }  // the next record's id
  [[nodiscard]] std::uint64_t acked() const { return acked_.load(); }
  [[nodiscard]] std::uint64_t acked_bytes() const { return acked_bytes_.load(); }
  [[nodiscard]] std::uint64_t delivered() const { return delivered_.load(); }

  // Stops publishing and flushes what is in flight (waiting at most
  // `flush_wait`), waits until the subscriber has read as many records as
  // were acknowledged (at most `deliver_wait`), then stops both threads.
  // Once only; the later calls return at once.
  void finish(std::chrono::milliseconds flush_wait = std::chrono::seconds(40),
              std::chrono::milliseconds deliver_wait = std::chrono::seconds(30));

 private:
  void publish_loop(const control::ControllerClient::Options& controller);
  void subscribe_loop(const control::ControllerClient::Options& controller);

  HistoryChecker& history_;
  const TrafficOptions options_;
  std::atomic<bool> stop_sub_{false}, stop_pub_{false}, pub_done_{false}, finished_{false};
  std::atomic<std::uint64_t> published_{0}, acked_{0}, acked_bytes_{0}, delivered_{0};
  std::thread sub_thread_, pub_thread_;
};

// --- the files next to the JSON (bench_report.cpp) ---------------------------

// What `catena bench` leaves in --out-dir: each latency row's samples as
// HdrHistogram's percentile distribution (<row>.hgrm, values in us), the
// rows' JSON lines (bench.jsonl) and the latency-by-percentile plot of the
// run's rows (latency.svg). Used by the bench's thread only.
class BenchFiles {
 public:
  // Creates `dir` if missing and starts bench.jsonl afresh; "" or why not.
  std::string open(const std::string& dir);
  // Writes <name>.hgrm and remembers it for plot(); its path, or "" if it
  // could not be written (said on stderr: the run goes on).
  std::string write_hgrm(const std::string& name, const std::vector<std::uint64_t>& samples_ns);
  void append_json(const std::string& line);
  // Draws latency.svg from this run's .hgrm files; its path, or "" (said
  // on stderr).
  std::string plot(const std::string& title);

 private:
  std::string dir_;
  std::vector<std::string> names_;
};

// `catena bench --replot --out-dir DIR`: every <name>.samples file there
// (latency samples in ns, one a line: what bench/peers/nats_bench writes)
// without a <name>.hgrm becomes one, then latency.svg is drawn from every
// .hgrm in DIR, Catena's, the floor's and the peers'. Exit status: 1 if
// a .samples file was not one (named on stderr; the rest is still drawn).
int replot(const std::string& dir);

// --- recovery levels (bench_recovery.cpp, bench_recovery_partition.cpp) -----

// One line of `catena bench --recovery`.
struct LevelResult {
  std::string level;
  bool ok = false;
  double recovery_ms = 0;
  std::int64_t bytes_copied = 0;
  std::int64_t retained_records = 0;  // the partition's end offset at the kill
  std::int64_t recovered_records = 0;
  std::int64_t route_epoch = 0;               // at the end: 4 for kill, joining, promoted and nothing else
  bool same_zone = false;                     // zone: the replacement is in the lost member's zone
  std::int64_t rpo_records = 0;               // datacenter: the source's end beyond the mirror's last report
  std::int64_t lost_beyond_rpo = 0;           // datacenter: records the mirror reported copied, yet missing
  std::int64_t lost_to_subscriber = 0;        // datacenter: never delivered to the failed-over subscriber
  std::map<std::string, std::int64_t> extra;  // figures of one level only, by name
  HistoryReport history;
  std::string error;
};

// The partition level: one replica link of a broker holding many partitions
// broken `breaks` times under traffic (bench_recovery_partition.cpp).
LevelResult partition_level(const std::string& provider, int breaks);

}  // namespace catena::cli::bench_detail
