#include "commands.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/group_subscriber.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/record_views.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/idle.hpp>
#include <catena/fabric/listen_address.hpp>

#include "output.hpp"

namespace catena::cli {

using namespace std::chrono_literals;

namespace {

// SIGINT/SIGTERM go to whichever thread does not block them (a provider's
// or a group member's thread as often as main): a lock-free atomic is safe
// both in the handler and across threads, where a volatile sig_atomic_t
// is a data race (TSan caught one in Groups.* under a member's SIGINT).
std::atomic<int> g_interrupted{0};
static_assert(std::atomic<int>::is_always_lock_free);
void on_interrupt(int) {
  g_interrupted.store(1, std::memory_order_relaxed);
}

control::ControllerClient::Options client_options(const Common& c) {
  return c.client_options();
}

void print_channel(const control::idl::ChannelInfo& ch) {
  std::printf("%s: %d partition(s), replication %d, segment %lld bytes, ttl %lld ms\n",
              ch.config.name.c_str(), ch.config.partitions, ch.config.replication,
              static_cast<long long>(ch.config.segment_bytes), static_cast<long long>(ch.config.ttl_ms));
  for (const auto& r : ch.routes) {
    std::printf("  partition %d  epoch %lld  start %lld  chain:", r.partition,
                static_cast<long long>(r.epoch), static_cast<long long>(r.start_offset));
    for (std::size_t i = 0; i < r.replicas.size(); ++i) {
      std::printf(" %s%s(%s)", i ? "-> " : "", r.replicas[i].node_id.c_str(),
                  r.replicas[i].fabric_addr.c_str());
    }
    // Replacements copying the partition behind the tail; not yet part of the chain.
    for (std::size_t i = 0; i < r.joining.size(); ++i) {
      std::printf(" %s%s(%s)", i ? "-> " : "  joining: ", r.joining[i].node_id.c_str(),
                  r.joining[i].fabric_addr.c_str());
    }
    std::printf("\n");
    // Offset ranges the partition's earlier chains still serve, read-only.
    for (const auto& s : r.sealed) {
      std::printf(
          "    offsets [%lld, %lld)  epoch %lld  sealed, read-only:", static_cast<long long>(s.start_offset),
          static_cast<long long>(s.end_offset), static_cast<long long>(s.epoch));
      for (std::size_t i = 0; i < s.replicas.size(); ++i) {
        std::printf(" %s%s", i ? "-> " : "", s.replicas[i].node_id.c_str());
      }
      std::printf("\n");
    }
    if (!r.sealed.empty()) {
      std::printf("    offsets [%lld, ...)  epoch %lld  the chain above\n",
                  static_cast<long long>(r.start_offset), static_cast<long long>(r.epoch));
    }
  }
  // Key mappings (`catena channel alter`) and where their markers lie.
  for (const auto& g : ch.generations) {
    std::printf("  generation %d  %d partition(s)%s", g.generation, g.partitions,
                g.complete ? "" : "  (being brought in)");
    if (!g.markers.empty()) std::printf("  markers:");
    for (const auto& [p, offset] : g.markers) {
      if (offset < 0) {
        std::printf(" %d@pending", p);
      } else {
        std::printf(" %d@%lld", p, static_cast<long long>(offset));
      }
    }
    if (g.complete && g.nodes_told > 0)
      std::printf("  told %d node(s), %d call(s)", g.nodes_told, g.control_messages);
    std::printf("\n");
  }
}

}  // namespace

std::string Common::controller_address() const {
  if (!controller.empty()) return controller;
  if (const char* env = std::getenv("CATENA_CONTROLLER"); env && *env) return env;
  std::ifstream in("catena-cluster/cluster.env");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CONTROLLER=", 0) == 0) return line.substr(11);
  }
  return "127.0.0.1:7400";
}

std::string Common::token_value() const {
  if (!token.empty()) return token;
  if (const char* env = std::getenv("CATENA_TOKEN"); env && *env) return env;
  // The local cluster's, with its address (`catena cluster up --secure`).
  const char* env_controller = std::getenv("CATENA_CONTROLLER");
  if (controller.empty() && (env_controller == nullptr || *env_controller == '\0')) {
    return recorded_admin_token("catena-cluster");
  }
  return {};
}

control::ControllerClient::Options Common::client_options() const {
  control::ControllerClient::Options o;
  o.address = controller_address();
  o.token = token_value();
  return o;
}

std::string default_keep_root(const ClusterOptions& opts) {
  // Only the soft provider keeps memory, on a memory filesystem, and not
  // with its arena on huge pages (soft:huge=<MiB>: a kept arena is a file).
  if (opts.provider.rfind("soft", 0) != 0 || fabric::soft_huge_arena_bytes(opts.provider) > 0 ||
      !std::filesystem::is_directory("/dev/shm"))
    return {};
  std::error_code ec;
  const auto dir = std::filesystem::weakly_canonical(opts.dir, ec).string();
  return fmt::format("/dev/shm/catena-kept-{}-{:016x}", getuid(), std::hash<std::string>{}(dir));
}

int cluster_up(ClusterOptions opts, bool detach) {
  LocalCluster cluster(opts);
  std::string err;
  if (opts.controllers > 1 || opts.zookeeper_servers > 1) {
    std::fprintf(stderr,
                 "starting ZooKeeper (%d server%s), %d controller(s) and %d broker(s) (provider %s) in %s/\n",
                 opts.zookeeper_servers, opts.zookeeper_servers > 1 ? "s" : "", opts.controllers, opts.nodes,
                 opts.provider.c_str(), opts.dir.c_str());
  } else {
    std::fprintf(stderr, "starting a controller and %d broker(s) (provider %s) in %s/\n", opts.nodes,
                 opts.provider.c_str(), opts.dir.c_str());
  }
  if (!cluster.start(&err)) return fail("cluster up", err);
  if (cluster.zookeeper_count() > 1) {
    for (std::size_t i = 0; i < cluster.zookeeper_count(); ++i) {
      std::printf("zookeeper-%zu %s  pid %d\n", i, cluster.zookeeper_address(i).c_str(),
                  cluster.zookeeper_pid(i));
    }
  } else if (cluster.zookeeper_count() == 1) {
    std::printf("zookeeper %s\n", cluster.zookeeper_address().c_str());
  }
  if (opts.controllers > 1) {
    for (std::size_t i = 0; i < cluster.controller_count(); ++i) {
      std::printf("controller-%zu %s  pid %d\n", i, cluster.controller_address(i).c_str(),
                  cluster.controller_pid(i));
    }
  } else {
    std::printf("controller %s\n", cluster.controller_address().c_str());
  }
  for (const auto& n : cluster.nodes()) {
    std::printf("%s  pid %d  admin %s  fabric %s\n", n.node_id.c_str(), n.pid, n.admin_addr.c_str(),
                n.fabric_addr.c_str());
  }
  std::printf("export CATENA_CONTROLLER=%s\n", cluster.controller_address().c_str());
  if (opts.secure) {
    std::error_code ec;
    std::printf("export CATENA_TOKEN=$(cat %s)   # the admin token\n",
                std::filesystem::absolute(opts.dir + "/admin.token", ec).c_str());
  }
  std::fflush(stdout);
  if (detach) {
    cluster.detach();
    std::printf("running in the background; stop it with: catena cluster down --dir %s\n", opts.dir.c_str());
    return 0;
  }
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  std::fprintf(stderr, "cluster is up; Ctrl-C stops it\n");
  // A broker that crashes is started again (with its kept memory, if any).
  while (g_interrupted.load(std::memory_order_relaxed) == 0) {
    std::this_thread::sleep_for(100ms);
    std::vector<std::string> errors;
    for (const auto& name : cluster.restart_exited_nodes(&errors)) {
      std::fprintf(stderr, "%s exited; restarted it%s\n", name.c_str(),
                   opts.keep_root.empty() ? " (empty)" : " with its kept memory");
    }
    for (const auto& e : errors) std::fprintf(stderr, "restart failed: %s\n", e.c_str());
  }
  std::fprintf(stderr, "stopping the cluster\n");
  return 0;
}

int cluster_down(const ClusterOptions& opts) {
  int n = stop_recorded_cluster(opts.dir);
  if (n == 0) return fail("cluster down", "no running cluster recorded in " + opts.dir + "/cluster.env");
  std::printf("sent SIGTERM to %d process(es)\n", n);
  return 0;
}

int channel_create(const Common& c, const ChannelSpec& spec) {
  control::ControllerClient client(client_options(c));
  control::idl::ChannelConfig cfg;
  cfg.name = spec.name;
  cfg.partitions = spec.partitions;
  cfg.replication = spec.replication;
  cfg.segment_bytes = spec.segment_bytes;
  cfg.ttl_ms = spec.ttl_ms;
  auto r = client.create_channel(cfg);
  if (!r) return fail("channel create " + spec.name, r.error());
  if (c.json) {
    print_json(channel_json(r.value()));
  } else {
    print_channel(r.value());
  }
  return 0;
}

int channel_list(const Common& c) {
  control::ControllerClient client(client_options(c));
  auto r = client.list_channels();
  if (!r) return fail("channel list", r.error());
  if (c.json) {
    nlohmann::json channels = nlohmann::json::array();
    for (const auto& ch : r.value()) channels.push_back(channel_json(ch));
    print_json({{"channels", std::move(channels)}});
    return 0;
  }
  for (const auto& ch : r.value()) {
    std::printf("%-32s partitions %-4d replication %d\n", ch.config.name.c_str(), ch.config.partitions,
                ch.config.replication);
  }
  if (r->empty()) std::printf("(no channels)\n");
  return 0;
}

int channel_describe(const Common& c, const std::string& name) {
  control::ControllerClient client(client_options(c));
  auto r = client.describe_channel(name);
  if (!r) return fail("channel describe " + name, r.error());
  if (c.json) {
    print_json(channel_json(r.value()));
  } else {
    print_channel(r.value());
  }
  return 0;
}

int channel_alter(const Common& c, const std::string& name, std::int32_t partitions,
                  std::optional<std::int64_t> ttl_ms) {
  auto opts = client_options(c);
  // The alter waits for every marker to commit.
  opts.rpc_timeout = std::max(opts.rpc_timeout, std::chrono::milliseconds(30000));
  control::ControllerClient client(opts);
  control::Result<control::idl::ChannelInfo> r =
      control::make_error(control::idl::ErrorCode::INVALID_ARGUMENT, "nothing to alter");
  if (ttl_ms) {
    r = client.alter_retention(name, *ttl_ms);
    if (!r) return fail("channel alter " + name + " --ttl-ms", r.error());
  }
  if (partitions > 0) r = client.alter_channel(name, partitions);
  if (!r) return fail("channel alter " + name, r.error());
  if (c.json) {
    print_json(channel_json(r.value()));
  } else {
    print_channel(r.value());
  }
  return 0;
}

int channel_delete(const Common& c, const std::string& name, bool yes) {
  const std::string what = "channel delete " + name;
  if (!yes) {
    if (isatty(STDIN_FILENO) == 0) {
      return fail(what, "--yes is needed when stdin is not a terminal: every record in it is deleted",
                  kExitUsage);
    }
    std::fprintf(stderr,
                 "delete channel %s and every record in it? type its name to confirm: ", name.c_str());
    std::string answer;
    if (!std::getline(std::cin, answer) || answer != name)
      return fail(what, "not confirmed; nothing deleted");
  }
  control::ControllerClient client(client_options(c));
  if (auto r = client.delete_channel(name); !r) return fail(what, r.error());
  std::printf("channel %s deleted\n", name.c_str());
  return 0;
}

int partition_declare_lost(const Common& c, const std::string& channel, std::int32_t partition) {
  control::ControllerClient client(client_options(c));
  auto r = client.declare_partition_lost(channel, partition);
  if (!r) return fail("partition declare-lost " + channel, r.error());
  if (c.json) {
    print_json(route_json(r.value()));
    return 0;
  }
  std::printf("%s/%d declared lost at epoch %lld: it is rebuilt above offset %lld as nodes allow\n",
              channel.c_str(), partition, static_cast<long long>(r->epoch),
              static_cast<long long>(r->start_offset));
  return 0;
}

int partition_move(const Common& c, const std::string& channel, std::int32_t partition,
                   const std::vector<std::string>& to) {
  auto opts = client_options(c);
  opts.rpc_timeout =
      std::max(opts.rpc_timeout, std::chrono::milliseconds(30000));  // the move waits for commits
  control::ControllerClient client(opts);
  auto r = client.move_partition(channel, partition, to);
  if (!r) return fail("partition move " + channel, r.error());
  if (c.json) {
    print_json(route_json(r.value()));
    return 0;
  }
  std::string chain;
  for (const auto& rep : r->replicas) chain += (chain.empty() ? "" : " -> ") + rep.node_id;
  std::printf(
      "%s/%d moved: [%s] takes appends from offset %lld on (epoch %lld); earlier offsets stay where they "
      "were until they expire\n",
      channel.c_str(), partition, chain.c_str(), static_cast<long long>(r->start_offset),
      static_cast<long long>(r->epoch));
  return 0;
}

int cluster_status(const Common& c) {
  control::ControllerClient client(client_options(c));
  auto r = client.cluster_status();
  if (!r) return fail("status", r.error());
  if (c.json) {
    print_json(cluster_status_json(r.value(), c.controller_address()));
    return 0;
  }
  std::printf("controller %s, %zu node(s), %d repair(s) in progress\n", c.controller_address().c_str(),
              r->nodes.size(), r->repairs_in_progress);
  for (const auto& n : r->nodes) {
    const char* drain = n.drain == control::idl::DrainState::DRAINING  ? "DRAINING"
                        : n.drain == control::idl::DrainState::DRAINED ? "DRAINED"
                                                                       : "serving";
    std::printf(
        "  %-10s %-7s %-8s zone %-8s replicas %-3d segments %-5lld bytes %-12lld heartbeat %lld ms ago  %s\n",
        n.info.node_id.c_str(), control::idl::to_string(n.state).c_str(), drain, n.info.zone.c_str(),
        n.replicas, static_cast<long long>(n.stats.segments), static_cast<long long>(n.stats.bytes),
        static_cast<long long>(n.last_heartbeat_ms_ago), n.info.fabric_addr.c_str());
    if (n.stats.__isset.zeroed_bytes) {
      std::printf("  %-10s zeroed %lld bytes of replica memory it let go\n", "",
                  static_cast<long long>(n.stats.zeroed_bytes));
    }
    if (n.stats.__isset.link_rebuilds && n.stats.link_rebuilds > 0) {
      std::printf("  %-10s rebuilt %lld successor link(s) in place (partition-level recovery)\n", "",
                  static_cast<long long>(n.stats.link_rebuilds));
    }
  }
  if (r->__isset.recoveries) {
    const auto& rc = r->recoveries;
    std::printf(
        "recovery since this controller leads: %lld rejoin(s) with kept data (process level), replacements "
        "%lld in the lost member's zone, %lld in another zone (zone level), %lld in another datacenter\n",
        static_cast<long long>(rc.kept_data_rejoins), static_cast<long long>(rc.replaced_in_lost_zone),
        static_cast<long long>(rc.replaced_in_other_zone),
        static_cast<long long>(rc.replaced_in_other_datacenter));
  }
  return 0;
}

int publish_stdin(const Common& c, const PublishOptions& o) {
  broker::ControllerRoutes routes(client_options(c), "catena-cli");
  PublisherOptions po;
  po.provider = c.provider;
  // Why records wait or fail, on stderr (route changes and reconnects are
  // the client's own business).
  po.on_event = [](const ClientEvent& e) {
    switch (e.kind) {
      case ClientEvent::Kind::log_full:
      case ClientEvent::Kind::segment_memory_full:
      case ClientEvent::Kind::rate_limited:
      case ClientEvent::Kind::partition_unavailable:
        std::fprintf(stderr, "catena: publish: %s\n", e.message.c_str());
        break;
      default:
        break;
    }
  };
  auto pub = Publisher::create(routes, o.channel, po);
  if (!pub) return fail("publish " + o.channel, pub.error());
  std::string line;
  std::uint64_t acked = 0, failed = 0, sent = 0;
  auto on_ack = [&](const PublishResult& r) {
    if (r.status == PublishStatus::ok) {
      ++acked;
      if (!o.quiet) std::printf("%u:%llu\n", r.partition, static_cast<unsigned long long>(r.offset));
    } else {
      ++failed;
      std::fprintf(stderr, "catena: publish: a record to partition %u failed: %s\n", r.partition,
                   std::string(client::to_string(r.status)).c_str());
    }
  };
  const auto key = std::span(reinterpret_cast<const std::byte*>(o.key.data()), o.key.size());
  std::vector<HeaderField> headers;
  for (const std::string& h : o.headers) {
    const auto eq = h.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail("publish", "--header takes name=value with a non-empty name, not '" + h + "'");
    headers.push_back({std::string_view(h).substr(0, eq), std::string_view(h).substr(eq + 1)});
  }
  // A key given on the command line is stored with the record (as Kafka's
  // console producer does), not only used to pick the partition.
  const bool attributes = !headers.empty() || !key.empty();
  if (std::size_t block = 0; attributes) {
    if (const auto ac = chain::attributes_size({key, chain_headers(headers)}, &block);
        ac != chain::AttributesCheck::ok)
      return fail("publish", chain::describe(ac));
  }
  fabric::BackoffIdle idle;
  while (std::getline(std::cin, line)) {
    const auto payload = std::span(reinterpret_cast<const std::byte*>(line.data()), line.size());
    const Record record{key, headers, payload};
    for (;;) {
      const client::ErrorCode e =
          !attributes
              ? (o.partition >= 0
                     ? pub.value()->publish_to(static_cast<std::uint32_t>(o.partition), payload, on_ack)
                     : pub.value()->publish(key, payload, on_ack))
              : (o.partition >= 0
                     ? pub.value()->publish_to(static_cast<std::uint32_t>(o.partition), record, on_ack)
                     : pub.value()->publish(record, on_ack));
      if (e == client::ErrorCode::ok) break;
      if (e != client::ErrorCode::backpressure)
        return fail("publish", std::string(client::to_string(e)), exit_code_of(e));
      idle.idle(pub.value()->poll());  // a head holding records back (a full log) may take a ttl
    }
    idle.reset();
    ++sent;
    pub.value()->poll();
  }
  if (!pub.value()->flush(30s))
    std::fprintf(stderr, "catena: publish: %llu record(s) still unacknowledged\n",
                 static_cast<unsigned long long>(pub.value()->in_flight()));
  std::fprintf(stderr, "published %llu, acknowledged %llu, refused %llu\n",
               static_cast<unsigned long long>(sent), static_cast<unsigned long long>(acked),
               static_cast<unsigned long long>(failed));
  return failed == 0 && acked == sent ? kExitOk : kExitError;
}

// Polls until --count records, --timeout-ms of silence, or Ctrl-C.
template <class Poll>
void poll_until_done(const SubscribeOptions& o, const std::uint64_t& got, Poll&& poll) {
  auto last = std::chrono::steady_clock::now();
  while (g_interrupted.load(std::memory_order_relaxed) == 0 && (o.count == 0 || got < o.count)) {
    const int n = poll(o.count ? static_cast<int>(std::min<std::uint64_t>(o.count - got, 1024)) : 1024);
    if (n > 0) {
      last = std::chrono::steady_clock::now();
      std::fflush(stdout);
    } else {
      if (o.timeout_ms > 0 &&
          std::chrono::steady_clock::now() - last > std::chrono::milliseconds(o.timeout_ms))
        break;
      std::this_thread::sleep_for(200us);
    }
  }
}

// `catena subscribe --group G`: a member of the group (GroupSubscriber);
// its destructor commits the positions and leaves.
template <class Print>
int subscribe_group(const Common& c, const SubscribeOptions& o, SubscriberOptions so, RouteSource& routes,
                    const Print& print) {
  GroupSubscriberOptions go;
  go.controller = c.controller_address();
  go.token = c.token_value();
  go.group = o.group;
  go.member_name = "catena-cli";
  if (so.start == Start::committed) so.start = Start::earliest;  // a member always starts at the commit
  if (so.start == Start::offset)
    return fail("subscribe --group", "--from must be earliest or latest with --group", kExitUsage);
  go.subscriber = so;
  // A position is committed only once its records are out of stdio's
  // buffer (before_commit runs before every commit, the ones a channel
  // alter's marker or a revoke make too): a member killed after a commit
  // must not have lost records the group will never deliver again.
  go.commit_interval = std::chrono::milliseconds(0);
  go.before_commit = [] { std::fflush(stdout); };
  auto sub = GroupSubscriber::create(routes, o.channel, go);
  if (!sub) return fail("subscribe --group " + o.group, sub.error());
  auto next_commit = std::chrono::steady_clock::now() + 1s;
  std::uint64_t got = 0;
  poll_until_done(o, got, [&](int max) {
    const int n = sub.value()->poll(
        [&](const Message& m) {
          print(m);
          ++got;
        },
        max);
    if (std::chrono::steady_clock::now() >= next_commit) {
      sub.value()->commit_async();  // flushes stdout first (before_commit)
      next_commit = std::chrono::steady_clock::now() + 1s;
    }
    return n;
  });
  std::fflush(stdout);  // before ~GroupSubscriber commits the final positions
  return 0;
}

int subscribe_stdout(const Common& c, const SubscribeOptions& o) {
  broker::ControllerRoutes routes(client_options(c), "catena-cli");
  SubscriberOptions so;
  so.provider = c.provider;
  so.group = o.group;
  if (o.from == "earliest") {
    so.start = Start::earliest;
  } else if (o.from == "latest") {
    so.start = Start::latest;
  } else if (o.from == "committed") {
    so.start = Start::committed;
  } else {
    try {
      so.start = Start::offset;
      so.start_offset = std::stoull(o.from);
    } catch (const std::exception&) {
      return fail("subscribe", "--from must be earliest, latest, committed or a number, not '" + o.from + "'",
                  kExitUsage);
    }
  }
  enum class RecordFormat : std::uint8_t { raw, hex, base64, json };
  RecordFormat format = RecordFormat::raw;
  if (o.format == "hex") {
    format = RecordFormat::hex;
  } else if (o.format == "base64") {
    format = RecordFormat::base64;
  } else if (o.format == "json") {
    format = RecordFormat::json;
  } else if (o.format != "raw") {
    return fail("subscribe", "--format must be raw, hex, base64 or json, not '" + o.format + "'", kExitUsage);
  }
  // JSON lines carry partition, offset and timestamp themselves.
  if (format == RecordFormat::json && (o.show_offsets || o.show_times))
    return fail("subscribe", "--offsets and --times do not go with --format json", kExitUsage);
  const auto print = [&](const Message& m) {
    if (o.show_times) {
      std::printf("%llu:%llu ", static_cast<unsigned long long>(m.timestamp_ns),
                  static_cast<unsigned long long>(wall_clock_ns()));
    }
    if (o.show_offsets) std::printf("%u:%llu ", m.partition, static_cast<unsigned long long>(m.offset));
    if (o.show_attributes && format != RecordFormat::json) {
      std::fputs("[key=", stdout);
      std::fwrite(m.key.data(), 1, m.key.size(), stdout);
      for (const HeaderField& h : m.headers) {
        std::fputc(' ', stdout);
        std::fwrite(h.name.data(), 1, h.name.size(), stdout);
        std::fputc('=', stdout);
        std::fwrite(h.value.data(), 1, h.value.size(), stdout);
      }
      std::fputs("] ", stdout);
    }
    switch (format) {
      case RecordFormat::raw:
        std::fwrite(m.payload.data(), 1, m.payload.size(), stdout);
        break;
      case RecordFormat::hex:
        std::fputs(hex(m.payload).c_str(), stdout);
        break;
      case RecordFormat::base64:
        std::fputs(base64(m.payload).c_str(), stdout);
        break;
      case RecordFormat::json: {
        const std::string line =
            record_json(m).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        std::fwrite(line.data(), 1, line.size(), stdout);
        break;
      }
    }
    std::fputc('\n', stdout);
  };
  std::signal(SIGINT, on_interrupt);
  if (!o.group.empty()) return subscribe_group(c, o, so, routes, print);
  auto sub = Subscriber::create(routes, o.channel, so);
  if (!sub) return fail("subscribe " + o.channel, sub.error());
  sub.value()->on_notice([](const Notice& n) {
    std::fprintf(stderr, "catena: partition %u: %s, continuing at offset %llu\n", n.partition,
                 std::string(client::to_string(n.status)).c_str(),
                 static_cast<unsigned long long>(n.next_offset));
  });
  std::uint64_t got = 0;
  poll_until_done(o, got, [&](int max) {
    return sub.value()->poll(
        [&](const Message& m) {
          print(m);
          ++got;
        },
        max);
  });
  std::fflush(stdout);
  return 0;
}

}  // namespace catena::cli
