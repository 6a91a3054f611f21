// A connected RC queue pair behind the Endpoint interface.
//
// Lifecycle: built by the provider's connect code once rdma_cm has
// established the connection, or by its accept code just before it accepts
// (so the caller's receives are posted first); destroyed by its owner, which
// disconnects first if still connected. Threading: the post_*/poll_* functions and
// poll_event() belong to one data-plane thread (_st); nothing here locks.
//
// Data path: a post builds its work request on the stack and rings the
// doorbell, or, between hold_posts() and release_posts(), in a fixed array
// of held requests that one doorbell posts, only the last signalled; a poll
// drains the CQ into the work queue's ring and hands out completions from
// there. Each work queue has
// a fixed ring (allocated at setup) remembering, per outstanding request, the
// caller's wr_id and opcode: the hardware wr_id is the ring sequence number,
// so error completions (whose opcode the NIC leaves undefined) still report
// what was posted. Once the endpoint has left the connected state, new work
// is not handed to the NIC at all: it completes as flushed, in posting order,
// after the requests the NIC still owes — a behaviour some providers
// (soft-RoCE among them) do not give for work posted to a QP in error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "soft/net.hpp"
#include "verbs_device.hpp"
#include "verbs_handles.hpp"

namespace catena::fabric::verbs {

// The rdma_cm and verbs objects of one connection, declared in creation
// order so that destruction runs QP, CQs, cm_id, event channel. An
// out-of-band connection (verbs_oob.hpp) has no channel and no cm_id: its
// TCP socket (`oob`) is the liveness channel instead.
struct Connection {
  soft::UniqueFd oob;
  EventChannelHandle channel;
  CmIdHandle id;
  CqHandle send_cq;
  CqHandle recv_cq;
  QpHandle qp;
};

struct QueuePairInfo {
  EndpointCaps caps;           // what the device granted
  bool link_layer_ib = false;  // InfiniBand port (not RoCE/iWARP)
};

// Creates both CQs and the RC QP on the PD of cfg.domain. With a cm_id (which
// must already be bound to a port of the device) the QP is moved to INIT
// with rdma_cm's attributes; without one (oob) it stays in RESET on port 1.
Result<QueuePairInfo> create_queue_pair(const VerbsDevice& device, Connection& conn,
                                        const EndpointConfig& cfg);

// Outstanding work requests of one work queue, in posting order:
// [head, done) completed by the NIC and not yet handed to the caller,
// [done, posted) with the NIC, [posted, tail) never handed to it (work
// posted after the endpoint left the connected state). A completion for
// request `seq` completes every earlier one too: a send queue completes in
// order, and only a batch's last request is signalled (an unsignalled
// request that fails still yields its own error completion, and a flush
// yields one for each).
class WrRing {
 public:
  struct Slot {
    std::uint64_t wr_id = 0;
    Opcode opcode = Opcode::write;
    bool internal = false;  // a window bind of expose(): completes silently
    bool has_imm = false;
    WcStatus status = WcStatus::success;
    std::uint32_t imm = 0;
    std::uint32_t byte_len = 0;
  };

  explicit WrRing(std::uint32_t depth);

  [[nodiscard]] bool full() const noexcept { return tail_ - head_ >= depth_; }
  [[nodiscard]] bool empty() const noexcept { return tail_ == head_; }
  // Requests handed to the NIC and not yet completed by it.
  [[nodiscard]] std::uint64_t in_hardware() const noexcept { return posted_ - done_; }
  // Sequence number the next pushed request gets (the NIC's wr_id).
  [[nodiscard]] std::uint64_t next_seq() const noexcept { return tail_; }

  // Work handed to the NIC (in_hardware) must not follow work that never
  // was: once an endpoint leaves the connected state it posts no more.
  void push(std::uint64_t wr_id, Opcode opcode, bool in_hardware, bool internal = false) noexcept {
    slots_[tail_ & mask_] = Slot{wr_id, opcode, internal};
    ++tail_;
    if (in_hardware) ++posted_;
  }
  // The last `n` requests pushed as in hardware never reached it (a held
  // batch the NIC refused): they complete as never posted.
  void unpost_last(std::uint64_t n) noexcept { posted_ -= std::min(n, posted_ - done_); }
  // The NIC completed request `seq`, and so every earlier one: the slot to
  // fill with what its completion says (the earlier ones succeeded).
  // A wr_id the ring does not owe (none should come) fills a scratch slot.
  Slot& complete_through(std::uint64_t seq) noexcept {
    if (seq < done_ || seq >= posted_) return stray_;
    done_ = seq + 1;
    return slots_[seq & mask_];
  }
  // The oldest completed request not yet handed out, if any.
  [[nodiscard]] bool has_done() const noexcept { return head_ < done_; }
  const Slot& pop_done() noexcept { return slots_[head_++ & mask_]; }
  // The oldest request, which was never given to the NIC (nothing is).
  [[nodiscard]] bool has_unposted() const noexcept { return head_ == posted_ && head_ < tail_; }
  const Slot& pop_unposted() noexcept {
    const Slot& s = slots_[head_++ & mask_];
    done_ = posted_ = head_;
    return s;
  }

 private:
  std::unique_ptr<Slot[]> slots_;
  std::uint64_t mask_;
  std::uint64_t depth_;
  std::uint64_t head_ = 0;
  std::uint64_t done_ = 0;
  std::uint64_t posted_ = 0;
  std::uint64_t tail_ = 0;
  Slot stray_;
};

// Requests held by hold_posts() before one ibv_post_send rings for all.
inline constexpr int kMaxHeldPosts = 32;

class VerbsEndpoint final : public Endpoint {
 public:
  VerbsEndpoint(std::shared_ptr<VerbsDevice> device, Connection conn, const EndpointCaps& caps,
                std::string peer, DomainId domain);
  ~VerbsEndpoint() override;
  VerbsEndpoint(const VerbsEndpoint&) = delete;
  VerbsEndpoint& operator=(const VerbsEndpoint&) = delete;

  [[nodiscard]] Result<RemoteRegion> expose_region(const MemoryRegion& mr) override;
  [[nodiscard]] Errc post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) override;
  [[nodiscard]] Errc post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst,
                                    std::uint32_t imm) override;
  [[nodiscard]] Errc post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) override;
  [[nodiscard]] Errc post_send(std::uint64_t wr_id, LocalBuffer src) override;
  [[nodiscard]] Errc post_recv(std::uint64_t wr_id, LocalBuffer dst) override;

  int poll_send(Completion* out, int max) override;
  int poll_recv(Completion* out, int max) override;
  EndpointEvent poll_event() override;

  void hold_posts() noexcept override { holding_ = true; }
  void release_posts() noexcept override {
    holding_ = false;
    post_held();
  }

  [[nodiscard]] EndpointState state() const noexcept override { return state_; }
  [[nodiscard]] const EndpointCaps& caps() const noexcept override { return caps_; }
  [[nodiscard]] std::string peer_address() const override { return peer_; }

  void disconnect() override;

  // Setup code only: the passive side of an rdma_cm connection accepts the connection (rdma_accept,
  // then ESTABLISHED) after the endpoint exists, so receives can be posted
  // first.
  [[nodiscard]] rdma_cm_id* cm_id() const noexcept { return conn_.id.get(); }
  [[nodiscard]] rdma_event_channel* cm_channel() const noexcept { return conn_.channel.get(); }

 private:
  Errc post_send_queue(std::uint64_t wr_id, Opcode opcode, ibv_wr_opcode verb, LocalBuffer buf,
                       const RemoteAddress* remote, std::uint32_t imm);
  int drain(ibv_cq* cq, WrRing& ring, bool receive_side, Completion* out, int max);
  // Hands completed requests to the caller, in order.
  int emit(WrRing& ring, Completion* out, int max) noexcept;
  // One ibv_post_send for the held requests, the last signalled.
  void post_held() noexcept;
  void enter_error() noexcept;
  // oob: true once the peer's end of the liveness socket has closed.
  bool oob_peer_gone() noexcept;
  // Moves the QP to error and tells the peer: rdma_cm sends DREQ (or DREP
  // to a DREQ); an oob connection shuts its TCP socket down.
  void shut_down_connection() noexcept;

  // Declared first: the PD and context outlive the QP and CQs below.
  std::shared_ptr<VerbsDevice> device_;
  Connection conn_;
  EndpointCaps caps_;
  WrRing send_ring_;
  WrRing recv_ring_;
  std::string peer_;
  // Held requests (hold_posts), linked and posted by post_held().
  bool holding_ = false;
  int held_ = 0;
  ibv_send_wr held_wr_[kMaxHeldPosts]{};
  ibv_sge held_sge_[kMaxHeldPosts]{};
  // Send completions that expose() took off the CQ while it waited for its
  // bind; poll_send() hands them out first. Capacity reserved at setup.
  std::vector<Completion> early_send_;
  std::size_t early_head_ = 0;
  std::uint64_t binds_posted_ = 0;
  std::uint64_t binds_done_ = 0;
  bool bind_failed_ = false;
  EndpointState state_ = EndpointState::connected;
  bool shut_down_ = false;
  bool disconnect_reported_ = false;
  // oob: when the liveness socket was last looked at (poll_event).
  std::chrono::steady_clock::time_point next_liveness_check_{};
};

}  // namespace catena::fabric::verbs
