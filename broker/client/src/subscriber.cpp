#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <catena/broker/client_error.hpp>
#include <catena/broker/record_views.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/domain.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/record.hpp>
#include <catena/fabric/idle.hpp>
#include <catena/fabric/thread_owner.hpp>

#include "marker_gate.hpp"
#include "poll_wait.hpp"
#include "shared_provider.hpp"
#include "sub_session.hpp"

namespace catena {

using chain::Link;
using fabric::Errc;
namespace wire = chain::wire;
using Steady = std::chrono::steady_clock;
using client_detail::Attempt;
using client_detail::SubSession;

class CATENA_LOCAL Subscriber::Impl {
 public:
  // How long a `moved` answer's hint is tried (its chain may be told the
  // route a moment after the old one) before the controller is asked.
  static constexpr std::chrono::milliseconds kHintFor{2000};

  Impl(RouteSource& routes, std::string channel, const SubscriberOptions& opts)
      : routes_(routes), channel_(std::move(channel)), opts_(opts) {}

  client::Result<void> init() {
    if (channel_.empty() || channel_.size() > chain::limits::kMaxChannelNameLength) {
      return fabric::make_error(
          Errc::invalid_argument,
          "channel name must be 1.." + std::to_string(chain::limits::kMaxChannelNameLength) + " characters");
    }
    auto layout = routes_.layout(channel_);
    if (!layout) return layout.error();
    auto p = client_detail::shared_provider(opts_.provider);
    if (!p) return p.error();
    provider_ = std::move(p.value());
    ring_bytes_ =
        chain::align_ring_bytes(std::max<std::uint32_t>(opts_.ring_bytes, 2 * layout->segment_bytes));
    std::vector<std::uint32_t> parts = opts_.partitions;
    if (parts.empty()) {
      for (std::uint32_t i = 0; i < layout->partitions; ++i) parts.push_back(i);
    }
    for (std::uint32_t part : parts) {
      if (part >= std::max(layout->partitions, layout->routed)) {
        return fabric::make_error(Errc::invalid_argument,
                                  "partition " + std::to_string(part) + " does not exist");
      }
      auto made = make_session(part);
      if (!made) return made.error();
      auto& s = *made;
      if (opts_.start == Start::offset) {
        s->next_offset = opts_.start_offset;
        s->positioned = true;
      } else if (opts_.start == Start::committed) {
        if (opts_.group.empty())
          return fabric::make_error(Errc::invalid_argument, "Start::committed needs a group");
        auto c = routes_.committed_offset(opts_.group, channel_, part);
        if (c) {
          s->next_offset = c.value();
          s->positioned = true;
        } else if (c.code() != client::ErrorCode::no_committed_offset) {
          return c.error();  // not "never committed" (start as configured): the controller is down, say
        }
      }
      sessions_.push_back(std::move(s));
    }
    std::vector<bool> from_start;  // the gate knows a partition's generation when read from offset 0
    for (const auto& s : sessions_) from_start.push_back(!s->positioned || s->next_offset == 0);
    gate_.emplace(parts, from_start, opts_.markers_released_by_caller);
    // Connect eagerly: one attempt per partition, all at once, waited for
    // here (setup). Failures are retried from poll().
    for (auto& s : sessions_) start_connect_st(*s, Steady::now());
    fabric::BackoffIdle idle;
    for (bool attempting = true; attempting;) {
      attempting = false;
      const auto now = Steady::now();
      for (auto& s : sessions_) {
        take_lookup_st(*s, now);
        advance_connect_st(*s, now, false);
        attempting = attempting || s->attempt != Attempt::none;
      }
      if (attempting) idle.idle();
    }
    return {};
  }

  // A session for `part`, its ring allocated and registered, not connected.
  client::Result<std::unique_ptr<SubSession>> make_session(std::uint32_t part) {
    auto s = std::make_unique<SubSession>();
    s->partition = part;
    s->index = sessions_.size();
    auto ring = provider_->allocate(ring_bytes_, fabric::kLocalWrite | fabric::kRemoteWrite,
                                    chain::domain_of_channel(channel_));
    if (!ring) return ring.error();
    s->delivery = chain::DeliveryClient(std::move(ring.value()), ring_bytes_);
    s->replica_pick = opts_.read_from == SubscriberOptions::ReadFrom::spread ? part : 0;
    return s;
  }

  // A grow's marker named partitions this subscriber (of every partition)
  // does not read yet: read them from their first offset, which is their
  // marker. Tried again on the next poll if a ring cannot be had.
  void grow_st(Steady::time_point now) {
    CATENA_ST_CHECK(owner_);
    while (sessions_.size() < grow_to_) {
      const auto part = static_cast<std::uint32_t>(sessions_.size());
      auto made = make_session(part);
      if (!made) {
        spdlog::warn("subscriber {}: partition {} added by an alter: {}", channel_, part,
                     made.error().message);
        return;
      }
      (*made)->positioned = true;  // offset 0
      gate_->add(part, true);
      spdlog::info("subscriber {}: reading partition {}, added by an alter", channel_, part);
      sessions_.push_back(std::move(*made));
      start_connect_st(*sessions_.back(), now);
    }
  }

  // The end of create(): what each partition's state is now is not news.
  void start_events() {
    for (auto& s : sessions_) {
      s->seen_epoch = s->route.epoch;
      s->seen_connected = s->delivery.connected();
      s->ever_connected = s->seen_connected;
    }
    events_ = true;
  }

  int poll(const Handler& on_message, int max) {
    CATENA_ST_CHECK(owner_);
    if (!polled_) {
      polled_ = true;
      if (notice_) {
        for (const Notice& n : early_notices_) notice_(n);
      }
      early_notices_.clear();
      early_notices_.shrink_to_fit();
    }
    int delivered = 0;
    const auto now = Steady::now();
    for (auto& sp : sessions_) {
      SubSession& s = *sp;
      take_lookup_st(s, now);
      observe_st(s);
      if (!s.delivery.connected()) {
        advance_connect_st(s, now, true);
        continue;
      }
      chain::DeliveryClient::Fault fault = chain::DeliveryClient::Fault::none;
      bool expired = false;
      int skipped = 0;
      // Parked at a marker (MarkerGate): the link is served, nothing past it
      // is read (its records wait in the ring), and no stall is suspected.
      const bool parked = gate_->parked(s.index);
      if (parked) s.last_delivery = now;
      delivered += s.delivery.do_work(
          parked ? 0 : max - delivered, &fault,
          [&](wire::Status status, std::uint64_t next_offset, const wire::NextChainHint& next) {
            spdlog::debug("subscriber {}/{}: notice {} from {}: next offset {}", channel_, s.partition,
                          wire::to_string(status), s.reading_from, next_offset);
            // A range's end is followed here, not the application's business.
            if (status != wire::Status::moved) notify(Notice{s.partition, client::from(status), next_offset});
            if (status == wire::Status::position_expired) {
              s.next_offset = next_offset;
              gate_->jumped(s.index, next_offset == 0);
              expired = true;
            } else if (status == wire::Status::moved) {
              // This range ends there (the next chain serves the rest):
              // move on once every record before it is consumed, which
              // may still be in the ring.
              s.range_end = next_offset;
              take_hint_st(s, next_offset, next);
            }
          },
          [&](const chain::RecordHeader& h, std::span<const std::byte> payload) {
            Message m;
            m.partition = s.partition;
            m.offset = h.offset;
            m.timestamp_ns = h.timestamp_ns;
            m.producer_id = h.producer_id;
            m.sequence = h.sequence;
            m.marker = (h.flags & chain::kFlagMarker) != 0;
            s.next_offset = h.offset + 1;
            s.last_delivery = now;
            chain::DecodedRecord decoded;
            if (const auto ac = chain::decode_record(h, payload, &decoded);
                ac != chain::AttributesCheck::ok) {
              spdlog::warn(
                  "subscriber {}/{}: the record at offset {} has a malformed attributes block ({}); "
                  "skipped",
                  channel_, s.partition, h.offset, chain::describe(ac));
              ++skipped;
              Notice n{s.partition, client::ErrorCode::corrupt, h.offset + 1, h.offset};
              notify(n);
              return;
            }
            m.payload = decoded.payload;
            m.key = decoded.key;
            m.headers = public_headers(decoded.headers);
            chain::MarkerSpec spec;
            if (m.marker && chain::decode_marker(h, payload, &spec)) {
              gate_->on_marker(s.index, spec);
              if (opts_.partitions.empty()) grow_to_ = std::max<std::size_t>(grow_to_, spec.to_partitions);
            }
            if (m.marker && !opts_.control_records) {
              ++skipped;  // not a record to the application
            } else if (on_message) {
              on_message(m);
            }
          });
      delivered -= skipped;
      if (fault != chain::DeliveryClient::Fault::none) {
        spdlog::debug("subscriber {}/{}: {} from {} at offset {}; reconnecting", channel_, s.partition,
                      chain::DeliveryClient::describe(fault), s.reading_from, s.next_offset);
      }
      const bool reconnect = expired || fault != chain::DeliveryClient::Fault::none;
      if (!reconnect && s.committed_at_connect > s.next_offset &&
          now - s.last_delivery >= opts_.delivery_stall) {
        spdlog::debug(
            "subscriber {}/{}: {} delivered nothing for {} ms with offsets up to {} committed; reading "
            "from another replica",
            channel_, s.partition, s.reading_from,
            std::chrono::duration_cast<std::chrono::milliseconds>(now - s.last_delivery).count(),
            s.committed_at_connect);
        s.drop_link();
        ++s.replica_pick;
        s.retry_at = now;
        continue;
      }
      if (!reconnect && now - s.last_delivery >= opts_.stall_check && now >= s.route_check_at &&
          !s.lookup.busy()) {
        // Nothing came for a while: fine if the partition is idle, not if
        // our replica has left the chain (it may be cut off, and silent).
        s.route_check_at = now + opts_.stall_check;
        start_lookup_st(s, false);
      }
      if (!reconnect && s.next_offset >= s.range_end) {
        spdlog::debug("subscriber {}/{}: the range {} served ends at {}; going on at the next chain",
                      channel_, s.partition, s.reading_from, s.next_offset);
        s.drop_link();
        s.replica_pick = 0;
        s.retry_at = now;
        continue;
      }
      if (reconnect || s.delivery.broken()) {
        if (!reconnect)
          spdlog::debug("subscriber {}/{}: link to {} broke", channel_, s.partition, s.reading_from);
        if (!reconnect && !s.route.replicas.empty() && !s.reading_from.empty()) {
          const auto& r = s.route.replicas[s.replica_pick % s.route.replicas.size()];
          report_st(r.node_id, s.route, "subscriber lost its replica");
        }
        s.drop_link();
        ++s.replica_pick;  // try another replica of the chain next
        s.retry_at = now;
      }
    }
    if (grow_to_ > sessions_.size()) grow_st(now);
    return delivered;
  }

  // Whether `route` names `rep` anywhere (its chain or a sealed range's).
  static bool names_replica(const Route& route, const ReplicaAddress& rep) {
    auto same = [&](const ReplicaAddress& a) { return client_detail::same_replica(a, rep); };
    if (std::any_of(route.replicas.begin(), route.replicas.end(), same)) return true;
    return std::any_of(route.sealed.begin(), route.sealed.end(), [&](const RouteRange& range) {
      return std::any_of(range.replicas.begin(), range.replicas.end(), same);
    });
  }

  // A stall check's answer: whether our replica left the chain.
  bool replica_left_chain_st(SubSession& s, const client::Result<Route>& r) {
    CATENA_ST_CHECK(owner_);
    if (!r || r->epoch <= s.route.epoch) return false;
    s.route = r.value();
    // The partition moved on (a handoff sealed the chain we read at an offset
    // we reached): the next chain serves the position.
    const RouteRange* range = s.route.range_of(s.next_offset);
    if ((range != nullptr ? range->start_offset : s.route.start_offset) != s.range_start) return true;
    return std::none_of(s.route.replicas.begin(), s.route.replicas.end(),
                        [&](const ReplicaAddress& a) { return a.node_id == s.reading_from; });
  }

  void start_lookup_st(SubSession& s, bool for_attempt, bool for_dial = false) {
    CATENA_ST_CHECK(owner_);
    s.lookup_for_attempt = for_attempt;
    s.lookup_for_dial = for_dial;
    s.lookup_link = s.link_gen;
    s.lookup_dial = s.dial_gen;
    s.lookup.start(lookups_, [&routes = routes_, channel = channel_, partition = s.partition,
                              epoch = s.route.epoch] { return routes.route(channel, partition, epoch); });
  }

  // Queued before the session's next lookup, which a route source that
  // drops its cached route on a report (ControllerRoutes) answers afresh.
  void report_st(const std::string& node_id, const Route& route, const std::string& reason) {
    CATENA_ST_CHECK(owner_);
    lookups_.post(
        [&routes = routes_, node_id, route, reason] { routes.report_unreachable(node_id, route, reason); });
  }

  void take_lookup_st(SubSession& s, Steady::time_point now) {
    CATENA_ST_CHECK(owner_);
    auto r = s.lookup.take();
    if (!r) return;
    if (s.lookup_for_attempt) {
      if (s.attempt == Attempt::route) on_route_st(s, std::move(*r), now);
      return;
    }
    if (s.lookup_for_dial) {
      if (s.attempt != Attempt::dial || s.lookup_dial != s.dial_gen) return;             // that dial is over
      if (!*r || (*r)->epoch <= s.route.epoch || names_replica(**r, s.dialled)) return;  // it goes on
      // The replica being dialled left the partition's route: its answer,
      // if it ever comes, is of no use. A replica of the new route is
      // dialled at once.
      spdlog::debug(
          "subscriber {}/{}: {} at {} has not answered for {} ms and left the route; dialling "
          "another replica",
          channel_, s.partition, s.dialled.node_id, s.dialled.fabric_addr,
          std::chrono::duration_cast<std::chrono::milliseconds>(now - s.dial_started).count());
      s.dial.cancel();
      if (s.attempt_hinted) {
        s.hint_failed = s.hint_epoch;
        s.hint_epoch = 0;
        s.attempt_hinted = false;
      }
      s.replica_pick = 0;
      s.attempt = Attempt::route;
      on_route_st(s, std::move(*r), now);
      return;
    }
    if (!s.delivery.connected() || s.lookup_link != s.link_gen || !replica_left_chain_st(s, *r)) return;
    spdlog::debug("subscriber {}/{}: {} left the chain; moving", channel_, s.partition, s.reading_from);
    s.drop_link();  // resume at next_offset on the replica the route now prefers
    s.replica_pick = 0;
    s.retry_at = now;
  }

  // Compares a session with what the application was last told
  // (SubscriberOptions::on_event): once per poll, formatting only on a change.
  void observe_st(SubSession& s) {
    CATENA_ST_CHECK(owner_);
    if (!events_ || !opts_.on_event) return;
    if (s.route.epoch != s.seen_epoch) {
      const std::uint64_t was = s.seen_epoch;
      s.seen_epoch = s.route.epoch;
      if (was != 0) {
        opts_.on_event(ClientEvent{ClientEvent::Kind::route_changed, s.partition,
                                   fmt::format("{}/{}: route epoch {} -> {}, replicas {}", channel_,
                                               s.partition, was, s.route.epoch, s.route.replicas.size())});
      }
    }
    const bool connected = s.delivery.connected();
    if (connected == s.seen_connected) return;
    s.seen_connected = connected;
    if (!connected) {
      opts_.on_event(ClientEvent{ClientEvent::Kind::disconnected, s.partition,
                                 fmt::format("{}/{}: stopped reading from {} at offset {}; reconnecting",
                                             channel_, s.partition, s.reading_from, s.next_offset)});
    } else if (s.ever_connected) {
      opts_.on_event(ClientEvent{ClientEvent::Kind::reconnected, s.partition,
                                 fmt::format("{}/{}: reading from {} (route epoch {}) at offset {}", channel_,
                                             s.partition, s.reading_from, s.route.epoch, s.next_offset)});
    }
    s.ever_connected = true;
  }

  // A notice found while create() connected comes before the caller could
  // set a handler (on_notice() after create): kept, and handed over by the
  // first poll(). Later, without a handler, a notice is dropped.
  void notify(const Notice& n) {
    if (notice_)
      notice_(n);
    else if (!polled_)
      early_notices_.push_back(n);
  }

  const ReplicaAddress& pick_st(SubSession& s, const std::vector<ReplicaAddress>& reps) {
    CATENA_ST_CHECK(owner_);
    const std::size_t n = reps.size();
    switch (opts_.read_from) {
      case SubscriberOptions::ReadFrom::tail:
        return reps[n - 1 - s.replica_pick % n];
      case SubscriberOptions::ReadFrom::head:
      case SubscriberOptions::ReadFrom::spread:
        return reps[s.replica_pick % n];
    }
    return reps.back();
  }

  // A `moved` answer's hint, for the position `at` (the range's end).
  void take_hint_st(SubSession& s, std::uint64_t at, const wire::NextChainHint& next) {
    CATENA_ST_CHECK(owner_);
    if (!next.known() || next.epoch <= s.hint_failed || (s.hint_at == at && next.epoch <= s.hint_epoch))
      return;
    s.hint_epoch = next.epoch;
    s.hint_head = std::string(next.head_addr());
    s.hint_at = at;
    s.hint_since = Steady::now();
  }

  void start_connect_st(SubSession& s, Steady::time_point now) {
    CATENA_ST_CHECK(owner_);
    s.retry_at = now + std::chrono::milliseconds(50);
    s.attempt_hinted = false;
    if (s.hint_first && s.positioned && s.hint_epoch != 0 && s.hint_at == s.next_offset &&
        now - s.hint_since < kHintFor) {
      // The range we read ended here, and its replica said where the next
      // one is served: read it there at its epoch, without the controller.
      s.attempt_hinted = true;
      dial_st(s, ReplicaAddress{{}, s.hint_head}, s.hint_epoch, ~0ull, s.next_offset);
      return;
    }
    start_lookup_st(s, true);
    s.attempt = Attempt::route;
  }

  // Connects to `rep` (on the dial worker) to read from the position at
  // route epoch `epoch` (0: whatever the chain is at); the range it serves
  // is [range_start, range_end).
  void dial_st(SubSession& s, ReplicaAddress rep, std::uint64_t epoch, std::uint64_t range_end,
               std::uint64_t range_start) {
    CATENA_ST_CHECK(owner_);
    s.dialled = std::move(rep);
    ++s.dial_gen;
    s.dial_started = Steady::now();
    const wire::StartMode mode = s.positioned                   ? wire::StartMode::offset
                                 : opts_.start == Start::latest ? wire::StartMode::latest
                                                                : wire::StartMode::earliest;
    wire::SubscriberHello hello = s.delivery.hello(channel_, s.partition, epoch, mode, s.next_offset);
    std::memcpy(hello.access_secret, s.route.access_secret.data(), sizeof hello.access_secret);
    s.dial_range_end = range_end;
    s.dial_range_start = range_start;
    s.dial.start(dials_, provider_, s.dialled.fabric_addr, hello, opts_.connect_timeout,
                 [&delivery = s.delivery](fabric::Endpoint& e, wire::SubscriberHello& h) {
                   return delivery.grant(e, h);
                 });
    s.attempt = Attempt::dial;
  }

  // Moves an attempt on as far as the answers that came allow; starts one
  // when the retry is due (and `may_start`). Never waits.
  void advance_connect_st(SubSession& s, Steady::time_point now, bool may_start) {
    CATENA_ST_CHECK(owner_);
    switch (s.attempt) {
      case Attempt::none:
        // A stall check of the last link may still run: its answer is
        // dropped first (take_lookup_st), then the attempt asks.
        if (may_start && now >= s.retry_at && !s.lookup.busy() && s.dial.can_start())
          start_connect_st(s, now);
        return;
      case Attempt::route:
        return;  // take_lookup_st goes on with the answer
      case Attempt::dial:
        // A replica that answers nothing for stall_check may have left the
        // chain (stopped, cut off): the route says (take_lookup_st), every
        // stall_check.
        if (now - s.dial_started >= opts_.stall_check && now >= s.route_check_at && !s.lookup.busy()) {
          s.route_check_at = now + opts_.stall_check;
          start_lookup_st(s, false, true);
        }
        if (auto d = s.dial.poll(now)) {
          s.attempt = Attempt::none;
          on_dialed_st(s, std::move(*d), now);
        }
        return;
    }
  }

  // The route came: picks the chain (or sealed range) that serves the
  // position and a replica of it, and connects (on the dial worker).
  void on_route_st(SubSession& s, client::Result<Route> route, Steady::time_point now) {
    CATENA_ST_CHECK(owner_);
    s.attempt = Attempt::none;
    s.hint_first = !route;  // the controller cannot say: the next try takes the hint, if any
    if (!route) {
      if (s.hint_epoch != 0) s.retry_at = now;
      return;
    }
    // Keep the epoch even of a route without replicas (every replica failed
    // and no replacement yet): the next lookup then asks for a newer one.
    s.route = route.value();
    if (s.route.replicas.empty()) {
      s.retry_at = now + std::chrono::milliseconds(200);
      return;
    }
    // Which chain serves the position: an earlier chain's sealed range
    // (partition handoff), or the chain above.
    const RouteRange* range = nullptr;
    const bool handed_off = !s.route.sealed.empty() && s.route.continues(s.route.sealed.front().start_offset);
    if (s.positioned && s.next_offset < s.route.start_offset) {
      range = s.route.range_of(s.next_offset);
      // Below every range: the oldest says what it still holds (position_expired).
      if (range == nullptr && handed_off) range = &s.route.sealed.front();
      if (range == nullptr) {
        // The partition was rebuilt above our position: say what was lost,
        // never jump silently.
        notify(Notice{s.partition, client::ErrorCode::data_lost, s.route.start_offset, s.next_offset});
        s.next_offset = s.route.start_offset;
        gate_->jumped(s.index, s.next_offset == 0);
      }
    } else if (!s.positioned && opts_.start == Start::earliest && handed_off) {
      range = &s.route.sealed.front();
    }
    if (range != nullptr && range->replicas.empty()) range = nullptr;
    // A range's replicas hold it under the epoch it was written at; the chain
    // above takes any epoch up to its own (0: whatever it is at). A sealed
    // range's end is in the route: move on there (its replica also says so,
    // with a `moved` notice, if it learnt of the move first).
    dial_st(s, pick_st(s, range != nullptr ? range->replicas : s.route.replicas),
            range != nullptr ? range->epoch : 0, range != nullptr ? range->end_offset : ~0ull,
            range != nullptr ? range->start_offset : s.route.start_offset);
  }

  void on_dialed_st(SubSession& s, Link::Dialed<wire::SubscriberWelcome> d, Steady::time_point now) {
    CATENA_ST_CHECK(owner_);
    const ReplicaAddress& rep = s.dialled;
    if (d.unreachable && !rep.node_id.empty()) report_st(rep.node_id, s.route, d.error.message);
    const auto& w = d.welcome;
    if (s.attempt_hinted && w &&
        (w->status == wire::Status::not_ready || w->status == wire::Status::unknown_channel)) {
      s.retry_at = now + std::chrono::milliseconds(2);  // told the route a moment after the old chain
      return;
    }
    if (s.attempt_hinted && (!w || (w->status != wire::Status::ok && w->status != wire::Status::moved))) {
      // Stale (the next chain moved on, or its head is gone): the
      // controller says where the position is served.
      s.hint_failed = s.hint_epoch;
      s.hint_epoch = 0;
      s.retry_at = now;
      return;
    }
    if (!w) {
      spdlog::debug("subscriber {}/{}: cannot reach {} at {}: {}", channel_, s.partition, rep.node_id,
                    rep.fabric_addr, d.error.message);
      ++s.replica_pick;
      return;
    }
    if (w->status == wire::Status::position_expired) {
      notify(Notice{s.partition, client::from(w->status), w->start_offset});
      gate_->jumped(s.index, w->start_offset == 0);
      s.next_offset = w->start_offset;  // resume at the oldest retained record
      s.positioned = true;
      s.retry_at = now;
      return;
    }
    if (w->status == wire::Status::moved) {
      // The range ends at or below the position: the next chain serves it
      // (once the route says so).
      spdlog::debug("subscriber {}/{}: {} no longer serves offset {}", channel_, s.partition, rep.node_id,
                    s.next_offset);
      s.next_offset = std::max(s.next_offset, w->start_offset);
      s.positioned = true;
      take_hint_st(s, w->start_offset, w->next);
      s.retry_at = now + std::chrono::milliseconds(s.hint_epoch != 0 && s.hint_at == s.next_offset ? 0 : 5);
      return;
    }
    if (w->status != wire::Status::ok) {
      spdlog::debug("subscriber {}/{}: {} answered {}", channel_, s.partition, rep.node_id,
                    wire::to_string(w->status));
      if (w->status == wire::Status::bad_request || w->status == wire::Status::unauthenticated) {
        // Retrying will not change the answer.
        notify(Notice{s.partition, client::from(w->status), s.next_offset});
      }
      ++s.replica_pick;
      return;
    }
    // Read from elsewhere than asked (Start::latest, a retained log's start):
    // the gate does not know the partition's generation there.
    if (w->start_offset != (s.positioned ? s.next_offset : 0)) gate_->jumped(s.index, false);
    s.delivery.attach(std::move(d.link), w->start_offset);
    s.reading_from = rep.node_id;
    s.last_delivery = now;
    s.next_offset = w->start_offset;
    s.committed_at_connect = w->commit_offset;
    s.range_end = s.dial_range_end;
    s.range_start = s.dial_range_start;
    s.positioned = true;
    if (s.attempt_hinted) s.hint_epoch = 0;
    spdlog::debug("subscriber {}/{}: reading from {} at {} (route epoch {}), offset {}", channel_,
                  s.partition, rep.node_id, rep.fabric_addr, s.route.epoch, s.next_offset);
  }

  RouteSource& routes_;
  std::string channel_;
  SubscriberOptions opts_;
  std::shared_ptr<fabric::Provider> provider_;  // shared_provider(): the process's for this spec
  std::vector<std::unique_ptr<SubSession>> sessions_;
  std::uint32_t ring_bytes_ = 0;
  NoticeHandler notice_;
  bool polled_ = false;                // poll() has run: notices go to notice_ or nowhere
  std::vector<Notice> early_notices_;  // raised before the first poll()
  bool events_ = false;                // create() is done: changes from here on are events
  // The partition's session, or null if it is not read here.
  const SubSession* session_of(std::uint32_t partition) const {
    for (const auto& s : sessions_) {
      if (s->partition == partition) return s.get();
    }
    return nullptr;
  }
  // Next offset to deliver; held at a marker, the marker's own (the last
  // record consumed: nothing past it is read while held).
  std::uint64_t position_of(const SubSession& s) const {
    return gate_->parked(s.index) ? s.next_offset - 1 : s.next_offset;
  }

  std::optional<client_detail::MarkerGate> gate_;  // per-key order across alters' markers
  std::size_t grow_to_ = 0;  // partitions a grow's marker named (reading every partition)
  // The polling thread: the first to call in after create() (which may run
  // on another thread and hands the subscriber over unowned).
  fabric::ThreadOwner owner_;
  // Last: destroyed (joined) first, while the provider, the sessions and
  // the route source their calls use are still there; the dial worker's
  // threads are left to end their connects, which hold the provider.
  client_detail::ClientWorker lookups_{"catena-sub-rt"};  // RouteSource calls
  client_detail::ClientWorker dials_{
      "catena-sub-dial", client_detail::kDialThreads,
      client_detail::ClientWorker::Ending::leave_running};  // Provider::connect
};

Subscriber::Subscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Subscriber::~Subscriber() = default;

client::Result<std::unique_ptr<Subscriber>> Subscriber::create(RouteSource& routes,
                                                               const std::string& channel,
                                                               const SubscriberOptions& opts) {
  auto impl = std::make_unique<Impl>(routes, channel, opts);
  auto r = impl->init();
  if (!r) return r.error();
  impl->start_events();
  impl->owner_.release();
  return std::unique_ptr<Subscriber>(new Subscriber(std::move(impl)));
}

int Subscriber::poll(const Handler& on_message, int max) {
  return impl_->poll(on_message, max);
}
int Subscriber::poll_for(const Handler& on_message, std::chrono::milliseconds timeout, int max) {
  return client_detail::poll_waiting([&] { return impl_->poll(on_message, max); }, timeout);
}
void Subscriber::on_notice(NoticeHandler h) {
  impl_->notice_ = std::move(h);
}

std::uint64_t Subscriber::position(std::uint32_t partition) const {
  CATENA_ST_CHECK(impl_->owner_);
  const SubSession* s = impl_->session_of(partition);
  return s == nullptr ? 0 : impl_->position_of(*s);
}

std::uint64_t Subscriber::marker_reached(std::uint32_t partition) const {
  CATENA_ST_CHECK(impl_->owner_);
  const SubSession* s = impl_->session_of(partition);
  return s == nullptr ? 0 : impl_->gate_->reached(s->index);
}

bool Subscriber::held_at_marker(std::uint32_t partition) const {
  CATENA_ST_CHECK(impl_->owner_);
  const SubSession* s = impl_->session_of(partition);
  return s != nullptr && impl_->gate_->parked(s->index);
}

void Subscriber::release_markers(std::uint32_t partition, std::uint64_t generation) {
  CATENA_ST_CHECK(impl_->owner_);
  if (const SubSession* s = impl_->session_of(partition)) impl_->gate_->release(s->index, generation);
}

void Subscriber::seek(std::uint32_t partition, std::uint64_t offset) {
  CATENA_ST_CHECK(impl_->owner_);
  for (auto& s : impl_->sessions_) {
    if (s->partition != partition) continue;
    s->drop_link();
    s->next_offset = offset;
    s->positioned = true;
    impl_->gate_->jumped(s->index, offset == 0);
    s->retry_at = Steady::now();
    // An attempt under way names the old position: dropped (a connect
    // still running when it answers).
    if (s->attempt == Attempt::dial) {
      s->dial.cancel();
      s->attempt = Attempt::none;
    }
  }
}

client::Result<void> Subscriber::commit() {
  CATENA_ST_CHECK(impl_->owner_);
  if (impl_->opts_.group.empty()) {
    return client::make_error(client::ErrorCode::invalid_argument, "commit() needs options.group");
  }
  for (const auto& s : impl_->sessions_) {
    auto r = impl_->routes_.commit_offset(impl_->opts_.group, impl_->channel_, s->partition,
                                          impl_->position_of(*s));
    if (!r) return r;
  }
  return {};
}

std::vector<std::uint32_t> Subscriber::partitions() const {
  std::vector<std::uint32_t> v;
  for (const auto& s : impl_->sessions_) v.push_back(s->partition);
  return v;
}

}  // namespace catena
