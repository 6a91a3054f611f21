// `catena stat`: a live view of the cluster, one frame a second, built from
// the controller's clusterStatus (each node's heartbeat carries every
// replica's end and commit offsets and successor backlog) and its channel
// routes (each replica's role). Rates are the end offsets' growth between
// two frames. README "Metrics".
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>

#include "commands.hpp"

namespace catena::cli {
namespace {

using Key = std::tuple<std::string, std::int32_t, std::string>;  // channel, partition, node

struct Sample {
  control::idl::ClusterStatus status;
  std::map<Key, std::string> roles;
  std::chrono::steady_clock::time_point at;
};

bool take(control::ControllerClient& client, Sample* s, std::string* error) {
  auto st = client.cluster_status();
  if (!st) {
    *error = st.error().describe();
    return false;
  }
  auto channels = client.list_channels();
  if (!channels) {
    *error = channels.error().describe();
    return false;
  }
  s->status = std::move(st.value());
  s->roles.clear();
  for (const auto& ch : channels.value()) {
    for (const auto& r : ch.routes) {
      const std::size_t n = r.replicas.size();
      for (std::size_t i = 0; i < n; ++i) {
        s->roles[{r.channel, r.partition, r.replicas[i].node_id}] = i == 0       ? "head"
                                                                    : i + 1 == n ? "tail"
                                                                                 : "middle";
      }
      for (const auto& j : r.joining) s->roles[{r.channel, r.partition, j.node_id}] = "joining";
    }
  }
  s->at = std::chrono::steady_clock::now();
  return true;
}

nlohmann::json frame_json(const Common& c, const Sample& now, const Sample* before) {
  nlohmann::json out;
  out["controller"] = c.controller_address();
  std::map<Key, std::int64_t> prev_end;
  double dt = 0;
  if (before != nullptr) {
    dt = std::chrono::duration<double>(now.at - before->at).count();
    for (const auto& n : before->status.nodes) {
      for (const auto& p : n.stats.partitions)
        prev_end[{p.channel, p.partition, n.info.node_id}] = p.end_offset;
    }
  }
  nlohmann::json nodes = nlohmann::json::array();
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& n : now.status.nodes) {
    nodes.push_back({{"node", n.info.node_id},
                     {"state", control::idl::to_string(n.state)},
                     {"replicas", n.replicas},
                     {"segments", n.stats.segments},
                     {"bytes", n.stats.bytes},
                     {"heartbeat_ms_ago", n.last_heartbeat_ms_ago}});
    for (const auto& p : n.stats.partitions) {
      const Key k{p.channel, p.partition, n.info.node_id};
      auto role = now.roles.find(k);
      nlohmann::json j{{"channel", p.channel},
                       {"partition", p.partition},
                       {"node", n.info.node_id},
                       {"role", role == now.roles.end() ? "-" : role->second},
                       {"epoch", p.epoch},
                       {"end_offset", p.end_offset},
                       {"commit_offset", p.commit_offset},
                       {"uncommitted_records", p.end_offset - p.commit_offset},
                       {"successor_backlog_bytes", p.successor_backlog_bytes}};
      auto prev = prev_end.find(k);
      if (dt > 0 && prev != prev_end.end() && p.end_offset >= prev->second) {
        j["records_per_sec"] = static_cast<double>(p.end_offset - prev->second) / dt;
      } else {
        j["records_per_sec"] = nullptr;
      }
      parts.push_back(std::move(j));
    }
  }
  out["nodes"] = std::move(nodes);
  out["partitions"] = std::move(parts);
  return out;
}

void print_frame(const nlohmann::json& f) {
  const std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&t));
  std::printf("catena stat  controller %s  %zu node(s)  %s\n\n", f["controller"].get<std::string>().c_str(),
              f["nodes"].size(), when);
  std::printf("%-12s %-8s %8s %9s %14s %10s\n", "NODE", "STATE", "REPLICAS", "SEGMENTS", "BYTES",
              "HEARTBEAT");
  for (const auto& n : f["nodes"]) {
    std::printf("%-12s %-8s %8d %9lld %14lld %7lld ms\n", n["node"].get<std::string>().c_str(),
                n["state"].get<std::string>().c_str(), n["replicas"].get<int>(),
                static_cast<long long>(n["segments"].get<std::int64_t>()),
                static_cast<long long>(n["bytes"].get<std::int64_t>()),
                static_cast<long long>(n["heartbeat_ms_ago"].get<std::int64_t>()));
  }
  std::printf("\n%-24s %-12s %-7s %6s %12s %12s %10s %10s %12s\n", "CHANNEL/PARTITION", "NODE", "ROLE",
              "EPOCH", "END", "COMMIT", "UNCOMMIT", "REC/S", "BACKLOG(B)");
  for (const auto& p : f["partitions"]) {
    const std::string name =
        p["channel"].get<std::string>() + "/" + std::to_string(p["partition"].get<int>());
    const std::string rate = p["records_per_sec"].is_null()
                                 ? std::string("-")
                                 : std::to_string(static_cast<long long>(p["records_per_sec"].get<double>()));
    const auto backlog_bytes = p["successor_backlog_bytes"].get<std::int64_t>();
    const std::string backlog = backlog_bytes < 0 ? std::string("-") : std::to_string(backlog_bytes);
    std::printf("%-24s %-12s %-7s %6lld %12lld %12lld %10lld %10s %12s\n", name.c_str(),
                p["node"].get<std::string>().c_str(), p["role"].get<std::string>().c_str(),
                static_cast<long long>(p["epoch"].get<std::int64_t>()),
                static_cast<long long>(p["end_offset"].get<std::int64_t>()),
                static_cast<long long>(p["commit_offset"].get<std::int64_t>()),
                static_cast<long long>(p["uncommitted_records"].get<std::int64_t>()), rate.c_str(),
                backlog.c_str());
  }
  if (f["partitions"].empty()) std::printf("(no partition replicas reported yet)\n");
  std::fflush(stdout);
}

}  // namespace

void add_stat_options(CLI::App& cmd, StatOptions& o) {
  cmd.add_flag("--once", o.once, "print one frame (rates over one interval) and exit");
  cmd.add_flag("--json", o.json, "with --once: print the frame as JSON");
  cmd.add_option("--interval-ms", o.interval_ms, "time between frames (and the rates' window)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
}

int cluster_stat(const Common& c, const StatOptions& o) {
  if (o.json && !o.once) return fail("stat", "--json needs --once", kExitUsage);
  control::ControllerClient client(c.client_options());
  Sample before;
  Sample now;
  std::string error;
  if (!take(client, &before, &error)) return fail("stat", error);
  const auto interval = std::chrono::milliseconds(o.interval_ms);
  if (o.once) {
    if (o.interval_ms > 0) {
      std::this_thread::sleep_for(interval);
      if (!take(client, &now, &error)) return fail("stat", error);
    } else {
      now = before;
    }
    const auto f = frame_json(c, now, o.interval_ms > 0 ? &before : nullptr);
    if (o.json) {
      std::printf("%s\n", f.dump().c_str());
    } else {
      print_frame(f);
    }
    return 0;
  }
  for (;;) {
    std::this_thread::sleep_for(interval);
    if (!take(client, &now, &error)) return fail("stat", error);
    std::printf("\033[H\033[2J");  // home, clear: a full-screen view
    print_frame(frame_json(c, now, &before));
    before = std::move(now);
  }
}

}  // namespace catena::cli
