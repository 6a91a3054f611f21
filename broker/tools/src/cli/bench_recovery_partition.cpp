// The partition level of `catena bench --recovery`: a replica link that
// breaks is rebuilt in place by the node's data-plane thread, without the
// controller. Three brokers in this process, each on a fault-injecting
// provider over --provider, and eight partitions of one channel (R=3) laid
// out by hand so that exactly one partition's link runs from node-2 to
// node-0; a transport error is injected on that link (FaultInjector::
// break_peer) `breaks` times under traffic on every partition.
//   recovery_ms   the median, over the breaks, of the time from the break to
//                 the partition's links all up again (broker stats);
//   bytes_copied  what node-2 sent on that partition from each break until
//                 it was linked again, summed: the re-sent tail (plus the
//                 few records published meanwhile);
//   lost, duplicated  the history checker over every acknowledged record of
//                 every partition, read by a subscriber throughout;
//   others_unlinked  stats samples (one per pass, every ~2 ms) in which
//                 another partition had a link down: 0 means the fault
//                 stayed in its partition.
// The same set-up is the test PartitionFault.* (catena-broker-test).
#include <algorithm>
#include <array>
#include <span>
#include <thread>

#include <catena/broker/broker.hpp>
#include <catena/fabric/fault_provider.hpp>

#include "bench_parts.hpp"

namespace catena::cli::bench_detail {

using namespace std::chrono_literals;

namespace {

constexpr const char* kChannel = "recovery-partition";
constexpr std::uint32_t kPartitions = 8;
constexpr std::uint32_t kFaulted = 7;
constexpr std::uint32_t kSegment = 512u << 10;
constexpr int kBreaker = 2;  // the faulted link's predecessor
constexpr int kTarget = 0;   // and its successor
// Head first. Only partition 7 has a node-2 -> node-0 link.
constexpr std::array<std::array<int, 3>, kPartitions> kChains = {{
    {0, 1, 2},
    {1, 0, 2},
    {2, 1, 0},
    {0, 2, 1},
    {0, 1, 2},
    {1, 0, 2},
    {2, 1, 0},
    {1, 2, 0},
}};

using Snapshot = std::array<broker::NodeStats, 3>;

std::size_t idx(int i) {
  return static_cast<std::size_t>(i);
}

const chain::ReplicaStats* replica_in(const Snapshot& s, int b, std::uint32_t p) {
  for (const auto& ps : s[idx(b)].partitions) {
    if (ps.channel == kChannel && ps.partition == p) return &ps.replica;
  }
  return nullptr;
}

bool linked(const Snapshot& s, std::uint32_t p) {
  const auto& order = kChains[p];
  for (std::size_t pos = 0; pos < 3; ++pos) {
    const auto* r = replica_in(s, order[pos], p);
    if (r == nullptr) return false;
    if (pos < 2 && !r->successor_connected) return false;
    if (pos > 0 && !r->predecessor_connected) return false;
  }
  return true;
}

}  // namespace

LevelResult partition_level(const std::string& provider, int breaks) {
  LevelResult out;
  out.level = "partition";
  std::vector<std::shared_ptr<fabric::FaultInjector>> faults;
  std::vector<std::unique_ptr<broker::Broker>> brokers;
  for (int i = 0; i < 3; ++i) {
    auto inner = fabric::Provider::open(provider);
    if (!inner) {
      out.error = inner.error().message;
      return out;
    }
    auto injector = std::make_shared<fabric::FaultInjector>();
    broker::BrokerConfig cfg;
    cfg.node_id = "node-" + std::to_string(i);
    cfg.slot_count = 8;
    auto b = broker::Broker::start(
        cfg, std::make_unique<fabric::FaultProvider>(std::move(inner.value()), injector));
    if (!b) {
      out.error = b.error().message;
      return out;
    }
    brokers.push_back(std::move(b.value()));
    faults.push_back(std::move(injector));
  }
  struct StopBrokers {
    std::vector<std::unique_ptr<broker::Broker>>& brokers;
    ~StopBrokers() {
      for (auto& b : brokers) b->stop();
    }
  } stop_brokers{brokers};

  // Tail first, so each replica's successor holds the partition when it dials.
  StaticRoutes routes;
  for (std::uint32_t p = 0; p < kPartitions; ++p) {
    const auto& order = kChains[p];
    Route route{kChannel, p, 1, {}, 0, {}};
    for (int i : order)
      route.replicas.push_back({brokers[idx(i)]->node_id(), brokers[idx(i)]->fabric_address()});
    for (int pos = 2; pos >= 0; --pos) {
      const auto at = static_cast<std::size_t>(pos);
      chain::ReplicaConfig rc;
      rc.channel = kChannel;
      rc.partition = p;
      rc.epoch = 1;
      rc.position = static_cast<std::uint32_t>(pos);
      rc.chain_length = 3;
      if (pos > 0) rc.predecessor_node = route.replicas[at - 1].node_id;
      if (pos < 2) {
        rc.successor_node = route.replicas[at + 1].node_id;
        rc.successor_addr = route.replicas[at + 1].fabric_addr;
      }
      rc.head_addr = route.replicas[0].fabric_addr;
      rc.log.segment_bytes = kSegment;
      rc.log.ttl_ns = 600'000'000'000ull;
      auto r = brokers[idx(order[at])]->configure(rc);
      if (r.status != broker::ConfigureStatus::applied) {
        out.error = "configuring partition " + std::to_string(p) + ": " + r.message;
        return out;
      }
    }
    routes.set(route, kPartitions, kSegment);
  }
  auto snapshot = [&] {
    Snapshot s;
    for (std::size_t i = 0; i < 3; ++i) s[i] = brokers[i]->stats();
    return s;
  };
  if (!wait_until(
          [&] {
            const Snapshot s = snapshot();
            for (std::uint32_t p = 0; p < kPartitions; ++p) {
              if (!linked(s, p)) return false;
            }
            return true;
          },
          10s)) {
    out.error = "the chains did not link within 10 s";
    return out;
  }

  PublisherOptions po;
  po.provider = provider;
  auto pub = Publisher::create(routes, kChannel, po);
  SubscriberOptions so;
  so.provider = provider;
  auto sub = Subscriber::create(routes, kChannel, so);
  if (!pub || !sub) {
    out.error = !pub ? pub.error().message : sub.error().message;
    return out;
  }
  HistoryChecker history(1);
  std::array<std::uint64_t, kPartitions> acked{};
  std::uint64_t next_id = 0, acked_total = 0, delivered = 0;
  std::int64_t others_unlinked = 0;
  bool publishing = true;
  // One pass: a record to every partition, the clients' polls, a stats sample.
  auto pass = [&] {
    for (std::uint32_t p = 0; p < kPartitions && publishing; ++p) {
      const std::uint64_t id = next_id;
      const std::string payload = tagged_record("rp", id, 48 + (id % 8) * 8);
      const auto bytes = std::span(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
      const auto e = pub.value()->publish_to(p, bytes, [&, id](const PublishResult& r) {
        if (r.status != PublishStatus::ok) {
          history.failed(id);
          return;
        }
        history.acknowledged(id, r.partition, r.offset);
        ++acked[r.partition];
        ++acked_total;
      });
      if (e == client::ErrorCode::ok) {
        history.published(id, bytes);
        ++next_id;
      }
    }
    pub.value()->poll();
    sub.value()->poll([&](const Message& m) {
      history.delivered(0, m.partition, m.offset, tagged_id("rp", m.payload), m.payload);
      ++delivered;
    });
    const Snapshot s = snapshot();
    for (std::uint32_t p = 0; p < kPartitions; ++p) {
      if (p != kFaulted && !linked(s, p)) ++others_unlinked;
    }
    std::this_thread::sleep_for(50us);
  };
  auto pass_until = [&](const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!cond() && std::chrono::steady_clock::now() < deadline) pass();
    return cond();
  };
  auto all_acked = [&](std::uint64_t n) {
    return std::all_of(acked.begin(), acked.end(), [n](std::uint64_t a) { return a >= n; });
  };

  bool ok = pass_until([&] { return all_acked(300); }, 30s);
  if (!ok) out.error = "300 records per partition not acknowledged within 30 s";
  const std::string target = brokers[idx(kTarget)]->fabric_address();
  std::vector<double> times;
  for (int k = 0; ok && k < breaks; ++k) {
    const std::uint64_t acked_before = acked[kFaulted];
    const Snapshot s0 = snapshot();
    const auto* before = replica_in(s0, kBreaker, kFaulted);
    const std::uint64_t forwarded_before = before ? before->forwarded_bytes : 0;
    const auto t0 = std::chrono::steady_clock::now();
    faults[idx(kBreaker)]->break_peer(target);
    // Stats are refreshed every ~2 ms: from 5 ms on, a linked partition is
    // the new link, not the broken one.
    const auto fresh = t0 + 5ms;
    ok = pass_until([&] { return std::chrono::steady_clock::now() >= fresh && linked(snapshot(), kFaulted); },
                    10s);
    if (!ok) {
      out.error = "break " + std::to_string(k + 1) + ": the partition did not link again within 10 s";
      break;
    }
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    const Snapshot s1 = snapshot();
    if (const auto* r = replica_in(s1, kBreaker, kFaulted)) {
      out.bytes_copied += static_cast<std::int64_t>(r->forwarded_bytes - forwarded_before);
    }
    ok = pass_until([&] { return acked[kFaulted] >= acked_before + 300; }, 20s);
    if (!ok) out.error = "break " + std::to_string(k + 1) + ": the partition made no progress after it";
  }
  publishing = false;
  pub.value()->flush(30s);
  pass_until([&] { return delivered >= acked_total; }, 30s);
  const auto settle = std::chrono::steady_clock::now() + 200ms;  // late duplicates, if any
  pass_until([&] { return std::chrono::steady_clock::now() >= settle; }, 1s);
  std::sort(times.begin(), times.end());
  if (!times.empty()) out.recovery_ms = times[times.size() / 2];
  out.extra["breaks"] = static_cast<std::int64_t>(times.size());
  out.extra["others_unlinked"] = others_unlinked;
  out.extra["partitions"] = kPartitions;
  out.history = history.check();
  out.ok = ok && others_unlinked == 0;
  if (ok && others_unlinked != 0) out.error = "another partition had a link down during the breaks";
  return out;
}

}  // namespace catena::cli::bench_detail
