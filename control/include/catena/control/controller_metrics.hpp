// catena-controller's Prometheus endpoint (--metrics-addr, README
// "Metrics"): GET /metrics on prometheus-cpp's own threads. Each scrape
// reads the leading Controller (cluster_status(), list_channels(), its
// ControllerCounters) and the server's RpcStats; nothing here is on a
// call's path. A candidate that does not lead serves only is_leader 0 and
// its RPC counts.
//
// Its own target (catena_control_metrics), linked only by the daemon, so
// that the control library's other users do not link prometheus-cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <catena/control/controller.hpp>
#include <catena/control/controller_server.hpp>
#include <catena/control/result.hpp>

namespace catena::control {

class ControllerMetrics {
 public:
  // The Controller while this process leads, else null.
  using Leading = std::function<std::shared_ptr<Controller>()>;

  // Listens on host:port (port 0: any free one); INVALID_ARGUMENT naming
  // the address if it cannot bind.
  [[nodiscard]] static Result<std::unique_ptr<ControllerMetrics>> start(const std::string& listen,
                                                                        Leading leading,
                                                                        std::shared_ptr<const RpcStats> rpc);
  ~ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  [[nodiscard]] std::uint16_t port() const;

  struct Impl;

 private:
  explicit ControllerMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text a scrape answers (leading: null when following).
[[nodiscard]] std::string controller_metrics_text(const Controller* leading, const RpcStats& rpc);

}  // namespace catena::control
