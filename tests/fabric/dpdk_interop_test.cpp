// The dpdk provider against the kernel's rdma_rxe: the host half of
// ci/vm/dpdk-interop.sh, whose VM half is ci/vm/rxe_interop.c (it lists the
// steps). Skips unless that script runs it: it needs the soft-RoCE VM on a
// tap whose host side the provider's af_packet port uses.
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <thread>

#include <catena/fabric/fabric.hpp>

#include "conformance_fixture.hpp"

namespace catena::fabric::test {
namespace {

TEST(DpdkInterop, WithRxe) {
  const char* spec = std::getenv("CATENA_DPDK_INTEROP");
  const char* listen_at = std::getenv("CATENA_DPDK_INTEROP_LISTEN");
  if (spec == nullptr || listen_at == nullptr) {
    GTEST_SKIP() << "run by ci/vm/dpdk-interop.sh (the soft-RoCE VM on a tap this port uses)";
  }
  auto p = Provider::open(spec);
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto region = p.value()->allocate(1 << 16, kLocalWrite | kRemoteWrite | kRemoteRead);
  auto bufs = p.value()->allocate(1 << 16, kLocalWrite);
  ASSERT_TRUE(region.ok() && bufs.ok());
  MemoryRegion& r = *region.value();
  MemoryRegion& b = *bufs.value();
  fill(r, 8192, 2500, 55);  // what rxe reads
  auto listener = p.value()->listen(listen_at);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  auto accepted = listener.value()->accept(120s, [&](Endpoint& ep) {
    Errc e = ep.post_recv(1, {&b, 0, 1024});                     // rxe's key
    return e != Errc::ok ? e : ep.post_recv(2, {&b, 1024, 64});  // its WRITE WITH IMMEDIATE
  });
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  Endpoint& ep = *accepted.value();

  // 1-2: rxe's key; ours; WRITE, WRITE WITH IMMEDIATE and READ into rxe.
  Completion c = wait_recv(ep, 30s);
  ASSERT_EQ(c.status, WcStatus::success);
  ASSERT_EQ(c.byte_len, 16u);
  std::uint64_t va = 0;
  std::uint32_t key[2] = {0, 0};
  std::memcpy(&va, b.data(), 8);
  std::memcpy(key, b.data() + 8, 8);
  const RemoteRegion theirs{key[1], key[0], 0};
  auto ours = ep.expose(r);
  ASSERT_TRUE(ours.ok());
  const std::uint64_t len = ours.value().length;
  std::memcpy(b.data() + 2048, &len, 8);
  std::memcpy(b.data() + 2056, &ours.value().rkey, 4);
  ASSERT_EQ(ep.post_send(10, {&b, 2048, 16}), Errc::ok);
  fill(b, 8192, 3000, 11);
  ASSERT_EQ(ep.post_write(11, {&b, 8192, 3000}, {theirs, va}), Errc::ok);
  fill(b, 12288, 100, 22);
  ASSERT_EQ(ep.post_write_imm(12, {&b, 12288, 100}, {theirs, va + 4096}, 0xC0FFEE), Errc::ok);
  ASSERT_EQ(ep.post_read(13, {&b, 16384, 2500}, {theirs, va + 8192}), Errc::ok);
  for (std::uint64_t id = 10; id <= 13; ++id) {
    c = wait_send(ep, 30s);
    EXPECT_EQ(c.wr_id, id);
    ASSERT_EQ(c.status, WcStatus::success) << "request " << id << " to rxe";
  }
  EXPECT_TRUE(check(b, 16384, 2500, 77)) << "READ from rxe brought other bytes";

  // 3: rxe's WRITE, WRITE WITH IMMEDIATE and READ here; its SEND meets no
  // receive for 300 ms (RNR NAKs from this responder).
  c = wait_recv(ep, 30s);
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.opcode, Opcode::recv_write_imm);
  EXPECT_EQ(c.imm, 0xBEEFu);
  EXPECT_EQ(c.byte_len, 100u);
  EXPECT_TRUE(check(r, 0, 3000, 33)) << "rxe's WRITE did not land";
  EXPECT_TRUE(check(r, 4096, 100, 44)) << "rxe's WRITE WITH IMMEDIATE did not land";
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(ep.post_recv(3, {&b, 0, 1024}), Errc::ok);
  c = wait_recv(ep, 30s);
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.byte_len, 4u);
  EXPECT_EQ(std::memcmp(b.data(), "done", 4), 0);

  // 4: a SEND rxe takes late (RNR NAKs from rxe), then a key rxe never gave.
  std::memcpy(b.data() + 20480, "bye", 3);
  ASSERT_EQ(ep.post_send(14, {&b, 20480, 3}), Errc::ok);
  EXPECT_EQ(wait_send(ep, 30s).status, WcStatus::success);
  RemoteRegion bad = theirs;
  bad.rkey ^= 0x5a5a0000u;
  ASSERT_EQ(ep.post_write(15, {&b, 8192, 64}, {bad, va}), Errc::ok);
  EXPECT_EQ(wait_send(ep, 30s).status, WcStatus::remote_access_error);

  // 5: rxe writes here with a bad key on a second connection; it checks its
  // own remote access error and exits, which ends that connection.
  auto second = listener.value()->accept(60s);
  ASSERT_TRUE(second.ok()) << second.error().message;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (second.value()->poll_event() != EndpointEvent::disconnected &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(second.value()->state(), EndpointState::connected) << "rxe's side never ended";
  EXPECT_TRUE(all_zero(r) || check(r, 0, 3000, 33)) << "the bad-key write changed something";
}

}  // namespace
}  // namespace catena::fabric::test
