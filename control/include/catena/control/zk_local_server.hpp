// A standalone ZooKeeper server on loopback, for a local cluster with several
// controllers (`catena cluster up --controllers N`) and the election tests:
// how it is configured, started and seen to serve. The server is the Debian
// `zookeeper` package's jar run by java (CATENA_ZK_JAVA and
// CATENA_ZK_CLASSPATH override both); callers start the process their own
// way (a local cluster keeps it past its own exit, a test ties it to its).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace catena::control::zk_local {

// A loopback port nobody listens on now (another process may take it before
// the server binds it: callers retry with another).
[[nodiscard]] std::uint16_t free_loopback_port();

// Writes the server's configuration to `cfg`: data in `data_dir`, clients on
// 127.0.0.1:port, tickTime 500 ms (sessions may last 1..20 s), no admin web
// server, the `srvr` command allowed (serves() uses it). False if it could
// not be written.
[[nodiscard]] bool write_config(const std::string& cfg, const std::string& data_dir, std::uint16_t port);

// The command line that runs the server on `cfg` (argv[0] is java, looked
// up in PATH).
[[nodiscard]] std::vector<std::string> server_command(const std::string& cfg);

// The class path the server runs with (for error messages).
[[nodiscard]] std::string classpath();

// Whether a standalone server answers on 127.0.0.1:port (never waits more
// than about a second: a server still starting may accept and not answer).
[[nodiscard]] bool serves(std::uint16_t port);

}  // namespace catena::control::zk_local
