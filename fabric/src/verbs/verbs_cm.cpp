#include "verbs_cm.hpp"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <netinet/in.h>

#include <catena/fabric/host_port.hpp>

namespace catena::fabric::verbs {

namespace {

// IB CM reject reasons seen in practice (IBTA 12.6.7.2); rdma_cm passes the
// reason as the REJECTED event's status.
std::string reject_reason(int status) {
  switch (status) {
    case 1:
      return "no QP available at the peer";
    case 2:
      return "no EE context available at the peer";
    case 3:
      return "peer out of resources";
    case 4:
      return "timeout";
    case 5:
      return "unsupported request";
    case 8:
      return "nobody listens on that port";
    case 28:
      return "rejected by the peer application";
    default:
      return "reject reason " + std::to_string(status);
  }
}

}  // namespace

Result<sockaddr_storage> parse_address(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return make_error(Errc::invalid_argument, "bad address '" + std::string(address) +
                                                  "': " + std::string(why) +
                                                  " (expected 'a.b.c.d:port' or '[v6]:port')");
  };
  std::string why;
  const auto hp = split_host_port(address, &why, PortRule::zero_allowed);
  if (!hp) return bad(why);
  const unsigned port = hp->port;
  const bool v6 = hp->host.find(':') != std::string::npos;
  sockaddr_storage ss{};
  if (v6) {
    const std::string& h = hp->host;
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (inet_pton(AF_INET6, h.c_str(), &sin6->sin6_addr) != 1) {
      return bad("not an IPv6 address");
    }
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(static_cast<std::uint16_t>(port));
    return ss;
  }
  const std::string& h = hp->host;
  auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET, h.c_str(), &sin->sin_addr) != 1) {
    return bad("not an IPv4 address");
  }
  sin->sin_family = AF_INET;
  sin->sin_port = htons(static_cast<std::uint16_t>(port));
  return ss;
}

std::string format_address(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr == nullptr) {
    return "?";
  }
  if (addr->sa_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf) == nullptr) {
      return "?";
    }
    return std::string(buf) + ":" + std::to_string(ntohs(sin->sin_port));
  }
  if (addr->sa_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(addr);
    if (inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf) == nullptr) {
      return "?";
    }
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(sin6->sin6_port));
  }
  return "?";
}

Result<EventChannelHandle> create_event_channel() {
  errno = 0;
  EventChannelHandle ch(rdma_create_event_channel());
  if (!ch) {
    const int err = errno;
    if (err == ENODEV || err == ENOSYS || err == ENOENT) {
      return make_error(Errc::no_device, "no RDMA device: rdma_cm is unavailable (" + errno_text(err) +
                                             "; is the rdma_ucm module loaded?)");
    }
    return make_error(Errc::io_error, "rdma_create_event_channel failed: " + errno_text(err));
  }
  const int flags = fcntl(ch->fd, F_GETFL);
  if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return make_error(Errc::io_error, "cannot make the rdma_cm channel non-blocking: " + errno_text(errno));
  }
  return ch;
}

Result<std::optional<CmEvent>> try_get_event(rdma_event_channel* channel) {
  rdma_cm_event* raw = nullptr;
  if (rdma_get_cm_event(channel, &raw) != 0) {
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) {
      return std::optional<CmEvent>{};
    }
    return make_error(Errc::io_error, "rdma_get_cm_event failed: " + errno_text(err));
  }
  CmEventHandle ev(raw);
  CmEvent out;
  out.type = ev->event;
  out.status = ev->status;
  out.id = ev->id;
  out.listen_id = ev->listen_id;
  out.initiator_depth = ev->param.conn.initiator_depth;
  out.responder_resources = ev->param.conn.responder_resources;
  if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->param.conn.private_data != nullptr &&
      ev->param.conn.private_data_len >= sizeof(DomainPrivateData)) {
    DomainPrivateData d;
    std::memcpy(&d, ev->param.conn.private_data, sizeof d);
    if (d.magic == DomainPrivateData::kMagic && d.version == 1) out.domain = d.domain;
  }
  return std::optional<CmEvent>(out);
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 1, 1 << 30));
}

Result<CmEvent> wait_event(rdma_event_channel* channel, Clock::time_point deadline) {
  for (;;) {
    auto got = try_get_event(channel);
    if (!got) {
      return got.error();
    }
    if (got.value()) {
      return *got.value();
    }
    if (Clock::now() >= deadline) {
      return make_error(Errc::timeout, "timed out");
    }
    pollfd pfd{channel->fd, POLLIN, 0};
    if (poll(&pfd, 1, remaining_ms(deadline)) < 0 && errno != EINTR) {
      return make_error(Errc::io_error, "poll on the rdma_cm channel failed: " + errno_text(errno));
    }
  }
}

Error event_error(const CmEvent& ev, std::string_view step, std::string_view peer) {
  const std::string where = std::string(step) + " (" + std::string(peer) + ")";
  const int err = ev.status < 0 ? -ev.status : ev.status;
  switch (ev.type) {
    case RDMA_CM_EVENT_REJECTED:
      return make_error(Errc::refused, where + ": connection refused: " + reject_reason(ev.status));
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR: {
      const std::string what = std::string(rdma_event_str(ev.type)) + ": " + errno_text(err);
      if (err == ETIMEDOUT) {
        return make_error(Errc::timeout, where + ": " + what);
      }
      if (err == ENODEV || err == EADDRNOTAVAIL) {
        return make_error(Errc::invalid_argument, where + ": address is not on an RDMA device: " + what);
      }
      if (err == ECONNREFUSED) {
        return make_error(Errc::refused, where + ": " + what);
      }
      return make_error(Errc::io_error, where + ": " + what);
    }
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return make_error(Errc::disconnected, where + ": peer disconnected during setup");
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return make_error(Errc::no_device, where + ": RDMA device removed");
    default:
      return make_error(Errc::io_error, where + ": unexpected " + rdma_event_str(ev.type) +
                                            (ev.status != 0 ? " status " + std::to_string(ev.status) : ""));
  }
}

Result<CmEvent> expect_event(rdma_event_channel* channel, Clock::time_point deadline, rdma_cm_event_type want,
                             std::string_view step, std::string_view peer) {
  auto ev = wait_event(channel, deadline);
  if (!ev) {
    Error e = ev.error();
    e.message = std::string(step) + " (" + std::string(peer) + "): " + e.message;
    return e;
  }
  if (ev->type != want || ev->status != 0) {
    return event_error(*ev, step, peer);
  }
  return ev;
}

namespace {

// Asks rdma_cm for the attributes of `state`, lets `adjust` amend them, applies them.
template <class Adjust>
Result<void> modify(rdma_cm_id* id, ibv_qp* qp, ibv_qp_state state, const char* name, Adjust&& adjust) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  if (rdma_init_qp_attr(id, &attr, &mask) != 0) {
    return make_error(Errc::io_error,
                      std::string("rdma_init_qp_attr(") + name + ") failed: " + errno_text(errno));
  }
  adjust(attr, mask);
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    return make_error(Errc::io_error, std::string("ibv_modify_qp to ") + name + " failed: " + errno_text(rc));
  }
  return {};
}

}  // namespace

Result<void> qp_to_init(rdma_cm_id* id, ibv_qp* qp) {
  return modify(id, qp, IBV_QPS_INIT, "INIT", [](ibv_qp_attr&, int&) {});
}

Result<void> qp_to_rtr(rdma_cm_id* id, ibv_qp* qp, bool link_layer_ib,
                       std::optional<std::uint8_t> responder_resources) {
  // Refresh INIT first: once the CM has exchanged REQ/REP, rdma_init_qp_attr
  // grants the remote access rights (and read responders) negotiated.
  if (auto r = qp_to_init(id, qp); !r) {
    return r;
  }
  return modify(id, qp, IBV_QPS_RTR, "RTR", [&](ibv_qp_attr& attr, int& mask) {
    // Old rdma_ucm kernels leak RoCE-only mask bits 21-23 on IB ports
    // (librdmacm masks them the same way).
    if (link_layer_ib) {
      mask &= ~0xe00000;
    }
    if (responder_resources) {
      attr.max_dest_rd_atomic = *responder_resources;
    }
    if (mask & IBV_QP_MIN_RNR_TIMER) {
      attr.min_rnr_timer = kMinRnrTimer;
    }
  });
}

Result<void> qp_to_rts(rdma_cm_id* id, ibv_qp* qp, std::optional<std::uint8_t> initiator_depth) {
  return modify(id, qp, IBV_QPS_RTS, "RTS", [&](ibv_qp_attr& attr, int& mask) {
    if (mask & IBV_QP_TIMEOUT) {
      attr.timeout = kAckTimeout;
    }
    if (initiator_depth) {
      attr.max_rd_atomic = *initiator_depth;
    }
  });
}

int qp_to_error(ibv_qp* qp) noexcept {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

}  // namespace catena::fabric::verbs
