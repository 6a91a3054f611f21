// A channel alter at the publisher (publisher_impl.hpp): a head whose marker
// opens a newer generation refuses every later record with `remap`. The
// publisher then switches with a barrier, so that each key's records stay in
// publish order: no new record is sent until every in-flight one of every
// partition is answered (stored before its partition's marker, or refused);
// then it adopts the new generation, reconnects every session naming it, and
// sends the refused records again in their publish order, keyed ones by the
// new count. Without the barrier a record of key k still in flight to its old
// partition could be refused after a later record of k reached the new one.
#include <algorithm>
#include <spdlog/spdlog.h>

#include <catena/chain/key_map.hpp>

#include "publisher_impl.hpp"

namespace catena {

using fabric::Errc;
namespace wire = chain::wire;

bool Publisher::Impl::barrier_done_st() const {
  // A record not yet answered may still be stored before its partition's
  // marker; every record answered remap is waiting here, never stored.
  return std::all_of(sessions_.begin(), sessions_.end(),
                     [](const auto& s) { return s->head.pending() == s->head.refused(); });
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
  for (auto& sp : sessions_) {
    PartitionSession& s = *sp;
    s.head.take_all([&](const chain::RecordHeader& h, std::span<const std::byte> payload) {
      Resend r;
      r.how = std::move(s.records.front());
      s.records.pop_front();
      r.from = s.partition;
      r.timestamp_ns = h.timestamp_ns;
      r.payload.assign(payload.begin(), payload.end());
      resends_.push_back(std::move(r));  // still in flight (flush() waits for it)
    });
    // Every session reconnects naming the new generation (a dial in
    // progress names the old one).
    s.dial.cancel();
    s.redial_head = !s.down && s.attempt == client_detail::Attempt::none;
    s.redial_wait = std::chrono::milliseconds(0);
    s.attempt = client_detail::Attempt::none;
    go_down_st(s, now);
  }
  std::stable_sort(resends_.begin() + static_cast<std::ptrdiff_t>(resend_next_), resends_.end(),
                   [](const Resend& a, const Resend& b) { return a.how.order < b.how.order; });
  for (std::uint32_t p = static_cast<std::uint32_t>(sessions_.size()); p < partitions; ++p) {
    auto s = new_session_st(p);
    if (!s) break;   // a partition without a ring: its records fail below
    s->down = true;  // connected from the next poll; its records wait retry_timeout at most
    s->down_since = now;
    s->retry_at = now;
    sessions_.push_back(std::move(s));
  }
  spdlog::info("publisher {}: channel generation {} -> {} ({} -> {} partitions); {} records sent again",
               channel_, generation_, generation, partitions_, partitions, resends_.size() - resend_next_);
  generation_ = generation;
  partitions_ = std::min<std::uint32_t>(partitions, static_cast<std::uint32_t>(sessions_.size()));
  remapping_ = false;
}

int Publisher::Impl::drain_resends_st() {
  CATENA_ST_CHECK(owner_);
  int staged = 0;
  // A record no partition takes resolves here (it was counted in flight).
  auto fail = [this](Resend& r, wire::Status st, std::uint32_t partition) {
    ++resend_next_;
    --in_flight_;
    PublishResult res;
    res.status = st;
    res.partition = partition;
    if (r.how.cb) r.how.cb(res);
  };
  while (resend_next_ < resends_.size()) {
    Resend& r = resends_[resend_next_];
    std::uint32_t to = r.from;
    switch (r.how.placement) {
      case PendingRecord::Placement::keyed:
        to = chain::partition_of_hash(r.how.key_hash, partitions_);
        break;
      case PendingRecord::Placement::any:
        if (to >= partitions_) to = rr_++ % partitions_;
        break;
      case PendingRecord::Placement::explicit_:
        break;
    }
    if (to >= partitions_) {
      // publish_to a partition the alter removed: no partition takes it.
      spdlog::warn(
          "publisher {}: partition {} no longer exists (channel generation {}, {} partitions); "
          "its record fails",
          channel_, to, generation_, partitions_);
      fail(r, wire::Status::bad_request, to);
      continue;
    }
    const Errc e = stage_st(to, r.how, r.payload, r.how.cb, r.timestamp_ns);
    if (e == Errc::backpressure) break;  // in publish order: the rest waits for room
    if (e != Errc::ok) {
      fail(r, e == Errc::too_large ? wire::Status::too_large : wire::Status::unavailable, to);
      continue;
    }
    --in_flight_;  // stage_st counted it again
    ++resend_next_;
    ++staged;
  }
  if (resend_next_ == resends_.size()) {
    resends_.clear();
    resend_next_ = 0;
  }
  return staged;
}

}  // namespace catena
