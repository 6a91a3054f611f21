// Connection setup for soft endpoints. Every connection starts as TCP; three
// fixed-size messages decide what it becomes:
//
//   client -> server  hello     who I am (pid, arena memfd + nonce, host id),
//                               my mode, queue depths, my receive channel
//   server -> client  reply     the same about the server, whether it could
//                               map the client's arena, or a refusal + reason
//   client -> server  decision  shm, tcp, or abort (+ reason)
//
// Shared memory is chosen when both sides allow it, both run on one host
// (same boot id / host option) and both could map the other's arena through
// /proc/<pid>/fd/<memfd>; otherwise TCP, unless a side insists on "shm", in
// which case the connection is refused with the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <catena/fabric/fabric.hpp>

#include "soft/conn_manager.hpp"
#include "soft/core.hpp"
#include "soft/net.hpp"
#include "soft/shm_channel.hpp"

namespace catena::fabric::soft {

inline constexpr std::uint32_t kHandshakeMagic = 0x53544143;  // "CATS"
inline constexpr std::uint16_t kHandshakeVersion = 1;
inline constexpr std::chrono::seconds kServerHandshakeTimeout{10};

enum class HandshakeKind : std::uint8_t { hello = 1, reply = 2, decision = 3 };
enum class Decision : std::uint8_t { tcp = 1, shm = 2, abort = 3 };

struct HandshakeMsg {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t kind;
  std::uint8_t mode;     // the sender's Mode
  std::uint8_t verdict;  // reply: 0 accepted, 1 refused; decision: Decision
  std::uint8_t can_map;  // reply: the server has mapped the client's arena
  std::uint16_t reserved;
  std::uint32_t pid;
  std::int32_t memfd;
  std::uint64_t nonce[2];
  std::uint64_t arena_size;
  std::uint32_t send_depth;
  std::uint32_t recv_depth;
  std::uint64_t channel_offset;
  std::uint32_t channel_capacity;
  std::uint32_t reserved2;
  std::uint64_t channel_token;
  char host_id[64];
  // hello: the connection's protection domain (EndpointConfig::domain).
  std::uint64_t domain;
  char reason[112];
};
static_assert(sizeof(HandshakeMsg) == 264);

// Runs the client side on a connected socket and returns the endpoint.
Result<std::unique_ptr<Endpoint>> client_handshake(const std::shared_ptr<Core>& core, UniqueFd fd,
                                                   const EndpointConfig& cfg, Clock::time_point deadline);

// The server side of one incoming connection, driven by the connection
// manager so that connect() succeeds whether or not accept() is waiting.
// Reports its outcome once through `done` (on the manager thread); garbage
// or a silent peer is dropped without a report.
class ServerHandshake final : public Watcher {
 public:
  using Done = std::function<void(Result<std::unique_ptr<Endpoint>>)>;
  ServerHandshake(std::shared_ptr<Core> core, UniqueFd fd, const EndpointConfig& cfg, Done done);
  ~ServerHandshake() override;
  ServerHandshake(const ServerHandshake&) = delete;
  ServerHandshake& operator=(const ServerHandshake&) = delete;

  Result<void> start();
  // Whether it has ended (manager thread only).
  [[nodiscard]] bool finished() const noexcept { return finished_; }

 private:
  void on_ready(std::uint32_t events) override;
  void on_timer() override;
  void on_hello();
  void on_decision();
  void finish(Result<std::unique_ptr<Endpoint>> outcome, bool report);

  std::shared_ptr<Core> core_;
  UniqueFd fd_;
  EndpointConfig cfg_;
  EndpointCaps caps_;
  Done done_;
  HandshakeMsg in_{};
  std::size_t got_ = 0;
  bool have_hello_ = false;
  bool registered_ = false;
  bool finished_ = false;
  HandshakeMsg hello_{};
  OwnChannel own_;
  ShmPeer peer_;
};

}  // namespace catena::fabric::soft
