// What the protocol tests (publish, delivery, commit watch) share: segment
// memory for a log, and a session's handshake over a real soft-provider
// connection with both ends on the test's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <catena/chain/link.hpp>
#include <catena/chain/wire.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::chain::test_support {

inline constexpr std::uint32_t kSeg = 64 << 10;  // segment size of the log under test
inline constexpr std::uint64_t kEpoch = 5;       // route epoch of the replica under test

// Heap memory for a log's segments.
struct Slots {
  Slots(std::size_t n, std::size_t size) : mem(n, std::vector<std::byte>(size)) {}
  std::vector<std::span<std::byte>> spans() {
    std::vector<std::span<std::byte>> v;
    for (auto& m : mem) v.emplace_back(m.data(), m.size());
    return v;
  }
  std::vector<std::vector<std::byte>> mem;
};

// The server's end of a handshake: the accepted link and the hello it read
// (empty if none came before the deadline or it did not decode).
template <class Hello>
struct Greeted {
  std::unique_ptr<Link> link;
  std::optional<Hello> hello;
};

template <class Hello>
Greeted<Hello> accept_hello(fabric::Provider& provider, fabric::Listener& listener,
                            std::chrono::steady_clock::time_point deadline) {
  Greeted<Hello> out;
  auto buffers = Link::Buffers::allocate(provider);
  if (!buffers) return out;
  auto accepted = Link::accept(provider, listener, buffers.value(), std::chrono::milliseconds(2000));
  if (!accepted) return out;
  out.link = std::move(accepted.value());
  std::byte buf[wire::kMaxMessage];
  bool gone = false;
  std::uint32_t got = 0;
  while (got == 0 && !gone && std::chrono::steady_clock::now() < deadline)
    got = out.link->poll_message(buf, &gone);
  auto h = wire::decode<Hello>(buf, got);
  if (h) out.hello = *h;
  return out;
}

// Polls the client's end until the welcome came (or the deadline passed),
// running `between()` (the server's passes) in the meantime.
template <class Welcome, class Between>
Link::Dialed<Welcome> finish_dial(Link::Dialing<Welcome>& dialing,
                                  std::chrono::steady_clock::time_point deadline, Between between) {
  while (dialing.poll() == Link::DialState::waiting && std::chrono::steady_clock::now() < deadline) between();
  return dialing.take();
}

template <class Welcome>
Link::Dialed<Welcome> finish_dial(Link::Dialing<Welcome>& dialing,
                                  std::chrono::steady_clock::time_point deadline) {
  return finish_dial(dialing, deadline, [] {});
}

}  // namespace catena::chain::test_support
