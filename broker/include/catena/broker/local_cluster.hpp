// A local cluster for people and tests: a controller and N brokers as
// separate processes on loopback, each logging to <dir>/<name>.log.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace catena {

struct ClusterOptions {
  int nodes = 3;
  std::string provider = "soft";
  std::string dir = "catena-cluster";
  std::string host = "127.0.0.1";
  int controller_port = 0;                 // 0: any free port
  int heartbeat_timeout_ms = 500;
  int heartbeat_interval_ms = 100;
  std::string bin_dir;                     // where catenad / catena-controller are (default: next to catena)
  bool quiet = false;
};

struct NodeProcess {
  std::string name;
  pid_t pid = -1;
  std::string node_id;
  std::string admin_addr;
  std::string fabric_addr;
};

class LocalCluster {
 public:
  explicit LocalCluster(ClusterOptions opts);
  ~LocalCluster();  // stops every process it started

  // Starts the controller and the brokers and waits until all registered.
  bool start(std::string* error);
  void stop();

  [[nodiscard]] std::string controller_address() const { return controller_addr_; }
  [[nodiscard]] const std::vector<NodeProcess>& nodes() const { return nodes_; }
  [[nodiscard]] pid_t controller_pid() const { return controller_.pid; }
  // Starts one more broker (a spare, or a replacement).
  bool add_node(std::string* error);
  // Sends `sig` to broker i (SIGKILL, SIGSTOP, SIGCONT...).
  bool signal_node(std::size_t i, int sig);
  bool restart_controller(std::string* error);
  void detach() { detached_ = true; }
  // Writes pids and addresses to <dir>/cluster.env (for `catena cluster down`).
  void write_state() const;

 private:
  pid_t spawn(const std::string& name, const std::vector<std::string>& args);
  bool start_controller(std::string* error);
  bool start_node(int index, std::string* error);

  ClusterOptions opts_;
  NodeProcess controller_;
  std::string controller_addr_;
  std::vector<NodeProcess> nodes_;
  bool detached_ = false;
};

// Kills the processes recorded in <dir>/cluster.env. Returns how many.
int stop_recorded_cluster(const std::string& dir);
// The directory the running executable lives in.
std::string self_dir();

}  // namespace catena
