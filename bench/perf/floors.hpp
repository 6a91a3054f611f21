// Transport floors measured in the same run as the fabric figures, so every
// result is reported as a ratio against what this machine can do at best:
//  - same host: a raw shared-memory cache-line ping-pong between two processes
//  - cross host: a raw TCP_NODELAY ping-pong with busy-polling reads
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

void pin_to_cpu(int cpu);
std::uint64_t now_ns();

}  // namespace catena::bench
