#include <unistd.h>

#include <arpa/inet.h>
#include <cstdlib>
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
      << "maxClientCnxns=0\n";
  return static_cast<bool>(out.flush());
}

std::string classpath() {
  return zk_env_or("CATENA_ZK_CLASSPATH", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar");
}

std::vector<std::string> server_command(const std::string& cfg) {
  // A small heap and a quick JIT: a JVM on two busy cores is slow to start.
  return {zk_env_or("CATENA_ZK_JAVA", "java"),
          "-Xmx256m",
          "-XX:+UseSerialGC",
          "-XX:TieredStopAtLevel=1",
          "-cp",
          classpath(),
          "org.apache.zookeeper.server.ZooKeeperServerMain",
          cfg};
}

bool serves(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
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
  return out.find("Mode: standalone") != std::string::npos;
}

}  // namespace catena::control::zk_local
