#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <catena/broker/broker_admin_server.hpp>
#include <catena/chain/limits.hpp>
#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/thrift_server.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::broker {

namespace idl = control::idl;
using control::ControlError;
using control::make_broker_admin_server;
using control::make_error;
using control::Result;
using control::ThriftServer;

bool replica_config_for(const std::string& node_id, const idl::ChainAssignment& a,
                        chain::ReplicaConfig* out) {
  // The whole chain as this node sees it: the replicas, then the joining
  // replicas behind the tail. A joining replica only exists behind a tail.
  const auto& reps = a.route.replicas;
  if (reps.empty()) return false;
  std::vector<const idl::Replica*> line;
  for (const auto& r : reps) line.push_back(&r);
  for (const auto& r : a.route.joining) line.push_back(&r);
  std::size_t pos = line.size();
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i]->node_id == node_id) pos = i;
  }
  if (pos == line.size()) return false;
  chain::ReplicaConfig rc;
  rc.channel = a.route.channel;
  rc.partition = static_cast<std::uint32_t>(a.route.partition);
  rc.epoch = static_cast<std::uint64_t>(a.route.epoch);
  rc.node_id = node_id;
  rc.node_epoch = static_cast<std::uint64_t>(line[pos]->node_epoch);
  rc.position = static_cast<std::uint32_t>(pos);  // >= chain_length: joining
  rc.chain_length = static_cast<std::uint32_t>(reps.size());
  if (pos > 0) {
    rc.predecessor_node = line[pos - 1]->node_id;
    rc.predecessor_node_epoch = static_cast<std::uint64_t>(line[pos - 1]->node_epoch);
  }
  if (pos + 1 < line.size()) {
    rc.successor_node = line[pos + 1]->node_id;
    rc.successor_addr = line[pos + 1]->fabric_addr;
    rc.successor_node_epoch = static_cast<std::uint64_t>(line[pos + 1]->node_epoch);
  }
  rc.head_addr = reps.front().fabric_addr;
  rc.log.segment_bytes = static_cast<std::uint32_t>(a.segment_bytes);
  rc.log.ttl_ns = static_cast<std::uint64_t>(a.ttl_ms) * 1'000'000ull;
  rc.start_offset = static_cast<std::uint64_t>(a.route.start_offset);
  if (a.__isset.link_secret && a.link_secret.size() == rc.link_secret.size()) {
    std::memcpy(rc.link_secret.data(), a.link_secret.data(), rc.link_secret.size());
  }
  if (a.__isset.access_secret && a.access_secret.size() == rc.access_secret.size()) {
    std::memcpy(rc.access_secret.data(), a.access_secret.data(), rc.access_secret.size());
  }
  if (a.__isset.tenant) rc.tenant = a.tenant.tenant;
  if (a.__isset.lineage && a.lineage.size() == rc.lineage.size()) {
    std::memcpy(rc.lineage.data(), a.lineage.data(), rc.lineage.size());
  }
  *out = rc;
  return true;
}

idl::NodeStats node_stats_of(const broker::NodeStats& st) {
  idl::NodeStats out;
  out.__set_segments(static_cast<std::int64_t>(st.segments));
  out.__set_bytes(static_cast<std::int64_t>(st.bytes));
  out.__set_connections(static_cast<std::int64_t>(st.connections));
  out.__set_zeroed_bytes(static_cast<std::int64_t>(st.zeroed_bytes));
  out.__set_link_rebuilds(static_cast<std::int64_t>(st.link_rebuilds));
  out.__set_registered_bytes(static_cast<std::int64_t>(st.registered_bytes));
  out.__set_warm_bytes(static_cast<std::int64_t>(st.warm_bytes));
  out.__set_segment_memory_bytes(static_cast<std::int64_t>(st.segment_memory_bytes));
  if (!st.stage_latency.empty()) {
    std::vector<idl::StageLatency> stages;
    for (const auto& sl : st.stage_latency) {
      idl::StageLatency x;
      x.__set_position(static_cast<std::int32_t>(sl.position));
      x.__set_count(static_cast<std::int64_t>(sl.latency.count));
      x.__set_p50_ns(static_cast<std::int64_t>(sl.latency.p50_ns));
      x.__set_p99_ns(static_cast<std::int64_t>(sl.latency.p99_ns));
      x.__set_p999_ns(static_cast<std::int64_t>(sl.latency.p999_ns));
      x.__set_max_ns(static_cast<std::int64_t>(sl.latency.max_ns));
      stages.push_back(x);
    }
    out.__set_stage_latency(stages);
  }
  std::vector<idl::PartitionProgress> partitions;
  partitions.reserve(st.partitions.size());
  for (const auto& p : st.partitions) {
    idl::PartitionProgress pp;
    pp.__set_channel(p.channel);
    pp.__set_partition(static_cast<std::int32_t>(p.partition));
    pp.__set_epoch(static_cast<std::int64_t>(p.epoch));
    pp.__set_end_offset(static_cast<std::int64_t>(p.replica.end_offset));
    pp.__set_commit_offset(static_cast<std::int64_t>(p.replica.commit_offset));
    pp.__set_successor_backlog_bytes(p.replica.successor_backlog_bytes);
    pp.__set_successor_synced(p.replica.successor_synced);
    pp.__set_forwarded_bytes(static_cast<std::int64_t>(p.replica.forwarded_bytes));
    pp.__set_recovered_records(static_cast<std::int64_t>(p.replica.recovered_records));
    pp.__set_recovered_bytes(static_cast<std::int64_t>(p.replica.recovered_bytes));
    partitions.push_back(std::move(pp));
  }
  out.partitions = std::move(partitions);  // the generated setter would copy
  out.__isset.partitions = true;
  return out;
}

namespace {

// Where the range after route.sealed[i] is served, as far as this push
// says: the next sealed range, or the route's chain, if it starts at that
// range's end. A push lists only the ranges the node holds, so for an
// older range the answer may not be in it (epoch 0): the broker keeps what
// the push that retired the range told.
broker::Broker::NextChain next_chain_of(const idl::PartitionRoute& route, std::size_t i) {
  const std::int64_t end = route.sealed[i].end_offset;
  const auto head_of = [](std::int64_t epoch, const std::vector<idl::Replica>& replicas) {
    return replicas.empty()
               ? broker::Broker::NextChain{}
               : broker::Broker::NextChain{static_cast<std::uint64_t>(epoch), replicas.front().fabric_addr};
  };
  if (i + 1 < route.sealed.size()) {
    const auto& after = route.sealed[i + 1];
    return after.start_offset == end ? head_of(after.epoch, after.replicas) : broker::Broker::NextChain{};
  }
  return route.start_offset == end ? head_of(route.epoch, route.replicas) : broker::Broker::NextChain{};
}

}  // namespace

// What every connection's handler shares: the broker, the fence and the
// routes installed.
struct BrokerAdminServer::Shared {
  Shared(broker::Broker& b, ControllerFence* f) : broker(b), fence(f) {}
  broker::Broker& broker;
  ControllerFence* fence;  // null: open to every caller (tests that play the controller)
  Mutex mu;
  std::map<std::pair<std::string, std::int32_t>, idl::PartitionRoute> installed GUARDED_BY(mu);
};

// One per connection: it remembers the controller epoch the connection
// authenticated at. Thread: a connection's calls run one at a time on its
// own thread.
class BrokerAdminServer::Handler final : public idl::BrokerAdminIf {
 public:
  explicit Handler(std::shared_ptr<Shared> shared) : shared_(std::move(shared)), broker_(shared_->broker) {}

  void authenticate(const std::string& admin_secret, std::int64_t controller_epoch) override {
    epoch_.reset();
    if (shared_->fence == nullptr) return;
    auto checked = shared_->fence->admit(admin_secret, controller_epoch);
    if (!checked) throw checked.error().to_thrift();
    if (*checked) epoch_ = controller_epoch;
  }

  void configureChain(const idl::ChainAssignment& a) override {
    admit("configureChain");
    const std::string node = broker_.node_id();
    // Sizes beyond the limits are refused by the replica (chain::check_replica_config)
    // with the reason; here only what would not survive the narrowing casts.
    if (a.segment_bytes <= 0 || a.segment_bytes > std::int64_t{chain::limits::kMaxSegmentBytes} ||
        a.ttl_ms <= 0 || a.route.partition < 0 || a.route.epoch <= 0) {
      throw make_error(idl::ErrorCode::INVALID_ARGUMENT, "malformed chain assignment").to_thrift();
    }
    const auto key = std::make_pair(a.route.channel, a.route.partition);
    const auto partition = static_cast<std::uint32_t>(a.route.partition);
    // Partition handoff: the ranges this node wrote that are sealed now stay
    // read-only beside whatever it holds of the partition's current chain;
    // ranges the route no longer lists (expired) are let go.
    std::vector<std::uint64_t> keep;
    if (a.__isset.tenant && !a.tenant.tenant.empty()) {
      // Per node, shared by the tenant's partitions here; -1: unlimited.
      const std::int64_t rings = a.tenant.publisher_ring_bytes;
      const std::int64_t rate = a.tenant.publish_bytes_per_sec;
      const std::int64_t sessions = a.tenant.sessions;
      broker_.set_tenant_limits(
          a.tenant.tenant, rings < 0 ? ~0ull : static_cast<std::uint64_t>(rings),
          rate <= 0 ? 0 : static_cast<std::uint64_t>(rate),
          sessions < 0 || sessions >= std::int64_t{~0u} ? ~0u : static_cast<std::uint32_t>(sessions));
    }
    if (a.__isset.access_secret) {
      // Before anything else: a rotated secret closes what the old one opened.
      chain::wire::AccessSecret secret{};
      if (a.access_secret.size() == secret.size()) {
        std::memcpy(secret.data(), a.access_secret.data(), secret.size());
        broker_.set_access_secret(a.route.channel, partition, secret);
      }
    }
    for (std::size_t i = 0; i < a.route.sealed.size(); ++i) {
      const auto& range = a.route.sealed[i];
      for (const auto& r : range.replicas) {
        if (r.node_id != node) continue;
        keep.push_back(static_cast<std::uint64_t>(range.epoch));
        (void)broker_.retire(a.route.channel, partition, static_cast<std::uint64_t>(range.epoch),
                             static_cast<std::uint64_t>(range.end_offset), next_chain_of(a.route, i));
      }
    }
    broker_.drop_retired(a.route.channel, partition, keep);
    chain::ReplicaConfig rc;
    if (!replica_config_for(node, a, &rc)) {
      auto r = broker_.fence(a.route.channel, static_cast<std::uint32_t>(a.route.partition),
                             static_cast<std::uint64_t>(a.route.epoch));
      if (r.status == broker::ConfigureStatus::stale_epoch) throw stale(key, r.message);
      MutexLock lk(shared_->mu);
      shared_->installed.erase(key);
      return;
    }
    // The route must name this very incarnation: a restarted process with the
    // same id and address holds none of the old one's data, and the
    // controller may push old routes before it hears of the restart.
    const auto mine = broker_.node_epoch();
    if (mine == 0 || rc.node_epoch != mine) {
      throw make_error(
          idl::ErrorCode::FENCED,
          mine == 0
              ? fmt::format("{} is not registered yet", node)
              : fmt::format("assignment of {}/{} epoch {} names incarnation {} of {}; this is "
                            "incarnation {}",
                            a.route.channel, a.route.partition, a.route.epoch, rc.node_epoch, node, mine))
          .to_thrift();
    }
    std::vector<chain::ProducerSnapshot> producers;
    producers.reserve(a.producers.size());
    for (const auto& p : a.producers) {
      chain::ProducerSnapshot snap;
      snap.producer_id = static_cast<std::uint64_t>(p.producer_id);
      snap.producer_epoch = static_cast<std::uint64_t>(p.producer_epoch);
      snap.last_seq = p.last_seq;
      for (const auto& run : p.runs) {
        if (run.count <= 0 || run.first_seq < 0 || run.first_offset < 0) continue;
        snap.runs.push_back({static_cast<std::uint64_t>(run.first_seq),
                             static_cast<std::uint64_t>(run.first_offset),
                             static_cast<std::uint32_t>(run.count)});
      }
      producers.push_back(std::move(snap));
    }
    auto r = broker_.configure(rc, producers);
    switch (r.status) {
      case broker::ConfigureStatus::applied: {
        MutexLock lk(shared_->mu);
        shared_->installed[key] = a.route;
        return;
      }
      case broker::ConfigureStatus::stale_epoch:
        throw stale(key, r.message);
      case broker::ConfigureStatus::invalid:
        throw make_error(idl::ErrorCode::INVALID_ARGUMENT, r.message).to_thrift();
      case broker::ConfigureStatus::failed:
        throw make_error(idl::ErrorCode::INTERNAL, r.message).to_thrift();
    }
  }

  void fence(const std::string& channel, std::int32_t partition, std::int64_t epoch) override {
    admit("fence");
    if (partition < 0 || epoch < 0)
      throw make_error(idl::ErrorCode::INVALID_ARGUMENT, "bad fence").to_thrift();
    auto r = broker_.fence(channel, static_cast<std::uint32_t>(partition), static_cast<std::uint64_t>(epoch));
    if (r.status == broker::ConfigureStatus::stale_epoch) throw stale({channel, partition}, r.message);
    MutexLock lk(shared_->mu);
    shared_->installed.erase({channel, partition});
  }

  void appendMarker(idl::MarkerReply& out, const std::string& channel, std::int32_t partition,
                    std::int64_t epoch, std::int32_t generation, std::int32_t from_partitions,
                    std::int32_t to_partitions) override {
    admit("appendMarker");
    if (partition < 0 || epoch <= 0 || generation <= 0 || from_partitions <= 0 || to_partitions <= 0)
      throw make_error(idl::ErrorCode::INVALID_ARGUMENT, "bad marker request").to_thrift();
    const chain::MarkerSpec marker{static_cast<std::uint64_t>(generation),
                                   static_cast<std::uint32_t>(from_partitions),
                                   static_cast<std::uint32_t>(to_partitions)};
    auto r = broker_.append_marker(channel, static_cast<std::uint32_t>(partition),
                                   static_cast<std::uint64_t>(epoch), marker);
    throw_unless_applied(r.status, {channel, partition}, r.message);
    out.__set_offset(static_cast<std::int64_t>(r.state.offset));
    out.__set_commit_offset(static_cast<std::int64_t>(r.state.commit_offset));
  }

  void seal(idl::SealReply& out, const std::string& channel, std::int32_t partition,
            std::int64_t epoch) override {
    admit("seal");
    if (partition < 0 || epoch <= 0)
      throw make_error(idl::ErrorCode::INVALID_ARGUMENT, "bad seal").to_thrift();
    auto r = broker_.seal(channel, static_cast<std::uint32_t>(partition), static_cast<std::uint64_t>(epoch));
    throw_unless_applied(r.status, {channel, partition}, r.message);
    out.__set_end_offset(static_cast<std::int64_t>(r.state.end_offset));
    out.__set_commit_offset(static_cast<std::int64_t>(r.state.commit_offset));
    std::vector<idl::ProducerSnapshot> producers;
    producers.reserve(r.state.producers.size());
    for (const auto& p : r.state.producers) {
      idl::ProducerSnapshot snap;
      snap.__set_producer_id(static_cast<std::int64_t>(p.producer_id));
      snap.__set_producer_epoch(static_cast<std::int64_t>(p.producer_epoch));
      snap.__set_last_seq(p.last_seq);
      std::vector<idl::ProducerRun> runs;
      runs.reserve(p.runs.size());
      for (const auto& run : p.runs) {
        idl::ProducerRun pr;
        pr.__set_first_seq(static_cast<std::int64_t>(run.first_seq));
        pr.__set_first_offset(static_cast<std::int64_t>(run.first_offset));
        pr.__set_count(static_cast<std::int32_t>(run.count));
        runs.push_back(pr);
      }
      snap.runs = std::move(runs);
      snap.__isset.runs = true;
      producers.push_back(std::move(snap));
    }
    out.producers = std::move(producers);
    out.__isset.producers = true;
  }

  // A node whose data plane stopped is not alive, whatever this thread says:
  // the probe fails, and the controller repairs its chains.
  void ping(idl::NodeStats& out) override {
    admit("ping");
    if (const auto stalled = broker_.data_plane_stalled_ms(); stalled > 0) {
      throw make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("data plane silent for {} ms", stalled))
          .to_thrift();
    }
    out = node_stats_of(broker_.stats());
  }

 private:
  // Every call but authenticate: only the controller, and only the newest.
  void admit(const char* call) {
    if (shared_->fence == nullptr) return;
    if (auto r = shared_->fence->check(epoch_, call); !r) throw r.error().to_thrift();
  }

  // A head call's status as BrokerAdmin's error (seal, appendMarker).
  void throw_unless_applied(broker::ConfigureStatus status, const std::pair<std::string, std::int32_t>& key,
                            const std::string& msg) {
    switch (status) {
      case broker::ConfigureStatus::applied:
        return;
      case broker::ConfigureStatus::stale_epoch:
        throw stale(key, msg);
      case broker::ConfigureStatus::invalid:
        throw make_error(idl::ErrorCode::INVALID_ARGUMENT, msg).to_thrift();
      case broker::ConfigureStatus::failed:
        break;
    }
    throw make_error(idl::ErrorCode::INTERNAL, msg).to_thrift();
  }

  idl::CatenaError stale(const std::pair<std::string, std::int32_t>& key, const std::string& msg) {
    ControlError e = make_error(idl::ErrorCode::STALE_EPOCH, msg);
    MutexLock lk(shared_->mu);
    auto it = shared_->installed.find(key);
    if (it != shared_->installed.end()) e.current_route = it->second;
    return e.to_thrift();
  }

  const std::shared_ptr<Shared> shared_;
  broker::Broker& broker_;
  std::optional<std::int64_t> epoch_;  // authenticated at; nullopt: not (yet)
};

class BrokerAdminServer::HandlerFactory final : public idl::BrokerAdminIfFactory {
 public:
  explicit HandlerFactory(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  idl::BrokerAdminIf* getHandler(const apache::thrift::TConnectionInfo& /*info*/) override {
    return new BrokerAdminServer::Handler(shared_);  // the base names its interface Handler
  }
  void releaseHandler(idl::BrokerAdminIf* handler) override { delete handler; }

 private:
  std::shared_ptr<Shared> shared_;
};

BrokerAdminServer::BrokerAdminServer(broker::Broker& broker, Options options)
    : broker_(broker), options_(std::move(options)) {}

BrokerAdminServer::~BrokerAdminServer() {
  stop();
}

Result<void> BrokerAdminServer::start() {
  ThriftServer::Options o;
  o.host = options_.host;
  o.port = options_.port;
  server_ = make_broker_admin_server(
      std::make_shared<HandlerFactory>(std::make_shared<Shared>(broker_, options_.fence)), o);
  return server_->start();
}

std::uint16_t BrokerAdminServer::port() const noexcept {
  return server_ ? server_->port() : 0;
}

void BrokerAdminServer::stop() {
  if (server_) server_->stop();
}

}  // namespace catena::broker
