#include <algorithm>
#include <exception>
#include <fmt/format.h>
#include <vector>

#include <catena/control/inproc_broker_admin.hpp>

namespace catena::control {

void InProcBrokerAdmin::attach(const std::string& admin_addr, std::shared_ptr<idl::BrokerAdminIf> broker) {
  MutexLock lock(mu_);
  brokers_[admin_addr] = std::move(broker);
}

void InProcBrokerAdmin::detach(const std::string& admin_addr) {
  MutexLock lock(mu_);
  brokers_.erase(admin_addr);
}

void InProcBrokerAdmin::set_hook(Hook hook) {
  MutexLock lock(mu_);
  hook_ = std::move(hook);
}

std::size_t InProcBrokerAdmin::held() const {
  MutexLock lock(mu_);
  return held_.size();
}

std::size_t InProcBrokerAdmin::release_held(bool newest_first) {
  std::deque<Call> calls;
  {
    MutexLock lock(mu_);
    calls.swap(held_);
  }
  std::vector<Call> order(calls.begin(), calls.end());
  if (newest_first) std::reverse(order.begin(), order.end());
  for (const auto& call : order) {
    Reply ignored;
    (void)deliver(call, &ignored);
  }
  return order.size();
}

Result<void> InProcBrokerAdmin::send(const Call& call, Reply* out) {
  Hook hook;
  {
    MutexLock lock(mu_);
    hook = hook_;
  }
  switch (hook ? hook(call) : Fate::deliver) {
    case Fate::deliver:
      return deliver(call, out);
    case Fate::drop_request:
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("{}: request lost (timeout)", call.to.admin_addr));
    case Fate::drop_reply:
      (void)deliver(call, out);
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("{}: reply lost (timeout)", call.to.admin_addr));
    case Fate::hold: {
      MutexLock lock(mu_);
      held_.push_back(call);
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("{}: no answer (timeout), request still in flight", call.to.admin_addr));
    }
  }
  return make_error(idl::ErrorCode::INTERNAL, "bad fate");
}

Result<void> InProcBrokerAdmin::deliver(const Call& call, Reply* out) {
  std::shared_ptr<idl::BrokerAdminIf> broker;
  {
    MutexLock lock(mu_);
    if (auto it = brokers_.find(call.to.admin_addr); it != brokers_.end()) broker = it->second;
  }
  if (!broker) {
    return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("{}: connection refused", call.to.admin_addr));
  }
  try {
    switch (call.method) {
      case Method::configure_chain:
        broker->configureChain(call.assignment);
        break;
      case Method::fence:
        broker->fence(call.channel, call.partition, call.epoch);
        break;
      case Method::ping:
        broker->ping(out->stats);
        break;
      case Method::seal:
        broker->seal(out->seal, call.channel, call.partition, call.epoch);
        break;
      case Method::append_marker:
        broker->appendMarker(out->marker, call.channel, call.partition, call.epoch, call.marker.generation,
                             call.marker.from_partitions, call.marker.to_partitions);
        break;
    }
  } catch (const idl::CatenaError& e) {
    return ControlError::from_thrift(e);
  } catch (const std::exception& e) {
    return make_error(idl::ErrorCode::INTERNAL,
                      fmt::format("{}: broker failed: {}", call.to.admin_addr, e.what()));
  }
  return {};
}

Result<void> InProcBrokerAdmin::configure_chain(const BrokerTarget& to,
                                                const idl::ChainAssignment& assignment) {
  Call call;
  call.method = Method::configure_chain;
  call.to = to;
  call.assignment = assignment;
  Reply ignored;
  return send(call, &ignored);
}

Result<void> InProcBrokerAdmin::fence(const BrokerTarget& to, const std::string& channel,
                                      std::int32_t partition, std::int64_t epoch) {
  Call call;
  call.method = Method::fence;
  call.to = to;
  call.channel = channel;
  call.partition = partition;
  call.epoch = epoch;
  Reply ignored;
  return send(call, &ignored);
}

bool InProcBrokerAdmin::refuses_connections(const BrokerTarget& to) {
  MutexLock lock(mu_);
  return brokers_.find(to.admin_addr) == brokers_.end();
}

Result<idl::NodeStats> InProcBrokerAdmin::ping(const BrokerTarget& to) {
  Call call;
  call.method = Method::ping;
  call.to = to;
  Reply out;
  if (auto r = send(call, &out); !r) return r.error();
  return out.stats;
}

Result<idl::SealReply> InProcBrokerAdmin::seal(const BrokerTarget& to, const std::string& channel,
                                               std::int32_t partition, std::int64_t epoch) {
  Call call;
  call.method = Method::seal;
  call.to = to;
  call.channel = channel;
  call.partition = partition;
  call.epoch = epoch;
  Reply out;
  if (auto r = send(call, &out); !r) return r.error();
  return out.seal;
}

Result<idl::MarkerReply> InProcBrokerAdmin::append_marker(const BrokerTarget& to, const std::string& channel,
                                                          std::int32_t partition, std::int64_t epoch,
                                                          const MarkerRequest& marker) {
  Call call;
  call.method = Method::append_marker;
  call.to = to;
  call.channel = channel;
  call.partition = partition;
  call.epoch = epoch;
  call.marker = marker;
  Reply out;
  if (auto r = send(call, &out); !r) return r.error();
  return out.marker;
}

}  // namespace catena::control
