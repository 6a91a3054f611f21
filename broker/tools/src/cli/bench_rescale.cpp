// `catena bench --rescale`: what changing a channel's partition count costs
// while keyed traffic flows. Starts its own local cluster (--nodes brokers,
// chains of --replicas), a channel of --partitions partitions, one publisher
// publishing records of --keys keys at a steady rate (each record names its
// key and its sequence within the key) and one subscriber reading every
// partition, then alters the channel to each count of --alters in turn, one
// a second. A subscriber group of --members members reads the channel too;
// after each alter's call returns, a member joins (after the even ones) or
// the oldest leaves (after the odd ones): a rebalance per alter, while
// members may still be held at the alter's markers.
//
// Per alter: how long alterChannel took (until every marker committed), the
// longest pause between consecutive acknowledgements and between
// consecutive deliveries from its start to a second after it returned. At
// the end, from what was delivered: acknowledged records never delivered
// (lost), delivered twice (duplicated), and per key a record delivered
// after a later record of the same key (order violations); for the group
// the same, in the order its members delivered (one lock across them).
//
// --fault kill-broker | restart-controller: 20 ms into each alter, the head
// of partition 0 is killed with SIGKILL (its chain is repaired onto a spare:
// the cluster gets one broker more than the chains need) or the controller
// is killed and started again. A killed broker is started again (empty)
// once the alter completed. An alter that fails for it is asked again
// (the same count finishes the open generation) until it completes.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fmt/format.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
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

constexpr std::size_t kRescaleMaxRecords = 1u << 20;
constexpr const char* kRescaleChannel = "rescale-bench";

struct Alter {
  int to = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  double ack_gap_ms = 0, delivery_gap_ms = 0;
  std::string error;
};

// Record id -> key, sequence within the key: "rs:<id>:<key>:<seq>:".
std::string keyed_record(std::uint64_t id, int key, std::uint64_t seq) {
  return "rs:" + std::to_string(id) + ":" + std::to_string(key) + ":" + std::to_string(seq) + ":";
}

}  // namespace

bool bench_detail::parse_keyed(std::span<const std::byte> payload, int* key, std::uint64_t* seq) {
  const std::string_view s(reinterpret_cast<const char*>(payload.data()), payload.size());
  std::size_t at = s.find(':', 3);  // past "rs:<id>"
  std::uint64_t fields[2] = {0, 0};
  for (auto& f : fields) {
    if (at == std::string_view::npos) return false;
    const std::size_t end = s.find(':', at + 1);
    if (end == std::string_view::npos || end == at + 1) return false;
    for (std::size_t i = at + 1; i < end; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      f = f * 10 + static_cast<std::uint64_t>(s[i] - '0');
    }
    at = end;
  }
  *key = static_cast<int>(fields[0]);
  *seq = fields[1];
  return true;
}

namespace {

// The longest gap between consecutive times (sorted) that ends in [from, to].
double longest_gap_ms(const std::vector<std::uint64_t>& sorted, std::uint64_t from, std::uint64_t to) {
  std::uint64_t gap = 0;
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i] >= from && sorted[i - 1] <= to) gap = std::max(gap, sorted[i] - sorted[i - 1]);
  }
  return static_cast<double>(gap) / 1e6;
}

}  // namespace

int run_rescale_bench(const Common& common, const BenchOptions& o) {
  std::vector<int> counts;
  try {
    counts = bench_detail::parse_partition_counts(o.alters, "--alters");
  } catch (const Fail& f) {
    std::fprintf(stderr, "catena: bench --rescale: %s\n", f.what.c_str());
    return 2;
  }
  if (o.fault != "none" && o.fault != "kill-broker" && o.fault != "restart-controller") {
    std::fprintf(stderr,
                 "catena: bench --rescale: --fault must be none, kill-broker or restart-controller\n");
    return 2;
  }
  std::FILE* info = o.json ? stderr : stdout;
  ClusterOptions co;
  co.nodes = std::max(o.nodes, o.replicas + (o.fault == "kill-broker" ? 1 : 0));
  co.provider = common.provider;
  co.dir = o.dir + "/rescale";
  co.quiet = true;
  co.secure = o.secure;
  LocalCluster cluster(co);
  std::string err;
  if (!cluster.start(&err)) {
    std::fprintf(stderr, "catena: bench --rescale: %s\n", err.c_str());
    return 1;
  }
  control::ControllerClient::Options cco;
  cco.address = cluster.controller_address();
  cco.token = cluster.admin_token();
  cco.rpc_timeout = 30s;
  control::ControllerClient admin(cco);
  idl::ChannelConfig cfg;
  cfg.name = kRescaleChannel;
  cfg.partitions = o.partitions;
  cfg.replication = o.replicas;
  cfg.segment_bytes = 4 << 20;
  cfg.ttl_ms = 600000;  // longer than the run: nothing expires
  if (auto ch = admin.create_channel(cfg); !ch) {
    std::fprintf(stderr, "catena: bench --rescale: create channel: %s\n", ch.error().describe().c_str());
    return 1;
  }
  std::fprintf(info,
               "catena bench --rescale: %d brokers, chains of %d, %d partitions, %d keys, provider %s\n",
               co.nodes, o.replicas, o.partitions, o.keys, common.provider.c_str());

  // Per record id: acknowledged (the publisher's callback), times delivered
  // (the subscriber); each thread writes only its own, read after both end.
  std::vector<std::uint8_t> acked_id(kRescaleMaxRecords, 0), delivered_id(kRescaleMaxRecords, 0);
  std::vector<std::uint64_t> ack_times, delivery_times;
  ack_times.reserve(kRescaleMaxRecords);
  delivery_times.reserve(kRescaleMaxRecords);
  std::vector<std::int64_t> last_seq(static_cast<std::size_t>(o.keys), -1);
  // Where each record was first delivered, and the first few duplicates and
  // order violations (partition@offset), for the report.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> first_at(kRescaleMaxRecords);
  std::vector<std::string> anomalies;
  constexpr std::size_t kAnomaliesShown = 8;
  std::uint64_t order_violations = 0, foreign = 0;
  std::atomic<bool> stop_sub{false}, stop_pub{false}, pub_done{false}, sub_ready{false};
  std::atomic<std::uint64_t> acked{0}, delivered{0}, failed{0}, published{0};
  std::string setup_error;

  std::thread sub_thread([&] {
    broker::ControllerRoutes routes(cco, "rescale-bench-sub");
    SubscriberOptions so;
    so.provider = common.provider;
    auto sub = Subscriber::create(routes, kRescaleChannel, so);
    if (!sub) setup_error = "subscriber: " + sub.error().message;
    sub_ready = true;
    if (!sub) return;
    while (!stop_sub) {
      const int n = sub.value()->poll([&](const Message& m) {
        const std::uint64_t id = tagged_id("rs", m.payload);
        int key = 0;
        std::uint64_t seq = 0;
        if (id >= kRescaleMaxRecords || !parse_keyed(m.payload, &key, &seq) || key >= o.keys) {
          ++foreign;
          return;
        }
        delivery_times.push_back(steady_ns());
        if (delivered_id[id] == 0) first_at[id] = {m.partition, m.offset};
        if (delivered_id[id] > 0 && anomalies.size() < kAnomaliesShown) {
          anomalies.push_back(fmt::format("record {} delivered again: {}@{}, first {}@{}", id, m.partition,
                                          m.offset, first_at[id].first, first_at[id].second));
        }
        if (delivered_id[id] < 255) ++delivered_id[id];
        auto& last = last_seq[static_cast<std::size_t>(key)];
        if (static_cast<std::int64_t>(seq) < last && anomalies.size() < kAnomaliesShown) {
          anomalies.push_back(fmt::format("key {}: sequence {} at {}@{} after sequence {}", key, seq,
                                          m.partition, m.offset, last));
        }
        if (static_cast<std::int64_t>(seq) < last) ++order_violations;
        last = std::max(last, static_cast<std::int64_t>(seq));
        delivered.fetch_add(1);
      });
      if (n == 0) std::this_thread::sleep_for(50us);
    }
  });
  while (!sub_ready) std::this_thread::sleep_for(1ms);
  std::optional<RescaleGroup> group;
  if (o.members > 0 && setup_error.empty()) {
    group.emplace(cco, common.provider, kRescaleChannel, kRescaleMaxRecords, o.keys);
    for (int i = 0; i < o.members && setup_error.empty(); ++i) setup_error = group->join();
  }
  if (!setup_error.empty()) stop_pub = true;
  std::thread pub_thread([&] {
    broker::ControllerRoutes routes(cco, "rescale-bench-pub");
    PublisherOptions po;
    po.provider = common.provider;
    po.retry_timeout = 60s;  // through a fault's repair
    auto pub = Publisher::create(routes, kRescaleChannel, po);
    if (!pub || stop_pub) {
      if (!pub) setup_error = "publisher: " + pub.error().message;
      pub_done = true;
      return;
    }
    std::vector<std::uint64_t> next_seq(static_cast<std::size_t>(o.keys), 0);
    std::uint64_t id = 0;
    while (!stop_pub && id < kRescaleMaxRecords) {
      const int key = static_cast<int>(id % static_cast<std::uint64_t>(o.keys));
      const std::string k = "key-" + std::to_string(key);
      const std::uint64_t seq = next_seq[static_cast<std::size_t>(key)];
      const std::string p = keyed_record(id, key, seq);
      auto e = pub.value()->publish(std::as_bytes(std::span(k)), std::as_bytes(std::span(p)),
                                    [&, id](const PublishResult& res) {
                                      if (res.status != PublishStatus::ok) {
                                        failed.fetch_add(1);
                                        return;
                                      }
                                      acked_id[id] = 1;
                                      ack_times.push_back(steady_ns());
                                      acked.fetch_add(1);
                                    });
      if (e == client::ErrorCode::ok) {
        ++next_seq[static_cast<std::size_t>(key)];
        ++id;
        published.store(id);
      }
      pub.value()->poll();
      std::this_thread::sleep_for(50us);  // a steady stream, about a record per 100 us
    }
    pub.value()->flush(30s);
    pub_done = true;
  });

  std::vector<Alter> alters;
  std::string error;
  if (!wait_until([&] { return acked.load() >= 2000 || pub_done.load(); }, 20s) || pub_done.load()) {
    error = setup_error.empty() ? "no steady acknowledgements within 20 s" : setup_error;
  }
  int faults = 0, rebalances = 0;
  for (const int to : counts) {
    if (!error.empty()) break;
    Alter a;
    a.to = to;
    std::optional<std::thread> fault;
    std::string fault_error;
    std::optional<std::size_t> killed;
    if (o.fault != "none") {
      std::string head;
      if (auto rt = admin.get_route(kRescaleChannel, 0, 0); rt && !rt->replicas.empty())
        head = rt->replicas.front().node_id;
      fault.emplace([&, head] {
        std::this_thread::sleep_for(20ms);
        if (o.fault == "restart-controller") {
          if (!cluster.restart_controller(&fault_error)) return;
        } else {
          const auto& nodes = cluster.nodes();
          for (std::size_t i = 0; i < nodes.size(); ++i) {
            if (nodes[i].node_id == head && cluster.node_running(i)) {
              cluster.signal_node(i, SIGKILL);
              killed = i;
              return;
            }
          }
          fault_error = "no running broker heads partition 0 (" + head + ")";
        }
      });
    }
    a.start_ns = steady_ns();
    // A fault may fail the call: ask again until the generation completes.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      auto res = admin.alter_channel(kRescaleChannel, to);
      if (res) break;
      // The call's answer was lost, not the alter: it may have completed.
      if (auto ch = admin.describe_channel(kRescaleChannel);
          ch && ch->config.partitions == to && !ch->generations.empty() && ch->generations.back().complete)
        break;
      if (std::chrono::steady_clock::now() > deadline || o.fault == "none") {
        error = "alter to " + std::to_string(to) + ": " + res.error().describe();
        break;
      }
      std::this_thread::sleep_for(200ms);
    }
    a.end_ns = steady_ns();
    if (fault) {
      fault->join();
      if (!fault_error.empty() && error.empty()) error = "fault: " + fault_error;
      ++faults;
      // The killed broker comes back empty, a spare for the next alter's kill.
      if (killed && error.empty() && !cluster.restart_node(*killed, &fault_error))
        error = "restarting the killed broker: " + fault_error;
    }
    if (!error.empty()) break;
    alters.push_back(a);
    if (group) {
      if (alters.size() % 2 == 1) {
        error = group->join();
      } else {
        group->leave_oldest();
      }
      ++rebalances;
    }
    std::this_thread::sleep_for(1s);
  }
  stop_pub = true;
  wait_until([&] { return pub_done.load(); }, 40s);
  wait_until(
      [&] { return delivered.load() >= acked.load() && (!group || group->delivered() >= acked.load()); },
      20s);
  std::this_thread::sleep_for(100ms);
  stop_sub = true;
  pub_thread.join();
  sub_thread.join();
  RescaleGroup::Result in_group;
  const std::size_t members_at_end = group ? group->members() : 0;
  if (group) {
    group->leave_all();
    in_group = group->check(acked_id, published.load());
    anomalies.insert(anomalies.end(), in_group.anomalies.begin(), in_group.anomalies.end());
  }

  std::sort(ack_times.begin(), ack_times.end());
  std::sort(delivery_times.begin(), delivery_times.end());
  for (auto& a : alters) {
    a.ack_gap_ms = longest_gap_ms(ack_times, a.start_ns, a.end_ns + 1'000'000'000ull);
    a.delivery_gap_ms = longest_gap_ms(delivery_times, a.start_ns, a.end_ns + 1'000'000'000ull);
  }
  std::uint64_t lost = 0, duplicated = 0;
  const std::uint64_t n = published.load();
  for (std::uint64_t id = 0; id < n; ++id) {
    if (acked_id[id] != 0 && delivered_id[id] == 0) ++lost;
    if (delivered_id[id] > 1) ++duplicated;
  }
  std::vector<double> alter_ms, ack_gaps, delivery_gaps;
  for (const auto& a : alters) {
    alter_ms.push_back(static_cast<double>(a.end_ns - a.start_ns) / 1e6);
    ack_gaps.push_back(a.ack_gap_ms);
    delivery_gaps.push_back(a.delivery_gap_ms);
  }
  auto pct = [](std::vector<double> v, double q) { return bench::quantile(std::move(v), q); };
  // Whom each change reached, as its generation recorded it.
  std::vector<double> messages, told;
  if (auto ch = admin.describe_channel(kRescaleChannel)) {
    for (const auto& g : ch->generations) {
      if (g.generation == 0 || !g.complete) continue;
      messages.push_back(g.control_messages);
      told.push_back(g.nodes_told);
    }
  }

  // The publisher, the subscriber, and every group member that ever joined.
  const int clients = 2 + o.members + (rebalances + 1) / 2;
  if (o.json) {
    nlohmann::json per_alter = nlohmann::json::array();
    for (std::size_t i = 0; i < alters.size(); ++i) {
      per_alter.push_back({{"to", alters[i].to},
                           {"alter_ms", alter_ms[i]},
                           {"ack_gap_ms", alters[i].ack_gap_ms},
                           {"delivery_gap_ms", alters[i].delivery_gap_ms}});
    }
    nlohmann::json j{{"system", "catena"},
                     {"mode", "rescale"},
                     {"provider", common.provider},
                     {"nodes", co.nodes},
                     {"replicas", o.replicas},
                     {"partitions", o.partitions},
                     {"keys", o.keys},
                     {"alters", alters.size()},
                     {"rescales", messages.size()},
                     {"control_messages_per_change", pct(messages, 0.5)},
                     {"nodes_told_per_change", pct(told, 0.5)},
                     {"nodes_told_max", pct(told, 1.0)},
                     {"cluster_nodes", cluster.nodes().size()},
                     {"clients", clients},
                     {"clients_told", 0},
                     {"fault", o.fault},
                     {"faults", faults},
                     {"alter_ms_p50", pct(alter_ms, 0.5)},
                     {"ack_gap_max_ms", pct(ack_gaps, 1.0)},
                     {"delivery_gap_max_ms", pct(delivery_gaps, 1.0)},
                     {"published", n},
                     {"acked", acked.load()},
                     {"failed", failed.load()},
                     {"lost", lost + in_group.lost},
                     {"duplicated", duplicated + in_group.duplicated},
                     {"order_violations", order_violations + in_group.order_violations},
                     {"rebalances", rebalances},
                     {"group",
                      {{"members", o.members},
                       {"members_at_end", members_at_end},
                       {"lost", in_group.lost},
                       {"duplicated", in_group.duplicated},
                       {"order_violations", in_group.order_violations}}},
                     {"loadavg_1m", load_average()},
                     {"per_alter", per_alter}};
    if (!error.empty()) j["error"] = error;
    std::cout << j.dump() << std::endl;
  } else {
    int from = o.partitions;
    for (std::size_t i = 0; i < alters.size(); ++i) {
      std::printf(
          "alter %d -> %d partitions: call %.1f ms, longest ack gap %.1f ms, longest delivery gap %.1f ms\n",
          from, alters[i].to, alter_ms[i], alters[i].ack_gap_ms, alters[i].delivery_gap_ms);
      from = alters[i].to;
    }
    std::printf(
        "per change: %.0f control message(s) to %.0f node(s) (p50; at most %.0f) of %zu; 0 of %d "
        "clients told\n",
        pct(messages, 0.5), pct(told, 0.5), pct(told, 1.0), cluster.nodes().size(), clients);
    std::printf(
        "%zu alters: call p50 %.1f ms, ack gap max %.1f ms, delivery gap max %.1f ms; %llu published, %llu "
        "acked, %llu failed, lost %llu, duplicated %llu, per-key order violations %llu\n",
        alters.size(), pct(alter_ms, 0.5), pct(ack_gaps, 1.0), pct(delivery_gaps, 1.0),
        static_cast<unsigned long long>(n), static_cast<unsigned long long>(acked.load()),
        static_cast<unsigned long long>(failed.load()), static_cast<unsigned long long>(lost),
        static_cast<unsigned long long>(duplicated), static_cast<unsigned long long>(order_violations));
    if (group) {
      std::printf(
          "group of %d member(s), %d rebalance(s) (%zu at the end): lost %llu, duplicated %llu, per-key "
          "order "
          "violations %llu\n",
          o.members, rebalances, members_at_end, static_cast<unsigned long long>(in_group.lost),
          static_cast<unsigned long long>(in_group.duplicated),
          static_cast<unsigned long long>(in_group.order_violations));
    }
  }
  for (const auto& a : anomalies) std::fprintf(stderr, "catena: bench --rescale: %s\n", a.c_str());
  if (foreign > 0)
    std::fprintf(stderr, "catena: bench --rescale: %llu records not the bench's\n",
                 static_cast<unsigned long long>(foreign));
  if (!error.empty()) std::fprintf(stderr, "catena: bench --rescale: %s\n", error.c_str());
  const bool ok = error.empty() && alters.size() == counts.size() && lost == 0 && duplicated == 0 &&
                  order_violations == 0 && failed.load() == 0 && in_group.lost == 0 &&
                  in_group.duplicated == 0 && in_group.order_violations == 0;
  return ok ? 0 : 1;
}

}  // namespace catena::cli
