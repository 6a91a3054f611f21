#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <spdlog/spdlog.h>
#include <thread>

#include <catena/broker/publisher.hpp>
#include <catena/chain/bounded_fifo.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/producer_state.hpp>
#include <catena/chain/record.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/idle.hpp>
#include <catena/fabric/thread_owner.hpp>

namespace catena {

using chain::Link;
using fabric::Errc;
namespace wire = chain::wire;
using Steady = std::chrono::steady_clock;

// One partition's session with its head, and its commit watch with the tail.
struct PartitionSession {
  struct Pending {
    std::uint64_t seq;
    std::uint32_t frame_bytes;
    std::uint32_t pos;  // where the frame starts in the ring
    PublishCallback cb;
  };

  std::uint32_t partition = 0;
  Route route;
  std::unique_ptr<Link> link;
  std::unique_ptr<Link> watch;                   // the tail's early acks (chains of 2 or more)
  std::unique_ptr<fabric::MemoryRegion> mirror;  // local image of the head's ring
  fabric::RemoteRegion ring{};
  chain::FrameRingWriter writer;  // credit comes from the head's acks
  std::uint64_t next_seq = 0;
  chain::BoundedFifo<Pending> pending;  // unacknowledged records, capacity max_in_flight
  Steady::time_point linger_start{};
  Steady::time_point down_since{};
  Steady::time_point retry_at{};
  Steady::time_point watch_at{};
  Steady::time_point last_progress{};  // last ack, or the publish that found nothing pending
  Steady::time_point route_check_at{};
  std::chrono::milliseconds watch_backoff{0};
  std::uint32_t head_first = 0;  // records the head resolved since the watch last said anything
  bool down = false;
  bool resync = false;  // the head reported a sequence gap: reconnect and follow its welcome
  bool moved = false;   // the head was sealed (partition handoff): reconnect to the new chain's head
  // Following a move: the route epoch whose head was sealed (0: none), and
  // since when. Until the controller publishes the next chain (a few ms
  // after the seal) the route is re-read without dialling the sealed head
  // again, and the new head, which the controller configures just after
  // publishing the route, is retried at once rather than backed off.
  std::uint64_t moved_epoch = 0;
  Steady::time_point moved_since{};
  // Where the partition's chain starts (Route::start_offset), once known: a
  // chain rebuilt after every copy was lost starts higher.
  std::uint64_t chain_start = 0;
  bool chain_start_known = false;

  // Places a frame of `frame_bytes` in the ring (a pad goes into the mirror
  // with the frames, and to the head with the next flush).
  chain::RingStatus place_st(std::uint32_t frame_bytes, std::uint32_t* pos) {
    return writer.place_st(
        frame_bytes,
        [this](std::uint32_t at, const chain::RecordHeader& pad) {
          std::memcpy(mirror->data() + at, &pad, sizeof pad);
          return true;
        },
        pos);
  }
};

class Publisher::Impl {
 public:
  // Records the head acknowledged while the tail's watch said nothing at
  // all: this many means the watch is on a node that no longer gets the
  // chain's records (cut off, and silent rather than disconnected).
  static constexpr std::uint32_t kStaleWatch = 1024;
  // Following a partition move: how often the route and the new head are
  // tried, and for how long before the usual back-off applies again.
  static constexpr std::chrono::milliseconds kMoveRetry{2};
  static constexpr std::chrono::milliseconds kMoveFollow{2000};

  Impl(RouteSource& routes, std::string channel, const PublisherOptions& opts)
      : routes_(routes), channel_(std::move(channel)), opts_(opts) {}

  client::Result<void> init() {
    if (channel_.empty() || channel_.size() > chain::limits::kMaxChannelNameLength) {
      return fabric::make_error(
          Errc::invalid_argument,
          "channel name must be 1.." + std::to_string(chain::limits::kMaxChannelNameLength) + " characters");
    }
    auto layout = routes_.layout(channel_);
    if (!layout) return layout.error();
    if (layout->partitions == 0)
      return fabric::make_error(Errc::invalid_argument, "channel has no partitions");
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
    // Connect eagerly so the first publish does not pay for it; failures are
    // retried from poll().
    for (auto& s : sessions_) (void)connect_st(*s, 0);
    return {};
  }

  Errc publish_to(std::uint32_t partition, std::span<const std::byte> payload, PublishCallback cb) {
    CATENA_ST_CHECK(owner_);
    if (partition >= sessions_.size()) return Errc::invalid_argument;
    PartitionSession& s = *sessions_[partition];
    if (payload.size() > max_record_) return Errc::too_large;
    if (s.down && Steady::now() - s.down_since > opts_.retry_timeout) return Errc::disconnected;
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
    if (s.pending.empty()) s.last_progress = Steady::now();
    if (was_idle) s.linger_start = Steady::now();
    s.pending.push_back(PartitionSession::Pending{s.next_seq, fbytes, pos, std::move(cb)});
    ++s.next_seq;
    ++in_flight_;
    if (opts_.linger.count() == 0 || s.writer.written() - s.writer.flushed() >= opts_.max_batch_bytes)
      flush_st(s);
    return Errc::ok;
  }

  std::uint32_t pick_partition(std::span<const std::byte> key) {
    if (key.empty()) return rr_++ % static_cast<std::uint32_t>(sessions_.size());
    return static_cast<std::uint32_t>(XXH64(key.data(), key.size(), 0) % sessions_.size());
  }

  int poll() {
    CATENA_ST_CHECK(owner_);
    int acks = 0;
    const auto now = Steady::now();
    for (auto& sp : sessions_) {
      PartitionSession& s = *sp;
      if (!s.link) {
        if (!s.pending.empty() && now - s.down_since > opts_.retry_timeout)
          fail_all_st(s, wire::Status::unavailable);
        if (now >= s.retry_at) (void)connect_st(s, s.route.epoch);
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
      } else if (opts_.tail_acks && now >= s.watch_at && s.route.replicas.size() >= 2) {
        watch_st(s, true);
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
        s.link.reset();
        s.watch.reset();
        s.down = true;
        s.down_since = now;
        s.retry_at = now;
      } else if (s.link->broken()) {
        lost_head_st(s, "connection to head lost");
      } else if (!s.pending.empty() && now - s.last_progress >= opts_.stall_check &&
                 now >= s.route_check_at) {
        // Acks stalled: a head cut off the network goes silent, no reset.
        s.route_check_at = now + opts_.stall_check;
        if (!refresh_route_st(s)) lost_head_st(s, "acknowledgements stalled and the chain has a new head");
      }
    }
    return acks;
  }

  // Re-reads the partition's route. False if the chain has a new head: the
  // head session is stale, and the route is left for connect_st(). A new
  // tail under the same head (a repair) makes the watch stale.
  bool refresh_route_st(PartitionSession& s) {
    CATENA_ST_CHECK(owner_);
    auto r = routes_.route(channel_, s.partition, s.route.epoch);
    if (!r || r->epoch <= s.route.epoch || r->replicas.empty() || s.route.replicas.empty()) return true;
    if (r->replicas.front().node_id != s.route.replicas.front().node_id) return false;
    if (s.watch && r->replicas.back().node_id != s.route.replicas.back().node_id) drop_watch_st(s);
    s.route = r.value();
    return true;
  }

  bool flush(std::chrono::milliseconds timeout) {
    CATENA_ST_CHECK(owner_);
    const auto deadline = Steady::now() + timeout;
    fabric::BackoffIdle idle;
    for (auto& s : sessions_) flush_st(*s);
    while (in_flight_ > 0 && Steady::now() < deadline) idle.idle(poll());
    return in_flight_ == 0;
  }

  // --- internals (publishing thread) -------------------------------------------
  void flush_st(PartitionSession& s) {
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

  int on_ack_st(PartitionSession& s, const wire::PublishAck& ack) {
    CATENA_ST_CHECK(owner_);
    int handled = 0;
    s.last_progress = Steady::now();
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

  void fail_all_st(PartitionSession& s, wire::Status st) {
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

  void lost_head_st(PartitionSession& s, const std::string& why) {
    CATENA_ST_CHECK(owner_);
    spdlog::debug("publisher {}/{}: {} ({} records pending); reconnecting", channel_, s.partition, why,
                  s.pending.size());
    if (!s.route.replicas.empty()) routes_.report_unreachable(s.route.replicas.front().node_id, s.route, why);
    s.link.reset();
    s.watch.reset();
    s.down = true;
    s.down_since = Steady::now();
    s.retry_at = Steady::now();
  }

  // Connects to the partition's head (refreshing the route) and re-sends every
  // unacknowledged record: the head's producer state drops what it already has.
  bool connect_st(PartitionSession& s, std::uint64_t stale_epoch) {
    CATENA_ST_CHECK(owner_);
    const auto now = Steady::now();
    // A move is over in milliseconds (seal, commit, route, pushes); the
    // usual back-off would make it a 50 ms pause. Bounded: a move that
    // takes longer is waited for like any other outage.
    const bool following_move = s.moved_epoch != 0 && now - s.moved_since < kMoveFollow;
    s.retry_at = now + (following_move ? kMoveRetry : std::chrono::milliseconds(50));
    if (!s.down) {
      s.down = true;
      s.down_since = now;
    }
    auto route = routes_.route(channel_, s.partition, stale_epoch);
    if (!route) return false;
    if (following_move && route->epoch <= s.moved_epoch) {
      // The sealed head's route still: it would only answer `moved` again.
      s.route = route.value();
      return false;
    }
    // Keep the epoch even of a route without replicas (every replica failed
    // and no replacement yet): the next lookup then asks for a newer one.
    s.route = route.value();
    if (s.route.replicas.empty()) {
      s.retry_at = now + std::chrono::milliseconds(200);
      return false;
    }
    if (s.chain_start_known && s.route.start_offset > s.chain_start && !s.route.continues(s.chain_start)) {
      // Every copy of the partition was lost and it was rebuilt. Records
      // still unacknowledged may have been committed (and delivered) in the
      // lost chain: resent, they could be stored twice. They fail as
      // data_lost instead, for the application to decide.
      fail_all_st(s, wire::Status::data_lost);
    }
    s.chain_start = s.route.start_offset;
    s.chain_start_known = true;
    const ReplicaAddress& head = s.route.replicas.front();
    wire::PublisherHello hello{};
    hello.ref.set(channel_, s.partition, s.route.epoch);
    hello.producer_id = opts_.producer_id;
    hello.producer_epoch = producer_epoch_;
    hello.ring_bytes = ring_bytes_;
    auto d = Link::dial<wire::PublisherWelcome>(*provider_, head.fabric_addr, hello, opts_.connect_timeout);
    if (d.unreachable) routes_.report_unreachable(head.node_id, s.route, d.error.message);
    if (!d.welcome) {
      spdlog::debug("publisher {}/{}: cannot reach head {} at {}: {}", channel_, s.partition, head.node_id,
                    head.fabric_addr, d.error.message);
      return false;
    }
    const auto& w = d.welcome;
    if (w->status == wire::Status::producer_fenced) {
      fail_all_st(s, wire::Status::producer_fenced);
      return false;
    }
    if (w->status == wire::Status::moved) {
      // Sealed, and the controller has not published the new chain yet.
      spdlog::debug("publisher {}/{}: head {} is sealed; waiting for the new chain", channel_, s.partition,
                    head.node_id);
      if (s.moved_epoch != s.route.epoch) {
        s.moved_epoch = s.route.epoch;
        s.moved_since = now;
      }
      s.retry_at = now + kMoveRetry;
      return false;
    }
    if (w->status != wire::Status::ok || w->ring_bytes != ring_bytes_) {
      spdlog::debug("publisher {}/{}: head {} answered {}", channel_, s.partition, head.node_id,
                    wire::to_string(w->status));
      return false;
    }
    if (!resync_st(s, w->next_sequence)) return false;
    spdlog::debug("publisher {}/{}: head {} at {} (route epoch {}), next sequence {}, {} records to resend",
                  channel_, s.partition, head.node_id, head.fabric_addr, s.route.epoch, w->next_sequence,
                  s.pending.size());
    max_record_ = std::min(max_record_, w->max_record);
    s.moved_epoch = 0;
    s.link = std::move(d.link);
    s.ring = w->ring;
    s.down = false;
    s.watch.reset();
    s.watch_backoff = std::chrono::milliseconds(0);
    if (opts_.tail_acks && s.route.replicas.size() >= 2) watch_st(s, false);
    resend_st(s);
    return true;
  }

  // Opens the commit watch with the tail. Optional: without it the head's
  // acks still come, one round trip through the chain later. A failure is
  // retried with back-off (the dial is bounded, so a cut-off tail stalls
  // publishing at most that long per attempt).
  void watch_st(PartitionSession& s, bool refresh_route) {
    CATENA_ST_CHECK(owner_);
    s.watch_backoff =
        std::clamp(s.watch_backoff * 2, std::chrono::milliseconds(100), std::chrono::milliseconds(5000));
    s.watch_at = Steady::now() + s.watch_backoff;
    // A new head means the head session is about to break and reconnect.
    if ((refresh_route && !refresh_route_st(s)) || s.route.replicas.size() < 2) return;
    wire::CommitWatchHello hello{};
    hello.ref.set(channel_, s.partition, s.route.epoch);
    hello.producer_id = opts_.producer_id;
    hello.producer_epoch = producer_epoch_;
    const auto timeout = std::min(opts_.connect_timeout, std::chrono::milliseconds(250));
    auto d =
        Link::dial<wire::CommitWatchWelcome>(*provider_, s.route.replicas.back().fabric_addr, hello, timeout);
    if (d.welcome && d.welcome->status == wire::Status::ok) {
      s.watch = std::move(d.link);
      s.watch_backoff = std::chrono::milliseconds(0);
    }
  }

  void drop_watch_st(PartitionSession& s) {
    CATENA_ST_CHECK(owner_);
    s.watch.reset();
    s.head_first = 0;
    s.watch_at = Steady::now() + std::chrono::milliseconds(100);
  }

  // Follows the head's view of this producer epoch: it holds every sequence
  // below `next` and none from `next` on. Pending records from `next` on are
  // resent as they are; if the head expects less than the first pending
  // record (records failed after the retry timeout were never stored, or a
  // new head has none of this producer's records), pending records are
  // renumbered from `next`: the head holds none of them, so none can be
  // stored twice. A head ahead of everything sent means another process
  // publishes with this producer epoch: fenced.
  bool resync_st(PartitionSession& s, std::uint64_t next) {
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

  void resend_st(PartitionSession& s) {
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

  RouteSource& routes_;
  std::string channel_;
  PublisherOptions opts_;
  std::unique_ptr<fabric::Provider> provider_;
  std::vector<std::unique_ptr<PartitionSession>> sessions_;
  std::uint32_t ring_bytes_ = 0;
  std::uint32_t max_record_ = chain::kMaxRecordPayload;
  std::uint64_t producer_epoch_ = 0;
  std::uint32_t rr_ = 0;
  std::uint64_t in_flight_ = 0;
  // The polling thread: the first to call in after create() (which may run
  // on another thread and hands the publisher over unowned).
  fabric::ThreadOwner owner_;
};

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
