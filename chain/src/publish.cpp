// Publishing's two halves (publish.hpp has the protocol).
#include <algorithm>
#include <cstring>

#include <catena/chain/publish.hpp>

namespace catena::chain {

// --- the head's half ---------------------------------------------------------

void PublishServer::attach(fabric::Provider& provider, std::unique_ptr<Link> link,
                           const wire::PublisherHello& hello, const PublishGate& gate,
                           const ProducerState& producers) {
  wire::PublisherWelcome w{};
  w.epoch = gate.epoch;
  w.max_record = max_record_for(gate.segment_bytes);
  wire::put_text(w.head_hint, gate.head_addr);
  const std::uint32_t ring_bytes = clamp_ring_bytes(hello.ring_bytes);
  const auto known = producers.entries().find(hello.producer_id);
  const bool have_producer = known != producers.entries().end();
  if (!gate.authorized) {
    w.status = wire::Status::unauthenticated;
  } else if (hello.ref.epoch > gate.epoch) {
    w.status = wire::Status::not_ready;
  } else if (gate.head && hello.generation > gate.marker_generation) {
    // This head's marker of that generation is not appended yet: no record
    // mapped by it may land before the marker.
    w.status = wire::Status::not_ready;
  } else if (!gate.head) {
    w.status = wire::Status::not_head;
  } else if (hello.ref.epoch < gate.epoch && hello.ref.epoch != 0) {
    w.status = wire::Status::stale_epoch;
  } else if (gate.sealed) {
    w.status = wire::Status::moved;  // the partition's next chain takes its appends
    w.next = wire::NextChainHint::of(gate.next_epoch, gate.next_head);
  } else if (std::uint64_t unused = 0; producers.decide(hello.producer_id, hello.producer_epoch, 0,
                                                        &unused) == SeqDecision::stale_epoch) {
    w.status = wire::Status::producer_fenced;
  } else if (sessions_.size() >= gate.max_publishers ||
             (!have_producer && producers.size() >= gate.max_producers) ||
             gate.budget->ring_bytes_used + ring_bytes > gate.budget->ring_bytes_limit ||
             (gate.tenant_budget != nullptr &&
              gate.tenant_budget->ring_bytes_used + ring_bytes > gate.tenant_budget->ring_bytes_limit) ||
             (gate.tenant_seats != nullptr && gate.tenant_seats->full())) {
    w.status = wire::Status::resource_exhausted;
  } else {
    auto ring =
        provider.allocate(ring_bytes, fabric::kLocalWrite | fabric::kRemoteWrite, link->ep().domain());
    // The ring's key is this publisher's connection's alone.
    if (!ring || !expose_into(link->ep(), *ring.value(), w.ring)) {
      w.status = wire::Status::resource_exhausted;
    } else {
      auto session = std::make_unique<Session>();
      session->ring = std::move(ring.value());
      session->reader = FrameRingReader(session->ring->data(), ring_bytes);
      session->budget = gate.budget;
      session->budget->ring_bytes_used += ring_bytes;
      session->tenant_budget = gate.tenant_budget;
      if (session->tenant_budget != nullptr) session->tenant_budget->ring_bytes_used += ring_bytes;
      session->seat = Seat(gate.tenant_seats);
      session->producer_id = hello.producer_id;
      session->producer_epoch = hello.producer_epoch;
      session->generation = hello.generation;
      w.status = wire::Status::ok;
      w.ring_bytes = ring_bytes;
      w.next_sequence = have_producer && known->second.epoch == hello.producer_epoch
                            ? static_cast<std::uint64_t>(known->second.last_seq + 1)
                            : 0;
      if (link->send(w) == fabric::Errc::ok) {
        session->link = std::move(link);
        sessions_.push_back(std::move(session));
        ++opened_;
      }
      return;
    }
  }
  (void)link->send(w);
  link->poll_send();
}

int PublishServer::consume(PublishTarget& target) {
  int work = 0;
  for (auto& s : sessions_) work += consume(*s, target);
  const auto dead =
      std::remove_if(sessions_.begin(), sessions_.end(), [](const auto& s) { return s->closed; });
  sessions_.erase(dead, sessions_.end());
  return work;
}

int PublishServer::consume(Session& s, PublishTarget& target) {
  FrameRingReader& ring = s.reader;
  bool bad_message = false;
  int n = s.link->poll_recv(
      [&](const std::byte* msg, std::uint32_t len) {
        // The one message a publisher sends on its session. Its frames
        // before it were all read (it waits for their answers), and the
        // ones after it are read below: in the order they were sent.
        if (auto g = wire::decode<wire::PublisherGeneration>(msg, len)) {
          s.generation = std::max(s.generation, g->generation);
        } else {
          bad_message = true;
        }
      },
      [&](std::uint32_t imm, std::uint32_t) { ring.on_immediate_st(imm); });
  s.link->poll_send();
  if (n < 0 || s.link->broken() || ring.overrun()) {
    s.closed = true;  // gone, or claims more than its ring holds
    return 1;
  }
  int work = 0;
  auto garbled = [&] {
    if (target.corrupt_frames != nullptr) ++*target.corrupt_frames;
    s.link->ep().disconnect();  // nothing of a garbled batch is stored
    s.closed = true;
    return work + 1;
  };
  if (bad_message) return garbled();
  PartitionLog& log = target.log;
  // The publisher maps keys by a generation whose marker this head has not
  // appended yet: none of its records may land before it. They wait in the
  // ring (the marker comes from the controller, and with it the reading).
  if (!target.sealed && s.generation > log.marker().generation) return work;
  auto push = [&](wire::Status st, std::uint64_t seq, std::uint64_t offset, std::uint64_t bytes = 0) {
    Session::Run* last = s.runs.back();
    const bool extends = last && last->status == st && last->first_seq + last->count == seq &&
                         (st != wire::Status::ok || (offset != Session::kUnknownOffset &&
                                                     last->first_offset != Session::kUnknownOffset &&
                                                     last->first_offset + last->count == offset));
    if (extends) {
      ++last->count;
      last->bytes += bytes;
      last->consumed_after = ring.consumed();
      return;
    }
    s.runs.push_back(Session::Run{st, 1, seq, offset, ring.consumed(), bytes});
  };
  while (!s.runs.full()) {
    // The publisher may rewrite its ring at any time: the reader reads the
    // header once for the frame's size; the frame is copied into the segment
    // and only what the copy says is trusted.
    RingFrame f;
    const RingRead next = ring.next_st(&f);
    if (next == RingRead::empty) break;
    if (next == RingRead::garbled) return garbled();
    if (target.sealed) {  // the partition moves on: nothing more is stored here
      ring.consume_st(f);
      push(wire::Status::moved, f.header.sequence, 0);
      ++work;
      continue;
    }
    if (log.marker().generation > s.generation) {
      // The channel was altered and this partition's marker is in the log:
      // a record mapped by the older generation may not follow it. Nothing
      // is stored and the producer's state stays as it was. But a record
      // this head already holds (resent after a reconnect: a head killed
      // mid-alter had it replicated, then its successor appended the
      // marker) lies below the marker: answered as any retry, with its
      // offset, it is not sent again by the new mapping and stored twice.
      // The sequence is the ring's (no copy is checked for an answer that
      // stores nothing): a publisher that lies about it only misleads itself.
      std::uint64_t stored_at = 0;
      const SeqDecision held =
          target.producers.decide(s.producer_id, s.producer_epoch, f.header.sequence, &stored_at);
      ring.consume_st(f);
      if (held == SeqDecision::duplicate || held == SeqDecision::duplicate_unknown) {
        push(wire::Status::ok, f.header.sequence,
             held == SeqDecision::duplicate ? stored_at : Session::kUnknownOffset);
      } else {
        s.remap_to = log.marker();
        push(wire::Status::remap, f.header.sequence, 0);
      }
      ++work;
      continue;
    }
    // The tenant's rate on this broker: the frame waits in the ring.
    if (target.rate != nullptr && !target.rate->take(f.bytes, target.now_ns)) {
      if (target.counters != nullptr) ReplicaCounters::add(target.counters->rate_limited_events, 1);
      hold(s, wire::HeldReason::rate_limited, target);
      return work;
    }
    AppendStatus staged = AppendStatus::ok;
    const std::byte* copy = log.stage_frame(f.at, f.bytes, &staged);
    if (staged == AppendStatus::log_full || staged == AppendStatus::no_memory) {
      // Back-pressure: the ring stays full until retention or the node's
      // segment budget frees a segment.
      if (target.counters != nullptr) {
        ReplicaCounters::add(staged == AppendStatus::log_full ? target.counters->log_full_events
                                                              : target.counters->segment_memory_refusals,
                             1);
      }
      hold(s,
           staged == AppendStatus::log_full ? wire::HeldReason::log_full : wire::HeldReason::segment_memory,
           target);
      return work;
    }
    if (staged == AppendStatus::too_large) {
      ring.consume_st(f);
      push(wire::Status::too_large, f.header.sequence, 0);
      ++work;
      continue;
    }
    RecordHeader h;
    if (check_frame(copy, f.bytes, &h) != FrameCheck::ok ||
        (h.flags & ~(kFlagAttributes | kFlagTrace)) != 0 || frame_size(h.length) != f.bytes ||
        h.producer_id != s.producer_id || h.producer_epoch != s.producer_epoch) {
      return garbled();
    }
    // A well-framed record whose key and headers do not decode: refused
    // with `corrupt` (nothing stored) so that no subscriber ever meets it;
    // the session goes on, as after too_large.
    DecodedRecord decoded;
    if (const AttributesCheck ac = decode_record(h, {copy + sizeof h, h.length}, &decoded);
        ac != AttributesCheck::ok) {
      ring.consume_st(f);
      push(wire::Status::corrupt, h.sequence, 0);
      ++work;
      continue;
    }
    std::uint64_t offset = 0;
    wire::Status status = wire::Status::ok;
    switch (target.producers.decide(h.producer_id, h.producer_epoch, h.sequence, &offset)) {
      case SeqDecision::append:
        offset = log.append_staged(f.bytes);
        target.producers.record(h.producer_id, h.producer_epoch, h.sequence, offset, target.now_ns);
        if (target.counters != nullptr) {
          ReplicaCounters::add(target.counters->appended_records, 1);
          ReplicaCounters::add(target.counters->appended_bytes, f.bytes);
        }
        break;
      case SeqDecision::duplicate:
        break;
      case SeqDecision::duplicate_unknown:
        offset = Session::kUnknownOffset;
        break;
      case SeqDecision::sequence_gap:
        status = wire::Status::sequence_gap;
        offset = 0;
        if (target.counters != nullptr) ReplicaCounters::add(target.counters->sequence_gaps, 1);
        break;
      case SeqDecision::stale_epoch:
        status = wire::Status::producer_fenced;
        offset = 0;
        break;
    }
    ring.consume_st(f);
    push(status, h.sequence, offset, f.bytes);
    ++work;
  }
  return work;
}

void PublishServer::hold(Session& s, wire::HeldReason why, const PublishTarget& target) {
  if (s.told == why && target.now_ns - s.told_ns < kHeldNoticeNs) return;
  const PartitionLog& log = target.log;
  wire::PublishHeld n{};
  n.reason = why;
  n.segments = log.slot_count();
  n.ttl_ns = log.config().ttl_ns;
  n.grace_ns = log.config().grace_ns;
  n.free_in_ns = why == wire::HeldReason::log_full ? log.oldest_free_in_ns_st() : 0;
  if (s.link->send(n) != fabric::Errc::ok) return;  // no room now: the next pass tells
  s.link->poll_send();
  s.told = why;
  s.told_ns = target.now_ns;
}

int PublishServer::acknowledge(std::uint64_t commit_offset, std::uint64_t epoch, ReplicaCounters* counters) {
  int work = 0;
  for (auto& s : sessions_) work += acknowledge(*s, commit_offset, epoch, counters);
  return work;
}

int PublishServer::acknowledge(Session& s, std::uint64_t commit_offset, std::uint64_t epoch,
                               ReplicaCounters* counters) {
  int work = 0;
  while (!s.runs.empty() && !s.closed) {
    const Session::Run& r = s.runs.front();
    if (r.status == wire::Status::ok && r.first_offset != Session::kUnknownOffset &&
        r.first_offset + r.count > commit_offset) {
      break;  // acknowledged only once committed
    }
    wire::PublishAck ack{};
    ack.status = r.status;
    ack.first_seq = r.first_seq;
    ack.count = r.count;
    ack.first_offset = r.first_offset;
    ack.ring_consumed = r.consumed_after;
    ack.epoch = epoch;
    if (r.status == wire::Status::remap) {
      ack.marker_generation = s.remap_to.generation;
      ack.marker_partitions = s.remap_to.partitions;
    }
    if (s.link->send(ack) != fabric::Errc::ok) break;
    if (counters != nullptr && r.status == wire::Status::ok) {
      ReplicaCounters::add(counters->acked_records, r.count);
      ReplicaCounters::add(counters->acked_bytes, r.bytes);
    }
    s.runs.pop_front();
    ++work;
  }
  return work;
}

void PublishServer::touch_producers(ProducerState& producers, std::uint64_t now_ns) const {
  for (const auto& s : sessions_) producers.touch(s->producer_id, now_ns);
}

void PublishServer::poll_events() {
  for (auto& s : sessions_) s->link->poll_events();
}

void PublishServer::drop_all() {
  for (auto& s : sessions_) s->link->ep().disconnect();
  sessions_.clear();
}

// --- the publisher's half ----------------------------------------------------

PublishClient::PublishClient(std::unique_ptr<fabric::MemoryRegion> mirror, std::uint32_t ring_bytes,
                             std::uint32_t max_in_flight)
    : mirror_(std::move(mirror)),
      // At most half the ring per frame: a frame that has to wrap still fits
      // behind its pad.
      writer_(ring_bytes, ring_bytes / 2),
      pending_(max_in_flight) {}

bool PublishClient::replace_ring(std::unique_ptr<fabric::MemoryRegion> mirror, std::uint32_t ring_bytes) {
  if (!pending_.empty()) return false;
  link_.reset();
  mirror_ = std::move(mirror);
  writer_ = FrameRingWriter(ring_bytes, ring_bytes / 2);  // as the constructor's
  ring_ = {};
  refused_ = 0;
  return true;
}

wire::PublisherHello PublishClient::hello(std::string_view channel, std::uint32_t partition,
                                          std::uint64_t epoch, std::uint64_t producer_id,
                                          std::uint64_t producer_epoch, std::uint32_t ring_bytes,
                                          std::uint64_t generation) {
  wire::PublisherHello h{};
  h.ref.set(channel, partition, epoch);
  h.producer_id = producer_id;
  h.producer_epoch = producer_epoch;
  h.ring_bytes = ring_bytes;
  h.generation = generation;
  return h;
}

bool PublishClient::fits(std::uint32_t payload_bytes) const {
  return writer_.check_size(static_cast<std::uint32_t>(frame_size(payload_bytes))) == RingStatus::ok;
}

RingStatus PublishClient::place(std::uint32_t frame_bytes, std::uint32_t* pos) {
  // A pad goes into the image with the frames, and to the head with the
  // next flush.
  return writer_.place_st(
      frame_bytes,
      [this](std::uint32_t at, const RecordHeader& pad) {
        std::memcpy(mirror_->data() + at, &pad, sizeof pad);
        return true;
      },
      pos);
}

fabric::Errc PublishClient::stage(const RecordHeader& producer, std::span<const std::byte> payload) {
  if (pending_.full()) return fabric::Errc::backpressure;
  const auto fbytes = static_cast<std::uint32_t>(frame_size(static_cast<std::uint32_t>(payload.size())));
  std::uint32_t pos = 0;
  if (place(fbytes, &pos) != RingStatus::ok) return fabric::Errc::backpressure;  // wait for credit
  RecordHeader h = producer;
  h.sequence = next_seq_;
  write_frame(mirror_->data() + pos, h, payload);
  pending_.push_back(Pending{next_seq_, fbytes, pos});
  ++next_seq_;
  return fabric::Errc::ok;
}

fabric::Errc PublishClient::stage(const RecordHeader& producer, const Attributes& a, std::size_t block,
                                  std::span<const std::byte> payload) {
  if (pending_.full()) return fabric::Errc::backpressure;
  const auto fbytes = static_cast<std::uint32_t>(frame_size_with(block, payload.size()));
  std::uint32_t pos = 0;
  if (place(fbytes, &pos) != RingStatus::ok) return fabric::Errc::backpressure;  // wait for credit
  RecordHeader h = producer;
  h.sequence = next_seq_;
  write_frame(mirror_->data() + pos, h, a, payload);
  pending_.push_back(Pending{next_seq_, fbytes, pos});
  ++next_seq_;
  return fabric::Errc::ok;
}

fabric::Errc PublishClient::reserve(std::uint32_t region_bytes, Reservation* out) {
  if (pending_.full()) return fabric::Errc::backpressure;
  const auto fbytes = static_cast<std::uint32_t>(frame_size(region_bytes));
  // Placed on a copy of the writer: the real one moves at the commit, so an
  // abort has nothing to undo. A pad written here lies beyond the written
  // total (nothing reads or sends it); the commit writes it again.
  FrameRingWriter trial = writer_;
  std::uint32_t pos = 0;
  if (trial.place_st(
          fbytes,
          [this](std::uint32_t at, const RecordHeader& pad) {
            std::memcpy(mirror_->data() + at, &pad, sizeof pad);
            return true;
          },
          &pos) != RingStatus::ok) {
    return fabric::Errc::backpressure;  // wait for credit
  }
  *out = Reservation{pos, fbytes, region_bytes};
  return fabric::Errc::ok;
}

fabric::Errc PublishClient::commit_reserved(const RecordHeader& producer, const Reservation& r) {
  if (pending_.full()) return fabric::Errc::backpressure;
  // The same written total gives the same place (credit only adds room);
  // a ring that started over (fail_all) puts the frame at its start.
  std::uint32_t pos = 0;
  if (place(r.frame_bytes, &pos) != RingStatus::ok) return fabric::Errc::backpressure;
  std::byte* at = mirror_->data() + pos;
  if (pos != r.pos) std::memmove(at, mirror_->data() + r.pos, r.frame_bytes);
  RecordHeader h = producer;
  h.sequence = next_seq_;
  h.length = r.region;
  std::byte* region = at + sizeof h;
  const std::size_t pad = align_up(r.region) - r.region;
  if (pad != 0) std::memset(region + r.region, 0, pad);
  h.payload_crc = payload_checksum({region, r.region});
  h.header_crc = header_checksum(h);
  std::memcpy(at, &h, sizeof h);
  pending_.push_back(Pending{next_seq_, r.frame_bytes, pos});
  ++next_seq_;
  return fabric::Errc::ok;
}

void PublishClient::flush() {
  if (!link_) return;
  const fabric::PostBatch batch(link_->ep());  // a wrapped ring's two chunks: one doorbell
  while (writer_.flushed() < writer_.written()) {
    const FrameRingWriter::Chunk c = writer_.next_chunk();
    fabric::LocalBuffer src{mirror_.get(), c.pos, c.bytes};
    fabric::RemoteAddress dst{ring_, c.pos};
    const fabric::Errc e = c.last ? link_->ep().post_write_imm(kWrData, src, dst, writer_.immediate())
                                  : link_->ep().post_write(kWrData, src, dst);
    if (e != fabric::Errc::ok) return;  // send queue full: the caller flushes again
    writer_.flushed_st(writer_.flushed() + c.bytes);
  }
}

// Follows the head's view of this producer epoch: it holds every sequence
// below `next` and none from `next` on. Pending records from `next` on are
// resent as they are; if the head expects less than the first pending
// record (records failed after the retry timeout were never stored, or a
// new head has none of this producer's records), pending records are
// renumbered from `next`: the head holds none of them, so none can be
// stored twice. A head ahead of everything sent means another process
// publishes with this producer epoch: fenced.
bool PublishClient::attach(std::unique_ptr<Link> link, const wire::PublisherWelcome& welcome) {
  const std::uint64_t next = welcome.next_sequence;
  if (next > next_seq_) return false;
  const std::uint64_t first = !pending_.empty() ? pending_.front().seq : next_seq_;
  if (next < first) {
    for (std::uint32_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      p.seq = next + i;
      restamp_sequence(mirror_->data() + p.pos, p.seq);
    }
    next_seq_ = next + pending_.size();
  }
  link_ = std::move(link);
  ring_ = welcome.ring;
  refused_ = 0;  // every pending record goes to this head again
  resend();
  return true;
}

void PublishClient::resend() {
  // The new ring starts empty: lay the unacknowledged frames out again.
  // They were all in the ring at once (an ack that stored none of its run
  // gives no room back: on_ack), so from offset 0 they fit. (Once per
  // reconnect: the copy's allocation is not on the publishing path.)
  std::vector<std::byte> copy;
  for (std::uint32_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    const std::byte* f = mirror_->data() + p.pos;
    copy.insert(copy.end(), f, f + p.frame_bytes);
  }
  writer_.reset_st();
  std::size_t off = 0;
  for (std::uint32_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    (void)place(p.frame_bytes, &p.pos);  // they fit: see above
    std::memcpy(mirror_->data() + p.pos, copy.data() + off, p.frame_bytes);
    off += p.frame_bytes;
  }
  flush();
}

}  // namespace catena::chain
