#include "floors.hpp"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sstream>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

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
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
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

int udp_floor_bind(int* port_out) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw std::runtime_error(std::string("udp floor bind: ") + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port_out = ntohs(a.sin_port);
  return fd;
}

void udp_pingpong_responder(int fd, int iters, int bytes) {
  std::vector<char> buf(static_cast<std::size_t>(bytes));
  for (int i = 0; i < iters;) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    if (recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len) !=
        bytes) {
      continue;
    }
    sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    // The initiator's sequence number: a datagram sent again is echoed again, counted once.
    std::uint32_t seq = 0;
    std::memcpy(&seq, buf.data(), std::min<std::size_t>(4, buf.size()));
    if (seq == static_cast<std::uint32_t>(i)) ++i;
  }
  close(fd);
}

std::vector<std::uint64_t> udp_pingpong_initiator(const std::string& host, int port, int iters, int bytes) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw std::runtime_error(std::string("udp floor connect: ") + std::strerror(errno));
  }
  std::vector<char> buf(static_cast<std::size_t>(std::max(bytes, 4)), 'x');
  std::vector<std::uint64_t> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto seq = static_cast<std::uint32_t>(i);
    std::memcpy(buf.data(), &seq, 4);
    const std::uint64_t t0 = now_ns();
    std::uint64_t sent_at = t0;
    (void)send(fd, buf.data(), buf.size(), 0);
    for (;;) {
      std::uint32_t back = ~seq;
      if (recv(fd, buf.data(), buf.size(), MSG_DONTWAIT) >= 4) std::memcpy(&back, buf.data(), 4);
      if (back == seq) break;
      if (now_ns() - sent_at > 100'000'000) {  // lost on loopback: send it again
        std::memcpy(buf.data(), &seq, 4);
        (void)send(fd, buf.data(), buf.size(), 0);
        sent_at = now_ns();
      }
    }
    samples.push_back(now_ns() - t0);
  }
  close(fd);
  return samples;
}

}  // namespace catena::bench

namespace catena::bench {
namespace {

// Starts argv with stdout and stderr into a pipe; *out_fd reads them.
pid_t spawn_captured(const std::vector<std::string>& args, int* out_fd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

// Reads everything from fd, then reaps pid; returns the output, *status the
// exit status (128 if killed).
std::string collect(pid_t pid, int fd, int* status) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return out;
}

}  // namespace

bool ib_write_lat_floor(const std::string& device, int gid_index, int iters, int bytes, DeviceFloor* out,
                        std::string* error) {
  const std::string port = std::to_string(20000 + getpid() % 20000);
  std::vector<std::string> args{"ib_write_lat",        "-d", device, "-s", std::to_string(bytes), "-n",
                                std::to_string(iters), "-p", port};
  if (gid_index >= 0) args.insert(args.end(), {"-x", std::to_string(gid_index)});
  // The server waits for the client on its out-of-band TCP port.
  int server_fd = -1;
  const pid_t server = spawn_captured(args, &server_fd);
  if (server < 0) {
    *error = "cannot start ib_write_lat";
    return false;
  }
  std::vector<std::string> client_args = args;
  client_args.push_back("127.0.0.1");
  std::string client_out;
  int client_status = 1;
  for (int attempt = 0; attempt < 30 && client_status != 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the server listen
    int fd = -1;
    const pid_t client = spawn_captured(client_args, &fd);
    if (client < 0) break;
    client_out = collect(client, fd, &client_status);
    if (client_status == 127) break;  // no perftest here
  }
  if (client_status != 0) kill(server, SIGKILL);  // it would wait for a client forever
  int server_status = 0;
  (void)collect(server, server_fd, &server_status);
  if (client_status != 0) {
    *error = "ib_write_lat failed (exit " + std::to_string(client_status) + "): " + client_out.substr(0, 300);
    return false;
  }
  // The result line follows the header naming t_typical: "#bytes #iterations
  // t_min t_max t_typical t_avg t_stdev 99% 99.9%", times in usec, one way.
  std::istringstream lines(client_out);
  std::string line;
  bool header = false;
  while (std::getline(lines, line)) {
    if (line.find("t_typical") != std::string::npos) {
      header = true;
      continue;
    }
    if (!header) continue;
    std::istringstream f(line);
    double b = 0, n = 0, tmin = 0, tmax = 0, typical = 0, avg = 0, stdev = 0, p99 = 0;
    if (f >> b >> n >> tmin >> tmax >> typical >> avg >> stdev >> p99) {
      out->rtt_p50_ns = static_cast<std::uint64_t>(2 * typical * 1000);
      out->rtt_p99_ns = static_cast<std::uint64_t>(2 * p99 * 1000);
      return true;
    }
  }
  *error = "could not read ib_write_lat's result: " + client_out.substr(0, 300);
  return false;
}

}  // namespace catena::bench
