#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <utility>
#include <vector>

#include <catena/control/controller_metrics.hpp>
#include <catena/control/metrics_endpoint.hpp>

namespace catena::control {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(const char* name, const char* help, MetricType type) {
  return MetricFamily{name, help, type, {}};
}

void sample(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  add_sample(f, std::move(labels), value);
}

std::vector<MetricFamily> collect(const Controller* leading, const RpcStats& rpc) {
  std::vector<MetricFamily> out;
  auto leader = family("catena_controller_is_leader",
                       "1 while this controller leads (serves and acts), else 0", MetricType::Gauge);
  sample(leader, {}, leading != nullptr ? 1 : 0);
  out.push_back(std::move(leader));

  auto calls =
      family("catena_controller_rpcs_total", "Controller calls answered, by method", MetricType::Counter);
  auto errors =
      family("catena_controller_rpc_errors_total",
             "Controller calls answered with an error (NOT_LEADER included), by method", MetricType::Counter);
  for (const auto& [method, count] : rpc.snapshot()) {
    sample(calls, {{"method", method}}, static_cast<double>(count.calls));
    sample(errors, {{"method", method}}, static_cast<double>(count.errors));
  }
  out.push_back(std::move(calls));
  out.push_back(std::move(errors));
  if (leading == nullptr) return out;

  auto nodes = family("catena_controller_nodes", "Registered nodes by state", MetricType::Gauge);
  auto repairs_open = family("catena_controller_repairs_in_progress",
                             "Repairs open (chains short of a member)", MetricType::Gauge);
  if (auto status = leading->cluster_status()) {
    double alive = 0;
    double suspect = 0;
    double dead = 0;
    for (const auto& n : status->nodes) {
      if (n.state == idl::NodeState::ALIVE) ++alive;
      if (n.state == idl::NodeState::SUSPECT) ++suspect;
      if (n.state == idl::NodeState::DEAD) ++dead;
    }
    sample(nodes, {{"state", "alive"}}, alive);
    sample(nodes, {{"state", "suspect"}}, suspect);
    sample(nodes, {{"state", "dead"}}, dead);
    sample(repairs_open, {}, status->repairs_in_progress);
  }
  out.push_back(std::move(nodes));
  out.push_back(std::move(repairs_open));

  auto channels = family("catena_controller_channels", "Channels", MetricType::Gauge);
  auto partitions = family("catena_controller_partitions", "Partitions of every channel", MetricType::Gauge);
  if (auto list = leading->list_channels()) {
    double parts = 0;
    for (const auto& ch : *list) parts += static_cast<double>(ch.routes.size());
    sample(channels, {}, static_cast<double>(list->size()));
    sample(partitions, {}, parts);
  }
  out.push_back(std::move(channels));
  out.push_back(std::move(partitions));

  const auto& c = leading->counters();
  auto counter = [&](const char* name, const char* help, const std::atomic<std::int64_t>& value) {
    auto f = family(name, help, MetricType::Counter);
    sample(f, {}, static_cast<double>(value.load(std::memory_order_relaxed)));
    out.push_back(std::move(f));
  };
  counter("catena_controller_evictions_total",
          "Nodes declared dead and fenced by this leader (each opens a repair)", c.evictions);
  counter("catena_controller_repairs_completed_total",
          "Repairs this leader closed: every affected chain back to full replication", c.repairs_completed);
  counter("catena_controller_route_epoch_bumps_total",
          "Partition routes this leader committed at a newer epoch (repairs, moves, drains, alters...)",
          c.route_epoch_bumps);
  return out;
}

class ControllerCollectable : public prometheus::Collectable {
 public:
  ControllerCollectable(ControllerMetrics::Leading leading, std::shared_ptr<const RpcStats> rpc)
      : leading_(std::move(leading)), rpc_(std::move(rpc)) {}
  std::vector<MetricFamily> Collect() const override {
    const auto c = leading_();
    return collect(c.get(), *rpc_);
  }

 private:
  ControllerMetrics::Leading leading_;
  std::shared_ptr<const RpcStats> rpc_;
};

}  // namespace

struct ControllerMetrics::Impl {
  std::unique_ptr<MetricsEndpoint> endpoint;
};

Result<std::unique_ptr<ControllerMetrics>> ControllerMetrics::start(const std::string& listen,
                                                                    Leading leading,
                                                                    std::shared_ptr<const RpcStats> rpc) {
  auto endpoint = MetricsEndpoint::start(
      listen, std::make_shared<ControllerCollectable>(std::move(leading), std::move(rpc)));
  if (!endpoint) return endpoint.error();
  auto impl = std::make_unique<Impl>();
  impl->endpoint = std::move(endpoint.value());
  return std::unique_ptr<ControllerMetrics>(new ControllerMetrics(std::move(impl)));
}

ControllerMetrics::ControllerMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControllerMetrics::~ControllerMetrics() = default;

std::uint16_t ControllerMetrics::port() const {
  return impl_->endpoint->port();
}

std::string controller_metrics_text(const Controller* leading, const RpcStats& rpc) {
  return prometheus::TextSerializer().Serialize(collect(leading, rpc));
}

}  // namespace catena::control
