// Provider conformance suite: the semantics every fabric provider must give,
// run unchanged against the soft provider on the host and the verbs provider
// on soft-RoCE inside the CI VM (CATENA_PROVIDER selects which).
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <future>
#include <gtest/gtest.h>
#include <numeric>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "fabric_test_util.hpp"

namespace catena::fabric::test {
namespace {

using namespace std::chrono_literals;

class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = Provider::open(provider_spec());
    ASSERT_TRUE(p.ok()) << "cannot open provider '" << provider_spec() << "': " << p.error().message;
    provider_ = std::move(p.value());
    auto pair = connect_pair(*provider_, *provider_, cfg_);
    ASSERT_TRUE(pair.ok()) << "cannot connect: " << pair.error().message;
    pair_ = std::move(pair.value());
  }

  std::unique_ptr<MemoryRegion> alloc(std::size_t size, std::uint32_t access) {
    auto mr = provider_->allocate(size, access);
    EXPECT_TRUE(mr.ok()) << mr.error().message;
    return mr.ok() ? std::move(mr.value()) : nullptr;
  }

  Endpoint& client() { return *pair_.client; }
  Endpoint& server() { return *pair_.server; }

  // The key the server end gives its peer, the client, for `mr`.
  RemoteRegion grant(const MemoryRegion& mr) {
    auto r = server().expose(mr);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r.value() : RemoteRegion{};
  }

  EndpointConfig cfg_{};
  std::unique_ptr<Provider> provider_;
  EndpointPair pair_;
};

void fill(MemoryRegion& mr, std::size_t off, std::size_t len, std::uint8_t seed) {
  for (std::size_t i = 0; i < len; ++i)
    mr.data()[off + i] = std::byte(static_cast<std::uint8_t>(seed + i * 7));
}

bool check(const MemoryRegion& mr, std::size_t off, std::size_t len, std::uint8_t seed) {
  for (std::size_t i = 0; i < len; ++i) {
    if (mr.data()[off + i] != std::byte(static_cast<std::uint8_t>(seed + i * 7))) return false;
  }
  return true;
}

bool all_zero(const MemoryRegion& mr) {
  return std::all_of(mr.data(), mr.data() + mr.size(), [](std::byte b) { return b == std::byte{0}; });
}

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
