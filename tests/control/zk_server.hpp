// A real, standalone ZooKeeper server for the tests that need one: started
// from the Debian package's jars with `java` on a free loopback port and a
// throwaway data directory, stopped (and its directory removed) when the
// object goes.
//
// Tests take the process-wide one with shared_zk(), each on a chroot of its
// own (unique_chroot()), or start their own when they stop and restart it.
// When ZooKeeper cannot start, ZK_OR_SKIP() skips the test, unless
// CATENA_REQUIRE_ZK=1 (set by ci/test.sh) makes that a failure.
//
// The server is killed when the thread that started it ends (the child's
// PR_SET_PDEATHSIG follows the thread, not the process): start and restart
// it from the test's main thread.
//
// CATENA_ZK_JAVA (default `java`) and CATENA_ZK_CLASSPATH (default the
// Debian package's jars) say where ZooKeeper is.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/types.h>

#include "test_support.hpp"

namespace catena::control::testing {

class ZkServer {
 public:
  // Starts a server; nullptr (and why) if it did not answer in time.
  [[nodiscard]] static std::unique_ptr<ZkServer> start(std::string* why);
  ZkServer(const ZkServer&) = delete;
  ZkServer& operator=(const ZkServer&) = delete;
  ~ZkServer();

  // "127.0.0.1:<port>"
  [[nodiscard]] std::string hosts() const;
  // "zk://127.0.0.1:<port>/<chroot>"
  [[nodiscard]] std::string uri(const std::string& chroot) const;

  // Kills the server (SIGKILL, as a crash), keeping its data.
  void kill();
  // Stops it (SIGSTOP: it answers nothing, and its connections stay open)
  // and lets it go on (SIGCONT).
  void pause();
  void resume();
  // Starts it again on the same port and data; false (and why) if it did
  // not answer.
  [[nodiscard]] bool restart(std::string* why);

 private:
  ZkServer() = default;
  [[nodiscard]] bool launch(std::string* why);

  TempDir dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// The server this test process shares (started on first use); nullptr if it
// could not start, with the reason in *why.
ZkServer* shared_zk(std::string* why);

// A chroot no other test of any process uses: "/test-<pid>-<n>-<name>".
[[nodiscard]] std::string unique_chroot(const std::string& name);

// Whether CATENA_REQUIRE_ZK=1 asks that ZooKeeper tests run, not skip.
[[nodiscard]] bool zk_required();

// The metadata store a parameterised controller test runs on, and its name
// in the test's ("/dir", "/zk").
enum class Store { dir, zk };
inline const char* store_name(Store s) {
  return s == Store::dir ? "dir" : "zk";
}

}  // namespace catena::control::testing

// In a fixture's SetUp(): sets metadata (Controller::Options::metadata) to
// a chroot of this test's own on the shared server, or fails or skips as
// ZK_OR_SKIP does.
#define ZK_METADATA_OR_SKIP(metadata)                                       \
  do {                                                                      \
    std::string zk_why_;                                                    \
    auto* zk_server_ = ::catena::control::testing::shared_zk(&zk_why_);     \
    ZK_OR_SKIP(zk_server_, zk_why_);                                        \
    (metadata) = zk_server_->uri(::catena::control::testing::unique_chroot( \
        ::testing::UnitTest::GetInstance()->current_test_info()->name()));  \
  } while (false)

// In a TEST body or SetUp(): fails (CATENA_REQUIRE_ZK=1) or skips the test
// when server (a ZkServer*) is null; why says what went wrong.
#define ZK_OR_SKIP(server, why)                                                                 \
  do {                                                                                          \
    if ((server) == nullptr) {                                                                  \
      if (::catena::control::testing::zk_required()) {                                          \
        FAIL() << "ZooKeeper did not start, and CATENA_REQUIRE_ZK=1: " << (why);                \
      }                                                                                         \
      GTEST_SKIP() << "ZooKeeper did not start (CATENA_REQUIRE_ZK=1 fails instead): " << (why); \
    }                                                                                           \
  } while (false)
