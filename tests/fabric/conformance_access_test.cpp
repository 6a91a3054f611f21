// Provider conformance, part two: remote access (keys bound to their
// connection, region-relative bounds, revocation), back-pressure, hang-ups,
// and a peer in another process. See conformance_test.cpp.
#include "conformance_fixture.hpp"

namespace catena::fabric::test {
namespace {

TEST_F(Conformance, DeregisteredRegionIsUnreachable) {
  auto src = alloc(4096, kLocalWrite);
  ASSERT_TRUE(src);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(dst);
  RemoteRegion stale = grant(*dst);
  dst.reset();
  fill(*src, 0, 64, 1);
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 64}, {stale, 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::remote_access_error);
}

// A region's memory given back may serve the next allocation of its size
// (soft: warm arena ranges; verbs: regions kept registered, WarmRegions):
// what that allocation gets reads as zeros, and the keys given out for the
// old region reach nothing, while the new region's own key works.
TEST_F(Conformance, MemoryGivenBackAndTakenAgainIsZeroAndOldKeysReachNothing) {
  constexpr std::size_t kBytes = 2u << 20;  // above the soft arena's 1 MiB
  auto src = alloc(4096, kLocalWrite);
  ASSERT_TRUE(src);
  fill(*src, 0, 64, 9);
  std::vector<RemoteRegion> stale;
  for (int round = 0; round < 4; ++round) {
    auto dst = alloc(kBytes, kLocalWrite | kRemoteWrite);
    ASSERT_TRUE(dst);
    EXPECT_TRUE(all_zero(*dst)) << "round " << round;
    const RemoteRegion key = grant(*dst);
    ASSERT_EQ(client().post_write(static_cast<std::uint64_t>(round), {src.get(), 0, 64}, {key, kBytes - 64}),
              Errc::ok);
    ASSERT_EQ(wait_send(client()).status, WcStatus::success) << "round " << round;
    EXPECT_TRUE(check(*dst, kBytes - 64, 64, 9));
    std::memset(dst->data(), 0x77, 4096);  // bytes of its own, which the next owner must not see
    stale.push_back(key);
  }
  auto fresh = alloc(kBytes, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(all_zero(*fresh));
  (void)grant(*fresh);  // a live window on it: the stale keys still must not reach it
  // One stale key (an access error breaks the connection): refused, and
  // nothing landed.
  ASSERT_EQ(client().post_write(99, {src.get(), 0, 64}, {stale.back(), kBytes - 64}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*fresh));
}

// Protection domains (fabric.hpp): the accepted end takes the dialer's
// domain; a connection exposes and sends from its own domain's memory only;
// a key of one domain's connection is useless on another's; and a region
// of the default domain cannot be used on a domain's connection.
TEST_F(Conformance, ProtectionDomainsKeepEachConnectionToItsOwnMemory) {
  constexpr DomainId kA = 0x6163'6d65;  // "acme"
  constexpr DomainId kB = 0x6272'6176;
  EndpointConfig in_a = cfg_;
  in_a.domain = kA;
  EndpointConfig in_b = cfg_;
  in_b.domain = kB;
  auto a = connect_pair(*provider_, *provider_, in_a);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = connect_pair(*provider_, *provider_, in_b);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(a.value().client->domain(), kA);
  EXPECT_EQ(a.value().server->domain(), kA) << "the accepted end takes the dialer's domain";
  EXPECT_EQ(b.value().server->domain(), kB);
  EXPECT_EQ(server().domain(), kDefaultDomain);

  auto a_src = provider_->allocate(4096, kLocalWrite, kA);
  auto a_dst = provider_->allocate(4096, kLocalWrite | kRemoteWrite, kA);
  auto plain_src = alloc(4096, kLocalWrite);
  auto plain_dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(a_src.ok() && a_dst.ok() && plain_src && plain_dst);
  EXPECT_EQ(a_dst.value()->domain(), kA);
  EXPECT_EQ(plain_dst->domain(), kDefaultDomain);

  // Exposing across domains is refused, both ways.
  EXPECT_EQ(a.value().server->expose(*plain_dst).code(), Errc::invalid_argument);
  EXPECT_EQ(server().expose(*a_dst.value()).code(), Errc::invalid_argument);
  EXPECT_EQ(b.value().server->expose(*a_dst.value()).code(), Errc::invalid_argument);

  // Inside domain A a write lands.
  auto key = a.value().server->expose(*a_dst.value());
  ASSERT_TRUE(key.ok()) << key.error().message;
  fill(*a_src.value(), 0, 4096, 5);
  ASSERT_EQ(a.value().client->post_write(1, {a_src.value().get(), 0, 1024}, {key.value(), 0}), Errc::ok);
  EXPECT_EQ(wait_send(*a.value().client).status, WcStatus::success);
  EXPECT_TRUE(check(*a_dst.value(), 0, 1024, 5));

  // A's key on B's connection: refused at the target, nothing changes.
  auto b_src = provider_->allocate(4096, kLocalWrite, kB);
  ASSERT_TRUE(b_src.ok());
  fill(*b_src.value(), 0, 4096, 9);
  ASSERT_EQ(b.value().client->post_write(2, {b_src.value().get(), 0, 1024}, {key.value(), 2048}), Errc::ok);
  EXPECT_EQ(wait_send(*b.value().client).status, WcStatus::remote_access_error);

  // The default domain's memory as a local buffer on A's connection: soft
  // and dpdk refuse the post, a NIC fails the request.
  fill(*plain_src, 0, 4096, 77);
  const Errc posted = a.value().client->post_write(3, {plain_src.get(), 0, 1024}, {key.value(), 2048});
  if (posted == Errc::ok) {
    EXPECT_NE(wait_send(*a.value().client).status, WcStatus::success);
  } else {
    EXPECT_EQ(posted, Errc::local_protection);
  }
  for (std::size_t i = 2048; i < 4096; ++i) {
    ASSERT_EQ(a_dst.value()->data()[i], std::byte{0}) << "byte " << i << " changed";
  }
}

// A key is good only on the connection it was given to: the same region's
// key used by the peer of another connection (another client of the same
// broker) is refused like a wrong key, and no byte of the region changes.
TEST_F(Conformance, KeyGivenToOneConnectionFailsOnAnother) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite | kRemoteRead);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 4096, 31);
  const RemoteRegion for_a = grant(*dst);
  auto other = connect_pair(*provider_, *provider_, cfg_);
  ASSERT_TRUE(other.ok()) << other.error().message;
  Endpoint& b = *other.value().client;
  ASSERT_EQ(b.post_write(1, {src.get(), 0, 256}, {for_a, 0}), Errc::ok);
  EXPECT_EQ(wait_send(b).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*dst));
  EXPECT_NE(b.state(), EndpointState::connected);
  // A read with it from a third connection gets nothing either.
  auto third = connect_pair(*provider_, *provider_, cfg_);
  ASSERT_TRUE(third.ok()) << third.error().message;
  auto back = alloc(4096, kLocalWrite);
  ASSERT_TRUE(back);
  fill(*dst, 0, 4096, 57);
  ASSERT_EQ(third.value().client->post_read(2, {back.get(), 0, 256}, {for_a, 0}), Errc::ok);
  EXPECT_EQ(wait_send(*third.value().client).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*back));
  std::memset(dst->data(), 0, dst->size());
  // Connection A still uses it.
  ASSERT_EQ(client().post_write(3, {src.get(), 0, 256}, {for_a, 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::success);
  EXPECT_TRUE(check(*dst, 0, 256, 31));
}

// Remote addresses are offsets from the region's start: the last bytes are
// reachable, a byte past the end (or an offset far beyond it) is not.
TEST_F(Conformance, RegionRelativeOffsetsAreBoundsChecked) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 4096, 11);
  const RemoteRegion rr = grant(*dst);
  EXPECT_EQ(rr.length, dst->size());
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 16}, {rr, 4096 - 16}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::success);
  EXPECT_TRUE(check(*dst, 4096 - 16, 16, 11));
  std::memset(dst->data(), 0, dst->size());
  ASSERT_EQ(client().post_write(2, {src.get(), 0, 8}, {rr, 4096 - 4}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*dst));
}

TEST_F(Conformance, FarOutOfBoundsOffsetFails) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 4096, 12);
  // Would land in some other region (or wrap around) if the offset were not checked.
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 64}, {grant(*dst), 1ull << 32}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*dst));
}

TEST_F(Conformance, LocalBufferOutsideItsRegionIsRefusedAtPost) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  EXPECT_EQ(client().post_write(1, {src.get(), 4000, 200}, {grant(*dst), 0}), Errc::local_protection);
  EXPECT_EQ(client().post_write(1, {nullptr, 0, 8}, {grant(*dst), 0}), Errc::local_protection);
  // Nothing was posted, the endpoint still works.
  ASSERT_EQ(client().post_write(2, {src.get(), 0, 64}, {grant(*dst), 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::success);
}

TEST_F(Conformance, FullSendQueueIsBackpressureNotUB) {
  auto src = alloc(64, kLocalWrite);
  auto dst = alloc(64, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  const std::uint32_t depth = client().caps().send_queue_depth;
  std::uint32_t posted = 0;
  Errc e = Errc::ok;
  // Without polling completions, the queue must fill at the granted depth.
  for (std::uint32_t i = 0; i < depth + 8; ++i) {
    e = client().post_write(i, {src.get(), 0, 8}, {grant(*dst), 0});
    if (e != Errc::ok) break;
    ++posted;
  }
  EXPECT_EQ(e, Errc::backpressure);
  EXPECT_EQ(posted, depth);
  std::vector<Completion> c(depth);
  EXPECT_EQ(poll_until([&] { return client().poll_send(c.data(), static_cast<int>(depth)); },
                       static_cast<int>(posted)),
            static_cast<int>(posted));
  EXPECT_EQ(client().post_write(1, {src.get(), 0, 8}, {grant(*dst), 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::success);
}

TEST_F(Conformance, FullReceiveQueueIsBackpressure) {
  auto buf = alloc(64, kLocalWrite);
  ASSERT_TRUE(buf);
  const std::uint32_t depth = server().caps().recv_queue_depth;
  std::uint32_t posted = 0;
  Errc e = Errc::ok;
  for (std::uint32_t i = 0; i < depth + 8; ++i) {
    e = server().post_recv(i, {buf.get(), 0, 64});
    if (e != Errc::ok) break;
    ++posted;
  }
  EXPECT_EQ(e, Errc::backpressure);
  EXPECT_EQ(posted, depth);
}

TEST_F(Conformance, LocalDisconnectIsSeenByPeerAndFlushes) {
  auto src = alloc(64, kLocalWrite);
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && rbuf);
  ASSERT_EQ(server().post_recv(5, {rbuf.get(), 0, 64}), Errc::ok);
  client().disconnect();
  EXPECT_NE(client().state(), EndpointState::connected);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    seen = server().poll_event() == EndpointEvent::disconnected;
    if (!seen) std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(seen) << "peer never saw the disconnect";
  EXPECT_NE(server().state(), EndpointState::connected);
  // The posted receive is flushed, not left hanging.
  Completion c{};
  if (poll_until([&] { return server().poll_recv(&c, 1); }, 1, 5000ms) == 1) {
    EXPECT_EQ(c.status, WcStatus::flushed);
    EXPECT_EQ(c.wr_id, 5u);
  }
  Errc e = client().post_send(1, {src.get(), 0, 8});
  if (e == Errc::ok) {
    EXPECT_NE(wait_send(client()).status, WcStatus::success);
  }
}

// A peer in another process: connects, lets the parent write into its region
// and send to it, reports what it saw through its exit code.
class CrossProcess : public ::testing::Test {};

TEST_F(CrossProcess, WritesLandInAnotherProcessAndPeerDeathIsDetected) {
  if (provider_spec().find("dpdk:") != std::string::npos) {
    GTEST_SKIP() << "DPDK does not survive fork() (this test's child would inherit the parent's EAL); the "
                    "dpdk provider's two-process test execs its peer: DpdkProvider.TwoProcessesOverMemif";
  }
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto listener = p.value()->listen(listen_address());
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  const std::string addr = listener.value()->address();
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: its own provider, a region the parent writes into, and it
    // checks the payload when the immediate arrives.
    close(to_child[1]);
    close(from_child[0]);
    auto cp = Provider::open(provider_spec());
    if (!cp) _exit(10);
    auto ep = cp.value()->connect(addr);
    if (!ep) _exit(11);
    auto region = cp.value()->allocate(1 << 16, kLocalWrite | kRemoteWrite | kRemoteRead);
    auto rbuf = cp.value()->allocate(64, kLocalWrite);
    if (!region || !rbuf) _exit(12);
    if (ep.value()->post_recv(1, {rbuf.value().get(), 0, 64}) != Errc::ok) _exit(13);
    auto granted = ep.value()->expose(*region.value());
    if (!granted) _exit(19);
    RemoteRegion rr = granted.value();
    if (write(from_child[1], &rr, sizeof rr) != sizeof rr) _exit(14);
    Completion c{};
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (ep.value()->poll_recv(&c, 1) == 0) {
      if (std::chrono::steady_clock::now() > deadline) _exit(15);
      std::this_thread::yield();
    }
    if (c.status != WcStatus::success || !c.has_imm || c.imm != 0xC0FFEEu) _exit(16);
    if (!check(*region.value(), 100, 1000, 33)) _exit(17);
    char ok = 'k';
    if (write(from_child[1], &ok, 1) != 1) _exit(18);
    char wait_byte;
    (void)!read(to_child[0], &wait_byte, 1);  // parent kills us while we wait here
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  auto ep = listener.value()->accept(20000ms);
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  RemoteRegion rr{};
  ASSERT_EQ(read(from_child[0], &rr, sizeof rr), static_cast<ssize_t>(sizeof rr));
  auto src = p.value()->allocate(4096, kLocalWrite);
  ASSERT_TRUE(src.ok());
  fill(*src.value(), 0, 1000, 33);
  ASSERT_EQ(ep.value()->post_write_imm(1, {src.value().get(), 0, 1000}, {rr, 100}, 0xC0FFEEu), Errc::ok);
  EXPECT_EQ(wait_send(*ep.value()).status, WcStatus::success);
  char ok = 0;
  ASSERT_EQ(read(from_child[0], &ok, 1), 1) << "child did not confirm the payload";
  EXPECT_EQ(ok, 'k');

  // Kill the peer with a real signal: the endpoint must report it, and work
  // posted after it must not succeed or hang.
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));

  bool disconnected = false;
  bool failed_op = false;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  std::uint64_t id = 100;
  while (!(disconnected && failed_op) && std::chrono::steady_clock::now() < deadline) {
    if (ep.value()->poll_event() == EndpointEvent::disconnected) disconnected = true;
    if (!failed_op) {
      Errc e = ep.value()->post_write(id++, {src.value().get(), 0, 64}, {rr, 0});
      if (e != Errc::ok && e != Errc::backpressure) {
        failed_op = true;
      } else if (e == Errc::ok) {
        Completion c{};
        if (poll_until([&] { return ep.value()->poll_send(&c, 1); }, 1, 30000ms) == 1 &&
            c.status != WcStatus::success) {
          failed_op = true;
        }
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(disconnected) << "no disconnect event after the peer was killed";
  EXPECT_TRUE(failed_op) << "operations kept succeeding after the peer died";
  EXPECT_NE(ep.value()->state(), EndpointState::connected);
  close(to_child[1]);
  close(from_child[0]);
}

}  // namespace
}  // namespace catena::fabric::test
