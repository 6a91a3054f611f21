// Helpers of the soft provider's white-box tests.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "fabric_test_util.hpp"
#include "soft/shm_endpoint.hpp"
#include "soft/tcp_endpoint.hpp"
#include "soft/wire.hpp"

namespace catena::fabric::test {
using namespace std::chrono_literals;

inline std::unique_ptr<Provider> open_or_fail(const std::string& spec) {
  auto p = Provider::open(spec);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.error().message;
  return p.ok() ? std::move(p.value()) : nullptr;
}

inline bool is_tcp(Endpoint& e) {
  return dynamic_cast<soft::TcpEndpoint*>(&e) != nullptr;
}
inline bool is_shm(Endpoint& e) {
  return dynamic_cast<soft::ShmEndpoint*>(&e) != nullptr;
}

inline bool all_zero(const MemoryRegion& mr) {
  return std::all_of(mr.data(), mr.data() + mr.size(), [](std::byte b) { return b == std::byte{0}; });
}

// Waits for the disconnected event, polling receives meanwhile (which drives
// a TCP endpoint's progress); what they complete lands in `recvs`.
inline bool wait_event(Endpoint& ep, std::vector<Completion>* recvs = nullptr,
                       std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ep.poll_event() == EndpointEvent::disconnected) {
      return true;
    }
    Completion c[8];
    int n = ep.poll_recv(c, 8);
    if (recvs != nullptr) {
      recvs->insert(recvs->end(), c, c + n);
    }
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// ------------------------------------------------------------ options

}  // namespace catena::fabric::test
