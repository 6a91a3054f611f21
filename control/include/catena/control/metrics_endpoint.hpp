// A Prometheus endpoint (GET /metrics on prometheus-cpp's own threads) that
// serves one collectable: what catena-controller and catenad share of
// their --metrics-addr. Each daemon's collectable builds its families at
// scrape time; nothing here is on a call's or a record's path.
//
// Its own target (catena_metrics_endpoint), linked only by the daemons'
// metrics libraries, so that the control library's other users do not
// link prometheus-cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <string>
#include <vector>

#include <catena/control/result.hpp>

namespace catena::control {

class MetricsEndpoint {
 public:
  // Listens on host:port (port 0: any free one); INVALID_ARGUMENT naming
  // the address if it cannot bind.
  [[nodiscard]] static Result<std::unique_ptr<MetricsEndpoint>> start(
      const std::string& listen, std::shared_ptr<prometheus::Collectable> collectable);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port it listens on (the chosen one when started with port 0).
  [[nodiscard]] std::uint16_t port() const;

  struct Impl;

 private:
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Appends one sample to `family`: its value goes in the counter or the
// gauge field, by the family's type.
void add_sample(prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> labels,
                double value);

}  // namespace catena::control
