#include "sim_node.hpp"

#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catena/broker/broker_admin_server.hpp>
#include <catena/chain/commit_watch.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/publish.hpp>

namespace catena::sim {

namespace idl = control::idl;
using chain::Link;
namespace wire = chain::wire;

// --- SimAdmin ----------------------------------------------------------------

void SimAdmin::add(const std::string& admin_addr) {
  std::lock_guard lock(mu_);
  nodes_[admin_addr] = Handle{};
}

void SimAdmin::set_identity(const std::string& admin_addr, const std::string& node_id,
                            std::int64_t node_epoch) {
  std::lock_guard lock(mu_);
  auto& h = nodes_[admin_addr];
  h.node_id = node_id;
  h.node_epoch = node_epoch;
  h.reachable = true;
}

void SimAdmin::set_reachable(const std::string& admin_addr, bool reachable) {
  std::lock_guard lock(mu_);
  auto& h = nodes_[admin_addr];
  h.reachable = reachable;
  if (!reachable) {
    h.installed.clear();
    h.inbox.clear();
  }
}

void SimAdmin::set_stats(const std::string& admin_addr, idl::NodeStats stats) {
  std::lock_guard lock(mu_);
  nodes_[admin_addr].stats = std::move(stats);
}

std::deque<AdminCall> SimAdmin::take(const std::string& admin_addr) {
  std::lock_guard lock(mu_);
  return std::exchange(nodes_[admin_addr].inbox, {});
}

std::map<std::int64_t, idl::PartitionRoute> SimAdmin::routes() const {
  std::lock_guard lock(mu_);
  return routes_;
}

control::Result<void> SimAdmin::configure_chain(const control::BrokerTarget& to,
                                                const idl::ChainAssignment& a) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(to.admin_addr);
  if (it == nodes_.end() || !it->second.reachable) {
    return control::make_error(idl::ErrorCode::UNAVAILABLE, to.admin_addr + ": connection refused");
  }
  Handle& h = it->second;
  chain::ReplicaConfig rc;
  if (broker::replica_config_for(h.node_id, a, &rc) &&
      rc.node_epoch != static_cast<std::uint64_t>(h.node_epoch)) {
    return control::make_error(idl::ErrorCode::FENCED, "assignment names another incarnation");
  }
  routes_[a.route.epoch] = a.route;
  const auto key = std::make_pair(a.route.channel, a.route.partition);
  auto inst = h.installed.find(key);
  if (inst != h.installed.end() && a.route.epoch < inst->second) {
    return control::make_error(idl::ErrorCode::STALE_EPOCH, "stale configureChain");
  }
  if (inst != h.installed.end() && a.route.epoch == inst->second) return {};
  h.installed[key] = a.route.epoch;
  AdminCall call;
  call.assignment = a;
  h.inbox.push_back(std::move(call));
  return {};
}

control::Result<void> SimAdmin::fence(const control::BrokerTarget& to, const std::string& channel,
                                      std::int32_t partition, std::int64_t epoch) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(to.admin_addr);
  if (it == nodes_.end() || !it->second.reachable) {
    return control::make_error(idl::ErrorCode::UNAVAILABLE, to.admin_addr + ": connection refused");
  }
  AdminCall call;
  call.kind = AdminCall::Kind::fence;
  call.channel = channel;
  call.partition = partition;
  call.epoch = epoch;
  it->second.inbox.push_back(std::move(call));
  return {};
}

control::Result<idl::NodeStats> SimAdmin::ping(const control::BrokerTarget& to) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(to.admin_addr);
  if (it == nodes_.end() || !it->second.reachable) {
    return control::make_error(idl::ErrorCode::UNAVAILABLE, to.admin_addr + ": connection refused");
  }
  return it->second.stats;
}

control::Result<idl::SealReply> SimAdmin::seal(const control::BrokerTarget& to, const std::string&,
                                               std::int32_t, std::int64_t) {
  return control::make_error(idl::ErrorCode::INVALID_ARGUMENT,
                             to.admin_addr + ": no moves in the simulation");
}

control::Result<idl::MarkerReply> SimAdmin::append_marker(const control::BrokerTarget& to, const std::string&,
                                                          std::int32_t, std::int64_t,
                                                          const control::MarkerRequest&) {
  return control::make_error(idl::ErrorCode::INVALID_ARGUMENT,
                             to.admin_addr + ": no channel alters in the simulation");
}

// --- SimNet ------------------------------------------------------------------

SimNet::SimNet() {
  dead_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (dead_fd_ >= 0 && ::bind(dead_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::getsockname(dead_fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    dead_addr_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    names_[dead_addr_] = "a dead node";
  }
}

SimNet::~SimNet() {
  if (dead_fd_ >= 0) ::close(dead_fd_);
}

void SimNet::log(const std::string& line) {
  std::string out = line;
  for (const auto& [addr, name] : names_) {
    for (auto at = out.find(addr); at != std::string::npos; at = out.find(addr, at + name.size())) {
      out.replace(at, addr.size(), name);
    }
  }
  trace.add(clock.now_ns(), out);
}

void SimNet::settle(bool force) {
  std::uint64_t closes = 0;
  for (const auto& [p, f] : providers_) closes += f->counters().closes;
  // Providers come and go (a killed node's count leaves the sum): any
  // change means something ended.
  if (closes != closes_seen_) settle_due_ = true;
  closes_seen_ = closes;
  if (!force && !settle_due_) return;
  settle_due_ = false;
  for (const auto& [p, f] : providers_) p->settle();
}

void SimNet::accept_at(const std::string& addr) {
  auto it = listeners_.find(addr);
  if (it != listeners_.end()) it->second->accept_one();
}

// --- SimNode -----------------------------------------------------------------

SimNode::SimNode(SimNet& net, SimAdmin& admin, std::string name, std::string zone)
    : net_(net),
      admin_(admin),
      name_(std::move(name)),
      zone_(std::move(zone)),
      admin_addr_(name_ + ".sim:7000") {
  admin_.add(admin_addr_);
}

SimNode::~SimNode() {
  kill();
}

bool SimNode::start() {
  faults_ = std::make_shared<fabric::FaultInjector>(net_.clock);
  auto inner = fabric::Provider::open("soft:shm");
  if (!inner) return false;
  provider_ = std::make_unique<fabric::FaultProvider>(std::move(inner.value()), faults_);
  for (int attempt = 0; attempt < 20 && !listener_; ++attempt) {
    auto l = provider_->listen("127.0.0.1:0");
    if (!l) return false;
    if (!net_.used(l.value()->address())) listener_ = std::move(l.value());
  }
  if (!listener_) return false;
  addr_ = listener_->address();
  net_.listen(addr_, this, name_);
  net_.add_provider(provider_.get(), faults_.get());
  register_node();
  return !node_id_.empty();
}

void SimNode::kill() {
  if (!provider_) return;
  log("killed");
  admin_.set_reachable(admin_addr_, false);
  net_.unlisten(addr_);
  dialing_.clear();
  incoming_.clear();
  replicas_.clear();
  redial_at_.clear();
  unlinked_.clear();
  reports_.clear();
  budget_ = {};
  spare_ = {};
  listener_.reset();
  net_.remove_provider(provider_.get());
  provider_.reset();
}

void SimNode::register_node() {
  idl::NodeInfo info;
  info.__set_node_id(node_id_);
  info.__set_admin_addr(admin_addr_);
  info.__set_fabric_addr(addr_);
  info.__set_zone(zone_);
  const std::uint64_t sent = net_.clock.now_ns();
  auto r = net_.controller->register_node(info, stats().partitions);
  if (!r) {
    log("register failed: " + r.error().describe());
    return;
  }
  node_id_ = r->node_id;
  node_epoch_ = r->node_epoch;
  lease_ms_ = r->lease_ms;
  lease_deadline_ns_ = lease_ms_ > 0 ? sent + static_cast<std::uint64_t>(lease_ms_) * 1'000'000 : ~0ull;
  admin_.set_identity(admin_addr_, node_id_, node_epoch_);
  next_heartbeat_ns_ = net_.clock.now_ns() + 100'000'000;
  log("registered as " + node_id_ + " incarnation " + std::to_string(node_epoch_));
}

void SimNode::accept_one() {
  if (!listener_) return;
  if (!spare_.ready()) {
    auto b = Link::Buffers::allocate(*provider_);
    if (!b) return;
    spare_ = std::move(b.value());
  }
  // The peer's connect has returned: the connection is there (real time
  // bounds only a broken provider).
  auto link = Link::accept(*provider_, *listener_, spare_, std::chrono::milliseconds(2000));
  if (!link) {
    log("accept failed: " + link.error().message);
    return;
  }
  incoming_.push_back({std::move(link.value()), net_.clock.now_ns() + 5'000'000'000ull});
}

int SimNode::step() {
  if (!alive()) return 0;
  int work = 0;
  const std::uint64_t now = net_.clock.now_ns();
  for (auto& in : incoming_) {
    std::byte buf[wire::kMaxMessage];
    bool gone = false;
    const std::uint32_t got = in.link->poll_message(buf, &gone);
    if (got > 0) {
      ++work;
      dispatch(std::move(in.link), buf, got);
    } else if (gone || now > in.deadline_ns) {
      in.link.reset();
    }
  }
  std::erase_if(incoming_, [](const Incoming& in) { return !in.link; });
  const bool leased = now < lease_deadline_ns_;
  for (auto& [key, rep] : replicas_) {
    rep->set_lease_valid_st(leased);
    work += rep->do_work();
  }
  for (auto it = dialing_.begin(); it != dialing_.end();) {
    Outgoing& out = it->second;
    if (out.dial.poll() == chain::Link::DialState::waiting) {
      if (now < out.deadline_ns) {
        ++it;
        continue;
      }
      out.dial.fail(fabric::make_error(fabric::Errc::timeout, "no answer to the replica hello"));
    }
    auto d = out.dial.take();
    auto rep = replicas_.find(it->first);
    const bool ok = d.welcome && d.welcome->status == wire::Status::ok;
    if (ok && rep != replicas_.end() && rep->second->epoch() == out.epoch && rep->second->wants_successor()) {
      const bool attached = rep->second->attach_successor(std::move(d.link), *d.welcome);
      log("successor link epoch " + std::to_string(out.epoch) + (attached ? " attached" : " refused"));
    } else {
      log("successor dial epoch " + std::to_string(out.epoch) +
          " failed: " + (d.welcome ? std::string(wire::to_string(d.welcome->status)) : d.error.message));
      redial_at_[it->first] = now + 200'000'000;
    }
    it = dialing_.erase(it);
    ++work;
  }
  return work;
}

void SimNode::dispatch(std::unique_ptr<Link> link, const std::byte* msg, std::uint32_t len) {
  auto kind = wire::peek(msg, len);
  auto route = [&]<class Hello, class Welcome>(
                   void (chain::Replica::*attach)(std::unique_ptr<Link>, const Hello&), Welcome w,
                   wire::Status missing, const char* what) {
    auto h = wire::decode<Hello>(msg, len);
    auto it = h ? replicas_.find({std::string(h->ref.name()), h->ref.partition}) : replicas_.end();
    log(std::string("hello from a ") + what + (it != replicas_.end() ? "" : " (no replica)"));
    if (it != replicas_.end()) return (it->second.get()->*attach)(std::move(link), *h);
    w.status = h ? missing : wire::Status::bad_request;
    (void)link->send(w);
    link->poll_send();
  };
  if (kind == wire::Kind::replica_hello) {
    route(&chain::Replica::attach_predecessor, wire::ReplicaWelcome{}, wire::Status::not_ready,
          "predecessor");
  } else if (kind == wire::Kind::publisher_hello) {
    route(&chain::Replica::attach_publisher, wire::PublisherWelcome{}, wire::Status::unknown_channel,
          "publisher");
  } else if (kind == wire::Kind::subscriber_hello) {
    route(&chain::Replica::attach_subscriber, wire::SubscriberWelcome{}, wire::Status::unknown_channel,
          "subscriber");
  } else if (kind == wire::Kind::commit_watch_hello) {
    route(&chain::Replica::attach_watcher, wire::CommitWatchWelcome{}, wire::Status::unknown_channel,
          "watcher");
  }
}

void SimNode::housekeeping() {
  if (!alive()) return;
  const std::uint64_t now = net_.clock.now_ns();
  next_housekeeping_ns_ = now + 2'000'000;
  for (auto& [key, rep] : replicas_) {
    rep->tick();
    const auto& c = rep->config();
    for (auto& f : rep->take_faults()) {
      if (f.node.empty()) continue;
      log("link fault " + f.node + ": " + f.reason);
      idl::FailureReport r;
      r.reporter = node_id_;
      r.suspect_node_id = f.node;
      r.channel = c.channel;
      r.partition = static_cast<std::int32_t>(c.partition);
      r.epoch = static_cast<std::int64_t>(c.epoch);
      r.reason = f.reason;
      reports_.push_back(std::move(r));
    }
    if (!rep->wants_successor()) {
      unlinked_.erase(key);
      continue;
    }
    if (!dialing_.contains(key) && now >= redial_at_[key]) {
      auto d = net_.dial<wire::ReplicaWelcome>(
          *provider_, c.successor_addr, rep->successor_hello(),
          [cw = rep->commit_word_region()](fabric::Endpoint& ep, wire::ReplicaHello& h) {
            return chain::expose_into(ep, *cw, h.commit_word);
          });
      log("dials successor " + c.successor_node + " at epoch " + std::to_string(c.epoch));
      dialing_.emplace(key, Outgoing{c.epoch, std::move(d), now + 2'000'000'000ull});
    }
    if (rep->suspended()) continue;
    auto [u, fresh] = unlinked_.try_emplace(key);
    if (fresh || u->second.epoch != c.epoch) u->second = Unlinked{c.epoch, now, now + 200'000'000};
    if (now >= u->second.report_at_ns) {
      idl::FailureReport r;
      r.reporter = node_id_;
      r.suspect_node_id = c.successor_node;
      r.channel = c.channel;
      r.partition = static_cast<std::int32_t>(c.partition);
      r.epoch = static_cast<std::int64_t>(c.epoch);
      r.reason = "no link to the successor";
      reports_.push_back(std::move(r));
      u->second.report_at_ns = now + 200'000'000;
    }
  }
  admin_.set_stats(admin_addr_, stats());
}

void SimNode::heartbeat() {
  if (!alive()) return;
  next_heartbeat_ns_ = net_.clock.now_ns() + 100'000'000;
  idl::HeartbeatRequest hb;
  hb.node_id = node_id_;
  hb.node_epoch = node_epoch_;
  hb.stats = stats();
  const std::uint64_t sent = net_.clock.now_ns();
  auto reply = net_.controller->heartbeat(hb);
  if (reply && !reply->fenced && lease_ms_ > 0) {
    lease_deadline_ns_ = sent + static_cast<std::uint64_t>(lease_ms_) * 1'000'000;
  }
  if (reply && reply->fenced) {
    log("fenced: suspends every replica and registers again");
    lease_deadline_ns_ = 0;
    for (auto& [key, rep] : replicas_) rep->suspend_st();
    reports_.clear();
    register_node();
  } else if (!reply && reply.code() == idl::ErrorCode::UNKNOWN_NODE) {
    register_node();
  }
  for (const auto& r : reports_) (void)net_.controller->report_failure(r);
  reports_.clear();
}

void SimNode::apply_admin_calls() {
  if (!alive()) return;
  for (auto& call : admin_.take(admin_addr_)) {
    if (call.kind == AdminCall::Kind::configure) {
      configure(call.assignment);
    } else {
      fence(call.channel, static_cast<std::uint32_t>(call.partition), static_cast<std::uint64_t>(call.epoch));
    }
  }
}

// As Broker::configure_st and BrokerAdminServer::configureChain.
void SimNode::configure(const idl::ChainAssignment& a) {
  chain::ReplicaConfig cfg;
  if (!broker::replica_config_for(node_id_, a, &cfg)) {
    fence(a.route.channel, static_cast<std::uint32_t>(a.route.partition),
          static_cast<std::uint64_t>(a.route.epoch));
    return;
  }
  cfg.budget = &budget_;
  cfg.log.grace_ns = 1'000'000'000;
  const Key key{cfg.channel, cfg.partition};
  auto it = replicas_.find(key);
  if (it != replicas_.end() && it->second->suspended() && cfg.epoch > it->second->epoch() &&
      (cfg.is_joining() || cfg.start_offset != it->second->config().start_offset)) {
    replicas_.erase(it);
    it = replicas_.end();
  }
  const std::string role = cfg.is_joining() ? "joining"
                           : cfg.is_head()  ? (cfg.is_tail() ? "head+tail" : "head")
                           : cfg.is_tail()  ? "tail"
                                            : "middle";
  if (it == replicas_.end()) {
    auto r = chain::Replica::create(*provider_, cfg, net_.clock);
    if (!r) {
      log("cannot create replica: " + r.error().message);
      return;
    }
    replicas_.emplace(key, std::move(r.value()));
    log("replica created at epoch " + std::to_string(cfg.epoch) + " as " + role);
    return;
  }
  if (cfg.epoch == it->second->epoch()) return;
  const bool moved = it->second->reconfigure(cfg);
  log("replica " + std::string(moved ? "moved to" : "refused") + " epoch " + std::to_string(cfg.epoch) +
      " as " + role);
}

void SimNode::fence(const std::string& channel, std::uint32_t partition, std::uint64_t epoch) {
  auto it = replicas_.find({channel, partition});
  if (it == replicas_.end() || it->second->epoch() > epoch) return;
  log("replica fenced at epoch " + std::to_string(epoch));
  unlinked_.erase(it->first);
  dialing_.erase(it->first);
  replicas_.erase(it);
}

const chain::Replica* SimNode::replica(const std::string& channel, std::uint32_t partition) const {
  auto it = replicas_.find({channel, partition});
  return it == replicas_.end() ? nullptr : it->second.get();
}

idl::NodeStats SimNode::stats() const {
  idl::NodeStats out;
  std::int64_t segments = 0;
  std::int64_t bytes = 0;
  std::vector<idl::PartitionProgress> partitions;
  for (const auto& [key, rep] : replicas_) {
    const auto s = rep->stats();
    segments += s.segments;
    bytes += static_cast<std::int64_t>(s.bytes);
    idl::PartitionProgress p;
    p.__set_channel(key.first);
    p.__set_partition(static_cast<std::int32_t>(key.second));
    p.__set_epoch(static_cast<std::int64_t>(rep->epoch()));
    p.__set_end_offset(static_cast<std::int64_t>(s.end_offset));
    p.__set_commit_offset(static_cast<std::int64_t>(s.commit_offset));
    p.__set_successor_backlog_bytes(s.successor_backlog_bytes);
    p.__set_successor_synced(s.successor_synced);
    partitions.push_back(std::move(p));
  }
  out.__set_segments(segments);
  out.__set_bytes(bytes);
  out.__set_connections(0);
  out.partitions = std::move(partitions);
  out.__isset.partitions = true;
  return out;
}

}  // namespace catena::sim
