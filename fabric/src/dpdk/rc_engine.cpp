// RcQp: construction, the app side (post/poll over the shared rings), the
// error state, and the engine's entry points. The requester and responder
// halves are in rc_requester.cpp and rc_responder.cpp.
#include "dpdk/rc_engine.hpp"

namespace catena::fabric::roce {

KeyTable::KeyTable(std::uint32_t capacity, std::uint32_t seed) : entries_(capacity), seed_(seed) {}

std::uint32_t KeyTable::add(RegionRecord& r) {
  const std::uint32_t gen = r.generation.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < used_; ++i) {
    if (entries_[i].region == &r && entries_[i].generation == gen) return entries_[i].rkey;
  }
  // Reuse the slot of a destroyed region, else take a new one.
  std::uint32_t slot = used_;
  for (std::uint32_t i = 0; i < used_; ++i) {
    if (entries_[i].region->generation.load(std::memory_order_acquire) != entries_[i].generation) {
      slot = i;
      break;
    }
  }
  if (slot == entries_.size()) return 0;
  if (slot == used_) ++used_;
  // The high half is a tag that differs per connection and per reuse of a
  // slot, so a key of another connection or a stale one names nothing here.
  seed_ = seed_ * 1664525u + 1013904223u;
  const std::uint32_t tag = (seed_ >> 16) | 0x8000u;
  entries_[slot] = Entry{&r, gen, (tag << 16) | slot};
  return entries_[slot].rkey;
}

std::byte* KeyTable::resolve(std::uint32_t rkey, std::uint64_t offset, std::uint64_t len,
                             std::uint32_t access, const RegionRecord** region,
                             std::uint32_t* generation) const noexcept {
  const std::uint32_t slot = rkey & 0xffffu;
  if (slot >= used_) return nullptr;
  const Entry& e = entries_[slot];
  if (e.rkey != rkey || e.region == nullptr) return nullptr;
  if (e.region->generation.load(std::memory_order_acquire) != e.generation) return nullptr;
  if ((e.region->access & access) != access) return nullptr;
  if (offset > e.region->length || len > e.region->length - offset) return nullptr;
  *region = e.region;
  *generation = e.generation;
  return e.region->base + offset;
}

RcQp::RcQp(const QpConfig& cfg, std::uint32_t qpn, PacketOut& out, const catena::Clock& clock)
    : cfg_(cfg),
      qpn_(qpn),
      out_(out),
      clock_(clock),
      keys_(1024, qpn * 2654435761u),
      sq_(cfg.sq_depth),
      rq_(cfg.rq_depth),
      scq_(cfg.sq_depth),
      rcq_(cfg.rq_depth),
      reads_(cfg.max_reads) {}

void RcQp::connect(const Path& path, std::uint32_t send_psn, std::uint32_t recv_psn, std::uint32_t mtu) {
  path_ = path;
  if (mtu != 0) cfg_.mtu = mtu;
  cur_psn_ = next_psn_ = una_ = send_psn & kPsnMask;
  epsn_ = recv_psn & kPsnMask;
}

Errc RcQp::post_send(const SendWqe& w) noexcept {
  if (sq_posted_ - scq_polled_ >= cfg_.sq_depth) return Errc::backpressure;
  SendWqe& slot = sq_.slot(sq_posted_);
  slot = w;
  sq_.publish(++sq_posted_);
  return Errc::ok;
}

Errc RcQp::post_recv(const RecvWqe& w) noexcept {
  if (rq_posted_ - rcq_polled_ >= cfg_.rq_depth) return Errc::backpressure;
  rq_.slot(rq_posted_) = w;
  rq_.publish(++rq_posted_);
  return Errc::ok;
}

int RcQp::poll_send(Completion* out, int max) noexcept {
  const std::uint64_t tail = scq_.tail();
  int n = 0;
  for (; n < max && scq_polled_ != tail; ++n) out[n] = scq_.slot(scq_polled_++);
  return n;
}

int RcQp::poll_recv(Completion* out, int max) noexcept {
  const std::uint64_t tail = rcq_.tail();
  int n = 0;
  for (; n < max && rcq_polled_ != tail; ++n) out[n] = rcq_.slot(rcq_polled_++);
  return n;
}

void RcQp::push_send_completion(const SendWqe& w, WcStatus status) noexcept {
  Completion& c = scq_.slot(scq_tail_);
  c = Completion{};
  c.wr_id = w.wr_id;
  c.status = status;
  switch (w.op) {
    case SendOp::write:
      c.opcode = Opcode::write;
      break;
    case SendOp::write_imm:
      c.opcode = Opcode::write_imm;
      break;
    case SendOp::read:
      c.opcode = Opcode::read;
      break;
    case SendOp::send:
      c.opcode = Opcode::send;
      break;
  }
  scq_.publish(++scq_tail_);
}

void RcQp::push_recv_completion(const RecvWqe& w, Opcode op, WcStatus status, std::uint32_t len,
                                std::uint32_t imm, bool has_imm) noexcept {
  Completion& c = rcq_.slot(rcq_tail_);
  c = Completion{};
  c.wr_id = w.wr_id;
  c.opcode = op;
  c.status = status;
  c.byte_len = len;
  c.imm = imm;
  c.has_imm = has_imm;
  rcq_.publish(++rcq_tail_);
}

void RcQp::set_error(WcStatus first) noexcept {
  if (state_.load(std::memory_order_relaxed) == QpState::error) return;
  error_status_ = first;
  state_.store(QpState::error, std::memory_order_release);
  flush_all();
}

void RcQp::flush_all() noexcept {
  const std::uint64_t tail = sq_.tail();
  for (; sq_done_ != tail; ++sq_done_) {
    push_send_completion(sq_.slot(sq_done_), error_status_);
    error_status_ = WcStatus::flushed;
  }
  cur_ = sq_take_ = sq_done_;
  reads_in_flight_ = 0;
  const std::uint64_t rtail = rq_.tail();
  if (in_send_) {  // the receive a message was landing in
    push_recv_completion(rq_.slot(rq_take_), Opcode::recv, WcStatus::flushed, 0, 0, false);
    ++rq_take_;
    in_send_ = false;
  }
  for (; rq_take_ != rtail; ++rq_take_) {
    push_recv_completion(rq_.slot(rq_take_), Opcode::recv, WcStatus::flushed, 0, 0, false);
  }
  reads_count_ = 0;
}

void RcQp::on_packet(const Packet& p) noexcept {
  if (state_.load(std::memory_order_relaxed) == QpState::error) return;
  const auto op = static_cast<Op>(p.bth.opcode);
  if (op == Op::acknowledge) {
    on_ack(p);
  } else if (op >= Op::read_response_first && op <= Op::read_response_only) {
    on_read_response(p);
  } else {
    on_request(p);
  }
}

int RcQp::progress() noexcept {
  if (state_.load(std::memory_order_relaxed) == QpState::error) {
    const bool pending = sq_done_ != sq_.tail() || rq_take_ != rq_.tail();
    if (pending) flush_all();
    return pending ? 1 : 0;
  }
  const std::uint64_t now = clock_.now_ns();
  int work = 0;
  if (ack_pending_) {
    send_ack(kAethAck, psn_add(epsn_, kPsnMask));
    ack_pending_ = false;
    ++work;
  }
  work += send_read_responses();
  work += transmit(now);
  check_timer(now);
  return work;
}

}  // namespace catena::fabric::roce
