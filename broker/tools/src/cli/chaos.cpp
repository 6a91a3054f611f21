// `catena chaos`: a soak of the whole system under faults. It starts a local
// cluster (at least 5 brokers), creates a channel with several partitions
// (R=3), runs several producers and two live subscribers, and injects a
// random sequence of faults drawn from a seed:
//   kill       kill -9 of a broker, restarted at the same id and addresses
//              (a new, empty incarnation) a moment later
//   pause      SIGSTOP of a broker past the failure detector's timeout, SIGCONT
//   controller kill -9 of the controller and a restart from its log
//   publisher  a producer's Publisher destroyed with records in flight and
//              created again (same producer id, a new epoch)
//   cut        the broker or the controller (--cut) in its own network
//              namespace loses its link for 0.2-2 s, then gets it back
// Faults that take a broker away wait until every chain is back at full
// replication first, so no chain ever loses more than R-1 replicas: what the
// acknowledgement promises to survive. Afterwards every partition is read
// from the earliest offset by a fresh subscriber and the history is checked:
// every acknowledged record present exactly once at its acknowledged offset,
// each producer's records in order per partition, live subscribers'
// deliveries gap-free and duplicate-free.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/history.hpp>
#include <catena/broker/netns_link.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/thread_annotations.hpp>

#include "commands.hpp"

namespace catena::cli {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kLiveSubscribers = 2;
constexpr const char* kChaosChannel = "chaos";
constexpr std::array<const char*, 5> kKinds = {"kill", "pause", "controller", "publisher", "cut"};

// Record ids carry the producer in the high bits, its own count below.
constexpr int kProducerShift = 40;

std::string payload_of(std::uint64_t id) {
  std::string s = "chaos:" + std::to_string(id) + ":";
  s.resize(64, static_cast<char>('a' + id % 26));
  return s;
}

std::uint64_t id_of(std::span<const std::byte> p) {
  const char* c = reinterpret_cast<const char*>(p.data());
  if (p.size() < 7 || std::strncmp(c, "chaos:", 6) != 0) return ~0ull;
  return std::strtoull(c + 6, nullptr, 10);
}

// Per-producer order: a producer's acknowledged records in one partition
// must sit at increasing offsets in the order it published them.
class OrderCheck {
 public:
  void acked(std::uint64_t id, std::uint32_t partition, std::uint64_t offset) {
    MutexLock lk(mu_);
    acked_[{id >> kProducerShift, partition}][id] = offset;
    auto& end = ends_[partition];
    end = std::max(end, offset + 1);
  }
  // Per partition, one past the highest acknowledged offset.
  [[nodiscard]] std::map<std::uint32_t, std::uint64_t> acked_ends() const {
    MutexLock lk(mu_);
    return ends_;
  }
  [[nodiscard]] std::uint64_t reordered() const {
    MutexLock lk(mu_);
    std::uint64_t bad = 0;
    for (const auto& [key, by_id] : acked_) {
      std::uint64_t last = 0;
      bool first = true;
      for (const auto& [id, offset] : by_id) {  // ascending publish order
        if (!first && offset <= last) ++bad;
        last = offset;
        first = false;
      }
    }
    return bad;
  }

 private:
  mutable Mutex mu_;  // producers' threads ack, the main thread reads
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::map<std::uint64_t, std::uint64_t>> acked_
      GUARDED_BY(mu_);
  std::map<std::uint32_t, std::uint64_t> ends_ GUARDED_BY(mu_);
};

struct Producer {
  std::thread thread;
  std::atomic<bool> restart{false};
  std::atomic<std::uint64_t> restarts{0};
};

}  // namespace

void add_chaos_options(CLI::App& app, ChaosOptions& o) {
  app.add_option("--faults", o.faults, "faults to inject")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--seconds", o.seconds, "stop injecting after this long even if faults remain (0: no limit)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the fault schedule (0: random; printed)")->capture_default_str();
  app.add_option("--nodes", o.nodes, "brokers (at least 5)")->capture_default_str()->check(CLI::Range(5, 64));
  app.add_option("--partitions", o.partitions, "partitions of the channel")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--producers", o.producers, "publishing processes' worth of producers")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--interval-ms", o.interval_ms, "time between faults")->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms, "failure detector timeout of the cluster")
      ->capture_default_str();
  app.add_option("--dir", o.dir, "state and logs directory")->capture_default_str();
  app.add_option("--cut", o.cut,
                 "what network cuts isolate: broker, controller or none (cuts need root and iproute2; every "
                 "process then uses soft:tcp)")
      ->capture_default_str()
      ->check(CLI::IsMember({"broker", "controller", "none"}));
  app.add_flag("--secure", o.secure,
               "the cluster requires an admin token (as `cluster up --secure`): every client, broker and "
               "restarted controller authenticates through the faults");
  app.add_flag("--json", o.json,
               "one JSON line: faults by kind, acked, lost, duplicated, misplaced, reordered, "
               "indeterminate");
}

int run_chaos(const Common& common, const ChaosOptions& o) {
  const std::uint64_t seed = o.seed != 0 ? o.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  ClusterOptions co;
  co.nodes = o.nodes;
  co.provider = common.provider;
  co.dir = o.dir;
  co.heartbeat_timeout_ms = o.timeout_ms;
  co.heartbeat_interval_ms = std::max(10, o.timeout_ms / 6);
  co.quiet = true;
  co.secure = o.secure;
  // The process a cut isolates runs in a network namespace joined to the
  // host by a veth pair; everything talks TCP (shared memory would cross
  // the namespace untouched).
  std::unique_ptr<NetnsLink> netns;
  std::string client_provider = common.provider;
  if (o.cut != "none") {
    std::string why;
    netns = NetnsLink::create(&why);
    if (!netns) {
      std::fprintf(stderr, "catena chaos: no network cuts (--cut none to silence this): %s\n", why.c_str());
    } else {
      co.provider = client_provider = "soft:tcp";
      co.host = netns->host_addr();
      const NodeLaunch inside{netns->exec_prefix(), netns->inner_addr(), {}, {}};
      if (o.cut == "controller") {
        co.controller_launch = inside;
      } else {
        co.node_launch[o.nodes - 1] = inside;
      }
    }
  }
  LocalCluster cluster(co);
  std::string err;
  if (!cluster.start(&err)) {
    std::fprintf(stderr, "catena chaos: %s\n", err.c_str());
    return 1;
  }
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  cco.token = cluster.admin_token();
  control::ControllerClient admin(cco);
  control::idl::ChannelConfig cfg;
  cfg.name = kChaosChannel;
  cfg.partitions = o.partitions;
  cfg.replication = 3;
  cfg.segment_bytes = 8 << 20;  // 8 slots: ~550k records of 64 bytes per partition
  cfg.ttl_ms = 3'600'000;
  if (auto ch = admin.create_channel(cfg); !ch) {
    std::fprintf(stderr, "catena chaos: create channel: %s\n", ch.error().describe().c_str());
    return 1;
  }

  HistoryChecker history(kLiveSubscribers + 1);  // the last one reads everything at the end
  OrderCheck order;
  std::atomic<bool> stop_subs{false}, stop_pubs{false};
  std::atomic<std::uint64_t> acked{0};
  std::mutex positions_mu;
  std::map<std::uint32_t, std::uint64_t> positions[kLiveSubscribers];  // partition -> next offset
  std::vector<std::thread> subs;
  for (int s = 0; s < kLiveSubscribers; ++s) {
    subs.emplace_back([&, s] {
      broker::ControllerRoutes routes(cco, "chaos-sub-" + std::to_string(s));
      SubscriberOptions so;
      so.provider = client_provider;
      so.read_from = s == 0 ? SubscriberOptions::ReadFrom::tail : SubscriberOptions::ReadFrom::head;
      auto sub = Subscriber::create(routes, kChaosChannel, so);
      if (!sub) return;
      sub.value()->on_notice([&, s](const Notice& n) {
        if (n.status == client::ErrorCode::data_lost)
          history.declare_lost(s, n.partition, n.lost_from, n.next_offset);
      });
      while (!stop_subs) {
        if (sub.value()->poll([&](const Message& m) {
              history.delivered(s, m.partition, m.offset, id_of(m.payload), m.payload);
              std::lock_guard lk(positions_mu);
              positions[s][m.partition] = m.offset + 1;
            }) == 0) {
          std::this_thread::sleep_for(200us);
        }
      }
    });
  }
  std::vector<std::unique_ptr<Producer>> producers;
  for (int p = 0; p < o.producers; ++p) producers.push_back(std::make_unique<Producer>());
  for (int p = 0; p < o.producers; ++p) {
    Producer& me = *producers[static_cast<std::size_t>(p)];
    me.thread = std::thread([&, p] {
      broker::ControllerRoutes routes(cco, "chaos-pub-" + std::to_string(p));
      std::uint64_t count = 0;
      const std::uint64_t producer_id = static_cast<std::uint64_t>(p + 1);
      while (!stop_pubs) {
        PublisherOptions po;
        po.provider = client_provider;
        po.producer_id = producer_id;  // the same id across restarts: each run gets a new epoch
        po.retry_timeout = 60s;
        auto pub = Publisher::create(routes, kChaosChannel, po);
        if (!pub) {
          std::this_thread::sleep_for(100ms);
          continue;
        }
        while (!stop_pubs && !me.restart.load()) {
          const std::uint64_t id = producer_id << kProducerShift | count;
          const std::string payload = payload_of(id);
          const auto bytes = std::span(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
          auto e = pub.value()->publish({}, bytes, [&, id](const PublishResult& r) {
            if (r.status == PublishStatus::ok) {
              history.acknowledged(id, r.partition, r.offset);
              order.acked(id, r.partition, r.offset);
              acked.fetch_add(1);
            } else {
              history.failed(id);
            }
          });
          if (e == client::ErrorCode::ok) {
            history.published(id, bytes);
            ++count;
          } else if (e != client::ErrorCode::backpressure) {
            history.published(id, bytes);
            history.failed(id);
            ++count;
          }
          pub.value()->poll();
          if (count % 4 == 0)
            std::this_thread::sleep_for(2ms);  // ~2k records/s: a steady stream, not a flood
        }
        if (stop_pubs) {
          pub.value()->flush(60s);
          break;
        }
        // Restart: records in flight are neither acknowledged nor refused
        // (indeterminate), as when a publishing process dies.
        me.restart = false;
        me.restarts.fetch_add(1);
      }
    });
  }

  auto wait = [](auto cond, std::chrono::milliseconds t) {
    const auto deadline = Clock::now() + t;
    while (!cond() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return cond();
  };
  // Every chain at full replication, nothing joining: a broker may go.
  auto healthy = [&] {
    auto info = admin.describe_channel(kChaosChannel);
    if (!info) return false;
    return std::all_of(info->routes.begin(), info->routes.end(), [](const control::idl::PartitionRoute& r) {
      return r.replicas.size() == 3 && r.joining.empty();
    });
  };

  std::map<std::string, std::uint64_t> by_kind;
  for (const char* k : kKinds) by_kind[k] = 0;
  const auto started = Clock::now();
  wait([&] { return acked.load() >= 1000; }, 30s);
  int injected = 0;
  std::uint64_t unhealthy_waits = 0;
  for (; injected < o.faults; ++injected) {
    if (o.seconds > 0 && Clock::now() - started > std::chrono::duration<double>(o.seconds)) break;
    std::string kind = kKinds[rng() % kKinds.size()];
    if (kind == "cut" && !netns) kind = "pause";
    if ((kind == "kill" || kind == "pause") && !wait(healthy, 20s)) ++unhealthy_waits;
    const std::size_t victim = rng() % cluster.nodes().size();
    if (kind == "kill") {
      cluster.signal_node(victim, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 400));
      if (!cluster.restart_node(victim, &err))
        std::fprintf(stderr, "catena chaos: restart: %s\n", err.c_str());
    } else if (kind == "pause") {
      cluster.signal_node(victim, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(o.timeout_ms / 2 + rng() % (3 * o.timeout_ms)));
      cluster.signal_node(victim, SIGCONT);
    } else if (kind == "cut") {
      std::string cut_err;
      if (!netns->cut(&cut_err)) std::fprintf(stderr, "catena chaos: cut: %s\n", cut_err.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 1800));
      if (!netns->heal(&cut_err)) std::fprintf(stderr, "catena chaos: heal: %s\n", cut_err.c_str());
    } else if (kind == "controller") {
      if (!cluster.restart_controller(&err))
        std::fprintf(stderr, "catena chaos: controller: %s\n", err.c_str());
    } else {
      producers[rng() % producers.size()]->restart = true;
    }
    ++by_kind[kind];
    if (!o.json) std::fprintf(stderr, "  fault %d/%d: %s\n", injected + 1, o.faults, kind.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
  }
  const double fault_seconds = std::chrono::duration<double>(Clock::now() - started).count();

  // Quiesce: stop publishing (flushing what is in flight), let the live
  // subscribers catch up, then read everything from the start.
  wait(healthy, 30s);
  stop_pubs = true;
  for (auto& p : producers) p->thread.join();
  // Live subscribers have caught up once each is past every partition's
  // highest acknowledged offset.
  const auto ends = order.acked_ends();
  wait(
      [&] {
        std::lock_guard lk(positions_mu);
        for (const auto& pos : positions) {
          for (const auto& [partition, end] : ends) {
            auto it = pos.find(partition);
            if (it == pos.end() || it->second < end) return false;
          }
        }
        return true;
      },
      60s);
  std::this_thread::sleep_for(300ms);  // duplicates, if any, arrive
  stop_subs = true;
  for (auto& t : subs) t.join();
  {
    broker::ControllerRoutes routes(cco, "chaos-reader");
    SubscriberOptions so;
    so.provider = client_provider;
    so.start = Start::earliest;
    auto reader = Subscriber::create(routes, kChaosChannel, so);
    // Read each partition up to its highest acknowledged offset. (Counting
    // deliveries would stop early: unacknowledged records that committed
    // are delivered too.)
    auto done = [&] {
      return std::all_of(ends.begin(), ends.end(),
                         [&](const auto& e) { return reader.value()->position(e.first) >= e.second; });
    };
    if (reader) {
      reader.value()->on_notice([&](const Notice& n) {
        if (n.status == client::ErrorCode::data_lost) {
          history.declare_lost(kLiveSubscribers, n.partition, n.lost_from, n.next_offset);
        }
      });
      auto last = Clock::now();
      while (!done() && Clock::now() - last < 30s) {
        const int n = reader.value()->poll([&](const Message& m) {
          history.delivered(kLiveSubscribers, m.partition, m.offset, id_of(m.payload), m.payload);
        });
        if (n > 0)
          last = Clock::now();
        else
          std::this_thread::sleep_for(200us);
      }
    }
  }
  const HistoryReport r = history.check();
  const std::uint64_t reordered = r.out_of_order + order.reordered();
  const std::uint64_t misplaced = r.offset_conflicts + r.corrupted + r.phantom;
  const std::uint64_t indeterminate = r.published - r.acknowledged - r.failed;
  const bool clean =
      r.lost == 0 && r.duplicated == 0 && misplaced == 0 && reordered == 0 && r.declared_lost == 0;
  if (o.json) {
    nlohmann::json faults = nlohmann::json::object();
    for (const auto& [k, n] : by_kind) faults[k] = n;
    nlohmann::json j{{"seed", seed},
                     {"nodes", o.nodes},
                     {"partitions", o.partitions},
                     {"producers", o.producers},
                     {"faults", faults},
                     {"faults_total", injected},
                     {"seconds", fault_seconds},
                     {"published", r.published},
                     {"acked", r.acknowledged},
                     {"failed", r.failed},
                     {"indeterminate", indeterminate},
                     {"lost", r.lost},
                     {"declared_lost", r.declared_lost},
                     {"duplicated", r.duplicated},
                     {"misplaced", misplaced},
                     {"reordered", reordered},
                     {"waits_for_health_timed_out", unhealthy_waits},
                     {"ok", clean}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf("chaos (seed %llu): %d faults in %.1f s (", static_cast<unsigned long long>(seed), injected,
                fault_seconds);
    bool first = true;
    for (const auto& [k, n] : by_kind) {
      std::printf("%s%s %llu", first ? "" : ", ", k.c_str(), static_cast<unsigned long long>(n));
      first = false;
    }
    std::printf(")\n  %s\n  reordered within a producer %llu, indeterminate %llu: %s\n", r.summary().c_str(),
                static_cast<unsigned long long>(order.reordered()),
                static_cast<unsigned long long>(indeterminate), clean ? "clean" : "VIOLATIONS");
  }
  return clean ? 0 : 1;
}

}  // namespace catena::cli
