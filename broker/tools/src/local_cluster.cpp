#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>

#include <catena/broker/local_cluster.hpp>
#include <catena/control/zk_local_server.hpp>

namespace catena {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

LocalCluster::LocalCluster(ClusterOptions opts) : opts_(std::move(opts)) {
  if (opts_.bin_dir.empty()) opts_.bin_dir = self_dir();
}

LocalCluster::~LocalCluster() {
  if (!detached_) stop();
}

pid_t LocalCluster::spawn(const std::string& name, const std::vector<std::string>& args) {
  const std::string log = opts_.dir + "/" + name + ".log";
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: own process group (Ctrl-C in the terminal reaches the CLI, which
  // stops the cluster in order), output to its log file.
  setpgid(0, 0);
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

std::string LocalCluster::controller_address() const {
  MutexLock lk(mu_);
  std::string all;
  for (const auto& c : controllers_) {
    if (c.admin_addr.empty()) continue;
    all += (all.empty() ? "" : ",") + c.admin_addr;
  }
  return all;
}

std::string LocalCluster::controller_address(std::size_t i) const {
  MutexLock lk(mu_);
  return i < controllers_.size() ? controllers_[i].admin_addr : std::string();
}

pid_t LocalCluster::controller_pid(std::size_t i) const {
  MutexLock lk(mu_);
  return i < controllers_.size() ? controllers_[i].pid : -1;
}

namespace {

std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// A JVM on busy cores can take several seconds to start (an ensemble
// member also waits for a quorum).
constexpr auto kZooKeeperStartTimeout = 60s;

}  // namespace

std::string LocalCluster::check_zookeeper_servers(int n) {
  if (n == 1 || (n >= 3 && n <= 9 && n % 2 == 1)) return {};
  return "ZooKeeper servers: " + std::to_string(n) +
         " is neither 1 nor an odd number from 3 to 9 (an ensemble of 2k+1 servers outlives the loss of k; "
         "an even one no more than the odd one below it)";
}

std::string LocalCluster::zookeeper_address() const {
  MutexLock lk(mu_);
  std::string all;
  for (const auto& z : zookeepers_) all += (all.empty() ? "" : ",") + z.admin_addr;
  return all;
}

std::string LocalCluster::zookeeper_address(std::size_t i) const {
  MutexLock lk(mu_);
  return i < zookeepers_.size() ? zookeepers_[i].admin_addr : std::string();
}

std::size_t LocalCluster::zookeeper_count() const {
  MutexLock lk(mu_);
  return zookeepers_.size();
}

pid_t LocalCluster::zookeeper_pid(std::size_t i) const {
  MutexLock lk(mu_);
  return i < zookeepers_.size() ? zookeepers_[i].pid : -1;
}

bool LocalCluster::start_zookeeper(std::string* error) {
  const auto n = static_cast<std::size_t>(opts_.zookeeper_servers);
  zookeeper_quorum_ = n > 1;
  std::vector<NodeProcess> servers(n);
  for (std::size_t i = 0; i < n; ++i)
    servers[i].name = n > 1 ? "zookeeper-" + std::to_string(i) : "zookeeper";
  auto kill_all = [&] {
    for (auto& z : servers) {
      if (z.pid <= 0) continue;
      kill(z.pid, SIGKILL);
      waitpid(z.pid, nullptr, 0);
      z.pid = -1;
    }
    MutexLock lk(mu_);
    zookeepers_ = servers;
  };
  std::string why;
  for (int attempt = 0; attempt < 3; ++attempt) {  // another process may take a free port first
    const std::vector<control::zk_local::Peer> peers = control::zk_local::free_peers(n);
    if (peers.empty()) {
      why = "no free loopback ports";
      break;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::string data = fs::absolute(opts_.dir + "/" + servers[i].name).string();
      const std::string cfg = opts_.dir + "/" + servers[i].name + ".cfg";
      std::error_code ec;
      fs::remove_all(data, ec);  // a previous attempt's
      fs::create_directories(data, ec);
      if (!control::zk_local::write_config(cfg, data, peers, i)) {
        *error = "cannot write " + cfg;
        kill_all();
        return false;
      }
      servers[i].admin_addr = "127.0.0.1:" + std::to_string(peers[i].client_port);
      servers[i].pid = spawn(servers[i].name, control::zk_local::server_command(cfg, zookeeper_quorum_));
    }
    {
      MutexLock lk(mu_);  // stop() ends them, whatever happens next
      zookeepers_ = servers;
    }
    const auto deadline = std::chrono::steady_clock::now() + kZooKeeperStartTimeout;
    bool exited = false;
    while (!exited && std::chrono::steady_clock::now() < deadline) {
      std::size_t serving = 0;
      for (const auto& z : servers) serving += control::zk_local::serves(port_of(z.admin_addr)) ? 1 : 0;
      if (serving == n) return true;
      for (auto& z : servers) {
        if (z.pid > 0 && waitpid(z.pid, nullptr, WNOHANG) == z.pid) {
          why = z.name + " exited";
          z.pid = -1;
          exited = true;
        }
      }
      if (!exited) std::this_thread::sleep_for(100ms);
    }
    kill_all();
    if (!exited) {
      why = "not serving after " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kZooKeeperStartTimeout).count()) +
            " s";
      break;
    }
  }
  *error = "ZooKeeper did not start (" + why + "; it needs java and " + control::zk_local::classpath() +
           "); see " + opts_.dir + "/" + servers.front().name + ".log";
  return false;
}

bool LocalCluster::signal_zookeeper(std::size_t i, int sig) {
  const pid_t pid = zookeeper_pid(i);
  if (pid <= 0 || kill(pid, sig) != 0) return false;
  if (sig == SIGKILL) {
    waitpid(pid, nullptr, 0);
    MutexLock lk(mu_);
    zookeepers_[i].pid = -1;
  }
  return true;
}

bool LocalCluster::restart_zookeeper(std::size_t i, std::string* error, bool wait) {
  if (i >= zookeeper_count()) {
    *error = "no ZooKeeper server " + std::to_string(i);
    return false;
  }
  if (zookeeper_pid(i) > 0) signal_zookeeper(i, SIGKILL);
  NodeProcess z;
  {
    MutexLock lk(mu_);
    z = zookeepers_[i];
  }
  const std::string cfg = opts_.dir + "/" + z.name + ".cfg";
  const pid_t pid = spawn(z.name, control::zk_local::server_command(cfg, zookeeper_quorum_));
  {
    MutexLock lk(mu_);
    zookeepers_[i].pid = pid;
  }
  write_state();
  if (!wait) return true;
  const auto deadline = std::chrono::steady_clock::now() + kZooKeeperStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (control::zk_local::serves(port_of(z.admin_addr))) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      MutexLock lk(mu_);
      zookeepers_[i].pid = -1;
      *error = z.name + " exited; see " + opts_.dir + "/" + z.name + ".log";
      return false;
    }
    std::this_thread::sleep_for(100ms);
  }
  *error = z.name + " did not serve again within " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kZooKeeperStartTimeout).count()) +
           " s; see " + opts_.dir + "/" + z.name + ".log";
  return false;
}

bool LocalCluster::start_controller(std::size_t i, std::string* error) {
  const bool several = opts_.controllers > 1;
  const std::string name = several ? "controller-" + std::to_string(i) : "controller";
  const std::string port_file = opts_.dir + "/" + name + ".port";
  fs::remove(port_file);
  const std::string host = opts_.controller_launch.host.empty() ? opts_.host : opts_.controller_launch.host;
  const std::string listen_host =
      opts_.controller_launch.controller_host.empty() ? host : opts_.controller_launch.controller_host;
  // A restart listens on the port it had (brokers and clients know it).
  std::string previous;
  {
    MutexLock lk(mu_);
    if (controllers_.size() <= i) controllers_.resize(i + 1);
    controllers_[i].name = name;
    previous = controllers_[i].admin_addr;
  }
  int port = 0;
  if (!previous.empty()) {
    port = std::stoi(previous.substr(previous.rfind(':') + 1));
  } else if (opts_.controller_port > 0) {
    port = opts_.controller_port + static_cast<int>(i);
  }
  std::vector<std::string> args = opts_.controller_launch.wrap;
  args.insert(args.end(), {opts_.bin_dir + "/catena-controller", "--listen",
                           listen_host + ":" + std::to_string(port), "--heartbeat-timeout-ms",
                           std::to_string(opts_.heartbeat_timeout_ms), "--heartbeat-interval-ms",
                           std::to_string(opts_.heartbeat_interval_ms), "--port-file", port_file});
  if (uses_zookeeper()) {
    // Candidates on one ZooKeeper location (every server of an ensemble:
    // the client moves to another when one goes); each names itself by the
    // address clients reach it on (the port is known once bound: a port 0
    // candidate advertises its bound address).
    args.insert(args.end(), {"--metadata", "zk://" + zookeeper_address() + "/catena-local-cluster"});
    if (opts_.zk_session_timeout_ms > 0)
      args.insert(args.end(), {"--zk-session-timeout-ms", std::to_string(opts_.zk_session_timeout_ms)});
    if (port != 0) args.insert(args.end(), {"--advertise", host + ":" + std::to_string(port)});
  } else {
    args.insert(args.end(), {"--data-dir", opts_.dir + "/controller-data"});
  }
  if (opts_.secure) args.insert(args.end(), {"--admin-token-file", admin_token_file()});
  args.insert(args.end(), opts_.controller_args.begin(), opts_.controller_args.end());
  if (opts_.group_session_timeout_ms > 0) {
    args.insert(args.end(),
                {"--group-session-timeout-ms", std::to_string(opts_.group_session_timeout_ms),
                 "--group-heartbeat-interval-ms", std::to_string(opts_.group_session_timeout_ms / 10)});
  }
  const pid_t pid = spawn(name, args);
  {
    MutexLock lk(mu_);
    controllers_[i].pid = pid;
  }
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::ifstream in(port_file);
    int bound = 0;
    if (in >> bound && bound > 0) {
      MutexLock lk(mu_);
      controllers_[i].admin_addr = host + ":" + std::to_string(bound);
      return true;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(50ms);
  }
  *error = name + " did not start; see " + opts_.dir + "/" + name + ".log";
  return false;
}

bool LocalCluster::start_node(int index, std::string* error, const NodeProcess* previous,
                              const std::vector<std::string>& extra_args) {
  NodeProcess n;
  n.name = "node-" + std::to_string(index);
  const std::string ready = opts_.dir + "/" + n.name + ".ready";
  fs::remove(ready);
  // Zones round-robin (ClusterOptions::zones), so placement has something to spread over.
  const int zones = std::clamp(opts_.zones, 1, 26);
  const std::string zone = "zone-" + std::string(1, static_cast<char>('a' + index % zones));
  std::vector<std::string> args;
  std::string host = opts_.host;
  std::string fabric_host = opts_.fabric_host;
  const std::string controller_addr = controller_address();
  std::string controller = controller_addr;
  if (auto it = opts_.node_launch.find(index); it != opts_.node_launch.end()) {
    args = it->second.wrap;
    if (!it->second.host.empty()) host = fabric_host = it->second.host;
    if (!it->second.fabric_host.empty()) fabric_host = it->second.fabric_host;
    if (!it->second.controller_host.empty()) {
      controller = it->second.controller_host + controller_addr.substr(controller_addr.rfind(':'));
    }
  }
  const bool verbs = opts_.provider.find("verbs:") != std::string::npos;
  if (fabric_host.empty() && !verbs) fabric_host = host;
  // A restart keeps the node's id and addresses: a new incarnation of it.
  const std::string admin_listen = previous != nullptr ? previous->admin_addr : host + ":0";
  args.insert(args.end(), {opts_.bin_dir + "/catenad", "--controller", controller, "--provider",
                           opts_.provider, "--admin-listen", admin_listen, "--zone", zone, "--ready-file",
                           ready, "--grace-ms", std::to_string(opts_.grace_ms)});
  if (previous != nullptr) {
    args.insert(args.end(), {"--fabric-listen", previous->fabric_addr, "--node-id", previous->node_id});
  } else {
    if (!fabric_host.empty()) args.insert(args.end(), {"--fabric-listen", fabric_host + ":0"});
    if (!opts_.node_id_prefix.empty()) {
      args.insert(args.end(), {"--node-id", opts_.node_id_prefix + std::to_string(index)});
    } else if (!opts_.keep_root.empty()) {
      args.insert(args.end(), {"--node-id", n.name});  // kept memory belongs to one node id
    }
  }
  if (!opts_.keep_root.empty()) args.insert(args.end(), {"--keep-dir", opts_.keep_root + "/" + n.name});
  if (opts_.secure) args.insert(args.end(), {"--controller-token-file", admin_token_file()});
  args.insert(args.end(), opts_.node_args.begin(), opts_.node_args.end());
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  n.pid = spawn(n.name, args);
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(ready);
    if (in >> n.node_id >> n.admin_addr >> n.fabric_addr) {
      if (previous != nullptr) {
        nodes_[static_cast<std::size_t>(index)] = n;
      } else {
        nodes_.push_back(n);
      }
      return true;
    }
    int status = 0;
    if (waitpid(n.pid, &status, WNOHANG) == n.pid) {
      // Say why (catenad's last line: a refused listen address, a missing device).
      std::ifstream log(opts_.dir + "/" + n.name + ".log");
      std::string line, last;
      while (std::getline(log, line)) {
        if (!line.empty()) last = line;
      }
      *error = n.name + " exited" + (last.empty() ? "" : ": " + last) + " (log: " + opts_.dir + "/" + n.name +
               ".log)";
      return false;
    }
    std::this_thread::sleep_for(50ms);
  }
  *error = n.name + " did not register; see " + opts_.dir + "/" + n.name + ".log";
  return false;
}

std::string LocalCluster::admin_token_file() const {
  return opts_.dir + "/admin.token";
}

bool LocalCluster::write_admin_token(std::string* error) {
  unsigned char bytes[32];
  const int rnd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool got = rnd >= 0 && ::read(rnd, bytes, sizeof bytes) == static_cast<ssize_t>(sizeof bytes);
  if (rnd >= 0) ::close(rnd);
  if (!got) {
    *error = "no random bytes for the admin token (/dev/urandom)";
    return false;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  const std::string path = admin_token_file();
  fs::remove(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const std::string line = token + "\n";
  const bool written = fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (fd >= 0) ::close(fd);
  if (!written) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  admin_token_ = std::move(token);
  return true;
}

bool LocalCluster::start(std::string* error) {
  // Brokers keep segments in memory: a new cluster starts with new metadata
  // too (a controller restart, below, keeps it).
  std::error_code ec;
  fs::remove_all(opts_.dir + "/controller-data", ec);
  fs::remove_all(opts_.dir + "/zookeeper", ec);
  for (int i = 0; i < 9; ++i) fs::remove_all(opts_.dir + "/zookeeper-" + std::to_string(i), ec);
  // Kept memory is a node's copy of this cluster's chains: never another's.
  if (!opts_.keep_root.empty()) fs::remove_all(opts_.keep_root, ec);
  fs::create_directories(opts_.dir);
  if (opts_.secure && !write_admin_token(error)) return false;
  if (const std::string bad = check_zookeeper_servers(opts_.zookeeper_servers); !bad.empty()) {
    *error = bad;
    return false;
  }
  if (uses_zookeeper() && !start_zookeeper(error)) return false;
  for (int i = 0; i < opts_.controllers; ++i) {
    if (!start_controller(static_cast<std::size_t>(i), error)) return false;
  }
  for (int i = 0; i < opts_.nodes; ++i) {
    if (!opts_.quiet) std::fprintf(stderr, "  starting node %d/%d...\r", i + 1, opts_.nodes);
    if (!start_node(i, error)) return false;
  }
  if (!opts_.quiet) std::fprintf(stderr, "%40s\r", "");
  write_state();
  return true;
}

bool LocalCluster::add_node(std::string* error, const std::vector<std::string>& extra_args) {
  bool ok = start_node(static_cast<int>(nodes_.size()), error, nullptr, extra_args);
  write_state();
  return ok;
}

bool LocalCluster::signal_node(std::size_t i, int sig) {
  if (i >= nodes_.size() || nodes_[i].pid <= 0) return false;
  if (kill(nodes_[i].pid, sig) != 0) return false;
  if (sig == SIGKILL) {
    waitpid(nodes_[i].pid, nullptr, 0);
    nodes_[i].pid = -1;
  }
  return true;
}

bool LocalCluster::restart_node(std::size_t i, std::string* error) {
  if (i >= nodes_.size()) {
    *error = "no broker " + std::to_string(i);
    return false;
  }
  if (nodes_[i].pid > 0) signal_node(i, SIGKILL);
  const NodeProcess previous = nodes_[i];
  const bool ok = start_node(static_cast<int>(i), error, &previous);
  write_state();
  return ok;
}

std::vector<std::string> LocalCluster::restart_exited_nodes(std::vector<std::string>* errors) {
  std::vector<std::string> restarted;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].pid <= 0 || node_running(i)) continue;
    std::string err;
    if (restart_node(i, &err)) {
      restarted.push_back(nodes_[i].name);
    } else {
      errors->push_back(nodes_[i].name + ": " + err);
    }
  }
  return restarted;
}

bool LocalCluster::node_running(std::size_t i) {
  if (i >= nodes_.size() || nodes_[i].pid <= 0) return false;
  pid_t r;
  do {
    r = waitpid(nodes_[i].pid, nullptr, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return true;
  nodes_[i].pid = -1;
  return false;
}

bool LocalCluster::signal_controller(std::size_t i, int sig) {
  const pid_t pid = controller_pid(i);
  if (pid <= 0 || kill(pid, sig) != 0) return false;
  if (sig == SIGKILL) {
    waitpid(pid, nullptr, 0);
    MutexLock lk(mu_);
    controllers_[i].pid = -1;
  }
  return true;
}

bool LocalCluster::wait_controller_exit(std::size_t i, std::chrono::milliseconds timeout) {
  const pid_t pid = controller_pid(i);
  if (pid <= 0) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      MutexLock lk(mu_);
      controllers_[i].pid = -1;
      return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

bool LocalCluster::restart_controller(std::string* error, std::size_t i) {
  if (controller_pid(i) > 0) signal_controller(i, SIGKILL);
  return start_controller(i, error);
}

void LocalCluster::stop() {
  auto stop_one = [](NodeProcess& p) {
    if (p.pid <= 0) return;
    kill(p.pid, SIGCONT);  // a paused process cannot handle SIGTERM
    kill(p.pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(p.pid, nullptr, WNOHANG) == p.pid) {
        p.pid = -1;
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
    kill(p.pid, SIGKILL);
    waitpid(p.pid, nullptr, 0);
    p.pid = -1;
  };
  for (auto& n : nodes_) stop_one(n);
  {
    MutexLock lk(mu_);
    for (auto& c : controllers_) stop_one(c);
    for (auto& z : zookeepers_) stop_one(z);
  }
  if (!opts_.keep_root.empty()) {
    std::error_code ec;
    fs::remove_all(opts_.keep_root, ec);
  }
}

void LocalCluster::write_state() const {
  std::ofstream out(opts_.dir + "/cluster.env");
  out << "CONTROLLER=" << controller_address() << "\n";
  if (const std::string zk = zookeeper_address(); !zk.empty()) out << "ZOOKEEPER=" << zk << "\n";
  out << "PIDS=";
  MutexLock lk(mu_);
  for (const auto& c : controllers_) out << c.pid << ' ';
  for (const auto& n : nodes_) out << n.pid << ' ';
  // Last: `catena cluster down` stops the controllers before their store
  // (every server of it; a restarted one under its new pid).
  for (const auto& z : zookeepers_) out << z.pid << ' ';
  out << "\n";
  if (!opts_.keep_root.empty()) out << "KEEP=" << opts_.keep_root << "\n";
  if (opts_.secure) out << "TOKEN_FILE=" << fs::absolute(admin_token_file()).string() << "\n";
}

std::string recorded_admin_token(const std::string& dir) {
  std::ifstream in(dir + "/cluster.env");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("TOKEN_FILE=", 0) != 0) continue;
    std::ifstream token_in(line.substr(11));
    std::string token;
    token_in >> token;
    return token;
  }
  return {};
}

int stop_recorded_cluster(const std::string& dir) {
  std::ifstream in(dir + "/cluster.env");
  std::string line;
  int stopped = 0;
  while (std::getline(in, line)) {
    if (line.rfind("KEEP=", 0) == 0) {
      // The brokers' kept memory goes with the cluster (a mapping still
      // open stays valid until its process exits).
      std::error_code ec;
      fs::remove_all(line.substr(5), ec);
      continue;
    }
    if (line.rfind("PIDS=", 0) != 0) continue;
    std::istringstream pids(line.substr(5));
    pid_t pid;
    while (pids >> pid) {
      if (pid > 0 && kill(pid, SIGTERM) == 0) ++stopped;
    }
  }
  return stopped;
}

}  // namespace catena
