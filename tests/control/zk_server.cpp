#include "zk_server.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

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

std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// Sends a four-letter command; the answer, or empty.
std::string four_letters(std::uint16_t port, const char* command) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  // A server still starting may accept and not answer: never wait long.
  timeval timeout{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::write(fd, command, 4) == 4) {
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

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
    s->port_ = free_loopback_port();
    if (s->port_ != 0 && s->launch(why)) return s;
  }
  return nullptr;
}

bool ZkServer::launch(std::string* why) {
  const auto data = dir_.path() / "data";
  const auto cfg = dir_.path() / "zoo.cfg";
  const auto log = dir_.path() / "server.log";
  {
    // Sessions may last 1..20 s (2 and 40 ticks); loopback only; no admin
    // web server; `srvr` tells when it serves.
    std::ofstream out(cfg, std::ios::trunc);
    out << "tickTime=500\ndataDir=" << data.string() << "\nclientPort=" << port_
        << "\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n"
        << "maxClientCnxns=0\n";
  }
  const std::string java = env_or("CATENA_ZK_JAVA", "java");
  const std::string classpath =
      env_or("CATENA_ZK_CLASSPATH", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar");
  std::vector<std::string> args = {java,
                                   "-Xmx256m",
                                   "-XX:+UseSerialGC",
                                   "-XX:TieredStopAtLevel=1",
                                   "-cp",
                                   classpath,
                                   "org.apache.zookeeper.server.ZooKeeperServerMain",
                                   cfg.string()};
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
      *why = fmt::format("`{}` exited ({}); its log:\n{}", java, status, tail_of(log));
      return false;
    }
    if (four_letters(port_, "srvr").find("Mode: standalone") != std::string::npos) return true;
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
