#include "broker_impl.hpp"

namespace catena::broker {

std::uint64_t default_segment_memory_bytes(std::string_view provider) {
  if (const std::uint64_t huge = fabric::soft_huge_arena_bytes(provider); huge > 0) return huge / 4 * 3;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{16} << 30;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2;
}

Broker::Broker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Broker::~Broker() {
  impl_->stop();
}

fabric::Result<std::unique_ptr<Broker>> Broker::start(const BrokerConfig& cfg, const catena::Clock& clock) {
  return start(cfg, nullptr, clock);
}

fabric::Result<std::unique_ptr<Broker>> Broker::start(const BrokerConfig& cfg,
                                                      std::unique_ptr<fabric::Provider> provider,
                                                      const catena::Clock& clock) {
  auto impl = std::make_unique<Impl>(cfg, clock);
  auto r = impl->open(std::move(provider));
  if (!r) return r.error();
  return std::unique_ptr<Broker>(new Broker(std::move(impl)));
}

std::string Broker::fabric_address() const {
  return impl_->listener_->address();
}
const BrokerConfig& Broker::config() const {
  return impl_->cfg_;
}  // node_id: use node_id()

ConfigureResult Broker::configure(const chain::ReplicaConfig& cfg) {
  return impl_->run_on_agent([this, cfg] { return impl_->configure_st(cfg); });
}

ConfigureResult Broker::configure(const chain::ReplicaConfig& cfg,
                                  const std::vector<chain::ProducerSnapshot>& producers) {
  return impl_->run_on_agent([this, cfg, producers] { return impl_->configure_st(cfg, producers); });
}

SealResult Broker::seal(const std::string& channel, std::uint32_t partition, std::uint64_t epoch) {
  // Shared: after a timeout the agent may still run the call.
  auto out = std::make_shared<SealResult>();
  ConfigureResult r = impl_->run_on_agent([this, out, channel, partition, epoch] {
    *out = impl_->seal_st(channel, partition, epoch);
    return ConfigureResult{out->status, out->current_epoch, out->message};
  });
  if (r.status == ConfigureStatus::failed) return {r.status, r.current_epoch, r.message, {}};
  return *out;  // the call completed: its write happened before the future was ready
}

MarkerResult Broker::append_marker(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                                   const chain::MarkerSpec& marker) {
  auto out = std::make_shared<MarkerResult>();  // as seal(): the agent may run the call after a timeout
  ConfigureResult r = impl_->run_on_agent([this, out, channel, partition, epoch, marker] {
    *out = impl_->append_marker_st(channel, partition, epoch, marker);
    return ConfigureResult{out->status, out->current_epoch, out->message};
  });
  if (r.status == ConfigureStatus::failed) return {r.status, r.current_epoch, r.message, {}};
  return *out;
}

ConfigureResult Broker::retire(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                               std::uint64_t range_end, NextChain next) {
  return impl_->run_on_agent([this, channel, partition, epoch, range_end, next = std::move(next)]() mutable {
    return impl_->retire_st(channel, partition, epoch, range_end, std::move(next));
  });
}

void Broker::set_access_secret(const std::string& channel, std::uint32_t partition,
                               const chain::wire::AccessSecret& secret) {
  impl_->run_on_agent([this, channel, partition, secret] {
    impl_->set_access_secret_st(channel, partition, secret);
    return ConfigureResult{ConfigureStatus::applied, 0, ""};
  });
}

void Broker::set_tenant_limits(const std::string& tenant, std::uint64_t publisher_ring_bytes,
                               std::uint64_t publish_bytes_per_sec, std::uint32_t sessions) {
  impl_->run_on_agent([this, tenant, publisher_ring_bytes, publish_bytes_per_sec, sessions] {
    impl_->set_tenant_limits_st(tenant, publisher_ring_bytes, publish_bytes_per_sec, sessions);
    return ConfigureResult{ConfigureStatus::applied, 0, ""};
  });
}

void Broker::drop_retired(const std::string& channel, std::uint32_t partition,
                          std::vector<std::uint64_t> keep) {
  impl_->run_on_agent([this, channel, partition, keep] {
    impl_->drop_retired_st(channel, partition, keep);
    return ConfigureResult{ConfigureStatus::applied, 0, ""};
  });
}

ConfigureResult Broker::fence(const std::string& channel, std::uint32_t partition, std::uint64_t epoch) {
  return impl_->run_on_agent(
      [this, channel, partition, epoch] { return impl_->fence_st(channel, partition, epoch); });
}

void Broker::set_node_id(const std::string& node_id) {
  impl_->run_on_agent([this, node_id] {
    MutexLock lk(impl_->stats_mu_);
    impl_->cfg_.node_id = node_id;
    return ConfigureResult{ConfigureStatus::applied, 0, ""};
  });
}

std::string Broker::node_id() const {
  MutexLock lk(impl_->stats_mu_);
  return impl_->cfg_.node_id;
}

void Broker::set_node_epoch(std::uint64_t node_epoch) {
  impl_->node_epoch_.store(node_epoch);
}
std::uint64_t Broker::node_epoch() const {
  return impl_->node_epoch_.load();
}

std::uint64_t Broker::data_plane_stalled_ms() const {
  const std::uint64_t now = impl_->clock_.now_ns();
  const std::uint64_t last = impl_->last_pass_ns_.load(std::memory_order_relaxed);
  const std::uint64_t age_ms = now > last ? (now - last) / 1'000'000 : 0;
  return age_ms >= impl_->cfg_.data_plane_stall_ms ? age_ms : 0;
}

void Broker::suspend_all() {
  impl_->run_on_agent([this] {
    for (auto& [key, rep] : impl_->replicas_) rep->suspend_st();
    return ConfigureResult{ConfigureStatus::applied, 0, ""};
  });
}

void Broker::set_lease_deadline(std::uint64_t deadline_ns) {
  impl_->lease_deadline_ns_.store(deadline_ns, std::memory_order_release);
}

const catena::Clock& Broker::clock() const {
  return impl_->clock_;
}

NodeStats Broker::stats() const {
  return impl_->stats();
}
std::vector<LinkReport> Broker::take_link_reports() {
  return impl_->take_link_reports();
}
void Broker::stop() {
  impl_->stop();
}

}  // namespace catena::broker
