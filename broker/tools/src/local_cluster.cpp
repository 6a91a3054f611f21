#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

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

bool LocalCluster::start_controller(std::string* error) {
  const std::string port_file = opts_.dir + "/controller.port";
  fs::remove(port_file);
  {
    MutexLock lk(mu_);
    controller_.name = "controller";
  }
  const std::string host = opts_.controller_launch.host.empty() ? opts_.host : opts_.controller_launch.host;
  const std::string listen =
      opts_.controller_launch.controller_host.empty() ? host : opts_.controller_launch.controller_host;
  std::vector<std::string> args = opts_.controller_launch.wrap;
  args.insert(args.end(), {opts_.bin_dir + "/catena-controller", "--listen",
                           listen + ":" + std::to_string(opts_.controller_port), "--data-dir",
                           opts_.dir + "/controller-data", "--heartbeat-timeout-ms",
                           std::to_string(opts_.heartbeat_timeout_ms), "--heartbeat-interval-ms",
                           std::to_string(opts_.heartbeat_interval_ms), "--port-file", port_file});
  if (opts_.group_session_timeout_ms > 0) {
    args.insert(args.end(),
                {"--group-session-timeout-ms", std::to_string(opts_.group_session_timeout_ms),
                 "--group-heartbeat-interval-ms", std::to_string(opts_.group_session_timeout_ms / 10)});
  }
  const pid_t pid = spawn("controller", args);
  {
    MutexLock lk(mu_);
    controller_.pid = pid;
  }
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      opts_.controller_port = port;  // a restart reuses the port
      MutexLock lk(mu_);
      controller_addr_ = host + ":" + std::to_string(port);
      return true;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(50ms);
  }
  *error = "controller did not start; see " + opts_.dir + "/controller.log";
  return false;
}

bool LocalCluster::start_node(int index, std::string* error, const NodeProcess* previous,
                              const std::vector<std::string>& extra_args) {
  NodeProcess n;
  n.name = "node-" + std::to_string(index);
  const std::string ready = opts_.dir + "/" + n.name + ".ready";
  fs::remove(ready);
  // Three zones, round-robin, so placement has something to spread over.
  const std::string zone = "zone-" + std::string(1, static_cast<char>('a' + index % 3));
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
  args.insert(args.end(),
              {opts_.bin_dir + "/catenad", "--controller", controller, "--provider", opts_.provider,
               "--admin-listen", admin_listen, "--zone", zone, "--ready-file", ready, "--grace-ms", "1000"});
  if (previous != nullptr) {
    args.insert(args.end(), {"--fabric-listen", previous->fabric_addr, "--node-id", previous->node_id});
  } else {
    if (!fabric_host.empty()) args.insert(args.end(), {"--fabric-listen", fabric_host + ":0"});
    if (!opts_.node_id_prefix.empty()) {
      args.insert(args.end(), {"--node-id", opts_.node_id_prefix + std::to_string(index)});
    }
  }
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

bool LocalCluster::start(std::string* error) {
  // Brokers keep segments in memory: a new cluster starts with new metadata
  // too (a controller restart, below, keeps it).
  std::error_code ec;
  fs::remove_all(opts_.dir + "/controller-data", ec);
  fs::create_directories(opts_.dir);
  if (!start_controller(error)) return false;
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

bool LocalCluster::restart_controller(std::string* error) {
  if (const pid_t pid = controller_pid(); pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return start_controller(error);
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
  MutexLock lk(mu_);
  stop_one(controller_);
}

void LocalCluster::write_state() const {
  std::ofstream out(opts_.dir + "/cluster.env");
  MutexLock lk(mu_);
  out << "CONTROLLER=" << controller_addr_ << "\n";
  out << "PIDS=" << controller_.pid;
  for (const auto& n : nodes_) out << ' ' << n.pid;
  out << "\n";
}

int stop_recorded_cluster(const std::string& dir) {
  std::ifstream in(dir + "/cluster.env");
  std::string line;
  int stopped = 0;
  while (std::getline(in, line)) {
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
