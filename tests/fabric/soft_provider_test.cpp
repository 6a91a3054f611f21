// Soft-provider specific tests: what the conformance suite cannot ask of
// every provider — how the transport is chosen, what a peer speaking garbage
// does to a TCP endpoint, and that revoking access (freeing a region,
// disconnecting) is exact while the peer keeps writing.
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
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Provider> open_or_fail(const std::string& spec) {
  auto p = Provider::open(spec);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.error().message;
  return p.ok() ? std::move(p.value()) : nullptr;
}

bool is_tcp(Endpoint& e) {
  return dynamic_cast<soft::TcpEndpoint*>(&e) != nullptr;
}
bool is_shm(Endpoint& e) {
  return dynamic_cast<soft::ShmEndpoint*>(&e) != nullptr;
}

bool all_zero(const MemoryRegion& mr) {
  return std::all_of(mr.data(), mr.data() + mr.size(), [](std::byte b) { return b == std::byte{0}; });
}

// Waits for the disconnected event, polling receives meanwhile (which drives
// a TCP endpoint's progress); what they complete lands in `recvs`.
bool wait_event(Endpoint& ep, std::vector<Completion>* recvs = nullptr,
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

// A same-host peer maps the provider's arena through /proc/<pid>/fd,
// read-write. It must not be able to shrink the file under the owner's
// mapping (the owner would take SIGBUS on its next access past the new end)
// nor grow it: the arena is sealed.
TEST(SoftArena, PeersCannotResizeTheArenaFile) {
  auto p = open_or_fail("soft:shm");
  ASSERT_TRUE(p);
  auto mr = p->allocate(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(mr.ok());
  std::string arena;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (!ec && target.string().find("catena-soft-arena") != std::string::npos) arena = entry.path().string();
  }
  ASSERT_FALSE(arena.empty()) << "no arena memfd among this process's descriptors";
  const int fd = ::open(arena.c_str(), O_RDWR | O_CLOEXEC);  // what a peer does
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const off_t size = st.st_size;
  const int shrink = ftruncate(fd, size - 4096);
  const int shrink_errno = errno;
  if (shrink == 0) (void)ftruncate(fd, size);  // put it back before anything touches the end
  EXPECT_NE(shrink, 0) << "a peer shrank the arena";
  EXPECT_EQ(shrink_errno, EPERM);
  EXPECT_NE(ftruncate(fd, size + 4096), 0) << "a peer grew the arena";
  EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1) << "the seals can be changed";
  EXPECT_EQ(fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  close(fd);
  // The provider still works.
  std::memset(mr.value()->data(), 7, 4096);
  EXPECT_EQ(static_cast<int>(mr.value()->data()[4095]), 7);
}

// The arena mappings of this process: perms, file offset and size of each
// mapping of a soft arena memfd, from /proc/self/maps.
struct ArenaMapping {
  std::uintptr_t start = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
  std::string perms;
};

std::vector<ArenaMapping> arena_mappings() {
  std::vector<ArenaMapping> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("catena-soft-arena") == std::string::npos) continue;
    std::istringstream in(line);
    std::string range, perms, offset;
    in >> range >> perms >> offset;
    const auto dash = range.find('-');
    ArenaMapping m;
    m.start = std::stoull(range.substr(0, dash), nullptr, 16);
    m.size = std::stoull(range.substr(dash + 1), nullptr, 16) - m.start;
    m.offset = std::stoull(offset, nullptr, 16);
    m.perms = perms;
    out.push_back(m);
  }
  return out;
}

// A same-host peer maps the owner's header and region table read-only: a
// write through that mapping faults (in a forked child, so the fault kills
// only it) and changes nothing; regions and channels stay writable for it.
TEST(SoftArena, PeersMapTheHeaderAndRegionTableReadOnly) {
  auto a = open_or_fail("soft:shm");
  auto b = open_or_fail("soft:shm");
  ASSERT_TRUE(a && b);
  const auto before = arena_mappings();
  auto pair = connect_pair(*a, *b);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  std::vector<ArenaMapping> table_views;
  for (const auto& m : arena_mappings()) {
    const bool old =
        std::any_of(before.begin(), before.end(), [&](const auto& o) { return o.start == m.start; });
    if (!old && m.offset == 0) table_views.push_back(m);
  }
  // Each side mapped the other's arena: two new mappings start at offset 0.
  ASSERT_EQ(table_views.size(), 2u);
  for (const auto& m : table_views) {
    EXPECT_EQ(m.perms, "r--s") << "a peer's view of the header and region table is writable";
    EXPECT_EQ(m.size, soft::kDataOffset);
    auto* word = reinterpret_cast<std::uint32_t*>(m.start + soft::kTableOffset);
    const std::uint32_t was = *word;
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      *reinterpret_cast<volatile std::uint32_t*>(word) = was ^ 0xffffffffu;
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) << "the write did not fault";
    EXPECT_EQ(*word, was);
  }
  // The connection still works both ways.
  auto src = a->allocate(4096, kLocalWrite);
  auto dst = b->allocate(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src.ok() && dst.ok());
  std::memset(src.value()->data(), 0x5c, 4096);
  auto rr = pair.value().server->expose(*dst.value());
  ASSERT_TRUE(rr.ok());
  ASSERT_EQ(pair.value().client->post_write(1, {src.value().get(), 0, 4096}, {rr.value(), 0}), Errc::ok);
  EXPECT_EQ(wait_send(*pair.value().client).status, WcStatus::success);
  EXPECT_EQ(dst.value()->data()[4095], std::byte{0x5c});
}

// A peer stopped (SIGSTOP) in the middle of a write into our region cannot
// hold up revocation: freeing the region, or closing the connection, returns
// within a bound, the peer is cut off, and the provider keeps working (what
// the stopped peer may still write into is never handed out again).
enum class Revoke { region, connection };

class StoppedPeer : public ::testing::TestWithParam<Revoke> {};

TEST_P(StoppedPeer, RevocationReturnsInBoundedTime) {
  auto p = open_or_fail("soft:shm");
  ASSERT_TRUE(p);
  auto listener = p->listen(listen_address());
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  const std::string addr = listener.value()->address();
  constexpr std::uint32_t kSize = 64u << 20;
  int keys[2];
  ASSERT_EQ(pipe(keys), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The peer: writes 64 MiB at a time into the parent's region, forever.
    close(keys[1]);
    auto cp = Provider::open("soft:shm");
    if (!cp) _exit(10);
    auto ep = cp.value()->connect(addr);
    if (!ep) _exit(11);
    auto src = cp.value()->allocate(kSize, kLocalWrite);
    if (!src) _exit(12);
    std::memset(src.value()->data(), 0x77, kSize);
    RemoteRegion rr{};
    if (read(keys[0], &rr, sizeof rr) != static_cast<ssize_t>(sizeof rr)) _exit(13);
    for (std::uint64_t i = 0;; ++i) {
      if (ep.value()->post_write(i, {src.value().get(), 0, kSize}, {rr, 0}) != Errc::ok) _exit(14);
      Completion c{};
      while (ep.value()->poll_send(&c, 1) == 0) {
      }
      if (c.status != WcStatus::success) _exit(0);
    }
  }
  close(keys[0]);
  auto server = listener.value()->accept(20000ms);
  ASSERT_TRUE(server.ok()) << server.error().message;
  ASSERT_TRUE(is_shm(*server.value()));
  auto dst = p->allocate(kSize, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(dst.ok());
  auto rr = server.value()->expose(*dst.value());
  ASSERT_TRUE(rr.ok());
  ASSERT_EQ(write(keys[1], &rr.value(), sizeof rr.value()), static_cast<ssize_t>(sizeof rr.value()));
  auto last_byte = [&] { return std::atomic_ref<std::byte>(dst.value()->data()[kSize - 1]).load(); };
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (last_byte() != std::byte{0x77} && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(last_byte(), std::byte{0x77}) << "the peer never wrote";
  std::this_thread::sleep_for(3ms);  // into one of its next writes
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  const auto start = std::chrono::steady_clock::now();
  if (GetParam() == Revoke::region) {
    dst.value().reset();
  } else {
    server.value().reset();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, soft::kRevokeWait + 2s) << "revocation waited on a stopped peer";
  if (GetParam() == Revoke::region && took >= soft::kRevokeWait) {
    // It was stopped inside the write: its connection is cut.
    EXPECT_TRUE(wait_event(*server.value(), nullptr, 2s));
  }
  // Whatever it was writing into is never handed out again, even once its
  // connection is gone: free the region too, take memory of the same size,
  // let the peer finish the write it was stopped in.
  dst.value().reset();
  auto fresh = p->allocate(kSize, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  std::this_thread::sleep_for(300ms);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  close(keys[1]);
  EXPECT_TRUE(all_zero(*fresh.value())) << "a stopped peer's late write landed in reused memory";
  server.value().reset();
}

INSTANTIATE_TEST_SUITE_P(Soft, StoppedPeer, ::testing::Values(Revoke::region, Revoke::connection),
                         [](const auto& info) {
                           return std::string(info.param == Revoke::region ? "FreeRegion"
                                                                           : "CloseConnection");
                         });

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
