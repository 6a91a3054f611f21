// Soft-provider specific tests: what the conformance suite cannot ask of
// every provider — how the transport is chosen, what a peer speaking garbage
// does to a TCP endpoint, and that revoking access (freeing a region,
// disconnecting) is exact while the peer keeps writing.
#include "soft_test_util.hpp"

namespace catena::fabric::test {
namespace {

TEST(SoftOptions, UnknownOptionIsInvalidArgument) {
  auto p = Provider::open("soft:carrier-pigeon");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.code(), Errc::invalid_argument);
  EXPECT_NE(p.error().message.find("carrier-pigeon"), std::string::npos);
}

TEST(SoftOptions, NamesSayTheMode) {
  EXPECT_EQ(open_or_fail("soft")->name(), "soft");
  EXPECT_EQ(open_or_fail("soft:tcp")->name(), "soft:tcp");
  EXPECT_EQ(open_or_fail("soft:shm,host=a")->name(), "soft:shm");
}

// ------------------------------------------------------ transport choice

TEST(SoftTransport, SameHostAutoUsesSharedMemory) {
  auto a = open_or_fail("soft");
  auto b = open_or_fail("soft");
  auto pair = connect_pair(*a, *b);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  EXPECT_TRUE(is_shm(*pair.value().client));
  EXPECT_TRUE(is_shm(*pair.value().server));
}

TEST(SoftTransport, TcpOnEitherSideWins) {
  auto a = open_or_fail("soft");
  auto b = open_or_fail("soft:tcp");
  auto pair = connect_pair(*a, *b);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  EXPECT_TRUE(is_tcp(*pair.value().client));
  EXPECT_TRUE(is_tcp(*pair.value().server));
}

TEST(SoftTransport, OtherHostAutoFallsBackToTcp) {
  auto a = open_or_fail("soft:host=alpha");
  auto b = open_or_fail("soft:host=beta");
  auto pair = connect_pair(*a, *b);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  EXPECT_TRUE(is_tcp(*pair.value().client));
  EXPECT_TRUE(is_tcp(*pair.value().server));
}

TEST(SoftTransport, ShmRequiredAcrossHostsIsRefusedWithReason) {
  auto a = open_or_fail("soft:shm,host=alpha");
  auto b = open_or_fail("soft:host=beta");
  auto listener = b->listen(listen_address());
  ASSERT_TRUE(listener.ok());
  auto ep = a->connect(listener.value()->address(), {}, 5000ms);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.code(), Errc::refused);
  EXPECT_NE(ep.error().message.find("another host"), std::string::npos) << ep.error().message;
  // The listener's side reports the refusal too, with the same reason.
  auto accepted = listener.value()->accept(5000ms);
  ASSERT_FALSE(accepted.ok());
  EXPECT_EQ(accepted.code(), Errc::refused);
  EXPECT_NE(accepted.error().message.find("another host"), std::string::npos) << accepted.error().message;
}

TEST(SoftTransport, ShmRequiredAgainstForcedTcpIsRefused) {
  auto a = open_or_fail("soft:tcp");
  auto b = open_or_fail("soft:shm");
  auto listener = b->listen(listen_address());
  ASSERT_TRUE(listener.ok());
  auto ep = a->connect(listener.value()->address(), {}, 5000ms);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.code(), Errc::refused);
}

// --------------------------------------------- garbage from the network

// A raw TCP connection to a listener that sends `bytes` and closes.
void send_raw(const std::string& address, const std::vector<std::uint8_t>& bytes) {
  auto colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  std::this_thread::sleep_for(20ms);
  close(fd);
}

TEST(SoftListener, GarbageHandshakeIsDroppedAndListenerKeepsWorking) {
  auto p = open_or_fail("soft");
  auto listener = p->listen(listen_address());
  ASSERT_TRUE(listener.ok());
  const std::string addr = listener.value()->address();
  send_raw(addr, std::vector<std::uint8_t>(1000, 0xAB));
  send_raw(addr, {'G', 'E', 'T', ' ', '/', '\r', '\n'});
  auto ep = p->connect(addr, {}, 5000ms);
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  auto accepted = listener.value()->accept(5000ms);
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  EXPECT_EQ(accepted.value()->state(), EndpointState::connected);
}

// Forwards bytes between a client and a soft listener and can inject bytes
// toward the listener's side once the handshake has passed.
class Proxy {
 public:
  explicit Proxy(const std::string& target) : target_(target) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(listen(listen_fd_, 1), 0);
    socklen_t len = sizeof sa;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    address_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop_ = true;
    shutdown(client_fd_.load(), SHUT_RDWR);
    shutdown(server_fd_.load(), SHUT_RDWR);
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    if (back_.joinable()) {
      back_.join();
    }
    close(listen_fd_);
    if (client_fd_ >= 0) {
      close(client_fd_);
    }
    if (server_fd_ >= 0) {
      close(server_fd_);
    }
  }
  [[nodiscard]] const std::string& address() const { return address_; }
  void inject(const void* data, std::size_t len) {
    std::lock_guard lock(mu_);
    ASSERT_EQ(send(server_fd_, data, len, MSG_NOSIGNAL), static_cast<ssize_t>(len));
  }

 private:
  void pump(int from, int to) {
    char buf[65536];
    for (;;) {
      ssize_t n = recv(from, buf, sizeof buf, 0);
      if (n <= 0) {
        break;
      }
      std::lock_guard lock(mu_);
      if (send(to, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) {
        break;
      }
    }
    shutdown(to, SHUT_WR);
  }
  void run() {
    int c = accept(listen_fd_, nullptr, nullptr);
    if (c < 0 || stop_) {
      return;
    }
    client_fd_ = c;
    auto colon = target_.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(target_.substr(colon + 1))));
    inet_pton(AF_INET, target_.substr(0, colon).c_str(), &sa.sin_addr);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return;
    }
    server_fd_ = s;
    back_ = std::thread([this] { pump(server_fd_, client_fd_); });
    pump(client_fd_, server_fd_);
  }

  std::string target_;
  std::string address_;
  int listen_fd_ = -1;
  std::atomic<int> client_fd_{-1};
  std::atomic<int> server_fd_{-1};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::thread thread_;
  std::thread back_;
};

soft::FrameHeader frame(soft::FrameOp op, std::uint32_t len) {
  soft::FrameHeader h{};
  h.magic = soft::kFrameMagic;
  h.op = static_cast<std::uint8_t>(op);
  h.len = len;
  return h;
}

struct Injection {
  const char* name;
  std::vector<std::uint8_t> bytes;
};

std::vector<std::uint8_t> bytes_of(const soft::FrameHeader& h, std::size_t payload = 0) {
  std::vector<std::uint8_t> v(sizeof h + payload, 0x5A);
  std::memcpy(v.data(), &h, sizeof h);
  return v;
}

std::vector<Injection> injections() {
  std::vector<Injection> v;
  v.push_back({"random_bytes", std::vector<std::uint8_t>(4096, 0xEE)});
  v.push_back({"short_garbage", {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
                                 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33}});
  auto unknown_op = frame(soft::FrameOp::write, 0);
  unknown_op.op = 0x77;
  v.push_back({"unknown_op", bytes_of(unknown_op)});
  v.push_back({"length_over_max", bytes_of(frame(soft::FrameOp::write, 0xFFFFFFF0u))});
  auto out_of_step = frame(soft::FrameOp::write, 8);
  out_of_step.seq = 12345;
  v.push_back({"sequence_out_of_step", bytes_of(out_of_step, 8)});
  auto ack_from_future = frame(soft::FrameOp::ack, 0);
  ack_from_future.ack = 99;
  v.push_back({"ack_for_unsent_requests", bytes_of(ack_from_future)});
  v.push_back({"read_response_nobody_asked_for", bytes_of(frame(soft::FrameOp::read_resp, 16), 16)});
  return v;
}

class SoftGarbage : public ::testing::TestWithParam<int> {};

TEST_P(SoftGarbage, MalformedFramesEndTheConnectionCleanly) {
  const Injection inj = injections()[static_cast<std::size_t>(GetParam())];
  SCOPED_TRACE(inj.name);
  auto p = open_or_fail("soft:tcp");
  auto listener = p->listen(listen_address());
  ASSERT_TRUE(listener.ok());
  Proxy proxy(listener.value()->address());
  auto client = p->connect(proxy.address(), {}, 5000ms);
  ASSERT_TRUE(client.ok()) << client.error().message;
  auto server = listener.value()->accept(5000ms);
  ASSERT_TRUE(server.ok()) << server.error().message;
  auto mr = p->allocate(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(mr.ok());
  ASSERT_EQ(server.value()->post_recv(7, {mr.value().get(), 0, 64}), Errc::ok);

  proxy.inject(inj.bytes.data(), inj.bytes.size());
  std::vector<Completion> recvs;
  EXPECT_TRUE(wait_event(*server.value(), &recvs)) << "the server endpoint did not give up on the connection";
  EXPECT_NE(server.value()->state(), EndpointState::connected);
  Completion c{};
  if (recvs.empty() && poll_until([&] { return server.value()->poll_recv(&c, 1); }, 1, 5000ms) == 1) {
    recvs.push_back(c);
  }
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].wr_id, 7u);
  EXPECT_EQ(recvs[0].status, WcStatus::flushed);
  EXPECT_TRUE(all_zero(*mr.value()));
  // The honest client learns that its connection is gone.
  EXPECT_TRUE(wait_event(*client.value()));
}

INSTANTIATE_TEST_SUITE_P(Frames, SoftGarbage, ::testing::Range(0, static_cast<int>(injections().size())),
                         [](const auto& info) { return std::string(injections()[info.param].name); });

TEST(SoftGarbageWrite, WellFormedWriteOutsideAnyRegionIsRefusedNotApplied) {
  auto p = open_or_fail("soft:tcp");
  auto listener = p->listen(listen_address());
  ASSERT_TRUE(listener.ok());
  Proxy proxy(listener.value()->address());
  auto client = p->connect(proxy.address(), {}, 5000ms);
  ASSERT_TRUE(client.ok());
  auto server = listener.value()->accept(5000ms);
  ASSERT_TRUE(server.ok());
  auto mr = p->allocate(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(mr.ok());
  // A protocol-valid frame whose key is right but whose address points far
  // outside the region (past the end of the arena, even).
  auto h = frame(soft::FrameOp::write, 64);
  auto granted = server.value()->expose(*mr.value());
  ASSERT_TRUE(granted.ok()) << granted.error().message;
  h.rkey = granted.value().rkey;
  h.addr = ~std::uint64_t{0} - 8;
  auto bytes = bytes_of(h, 64);
  proxy.inject(bytes.data(), bytes.size());
  EXPECT_TRUE(wait_event(*server.value()));
  EXPECT_TRUE(all_zero(*mr.value()));
}

// ------------------------------------------------------ the arena file
// ------------------------------------------------------ exact revocation

class SoftModes : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    provider_ = open_or_fail(GetParam());
    ASSERT_TRUE(provider_);
    auto pair = connect_pair(*provider_, *provider_);
    ASSERT_TRUE(pair.ok()) << pair.error().message;
    pair_ = std::move(pair.value());
  }
  std::unique_ptr<MemoryRegion> alloc(std::size_t size, std::uint32_t access) {
    auto mr = provider_->allocate(size, access);
    EXPECT_TRUE(mr.ok());
    return mr.ok() ? std::move(mr.value()) : nullptr;
  }
  // The key the server end gives the client for `mr`.
  RemoteRegion grant(const MemoryRegion& mr) {
    auto r = pair_.server->expose(mr);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r.value() : RemoteRegion{};
  }
  std::unique_ptr<Provider> provider_;
  EndpointPair pair_;
};

TEST_P(SoftModes, DisconnectFencesThePeerAtOnce) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  std::memset(src->data(), 0x11, 4096);
  pair_.server->disconnect();
  // The client has not heard of it yet; its writes must not land anyway.
  for (int i = 0; i < 16; ++i) {
    Errc e = pair_.client->post_write(i, {src.get(), 0, 4096}, {grant(*dst), 0});
    if (e != Errc::ok) {
      break;
    }
    EXPECT_NE(wait_send(*pair_.client).status, WcStatus::success);
  }
  EXPECT_TRUE(all_zero(*dst));
}

TEST_P(SoftModes, FreedRegionTakesNoLateWritesAndItsMemoryComesBackZeroed) {
  constexpr std::size_t kSize = std::size_t{64} * 1024;
  auto src = alloc(kSize, kLocalWrite);
  std::memset(src->data(), 0x22, kSize);
  auto victim = alloc(kSize, kLocalWrite | kRemoteWrite);
  const RemoteRegion rr = grant(*victim);
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    for (std::uint64_t i = 0; !failed; ++i) {
      Errc e = pair_.client->post_write(i, {src.get(), 0, kSize}, {rr, 0});
      if (e == Errc::backpressure) {
        std::this_thread::yield();
      }
      Completion c[16];
      int n = pair_.client->poll_send(c, 16);
      for (int k = 0; k < n; ++k) {
        if (c[k].status != WcStatus::success) {
          failed = true;
        }
      }
    }
  });
  std::this_thread::sleep_for(20ms);
  victim.reset();
  // Whatever reuses the range must see zeros, never a late write.
  for (int round = 0; round < 50; ++round) {
    auto fresh = alloc(kSize, kLocalWrite | kRemoteWrite);
    ASSERT_TRUE(fresh);
    EXPECT_TRUE(all_zero(*fresh)) << "round " << round;
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!failed && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  failed = true;
  writer.join();
}

TEST_P(SoftModes, SendLargerThanTheReceiveFailsBothSides) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite);
  ASSERT_EQ(pair_.server->post_recv(1, {dst.get(), 0, 16}), Errc::ok);
  ASSERT_EQ(pair_.client->post_send(2, {src.get(), 0, 100}), Errc::ok);
  auto r = wait_recv(*pair_.server);
  EXPECT_EQ(r.wr_id, 1u);
  EXPECT_EQ(r.status, WcStatus::local_length_error);
  auto s = wait_send(*pair_.client);
  EXPECT_EQ(s.wr_id, 2u);
  EXPECT_NE(s.status, WcStatus::success);
  EXPECT_TRUE(all_zero(*dst));
}

TEST_P(SoftModes, ZeroLengthWriteImmNeedsNoKey) {
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_EQ(pair_.server->post_recv(1, {rbuf.get(), 0, 64}), Errc::ok);
  ASSERT_EQ(pair_.client->post_write_imm(3, {nullptr, 0, 0}, {RemoteRegion{0, 0, 0}, 0}, 42), Errc::ok);
  auto r = wait_recv(*pair_.server);
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.opcode, Opcode::recv_write_imm);
  EXPECT_EQ(r.imm, 42u);
  EXPECT_EQ(r.byte_len, 0u);
  EXPECT_EQ(wait_send(*pair_.client).status, WcStatus::success);
}

TEST_P(SoftModes, InlineSendMayReuseItsBufferAtOnce) {
  ASSERT_GE(pair_.client->caps().max_inline, 16u);
  auto src = alloc(64, kLocalWrite);
  auto dst = alloc(64, kLocalWrite);
  std::memset(src->data(), 0x33, 16);
  // No receive yet: the send has to wait, and its buffer is overwritten.
  ASSERT_EQ(pair_.client->post_send(1, {src.get(), 0, 16}), Errc::ok);
  std::memset(src->data(), 0x44, 16);
  std::this_thread::sleep_for(10ms);
  ASSERT_EQ(pair_.server->post_recv(2, {dst.get(), 0, 64}), Errc::ok);
  auto r = wait_recv(*pair_.server);
  ASSERT_EQ(r.status, WcStatus::success);
  ASSERT_EQ(r.byte_len, 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(dst->data()[i], std::byte{0x33}) << i;
  }
}

TEST_P(SoftModes, LargeWriteAndReadCrossManyFrames) {
  constexpr std::size_t kSize = 24 << 20;
  auto src = alloc(kSize, kLocalWrite);
  auto dst = alloc(kSize, kLocalWrite | kRemoteWrite | kRemoteRead);
  auto back = alloc(kSize, kLocalWrite);
  for (std::size_t i = 0; i < kSize; i += 4096) {
    src->data()[i] = std::byte(static_cast<std::uint8_t>(i >> 12));
  }
  ASSERT_EQ(pair_.client->post_write(1, {src.get(), 0, kSize}, {grant(*dst), 0}), Errc::ok);
  ASSERT_EQ(wait_send(*pair_.client).status, WcStatus::success);
  ASSERT_EQ(pair_.client->post_read(2, {back.get(), 0, kSize}, {grant(*dst), 0}), Errc::ok);
  ASSERT_EQ(wait_send(*pair_.client).status, WcStatus::success);
  EXPECT_EQ(std::memcmp(src->data(), back->data(), kSize), 0);
}

TEST_P(SoftModes, ProviderMayGoBeforeItsEndpointsAndRegions) {
  auto mr = alloc(4096, kLocalWrite | kRemoteWrite);
  provider_.reset();
  auto src = std::move(mr);
  ASSERT_EQ(pair_.client->post_write(1, {src.get(), 0, 64}, {grant(*src), 0}), Errc::ok);
  EXPECT_EQ(wait_send(*pair_.client).status, WcStatus::success);
}

INSTANTIATE_TEST_SUITE_P(Modes, SoftModes, ::testing::Values("soft:tcp", "soft:shm"),
                         [](const auto& info) { return std::string(info.param).substr(5); });

}  // namespace
}  // namespace catena::fabric::test

namespace catena::fabric::test {
namespace {

// Provider::settle: once it returns, a peer's hang-up that reached this
// provider shows in its endpoints without waiting (what a single-threaded
// simulation relies on to see it at the same step in every run). Each side
// has its own provider, as two processes would.
TEST(SoftSettle, APeersHangUpIsVisibleOnceSettled) {
  for (int round = 0; round < 20; ++round) {
    auto a = Provider::open("soft:shm");
    auto b = Provider::open("soft:shm");
    ASSERT_TRUE(a && b);
    auto pair = connect_pair(*a.value(), *b.value());
    ASSERT_TRUE(pair) << pair.error().message;
    ASSERT_EQ(pair.value().server->state(), EndpointState::connected);
    pair.value().client.reset();
    b.value()->settle();
    EXPECT_NE(pair.value().server->state(), EndpointState::connected) << "round " << round;
    EXPECT_EQ(pair.value().server->poll_event(), EndpointEvent::disconnected) << "round " << round;
  }
}

}  // namespace
}  // namespace catena::fabric::test
