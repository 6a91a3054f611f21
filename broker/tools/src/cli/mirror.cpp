// `catena mirror create|run|status|map`: a channel mirrored to a second
// cluster (catena/broker/mirror.hpp), the datacenter level of recovery.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <catena/broker/mirror.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/control/tenants.hpp>

#include "commands.hpp"
#include "output.hpp"

namespace catena::cli {
namespace {

std::atomic<Mirror*> g_running{nullptr};

void on_stop_signal(int /*sig*/) {
  if (Mirror* m = g_running.load()) m->stop();
}

std::string state_dir_of(const MirrorCommands& o) {
  if (!o.state_dir.empty()) return o.state_dir;
  if (const char* env = std::getenv("CATENA_MIRROR_DIR"); env && *env) return env;
  return "catena-mirrors";
}

std::uint64_t now_unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// The destination cluster's token: --to-token-file, else
// $CATENA_MIRROR_TO_TOKEN, else none. Nullopt (after saying why) if the file
// cannot be read.
std::optional<std::string> destination_token(const MirrorCommands& o) {
  if (!o.to_token_file.empty()) {
    auto t = control::read_token_file(o.to_token_file);
    if (!t) {
      std::fprintf(stderr, "catena: mirror: %s\n", t.error().describe().c_str());
      return std::nullopt;
    }
    return *t;
  }
  if (const char* env = std::getenv("CATENA_MIRROR_TO_TOKEN"); env != nullptr) return std::string(env);
  return std::string();
}

int run_mirror(const Common& c, const MirrorCommands& o, const std::string& name) {
  const auto to_token = destination_token(o);
  if (!to_token) return kExitUsage;
  MirrorOptions mo;
  mo.provider = c.provider;
  mo.source_token = c.token_value();
  mo.destination_token = *to_token;
  mo.state_dir = state_dir_of(o);
  mo.save_interval = std::chrono::milliseconds(o.save_interval_ms);
  auto m = Mirror::open(name, mo);
  if (!m) return fail("mirror run " + name, m.error());
  g_running.store(m->get());
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  const auto st = m.value()->state();
  std::fprintf(stderr, "catena: mirroring %s from %s to %s (state %s); Ctrl-C stops\n", st.channel.c_str(),
               st.source.c_str(), st.destination.c_str(), mirror_state_path(mo.state_dir, name).c_str());
  auto r = m.value()->run();
  g_running.store(nullptr);
  if (!r) return fail("mirror run " + name, r.error());
  return 0;
}

// The source partitions' committed ends now (empty if the source cannot be
// reached).
std::vector<std::int64_t> source_ends(const MirrorState& st, const std::string& token) {
  control::ControllerClient::Options co;
  co.address = st.source;
  co.token = token;
  co.connect_timeout = std::chrono::milliseconds(500);
  co.rpc_timeout = std::chrono::milliseconds(2000);
  control::ControllerClient client(co);
  auto status = client.cluster_status();
  if (!status) return {};
  std::vector<std::int64_t> end(st.partitions.size(), 0);
  for (const auto& n : status->nodes) {
    for (const auto& p : n.stats.partitions) {
      if (p.channel == st.channel && p.partition >= 0 && static_cast<std::size_t>(p.partition) < end.size())
        end[static_cast<std::size_t>(p.partition)] =
            std::max(end[static_cast<std::size_t>(p.partition)], p.commit_offset);
    }
  }
  return end;
}

// A partition's source end (the newer of the state's and the source's
// commit offset, when the source answered) and how far the mirror is behind it.
std::pair<std::uint64_t, std::uint64_t> end_and_lag(const MirrorPartition& p,
                                                    const std::vector<std::int64_t>& ends, std::size_t i) {
  std::uint64_t end = p.source_end;
  if (!ends.empty()) end = std::max(end, static_cast<std::uint64_t>(ends[i]));
  return {end, end > p.next.source ? end - p.next.source : 0};
}

// One mirror's status, as `mirror status --json` prints it in "mirrors".
nlohmann::json status_json(const MirrorState& st, const std::vector<std::int64_t>& ends) {
  const auto age = now_unix_ms() > st.updated_unix_ms ? now_unix_ms() - st.updated_unix_ms : 0;
  nlohmann::json parts = nlohmann::json::array();
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < st.partitions.size(); ++i) {
    const auto& p = st.partitions[i];
    const auto [end, lag] = end_and_lag(p, ends, i);
    total += lag;
    nlohmann::json last_run = nullptr;
    if (!p.runs.empty()) {
      last_run = {{"source", p.runs.back().source}, {"destination", p.runs.back().destination}};
    }
    parts.push_back({{"partition", i},
                     {"source_end", end},
                     {"mirrored", p.next.source},
                     {"destination_next", p.next.destination},
                     {"lag", lag},
                     {"lag_ms", lag > 0 ? p.lag_ms : 0},
                     {"last_run", std::move(last_run)}});
  }
  return {{"name", st.name},     {"channel", st.channel},
          {"source", st.source}, {"destination", st.destination},
          {"state_age_ms", age}, {"source_reachable", !ends.empty()},
          {"lag", total},        {"partitions", std::move(parts)}};
}

void print_status(const MirrorState& st, const std::vector<std::int64_t>& ends) {
  const auto age = now_unix_ms() > st.updated_unix_ms ? now_unix_ms() - st.updated_unix_ms : 0;
  std::printf("mirror %s  channel %s  %s -> %s  state saved %llu ms ago%s\n", st.name.c_str(),
              st.channel.c_str(), st.source.c_str(), st.destination.c_str(),
              static_cast<unsigned long long>(age),
              ends.empty() ? "  (source unreachable: its end as last seen)" : "");
  std::printf("  %-9s  %14s  %14s  %12s  %10s  %8s  %s\n", "partition", "source end", "mirrored", "dest next",
              "lag", "lag ms", "offset map (last run: source -> destination)");
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < st.partitions.size(); ++i) {
    const auto& p = st.partitions[i];
    const auto [end, lag] = end_and_lag(p, ends, i);
    total += lag;
    const MirrorPair run = p.runs.empty() ? MirrorPair{} : p.runs.back();
    std::printf("  %-9zu  %14llu  %14llu  %12llu  %10llu  %8llu  %llu -> %llu (next %llu -> %llu)\n", i,
                static_cast<unsigned long long>(end), static_cast<unsigned long long>(p.next.source),
                static_cast<unsigned long long>(p.next.destination), static_cast<unsigned long long>(lag),
                static_cast<unsigned long long>(lag > 0 ? p.lag_ms : 0),
                static_cast<unsigned long long>(run.source), static_cast<unsigned long long>(run.destination),
                static_cast<unsigned long long>(p.next.source),
                static_cast<unsigned long long>(p.next.destination));
  }
  std::printf("  lag %llu records: what losing the source now would lose (the recovery point)\n",
              static_cast<unsigned long long>(total));
}

// A mirror whose state file is missing is not found; one that cannot be
// read is an error.
int mirror_load_code(const std::string& dir, const std::string& name) {
  std::error_code ec;
  return std::filesystem::exists(mirror_state_path(dir, name), ec) ? kExitError : kExitNotFound;
}

}  // namespace

MirrorCommands add_mirror_commands(CLI::App& app) {
  MirrorCommands c;
  auto* mirror = app.add_subcommand(
      "mirror", "mirror a channel to a second cluster (another datacenter) and fail over to it");
  mirror->require_subcommand(1);
  mirror->add_option("--state-dir", c.state_dir,
                     "where mirrors keep their state (default: $CATENA_MIRROR_DIR, else ./catena-mirrors)");
  c.create = mirror->add_subcommand(
      "create",
      "mirror CHANNEL of this cluster (--controller) to the cluster at --to (creates the channel there)");
  c.create->add_option("channel", c.channel, "channel")->required();
  c.create->add_option("--to", c.to, "the destination cluster's controller host:port[,...]")->required();
  c.create->add_option("--name", c.name, "mirror name (default: the channel's)");
  c.create->add_flag("--run", c.run, "then run it in the foreground (as `catena mirror run`)");
  c.run_cmd = mirror->add_subcommand("run", "run a mirror (the replicating process); Ctrl-C stops it");
  c.run_cmd->add_option("name", c.name, "mirror name")->required();
  for (auto* cmd : {c.create, c.run_cmd}) {
    cmd->add_option("--to-token-file", c.to_token_file,
                    "the destination cluster's token, if it requires one (default: $CATENA_MIRROR_TO_TOKEN); "
                    "the source's is --token / $CATENA_TOKEN");
    cmd->add_option("--save-interval-ms", c.save_interval_ms,
                    "how often the state (and the source group offset) is saved")
        ->capture_default_str()
        ->check(CLI::Range(10, 60000));
  }
  c.status = mirror->add_subcommand(
      "status",
      "per partition: source end, mirrored offset, lag in records and ms, the offset map's last pair");
  c.status->add_option("name", c.name, "mirror name (default: every mirror in the state directory)");
  c.map = mirror->add_subcommand(
      "map",
      "failover: the destination offset a subscriber at source offset OFFSET of PARTITION goes on from");
  c.map->add_option("name", c.name, "mirror name")->required();
  c.map->add_option("partition", c.partition, "partition")->required()->check(CLI::NonNegativeNumber);
  c.map->add_option("offset", c.offset, "source offset (the next one the subscriber would read)")->required();
  return c;
}

int mirror_create(const Common& c, const MirrorCommands& o) {
  const std::string name = o.name.empty() ? o.channel : o.name;
  const auto to_token = destination_token(o);
  if (!to_token) return kExitUsage;
  auto st = Mirror::create(name, o.channel, c.controller_address(), o.to, state_dir_of(o), c.token_value(),
                           *to_token);
  if (!st) return fail("mirror create " + name, st.error());
  std::printf("mirror %s: channel %s (%zu partitions) from %s to %s; state %s\n", name.c_str(),
              o.channel.c_str(), st->partitions.size(), st->source.c_str(), st->destination.c_str(),
              mirror_state_path(state_dir_of(o), name).c_str());
  if (o.run) return run_mirror(c, o, name);
  return 0;
}

int mirror_run(const Common& c, const MirrorCommands& o) {
  return run_mirror(c, o, o.name);
}

int mirror_status(const Common& c, const MirrorCommands& o) {
  const std::string dir = state_dir_of(o);
  std::vector<std::string> names;
  if (!o.name.empty()) {
    names.push_back(o.name);
  } else {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".mirror") names.push_back(e.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    if (names.empty()) return fail("mirror status", "no mirrors in " + dir, kExitNotFound);
  }
  int rc = 0;
  nlohmann::json mirrors = nlohmann::json::array();
  for (const auto& n : names) {
    auto st = MirrorState::load(mirror_state_path(dir, n));
    if (!st) {
      rc = fail("mirror status " + n, st.error().describe(), mirror_load_code(dir, n));
      continue;
    }
    const auto ends = source_ends(*st, c.token_value());
    if (c.json) {
      mirrors.push_back(status_json(*st, ends));
    } else {
      print_status(*st, ends);
    }
  }
  if (c.json) print_json({{"mirrors", std::move(mirrors)}});
  return rc;
}

int mirror_map(const Common& /*c*/, const MirrorCommands& o) {
  auto st = MirrorState::load(mirror_state_path(state_dir_of(o), o.name));
  if (!st)
    return fail("mirror map " + o.name, st.error().describe(), mirror_load_code(state_dir_of(o), o.name));
  if (static_cast<std::size_t>(o.partition) >= st->partitions.size())
    return fail("mirror map " + o.name, "no partition " + std::to_string(o.partition), kExitNotFound);
  std::printf("%llu\n",
              static_cast<unsigned long long>(st->map(static_cast<std::uint32_t>(o.partition), o.offset)));
  return 0;
}

}  // namespace catena::cli
