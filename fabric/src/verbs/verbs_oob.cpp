#include "verbs_oob.hpp"

#include <poll.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <random>
#include <string>
#include <utility>

#include "oob_handshake.hpp"
#include "soft/net.hpp"
#include "verbs_cm.hpp"
#include "verbs_endpoint.hpp"

namespace catena::fabric::verbs {
namespace {

using oob::Hello;
using soft::UniqueFd;

// GID table entries looked at for the one that maps the local IPv4 address.
constexpr int kGidSearch = 16;
// The GID used when none maps the address: rdma_rxe's IPv4-mapped one.
constexpr int kDefaultGidIndex = 1;
constexpr std::uint8_t kHopLimit = 64;
constexpr int kMaxReadsInFlight = 16;

ibv_mtu mtu_enum(std::uint32_t bytes) noexcept {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

std::uint16_t mtu_bytes(ibv_mtu mtu) noexcept {
  return static_cast<std::uint16_t>(128U << static_cast<unsigned>(mtu));
}

// The IPv4 address (host order) a socket is bound to locally, 0 if none.
std::uint32_t local_ipv4(int fd) noexcept {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr);
  if (ss.ss_family == AF_INET6) {
    const auto* a6 = &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6)) {
      std::uint32_t ip = 0;
      std::memcpy(&ip, &a6->s6_addr[12], 4);
      return ntohl(ip);
    }
  }
  return 0;
}

// The MAC of the network interface under the device's port, from sysfs
// (the dpdk provider addresses its frames to it); zeros if unknown.
void read_mac(const VerbsDevice& device, std::uint8_t mac[6]) {
  std::string netdev;
  std::ifstream(std::string("/sys/class/infiniband/") + device.name + "/ports/" + std::to_string(kOobPort) +
                "/gid_attrs/ndevs/" + std::to_string(kDefaultGidIndex)) >>
      netdev;
  std::string text;
  if (netdev.empty() || !(std::ifstream("/sys/class/net/" + netdev + "/address") >> text)) return;
  unsigned m[6] = {};
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) return;
  for (int i = 0; i < 6; ++i) mac[i] = static_cast<std::uint8_t>(m[i]);
}

// The GID index whose GID is the IPv4-mapped `ip`, else kDefaultGidIndex.
int gid_index_for(const VerbsDevice& device, std::uint32_t ip, ibv_gid* gid) {
  Hello want{};
  oob::set_gid_ipv4(want, ip);
  for (int i = 0; ip != 0 && i < kGidSearch; ++i) {
    if (ibv_query_gid(device.context.get(), kOobPort, i, gid) == 0 &&
        std::memcmp(gid->raw, want.gid, sizeof want.gid) == 0) {
      return i;
    }
  }
  if (ibv_query_gid(device.context.get(), kOobPort, kDefaultGidIndex, gid) != 0) *gid = ibv_gid{};
  return kDefaultGidIndex;
}

// One connection being set up: its QP, and what this side tells the peer.
struct Setup {
  Connection conn;
  QueuePairInfo info;
  Hello mine{};
  int gid_index = kDefaultGidIndex;
  ibv_mtu active_mtu = IBV_MTU_1024;
};

Result<Setup> prepare(const VerbsDevice& device, UniqueFd fd, const EndpointConfig& cfg) {
  Setup s;
  s.conn.oob = std::move(fd);
  auto qp = create_queue_pair(device, s.conn, cfg);
  if (!qp) return qp.error();
  s.info = qp.value();
  ibv_port_attr port{};
  if (int rc = ibv_query_port(device.context.get(), kOobPort, &port); rc != 0) {
    return make_error(Errc::io_error, "ibv_query_port failed: " + errno_text(rc));
  }
  if (port.link_layer != IBV_LINK_LAYER_ETHERNET) {
    return make_error(Errc::invalid_argument,
                      "the oob connection mode needs a RoCE port; '" + device.name + "' is not Ethernet");
  }
  s.active_mtu = port.active_mtu;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = kOobPort;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(s.conn.qp.get(), &a,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    return make_error(Errc::io_error, "ibv_modify_qp to INIT failed: " + errno_text(rc));
  }
  ibv_gid gid{};
  s.gid_index = gid_index_for(device, local_ipv4(s.conn.oob.get()), &gid);
  s.mine = oob::blank_hello();
  s.mine.qpn = s.conn.qp->qp_num;
  std::random_device rd;
  s.mine.psn = rd() & 0xffffffU;
  std::memcpy(s.mine.gid, gid.raw, sizeof s.mine.gid);
  read_mac(device, s.mine.mac);
  s.mine.mtu = mtu_bytes(s.active_mtu);
  s.mine.sq_depth = s.info.caps.send_queue_depth;
  s.mine.rq_depth = s.info.caps.recv_queue_depth;
  s.mine.domain = cfg.domain;
  return s;
}

// INIT -> RTR -> RTS towards the peer's QP.
Result<void> join(const VerbsDevice& device, Setup& s, const Hello& peer) {
  const int reads =
      std::clamp(std::min(device.attr.max_qp_rd_atom, device.attr.max_qp_init_rd_atom), 1, kMaxReadsInFlight);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = std::min(s.active_mtu, mtu_enum(peer.mtu));
  a.dest_qp_num = peer.qpn & 0xffffffU;
  a.rq_psn = peer.psn & 0xffffffU;
  a.max_dest_rd_atomic = static_cast<std::uint8_t>(reads);
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = kOobPort;
  a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(s.gid_index);
  a.ah_attr.grh.hop_limit = kHopLimit;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, sizeof peer.gid);
  if (int rc = ibv_modify_qp(s.conn.qp.get(), &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      rc != 0) {
    return make_error(Errc::io_error, "ibv_modify_qp to RTR failed: " + errno_text(rc));
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = kAckTimeout;
  a.retry_cnt = kRetryCount;
  a.rnr_retry = kRnrRetryInfinite;
  a.sq_psn = s.mine.psn;
  a.max_rd_atomic = static_cast<std::uint8_t>(reads);
  if (int rc = ibv_modify_qp(s.conn.qp.get(), &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0) {
    return make_error(Errc::io_error, "ibv_modify_qp to RTS failed: " + errno_text(rc));
  }
  return {};
}

class OobListener final : public Listener {
 public:
  OobListener(std::shared_ptr<VerbsDevice> device, UniqueFd fd, const EndpointConfig& cfg)
      : device_(std::move(device)), fd_(std::move(fd)), cfg_(cfg), address_(soft::local_name(fd_.get())) {}
  [[nodiscard]] std::string address() const override { return address_; }

 protected:
  Result<std::unique_ptr<Endpoint>> accept_one(std::chrono::milliseconds timeout,
                                               const BeforeAccept& before_accept) override {
    std::lock_guard lock(accept_mu_);
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
    const int fd = conn.get();
    auto request = oob::read_request(fd, deadline);
    if (!request) return request.error();
    std::string peer = soft::peer_name(fd);
    if (oob::dialer_gone(fd))
      return make_error(Errc::io_error, peer + " gave up before the handshake's answer");
    EndpointConfig cfg = cfg_;
    cfg.domain = request.value().domain;  // the dialer's choice
    auto setup = prepare(*device_, std::move(conn), cfg);
    Error failure;
    if (!setup) {
      failure = setup.error();
    } else if (auto r = join(*device_, setup.value(), request.value()); !r) {
      failure = r.error();
    }
    if (failure.code != Errc::ok) {
      oob::refuse(fd, failure.code, deadline);
      return make_error(failure.code, "accepting " + peer + ": " + failure.message);
    }
    const Hello mine = setup.value().mine;
    // Built before the answer, so the caller's receives are posted before the peer may send.
    auto ep = std::make_unique<VerbsEndpoint>(device_, std::move(setup.value().conn), setup.value().info.caps,
                                              peer, cfg.domain);
    if (before_accept) {
      if (Errc e = before_accept(*ep); e != Errc::ok) {
        oob::refuse(fd, e, deadline);
        return make_error(e,
                          "connection from " + peer + " refused before accept: " + std::string(to_string(e)));
      }
    }
    if (auto r = oob::reply(fd, mine, deadline); !r) {
      return make_error(r.code() == Errc::disconnected ? Errc::io_error : r.code(),
                        "answering " + peer + ": " + r.error().message);
    }
    return std::unique_ptr<Endpoint>(std::move(ep));
  }

  std::shared_ptr<VerbsDevice> device_;
  UniqueFd fd_;
  EndpointConfig cfg_;
  std::string address_;
  std::mutex accept_mu_;
};

}  // namespace

Result<std::unique_ptr<Listener>> oob_listen(std::shared_ptr<VerbsDevice> device, std::string_view address,
                                             const EndpointConfig& cfg) {
  if (cfg.send_queue_depth == 0 || cfg.recv_queue_depth == 0) {
    return make_error(Errc::invalid_argument, "queue depths must be at least 1");
  }
  auto addr = soft::parse_address(address);
  if (!addr) return addr.error();
  auto fd = soft::listen_on(addr.value());
  if (!fd) return fd.error();
  return std::unique_ptr<Listener>(
      std::make_unique<OobListener>(std::move(device), std::move(fd.value()), cfg));
}

Result<std::unique_ptr<Endpoint>> oob_connect(const std::shared_ptr<VerbsDevice>& device,
                                              std::string_view address, const EndpointConfig& cfg,
                                              std::chrono::milliseconds timeout) {
  auto addr = soft::parse_address(address);
  if (!addr) return addr.error();
  const auto deadline = Clock::now() + timeout;
  auto fd = soft::connect_to(addr.value(), deadline);
  if (!fd) return fd.error();
  const int raw = fd.value().get();
  auto setup = prepare(*device, std::move(fd.value()), cfg);
  if (!setup) return setup.error();
  auto answer = oob::dial(raw, setup.value().mine, deadline, address);
  if (!answer) return answer.error();
  if (auto r = join(*device, setup.value(), answer.value()); !r) return r.error();
  return std::unique_ptr<Endpoint>(std::make_unique<VerbsEndpoint>(
      device, std::move(setup.value().conn), setup.value().info.caps, std::string(address), cfg.domain));
}

}  // namespace catena::fabric::verbs
