// Leader election among the controllers sharing one zk:// metadata location,
// with ZooKeeper's ephemeral-sequential recipe.
//
// Each candidate creates <root>/election/c-<sequence> (ephemeral, holding
// its Thrift address) on a session of its own. The lowest sequence is the
// leader; every other candidate watches the one just before it (so a
// leader's end wakes one candidate, not all) and the lowest (so it always
// knows whom to name in its NOT_LEADER answers).
//
// Lifecycle: join() connects and creates the znode, then an election
// thread tells the callbacks: follow(address) whenever the leader it sees
// changes (empty: none known yet), elected() once when this candidate is
// the lowest, lost(error) once when its session expired, was without a
// connection for a whole session timeout, or its znode is gone; after
// lost() this candidate is out of the election for good (a new join() is
// the only way back). While it leads, the thread asks must_resign() every
// 50 ms: once it says yes (the leader's metadata store failed) and the
// session is connected, resign() is called, then the candidate leaves the
// election and joins again at its end (a new znode): the next candidate
// leads, and this one is elected() again only after every other. The destructor leaves the election: it
// closes the session, so the znode goes at once and the next candidate takes over without waiting for the
// session timeout.
//
// Threads: the callbacks run on the election thread, one at a time; they
// may block (elected() opens the metadata store) but must not destroy the
// ZkElection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <catena/control/result.hpp>
#include <catena/control/zk_metadata_store.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

namespace zk {
class Session;
}

class ZkElection {
 public:
  struct Options {
    ZkLocation location;
    std::string address;  // this candidate's Thrift address: what followers name
    std::chrono::milliseconds session_timeout{10000};
    std::chrono::milliseconds connect_timeout{10000};
  };
  struct Callbacks {
    std::function<void()> elected;
    std::function<void(const std::string& leader_address)> follow;
    std::function<void(const ControlError& why)> lost;
    // Optional: whether the leader must stop leading (asked while leading).
    std::function<bool()> must_resign;
    // Called before the candidate leaves the election to resign.
    std::function<void()> resign;
  };

  [[nodiscard]] static Result<std::unique_ptr<ZkElection>> join(Options options, Callbacks callbacks);
  ~ZkElection();
  ZkElection(const ZkElection&) = delete;
  ZkElection& operator=(const ZkElection&) = delete;

 private:
  enum class Step { follow, elected, retry, lost };

  ZkElection(Options options, Callbacks callbacks);
  void run() EXCLUDES(mu_);
  // One look at the candidates: who leads, and watches on what decides.
  [[nodiscard]] Step look(std::string& leader_address, ControlError& why);
  // A new ephemeral sequential znode for this session: znode_.
  [[nodiscard]] Result<void> create_znode();
  friend struct ZkElectionWatch;  // the ZooKeeper watcher: wakes the thread
  void wake() EXCLUDES(mu_);

  const Options options_;
  const Callbacks callbacks_;
  std::string dir_;    // <root>/election
  std::string znode_;  // ours (the election thread's, once it runs)
  Mutex mu_;
  std::condition_variable cv_;
  bool changed_ GUARDED_BY(mu_) = true;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::unique_ptr<zk::Session> session_;
  std::thread thread_;
};

}  // namespace catena::control
