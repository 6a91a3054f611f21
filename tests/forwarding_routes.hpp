// A RouteSource that passes every call on to another. Tests derive from it
// and override only the calls they fault (lookups that fail or hang).
#pragma once

#include <cstdint>
#include <string>

#include <catena/broker/routes.hpp>

namespace catena::test {

class ForwardingRoutes : public RouteSource {
 public:
  explicit ForwardingRoutes(RouteSource& inner) : inner_(inner) {}

  client::Result<ChannelLayout> layout(const std::string& channel) override { return inner_.layout(channel); }
  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override {
    return inner_.route(channel, partition, known_epoch);
  }
  client::Result<ProducerIdentity> init_producer(std::uint64_t producer_id) override {
    return inner_.init_producer(producer_id);
  }
  void report_unreachable(const std::string& node_id, const Route& route,
                          const std::string& reason) override {
    inner_.report_unreachable(node_id, route, reason);
  }
  client::Result<void> commit_offset(const std::string& group, const std::string& channel,
                                     std::uint32_t partition, std::uint64_t offset) override {
    return inner_.commit_offset(group, channel, partition, offset);
  }
  client::Result<std::uint64_t> committed_offset(const std::string& group, const std::string& channel,
                                                 std::uint32_t partition) override {
    return inner_.committed_offset(group, channel, partition);
  }

 private:
  RouteSource& inner_;
};

}  // namespace catena::test
