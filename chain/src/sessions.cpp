// Replica: publisher sessions (head only) and subscriber sessions.
#include "sessions.hpp"

#include <algorithm>
#include <cstring>

namespace catena::chain {
namespace {

// Bytes delivered to one subscriber per pass, so one fast reader does not
// hold the thread while others wait.
constexpr std::uint32_t kDeliveryBudget = 1u << 20;

}  // namespace

void Replica::attach_publisher(std::unique_ptr<Link> link, const wire::PublisherHello& hello) {
  CATENA_ST_CHECK(owner_);
  wire::PublisherWelcome w{};
  w.epoch = cfg_.epoch;
  // A segment holds its header, the record and a seal.
  w.max_record = std::min<std::uint32_t>(
      kMaxRecordPayload, cfg_.log.segment_bytes - sizeof(SegmentHeader) - 2 * sizeof(RecordHeader));
  wire::put_text(w.head_hint, cfg_.head_addr);
  std::uint64_t unused = 0;
  if (hello.ref.epoch > cfg_.epoch) {
    w.status = wire::Status::not_ready;
  } else if (!cfg_.is_head()) {
    w.status = wire::Status::not_head;
  } else if (hello.ref.epoch < cfg_.epoch && hello.ref.epoch != 0) {
    w.status = wire::Status::stale_epoch;
  } else if (sealed_) {
    w.status = wire::Status::moved;  // the partition's next chain takes its appends
  } else if (producers_.decide(hello.producer_id, hello.producer_epoch, 0, &unused) ==
             SeqDecision::stale_epoch) {
    w.status = wire::Status::producer_fenced;
  } else if (publishers_.size() >= cfg_.limits.max_publishers ||
             (!producers_.knows(hello.producer_id) && producers_.size() >= cfg_.limits.max_producers) ||
             budget_st().ring_bytes_used + clamp_ring_bytes(hello.ring_bytes) >
                 budget_st().ring_bytes_limit) {
    w.status = wire::Status::resource_exhausted;
  } else {
    auto session = std::make_unique<PublisherSession>();
    const std::uint32_t ring_bytes = clamp_ring_bytes(hello.ring_bytes);
    auto ring = provider_.allocate(ring_bytes, fabric::kLocalWrite | fabric::kRemoteWrite);
    // The ring's key is this publisher's connection's alone.
    if (!ring || !chain::expose_into(link->ep(), *ring.value(), w.ring)) {
      w.status = wire::Status::resource_exhausted;
    } else {
      session->ring = std::move(ring.value());
      session->reader = FrameRingReader(session->ring->data(), ring_bytes);
      session->budget = &budget_st();
      session->budget->ring_bytes_used += ring_bytes;
      session->producer_id = hello.producer_id;
      session->producer_epoch = hello.producer_epoch;
      w.status = wire::Status::ok;
      w.ring_bytes = ring_bytes;
      auto it = producers_.entries().find(hello.producer_id);
      w.next_sequence = it != producers_.entries().end() && it->second.epoch == hello.producer_epoch
                            ? static_cast<std::uint64_t>(it->second.last_seq + 1)
                            : 0;
      if (link->send(w) == fabric::Errc::ok) {
        session->link = std::move(link);
        publishers_.push_back(std::move(session));
      }
      return;
    }
  }
  (void)link->send(w);
  link->poll_send();
}

int Replica::pump_publishers_st() {
  CATENA_ST_CHECK(owner_);
  int work = 0;
  for (auto& p : publishers_) work += consume_publisher_st(*p);
  if (work > 0 && cfg_.is_tail()) commit_as_tail_st();
  const auto dead =
      std::remove_if(publishers_.begin(), publishers_.end(), [](const auto& p) { return p->closed; });
  publishers_.erase(dead, publishers_.end());
  return work;
}

int Replica::consume_publisher_st(PublisherSession& s) {
  CATENA_ST_CHECK(owner_);
  FrameRingReader& ring = s.reader;
  int n = s.link->poll_recv([](const std::byte*, std::uint32_t) {},
                            [&](std::uint32_t imm, std::uint32_t) { ring.on_immediate_st(imm); });
  s.link->poll_send();
  if (n < 0 || s.link->broken() || ring.overrun()) {
    s.closed = true;  // gone, or claims more than its ring holds
    return 1;
  }
  int work = 0;
  auto garbled = [&] {
    ++corrupt_frames_;
    s.link->ep().disconnect();  // nothing of a garbled batch is stored
    s.closed = true;
    return work + 1;
  };
  auto push = [&](wire::Status st, std::uint64_t seq, std::uint64_t offset) {
    PublisherSession::Pending* last = s.pending.back();
    const bool extends = last && last->status == st && last->first_seq + last->count == seq &&
                         (st != wire::Status::ok || (offset != PublisherSession::kUnknownOffset &&
                                                     last->first_offset != PublisherSession::kUnknownOffset &&
                                                     last->first_offset + last->count == offset));
    if (extends) {
      ++last->count;
      last->consumed_after = ring.consumed();
      return;
    }
    s.pending.push_back(PublisherSession::Pending{st, 1, seq, offset, ring.consumed()});
  };
  while (!s.pending.full()) {
    // The publisher may rewrite its ring at any time: the reader reads the
    // header once for the frame's size; the frame is copied into the segment
    // and only what the copy says is trusted.
    RingFrame f;
    const RingRead next = ring.next_st(&f);
    if (next == RingRead::empty) break;
    if (next == RingRead::garbled) return garbled();
    if (sealed_) {  // the partition moves on: nothing more is stored here
      ring.consume_st(f);
      push(wire::Status::moved, f.header.sequence, 0);
      ++work;
      continue;
    }
    AppendStatus staged = AppendStatus::ok;
    const std::byte* copy = log_->stage_frame(f.at, f.bytes, &staged);
    if (staged == AppendStatus::log_full) return work;  // back-pressure: the ring stays full
    if (staged == AppendStatus::too_large) {
      ring.consume_st(f);
      push(wire::Status::too_large, f.header.sequence, 0);
      ++work;
      continue;
    }
    RecordHeader h;
    if (check_frame(copy, f.bytes, &h) != FrameCheck::ok || h.flags != 0 || frame_size(h.length) != f.bytes ||
        h.producer_id != s.producer_id || h.producer_epoch != s.producer_epoch) {
      return garbled();
    }
    std::uint64_t offset = 0;
    wire::Status status = wire::Status::ok;
    switch (producers_.decide(h.producer_id, h.producer_epoch, h.sequence, &offset)) {
      case SeqDecision::append:
        offset = log_->append_staged(f.bytes);
        producers_.record(h.producer_id, h.producer_epoch, h.sequence, offset, tick_ns_);
        break;
      case SeqDecision::duplicate:
        break;
      case SeqDecision::duplicate_unknown:
        offset = PublisherSession::kUnknownOffset;
        break;
      case SeqDecision::sequence_gap:
        status = wire::Status::sequence_gap;
        offset = 0;
        break;
      case SeqDecision::stale_epoch:
        status = wire::Status::producer_fenced;
        offset = 0;
        break;
    }
    ring.consume_st(f);
    push(status, h.sequence, offset);
    ++work;
  }
  return work;
}

int Replica::ack_publisher_st(PublisherSession& s) {
  CATENA_ST_CHECK(owner_);
  int work = 0;
  const std::uint64_t commit = log_->commit_offset();
  while (!s.pending.empty() && !s.closed) {
    const PublisherSession::Pending& p = s.pending.front();
    if (p.status == wire::Status::ok && p.first_offset != PublisherSession::kUnknownOffset &&
        p.first_offset + p.count > commit) {
      break;  // acknowledged only once committed
    }
    wire::PublishAck ack{};
    ack.status = p.status;
    ack.first_seq = p.first_seq;
    ack.count = p.count;
    ack.first_offset = p.first_offset;
    ack.ring_consumed = p.consumed_after;
    ack.epoch = cfg_.epoch;
    if (s.link->send(ack) != fabric::Errc::ok) break;
    s.pending.pop_front();
    ++work;
  }
  return work;
}

void Replica::attach_subscriber(std::unique_ptr<Link> link, const wire::SubscriberHello& hello) {
  CATENA_ST_CHECK(owner_);
  wire::SubscriberWelcome w{};
  w.epoch = cfg_.epoch;
  w.commit_offset = log_->commit_offset();
  std::uint64_t start = 0;
  switch (hello.mode) {
    case wire::StartMode::earliest:
      start = log_->start_offset();
      break;
    case wire::StartMode::latest:
      start = log_->commit_offset();
      break;
    case wire::StartMode::offset:
      start = hello.start_offset;
      break;
  }
  w.start_offset = start;
  // The ring must hold the largest frame a segment can: frames are never split.
  const bool ring_ok = hello.ring_bytes >= std::max(kMinRingBytes, cfg_.log.segment_bytes) &&
                       hello.ring_bytes == align_ring_bytes(hello.ring_bytes) &&
                       hello.ring.length >= hello.ring_bytes;
  if (hello.ref.epoch > cfg_.epoch) {
    w.status = wire::Status::not_ready;
  } else if (!ring_ok || static_cast<std::uint32_t>(hello.mode) > 2) {
    w.status = wire::Status::bad_request;
  } else if (range_end_ != kOpenRange && start >= range_end_) {
    w.status = wire::Status::moved;  // served by the partition's next chain
    w.start_offset = range_end_;
  } else if (subscribers_.size() >= cfg_.limits.max_subscribers) {
    w.status = wire::Status::resource_exhausted;
  } else if (start < log_->start_offset()) {
    w.status = wire::Status::position_expired;
    w.start_offset = log_->start_offset();
  } else if (start > log_->end_offset()) {
    w.status = wire::Status::bad_request;
  } else {
    w.status = wire::Status::ok;
  }
  if (link->send(w) != fabric::Errc::ok || w.status != wire::Status::ok) {
    link->poll_send();
    return;
  }
  auto s = std::make_unique<SubscriberSession>();
  s->link = std::move(link);
  s->ring = hello.ring;
  s->writer = FrameRingWriter(hello.ring_bytes, hello.ring_bytes);
  s->next_offset = start;
  s->cursor = log_->seek(start);
  subscribers_.push_back(std::move(s));
}

int Replica::serve_subscribers_st() {
  CATENA_ST_CHECK(owner_);
  int work = 0;
  for (auto& s : subscribers_) work += deliver_st(*s);
  const auto dead =
      std::remove_if(subscribers_.begin(), subscribers_.end(), [](const auto& s) { return s->closed; });
  subscribers_.erase(dead, subscribers_.end());
  return work;
}

int Replica::deliver_st(SubscriberSession& s) {
  CATENA_ST_CHECK(owner_);
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
  if (range_end_ != kOpenRange && s.next_offset >= range_end_) {
    if (!s.notified_moved) {  // its next record is in the partition's next chain
      wire::SubscriberNotice notice{};
      notice.status = wire::Status::moved;
      notice.next_offset = range_end_;
      s.notified_moved = s.link->send(notice) == fabric::Errc::ok;
    }
    return work;
  }
  if (!s.cursor.valid) {
    if (s.next_offset < log_->start_offset() && !s.notified_expired) {
      wire::SubscriberNotice notice{};
      notice.status = wire::Status::position_expired;
      notice.next_offset = log_->start_offset();
      s.notified_expired = s.link->send(notice) == fabric::Errc::ok;
      return 1;
    }
    s.cursor = log_->seek(s.next_offset);
    if (!s.cursor.valid) return work;
  }
  FrameRingWriter& ring = s.writer;
  // A pad's header comes from scratch memory; a pad is the only thing this
  // ring gets that is not a frame of the segment.
  static_assert(sizeof(RecordHeader) <= kScratchSlotBytes);
  auto write_pad = [&](std::uint32_t at, const RecordHeader& pad) {
    return s.link->ep().post_write(kWrDelivery, stage_small_write_st(&pad, sizeof pad), {s.ring, at}) ==
           fabric::Errc::ok;
  };
  std::uint32_t budget = kDeliveryBudget;
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
      ReadResult r = log_->read(s.cursor);
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
    const std::size_t src_off = static_cast<std::size_t>(run_ptr - slot_mrs_[run_slot]->data());
    if (s.link->ep().post_write_imm(kWrDelivery, {slot_mrs_[run_slot].get(), src_off, run_bytes},
                                    {s.ring, run_pos}, ring.immediate()) != fabric::Errc::ok) {
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

}  // namespace catena::chain

namespace catena::chain {

void Replica::attach_watcher(std::unique_ptr<Link> link, const wire::CommitWatchHello& hello) {
  CATENA_ST_CHECK(owner_);
  wire::CommitWatchWelcome w{};
  w.epoch = cfg_.epoch;
  if (hello.ref.epoch > cfg_.epoch) {
    w.status = wire::Status::not_ready;
  } else if (range_end_ != kOpenRange) {
    w.status = wire::Status::moved;
  } else if (!cfg_.is_tail() || cfg_.chain_length < 2) {
    w.status = wire::Status::not_tail;
  } else if (hello.ref.epoch < cfg_.epoch) {
    w.status = wire::Status::stale_epoch;
  } else if (watchers_.size() >= cfg_.limits.max_watchers) {
    w.status = wire::Status::resource_exhausted;
  } else {
    w.status = wire::Status::ok;
  }
  if (link->send(w) != fabric::Errc::ok || w.status != wire::Status::ok) {
    link->poll_send();
    return;
  }
  if (watchers_.empty()) {
    // Records already here were acknowledged (or will be) by the head.
    watch_next_ = log_->commit_offset();
    watch_cursor_ = log_->seek(watch_next_);
  }
  auto s = std::make_unique<WatchSession>();
  s->link = std::move(link);
  s->producer_id = hello.producer_id;
  s->producer_epoch = hello.producer_epoch;
  watchers_.push_back(std::move(s));
}

void Replica::drop_watchers_st() {
  CATENA_ST_CHECK(owner_);
  for (auto& w : watchers_) w->link->ep().disconnect();
  watchers_.clear();
}

int Replica::ack_watchers_st() {
  CATENA_ST_CHECK(owner_);
  int work = 0;
  for (auto& w : watchers_) {
    const int n =
        w->link->poll_recv([](const std::byte*, std::uint32_t) {}, [](std::uint32_t, std::uint32_t) {});
    w->link->poll_send();
    if (n < 0 || w->link->broken()) w->closed = true;
  }
  auto flush = [&](WatchSession& w) {
    if (w.count == 0) return;
    wire::PublishAck ack{};
    ack.status = wire::Status::ok;
    ack.first_seq = w.first_seq;
    ack.count = w.count;
    ack.first_offset = w.first_offset;
    ack.ring_consumed = 0;  // ring credit comes from the head
    ack.epoch = cfg_.epoch;
    // A full send queue drops this ack: the head's covers the same records.
    (void)w.link->send(ack);
    w.count = 0;
    ++work;
  };
  if (!watch_cursor_.valid) watch_cursor_ = log_->seek(watch_next_);
  WatchSession* last = nullptr;
  while (watch_cursor_.valid) {
    ReadResult r = log_->read(watch_cursor_);  // committed records only
    if (r.status == ReadStatus::expired) {
      watch_next_ = log_->commit_offset();  // lagged past retention: skip, the head acks
      watch_cursor_.valid = false;
      break;
    }
    if (r.status != ReadStatus::record) break;
    watch_next_ = watch_cursor_.next_offset;
    const RecordHeader& h = r.header;
    if (last == nullptr || last->producer_id != h.producer_id || last->producer_epoch != h.producer_epoch) {
      last = nullptr;
      // Newest first: a publisher that re-opened its watch reads the new one.
      for (auto it = watchers_.rbegin(); it != watchers_.rend(); ++it) {
        if ((*it)->producer_id == h.producer_id && (*it)->producer_epoch == h.producer_epoch &&
            !(*it)->closed) {
          last = it->get();
          break;
        }
      }
      if (last == nullptr) continue;
    }
    const bool extends =
        h.sequence == last->first_seq + last->count && h.offset == last->first_offset + last->count;
    if (last->count > 0 && !extends) {
      flush(*last);
    }
    if (last->count == 0) {
      last->first_seq = h.sequence;
      last->first_offset = h.offset;
    }
    ++last->count;
  }
  for (auto& w : watchers_) flush(*w);
  const auto dead =
      std::remove_if(watchers_.begin(), watchers_.end(), [](const auto& w) { return w->closed; });
  watchers_.erase(dead, watchers_.end());
  return work;
}

}  // namespace catena::chain
