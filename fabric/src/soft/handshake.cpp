#include "soft/handshake.hpp"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <utility>

#include "soft/endpoint_common.hpp"
#include "soft/shm_endpoint.hpp"
#include "soft/tcp_endpoint.hpp"

namespace catena::fabric::soft {
namespace {

void copy_text(char* dst, std::size_t cap, const std::string& s) {
  std::size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

std::string text_of(const char* src, std::size_t cap) {
  return std::string(src, strnlen(src, cap));
}

const char* mode_name(std::uint8_t m) {
  switch (static_cast<Mode>(m)) {
    case Mode::tcp:
      return "tcp";
    case Mode::shm:
      return "shm";
    default:
      return "auto";
  }
}

// Fills in who we are: identity, mode, the depths we grant.
HandshakeMsg make_msg(Core& core, HandshakeKind kind, const EndpointCaps& caps) {
  HandshakeMsg m{};
  m.magic = kHandshakeMagic;
  m.version = kHandshakeVersion;
  m.kind = static_cast<std::uint8_t>(kind);
  m.mode = static_cast<std::uint8_t>(core.options().mode);
  const ArenaIdentity& id = core.arena().identity();
  m.pid = static_cast<std::uint32_t>(id.pid);
  m.memfd = id.memfd;
  m.nonce[0] = id.nonce[0];
  m.nonce[1] = id.nonce[1];
  m.arena_size = id.size;
  m.send_depth = caps.send_queue_depth;
  m.recv_depth = caps.recv_queue_depth;
  copy_text(m.host_id, sizeof m.host_id, core.host_id());
  return m;
}

bool well_formed(const HandshakeMsg& m, HandshakeKind kind) {
  return m.magic == kHandshakeMagic && m.version == kHandshakeVersion &&
         m.kind == static_cast<std::uint8_t>(kind) && m.mode <= static_cast<std::uint8_t>(Mode::shm) &&
         m.send_depth >= 1 && m.send_depth <= kMaxQueueDepth && m.recv_depth >= 1 &&
         m.recv_depth <= kMaxQueueDepth;
}

ArenaIdentity identity_of(const HandshakeMsg& m) {
  ArenaIdentity id;
  id.nonce[0] = m.nonce[0];
  id.nonce[1] = m.nonce[1];
  id.size = m.arena_size;
  id.pid = static_cast<pid_t>(m.pid);
  id.memfd = m.memfd;
  return id;
}

// Maps the peer's arena and checks its announced channel; on success `peer`
// is ready for a ShmEndpoint and guards our frees against its accesses,
// which carry `own_token` (our channel's: the tag of the keys it gets).
Result<void> attach_peer(Core& core, const HandshakeMsg& m, ShmPeer& peer, std::uint64_t own_token) {
  auto arena = core.peer_arena(identity_of(m));
  if (!arena) {
    return arena.error();
  }
  if (!channel_fits(arena.value()->view(), m.channel_offset, m.channel_capacity) || m.channel_token == 0 ||
      m.channel_capacity < m.recv_depth) {
    return make_error(Errc::refused, "peer announced a receive channel outside its arena");
  }
  peer.arena = std::move(arena.value());
  peer.channel_offset = m.channel_offset;
  peer.channel_capacity = m.channel_capacity;
  peer.token = m.channel_token;
  auto* block = reinterpret_cast<ChannelBlock*>(peer.arena->view().base + m.channel_offset);
  peer.guard = std::make_unique<GuardRegistration>(core, &block->busy, static_cast<pid_t>(m.pid), own_token,
                                                   peer.arena);
  return {};
}

std::string host_mismatch(const Core& core, const HandshakeMsg& m) {
  return "shared memory required but the peer is on another host (" + text_of(m.host_id, sizeof m.host_id) +
         " vs " + core.host_id() + ") or forbids it (peer mode " + mode_name(m.mode) + ", ours " +
         mode_name(static_cast<std::uint8_t>(core.options().mode)) + ")";
}

}  // namespace

Result<std::unique_ptr<Endpoint>> client_handshake(const std::shared_ptr<Core>& core, UniqueFd fd,
                                                   const EndpointConfig& cfg, Clock::time_point deadline) {
  const EndpointCaps caps = grant_caps(cfg);
  const Mode mine = core->options().mode;
  HandshakeMsg hello = make_msg(*core, HandshakeKind::hello, caps);
  OwnChannel own;
  if (mine != Mode::tcp) {
    auto ch = OwnChannel::allocate(core, std::bit_ceil(caps.recv_queue_depth));
    if (!ch) {
      return ch.error();
    }
    own = std::move(ch.value());
    hello.channel_offset = own.offset();
    hello.channel_capacity = own.capacity();
    hello.channel_token = own.token();
  }
  hello.domain = cfg.domain;
  if (auto r = write_exact(fd.get(), &hello, sizeof hello, deadline); !r) {
    return r.error();
  }
  HandshakeMsg reply{};
  if (auto r = read_exact(fd.get(), &reply, sizeof reply, deadline); !r) {
    return r.error();
  }
  if (!well_formed(reply, HandshakeKind::reply)) {
    return make_error(Errc::refused, "the peer does not speak the soft provider's protocol");
  }
  if (reply.verdict != 0) {
    return make_error(Errc::refused, "connection refused: " + text_of(reply.reason, sizeof reply.reason));
  }
  const auto theirs = static_cast<Mode>(reply.mode);
  const bool same_host = text_of(reply.host_id, sizeof reply.host_id) == core->host_id();
  ShmPeer peer;
  std::string why_not_shm;
  bool use_shm = reply.can_map != 0 && own.valid() && theirs != Mode::tcp && same_host;
  if (use_shm) {
    if (auto r = attach_peer(*core, reply, peer, own.token()); !r) {
      use_shm = false;
      why_not_shm = r.error().message;
    }
  } else {
    why_not_shm = host_mismatch(*core, reply);
  }
  HandshakeMsg decision = make_msg(*core, HandshakeKind::decision, caps);
  auto verdict =
      use_shm ? Decision::shm : (mine != Mode::shm && theirs != Mode::shm ? Decision::tcp : Decision::abort);
  decision.verdict = static_cast<std::uint8_t>(verdict);
  copy_text(decision.reason, sizeof decision.reason, why_not_shm);
  if (auto r = write_exact(fd.get(), &decision, sizeof decision, deadline); !r) {
    return r.error();
  }
  if (verdict == Decision::abort) {
    return make_error(Errc::refused, "no shared memory to " + peer_name(fd.get()) + ": " + why_not_shm);
  }
  if (verdict == Decision::shm) {
    return ShmEndpoint::create(core, std::move(fd), caps, cfg.domain, std::move(own), std::move(peer));
  }
  own.release();
  return TcpEndpoint::create(core, std::move(fd), caps, cfg.domain, reply.send_depth);
}

ServerHandshake::ServerHandshake(std::shared_ptr<Core> core, UniqueFd fd, const EndpointConfig& cfg,
                                 Done done)
    : core_(std::move(core)), fd_(std::move(fd)), cfg_(cfg), caps_(grant_caps(cfg)), done_(std::move(done)) {}

ServerHandshake::~ServerHandshake() {
  // Always: finish() may have unregistered already while the manager thread
  // is still inside our callback; remove() waits until it has left it.
  core_->manager().remove(watch_token());
}

Result<void> ServerHandshake::start() {
  if (auto r = configure_stream(fd_.get()); !r) {
    return r;
  }
  if (auto r = core_->manager().add(fd_.get(), EPOLLIN | EPOLLRDHUP, this); !r) {
    return r;
  }
  registered_ = true;
  core_->manager().set_timer(watch_token(), Clock::now() + kServerHandshakeTimeout);
  return {};
}

void ServerHandshake::finish(Result<std::unique_ptr<Endpoint>> outcome, bool report) {
  finished_ = true;
  if (registered_) {
    core_->manager().remove(watch_token());  // on the manager thread: does not wait
    registered_ = false;
  }
  fd_.reset();
  own_.release();
  peer_ = ShmPeer{};
  if (report) {
    done_(std::move(outcome));
  }
}

void ServerHandshake::on_timer() {
  if (!finished_) {
    finish(make_error(Errc::timeout, "handshake timed out"), false);
  }
}

void ServerHandshake::on_ready(std::uint32_t) {
  if (finished_) {
    return;
  }
  ssize_t n = recv(fd_.get(), reinterpret_cast<char*>(&in_) + got_, sizeof in_ - got_, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    finish(make_error(Errc::disconnected, "peer left during the handshake"), false);
    return;
  }
  if (n < 0) {
    return;
  }
  got_ += static_cast<std::size_t>(n);
  if (got_ < sizeof in_) {
    return;
  }
  got_ = 0;
  if (!have_hello_) {
    on_hello();
  } else {
    on_decision();
  }
}

void ServerHandshake::on_hello() {
  hello_ = in_;
  if (!well_formed(hello_, HandshakeKind::hello)) {
    finish(make_error(Errc::refused, "not a soft provider hello"), false);
    return;
  }
  have_hello_ = true;
  const Mode mine = core_->options().mode;
  const auto theirs = static_cast<Mode>(hello_.mode);
  const bool same_host = text_of(hello_.host_id, sizeof hello_.host_id) == core_->host_id();
  const bool shm_allowed = mine != Mode::tcp && theirs != Mode::tcp && same_host && hello_.channel_token != 0;
  const bool shm_required = mine == Mode::shm || theirs == Mode::shm;
  HandshakeMsg reply = make_msg(*core_, HandshakeKind::reply, caps_);
  std::string refusal;
  if (shm_required && !shm_allowed) {
    refusal = host_mismatch(*core_, hello_);
  } else if (shm_allowed) {
    auto own = OwnChannel::allocate(core_, std::bit_ceil(caps_.recv_queue_depth));
    Result<void> attached =
        own ? attach_peer(*core_, hello_, peer_, own.value().token()) : Result<void>(own.error());
    if (attached) {
      own_ = std::move(own.value());
      reply.can_map = 1;
      reply.channel_offset = own_.offset();
      reply.channel_capacity = own_.capacity();
      reply.channel_token = own_.token();
    } else if (shm_required) {
      refusal = "cannot map the peer's memory: " + attached.error().message;
    }
  }
  if (!refusal.empty()) {
    reply.verdict = 1;
    copy_text(reply.reason, sizeof reply.reason, refusal);
  }
  auto sent = write_exact(fd_.get(), &reply, sizeof reply, Clock::now() + std::chrono::seconds(1));
  if (!sent) {
    finish(sent.error(), false);
  } else if (!refusal.empty()) {
    finish(make_error(Errc::refused, "refused " + peer_name(fd_.get()) + ": " + refusal), true);
  }
}

void ServerHandshake::on_decision() {
  const HandshakeMsg& d = in_;
  if (d.magic != kHandshakeMagic || d.version != kHandshakeVersion ||
      d.kind != static_cast<std::uint8_t>(HandshakeKind::decision)) {
    finish(make_error(Errc::refused, "not a soft provider decision"), false);
    return;
  }
  const auto verdict = static_cast<Decision>(d.verdict);
  const std::string who = peer_name(fd_.get());
  // The endpoint takes the socket over: stop watching it as a handshake first.
  core_->manager().remove(watch_token());
  registered_ = false;
  if (verdict == Decision::shm && own_.valid() && peer_.arena) {
    finish(
        ShmEndpoint::create(core_, std::move(fd_), caps_, hello_.domain, std::move(own_), std::move(peer_)),
        true);
  } else if (verdict == Decision::tcp && core_->options().mode != Mode::shm) {
    own_.release();
    peer_ = ShmPeer{};
    finish(TcpEndpoint::create(core_, std::move(fd_), caps_, hello_.domain, hello_.send_depth), true);
  } else if (verdict == Decision::abort) {
    finish(make_error(Errc::refused, "peer " + who + " gave up: " + text_of(d.reason, sizeof d.reason)),
           true);
  } else {
    finish(make_error(Errc::refused, "peer " + who + " chose a transport that was not offered"), true);
  }
}

}  // namespace catena::fabric::soft
