// ZooKeeper on loopback, for a local cluster with several controllers
// (`catena cluster up --controllers N [--zookeeper-servers M]`) and the
// election tests: a standalone server, or one member of an ensemble of N
// (a quorum on 127.0.0.1, each member with its own client, quorum and
// election ports); how each is configured, started and seen to serve. The
// server is the Debian `zookeeper` package's jar run by java (CATENA_ZK_JAVA
// and CATENA_ZK_CLASSPATH override both); callers start the process their
// own way (a local cluster keeps it past its own exit, a test ties it to its).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace catena::control::zk_local {

// A loopback port nobody listens on now (another process may take it before
// the server binds it: callers retry with another).
[[nodiscard]] std::uint16_t free_loopback_port();

// Writes a standalone server's configuration to `cfg`: data in `data_dir`,
// clients on 127.0.0.1:port, tickTime 500 ms (sessions may last 1..10 s), no
// admin web server, the `srvr` command allowed (serves() uses it). False if
// it could not be written.
[[nodiscard]] bool write_config(const std::string& cfg, const std::string& data_dir, std::uint16_t port);

// One member of a loopback ensemble: where clients, the other members
// (quorum) and leader elections reach it.
struct Peer {
  std::uint16_t client_port = 0;
  std::uint16_t quorum_port = 0;
  std::uint16_t election_port = 0;
};

// Ports for an ensemble of n members, all distinct and free now (the same
// race as free_loopback_port()); empty if none could be found.
[[nodiscard]] std::vector<Peer> free_peers(std::size_t n);

// Writes the configuration of member `self` of `peers` (its myid is self+1):
// as write_config() above, plus every member's server.K line, initLimit and
// syncLimit, and the `myid` file in `data_dir` (created). One peer alone:
// exactly the standalone configuration. False if anything could not be
// written.
[[nodiscard]] bool write_config(const std::string& cfg, const std::string& data_dir,
                                std::span<const Peer> peers, std::size_t self);

// The command line that runs the server on `cfg` (argv[0] is java, looked
// up in PATH): the standalone server, or with `quorum` an ensemble member.
[[nodiscard]] std::vector<std::string> server_command(const std::string& cfg, bool quorum = false);

// The class path the server runs with (for error messages).
[[nodiscard]] std::string classpath();

// What the server on 127.0.0.1:port says its mode is: "standalone",
// "leader" or "follower" while it serves clients; empty while it does not
// (not running, starting, or an ensemble member without a quorum). Never
// waits more than about a second: a server still starting may accept and
// not answer.
[[nodiscard]] std::string mode(std::uint16_t port);

// Whether a server (standalone, or an ensemble member with a quorum)
// answers clients on 127.0.0.1:port: mode() is not empty.
[[nodiscard]] bool serves(std::uint16_t port);

}  // namespace catena::control::zk_local
