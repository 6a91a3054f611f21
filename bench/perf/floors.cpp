#include "floors.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace catena::bench {
namespace {

struct alignas(64) PingLine {
  std::atomic<std::uint64_t> ping;
  char pad[56];
  std::atomic<std::uint64_t> pong;
};

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Busy-polling exact read/write: the fabric's TCP path polls the same way.
void spin_read(int fd, char* buf, int n) {
  int got = 0;
  while (got < n) {
    ssize_t r = recv(fd, buf + got, static_cast<size_t>(n - got), MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<int>(r);
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      throw std::runtime_error("tcp floor: connection lost");
    }
  }
}

void full_write(int fd, const char* buf, int n) {
  int put = 0;
  while (put < n) {
    ssize_t w = send(fd, buf + put, static_cast<size_t>(n - put), MSG_NOSIGNAL);
    if (w < 0 && errno != EINTR && errno != EAGAIN) throw std::runtime_error("tcp floor: write failed");
    if (w > 0) put += static_cast<int>(w);
  }
}

}  // namespace

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

ShmFloor ShmFloor::create() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap shared page failed");
  new (p) PingLine{};
  return ShmFloor{p};
}

std::vector<std::uint64_t> shm_pingpong_initiator(ShmFloor& f, int iters) {
  auto* line = static_cast<PingLine*>(f.page);
  std::vector<std::uint64_t> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  for (int i = 1; i <= iters; ++i) {
    std::uint64_t t0 = now_ns();
    line->ping.store(static_cast<std::uint64_t>(i), std::memory_order_release);
    while (line->pong.load(std::memory_order_acquire) != static_cast<std::uint64_t>(i)) {
    }
    samples.push_back(now_ns() - t0);
  }
  return samples;
}

void shm_pingpong_responder(ShmFloor& f, int iters) {
  auto* line = static_cast<PingLine*>(f.page);
  for (int i = 1; i <= iters; ++i) {
    while (line->ping.load(std::memory_order_acquire) != static_cast<std::uint64_t>(i)) {
    }
    line->pong.store(static_cast<std::uint64_t>(i), std::memory_order_release);
  }
}

int tcp_floor_listen(int* port_out) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0) {
    throw std::runtime_error(std::string("tcp floor listen: ") + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port_out = ntohs(a.sin_port);
  return fd;
}

void tcp_pingpong_responder(int listen_fd, int iters, int bytes) {
  int fd = accept(listen_fd, nullptr, nullptr);
  close(listen_fd);
  if (fd < 0) throw std::runtime_error("tcp floor accept failed");
  set_nodelay(fd);
  std::vector<char> buf(static_cast<std::size_t>(bytes));
  for (int i = 0; i < iters; ++i) {
    spin_read(fd, buf.data(), bytes);
    full_write(fd, buf.data(), bytes);
  }
  close(fd);
}

std::vector<std::uint64_t> tcp_pingpong_initiator(const std::string& host, int port, int iters, int bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw std::runtime_error(std::string("tcp floor connect: ") + std::strerror(errno));
  }
  set_nodelay(fd);
  std::vector<char> buf(static_cast<std::size_t>(bytes), 'x');
  std::vector<std::uint64_t> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    std::uint64_t t0 = now_ns();
    full_write(fd, buf.data(), bytes);
    spin_read(fd, buf.data(), bytes);
    samples.push_back(now_ns() - t0);
  }
  close(fd);
  return samples;
}

}  // namespace catena::bench
