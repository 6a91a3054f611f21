// catena-controller's serving half: the Controller service on a ThriftServer
// plus the maintenance loop that calls Controller::tick() every
// tick_interval on its own thread.
//
// What it serves is a ControllerRole: the Controller while this process
// leads, else NOT_LEADER (with leader_address) to every call and no tick().
//
// Lifecycle: construct, start(), port(), stop() (idempotent; the destructor
// calls it). The Controller must outlive the server.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <catena/control/controller.hpp>
#include <catena/control/result.hpp>
#include <catena/control/thrift_server.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

// Whether this process serves the Controller, or whom it names instead.
// Thread-safe; each call takes the lock once.
class ControllerRole {
 public:
  // Serve c from now on.
  void lead(std::shared_ptr<Controller> c) EXCLUDES(mu_);
  // Answer NOT_LEADER naming leader_address (empty: no leader known yet),
  // leading no more.
  void follow(std::string leader_address) EXCLUDES(mu_);
  // Stop serving for good (the leader lost its ZooKeeper session):
  // NOT_LEADER without a leader, and no tick().
  void halt(std::string why) EXCLUDES(mu_);

  // The Controller to serve a call with, or the NOT_LEADER answer.
  [[nodiscard]] Result<std::shared_ptr<Controller>> serving() const EXCLUDES(mu_);
  // The Controller while leading, else null.
  [[nodiscard]] std::shared_ptr<Controller> leading() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::shared_ptr<Controller> controller_ GUARDED_BY(mu_);
  std::string leader_ GUARDED_BY(mu_);
  std::string halted_ GUARDED_BY(mu_);  // why, once halted
};

// Calls answered per Controller method, and how many of them were errors
// (any CatenaError, NOT_LEADER included), for the metrics endpoint. Counted
// on the connections' threads under one lock; read with snapshot().
class RpcStats {
 public:
  struct Count {
    std::int64_t calls = 0;
    std::int64_t errors = 0;
  };
  void record(std::string_view method, bool failed) EXCLUDES(mu_);
  [[nodiscard]] std::map<std::string, Count> snapshot() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::map<std::string, Count, std::less<>> counts_ GUARDED_BY(mu_);
};

// The Thrift processor a ControllerServer runs for each connection (the
// same handler: the role's controller, the admin token's checks), for a
// caller that feeds it requests without a socket: the request fuzzer
// (tests/fuzz/controller_request_fuzz.cpp). Empty admin_token: open mode.
[[nodiscard]] std::shared_ptr<apache::thrift::TProcessor> make_connection_processor(
    std::shared_ptr<ControllerRole> role, const std::string& admin_token = {});

class ControllerServer {
 public:
  struct Options {
    ThriftServer::Options thrift{.host = "127.0.0.1", .port = 7400};
    std::chrono::milliseconds tick_interval{50};  // maintenance period; 0 disables the loop
    // How often the leader evens out head and tail roles by reordering
    // chains (Controller::balance_roles: what repairs skewed, as Kafka's
    // periodic preferred-leader election). Each reordered chain is one
    // handoff (its head sealed for a moment, its publishers redirected),
    // on a thread of its own, so the tick never waits for it. 0: never.
    std::chrono::milliseconds role_balance_interval{300000};
    // Non-empty: every connection must authenticate (with this token, the
    // admin's, or a tenant's) before any other call. Empty: open mode, a
    // connection that does not authenticate is the admin.
    std::string admin_token;
    // Non-null: every call answered is counted here.
    std::shared_ptr<RpcStats> rpc_stats;
  };

  // Always serves controller.
  ControllerServer(Controller& controller, Options options);
  // Serves what role says at each call.
  ControllerServer(std::shared_ptr<ControllerRole> role, Options options);
  ~ControllerServer();
  ControllerServer(const ControllerServer&) = delete;
  ControllerServer& operator=(const ControllerServer&) = delete;

  [[nodiscard]] Result<void> start();
  [[nodiscard]] std::uint16_t port() const noexcept { return server_.port(); }
  [[nodiscard]] std::string address() const { return server_.address(); }
  void stop();
  // Runs the maintenance tick as soon as the one under way (if any) ends,
  // not at the next period: a failure report's probe goes out at once. At
  // most one such early tick per min_gap (a tenth of the tick interval,
  // 1..10 ms) after the previous one began: requests meanwhile share it.
  void tick_now() EXCLUDES(mu_);
  // Maintenance ticks run so far.
  [[nodiscard]] std::uint64_t ticks() const noexcept { return ticks_.load(std::memory_order_relaxed); }

 private:
  void maintenance_loop() EXCLUDES(mu_);
  void role_balance_loop() EXCLUDES(mu_);

  std::shared_ptr<ControllerRole> role_;
  const std::chrono::milliseconds tick_interval_;
  const std::chrono::microseconds min_gap_ = std::clamp<std::chrono::microseconds>(
      tick_interval_ / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(10));
  std::atomic<std::uint64_t> ticks_{0};
  ThriftServer server_;
  const std::chrono::milliseconds role_balance_interval_;
  std::thread maintenance_thread_;
  std::thread role_balance_thread_;
  Mutex mu_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool tick_requested_ GUARDED_BY(mu_) = false;
};

}  // namespace catena::control
