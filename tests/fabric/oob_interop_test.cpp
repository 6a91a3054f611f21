// OobHandshake.*: what a provider that speaks the out-of-band handshake
// (dpdk:*, verbs:<dev>,oob) does with a peer that speaks it wrong; run by
// the conformance suite's ctest specs and in the VM on verbs:rxe0,oob.
//
// OobInterop.Peer: two providers that speak the out-of-band handshake (the dpdk provider and
// "verbs:<dev>,oob") against each other, one process each: run by
// ci/vm/dpdk-interop.sh with the dpdk provider on the host's tap and the
// verbs provider on rdma_rxe in the VM, once with each side listening.
// Skips unless CATENA_OOB_INTEROP_SPEC, _ROLE (listen or connect) and _ADDR
// are set.
//
// The steps are symmetric: each side exposes a region and SENDs its key;
// WRITEs 3000 bytes and WRITEs WITH IMMEDIATE 100 more into the peer's
// region; READs 2500 bytes the peer filled; checks what the peer wrote;
// SENDs "done" and waits for the peer's. Then the dialer disconnects and
// the listener must see the disconnect through the handshake's TCP link.
#include <unistd.h>

#include <arpa/inet.h>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>

#include <catena/fabric/fabric.hpp>

#include "conformance_fixture.hpp"

namespace catena::fabric::test {
namespace {

// The providers that connect with the out-of-band handshake.
bool speaks_oob(const std::string& spec) {
  return spec.starts_with("dpdk:") || spec.ends_with(",oob");
}

// "a.b.c.d:port" -> sockaddr_in (IPv4 only: the handshake tests need no more).
sockaddr_in ipv4(const std::string& addr) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  const auto colon = addr.rfind(':');
  sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1))));
  inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr);
  return sa;
}

// A 48-byte Hello with the wrong magic.
std::array<char, 48> garbage() {
  std::array<char, 48> g{};
  g.fill('x');
  return g;
}

TEST(OobHandshake, ListenerSkipsAGarbageHelloAndStaysUsable) {
  if (!speaks_oob(provider_spec())) GTEST_SKIP() << "not an out-of-band provider: " << provider_spec();
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto l = p.value()->listen(listen_address());
  ASSERT_TRUE(l.ok()) << l.error().message;
  const sockaddr_in sa = ipv4(l.value()->address());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0);
  const auto g = garbage();
  ASSERT_EQ(::write(fd, g.data(), g.size()), static_cast<ssize_t>(g.size()));
  // The garbage peer is dropped (its socket closed); accept waits on and times out.
  const auto start = std::chrono::steady_clock::now();
  auto a = l.value()->accept(1000ms);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.code(), Errc::timeout) << a.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  char byte = 0;
  EXPECT_EQ(::read(fd, &byte, 1), 0) << "the listener kept a peer that sent garbage";
  ::close(fd);
  // A real peer is accepted afterwards.
  const std::string addr = l.value()->address();
  auto fut = std::async(std::launch::async, [&] { return p.value()->connect(addr, {}, 10s); });
  auto accepted = l.value()->accept(10s);
  auto connected = fut.get();
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  ASSERT_TRUE(connected.ok()) << connected.error().message;
  EXPECT_EQ(connected.value()->state(), EndpointState::connected);
}

// The broker's acceptor calls accept(1 ms) while it has connections
// waiting for their first message: a connection already waiting must be
// taken, not timed out before it is looked at.
TEST(OobHandshake, AShortAcceptTimeoutStillTakesAWaitingConnection) {
  if (!speaks_oob(provider_spec())) GTEST_SKIP() << "not an out-of-band provider: " << provider_spec();
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto l = p.value()->listen(listen_address());
  ASSERT_TRUE(l.ok()) << l.error().message;
  const std::string addr = l.value()->address();
  auto fut = std::async(std::launch::async, [&] { return p.value()->connect(addr, {}, 10s); });
  std::this_thread::sleep_for(300ms);  // its Hello is waiting in the socket by now
  auto accepted = l.value()->accept(1ms);
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  auto connected = fut.get();
  ASSERT_TRUE(connected.ok()) << connected.error().message;
}

TEST(OobHandshake, DialerGetsAClearErrorForABadOrMissingReply) {
  if (!speaks_oob(provider_spec())) GTEST_SKIP() << "not an out-of-band provider: " << provider_spec();
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  // A plain TCP server on a free port of the test address.
  const int srv = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa = ipv4(listen_address() + ":0");
  ASSERT_EQ(::bind(srv, reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(srv, 4), 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(::getsockname(srv, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
  const std::string addr = std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port));
  // Each round: read the dialer's Hello, then answer garbage / hang up / say nothing.
  auto serve = [&](int mode) {
    return std::async(std::launch::async, [&, mode] {
      const int c = ::accept(srv, nullptr, nullptr);
      std::array<char, 48> hello{};
      std::size_t got = 0;
      while (got < hello.size()) {
        const ssize_t n = ::read(c, hello.data() + got, hello.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (mode == 0) {
        const auto g = garbage();
        (void)!::write(c, g.data(), g.size());
      }
      if (mode == 2) std::this_thread::sleep_for(1500ms);
      ::close(c);
      return got;
    });
  };
  const Errc want[] = {Errc::io_error, Errc::refused, Errc::timeout};
  for (int mode = 0; mode < 3; ++mode) {
    auto server = serve(mode);
    const auto start = std::chrono::steady_clock::now();
    auto ep = p.value()->connect(addr, {}, 800ms);
    ASSERT_FALSE(ep.ok()) << "round " << mode;
    EXPECT_EQ(ep.code(), want[mode]) << "round " << mode << ": " << ep.error().message;
    EXPECT_FALSE(ep.error().message.empty());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << "round " << mode;
    EXPECT_EQ(server.get(), 48u) << "round " << mode << ": the dialer did not send its Hello";
  }
  ::close(srv);
}

TEST(OobInterop, Peer) {
  const char* spec = std::getenv("CATENA_OOB_INTEROP_SPEC");
  const char* role_env = std::getenv("CATENA_OOB_INTEROP_ROLE");
  const char* addr = std::getenv("CATENA_OOB_INTEROP_ADDR");
  if (spec == nullptr || role_env == nullptr || addr == nullptr) {
    GTEST_SKIP() << "run by ci/vm/dpdk-interop.sh (a dpdk and a verbs oob provider on one wire)";
  }
  const std::string role(role_env);
  ASSERT_TRUE(role == "listen" || role == "connect") << role;
  const bool listening = role == "listen";
  // Each side's bytes differ, so a side that checked its own bytes would fail.
  const std::uint8_t mine = listening ? 11 : 77;
  const std::uint8_t theirs_seed = listening ? 77 : 11;
  const std::uint32_t my_imm = listening ? 0x1157u : 0xC077u;
  const std::uint32_t their_imm = listening ? 0xC077u : 0x1157u;

  auto p = Provider::open(spec);
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto region = p.value()->allocate(1 << 16, kLocalWrite | kRemoteWrite | kRemoteRead);
  auto bufs = p.value()->allocate(1 << 16, kLocalWrite);
  ASSERT_TRUE(region.ok() && bufs.ok());
  MemoryRegion& r = *region.value();
  MemoryRegion& b = *bufs.value();
  fill(r, 8192, 2500, static_cast<std::uint8_t>(mine + 1));  // what the peer READs

  auto receives = [&](Endpoint& ep) {
    Errc e = ep.post_recv(1, {&b, 0, 64});                      // the peer's key
    if (e == Errc::ok) e = ep.post_recv(2, {&b, 64, 64});       // its WRITE WITH IMMEDIATE
    return e != Errc::ok ? e : ep.post_recv(3, {&b, 128, 64});  // its "done"
  };
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Endpoint> owned;
  if (listening) {
    auto l = p.value()->listen(addr);
    ASSERT_TRUE(l.ok()) << l.error().message;
    listener = std::move(l.value());
    std::cerr << "oob-interop: listening on " << listener->address() << "\n";
    auto a = listener->accept(120s, receives);
    ASSERT_TRUE(a.ok()) << a.error().message;
    owned = std::move(a.value());
  } else {
    // The peer may still be starting: retry a refused dial until the deadline.
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
      auto c = p.value()->connect(addr, EndpointConfig{}, 10s);
      if (c.ok()) {
        owned = std::move(c.value());
        break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << c.error().message;
      std::this_thread::sleep_for(200ms);
    }
    ASSERT_EQ(receives(*owned), Errc::ok);
  }
  Endpoint& ep = *owned;

  auto ours = ep.expose(r);
  ASSERT_TRUE(ours.ok()) << ours.error().message;
  std::memcpy(b.data() + 2048, &ours.value().length, 8);
  std::memcpy(b.data() + 2056, &ours.value().rkey, 4);
  ASSERT_EQ(ep.post_send(10, {&b, 2048, 12}), Errc::ok);
  Completion c = wait_recv(ep, 30s);
  ASSERT_EQ(c.status, WcStatus::success);
  ASSERT_EQ(c.wr_id, 1u);
  ASSERT_EQ(c.byte_len, 12u);
  RemoteRegion theirs{};
  std::memcpy(&theirs.length, b.data(), 8);
  std::memcpy(&theirs.rkey, b.data() + 8, 4);
  ASSERT_EQ(theirs.length, std::uint64_t{1} << 16);

  fill(b, 8192, 3000, mine);
  ASSERT_EQ(ep.post_write(11, {&b, 8192, 3000}, {theirs, 0}), Errc::ok);
  fill(b, 12288, 100, static_cast<std::uint8_t>(mine + 2));
  ASSERT_EQ(ep.post_write_imm(12, {&b, 12288, 100}, {theirs, 4096}, my_imm), Errc::ok);
  ASSERT_EQ(ep.post_read(13, {&b, 16384, 2500}, {theirs, 8192}), Errc::ok);
  for (std::uint64_t id = 10; id <= 13; ++id) {
    c = wait_send(ep, 30s);
    EXPECT_EQ(c.wr_id, id);
    ASSERT_EQ(c.status, WcStatus::success) << "request " << id;
  }
  EXPECT_TRUE(check(b, 16384, 2500, static_cast<std::uint8_t>(theirs_seed + 1)))
      << "READ brought other bytes";

  c = wait_recv(ep, 30s);
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.opcode, Opcode::recv_write_imm);
  EXPECT_EQ(c.imm, their_imm);
  EXPECT_EQ(c.byte_len, 100u);
  EXPECT_TRUE(check(r, 0, 3000, theirs_seed)) << "the peer's WRITE did not land";
  EXPECT_TRUE(check(r, 4096, 100, static_cast<std::uint8_t>(theirs_seed + 2)))
      << "the peer's WRITE WITH IMMEDIATE did not land";

  std::memcpy(b.data() + 20480, "done", 4);
  ASSERT_EQ(ep.post_send(14, {&b, 20480, 4}), Errc::ok);
  EXPECT_EQ(wait_send(ep, 30s).status, WcStatus::success);
  c = wait_recv(ep, 30s);
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.wr_id, 3u);
  EXPECT_EQ(c.byte_len, 4u);
  EXPECT_EQ(std::memcmp(b.data() + 128, "done", 4), 0);

  if (!listening) {
    ep.disconnect();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (ep.poll_event() != EndpointEvent::disconnected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(ep.state(), EndpointState::disconnected) << "the dialer's disconnect never arrived";
}

}  // namespace
}  // namespace catena::fabric::test
