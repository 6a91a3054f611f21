#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <spdlog/spdlog.h>

#include <catena/chain/producer_state.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/idle.hpp>

#include "publisher_impl.hpp"

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
  auto p = fabric::Provider::open(opts_.provider);
  if (!p) return p.error();
  provider_ = std::move(p.value());
  auto identity = routes_.init_producer(opts_.producer_id);
  if (!identity) return identity.error();
  opts_.producer_id = identity->producer_id;
  producer_epoch_ = identity->producer_epoch;
  ring_bytes_ = chain::clamp_ring_bytes(opts_.ring_bytes);
  for (std::uint32_t i = 0; i < layout->partitions; ++i) {
    auto s = std::make_unique<PartitionSession>();
    s->partition = i;
    auto mirror = provider_->allocate(ring_bytes_, fabric::kLocalWrite);
    if (!mirror) return mirror.error();
    s->mirror = std::move(mirror.value());
    // At most half the ring per frame: a frame that has to wrap still
    // fits behind its pad.
    s->writer = chain::FrameRingWriter(ring_bytes_, ring_bytes_ / 2);
    s->pending = chain::BoundedFifo<PartitionSession::Pending>(
        std::clamp<std::uint32_t>(opts_.max_in_flight, 16, chain::ProducerState::kWindow));
    sessions_.push_back(std::move(s));
  }
  // Connect eagerly so the first publish does not pay for it: one attempt
  // per partition (and at the tail's watch, once the head answered), all at
  // once, waited for here (setup). Failures are retried from poll().
  for (auto& s : sessions_) start_connect_st(*s, Clock::now());
  fabric::BackoffIdle idle;
  for (bool attempting = true; attempting;) {
    attempting = false;
    const auto now = Clock::now();
    for (auto& s : sessions_) {
      take_lookup_st(*s, now);
      advance_connect_st(*s, now, false);
      if (s->link && s->watch_attempt != Attempt::none) advance_watch_st(*s, now);
      attempting = attempting || s->attempt != Attempt::none || s->watch_attempt != Attempt::none;
    }
    if (attempting) idle.idle();
  }
  return {};
}

Errc Publisher::Impl::publish_to(std::uint32_t partition, std::span<const std::byte> payload,
                                 PublishCallback cb) {
  CATENA_ST_CHECK(owner_);
  if (partition >= sessions_.size()) return Errc::invalid_argument;
  PartitionSession& s = *sessions_[partition];
  if (payload.size() > max_record_) return Errc::too_large;
  if (s.down && Clock::now() - s.down_since > opts_.retry_timeout) return Errc::disconnected;
  const std::uint32_t fbytes =
      static_cast<std::uint32_t>(chain::frame_size(static_cast<std::uint32_t>(payload.size())));
  if (s.writer.check_size(fbytes) != chain::RingStatus::ok) return Errc::too_large;
  if (s.pending.full()) return Errc::backpressure;
  const bool was_idle = s.pending.empty() && s.writer.written() == s.writer.flushed();
  std::uint32_t pos = 0;
  if (s.place_st(fbytes, &pos) != chain::RingStatus::ok) return Errc::backpressure;  // wait for credit
  chain::RecordHeader h{};
  h.producer_id = opts_.producer_id;
  h.producer_epoch = producer_epoch_;
  h.sequence = s.next_seq;
  h.timestamp_ns = catena::wall_clock_ns();
  chain::write_frame(s.mirror->data() + pos, h, payload);
  if (s.pending.empty()) s.last_progress = Clock::now();
  if (was_idle) s.linger_start = Clock::now();
  s.pending.push_back(PartitionSession::Pending{s.next_seq, fbytes, pos, std::move(cb)});
  ++s.next_seq;
  ++in_flight_;
  if (opts_.linger.count() == 0 || s.writer.written() - s.writer.flushed() >= opts_.max_batch_bytes)
    flush_st(s);
  return Errc::ok;
}

std::uint32_t Publisher::Impl::pick_partition(std::span<const std::byte> key) {
  if (key.empty()) return rr_++ % static_cast<std::uint32_t>(sessions_.size());
  return static_cast<std::uint32_t>(XXH64(key.data(), key.size(), 0) % sessions_.size());
}

int Publisher::Impl::poll() {
  CATENA_ST_CHECK(owner_);
  int acks = 0;
  const auto now = Clock::now();
  for (auto& sp : sessions_) {
    PartitionSession& s = *sp;
    take_lookup_st(s, now);
    if (!s.link) {
      if (!s.pending.empty() && now - s.down_since > opts_.retry_timeout)
        fail_all_st(s, wire::Status::unavailable);
      advance_connect_st(s, now, true);
      continue;
    }
    if (s.writer.written() > s.writer.flushed() && now - s.linger_start >= opts_.linger) flush_st(s);
    // Acks from the tail's watch or from the head: the first one resolves.
    auto take_acks = [&](Link& link, bool from_tail) {
      link.poll_recv(
          [&](const std::byte* msg, std::uint32_t len) {
            auto ack = wire::decode<wire::PublishAck>(msg, len);
            if (!ack) return;
            const int n = on_ack_st(s, *ack);
            if (from_tail) {
              s.head_first = 0;  // the tail is alive and acking
            } else if (s.watch) {
              s.head_first += static_cast<std::uint32_t>(n);
            }
            acks += n;
          },
          [](std::uint32_t, std::uint32_t) {});
    };
    if (s.watch) {
      take_acks(*s.watch, true);
      // A tail cut off the network stays connected and silent while the
      // repaired chain acks through the head: a watch that keeps losing
      // to the head is stale.
      if (s.watch->broken() || s.head_first >= kStaleWatch) drop_watch_st(s);
    } else {
      advance_watch_st(s, now);
    }
    s.link->poll_send();
    take_acks(*s.link, false);
    if (s.resync || s.moved) {
      // Not a failure of the head: reconnect, and its welcome says where
      // this producer's sequence stands.
      spdlog::debug("publisher {}/{}: {}", channel_, s.partition,
                    s.moved ? "the partition moved to a new chain; following it"
                            : "the head reported a sequence gap; resyncing");
      if (s.moved) {
        s.moved_epoch = s.route.epoch;
        s.moved_since = now;
      }
      s.resync = false;
      s.moved = false;
      go_down_st(s, now);
    } else if (s.link->broken()) {
      lost_head_st(s, "connection to head lost");
    } else if (!s.pending.empty() && now - s.last_progress >= opts_.stall_check && now >= s.route_check_at &&
               !s.lookup.busy()) {
      // Acks stalled: a head cut off the network goes silent, no reset.
      start_stall_check_st(s, now);
    }
  }
  return acks;
}

bool Publisher::Impl::flush(std::chrono::milliseconds timeout) {
  CATENA_ST_CHECK(owner_);
  const auto deadline = Clock::now() + timeout;
  fabric::BackoffIdle idle;
  for (auto& s : sessions_) flush_st(*s);
  while (in_flight_ > 0 && Clock::now() < deadline) idle.idle(poll());
  return in_flight_ == 0;
}

// --- internals (publishing thread) -------------------------------------------
void Publisher::Impl::flush_st(PartitionSession& s) {
  CATENA_ST_CHECK(owner_);
  while (s.link && s.writer.flushed() < s.writer.written()) {
    const chain::FrameRingWriter::Chunk c = s.writer.next_chunk();
    fabric::LocalBuffer src{s.mirror.get(), c.pos, c.bytes};
    fabric::RemoteAddress dst{s.ring, c.pos};
    Errc e = c.last ? s.link->ep().post_write_imm(chain::kWrData, src, dst, s.writer.immediate())
                    : s.link->ep().post_write(chain::kWrData, src, dst);
    if (e != Errc::ok) return;  // send queue full: poll() retries
    s.writer.flushed_st(s.writer.flushed() + c.bytes);
  }
}

int Publisher::Impl::on_ack_st(PartitionSession& s, const wire::PublishAck& ack) {
  CATENA_ST_CHECK(owner_);
  int handled = 0;
  s.last_progress = Clock::now();
  if (ack.status == wire::Status::sequence_gap) {
    // The head holds none of these records: nothing to resolve, resync.
    (void)s.writer.credit_st(ack.ring_consumed);
    s.resync = true;
    return 0;
  }
  if (ack.status == wire::Status::moved) {
    // The partition moved on: the sealed head stored none of these (every
    // record it did store was acknowledged before this). The new chain's
    // head has this producer's state and takes them.
    (void)s.writer.credit_st(ack.ring_consumed);
    s.moved = true;
    return 0;
  }
  for (std::uint32_t i = 0; i < ack.count && !s.pending.empty(); ++i) {
    const std::uint64_t seq = ack.first_seq + i;
    PartitionSession::Pending& p = s.pending.front();
    if (p.seq != seq) continue;  // an ack for a record already resolved
    PublishResult r;
    r.status = ack.status;
    r.partition = s.partition;
    r.sequence = seq;
    r.offset =
        ack.status == wire::Status::ok ? (ack.first_offset == ~0ull ? ~0ull : ack.first_offset + i) : 0;
    PublishCallback cb = std::move(p.cb);
    s.pending.pop_front();
    --in_flight_;
    ++handled;
    if (cb) cb(r);
  }
  (void)s.writer.credit_st(ack.ring_consumed);  // 0 from the tail's watch: ignored
  return handled;
}

void Publisher::Impl::fail_all_st(PartitionSession& s, wire::Status st) {
  CATENA_ST_CHECK(owner_);
  while (!s.pending.empty()) {
    PartitionSession::Pending& p = s.pending.front();
    PublishCallback cb = std::move(p.cb);
    PublishResult r{st, s.partition, 0, p.seq};
    s.pending.pop_front();
    --in_flight_;
    if (cb) cb(r);
  }
  s.writer.reset_st();
}

// Follows the head's view of this producer epoch: it holds every sequence
// below `next` and none from `next` on. Pending records from `next` on are
// resent as they are; if the head expects less than the first pending
// record (records failed after the retry timeout were never stored, or a
// new head has none of this producer's records), pending records are
// renumbered from `next`: the head holds none of them, so none can be
// stored twice. A head ahead of everything sent means another process
// publishes with this producer epoch: fenced.
bool Publisher::Impl::resync_st(PartitionSession& s, std::uint64_t next) {
  CATENA_ST_CHECK(owner_);
  const std::uint64_t first = !s.pending.empty() ? s.pending.front().seq : s.next_seq;
  if (next > s.next_seq) {
    fail_all_st(s, wire::Status::producer_fenced);
    return false;
  }
  if (next >= first) return true;
  for (std::uint32_t i = 0; i < s.pending.size(); ++i) {
    auto& p = s.pending[i];
    p.seq = next + i;
    chain::restamp_sequence(s.mirror->data() + p.pos, p.seq);
  }
  s.next_seq = next + s.pending.size();
  return true;
}

void Publisher::Impl::resend_st(PartitionSession& s) {
  CATENA_ST_CHECK(owner_);
  // The new ring starts empty: lay the unacknowledged frames out again.
  // They were all in the ring at once, so from offset 0 they fit.
  std::vector<std::byte> copy;
  for (std::uint32_t i = 0; i < s.pending.size(); ++i) {
    const auto& p = s.pending[i];
    const std::byte* f = s.mirror->data() + p.pos;
    copy.insert(copy.end(), f, f + p.frame_bytes);
  }
  s.writer.reset_st();
  std::size_t off = 0;
  for (std::uint32_t i = 0; i < s.pending.size(); ++i) {
    auto& p = s.pending[i];
    if (s.place_st(p.frame_bytes, &p.pos) != chain::RingStatus::ok) {
      fail_all_st(s, wire::Status::unavailable);  // cannot happen: see above
      return;
    }
    std::memcpy(s.mirror->data() + p.pos, copy.data() + off, p.frame_bytes);
    off += p.frame_bytes;
  }
  flush_st(s);
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
  return client::from(impl_->publish_to(impl_->pick_partition(key), payload, std::move(cb)));
}

client::ErrorCode Publisher::publish_to(std::uint32_t partition, std::span<const std::byte> payload,
                                        PublishCallback cb) {
  return client::from(impl_->publish_to(partition, payload, std::move(cb)));
}

std::future<PublishResult> Publisher::publish(std::span<const std::byte> key,
                                              std::span<const std::byte> payload) {
  auto promise = std::make_shared<std::promise<PublishResult>>();
  auto fut = promise->get_future();
  const std::uint32_t p = impl_->pick_partition(key);
  fabric::BackoffIdle idle;
  for (;;) {
    Errc e = impl_->publish_to(p, payload, [promise](const PublishResult& r) { promise->set_value(r); });
    if (e == Errc::ok) break;
    if (e != Errc::backpressure) {
      promise->set_value(PublishResult{
          e == Errc::too_large ? PublishStatus::too_large : PublishStatus::unavailable, p, 0, 0});
      break;
    }
    idle.idle(impl_->poll());
  }
  return fut;
}

int Publisher::poll() {
  return impl_->poll();
}
bool Publisher::flush(std::chrono::milliseconds timeout) {
  return impl_->flush(timeout);
}
std::uint32_t Publisher::partitions() const {
  return static_cast<std::uint32_t>(impl_->sessions_.size());
}
std::uint64_t Publisher::producer_id() const {
  return impl_->opts_.producer_id;
}
std::uint64_t Publisher::producer_epoch() const {
  return impl_->producer_epoch_;
}
std::uint64_t Publisher::in_flight() const {
  CATENA_ST_CHECK(impl_->owner_);
  return impl_->in_flight_;
}

}  // namespace catena
