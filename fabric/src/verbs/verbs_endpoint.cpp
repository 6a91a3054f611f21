#include "verbs_endpoint.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sys/socket.h>
#include <utility>

#include "verbs_cm.hpp"

namespace catena::fabric::verbs {

namespace {

// Completions taken from the CQ per ibv_poll_cq call (a stack array).
constexpr int kPollBatch = 32;
// How often poll_event() looks at an oob connection's liveness socket.
constexpr std::chrono::milliseconds kOobLivenessInterval{5};

WcStatus to_wc_status(ibv_wc_status s) noexcept {
  switch (s) {
    case IBV_WC_SUCCESS:
      return WcStatus::success;
    case IBV_WC_REM_ACCESS_ERR:
      return WcStatus::remote_access_error;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::flushed;
    case IBV_WC_LOC_PROT_ERR:
      return WcStatus::local_protection_error;
    case IBV_WC_LOC_LEN_ERR:
      return WcStatus::local_length_error;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return WcStatus::retry_exceeded;
    default:
      return WcStatus::general_error;
  }
}

// A local buffer must lie inside its registered region; the NIC would catch
// it too, but only after moving the whole QP to error.
Errc check_local(const LocalBuffer& b, std::uint32_t limit) noexcept {
  if (b.length > limit) {
    return Errc::too_large;
  }
  if (b.length == 0) {
    return Errc::ok;
  }
  if (b.mr == nullptr) {
    return Errc::local_protection;
  }
  const std::size_t size = b.mr->size();
  if (b.offset > size || b.length > size - b.offset) {
    return Errc::local_protection;
  }
  return Errc::ok;
}

Errc post_failure(int rc) noexcept {
  switch (rc) {
    case ENOMEM:
      return Errc::backpressure;  // queue full by the provider's count
    case EINVAL:
      return Errc::invalid_argument;
    default:
      return Errc::io_error;
  }
}

}  // namespace

Result<QueuePairInfo> create_queue_pair(const VerbsDevice& device, Connection& conn,
                                        const EndpointConfig& cfg) {
  if (cfg.send_queue_depth == 0 || cfg.recv_queue_depth == 0) {
    return make_error(Errc::invalid_argument, "queue depths must be at least 1");
  }
  const auto max_wr =
      static_cast<std::uint32_t>(std::max(1, std::min(device.attr.max_qp_wr, device.attr.max_cqe)));
  const std::uint32_t send_wr = std::min(cfg.send_queue_depth, max_wr);
  const std::uint32_t recv_wr = std::min(cfg.recv_queue_depth, max_wr);
  ibv_context* ctx = device.context.get();
  auto pd = device.domain_pd(cfg.domain);
  if (!pd) return pd.error();

  conn.send_cq.reset(ibv_create_cq(ctx, static_cast<int>(send_wr), nullptr, nullptr, 0));
  if (!conn.send_cq) {
    return make_error(Errc::resource_exhausted, "ibv_create_cq (send) failed: " + errno_text(errno));
  }
  conn.recv_cq.reset(ibv_create_cq(ctx, static_cast<int>(recv_wr), nullptr, nullptr, 0));
  if (!conn.recv_cq) {
    return make_error(Errc::resource_exhausted, "ibv_create_cq (recv) failed: " + errno_text(errno));
  }

  ibv_qp_init_attr init{};
  std::uint32_t inline_size = cfg.max_inline;
  for (;;) {
    init = ibv_qp_init_attr{};
    init.send_cq = conn.send_cq.get();
    init.recv_cq = conn.recv_cq.get();
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;  // every request is posted signaled explicitly
    init.cap.max_send_wr = send_wr;
    init.cap.max_recv_wr = recv_wr;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = inline_size;
    conn.qp.reset(ibv_create_qp(pd.value(), &init));
    if (conn.qp) {
      break;
    }
    const int err = errno;
    // Devices reject an inline size above their limit instead of clamping.
    if (inline_size > 0 && (err == EINVAL || err == ENOMEM)) {
      inline_size /= 2;
      continue;
    }
    return make_error(err == ENOMEM ? Errc::resource_exhausted : Errc::io_error,
                      "ibv_create_qp failed: " + errno_text(err));
  }

  const std::uint8_t port_num = conn.id ? conn.id->port_num : kOobPort;
  ibv_port_attr port{};
  if (int rc = ibv_query_port(ctx, port_num, &port); rc != 0) {
    return make_error(Errc::io_error,
                      "ibv_query_port " + std::to_string(port_num) + " failed: " + errno_text(rc));
  }

  // What was granted, not what was asked: a CQ entry per outstanding request
  // bounds the depth as much as the queue itself.
  QueuePairInfo info;
  EndpointCaps& caps = info.caps;
  caps.send_queue_depth = std::min(init.cap.max_send_wr, static_cast<std::uint32_t>(conn.send_cq->cqe));
  caps.recv_queue_depth = std::min(init.cap.max_recv_wr, static_cast<std::uint32_t>(conn.recv_cq->cqe));
  caps.max_inline = init.cap.max_inline_data;
  caps.max_message_size = port.max_msg_sz;
  caps.max_send_size = port.max_msg_sz;
  info.link_layer_ib = port.link_layer == IBV_LINK_LAYER_INFINIBAND;

  if (conn.id) {
    if (auto r = qp_to_init(conn.id.get(), conn.qp.get()); !r) {
      return r.error();
    }
  }
  return info;
}

WrRing::WrRing(std::uint32_t depth)
    : slots_(new Slot[std::bit_ceil(std::max<std::uint32_t>(depth, 1))]),
      mask_(std::bit_ceil(std::max<std::uint32_t>(depth, 1)) - 1),
      depth_(depth) {}

VerbsEndpoint::VerbsEndpoint(std::shared_ptr<VerbsDevice> device, Connection conn, const EndpointCaps& caps,
                             std::string peer, DomainId domain)
    : Endpoint(domain),
      device_(std::move(device)),
      conn_(std::move(conn)),
      caps_(caps),
      send_ring_(caps.send_queue_depth),
      recv_ring_(caps.recv_queue_depth),
      peer_(std::move(peer)) {
  early_send_.reserve(caps.send_queue_depth);
}

VerbsEndpoint::~VerbsEndpoint() {
  shut_down_connection();
  // Before the QP goes: a type 2 window holds its QP.
  device_->windows.release_endpoint(this);
}

// A type 2 memory window bound to this QP: its rkey works only on this
// connection, and zero-based, so the peer addresses the region by offset.
// Waits for the bind's completion (keeping the caller's completions it
// meets for poll_send), so the key works once this returns.
Result<RemoteRegion> VerbsEndpoint::expose_region(const MemoryRegion& mr) {
  const auto* region = dynamic_cast<const VerbsMemoryRegion*>(&mr);
  if (region == nullptr || region->device() != device_.get()) {
    return make_error(Errc::invalid_argument, "cannot expose a region of another provider or device");
  }
  const std::uint64_t length = region->size();
  if (auto rkey = device_->windows.find(region, this)) {
    return RemoteRegion{length, *rkey, 0};
  }
  const int rights = window_access(region->access());
  if (rights == 0) {
    return RemoteRegion{length, 0, 0};  // nothing to grant: every access fails
  }
  post_held();  // the bind goes after what was posted before it
  if (state_ != EndpointState::connected) {
    return make_error(Errc::not_connected, "cannot expose a region on a connection in error");
  }
  if (send_ring_.full()) {
    return make_error(Errc::backpressure, "send queue full: no room to bind a memory window");
  }
  // The window is of the connection's protection domain, as its QP and the
  // region are (expose() checked the region's).
  auto pd = device_->domain_pd(domain());
  if (!pd) return pd.error();
  ibv_mw* mw = ibv_alloc_mw(pd.value(), IBV_MW_TYPE_2);
  if (mw == nullptr) {
    return make_error(Errc::resource_exhausted, "ibv_alloc_mw (type 2) on '" + device_->name +
                                                    "' failed: " + errno_text(errno) +
                                                    "; the device must support memory windows");
  }
  ibv_send_wr wr{};
  wr.wr_id = send_ring_.next_seq();
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info.mr = region->mr();
  wr.bind_mw.bind_info.addr = reinterpret_cast<std::uint64_t>(region->data());
  wr.bind_mw.bind_info.length = length;
  wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(rights | IBV_ACCESS_ZERO_BASED);
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(conn_.qp.get(), &wr, &bad); rc != 0) {
    if (int drc = ibv_dealloc_mw(mw); drc != 0) {
      report_destroy_failure("ibv_dealloc_mw", drc);
    }
    return make_error(post_failure(rc), "binding a memory window failed: " + errno_text(rc));
  }
  send_ring_.push(0, Opcode::send, true, true);
  device_->windows.add(region, this, mw, wr.bind_mw.rkey);
  const std::uint64_t bind = ++binds_posted_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (binds_done_ < bind) {
    if (std::chrono::steady_clock::now() > deadline) {
      enter_error();
      return make_error(Errc::timeout, "the memory window bind did not complete");
    }
    Completion got[kPollBatch];
    const int n = drain(conn_.send_cq.get(), send_ring_, false, got, kPollBatch);
    early_send_.insert(early_send_.end(), got, got + n);
  }
  if (bind_failed_) {
    return make_error(Errc::io_error, "binding a memory window failed on '" + device_->name + "'");
  }
  return RemoteRegion{length, wr.bind_mw.rkey, 0};
}

Errc VerbsEndpoint::post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) {
  return post_send_queue(wr_id, Opcode::write, IBV_WR_RDMA_WRITE, src, &dst, 0);
}

Errc VerbsEndpoint::post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst,
                                   std::uint32_t imm) {
  return post_send_queue(wr_id, Opcode::write_imm, IBV_WR_RDMA_WRITE_WITH_IMM, src, &dst, imm);
}

Errc VerbsEndpoint::post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) {
  return post_send_queue(wr_id, Opcode::read, IBV_WR_RDMA_READ, dst, &src, 0);
}

Errc VerbsEndpoint::post_send(std::uint64_t wr_id, LocalBuffer src) {
  return post_send_queue(wr_id, Opcode::send, IBV_WR_SEND, src, nullptr, 0);
}

Errc VerbsEndpoint::post_send_queue(std::uint64_t wr_id, Opcode opcode, ibv_wr_opcode verb, LocalBuffer buf,
                                    const RemoteAddress* remote, std::uint32_t imm) {
  const std::uint32_t limit = opcode == Opcode::send ? caps_.max_send_size : caps_.max_message_size;
  if (Errc e = check_local(buf, limit); e != Errc::ok) {
    return e;
  }
  if (send_ring_.full()) {
    return Errc::backpressure;
  }
  if (state_ != EndpointState::connected) {
    send_ring_.push(wr_id, opcode, false);
    return Errc::ok;
  }
  ibv_sge stack_sge{};
  ibv_send_wr stack_wr{};
  const bool hold = holding_;
  ibv_sge& sge = hold ? held_sge_[held_] : stack_sge;
  ibv_send_wr& wr = hold ? held_wr_[held_] : stack_wr;
  sge = ibv_sge{};
  wr = ibv_send_wr{};
  wr.wr_id = send_ring_.next_seq();
  wr.opcode = verb;
  wr.send_flags = hold ? 0 : IBV_SEND_SIGNALED;  // post_held() signals a batch's last
  if (buf.length > 0) {
    sge.addr = reinterpret_cast<std::uint64_t>(buf.mr->data() + buf.offset);
    sge.length = buf.length;
    sge.lkey = buf.mr->lkey();
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (buf.length <= caps_.max_inline && verb != IBV_WR_RDMA_READ) {
      wr.send_flags |= IBV_SEND_INLINE;
    }
  }
  if (remote != nullptr) {
    wr.wr.rdma.remote_addr = remote->offset;  // windows are zero-based
    wr.wr.rdma.rkey = remote->region.rkey;
  }
  if (verb == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wr.imm_data = htonl(imm);
  }
  if (hold) {
    send_ring_.push(wr_id, opcode, true);
    if (++held_ == kMaxHeldPosts) post_held();
    return Errc::ok;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(conn_.qp.get(), &wr, &bad); rc != 0) {
    return post_failure(rc);
  }
  send_ring_.push(wr_id, opcode, true);
  return Errc::ok;
}

void VerbsEndpoint::post_held() noexcept {
  if (held_ == 0) return;
  const int n = held_;
  held_ = 0;
  if (state_ != EndpointState::connected) {
    // Some providers (soft-RoCE) never complete work posted to a QP in
    // error: these complete as never posted, with what followed them.
    send_ring_.unpost_last(static_cast<std::uint64_t>(n));
    return;
  }
  for (int i = 0; i + 1 < n; ++i) held_wr_[i].next = &held_wr_[i + 1];
  held_wr_[n - 1].next = nullptr;
  held_wr_[n - 1].send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(conn_.qp.get(), held_wr_, &bad); rc != 0) {
    // The NIC took the requests before `bad`, unsignalled: moving the QP to
    // error flushes them (a flush completes every request); those from
    // `bad` on complete as never posted, after them.
    const int taken =
        bad != nullptr && bad >= held_wr_ && bad < held_wr_ + n ? static_cast<int>(bad - held_wr_) : 0;
    send_ring_.unpost_last(static_cast<std::uint64_t>(n - taken));
    shut_down_connection();
    enter_error();
  }
}

Errc VerbsEndpoint::post_recv(std::uint64_t wr_id, LocalBuffer dst) {
  if (Errc e = check_local(dst, caps_.max_message_size); e != Errc::ok) {
    return e;
  }
  if (recv_ring_.full()) {
    return Errc::backpressure;
  }
  if (state_ != EndpointState::connected) {
    recv_ring_.push(wr_id, Opcode::recv, false);
    return Errc::ok;
  }
  ibv_sge sge{};
  ibv_recv_wr wr{};
  wr.wr_id = recv_ring_.next_seq();
  if (dst.length > 0) {
    sge.addr = reinterpret_cast<std::uint64_t>(dst.mr->data() + dst.offset);
    sge.length = dst.length;
    sge.lkey = dst.mr->lkey();
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(conn_.qp.get(), &wr, &bad); rc != 0) {
    return post_failure(rc);
  }
  recv_ring_.push(wr_id, Opcode::recv, true);
  return Errc::ok;
}

int VerbsEndpoint::poll_send(Completion* out, int max) {
  post_held();
  int n = 0;
  if (early_head_ < early_send_.size()) {
    while (n < max && early_head_ < early_send_.size()) {
      out[n++] = early_send_[early_head_++];
    }
    if (early_head_ == early_send_.size()) {
      early_send_.clear();
      early_head_ = 0;
    }
  }
  return n + drain(conn_.send_cq.get(), send_ring_, false, out + n, max - n);
}

int VerbsEndpoint::poll_recv(Completion* out, int max) {
  return drain(conn_.recv_cq.get(), recv_ring_, true, out, max);
}

int VerbsEndpoint::drain(ibv_cq* cq, WrRing& ring, bool receive_side, Completion* out, int max) {
  int n = emit(ring, out, max);
  ibv_wc wc[kPollBatch];
  while (n < max && ring.in_hardware() > 0) {
    // The completions are kept in the ring, so a batch may take more than
    // `max` (a signalled request completes the unsignalled ones before it).
    const int got = ibv_poll_cq(cq, kPollBatch, wc);
    if (got < 0) {
      enter_error();
      break;
    }
    // Every completion's status is checked, not just the batch's first.
    for (int i = 0; i < got; ++i) {
      const ibv_wc& w = wc[i];
      WrRing::Slot& slot = ring.complete_through(w.wr_id);
      slot.status = to_wc_status(w.status);
      if (receive_side && slot.status == WcStatus::success) {
        slot.opcode = w.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? Opcode::recv_write_imm : Opcode::recv;
        slot.byte_len = w.byte_len;
        slot.has_imm = (w.wc_flags & IBV_WC_WITH_IMM) != 0;
        slot.imm = slot.has_imm ? ntohl(w.imm_data) : 0;
      }
    }
    n += emit(ring, out + n, max - n);
    if (got < kPollBatch) {
      break;
    }
  }
  // Work posted after the endpoint left the connected state never reached
  // the NIC; it completes once everything the NIC still owes has.
  while (n < max && ring.in_hardware() == 0 && !ring.has_done() && ring.has_unposted()) {
    const WrRing::Slot& slot = ring.pop_unposted();
    Completion& c = out[n++];
    c = Completion{};
    c.wr_id = slot.wr_id;
    c.opcode = slot.opcode;
    c.status = WcStatus::flushed;
  }
  return n;
}

int VerbsEndpoint::emit(WrRing& ring, Completion* out, int max) noexcept {
  int n = 0;
  while (n < max && ring.has_done()) {
    const WrRing::Slot& slot = ring.pop_done();
    if (slot.internal) {
      ++binds_done_;
      if (slot.status != WcStatus::success) {
        bind_failed_ = true;
        enter_error();  // the key never worked; the caller's work after it flushes
      }
      continue;
    }
    Completion& c = out[n++];
    c = Completion{};
    c.wr_id = slot.wr_id;
    c.opcode = slot.opcode;
    c.status = slot.status;
    if (c.status != WcStatus::success) {
      enter_error();
      continue;
    }
    c.byte_len = slot.byte_len;
    c.has_imm = slot.has_imm;
    c.imm = slot.imm;
  }
  return n;
}

bool VerbsEndpoint::oob_peer_gone() noexcept {
  // A system call per look: at most one every few milliseconds.
  const auto now = std::chrono::steady_clock::now();
  if (now < next_liveness_check_) {
    return false;
  }
  next_liveness_check_ = now + kOobLivenessInterval;
  char scratch[64];
  for (;;) {
    const ssize_t n = ::recv(conn_.oob.get(), scratch, sizeof scratch, MSG_DONTWAIT);
    if (n > 0) {
      continue;  // nothing is sent after the handshake; ignore it
    }
    if (n == 0) {
      return true;  // EOF: the peer closed or shut down its end
    }
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

EndpointEvent VerbsEndpoint::poll_event() {
  if (!conn_.id) {
    if (disconnect_reported_ || !oob_peer_gone()) {
      return EndpointEvent::none;
    }
    shut_down_connection();
    state_ = EndpointState::disconnected;
    disconnect_reported_ = true;
    return EndpointEvent::disconnected;
  }
  for (;;) {
    auto got = try_get_event(conn_.channel.get());
    if (!got || !got.value()) {
      return EndpointEvent::none;
    }
    switch (got.value()->type) {
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        // rdma_cm does not touch a QP it did not create: flush it here.
        shut_down_connection();
        state_ = EndpointState::disconnected;
        if (!disconnect_reported_) {
          disconnect_reported_ = true;
          return EndpointEvent::disconnected;
        }
        break;
      default:
        break;  // a repeated ESTABLISHED, ADDR_CHANGE: nothing to do
    }
  }
}

void VerbsEndpoint::disconnect() {
  shut_down_connection();
  enter_error();
}

void VerbsEndpoint::enter_error() noexcept {
  if (state_ == EndpointState::connected) {
    state_ = EndpointState::error;
  }
}

void VerbsEndpoint::shut_down_connection() noexcept {
  if (shut_down_) {
    return;
  }
  shut_down_ = true;
  if (held_ > 0) {  // never handed to the NIC: they complete as flushed
    send_ring_.unpost_last(static_cast<std::uint64_t>(held_));
    held_ = 0;
  }
  if (int rc = qp_to_error(conn_.qp.get()); rc != 0) {
    report_destroy_failure("ibv_modify_qp to ERR", rc);
  }
  if (!conn_.id) {
    // The peer's liveness check sees the end of the stream.
    (void)::shutdown(conn_.oob.get(), SHUT_RDWR);
    return;
  }
  // Sends DREQ, or answers the peer's. Fails harmlessly if the CM has
  // already left the connected state (peer gone, device removed).
  (void)rdma_disconnect(conn_.id.get());
}

}  // namespace catena::fabric::verbs
