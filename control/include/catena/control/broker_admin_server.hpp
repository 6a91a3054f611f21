// The broker side of the control-plane seam: serves the BrokerAdmin Thrift
// service for one catenad, translating the controller's chain assignments
// into broker::Broker::configure() calls. The broker itself knows nothing of
// Thrift; this adapter is the only place the two meet.
//
// configureChain: the broker finds its role by its node id's position in the
// route; a route that does not list it drops (fences) its replica. Epochs
// below the installed one are refused with STALE_EPOCH and the installed
// route; the same epoch again is a no-op (the controller retries pushes).
//
// Lifecycle: start() binds (port 0 picks one), stop() is idempotent. The
// Broker must outlive the server.
#pragma once

#include <catena/broker/broker.hpp>
#include <catena/control/result.hpp>
#include <catena/control/thrift_server.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace catena::control {

class BrokerAdminServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
  };

  BrokerAdminServer(broker::Broker& broker, Options options);
  ~BrokerAdminServer();
  BrokerAdminServer(const BrokerAdminServer&) = delete;
  BrokerAdminServer& operator=(const BrokerAdminServer&) = delete;

  [[nodiscard]] Result<void> start();
  [[nodiscard]] std::uint16_t port() const noexcept;
  void stop();

  class Handler;

 private:
  broker::Broker& broker_;
  Options options_;
  std::shared_ptr<Handler> handler_;
  std::unique_ptr<ThriftServer> server_;
};

// Maps a controller assignment to this node's replica configuration.
// Returns nullopt-like false when the node is not in the route.
bool replica_config_for(const std::string& node_id, const idl::ChainAssignment& a, chain::ReplicaConfig* out);

}  // namespace catena::control
