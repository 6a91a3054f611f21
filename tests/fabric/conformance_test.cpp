// Provider conformance suite: the semantics every fabric provider must give,
// run unchanged against the soft provider on the host and the verbs provider
// on soft-RoCE inside the CI VM (CATENA_PROVIDER selects which).
#include "conformance_fixture.hpp"

namespace catena::fabric::test {
namespace {

TEST(ProviderOpen, UnknownSpecIsInvalidArgument) {
  auto p = Provider::open("carrier-pigeon");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), Errc::invalid_argument);
  EXPECT_NE(p.error().message.find("carrier-pigeon"), std::string::npos);
}

TEST(ProviderOpen, MissingVerbsDeviceIsClearError) {
  auto p = Provider::open("verbs:no-such-device0");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(p.code() == Errc::no_device || p.code() == Errc::invalid_argument) << to_string(p.code());
  EXPECT_FALSE(p.error().message.empty());
}

TEST(ProviderOpen, UnknownVerbsOptionIsInvalidArgument) {
  auto p = Provider::open("verbs:rxe0,carrier-pigeon");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), Errc::invalid_argument);
  EXPECT_NE(p.error().message.find("carrier-pigeon"), std::string::npos) << p.error().message;
  auto oob = Provider::open("verbs:no-such-device0,oob");
  ASSERT_FALSE(oob.ok());
  EXPECT_TRUE(oob.code() == Errc::no_device || oob.code() == Errc::invalid_argument) << to_string(oob.code());
}

// What a node reports as its registered memory (NodeStats::registered_bytes).
TEST(ProviderRegions, RegisteredBytesCountTheLiveRegionsOnly) {
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  Provider& provider = *p.value();
  const std::int64_t before = provider.registered_bytes();
  auto a = provider.allocate(64 << 10, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = provider.allocate(4096, kLocalWrite);
  ASSERT_TRUE(b.ok()) << b.error().message;
  const auto a_bytes = static_cast<std::int64_t>(a.value()->size());
  const auto b_bytes = static_cast<std::int64_t>(b.value()->size());
  EXPECT_GE(a_bytes, 64 << 10);
  EXPECT_EQ(provider.registered_bytes(), before + a_bytes + b_bytes);
  a.value().reset();
  EXPECT_EQ(provider.registered_bytes(), before + b_bytes);
  b.value().reset();
  EXPECT_EQ(provider.registered_bytes(), before);
}

TEST(ProviderOpen, ConnectToNobodyFailsInTime) {
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  // Listen, learn a free port, close the listener: nobody listens there now.
  std::string addr;
  {
    auto l = p.value()->listen(listen_address());
    ASSERT_TRUE(l.ok()) << l.error().message;
    addr = l.value()->address();
  }
  auto start = std::chrono::steady_clock::now();
  auto ep = p.value()->connect(addr, {}, 3000ms);
  EXPECT_FALSE(ep.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(ProviderOpen, MalformedAddressIsInvalidArgument) {
  auto p = Provider::open(provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto ep = p.value()->connect("not an address", {}, 1000ms);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.code(), Errc::invalid_argument) << ep.error().message;
}

TEST_F(Conformance, GrantedCapsAreReadBack) {
  const auto& c = client().caps();
  EXPECT_GT(c.send_queue_depth, 0u);
  EXPECT_LE(c.send_queue_depth, std::max<std::uint32_t>(cfg_.send_queue_depth, c.send_queue_depth));
  EXPECT_GT(c.recv_queue_depth, 0u);
  EXPECT_GE(c.max_message_size, 1u << 20);
  EXPECT_GE(c.max_send_size, 256u);
  EXPECT_EQ(client().state(), EndpointState::connected);
  EXPECT_EQ(server().state(), EndpointState::connected);
}

TEST_F(Conformance, AllocatedRegionIsZeroed) {
  auto mr = alloc(1 << 16, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(mr);
  EXPECT_TRUE(all_zero(*mr));
  EXPECT_EQ(grant(*mr).length, mr->size());
}

TEST_F(Conformance, WriteThenReadBackAcrossSizes) {
  constexpr std::size_t kMax = 1 << 20;
  auto src = alloc(kMax, kLocalWrite);
  auto dst = alloc(kMax, kLocalWrite | kRemoteWrite | kRemoteRead);
  auto back = alloc(kMax, kLocalWrite);
  ASSERT_TRUE(src && dst && back);
  std::uint8_t seed = 1;
  for (std::size_t len = 1; len <= kMax; len *= 4, ++seed) {
    fill(*src, 0, len, seed);
    ASSERT_EQ(client().post_write(len, {src.get(), 0, static_cast<std::uint32_t>(len)}, {grant(*dst), 0}),
              Errc::ok);
    auto c = wait_send(client());
    ASSERT_EQ(c.status, WcStatus::success) << len;
    EXPECT_EQ(c.opcode, Opcode::write);
    EXPECT_EQ(c.wr_id, len);
    ASSERT_EQ(client().post_read(len + 1, {back.get(), 0, static_cast<std::uint32_t>(len)}, {grant(*dst), 0}),
              Errc::ok);
    c = wait_send(client());
    ASSERT_EQ(c.status, WcStatus::success) << len;
    EXPECT_EQ(c.opcode, Opcode::read);
    EXPECT_TRUE(check(*dst, 0, len, seed)) << "target content wrong at len " << len;
    EXPECT_TRUE(check(*back, 0, len, seed)) << "read-back content wrong at len " << len;
  }
}

TEST_F(Conformance, ImmediateArrivesOnlyAfterItsPayload) {
  constexpr std::uint32_t kSlot = 4096;
  constexpr std::uint32_t kSlots = 16;
  constexpr int kRounds = 2000;
  auto src = alloc(kSlot * kSlots, kLocalWrite);
  auto dst = alloc(kSlot * kSlots, kLocalWrite | kRemoteWrite);
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && dst && rbuf);
  int in_flight = 0;
  int next_post = 0;
  int received = 0;
  // Keep a window below the queue depths; every receive checks its slot.
  const int window = static_cast<int>(std::min<std::uint32_t>(
      {kSlots / 2, client().caps().send_queue_depth, server().caps().recv_queue_depth}));
  for (int i = 0; i < window; ++i) ASSERT_EQ(server().post_recv(1000 + i, {rbuf.get(), 0, 64}), Errc::ok);
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (received < kRounds && std::chrono::steady_clock::now() < deadline) {
    while (next_post < kRounds && in_flight < window) {
      std::uint32_t slot = static_cast<std::uint32_t>(next_post) % kSlots;
      std::uint32_t len = 1 + (static_cast<std::uint32_t>(next_post) * 131) % kSlot;
      fill(*src, slot * kSlot, len, static_cast<std::uint8_t>(next_post));
      ASSERT_EQ(client().post_write_imm(next_post, {src.get(), slot * kSlot, len},
                                        {grant(*dst), slot * kSlot}, static_cast<std::uint32_t>(next_post)),
                Errc::ok);
      ++next_post;
      ++in_flight;
    }
    Completion c[8];
    int n = client().poll_send(c, 8);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(c[i].status, WcStatus::success);
      ASSERT_EQ(c[i].opcode, Opcode::write_imm);
    }
    n = server().poll_recv(c, 8);
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(c[i].status, WcStatus::success);
      ASSERT_EQ(c[i].opcode, Opcode::recv_write_imm);
      ASSERT_TRUE(c[i].has_imm);
      ASSERT_EQ(c[i].imm, static_cast<std::uint32_t>(received)) << "immediates out of order";
      std::uint32_t slot = c[i].imm % kSlots;
      std::uint32_t len = 1 + (c[i].imm * 131) % kSlot;
      ASSERT_EQ(c[i].byte_len, len);
      ASSERT_TRUE(check(*dst, slot * kSlot, len, static_cast<std::uint8_t>(c[i].imm)))
          << "payload of immediate " << c[i].imm << " not visible";
      ++received;
      --in_flight;
      ASSERT_EQ(server().post_recv(2000 + received, {rbuf.get(), 0, 64}), Errc::ok);
    }
  }
  EXPECT_EQ(received, kRounds);
}

TEST_F(Conformance, WritesBecomeVisibleInPostingOrder) {
  // Many writes to one word, then a write-with-immediate elsewhere: when the
  // immediate arrives, the word must hold the last value written.
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && dst && rbuf);
  const int burst = static_cast<int>(std::min<std::uint32_t>(32, client().caps().send_queue_depth - 1));
  for (int round = 0; round < 50; ++round) {
    ASSERT_EQ(server().post_recv(round, {rbuf.get(), 0, 64}), Errc::ok);
    for (int i = 0; i < burst; ++i) {
      std::uint64_t v = static_cast<std::uint64_t>(round) * 1000 + i;
      std::memcpy(src->data() + 8 * i, &v, 8);
      ASSERT_EQ(client().post_write(i, {src.get(), 8u * i, 8}, {grant(*dst), 0}), Errc::ok);
    }
    ASSERT_EQ(client().post_write_imm(999, {src.get(), 1024, 8}, {grant(*dst), 1024}, round), Errc::ok);
    auto r = wait_recv(server());
    ASSERT_EQ(r.status, WcStatus::success);
    std::uint64_t seen;
    std::memcpy(&seen, dst->data(), 8);
    ASSERT_EQ(seen, static_cast<std::uint64_t>(round) * 1000 + burst - 1) << "round " << round;
    Completion c[64];
    ASSERT_EQ(poll_until([&] { return client().poll_send(c, 64); }, burst + 1), burst + 1);
  }
}

TEST_F(Conformance, SendRecvDeliversInOrderWithLengths) {
  const std::uint32_t msg = std::min<std::uint32_t>(256, client().caps().max_send_size);
  constexpr int kCount = 64;
  auto src = alloc(msg * kCount, kLocalWrite);
  auto dst = alloc(msg * kCount, kLocalWrite);
  ASSERT_TRUE(src && dst);
  const int depth = static_cast<int>(
      std::min<std::uint32_t>({kCount, client().caps().send_queue_depth, server().caps().recv_queue_depth}));
  int sent = 0, got = 0;
  for (int i = 0; i < depth; ++i) ASSERT_EQ(server().post_recv(i, {dst.get(), msg * i, msg}), Errc::ok);
  for (; sent < depth; ++sent) {
    std::uint32_t len = 1 + (static_cast<std::uint32_t>(sent) * 37) % msg;
    fill(*src, msg * sent, len, static_cast<std::uint8_t>(sent));
    ASSERT_EQ(client().post_send(sent, {src.get(), msg * static_cast<std::uint32_t>(sent), len}), Errc::ok);
  }
  for (; got < depth; ++got) {
    auto c = wait_recv(server());
    ASSERT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.opcode, Opcode::recv);
    EXPECT_FALSE(c.has_imm);
    EXPECT_EQ(c.wr_id, static_cast<std::uint64_t>(got)) << "receives consumed out of order";
    std::uint32_t len = 1 + (static_cast<std::uint32_t>(got) * 37) % msg;
    EXPECT_EQ(c.byte_len, len);
    EXPECT_TRUE(check(*dst, msg * got, len, static_cast<std::uint8_t>(got)));
  }
  Completion c[64];
  EXPECT_EQ(poll_until([&] { return client().poll_send(c, 64); }, depth), depth);
}

TEST_F(Conformance, SendWaitsForALateReceive) {
  auto src = alloc(64, kLocalWrite);
  auto dst = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 64, 42);
  ASSERT_EQ(client().post_send(1, {src.get(), 0, 64}), Errc::ok);
  Completion c{};
  // Nothing posted yet: nothing may be delivered.
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(server().poll_recv(&c, 1), 0);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(server().post_recv(7, {dst.get(), 0, 64}), Errc::ok);
  c = wait_recv(server());
  ASSERT_EQ(c.status, WcStatus::success);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_TRUE(check(*dst, 0, 64, 42));
  EXPECT_EQ(wait_send(client()).status, WcStatus::success);
}

// A receive posted in before_accept is there before the peer can send: the
// peer's first SEND, posted the moment its connect returns, lands without
// waiting on RNR retries (on a device with counters: no RNR NAK at all).
TEST_F(Conformance, ReceivePostedBeforeAcceptTakesTheFirstSend) {
  auto listener = provider_->listen(listen_address(), cfg_);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 64, 33);
  const auto rnr_before = catena::test::rnr_naks_sent();
  auto fut = std::async(std::launch::async, [&]() -> Result<std::unique_ptr<Endpoint>> {
    auto ep = provider_->connect(listener.value()->address(), cfg_);
    if (ep && ep.value()->post_send(1, {src.get(), 0, 64}) != Errc::ok) {
      return make_error(Errc::io_error, "post_send failed");
    }
    return ep;
  });
  bool called = false;
  auto accepted = listener.value()->accept(10000ms, [&](Endpoint& ep) {
    called = true;
    return ep.post_recv(7, {dst.get(), 0, 64});
  });
  auto connected = fut.get();
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  ASSERT_TRUE(connected.ok()) << connected.error().message;
  EXPECT_TRUE(called);
  auto r = wait_recv(*accepted.value());
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.wr_id, 7u);
  EXPECT_EQ(r.byte_len, 64u);
  EXPECT_TRUE(check(*dst, 0, 64, 33));
  EXPECT_EQ(wait_send(*connected.value()).status, WcStatus::success);
  if (rnr_before) {
    EXPECT_EQ(catena::test::rnr_naks_sent().value_or(0), *rnr_before) << "the first SEND met no receive";
  }

  // A before_accept that fails refuses the connection.
  auto fut2 =
      std::async(std::launch::async, [&] { return provider_->connect(listener.value()->address(), cfg_); });
  auto refused = listener.value()->accept(5000ms, [](Endpoint&) { return Errc::resource_exhausted; });
  EXPECT_EQ(refused.code(), Errc::resource_exhausted);
  auto c2 = fut2.get();
  if (c2) {  // soft connects before accept; the refusal then reaches it as a disconnect
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (c2.value()->poll_event() == EndpointEvent::none &&
           c2.value()->state() == EndpointState::connected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_NE(c2.value()->state(), EndpointState::connected);
  }
}

TEST_F(Conformance, WrongRkeyFailsAndChangesNothing) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 4096, 9);
  RemoteRegion bad = grant(*dst);
  bad.rkey ^= 0x5a5a5a5au;
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 4096}, {bad, 0}), Errc::ok);
  auto c = wait_send(client());
  EXPECT_EQ(c.status, WcStatus::remote_access_error);
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_TRUE(all_zero(*dst));
  // The endpoint is now in error: later work is flushed (or refused), never executed.
  Errc e = client().post_write(2, {src.get(), 0, 64}, {grant(*dst), 0});
  if (e == Errc::ok) {
    auto f = wait_send(client());
    EXPECT_NE(f.status, WcStatus::success);
  }
  EXPECT_TRUE(all_zero(*dst));
  EXPECT_NE(client().state(), EndpointState::connected);
}

// InfiniBand checks no key for a zero-length access, and both providers
// follow it: a zero-length write, and one with immediate (which still
// delivers its immediate), succeed with any rkey and change nothing.
TEST_F(Conformance, ZeroLengthWritesSucceedWithAnyRkey) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && dst && rbuf);
  fill(*src, 0, 4096, 21);
  RemoteRegion bad = grant(*dst);
  bad.rkey ^= 0x5a5a5a5au;
  ASSERT_EQ(server().post_recv(5, {rbuf.get(), 0, 64}), Errc::ok);
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 0}, {bad, 0}), Errc::ok);
  ASSERT_EQ(client().post_write_imm(2, {src.get(), 0, 0}, {bad, 128}, 0xABCDu), Errc::ok);
  auto c1 = wait_send(client());
  auto c2 = wait_send(client());
  EXPECT_EQ(c1.wr_id, 1u);
  EXPECT_EQ(c1.status, WcStatus::success);
  EXPECT_EQ(c2.wr_id, 2u);
  EXPECT_EQ(c2.status, WcStatus::success);
  auto r = wait_recv(server());
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.opcode, Opcode::recv_write_imm);
  EXPECT_TRUE(r.has_imm);
  EXPECT_EQ(r.imm, 0xABCDu);
  EXPECT_EQ(r.byte_len, 0u);
  EXPECT_TRUE(all_zero(*dst));
  EXPECT_EQ(client().state(), EndpointState::connected);
  // The endpoint is still good for real work.
  ASSERT_EQ(client().post_write(3, {src.get(), 0, 64}, {grant(*dst), 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::success);
  EXPECT_TRUE(check(*dst, 0, 64, 21));
}

TEST_F(Conformance, OutOfBoundsWriteFailsAndChangesNothing) {
  auto src = alloc(8192, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 8192, 3);
  // Starts inside, ends 1 byte past the end.
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 4097}, {grant(*dst), 0}), Errc::ok);
  auto c = wait_send(client());
  EXPECT_EQ(c.status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*dst));
}

TEST_F(Conformance, WriteToRegionWithoutRemoteWriteFails) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteRead);
  ASSERT_TRUE(src && dst);
  fill(*src, 0, 4096, 5);
  ASSERT_EQ(client().post_write(1, {src.get(), 0, 128}, {grant(*dst), 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*dst));
}

TEST_F(Conformance, ReadFromRegionWithoutRemoteReadFails) {
  auto local = alloc(4096, kLocalWrite);
  auto target = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(local && target);
  fill(*target, 0, 4096, 77);
  ASSERT_EQ(client().post_read(1, {local.get(), 0, 128}, {grant(*target), 0}), Errc::ok);
  EXPECT_EQ(wait_send(client()).status, WcStatus::remote_access_error);
  EXPECT_TRUE(all_zero(*local));
}

}  // namespace
}  // namespace catena::fabric::test
