// A soft endpoint over TCP, for peers on other hosts (or when forced with
// "soft:tcp"). Requests travel as frames (wire.hpp); the target's progress
// engine checks each against its region table exactly as the shared-memory
// path does, applies it, and acknowledges — the initiator completes a work
// request only once the target executed it, as on RC.
//
// Progress runs on the owner's thread inside poll_send()/poll_recv() (one
// non-blocking recv() per pass, at most one send per pass; acknowledgements
// ride on the next outgoing frame or go out at the end of a pass that found
// nothing new). When the owner stops polling — a region that is only ever
// written to, say — the connection manager notices (the poll counter stood
// still for kOwnerGrace after data arrived) and drives progress itself until
// the owner polls again, so one-sided operations complete without the
// target's CPU in the loop, as they do on a NIC.
//
// Thread ownership: post_*/poll_* on one data-plane thread; the connection
// manager only under lock_ and only while that thread is not polling;
// disconnect(), state(), caps() and peer_address() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "soft/conn_manager.hpp"
#include "soft/core.hpp"
#include "soft/endpoint_common.hpp"
#include "soft/net.hpp"
#include "soft/wire.hpp"

namespace catena::fabric::soft {

class TcpEndpoint final : public Endpoint, private Watcher {
 public:
  static Result<std::unique_ptr<Endpoint>> create(std::shared_ptr<Core> core, UniqueFd fd,
                                                  const EndpointCaps& caps, DomainId domain,
                                                  std::uint32_t peer_send_depth);
  ~TcpEndpoint() override;
  TcpEndpoint(const TcpEndpoint&) = delete;
  TcpEndpoint& operator=(const TcpEndpoint&) = delete;

  Result<RemoteRegion> expose_region(const MemoryRegion& mr) override;
  Errc post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) override;
  Errc post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst, std::uint32_t imm) override;
  Errc post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) override;
  Errc post_send(std::uint64_t wr_id, LocalBuffer src) override;
  Errc post_recv(std::uint64_t wr_id, LocalBuffer dst) override;
  // Held posts queue their frames; release_posts() writes them with one
  // sendmsg (up to the iovec limit) instead of one per post.
  void hold_posts() noexcept override { holding_ = true; }
  void release_posts() noexcept override;
  int poll_send(Completion* out, int max) override;
  int poll_recv(Completion* out, int max) override;
  EndpointEvent poll_event() override;
  [[nodiscard]] EndpointState state() const noexcept override {
    return static_cast<EndpointState>(state_.load(std::memory_order_acquire));
  }
  [[nodiscard]] const EndpointCaps& caps() const noexcept override { return caps_; }
  [[nodiscard]] std::string peer_address() const override { return peer_address_; }
  void disconnect() override;

  // How long data may sit unpolled before the connection manager takes over.
  static constexpr std::chrono::milliseconds kOwnerGrace{5};
  static constexpr std::size_t kRxBufferSize = std::size_t{64} * 1024;
  // Passes without progress, with requests outstanding, before we ask the
  // peer for an ack; doubled up to the maximum while nothing moves.
  static constexpr std::uint32_t kAckRequestPasses = 256;
  static constexpr std::uint32_t kMaxAckRequestPasses = 1u << 16;

 private:
  // A request of ours from post until the target answered it.
  struct OutReq {
    std::uint64_t wr_id;
    std::byte* read_dst;  // read: where the response goes
    std::uint32_t len;
    Opcode op;
    bool answered;  // read: the response has arrived
    std::byte inline_data[kMaxInline];
  };
  // A frame waiting to be written.
  struct TxFrame {
    FrameHeader hdr;
    const std::byte* payload;
    std::uint32_t payload_len;
    std::uint32_t sent;  // bytes of header + payload already written
    // A read response streams from one of our regions: its key is checked
    // again right before each write, so a region freed meanwhile is not sent.
    std::uint32_t guard_key;
    std::uint64_t guard_addr;
  };
  struct PostedRecv {
    std::uint64_t wr_id;
    std::byte* buf;
    std::uint32_t len;
  };
  enum class RxState : std::uint8_t { header, payload, stalled };
  enum class Sink : std::uint8_t { discard, region, buffer };

  TcpEndpoint(std::shared_ptr<Core> core, UniqueFd fd, const EndpointCaps& caps, DomainId domain,
              std::uint32_t peer_send_depth);

  // Callers of the _locked functions hold lock_.
  Errc post_locked(FrameOp fop, Opcode op, std::uint64_t wr_id, LocalBuffer local, std::uint64_t addr,
                   std::uint32_t rkey, std::uint32_t imm);
  int progress_locked();
  bool receive_locked();
  void parse_locked();
  void begin_frame_locked();
  void begin_target_locked();
  void take_payload_locked(const std::byte* src, std::uint32_t n);
  void finish_frame_locked();
  void flush_tx_locked();
  void queue_ack_locked();
  void queue_control_locked(FrameOp op, WcStatus status, std::uint32_t seq);
  bool accept_ack_locked(std::uint32_t ack);
  void complete_answered_locked();
  void nak_locked(WcStatus initiator_status);
  void on_nak_locked(std::uint64_t seq, WcStatus status);
  void enter_error_locked();
  void flush_all_locked();
  void link_down_locked(EndpointState to);
  void watch_locked();
  void push_completion(Ring<Completion>& q, std::uint64_t wr_id, Opcode op, WcStatus s, std::uint32_t len = 0,
                       std::uint32_t imm = 0, bool has_imm = false);
  // Sequentially consistent: inside a guarded section it pairs with
  // disconnect() (access guard protocol, core.hpp).
  [[nodiscard]] bool connected() const noexcept {
    return state_.load(std::memory_order_seq_cst) == static_cast<std::uint8_t>(EndpointState::connected);
  }
  // The owner is polling in a way that makes progress (data-plane thread).
  void note_poll() noexcept {
    polls_.store(polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void enter_guarded() noexcept { busy_.store(++busy_seq_, std::memory_order_seq_cst); }
  void leave_guarded() noexcept { busy_.store(++busy_seq_, std::memory_order_release); }
  // Full sequence number of the peer's answer to one of our requests.
  [[nodiscard]] std::uint64_t our_seq(std::uint32_t wire) const noexcept {
    return completed_ + static_cast<std::uint32_t>(wire - static_cast<std::uint32_t>(completed_));
  }

  void on_ready(std::uint32_t events) override;
  void on_timer() override;
  void background_pass();

  std::shared_ptr<Core> core_;
  UniqueFd fd_;
  EndpointCaps caps_;
  std::string peer_address_;
  ArenaView own_view_;
  // Names this connection in the keys given to its peer (Core::expose).
  std::uint64_t conn_tag_;
  // Our progress engine is an accessor of our own regions: frees and
  // disconnect() wait for it to leave a copy it is in.
  std::atomic<std::uint64_t> busy_{0};
  std::uint64_t busy_seq_ = 0;
  GuardRegistration guard_;

  SpinLock lock_;
  bool holding_ = false;  // the owner thread's, between hold and release
  std::atomic<std::uint8_t> state_{static_cast<std::uint8_t>(EndpointState::connected)};
  std::atomic<bool> link_down_{false};
  std::atomic<std::uint64_t> polls_{0};
  // Progress passes so far, and as last seen by each poll function: a poll
  // skips its pass when the other one made one since (a loop calling both
  // then costs one recv() per turn, not two).
  std::uint64_t passes_ = 0;
  std::uint64_t send_seen_passes_ = 0;
  std::uint64_t recv_seen_passes_ = 0;
  bool event_reported_ = false;  // data-plane thread
  bool fatal_ = false;           // socket shut, queues flushed
  bool local_error_ = false;     // we failed a request of the peer: only waiting for its EOF
  bool shut_after_tx_ = false;   // shut our write side once the NAK is out

  // Initiator: our requests by sequence number; completed_ is out_'s head.
  Ring<OutReq> out_;
  std::uint64_t issued_ = 0;
  std::uint64_t completed_ = 0;
  std::uint64_t acked_ = 0;
  std::uint32_t idle_passes_ = 0;
  std::uint32_t ack_request_after_ = kAckRequestPasses;
  Ring<Completion> scq_;

  // Target: the peer's requests.
  Ring<PostedRecv> rq_;
  Ring<Completion> rcq_;
  std::uint64_t peer_seq_ = 0;   // requests seen
  std::uint64_t peer_done_ = 0;  // requests executed: the ack we owe
  std::uint64_t ack_sent_ = 0;

  Ring<TxFrame> tx_;
  std::vector<std::byte> rx_;
  std::size_t rx_head_ = 0;
  std::size_t rx_tail_ = 0;
  RxState rx_state_ = RxState::header;
  FrameHeader cur_{};
  std::uint32_t cur_left_ = 0;
  Sink sink_ = Sink::discard;
  std::byte* cur_dst_ = nullptr;
  std::uint64_t cur_addr_ = 0;
  std::uint64_t cur_req_ = 0;
  bool cur_executes_ = false;
  bool region_lost_ = false;

  // Connection manager (under lock_ or on the manager thread only).
  bool bg_mode_ = false;
  std::uint64_t bg_seen_polls_ = 0;
  bool want_rearm_ = false;
};

}  // namespace catena::fabric::soft
