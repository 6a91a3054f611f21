// One of several catena-controller processes sharing one zk:// metadata
// location: a ControllerServer that answers NOT_LEADER (naming the leader)
// until its ZkElection makes it the leader, then opens the Controller (which
// takes the controller epoch: any older leader's store is fenced from then
// on) and serves it, tick() included. A leader that loses its ZooKeeper
// session halts: it answers NOT_LEADER without a leader and ticks no more,
// and on_lost is called (catena-controller exits; a restart is a new
// candidate).
//
// Lifecycle: start() returns once the first election outcome is known
// (leading with the metadata loaded, or following) or failed; stop() (also
// the destructor) leaves the election, so the next candidate takes over at
// once, and stops the server.
//
// Thread: start/stop from one thread; the accessors from any.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>

#include <catena/control/controller.hpp>
#include <catena/control/controller_server.hpp>
#include <catena/control/zk_election.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class ControllerCandidate {
 public:
  struct Options {
    Controller::Options controller;  // metadata: zk://...
    ControllerServer::Options server;
    // host:port the others name in NOT_LEADER; empty: the server's bound address.
    std::string advertise;
    std::chrono::milliseconds session_timeout{10000};
    std::chrono::milliseconds connect_timeout{10000};
    // Called on the election thread after this candidate halted (session
    // lost, or the metadata could not be opened once elected).
    std::function<void(const ControlError&)> on_lost;
  };

  [[nodiscard]] static Result<std::unique_ptr<ControllerCandidate>> start(Options options, const Clock& clock,
                                                                          BrokerAdminClient& brokers);
  ~ControllerCandidate();
  ControllerCandidate(const ControllerCandidate&) = delete;
  ControllerCandidate& operator=(const ControllerCandidate&) = delete;

  [[nodiscard]] std::string address() const { return address_; }  // what the others name
  [[nodiscard]] std::uint16_t port() const noexcept { return server_->port(); }
  // The Controller while leading, else null.
  [[nodiscard]] std::shared_ptr<Controller> controller() const { return role_->leading(); }
  // The leader this candidate names while it follows; "" while it leads or
  // before any leader is elected.
  [[nodiscard]] std::string leader_address() const {
    auto serving = role_->serving();
    return serving ? std::string() : serving.error().leader_address.value_or("");
  }
  void stop();

 private:
  ControllerCandidate(Options options, const Clock& clock, BrokerAdminClient& brokers);
  void elected() EXCLUDES(mu_);
  void decided() EXCLUDES(mu_);

  Options options_;
  const Clock& clock_;
  BrokerAdminClient& brokers_;
  std::shared_ptr<ControllerRole> role_ = std::make_shared<ControllerRole>();
  std::unique_ptr<ControllerServer> server_;
  std::string address_;
  std::unique_ptr<ZkElection> election_;
  Mutex mu_;
  std::condition_variable cv_;
  bool decided_ GUARDED_BY(mu_) = false;  // the first outcome is known
};

}  // namespace catena::control
