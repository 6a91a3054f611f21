// One DPDK Ethernet port of the dpdk provider and the progress thread that
// drives every queue pair on it.
//
// EAL is started once per process (no hugepages, in memory, no PCI: the
// provider runs on the PMDs that need no NIC). A Port is shared by every
// provider opened with the same port spec in this process, and lives while
// one of them (or an endpoint or region of one) does.
//
// Port specs (the part after "dpdk:"), comma-separated options:
//   ring             a net_ring port whose transmit ring is its own receive
//                    ring: a wire looped back to itself, so every queue pair
//                    of the process on this spec talks over it, demultiplexed
//                    by destination QP number as on a real port. In-process
//                    only (a forked child has a private copy of the ring).
//   memif=PATH       a net_memif port on the Unix socket PATH: a wire to the
//                    one other process whose port names the same PATH with
//                    the other role=server|client. Without role=, the port
//                    is the client if a server already listens on PATH, else
//                    the server. Frames to the port's own MAC loop back
//                    inside it, as on a NIC.
//   af_packet=IFACE  a net_af_packet port on the kernel interface IFACE (the
//                    tap a soft-RoCE VM is attached to: ci/vm/dpdk-interop.sh);
//                    needs ip=, an address the kernel does not also own
//   ip=A.B.C.D       the port's IPv4 address (its GID); default 10.47.0.1,
//                    10.47.1.2 for a memif client
//   loss=P, dup=P, reorder=P   percent of transmitted frames dropped,
//                    duplicated, swapped with the next (seeded: seed=N)
//   mtu=N            path MTU (256..4096, default 4096)
//   timeout_us=N     first retransmission timeout (default 2000)
//
// Threads: whoever runs a pass (try_pass: the port's progress thread, or an
// endpoint's poll that found nothing) owns the queue pairs' engine side, the
// rx/tx queues and the transmit batch for that pass; one pass runs at a time.
// Setup (attach, detach, expose, region teardown) reaches it through
// run_sync(), a locked command queue a pass checks with one relaxed load;
// nothing on the data path blocks.
#pragma once

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catena/fabric/result.hpp>
#include <catena/fabric/thread_annotations.hpp>

#include "dpdk/rc_engine.hpp"

struct rte_mempool;
struct rte_ring;
struct rte_mbuf;

namespace catena::fabric::dpdk {

struct PortSpec {
  enum class Kind : std::uint8_t { ring, memif, af_packet };
  std::string key;  // the spec as given: ports are shared per key
  Kind kind = Kind::ring;
  std::string memif_socket;
  std::string iface;  // af_packet
  bool memif_server = true;
  bool memif_role_given = false;
  std::uint32_t ipv4 = 0;  // host order; 0: the kind's default
  double loss = 0;
  double dup = 0;
  double reorder = 0;
  std::uint64_t seed = 1;
  std::uint32_t mtu = 4096;
  std::uint64_t timeout_ns = 2'000'000;
};

Result<PortSpec> parse_port_spec(std::string_view spec);

// What a connection's endpoint registers with the port: its queue pair and
// the TCP socket of its handshake, kept open as the liveness channel (the
// peer's process exiting or disconnect() closes it).
struct Attachment {
  roce::RcQp* qp = nullptr;
  int liveness_fd = -1;
  std::atomic<bool> peer_gone{false};
};

class Port final : public roce::PacketOut {
 public:
  static Result<std::shared_ptr<Port>> open(const PortSpec& spec);
  ~Port() override;
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  [[nodiscard]] const PortSpec& spec() const noexcept { return spec_; }
  [[nodiscard]] const roce::Mac& mac() const noexcept { return mac_; }
  [[nodiscard]] std::uint32_t ipv4() const noexcept { return ipv4_; }

  // Setup path, any thread except the progress thread.
  void run_sync(const std::function<void()>& fn);
  // A fresh QP number (unique on this port while the process runs).
  std::uint32_t next_qpn();  // 0 when every slot is taken
  void release_qpn(std::uint32_t qpn);
  void attach(Attachment* a);
  void detach(Attachment* a);
  // Region records live as long as the port, so a stale key still names a
  // record (whose generation no longer matches) and never freed memory.
  roce::RegionRecord* acquire_record(std::uint32_t* index);
  void release_record(std::uint32_t index);
  // Returns once the progress thread is no longer in a pass that began
  // before the call: after a region's generation changed, no access to its
  // bytes is in progress any more.
  void quiesce() const;

  // Runs one pass over the port (receive, every QP's progress, transmit) if
  // no other thread is running one; returns how much it did, -1 if it did
  // not run. The progress
  // thread runs passes all the time; an endpoint's poll that finds nothing
  // runs one too, so a spinning application drives its own port instead of
  // waiting for a progress thread it may be starving (2 cores). Passes are
  // serialized by a token (an atomic flag, never a blocking lock): the
  // "progress thread" state below belongs to whoever holds it.
  int try_pass(bool with_housekeeping = false);

  // PacketOut (the pass's owner).
  bool send(const roce::Path& path, const roce::Packet& p) noexcept override;
  [[nodiscard]] static std::uint64_t now_ns() noexcept { return catena::SteadyClock::instance().now_ns(); }

  struct Counters {
    std::atomic<std::uint64_t> rx_frames{0};
    std::atomic<std::uint64_t> tx_frames{0};
    std::atomic<std::uint64_t> dropped_by_shim{0};
    std::atomic<std::uint64_t> bad_frames{0};
    std::atomic<std::uint64_t> arp_replies{0};
    std::atomic<std::uint64_t> dropped_tx_full{0};  // the port's transmit queue was full
    std::atomic<std::uint64_t> no_mbuf{0};          // the pool was empty: a send waited
  };
  [[nodiscard]] const Counters& counters() const noexcept { return counters_; }
  [[nodiscard]] std::uint32_t free_mbufs() const noexcept;

 private:
  explicit Port(PortSpec spec);
  Result<void> start();
  void run();
  int pass();
  void flush_tx() noexcept;
  int receive(rte_mbuf** rx, std::uint16_t n) noexcept;
  void check_liveness();
  [[nodiscard]] double chance() noexcept;

  PortSpec spec_;
  std::uint16_t port_id_ = 0;
  bool port_started_ = false;
  rte_mempool* pool_ = nullptr;
  rte_ring* ring_ = nullptr;  // ring: the wire; memif: frames to our own MAC
  std::string vdev_name_;     // memif: the virtual device to remove at the end
  int memif_lock_fd_ = -1;    // memif server: the lock that says so
  roce::Mac mac_{};
  std::uint32_t ipv4_ = 0;

  // Progress thread state.
  std::vector<Attachment*> attached_;
  std::vector<roce::RcQp*> qp_by_slot_;
  std::vector<rte_mbuf*> tx_batch_;
  std::vector<pollfd> liveness_fds_;
  std::uint16_t ip_id_ = 0;
  std::uint64_t rng_;
  std::uint64_t next_liveness_ns_ = 0;
  Counters counters_;

  std::atomic<bool> pass_token_{false};
  std::atomic<std::uint64_t> pass_seq_{0};  // odd while a pass runs
  std::atomic<bool> stop_{false};
  std::atomic<bool> commands_pending_{false};
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> commands_ GUARDED_BY(mu_);
  std::uint64_t commands_done_ GUARDED_BY(mu_) = 0;
  std::uint32_t next_qpn_ GUARDED_BY(mu_) = 0x11;
  std::vector<std::uint8_t> slot_used_ GUARDED_BY(mu_);
  std::deque<roce::RegionRecord> records_ GUARDED_BY(mu_);
  std::vector<std::uint32_t> free_records_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace catena::fabric::dpdk
