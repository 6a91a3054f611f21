// BrokerAdminClient that delivers calls to idl::BrokerAdminIf handlers in
// this process, through a network you can misbehave on purpose.
//
// For every call a hook decides its fate:
//   deliver       - the handler runs, its answer is returned;
//   drop_request  - the handler never sees it; caller gets UNAVAILABLE;
//   drop_reply    - the handler runs but the caller gets UNAVAILABLE, as when
//                   an answer is lost (tests retries for idempotence);
//   hold          - the call is parked and the caller gets UNAVAILABLE;
//                   release_held() delivers parked calls later, oldest or
//                   newest first, so a test can make an old configureChain
//                   arrive after a newer one.
// A call to an address with no attached handler fails with UNAVAILABLE
// ("connection refused"), like a broker that is down.
//
// Thread: all methods are thread-safe; handlers run on the calling thread,
// never under this object's lock.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <catena/control/broker_admin.hpp>
#include <catena/control/idl/BrokerAdmin.h>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class InProcBrokerAdmin final : public BrokerAdminClient {
 public:
  enum class Method { configure_chain, fence, ping, seal, append_marker };
  enum class Fate { deliver, drop_request, drop_reply, hold };

  struct Call {
    Method method = Method::ping;
    BrokerTarget to;
    idl::ChainAssignment assignment;  // configure_chain
    std::string channel;              // fence, seal
    std::int32_t partition = 0;       // fence, seal
    std::int64_t epoch = 0;           // fence, seal
    MarkerRequest marker;             // append_marker
  };
  using Hook = std::function<Fate(const Call&)>;

  void attach(const std::string& admin_addr, std::shared_ptr<idl::BrokerAdminIf> broker);
  void detach(const std::string& admin_addr);
  void set_hook(Hook hook);  // empty hook: deliver everything

  [[nodiscard]] std::size_t held() const;
  // Delivers every parked call (answers are discarded); returns how many.
  std::size_t release_held(bool newest_first = false);

  [[nodiscard]] Result<void> configure_chain(const BrokerTarget& to,
                                             const idl::ChainAssignment& assignment) override;
  [[nodiscard]] Result<void> fence(const BrokerTarget& to, const std::string& channel, std::int32_t partition,
                                   std::int64_t epoch) override;
  [[nodiscard]] Result<idl::NodeStats> ping(const BrokerTarget& to) override;
  // True when no handler is attached at to.admin_addr (a broker that is down).
  [[nodiscard]] bool refuses_connections(const BrokerTarget& to) override;
  [[nodiscard]] Result<idl::SealReply> seal(const BrokerTarget& to, const std::string& channel,
                                            std::int32_t partition, std::int64_t epoch) override;
  [[nodiscard]] Result<idl::MarkerReply> append_marker(const BrokerTarget& to, const std::string& channel,
                                                       std::int32_t partition, std::int64_t epoch,
                                                       const MarkerRequest& marker) override;

 private:
  struct Reply {
    idl::NodeStats stats;     // ping
    idl::SealReply seal;      // seal
    idl::MarkerReply marker;  // append_marker
  };
  // Sends call through the hook; fills *out with what the call returns.
  Result<void> send(const Call& call, Reply* out) EXCLUDES(mu_);
  // Runs call against its handler.
  Result<void> deliver(const Call& call, Reply* out) EXCLUDES(mu_);

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<idl::BrokerAdminIf>> brokers_ GUARDED_BY(mu_);
  Hook hook_ GUARDED_BY(mu_);
  std::deque<Call> held_ GUARDED_BY(mu_);
};

}  // namespace catena::control
