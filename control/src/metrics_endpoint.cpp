#include <exception>
#include <prometheus/exposer.h>
#include <utility>

#include <catena/control/metrics_endpoint.hpp>

namespace catena::control {

struct MetricsEndpoint::Impl {
  std::shared_ptr<prometheus::Collectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(
    const std::string& listen, std::shared_ptr<prometheus::Collectable> collectable) {
  auto impl = std::make_unique<Impl>();
  impl->collectable = std::move(collectable);
  try {
    impl->exposer = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return invalid_argument("metrics endpoint on " + listen + ": " + e.what());
  }
  impl->exposer->RegisterCollectable(impl->collectable);
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl)));
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsEndpoint::~MetricsEndpoint() {
  if (impl_ && impl_->exposer) impl_->exposer->RemoveCollectable(impl_->collectable);
}

std::uint16_t MetricsEndpoint::port() const {
  const auto ports = impl_->exposer->GetListeningPorts();
  return ports.empty() ? 0 : static_cast<std::uint16_t>(ports.front());
}

void add_sample(prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> labels,
                double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family.metric.push_back(std::move(m));
}

}  // namespace catena::control
