// RcQp's requester: gives each work request its PSNs, segments it at the
// path MTU, and completes it once acknowledged (writes, sends) or once its
// data arrived (reads). ACKs are cumulative; a NAK (PSN sequence error), a
// timeout or a gap in read responses rewinds transmission to the oldest
// missing PSN (go-back-N); an RNR NAK waits and rewinds, forever, as
// rnr_retry = 7 does on a NIC; retry_limit timeouts without progress end in
// retry_exceeded; a remote access or invalid-request NAK fails the request
// and moves the QP to the error state.
#include <algorithm>
#include <cstring>

#include "dpdk/rc_engine.hpp"
#include "nic_write.hpp"

namespace catena::fabric::roce {

void RcQp::take_new_requests() noexcept {
  const std::uint64_t tail = sq_.tail();
  while (cur_ == sq_take_ && sq_take_ != tail) {
    SendWqe& w = sq_.slot(sq_take_);
    w.first_psn = next_psn_;
    w.last_psn = psn_add(next_psn_, packets_of(w.length) - 1);
    w.read_next = w.first_psn;
    w.issued = false;
    next_psn_ = psn_add(w.last_psn, 1);
    ++sq_take_;
  }
}

int RcQp::transmit(std::uint64_t now) noexcept {
  if (rnr_until_ != 0) {
    if (now < rnr_until_) return 0;
    rnr_until_ = 0;
  }
  int sent = 0;
  for (;;) {
    take_new_requests();
    if (cur_ == sq_take_) break;
    if (psn_diff(cur_psn_, una_) >= static_cast<std::int32_t>(cfg_.window)) break;
    SendWqe& w = sq_.slot(cur_);
    if (w.op == SendOp::read && !w.issued && reads_in_flight_ >= cfg_.max_reads) break;
    if (!transmit_one(w, now)) break;
    ++sent;
  }
  return sent;
}

bool RcQp::transmit_one(SendWqe& w, std::uint64_t now) noexcept {
  Packet p;
  p.bth.psn = cur_psn_;
  const auto index = static_cast<std::uint32_t>(psn_diff(cur_psn_, w.first_psn));
  const std::uint64_t offset = static_cast<std::uint64_t>(index) * cfg_.mtu;
  if (w.op == SendOp::read) {
    p.bth.opcode = static_cast<std::uint8_t>(Op::read_request);
    p.bth.ack_req = true;
    p.reth.va = w.remote_offset + offset;
    p.reth.rkey = w.rkey;
    p.reth.dma_len = static_cast<std::uint32_t>(w.length - std::min<std::uint64_t>(offset, w.length));
    if (!out_.send(path_, p)) return false;
    if (!w.issued) ++reads_in_flight_;
    w.issued = true;
    cur_psn_ = psn_add(w.last_psn, 1);
    ++cur_;
  } else {
    const std::uint32_t npkts = packets_of(w.length);
    const bool first = index == 0;
    const bool last = index + 1 == npkts;
    const auto chunk = static_cast<std::uint32_t>(std::min<std::uint64_t>(cfg_.mtu, w.length - offset));
    const bool write = w.op != SendOp::send;
    const bool imm = w.op == SendOp::write_imm;
    Op op;
    if (first && last) {
      op = write ? (imm ? Op::write_only_imm : Op::write_only) : Op::send_only;
    } else if (first) {
      op = write ? Op::write_first : Op::send_first;
    } else if (last) {
      op = write ? (imm ? Op::write_last_imm : Op::write_last) : Op::send_last;
    } else {
      op = write ? Op::write_middle : Op::send_middle;
    }
    p.bth.opcode = static_cast<std::uint8_t>(op);
    p.bth.ack_req = last || (index + 1) % cfg_.ack_every == 0;
    if (first && write) p.reth = Reth{w.remote_offset, w.rkey, w.length};
    p.imm = w.imm;
    if (w.region.gone()) {
      set_error(WcStatus::local_protection_error);
      return false;
    }
    p.payload = w.local + offset;
    p.payload_len = chunk;
    if (!out_.send(path_, p)) return false;
    cur_psn_ = psn_add(cur_psn_, 1);
    if (last) ++cur_;
  }
  ++stats_.packets_sent;
  if (timer_deadline_ == 0) timer_deadline_ = now + cfg_.ack_timeout_ns;
  return true;
}

SendWqe* RcQp::oldest_incomplete_read() noexcept {
  for (std::uint64_t i = sq_done_; i != sq_take_; ++i) {
    SendWqe& w = sq_.slot(i);
    if (w.op == SendOp::read && psn_diff(w.read_next, w.last_psn) <= 0) return &w;
  }
  return nullptr;
}

// Everything up to and including `psn` reached the responder. A read whose
// responses have not all arrived stops the advance at its first missing
// response: those responses were lost and the read is asked for again.
void RcQp::acknowledge_through(std::uint32_t psn) noexcept {
  if (psn_diff(psn, una_) < 0 || psn_diff(psn, next_psn_) >= 0) return;  // stale, or never sent
  std::uint32_t una = psn_add(psn, 1);
  bool lost_read = false;
  if (SendWqe* r = oldest_incomplete_read(); r != nullptr && psn_diff(psn, r->read_next) >= 0) {
    una = r->read_next;
    lost_read = true;
  }
  if (psn_diff(una, una_) > 0) {
    una_ = una;
    retries_ = 0;
    timer_deadline_ = 0;
  }
  complete_done();
  if (lost_read) rewind(una_);
}

void RcQp::complete_done() noexcept {
  while (sq_done_ != sq_take_) {
    SendWqe& w = sq_.slot(sq_done_);
    const bool done =
        w.op == SendOp::read ? psn_diff(w.read_next, w.last_psn) > 0 : psn_diff(una_, w.last_psn) > 0;
    if (!done) break;
    if (w.op == SendOp::read) --reads_in_flight_;
    push_send_completion(w, WcStatus::success);
    ++sq_done_;
  }
  if (psn_diff(cur_psn_, una_) < 0 || cur_ < sq_done_) rewind(una_);
  const bool in_flight = sq_done_ != cur_ || psn_diff(cur_psn_, una_) > 0;
  if (in_flight && timer_deadline_ == 0) timer_deadline_ = clock_.now_ns() + cfg_.ack_timeout_ns;
}

// Go back to `psn`: the next packet transmitted is the one with that PSN
// (for a read, a request for the rest of its data).
void RcQp::rewind(std::uint32_t psn) noexcept {
  for (std::uint64_t i = sq_done_; i != sq_take_; ++i) {
    SendWqe& w = sq_.slot(i);
    if (psn_diff(psn, w.last_psn) <= 0) {
      if (w.op == SendOp::read && psn_diff(psn, w.read_next) < 0) psn = w.read_next;
      if (i != cur_ || psn != cur_psn_) ++stats_.retransmits;
      cur_ = i;
      cur_psn_ = psn_diff(psn, w.first_psn) < 0 ? w.first_psn : psn;
      return;
    }
  }
  cur_ = sq_take_;
  cur_psn_ = next_psn_;
}

void RcQp::on_ack(const Packet& p) noexcept {
  const std::uint8_t s = p.aeth.syndrome;
  const std::uint32_t psn = p.bth.psn;
  if (aeth_is_ack(s)) {
    acknowledge_through(psn);
    return;
  }
  // A NAK names the PSN it refers to; everything before it arrived.
  if (psn_diff(psn, una_) < 0 || psn_diff(psn, next_psn_) >= 0) return;
  acknowledge_through(psn_add(psn, kPsnMask));
  // A NAK is an answer: the peer is alive, so timeouts start counting again
  // (an RNR wait can be long, and a slow peer's NAKs may come late).
  retries_ = 0;
  if (aeth_is_rnr(s)) {
    ++stats_.rnr_naks_received;
    rnr_until_ = clock_.now_ns() + cfg_.rnr_delay_ns;
    timer_deadline_ = 0;
    rewind(psn);
    return;
  }
  if (s == kAethNakPsnSeq) {
    rewind(psn);
    return;
  }
  // Remote access error, invalid request, remote operational error: the
  // request at `psn` fails; the QP goes to the error state.
  set_error(s == kAethNakRemoteAccess ? WcStatus::remote_access_error : WcStatus::general_error);
}

void RcQp::on_read_response(const Packet& p) noexcept {
  SendWqe* r = oldest_incomplete_read();
  if (r == nullptr) return;
  const std::uint32_t psn = p.bth.psn;
  if (psn_diff(psn, r->first_psn) < 0 || psn_diff(psn, r->last_psn) > 0) return;
  const std::int32_t ahead = psn_diff(psn, r->read_next);
  if (ahead < 0) {
    ++stats_.duplicates;
    return;
  }
  if (ahead > 0) {
    // A response went missing: ask again from it, once per gap.
    if (!read_rewound_ || read_rewound_at_ != r->read_next) {
      read_rewound_ = true;
      read_rewound_at_ = r->read_next;
      acknowledge_through(psn_add(r->read_next, kPsnMask));
      rewind(r->read_next);
    }
    return;
  }
  const auto index = static_cast<std::uint32_t>(psn_diff(psn, r->first_psn));
  const std::uint64_t offset = static_cast<std::uint64_t>(index) * cfg_.mtu;
  const auto expect = static_cast<std::uint32_t>(std::min<std::uint64_t>(cfg_.mtu, r->length - offset));
  const OpLayout l = layout_of(p.bth.opcode);
  const bool last = psn == r->last_psn;
  // A read asked for again part-way starts over at FIRST (as rxe answers
  // it), so only where it ends and how much each packet carries are checked.
  if (p.payload_len != (r->length == 0 ? 0 : expect) || l.last != last) {
    set_error(WcStatus::general_error);  // the responder broke the protocol
    return;
  }
  if (r->region.gone()) {
    set_error(WcStatus::local_protection_error);
    return;
  }
  if (p.payload_len > 0) nic_write(r->local + offset, p.payload, p.payload_len);
  r->read_next = psn_add(psn, 1);
  read_rewound_ = false;
  if (psn_diff(psn_add(psn, 1), una_) > 0) {
    una_ = psn_add(psn, 1);
    retries_ = 0;
    timer_deadline_ = 0;
  }
  complete_done();
}

void RcQp::check_timer(std::uint64_t now) noexcept {
  if (timer_deadline_ == 0 || now < timer_deadline_ || rnr_until_ != 0) return;
  const bool in_flight = sq_done_ != cur_ || psn_diff(cur_psn_, una_) > 0;
  if (!in_flight) {
    timer_deadline_ = 0;
    return;
  }
  ++stats_.timeouts;
  if (retries_ >= cfg_.retry_limit) {
    set_error(WcStatus::retry_exceeded);
    return;
  }
  ++retries_;
  rewind(una_);
  const std::uint64_t backoff =
      std::min(cfg_.ack_timeout_ns << std::min(retries_, 20u), cfg_.max_ack_timeout_ns);
  timer_deadline_ = now + backoff;
}

}  // namespace catena::fabric::roce
