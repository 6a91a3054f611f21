// TcpEndpoint: posting, polling, lifecycle and the connection manager's
// hand-over. The progress engine itself is in tcp_progress.cpp.
#include "soft/tcp_endpoint.hpp"

#include <cstring>
#include <mutex>
#include <sys/socket.h>
#include <utility>

namespace catena::fabric::soft {
namespace {

constexpr std::uint32_t kWatchIn = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;

}  // namespace

Result<std::unique_ptr<Endpoint>> TcpEndpoint::create(std::shared_ptr<Core> core, UniqueFd fd,
                                                      const EndpointCaps& caps, DomainId domain,
                                                      std::uint32_t peer_send_depth) {
  ConnectionManager& mgr = core->manager();
  const int raw = fd.get();
  std::unique_ptr<TcpEndpoint> ep(
      new TcpEndpoint(std::move(core), std::move(fd), caps, domain, peer_send_depth));
  if (auto r = mgr.add(raw, kWatchIn, ep.get()); !r) {
    return r.error();
  }
  return std::unique_ptr<Endpoint>(std::move(ep));
}

TcpEndpoint::TcpEndpoint(std::shared_ptr<Core> core, UniqueFd fd, const EndpointCaps& caps, DomainId domain,
                         std::uint32_t peer_send_depth)
    : Endpoint(domain),
      core_(std::move(core)),
      fd_(std::move(fd)),
      caps_(caps),
      peer_address_(peer_name(fd_.get())),
      own_view_(core_->view()),
      conn_tag_(core_->new_connection_tag()),
      guard_(*core_, &busy_, 0, 0),  // our progress thread: it may reach any region
      out_(caps.send_queue_depth),
      scq_(caps.send_queue_depth),
      rq_(caps.recv_queue_depth),
      rcq_(caps.recv_queue_depth),
      // Room for all our requests, an answer to every request the peer may
      // have outstanding, and acks and ack requests: the engine never has to
      // stop reading because it cannot queue an answer.
      tx_(caps.send_queue_depth + peer_send_depth + 4),
      rx_(kRxBufferSize) {}

TcpEndpoint::~TcpEndpoint() {
  core_->manager().remove(watch_token());
  core_->forget_connection(conn_tag_);
}

Result<RemoteRegion> TcpEndpoint::expose_region(const MemoryRegion& mr) {
  return core_->expose(mr, conn_tag_);
}

// ---------------------------------------------------------------- posting

Errc TcpEndpoint::post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) {
  std::lock_guard g(lock_);
  return post_locked(FrameOp::write, Opcode::write, wr_id, src, dst.offset, dst.region.rkey, 0);
}

Errc TcpEndpoint::post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst, std::uint32_t imm) {
  std::lock_guard g(lock_);
  return post_locked(FrameOp::write_imm, Opcode::write_imm, wr_id, src, dst.offset, dst.region.rkey, imm);
}

Errc TcpEndpoint::post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) {
  std::lock_guard g(lock_);
  return post_locked(FrameOp::read_req, Opcode::read, wr_id, dst, src.offset, src.region.rkey, 0);
}

Errc TcpEndpoint::post_send(std::uint64_t wr_id, LocalBuffer src) {
  std::lock_guard g(lock_);
  return post_locked(FrameOp::send, Opcode::send, wr_id, src, 0, 0, 0);
}

Errc TcpEndpoint::post_locked(FrameOp fop, Opcode op, std::uint64_t wr_id, LocalBuffer local,
                              std::uint64_t addr, std::uint32_t rkey, std::uint32_t imm) {
  if (out_.size() + scq_.size() >= caps_.send_queue_depth) {
    return Errc::backpressure;
  }
  std::byte* p = nullptr;
  if (Errc e = resolve_local(own_view_, domain(), local, &p); e != Errc::ok) {
    return e;
  }
  if (!connected()) {
    // After our own error the queues are already flushed; after a
    // disconnect() from another thread settle them first, so completions
    // stay in posting order.
    if (!local_error_) {
      link_down_locked(EndpointState::error);
    }
    push_completion(scq_, wr_id, op, WcStatus::flushed);
    return Errc::ok;
  }
  OutReq& r = out_.push();
  r.wr_id = wr_id;
  r.op = op;
  r.len = local.length;
  r.answered = false;
  r.read_dst = fop == FrameOp::read_req ? p : nullptr;
  const std::byte* payload = p;
  if (fop != FrameOp::read_req && local.length > 0 && local.length <= caps_.max_inline) {
    std::memcpy(r.inline_data, p, local.length);
    payload = r.inline_data;
  }
  TxFrame& f = tx_.push();
  f.hdr = FrameHeader{kFrameMagic, static_cast<std::uint8_t>(fop),      0, 0, local.length, rkey, imm,
                      addr,        static_cast<std::uint32_t>(issued_), 0};
  f.payload = fop == FrameOp::read_req ? nullptr : payload;
  f.payload_len = fop == FrameOp::read_req ? 0 : local.length;
  f.sent = 0;
  f.guard_key = 0;
  f.guard_addr = 0;
  ++issued_;
  if (!holding_) flush_tx_locked();
  return Errc::ok;
}

void TcpEndpoint::release_posts() noexcept {
  holding_ = false;
  std::lock_guard g(lock_);
  flush_tx_locked();
}

Errc TcpEndpoint::post_recv(std::uint64_t wr_id, LocalBuffer dst) {
  std::lock_guard g(lock_);
  if (rq_.size() + rcq_.size() >= caps_.recv_queue_depth) {
    return Errc::backpressure;
  }
  std::byte* p = nullptr;
  if (Errc e = resolve_local(own_view_, domain(), dst, &p); e != Errc::ok) {
    return e;
  }
  if (fatal_ || local_error_) {
    push_completion(rcq_, wr_id, Opcode::recv, WcStatus::flushed);
    return Errc::ok;
  }
  rq_.push(PostedRecv{wr_id, p, dst.length});
  // A request may be waiting for exactly this receive (RNR): let it in now.
  if (rx_state_ == RxState::stalled) {
    progress_locked();
  }
  return Errc::ok;
}

// ---------------------------------------------------------------- polling

int TcpEndpoint::poll_send(Completion* out, int max) {
  if (holding_) release_posts();
  if (!lock_.try_lock()) {
    note_poll();
    return 0;  // the connection manager is making progress for us
  }
  if (!out_.empty()) {
    note_poll();
    if (passes_ == send_seen_passes_) {
      progress_locked();
    }
    send_seen_passes_ = passes_;
  }
  int n = 0;
  while (n < max && !scq_.empty()) {
    out[n++] = scq_.front();
    scq_.pop();
  }
  lock_.unlock();
  return n;
}

int TcpEndpoint::poll_recv(Completion* out, int max) {
  note_poll();
  if (!lock_.try_lock()) {
    return 0;
  }
  if (passes_ == recv_seen_passes_) {
    progress_locked();
  }
  recv_seen_passes_ = passes_;
  int n = 0;
  while (n < max && !rcq_.empty()) {
    out[n++] = rcq_.front();
    rcq_.pop();
  }
  lock_.unlock();
  return n;
}

void TcpEndpoint::push_completion(Ring<Completion>& q, std::uint64_t wr_id, Opcode op, WcStatus s,
                                  std::uint32_t len, std::uint32_t imm, bool has_imm) {
  Completion& c = q.push();
  c.wr_id = wr_id;
  c.opcode = op;
  c.status = s;
  c.byte_len = len;
  c.imm = imm;
  c.has_imm = has_imm;
}

// -------------------------------------------------------------- lifecycle

EndpointEvent TcpEndpoint::poll_event() {
  if (!event_reported_ && link_down_.load(std::memory_order_acquire)) {
    event_reported_ = true;
    return EndpointEvent::disconnected;
  }
  return EndpointEvent::none;
}

void TcpEndpoint::disconnect() {
  std::uint8_t expected = kConnected;
  state_.compare_exchange_strong(expected, static_cast<std::uint8_t>(EndpointState::error));
  // The peer sees EOF; our engine sees it too on its next pass and flushes.
  shutdown(fd_.get(), SHUT_RDWR);
  // Once we return, no write of the peer's may land: wait for a copy our
  // engine may be in the middle of (it checks the state inside its section).
  (void)wait_quiescent(guard_.guard(), std::chrono::steady_clock::now() + kRevokeWait);
}

void TcpEndpoint::enter_error_locked() {
  local_error_ = true;
  std::uint8_t expected = kConnected;
  state_.compare_exchange_strong(expected, static_cast<std::uint8_t>(EndpointState::error));
  flush_all_locked();
  rx_head_ = rx_tail_ = 0;  // nothing the peer sends from now on is executed
}

void TcpEndpoint::flush_all_locked() {
  complete_answered_locked();
  for (; !out_.empty(); out_.pop(), ++completed_) {
    push_completion(scq_, out_.front().wr_id, out_.front().op, WcStatus::flushed);
  }
  for (; !rq_.empty(); rq_.pop()) {
    push_completion(rcq_, rq_.front().wr_id, Opcode::recv, WcStatus::flushed);
  }
}

void TcpEndpoint::link_down_locked(EndpointState to) {
  if (fatal_) {
    return;
  }
  fatal_ = true;
  std::uint8_t expected = kConnected;
  state_.compare_exchange_strong(expected, static_cast<std::uint8_t>(to));
  shutdown(fd_.get(), SHUT_RDWR);
  flush_all_locked();
  tx_.clear();
  rx_head_ = rx_tail_ = 0;
  link_down_.store(true, std::memory_order_release);
}

// ------------------------------------------------ connection manager hand-over

void TcpEndpoint::on_ready(std::uint32_t) {
  // One-shot: the socket is not watched again until we re-arm it.
  if (bg_mode_ && polls_.load(std::memory_order_relaxed) == bg_seen_polls_) {
    background_pass();
    return;
  }
  bg_mode_ = false;
  bg_seen_polls_ = polls_.load(std::memory_order_relaxed);
  core_->manager().set_timer(watch_token(), Clock::now() + kOwnerGrace);
}

void TcpEndpoint::on_timer() {
  const std::uint64_t polls = polls_.load(std::memory_order_relaxed);
  if (bg_mode_ || polls == bg_seen_polls_) {
    bg_mode_ = true;
    background_pass();
    return;
  }
  // The owner is polling. Should it stop now, would it leave something
  // behind that no socket event will bring us back for (an owed ack, unsent
  // frames)? Then look again later rather than waiting for data.
  bg_seen_polls_ = polls;
  const bool owner_busy = !lock_.try_lock();
  const bool leftover = owner_busy || peer_done_ != ack_sent_ || !tx_.empty();
  if (!owner_busy) {
    lock_.unlock();
  }
  if (leftover) {
    core_->manager().set_timer(watch_token(), Clock::now() + kOwnerGrace);
  } else {
    core_->manager().rearm(watch_token(), kWatchIn);
  }
}

void TcpEndpoint::background_pass() {
  if (!lock_.try_lock()) {
    core_->manager().set_timer(watch_token(), Clock::now() + std::chrono::milliseconds(1));
    return;
  }
  // A few passes at most: the owner may want the lock back for a post, and
  // the re-armed watch fires again at once if more is waiting.
  for (int i = 0; i < 8 && progress_locked() > 0; ++i) {
  }
  if (!fatal_) {
    if (rx_tail_ - rx_head_ == rx_.size()) {
      // Stalled on a missing receive with a full buffer: watching would only
      // spin. post_recv() re-arms once the stream moves again.
      want_rearm_ = true;
    } else {
      core_->manager().rearm(watch_token(),
                             kWatchIn | (tx_.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT)));
    }
  }
  lock_.unlock();
}

void TcpEndpoint::watch_locked() {
  if (want_rearm_ && !fatal_ && rx_tail_ - rx_head_ < rx_.size()) {
    want_rearm_ = false;
    core_->manager().rearm(watch_token(), kWatchIn);
  }
}

}  // namespace catena::fabric::soft
