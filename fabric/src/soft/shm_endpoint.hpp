// A soft endpoint to a peer on the same host: both arenas are mapped in both
// processes and the initiator's thread does the NIC's work at post time —
// it checks the peer's region table and copies, so a one-sided write lands
// without the peer's CPU, and a SEND or WRITE WITH IMMEDIATE fills the next
// posted receive slot in the peer's ChannelBlock (see shm_channel.hpp).
// Requests that find no posted receive wait in a local queue (RNR) and are
// retried, in order, from post_*(), poll_send() and — when the peer posts a
// receive and kicks us — from the connection manager. No allocation or
// system call per message; the initiator's queues sit behind a spin lock
// that only the manager's rare RNR retry ever contends.
//
// The TCP connection used for the handshake stays open as the failure
// detector: the connection manager marks the endpoint disconnected when it
// sees EOF (peer died, disconnected or went away).
//
// Thread ownership: post_*/poll_* on one data-plane thread; disconnect(),
// state(), caps() and peer_address() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "soft/conn_manager.hpp"
#include "soft/core.hpp"
#include "soft/endpoint_common.hpp"
#include "soft/net.hpp"
#include "soft/shm_channel.hpp"

namespace catena::fabric::soft {

class ShmEndpoint final : public Endpoint, private Watcher {
 public:
  static Result<std::unique_ptr<Endpoint>> create(std::shared_ptr<Core> core, UniqueFd control,
                                                  const EndpointCaps& caps, DomainId domain, OwnChannel own,
                                                  ShmPeer peer);
  ~ShmEndpoint() override;
  ShmEndpoint(const ShmEndpoint&) = delete;
  ShmEndpoint& operator=(const ShmEndpoint&) = delete;

  Result<RemoteRegion> expose_region(const MemoryRegion& mr) override;
  Errc post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) override;
  Errc post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst, std::uint32_t imm) override;
  Errc post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) override;
  Errc post_send(std::uint64_t wr_id, LocalBuffer src) override;
  Errc post_recv(std::uint64_t wr_id, LocalBuffer dst) override;
  int poll_send(Completion* out, int max) override;
  int poll_recv(Completion* out, int max) override;
  EndpointEvent poll_event() override;
  [[nodiscard]] EndpointState state() const noexcept override {
    return static_cast<EndpointState>(state_.load(std::memory_order_acquire));
  }
  [[nodiscard]] const EndpointCaps& caps() const noexcept override { return caps_; }
  [[nodiscard]] std::string peer_address() const override { return peer_address_; }
  void disconnect() override;

 private:
  // A work request as the initiator executes it.
  struct Wr {
    std::uint64_t wr_id = 0;
    std::byte* local = nullptr;  // source, or destination of a read
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t len = 0;
    std::uint32_t imm = 0;
    Opcode op = Opcode::write;
  };
  // A request waiting for a receive at the peer (or behind one that is).
  // Payloads up to max_inline are copied here so the caller may reuse its
  // buffer at once, as with inline sends on a NIC.
  struct PendingWr {
    Wr wr;
    std::byte inline_data[kMaxInline]{};
  };
  enum class Outcome : std::uint8_t { done, rnr, failed, closed };

  ShmEndpoint(std::shared_ptr<Core> core, UniqueFd control, const EndpointCaps& caps, DomainId domain,
              OwnChannel own, ShmPeer peer);

  // Callers of the _locked functions hold lock_.
  Errc post_locked(Opcode op, std::uint64_t wr_id, LocalBuffer local, std::uint64_t remote_addr,
                   std::uint32_t rkey, std::uint32_t imm);
  Outcome execute_locked(const Wr& w, WcStatus* status);
  void finish_locked(const Wr& w, Outcome o, WcStatus status);
  void drain_locked();
  int deliver_st(Completion* out, int max);
  void fail(EndpointState to);
  void fence_peer_once();
  void fence_peer();
  [[nodiscard]] bool connected() const noexcept {
    return state_.load(std::memory_order_relaxed) == static_cast<std::uint8_t>(EndpointState::connected);
  }
  // After a change to scq_ or pending_: what poll_send() checks unlocked.
  void note_queued_locked() noexcept {
    queued_.store(static_cast<std::uint32_t>(scq_.size() + pending_.size()), std::memory_order_release);
  }
  void enter_peer_locked() noexcept { own_block_->busy.store(++busy_seq_, std::memory_order_seq_cst); }
  void leave_peer_locked() noexcept { own_block_->busy.store(++busy_seq_, std::memory_order_release); }

  void on_ready(std::uint32_t events) override;

  // Setup-time state, in destruction-safe order: the control socket closes
  // first, then our channel is revoked (waiting for the peer while its guard
  // is still registered), then the guard goes, then the peer mapping.
  std::shared_ptr<Core> core_;
  ShmPeer peer_;
  OwnChannel own_;
  UniqueFd control_;
  EndpointCaps caps_;
  std::string peer_address_;

  // Hot state. The initiator half (pending_, scq_, peer_next_, busy_seq_)
  // is guarded by lock_; the target half belongs to the data-plane thread.
  SpinLock lock_;
  std::atomic<std::uint8_t> state_{static_cast<std::uint8_t>(EndpointState::connected)};
  std::atomic<bool> link_dead_{false};
  ArenaView own_view_;
  ArenaView peer_view_;
  ChannelBlock* own_block_ = nullptr;
  RecvSlot* own_slots_ = nullptr;
  std::uint64_t own_mask_ = 0;
  ChannelBlock* peer_block_ = nullptr;
  RecvSlot* peer_slots_ = nullptr;
  std::uint64_t peer_mask_ = 0;
  std::uint64_t peer_token_ = 0;
  std::uint64_t busy_seq_ = 0;
  std::uint64_t peer_next_ = 0;  // next receive slot of the peer to fill
  std::uint64_t rq_posted_ = 0;  // receives posted into our slots
  std::uint64_t rq_done_ = 0;    // receives completed (polled)
  std::vector<std::uint64_t> rq_wr_id_;
  std::vector<std::uint32_t> rq_len_;
  Ring<PendingWr> pending_;
  Ring<Completion> scq_;
  // scq_.size() + pending_.size() as of the last change (written under
  // lock_): 0 means poll_send() has nothing to do.
  std::atomic<std::uint32_t> queued_{0};
  std::atomic<bool> peer_fenced_{false};
  bool event_reported_ = false;
};

}  // namespace catena::fabric::soft
