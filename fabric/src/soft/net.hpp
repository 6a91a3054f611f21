// Socket plumbing for the soft provider's setup path: address parsing,
// listen/connect with deadlines, exact reads and writes with deadlines. None
// of this runs per message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <sys/socket.h>

#include <catena/fabric/result.hpp>

#include "soft/conn_manager.hpp"

namespace catena::fabric::soft {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

// "ip:port", "[v6]:port" or "host:port".
Result<SocketAddress> parse_address(std::string_view address);
std::string format_address(const sockaddr* sa, socklen_t len);
std::string peer_name(int fd);
std::string local_name(int fd);

// Owns a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// A non-blocking listening socket.
Result<UniqueFd> listen_on(const SocketAddress& addr);
// A connected, non-blocking TCP_NODELAY socket, or refused/timeout/io_error.
Result<UniqueFd> connect_to(const SocketAddress& addr, Clock::time_point deadline);
// Configures an accepted socket like connect_to() does.
Result<void> configure_stream(int fd);

// Moves exactly `len` bytes on a non-blocking socket, waiting in poll() no
// later than `deadline`. EOF or reset is Errc::disconnected.
Result<void> write_exact(int fd, const void* buf, std::size_t len, Clock::time_point deadline);
Result<void> read_exact(int fd, void* buf, std::size_t len, Clock::time_point deadline);

// Which machine this is: the kernel's boot id, so two providers on one host
// (even in different network namespaces) recognise each other.
std::string host_identity();

}  // namespace catena::fabric::soft
