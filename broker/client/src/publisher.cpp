#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <catena/broker/record_views.hpp>
#include <catena/chain/domain.hpp>
#include <catena/chain/key_map.hpp>
#include <catena/chain/producer_state.hpp>
#include <catena/chain/publish.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/idle.hpp>

#include "publisher_impl.hpp"
#include "shared_provider.hpp"

namespace catena {

using chain::Link;
using client_detail::Attempt;
using fabric::Errc;
namespace wire = chain::wire;

Publisher::Impl::Impl(RouteSource& routes, std::string channel, const PublisherOptions& opts)
    : routes_(routes), channel_(std::move(channel)), opts_(opts) {}

client::Result<void> Publisher::Impl::init() {
  if (channel_.empty() || channel_.size() > chain::limits::kMaxChannelNameLength) {
    return fabric::make_error(
        Errc::invalid_argument,
        "channel name must be 1.." + std::to_string(chain::limits::kMaxChannelNameLength) + " characters");
  }
  auto layout = routes_.layout(channel_);
  if (!layout) return layout.error();
  if (layout->partitions == 0) return fabric::make_error(Errc::invalid_argument, "channel has no partitions");
  auto p = client_detail::shared_provider(opts_.provider);
  if (!p) return p.error();
  provider_ = std::move(p.value());
  auto identity = routes_.init_producer(opts_.producer_id);
  if (!identity) return identity.error();
  opts_.producer_id = identity->producer_id;
  producer_epoch_ = identity->producer_epoch;
  ring_bytes_ = chain::clamp_ring_bytes(opts_.ring_bytes);
  ring_budget_ = opts_.ring_budget_bytes;
  if (std::uint64_t{layout->partitions} * chain::kMinRingBytes > ring_budget_) {
    return fabric::make_error(
        Errc::invalid_argument,
        fmt::format(
            "ring_budget_bytes {} is below the {} KiB ring each of the channel's {} partitions may need "
            "(at least {})",
            ring_budget_, chain::kMinRingBytes >> 10, layout->partitions,
            std::uint64_t{layout->partitions} * chain::kMinRingBytes));
  }
  window_ = std::clamp<std::uint32_t>(opts_.max_in_flight, 16, chain::ProducerState::kWindow);
  generation_ = layout->generation;
  partitions_ = layout->partitions;
  // What the heads take (each welcome says it again): a record too large
  // for the channel's segments is refused before any session is up.
  if (layout->segment_bytes != 0)
    max_record_ = std::min(max_record_, chain::max_record_for(layout->segment_bytes));
  // No ring and no session yet: a partition gets them with its first
  // record (activate_st), so a publisher that uses few of many partitions
  // pins memory for those only, here and at their heads.
  for (std::uint32_t i = 0; i < layout->partitions; ++i) sessions_.push_back(new_session(i));
  // From here on, changes are events (PublisherOptions::on_event).
  events_ = true;
  return {};
}

std::unique_ptr<PartitionSession> Publisher::Impl::new_session(std::uint32_t partition) {
  auto s = std::make_unique<PartitionSession>();
  s->partition = partition;
  return s;
}

std::uint32_t Publisher::Impl::ring_for_st(std::uint32_t frame_bytes) const {
  std::uint64_t r = chain::kMinRingBytes;
  while (r < ring_bytes_ && frame_bytes > r / 2) r = std::min<std::uint64_t>(2 * r, ring_bytes_);
  return static_cast<std::uint32_t>(r);
}

bool Publisher::Impl::budget_allows_st(std::uint64_t more, const PartitionSession& s) const {
  // The minimum kept for each partition of the generation without a ring
  // (not `s`'s own: it is what `more` is for).
  const std::uint64_t without = partitions_ - std::min(partitions_, active_in_gen_);
  const std::uint64_t reserve =
      (without - (!s.active && s.partition < partitions_ && without > 0 ? 1 : 0)) * chain::kMinRingBytes;
  return ring_used_ + more + reserve <= ring_budget_;
}

void Publisher::Impl::recount_active_st() {
  active_in_gen_ = 0;
  for (const auto& o : sessions_) active_in_gen_ += o->active && o->partition < partitions_ ? 1 : 0;
}

Errc Publisher::Impl::activate_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  // The minimum: a record that needs more grows it before the session is
  // up, so that a head that refuses the larger ring leaves this one.
  const std::uint32_t ring = chain::kMinRingBytes;
  if (ring_used_ + ring > ring_budget_) {
    spdlog::warn("publisher {}/{}: no room for a ring in ring_budget_bytes ({} of {} bytes in use)", channel_,
                 s.partition, ring_used_, ring_budget_);
    return Errc::resource_exhausted;
  }
  auto mirror = provider_->allocate(ring, fabric::kLocalWrite, chain::domain_of_channel(channel_));
  if (!mirror) {
    spdlog::warn("publisher {}/{}: cannot allocate a {} KiB ring: {}", channel_, s.partition, ring >> 10,
                 mirror.error().message);
    return Errc::resource_exhausted;
  }
  s.head = chain::PublishClient(std::move(mirror.value()), ring, window_);
  s.records = chain::BoundedFifo<PendingRecord>(window_);
  s.active = true;
  s.ring_window = now;
  ring_used_ += ring;
  if (s.partition < partitions_) ++active_in_gen_;
  // Its records wait in the ring until the head welcomes it (then they are
  // sent), retry_timeout at most.
  s.down = true;
  s.down_since = now;
  start_connect_st(s, now);
  return Errc::ok;
}

void Publisher::Impl::grow_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  const std::uint32_t from = s.head.ring_bytes();
  const std::uint32_t to = s.grow_to;
  s.grow_to = 0;
  if (to == from || (to > from && !budget_allows_st(to - from, s))) return;
  auto mirror = provider_->allocate(to, fabric::kLocalWrite, chain::domain_of_channel(channel_));
  if (!mirror) {
    spdlog::warn("publisher {}/{}: cannot allocate a {} KiB ring; keeping {} KiB", channel_, s.partition,
                 to >> 10, from >> 10);
    s.grow_refused = true;
    return;
  }
  // A dial in progress names the old ring: dropped with the session.
  s.dial.cancel();
  s.attempt = Attempt::none;
  if (!s.head.replace_ring(std::move(mirror.value()), to)) return;  // records pending: cannot happen here
  ring_used_ = ring_used_ + to - from;  // (a shrink: to < from, and ring_used_ holds from)
  s.growing = true;
  s.grown_from = from;
  s.ring_peak = 0;
  s.ring_window = now;
  spdlog::debug("publisher {}/{}: ring {} KiB -> {} KiB; new session with the head", channel_, s.partition,
                from >> 10, to >> 10);
  // Down already (a head lost, a move followed): the outage goes on, and
  // retry_timeout counts from its start, not from the grow.
  const bool was_down = s.down;
  const Clock::time_point down_since = s.down_since;
  go_down_st(s, now);
  if (was_down) s.down_since = down_since;
  s.redial_resized = !was_down;  // the same head, at once (start_connect_st)
}

void Publisher::Impl::grow_refused_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  const std::uint32_t big = s.head.ring_bytes();
  spdlog::warn(
      "publisher {}/{}: head {} refused a {} KiB ring (resource_exhausted: its ring memory or session "
      "limits); "
      "staying at {} KiB",
      channel_, s.partition, s.dialled.node_id, big >> 10, s.grown_from >> 10);
  s.growing = false;
  s.grow_refused = big > s.grown_from;  // a refused shrink leaves later grows alone
  auto mirror = provider_->allocate(s.grown_from, fabric::kLocalWrite, chain::domain_of_channel(channel_));
  if (mirror && s.head.replace_ring(std::move(mirror.value()), s.grown_from))
    ring_used_ = ring_used_ + s.grown_from - big;
  s.retry_at = now;
}

void Publisher::Impl::consider_shrink_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  if (opts_.ring_shrink_after.count() <= 0 || s.grow_to != 0 || s.growing) return;
  if (now - s.ring_window < opts_.ring_shrink_after) return;
  const std::uint32_t ring = s.head.ring_bytes();
  const std::uint32_t to = std::max(ring / 2, chain::kMinRingBytes);
  // (Every frame then fits in half the smaller ring.)
  if (to < ring && s.ring_peak <= ring / 4 && s.head.connected()) {
    spdlog::debug("publisher {}/{}: at most {} KiB of its {} KiB ring in use for {} ms; halving it", channel_,
                  s.partition, s.ring_peak >> 10, ring >> 10, opts_.ring_shrink_after.count());
    s.grow_to = to;
  }
  s.ring_peak = 0;
  s.ring_window = now;
}

Errc Publisher::Impl::publish_to(std::uint32_t partition, std::span<const std::byte> payload,
                                 PublishCallback cb, const chain::Attributes* attrs) {
  CATENA_ST_CHECK(owner_);
  if (partition >= partitions_) return Errc::invalid_argument;
  // A channel alter's switch: new records wait until the refused ones are
  // sent again (their order comes first).
  if (const Errc e = may_publish_st(partition); e != Errc::ok) return e;
  const PendingRecord how{{}, next_order_, 0, PendingRecord::Placement::explicit_};
  const Errc e = stage_st(partition, how, payload, cb, 0, attrs);
  if (e == Errc::ok) ++next_order_;
  return e;
}

Errc Publisher::Impl::publish_keyed(std::span<const std::byte> key, std::span<const std::byte> payload,
                                    PublishCallback cb, const chain::Attributes* attrs) {
  CATENA_ST_CHECK(owner_);
  if (remapping_) return Errc::backpressure;
  PendingRecord how{{}, next_order_, 0, PendingRecord::Placement::any};
  std::uint32_t partition = 0;
  if (key.empty()) {
    // Round-robin over the partitions without an open claim (try_claim).
    for (std::uint32_t i = 0; i + 1 < partitions_ && claim_open_st(rr_ % partitions_); ++i) ++rr_;
    partition = rr_ % partitions_;
  } else {
    how.placement = PendingRecord::Placement::keyed;
    how.key_hash = XXH64(key.data(), key.size(), 0);
    // The channel generation's mapping (key_map.hpp), which channel alters change.
    partition = chain::partition_of_hash(how.key_hash, partitions_);
  }
  if (const Errc e = may_publish_st(partition); e != Errc::ok) return e;
  const Errc e = stage_st(partition, how, payload, cb, 0, attrs);
  if (e == Errc::ok) {
    ++next_order_;
    if (key.empty()) ++rr_;
  }
  return e;
}

Errc Publisher::Impl::room_for_st(PartitionSession& s, std::size_t region) {
  CATENA_ST_CHECK(owner_);
  if (region > max_record_) return Errc::too_large;
  const auto frame = static_cast<std::uint32_t>(chain::frame_size(static_cast<std::uint32_t>(region)));
  const std::uint32_t need = ring_for_st(frame);
  if (frame > need / 2) return Errc::too_large;  // not even the largest ring holds it
  if (!s.active) {
    if (const Errc e = activate_st(s, Clock::now()); e != Errc::ok) return e;
  }
  if (s.down && Clock::now() - s.down_since > opts_.retry_timeout) return Errc::disconnected;
  // A larger ring is on its way: new records wait for it.
  if (s.grow_to != 0 || s.growing) return Errc::backpressure;
  if (!s.head.fits(static_cast<std::uint32_t>(region))) {
    if (!s.grow_refused && budget_allows_st(need - s.head.ring_bytes(), s)) {
      s.grow_to = need;
      return Errc::backpressure;
    }
    return Errc::too_large;  // the ring the budget (or the head) allows does not hold it
  }
  return Errc::ok;
}

void Publisher::Impl::ring_was_full_st(PartitionSession& s) {
  CATENA_ST_CHECK(owner_);
  if (!s.head.full() && s.head.connected() && !s.grow_refused && s.head.ring_bytes() < ring_bytes_) {
    // The ring is full (not the window, and the head is there): twice the
    // ring, once the records in it are resolved, if the budget has room.
    const auto to =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(2ull * s.head.ring_bytes(), ring_bytes_));
    if (budget_allows_st(to - s.head.ring_bytes(), s)) s.grow_to = to;
  }
}

Errc Publisher::Impl::stage_st(std::uint32_t partition, const PendingRecord& how,
                               std::span<const std::byte> payload, PublishCallback& cb,
                               std::uint64_t timestamp_ns, const chain::Attributes* attrs,
                               std::uint32_t flags) {
  CATENA_ST_CHECK(owner_);
  PartitionSession& s = *sessions_[partition];
  if (s.claim_ticket != 0) return Errc::invalid_argument;  // its frame goes where the claim is
  std::size_t block = 0;
  if (attrs != nullptr && chain::attributes_size(*attrs, &block) != chain::AttributesCheck::ok)
    return Errc::invalid_argument;
  const std::size_t region = block + payload.size();  // what the frame's length counts
  if (const Errc e = room_for_st(s, region); e != Errc::ok) return e;
  // A batch lingers from its first record, however many earlier ones
  // still await their acks (under load a partition is never idle).
  const bool opens_batch = s.head.unflushed() == 0;
  const bool was_idle = s.head.pending() == 0 && opens_batch;
  const chain::RecordHeader h = record_header_st(flags, timestamp_ns);
  const Errc staged = attrs != nullptr ? s.head.stage(h, *attrs, block, payload) : s.head.stage(h, payload);
  if (staged == Errc::backpressure) ring_was_full_st(s);
  if (staged != Errc::ok) return staged;  // backpressure: wait for credit
  staged_st(s, opens_batch, was_idle, PendingRecord{std::move(cb), how.order, how.key_hash, how.placement});
  return Errc::ok;
}

chain::RecordHeader Publisher::Impl::record_header_st(std::uint32_t flags, std::uint64_t timestamp_ns) const {
  chain::RecordHeader h{};
  h.flags = flags | (opts_.trace_stages ? chain::kFlagTrace : 0u);
  h.producer_id = opts_.producer_id;
  h.producer_epoch = producer_epoch_;
  h.timestamp_ns = timestamp_ns != 0 ? timestamp_ns : catena::wall_clock_ns();
  return h;
}

void Publisher::Impl::staged_st(PartitionSession& s, bool opens_batch, bool was_idle, PendingRecord rec) {
  if (opens_batch) {
    s.linger_start = Clock::now();
    if (was_idle) s.last_progress = s.linger_start;
  }
  s.records.push_back(std::move(rec));
  ++in_flight_;
  s.ring_peak = std::max(s.ring_peak, s.head.ring_in_use());
  if (opts_.linger.count() == 0 || s.head.unflushed() >= opts_.max_batch_bytes) s.head.flush();
}

int Publisher::Impl::poll() {
  CATENA_ST_CHECK(owner_);
  int acks = 0;
  const auto now = Clock::now();
  for (auto& sp : sessions_) {
    PartitionSession& s = *sp;
    take_lookup_st(s, now);
    if (s.partition >= partitions_ || !s.active) continue;  // removed by a channel alter, or not used yet
    consider_shrink_st(s, now);
    // A grow (or shrink) waits until every record in the ring is resolved
    // (none to lay out again) and for no channel alter's switch.
    // Nor while a claim is open: the caller is writing into this ring.
    if (s.grow_to != 0 && s.head.pending() == 0 && !remapping_ && s.claim_ticket == 0) grow_st(s, now);
    observe_st(s, now);
    if (!s.head.connected()) {
      if (s.head.pending() > 0 && now - s.down_since > opts_.retry_timeout) {
        if (events_ && opts_.on_event) {
          emit_st(
              ClientEvent::Kind::partition_unavailable, s,
              fmt::format("{}/{}: unreachable for {} ms (retry_timeout): {} pending records failed "
                          "with unavailable",
                          channel_, s.partition,
                          std::chrono::duration_cast<std::chrono::milliseconds>(now - s.down_since).count(),
                          s.head.pending()));
        }
        fail_all_st(s, wire::Status::unavailable);
      }
      advance_connect_st(s, now, true);
      continue;
    }
    if (s.head.unflushed() > 0 && now - s.linger_start >= opts_.linger) s.head.flush();
    // Acks from the tail's watch or from the head: the first one resolves.
    if (s.watch.connected()) {
      // Dropped when broken, or stale: a tail cut off the network stays
      // connected and silent while the repaired chain acks through the head.
      if (!s.watch.do_work([&](const wire::PublishAck& ack) { acks += on_ack_st(s, ack); })) drop_watch_st(s);
    } else {
      advance_watch_st(s, now);
    }
    chain::PublishClient::Event event = chain::PublishClient::Event::none;
    const std::uint64_t acks_before = s.head.acks();
    const int from_head = s.head.do_work(
        &event,
        [&](std::uint64_t seq, wire::Status st, std::uint64_t offset) { resolved_st(s, seq, st, offset); });
    s.watch.head_resolved(static_cast<std::uint32_t>(from_head));
    if (auto held = s.head.take_held()) {
      held_st(s, *held, now);
    } else if (s.held != wire::HeldReason::none && now - s.held_at > kHeldQuiet) {
      s.held = wire::HeldReason::none;  // the head stopped saying so: its records flow
    }
    acks += from_head;
    if (s.head.acks() != acks_before) s.last_progress = now;
    s.resync = s.resync || event == chain::PublishClient::Event::resync;
    s.moved = s.moved || event == chain::PublishClient::Event::moved;
    if (event == chain::PublishClient::Event::remap) start_remap_st(s);
    if (s.resync || s.moved) {
      // Not a failure of the head: reconnect, and its welcome says where
      // this producer's sequence stands.
      spdlog::debug("publisher {}/{}: {}", channel_, s.partition,
                    s.moved ? "the partition moved to a new chain; following it"
                            : "the head reported a sequence gap; resyncing");
      if (s.moved) {
        s.moved_epoch = s.route.epoch;
        s.moved_since = now;
        s.probe_sealed = true;  // it says where the next chain is once it knows
      }
      s.resync = false;
      s.moved = false;
      go_down_st(s, now);
    } else if (s.head.broken()) {
      lost_head_st(s, "connection to head lost");
    } else if (s.head.pending() > 0 && now - s.last_progress >= opts_.stall_check &&
               now >= s.route_check_at && !s.lookup.busy() && s.held == wire::HeldReason::none) {
      // Acks stalled: a head cut off the network goes silent, no reset. (A
      // head that holds records back says so every 250 ms: not stalled,
      // until it has not said so for kHeldQuiet.)
      start_stall_check_st(s, now);
    }
  }
  if (remapping_ && barrier_done_st()) switch_generation_st(now);
  if (building_.busy() || built_) adopt_sessions_st(now);
  if (resend_next_ < resends_.size()) acks += drain_resends_st();
  return acks;
}

bool Publisher::Impl::flush(std::chrono::milliseconds timeout) {
  CATENA_ST_CHECK(owner_);
  const auto deadline = Clock::now() + timeout;
  fabric::BackoffIdle idle;
  for (auto& s : sessions_) s->head.flush();
  while (in_flight_ > 0 && Clock::now() < deadline) idle.idle(poll());
  return in_flight_ == 0;
}

// --- internals (publishing thread) -------------------------------------------
int Publisher::Impl::on_ack_st(PartitionSession& s, const wire::PublishAck& ack) {
  CATENA_ST_CHECK(owner_);
  chain::PublishClient::Event event = chain::PublishClient::Event::none;
  const int n = s.head.on_ack(ack, &event, [&](std::uint64_t seq, wire::Status st, std::uint64_t offset) {
    resolved_st(s, seq, st, offset);
  });
  s.last_progress = Clock::now();
  s.resync = s.resync || event == chain::PublishClient::Event::resync;
  s.moved = s.moved || event == chain::PublishClient::Event::moved;
  return n;
}

void Publisher::Impl::resolved_st(PartitionSession& s, std::uint64_t seq, wire::Status st,
                                  std::uint64_t offset) {
  CATENA_ST_CHECK(owner_);
  PublishCallback cb = std::move(s.records.front().cb);
  s.records.pop_front();
  --in_flight_;
  PublishResult r;
  r.status = client::from(st);
  r.partition = s.partition;
  r.sequence = seq;
  r.offset = offset;
  if (cb) cb(r);
}

void Publisher::Impl::fail_all_st(PartitionSession& s, wire::Status st) {
  CATENA_ST_CHECK(owner_);
  s.head.fail_all(st, [&](std::uint64_t seq, wire::Status status, std::uint64_t offset) {
    resolved_st(s, seq, status, offset);
  });
}

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Publisher::~Publisher() = default;

client::Result<std::unique_ptr<Publisher>> Publisher::create(RouteSource& routes, const std::string& channel,
                                                             const PublisherOptions& opts) {
  auto impl = std::make_unique<Impl>(routes, channel, opts);
  auto r = impl->init();
  if (!r) return r.error();
  impl->owner_.release();
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
}

// The client API speaks client::ErrorCode; the session code below it keeps
// the fabric's codes, mapped here.
client::ErrorCode Publisher::publish(std::span<const std::byte> key, std::span<const std::byte> payload,
                                     PublishCallback cb) {
  return client::from(impl_->publish_keyed(key, payload, std::move(cb)));
}

client::ErrorCode Publisher::publish_to(std::uint32_t partition, std::span<const std::byte> payload,
                                        PublishCallback cb) {
  return client::from(impl_->publish_to(partition, payload, std::move(cb)));
}

client::ErrorCode Publisher::publish(const Record& record, PublishCallback cb) {
  const chain::Attributes attrs{record.key, chain_headers(record.headers)};
  return client::from(impl_->publish_keyed(record.key, record.payload, std::move(cb), &attrs));
}

client::ErrorCode Publisher::publish_to(std::uint32_t partition, const Record& record, PublishCallback cb) {
  const chain::Attributes attrs{record.key, chain_headers(record.headers)};
  return client::from(impl_->publish_to(partition, record.payload, std::move(cb), &attrs));
}

PublishFuture Publisher::publish(std::span<const std::byte> key, std::span<const std::byte> payload) {
  return publish_future(key, payload, nullptr);
}

PublishFuture Publisher::publish(const Record& record) {
  return publish_future(record.key, record.payload, &record);
}

PublishFuture Publisher::publish_future(std::span<const std::byte> key, std::span<const std::byte> payload,
                                        const Record* record) {
  chain::Attributes record_attrs;
  if (record != nullptr) record_attrs = {record->key, chain_headers(record->headers)};
  const chain::Attributes* attrs = record != nullptr ? &record_attrs : nullptr;
  auto state = std::make_shared<PublishFuture::State>();
  fabric::BackoffIdle idle;
  for (;;) {
    // The callback holds the state until the record resolves (or the
    // publisher drops it, destroyed): PublishFuture::orphaned() counts on it.
    Errc e = impl_->publish_keyed(
        key, payload,
        [state](const PublishResult& r) {
          state->result = r;
          state->done = true;
        },
        attrs);
    if (e == Errc::ok) break;
    if (e != Errc::backpressure) {
      state->result.status = e == Errc::too_large          ? PublishStatus::too_large
                             : e == Errc::invalid_argument ? PublishStatus::invalid_argument
                                                           : PublishStatus::unavailable;
      state->done = true;
      break;
    }
    idle.idle(impl_->poll());
  }
  return PublishFuture(this, std::move(state));
}

bool PublishFuture::ready() const noexcept {
  return state_ != nullptr && state_->done;
}

PublishResult PublishFuture::get() {
  if (!state_) {
    PublishResult r;
    r.status = PublishStatus::invalid_argument;
    return r;
  }
  fabric::BackoffIdle idle;
  while (!state_->done && !orphaned()) idle.idle(pub_->poll());
  PublishResult r = state_->done ? state_->result : PublishResult{PublishStatus::unavailable, 0, 0, 0};
  state_.reset();
  return r;
}

std::future_status PublishFuture::wait_for(std::chrono::nanoseconds timeout) {
  if (!state_) return std::future_status::ready;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  fabric::BackoffIdle idle;
  while (!state_->done && !orphaned()) {
    idle.idle(pub_->poll());
    if (state_->done) break;
    if (std::chrono::steady_clock::now() >= deadline) return std::future_status::timeout;
  }
  return std::future_status::ready;
}

int Publisher::poll() {
  return impl_->poll();
}
bool Publisher::flush(std::chrono::milliseconds timeout) {
  return impl_->flush(timeout);
}
std::uint32_t Publisher::partitions() const {
  return impl_->partitions();
}
std::uint64_t Publisher::producer_id() const {
  return impl_->opts_.producer_id;
}
std::uint64_t Publisher::producer_epoch() const {
  return impl_->producer_epoch_;
}
std::uint64_t Publisher::ring_bytes_in_use() const {
  CATENA_ST_CHECK(impl_->owner_);
  return impl_->ring_used_;
}
std::uint64_t Publisher::in_flight() const {
  CATENA_ST_CHECK(impl_->owner_);
  return impl_->in_flight_;
}

}  // namespace catena
