// Two providers that speak the out-of-band handshake (the dpdk provider and
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
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <thread>

#include <catena/fabric/fabric.hpp>

#include "conformance_fixture.hpp"

namespace catena::fabric::test {
namespace {

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
