// The dpdk provider: RoCEv2 RC queue pairs (rc_engine.hpp) on a DPDK port
// (dpdk_port.hpp). Connections are set up the way perftest does without
// rdma_cm, with the out-of-band handshake of oob_handshake.hpp (shared with
// the verbs provider's oob mode). The TCP connection then stays open as the
// liveness channel: its end is the peer's disconnect.
#include <algorithm>
#include <cstring>
#include <random>
#include <sys/mman.h>
#include <sys/socket.h>

#include <catena/fabric/fabric.hpp>

#include "dpdk/dpdk_port.hpp"
#include "oob_handshake.hpp"
#include "soft/net.hpp"

namespace catena::fabric {
namespace dpdk {
namespace {

using soft::Clock;
using soft::UniqueFd;

using oob::Hello;
constexpr std::uint32_t kMaxQueueDepth = 4096;

class DpdkRegion final : public MemoryRegion {
 public:
  DpdkRegion(std::shared_ptr<Port> port, std::byte* base, std::size_t size, std::size_t mapped,
             std::uint32_t access, DomainId domain)
      : MemoryRegion(domain),
        port_(std::move(port)),
        base_(base),
        size_(size),
        mapped_(mapped),
        access_(access) {
    record_ = port_->acquire_record(&index_);
    record_->base = base;
    record_->length = size;
    record_->access = access;
  }
  ~DpdkRegion() override {
    // No key names the bytes from here on; once the progress thread's pass
    // ends, nothing is touching them.
    record_->generation.fetch_add(1);
    port_->quiesce();
    port_->release_record(index_);
    munmap(base_, mapped_);
  }
  DpdkRegion(const DpdkRegion&) = delete;
  DpdkRegion& operator=(const DpdkRegion&) = delete;

  [[nodiscard]] std::byte* data() const noexcept override { return base_; }
  [[nodiscard]] std::size_t size() const noexcept override { return size_; }
  [[nodiscard]] std::uint32_t lkey() const noexcept override { return index_; }
  [[nodiscard]] std::uint32_t access() const noexcept override { return access_; }
  [[nodiscard]] const Port* port() const noexcept { return port_.get(); }
  [[nodiscard]] roce::RegionRecord& record() const noexcept { return *record_; }

 private:
  std::shared_ptr<Port> port_;
  std::byte* base_;
  std::size_t size_;
  std::size_t mapped_;
  std::uint32_t access_;
  std::uint32_t index_ = 0;
  roce::RegionRecord* record_ = nullptr;
};

EndpointCaps grant(const EndpointConfig& cfg) {
  auto clamp = [](std::uint32_t v) { return std::clamp<std::uint32_t>(v, 1, kMaxQueueDepth); };
  EndpointCaps c;
  c.send_queue_depth = clamp(cfg.send_queue_depth);
  c.recv_queue_depth = clamp(cfg.recv_queue_depth);
  c.max_inline = 0;  // payloads are read at transmission time, never at post
  c.max_message_size = roce::kMaxMessageSize;
  c.max_send_size = roce::kMaxMessageSize;
  return c;
}

class DpdkEndpoint final : public Endpoint {
 public:
  DpdkEndpoint(std::shared_ptr<Port> port, const EndpointCaps& caps, UniqueFd fd, std::string peer,
               DomainId domain)
      : Endpoint(domain), port_(std::move(port)), caps_(caps), fd_(std::move(fd)), peer_(std::move(peer)) {}
  ~DpdkEndpoint() override {
    if (attached_) port_->detach(&attachment_);
    if (qp_) port_->release_qpn(qp_->qpn());
  }
  DpdkEndpoint(const DpdkEndpoint&) = delete;
  DpdkEndpoint& operator=(const DpdkEndpoint&) = delete;

  Result<void> create_qp() {
    const std::uint32_t qpn = port_->next_qpn();
    if (qpn == 0) return make_error(Errc::resource_exhausted, "no free queue pair on the dpdk port");
    roce::QpConfig cfg;
    cfg.sq_depth = caps_.send_queue_depth;
    cfg.rq_depth = caps_.recv_queue_depth;
    cfg.mtu = port_->spec().mtu;
    cfg.ack_timeout_ns = port_->spec().timeout_ns;
    cfg.max_ack_timeout_ns = std::max<std::uint64_t>(cfg.max_ack_timeout_ns, 4 * cfg.ack_timeout_ns);
    qp_ = std::make_unique<roce::RcQp>(cfg, qpn, *port_, catena::SteadyClock::instance());
    attachment_.qp = qp_.get();
    attachment_.liveness_fd = fd_.get();
    std::random_device rd;
    send_psn_ = rd() & roce::kPsnMask;
    return {};
  }

  [[nodiscard]] Hello hello() const {
    Hello h = oob::blank_hello();
    h.qpn = qp_->qpn();
    h.psn = send_psn_;
    // IPv4-mapped GID ::ffff:a.b.c.d, as RoCEv2 uses for an IPv4 address.
    oob::set_gid_ipv4(h, port_->ipv4());
    std::copy(port_->mac().begin(), port_->mac().end(), h.mac);
    h.mtu = static_cast<std::uint16_t>(port_->spec().mtu);
    h.sq_depth = caps_.send_queue_depth;
    h.rq_depth = caps_.recv_queue_depth;
    h.domain = domain();
    return h;
  }

  // Joins the QP to the peer's and starts it on the progress thread.
  void start(const Hello& peer) {
    roce::Path path;
    path.src_mac = port_->mac();
    std::copy(peer.mac, peer.mac + 6, path.dst_mac.begin());
    path.src_ip = port_->ipv4();
    path.dst_ip = oob::gid_ipv4(peer);
    path.src_port = static_cast<std::uint16_t>(0xc000 | (qp_->qpn() & 0x3fff));
    path.dest_qpn = peer.qpn & roce::kPsnMask;
    const std::uint32_t mtu = std::min<std::uint32_t>(port_->spec().mtu, peer.mtu);
    qp_->connect(path, send_psn_, peer.psn, std::max<std::uint32_t>(mtu, 256));
    port_->attach(&attachment_);
    attached_ = true;
  }

  Result<RemoteRegion> expose_region(const MemoryRegion& mr) override {
    const auto* r = dynamic_cast<const DpdkRegion*>(&mr);
    if (r == nullptr || r->port() != port_.get()) {
      return make_error(Errc::invalid_argument, "region is not from this dpdk provider");
    }
    std::uint32_t rkey = 0;
    port_->run_sync([&] { rkey = qp_->keys().add(r->record()); });
    if (rkey == 0) return make_error(Errc::resource_exhausted, "key table of the connection is full");
    return RemoteRegion{r->size(), rkey, 0};
  }

  Errc post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) override {
    return post(roce::SendOp::write, wr_id, src, dst, 0);
  }
  Errc post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst, std::uint32_t imm) override {
    return post(roce::SendOp::write_imm, wr_id, src, dst, imm);
  }
  Errc post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) override {
    return post(roce::SendOp::read, wr_id, dst, src, 0);
  }
  Errc post_send(std::uint64_t wr_id, LocalBuffer src) override {
    return post(roce::SendOp::send, wr_id, src, RemoteAddress{}, 0);
  }
  Errc post_recv(std::uint64_t wr_id, LocalBuffer dst) override {
    roce::RecvWqe w{wr_id, nullptr, dst.length, {}};
    if (Errc e = resolve(dst, &w.buf, &w.region); e != Errc::ok) return e;
    return qp_->post_recv(w);
  }
  // Nothing there: drive the port once (if no other thread is) and look again.
  int poll_send(Completion* out, int max) override {
    const int n = qp_->poll_send(out, max);
    return n > 0 || port_->try_pass() < 0 ? n : qp_->poll_send(out, max);
  }
  int poll_recv(Completion* out, int max) override {
    const int n = qp_->poll_recv(out, max);
    return n > 0 || port_->try_pass() < 0 ? n : qp_->poll_recv(out, max);
  }

  EndpointEvent poll_event() override {
    if (reported_ || !attachment_.peer_gone.load(std::memory_order_acquire)) return EndpointEvent::none;
    reported_ = true;
    return EndpointEvent::disconnected;
  }
  [[nodiscard]] EndpointState state() const noexcept override {
    if (local_disconnect_ || attachment_.peer_gone.load(std::memory_order_acquire)) {
      return EndpointState::disconnected;
    }
    return qp_->state() == roce::QpState::error ? EndpointState::error : EndpointState::connected;
  }
  [[nodiscard]] const EndpointCaps& caps() const noexcept override { return caps_; }
  [[nodiscard]] std::string peer_address() const override { return peer_; }

  void disconnect() override {
    if (local_disconnect_) return;
    local_disconnect_ = true;
    // What was posted goes on the wire once before the QP errs (its
    // completions are flushed all the same), as a NIC has sent it by then:
    // a refusal SEND posted just before the hang-up reaches the peer. Then
    // the peer's liveness check sees the connection end.
    if (attached_) {
      port_->run_sync([&] {
        (void)qp_->progress();
        qp_->set_error(WcStatus::flushed);
      });
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
  }

 private:
  // The buffer's bytes, and its region as of now (roce::RegionRef).
  Errc resolve(const LocalBuffer& b, std::byte** out, roce::RegionRef* region) const noexcept {
    if (b.length > roce::kMaxMessageSize) return Errc::too_large;
    if (b.length == 0) {
      *out = b.mr == nullptr ? nullptr : b.mr->data();
      return Errc::ok;
    }
    const auto* r = dynamic_cast<const DpdkRegion*>(b.mr);
    if (r == nullptr || r->port() != port_.get() || r->domain() != domain() || b.offset > r->size() ||
        b.length > r->size() - b.offset) {
      return Errc::local_protection;
    }
    *out = r->data() + b.offset;
    region->record = &r->record();
    region->generation = r->record().generation.load();
    return Errc::ok;
  }

  Errc post(roce::SendOp op, std::uint64_t wr_id, LocalBuffer local, RemoteAddress remote,
            std::uint32_t imm) {
    roce::SendWqe w;
    if (Errc e = resolve(local, &w.local, &w.region); e != Errc::ok) return e;
    w.wr_id = wr_id;
    w.op = op;
    w.length = local.length;
    w.remote_offset = remote.offset;
    w.rkey = remote.region.rkey;
    w.imm = imm;
    return qp_->post_send(w);
  }

  std::shared_ptr<Port> port_;
  EndpointCaps caps_;
  UniqueFd fd_;
  std::string peer_;
  std::unique_ptr<roce::RcQp> qp_;
  Attachment attachment_;
  std::uint32_t send_psn_ = 0;
  bool attached_ = false;
  bool local_disconnect_ = false;
  bool reported_ = false;
};

class DpdkListener final : public Listener {
 public:
  DpdkListener(std::shared_ptr<Port> port, UniqueFd fd, const EndpointConfig& cfg)
      : port_(std::move(port)), fd_(std::move(fd)), cfg_(cfg), address_(soft::local_name(fd_.get())) {}
  [[nodiscard]] std::string address() const override { return address_; }

 protected:
  Result<std::unique_ptr<Endpoint>> accept_one(std::chrono::milliseconds timeout,
                                               const BeforeAccept& before_accept) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      // Rounded up, and polled at least once: an accept with a short
      // timeout (1 ms) must still take a connection that is waiting.
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) {
        return make_error(Errc::timeout, "no connection on " + address_ + " within " +
                                             std::to_string(timeout.count()) + " ms");
      }
      UniqueFd conn(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn.get() < 0) continue;
      auto ep = handshake(std::move(conn), before_accept);
      if (ep.ok() || ep.code() != Errc::io_error) return ep;
      // A peer that sent garbage or hung up: wait for the next one.
    }
  }

 private:
  Result<std::unique_ptr<Endpoint>> handshake(UniqueFd conn, const BeforeAccept& before_accept) {
    if (auto r = soft::configure_stream(conn.get()); !r) return r.error();
    const auto deadline = Clock::now() + oob::kServerHandshakeTimeout;
    auto request = oob::read_request(conn.get(), deadline);
    if (!request) return request.error();
    const Hello& peer = request.value();
    const int fd = conn.get();
    if (oob::dialer_gone(fd))
      return make_error(Errc::io_error, "a peer gave up before the handshake's answer");
    std::string name = soft::peer_name(fd);
    auto ep =
        std::make_unique<DpdkEndpoint>(port_, grant(cfg_), std::move(conn), std::move(name), peer.domain);
    Hello reply{};
    Errc refusal = Errc::ok;
    if (auto r = ep->create_qp(); !r) {
      refusal = r.code();
    } else {
      reply = ep->hello();
      ep->start(peer);
      if (before_accept) refusal = before_accept(*ep);
    }
    if (refusal != Errc::ok) {
      oob::refuse(fd, refusal, deadline);
      return make_error(refusal, "connection refused before accept: " + std::string(to_string(refusal)));
    }
    if (auto r = oob::reply(fd, reply, deadline); !r) return r.error();
    return std::unique_ptr<Endpoint>(std::move(ep));
  }

  std::shared_ptr<Port> port_;
  UniqueFd fd_;
  EndpointConfig cfg_;
  std::string address_;
};

class DpdkProvider final : public Provider {
 public:
  explicit DpdkProvider(std::shared_ptr<Port> port) : port_(std::move(port)) {}
  [[nodiscard]] std::string name() const override { return "dpdk:" + port_->spec().key; }

  Result<std::unique_ptr<MemoryRegion>> allocate_region(std::size_t size, std::uint32_t access,
                                                        DomainId domain) override {
    if (size == 0) return make_error(Errc::invalid_argument, "zero-length region");
    const std::size_t page = 4096;
    const std::size_t mapped = (size + page - 1) / page * page;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return make_error(Errc::resource_exhausted, "mmap of a region failed");
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<DpdkRegion>(port_, static_cast<std::byte*>(p), size, mapped, access, domain));
  }

  Result<std::unique_ptr<Listener>> listen(std::string_view address, const EndpointConfig& cfg) override {
    auto addr = soft::parse_address(address);
    if (!addr) return addr.error();
    auto fd = soft::listen_on(addr.value());
    if (!fd) return fd.error();
    return std::unique_ptr<Listener>(std::make_unique<DpdkListener>(port_, std::move(fd.value()), cfg));
  }

  Result<std::unique_ptr<Endpoint>> connect(std::string_view address, const EndpointConfig& cfg,
                                            std::chrono::milliseconds timeout) override {
    auto addr = soft::parse_address(address);
    if (!addr) return addr.error();
    const auto deadline = Clock::now() + timeout;
    auto fd = soft::connect_to(addr.value(), deadline);
    if (!fd) return fd.error();
    const int raw = fd.value().get();
    auto ep = std::make_unique<DpdkEndpoint>(port_, grant(cfg), std::move(fd.value()), std::string(address),
                                             cfg.domain);
    if (auto r = ep->create_qp(); !r) return r.error();
    auto reply = oob::dial(raw, ep->hello(), deadline, address);
    if (!reply) return reply.error();
    ep->start(reply.value());
    return std::unique_ptr<Endpoint>(std::move(ep));
  }

 private:
  std::shared_ptr<Port> port_;
};

}  // namespace
}  // namespace dpdk

Result<std::unique_ptr<Provider>> open_dpdk_provider(std::string_view port_spec) {
  auto spec = dpdk::parse_port_spec(port_spec);
  if (!spec) return spec.error();
  auto port = dpdk::Port::open(spec.value());
  if (!port) return port.error();
  return std::unique_ptr<Provider>(std::make_unique<dpdk::DpdkProvider>(std::move(port.value())));
}

}  // namespace catena::fabric
