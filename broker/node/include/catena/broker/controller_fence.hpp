// Which controller may command this broker: the admin secret its
// registration handed out (RegisterReply.admin_secret) and the newest
// controller epoch it has heard of, from registration replies, heartbeat
// replies and BrokerAdmin.authenticate calls.
//
// The BrokerAdmin server asks it on every call (admit a connection's
// authenticate, check a call of an authenticated connection); the NodeAgent
// feeds it what the controller answers and asks it whether a heartbeat
// reply may renew the lease. A controller epoch only ever grows here: once
// a newer leader has been heard of, a deposed one that wakes up is refused
// (NOT_LEADER) on every BrokerAdmin call and its heartbeat answers renew
// nothing.
//
// Until the first registration that carries a secret the fence is open
// (every call passes): the broker holds nothing yet, and configureChain is
// refused anyway until it knows its incarnation.
//
// Thread: thread-safe (the server's connection threads and the agent's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <catena/control/result.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::broker {

class ControllerFence {
 public:
  struct Stats {
    std::int64_t newest_epoch = 0;
    std::uint64_t refused_unauthenticated = 0;  // calls and authenticates refused for their secret
    std::uint64_t refused_stale = 0;            // calls, authenticates and heartbeat replies of older epochs
  };

  // A registration reply: the secret (empty: an older controller that sends
  // none, and the fence stays as it was) and the answering epoch.
  void registered(const std::string& admin_secret, std::int64_t controller_epoch);
  // A heartbeat reply's epoch: false if it is older than the newest heard of
  // (the reply must renew nothing); a newer one becomes the newest.
  [[nodiscard]] bool heard(std::int64_t controller_epoch);
  // BrokerAdmin.authenticate: UNAUTHENTICATED for another secret,
  // NOT_LEADER for an epoch older than the newest; true when the secret was
  // checked (the epoch is then the connection's, and the newest if newer).
  // false while the fence is open: nothing was checked, the epoch counts
  // for nothing, and the connection stays unauthenticated (it must call
  // again once the broker registered).
  [[nodiscard]] control::Result<bool> admit(const std::string& admin_secret, std::int64_t controller_epoch);
  // Any other call on a connection that authenticated at `connection_epoch`
  // (nullopt: it did not): UNAUTHENTICATED or NOT_LEADER, or ok.
  [[nodiscard]] control::Result<void> check(std::optional<std::int64_t> connection_epoch, const char* call);

  [[nodiscard]] Stats stats() const;

 private:
  mutable Mutex mu_;
  std::string secret_ GUARDED_BY(mu_);  // empty: open
  Stats stats_ GUARDED_BY(mu_);
};

}  // namespace catena::broker
