// A channel alter at the publisher (publisher_impl.hpp): a head whose marker
// opens a newer generation refuses every later record with `remap`. The
// publisher then switches with a barrier, so that each key's records stay in
// publish order: no new record is sent until every in-flight one of every
// partition is answered (stored before its partition's marker, or refused);
// then it adopts the new generation and sends the refused records again in
// their publish order, keyed ones by the new count. Without the barrier a
// record of key k still in flight to its old partition could be refused
// after a later record of k reached the new one.
//
// The switch costs no reconnection: a connected session tells its head the
// new generation in band (wire::PublisherGeneration; a head whose marker of
// it is not appended yet holds the records back until it is), so its acks
// resume within a commit. Only a session that was not connected, and the
// partitions the alter adds, dial a head, naming the generation in their
// hello. The added partitions' sessions are built on a worker while the
// barrier is up.
#include <algorithm>
#include <spdlog/spdlog.h>

#include <catena/chain/domain.hpp>
#include <catena/chain/key_map.hpp>

#include "publisher_impl.hpp"

namespace catena {

using fabric::Errc;
namespace wire = chain::wire;

void Publisher::Impl::start_remap_st(const PartitionSession& s) {
  CATENA_ST_CHECK(owner_);
  if (!remapping_) {
    spdlog::debug("publisher {}/{}: the channel was altered (generation {}, {} partitions); switching",
                  channel_, s.partition, s.head.remap_generation(), s.head.remap_partitions());
    remapping_ = true;
    for (auto& other : sessions_) other->head.flush();  // every in-flight record gets its answer
  }
  const auto have = static_cast<std::uint32_t>(sessions_.size());
  const std::uint32_t want = s.head.remap_partitions();
  // One build per switch: partitions a later refusal adds beyond it are
  // built when the sessions are adopted (adopt_sessions_st).
  if (want <= have || building_.busy() || built_) return;
  building_.start(builds_, [have, want] {
    Built b;
    b.from = have;
    for (std::uint32_t p = have; p < want; ++p)
      b.sessions.push_back(new_session(p));  // its ring comes with its first record
    return b;
  });
}

bool Publisher::Impl::barrier_done_st() const {
  // A record not yet answered may still be stored before its partition's
  // marker; every record answered remap is waiting here, never stored.
  // The switch lays rings out again: not under an open claim's frame.
  return claims_open_ == 0 && std::all_of(sessions_.begin(), sessions_.end(), [](const auto& s) {
           return s->head.pending() == s->head.refused();
         });
}

void Publisher::Impl::switch_generation_st(Clock::time_point now) {
  CATENA_ST_CHECK(owner_);
  std::uint64_t generation = generation_;
  std::uint32_t partitions = partitions_;
  for (const auto& s : sessions_) {
    if (s->head.remap_generation() > generation) {
      generation = s->head.remap_generation();
      partitions = s->head.remap_partitions();
    }
  }
  // Every refused record, out of its session (never stored: each head
  // expects the same next sequence as before them), with its placement.
  std::size_t in_band = 0;
  for (auto& sp : sessions_) {
    PartitionSession& s = *sp;
    if (!s.active) continue;  // never used: nothing to take, no session to switch
    auto take = [&](const chain::RecordHeader& h, std::span<const std::byte> payload) {
      Resend r;
      r.how = std::move(s.records.front());
      s.records.pop_front();
      r.from = s.partition;
      r.timestamp_ns = h.timestamp_ns;
      r.at = resend_bytes_.size();
      r.bytes = static_cast<std::uint32_t>(payload.size());
      r.flags = h.flags & chain::kFlagAttributes;
      resend_bytes_.insert(resend_bytes_.end(), payload.begin(), payload.end());
      resends_.push_back(std::move(r));  // still in flight (flush() waits for it)
    };
    const bool connected =
        !s.down && s.attempt == client_detail::Attempt::none && s.head.connected() && !s.head.broken();
    if (connected && s.head.take_all_in_band(generation, take)) {
      ++in_band;
      continue;  // the session, its ring and its commit watch stay
    }
    if (connected) {
      // The message did not go: the same head is dialled again, naming the
      // generation in the hello.
      s.redial_head = true;
      s.redial_wait = std::chrono::milliseconds(0);
      go_down_st(s, now);
      continue;
    }
    s.head.take_all(take);
    // It reconnects naming the new generation (a dial in progress names the
    // old one).
    s.dial.cancel();
    s.redial_head = false;
    s.attempt = client_detail::Attempt::none;
    go_down_st(s, now);
  }
  spdlog::info(
      "publisher {}: channel generation {} -> {} ({} -> {} partitions); {} records sent again, {} "
      "session(s) switched in band",
      channel_, generation_, generation, partitions_, partitions, resends_.size() - resend_next_, in_band);
  generation_ = generation;
  partitions_ = partitions;
  recount_active_st();  // what ring_budget_bytes keeps for partitions without a ring
  remapping_ = false;
  // Where each record goes now (those of an earlier switch not sent yet
  // too), in publish order.
  std::stable_sort(resends_.begin() + static_cast<std::ptrdiff_t>(resend_next_), resends_.end(),
                   [](const Resend& a, const Resend& b) { return a.how.order < b.how.order; });
  waiting_.assign(partitions_, 0);
  blocked_.assign(partitions_, 0);
  for (std::size_t i = resend_next_; i < resends_.size(); ++i) {
    Resend& r = resends_[i];
    if (r.staged) continue;
    r.to = r.from;
    switch (r.how.placement) {
      case PendingRecord::Placement::keyed:
        r.to = chain::partition_of_hash(r.how.key_hash, partitions_);
        break;
      case PendingRecord::Placement::any:
        if (r.to >= partitions_) r.to = rr_++ % partitions_;
        break;
      case PendingRecord::Placement::explicit_:
        break;
    }
    if (r.to < partitions_) ++waiting_[r.to];
  }
  adopt_sessions_st(now);
}

void Publisher::Impl::adopt_sessions_st(Clock::time_point /*now*/) {
  CATENA_ST_CHECK(owner_);
  if (auto b = building_.take()) built_ = std::move(*b);
  if (remapping_ || building_.busy()) return;
  // The partitions the alter added: built on the worker, or here (a later
  // refusal named more than the build was asked for).
  for (auto p = static_cast<std::uint32_t>(sessions_.size()); p < partitions_; ++p) {
    std::unique_ptr<PartitionSession> s;
    if (built_ && p >= built_->from && p - built_->from < built_->sessions.size())
      s = std::move(built_->sessions[p - built_->from]);
    if (!s) s = new_session(p);
    sessions_.push_back(std::move(s));  // connected with its first record (activate_st)
  }
  built_.reset();
}

Errc Publisher::Impl::may_publish_st(std::uint32_t partition) const {
  if (remapping_) return Errc::backpressure;
  if (partition >= sessions_.size()) return building_.busy() ? Errc::backpressure : Errc::resource_exhausted;
  // Records the switch sends again to this partition go first.
  if (partition < waiting_.size() && waiting_[partition] > 0) return Errc::backpressure;
  return Errc::ok;
}

int Publisher::Impl::drain_resends_st() {
  CATENA_ST_CHECK(owner_);
  int staged = 0;
  // A record no partition takes resolves here (it was counted in flight).
  auto done = [this](Resend& r) {
    r.staged = true;
    if (r.to < waiting_.size()) --waiting_[r.to];
  };
  auto fail = [&](Resend& r, wire::Status st) {
    done(r);
    --in_flight_;
    PublishResult res;
    res.status = client::from(st);
    res.partition = r.to;
    if (r.how.cb) r.how.cb(res);
  };
  // In publish order per partition: a record its partition cannot take yet
  // (the session is still being built, or its ring is full) holds back the
  // later ones of that partition only. A key maps to one partition, so each
  // key's records keep their order; other partitions go on.
  std::fill(blocked_.begin(), blocked_.end(), std::uint8_t{0});
  for (std::size_t i = resend_next_; i < resends_.size(); ++i) {
    Resend& r = resends_[i];
    if (r.staged) continue;
    if (r.to >= partitions_) {
      // publish_to a partition the alter removed: no partition takes it.
      spdlog::warn(
          "publisher {}: partition {} no longer exists (channel generation {}, {} partitions); "
          "its record fails",
          channel_, r.to, generation_, partitions_);
      fail(r, wire::Status::bad_request);
      continue;
    }
    if (blocked_[r.to] != 0) continue;
    if (r.to >= sessions_.size()) {
      if (building_.busy()) {
        blocked_[r.to] = 1;
      } else {
        fail(r, wire::Status::resource_exhausted);  // no ring could be had for it
      }
      continue;
    }
    const std::span<const std::byte> payload(resend_bytes_.data() + r.at, r.bytes);
    const Errc e = stage_st(r.to, r.how, payload, r.how.cb, r.timestamp_ns, nullptr, r.flags);
    if (e == Errc::backpressure) {
      blocked_[r.to] = 1;  // the rest of this partition waits for room
      continue;
    }
    if (e != Errc::ok) {
      fail(r, e == Errc::too_large ? wire::Status::too_large : wire::Status::unavailable);
      continue;
    }
    done(r);
    --in_flight_;  // stage_st counted it again
    ++staged;
  }
  while (resend_next_ < resends_.size() && resends_[resend_next_].staged) ++resend_next_;
  if (resend_next_ == resends_.size()) {
    resends_.clear();
    resend_bytes_.clear();
    resend_next_ = 0;
  }
  return staged;
}

}  // namespace catena
