// `catena bench --move`: what a tail-offset partition handoff costs while
// traffic flows, next to what a drain (backup-first migration) copies.
// Starts its own local cluster (2R+1 brokers by default: two disjoint chains
// to move between and one node for the drain to land on), fills a partition
// with --retained-mib of records, then runs a steady publisher (every
// acknowledgement timed) and a live subscriber (checked with the history
// checker) while the first chain's tail is drained (its replacement copies
// the partition) and then the partition moves --moves times, round-robin
// over disjoint sets of R nodes.
//
// Per move: how long the movePartition call took (seal, commit, new route,
// pushes), the longest pause between consecutive acknowledgements around it,
// how long the publisher took to resume (first ack of a record published
// after the call returned), and the bytes it sent (bench_move_bytes.cpp).
// Records copied to the new chain are measured, not assumed: the bytes its
// nodes hold after the move, less what they held before, less the records
// appended to the new chain since the move's offset H (from the same
// heartbeat) and the headers of the segments they opened.
//
// Acknowledgement latency "during a move" is that of records in flight
// between the call's start and the publisher's resumption; "steady" is every
// other record.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/history.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/partition_log.hpp>
#include <catena/chain/record.hpp>
#include <catena/control/controller_client.hpp>

#include "bench_parts.hpp"
#include "commands.hpp"
#include "stats.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using bench_detail::wait_until;
using namespace bench_detail;
namespace idl = control::idl;

namespace {

constexpr std::uint32_t kPayload = 64;         // steady records
constexpr std::uint32_t kFill = 64u << 10;     // pre-fill records
constexpr int kSegmentSlots = 8;               // catenad --segment-slots, as LocalCluster starts it
constexpr std::size_t kMaxRecords = 2u << 20;  // steady records timed, at most
constexpr const char* kMoveChannel = "move-bench";

struct Move {
  std::vector<std::string> to;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint64_t resumed_ns = 0;  // the first ack of a record published after end_ns
  std::int64_t at = 0;           // H
  std::int64_t epoch = 0;
  std::int64_t old_head_bytes = 0;
  double gap_ms = 0;
  MoveBytes bytes;
};

// Node id -> its last heartbeat's stats.
std::map<std::string, idl::NodeStats> node_stats(control::ControllerClient& admin) {
  std::map<std::string, idl::NodeStats> out;
  if (auto s = admin.cluster_status()) {
    for (const auto& n : s->nodes) out[n.info.node_id] = n.stats;
  }
  return out;
}

const idl::PartitionProgress* progress_at(const idl::NodeStats& s, std::int64_t epoch) {
  for (const auto& p : s.partitions) {
    if (p.channel == kMoveChannel && p.partition == 0 && p.epoch == epoch) return &p;
  }
  return nullptr;
}

// Bytes the move's new chain holds beyond what was appended to it since H
// (see the top of this file). Waits for a heartbeat of every new node.
std::int64_t data_copied(control::ControllerClient& admin,
                         const std::map<std::string, idl::NodeStats>& before, const Move& m,
                         std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  std::map<std::string, idl::NodeStats> after;
  for (;;) {
    after = node_stats(admin);
    const bool all = std::all_of(m.to.begin(), m.to.end(), [&](const std::string& id) {
      auto it = after.find(id);
      return it != after.end() && progress_at(it->second, m.epoch) != nullptr;
    });
    if (all) break;
    if (std::chrono::steady_clock::now() > deadline) {
      *error = "the new chain's nodes did not report it within 5 s";
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  const auto frame = static_cast<std::int64_t>(chain::frame_size(kPayload));
  const auto header = static_cast<std::int64_t>(sizeof(chain::SegmentHeader));
  std::int64_t copied = 0;
  for (const auto& id : m.to) {
    const auto& a = after.at(id);
    const auto b = before.count(id) != 0 ? before.at(id) : idl::NodeStats{};
    const std::int64_t appended = (progress_at(a, m.epoch)->end_offset - m.at) * frame;
    copied += (a.bytes - b.bytes) - appended - (a.segments - b.segments) * header;
  }
  return copied;
}

// Publishes `mib` MiB in kFill records; returns the offset after the last.
std::int64_t prefill(Publisher& pub, int mib, double* mb_per_s) {
  const auto payload = make_payload(kFill);
  const std::uint64_t records = (static_cast<std::uint64_t>(mib) << 20) / kFill;
  std::uint64_t end = 0, failed = 0;
  const std::uint64_t t0 = steady_ns();
  for (std::uint64_t i = 0; i < records;) {
    const auto e = pub.publish_to(0, payload, [&](const PublishResult& r) {
      if (r.status == PublishStatus::ok) {
        end = std::max(end, r.offset + 1);
      } else {
        ++failed;
      }
    });
    if (e == client::ErrorCode::ok) {
      ++i;
    } else if (e == client::ErrorCode::backpressure) {
      if (pub.poll() == 0) std::this_thread::sleep_for(20us);
    } else {
      throw Fail{"pre-fill: " + std::string(client::to_string(e))};
    }
  }
  if (!pub.flush(60s)) throw Fail{"pre-fill: flush timed out"};
  if (failed > 0) throw Fail{"pre-fill: " + std::to_string(failed) + " records refused"};
  *mb_per_s = static_cast<double>(records * kFill) * 1e3 / static_cast<double>(steady_ns() - t0 + 1);
  return static_cast<std::int64_t>(end);
}

// Backup-first migration, measured once before the moves: the tail of the
// first chain (which holds the pre-filled history) is drained under the
// steady traffic, and its replacement copies the partition while the chain
// keeps acknowledging.
struct Drain {
  std::string node, replacement;
  std::int64_t retained = 0;  // the drained node's bytes when the drain began
  std::int64_t copied = 0;    // the replacement's, once it serves: the copy, plus what came during it
  std::uint64_t start_ns = 0, end_ns = 0;
  double gap_ms = 0;
  std::vector<std::string> chain;  // afterwards
};

bool drain_tail(control::ControllerClient& admin, Drain* d, std::string* error) {
  auto route = admin.get_route(kMoveChannel, 0, 0);
  if (!route) return *error = "drain: " + route.error().describe(), false;
  d->node = route->replicas.back().node_id;
  const auto before = node_stats(admin);
  if (auto it = before.find(d->node); it != before.end()) d->retained = it->second.bytes;
  d->start_ns = steady_ns();
  if (auto r = admin.drain_node(d->node); !r) return *error = "drain: " + r.error().describe(), false;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (;;) {
    if (auto st = admin.cluster_status()) {
      const bool drained = std::any_of(st->nodes.begin(), st->nodes.end(), [&](const idl::NodeStatus& n) {
        return n.info.node_id == d->node && n.drain == idl::DrainState::DRAINED;
      });
      if (drained) break;
    }
    if (std::chrono::steady_clock::now() > deadline) return *error = "drain: not DRAINED within 120 s", false;
    std::this_thread::sleep_for(5ms);
  }
  d->end_ns = steady_ns();
  auto after = admin.get_route(kMoveChannel, 0, 0);
  if (!after) return *error = "drain: " + after.error().describe(), false;
  for (const auto& rep : after->replicas) {
    d->chain.push_back(rep.node_id);
    const bool old = std::any_of(route->replicas.begin(), route->replicas.end(),
                                 [&](const idl::Replica& o) { return o.node_id == rep.node_id; });
    if (!old) d->replacement = rep.node_id;
  }
  if (d->replacement.empty()) return *error = "drain: no replacement in the chain", false;
  const auto stats_deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    const auto now = node_stats(admin);
    if (auto it = now.find(d->replacement);
        it != now.end() && progress_at(it->second, after->epoch) != nullptr) {
      d->copied = it->second.bytes;
      return true;
    }
    if (std::chrono::steady_clock::now() > stats_deadline)
      return *error = "drain: the replacement did not report the partition within 5 s", false;
    std::this_thread::sleep_for(20ms);
  }
}

double pct(std::vector<double> v, double q) {
  return bench::quantile(std::move(v), q);
}

}  // namespace

int run_move_bench(const Common& common, const BenchOptions& o) {
  const int r = o.replicas;
  // One node more than the chains to move between: the drain's landing spot.
  const int nodes = std::max(o.nodes, 2 * r) + 1;
  if (static_cast<std::int64_t>(o.retained_mib) << 20 > (kSegmentSlots - 2) * o.segment_bytes) {
    std::fprintf(stderr,
                 "catena: bench --move: %d MiB do not fit in %d segments of %lld bytes (the brokers keep %d "
                 "slots): raise --segment-bytes\n",
                 o.retained_mib, kSegmentSlots - 2, static_cast<long long>(o.segment_bytes), kSegmentSlots);
    return 2;
  }
  std::FILE* info = o.json ? stderr : stdout;
  ClusterOptions co;
  co.nodes = nodes;
  co.provider = common.provider;
  co.dir = o.dir + "/move";
  co.quiet = true;
  co.secure = o.secure;
  // Segments of segment_bytes only: what a move copies is measured from the
  // nodes' held bytes less the records and segment headers they appended,
  // which a segment sealed early (sized by need) would add seal frames to.
  co.node_args = {"--min-segment-kb", "0"};
  LocalCluster cluster(co);
  std::string err;
  if (!cluster.start(&err)) {
    std::fprintf(stderr, "catena: bench --move: %s\n", err.c_str());
    return 1;
  }
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  cco.token = cluster.admin_token();
  cco.rpc_timeout = 30s;
  control::ControllerClient admin(cco);
  idl::ChannelConfig cfg;
  cfg.name = kMoveChannel;
  cfg.partitions = 1;
  cfg.replication = r;
  cfg.segment_bytes = o.segment_bytes;
  cfg.ttl_ms = 600000;  // longer than the run: nothing expires
  auto ch = admin.create_channel(cfg);
  if (!ch) {
    std::fprintf(stderr, "catena: bench --move: create channel: %s\n", ch.error().describe().c_str());
    return 1;
  }
  std::fprintf(info, "catena bench --move: %d brokers, chains of %d, provider %s\n", nodes, r,
               common.provider.c_str());

  std::int64_t fill_end = 0;
  try {
    broker::ControllerRoutes routes(cco, "move-bench-fill");
    PublisherOptions po;
    po.provider = common.provider;
    po.ring_bytes = 16u << 20;
    po.max_in_flight = 4096;
    auto pub = Publisher::create(routes, kMoveChannel, po);
    if (!pub) throw Fail{"publisher: " + pub.error().message};
    double mbs = 0;
    if (o.retained_mib > 0) fill_end = prefill(*pub.value(), o.retained_mib, &mbs);
    std::fprintf(info, "  pre-filled %d MiB in %u KiB records at %.0f MB/s (up to offset %lld)\n",
                 o.retained_mib, kFill >> 10, mbs, static_cast<long long>(fill_end));
  } catch (const Fail& f) {
    std::fprintf(stderr, "catena: bench --move: %s\n", f.what.c_str());
    return 1;
  }

  HistoryChecker history(1);
  std::vector<std::uint64_t> pub_ns(kMaxRecords, 0), ack_ns(kMaxRecords, 0), acks;
  acks.reserve(kMaxRecords);
  std::atomic<bool> stop_sub{false}, stop_pub{false}, pub_done{false}, sub_ready{false};
  std::atomic<std::uint64_t> acked{0}, delivered{0}, failed{0};
  std::string setup_error;
  std::thread sub_thread([&] {
    broker::ControllerRoutes routes(cco, "move-bench-sub");
    SubscriberOptions so;
    so.provider = common.provider;
    so.start = Start::offset;
    so.start_offset = static_cast<std::uint64_t>(fill_end);
    auto sub = Subscriber::create(routes, kMoveChannel, so);
    if (!sub) setup_error = "subscriber: " + sub.error().message;
    sub_ready = true;
    if (!sub) return;
    while (!stop_sub) {
      if (sub.value()->poll([&](const Message& m) {
            history.delivered(0, m.partition, m.offset, tagged_id("mv", m.payload), m.payload);
            delivered.fetch_add(1);
          }) == 0) {
        std::this_thread::sleep_for(50us);
      }
    }
  });
  while (!sub_ready) std::this_thread::sleep_for(1ms);
  if (!setup_error.empty()) stop_pub = true;  // and report it below
  std::thread pub_thread([&] {
    broker::ControllerRoutes routes(cco, "move-bench-pub");
    PublisherOptions po;
    po.provider = common.provider;
    auto pub = Publisher::create(routes, kMoveChannel, po);
    if (!pub || stop_pub) {
      if (!pub) setup_error = "publisher: " + pub.error().message;
      pub_done = true;
      return;
    }
    std::uint64_t id = 0;
    while (!stop_pub && id < kMaxRecords) {
      const std::string p = tagged_record("mv", id, kPayload);
      const auto bytes = std::span(reinterpret_cast<const std::byte*>(p.data()), p.size());
      const std::uint64_t t = steady_ns();
      auto e = pub.value()->publish_to(0, bytes, [&, id](const PublishResult& res) {
        if (res.status != PublishStatus::ok) {
          history.failed(id);
          failed.fetch_add(1);
          return;
        }
        const std::uint64_t now = steady_ns();
        ack_ns[id] = now;
        acks.push_back(now);
        history.acknowledged(id, res.partition, res.offset);
        acked.fetch_add(1);
      });
      if (e == client::ErrorCode::ok) {
        pub_ns[id] = t;
        history.published(id, bytes);
        ++id;
      }
      pub.value()->poll();
      std::this_thread::sleep_for(50us);  // a steady stream, about a record per 100 us
    }
    pub.value()->flush(30s);
    pub_done = true;
  });

  std::vector<Move> moves;
  MoveLog log(co.dir + "/controller-data/wal");
  std::string error;
  // Steady traffic first, then a move every second.
  if (!wait_until([&] { return acked.load() >= 2000 || pub_done.load(); }, 20s) || pub_done.load()) {
    error = setup_error.empty() ? "no steady acknowledgements within 20 s" : setup_error;
  }
  std::this_thread::sleep_for(500ms);
  Drain drain;
  if (error.empty() && drain_tail(admin, &drain, &error)) {
    std::fprintf(info, "  drained %s in %.0f ms: %s copied %lld bytes (it held %lld)\n", drain.node.c_str(),
                 static_cast<double>(drain.end_ns - drain.start_ns) / 1e6, drain.replacement.c_str(),
                 static_cast<long long>(drain.copied), static_cast<long long>(drain.retained));
    std::this_thread::sleep_for(500ms);
  }
  // Disjoint sets of R nodes to move between, the chain after the drain
  // first; the drained node is in none.
  std::vector<std::vector<std::string>> sets{drain.chain};
  if (sets[0].empty()) {
    if (auto rt = admin.get_route(kMoveChannel, 0, 0)) {
      for (const auto& rep : rt->replicas) sets[0].push_back(rep.node_id);
    }
  }
  std::vector<std::string> rest;
  for (const auto& n : cluster.nodes()) {
    if (std::find(sets[0].begin(), sets[0].end(), n.node_id) == sets[0].end() && n.node_id != drain.node)
      rest.push_back(n.node_id);
  }
  for (std::size_t i = 0; i + static_cast<std::size_t>(r) <= rest.size(); i += static_cast<std::size_t>(r))
    sets.emplace_back(rest.begin() + static_cast<std::ptrdiff_t>(i),
                      rest.begin() + static_cast<std::ptrdiff_t>(i) + r);
  for (int k = 0; k < o.moves && error.empty(); ++k) {
    Move m;
    m.to = sets[static_cast<std::size_t>(k + 1) % sets.size()];
    const auto before = node_stats(admin);
    const std::string old_head = sets[static_cast<std::size_t>(k) % sets.size()].front();
    if (auto it = before.find(old_head); it != before.end()) m.old_head_bytes = it->second.bytes;
    m.start_ns = steady_ns();
    auto res = admin.move_partition(kMoveChannel, 0, m.to);
    m.end_ns = steady_ns();
    if (!res) {
      error = "move " + std::to_string(k + 1) + ": " + res.error().describe();
      break;
    }
    m.at = res->start_offset;
    m.epoch = res->epoch;
    m.bytes = log.next_move(*res, cfg.segment_bytes, cfg.ttl_ms, cfg.partitions);
    m.bytes.data = data_copied(admin, before, m, &error);
    moves.push_back(std::move(m));
    std::this_thread::sleep_for(std::chrono::milliseconds(1000) -
                                std::chrono::nanoseconds(steady_ns() - moves.back().end_ns));
  }
  std::this_thread::sleep_for(500ms);
  stop_pub = true;
  wait_until([&] { return pub_done.load(); }, 40s);
  wait_until([&] { return delivered.load() >= acked.load(); }, 20s);
  std::this_thread::sleep_for(100ms);
  stop_sub = true;
  pub_thread.join();
  sub_thread.join();
  const HistoryReport h = history.check();

  // Acks in time order; per move, the longest pause around it and when the
  // publisher resumed.
  std::sort(acks.begin(), acks.end());
  const std::size_t published = std::count_if(pub_ns.begin(), pub_ns.end(), [](auto t) { return t != 0; });
  for (auto& m : moves) {
    m.resumed_ns = ~0ull;
    for (std::size_t i = 0; i < published; ++i) {
      if (pub_ns[i] >= m.end_ns && ack_ns[i] != 0) {
        m.resumed_ns = ack_ns[i];
        break;
      }
    }
    std::uint64_t gap = 0;
    for (std::size_t i = 1; i < acks.size(); ++i) {
      if (acks[i] >= m.start_ns && acks[i - 1] <= m.resumed_ns) gap = std::max(gap, acks[i] - acks[i - 1]);
    }
    m.gap_ms = static_cast<double>(gap) / 1e6;
  }
  if (drain.end_ns != 0) {
    std::uint64_t gap = 0;
    for (std::size_t i = 1; i < acks.size(); ++i) {
      if (acks[i] >= drain.start_ns && acks[i - 1] <= drain.end_ns)
        gap = std::max(gap, acks[i] - acks[i - 1]);
    }
    drain.gap_ms = static_cast<double>(gap) / 1e6;
  }
  std::vector<std::uint64_t> during, steady;
  for (std::size_t i = 0; i < published; ++i) {
    if (ack_ns[i] == 0) continue;
    const bool in_move = std::any_of(moves.begin(), moves.end(), [&](const Move& m) {
      return pub_ns[i] <= m.resumed_ns && ack_ns[i] >= m.start_ns;
    });
    (in_move ? during : steady).push_back((ack_ns[i] - pub_ns[i]) / 1000);
  }
  std::vector<double> gaps, move_ms, resume_ms, copied;
  for (const auto& m : moves) {
    gaps.push_back(m.gap_ms);
    move_ms.push_back(static_cast<double>(m.end_ns - m.start_ns) / 1e6);
    resume_ms.push_back(m.resumed_ns == ~0ull ? -1.0 : static_cast<double>(m.resumed_ns - m.end_ns) / 1e6);
    copied.push_back(static_cast<double>(m.bytes.total()));
  }
  const auto d = bench::percentiles(during);
  const auto s = bench::percentiles(steady);
  const std::int64_t retained = moves.empty() ? 0 : moves.front().old_head_bytes;
  const bool found = std::all_of(moves.begin(), moves.end(), [](const Move& m) { return m.bytes.found; });
  const std::uint64_t other = h.out_of_order + h.corrupted + h.phantom + h.offset_conflicts;

  if (o.json) {
    nlohmann::json per_move = nlohmann::json::array();
    for (std::size_t i = 0; i < moves.size(); ++i) {
      const auto& m = moves[i];
      per_move.push_back({{"to", m.to},
                          {"at_offset", m.at},
                          {"old_head_bytes", m.old_head_bytes},
                          {"move_ms", move_ms[i]},
                          {"resume_ms", resume_ms[i]},
                          {"ack_gap_ms", m.gap_ms},
                          {"bytes", m.bytes.total()},
                          {"data_bytes", m.bytes.data},
                          {"seal_bytes", m.bytes.seal},
                          {"metadata_bytes", m.bytes.metadata},
                          {"assignment_bytes", m.bytes.assignments},
                          {"pushes", m.bytes.pushes},
                          {"producers", m.bytes.producers},
                          {"route_bytes", m.bytes.route}});
    }
    nlohmann::json j{
        {"system", "catena"},
        {"mode", "move"},
        {"provider", common.provider},
        {"nodes", nodes},
        {"replicas", r},
        {"segment_bytes", cfg.segment_bytes},
        {"moves", moves.size()},
        {"retained_bytes", retained},
        {"bytes_copied_per_move", pct(copied, 0.5)},
        {"bytes_copied_per_move_max", copied.empty() ? 0.0 : *std::max_element(copied.begin(), copied.end())},
        {"bytes_copied_per_drain", drain.copied},
        {"drained_node_bytes", drain.retained},
        {"drain_ms", static_cast<double>(drain.end_ns - drain.start_ns) / 1e6},
        {"drain_ack_gap_ms", drain.gap_ms},
        {"ack_gap_p50_ms", pct(gaps, 0.5)},
        {"ack_gap_max_ms", pct(gaps, 1.0)},
        {"ack_p99_us_during_move", d.p99},
        {"ack_p99_us_steady", s.p99},
        {"ack_p50_us_steady", s.p50},
        {"move_ms_p50", pct(move_ms, 0.5)},
        {"resume_ms_p50", pct(resume_ms, 0.5)},
        {"acked", h.acknowledged},
        {"failed", h.failed},
        {"lost", h.lost},
        {"duplicated", h.duplicated},
        {"other_violations", other},
        {"loadavg_1m", load_average()},
        {"per_move", per_move}};
    if (!error.empty()) j["error"] = error;
    std::cout << j.dump() << std::endl;
  } else {
    for (std::size_t i = 0; i < moves.size(); ++i) {
      const auto& m = moves[i];
      std::printf(
          "move %zu at offset %lld: call %.1f ms, publisher resumed %.1f ms after it, longest ack gap %.1f "
          "ms; "
          "%lld bytes (records copied %lld, seal %lld, metadata %lld, %zu assignments %lld)\n",
          i + 1, static_cast<long long>(m.at), move_ms[i], resume_ms[i], m.gap_ms,
          static_cast<long long>(m.bytes.total()), static_cast<long long>(m.bytes.data),
          static_cast<long long>(m.bytes.seal), static_cast<long long>(m.bytes.metadata), m.bytes.pushes,
          static_cast<long long>(m.bytes.assignments));
    }
    std::printf(
        "%zu moves, %lld bytes retained: %.0f bytes per move (p50), ack gap p50 %.1f ms max %.1f ms, ack p99 "
        "%llu us during moves vs %llu us steady, move p50 %.1f ms; %llu acked, lost %llu, duplicated %llu\n",
        moves.size(), static_cast<long long>(retained), pct(copied, 0.5), pct(gaps, 0.5), pct(gaps, 1.0),
        static_cast<unsigned long long>(d.p99), static_cast<unsigned long long>(s.p99), pct(move_ms, 0.5),
        static_cast<unsigned long long>(h.acknowledged), static_cast<unsigned long long>(h.lost),
        static_cast<unsigned long long>(h.duplicated));
  }
  if (drain.end_ns != 0 && !o.json) {
    std::printf(
        "drain of %s: %.0f ms, %lld bytes copied to %s (the drained node held %lld), longest ack gap %.1f "
        "ms\n",
        drain.node.c_str(), static_cast<double>(drain.end_ns - drain.start_ns) / 1e6,
        static_cast<long long>(drain.copied), drain.replacement.c_str(),
        static_cast<long long>(drain.retained), drain.gap_ms);
  }
  if (!error.empty()) std::fprintf(stderr, "catena: bench --move: %s\n", error.c_str());
  if (!found)
    std::fprintf(stderr, "catena: bench --move: a move's records were not in the controller's log\n");
  return error.empty() && found && moves.size() == static_cast<std::size_t>(o.moves) && h.ok() ? 0 : 1;
}

}  // namespace catena::cli
