// The controller's side of the BrokerAdmin service: the seam through which
// it configures chains on brokers and probes them.
//
// Two implementations:
//   ThriftBrokerAdmin  (thrift_broker_admin.hpp) - real sockets, timeouts,
//                      reconnects; what catena-controller uses.
//   InProcBrokerAdmin  (inproc_broker_admin.hpp) - calls idl::BrokerAdminIf
//                      handlers in this process through hooks that can drop,
//                      hold back and reorder calls; what tests use.
//
// Errors: UNAVAILABLE when the broker could not be reached or did not answer
// in time (the call may or may not have been applied); otherwise the code the
// broker threw (STALE_EPOCH with its installed route, ...).
//
// Thread: implementations are safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <string>

#include <catena/control/idl/catena_types.h>
#include <catena/control/result.hpp>

namespace catena::control {

struct BrokerTarget {
  std::string node_id;     // for logs and hooks
  std::string admin_addr;  // host:port of the broker's BrokerAdmin server
  // What a connection authenticates with first (BrokerAdmin.authenticate):
  // the node's admin secret and the caller's controller epoch. An empty
  // secret: no authenticate call (a broker that never registered).
  std::string admin_secret;
  std::int64_t controller_epoch = 0;
};

// The marker a channel alter asks a head for: the generation it opens and
// the partition counts it goes from and to.
struct MarkerRequest {
  std::int32_t generation = 0;
  std::int32_t from_partitions = 0;
  std::int32_t to_partitions = 0;
};

class BrokerAdminClient {
 public:
  virtual ~BrokerAdminClient() = default;

  [[nodiscard]] virtual Result<void> configure_chain(const BrokerTarget& to,
                                                     const idl::ChainAssignment& assignment) = 0;
  [[nodiscard]] virtual Result<void> fence(const BrokerTarget& to, const std::string& channel,
                                           std::int32_t partition, std::int64_t epoch) = 0;
  // Liveness probe. Implementations bound it by their probe timeout.
  [[nodiscard]] virtual Result<idl::NodeStats> ping(const BrokerTarget& to) = 0;
  // After a failed ping: true only if the node's admin address refuses
  // connections (nothing listens there: its process is gone), as opposed
  // to a timeout or a cut. Bounded by the probe timeout.
  [[nodiscard]] virtual bool refuses_connections(const BrokerTarget& to) = 0;
  // Partition handoff: seals the head (see BrokerAdmin.seal in catena.thrift).
  [[nodiscard]] virtual Result<idl::SealReply> seal(const BrokerTarget& to, const std::string& channel,
                                                    std::int32_t partition, std::int64_t epoch) = 0;
  // Channel alter: a marker at the head (see BrokerAdmin.appendMarker).
  [[nodiscard]] virtual Result<idl::MarkerReply> append_marker(const BrokerTarget& to,
                                                               const std::string& channel,
                                                               std::int32_t partition, std::int64_t epoch,
                                                               const MarkerRequest& marker) = 0;
};

}  // namespace catena::control
