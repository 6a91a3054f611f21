// The broker side of the control-plane seam: serves the BrokerAdmin Thrift
// service for one catenad, translating the controller's chain assignments
// into broker::Broker::configure() calls. The broker itself knows nothing of
// Thrift; this adapter is the only place the two meet.
//
// configureChain: the broker finds its role by its node id's position in the
// route (in route.replicas, or in route.joining: after the tail); a route
// that lists it nowhere drops (fences) its replica. Epochs
// below the installed one are refused with STALE_EPOCH and the installed
// route; the same epoch again is a no-op (the controller retries pushes).
//
// With a ControllerFence (catenad's), every call but authenticate needs a
// connection that authenticated with the broker's admin secret at the
// newest controller epoch the broker heard of (controller_fence.hpp).
//
// Lifecycle: start() binds (port 0 picks one), stop() is idempotent. The
// Broker must outlive the server.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <catena/broker/broker.hpp>
#include <catena/broker/controller_fence.hpp>
#include <catena/control/idl/catena_types.h>
#include <catena/control/result.hpp>
#include <catena/control/thrift_server.hpp>

namespace catena::broker {

class BrokerAdminServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    // Who may call; null: anyone (tests that play the controller). Must
    // outlive the server.
    ControllerFence* fence = nullptr;
  };

  BrokerAdminServer(Broker& broker, Options options);
  ~BrokerAdminServer();
  BrokerAdminServer(const BrokerAdminServer&) = delete;
  BrokerAdminServer& operator=(const BrokerAdminServer&) = delete;

  [[nodiscard]] control::Result<void> start();
  [[nodiscard]] std::uint16_t port() const noexcept;
  void stop();

  struct Shared;
  class Handler;
  class HandlerFactory;

 private:
  Broker& broker_;
  Options options_;
  std::unique_ptr<control::ThriftServer> server_;
};

// Maps a controller assignment to this node's replica configuration.
// Returns false when the node is not in the route. A node in route.joining
// gets position replicas.size()+k with chain_length replicas.size(), its
// predecessor is the tail (or the joining node before it), and the tail's
// successor is joining[0].
bool replica_config_for(const std::string& node_id, const control::idl::ChainAssignment& a,
                        chain::ReplicaConfig* out);

// What the node reports in heartbeats and ping(): its load plus every
// replica's progress (epoch, offsets, backlog towards its successor).
[[nodiscard]] control::idl::NodeStats node_stats_of(const NodeStats& stats);

}  // namespace catena::broker
