// How a publisher's session reaches its partition's head and tail without
// poll() waiting (publisher_impl.hpp): the route lookup runs on the
// `lookups_` worker, the rest is a DialAttempt (the connect on `dials_`, the
// handshake polled once per pass).
#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "publisher_impl.hpp"

namespace catena {

static_assert(sizeof(Route::access_secret) == chain::wire::kAccessSecretBytes,
              "a route's access secret is what a hello carries");

using chain::Link;
using fabric::Errc;
namespace wire = chain::wire;
using Lookup = PartitionSession::Lookup;
using client_detail::Attempt;
using client_detail::same_replica;

void Publisher::Impl::start_lookup_st(PartitionSession& s, Lookup what) {
  CATENA_ST_CHECK(owner_);
  s.lookup_for = what;
  s.lookup_link = s.link_gen;
  s.lookup_dial = s.dial_gen;
  s.lookup.start(lookups_, [&routes = routes_, channel = channel_, partition = s.partition,
                            epoch = s.route.epoch] { return routes.route(channel, partition, epoch); });
}

void Publisher::Impl::report_st(const std::string& node_id, const Route& route, const std::string& reason) {
  CATENA_ST_CHECK(owner_);
  if (node_id.empty()) return;  // a hinted head: the controller did not name it
  // Queued before the session's next lookup: a route source that drops its
  // cached route on a report (ControllerRoutes) answers that one afresh.
  lookups_.post(
      [&routes = routes_, node_id, route, reason] { routes.report_unreachable(node_id, route, reason); });
}

void Publisher::Impl::start_connect_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  // A move is over in milliseconds (seal, commit, route, pushes); the
  // usual back-off would make it a 50 ms pause. Bounded: a move that
  // takes longer is waited for like any other outage.
  s.attempt_follows_move = s.moved_epoch != 0 && now - s.moved_since < kMoveFollow;
  s.connect_backoff = std::clamp(s.connect_backoff * 2, kMoveRetry, std::chrono::milliseconds(50));
  s.retry_at = now + (s.attempt_follows_move ? kMoveRetry : s.connect_backoff);
  if (!s.down) {
    s.down = true;
    s.down_since = now;
  }
  s.attempt_hinted = false;
  if (s.attempt_follows_move && s.hint_epoch > s.route.epoch) {
    // The sealed head said where the next chain's head is: no controller.
    s.attempt_hinted = true;
    dial_head_st(s, ReplicaAddress{{}, s.hint_head}, s.hint_epoch);
    return;
  }
  if (s.attempt_follows_move && s.probe_sealed && !s.route.replicas.empty()) {
    s.probe_sealed = false;
    dial_head_st(s, s.route.replicas.front(), s.route.epoch);
    return;
  }
  if (s.redial_resized && !s.route.replicas.empty()) {
    // A new session for a new ring (grow_st): the route is as current as a
    // moment ago, so its head is dialled at once, without a lookup (the
    // controller may be slow to answer: a metadata change waiting for
    // ZooKeeper). A dial that fails asks the controller next time.
    s.redial_resized = false;
    dial_head_st(s, s.route.replicas.front(), s.route.epoch);
    return;
  }
  if (s.redial_head && !s.route.replicas.empty()) {
    // Its marker may not be in yet (not_ready): asked again soon, as the
    // controller asks each node's heads in turn, backing off (2 ms doubling
    // to 50 ms) if that takes a while.
    s.redial_wait = std::clamp(s.redial_wait * 2, kMoveRetry, std::chrono::milliseconds(50));
    s.retry_at = now + s.redial_wait;
    dial_head_st(s, s.route.replicas.front(), s.route.epoch);
    return;
  }
  start_lookup_st(s, Lookup::connect);
  s.attempt = Attempt::route;
}

void Publisher::Impl::advance_connect_st(PartitionSession& s, Clock::time_point now, bool may_start) {
  CATENA_ST_CHECK(owner_);
  switch (s.attempt) {
    case Attempt::none:
      // A stall check or watch lookup of the last link may still run: its
      // answer is dropped first (take_lookup_st), then the attempt asks.
      // A resized session's redial asks nothing: it goes at once (the
      // lookup's answer, for an older link, is dropped when it comes).
      if (may_start && now >= s.retry_at &&
          (!s.lookup.busy() || (s.redial_resized && !s.route.replicas.empty())) && s.dial.can_start())
        start_connect_st(s, now);
      return;
    case Attempt::route:
      return;  // take_lookup_st goes on with the answer
    case Attempt::dial:
      // A head that answers nothing for stall_check may have been replaced:
      // the route says (take_lookup_st), every stall_check.
      if (now - s.dial_started >= opts_.stall_check && now >= s.route_check_at && !s.lookup.busy()) {
        s.route_check_at = now + opts_.stall_check;
        start_lookup_st(s, Lookup::dial_check);
      }
      // An open claim's frame stays where it is: the welcome (attaching
      // lays the ring out again) waits until the claim is closed.
      if (s.claim_ticket != 0) return;
      if (auto d = s.dial.poll(now)) {
        s.attempt = Attempt::none;
        on_dialed_st(s, std::move(*d), now);
      }
      return;
  }
}

void Publisher::Impl::take_lookup_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  auto r = s.lookup.take();
  if (!r) return;
  switch (s.lookup_for) {
    case Lookup::connect:
      if (s.attempt == Attempt::route) on_connect_route_st(s, std::move(*r), now);
      return;
    case Lookup::stall_check:
      if (!s.head.connected() || s.lookup_link != s.link_gen) return;  // asked for a link since gone
      // False: the chain has a new head; the head session is stale.
      if (!apply_route_st(s, *r)) lost_head_st(s, "acknowledgements stalled and the chain has a new head");
      return;
    case Lookup::watch:
      if (!s.head.connected() || s.lookup_link != s.link_gen || s.watch_attempt != Attempt::route) return;
      // A new head means the head session is about to break and reconnect.
      if (!apply_route_st(s, *r) || s.route.replicas.size() < 2) {
        s.watch_attempt = Attempt::none;
        return;
      }
      dial_watch_st(s, now);
      return;
    case Lookup::dial_check:
      if (s.attempt != Attempt::dial || s.lookup_dial != s.dial_gen) return;  // that dial is over
      if (!r->ok() || (*r)->epoch <= s.route.epoch || (*r)->replicas.empty() ||
          same_replica((*r)->replicas.front(), s.dialled)) {
        return;  // no other head (yet): the dial goes on
      }
      // The dialled head was replaced: its answer, if it ever comes, is of
      // no use. The new head is dialled at once.
      spdlog::debug(
          "publisher {}/{}: head {} at {} has not answered for {} ms and the route names {}; "
          "dialling it instead",
          channel_, s.partition, s.dialled.node_id, s.dialled.fabric_addr,
          std::chrono::duration_cast<std::chrono::milliseconds>(now - s.dial_started).count(),
          (*r)->replicas.front().node_id);
      s.dial.cancel();
      if (s.attempt_hinted) {
        s.hint_failed = s.hint_epoch;
        s.hint_epoch = 0;
        s.attempt_hinted = false;
      }
      s.attempt = Attempt::route;
      on_connect_route_st(s, std::move(*r), now);
      return;
  }
}

// The rest of an attempt, once the route came: checks it and connects to
// its head (on the dial worker), re-sending every unacknowledged record once
// connected (the head's producer state drops what it already has).
void Publisher::Impl::on_connect_route_st(PartitionSession& s, client::Result<Route> route,
                                          Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  s.attempt = Attempt::none;
  // No new chain from the controller (yet, or it cannot be reached): the
  // sealed head is asked next, once it knows the new head.
  if (!route) {
    s.probe_sealed = s.attempt_follows_move;
    return;
  }
  if (s.attempt_follows_move && route->epoch <= s.moved_epoch) {
    // The sealed head's route still: it would only answer `moved` again.
    s.route = route.value();
    s.probe_sealed = true;
    return;
  }
  // Keep the epoch even of a route without replicas (every replica failed
  // and no replacement yet): the next lookup then asks for a newer one.
  s.route = route.value();
  if (s.route.replicas.empty()) {
    s.retry_at = now + std::chrono::milliseconds(200);
    return;
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
  dial_head_st(s, s.route.replicas.front(), s.route.epoch);
}

void Publisher::Impl::dial_head_st(PartitionSession& s, ReplicaAddress head, std::uint64_t epoch) {
  CATENA_ST_CHECK(owner_);
  s.dialled = std::move(head);
  ++s.dial_gen;
  s.dial_started = Clock::now();
  wire::PublisherHello hello{};
  hello.ref.set(channel_, s.partition, epoch);
  hello.producer_id = opts_.producer_id;
  hello.producer_epoch = producer_epoch_;
  hello.ring_bytes = s.head.ring_bytes();  // the partition's ring as it is now (it grows)
  hello.generation = generation_;          // the head refuses it until its marker of this generation is in
  std::memcpy(hello.access_secret, s.route.access_secret.data(), sizeof hello.access_secret);
  s.dial.start(dials_, provider_, s.dialled.fabric_addr, hello, opts_.connect_timeout);
  s.attempt = Attempt::dial;
}

void Publisher::Impl::on_moved_welcome_st(PartitionSession& s, const wire::PublisherWelcome& w,
                                          Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  if (s.moved_epoch != s.route.epoch) {
    s.moved_epoch = s.route.epoch;
    s.moved_since = now;
  }
  s.retry_at = now + kMoveRetry;
  if (w.next.known() && w.next.epoch > std::max({s.route.epoch, s.hint_epoch, s.hint_failed})) {
    s.hint_epoch = w.next.epoch;
    s.hint_head = std::string(w.next.head_addr());
    s.retry_at = now;
    spdlog::debug("publisher {}/{}: head {} is sealed; the next chain's head is {} (route epoch {})",
                  channel_, s.partition, s.dialled.fabric_addr, s.hint_head, s.hint_epoch);
    return;
  }
  spdlog::debug("publisher {}/{}: head {} is sealed; waiting for the new chain", channel_, s.partition,
                s.dialled.fabric_addr);
}

void Publisher::Impl::on_dialed_st(PartitionSession& s, Link::Dialed<wire::PublisherWelcome> d,
                                   Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  const ReplicaAddress& head = s.dialled;
  if (d.unreachable) report_st(head.node_id, s.route, d.error.message);
  const auto& w = d.welcome;
  // After a switch the same head is dialled until it takes the new
  // generation; any answer but not_ready ends that.
  if (!w || w->status != wire::Status::not_ready) s.redial_head = false;
  if (w && w->status == wire::Status::producer_fenced) {
    fail_all_st(s, wire::Status::producer_fenced);
    return;
  }
  if (w && w->status == wire::Status::unauthenticated) {
    // The route did not carry this partition's access secret: the head
    // takes nothing from this publisher, now or on a retry.
    spdlog::warn("publisher {}/{}: head {} refused the session: no access to the channel", channel_,
                 s.partition, head.node_id);
    fail_all_st(s, wire::Status::unauthenticated);
    return;
  }
  if (w && w->status == wire::Status::resource_exhausted && s.growing) {
    grow_refused_st(s, now);  // the head's ring budget: the smaller ring again
    return;
  }
  if (w && w->status == wire::Status::moved) {
    on_moved_welcome_st(s, *w, now);
    return;
  }
  // A hinted head must take this very epoch's appends; one that is not
  // configured yet (pushed the route a moment after the old chain) is asked
  // again while the move is followed, anything else sends the session back
  // to the controller.
  if (s.attempt_hinted && w &&
      (w->status == wire::Status::not_ready || w->status == wire::Status::unknown_channel)) {
    s.retry_at = now + kMoveRetry;
    return;
  }
  if (s.attempt_hinted && (!w || w->status != wire::Status::ok || w->epoch != s.hint_epoch)) {
    s.hint_failed = s.hint_epoch;
    s.hint_epoch = 0;
    s.retry_at = now + kMoveRetry;
  }
  if (!w) {
    spdlog::debug("publisher {}/{}: cannot reach head {} at {}: {}", channel_, s.partition, head.node_id,
                  head.fabric_addr, d.error.message);
    return;
  }
  if (w->status != wire::Status::ok || w->ring_bytes != s.head.ring_bytes() ||
      (s.attempt_hinted && w->epoch != s.hint_epoch)) {
    spdlog::debug("publisher {}/{}: head {} answered {}", channel_, s.partition, head.node_id,
                  wire::to_string(w->status));
    return;
  }
  if (s.attempt_hinted) {
    // The route as far as the hint tells it: this head at its epoch. The
    // controller's (stall checks, the watch) fills in the rest when asked.
    s.route.epoch = w->epoch;
    s.route.replicas = {head};
    s.hint_epoch = 0;
  }
  s.probe_sealed = false;
  // Its records go to the new ring again (renumbered if it holds none of
  // them). A head that expects sequences this publisher never sent means
  // another process publishes with this producer epoch: fenced.
  const std::size_t resending = s.head.pending();
  if (!s.head.attach(std::move(d.link), *w)) {
    fail_all_st(s, wire::Status::producer_fenced);
    return;
  }
  spdlog::debug("publisher {}/{}: head {} at {} (route epoch {}), next sequence {}, {} records resent",
                channel_, s.partition, head.node_id, head.fabric_addr, s.route.epoch, w->next_sequence,
                resending);
  max_record_ = std::min(max_record_, w->max_record);
  s.moved_epoch = 0;
  ++s.link_gen;
  // Neither the partition's first session nor a grown ring's is a
  // reconnection to tell the application about.
  if (!s.connected_once || s.growing) s.seen_link = s.link_gen;
  if (s.growing) {
    spdlog::debug("publisher {}/{}: head {} took the {} KiB ring", channel_, s.partition, head.node_id,
                  s.head.ring_bytes() >> 10);
  }
  s.connected_once = true;
  s.growing = false;
  s.down = false;
  s.connect_backoff = std::chrono::milliseconds(0);
  s.watch.drop();
  s.watch_backoff = std::chrono::milliseconds(0);
  if (opts_.tail_acks && s.route.replicas.size() >= 2 && s.watch_dial.can_start()) {
    start_watch_st(s, now, false);
  } else if (opts_.tail_acks && s.attempt_hinted && s.watch_dial.can_start() && !s.lookup.busy()) {
    start_watch_st(s, now, true);  // the tail is not in the hint: the route first
  }
}

// Re-reads the partition's route. False if the chain has a new head: the
// head session is stale, and the route is left for the next attempt. A new
// tail under the same head (a repair) makes the watch stale.
bool Publisher::Impl::apply_route_st(PartitionSession& s, const client::Result<Route>& r) {
  CATENA_ST_CHECK(owner_);
  if (!r || r->epoch <= s.route.epoch || r->replicas.empty() || s.route.replicas.empty()) return true;
  if (!same_replica(r->replicas.front(), s.route.replicas.front())) return false;
  if (r->replicas.back().node_id != s.route.replicas.back().node_id) {
    if (s.watch.connected()) drop_watch_st(s);
    if (s.watch_attempt == Attempt::dial) {  // dialling the old tail
      s.watch_dial.cancel();
      s.watch_attempt = Attempt::none;
    }
  }
  s.route = r.value();
  return true;
}

void Publisher::Impl::start_stall_check_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  if (!s.stall_reported && events_ && opts_.on_event) {
    s.stall_reported = true;  // once per stall, not per check
    emit_st(
        ClientEvent::Kind::ack_stalled, s,
        fmt::format("{}/{}: {} records without an ack for {} ms; re-reading the route", channel_, s.partition,
                    s.head.pending(),
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - s.last_progress).count()));
  }
  s.route_check_at = now + opts_.stall_check;
  start_lookup_st(s, Lookup::stall_check);
}

// Opens the commit watch with the tail. Optional: without it the head's
// acks still come, one round trip through the chain later. A failure is
// retried with back-off.
void Publisher::Impl::start_watch_st(PartitionSession& s, Clock::time_point now, bool refresh_route) {
  CATENA_ST_CHECK(owner_);
  s.watch_backoff =
      std::clamp(s.watch_backoff * 2, std::chrono::milliseconds(100), std::chrono::milliseconds(5000));
  s.watch_at = now + s.watch_backoff;
  if (refresh_route) {
    start_lookup_st(s, Lookup::watch);
    s.watch_attempt = Attempt::route;
    return;
  }
  dial_watch_st(s, now);
}

void Publisher::Impl::dial_watch_st(PartitionSession& s, Clock::time_point) {
  CATENA_ST_CHECK(owner_);
  s.watch_attempt = Attempt::none;
  if (s.route.replicas.size() < 2) return;
  wire::CommitWatchHello hello = chain::CommitWatchClient::hello(channel_, s.partition, s.route.epoch,
                                                                 opts_.producer_id, producer_epoch_);
  std::memcpy(hello.access_secret, s.route.access_secret.data(), sizeof hello.access_secret);
  // Optional, so a tail that does not answer soon is given up quickly.
  s.watch_dial.start(dials_, provider_, s.route.replicas.back().fabric_addr, hello,
                     std::min(opts_.connect_timeout, std::chrono::milliseconds(250)));
  s.watch_attempt = Attempt::dial;
}

void Publisher::Impl::advance_watch_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  switch (s.watch_attempt) {
    case Attempt::none:
      if (opts_.tail_acks && now >= s.watch_at && s.route.replicas.size() >= 2 && !s.lookup.busy() &&
          s.watch_dial.can_start()) {
        start_watch_st(s, now, true);
      }
      return;
    case Attempt::route:
      return;  // take_lookup_st goes on with the answer
    case Attempt::dial: {
      auto d = s.watch_dial.poll(now);
      if (!d) return;
      s.watch_attempt = Attempt::none;
      if (d->welcome && d->welcome->status == wire::Status::ok) {
        s.watch.attach(std::move(d->link));
        s.watch_backoff = std::chrono::milliseconds(0);
      }
      return;
    }
  }
}

void Publisher::Impl::drop_watch_st(PartitionSession& s) {
  CATENA_ST_CHECK(owner_);
  s.watch.drop();
  s.watch_at = Clock::now() + std::chrono::milliseconds(100);
}

void Publisher::Impl::emit_st(ClientEvent::Kind kind, const PartitionSession& s, std::string message) {
  CATENA_ST_CHECK(owner_);
  if (!events_ || !opts_.on_event) return;
  opts_.on_event(ClientEvent{kind, s.partition, std::move(message)});
}

void Publisher::Impl::held_st(PartitionSession& s, const wire::PublishHeld& h, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  const wire::HeldReason was = s.held;
  s.held = h.reason;
  s.held_at = now;
  if (h.reason == was || !events_ || !opts_.on_event) return;
  const std::string who =
      fmt::format("{}/{}: head {} holds records back", channel_, s.partition,
                  s.route.replicas.empty() ? std::string("?") : s.route.replicas.front().node_id);
  constexpr std::uint64_t kMs = 1'000'000;
  switch (h.reason) {
    case wire::HeldReason::log_full:
      emit_st(
          ClientEvent::Kind::log_full, s,
          fmt::format("{}: the log is full (its {} segments hold records within ttl {} ms + {} ms grace, "
                      "or not yet committed); {}; publishing reports backpressure meanwhile",
                      who, h.segments, h.ttl_ns / kMs, h.grace_ns / kMs,
                      h.free_in_ns > 0
                          ? fmt::format("the oldest may be reused in {} ms, and they are appended then",
                                        h.free_in_ns / kMs)
                          : std::string("the oldest waits for its records to commit (a replica is behind)")));
      return;
    case wire::HeldReason::segment_memory:
      emit_st(ClientEvent::Kind::segment_memory_full, s,
              fmt::format("{}: the node's segment memory is spent ([storage] segment_memory_mb); they are "
                          "appended once a segment gives memory back",
                          who));
      return;
    case wire::HeldReason::rate_limited:
      emit_st(ClientEvent::Kind::rate_limited, s,
              fmt::format("{}: the channel's tenant is at its publish rate on that node "
                          "(max_publish_bytes_per_sec); they are appended as the rate allows",
                          who));
      return;
    case wire::HeldReason::none:
      return;
  }
}

void Publisher::Impl::observe_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  if (!events_ || !opts_.on_event) return;
  const auto head_of = [](const Route& r) {
    return r.replicas.empty() ? std::string("none")
                              : (r.replicas.front().node_id.empty() ? r.replicas.front().fabric_addr
                                                                    : r.replicas.front().node_id);
  };
  if (s.route.epoch != s.seen_epoch) {
    const std::uint64_t was = s.seen_epoch;
    s.seen_epoch = s.route.epoch;
    if (was != 0) {
      emit_st(ClientEvent::Kind::route_changed, s,
              fmt::format("{}/{}: route epoch {} -> {}, head {}", channel_, s.partition, was, s.route.epoch,
                          head_of(s.route)));
    }
  }
  if (s.head.connected() && s.link_gen != s.seen_link) {
    s.seen_link = s.link_gen;
    emit_st(ClientEvent::Kind::reconnected, s,
            fmt::format("{}/{}: publishing to head {} (route epoch {}), {} records pending", channel_,
                        s.partition, head_of(s.route), s.route.epoch, s.head.pending()));
  }
  if (s.stall_reported && (s.head.pending() == 0 || now - s.last_progress < opts_.stall_check))
    s.stall_reported = false;
}

void Publisher::Impl::lost_head_st(PartitionSession& s, const std::string& why) {
  CATENA_ST_CHECK(owner_);
  spdlog::debug("publisher {}/{}: {} ({} records pending); reconnecting", channel_, s.partition, why,
                s.head.pending());
  if (events_ && opts_.on_event) {
    emit_st(ClientEvent::Kind::disconnected, s,
            fmt::format("{}/{}: {} ({}; {} records pending); reconnecting", channel_, s.partition, why,
                        s.route.replicas.empty() ? std::string("no head") : s.route.replicas.front().node_id,
                        s.head.pending()));
  }
  if (!s.route.replicas.empty()) report_st(s.route.replicas.front().node_id, s.route, why);
  go_down_st(s, Clock::now());
}

void Publisher::Impl::go_down_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  s.head.drop();
  ++s.link_gen;
  s.watch.drop();
  s.watch_dial.cancel();  // a watch connect still running is taken and dropped
  s.watch_attempt = Attempt::none;
  s.down = true;
  s.down_since = now;
  s.retry_at = now;
}

}  // namespace catena
