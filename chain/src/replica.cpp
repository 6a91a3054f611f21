// Replica: chain links (forwarding, validation, commit propagation) and
// reconfiguration. Client sessions attach in sessions.cpp; their protocols
// are publish.hpp, delivery.hpp and commit_watch.hpp.
#include <algorithm>
#include <atomic>
#include <cstring>

#include <catena/chain/domain.hpp>
#include <catena/chain/limits.hpp>
#include <catena/chain/replica.hpp>

namespace catena::chain {
namespace {

// Forward immediates: slot in the top 5 bits, end position / 8 below.
constexpr std::uint32_t kSlotShift = 27;
constexpr std::uint32_t kEndMask = (1u << kSlotShift) - 1;
static_assert(wire::kMaxSlots <= (1u << (32 - kSlotShift)));
static_assert(limits::kMaxSegmentBytes / 8 <= kEndMask, "a full segment's end must fit the immediate");
// Largest single forward write: keeps one slot's catch-up from starving the rest.
constexpr std::uint32_t kMaxForwardChunk = 1u << 20;
// Forward work-request ids: kWrData | length << kWrLenShift | slot, so a
// completion says how many bytes reached the successor.
constexpr std::uint32_t kWrLenShift = 8;
constexpr std::uint64_t kWrLenMask = (1ull << 32) - 1;
static_assert(wire::kMaxSlots <= (1u << kWrLenShift));
// A successor that refused a slot for want of segment memory is asked again
// this much later.
constexpr std::uint64_t kAskAgainNs = 10'000'000;

}  // namespace

fabric::Result<void> check_replica_config(const ReplicaConfig& cfg) {
  using namespace limits;
  auto invalid = [](std::string message) {
    return fabric::make_error(fabric::Errc::invalid_argument, std::move(message));
  };
  const auto n = [](auto v) { return std::to_string(v); };
  if (cfg.slot_count < kMinSegmentSlots || cfg.slot_count > kMaxSegmentSlots) {
    return invalid("slot_count must be in [" + n(kMinSegmentSlots) + ", " + n(kMaxSegmentSlots) + "], got " +
                   n(cfg.slot_count));
  }
  if (cfg.log.segment_bytes < kMinSegmentBytes || cfg.log.segment_bytes > kMaxSegmentBytes ||
      cfg.log.segment_bytes % kSegmentAlignment != 0) {
    return invalid("segment_bytes must be a multiple of " + n(kSegmentAlignment) + " in [" +
                   n(kMinSegmentBytes) + ", " + n(kMaxSegmentBytes) + "], got " + n(cfg.log.segment_bytes));
  }
  if (cfg.channel.empty() || cfg.channel.size() > kMaxChannelNameLength) {
    return invalid("channel name must be 1.." + n(kMaxChannelNameLength) + " characters, got " +
                   n(cfg.channel.size()));
  }
  for (const std::string* id : {&cfg.node_id, &cfg.predecessor_node, &cfg.successor_node}) {
    if (id->size() > kMaxNodeIdLength) {
      return invalid("node id '" + id->substr(0, 160) + "' is longer than " + n(kMaxNodeIdLength) +
                     " characters");
    }
  }
  if (cfg.head_addr.size() > kMaxFabricAddressLength) {
    return invalid("head address '" + cfg.head_addr + "' is longer than " + n(kMaxFabricAddressLength) +
                   " characters");
  }
  return {};
}

Replica::Replica(fabric::Provider& provider, const ReplicaConfig& cfg, const Clock& clock)
    : provider_(provider), cfg_(cfg), clock_(clock) {}

Replica::~Replica() {
  SegmentBudget& b = segments_st();
  b.used_bytes -= std::min(b.used_bytes, segment_bytes_held_);
}

std::uint64_t Replica::memory_bytes() const {
  std::uint64_t n = kept_meta_mr_ ? kept_meta_mr_->size() : 0;
  for (const auto& mr : slot_mrs_) n += mr ? mr->size() : 0;
  return n;
}

namespace {
constexpr std::uint32_t kSlotAccess = fabric::kLocalWrite | fabric::kRemoteWrite | fabric::kRemoteRead;
}  // namespace

std::span<std::byte> Replica::acquire_slot_st(std::uint32_t slot, std::uint32_t bytes, bool* zeroed) {
  CATENA_ST_CHECK(owner_);
  SegmentBudget& b = segments_st();
  auto refuse = [&] {
    ++b.refusals;
    b.short_until_ns = tick_ns_ + 1'000'000'000;  // every log gives back what it may, at once
    ReplicaCounters::add(counters_->segment_memory_refusals, 1);
    return std::span<std::byte>{};
  };
  if (b.used_bytes + bytes > b.limit_bytes) return refuse();
  auto mr = provider_.allocate(bytes, kSlotAccess, domain_of_channel(cfg_.channel));
  if (!mr) return refuse();  // the provider's memory is spent: as the budget is, for this segment
  slot_mrs_[slot] = std::move(mr.value());
  b.used_bytes += bytes;
  segment_bytes_held_ += bytes;
  *zeroed = true;  // Provider::allocate zeroes what it hands out
  return {slot_mrs_[slot]->data(), slot_mrs_[slot]->size()};
}

bool Replica::release_slot_st(std::uint32_t slot, std::uint64_t generation) {
  CATENA_ST_CHECK(owner_);
  // Kept memory stays the partition's (kept_replica.hpp); and a newer
  // generation granted to the predecessor will be written here.
  if (!cfg_.keep_name.empty() || granted_[slot] > generation || !slot_mrs_[slot]) return false;
  const std::uint64_t bytes = slot_mrs_[slot]->size();
  slot_mrs_[slot].reset();  // its keys die with it; the provider zeroes it
  SegmentBudget& b = segments_st();
  b.used_bytes -= std::min(b.used_bytes, bytes);
  b.released_bytes += bytes;
  segment_bytes_held_ -= std::min(segment_bytes_held_, bytes);
  return true;
}

fabric::Result<std::unique_ptr<Replica>> Replica::create(fabric::Provider& provider, const ReplicaConfig& cfg,
                                                         const Clock& clock) {
  if (auto r = check_replica_config(cfg); !r) return r.error();
  std::unique_ptr<Replica> r(new Replica(provider, cfg, clock));
  std::vector<std::span<std::byte>> spans;
  bool all_kept = !cfg.keep_name.empty();
  bool any_kept = false;
  // The tenant's protection domain (domain.hpp): its memory is reachable
  // only over its own connections.
  const fabric::DomainId domain = domain_of_channel(cfg.channel);
  auto allocate_slot = [&](std::uint32_t s) -> fabric::Result<std::unique_ptr<fabric::MemoryRegion>> {
    if (cfg.keep_name.empty()) return provider.allocate(cfg.log.segment_bytes, kSlotAccess, domain);
    auto k =
        provider.allocate_kept(kept_slot_name(cfg.keep_name, s), cfg.log.segment_bytes, kSlotAccess, domain);
    if (!k) return k.error();
    all_kept = all_kept && k.value().kept;
    any_kept = any_kept || k.value().kept;
    return std::move(k.value().region);
  };
  // Kept memory holds every slot from the start (a restart finds them by
  // name); otherwise a slot takes memory when a segment opens there.
  for (std::uint32_t s = 0; s < cfg.slot_count; ++s) {
    if (cfg.keep_name.empty()) {
      spans.emplace_back();
      r->slot_mrs_.emplace_back();
      continue;
    }
    auto mr = allocate_slot(s);
    if (!mr) return mr.error();
    spans.emplace_back(mr.value()->data(), mr.value()->size());
    r->slot_mrs_.push_back(std::move(mr.value()));
    r->segment_bytes_held_ += cfg.log.segment_bytes;
  }
  r->segments_st().used_bytes += r->segment_bytes_held_;
  std::uint64_t commit_kept = 0;
  if (!cfg.keep_name.empty()) {
    auto meta =
        provider.allocate_kept(kept_meta_name(cfg.keep_name), kKeptMetaBytes, fabric::kLocalWrite, domain);
    if (!meta) return meta.error();
    auto* m = reinterpret_cast<KeptReplicaMeta*>(meta.value().region->data());
    // What a crashed process left is this replica's only if it says so.
    if (all_kept && meta.value().kept && kept_meta_valid(*m) && m->channel == cfg.channel &&
        m->partition == cfg.partition && m->slot_count == cfg.slot_count &&
        m->segment_bytes == cfg.log.segment_bytes &&
        std::memcmp(m->lineage, cfg.lineage.data(), sizeof m->lineage) == 0) {
      commit_kept = kept_commit(*m);
    } else {
      init_kept_meta(*m, cfg.channel, cfg.partition, cfg.slot_count, cfg.log.segment_bytes, cfg.epoch,
                     cfg.lineage);
    }
    r->kept_meta_ = m;
    r->kept_meta_mr_ = std::move(meta.value().region);
  }
  auto cw = provider.allocate(64, fabric::kLocalWrite | fabric::kRemoteWrite, domain);
  if (!cw) return cw.error();
  r->commit_word_ = std::move(cw.value());
  auto sc = ScratchRing::create(provider, domain);
  if (!sc) return sc.error();
  r->scratch_ = std::move(sc.value());
  LogConfig log = cfg.log;
  if (!cfg.keep_name.empty()) log.min_segment_bytes = 0;  // kept slots are whole segments, found by name
  r->linger_ns_ = std::max<std::uint64_t>(cfg.log.grace_ns, cfg.log.linger_ns);
  r->log_ = std::make_unique<PartitionLog>(std::move(spans), log, clock);
  if (cfg.keep_name.empty()) r->log_->set_slot_memory(&r->slot_memory_);
  r->log_->track_producers(&r->producers_);
  r->log_->trace_stages(cfg.stage_latency, cfg.position);
  if (commit_kept != 0) r->recovered_ = r->log_->recover_st(commit_kept);
  if (r->recovered_.end == 0) {
    if (!any_kept) {
      r->log_->slots_are_zero_st();  // Provider::allocate(_kept) zeroes what it hands out new
    } else {
      r->log_->slots_written_remotely_st();  // bytes an earlier process left: cleared before use
    }
    r->log_->set_start(cfg.start_offset);
  }
  r->log_->set_epoch(cfg.epoch);
  r->kept_commit_ = r->log_->commit_offset();
  if (r->kept_meta_ != nullptr) store_kept_commit(*r->kept_meta_, r->kept_commit_);
  r->tick_ns_ = clock.now_ns();
  r->next_expiry_ns_ = r->tick_ns_ + 1'000'000'000;
  return r;
}

bool Replica::reconfigure(const ReplicaConfig& cfg) {
  CATENA_ST_CHECK(owner_);
  if (cfg.epoch <= cfg_.epoch || range_end_ != kOpenRange) return false;
  suspended_ = false;  // the controller says what it is now
  sealed_ = false;     // a move that was abandoned
  if (pred_ && (cfg.predecessor_node != cfg_.predecessor_node ||
                cfg.predecessor_node_epoch != cfg_.predecessor_node_epoch)) {
    pred_->ep().disconnect();  // fence the old predecessor at the transport
    pred_.reset();
  }
  if (succ_ && (cfg.successor_node != cfg_.successor_node || cfg.successor_addr != cfg_.successor_addr ||
                cfg.successor_node_epoch != cfg_.successor_node_epoch)) {
    succ_->ep().disconnect();
    succ_.reset();
    fwd_in_flight_ = 0;
  }
  if (!cfg.is_head()) {
    publishes_.drop_all();
  }
  if (!cfg.is_tail() || cfg.chain_length < 2) watches_.drop_all();  // what it holds is no longer committed
  cfg_.epoch = cfg.epoch;
  cfg_.position = cfg.position;
  log_->trace_stages(cfg_.stage_latency, cfg.position);
  cfg_.chain_length = cfg.chain_length;
  cfg_.node_epoch = cfg.node_epoch;
  cfg_.predecessor_node = cfg.predecessor_node;
  cfg_.predecessor_node_epoch = cfg.predecessor_node_epoch;
  cfg_.successor_node = cfg.successor_node;
  cfg_.successor_node_epoch = cfg.successor_node_epoch;
  cfg_.link_secret = cfg.link_secret;
  set_access_secret_st(cfg.access_secret);
  cfg_.successor_addr = cfg.successor_addr;
  cfg_.head_addr = cfg.head_addr;
  set_ttl_st(cfg.log.ttl_ns);
  log_->set_epoch(cfg.epoch);
  if (!cfg.is_joining()) log_->clear_recovered();  // a member: what it holds is the chain's
  syncing_ = false;                                // a joining successor is synced anew at each epoch
  held_sent_up_ = 0;                               // a joining replica reports again, at the new epoch
  if (cfg_.is_tail()) commit_as_tail_st();         // it holds all that anyone may ack
  return true;
}

void Replica::set_ttl_st(std::uint64_t ttl_ns) {
  CATENA_ST_CHECK(owner_);
  cfg_.log.ttl_ns = ttl_ns;
  log_->set_ttl_ns(ttl_ns);
}

SealState Replica::seal_st() {
  CATENA_ST_CHECK(owner_);
  sealed_ = true;
  return SealState{log_->end_offset(), log_->commit_offset(), producers_.snapshot()};
}

void Replica::set_next_chain_st(std::uint64_t epoch, std::string head_addr) {
  CATENA_ST_CHECK(owner_);
  if (epoch <= next_epoch_ || head_addr.empty() || head_addr.size() > limits::kMaxFabricAddressLength) return;
  next_epoch_ = epoch;
  next_head_ = std::move(head_addr);
}

MarkerState Replica::append_marker_st(const MarkerSpec& m) {
  CATENA_ST_CHECK(owner_);
  MarkerState out;
  if (log_->marker().generation < m.generation) {
    std::uint64_t offset = 0;
    out.status = log_->append_marker(m, &offset);
    if (out.status != AppendStatus::ok) return out;
  }
  out.offset = log_->marker().offset;
  out.commit_offset = log_->commit_offset();
  return out;
}

void Replica::retire_st(std::uint64_t range_end) {
  CATENA_ST_CHECK(owner_);
  range_end_ = range_end;
  sealed_ = true;
  if (pred_) {
    pred_->ep().disconnect();
    pred_.reset();
  }
  if (succ_) {
    succ_->ep().disconnect();
    succ_.reset();
    fwd_in_flight_ = 0;
  }
  cfg_.successor_addr.clear();  // dials no successor
  publishes_.drop_all();        // they find the new head in the route
  watches_.drop_all();
}

void Replica::set_access_secret_st(const wire::AccessSecret& secret) {
  CATENA_ST_CHECK(owner_);
  if (secret == cfg_.access_secret) return;
  cfg_.access_secret = secret;
  publishes_.drop_all();
  deliveries_.drop_all();
  watches_.drop_all();
}

void Replica::merge_producers_st(const std::vector<ProducerSnapshot>& producers) {
  CATENA_ST_CHECK(owner_);
  producers_.merge(producers, clock_.now_ns());
}

// A tail with a joining successor forwards to it like any replica does:
// forwarding follows the link, commit follows the role.
bool Replica::wants_successor() const {
  return !succ_ && !cfg_.successor_addr.empty();
}

wire::ReplicaHello Replica::successor_hello() const {
  CATENA_ST_CHECK(owner_);
  wire::ReplicaHello h{};
  h.ref.set(cfg_.channel, cfg_.partition, cfg_.epoch);
  wire::put_text(h.from_node, cfg_.node_id);
  h.from_node_epoch = cfg_.node_epoch;
  std::memcpy(h.link_secret, cfg_.link_secret.data(), sizeof h.link_secret);
  return h;
}

bool Replica::attach_successor(std::unique_ptr<Link> link, const wire::ReplicaWelcome& w) {
  CATENA_ST_CHECK(owner_);
  const bool other_incarnation = cfg_.successor_node_epoch != 0 && w.node_epoch != cfg_.successor_node_epoch;
  if (w.status != wire::Status::ok || w.epoch != cfg_.epoch || w.slot_count != cfg_.slot_count ||
      w.segment_bytes != cfg_.log.segment_bytes || cfg_.successor_addr.empty() || other_incarnation) {
    if (other_incarnation && w.status == wire::Status::ok) {
      faults_.push_back({cfg_.successor_node, "another incarnation answered the successor's address"});
    }
    link->ep().disconnect();
    return false;
  }
  // A successor that kept segments of this chain through a restart is sent
  // what follows the oldest one it shares, not the segments before it.
  std::uint64_t shared_from = ~0ull;
  for (std::uint32_t s = 0; s < cfg_.slot_count; ++s) {
    const SlotInfo& in = log_->slot_info(s);
    if (in.state != SlotState::free && w.slots[s].generation == in.generation)
      shared_from = std::min(shared_from, in.generation);
  }
  for (std::uint32_t s = 0; s < cfg_.slot_count; ++s) {
    succ_slots_[s] = w.slots[s].region;
    succ_granted_[s] = w.slots[s].region.length != 0 ? w.slots[s].generation : 0;
    succ_asked_[s] = 0;
    const SlotInfo& in = log_->slot_info(s);
    if (in.state != SlotState::free && !log_->has_memory(s)) {
      // Expired past its grace and given back: nothing to send from it.
      fwd_gen_[s] = in.generation;
      fwd_end_[s] = in.valid_end;
    } else if (in.state != SlotState::free && w.slots[s].generation == in.generation) {
      // The successor already holds a prefix of this segment: resend the rest.
      fwd_gen_[s] = in.generation;
      fwd_end_[s] = std::min(w.slots[s].valid_end, in.valid_end);
    } else if (in.state != SlotState::free && in.generation < shared_from && shared_from != ~0ull) {
      fwd_gen_[s] = in.generation;
      fwd_end_[s] = in.valid_end;
    } else {
      fwd_gen_[s] = 0;
      fwd_end_[s] = 0;
    }
  }
  succ_ = std::move(link);
  succ_progress_ns_ = tick_ns_;
  ask_again_ns_ = 0;
  fwd_in_flight_ = 0;
  if (successor_epoch_ == cfg_.epoch) ++successor_rebuilds_;
  successor_epoch_ = cfg_.epoch;
  return true;
}

void Replica::attach_predecessor(std::unique_ptr<Link> link, const wire::ReplicaHello& hello) {
  CATENA_ST_CHECK(owner_);
  wire::ReplicaWelcome w{};
  w.epoch = cfg_.epoch;
  w.slot_count = cfg_.slot_count;
  w.segment_bytes = cfg_.log.segment_bytes;
  w.end_offset = log_->end_offset();
  w.node_epoch = cfg_.node_epoch;
  const std::string_view from = wire::get_text(hello.from_node);
  const bool named = from == cfg_.predecessor_node && (cfg_.predecessor_node_epoch == 0 ||
                                                       hello.from_node_epoch == cfg_.predecessor_node_epoch);
  // Compared in constant time: the answer must not tell how much matched.
  std::uint8_t differ = 0, any = 0;
  for (std::size_t i = 0; i < wire::kLinkSecretBytes; ++i) {
    differ |= static_cast<std::uint8_t>(hello.link_secret[i] ^ cfg_.link_secret[i]);
    any |= cfg_.link_secret[i];
  }
  if (hello.ref.epoch < cfg_.epoch || (hello.ref.epoch == cfg_.epoch && !named)) {
    w.status = wire::Status::stale_epoch;
  } else if (hello.ref.epoch > cfg_.epoch) {
    w.status = wire::Status::not_ready;
  } else if (any != 0 && differ != 0) {  // the secret is this epoch's
    w.status = wire::Status::unauthenticated;
  } else if (range_end_ != kOpenRange) {
    w.status = wire::Status::moved;  // a read-only range links to nobody
  } else {
    w.status = wire::Status::ok;
    log_->slots_written_remotely_st();  // from the moment it has their keys
    for (std::uint32_t s = 0; s < cfg_.slot_count; ++s) {
      const SlotInfo& in = log_->slot_info(s);
      w.slots[s].generation = in.state == SlotState::free ? 0 : in.generation;
      w.slots[s].valid_end = in.state == SlotState::free ? 0 : in.valid_end;
      // Only a slot holding a segment in memory is exposed (for that
      // generation); any other the predecessor asks for (the slot grant).
      // The segment's keys are this predecessor link's alone.
      if (in.state == SlotState::free || !slot_mrs_[s]) continue;
      if (!expose_into(link->ep(), *slot_mrs_[s], w.slots[s].region)) {
        w.status = wire::Status::resource_exhausted;
        break;
      }
    }
  }
  if (link->send(w) != fabric::Errc::ok || w.status != wire::Status::ok) {
    // Give the refused peer a moment to read the answer; its link dies with it.
    link->poll_send();
    return;
  }
  if (pred_) pred_->ep().disconnect();
  pred_ = std::move(link);
  ReplicaCounters::add(counters_->predecessor_links, 1);
  pred_commit_word_ = hello.commit_word;
  commit_sent_up_ = 0;
  held_sent_up_ = 0;
  grant_asked_.fill(0);
}

int Replica::do_work() {
  CATENA_ST_CHECK(owner_);
  int work = 0;
  work += pump_predecessor_st();
  if (cfg_.is_head()) {
    PublishTarget target{*log_,          producers_, tick_ns_, sealed_, &corrupt_frames_, cfg_.tenant_rate,
                         counters_.get()};
    const int taken = publishes_.consume(target);
    if (taken > 0 && cfg_.is_tail()) commit_as_tail_st();
    work += taken;
  }
  work += forward_st();
  work += pump_successor_st();
  // Outside its lease (or suspended) it replicates and commits but tells
  // nobody: a controller that lost it may already have built a newer chain.
  const bool act = may_act();
  if (act && !watches_.empty()) work += watches_.do_work(*log_, cfg_.epoch);
  work += propagate_commit_st();
  if (act && cfg_.is_head()) {
    work += publishes_.acknowledge(log_->commit_offset(), cfg_.epoch, counters_.get());
  }
  if (act)
    work +=
        deliveries_.do_work(DeliverySource{*log_, slot_mrs_, scratch_, range_end_, next_epoch_, next_head_});
  if (kept_meta_ != nullptr && log_->commit_offset() != kept_commit_) {
    kept_commit_ = log_->commit_offset();
    store_kept_commit(*kept_meta_, kept_commit_);
  }
  return work;
}

void Replica::tick() {
  CATENA_ST_CHECK(owner_);
  tick_ns_ = clock_.now_ns();
  if (tick_ns_ >= next_expiry_ns_) {
    // Producers with an open session are in use however quiet they are.
    publishes_.touch_producers(producers_, tick_ns_);
    if (tick_ns_ > cfg_.limits.producer_expiry_ns)
      producers_.expire(tick_ns_ - cfg_.limits.producer_expiry_ns);
    next_expiry_ns_ = tick_ns_ + 1'000'000'000;
  }
  log_->tick();
  if (cfg_.is_head() && range_end_ == kOpenRange && log_->roll_if_aged() && cfg_.is_tail())
    commit_as_tail_st();
  if (cfg_.is_tail() && succ_ && !syncing_ &&
      successor_backlog_st() <=
          static_cast<std::uint64_t>(limits::join_sync_backlog_bytes(cfg_.log.segment_bytes))) {
    syncing_ = true;  // from now on the commit waits for the joining successor
  }
  if (pred_) pred_->poll_events();
  if (succ_) succ_->poll_events();
  ReplicaCounters::set(counters_->end_offset, log_->end_offset());
  ReplicaCounters::set(counters_->commit_offset, log_->commit_offset());
  ReplicaCounters::set(counters_->successor_backlog_bytes,
                       succ_ ? static_cast<std::int64_t>(successor_backlog_st()) : std::int64_t{-1});
  if (succ_ && fwd_in_flight_ > 0 && tick_ns_ - succ_progress_ns_ > cfg_.link_stall_ns) {
    faults_.push_back({cfg_.successor_node, "successor completed no write for " +
                                                std::to_string((tick_ns_ - succ_progress_ns_) / 1'000'000) +
                                                " ms with " + std::to_string(fwd_in_flight_) +
                                                " bytes in flight"});
    succ_->ep().disconnect();
    succ_.reset();
    ReplicaCounters::add(counters_->successor_links_lost, 1);
    fwd_in_flight_ = 0;
  }
  if (tick_ns_ >= next_session_events_ns_) {
    // A client that vanished is only seen in its connection's events on some
    // providers (verbs: the CM's DISCONNECTED): look at them now and then,
    // so its session, ring and limits are released.
    publishes_.poll_events();
    deliveries_.poll_events();
    watches_.poll_events();
    next_session_events_ns_ = tick_ns_ + 100'000'000;
  }
}

int Replica::pump_predecessor_st() {
  CATENA_ST_CHECK(owner_);
  if (!pred_) return 0;
  const std::uint64_t end_before = log_->end_offset();
  bool garbled = false;
  int n = pred_->poll_recv(
      [&](const std::byte* m, std::uint32_t len) {
        const auto rq = wire::decode<wire::ReplicaSlotRequest>(m, len);
        if (!rq || rq->slot >= cfg_.slot_count || rq->generation == 0) {
          garbled = true;
          return;
        }
        if (rq->generation >= grant_asked_[rq->slot]) {
          grant_asked_[rq->slot] = rq->generation;
          grant_bytes_[rq->slot] = rq->bytes;
        }
      },
      [&](std::uint32_t imm, std::uint32_t) {
        const std::uint32_t slot = imm >> kSlotShift;
        const std::uint32_t end = (imm & kEndMask) * 8;
        // The bytes this write added: from where the slot's valid
        // data ended, or from 0 in a segment newly opened in it.
        std::uint32_t valid_before = 0;
        std::uint64_t gen_before = 0;
        if (slot < cfg_.slot_count && log_->slot_info(slot).state != SlotState::free) {
          valid_before = log_->slot_info(slot).valid_end;
          gen_before = log_->slot_info(slot).generation;
        }
        if (log_->on_remote_data(slot, end) != ValidateStatus::ok) {
          ++corrupt_frames_;
          pred_->ep().disconnect();  // refuse a predecessor that writes garbage
        } else {
          const SlotInfo& now = log_->slot_info(slot);
          const std::uint32_t from = now.generation == gen_before ? valid_before : 0;
          if (now.valid_end > from) ReplicaCounters::add(counters_->appended_bytes, now.valid_end - from);
        }
      });
  if (log_->end_offset() > end_before)
    ReplicaCounters::add(counters_->appended_records, log_->end_offset() - end_before);
  if (garbled) {
    ++corrupt_frames_;
    pred_->ep().disconnect();  // a predecessor that sends what is not a slot request
  }
  if (n >= 0 && !pred_->broken()) n += answer_grants_st();
  pred_->poll_send();
  if (n < 0 || pred_->broken()) {
    // Not a fault to report: the predecessor redials and resumes from what
    // this replica holds, and reports the link itself if it cannot.
    pred_.reset();
    return 1;
  }
  if (n > 0 && cfg_.is_tail()) commit_as_tail_st();
  return n;
}

int Replica::answer_grants_st() {
  CATENA_ST_CHECK(owner_);
  int work = 0;
  for (std::uint32_t s = 0; s < cfg_.slot_count; ++s) {
    const std::uint64_t generation = grant_asked_[s];
    if (generation == 0) continue;
    wire::ReplicaSlotGrant g{};
    g.slot = s;
    g.generation = generation;
    const std::uint32_t bytes = grant_bytes_[s];
    g.bytes = bytes;
    const SlotInfo& in = log_->slot_info(s);
    // Segments a restart kept (recovered(), kept memory) are no reason to
    // refuse: what the chain does not continue is dropped when the
    // predecessor's bytes land (PartitionLog::on_remote_data).
    const bool clashes = !log_->recovered() && ((in.state != SlotState::free && generation < in.generation) ||
                                                (in.state == SlotState::open && generation != in.generation));
    if (clashes || bytes < limits::kMinSegmentBytes || bytes > cfg_.log.segment_bytes ||
        bytes % kRecordAlign != 0) {
      // It would write over a newer segment or the open one, or its size is not one.
      g.status = wire::Status::bad_request;
    } else if (!log_->ensure_memory_st(s, bytes)) {
      g.status = wire::Status::resource_exhausted;
    } else if (!expose_into(pred_->ep(), *slot_mrs_[s], g.region)) {
      g.status = wire::Status::resource_exhausted;
    } else {
      g.status = wire::Status::ok;
      granted_[s] = std::max(granted_[s], generation);
      log_->slots_written_remotely_st();
    }
    if (pred_->send(g) != fabric::Errc::ok) break;  // the send queue is full: answer next pass
    grant_asked_[s] = 0;
    ++work;
  }
  return work;
}

void Replica::ask_slot_st(std::uint32_t slot, std::uint64_t generation) {
  CATENA_ST_CHECK(owner_);
  if (succ_asked_[slot] == generation || tick_ns_ < ask_again_ns_) return;  // asked, or refused lately
  const wire::ReplicaSlotRequest rq{slot, log_->slot_info(slot).bytes, generation};
  if (succ_->send(rq) == fabric::Errc::ok) succ_asked_[slot] = generation;
}

int Replica::forward_st() {
  CATENA_ST_CHECK(owner_);
  if (!succ_) return 0;
  int work = 0;
  // One doorbell for the pass's writes (verbs), the last one signalled.
  const fabric::PostBatch batch(succ_->ep());
  const std::uint32_t slots = cfg_.slot_count;
  const std::uint32_t max_msg = std::min(kMaxForwardChunk, succ_->ep().caps().max_message_size);
  for (;;) {
    // The oldest segment with bytes to forward: the successor takes
    // segments in order, and they are not in slot order (partition_log.hpp).
    int oldest = -1;
    for (std::uint32_t i = 0; i < slots; ++i) {
      const SlotInfo& in = log_->slot_info(i);
      if (in.state == SlotState::free || !log_->has_memory(i)) continue;
      if (fwd_gen_[i] != in.generation) {
        fwd_gen_[i] = in.generation;
        fwd_end_[i] = 0;
      }
      if (fwd_end_[i] < in.valid_end &&
          (oldest < 0 || in.generation < log_->slot_info(static_cast<std::uint32_t>(oldest)).generation)) {
        oldest = static_cast<int>(i);
      }
    }
    if (oldest < 0) return work;
    const auto s = static_cast<std::uint32_t>(oldest);
    const SlotInfo& in = log_->slot_info(s);
    if (succ_granted_[s] != in.generation) {
      ask_slot_st(s, in.generation);
      return work;  // in order: nothing of a later segment before this one
    }
    while (fwd_end_[s] < in.valid_end) {
      const std::uint32_t len = std::min(in.valid_end - fwd_end_[s], max_msg);
      const bool last = fwd_end_[s] + len == in.valid_end;
      fabric::LocalBuffer src{slot_mrs_[s].get(), fwd_end_[s], len};
      fabric::RemoteAddress dst{succ_slots_[s], fwd_end_[s]};
      const std::uint64_t wr_id = kWrData | (std::uint64_t{len} << kWrLenShift) | s;
      const std::uint32_t imm = (s << kSlotShift) | (in.valid_end / 8);
      fabric::Errc e =
          last ? succ_->ep().post_write_imm(wr_id, src, dst, imm) : succ_->ep().post_write(wr_id, src, dst);
      if (e != fabric::Errc::ok) return work;  // back-pressure: keep order, continue next pass
      fwd_end_[s] += len;
      fwd_in_flight_ += len;
      forwarded_bytes_ += len;
      ReplicaCounters::add(counters_->forwarded_bytes, len);
      ++work;
    }
  }
}

int Replica::pump_successor_st() {
  CATENA_ST_CHECK(owner_);
  if (!succ_) return 0;
  int n = succ_->poll_send([&](const fabric::Completion& c) {
    if ((c.wr_id & kWrTagMask) != kWrData) return;
    fwd_in_flight_ -= std::min(fwd_in_flight_, (c.wr_id >> kWrLenShift) & kWrLenMask);
  });
  bool garbled = false;
  const int got = succ_->poll_recv(
      [&](const std::byte* m, std::uint32_t len) {
        const auto g = wire::decode<wire::ReplicaSlotGrant>(m, len);
        if (!g || g->slot >= cfg_.slot_count) {
          garbled = true;
          return;
        }
        if (g->generation != succ_asked_[g->slot]) return;  // an answer to an older link's ask
        if (g->status == wire::Status::ok && g->bytes == log_->slot_info(g->slot).bytes &&
            g->region.length >= g->bytes) {
          succ_slots_[g->slot] = g->region;
          succ_granted_[g->slot] = g->generation;
        } else if (g->status == wire::Status::resource_exhausted) {
          succ_asked_[g->slot] = 0;  // its segment budget is spent: ask again later
          ask_again_ns_ = tick_ns_ + kAskAgainNs;
        } else {
          garbled = true;  // bad_request: this replica is confused; start over
        }
      },
      [](std::uint32_t, std::uint32_t) {});
  if (got < 0)
    n = -1;
  else if (n >= 0)
    n += got;
  if (garbled) succ_->ep().disconnect();
  if (n < 0 || succ_->broken()) {
    // Not reported yet: the broker redials at once and forwarding resumes
    // from what the successor holds; a link it cannot rebuild is reported
    // after BrokerConfig::link_report_ms (partition-level recovery).
    succ_.reset();
    ReplicaCounters::add(counters_->successor_links_lost, 1);
    fwd_in_flight_ = 0;
    return 1;
  }
  if (n > 0 || fwd_in_flight_ == 0) succ_progress_ns_ = tick_ns_;
  return n;
}

std::uint64_t Replica::read_commit_word_st() const {
  CATENA_ST_CHECK(owner_);
  auto* words = reinterpret_cast<std::uint64_t*>(commit_word_->data());
  const std::uint64_t c = std::atomic_ref<std::uint64_t>(words[0]).load(std::memory_order_acquire);
  const std::uint64_t check = std::atomic_ref<std::uint64_t>(words[1]).load(std::memory_order_acquire);
  return check == ~c ? c : 0;  // torn or unset: ignore until the next write
}

std::uint64_t Replica::read_held_word_st() const {
  CATENA_ST_CHECK(owner_);
  auto* words = reinterpret_cast<std::uint64_t*>(commit_word_->data());
  const std::uint64_t held = std::atomic_ref<std::uint64_t>(words[kHeldWord]).load(std::memory_order_acquire);
  const std::uint64_t epoch =
      std::atomic_ref<std::uint64_t>(words[kHeldWord + 1]).load(std::memory_order_acquire);
  const std::uint64_t check =
      std::atomic_ref<std::uint64_t>(words[kHeldWord + 2]).load(std::memory_order_acquire);
  // Torn, unset, or left by a joining replica of an earlier epoch: nothing.
  return epoch == cfg_.epoch && check == held_check(held, epoch) ? held : 0;
}

void Replica::commit_as_tail_st() {
  CATENA_ST_CHECK(owner_);
  std::uint64_t c = log_->end_offset();
  if (syncing_) c = std::max(log_->commit_offset(), std::min(c, read_held_word_st()));
  if (c > log_->commit_offset()) log_->set_commit_offset(c);
}

int Replica::report_held_st() {
  CATENA_ST_CHECK(owner_);
  if (!pred_ || log_->end_offset() <= held_sent_up_) return 0;
  const std::uint64_t end = log_->end_offset();
  const std::uint64_t triple[3] = {end, cfg_.epoch, held_check(end, cfg_.epoch)};
  if (pred_->ep().post_write(kWrCommit, scratch_.stage(triple, sizeof triple),
                             {pred_commit_word_, kHeldWord * sizeof(std::uint64_t)}) != fabric::Errc::ok) {
    return 0;
  }
  held_sent_up_ = end;
  return 1;
}

int Replica::propagate_commit_st() {
  CATENA_ST_CHECK(owner_);
  // A joining replica holds no commit of its own: nothing the successor
  // behind it writes counts. It tells the tail what it holds instead.
  if (cfg_.is_joining()) return report_held_st();
  int work = 0;
  if (!cfg_.is_tail()) {
    const std::uint64_t c = read_commit_word_st();
    if (c > log_->commit_offset()) {
      log_->set_commit_offset(c);
      ++work;
    }
  } else if (syncing_) {
    const std::uint64_t before = log_->commit_offset();
    commit_as_tail_st();  // the joining successor may have caught up
    work += log_->commit_offset() > before;
  }
  if (pred_ && log_->commit_offset() > commit_sent_up_) {
    const std::uint64_t pair[2] = {log_->commit_offset(), ~log_->commit_offset()};
    if (pred_->ep().post_write(kWrCommit, scratch_.stage(pair, sizeof pair), {pred_commit_word_, 0}) ==
        fabric::Errc::ok) {
      commit_sent_up_ = log_->commit_offset();
      ++work;
    }
  }
  return work;
}

ReplicaStats Replica::stats() const {
  CATENA_ST_CHECK(owner_);
  ReplicaStats s;
  s.end_offset = log_->end_offset();
  s.commit_offset = log_->commit_offset();
  s.start_offset = log_->start_offset();
  s.bytes = log_->bytes_used();
  s.segments = log_->segments_held();
  s.publishers = static_cast<std::uint32_t>(publishes_.size());
  s.publisher_sessions_opened = publishes_.opened();
  s.subscribers = static_cast<std::uint32_t>(deliveries_.size());
  s.watchers = static_cast<std::uint32_t>(watches_.size());
  s.corrupt_frames = corrupt_frames_;
  s.successor_connected = succ_ != nullptr;
  s.predecessor_connected = pred_ != nullptr;
  if (succ_) {
    s.successor_backlog_bytes = static_cast<std::int64_t>(successor_backlog_st());
    s.successor_synced = cfg_.is_tail() && syncing_ && read_held_word_st() >= log_->commit_offset();
  }
  s.forwarded_bytes = forwarded_bytes_;
  s.recovered_records = recovered_.records;
  s.recovered_bytes = recovered_.bytes;
  return s;
}

std::uint64_t Replica::successor_backlog_st() const {
  CATENA_ST_CHECK(owner_);
  std::uint64_t backlog = fwd_in_flight_;
  for (std::uint32_t i = 0; i < cfg_.slot_count; ++i) {
    const SlotInfo& in = log_->slot_info(i);
    if (in.state == SlotState::free || !log_->has_memory(i)) continue;
    // A slot of a generation not yet started is owed whole.
    const std::uint32_t sent = fwd_gen_[i] == in.generation ? std::min(fwd_end_[i], in.valid_end) : 0;
    backlog += in.valid_end - sent;
  }
  return backlog;
}

std::vector<LinkFault> Replica::take_faults() {
  CATENA_ST_CHECK(owner_);
  std::vector<LinkFault> out;
  out.swap(faults_);
  return out;
}

}  // namespace catena::chain
