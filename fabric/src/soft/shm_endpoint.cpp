#include "soft/shm_endpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <utility>

namespace catena::fabric::soft {
namespace {

bool valid_status(std::uint8_t s) {
  return s <= static_cast<std::uint8_t>(WcStatus::general_error);
}

}  // namespace

Result<std::unique_ptr<Endpoint>> ShmEndpoint::create(std::shared_ptr<Core> core, UniqueFd control,
                                                      const EndpointCaps& caps, DomainId domain,
                                                      OwnChannel own, ShmPeer peer) {
  ConnectionManager& mgr = core->manager();
  const int fd = control.get();
  std::unique_ptr<ShmEndpoint> ep(
      new ShmEndpoint(std::move(core), std::move(control), caps, domain, std::move(own), std::move(peer)));
  // Level-triggered: any readability on a control socket is EOF, an error or
  // a protocol violation, and each ends the connection.
  if (auto r = mgr.add(fd, EPOLLIN | EPOLLRDHUP, ep.get()); !r) {
    return r.error();
  }
  return std::unique_ptr<Endpoint>(std::move(ep));
}

ShmEndpoint::ShmEndpoint(std::shared_ptr<Core> core, UniqueFd control, const EndpointCaps& caps,
                         DomainId domain, OwnChannel own, ShmPeer peer)
    : Endpoint(domain),
      core_(std::move(core)),
      peer_(std::move(peer)),
      own_(std::move(own)),
      control_(std::move(control)),
      caps_(caps),
      peer_address_(peer_name(control_.get())),
      own_view_(core_->view()),
      peer_view_(peer_.arena->view()),
      own_block_(own_.block()),
      own_slots_(own_.slots()),
      own_mask_(own_.capacity() - 1),
      peer_block_(reinterpret_cast<ChannelBlock*>(peer_view_.base + peer_.channel_offset)),
      peer_slots_(reinterpret_cast<RecvSlot*>(peer_view_.base + peer_.channel_offset + sizeof(ChannelBlock))),
      peer_mask_(peer_.channel_capacity - 1),
      peer_token_(peer_.token),
      rq_wr_id_(own_.capacity()),
      rq_len_(own_.capacity()),
      pending_(caps.send_queue_depth),
      scq_(caps.send_queue_depth) {}

ShmEndpoint::~ShmEndpoint() {
  core_->manager().remove(watch_token());
  fence_peer();
  core_->forget_connection(own_.token());
}

// The peer checks its accesses against our channel's token (peer_token_ on
// its side): keys given to it carry the same tag.
Result<RemoteRegion> ShmEndpoint::expose_region(const MemoryRegion& mr) {
  return core_->expose(mr, own_.token());
}

// ---------------------------------------------------------------- initiator

Errc ShmEndpoint::post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) {
  std::lock_guard guard(lock_);
  return post_locked(Opcode::write, wr_id, src, dst.offset, dst.region.rkey, 0);
}

Errc ShmEndpoint::post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst, std::uint32_t imm) {
  std::lock_guard guard(lock_);
  return post_locked(Opcode::write_imm, wr_id, src, dst.offset, dst.region.rkey, imm);
}

Errc ShmEndpoint::post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) {
  std::lock_guard guard(lock_);
  return post_locked(Opcode::read, wr_id, dst, src.offset, src.region.rkey, 0);
}

Errc ShmEndpoint::post_send(std::uint64_t wr_id, LocalBuffer src) {
  std::lock_guard guard(lock_);
  return post_locked(Opcode::send, wr_id, src, 0, 0, 0);
}

Errc ShmEndpoint::post_locked(Opcode op, std::uint64_t wr_id, LocalBuffer local, std::uint64_t remote_addr,
                              std::uint32_t rkey, std::uint32_t imm) {
  if (scq_.size() + pending_.size() >= caps_.send_queue_depth) {
    return Errc::backpressure;
  }
  Wr w;
  if (Errc e = resolve_local(own_view_, domain(), local, &w.local); e != Errc::ok) {
    return e;
  }
  w.wr_id = wr_id;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  w.len = local.length;
  w.imm = imm;
  w.op = op;
  if (pending_.empty()) {
    if (!connected()) {
      finish_locked(w, Outcome::closed, WcStatus::flushed);
      note_queued_locked();
      return Errc::ok;
    }
    WcStatus status = WcStatus::success;
    Outcome o = execute_locked(w, &status);
    if (o != Outcome::rnr) {
      finish_locked(w, o, status);
      note_queued_locked();
      return Errc::ok;
    }
  }
  PendingWr& p = pending_.push();
  p.wr = w;
  if (op != Opcode::read && w.len > 0 && w.len <= caps_.max_inline) {
    std::memcpy(p.inline_data, w.local, w.len);
    p.wr.local = p.inline_data;
  }
  note_queued_locked();
  return Errc::ok;
}

ShmEndpoint::Outcome ShmEndpoint::execute_locked(const Wr& w, WcStatus* status) {
  enter_peer_locked();
  // The peer clears its token to fence us out; checked after entering, so
  // either we see it cleared or the peer waits for us to leave.
  if (peer_block_->token.load(std::memory_order_seq_cst) != peer_token_) {
    leave_peer_locked();
    *status = WcStatus::flushed;
    return Outcome::closed;
  }
  Outcome out = Outcome::done;
  switch (w.op) {
    case Opcode::write:
    case Opcode::read: {
      if (w.len == 0) {
        break;  // as on a NIC: a zero-length access checks no key
      }
      const bool is_write = w.op == Opcode::write;
      std::byte* r = peer_view_.resolve(w.rkey, w.remote_addr, w.len, is_write ? kRemoteWrite : kRemoteRead,
                                        peer_token_);
      if (r == nullptr) {
        *status = WcStatus::remote_access_error;
        out = Outcome::failed;
      } else if (is_write) {
        std::memcpy(r, w.local, w.len);
      } else {
        std::memcpy(w.local, r, w.len);
      }
      break;
    }
    case Opcode::write_imm:
    case Opcode::send: {
      RecvSlot& slot = peer_slots_[peer_next_ & peer_mask_];
      if (slot.seq.load(std::memory_order_acquire) != 2 * peer_next_ + 1) {
        // Ask the peer to kick us when it posts a receive, then look once
        // more: a receive posted before our flag was visible sends no kick.
        peer_block_->rnr_waiting.store(1, std::memory_order_seq_cst);
        if (slot.seq.load(std::memory_order_seq_cst) != 2 * peer_next_ + 1) {
          out = Outcome::rnr;
          break;
        }
      }
      WcStatus target = WcStatus::success;
      if (w.op == Opcode::write_imm) {
        if (w.len > 0) {
          std::byte* r = peer_view_.resolve(w.rkey, w.remote_addr, w.len, kRemoteWrite, peer_token_);
          if (r == nullptr) {
            // The receive stays posted; both sides go to error.
            *status = WcStatus::remote_access_error;
            out = Outcome::failed;
            break;
          }
          std::memcpy(r, w.local, w.len);
        }
      } else if (w.len > slot.buf_len) {
        target = WcStatus::local_length_error;
      } else if (w.len > 0) {
        std::byte* r = peer_view_.resolve(slot.buf_key, slot.buf_addr, w.len, 0, peer_token_);
        if (r == nullptr) {
          target = WcStatus::local_protection_error;
        } else {
          std::memcpy(r, w.local, w.len);
        }
      }
      slot.byte_len = target == WcStatus::success ? w.len : 0;
      slot.imm = w.imm;
      slot.has_imm = w.op == Opcode::write_imm ? 1 : 0;
      slot.opcode =
          static_cast<std::uint8_t>(w.op == Opcode::write_imm ? Opcode::recv_write_imm : Opcode::recv);
      slot.status = static_cast<std::uint8_t>(target);
      slot.seq.store(2 * peer_next_ + 2, std::memory_order_release);
      ++peer_next_;
      if (target != WcStatus::success) {
        // The receiver failed our request (a NIC reports a remote invalid
        // request); it completes its receive with the reason.
        *status = WcStatus::general_error;
        out = Outcome::failed;
      }
      break;
    }
    default:
      *status = WcStatus::general_error;
      out = Outcome::failed;
      break;
  }
  leave_peer_locked();
  return out;
}

void ShmEndpoint::finish_locked(const Wr& w, Outcome o, WcStatus status) {
  Completion& c = scq_.push();
  c = Completion{};
  c.wr_id = w.wr_id;
  c.opcode = w.op;
  c.status = o == Outcome::done ? WcStatus::success : status;
  if (o == Outcome::failed) {
    fail(EndpointState::error);
  }
  if (o == Outcome::closed) {
    fail(EndpointState::disconnected);
  }
}

void ShmEndpoint::drain_locked() {
  while (!pending_.empty()) {
    const Wr& w = pending_.front().wr;
    WcStatus status = WcStatus::flushed;
    Outcome o = connected() ? execute_locked(w, &status) : Outcome::closed;
    if (o == Outcome::rnr) {
      return;
    }
    finish_locked(w, o, status);
    pending_.pop();
  }
}

int ShmEndpoint::poll_send(Completion* out, int max) {
  // Nothing waiting and no completion to hand out: no lock taken (the
  // data-plane thread polls every endpoint it owns on every pass).
  if (queued_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard guard(lock_);
  if (!pending_.empty()) {
    drain_locked();
  }
  int n = 0;
  while (n < max && !scq_.empty()) {
    out[n++] = scq_.front();
    scq_.pop();
  }
  note_queued_locked();
  return n;
}

// ------------------------------------------------------------------- target

Errc ShmEndpoint::post_recv(std::uint64_t wr_id, LocalBuffer dst) {
  if (rq_posted_ - rq_done_ >= caps_.recv_queue_depth) {
    return Errc::backpressure;
  }
  std::byte* p = nullptr;
  if (Errc e = resolve_local(own_view_, domain(), dst, &p); e != Errc::ok) {
    return e;
  }
  if (p != nullptr) core_->note_receives(dst.mr->lkey());
  const std::uint64_t i = rq_posted_ & own_mask_;
  RecvSlot& slot = own_slots_[i];
  slot.buf_addr = dst.offset;
  slot.buf_len = dst.length;
  slot.buf_key = dst.length == 0 ? 0 : dst.mr->lkey();
  rq_wr_id_[i] = wr_id;
  rq_len_[i] = dst.length;
  // Sequentially consistent, pairing with execute_locked(): either the peer
  // sees this receive or we see its flag.
  slot.seq.store(2 * rq_posted_ + 1, std::memory_order_seq_cst);
  ++rq_posted_;
  if (own_block_->rnr_waiting.load(std::memory_order_seq_cst) != 0 &&
      own_block_->rnr_waiting.exchange(0, std::memory_order_relaxed) != 0) {
    (void)!send(control_.get(), &kKickByte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  return Errc::ok;
}

int ShmEndpoint::deliver_st(Completion* out, int max) {
  int n = 0;
  while (n < max && rq_done_ < rq_posted_) {
    const std::uint64_t i = rq_done_ & own_mask_;
    const RecvSlot& slot = own_slots_[i];
    if (slot.seq.load(std::memory_order_acquire) != 2 * rq_done_ + 2) {
      break;
    }
    Completion& c = out[n++];
    c = Completion{};
    c.wr_id = rq_wr_id_[i];
    c.byte_len = slot.byte_len;
    c.imm = slot.imm;
    c.has_imm = slot.has_imm != 0;
    const auto op = static_cast<Opcode>(slot.opcode);
    // The peer wrote this slot: trust nothing it says that we can check.
    if ((op == Opcode::recv || op == Opcode::recv_write_imm) && valid_status(slot.status) &&
        (op == Opcode::recv_write_imm || c.byte_len <= rq_len_[i]) &&
        c.has_imm == (op == Opcode::recv_write_imm)) {
      c.opcode = op;
      c.status = static_cast<WcStatus>(slot.status);
    } else {
      c.opcode = Opcode::recv;
      c.status = WcStatus::general_error;
    }
    ++rq_done_;
    if (c.status != WcStatus::success) {
      fail(EndpointState::error);
    }
  }
  return n;
}

int ShmEndpoint::poll_recv(Completion* out, int max) {
  int n = deliver_st(out, max);
  if (n < max && rq_done_ < rq_posted_ && !connected()) {
    // Once the peer is fenced out nothing more can arrive: hand out what it
    // completed before, then flush the rest.
    fence_peer_once();
    n += deliver_st(out + n, max - n);
    while (n < max && rq_done_ < rq_posted_) {
      Completion& c = out[n++];
      c = Completion{};
      c.wr_id = rq_wr_id_[rq_done_ & own_mask_];
      c.opcode = Opcode::recv;
      c.status = WcStatus::flushed;
      ++rq_done_;
    }
  }
  return n;
}

// --------------------------------------------------------------- lifecycle

EndpointEvent ShmEndpoint::poll_event() {
  if (!event_reported_ && peer_.guard->guard().stalled.load(std::memory_order_relaxed) != 0) {
    // A revocation gave up waiting for the peer: it is cut off.
    fail(EndpointState::disconnected);
    link_dead_.store(true, std::memory_order_release);
  }
  if (!event_reported_ && link_dead_.load(std::memory_order_acquire)) {
    event_reported_ = true;
    return EndpointEvent::disconnected;
  }
  return EndpointEvent::none;
}

void ShmEndpoint::fail(EndpointState to) {
  std::uint8_t expected = kConnected;
  state_.compare_exchange_strong(expected, static_cast<std::uint8_t>(to));
  fence_peer_once();
}

void ShmEndpoint::fence_peer_once() {
  if (!peer_fenced_.exchange(true)) {
    fence_peer();
  }
}

// Closes our arena to the peer and waits until it has left any access it was
// in; then tells it (EOF on the control socket). Idempotent, any thread.
void ShmEndpoint::fence_peer() {
  own_block_->token.store(0, std::memory_order_seq_cst);
  (void)wait_quiescent(peer_.guard->guard(), std::chrono::steady_clock::now() + kRevokeWait);
  shutdown(control_.get(), SHUT_RDWR);
}

void ShmEndpoint::disconnect() {
  std::uint8_t expected = kConnected;
  state_.compare_exchange_strong(expected, static_cast<std::uint8_t>(EndpointState::error));
  fence_peer();
}

void ShmEndpoint::on_ready(std::uint32_t events) {
  char bytes[64];
  ssize_t n = recv(control_.get(), bytes, sizeof bytes, MSG_DONTWAIT);
  if (n > 0 && std::all_of(bytes, bytes + n, [](char b) { return b == kKickByte; })) {
    // The peer posted a receive one of our requests is waiting for.
    std::lock_guard guard(lock_);
    drain_locked();
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR) && (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) == 0) {
    return;
  }
  // EOF, an error, or bytes nobody sends on a control socket: the link is
  // gone either way.
  std::uint8_t expected = kConnected;
  state_.compare_exchange_strong(expected, static_cast<std::uint8_t>(EndpointState::disconnected));
  link_dead_.store(true, std::memory_order_release);
  if (n > 0) {
    shutdown(control_.get(), SHUT_RDWR);
  }
  core_->manager().remove(watch_token());
}

}  // namespace catena::fabric::soft
