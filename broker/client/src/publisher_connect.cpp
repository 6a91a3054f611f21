// How a publisher's session reaches its partition's head and tail without
// poll() waiting (publisher_impl.hpp): the route lookup runs on the
// `lookups_` worker, Provider::connect on `dials_`, and the handshake is a
// Link::Dialing that poll() looks at once per pass.
#include <algorithm>
#include <spdlog/spdlog.h>

#include "publisher_impl.hpp"

namespace catena {

using chain::Link;
using fabric::Errc;
namespace wire = chain::wire;
using Lookup = PartitionSession::Lookup;
using client_detail::Attempt;

void Publisher::Impl::start_lookup_st(PartitionSession& s, Lookup what) {
  CATENA_ST_CHECK(owner_);
  s.lookup_for = what;
  s.lookup_link = s.link_gen;
  s.lookup.start(lookups_, [&routes = routes_, channel = channel_, partition = s.partition,
                            epoch = s.route.epoch] { return routes.route(channel, partition, epoch); });
}

void Publisher::Impl::report_st(const std::string& node_id, const Route& route, const std::string& reason) {
  CATENA_ST_CHECK(owner_);
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
  s.retry_at = now + (s.attempt_follows_move ? kMoveRetry : std::chrono::milliseconds(50));
  if (!s.down) {
    s.down = true;
    s.down_since = now;
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
      if (may_start && now >= s.retry_at && !s.lookup.busy()) start_connect_st(s, now);
      return;
    case Attempt::route:
      return;  // take_lookup_st goes on with the answer
    case Attempt::connect:
      if (auto ep = s.connecting.take()) on_head_endpoint_st(s, std::move(*ep), now);
      return;
    case Attempt::welcome: {
      if (s.dialing->poll() == Link::DialState::waiting) {
        if (now < s.dial_deadline) return;
        s.dialing->fail(fabric::make_error(Errc::timeout, "no well-formed answer to the hello"));
      }
      auto d = s.dialing->take();
      s.dialing.reset();
      s.attempt = Attempt::none;
      on_welcome_st(s, std::move(d), now);
      return;
    }
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
      if (!s.link || s.lookup_link != s.link_gen) return;  // asked for a link since gone
      // False: the chain has a new head; the head session is stale.
      if (!apply_route_st(s, *r)) lost_head_st(s, "acknowledgements stalled and the chain has a new head");
      return;
    case Lookup::watch:
      if (!s.link || s.lookup_link != s.link_gen || s.watch_attempt != Attempt::route) return;
      // A new head means the head session is about to break and reconnect.
      if (!apply_route_st(s, *r) || s.route.replicas.size() < 2) {
        s.watch_attempt = Attempt::none;
        return;
      }
      dial_watch_st(s, now);
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
  if (!route) return;
  if (s.attempt_follows_move && route->epoch <= s.moved_epoch) {
    // The sealed head's route still: it would only answer `moved` again.
    s.route = route.value();
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
  s.head = s.route.replicas.front();
  s.hello = wire::PublisherHello{};
  s.hello.ref.set(channel_, s.partition, s.route.epoch);
  s.hello.producer_id = opts_.producer_id;
  s.hello.producer_epoch = producer_epoch_;
  s.hello.ring_bytes = ring_bytes_;
  s.connecting.start(dials_,
                     [&provider = *provider_, addr = s.head.fabric_addr, timeout = opts_.connect_timeout] {
                       return provider.connect(addr, {}, timeout);
                     });
  s.attempt = Attempt::connect;
}

void Publisher::Impl::on_head_endpoint_st(PartitionSession& s,
                                          fabric::Result<std::unique_ptr<fabric::Endpoint>> ep,
                                          Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  s.attempt = Attempt::none;
  if (!ep) {
    report_st(s.head.node_id, s.route, ep.error().message);
    spdlog::debug("publisher {}/{}: cannot reach head {} at {}: {}", channel_, s.partition, s.head.node_id,
                  s.head.fabric_addr, ep.error().message);
    return;
  }
  s.dialing = Link::Dialing<wire::PublisherWelcome>::start_on(*provider_, std::move(ep.value()), s.hello);
  s.dial_deadline = now + opts_.connect_timeout;
  s.attempt = Attempt::welcome;
}

void Publisher::Impl::on_welcome_st(PartitionSession& s, Link::Dialed<wire::PublisherWelcome> d,
                                    Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  const ReplicaAddress& head = s.head;
  if (!d.welcome) {
    spdlog::debug("publisher {}/{}: cannot reach head {} at {}: {}", channel_, s.partition, head.node_id,
                  head.fabric_addr, d.error.message);
    return;
  }
  const auto& w = d.welcome;
  if (w->status == wire::Status::producer_fenced) {
    fail_all_st(s, wire::Status::producer_fenced);
    return;
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
    return;
  }
  if (w->status != wire::Status::ok || w->ring_bytes != ring_bytes_) {
    spdlog::debug("publisher {}/{}: head {} answered {}", channel_, s.partition, head.node_id,
                  wire::to_string(w->status));
    return;
  }
  if (!resync_st(s, w->next_sequence)) return;
  spdlog::debug("publisher {}/{}: head {} at {} (route epoch {}), next sequence {}, {} records to resend",
                channel_, s.partition, head.node_id, head.fabric_addr, s.route.epoch, w->next_sequence,
                s.pending.size());
  max_record_ = std::min(max_record_, w->max_record);
  s.moved_epoch = 0;
  s.link = std::move(d.link);
  ++s.link_gen;
  s.ring = w->ring;
  s.down = false;
  s.watch.reset();
  s.watch_backoff = std::chrono::milliseconds(0);
  if (opts_.tail_acks && s.route.replicas.size() >= 2 && !s.watch_connecting.busy())
    start_watch_st(s, now, false);
  resend_st(s);
}

// Re-reads the partition's route. False if the chain has a new head: the
// head session is stale, and the route is left for the next attempt. A new
// tail under the same head (a repair) makes the watch stale.
bool Publisher::Impl::apply_route_st(PartitionSession& s, const client::Result<Route>& r) {
  CATENA_ST_CHECK(owner_);
  if (!r || r->epoch <= s.route.epoch || r->replicas.empty() || s.route.replicas.empty()) return true;
  if (r->replicas.front().node_id != s.route.replicas.front().node_id) return false;
  if (r->replicas.back().node_id != s.route.replicas.back().node_id) {
    if (s.watch) drop_watch_st(s);
    if (s.watch_attempt == Attempt::welcome) {  // dialled the old tail
      s.watch_dialing.reset();
      s.watch_attempt = Attempt::none;
    }
  }
  s.route = r.value();
  return true;
}

void Publisher::Impl::start_stall_check_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
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
  s.watch_hello = wire::CommitWatchHello{};
  s.watch_hello.ref.set(channel_, s.partition, s.route.epoch);
  s.watch_hello.producer_id = opts_.producer_id;
  s.watch_hello.producer_epoch = producer_epoch_;
  s.watch_addr = s.route.replicas.back().fabric_addr;
  const auto timeout = std::min(opts_.connect_timeout, std::chrono::milliseconds(250));
  s.watch_connecting.start(dials_, [&provider = *provider_, addr = s.watch_addr, timeout] {
    return provider.connect(addr, {}, timeout);
  });
  s.watch_attempt = Attempt::connect;
}

void Publisher::Impl::advance_watch_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  switch (s.watch_attempt) {
    case Attempt::none:
      // The answer to a watch connect of a link since gone: dropped.
      if (s.watch_connecting.busy() && !s.watch_connecting.take()) return;
      if (opts_.tail_acks && now >= s.watch_at && s.route.replicas.size() >= 2 && !s.lookup.busy()) {
        start_watch_st(s, now, true);
      }
      return;
    case Attempt::route:
      return;  // take_lookup_st goes on with the answer
    case Attempt::connect: {
      auto ep = s.watch_connecting.take();
      if (!ep) return;
      s.watch_attempt = Attempt::none;
      // A tail the route no longer names (repaired meanwhile): drop it.
      if (!*ep || s.route.replicas.empty() || s.route.replicas.back().fabric_addr != s.watch_addr) return;
      s.watch_dialing = Link::Dialing<wire::CommitWatchWelcome>::start_on(*provider_, std::move(ep->value()),
                                                                          s.watch_hello);
      s.watch_deadline = now + std::min(opts_.connect_timeout, std::chrono::milliseconds(250));
      s.watch_attempt = Attempt::welcome;
      return;
    }
    case Attempt::welcome: {
      if (s.watch_dialing->poll() == Link::DialState::waiting && now < s.watch_deadline) return;
      auto d = s.watch_dialing->take();
      s.watch_dialing.reset();
      s.watch_attempt = Attempt::none;
      if (d.welcome && d.welcome->status == wire::Status::ok) {
        s.watch = std::move(d.link);
        s.watch_backoff = std::chrono::milliseconds(0);
      }
      return;
    }
  }
}

void Publisher::Impl::drop_watch_st(PartitionSession& s) {
  CATENA_ST_CHECK(owner_);
  s.watch.reset();
  s.head_first = 0;
  s.watch_at = Clock::now() + std::chrono::milliseconds(100);
}

void Publisher::Impl::lost_head_st(PartitionSession& s, const std::string& why) {
  CATENA_ST_CHECK(owner_);
  spdlog::debug("publisher {}/{}: {} ({} records pending); reconnecting", channel_, s.partition, why,
                s.pending.size());
  if (!s.route.replicas.empty()) report_st(s.route.replicas.front().node_id, s.route, why);
  go_down_st(s, Clock::now());
}

void Publisher::Impl::go_down_st(PartitionSession& s, Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  s.link.reset();
  ++s.link_gen;
  s.watch.reset();
  s.watch_dialing.reset();
  s.watch_attempt = Attempt::none;  // a watch connect still running is taken and dropped
  s.down = true;
  s.down_since = now;
  s.retry_at = now;
}

}  // namespace catena
