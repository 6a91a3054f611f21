// Connection-management helpers for the verbs provider: "ip:port" parsing,
// deadline-bounded waits on an rdma_cm event channel, and the RC queue pair
// state transitions driven by the attributes rdma_cm negotiated.
//
// The provider creates its QPs itself (on its own device context and PD)
// instead of through rdma_create_qp, which would tie them to librdmacm's
// shared context. It therefore moves each QP through INIT/RTR/RTS with
// rdma_init_qp_attr + ibv_modify_qp and completes the active side with
// rdma_establish, exactly as rdma_create_qp'd QPs are moved internally.
// Setup code only: these functions block (bounded by a deadline) and allocate.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/socket.h>

#include <catena/fabric/fabric.hpp>
#include <catena/fabric/result.hpp>

#include "verbs_handles.hpp"

namespace catena::fabric::verbs {

using Clock = std::chrono::steady_clock;

// rdma_cm and QP settings the provider asks for. IB encodes "retry forever"
// for RNR as 7, the largest value the 3-bit fields hold: a sender waits for
// the receiver to post. The transport retry count stays below 7 because
// soft-RoCE (rdma_rxe) also reads 7 there as "forever" (measured on 6.1:
// writes to a killed peer never completed), so a vanished peer would hang
// outstanding work instead of failing it with retry_exceeded.
inline constexpr std::uint8_t kRetryCount = 6;
inline constexpr std::uint8_t kRnrRetryInfinite = 7;
// Local ACK timeout, 4.096 us * 2^kAckTimeout = 268 ms: how long a sender
// waits for an ACK before it retransmits (a packet lost at the end of a
// burst is only recovered this way), and, times kRetryCount + 1, how long a
// dead peer takes to fail the queue pair (1.9 s). rdma_cm's default on RoCE
// is 19 (2.1 s per retransmission, 15 s to fail): with 2% loss a chain
// link then went seconds without a completion.
inline constexpr std::uint8_t kAckTimeout = 16;
static_assert(kAckTimeout > 0 && kAckTimeout < 32, "5-bit field; 0 means no timeout at all");
static_assert(kRetryCount < 7, "7 means infinite retry on some providers");
static_assert(kRnrRetryInfinite == 7, "3-bit field; 7 is infinite RNR retry");
// RNR NAK timer our responder advertises (encoded; 12 = 0.64 ms). rdma_cm's
// default (0 = 655 ms) would stall a sender that outruns a receiver's
// re-posting for most of a second.
inline constexpr std::uint8_t kMinRnrTimer = 12;
static_assert(kMinRnrTimer > 0 && kMinRnrTimer < 32, "5-bit encoded field; 0 means 655 ms");
inline constexpr int kListenBacklog = 128;
// The device port an out-of-band (no rdma_cm) connection uses.
inline constexpr std::uint8_t kOobPort = 1;

// Parses "a.b.c.d:port" or "[v6]:port" (numeric hosts only; rdma_cm routes by
// IP). Errc::invalid_argument with the reason on failure.
Result<sockaddr_storage> parse_address(std::string_view address);
// "a.b.c.d:port" / "[v6]:port"; "?" for a null or unknown address.
std::string format_address(const sockaddr* addr);

// Creates an event channel whose fd is non-blocking, so it can be polled
// with a timeout and read from an idle loop without blocking.
Result<EventChannelHandle> create_event_channel();

// What the provider needs from one rdma_cm event; the event itself is
// acknowledged before the copy is returned.
struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = 0;
  rdma_cm_id* id = nullptr;         // for CONNECT_REQUEST: the new, caller-owned id
  rdma_cm_id* listen_id = nullptr;  // CONNECT_REQUEST only
  std::uint8_t initiator_depth = 0;
  std::uint8_t responder_resources = 0;
  // CONNECT_REQUEST: the protection domain the dialer asked for in its
  // private data (DomainPrivateData; 0 without one).
  DomainId domain = kDefaultDomain;
};

// The private data of a connect request outside the default protection
// domain (a default one sends none, as before domains existed).
struct DomainPrivateData {
  std::uint32_t magic = kMagic;
  std::uint32_t version = 1;
  DomainId domain = kDefaultDomain;
  static constexpr std::uint32_t kMagic = 0x4d4f4443;  // "CDOM"
};
static_assert(sizeof(DomainPrivateData) == 16);

// Reads one event without blocking: an event, nullopt if none is queued, or
// an error if the channel itself failed.
Result<std::optional<CmEvent>> try_get_event(rdma_event_channel* channel);
// Waits until `deadline` for one event (Errc::timeout if none arrives).
Result<CmEvent> wait_event(rdma_event_channel* channel, Clock::time_point deadline);
// Waits for an event of type `want`; any other event becomes an error that
// says what `step` was waiting for.
Result<CmEvent> expect_event(rdma_event_channel* channel, Clock::time_point deadline, rdma_cm_event_type want,
                             std::string_view step, std::string_view peer);

// The error an unexpected or failed event stands for.
Error event_error(const CmEvent& ev, std::string_view step, std::string_view peer);

// Milliseconds until `deadline`, at least 1 (rdma_cm rejects a 0 timeout).
int remaining_ms(Clock::time_point deadline);

// QP transitions. `responder_resources` / `initiator_depth` override what
// rdma_cm computed (the passive side uses what it accepted with).
Result<void> qp_to_init(rdma_cm_id* id, ibv_qp* qp);
Result<void> qp_to_rtr(rdma_cm_id* id, ibv_qp* qp, bool link_layer_ib,
                       std::optional<std::uint8_t> responder_resources);
Result<void> qp_to_rts(rdma_cm_id* id, ibv_qp* qp, std::optional<std::uint8_t> initiator_depth);
// Moves a QP to the error state: posted work is flushed. Returns ibv errno.
int qp_to_error(ibv_qp* qp) noexcept;

}  // namespace catena::fabric::verbs
