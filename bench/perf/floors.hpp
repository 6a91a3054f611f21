// Transport floors measured in the same run as the fabric figures, so every
// result is reported as a ratio against what this machine can do at best:
//  - same host: a raw shared-memory cache-line ping-pong between two processes
//  - cross host: a raw TCP_NODELAY ping-pong with busy-polling reads
//  - an RDMA device: the device's own RDMA WRITE ping-pong, measured by
//    perftest's ib_write_lat (two processes on the device)
// Each floor is a pair of functions, one per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace catena::bench {

// A page of MAP_SHARED anonymous memory, created before fork().
struct ShmFloor {
  static ShmFloor create();
  void* page = nullptr;
};

// Round trips in ns measured by the initiator; the responder just echoes.
std::vector<std::uint64_t> shm_pingpong_initiator(ShmFloor& f, int iters);
void shm_pingpong_responder(ShmFloor& f, int iters);

// TCP: the responder listens on 127.0.0.1:0 and reports its port through `port_out`.
int tcp_floor_listen(int* port_out);
void tcp_pingpong_responder(int listen_fd, int iters, int bytes);
std::vector<std::uint64_t> tcp_pingpong_initiator(const std::string& host, int port, int iters, int bytes);

// UDP (the floor of the dpdk provider, whose frames are UDP datagrams): the
// responder binds 127.0.0.1:0 and echoes each datagram; both sides busy-poll
// non-blocking sockets. A datagram lost on loopback is sent again after 100 ms.
int udp_floor_bind(int* port_out);
void udp_pingpong_responder(int fd, int iters, int bytes);
std::vector<std::uint64_t> udp_pingpong_initiator(const std::string& host, int port, int iters, int bytes);

// ib_write_lat (perftest, looked up in PATH) on `device`: a server and a
// client process, `bytes` per write, `iters` round trips. Fills the round
// trip (twice the one-way time ib_write_lat reports) p50 and p99 in ns;
// false with the reason in *error if perftest is missing or failed.
// gid_index < 0: perftest's default.
struct DeviceFloor {
  std::uint64_t rtt_p50_ns = 0;
  std::uint64_t rtt_p99_ns = 0;
};
bool ib_write_lat_floor(const std::string& device, int gid_index, int iters, int bytes, DeviceFloor* out,
                        std::string* error);

void pin_to_cpu(int cpu);
std::uint64_t now_ns();

}  // namespace catena::bench
