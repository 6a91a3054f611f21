// The RoCEv2 reliable-connected (RC) queue pair of the dpdk provider, with
// no DPDK in it: packets leave through an injected PacketOut and arrive via
// on_packet(), time comes from an injected catena::Clock, so the whole
// protocol (PSNs, ACK coalescing, retransmission and go-back-N, RNR, retry
// limits, duplicate and out-of-order handling, rkey and bounds checks, path
// MTU segmentation) is unit-tested over a seeded lossy shim
// (tests/fabric/rc_engine_test.cpp).
//
// Threads: the owner of the endpoint (the data-plane thread) calls the
// app-side functions (post_*, poll_*); the provider's progress thread calls
// the engine-side ones (on_packet, progress, set_error). The two meet only
// in single-producer/single-consumer rings of fixed capacity (work requests
// one way, completions the other) and in the atomic state: nothing on
// either side allocates, locks or makes a system call.
//
// Memory: a remote key names an entry of the QP's KeyTable (filled by
// Endpoint::expose on the progress thread), which points at the provider's
// RegionRecord. Destroying a region bumps the record's generation before
// the memory goes; the engine compares generations before every access, and
// the provider waits for the progress thread's current pass to end before
// it frees the bytes.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <catena/fabric/clock.hpp>
#include <catena/fabric/fabric.hpp>

#include "dpdk/roce_wire.hpp"

namespace catena::fabric::roce {

// Where the engine's packets go. send() builds and transmits one frame, or
// returns false when no buffer is free (the engine tries again later; a
// packet lost further on is the protocol's business).
class PacketOut {
 public:
  virtual ~PacketOut() = default;
  virtual bool send(const Path& path, const Packet& p) noexcept = 0;
};

// A registered region as the engine checks it. Owned by the provider;
// `generation` changes when the region is destroyed.
struct RegionRecord {
  std::byte* base = nullptr;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  std::atomic<std::uint32_t> generation{0};
};

// The keys one connection's peer was given. Written on the progress thread
// only (Endpoint::expose runs there as a command), read by the responder.
class KeyTable {
 public:
  explicit KeyTable(std::uint32_t capacity, std::uint32_t seed);
  // The key for `r` (the same key if `r` was exposed before), or 0 if full.
  std::uint32_t add(RegionRecord& r);
  // The region a key names, if it is still alive, grants `access` and holds
  // [offset, offset + len); nullptr otherwise. Zero-length accesses are not
  // checked by the caller (InfiniBand checks no key for them).
  [[nodiscard]] std::byte* resolve(std::uint32_t rkey, std::uint64_t offset, std::uint64_t len,
                                   std::uint32_t access, const RegionRecord** region,
                                   std::uint32_t* generation) const noexcept;

 private:
  struct Entry {
    RegionRecord* region = nullptr;
    std::uint32_t generation = 0;
    std::uint32_t rkey = 0;
  };
  std::vector<Entry> entries_;
  std::uint32_t used_ = 0;
  std::uint32_t seed_;
};

// A fixed-capacity single-producer/single-consumer ring.
template <class T>
class SpscRing {
 public:
  explicit SpscRing(std::uint32_t min_capacity)
      : slots_(std::bit_ceil(min_capacity == 0 ? 1u : min_capacity)), mask_(slots_.size() - 1) {}
  [[nodiscard]] std::uint64_t capacity() const noexcept { return slots_.size(); }
  T& slot(std::uint64_t i) noexcept { return slots_[i & mask_]; }
  // Producer.
  [[nodiscard]] std::uint64_t tail_local() const noexcept { return tail_.load(std::memory_order_relaxed); }
  void publish(std::uint64_t new_tail) noexcept { tail_.store(new_tail, std::memory_order_release); }
  // Consumer.
  [[nodiscard]] std::uint64_t tail() const noexcept { return tail_.load(std::memory_order_acquire); }

 private:
  std::vector<T> slots_;
  std::uint64_t mask_;
  std::atomic<std::uint64_t> tail_{0};
};

struct QpConfig {
  std::uint32_t sq_depth = 256;
  std::uint32_t rq_depth = 256;
  std::uint32_t mtu = 4096;                  // path MTU: payload bytes per packet
  std::uint64_t ack_timeout_ns = 2'000'000;  // first retransmission; doubles per retry
  std::uint64_t max_ack_timeout_ns = 100'000'000;
  std::uint32_t retry_limit = 10;        // retransmissions without progress, then retry_exceeded
  std::uint64_t rnr_delay_ns = 200'000;  // wait after an RNR NAK (retried forever)
  std::uint32_t window = 256;            // packets in flight
  std::uint32_t max_reads = 16;          // read requests in flight (both directions)
  std::uint32_t read_burst = 64;         // read response packets per progress pass
  std::uint32_t ack_every = 64;          // AckReq on every Nth packet of a long message
};
inline constexpr std::uint32_t kMaxMessageSize = 1u << 30;

enum class SendOp : std::uint8_t { write, write_imm, read, send };

// A local buffer's region as a request saw it when it was posted. Its bytes
// are read or written only while the region is still registered (the same
// generation): a region freed with a request in flight (a retransmission,
// a late read response) fails the request, as a deregistered lkey does on
// a NIC, instead of touching unmapped memory. The region's destructor bumps
// the generation and waits for the progress pass under way (Port::quiesce),
// so a pass that sees the old generation ends before the bytes go.
struct RegionRef {
  const RegionRecord* record = nullptr;
  std::uint32_t generation = 0;
  [[nodiscard]] bool gone() const noexcept {
    return record != nullptr && record->generation.load() != generation;
  }
};

struct SendWqe {
  std::uint64_t wr_id = 0;
  std::byte* local = nullptr;  // source (write, send) or destination (read)
  RegionRef region;            // of `local`
  std::uint32_t length = 0;
  SendOp op = SendOp::write;
  std::uint64_t remote_offset = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;
  // The engine's own, set when it takes the request.
  std::uint32_t first_psn = 0;
  std::uint32_t last_psn = 0;
  std::uint32_t read_next = 0;  // read: the next response PSN expected
  bool issued = false;          // read: counted in reads_in_flight_
};

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::byte* buf = nullptr;
  std::uint32_t length = 0;
  RegionRef region;  // of `buf`
};

enum class QpState : std::uint8_t { ready, error };

class RcQp {
 public:
  RcQp(const QpConfig& cfg, std::uint32_t qpn, PacketOut& out, const catena::Clock& clock);
  RcQp(const RcQp&) = delete;
  RcQp& operator=(const RcQp&) = delete;

  // Before the QP is handed to the progress thread: where its packets go
  // (path.dest_qpn is the peer's QP), the first PSN it sends and the first
  // it expects, and the path MTU both sides agreed on (0: keep the config's).
  void connect(const Path& path, std::uint32_t send_psn, std::uint32_t recv_psn, std::uint32_t mtu = 0);

  [[nodiscard]] std::uint32_t qpn() const noexcept { return qpn_; }
  [[nodiscard]] const QpConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] QpState state() const noexcept { return state_.load(std::memory_order_acquire); }
  KeyTable& keys() noexcept { return keys_; }

  // App side (the endpoint's owner). `w` is checked by the caller: local
  // buffers inside their regions, length within kMaxMessageSize.
  [[nodiscard]] Errc post_send(const SendWqe& w) noexcept;
  [[nodiscard]] Errc post_recv(const RecvWqe& w) noexcept;
  int poll_send(Completion* out, int max) noexcept;
  int poll_recv(Completion* out, int max) noexcept;

  // Engine side (the progress thread).
  void on_packet(const Packet& p) noexcept;
  // Transmits, runs the timers, sends coalesced ACKs and read responses;
  // returns how much it did.
  int progress() noexcept;
  // Moves the QP to the error state: the oldest outstanding send completes
  // with `first`, everything else is flushed.
  void set_error(WcStatus first) noexcept;

  struct Stats {
    std::uint64_t packets_sent = 0;
    std::uint64_t retransmits = 0;  // go-back-N restarts (timer, NAK, lost read response)
    std::uint64_t timeouts = 0;
    std::uint64_t rnr_naks_sent = 0;
    std::uint64_t rnr_naks_received = 0;
    std::uint64_t seq_naks_sent = 0;
    std::uint64_t duplicates = 0;
  };
  // Engine-side counters (read them on the progress thread, or when it is quiet).
  [[nodiscard]] const Stats& stats() const noexcept { return stats_; }

 private:
  struct ReadJob {
    std::uint32_t psn = 0;  // PSN of the next response packet
    std::uint32_t first_psn = 0;
    const std::byte* src = nullptr;
    std::uint32_t length = 0;
    std::uint32_t offset = 0;  // bytes already sent
    const RegionRecord* region = nullptr;
    std::uint32_t generation = 0;
  };

  // Requester (rc_requester.cpp).
  int transmit(std::uint64_t now) noexcept;
  bool transmit_one(SendWqe& w, std::uint64_t now) noexcept;
  void take_new_requests() noexcept;
  void on_ack(const Packet& p) noexcept;
  void on_read_response(const Packet& p) noexcept;
  void acknowledge_through(std::uint32_t psn) noexcept;
  void rewind(std::uint32_t psn) noexcept;
  void complete_done() noexcept;
  void check_timer(std::uint64_t now) noexcept;
  void flush_all() noexcept;
  SendWqe* oldest_incomplete_read() noexcept;
  void push_send_completion(const SendWqe& w, WcStatus status) noexcept;
  [[nodiscard]] std::uint32_t packets_of(std::uint32_t length) const noexcept {
    return length == 0 ? 1 : (length + cfg_.mtu - 1) / cfg_.mtu;
  }

  // Responder (rc_responder.cpp).
  void on_request(const Packet& p) noexcept;
  bool handle_write(const Packet& p, const OpLayout& l) noexcept;
  bool handle_send(const Packet& p, const OpLayout& l) noexcept;
  bool handle_read(const Packet& p, bool duplicate) noexcept;
  int send_read_responses() noexcept;
  void send_ack(std::uint8_t syndrome, std::uint32_t psn) noexcept;
  void push_recv_completion(const RecvWqe& w, Opcode op, WcStatus status, std::uint32_t len,
                            std::uint32_t imm, bool has_imm) noexcept;
  [[nodiscard]] bool recv_available() const noexcept { return rq_take_ != rq_.tail(); }

  QpConfig cfg_;
  std::uint32_t qpn_;
  PacketOut& out_;
  const catena::Clock& clock_;
  Path path_;
  KeyTable keys_;
  std::atomic<QpState> state_{QpState::ready};
  WcStatus error_status_ = WcStatus::flushed;

  // Shared rings: work requests in, completions out.
  SpscRing<SendWqe> sq_;
  SpscRing<RecvWqe> rq_;
  SpscRing<Completion> scq_;
  SpscRing<Completion> rcq_;
  // App-side cursors.
  std::uint64_t sq_posted_ = 0;
  std::uint64_t scq_polled_ = 0;
  std::uint64_t rq_posted_ = 0;
  std::uint64_t rcq_polled_ = 0;

  // Requester state (progress thread).
  std::uint64_t sq_done_ = 0;  // oldest request not completed
  std::uint64_t cur_ = 0;      // request being transmitted
  std::uint64_t sq_take_ = 0;  // requests given PSNs
  std::uint64_t scq_tail_ = 0;
  std::uint32_t cur_psn_ = 0;   // next PSN to transmit
  std::uint32_t next_psn_ = 0;  // PSN of the next new request
  std::uint32_t una_ = 0;       // oldest PSN not acknowledged
  std::uint32_t reads_in_flight_ = 0;
  std::uint32_t retries_ = 0;
  std::uint64_t timer_deadline_ = 0;  // 0: not armed
  std::uint64_t rnr_until_ = 0;
  std::uint32_t read_rewound_at_ = 0;
  bool read_rewound_ = false;

  // Responder state (progress thread).
  std::uint32_t epsn_ = 0;
  std::uint32_t msn_ = 0;
  bool nak_sent_ = false;
  bool ack_pending_ = false;
  bool in_write_ = false;
  bool in_send_ = false;
  std::byte* wr_ptr_ = nullptr;
  const RegionRecord* wr_region_ = nullptr;
  std::uint32_t wr_generation_ = 0;
  std::uint32_t wr_left_ = 0;
  std::uint32_t msg_len_ = 0;
  std::uint32_t send_off_ = 0;
  bool send_overflow_ = false;
  std::uint64_t rq_take_ = 0;
  std::uint64_t rcq_tail_ = 0;
  std::vector<ReadJob> reads_;  // ring of max_reads jobs
  std::uint32_t reads_head_ = 0;
  std::uint32_t reads_count_ = 0;

  Stats stats_;
};

}  // namespace catena::fabric::roce
