#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <catena/control/zk_local_server.hpp>

namespace catena::control::zk_local {
namespace {

std::string zk_env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

}  // namespace

std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr = loopback(0);
  socklen_t len = sizeof addr;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

bool write_config(const std::string& cfg, const std::string& data_dir, std::uint16_t port) {
  std::ofstream out(cfg, std::ios::trunc);
  out << "tickTime=500\ndataDir=" << data_dir << "\nclientPort=" << port
      << "\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n"
      << "maxClientCnxns=0\n"
      // Sessions up to 30 s (the default cap is 20 ticks, 10 s): a test may
      // ask for sessions that outlast a JVM restart on busy cores.
      << "maxSessionTimeout=30000\n";
  return static_cast<bool>(out.flush());
}

std::vector<Peer> free_peers(std::size_t n) {
  std::vector<std::uint16_t> ports;
  // Two probes in a row may be given the same port: ask again.
  for (int attempt = 0; ports.size() < 3 * n && attempt < static_cast<int>(30 * n); ++attempt) {
    const std::uint16_t p = free_loopback_port();
    if (p != 0 && std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
  }
  if (ports.size() < 3 * n) return {};
  std::vector<Peer> peers(n);
  for (std::size_t i = 0; i < n; ++i) peers[i] = {ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]};
  return peers;
}

bool write_config(const std::string& cfg, const std::string& data_dir, std::span<const Peer> peers,
                  std::size_t self) {
  if (self >= peers.size()) return false;
  if (peers.size() == 1) return write_config(cfg, data_dir, peers[0].client_port);
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  std::ofstream id(data_dir + "/myid", std::ios::trunc);
  id << self + 1 << "\n";
  if (!id.flush() || !write_config(cfg, data_dir, peers[self].client_port)) return false;
  std::ofstream out(cfg, std::ios::app);
  // In ticks: a follower has 10 s to sync with a new leader and is dropped
  // after 5 s without hearing from it (generous: members share busy cores).
  out << "initLimit=20\nsyncLimit=10\n";
  for (std::size_t i = 0; i < peers.size(); ++i) {
    out << "server." << i + 1 << "=127.0.0.1:" << peers[i].quorum_port << ":" << peers[i].election_port
        << "\n";
  }
  return static_cast<bool>(out.flush());
}

std::string classpath() {
  return zk_env_or("CATENA_ZK_CLASSPATH", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar");
}

std::vector<std::string> server_command(const std::string& cfg, bool quorum) {
  // A small heap and a quick JIT: a JVM on two busy cores is slow to start.
  return {zk_env_or("CATENA_ZK_JAVA", "java"),
          "-Xmx256m",
          "-XX:+UseSerialGC",
          "-XX:TieredStopAtLevel=1",
          "-cp",
          classpath(),
          quorum ? "org.apache.zookeeper.server.quorum.QuorumPeerMain"
                 : "org.apache.zookeeper.server.ZooKeeperServerMain",
          cfg};
}

std::string mode(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  const sockaddr_in addr = loopback(port);
  timeval timeout{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string out;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd, "srvr", 4) == 4) {
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // A member without a quorum answers "This ZooKeeper instance is not
  // currently serving requests", with no mode.
  constexpr std::string_view kMode = "Mode: ";
  const auto at = out.find(kMode);
  if (at == std::string::npos) return {};
  const auto from = at + kMode.size();
  std::string m = out.substr(from, out.find('\n', from) - from);
  return m == "standalone" || m == "leader" || m == "follower" ? m : std::string();
}

bool serves(std::uint16_t port) {
  return !mode(port).empty();
}

}  // namespace catena::control::zk_local
