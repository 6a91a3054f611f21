#include "zk_server.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/control/zk_local_server.hpp>

// LeakSanitizer (the ASan stage): libzookeeper_mt's zoo_amulti does not free
// the per-operation completion entries of a multi whose connection was lost
// (168 bytes per operation, seen only in ZkStoreServerLoss, which loses one
// on purpose). Third-party code, and only on that path: silenced for it alone.
extern "C" const char* __lsan_default_suppressions() {  // NOLINT: the sanitizer's hook
  return "leak:zoo_amulti\n";
}

namespace catena::control::testing {
namespace {

using namespace std::chrono_literals;

// A JVM on two busy cores can take several seconds to start.
constexpr auto kStartTimeout = 60s;

std::string tail_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > 1500 ? all.substr(all.size() - 1500) : all;
}

}  // namespace

bool zk_required() {
  const char* v = std::getenv("CATENA_REQUIRE_ZK");
  return v != nullptr && std::string(v) == "1";
}

std::unique_ptr<ZkServer> ZkServer::start(std::string* why) {
  std::unique_ptr<ZkServer> s(new ZkServer());
  for (int attempt = 0; attempt < 3; ++attempt) {  // another process may take the free port first
    s->port_ = zk_local::free_loopback_port();
    if (s->port_ != 0 && s->launch(why)) return s;
  }
  return nullptr;
}

bool ZkServer::launch(std::string* why) {
  const auto data = dir_.path() / "data";
  const auto cfg = dir_.path() / "zoo.cfg";
  const auto log = dir_.path() / "server.log";
  if (!zk_local::write_config(cfg.string(), data.string(), port_)) {
    *why = "cannot write " + cfg.string();
    return false;
  }
  std::vector<std::string> args = zk_local::server_command(cfg.string());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    *why = "fork failed";
    return false;
  }
  if (pid == 0) {
    // The server goes with the test process, however that ends.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *why = fmt::format("`{}` exited ({}); its log:\n{}", args[0], status, tail_of(log));
      return false;
    }
    if (zk_local::serves(port_)) return true;
    std::this_thread::sleep_for(100ms);
  }
  *why = fmt::format("ZooKeeper did not answer on 127.0.0.1:{} within {} s; its log:\n{}", port_,
                     std::chrono::duration_cast<std::chrono::seconds>(kStartTimeout).count(), tail_of(log));
  kill();
  return false;
}

void ZkServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

namespace {
// Whether every thread of pid is stopped (state 'T' in /proc/<pid>/task/*/stat).
bool all_threads_stopped(pid_t pid) {
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  bool any = false;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(t.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // ended meanwhile
    const auto close = line.rfind(')');       // the name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= line.size()) continue;
    if (line[close + 2] != 'T' && line[close + 2] != 't') return false;
    any = true;
  }
  return any && !ec;
}
}  // namespace

void ZkServer::pause() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  // kill() returns before the stop reaches threads running on another core
  // (on a loaded VM, long enough for the server to take a request sent
  // right after): return once every thread is stopped.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!all_threads_stopped(pid_) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ZkServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

bool ZkServer::restart(std::string* why) {
  kill();
  return launch(why);
}

ZkServer::~ZkServer() {
  kill();
}

std::string ZkServer::hosts() const {
  return fmt::format("127.0.0.1:{}", port_);
}

std::string ZkServer::uri(const std::string& chroot) const {
  return fmt::format("zk://{}{}", hosts(), chroot);
}

ZkServer* shared_zk(std::string* why) {
  static std::string failure;
  static std::unique_ptr<ZkServer> server = ZkServer::start(&failure);
  *why = failure;
  return server.get();
}

std::string unique_chroot(const std::string& name) {
  static std::atomic<int> next{0};
  std::string clean;
  for (const char c : name) clean.push_back(std::isalnum(static_cast<unsigned char>(c)) != 0 ? c : '-');
  return fmt::format("/test-{}-{}-{}", ::getpid(), next++, clean);
}

}  // namespace catena::control::testing
