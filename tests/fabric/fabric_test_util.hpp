// Helpers shared by the fabric tests: which provider to test (env
// CATENA_PROVIDER, default "soft"), which address to listen on (env
// CATENA_TEST_ADDR, default 127.0.0.1; inside the soft-RoCE VM the rxe
// interface's address), and a connected endpoint pair in one process.
#pragma once

#include <chrono>
#include <cstdlib>
#include <future>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>

#include <catena/fabric/fabric.hpp>

#include "../test_env.hpp"

namespace catena::fabric::test {

using catena::test::listen_address;
using catena::test::provider_spec;

struct EndpointPair {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Endpoint> client;  // initiator side in most tests
  std::unique_ptr<Endpoint> server;  // target side
};

inline Result<EndpointPair> connect_pair(Provider& client_side, Provider& server_side,
                                         const EndpointConfig& cfg = {}) {
  auto listener = server_side.listen(listen_address(), cfg);
  if (!listener) return listener.error();
  std::string addr = listener.value()->address();
  auto fut = std::async(std::launch::async, [&] { return client_side.connect(addr, cfg); });
  auto accepted = listener.value()->accept(std::chrono::milliseconds(10000));
  auto connected = fut.get();
  if (!connected) return connected.error();
  if (!accepted) return accepted.error();
  EndpointPair pair;
  pair.listener = std::move(listener.value());
  pair.client = std::move(connected.value());
  pair.server = std::move(accepted.value());
  return pair;
}

// Polls `fn` (which returns the number of completions it produced) until it
// has produced `want` or `timeout` passes. Returns how many it produced.
template <class Fn>
int poll_until(Fn&& fn, int want, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  int got = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got < want && std::chrono::steady_clock::now() < deadline) {
    int n = fn();
    if (n == 0) std::this_thread::yield();
    got += n;
  }
  return got;
}

inline Completion wait_send(Endpoint& ep,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  Completion c{};
  int got = poll_until([&] { return ep.poll_send(&c, 1); }, 1, timeout);
  if (got != 1) {
    ADD_FAILURE() << "no send completion within " << timeout.count() << " ms";
    c.status = WcStatus::general_error;
  }
  return c;
}

inline Completion wait_recv(Endpoint& ep,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  Completion c{};
  int got = poll_until([&] { return ep.poll_recv(&c, 1); }, 1, timeout);
  if (got != 1) {
    ADD_FAILURE() << "no receive completion within " << timeout.count() << " ms";
    c.status = WcStatus::general_error;
  }
  return c;
}

}  // namespace catena::fabric::test
