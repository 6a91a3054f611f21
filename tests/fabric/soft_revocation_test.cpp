// Soft provider, white-box: the shared-memory arena a same-host peer maps
// (sealed against resizing, its header and region table read-only) and
// revocation that a stopped peer cannot hold up.
#include "soft_test_util.hpp"

namespace catena::fabric::test {
namespace {

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
      std::signal(SIGSEGV, SIG_DFL);  // where a sanitizer lets it: die by the fault
      *reinterpret_cast<volatile std::uint32_t*>(word) = was ^ 0xffffffffu;
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    // Killed by SIGSEGV; under a sanitizer, which reports the fault itself
    // ("DEADLYSIGNAL"), at least never past the write.
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the write did not fault";
    if (WIFSIGNALED(status)) {
      EXPECT_EQ(WTERMSIG(status), SIGSEGV);
    }
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

// A child process that connects to `addr` and writes `size` bytes of 0x77
// at a time into the region whose key it reads from the pipe `keys`,
// forever (until a write fails). Returns its pid (-1: fork failed); the
// pipe's read end is closed here.
pid_t fork_writer(const std::string& addr, const int keys[2], std::uint32_t size) {
  const pid_t pid = fork();
  if (pid != 0) {
    close(keys[0]);
    return pid;
  }
  close(keys[1]);
  auto cp = Provider::open("soft:shm");
  if (!cp) _exit(10);
  auto ep = cp.value()->connect(addr);
  if (!ep) _exit(11);
  auto src = cp.value()->allocate(size, kLocalWrite);
  if (!src) _exit(12);
  std::memset(src.value()->data(), 0x77, size);
  RemoteRegion rr{};
  if (read(keys[0], &rr, sizeof rr) != static_cast<ssize_t>(sizeof rr)) _exit(13);
  for (std::uint64_t i = 0;; ++i) {
    if (ep.value()->post_write(i, {src.value().get(), 0, size}, {rr, 0}) != Errc::ok) _exit(14);
    Completion c{};
    while (ep.value()->poll_send(&c, 1) == 0) {
    }
    if (c.status != WcStatus::success) _exit(0);
  }
}

// The test's side of a fork_writer() child: the listener it dialled, our
// endpoint of its connection, and the pipe that gives it a key.
struct WriterPeer {
  std::unique_ptr<Listener> listener;
  std::string addr;
  pid_t pid = -1;
  int key_fd = -1;  // the pipe's write end
  std::unique_ptr<Endpoint> ep;

  [[nodiscard]] bool give(const RemoteRegion& rr) const {
    return write(key_fd, &rr, sizeof rr) == static_cast<ssize_t>(sizeof rr);
  }
  // Until the last byte of `region` (`size` bytes) is the child's, at most 20 s.
  [[nodiscard]] bool wrote(const MemoryRegion& region, std::uint32_t size) const {
    auto last_byte = [&] { return std::atomic_ref<std::byte>(region.data()[size - 1]).load(); };
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (last_byte() != std::byte{0x77} && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    return last_byte() == std::byte{0x77};
  }
  // SIGSTOP, and until the child is stopped.
  [[nodiscard]] bool stop() const {
    int status = 0;
    return kill(pid, SIGSTOP) == 0 && waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status);
  }
  void kill_and_reap() const {
    int status = 0;
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(key_fd);
  }
};

// Listens on `p`, starts a writer of `size` bytes at a time and accepts its
// connection.
::testing::AssertionResult start_writer(Provider& p, std::uint32_t size, WriterPeer* w) {
  auto listener = p.listen(listen_address());
  if (!listener) return ::testing::AssertionFailure() << listener.error().message;
  w->listener = std::move(listener.value());
  w->addr = w->listener->address();
  int keys[2];
  if (pipe(keys) != 0) return ::testing::AssertionFailure() << "pipe: " << std::strerror(errno);
  w->pid = fork_writer(w->addr, keys, size);
  w->key_fd = keys[1];
  if (w->pid < 0) return ::testing::AssertionFailure() << "fork: " << std::strerror(errno);
  auto ep = w->listener->accept(20000ms);
  if (!ep) return ::testing::AssertionFailure() << ep.error().message;
  w->ep = std::move(ep.value());
  return ::testing::AssertionSuccess();
}

// A peer stopped (SIGSTOP) in the middle of a write into our region cannot
// hold up revocation: freeing the region, or closing the connection, returns
// within a bound, the peer is cut off, and the provider keeps working (what
// the stopped peer may still write into is never handed out again).
// kept_region: a kept region (allocate_kept) freed, then its name
// discarded: the range must not be handed out again either.
enum class Revoke { region, connection, kept_region };

class StoppedPeer : public ::testing::TestWithParam<Revoke> {};

TEST_P(StoppedPeer, RevocationReturnsInBoundedTime) {
  const bool kept = GetParam() == Revoke::kept_region;
  const auto keep_dir =
      std::filesystem::temp_directory_path() / ("catena-stopped-kept-" + std::to_string(getpid()));
  std::filesystem::remove_all(keep_dir);
  std::unique_ptr<Provider> p;
  if (kept) {
    auto kp = Provider::open("soft:shm", ProviderOptions{keep_dir.string()});
    ASSERT_TRUE(kp.ok()) << kp.error().message;
    p = std::move(kp.value());
  } else {
    p = open_or_fail("soft:shm");
  }
  ASSERT_TRUE(p);
  constexpr std::uint32_t kSize = 64u << 20;
  WriterPeer writer;
  ASSERT_TRUE(start_writer(*p, kSize, &writer));
  std::unique_ptr<Endpoint>& server = writer.ep;
  ASSERT_TRUE(is_shm(*server));
  auto dst = kept ? [&]() -> Result<std::unique_ptr<MemoryRegion>> {
    auto k = p->allocate_kept("stopped", kSize, kLocalWrite | kRemoteWrite);
    if (!k) return k.error();
    return std::move(k.value().region);
  }()
      : p->allocate(kSize, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(dst.ok());
  auto rr = server->expose(*dst.value());
  ASSERT_TRUE(rr.ok());
  ASSERT_TRUE(writer.give(rr.value()));
  ASSERT_TRUE(writer.wrote(*dst.value(), kSize)) << "the peer never wrote";
  std::this_thread::sleep_for(3ms);  // into one of its next writes
  ASSERT_TRUE(writer.stop());
  const auto start = std::chrono::steady_clock::now();
  if (GetParam() != Revoke::connection) {
    dst.value().reset();
  } else {
    server.reset();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, soft::kRevokeWait + 2s) << "revocation waited on a stopped peer";
  if (GetParam() != Revoke::connection && took >= soft::kRevokeWait) {
    // It was stopped inside the write: its connection is cut.
    EXPECT_TRUE(wait_event(*server, nullptr, 2s));
  }
  // Whatever it was writing into is never handed out again, even once its
  // connection is gone: free the region too, take memory of the same size,
  // let the peer finish the write it was stopped in.
  dst.value().reset();
  if (kept) p->discard_kept("stopped");  // its bytes are not wanted: the range is let go
  auto fresh = p->allocate(kSize, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ(kill(writer.pid, SIGCONT), 0);
  std::this_thread::sleep_for(300ms);
  writer.kill_and_reap();
  EXPECT_TRUE(all_zero(*fresh.value())) << "a stopped peer's late write landed in reused memory";
  server.reset();
  fresh.value().reset();
  p.reset();
  std::filesystem::remove_all(keep_dir);
}

// Freeing a region waits only for the peers that can reach it: those its
// keys were given to, or every peer if it held receive buffers (a send lands
// in one under the region's own key). A node lets a segment go every few
// seconds per partition, and waiting on all of its hundreds of connections
// stalled its data-plane thread. Here a peer is stopped inside a write into
// one region (its connection's); a region given only to another connection
// is freed at once, one that held a receive waits the stopped peer out.
TEST(StoppedPeerElsewhere, AFreeWaitsOnlyForPeersThatCanReachTheRegion) {
  auto p = open_or_fail("soft:shm");
  auto q = open_or_fail("soft:shm");
  ASSERT_TRUE(p && q);
  constexpr std::uint32_t kSize = 64u << 20;
  WriterPeer writer;
  ASSERT_TRUE(start_writer(*p, kSize, &writer));
  auto target = p->allocate(kSize, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(target.ok());
  auto rr = writer.ep->expose(*target.value());
  ASSERT_TRUE(rr.ok());
  ASSERT_TRUE(writer.give(rr.value()));
  // A second connection, from a peer in this process that stays idle.
  std::unique_ptr<Endpoint> other_client;
  std::thread dial([&] {
    auto c = q->connect(writer.addr);
    if (c) other_client = std::move(c.value());
  });
  auto other = writer.listener->accept(20000ms);
  dial.join();
  ASSERT_TRUE(other.ok() && other_client) << (other.ok() ? "" : other.error().message);
  ASSERT_TRUE(is_shm(*other.value()));
  ASSERT_TRUE(writer.wrote(*target.value(), kSize)) << "the peer never wrote";
  bool stopped_inside = false;
  for (int attempt = 0; attempt < 5 && !stopped_inside; ++attempt) {
    auto exposed = p->allocate(1 << 20, kLocalWrite | kRemoteWrite);
    auto receives = p->allocate(4096, kLocalWrite);
    ASSERT_TRUE(exposed.ok() && receives.ok());
    ASSERT_TRUE(other.value()->expose(*exposed.value()).ok());
    ASSERT_EQ(
        other.value()->post_recv(static_cast<std::uint64_t>(attempt), {receives.value().get(), 0, 4096}),
        Errc::ok);
    std::this_thread::sleep_for(3ms);  // into one of its next writes
    ASSERT_TRUE(writer.stop());
    auto t0 = std::chrono::steady_clock::now();
    exposed.value().reset();
    const auto took_exposed = std::chrono::steady_clock::now() - t0;
    t0 = std::chrono::steady_clock::now();
    receives.value().reset();
    const auto took_receives = std::chrono::steady_clock::now() - t0;
    // Stopped between two writes, nothing waits: stop it again.
    stopped_inside = took_receives >= soft::kRevokeWait - 100ms;
    if (stopped_inside) {
      EXPECT_LT(took_exposed, soft::kRevokeWait / 4)
          << "freeing a region no stopped peer holds a key to waited for it";
      EXPECT_LT(took_receives, soft::kRevokeWait + 2s);
    } else {
      EXPECT_LT(took_exposed, soft::kRevokeWait / 4);
      ASSERT_EQ(kill(writer.pid, SIGCONT), 0);
      std::this_thread::sleep_for(20ms);
    }
  }
  EXPECT_TRUE(stopped_inside) << "the peer was never stopped inside a write in 5 tries";
  writer.kill_and_reap();
}

INSTANTIATE_TEST_SUITE_P(Soft, StoppedPeer,
                         ::testing::Values(Revoke::region, Revoke::connection, Revoke::kept_region),
                         [](const auto& info) {
                           return std::string(info.param == Revoke::region       ? "FreeRegion"
                                              : info.param == Revoke::connection ? "CloseConnection"
                                                                                 : "DiscardKeptRegion");
                         });

}  // namespace
}  // namespace catena::fabric::test
