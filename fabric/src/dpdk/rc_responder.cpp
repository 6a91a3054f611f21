// RcQp's responder: executes requests in PSN order. A duplicate (PSN before
// the expected one) is acknowledged again, or for a read answered again; a
// PSN past the expected one is a gap, NAKed once (PSN sequence error) until
// the expected PSN arrives. A key that does not name a live region of this
// connection with the right access and bounds is a NAK (remote access
// error) and changes no byte; a SEND or WRITE WITH IMMEDIATE that finds no
// posted receive is an RNR NAK and is executed when retransmitted. ACKs are
// coalesced: one per progress pass, for the newest PSN that asked for one.
#include <algorithm>

#include "dpdk/rc_engine.hpp"
#include "nic_write.hpp"

namespace catena::fabric::roce {

void RcQp::send_ack(std::uint8_t syndrome, std::uint32_t psn) noexcept {
  Packet p;
  p.bth.opcode = static_cast<std::uint8_t>(Op::acknowledge);
  p.bth.psn = psn;
  p.aeth = Aeth{syndrome, msn_ & kPsnMask};
  if (out_.send(path_, p)) ++stats_.packets_sent;  // a lost ACK is recovered like any loss
}

void RcQp::on_request(const Packet& p) noexcept {
  const std::int32_t d = psn_diff(p.bth.psn, epsn_);
  const auto op = static_cast<Op>(p.bth.opcode);
  if (d < 0) {
    ++stats_.duplicates;
    if (op == Op::read_request) {
      handle_read(p, true);
    } else {
      ack_pending_ = true;
    }
    return;
  }
  if (d > 0) {
    if (!nak_sent_) {
      send_ack(kAethNakPsnSeq, epsn_);
      ++stats_.seq_naks_sent;
      nak_sent_ = true;
    }
    return;
  }
  const OpLayout l = layout_of(p.bth.opcode);
  bool done;
  if (op == Op::read_request) {
    if (in_write_ || in_send_) {
      done = false;
      send_ack(kAethNakInvalidRequest, epsn_);
    } else {
      done = handle_read(p, false);
    }
    nak_sent_ = !done;
    return;
  }
  if (op >= Op::write_first && op <= Op::write_only_imm) {
    done = handle_write(p, l);
  } else {
    done = handle_send(p, l);
  }
  nak_sent_ = !done;  // a NAK was sent: stay quiet until the requester goes back
  if (!done) return;
  epsn_ = psn_add(epsn_, 1);
  if (p.bth.ack_req) ack_pending_ = true;
}

bool RcQp::handle_write(const Packet& p, const OpLayout& l) noexcept {
  if (l.first == in_write_ || in_send_) {  // FIRST/ONLY inside a message, or MIDDLE/LAST outside one
    send_ack(kAethNakInvalidRequest, epsn_);
    return false;
  }
  if (l.first) {
    wr_region_ = nullptr;
    wr_ptr_ = nullptr;
    if (p.reth.dma_len > 0) {
      wr_ptr_ =
          keys_.resolve(p.reth.rkey, p.reth.va, p.reth.dma_len, kRemoteWrite, &wr_region_, &wr_generation_);
      if (wr_ptr_ == nullptr) {
        send_ack(kAethNakRemoteAccess, epsn_);
        return false;
      }
    }
    wr_left_ = msg_len_ = p.reth.dma_len;
  } else if (wr_region_ != nullptr &&
             wr_region_->generation.load(std::memory_order_acquire) != wr_generation_) {
    // The region was destroyed in the middle of the message.
    send_ack(kAethNakRemoteAccess, epsn_);
    in_write_ = false;
    return false;
  }
  if (p.payload_len > wr_left_ || (l.last && p.payload_len != wr_left_) ||
      (!l.last && p.payload_len != cfg_.mtu)) {
    send_ack(kAethNakInvalidRequest, epsn_);
    in_write_ = false;
    return false;
  }
  if (l.imm && !recv_available()) {
    send_ack(static_cast<std::uint8_t>(kAethRnrNak | 1), epsn_);
    ++stats_.rnr_naks_sent;
    in_write_ = !l.first;  // the message resumes at this packet
    return false;
  }
  if (p.payload_len > 0) {
    nic_write(wr_ptr_, p.payload, p.payload_len);
    wr_ptr_ += p.payload_len;
    wr_left_ -= p.payload_len;
  }
  in_write_ = !l.last;
  if (l.last) {
    msn_ = psn_add(msn_, 1);
    if (l.imm) {
      push_recv_completion(rq_.slot(rq_take_), Opcode::recv_write_imm, WcStatus::success, msg_len_, p.imm,
                           true);
      ++rq_take_;
    }
  }
  return true;
}

bool RcQp::handle_send(const Packet& p, const OpLayout& l) noexcept {
  if (l.first == in_send_ || in_write_) {
    send_ack(kAethNakInvalidRequest, epsn_);
    return false;
  }
  if (l.first) {
    if (!recv_available()) {
      send_ack(static_cast<std::uint8_t>(kAethRnrNak | 1), epsn_);
      ++stats_.rnr_naks_sent;
      return false;
    }
    send_off_ = 0;
    send_overflow_ = false;
    in_send_ = true;
  }
  const RecvWqe& r = rq_.slot(rq_take_);
  if (r.region.gone()) {
    set_error(WcStatus::local_protection_error);
    return false;
  }
  if (!l.last && p.payload_len != cfg_.mtu) {
    send_ack(kAethNakInvalidRequest, epsn_);
    return false;
  }
  if (send_overflow_ || p.payload_len > r.length - send_off_) {
    send_overflow_ = true;
  } else if (p.payload_len > 0) {
    nic_write(r.buf + send_off_, p.payload, p.payload_len);
    send_off_ += p.payload_len;
  }
  if (!l.last) return true;
  in_send_ = false;
  msn_ = psn_add(msn_, 1);
  push_recv_completion(r, Opcode::recv, send_overflow_ ? WcStatus::local_length_error : WcStatus::success,
                       send_off_, p.imm, l.imm);
  ++rq_take_;
  if (send_overflow_) {
    // The message did not fit its receive: the requester's send fails too.
    send_ack(kAethNakInvalidRequest, epsn_);
    set_error(WcStatus::flushed);
    return false;
  }
  return true;
}

bool RcQp::handle_read(const Packet& p, bool duplicate) noexcept {
  const RegionRecord* region = nullptr;
  std::uint32_t generation = 0;
  const std::byte* src = nullptr;
  if (p.reth.dma_len > 0) {
    src = keys_.resolve(p.reth.rkey, p.reth.va, p.reth.dma_len, kRemoteRead, &region, &generation);
    if (src == nullptr) {
      if (!duplicate) send_ack(kAethNakRemoteAccess, epsn_);
      return false;
    }
  }
  if (reads_count_ == reads_.size()) return false;  // more than max_reads outstanding: drop, it comes again
  if (duplicate) {
    // Answered again from where the requester asks; a copy of it may still
    // be queued, which is harmless (the requester drops duplicates).
    ++stats_.duplicates;
  }
  ReadJob& j = reads_[(reads_head_ + reads_count_) % reads_.size()];
  j = ReadJob{p.bth.psn, p.bth.psn, src, p.reth.dma_len, 0, region, generation};
  ++reads_count_;
  if (!duplicate) {
    epsn_ = psn_add(epsn_, packets_of(p.reth.dma_len));
    msn_ = psn_add(msn_, 1);
  }
  return true;
}

int RcQp::send_read_responses() noexcept {
  int sent = 0;
  while (reads_count_ > 0 && sent < static_cast<int>(cfg_.read_burst)) {
    ReadJob& j = reads_[reads_head_];
    if (j.region != nullptr && j.region->generation.load(std::memory_order_acquire) != j.generation) {
      // The region went away while the read was answered: the requester
      // never gets the rest and retries until it gives up.
      reads_head_ = (reads_head_ + 1) % reads_.size();
      --reads_count_;
      continue;
    }
    const std::uint32_t npkts = packets_of(j.length);
    const auto index = static_cast<std::uint32_t>(psn_diff(j.psn, j.first_psn));
    const bool first = index == 0;
    const bool last = index + 1 == npkts;
    Packet p;
    Op op = first && last ? Op::read_response_only
            : first       ? Op::read_response_first
            : last        ? Op::read_response_last
                          : Op::read_response_middle;
    p.bth.opcode = static_cast<std::uint8_t>(op);
    p.bth.psn = j.psn;
    p.aeth = Aeth{kAethAck, msn_ & kPsnMask};
    p.payload = j.src == nullptr ? nullptr : j.src + j.offset;
    p.payload_len = std::min(cfg_.mtu, j.length - j.offset);
    if (!out_.send(path_, p)) break;
    ++stats_.packets_sent;
    ++sent;
    j.offset += p.payload_len;
    j.psn = psn_add(j.psn, 1);
    if (last) {
      reads_head_ = (reads_head_ + 1) % reads_.size();
      --reads_count_;
    }
  }
  return sent;
}

}  // namespace catena::fabric::roce
