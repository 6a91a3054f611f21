// catenad's Prometheus endpoint (README "Metrics"): serves GET /metrics on
// its own threads (prometheus-cpp's civetweb). Each scrape reads
// Broker::stats() (the snapshot the data-plane thread refreshes every few
// ms) and each replica's chain::ReplicaCounters with relaxed loads: the
// data-plane thread never touches a prometheus-cpp object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <catena/broker/broker.hpp>

namespace catena::broker {

class MetricsServer {
 public:
  // Listens on host:port (port 0: any free one). An error message if it
  // cannot bind.
  static fabric::Result<std::unique_ptr<MetricsServer>> start(const Broker& broker,
                                                              const std::string& listen);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  [[nodiscard]] std::uint16_t port() const;

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text a scrape of `broker` answers (the endpoint's body).
[[nodiscard]] std::string metrics_text(const Broker& broker);

}  // namespace catena::broker
