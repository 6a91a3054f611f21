// Broker::Impl, the node's data plane behind catena::broker::Broker (see
// broker.hpp for what it does and which thread does what). Private to
// broker/node/src: broker.cpp holds the data-plane thread's side and the
// public methods, broker_links.cpp the acceptor and connector threads.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>

#include <catena/broker/broker.hpp>
#include <catena/chain/commit_watch.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/domain.hpp>
#include <catena/chain/kept_replica.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/wire.hpp>
#include <catena/fabric/idle.hpp>
#include <catena/fabric/listen_address.hpp>
#include <catena/fabric/thread_annotations.hpp>
#include <catena/fabric/thread_owner.hpp>

namespace catena::broker {

using chain::Link;
namespace wire = chain::wire;
using namespace std::chrono_literals;

namespace detail {

// A hello-bearing connection waiting for the agent.
struct Incoming {
  std::unique_ptr<Link> link;
  std::vector<std::byte> hello;
};

// A successor link the connector opened (or failed to).
struct Outgoing {
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;
  std::unique_ptr<Link> link;  // null on failure
  wire::ReplicaWelcome welcome{};
  std::string error;  // why link is null
};

struct ConnectRequest {
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;
  std::string addr;
  wire::ReplicaHello hello{};
  std::shared_ptr<const fabric::MemoryRegion> commit_word;  // exposed on the new link
};

using Key = std::pair<std::string, std::uint32_t>;

}  // namespace detail

using namespace detail;

class Broker::Impl {
 public:
  Impl(const BrokerConfig& cfg, const catena::Clock& clock) : cfg_(cfg), clock_(clock) {
    budget_.ring_bytes_limit = cfg.session_memory_bytes;
    segments_.limit_bytes =
        cfg.segment_memory_bytes != 0 ? cfg.segment_memory_bytes : default_segment_memory_bytes(cfg.provider);
  }

  fabric::Result<void> open(std::unique_ptr<fabric::Provider> provider) {
    if (provider) {
      provider_ = std::move(provider);
      cfg_.provider = provider_->name();
    } else {
      auto p = fabric::Provider::open(cfg_.provider, fabric::ProviderOptions{cfg_.keep_dir});
      if (!p) return p.error();
      provider_ = std::move(p.value());
    }
    if (!cfg_.keep_dir.empty()) take_inventory();
    auto l = provider_->listen(cfg_.fabric_listen);
    if (!l) return l.error();
    listener_ = std::move(l.value());
    last_pass_ns_.store(clock_.now_ns());
    // Named, so that operators (and the data-plane failure test) can find them.
    agent_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "catena-data");  // 15 characters at most
      agent_loop();
    });
    acceptor_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "catena-accept");
      acceptor_loop();
    });
    connector_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "catena-connect");
      connector_loop();
    });
    return {};
  }

  void stop() {
    if (stopping_.exchange(true)) return;
    {
      MutexLock lk(connect_mu_);
      connect_cv_.notify_all();
    }
    if (acceptor_.joinable()) acceptor_.join();
    if (connector_.joinable()) connector_.join();
    if (agent_.joinable()) agent_.join();
  }

  ~Impl() { stop(); }

  // --- any thread ------------------------------------------------------------
  ConfigureResult run_on_agent(std::function<ConfigureResult()> fn) {
    auto task = std::make_shared<std::packaged_task<ConfigureResult()>>(std::move(fn));
    auto fut = task->get_future();
    post([task] { (*task)(); });
    if (fut.wait_for(10s) != std::future_status::ready) {
      return {ConfigureStatus::failed, 0, "data-plane thread did not answer in 10 s"};
    }
    return fut.get();
  }

  void post(std::function<void()> fn) {
    MutexLock lk(inbox_mu_);
    inbox_.push_back(std::move(fn));
    inbox_flag_.store(true, std::memory_order_release);
  }

  NodeStats stats() const {
    MutexLock lk(stats_mu_);
    return stats_;
  }

  std::vector<LinkReport> take_link_reports() {
    MutexLock lk(stats_mu_);
    std::vector<LinkReport> out;
    out.swap(link_reports_);
    return out;
  }

  // Before the threads start: what the keep directory holds. Per partition
  // the newest replica is kept for a chain to claim; the rest is dropped.
  void take_inventory() {
    auto inv = chain::list_kept_replicas(*provider_);
    for (const auto& broken : inv.broken) {
      spdlog::warn("kept memory: {} is incomplete or not valid: dropped", broken);
      chain::discard_kept_replica(*provider_, broken);
    }
    for (auto& k : inv.replicas) {
      auto [it, fresh] = kept_.try_emplace(Key{k.channel, k.partition}, k);
      if (!fresh && it->second.epoch < k.epoch) std::swap(it->second, k);
      if (!fresh) discard_kept_st(k);
    }
    for (const auto& [key, k] : kept_) {
      spdlog::info("kept memory: {}/{} from epoch {}, committed below offset {}: offered to its chain",
                   k.channel, k.partition, k.epoch, k.commit);
    }
    // Reported from the first registration on, before the data plane's
    // first pass refreshes the stats.
    NodeStats st;
    kept_stats_st(st);
    st.zeroed_bytes = zeroed_bytes_;
    st.link_rebuilds = link_rebuilds_;
    st.registered_bytes =
        static_cast<std::uint64_t>(std::max<std::int64_t>(provider_->registered_bytes(), 0));
    st.warm_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(provider_->warm_bytes(), 0));
    MutexLock lk(stats_mu_);
    stats_ = std::move(st);
  }

  void kept_stats_st(NodeStats& st) const {
    for (const auto& [key, k] : kept_) {
      PartitionStats ps{k.channel, k.partition, k.epoch, 0, 0, {}, nullptr};
      ps.replica.end_offset = k.commit;
      ps.replica.commit_offset = k.commit;
      st.kept.push_back(std::move(ps));
    }
  }

  // Drops a replica of the partition map and what it kept.
  void drop_replica_st(std::map<Key, std::unique_ptr<chain::Replica>>::iterator it) {
    release_replica_st(std::move(it->second));
    unlinked_.erase(it->first);
    replicas_.erase(it);
  }

  // Every way a replica's memory stops being that replica's (fenced, left
  // out of its chain, a suspended copy started afresh, a retired range let
  // go or expired) ends here: its memory is zeroed before anyone else can
  // be given it (README, "Tenants"). Destroying the replica disconnects its
  // links and frees its regions, which the provider zeroes before it hands
  // them out again (Provider::allocate); a kept replica's names are then
  // discarded, which zeroes their bytes in the keep directory's file.
  // Nothing is zeroed record by record on the data path.
  void release_replica_st(std::unique_ptr<chain::Replica> rep) {
    const std::string keep_name = rep->config().keep_name;
    const std::uint64_t bytes = rep->memory_bytes();
    rep.reset();
    if (!keep_name.empty()) chain::discard_kept_replica(*provider_, keep_name);
    zeroed_bytes_ += bytes;
  }

  // A kept copy found at start that no chain takes.
  void discard_kept_st(const chain::KeptPartition& k) {
    chain::discard_kept_replica(*provider_, k.keep_name);
    zeroed_bytes_ += std::uint64_t{k.slot_count} * k.segment_bytes + chain::kKeptMetaBytes;
  }

  // --- data-plane thread -------------------------------------------------------
  ConfigureResult configure_st(const chain::ReplicaConfig& in,
                               const std::vector<chain::ProducerSnapshot>& producers = {}) {
    CATENA_ST_CHECK(data_plane_);
    chain::ReplicaConfig cfg = in;
    cfg.node_id = cfg_.node_id;
    cfg.slot_count = cfg_.slot_count;
    cfg.log.grace_ns = cfg_.grace_ms * 1'000'000ull;
    cfg.log.linger_ns = cfg_.segment_linger_ms * 1'000'000ull;
    cfg.log.min_segment_bytes = cfg_.min_segment_bytes;
    cfg.link_stall_ns = cfg_.link_stall_ms * 1'000'000ull;
    cfg.limits = cfg_.limits;
    cfg.budget = &budget_;
    cfg.segment_budget = &segments_;
    cfg.stage_latency = &stages_;
    if (!cfg.tenant.empty()) {
      // One per tenant, never erased: replicas keep pointers to it.
      TenantShare& t = tenants_[cfg.tenant];
      cfg.tenant_budget = &t.rings;
      cfg.tenant_rate = &t.rate;
      cfg.tenant_seats = &t.seats;
    }
    if (auto r = chain::check_replica_config(cfg); !r)
      return {ConfigureStatus::invalid, 0, r.error().message};
    Key key{cfg.channel, cfg.partition};
    auto it = replicas_.find(key);
    if (it != replicas_.end() && it->second->suspended() && cfg.epoch > it->second->epoch() &&
        (cfg.is_joining() || cfg.start_offset != it->second->config().start_offset)) {
      // A fenced node's kept copy resumes only when the controller puts it
      // back into the same chain. Joining a chain, or in a chain rebuilt at
      // a new offset generation, it would keep bytes that chain never wrote
      // (an uncommitted suffix, old offsets): start empty instead.
      spdlog::info("partition {}/{}: dropping the suspended copy at epoch {} to start afresh at epoch {}",
                   cfg.channel, cfg.partition, it->second->epoch(), cfg.epoch);
      drop_replica_st(it);
      it = replicas_.end();
    }
    if (it == replicas_.end()) {
      // Kept memory: what a crashed process of this node held of the
      // partition is recovered (Replica::create) and only the rest copied.
      std::optional<chain::KeptPartition> claimed;
      if (!cfg_.keep_dir.empty()) {
        auto kept = kept_.find(key);
        if (kept != kept_.end()) {
          claimed = std::move(kept->second);
          kept_.erase(kept);
        }
        cfg.keep_name =
            claimed ? claimed->keep_name : chain::keep_name_for(cfg.channel, cfg.partition, cfg.epoch);
      }
      auto r = chain::Replica::create(*provider_, cfg, clock_);
      if (!r) {
        // What it had allocated under the keep name stays kept: a copy found
        // at start is offered again (a fence drops it), a new name is dropped.
        if (claimed) {
          kept_.emplace(key, std::move(*claimed));
        } else if (!cfg.keep_name.empty()) {
          chain::discard_kept_replica(*provider_, cfg.keep_name);
        }
        return {ConfigureStatus::invalid, 0, r.error().message};
      }
      if (!producers.empty()) r.value()->merge_producers_st(producers);  // before anyone can append
      if (const auto& rec = r.value()->recovered(); rec.end != 0) {
        spdlog::info("partition {}/{}: recovered offsets [{}, {}) from kept memory ({} records, {} bytes)",
                     cfg.channel, cfg.partition, rec.start, rec.end, rec.records, rec.bytes);
      }
      replicas_.emplace(key, std::move(r.value()));
      spdlog::info("partition {}/{}: epoch {} position {}/{}{}", cfg.channel, cfg.partition, cfg.epoch,
                   cfg.position, cfg.chain_length, cfg.is_joining() ? " (joining)" : "");
      return {ConfigureStatus::applied, cfg.epoch, ""};
    }
    chain::Replica& rep = *it->second;
    if (cfg.epoch == rep.epoch()) {
      // The controller pushes the route again at its epoch when the
      // channel's retention changes (alterRetention): only the ttl is taken.
      if (cfg.log.ttl_ns != rep.config().log.ttl_ns) {
        spdlog::info("partition {}/{}: retention {} ms -> {} ms", cfg.channel, cfg.partition,
                     rep.config().log.ttl_ns / 1'000'000, cfg.log.ttl_ns / 1'000'000);
        rep.set_ttl_st(cfg.log.ttl_ns);
      }
      return {ConfigureStatus::applied, cfg.epoch, "already at this epoch"};
    }
    if (!rep.reconfigure(cfg)) {
      return {ConfigureStatus::stale_epoch, rep.epoch(),
              "epoch " + std::to_string(cfg.epoch) + " is older than " + std::to_string(rep.epoch())};
    }
    spdlog::info("partition {}/{}: now epoch {} position {}/{}{}", cfg.channel, cfg.partition, cfg.epoch,
                 cfg.position, cfg.chain_length, cfg.is_joining() ? " (joining)" : "");
    return {ConfigureStatus::applied, cfg.epoch, ""};
  }

  // The head of (channel, partition) at `epoch`, or why not.
  chain::Replica* head_at_st(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                             ConfigureResult* why) {
    CATENA_ST_CHECK(data_plane_);
    auto it = replicas_.find({channel, partition});
    if (it == replicas_.end()) {
      *why = {ConfigureStatus::invalid, 0, "not held here"};
      return nullptr;
    }
    chain::Replica& rep = *it->second;
    if (rep.epoch() != epoch) {
      *why = {ConfigureStatus::stale_epoch, rep.epoch(),
              "the replica is at epoch " + std::to_string(rep.epoch()) + ", not " + std::to_string(epoch)};
      return nullptr;
    }
    if (!rep.config().is_head()) {
      *why = {ConfigureStatus::invalid, rep.epoch(), "not the head"};
      return nullptr;
    }
    return &rep;
  }

  MarkerResult append_marker_st(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                                const chain::MarkerSpec& marker) {
    ConfigureResult why;
    chain::Replica* rep = head_at_st(channel, partition, epoch, &why);
    if (rep == nullptr) return {why.status, why.current_epoch, why.message, {}};
    const std::uint64_t generation = marker.generation;
    const bool first = rep->log().marker().generation < generation;
    MarkerResult out{ConfigureStatus::applied, rep->epoch(), "", rep->append_marker_st(marker)};
    if (out.state.status != chain::AppendStatus::ok) {
      return {ConfigureStatus::failed,
              rep->epoch(),
              out.state.status == chain::AppendStatus::no_memory
                  ? "the node's segment memory budget is spent: try again"
                  : "the log is full: try again",
              {}};
    }
    if (first) {
      spdlog::info("partition {}/{}: marker of generation {} at offset {}", channel, partition, generation,
                   out.state.offset);
    }
    return out;
  }

  SealResult seal_st(const std::string& channel, std::uint32_t partition, std::uint64_t epoch) {
    ConfigureResult why;
    chain::Replica* found = head_at_st(channel, partition, epoch, &why);
    if (found == nullptr) return {why.status, why.current_epoch, why.message, {}};
    chain::Replica& rep = *found;
    const bool first = !rep.sealed();
    SealResult out{ConfigureStatus::applied, rep.epoch(), "", rep.seal_st()};
    if (first) {
      spdlog::info("partition {}/{}: sealed at epoch {}, offset {} (committed {})", channel, partition, epoch,
                   out.state.end_offset, out.state.commit_offset);
    }
    return out;
  }

  ConfigureResult retire_st(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                            std::uint64_t range_end, Broker::NextChain next) {
    CATENA_ST_CHECK(data_plane_);
    const RetiredKey rkey{channel, partition, epoch};
    if (auto r = retired_.find(rkey); r != retired_.end()) {
      r->second->set_next_chain_st(next.epoch, std::move(next.head_addr));
      return {ConfigureStatus::applied, epoch, "already retired"};
    }
    auto it = replicas_.find({channel, partition});
    if (it == replicas_.end() || it->second->epoch() != epoch)
      return {ConfigureStatus::applied, 0, "not held here"};
    it->second->retire_st(range_end);
    it->second->set_next_chain_st(next.epoch, std::move(next.head_addr));
    spdlog::info(
        "partition {}/{}: the range written at epoch {} ends at offset {}: read-only until it expires",
        channel, partition, epoch, range_end);
    retired_.emplace(rkey, std::move(it->second));
    unlinked_.erase(it->first);
    connecting_.erase(it->first);
    replicas_.erase(it);
    return {ConfigureStatus::applied, epoch, ""};
  }

  void set_access_secret_st(const std::string& channel, std::uint32_t partition,
                            const chain::wire::AccessSecret& secret) {
    CATENA_ST_CHECK(data_plane_);
    if (auto it = replicas_.find({channel, partition}); it != replicas_.end()) {
      it->second->set_access_secret_st(secret);
    }
    for (auto& [key, rep] : retired_) {
      if (std::get<0>(key) == channel && std::get<1>(key) == partition) rep->set_access_secret_st(secret);
    }
  }

  void set_tenant_limits_st(const std::string& tenant, std::uint64_t publisher_ring_bytes,
                            std::uint64_t publish_bytes_per_sec, std::uint32_t sessions) {
    CATENA_ST_CHECK(data_plane_);
    TenantShare& t = tenants_[tenant];
    t.seats.limit = sessions;
    t.rings.ring_bytes_limit = publisher_ring_bytes;
    if (t.rate.bytes_per_sec() != publish_bytes_per_sec) t.rate.set_rate(publish_bytes_per_sec);
  }

  void drop_retired_st(const std::string& channel, std::uint32_t partition,
                       const std::vector<std::uint64_t>& keep) {
    CATENA_ST_CHECK(data_plane_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      const auto& [ch, p, epoch] = it->first;
      if (ch != channel || p != partition || std::find(keep.begin(), keep.end(), epoch) != keep.end()) {
        ++it;
        continue;
      }
      spdlog::info("partition {}/{}: the range written at epoch {} is no longer served here", ch, p, epoch);
      release_replica_st(std::move(it->second));
      it = retired_.erase(it);
    }
  }

  ConfigureResult fence_st(const std::string& channel, std::uint32_t partition, std::uint64_t epoch) {
    CATENA_ST_CHECK(data_plane_);
    auto it = replicas_.find({channel, partition});
    if (it == replicas_.end()) {
      // A kept copy no chain wants: its memory goes.
      if (auto kept = kept_.find({channel, partition}); kept != kept_.end()) {
        spdlog::info("partition {}/{}: the copy kept from epoch {} is not wanted: dropped", channel,
                     partition, kept->second.epoch);
        discard_kept_st(kept->second);
        kept_.erase(kept);
        return {ConfigureStatus::applied, epoch, ""};
      }
      return {ConfigureStatus::applied, 0, "not held here"};
    }
    if (it->second->epoch() > epoch) {
      return {ConfigureStatus::stale_epoch, it->second->epoch(), "replica is newer than the fence"};
    }
    drop_replica_st(it);
    spdlog::info("partition {}/{}: fenced at epoch {}, replica dropped", channel, partition, epoch);
    return {ConfigureStatus::applied, epoch, ""};
  }

  void dispatch_st(Incoming& in) {
    CATENA_ST_CHECK(data_plane_);
    auto kind = wire::peek(in.hello.data(), static_cast<std::uint32_t>(in.hello.size()));
    const auto* msg = in.hello.data();
    const auto len = static_cast<std::uint32_t>(in.hello.size());
    auto find = [&](const wire::ChannelRef& ref) -> chain::Replica* {
      // A hello naming the epoch of a retired range reaches that range.
      if (auto r = retired_.find({std::string(ref.name()), ref.partition, ref.epoch}); r != retired_.end()) {
        return r->second.get();
      }
      auto it = replicas_.find({std::string(ref.name()), ref.partition});
      return it == replicas_.end() ? nullptr : it->second.get();
    };
    // Decodes a hello of type Hello and hands the link to the replica it
    // names, or answers with a Welcome saying why not (`missing`: the
    // partition is not held here).
    auto route_hello = [&]<class Hello, class Welcome>(
                           void (chain::Replica::*attach)(std::unique_ptr<chain::Link>, const Hello&),
                           Welcome w, wire::Status missing) {
      auto h = wire::decode<Hello>(msg, len);
      chain::Replica* r = h ? find(h->ref) : nullptr;
      // A connection of another protection domain than the channel's tenant
      // (chain/domain.hpp) could not reach the replica's memory anyway; it
      // is refused before it gets that far.
      const bool own_domain = h && in.link->ep().domain() == chain::domain_of_channel(h->ref.name());
      if (r != nullptr && own_domain) return (r->*attach)(std::move(in.link), *h);
      if (h && !own_domain) {
        spdlog::warn("refused a hello for {}/{} from {}: its connection is of another protection domain",
                     h->ref.name(), h->ref.partition, in.link->ep().peer_address());
      }
      w.status = !h ? wire::Status::bad_request : !own_domain ? wire::Status::unauthenticated : missing;
      (void)in.link->send(w);
      in.link->poll_send();
      // The answer must leave before the connection goes: a link dropped
      // with its send in flight can hang up on the client before the answer
      // arrives (seen on the dpdk provider under TSan). Such a link is kept
      // until its send completes, for at most a second, and only so many.
      if (in.link->sends_in_flight() > 0 && refused_.size() < kMaxRefusedLinks) {
        refused_.push_back({std::move(in.link), clock_.now_ns() + kRefusedLinkGraceNs});
      }
    };
    if (kind == wire::Kind::replica_hello) {
      route_hello(&chain::Replica::attach_predecessor, wire::ReplicaWelcome{}, wire::Status::not_ready);
    } else if (kind == wire::Kind::publisher_hello) {
      route_hello(&chain::Replica::attach_publisher, wire::PublisherWelcome{}, wire::Status::unknown_channel);
    } else if (kind == wire::Kind::subscriber_hello) {
      route_hello(&chain::Replica::attach_subscriber, wire::SubscriberWelcome{},
                  wire::Status::unknown_channel);
    } else if (kind == wire::Kind::commit_watch_hello) {
      route_hello(&chain::Replica::attach_watcher, wire::CommitWatchWelcome{}, wire::Status::unknown_channel);
    } else {
      spdlog::warn("closing fabric connection from {}: first message is not a hello",
                   in.link->ep().peer_address());
    }
  }

  void agent_loop() {
    data_plane_.bind_to_current_thread();
    if (cfg_.pin_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cfg_.pin_cpu, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    fabric::BackoffIdle idle;
    std::uint64_t next_tick = 0;
    while (!stopping_.load(std::memory_order_acquire)) {
      int work = 0;
      if (inbox_flag_.load(std::memory_order_acquire)) work += drain_inbox_st();
      const std::uint64_t now = clock_.now_ns();
      const bool leased = now < lease_deadline_ns_.load(std::memory_order_acquire);
      std::size_t busy = 0;  // replicas that had something to do
      for (auto& [key, rep] : replicas_) {
        rep->set_lease_valid_st(leased);
        const int w = rep->do_work();
        busy += w > 0 ? 1 : 0;
        work += w;
      }
      for (auto& [key, rep] : retired_) {
        rep->set_lease_valid_st(leased);
        work += rep->do_work();
      }
      if (now >= next_tick) {
        next_tick = now + 2'000'000;  // 2 ms housekeeping
        housekeeping_st();
      }
      // A pass in which fewer than a quarter of the replicas had anything
      // to do gives up the core before the next one: on shared cores the
      // processes that feed those replicas run meanwhile, and the next pass
      // finds batches where this one found single records (256 partitions
      // on 5 nodes, 2 cores: 8-12% more records per second). On a core of
      // its own the yield returns at once. Counted in replicas, not in
      // things done: a node with a busy partition beside a few idle ones
      // must not yield after every pass (it halved the 64 KiB throughput
      // row, whose nodes also hold the latency rows' replicas).
      if (busy > 0 && busy * 4 < replicas_.size()) std::this_thread::yield();
      idle.idle(work);
    }
    retired_.clear();
    replicas_.clear();
  }

  int drain_inbox_st() {
    CATENA_ST_CHECK(data_plane_);
    std::deque<std::function<void()>> batch;
    {
      MutexLock lk(inbox_mu_);
      batch.swap(inbox_);
      inbox_flag_.store(false, std::memory_order_release);
    }
    for (auto& fn : batch) fn();
    return static_cast<int>(batch.size());
  }

  void housekeeping_st() {
    CATENA_ST_CHECK(data_plane_);
    last_pass_ns_.store(clock_.now_ns(), std::memory_order_relaxed);
    NodeStats st;
    std::vector<LinkReport> reports;
    const std::uint64_t now = clock_.now_ns();
    std::erase_if(refused_, [now](RefusedLink& r) {
      r.link->poll_send();
      return r.link->sends_in_flight() == 0 || r.link->broken() || now >= r.deadline_ns;
    });
    for (auto& [key, rep] : replicas_) {
      rep->tick();
      const auto& c = rep->config();
      for (auto& f : rep->take_faults()) {
        if (!f.node.empty())
          reports.push_back({std::move(f.node), c.channel, c.partition, c.epoch, std::move(f.reason)});
      }
      if (rep->wants_successor()) {
        if (now >= reconnect_at_[key]) {
          auto pending = connecting_.find(key);
          if (pending == connecting_.end() || pending->second != rep->epoch()) request_connect_st(*rep);
        }
        if (!rep->suspended()) note_unlinked_st(key, *rep, now, &reports);
      } else {
        unlinked_.erase(key);
      }
      PartitionStats ps{c.channel,      c.partition,  c.epoch,        c.position,
                        c.chain_length, rep->stats(), rep->counters()};
      st.segments += ps.replica.segments;
      st.bytes += ps.replica.bytes;
      st.connections += ps.replica.publishers + ps.replica.subscribers + ps.replica.watchers +
                        ps.replica.successor_connected + ps.replica.predecessor_connected;
      st.partitions.push_back(std::move(ps));
    }
    // Retired ranges count towards what the node holds, not as partitions
    // (the controller reads a partition's progress from its current replica).
    for (auto it = retired_.begin(); it != retired_.end();) {
      it->second->tick();
      const chain::ReplicaStats rs = it->second->stats();
      if (rs.segments == 0) {
        const auto& [ch, p, epoch] = it->first;
        spdlog::info("partition {}/{}: the range written at epoch {} expired", ch, p, epoch);
        release_replica_st(std::move(it->second));
        it = retired_.erase(it);
        continue;
      }
      st.segments += rs.segments;
      st.bytes += rs.bytes;
      st.connections += rs.subscribers;
      ++it;
    }
    kept_stats_st(st);
    // Segments given back as they expired were zeroed too (by the provider).
    st.zeroed_bytes = zeroed_bytes_ + segments_.released_bytes;
    st.link_rebuilds = link_rebuilds_;
    st.registered_bytes =
        static_cast<std::uint64_t>(std::max<std::int64_t>(provider_->registered_bytes(), 0));
    st.warm_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(provider_->warm_bytes(), 0));
    st.segment_memory_bytes = segments_.used_bytes;
    st.segment_memory_limit_bytes = segments_.limit_bytes;
    st.segment_memory_refusals = segments_.refusals;
    for (std::uint32_t p = 0; p < chain::StageLatency::kPositions; ++p) {
      const chain::StageLatency::Summary sum = stages_.summary(p);
      if (sum.count != 0) st.stage_latency.push_back(NodeStats::Stage{p, sum});
    }
    if (segments_.refusals > refusals_logged_ && now >= next_refusal_log_ns_) {
      const std::uint64_t arena = fabric::soft_huge_arena_bytes(cfg_.provider);
      spdlog::warn(
          "segment memory budget spent: {} of {} bytes held; {} segments refused since start "
          "(heads wait to open a segment, predecessors for a slot): raise --segment-memory-mb{} or shorten "
          "retention",
          segments_.used_bytes, segments_.limit_bytes, segments_.refusals,
          arena > 0 ? fmt::format(" and the provider's huge-page arena ({} MiB, which also holds rings and "
                                  "link buffers)",
                                  arena >> 20)
                    : std::string());
      refusals_logged_ = segments_.refusals;
      next_refusal_log_ns_ = now + 10'000'000'000ull;
    }
    MutexLock lk(stats_mu_);
    stats_ = std::move(st);
    for (auto& r : reports) link_reports_.push_back(std::move(r));
  }

  // A successor this partition cannot link to, for link_report_ms and then
  // every link_report_ms again: reported with the last dial's outcome.
  void note_unlinked_st(const Key& key, const chain::Replica& rep, std::uint64_t now,
                        std::vector<LinkReport>* reports) {
    auto [it, fresh] = unlinked_.try_emplace(key);
    Unlinked& u = it->second;
    if (fresh || u.epoch != rep.epoch())
      u = Unlinked{rep.epoch(), now, now + cfg_.link_report_ms * 1'000'000, {}};
    if (now < u.report_at) return;
    const auto& c = rep.config();
    reports->push_back({c.successor_node, c.channel, c.partition, c.epoch,
                        "no link to the successor at " + c.successor_addr + " for " +
                            std::to_string((now - u.since) / 1'000'000) + " ms" +
                            (u.last_error.empty() ? std::string() : ": " + u.last_error)});
    u.report_at = now + cfg_.link_report_ms * 1'000'000;
  }

  // One connect in flight per partition and epoch: a second one would reach
  // the successor as a new predecessor link, replace the first there, and be
  // thrown away here (this side already has the first), killing both. The
  // connector answers every request (connect_done_st), so the next attempt
  // waits for the outcome of this one however long setup takes.
  void request_connect_st(chain::Replica& rep) {
    CATENA_ST_CHECK(data_plane_);
    ConnectRequest req;
    req.channel = rep.config().channel;
    req.partition = rep.config().partition;
    req.epoch = rep.epoch();
    req.addr = rep.config().successor_addr;
    req.hello = rep.successor_hello();
    req.commit_word = rep.commit_word_region();
    connecting_[{req.channel, req.partition}] = req.epoch;
    MutexLock lk(connect_mu_);
    for (auto& q : connect_queue_) {
      if (q.channel == req.channel && q.partition == req.partition) {
        q = std::move(req);  // an older epoch's request, not yet dialled: dial the newer one instead
        return;
      }
    }
    connect_queue_.push_back(std::move(req));
    connect_cv_.notify_one();
  }

  // The connector's outcome of one request: a link to attach, or none.
  void connect_done_st(Outgoing& out) {
    CATENA_ST_CHECK(data_plane_);
    const Key key{out.channel, out.partition};
    auto pending = connecting_.find(key);
    if (pending != connecting_.end() && pending->second == out.epoch) connecting_.erase(pending);
    if (!out.link) {
      // Retry a failed link every 200 ms. A successor that answered
      // not_ready has not been configured at this epoch yet: the
      // controller pushes every member of a new chain at once, and one
      // that is a few ms behind would otherwise hold the chain's commits
      // (and every ack after a move or a repair) for 200 ms. It is retried
      // after 5 ms, doubling up to the 200 ms.
      std::uint64_t wait_ns = 200'000'000;
      if (out.welcome.status == wire::Status::not_ready) {
        auto& streak = not_ready_streak_[key];
        wait_ns = std::min<std::uint64_t>(wait_ns, 5'000'000ull << std::min(streak, 6u));
        ++streak;
      } else {
        not_ready_streak_.erase(key);
      }
      reconnect_at_[key] = clock_.now_ns() + wait_ns;
      if (auto u = unlinked_.find(key); u != unlinked_.end() && u->second.epoch == out.epoch) {
        u->second.last_error = out.error;
      }
      // A link this epoch had, lost, and whose redial failed at once: the
      // successor's process is likely gone (a reset, a refused connect).
      // Said now, once, so the controller probes it without waiting for
      // link_report_ms; a link rebuilt in place is never reported.
      if (auto l = linked_epoch_.find(key); l != linked_epoch_.end() && l->second == out.epoch &&
                                            out.welcome.status != wire::Status::not_ready) {
        linked_epoch_.erase(l);
        if (auto it = replicas_.find(key); it != replicas_.end()) {
          const auto& c = it->second->config();
          MutexLock lk(stats_mu_);
          link_reports_.push_back({c.successor_node, c.channel, c.partition, c.epoch,
                                   "successor link lost and the redial failed: " + out.error});
        }
      }
      return;
    }
    not_ready_streak_.erase(key);
    auto it = replicas_.find(key);
    if (it == replicas_.end() || it->second->epoch() != out.epoch || !it->second->wants_successor()) return;
    const std::uint64_t rebuilt_before = it->second->successor_rebuilds();
    if (!it->second->attach_successor(std::move(out.link), out.welcome)) {
      spdlog::warn("partition {}/{}: successor refused the link: {}", out.channel, out.partition,
                   wire::to_string(out.welcome.status));
    } else {
      linked_epoch_[key] = out.epoch;
      link_rebuilds_ += it->second->successor_rebuilds() - rebuilt_before;
    }
  }

  // --- acceptor and connector threads (broker_links.cpp) ---------------------
  void acceptor_loop();
  void connector_loop();

  BrokerConfig cfg_;
  const catena::Clock& clock_;
  std::unique_ptr<fabric::Provider> provider_;
  // Kept replicas found at start that no chain claimed yet (take_inventory;
  // then the data-plane thread's).
  std::map<Key, chain::KeptPartition> kept_;
  // Bytes of replica memory zeroed (release_replica_st, discard_kept_st):
  // take_inventory's, then the data-plane thread's; reported in the stats.
  std::uint64_t zeroed_bytes_ = 0;
  chain::SegmentBudget segments_;  // every replica's segment memory (BrokerConfig::segment_memory_bytes)
  chain::StageLatency stages_;     // traced records' latency to each chain position (NodeStats)
  std::uint64_t refusals_logged_ = 0;
  std::uint64_t next_refusal_log_ns_ = 0;
  // Successor links rebuilt in place at the same epoch (partition-level
  // recovery), summed over every replica this node held.
  std::uint64_t link_rebuilds_ = 0;
  std::unique_ptr<fabric::Listener> listener_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> lease_deadline_ns_{~std::uint64_t{0}};  // no lease until told one

  Mutex inbox_mu_;
  std::deque<std::function<void()>> inbox_ GUARDED_BY(inbox_mu_);
  std::atomic<bool> inbox_flag_{false};
  std::atomic<std::uint64_t> node_epoch_{0};    // set at registration, read by the admin server
  std::atomic<std::uint64_t> last_pass_ns_{0};  // the data-plane thread's last housekeeping

  Mutex connect_mu_;
  std::condition_variable connect_cv_;
  std::deque<ConnectRequest> connect_queue_ GUARDED_BY(connect_mu_);

  mutable Mutex stats_mu_;
  NodeStats stats_ GUARDED_BY(stats_mu_);
  std::vector<LinkReport> link_reports_ GUARDED_BY(stats_mu_);

  // Data-plane thread only: every _st function checks that it runs there
  // (bound when agent_loop starts).
  fabric::ThreadOwner data_plane_;
  // Publishers' rings on this node, charged by sessions; outlives every replica.
  chain::SessionBudget budget_;
  // Each tenant's share of this node (set_tenant_limits_st); std::map: its
  // entries stay where they are, and replicas point into them.
  struct TenantShare {
    chain::SessionBudget rings{~0ull, 0};
    chain::RateBudget rate;
    chain::SessionSeats seats;
  };
  std::map<std::string, TenantShare> tenants_;
  std::map<Key, std::unique_ptr<chain::Replica>> replicas_;
  // Read-only ranges of partitions that moved on, by the epoch they were written at.
  using RetiredKey = std::tuple<std::string, std::uint32_t, std::uint64_t>;
  std::map<RetiredKey, std::unique_ptr<chain::Replica>> retired_;
  // Links of refused hellos whose answer is still being sent (dispatch_st).
  struct RefusedLink {
    std::unique_ptr<Link> link;
    std::uint64_t deadline_ns = 0;
  };
  static constexpr std::size_t kMaxRefusedLinks = 256;
  static constexpr std::uint64_t kRefusedLinkGraceNs = 1'000'000'000ull;
  std::vector<RefusedLink> refused_;
  std::map<Key, std::uint64_t> reconnect_at_;
  std::map<Key, std::uint32_t> not_ready_streak_;  // successive not_ready answers of the successor
  struct Unlinked {
    std::uint64_t epoch = 0;
    std::uint64_t since = 0;      // wanting a successor link at this epoch since
    std::uint64_t report_at = 0;  // next report
    std::string last_error;       // the last dial's outcome
  };
  std::map<Key, Unlinked> unlinked_;           // partitions wanting a successor link they do not have
  std::map<Key, std::uint64_t> linked_epoch_;  // the epoch at which a partition last linked to its successor
  std::map<Key, std::uint64_t> connecting_;    // epoch of the connect request queued or being dialled

  std::thread agent_;
  std::thread acceptor_;
  std::thread connector_;
};

}  // namespace catena::broker
