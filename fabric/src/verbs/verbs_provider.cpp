// The verbs provider: libibverbs for the data path, librdmacm to find the
// peer and exchange QP numbers (or, with ",oob", the TCP handshake of
// verbs_oob.hpp that the dpdk provider speaks too). Connection setup (this file) blocks up to
// the caller's timeout; the data path lives in verbs_endpoint.cpp.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <catena/fabric/fabric.hpp>

#include "verbs_cm.hpp"
#include "verbs_device.hpp"
#include "verbs_endpoint.hpp"
#include "verbs_oob.hpp"

namespace catena::fabric {

namespace verbs {
namespace {

// Once a connection request has been accepted, give the handshake's last
// message this long even if the caller's accept timeout is shorter: the peer
// already considers itself connected.
constexpr std::chrono::milliseconds kEstablishGrace{2000};

Error address_error(int err, std::string_view step, std::string_view address) {
  const std::string where = std::string(step) + " '" + std::string(address) + "': ";
  if (err == ENODEV || err == EADDRNOTAVAIL || err == EINVAL || err == EAFNOSUPPORT) {
    return make_error(Errc::invalid_argument, where + "address is not on an RDMA device: " + errno_text(err));
  }
  if (err == EADDRINUSE) {
    return make_error(Errc::io_error, where + "address in use");
  }
  return make_error(Errc::io_error, where + errno_text(err));
}

Error wrong_device(const VerbsDevice& device, const rdma_cm_id* id, std::string_view address) {
  const char* other = id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : nullptr;
  return make_error(Errc::invalid_argument,
                    "address '" + std::string(address) + "' is reached through RDMA device '" +
                        (other != nullptr ? other : "?") + "', not '" + device.name + "'");
}

std::uint8_t clamp_u8(int v) {
  return static_cast<std::uint8_t>(std::clamp(v, 0, 255));
}

rdma_conn_param conn_param(std::uint8_t responder_resources, std::uint8_t initiator_depth,
                           std::uint32_t qp_num) {
  rdma_conn_param p{};
  p.responder_resources = responder_resources;  // RDMA READs we serve at once
  p.initiator_depth = initiator_depth;          // RDMA READs we issue at once
  p.retry_count = kRetryCount;
  p.rnr_retry_count = kRnrRetryInfinite;
  p.qp_num = qp_num;
  return p;
}

Result<CmIdHandle> create_id(rdma_event_channel* channel) {
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(channel, &raw, nullptr, RDMA_PS_TCP) != 0) {
    return make_error(Errc::io_error, "rdma_create_id failed: " + errno_text(errno));
  }
  return CmIdHandle(raw);
}

// Listens on one address; hands out endpoints for the connection requests
// that arrive. accept() may be called from any thread (serialised).
class VerbsListener final : public Listener {
 public:
  VerbsListener(std::shared_ptr<VerbsDevice> device, EventChannelHandle channel, CmIdHandle id,
                const EndpointConfig& cfg)
      : device_(std::move(device)), channel_(std::move(channel)), id_(std::move(id)), cfg_(cfg) {
    address_ = format_address(rdma_get_local_addr(id_.get()));
  }

  [[nodiscard]] std::string address() const override { return address_; }

 protected:
  Result<std::unique_ptr<Endpoint>> accept_one(std::chrono::milliseconds timeout,
                                               const BeforeAccept& before_accept) override;

 private:
  Result<std::unique_ptr<Endpoint>> accept_request(CmIdHandle id, const CmEvent& request,
                                                   Clock::time_point deadline,
                                                   const BeforeAccept& before_accept);

  std::shared_ptr<VerbsDevice> device_;
  EventChannelHandle channel_;
  CmIdHandle id_;
  EndpointConfig cfg_;
  std::string address_;
  std::mutex accept_mu_;
};

Result<std::unique_ptr<Endpoint>> VerbsListener::accept_one(std::chrono::milliseconds timeout,
                                                            const BeforeAccept& before_accept) {
  std::lock_guard lock(accept_mu_);
  const auto deadline = Clock::now() + timeout;
  Error last_failure;
  for (;;) {
    auto ev = wait_event(channel_.get(), deadline);
    if (!ev) {
      if (ev.code() != Errc::timeout) {
        return ev.error();
      }
      if (last_failure.code != Errc::ok) {
        return last_failure;
      }
      return make_error(Errc::timeout, "no connection on " + address_ + " within " +
                                           std::to_string(timeout.count()) + " ms");
    }
    if (ev->type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
      return make_error(Errc::no_device, "RDMA device '" + device_->name + "' removed");
    }
    if (ev->type != RDMA_CM_EVENT_CONNECT_REQUEST) {
      continue;  // e.g. ADDR_CHANGE on the listening id
    }
    // A request that fails half-way must not end the accept: the next
    // connecting peer may be fine. Keep waiting until the deadline.
    auto ep = accept_request(CmIdHandle(ev->id), *ev, deadline, before_accept);
    if (ep) {
      return ep;
    }
    last_failure = ep.error();
  }
}

Result<std::unique_ptr<Endpoint>> VerbsListener::accept_request(CmIdHandle id, const CmEvent& request,
                                                                Clock::time_point deadline,
                                                                const BeforeAccept& before_accept) {
  const std::string peer = format_address(rdma_get_peer_addr(id.get()));
  auto reject = [](rdma_cm_id* rid) { (void)rdma_reject(rid, nullptr, 0); };
  if (!device_->same_device(id->verbs)) {
    reject(id.get());
    return wrong_device(*device_, id.get(), peer);
  }
  Connection conn;
  auto channel = create_event_channel();
  if (!channel) {
    reject(id.get());
    return channel.error();
  }
  conn.channel = std::move(channel.value());
  // The endpoint gets its own channel, so its events never mix with the
  // listener's or another endpoint's.
  if (rdma_migrate_id(id.get(), conn.channel.get()) != 0) {
    const int err = errno;
    reject(id.get());
    return make_error(Errc::io_error, "rdma_migrate_id failed: " + errno_text(err));
  }
  conn.id = std::move(id);

  EndpointConfig cfg = cfg_;
  cfg.domain = request.domain;  // the dialer's choice
  auto qp = create_queue_pair(*device_, conn, cfg);
  if (!qp) {
    reject(conn.id.get());
    return qp.error();
  }
  // Serve as many READs as the peer will issue and issue as many as it
  // serves, within what this device supports.
  const std::uint8_t responder = std::min(clamp_u8(device_->attr.max_qp_rd_atom), request.initiator_depth);
  const std::uint8_t initiator =
      std::min(clamp_u8(device_->attr.max_qp_init_rd_atom), request.responder_resources);
  if (auto r = qp_to_rtr(conn.id.get(), conn.qp.get(), qp->link_layer_ib, responder); !r) {
    reject(conn.id.get());
    return r.error();
  }
  if (auto r = qp_to_rts(conn.id.get(), conn.qp.get(), initiator); !r) {
    reject(conn.id.get());
    return r.error();
  }
  rdma_conn_param param = conn_param(responder, initiator, conn.qp->qp_num);
  // The endpoint exists before the connection is accepted, so the caller can
  // post receives on it first: the peer may send the moment its connect
  // returns, and setup must not lean on RNR retries (a device may limit them).
  auto ep = std::make_unique<VerbsEndpoint>(device_, std::move(conn), qp->caps, peer, cfg.domain);
  if (before_accept) {
    if (Errc e = before_accept(*ep); e != Errc::ok) {
      reject(ep->cm_id());  // the endpoint's destructor then finds nothing to disconnect
      return make_error(e,
                        "connection from " + peer + " refused before accept: " + std::string(to_string(e)));
    }
  }
  if (rdma_accept(ep->cm_id(), &param) != 0) {
    return make_error(Errc::io_error, "rdma_accept from " + peer + " failed: " + errno_text(errno));
  }
  const auto establish_deadline = std::max(deadline, Clock::now() + kEstablishGrace);
  if (auto ev =
          expect_event(ep->cm_channel(), establish_deadline, RDMA_CM_EVENT_ESTABLISHED, "accepting", peer);
      !ev) {
    return ev.error();
  }
  return std::unique_ptr<Endpoint>(std::move(ep));
}

// Hands out memory regions, listeners and endpoints on one opened device.
// Setup calls may come from several threads: the device is immutable and
// each listener/connection has its own rdma_cm channel.
// With `oob`, connections are set up over TCP (verbs_oob.hpp), not rdma_cm.
class VerbsProvider final : public Provider {
 public:
  VerbsProvider(std::shared_ptr<VerbsDevice> device, bool oob) : device_(std::move(device)), oob_(oob) {}

  [[nodiscard]] std::string name() const override { return "verbs:" + device_->name + (oob_ ? ",oob" : ""); }
  [[nodiscard]] std::int64_t warm_bytes() const noexcept override {
    return static_cast<std::int64_t>(device_->warm.bytes() + device_->spares.pending_bytes());
  }

  Result<std::unique_ptr<MemoryRegion>> allocate_region(std::size_t size, std::uint32_t access,
                                                        DomainId domain) override {
    return VerbsMemoryRegion::allocate(device_, size, access, domain);
  }

  Result<std::unique_ptr<Listener>> listen(std::string_view address, const EndpointConfig& cfg) override;
  Result<std::unique_ptr<Endpoint>> connect(std::string_view address, const EndpointConfig& cfg,
                                            std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<VerbsDevice> device_;
  bool oob_;
};

Result<std::unique_ptr<Listener>> VerbsProvider::listen(std::string_view address, const EndpointConfig& cfg) {
  if (oob_) {
    return oob_listen(device_, address, cfg);
  }
  auto addr = parse_address(address);
  if (!addr) {
    return addr.error();
  }
  if (cfg.send_queue_depth == 0 || cfg.recv_queue_depth == 0) {
    return make_error(Errc::invalid_argument, "queue depths must be at least 1");
  }
  auto channel = create_event_channel();
  if (!channel) {
    return channel.error();
  }
  auto id = create_id(channel.value().get());
  if (!id) {
    return id.error();
  }
  if (rdma_bind_addr(id.value().get(), reinterpret_cast<sockaddr*>(&addr.value())) != 0) {
    return address_error(errno, "cannot listen on", address);
  }
  // A wildcard address binds no device yet; requests are checked on arrival.
  if (id.value()->verbs != nullptr && !device_->same_device(id.value()->verbs)) {
    return wrong_device(*device_, id.value().get(), address);
  }
  if (rdma_listen(id.value().get(), kListenBacklog) != 0) {
    return address_error(errno, "rdma_listen on", address);
  }
  return std::unique_ptr<Listener>(
      std::make_unique<VerbsListener>(device_, std::move(channel.value()), std::move(id.value()), cfg));
}

Result<std::unique_ptr<Endpoint>> VerbsProvider::connect(std::string_view address, const EndpointConfig& cfg,
                                                         std::chrono::milliseconds timeout) {
  if (oob_) {
    return oob_connect(device_, address, cfg, timeout);
  }
  const auto deadline = Clock::now() + timeout;
  auto addr = parse_address(address);
  if (!addr) {
    return addr.error();
  }
  const std::string peer(address);

  Connection conn;
  auto channel = create_event_channel();
  if (!channel) {
    return channel.error();
  }
  conn.channel = std::move(channel.value());
  auto id = create_id(conn.channel.get());
  if (!id) {
    return id.error();
  }
  conn.id = std::move(id.value());
  rdma_event_channel* ch = conn.channel.get();

  if (rdma_resolve_addr(conn.id.get(), nullptr, reinterpret_cast<sockaddr*>(&addr.value()),
                        remaining_ms(deadline)) != 0) {
    return address_error(errno, "cannot resolve", address);
  }
  if (auto ev = expect_event(ch, deadline, RDMA_CM_EVENT_ADDR_RESOLVED, "resolving address", peer); !ev) {
    return ev.error();
  }
  if (!device_->same_device(conn.id->verbs)) {
    return wrong_device(*device_, conn.id.get(), address);
  }
  if (rdma_resolve_route(conn.id.get(), remaining_ms(deadline)) != 0) {
    return make_error(Errc::io_error, "rdma_resolve_route to " + peer + " failed: " + errno_text(errno));
  }
  if (auto ev = expect_event(ch, deadline, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving route", peer); !ev) {
    return ev.error();
  }

  auto qp = create_queue_pair(*device_, conn, cfg);
  if (!qp) {
    return qp.error();
  }
  rdma_conn_param param = conn_param(clamp_u8(device_->attr.max_qp_rd_atom),
                                     clamp_u8(device_->attr.max_qp_init_rd_atom), conn.qp->qp_num);
  DomainPrivateData domain;
  domain.domain = cfg.domain;
  if (cfg.domain != kDefaultDomain) {
    param.private_data = &domain;
    param.private_data_len = sizeof domain;
  }
  if (rdma_connect(conn.id.get(), &param) != 0) {
    return make_error(Errc::io_error, "rdma_connect to " + peer + " failed: " + errno_text(errno));
  }
  // rdma_cm leaves a QP it did not create to us: on the peer's reply, move
  // it to RTS with the negotiated attributes, then complete the handshake.
  if (auto ev = expect_event(ch, deadline, RDMA_CM_EVENT_CONNECT_RESPONSE, "connecting", peer); !ev) {
    return ev.error();
  }
  if (auto r = qp_to_rtr(conn.id.get(), conn.qp.get(), qp->link_layer_ib, std::nullopt); !r) {
    return r.error();
  }
  if (auto r = qp_to_rts(conn.id.get(), conn.qp.get(), std::nullopt); !r) {
    return r.error();
  }
  if (rdma_establish(conn.id.get()) != 0) {
    return make_error(Errc::io_error, "rdma_establish with " + peer + " failed: " + errno_text(errno));
  }
  std::string peer_addr = format_address(rdma_get_peer_addr(conn.id.get()));
  return std::unique_ptr<Endpoint>(
      std::make_unique<VerbsEndpoint>(device_, std::move(conn), qp->caps, std::move(peer_addr), cfg.domain));
}

}  // namespace
}  // namespace verbs

Result<std::unique_ptr<Provider>> open_verbs_provider(std::string_view spec) {
  // "<device>", then ",oob" and ",warm=<MiB>" in any order.
  const std::string_view device = spec.substr(0, spec.find(','));
  bool oob = false;
  std::optional<std::size_t> warm;
  for (std::string_view rest = spec.substr(device.size()); !rest.empty();) {
    rest.remove_prefix(1);  // the comma
    const std::string_view option = rest.substr(0, rest.find(','));
    rest.remove_prefix(option.size());
    if (option == "oob") {
      oob = true;
    } else if (option.starts_with("warm=")) {
      const std::string_view mib = option.substr(5);
      std::size_t v = 0;
      const auto [end, ec] = std::from_chars(mib.data(), mib.data() + mib.size(), v);
      if (ec != std::errc{} || end != mib.data() + mib.size() || v > (std::size_t{1} << 20)) {
        return make_error(Errc::invalid_argument, "verbs provider option '" + std::string(option) +
                                                      "': warm=<MiB> takes 0 to 1048576 MiB");
      }
      warm = v << 20;
    } else {
      return make_error(Errc::invalid_argument, "unknown verbs provider option '" + std::string(option) +
                                                    "' in 'verbs:" + std::string(spec) +
                                                    "' (expected 'verbs:<device>[,oob][,warm=<MiB>]')");
    }
  }
  auto dev = verbs::VerbsDevice::open(device);
  if (!dev) {
    return dev.error();
  }
  if (warm) dev.value()->warm.set_limit(*warm);
  // Fail at open, not at the first connect, if rdma_cm is unusable.
  if (!oob) {
    auto probe = verbs::create_event_channel();
    if (!probe) {
      return probe.error();
    }
  }
  return std::unique_ptr<Provider>(std::make_unique<verbs::VerbsProvider>(std::move(dev.value()), oob));
}

}  // namespace catena::fabric
