// The verbs provider's out-of-band connection mode ("verbs:<dev>,oob"):
// no rdma_cm. A TCP listener (or dialer) exchanges the Hello of
// oob_handshake.hpp per connection, the same one the dpdk provider speaks,
// and moves the RC QP INIT -> RTR -> RTS with ibv_modify_qp from what the
// peer sent (QPN, PSN, IPv4-mapped GID, MTU). The endpoint is the same
// VerbsEndpoint as on the rdma_cm path; its TCP socket stays open as the
// liveness channel. So verbs and dpdk nodes connect to each other.
// Setup code only: blocks up to the caller's timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>

#include <catena/fabric/fabric.hpp>

#include "verbs_device.hpp"

namespace catena::fabric::verbs {

Result<std::unique_ptr<Listener>> oob_listen(std::shared_ptr<VerbsDevice> device, std::string_view address,
                                             const EndpointConfig& cfg);
Result<std::unique_ptr<Endpoint>> oob_connect(const std::shared_ptr<VerbsDevice>& device,
                                              std::string_view address, const EndpointConfig& cfg,
                                              std::chrono::milliseconds timeout);

}  // namespace catena::fabric::verbs
