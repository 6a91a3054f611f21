// BrokerAdminClient over Thrift: one pooled TCP connection per broker,
// opened on first use and reopened after any transport error.
//
// A call that times out discards its connection (a late answer must never be
// read as the answer to the next call). Calls to one broker are serialised
// on its connection; calls to different brokers run in parallel.
//
// Thread: thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <catena/control/broker_admin.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class ThriftBrokerAdmin final : public BrokerAdminClient {
 public:
  struct Options {
    std::chrono::milliseconds connect_timeout{200};
    std::chrono::milliseconds rpc_timeout{1000};   // configureChain, fence
    std::chrono::milliseconds probe_timeout{200};  // ping: connect + answer
  };

  explicit ThriftBrokerAdmin(Options options) : options_(options) {}
  ~ThriftBrokerAdmin() override;

  [[nodiscard]] Result<void> configure_chain(const BrokerTarget& to,
                                             const idl::ChainAssignment& assignment) override;
  [[nodiscard]] Result<void> fence(const BrokerTarget& to, const std::string& channel, std::int32_t partition,
                                   std::int64_t epoch) override;
  [[nodiscard]] Result<idl::NodeStats> ping(const BrokerTarget& to) override;
  [[nodiscard]] bool refuses_connections(const BrokerTarget& to) override;
  [[nodiscard]] Result<idl::MarkerReply> append_marker(const BrokerTarget& to, const std::string& channel,
                                                       std::int32_t partition, std::int64_t epoch,
                                                       const MarkerRequest& marker) override;
  [[nodiscard]] Result<idl::SealReply> seal(const BrokerTarget& to, const std::string& channel,
                                            std::int32_t partition, std::int64_t epoch) override;

 private:
  struct Connection;
  template <class Fn>
  Result<void> call(const BrokerTarget& to, std::chrono::milliseconds connect_timeout,
                    std::chrono::milliseconds timeout, Fn&& fn);

  Options options_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Connection>> connections_ GUARDED_BY(mu_);  // by admin_addr
};

}  // namespace catena::control
