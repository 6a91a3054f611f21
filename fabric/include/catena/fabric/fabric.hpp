// The data-plane transport seam. One interface, two providers chosen at run
// time by a spec string:
//   "verbs:<device>"  libibverbs + librdmacm (InfiniBand, RoCE, soft-RoCE)
//   "verbs:<device>,oob"  libibverbs, connections set up over TCP with the
//                     dpdk provider's handshake (no rdma_cm; RoCE only), so
//                     verbs and dpdk nodes connect to each other
//   "soft"            userspace provider: shared memory to same-host peers,
//                     TCP to others (chosen per connection)
//   "soft:tcp"        userspace provider, TCP only (cross-host path on one box)
//   "soft:shm"        userspace provider, shared memory only
//   "dpdk:<port>"     userspace RoCEv2 on a DPDK port (src/dpdk/dpdk_port.hpp
//                     lists the port specs), wire-compatible with rdma_rxe
//   "fault:<inner>"   wraps another provider to inject faults (fault_provider.hpp)
//
// Semantics shared by every provider (tests/fabric/conformance_test.cpp):
//  - Reliable connected endpoints. Work requests posted on one endpoint
//    execute and become visible at the target in posting order; an immediate
//    is delivered only after its payload is visible.
//  - Remote keys belong to one connection. Endpoint::expose() grants the peer
//    of that endpoint access to a region and returns the key; the key works
//    only on that connection (verbs: a type 2 memory window bound to the
//    QP; soft: a per-connection table entry with a random tag), until the
//    region is destroyed or the endpoint is. Addresses are region-relative:
//    a RemoteAddress names the byte `offset` from the region's start, never
//    a virtual address.
//  - A remote write/read with a wrong rkey (another connection's, a
//    destroyed region's), out of the region's bounds, or without the needed
//    access right completes with WcStatus::remote_access_error and changes
//    no byte at the target. The endpoint then enters the error state: later
//    work requests complete with WcStatus::flushed.
//  - Revocation is bounded: destroying a region or an endpoint returns
//    within a bounded time even if the peer is stopped in the middle of an
//    access (soft shm: a peer that has not left after kRevokeWait, in
//    soft/core.hpp, is cut off, and memory it may still write is never
//    reused once freed; the one access it was stopped in may still land in
//    its region when it resumes if that region is still allocated).
//  - Except a zero-length access: as InfiniBand allows, a zero-length write,
//    and a zero-length write with immediate (which still delivers its
//    immediate), succeed with any rkey and address on every provider. A
//    zero-length write is therefore no proof that the peer granted access.
//  - When the peer dies or the connection is cut, outstanding and later work
//    requests complete with an error status, and poll_event() reports
//    EndpointEvent::disconnected. Nothing blocks forever.
//  - A RDMA WRITE WITH IMMEDIATE and a SEND each consume one receive posted
//    with post_recv() at the target. If none is posted the operation waits
//    (infinite RNR retry) until one is.
//  - post_*() never blocks: a full queue returns Errc::backpressure.
//
//  - Protection domains. Every region and every endpoint belongs to one
//    domain (DomainId; 0, the default, unless asked otherwise). An endpoint
//    can expose, and use as local buffers, only regions of its own domain:
//    expose() of another domain's region is Errc::invalid_argument, a post
//    naming one is refused (soft and dpdk: Errc::local_protection at post;
//    verbs: the device fails the request with local_protection_error). A
//    dialer chooses its connection's domain (EndpointConfig::domain); the
//    accepted endpoint takes the same one. Verbs: one protection domain
//    (ibv_pd) per DomainId, so a queue pair of one domain cannot reach
//    another's memory even with its keys; soft and dpdk: a check on every
//    expose and post. Catena gives each tenant its own (chain/domain.hpp).
//
// Threading: a Provider may be used from several threads for setup
// (register, listen, connect). An Endpoint's post_*/poll_* functions are
// single-threaded (_st): one data-plane thread owns each endpoint.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <catena/fabric/result.hpp>

namespace catena::fabric {

// A protection domain (see above). 0: the default domain.
using DomainId = std::uint64_t;
inline constexpr DomainId kDefaultDomain = 0;

// Access rights of a registered region (bit mask), mirroring IBV_ACCESS_*.
enum Access : std::uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteWrite = 1u << 1,
  kRemoteRead = 1u << 2,
};

// What the peer of one connection needs to address a region, from
// Endpoint::expose(): sent to that peer in a SEND message. Carries no
// address: remote addresses are offsets from the region's start. The key is
// good on that connection only.
struct RemoteRegion {
  std::uint64_t length = 0;
  std::uint32_t rkey = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(RemoteRegion) == 16, "RemoteRegion travels in wire messages");

// A registered, pinned memory region owned by its Provider. Allocated by the
// provider (so the soft provider can place it in shareable memory); zeroed on
// allocation. Destroying the object deregisters it: afterwards no remote
// access reaches it.
class MemoryRegion {
 public:
  // Leaves its provider's registered_bytes() (after the derived class has
  // deregistered it).
  virtual ~MemoryRegion();
  [[nodiscard]] virtual std::byte* data() const noexcept = 0;
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;
  [[nodiscard]] virtual std::uint32_t lkey() const noexcept = 0;
  [[nodiscard]] virtual std::uint32_t access() const noexcept = 0;
  // The protection domain it was allocated in.
  [[nodiscard]] DomainId domain() const noexcept { return domain_; }

 protected:
  explicit MemoryRegion(DomainId domain = kDefaultDomain) noexcept : domain_(domain) {}

 private:
  friend class Provider;
  DomainId domain_;
  // The registered_bytes() of the provider that allocated it, which holds
  // size() bytes for it; shared, as a region may outlive its provider.
  std::shared_ptr<std::atomic<std::int64_t>> registered_;
  std::size_t size_counted_ = 0;
};

// A local scatter/gather element: a span inside a registered region.
struct LocalBuffer {
  const MemoryRegion* mr = nullptr;
  std::size_t offset = 0;  // from mr->data()
  std::uint32_t length = 0;
};

// A remote target: region + offset from its start.
struct RemoteAddress {
  RemoteRegion region;
  std::uint64_t offset = 0;
};

enum class Opcode : std::uint8_t {
  write,           // initiator completion of post_write
  write_imm,       // initiator completion of post_write_imm
  read,            // initiator completion of post_read
  send,            // initiator completion of post_send
  recv,            // target: a SEND arrived in a posted receive
  recv_write_imm,  // target: a WRITE WITH IMMEDIATE consumed a posted receive
};

enum class WcStatus : std::uint8_t {
  success = 0,
  remote_access_error,     // rkey/bounds/access check failed at the target
  local_protection_error,  // local buffer outside its registered region
  local_length_error,      // received message larger than the posted receive
  flushed,                 // endpoint in error state (earlier error or disconnect)
  retry_exceeded,          // peer unreachable (transport retries exhausted)
  general_error,
};

[[nodiscard]] std::string_view to_string(Opcode op) noexcept;
[[nodiscard]] std::string_view to_string(WcStatus s) noexcept;

struct Completion {
  std::uint64_t wr_id = 0;
  Opcode opcode = Opcode::write;
  WcStatus status = WcStatus::success;
  std::uint32_t byte_len = 0;  // bytes received (recv / recv_write_imm)
  std::uint32_t imm = 0;       // valid if has_imm
  bool has_imm = false;
};

// What the endpoint asks for; the provider may grant less (read caps()).
struct EndpointConfig {
  std::uint32_t send_queue_depth = 256;
  std::uint32_t recv_queue_depth = 256;
  std::uint32_t max_inline = 64;
  // Provider::connect: the connection's protection domain (the accepted
  // end takes the same). Ignored by listen().
  DomainId domain = kDefaultDomain;
};

// What the provider granted. Posting more than send_queue_depth outstanding
// (uncompleted) work requests returns Errc::backpressure.
struct EndpointCaps {
  std::uint32_t send_queue_depth = 0;
  std::uint32_t recv_queue_depth = 0;
  std::uint32_t max_inline = 0;
  std::uint32_t max_message_size = 0;  // largest single write/read/send
  std::uint32_t max_send_size = 0;     // largest SEND (two-sided) message
};

enum class EndpointEvent : std::uint8_t { none, disconnected };

enum class EndpointState : std::uint8_t { connected, error, disconnected };

// A reliable connected endpoint (an RC queue pair). Created by
// Provider::connect or Listener::accept, already connected. Single-threaded:
// the owning data-plane thread calls post_*/poll_*.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // Grants the peer of this connection the remote rights of `mr` (its
  // access() mask) and returns the key it must use; on no other connection
  // does that key work. Setup path, on the owning thread: may allocate and
  // make system calls (verbs: allocates a memory window and posts its bind
  // on this QP, ahead of anything posted later, such as the SEND that
  // carries the key). Exposing the same region again returns the same key.
  // The grant ends when the region or this endpoint is destroyed.
  // `mr` must come from the provider that created this endpoint, and be of
  // its protection domain (else Errc::invalid_argument).
  [[nodiscard]] Result<RemoteRegion> expose(const MemoryRegion& mr);

  [[nodiscard]] virtual Errc post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) = 0;
  [[nodiscard]] virtual Errc post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst,
                                            std::uint32_t imm) = 0;
  [[nodiscard]] virtual Errc post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) = 0;
  [[nodiscard]] virtual Errc post_send(std::uint64_t wr_id, LocalBuffer src) = 0;
  [[nodiscard]] virtual Errc post_recv(std::uint64_t wr_id, LocalBuffer dst) = 0;

  // Doorbell batching: posts made after hold_posts() may be held back and
  // handed to the device together by release_posts() (verbs: one
  // ibv_post_send for the chain, and only its last request signalled; the
  // others complete with it, in posting order, and each still yields its
  // own Completion). A held post returns ok once queued; if the device then
  // refuses it, it completes as flushed and the endpoint is in error.
  // poll_send() releases first, so held work never waits for a poll. Use
  // PostBatch below. Providers with no doorbell to save ignore both.
  virtual void hold_posts() noexcept {}
  virtual void release_posts() noexcept {}

  // Initiator-side completions (write, write_imm, read, send).
  virtual int poll_send(Completion* out, int max) = 0;
  // Target-side completions (recv, recv_write_imm).
  virtual int poll_recv(Completion* out, int max) = 0;

  // Connection events. Cheap enough to call from an idle loop, not per message.
  virtual EndpointEvent poll_event() = 0;

  [[nodiscard]] virtual EndpointState state() const noexcept = 0;
  [[nodiscard]] virtual const EndpointCaps& caps() const noexcept = 0;
  [[nodiscard]] virtual std::string peer_address() const = 0;

  // Moves the endpoint to the error state at once: posted work is flushed,
  // the peer sees a disconnect. Used to fence a predecessor.
  virtual void disconnect() = 0;

  // The connection's protection domain: the dialer's choice.
  [[nodiscard]] DomainId domain() const noexcept { return domain_; }

 protected:
  explicit Endpoint(DomainId domain = kDefaultDomain) noexcept : domain_(domain) {}
  // expose() once the region is known to be of this endpoint's domain.
  [[nodiscard]] virtual Result<RemoteRegion> expose_region(const MemoryRegion& mr) = 0;

 private:
  DomainId domain_;
};

// Holds an endpoint's posts for the scope and releases them together at
// its end (Endpoint::hold_posts).
class PostBatch {
 public:
  explicit PostBatch(Endpoint& ep) noexcept : ep_(ep) { ep_.hold_posts(); }
  ~PostBatch() { ep_.release_posts(); }
  PostBatch(const PostBatch&) = delete;
  PostBatch& operator=(const PostBatch&) = delete;

 private:
  Endpoint& ep_;
};

class Listener {
 public:
  // Called by accept() with the endpoint of an incoming connection before the
  // connection is accepted (verbs: before rdma_accept, or before the oob
  // handshake's answer; dpdk: before the handshake's answer; soft: before the
  // endpoint is handed out). Post the receives the peer's first messages need
  // here: its first SEND then finds one, and setup never depends on RNR
  // retries, which a device may limit. An error refuses the connection.
  using BeforeAccept = std::function<Errc(Endpoint&)>;

  virtual ~Listener() = default;
  // Waits up to `timeout` for one incoming connection.
  Result<std::unique_ptr<Endpoint>> accept(std::chrono::milliseconds timeout,
                                           const BeforeAccept& before_accept = {}) {
    return accept_one(timeout, before_accept);
  }
  // The address peers connect to ("ip:port"), with the real port if 0 was asked.
  [[nodiscard]] virtual std::string address() const = 0;

 protected:
  virtual Result<std::unique_ptr<Endpoint>> accept_one(std::chrono::milliseconds timeout,
                                                       const BeforeAccept& before_accept) = 0;
};

// How a provider is opened, beyond its spec.
struct ProviderOptions {
  // Where kept memory lives (allocate_kept): a directory on a memory
  // filesystem (/dev/shm), used by one process at a time. Empty: no kept
  // memory.
  std::string keep_dir;
};

// Memory that outlives the process (allocate_kept).
struct KeptRegion {
  std::unique_ptr<MemoryRegion> region;
  // True: the bytes are those the name held when the last process using
  // the keep directory left it (a restart). False: new, zeroed.
  bool kept = false;
};

class Provider {
 public:
  virtual ~Provider() = default;

  // "verbs:<device>[,oob]", "soft", "soft:tcp", "soft:shm", "dpdk:<port>", "fault:<inner>".
  static Result<std::unique_ptr<Provider>> open(std::string_view spec, const ProviderOptions& options = {});

  [[nodiscard]] virtual std::string name() const = 0;

  // Allocates and registers `size` zeroed bytes with the given access mask,
  // in protection domain `domain`.
  Result<std::unique_ptr<MemoryRegion>> allocate(std::size_t size, std::uint32_t access,
                                                 DomainId domain = kDefaultDomain) {
    auto r = allocate_region(size, access, domain);
    if (r) count_registered(*r.value());
    return r;
  }

  // --- kept memory (process-level recovery) ----------------------------------
  // A registered region named `name` ([A-Za-z0-9._#-], 1..200 characters)
  // in the keep directory: what a restarted process finds again with the
  // bytes its predecessor left, as long as the machine stayed up. Destroying
  // the region deregisters it and keeps its bytes; discard_kept() drops them.
  // A name asked again with another size starts over, zeroed. Setup path.
  // invalid_argument without a keep directory or on a bad name;
  // no_device where the provider cannot keep memory.
  Result<KeptRegion> allocate_kept(std::string_view name, std::size_t size, std::uint32_t access,
                                   DomainId domain = kDefaultDomain) {
    auto r = allocate_kept_region(name, size, access, domain);
    if (r && r.value().region) count_registered(*r.value().region);
    return r;
  }

  // Bytes of the regions allocated here (allocate, allocate_kept) that are
  // still alive: the memory this process has pinned for the fabric. Counted
  // when a region is allocated and destroyed, never on a post; any thread.
  [[nodiscard]] virtual std::int64_t registered_bytes() const noexcept {
    return registered_->load(std::memory_order_relaxed);
  }
  // Bytes of memory given back that the provider keeps ready for the next
  // allocation (zeroed; soft: `warm=<MiB>` arena ranges and spares, verbs:
  // regions still registered): resident, on verbs pinned, but in no
  // region. Any thread.
  [[nodiscard]] virtual std::int64_t warm_bytes() const noexcept { return 0; }
  // The names that hold kept bytes (from this process or the last one).
  [[nodiscard]] virtual std::vector<std::string> kept_names() const { return {}; }
  // Drops a name's bytes (zeroed, memory returned). Its region, if any, must
  // be destroyed first. Unknown names are ignored.
  virtual void discard_kept(std::string_view name) { (void)name; }

  // Listens on "ip:port" (port 0 picks one).
  virtual Result<std::unique_ptr<Listener>> listen(std::string_view address,
                                                   const EndpointConfig& cfg = {}) = 0;
  virtual Result<std::unique_ptr<Endpoint>> connect(
      std::string_view address, const EndpointConfig& cfg = {},
      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) = 0;

  // Returns once the provider's background progress has handled everything
  // that was ready when it was called: a peer's disconnect that reached this
  // provider is then visible in its endpoints' state() and poll_event().
  // For a single-threaded simulation, which calls it between steps so that
  // when a disconnect is seen does not depend on thread scheduling. The soft
  // provider waits for its connection manager; providers whose progress has
  // no thread of its own do nothing.
  virtual void settle() {}

 protected:
  virtual Result<std::unique_ptr<MemoryRegion>> allocate_region(std::size_t size, std::uint32_t access,
                                                                DomainId domain) = 0;
  // Default: no_device or invalid_argument (see allocate_kept).
  virtual Result<KeptRegion> allocate_kept_region(std::string_view name, std::size_t size,
                                                  std::uint32_t access, DomainId domain);

 private:
  // Adds `r` to registered_bytes() unless a provider this one wraps
  // (fault:<inner>) counted it already.
  void count_registered(MemoryRegion& r) noexcept;

  std::shared_ptr<std::atomic<std::int64_t>> registered_ = std::make_shared<std::atomic<std::int64_t>>(0);
};

// Provider factories, used by Provider::open. Exposed for tests.
Result<std::unique_ptr<Provider>> open_soft_provider(std::string_view options,
                                                     const ProviderOptions& provider_options = {});
// "<device>" or "<device>,oob".
Result<std::unique_ptr<Provider>> open_verbs_provider(std::string_view device);
// Built only when DPDK was found (CATENA_HAVE_DPDK); "dpdk:" fails otherwise.
Result<std::unique_ptr<Provider>> open_dpdk_provider(std::string_view port_spec);

}  // namespace catena::fabric
