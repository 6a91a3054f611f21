// `catena cluster demo`: the main job. Starts a local cluster, creates a
// channel, runs a publisher and a subscriber through it and checks, record
// by record, that every acknowledged record was delivered exactly once, in
// offset order, with its payload, then prints counts, offsets and latency
// percentiles. With --kill, a broker is killed with SIGKILL mid-stream.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/clock.hpp>

#include "commands.hpp"
#include "stats.hpp"

namespace catena::cli {

using namespace std::chrono_literals;

namespace {

struct Pct {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

Pct percentiles_us(std::vector<std::uint64_t> ns) {
  const bench::Percentiles p = bench::percentiles(std::move(ns));
  return Pct{static_cast<double>(p.p50) / 1e3, static_cast<double>(p.p99) / 1e3,
             static_cast<double>(p.p999) / 1e3, static_cast<double>(p.max) / 1e3};
}

std::string payload_for(int i, int bytes) {
  std::string s = "demo-" + std::to_string(i) + "-";
  while (static_cast<int>(s.size()) < bytes) s += static_cast<char>('a' + (s.size() + i) % 26);
  s.resize(static_cast<std::size_t>(std::max(bytes, 1)));
  return s;
}

// The demo keeps every record for its whole run (ttl 10 min), so its
// channel's segments must hold them all: a broker keeps 8 slots per
// partition replica by default, one of them open. Sized as if every record
// went to one partition (16 keys over few partitions are far from even),
// with a frame of the payload plus 128 bytes (header, key, alignment).
// 0 when even 64 MiB segments are too small.
std::uint32_t demo_segment_bytes(int records, int bytes) {
  constexpr std::uint64_t kUsableSlots = 6;
  const std::uint64_t needed =
      static_cast<std::uint64_t>(records) * (static_cast<std::uint64_t>(bytes) + 128);
  std::uint64_t segment = 1u << 20;
  while (segment * kUsableSlots < needed && segment < (64u << 20)) segment *= 2;
  return segment * kUsableSlots < needed ? 0 : static_cast<std::uint32_t>(segment);
}

}  // namespace

int cluster_demo(ClusterOptions opts, const DemoOptions& demo, const Common& common) {
  opts.provider = common.provider;
  opts.quiet = true;
  const std::uint32_t segment_bytes = demo_segment_bytes(demo.records, demo.bytes);
  if (segment_bytes == 0) {
    std::fprintf(stderr,
                 "catena: cluster demo: %d records of %d bytes do not fit the demo channel's retention "
                 "(6 x 64 MiB per partition); publish fewer or smaller records\n",
                 demo.records, demo.bytes);
    return 2;
  }
  LocalCluster cluster(opts);
  std::string err;
  std::printf("== starting a local cluster: controller + %d brokers (provider %s), logs in %s/\n", opts.nodes,
              opts.provider.c_str(), opts.dir.c_str());
  if (!cluster.start(&err)) {
    std::fprintf(stderr, "catena: cluster demo: %s\n", err.c_str());
    return 1;
  }
  for (const auto& n : cluster.nodes())
    std::printf("   %s pid %d fabric %s\n", n.node_id.c_str(), n.pid, n.fabric_addr.c_str());

  control::ControllerClient::Options co;
  co.address = cluster.controller_address();
  control::ControllerClient admin(co);
  control::idl::ChannelConfig cfg;
  cfg.name = "demo";
  cfg.partitions = demo.partitions;
  cfg.replication = std::min(3, opts.nodes);
  cfg.segment_bytes = segment_bytes;
  cfg.ttl_ms = 600000;
  auto ch = admin.create_channel(cfg);
  if (!ch) {
    std::fprintf(stderr, "catena: cluster demo: create channel: %s\n", ch.error().describe().c_str());
    return 1;
  }
  std::printf("== channel 'demo': %d partitions, replication %d, segments of %u KiB\n", cfg.partitions,
              cfg.replication, segment_bytes >> 10);
  for (const auto& r : ch->routes) {
    std::printf("   partition %d chain:", r.partition);
    for (const auto& rep : r.replicas) std::printf(" %s", rep.node_id.c_str());
    std::printf("\n");
  }

  // Subscriber on its own thread (it owns its Subscriber object).
  std::atomic<bool> stop_sub{false};
  std::atomic<std::uint64_t> delivered{0};
  std::map<std::uint32_t, std::vector<std::pair<std::uint64_t, std::string>>> got;
  std::vector<std::uint64_t> delivery_ns;
  std::string sub_error;
  std::thread sub_thread([&] {
    broker::ControllerRoutes routes(co, "demo-subscriber");
    SubscriberOptions so;
    so.provider = common.provider;
    auto sub = Subscriber::create(routes, "demo", so);
    if (!sub) {
      sub_error = sub.error().message;
      return;
    }
    while (!stop_sub.load()) {
      int n = sub.value()->poll([&](const Message& m) {
        delivery_ns.push_back(catena::wall_clock_ns() - m.timestamp_ns);
        got[m.partition].emplace_back(
            m.offset, std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
        delivered.fetch_add(1, std::memory_order_relaxed);
      });
      if (n == 0) std::this_thread::sleep_for(50us);
    }
  });

  broker::ControllerRoutes routes(co, "demo-publisher");
  PublisherOptions po;
  po.provider = common.provider;
  // What the publisher meets (a lost head, the new route, records held
  // back): shown as it happens, so a --kill run shows the failover.
  po.on_event = [](const ClientEvent& e) {
    std::printf("   publisher event: %s: %s\n", std::string(to_string(e.kind)).c_str(), e.message.c_str());
  };
  auto pub = Publisher::create(routes, "demo", po);
  if (!pub) {
    stop_sub = true;
    sub_thread.join();
    std::fprintf(stderr, "catena: cluster demo: publisher: %s\n", pub.error().message.c_str());
    return 1;
  }
  std::printf("== publishing %d records of %d bytes%s\n", demo.records, demo.bytes,
              demo.kill ? ", killing a broker half way" : "");
  std::map<std::pair<std::uint32_t, std::uint64_t>, int> acked;  // (partition, offset) -> record index
  std::vector<std::uint64_t> ack_ns;                             // one in flight
  std::vector<std::uint64_t> pipelined_ack_ns;                   // many in flight (includes queueing)
  std::uint64_t refused = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // The first tenth goes one record at a time (latency with one in flight),
  // the rest pipelined (throughput).
  const int paced = std::max(1, demo.records / 10);
  auto t_pipelined = t0;
  for (int i = 0; i < demo.records; ++i) {
    if (demo.kill && i == demo.records / 2 && cluster.nodes().size() > 1) {
      const auto& victim = cluster.nodes()[1];
      std::printf("   kill -9 %s (pid %d) after %d records\n", victim.node_id.c_str(), victim.pid, i);
      cluster.signal_node(1, SIGKILL);
    }
    if (i == paced) t_pipelined = std::chrono::steady_clock::now();
    const std::string payload = payload_for(i, demo.bytes);
    const std::string key = "k" + std::to_string(i % 16);
    const std::uint64_t sent = catena::wall_clock_ns();
    auto cb = [&, i, sent](const PublishResult& r) {
      if (r.status == PublishStatus::ok) {
        acked[{r.partition, r.offset}] = i;
        (i < paced ? ack_ns : pipelined_ack_ns).push_back(catena::wall_clock_ns() - sent);
      } else {
        ++refused;
      }
    };
    for (;;) {
      auto e = pub.value()->publish(
          std::span(reinterpret_cast<const std::byte*>(key.data()), key.size()),
          std::span(reinterpret_cast<const std::byte*>(payload.data()), payload.size()), cb);
      if (e == client::ErrorCode::ok) break;
      if (e != client::ErrorCode::backpressure) {
        ++refused;
        break;
      }
      pub.value()->poll();
    }
    if (i < paced) {
      pub.value()->flush(10s);
    } else {
      pub.value()->poll();
    }
  }
  const bool flushed = pub.value()->flush(60s);
  const auto t_end = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(t_end - t0).count();
  const double pipelined_secs = std::chrono::duration<double>(t_end - t_pipelined).count();
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (delivered.load() < acked.size() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(50ms);  // let stray duplicates show up if there were any
  stop_sub = true;
  sub_thread.join();
  if (!sub_error.empty()) {
    std::fprintf(stderr, "catena: cluster demo: subscriber: %s\n", sub_error.c_str());
    return 1;
  }

  // Check: each acknowledged record delivered once, in order, intact.
  std::uint64_t lost = 0, duplicated = 0, out_of_order = 0, corrupted = 0, unknown = 0;
  for (auto& [part, recs] : got) {
    std::uint64_t prev = 0;
    bool first = true;
    std::map<std::uint64_t, int> seen;
    for (const auto& [off, payload] : recs) {
      if (!first && off <= prev) ++out_of_order;
      first = false;
      prev = off;
      if (++seen[off] > 1) ++duplicated;
      auto it = acked.find({part, off});
      if (it == acked.end()) {
        ++unknown;  // delivered but never acknowledged (possible only if its ack was lost with a failure)
      } else if (payload != payload_for(it->second, demo.bytes)) {
        ++corrupted;
      }
    }
  }
  for (const auto& [key, idx] : acked) {
    auto it = got.find(key.first);
    // (key captured by name: Clang before 16 cannot capture a structured binding.)
    bool found =
        it != got.end() && std::any_of(it->second.begin(), it->second.end(),
                                       [&, &key = key](const auto& r) { return r.first == key.second; });
    if (!found) ++lost;
  }
  std::printf("== results\n");
  std::printf("   published %d, acknowledged %zu, refused %llu, in %.2f s%s\n", demo.records, acked.size(),
              static_cast<unsigned long long>(refused), secs, flushed ? "" : " (flush timed out)");
  std::printf("   pipelined: %d records in %.3f s = %.0f records/s\n", demo.records - paced, pipelined_secs,
              static_cast<double>(demo.records - paced) / pipelined_secs);
  for (const auto& [part, recs] : got) {
    std::printf("   partition %u: delivered %zu records, offsets %llu..%llu\n", part, recs.size(),
                static_cast<unsigned long long>(recs.empty() ? 0 : recs.front().first),
                static_cast<unsigned long long>(recs.empty() ? 0 : recs.back().first));
  }
  Pct a = percentiles_us(ack_ns);
  Pct ap = percentiles_us(pipelined_ack_ns);
  Pct d = percentiles_us(delivery_ns);
  std::printf("   publish -> commit-ack, 1 in flight  p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us\n",
              a.p50, a.p99, a.p999, a.max);
  std::printf("   publish -> commit-ack, pipelined    p50 %.1f us  p99 %.1f us  (includes queueing)\n",
              ap.p50, ap.p99);
  std::printf("   publish -> delivery (all records)   p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us\n",
              d.p50, d.p99, d.p999, d.max);
  std::printf(
      "   lost %llu, duplicated %llu, out of order %llu, corrupted %llu, delivered-but-unacked %llu\n",
      static_cast<unsigned long long>(lost), static_cast<unsigned long long>(duplicated),
      static_cast<unsigned long long>(out_of_order), static_cast<unsigned long long>(corrupted),
      static_cast<unsigned long long>(unknown));
  const bool ok = lost == 0 && duplicated == 0 && out_of_order == 0 && corrupted == 0 &&
                  acked.size() == static_cast<std::size_t>(demo.records);
  std::printf("== %s\n", ok ? "OK: every acknowledged record was delivered exactly once, in order, intact"
                            : "FAILED: see the counts above");
  return ok ? 0 : 1;
}

}  // namespace catena::cli
