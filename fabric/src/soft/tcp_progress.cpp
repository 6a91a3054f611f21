// TcpEndpoint's progress engine: reads frames and executes the peer's
// requests against our region table, writes queued frames, and turns the
// peer's acknowledgements and answers into our completions. Everything the
// peer sends is validated before it is used; a frame that makes no sense
// ends the connection, it never reaches memory.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/uio.h>

#include "soft/tcp_endpoint.hpp"

namespace catena::fabric::soft {
namespace {

constexpr std::uint32_t kHeaderSize = sizeof(FrameHeader);
constexpr int kMaxIov = 64;

bool valid_nak_status(std::uint8_t s) {
  return s != 0 && s <= static_cast<std::uint8_t>(WcStatus::general_error) &&
         s != static_cast<std::uint8_t>(WcStatus::flushed);
}

}  // namespace

int TcpEndpoint::progress_locked() {
  if (fatal_) {
    return 0;
  }
  ++passes_;
  const std::size_t completions = scq_.size() + rcq_.size();
  const bool owed_before = peer_done_ != ack_sent_;
  const bool got = receive_locked();
  if (!fatal_) {
    parse_locked();
  }
  if (!fatal_) {
    flush_tx_locked();
  }
  // An acknowledgement waits one pass for a frame of ours to ride on (a
  // reply usually follows within it); then it goes out on its own: when a
  // pass found nothing new, or when it was owed before this pass began (a
  // one-way stream, where every pass finds something).
  if ((!got || owed_before) && !fatal_ && peer_done_ != ack_sent_) {
    queue_ack_locked();
    flush_tx_locked();
  }
  const int work = (got ? 1 : 0) + static_cast<int>(scq_.size() + rcq_.size() - completions);
  if (work > 0 || out_.empty()) {
    idle_passes_ = 0;
    ack_request_after_ = kAckRequestPasses;
  } else if (++idle_passes_ >= ack_request_after_ && !fatal_ && !tx_.full()) {
    // The peer may owe us an ack it will not send until something wakes it.
    idle_passes_ = 0;
    ack_request_after_ = std::min(ack_request_after_ * 2, kMaxAckRequestPasses);
    queue_control_locked(FrameOp::ack_request, WcStatus::success, 0);
    flush_tx_locked();
  }
  watch_locked();
  return work;
}

bool TcpEndpoint::receive_locked() {
  if (rx_head_ == rx_tail_) {
    rx_head_ = rx_tail_ = 0;
  } else if (rx_head_ > 0 && rx_.size() - rx_tail_ < std::size_t{kHeaderSize} * 4) {
    std::memmove(rx_.data(), rx_.data() + rx_head_, rx_tail_ - rx_head_);
    rx_tail_ -= rx_head_;
    rx_head_ = 0;
  }
  if (rx_tail_ == rx_.size()) {
    return false;  // stalled on a receive; TCP holds the rest
  }
  ssize_t n = recv(fd_.get(), rx_.data() + rx_tail_, rx_.size() - rx_tail_, MSG_DONTWAIT);
  if (n > 0) {
    if (local_error_) {
      return true;  // we failed the peer; only its EOF matters now
    }
    rx_tail_ += static_cast<std::size_t>(n);
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return false;
  }
  link_down_locked(EndpointState::disconnected);
  return false;
}

void TcpEndpoint::parse_locked() {
  while (!fatal_) {
    if (rx_state_ == RxState::header) {
      if (rx_tail_ - rx_head_ < kHeaderSize) {
        return;
      }
      std::memcpy(&cur_, rx_.data() + rx_head_, kHeaderSize);
      rx_head_ += kHeaderSize;
      begin_frame_locked();
      continue;
    }
    if (rx_state_ == RxState::stalled) {
      if (rq_.empty()) {
        return;
      }
      begin_target_locked();
      continue;
    }
    const auto take = static_cast<std::uint32_t>(std::min<std::size_t>(rx_tail_ - rx_head_, cur_left_));
    if (take > 0) {
      take_payload_locked(rx_.data() + rx_head_, take);
      rx_head_ += take;
      cur_left_ -= take;
    }
    if (cur_left_ > 0) {
      return;
    }
    rx_state_ = RxState::header;
    finish_frame_locked();
  }
}

void TcpEndpoint::begin_frame_locked() {
  const auto op = static_cast<FrameOp>(cur_.op);
  if (cur_.magic != kFrameMagic || cur_.op == 0 || cur_.op > kMaxFrameOp || cur_.flags != 0 ||
      cur_.len > kMaxMessageSize || !accept_ack_locked(cur_.ack)) {
    link_down_locked(EndpointState::disconnected);  // not our protocol, or not in step with it
    return;
  }
  sink_ = Sink::discard;
  cur_left_ = 0;
  region_lost_ = false;
  if (is_request(op)) {
    if (cur_.seq != static_cast<std::uint32_t>(peer_seq_)) {
      link_down_locked(EndpointState::disconnected);
      return;
    }
    ++peer_seq_;
    cur_executes_ = !local_error_;
    if (!cur_executes_) {
      cur_left_ = op == FrameOp::read_req ? 0 : cur_.len;
      rx_state_ = RxState::payload;
      return;
    }
  }
  switch (op) {
    case FrameOp::write:
      cur_left_ = cur_.len;
      rx_state_ = RxState::payload;
      if (cur_.len == 0) {
        return;  // a zero-length write checks no key
      }
      if (own_view_.resolve(cur_.rkey, cur_.addr, cur_.len, kRemoteWrite, conn_tag_) == nullptr) {
        region_lost_ = true;
      } else {
        sink_ = Sink::region;
        cur_addr_ = cur_.addr;
      }
      return;
    case FrameOp::write_imm:
    case FrameOp::send:
      if (rq_.empty()) {
        rx_state_ = RxState::stalled;  // RNR: wait for post_recv, keep the stream in order
        return;
      }
      begin_target_locked();
      return;
    case FrameOp::read_req: {
      rx_state_ = RxState::header;
      std::byte* src =
          cur_.len == 0 ? nullptr : own_view_.resolve(cur_.rkey, cur_.addr, cur_.len, kRemoteRead, conn_tag_);
      if (cur_.len > 0 && src == nullptr) {
        nak_locked(WcStatus::remote_access_error);
        return;
      }
      if (tx_.full()) {
        break;  // more reads outstanding than the peer's queue allows
      }
      TxFrame& f = tx_.push();
      f.hdr = FrameHeader{
          kFrameMagic, static_cast<std::uint8_t>(FrameOp::read_resp), 0, 0, cur_.len, 0, 0, 0, cur_.seq, 0};
      f.payload = src;
      f.payload_len = cur_.len;
      f.sent = 0;
      f.guard_key = cur_.len == 0 ? 0 : cur_.rkey;
      f.guard_addr = cur_.addr;
      ++peer_done_;
      return;
    }
    case FrameOp::read_resp: {
      const std::uint64_t seq = our_seq(cur_.seq);
      if (seq >= issued_) {
        break;
      }
      OutReq& r = out_.at(seq - completed_);
      if (r.op != Opcode::read || r.answered || r.len != cur_.len) {
        break;
      }
      cur_req_ = seq;
      sink_ = Sink::buffer;
      cur_dst_ = r.read_dst;
      cur_left_ = cur_.len;
      rx_state_ = RxState::payload;
      return;
    }
    case FrameOp::nak: {
      const std::uint64_t seq = our_seq(cur_.seq);
      if (seq >= issued_ || cur_.len != 0 || !valid_nak_status(cur_.status)) {
        break;
      }
      rx_state_ = RxState::header;
      on_nak_locked(seq, static_cast<WcStatus>(cur_.status));
      return;
    }
    case FrameOp::ack:
    case FrameOp::ack_request:
      if (cur_.len != 0) {
        break;
      }
      rx_state_ = RxState::header;
      return;
  }
  link_down_locked(EndpointState::disconnected);
}

// A write_imm or send whose receive is now posted.
void TcpEndpoint::begin_target_locked() {
  rx_state_ = RxState::payload;
  cur_left_ = cur_.len;
  if (static_cast<FrameOp>(cur_.op) == FrameOp::write_imm) {
    if (cur_.len == 0) {
      return;
    }
    if (own_view_.resolve(cur_.rkey, cur_.addr, cur_.len, kRemoteWrite, conn_tag_) == nullptr) {
      region_lost_ = true;
    } else {
      sink_ = Sink::region;
      cur_addr_ = cur_.addr;
    }
    return;
  }
  const PostedRecv& r = rq_.front();
  if (cur_.len > r.len) {
    push_completion(rcq_, r.wr_id, Opcode::recv, WcStatus::local_length_error);
    rq_.pop();
    nak_locked(WcStatus::general_error);  // the initiator sees a remote invalid request
    cur_executes_ = false;
    return;
  }
  sink_ = Sink::buffer;
  cur_dst_ = r.buf;
}

void TcpEndpoint::take_payload_locked(const std::byte* src, std::uint32_t n) {
  if (sink_ == Sink::buffer) {
    std::memcpy(cur_dst_, src, n);
    cur_dst_ += n;
  } else if (sink_ == Sink::region) {
    // Re-checked under the guard for every chunk: a region freed or an
    // endpoint disconnected since the frame began takes no more bytes.
    enter_guarded();
    std::byte* dst =
        connected() ? own_view_.resolve(cur_.rkey, cur_addr_, n, kRemoteWrite, conn_tag_) : nullptr;
    if (dst != nullptr) {
      nic_write(dst, src, n);  // the region's owner may be polling these bytes
    }
    leave_guarded();
    if (dst == nullptr) {
      region_lost_ = true;
      sink_ = Sink::discard;
    }
    cur_addr_ += n;
  }
}

void TcpEndpoint::finish_frame_locked() {
  const auto op = static_cast<FrameOp>(cur_.op);
  if (op == FrameOp::read_resp) {
    out_.at(cur_req_ - completed_).answered = true;
    complete_answered_locked();
    return;
  }
  if (!cur_executes_) {
    return;
  }
  if (region_lost_) {
    nak_locked(WcStatus::remote_access_error);
    return;
  }
  if (op == FrameOp::write_imm || op == FrameOp::send) {
    const PostedRecv r = rq_.front();
    rq_.pop();
    const bool imm = op == FrameOp::write_imm;
    push_completion(rcq_, r.wr_id, imm ? Opcode::recv_write_imm : Opcode::recv, WcStatus::success, cur_.len,
                    imm ? cur_.imm : 0, imm);
  }
  ++peer_done_;
}

bool TcpEndpoint::accept_ack_locked(std::uint32_t ack) {
  const std::uint64_t full = acked_ + static_cast<std::uint32_t>(ack - static_cast<std::uint32_t>(acked_));
  if (full > issued_) {
    return false;
  }
  if (full > acked_) {
    acked_ = full;
    complete_answered_locked();
  }
  return true;
}

// Completes our requests in order: each once the peer executed it and, for
// a read, once its data arrived.
void TcpEndpoint::complete_answered_locked() {
  while (!out_.empty() && completed_ < acked_) {
    const OutReq& r = out_.front();
    if (r.op == Opcode::read && !r.answered) {
      return;
    }
    push_completion(scq_, r.wr_id, r.op, WcStatus::success);
    out_.pop();
    ++completed_;
  }
}

// We refuse the peer's current request: tell it, then both sides are in
// error. Our write side closes once the NAK is out; we read on until EOF.
void TcpEndpoint::nak_locked(WcStatus initiator_status) {
  if (tx_.full()) {
    link_down_locked(EndpointState::error);
    return;
  }
  queue_control_locked(FrameOp::nak, initiator_status, cur_.seq);
  shut_after_tx_ = true;
  enter_error_locked();
}

void TcpEndpoint::on_nak_locked(std::uint64_t seq, WcStatus status) {
  // The peer executed everything before `seq` (answers arrive in order).
  acked_ = std::max(acked_, seq);
  complete_answered_locked();
  if (completed_ == seq && !out_.empty()) {
    push_completion(scq_, out_.front().wr_id, out_.front().op, status);
    out_.pop();
    ++completed_;
  }
  enter_error_locked();
  link_down_locked(EndpointState::error);
}

void TcpEndpoint::queue_ack_locked() {
  // An unsent frame at the tail will carry the ack; otherwise send a bare one.
  if (!tx_.empty() && tx_.back().sent == 0) {
    return;
  }
  if (!tx_.full()) {
    queue_control_locked(FrameOp::ack, WcStatus::success, 0);
  }
}

// A frame without payload; the caller made sure there is room.
void TcpEndpoint::queue_control_locked(FrameOp op, WcStatus status, std::uint32_t seq) {
  TxFrame& f = tx_.push();
  f.hdr = FrameHeader{
      kFrameMagic, static_cast<std::uint8_t>(op), static_cast<std::uint8_t>(status), 0, 0, 0, 0, 0, seq, 0};
  f.payload = nullptr;
  f.payload_len = 0;
  f.sent = 0;
  f.guard_key = 0;
  f.guard_addr = 0;
}

void TcpEndpoint::flush_tx_locked() {
  while (!tx_.empty() && !fatal_) {
    iovec iov[kMaxIov];
    int cnt = 0;
    bool guarded = false;
    for (std::size_t i = 0; i < tx_.size() && cnt + 2 <= kMaxIov; ++i) {
      TxFrame& f = tx_.at(i);
      if (f.sent == 0) {
        f.hdr.ack = static_cast<std::uint32_t>(peer_done_);  // the freshest ack rides on every frame
        ack_sent_ = peer_done_;
      }
      if (f.sent < kHeaderSize) {
        iov[cnt++] = {reinterpret_cast<char*>(&f.hdr) + f.sent, kHeaderSize - f.sent};
      }
      const std::uint32_t done = f.sent > kHeaderSize ? f.sent - kHeaderSize : 0;
      if (f.payload_len > done) {
        iov[cnt++] = {const_cast<std::byte*>(f.payload) + done, f.payload_len - done};
        guarded = guarded || f.guard_key != 0;
      }
    }
    if (guarded) {
      enter_guarded();
      bool ok = connected();
      for (std::size_t i = 0; ok && i < tx_.size(); ++i) {
        const TxFrame& f = tx_.at(i);
        if (f.guard_key != 0) {
          ok = own_view_.resolve(f.guard_key, f.guard_addr, f.payload_len, kRemoteRead, conn_tag_) != nullptr;
        }
      }
      if (!ok) {
        // The region went away under a read response already begun: the
        // stream cannot be completed honestly.
        leave_guarded();
        link_down_locked(EndpointState::error);
        return;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(cnt);
    ssize_t n = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (guarded) {
      leave_guarded();
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        link_down_locked(EndpointState::disconnected);
      }
      return;
    }
    auto left = static_cast<std::size_t>(n);
    while (left > 0 && !tx_.empty()) {
      TxFrame& f = tx_.front();
      const std::size_t step = std::min<std::size_t>(left, kHeaderSize + f.payload_len - f.sent);
      f.sent += static_cast<std::uint32_t>(step);
      left -= step;
      if (f.sent < kHeaderSize + f.payload_len) {
        break;
      }
      tx_.pop();
    }
    if (!tx_.empty() && tx_.front().sent > 0) {
      return;  // the socket took less than offered: it is full
    }
  }
  if (tx_.empty() && shut_after_tx_ && !fatal_) {
    shut_after_tx_ = false;
    shutdown(fd_.get(), SHUT_WR);
  }
}

}  // namespace catena::fabric::soft
