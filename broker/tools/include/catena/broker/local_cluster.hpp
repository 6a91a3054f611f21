// A local cluster for people and tests: a controller (or several, one
// leader, their metadata on a ZooKeeper server or ensemble started for the
// cluster) and N brokers as separate processes on one host (loopback by
// default), each logging to <dir>/<name>.log.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

#include <catena/fabric/thread_annotations.hpp>

namespace catena {

// How one broker is launched when it must run somewhere other than beside
// the controller, e.g. in its own network namespace so a test can cut it off
// the network.
struct NodeLaunch {
  // Command prefix catenad runs under, looked up in PATH (e.g. {"ip",
  // "netns", "exec", "<ns>"}). It must exec catenad in place, not fork it, so
  // that the pid LocalCluster signals and reaps is catenad's own.
  std::vector<std::string> wrap;
  // Address its fabric and admin services listen on, instead of
  // ClusterOptions::host; the controller, the other brokers and clients must
  // be able to route to it, and it to ClusterOptions::host.
  std::string host;
  // Host of the controller address this broker dials, instead of the one
  // the cluster reports (same port): a second route to the controller.
  std::string controller_host;
  // Address its fabric service alone listens on, instead of `host`: a second
  // route to the node's data plane, so a test can cut the data plane while
  // its admin service and heartbeats still get through.
  std::string fabric_host;
};

struct ClusterOptions {
  int nodes = 3;
  // Broker i is in zone "zone-" + ('a' + i % zones), so placement has
  // something to spread chains over. Zones of unequal size make placement
  // put the lone node of a zone into every chain that spans them all (5
  // brokers in 3 zones: node 2 in every chain of 3).
  int zones = 3;
  std::string provider = "soft";
  std::string dir = "catena-cluster";
  std::string host = "127.0.0.1";
  // Host the brokers' fabric listeners bind. Empty: `host` for the soft
  // provider; for verbs:<dev>, catenad picks the device's own address
  // (rdma_cm cannot reach a device through loopback).
  std::string fabric_host;
  // Node ids: this prefix and the broker's index (empty: the controller
  // assigns "node-N").
  std::string node_id_prefix;
  int controller_port = 0;  // 0: any free port (with several controllers: the first's, the next ones +1...)
  // Controllers. 1: metadata in <dir>/controller-data. More: a ZooKeeper
  // server (data in <dir>/zookeeper, a free loopback port) keeps the
  // metadata and elects the leader; each controller is a candidate with its
  // own address, and brokers and clients are given every address.
  int controllers = 1;
  // ZooKeeper servers: 1 (standalone, as above) or an odd number >= 3, an
  // ensemble on loopback (quorum a majority; server i logs to
  // <dir>/zookeeper-<i>.log, keeps its data in <dir>/zookeeper-<i>), every
  // controller given every server's address. More than 1 also puts a
  // single controller's metadata on ZooKeeper.
  int zookeeper_servers = 1;
  int zk_session_timeout_ms = 0;  // with ZooKeeper; 0: the controller's default
  int heartbeat_timeout_ms = 500;
  int heartbeat_interval_ms = 100;
  int group_session_timeout_ms = 0;  // 0: the controller's default
  // More catena-controller flags, for every controller (e.g. the failover
  // bench's {"--tick-interval-ms", "10", "--probe-timeout-ms", "25"}).
  std::vector<std::string> controller_args;
  // More catenad flags, for every broker (e.g. `catena bench`'s
  // {"--segment-slots", "40"}).
  std::vector<std::string> node_args;
  int grace_ms = 1000;  // catenad --grace-ms: lagging readers' grace after a segment expires
  std::string bin_dir;  // where catenad / catena-controller are (default: next to catena)
  // Kept memory (process-level recovery): broker i keeps its segments in
  // <keep_root>/node-<i> (catenad --keep-dir; keep_root on a memory
  // filesystem, e.g. under /dev/shm), so restart_node() brings it back with
  // its data. Node ids are then fixed ("node-<i>" unless node_id_prefix
  // says otherwise). Removed when the cluster stops (not when detached).
  // Empty: none.
  std::string keep_root;
  // A closed cluster (README "Tenants"): start() writes a new admin token
  // to <dir>/admin.token (mode 0600), the controllers require it
  // (--admin-token-file), the brokers use it (--controller-token-file) and
  // cluster.env names the file (TOKEN_FILE=), where the CLI finds it.
  bool secure = false;
  bool quiet = false;
  // Per broker, by index (the i of "node-<i>", spares included); brokers
  // without an entry run directly, on `host`.
  std::map<int, NodeLaunch> node_launch;
  // How the controller runs (empty: directly, on `host`), e.g. in its own
  // network namespace so a test can cut the controller off every broker.
  // Its `controller_host`, if set, is the address it listens on (e.g.
  // 0.0.0.0 to be reached over several links); `host` is the one clients use.
  NodeLaunch controller_launch;
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

  // Every controller's host:port, comma-separated (what ControllerClient,
  // catenad --controller and CATENA_CONTROLLER take).
  [[nodiscard]] std::string controller_address() const EXCLUDES(mu_);
  // Controller i's host:port.
  [[nodiscard]] std::string controller_address(std::size_t i) const EXCLUDES(mu_);
  [[nodiscard]] std::size_t controller_count() const { return static_cast<std::size_t>(opts_.controllers); }
  [[nodiscard]] const std::vector<NodeProcess>& nodes() const { return nodes_; }
  // The admin token of a secure cluster (empty otherwise): what its
  // ControllerClients pass (Options::token).
  [[nodiscard]] const std::string& admin_token() const { return admin_token_; }
  // The (first) controller's pid.
  [[nodiscard]] pid_t controller_pid(std::size_t i = 0) const EXCLUDES(mu_);
  // Sends `sig` to controller i; with SIGKILL, reaps it.
  bool signal_controller(std::size_t i, int sig) EXCLUDES(mu_);
  // Waits up to `timeout` for controller i to exit (after SIGTERM); reaps it.
  bool wait_controller_exit(std::size_t i, std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // Every ZooKeeper server's host:port, comma-separated (empty without
  // ZooKeeper): the host list of the controllers' zk:// location.
  [[nodiscard]] std::string zookeeper_address() const EXCLUDES(mu_);
  // ZooKeeper server i's host:port.
  [[nodiscard]] std::string zookeeper_address(std::size_t i) const EXCLUDES(mu_);
  // ZooKeeper servers (0 without ZooKeeper).
  [[nodiscard]] std::size_t zookeeper_count() const EXCLUDES(mu_);
  // ZooKeeper server i's pid (-1: not running).
  [[nodiscard]] pid_t zookeeper_pid(std::size_t i) const EXCLUDES(mu_);
  // Sends `sig` to ZooKeeper server i; with SIGKILL, reaps it.
  bool signal_zookeeper(std::size_t i, int sig) EXCLUDES(mu_);
  // Kills ZooKeeper server i (SIGKILL) if it runs and starts it again with
  // the same ports, configuration and data. With `wait`, waits (up to a
  // minute) until it serves clients: an ensemble member serves only once a
  // majority of the ensemble runs, so to restart a lost quorum restart all
  // but the last without waiting.
  bool restart_zookeeper(std::size_t i, std::string* error, bool wait = true) EXCLUDES(mu_);
  // Why `n` ZooKeeper servers cannot be (empty: it can): 1 or an odd number
  // from 3 to 9.
  [[nodiscard]] static std::string check_zookeeper_servers(int n);
  // Starts one more broker (a spare, or a replacement), with catenad flags
  // of its own (e.g. --join-rebalance) after the cluster's.
  bool add_node(std::string* error, const std::vector<std::string>& extra_args = {});
  // Sends `sig` to broker i (SIGKILL, SIGSTOP, SIGCONT...).
  bool signal_node(std::size_t i, int sig);
  // Kills broker i (SIGKILL) if it runs and starts a new process with the
  // same node id, zone and addresses: a new incarnation of the node, empty
  // unless the cluster keeps memory (keep_root). Waits until it registered.
  bool restart_node(std::size_t i, std::string* error);
  // Supervision: restarts every broker whose process exited although the
  // cluster did not stop it (a crash), as restart_node(). Returns the names
  // restarted; `errors` gets what failed.
  std::vector<std::string> restart_exited_nodes(std::vector<std::string>* errors);
  // Whether broker i's process is still running; reaps it if it exited.
  bool node_running(std::size_t i);
  // Kills controller i (SIGKILL) if it runs and starts it again on the same
  // address. May run while another thread restarts a broker (both at once is
  // a failover test); otherwise one thread at a time.
  bool restart_controller(std::string* error, std::size_t i = 0);
  void detach() { detached_ = true; }
  // Writes pids and addresses to <dir>/cluster.env (for `catena cluster down`).
  void write_state() const EXCLUDES(mu_);
  [[nodiscard]] std::string admin_token_file() const;
  bool write_admin_token(std::string* error);

 private:
  pid_t spawn(const std::string& name, const std::vector<std::string>& args);
  // Whether the cluster runs ZooKeeper (several controllers, or servers asked for).
  [[nodiscard]] bool uses_zookeeper() const { return opts_.controllers > 1 || opts_.zookeeper_servers > 1; }
  bool start_zookeeper(std::string* error);
  bool start_controller(std::size_t i, std::string* error);
  // `previous`: the incarnation to restart (same id and addresses).
  bool start_node(int index, std::string* error, const NodeProcess* previous = nullptr,
                  const std::vector<std::string>& extra_args = {});

  ClusterOptions opts_;
  // What a controller restart changes, which a broker starting on another
  // thread reads.
  mutable Mutex mu_;
  // admin_addr: the address it listens on (a restart keeps it).
  std::vector<NodeProcess> controllers_ GUARDED_BY(mu_);
  std::vector<NodeProcess> nodes_;
  // admin_addr: 127.0.0.1:<client port>; started, restarted and signalled
  // by one thread at a time, read by any (a controller starting).
  std::vector<NodeProcess> zookeepers_ GUARDED_BY(mu_);
  bool zookeeper_quorum_ = false;  // several servers: ensemble members
  bool detached_ = false;
  std::string admin_token_;  // secure: set by start() before any process
};

// The admin token of the secure cluster recorded in <dir>/cluster.env
// (its TOKEN_FILE), or empty.
std::string recorded_admin_token(const std::string& dir);
// Kills the processes recorded in <dir>/cluster.env. Returns how many.
int stop_recorded_cluster(const std::string& dir);
// The directory the running executable lives in.
std::string self_dir();

}  // namespace catena
