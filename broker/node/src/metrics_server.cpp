#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <utility>
#include <vector>

#include <catena/broker/metrics_server.hpp>
#include <catena/control/metrics_endpoint.hpp>

namespace catena::broker {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

const char* role_of(const PartitionStats& p) {
  if (p.position >= p.chain_length) return "joining";
  if (p.position == 0) return "head";
  if (p.position + 1 == p.chain_length) return "tail";
  return "middle";
}

// One family per metric; samples added per partition.
struct Families {
  std::vector<MetricFamily> all;

  std::size_t add(const char* name, const char* help, MetricType type) {
    all.push_back(MetricFamily{name, help, type, {}});
    return all.size() - 1;
  }
  void sample(std::size_t family, std::vector<ClientMetric::Label> labels, double value) {
    control::add_sample(all[family], std::move(labels), value);
  }
};

std::vector<MetricFamily> collect(const Broker& broker) {
  using chain::ReplicaCounters;
  const NodeStats st = broker.stats();
  Families f;
  const auto counter = MetricType::Counter;
  const auto gauge = MetricType::Gauge;
  const auto appended_records = f.add("catena_replica_appended_records_total",
                                      "Records this replica appended (head: from publishers; others: from "
                                      "the predecessor)",
                                      counter);
  const auto appended_bytes =
      f.add("catena_replica_appended_bytes_total", "Frame bytes this replica appended", counter);
  const auto acked_records =
      f.add("catena_replica_acked_records_total", "Head: records acknowledged ok to publishers", counter);
  const auto acked_bytes =
      f.add("catena_replica_acked_bytes_total", "Head: frame bytes acknowledged ok to publishers", counter);
  const auto log_full = f.add("catena_replica_log_full_events_total",
                              "Head: passes a publisher's frame waited because the log was full", counter);
  const auto rate_limited =
      f.add("catena_replica_rate_limited_events_total",
            "Head: passes a publisher's frame waited for the tenant's publish rate", counter);
  const auto gaps = f.add("catena_replica_sequence_gaps_total", "Head: frames refused sequence_gap", counter);
  const auto corrupt = f.add("catena_replica_corrupt_frames_total",
                             "Garbled frames refused from publishers or the predecessor", counter);
  const auto forwarded =
      f.add("catena_replica_forwarded_bytes_total", "Bytes written to the successor", counter);
  const auto pred_links = f.add("catena_replica_predecessor_links_total",
                                "Predecessor links attached (the first and every reconnect)", counter);
  const auto succ_lost = f.add("catena_replica_successor_links_lost_total",
                               "Successor links lost (the broker rebuilds them)", counter);
  const auto end_offset =
      f.add("catena_replica_end_offset", "The log's end offset (records appended, ever)", gauge);
  const auto commit_offset =
      f.add("catena_replica_commit_offset", "The log's commit offset (records committed, ever)", gauge);
  const auto uncommitted = f.add("catena_replica_uncommitted_records",
                                 "end_offset - commit_offset: records not yet committed", gauge);
  const auto backlog = f.add("catena_replica_successor_backlog_bytes",
                             "Bytes the successor does not hold yet (-1: no successor link)", gauge);
  const auto publishers = f.add("catena_replica_publishers", "Publisher sessions open at this head", gauge);
  const auto subscribers =
      f.add("catena_replica_subscribers", "Subscriber sessions open at this replica", gauge);
  for (const PartitionStats& p : st.partitions) {
    if (p.counters == nullptr) continue;
    const ReplicaCounters& c = *p.counters;
    const std::vector<ClientMetric::Label> l{
        {"channel", p.channel}, {"partition", std::to_string(p.partition)}, {"role", role_of(p)}};
    auto u = [](const std::atomic<std::uint64_t>& a) {
      return static_cast<double>(ReplicaCounters::read(a));
    };
    f.sample(appended_records, l, u(c.appended_records));
    f.sample(appended_bytes, l, u(c.appended_bytes));
    f.sample(acked_records, l, u(c.acked_records));
    f.sample(acked_bytes, l, u(c.acked_bytes));
    f.sample(log_full, l, u(c.log_full_events));
    f.sample(rate_limited, l, u(c.rate_limited_events));
    f.sample(gaps, l, u(c.sequence_gaps));
    f.sample(corrupt, l, static_cast<double>(p.replica.corrupt_frames));
    f.sample(forwarded, l, u(c.forwarded_bytes));
    f.sample(pred_links, l, u(c.predecessor_links));
    f.sample(succ_lost, l, u(c.successor_links_lost));
    const std::uint64_t end = ReplicaCounters::read(c.end_offset);
    const std::uint64_t commit = ReplicaCounters::read(c.commit_offset);
    f.sample(end_offset, l, static_cast<double>(end));
    f.sample(commit_offset, l, static_cast<double>(commit));
    f.sample(uncommitted, l, end > commit ? static_cast<double>(end - commit) : 0.0);
    f.sample(backlog, l, static_cast<double>(ReplicaCounters::read(c.successor_backlog_bytes)));
    f.sample(publishers, l, p.replica.publishers);
    f.sample(subscribers, l, p.replica.subscribers);
  }
  auto node = [&](const char* name, const char* help, MetricType type, double v) {
    f.sample(f.add(name, help, type), {}, v);
  };
  node("catena_node_partitions", "Partition replicas this node holds", gauge,
       static_cast<double>(st.partitions.size()));
  node("catena_node_segments", "Segments in use on this node", gauge, static_cast<double>(st.segments));
  node("catena_node_bytes", "Bytes of records held on this node", gauge, static_cast<double>(st.bytes));
  node("catena_node_connections", "Data-plane connections (clients and chain links)", gauge,
       static_cast<double>(st.connections));
  node("catena_node_link_rebuilds_total", "Successor links rebuilt in place since start", counter,
       static_cast<double>(st.link_rebuilds));
  node("catena_node_zeroed_bytes_total", "Replica memory zeroed since start", counter,
       static_cast<double>(st.zeroed_bytes));
  node("catena_node_registered_bytes", "Fabric memory registered (segments, rings, link buffers)", gauge,
       static_cast<double>(st.registered_bytes));
  node("catena_node_warm_bytes",
       "Memory given back that the provider keeps ready for the next segment (warm=<MiB>)", gauge,
       static_cast<double>(st.warm_bytes));
  node("catena_node_segment_memory_bytes", "Segment memory held by this node's replicas", gauge,
       static_cast<double>(st.segment_memory_bytes));
  node("catena_node_segment_memory_limit_bytes", "The node's segment memory budget (--segment-memory-mb)",
       gauge, static_cast<double>(st.segment_memory_limit_bytes));
  node("catena_node_segment_memory_refusals_total",
       "Segments refused since start because the segment memory budget was spent", counter,
       static_cast<double>(st.segment_memory_refusals));
  node("catena_node_data_plane_stalled_ms", "How long the data-plane thread has been silent (0: running)",
       gauge, static_cast<double>(broker.data_plane_stalled_ms()));
  return std::move(f.all);
}

class BrokerCollectable : public prometheus::Collectable {
 public:
  explicit BrokerCollectable(const Broker& broker) : broker_(broker) {}
  std::vector<MetricFamily> Collect() const override { return collect(broker_); }

 private:
  const Broker& broker_;
};

}  // namespace

struct MetricsServer::Impl {
  std::unique_ptr<control::MetricsEndpoint> endpoint;
};

fabric::Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const Broker& broker,
                                                                    const std::string& listen) {
  auto endpoint = control::MetricsEndpoint::start(listen, std::make_shared<BrokerCollectable>(broker));
  if (!endpoint) return fabric::make_error(fabric::Errc::io_error, endpoint.error().message);
  auto impl = std::make_unique<Impl>();
  impl->endpoint = std::move(endpoint.value());
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() = default;

std::uint16_t MetricsServer::port() const {
  return impl_->endpoint->port();
}

std::string metrics_text(const Broker& broker) {
  return prometheus::TextSerializer().Serialize(collect(broker));
}

}  // namespace catena::broker
