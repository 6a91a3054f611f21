// Delivery's two halves (delivery.hpp has the protocol).
#include <algorithm>

#include <catena/chain/delivery.hpp>

namespace catena::chain {

// --- the replica's half ------------------------------------------------------

void DeliveryServer::attach(std::unique_ptr<Link> link, const wire::SubscriberHello& hello,
                            const DeliveryGate& gate, const PartitionLog& log) {
  wire::SubscriberWelcome w{};
  w.epoch = gate.epoch;
  w.commit_offset = log.commit_offset();
  std::uint64_t start = 0;
  switch (hello.mode) {
    case wire::StartMode::earliest:
      start = log.start_offset();
      break;
    case wire::StartMode::latest:
      start = log.commit_offset();
      break;
    case wire::StartMode::offset:
      start = hello.start_offset;
      break;
  }
  w.start_offset = start;
  // The ring must hold the largest frame a segment can: frames are never split.
  const bool ring_ok = hello.ring_bytes >= std::max(kMinRingBytes, gate.segment_bytes) &&
                       hello.ring_bytes == align_ring_bytes(hello.ring_bytes) &&
                       hello.ring.length >= hello.ring_bytes;
  if (!gate.authorized) {
    w.status = wire::Status::unauthenticated;
  } else if (hello.ref.epoch > gate.epoch) {
    w.status = wire::Status::not_ready;
  } else if (!ring_ok || static_cast<std::uint32_t>(hello.mode) > 2) {
    w.status = wire::Status::bad_request;
  } else if (gate.range_end != DeliveryGate::kOpenRange && start >= gate.range_end) {
    w.status = wire::Status::moved;  // served by the partition's next chain
    w.start_offset = gate.range_end;
    w.next = wire::NextChainHint::of(gate.next_epoch, gate.next_head);
  } else if (sessions_.size() >= gate.max_subscribers ||
             (gate.tenant_seats != nullptr && gate.tenant_seats->full())) {
    w.status = wire::Status::resource_exhausted;
  } else if (start < log.start_offset()) {
    w.status = wire::Status::position_expired;
    w.start_offset = log.start_offset();
  } else if (start > log.end_offset()) {
    w.status = wire::Status::bad_request;
  } else {
    w.status = wire::Status::ok;
  }
  if (link->send(w) != fabric::Errc::ok || w.status != wire::Status::ok) {
    link->poll_send();
    return;
  }
  auto s = std::make_unique<Session>();
  s->link = std::move(link);
  s->ring = hello.ring;
  s->writer = FrameRingWriter(hello.ring_bytes, hello.ring_bytes);
  s->next_offset = start;
  s->cursor = log.seek(start);
  s->seat = Seat(gate.tenant_seats);
  sessions_.push_back(std::move(s));
}

int DeliveryServer::do_work(const DeliverySource& src) {
  int work = 0;
  for (auto& s : sessions_) work += deliver(*s, src);
  const auto dead =
      std::remove_if(sessions_.begin(), sessions_.end(), [](const auto& s) { return s->closed; });
  sessions_.erase(dead, sessions_.end());
  return work;
}

void DeliveryServer::poll_events() {
  for (auto& s : sessions_) s->link->poll_events();
}

void DeliveryServer::drop_all() {
  for (auto& s : sessions_) s->link->ep().disconnect();
  sessions_.clear();
}

int DeliveryServer::deliver(Session& s, const DeliverySource& src) {
  const PartitionLog& log = src.log;
  int work = s.link->poll_recv(
      [&](const std::byte* msg, std::uint32_t len) {
        if (auto credit = wire::decode<wire::SubscriberCredit>(msg, len)) {
          (void)s.writer.credit_st(credit->consumed);
        }
      },
      [](std::uint32_t, std::uint32_t) {});
  s.link->poll_send();
  if (work < 0 || s.link->broken()) {
    s.closed = true;
    return 1;
  }
  if (src.range_end != DeliveryGate::kOpenRange && s.next_offset >= src.range_end) {
    if (!s.notified_moved) {  // its next record is in the partition's next chain
      wire::SubscriberNotice notice{};
      notice.status = wire::Status::moved;
      notice.next_offset = src.range_end;
      notice.next = wire::NextChainHint::of(src.next_epoch, src.next_head);
      s.notified_moved = s.link->send(notice) == fabric::Errc::ok;
    }
    return work;
  }
  if (!s.cursor.valid) {
    if (s.next_offset < log.start_offset() && !s.notified_expired) {
      wire::SubscriberNotice notice{};
      notice.status = wire::Status::position_expired;
      notice.next_offset = log.start_offset();
      s.notified_expired = s.link->send(notice) == fabric::Errc::ok;
      return 1;
    }
    s.cursor = log.seek(s.next_offset);
    if (!s.cursor.valid) return work;
  }
  FrameRingWriter& ring = s.writer;
  // A pad's header comes from scratch memory; a pad is the only thing this
  // ring gets that is not a frame of the segment.
  static_assert(sizeof(RecordHeader) <= ScratchRing::kSlotBytes);
  auto write_pad = [&](std::uint32_t at, const RecordHeader& pad) {
    return s.link->ep().post_write(kWrDelivery, src.scratch.stage(&pad, sizeof pad), {s.ring, at}) ==
           fabric::Errc::ok;
  };
  std::uint32_t budget = kBudget;
  const fabric::PostBatch batch(s.link->ep());  // the pass's pads and runs: one doorbell
  while (budget > 0) {
    // Gather a run of frames that are contiguous in one slot and in the ring.
    Cursor run_start = s.cursor;
    std::uint32_t run_bytes = 0;
    const std::byte* run_ptr = nullptr;
    std::uint32_t run_slot = 0;
    std::uint32_t run_pos = 0;
    std::uint64_t run_total = 0;  // the ring's written total where the run starts
    for (;;) {
      Cursor before = s.cursor;
      ReadResult r = log.read(s.cursor);
      if (r.status == ReadStatus::expired) {
        s.next_offset = s.cursor.next_offset;
        s.cursor.valid = false;
        break;
      }
      if (r.status != ReadStatus::record) break;
      if (run_bytes > 0) {
        // Next to the run in the segment and in the ring (a run that reached
        // the ring's end ends there).
        const bool contiguous = s.cursor.slot == run_slot && r.frame == run_ptr + run_bytes &&
                                ring.position() == run_pos + run_bytes;
        if (!contiguous || r.frame_bytes > ring.contiguous_free() || run_bytes >= budget) {
          s.cursor = before;  // not this one: it starts the next run
          break;
        }
      }
      std::uint32_t pos = 0;
      const RingStatus placed = ring.place_st(r.frame_bytes, write_pad, &pos);
      if (placed != RingStatus::ok) {
        s.cursor = before;  // full, or the pad must wait for the send queue
        break;
      }
      if (run_bytes == 0) {
        run_ptr = r.frame;
        run_slot = s.cursor.slot;
        run_pos = pos;
        run_total = ring.written() - r.frame_bytes;
      }
      run_bytes += r.frame_bytes;
    }
    if (run_bytes == 0) break;
    const fabric::MemoryRegion& slot = *src.slot_regions[run_slot];
    const std::size_t src_off = static_cast<std::size_t>(run_ptr - slot.data());
    if (s.link->ep().post_write_imm(kWrDelivery, {&slot, src_off, run_bytes}, {s.ring, run_pos},
                                    ring.immediate()) != fabric::Errc::ok) {
      s.cursor = run_start;
      ring.rewind_st(run_total);
      break;
    }
    ring.flushed_st(ring.written());
    s.next_offset = s.cursor.next_offset;
    budget = run_bytes >= budget ? 0 : budget - run_bytes;
    ++work;
  }
  return work;
}

// --- the subscriber's half ---------------------------------------------------

wire::SubscriberHello DeliveryClient::hello(std::string_view channel, std::uint32_t partition,
                                            std::uint64_t epoch, wire::StartMode mode,
                                            std::uint64_t start_offset) const {
  wire::SubscriberHello h{};
  h.ref.set(channel, partition, epoch);
  h.mode = mode;
  h.start_offset = mode == wire::StartMode::offset ? start_offset : 0;
  h.ring_bytes = ring_bytes_;
  return h;
}

fabric::Result<void> DeliveryClient::grant(fabric::Endpoint& ep, wire::SubscriberHello& hello) const {
  return expose_into(ep, *ring_, hello.ring);
}

const char* DeliveryClient::describe(Fault f) noexcept {
  switch (f) {
    case Fault::none:
      return "no fault";
    case Fault::overrun:
      return "the replica overran the ring";
    case Fault::garbled:
      return "a garbled delivery";
    case Fault::bad_checksum:
      return "a bad payload checksum in a delivery";
    case Fault::out_of_order:
      return "an offset other than the next one";
  }
  return "?";
}

}  // namespace catena::chain
